"""Layout of the Speak tab: text, advanced sampling controls, Generate, the audio and one line of figures."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import gradio as gr

EXAMPLES = [
    "The quick brown fox jumps over the lazy dog.",
    "今天天气很好，我们去公园散步吧。",
    "我今天用 VoiceLab 做了一个 demo，效果很好。",
    "VoiceLab keeps running: the hundredth generation is as fast as the first.",
    "Please mind the gap between the train and the platform. Thank you for travelling with us.",
    "Is it raining outside? I left my umbrella at home!",
]


@dataclass(frozen=True)
class SpeakView:
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
    language: gr.Dropdown
    subtitles: gr.File

    @property
    def inputs(self) -> list[gr.components.Component]:
        return [self.text, self.speed, self.noise_scale, self.noise_w, self.silence, self.seed, self.language]


LANGUAGES = [("Auto (by script)", "auto"), ("English", "en"), ("中文 Chinese", "zh")]
VOICES_NOTE = (
    "Built-in voices: English (Piper en_US-joe-medium, MIT) and Chinese (Baker FastSpeech2; "
    "non-commercial use only). Mixed text is spoken run by run, each in its own voice."
)


def subtitles_file(prefix: str) -> gr.File:
    """Sentence-level SubRip subtitles of the finished take, to download beside the audio."""
    return gr.File(label="Subtitles (SRT)", interactive=False, elem_id=f"{prefix}-srt", height=60)


def language_choice(prefix: str) -> gr.Dropdown:
    """Auto sends Chinese characters to the Mandarin voice and Latin letters to the English voice."""
    return gr.Dropdown(choices=LANGUAGES, value="auto", label="Language", elem_id=f"{prefix}-language", min_width=160)


def can_stream() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the tabs show the finished audio only."""
    return shutil.which("ffmpeg") is not None


def live_player(prefix: str) -> gr.Audio:
    """Plays each part as the engine finishes it (first sentence first), before the whole text is made."""
    return gr.Audio(
        label="Live (plays as it is made)",
        streaming=True,
        autoplay=True,
        interactive=False,
        visible=can_stream(),
        elem_id=f"{prefix}-live",
    )


def sampling_controls(prefix: str) -> tuple[gr.Slider, gr.Slider, gr.Slider, gr.Slider, gr.Number]:
    """The VITS controls, shared by the Speak and Clone tabs (``prefix`` keeps element ids unique)."""
    with gr.Accordion("Advanced", open=False):
        with gr.Row():
            speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label="Speed", info="length scale = 1 / speed")
            silence = gr.Slider(0.0, 2.0, value=0.2, step=0.05, label="Silence between sentences (s)")
        with gr.Row():
            noise_scale = gr.Slider(0.0, 1.5, value=0.667, step=0.01, label="Noise scale", info="voice variation")
            noise_w = gr.Slider(0.0, 1.5, value=0.8, step=0.01, label="Noise w", info="rhythm variation")
        seed = gr.Number(
            value=-1, precision=0, label="Seed", info="-1: a new random seed each time", elem_id=f"{prefix}-seed"
        )
    return speed, noise_scale, noise_w, silence, seed


def speak_layout() -> SpeakView:
    with gr.Row():
        text = gr.Textbox(
            label="Text",
            lines=4,
            max_lines=12,
            placeholder="Type what the voice should say… / 输入要说的话…",
            elem_id="speak-text",
            scale=4,
        )
        language = language_choice("speak")
    speed, noise_scale, noise_w, silence, seed = sampling_controls("speak")
    generate = gr.Button("Generate", variant="primary", elem_id="speak-generate")
    live = live_player("speak")
    audio = gr.Audio(label="Speech", type="filepath", interactive=False, elem_id="speak-audio", buttons=["download"])
    meta = gr.Markdown(elem_id="speak-meta", elem_classes="vl-meta")
    subtitles = subtitles_file("speak")
    gr.Examples(examples=[[e] for e in EXAMPLES], inputs=[text], label="Examples", cache_examples=False)
    gr.Markdown(VOICES_NOTE, elem_classes="vl-meta")
    return SpeakView(text, speed, noise_scale, noise_w, silence, seed, generate, live, audio, meta, language, subtitles)
