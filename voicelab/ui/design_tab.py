"""Layout of the Design / Instruct tab: a style instruction, Voice-Sculptor dropdowns, presets, one to four takes."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from voicelab.studio import MAX_TAKES
from voicelab.ui.i18n import t
from voicelab.ui.style_controls import StyleView, style_layout

BUILTIN_VOICE = ("Built-in voice", "")


@dataclass(frozen=True)
class DesignView:
    style: StyleView
    text: gr.Textbox
    takes: gr.Slider
    generate: gr.Button
    takes_audio: tuple[gr.Audio, ...]
    meta: gr.Markdown
    voice: gr.Dropdown

    @property
    def inputs(self) -> list[gr.components.Component]:
        return [self.text, self.takes, self.voice, *self.style.inputs]


def design_layout() -> DesignView:
    style = style_layout("design")
    text = gr.Textbox(label=t("text"), lines=3, placeholder=t("text_placeholder"), elem_id="design-text")
    with gr.Row():
        voice = gr.Dropdown(
            choices=[BUILTIN_VOICE], value="", label=t("voice"), info=t("voice_info"), elem_id="design-voice"
        )
        takes = gr.Slider(1, MAX_TAKES, value=2, step=1, label=t("takes"), info=t("takes_info"))
        generate = gr.Button(t("generate"), variant="primary", elem_id="design-generate", scale=2)
    with gr.Row():
        takes_audio = tuple(
            gr.Audio(
                label=t(f"take_{i + 1}"),
                type="filepath",
                interactive=False,
                visible=i < 2,
                elem_id=f"design-take-{i + 1}",
                buttons=["download"],
            )
            for i in range(MAX_TAKES)
        )
    meta = gr.Markdown(elem_id="design-meta", elem_classes="vl-meta")
    return DesignView(style, text, takes, generate, takes_audio, meta, voice)
