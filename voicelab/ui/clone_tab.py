"""Layout of the Clone tab: a voice prompt (upload or microphone), optional transcript, text, the result
with its similarity and pitch figures."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from voicelab.ui.speak_tab import language_choice, live_player, sampling_controls, subtitles_file
from voicelab.voice.prompt import PROMPT_RULE


@dataclass(frozen=True)
class CloneView:
    prompt: gr.Audio
    transcript: gr.Textbox
    text: gr.Textbox
    speed: gr.Slider
    noise_scale: gr.Slider
    noise_w: gr.Slider
    silence: gr.Slider
    seed: gr.Number
    generate: gr.Button
    live: gr.Audio
    audio: gr.Audio
    meta: gr.Markdown
    figures: gr.Markdown
    language: gr.Dropdown
    subtitles: gr.File

    @property
    def inputs(self) -> list[gr.components.Component]:
        controls = [self.speed, self.noise_scale, self.noise_w, self.silence, self.seed, self.language]
        return [self.prompt, self.transcript, self.text, *controls]


def clone_layout() -> CloneView:
    with gr.Row():
        prompt = gr.Audio(
            label=f"Voice prompt: {PROMPT_RULE}",
            sources=["upload", "microphone"],
            type="filepath",
            elem_id="clone-prompt",
        )
        transcript = gr.Textbox(
            label="Transcript of the prompt (optional: matching calibrates on it; neural cloning needs it)",
            lines=4,
            elem_id="clone-transcript",
        )
    with gr.Row():
        text = gr.Textbox(
            label="Text", lines=3, placeholder="Type what the cloned voice should say…", elem_id="clone-text", scale=4
        )
        language = language_choice("clone")
    speed, noise_scale, noise_w, silence, seed = sampling_controls("clone")
    generate = gr.Button("Clone and speak", variant="primary", elem_id="clone-generate")
    live = live_player("clone")
    audio = gr.Audio(
        label="Cloned speech", type="filepath", interactive=False, elem_id="clone-audio", buttons=["download"]
    )
    figures = gr.Markdown(elem_id="clone-figures")
    meta = gr.Markdown(elem_id="clone-meta", elem_classes="vl-meta")
    subtitles = subtitles_file("clone")
    controls = (speed, noise_scale, noise_w, silence, seed)
    return CloneView(prompt, transcript, text, *controls, generate, live, audio, meta, figures, language, subtitles)
