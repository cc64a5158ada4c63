"""Layout of the Speak tab: text, advanced sampling controls, Generate, the audio and one line of figures."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import gradio as gr

from voicelab.ui.i18n import t
from voicelab.ui.localized import CHOICES_ZH, examples_for, ui_language


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
    examples: gr.Dataset
    note: gr.Markdown

    @property
    def inputs(self) -> list[gr.components.Component]:
        return [self.text, self.speed, self.noise_scale, self.noise_w, self.silence, self.seed, self.language]


LANGUAGE_NAMES = {"en": "English", "zh": "中文 Chinese", "ja": "日本語 Japanese", "ko": "한국어 Korean"}
LANGUAGES = [("Auto (by script)", "auto"), ("English", "en"), ("中文 Chinese", "zh")]


def language_choices(languages: tuple[str, ...], ui: str = "en") -> list[tuple[str, str]]:
    """Auto plus the languages the loaded backend speaks (``ui``: the page's language, for Auto's label)."""
    auto = CHOICES_ZH["Auto (by script)"] if ui_language(ui) == "zh" else "Auto (by script)"
    return [(auto, "auto"), *((LANGUAGE_NAMES.get(code, code), code) for code in languages)]


def subtitles_file(prefix: str) -> gr.File:
    """Sentence-level SubRip subtitles of the finished take, to download beside the audio."""
    return gr.File(label=t("subtitles"), interactive=False, elem_id=f"{prefix}-srt", height=60)


def language_choice(prefix: str) -> gr.Dropdown:
    """Auto sends Chinese characters to the Mandarin voice and Latin letters to the English voice."""
    return gr.Dropdown(
        choices=LANGUAGES, value="auto", label=t("text_language"), elem_id=f"{prefix}-language", min_width=160
    )


def can_stream() -> bool:
    """Gradio encodes streamed audio with ffmpeg; without it the tabs show the finished audio only."""
    return shutil.which("ffmpeg") is not None


def live_player(prefix: str) -> gr.Audio:
    """Plays each part as the engine finishes it (first sentence first), before the whole text is made."""
    return gr.Audio(
        label=t("live"),
        streaming=True,
        autoplay=True,
        interactive=False,
        visible=can_stream(),
        elem_id=f"{prefix}-live",
    )


def sampling_controls(prefix: str) -> tuple[gr.Slider, gr.Slider, gr.Slider, gr.Slider, gr.Number]:
    """The VITS controls, shared by the Speak and Clone tabs (``prefix`` keeps element ids unique).

    Noise scale and noise w are hidden on load where the backend has no such option (``ui.adapt``).
    """
    with gr.Accordion(t("advanced"), open=False):
        with gr.Row():
            speed = gr.Slider(0.5, 2.0, value=1.0, step=0.05, label=t("speed"), info=t("speed_info"))
            silence = gr.Slider(0.0, 2.0, value=0.2, step=0.05, label=t("silence"))
        with gr.Row():
            noise_scale = gr.Slider(
                0.0, 1.5, value=0.667, step=0.01, label=t("noise_scale"), info=t("noise_scale_info"),
                elem_id=f"{prefix}-noise-scale",
            )  # fmt: skip
            noise_w = gr.Slider(
                0.0, 1.5, value=0.8, step=0.01, label=t("noise_w"), info=t("noise_w_info"), elem_id=f"{prefix}-noise-w"
            )
        seed = gr.Number(value=-1, precision=0, label=t("seed"), info=t("seed_info"), elem_id=f"{prefix}-seed")
    return speed, noise_scale, noise_w, silence, seed


def speak_layout() -> SpeakView:
    with gr.Row():
        text = gr.Textbox(
            label=t("text"),
            lines=4,
            max_lines=12,
            placeholder=t("text_placeholder"),
            elem_id="speak-text",
            scale=4,
        )
        language = language_choice("speak")
    speed, noise_scale, noise_w, silence, seed = sampling_controls("speak")
    generate = gr.Button(t("generate"), variant="primary", elem_id="speak-generate")
    live = live_player("speak")
    audio = gr.Audio(label=t("speech"), type="filepath", interactive=False, elem_id="speak-audio", buttons=["download"])
    meta = gr.Markdown(elem_id="speak-meta", elem_classes="vl-meta")
    subtitles = subtitles_file("speak")
    examples = gr.Dataset(
        components=[text], samples=examples_for("en"), label=t("examples"), type="values", elem_id="speak-examples"
    )
    note = gr.Markdown(t("voices_note"), elem_classes="vl-meta", elem_id="speak-voices-note")
    controls = (speed, noise_scale, noise_w, silence, seed)
    return SpeakView(text, *controls, generate, live, audio, meta, language, subtitles, examples, note)
