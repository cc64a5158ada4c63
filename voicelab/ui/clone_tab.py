"""Layout of the Clone tab: a voice prompt (upload or microphone), optional transcript, text, the same style
controls as Design (instruction, presets, Voice-Sculptor dropdowns: clone + instruction in one request), the
result with its similarity and pitch figures."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from voicelab.ui.i18n import t
from voicelab.ui.speak_tab import language_choice, live_player, sampling_controls, subtitles_file
from voicelab.ui.style_controls import StyleView, style_layout


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
    style: StyleView

    @property
    def inputs(self) -> list[gr.components.Component]:
        controls = [self.speed, self.noise_scale, self.noise_w, self.silence, self.seed, self.language]
        return [self.prompt, self.transcript, self.text, *controls, *self.style.inputs]


def clone_layout() -> CloneView:
    with gr.Row():
        prompt = gr.Audio(label=t("prompt"), sources=["upload", "microphone"], type="filepath", elem_id="clone-prompt")
        transcript = gr.Textbox(label=t("transcript"), lines=4, elem_id="clone-transcript")
    with gr.Row():
        text = gr.Textbox(
            label=t("text"), lines=3, placeholder=t("clone_text_placeholder"), elem_id="clone-text", scale=4
        )
        language = language_choice("clone")
    with gr.Accordion(t("clone_style"), open=True, elem_id="clone-style"):
        style = style_layout("clone")
    speed, noise_scale, noise_w, silence, seed = sampling_controls("clone")
    generate = gr.Button(t("clone_generate"), variant="primary", elem_id="clone-generate")
    live = live_player("clone")
    audio = gr.Audio(
        label=t("cloned_speech"), type="filepath", interactive=False, elem_id="clone-audio", buttons=["download"]
    )
    figures = gr.Markdown(elem_id="clone-figures")
    meta = gr.Markdown(elem_id="clone-meta", elem_classes="vl-meta")
    subtitles = subtitles_file("clone")
    controls = (speed, noise_scale, noise_w, silence, seed)
    return CloneView(
        prompt, transcript, text, *controls, generate, live, audio, meta, figures, language, subtitles, style
    )
