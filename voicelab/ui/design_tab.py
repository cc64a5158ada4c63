"""Layout of the Design / Instruct tab: a style instruction, Voice-Sculptor dropdowns, presets, one to four takes."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from voicelab.instruct import controls
from voicelab.instruct.presets import PRESET_NAMES
from voicelab.studio import MAX_TAKES
from voicelab.ui.handlers import CONTROL_NAMES

BUILTIN_VOICE = ("Built-in voice", "")

CONTROL_CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "age": ("Age", controls.AGE_CHOICES),
    "gender": ("Gender", controls.GENDER_CHOICES),
    "pitch": ("Pitch", controls.PITCH_CHOICES),
    "pitch_variation": ("Pitch variation", controls.PITCH_VARIATION_CHOICES),
    "volume": ("Volume", controls.VOLUME_CHOICES),
    "speed": ("Speed", controls.SPEED_CHOICES),
    "emotion": ("Emotion", controls.EMOTION_CHOICES),
}


@dataclass(frozen=True)
class DesignView:
    preset: gr.Dropdown
    instruction: gr.Textbox
    controls: tuple[gr.Dropdown, ...]  # in CONTROL_NAMES order, i.e. controls_to_style's argument order
    text: gr.Textbox
    takes: gr.Slider
    generate: gr.Button
    parsed: gr.Markdown
    takes_audio: tuple[gr.Audio, ...]
    meta: gr.Markdown
    voice: gr.Dropdown

    @property
    def style_inputs(self) -> list[gr.components.Component]:
        return [self.instruction, *self.controls]

    @property
    def inputs(self) -> list[gr.components.Component]:
        return [self.text, self.takes, self.voice, *self.style_inputs]


def design_layout() -> DesignView:
    preset = gr.Dropdown(
        choices=list(PRESET_NAMES),
        value=None,
        label="Preset",
        info="fills the instruction and a sample text",
        elem_id="design-preset",
    )
    instruction = gr.Textbox(
        label="Style instruction",
        lines=2,
        placeholder="e.g. slowly, in a warm low voice, a little sad",
        elem_id="design-instruction",
    )
    with gr.Accordion("Voice-Sculptor controls (override the instruction)", open=False), gr.Row():
        dropdowns = tuple(
            gr.Dropdown(
                choices=list(CONTROL_CHOICES[name][1]),
                value=controls.UNSPECIFIED,
                label=CONTROL_CHOICES[name][0],
                min_width=120,
                elem_id=f"design-{name}",
            )
            for name in CONTROL_NAMES
        )
    parsed = gr.Markdown(elem_id="design-parsed")
    text = gr.Textbox(label="Text", lines=3, placeholder="Type what the voice should say…", elem_id="design-text")
    with gr.Row():
        voice = gr.Dropdown(
            choices=[BUILTIN_VOICE],
            value="",
            label="Voice",
            info="the built-in voices, or one of My voices",
            elem_id="design-voice",
        )
        takes = gr.Slider(1, MAX_TAKES, value=2, step=1, label="Takes", info="different seeds, side by side")
        generate = gr.Button("Generate", variant="primary", elem_id="design-generate", scale=2)
    with gr.Row():
        takes_audio = tuple(
            gr.Audio(
                label=f"Take {i + 1}",
                type="filepath",
                interactive=False,
                visible=i < 2,
                elem_id=f"design-take-{i + 1}",
                buttons=["download"],
            )
            for i in range(MAX_TAKES)
        )
    meta = gr.Markdown(elem_id="design-meta", elem_classes="vl-meta")
    return DesignView(preset, instruction, dropdowns, text, takes, generate, parsed, takes_audio, meta, voice)
