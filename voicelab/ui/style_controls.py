"""The style controls shared by the Clone and Design tabs: preset, instruction box, Voice-Sculptor dropdowns.

Laid out once so both tabs offer exactly the same controls (clone + instruction in one request).
``style_result`` is left empty for the requested-vs-measured line a finished take reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from voicelab.instruct import controls
from voicelab.ui.handlers import CONTROL_NAMES
from voicelab.ui.i18n import t
from voicelab.ui.localized import preset_choices

CONTROL_CHOICES: dict[str, tuple[str, ...]] = {
    "age": controls.AGE_CHOICES,
    "gender": controls.GENDER_CHOICES,
    "pitch": controls.PITCH_CHOICES,
    "pitch_variation": controls.PITCH_VARIATION_CHOICES,
    "volume": controls.VOLUME_CHOICES,
    "speed": controls.SPEED_CHOICES,
    "emotion": controls.EMOTION_CHOICES,
}


@dataclass(frozen=True)
class StyleView:
    preset: gr.Dropdown
    instruction: gr.Textbox
    controls: tuple[gr.Dropdown, ...]  # in CONTROL_NAMES order, i.e. controls_to_style's argument order
    parsed: gr.Markdown
    sculptor: gr.Accordion
    style_result: gr.Markdown  # the slot for "requested vs measured" after a take

    @property
    def inputs(self) -> list[gr.components.Component]:
        return [self.instruction, *self.controls]


def style_layout(prefix: str, open_controls: bool = False) -> StyleView:
    """Preset, instruction and the seven dropdowns; element ids start with ``prefix`` (e.g. "clone-instruction")."""
    preset = gr.Dropdown(
        choices=preset_choices("en", native=False),
        value=None,
        label=t("preset"),
        info=t("preset_info"),
        elem_id=f"{prefix}-preset",
    )
    instruction = gr.Textbox(
        label=t("instruction"),
        lines=2,
        placeholder=t("instruction_placeholder"),
        elem_id=f"{prefix}-instruction",
    )
    with gr.Accordion(t("sculptor"), open=open_controls, elem_id=f"{prefix}-sculptor") as sculptor, gr.Row():
        dropdowns = tuple(
            gr.Dropdown(
                choices=list(CONTROL_CHOICES[name]),
                value=controls.UNSPECIFIED,
                label=t(f"control_{name}"),
                min_width=120,
                elem_id=f"{prefix}-{name}",
            )
            for name in CONTROL_NAMES
        )
    parsed = gr.Markdown(elem_id=f"{prefix}-parsed")
    style_result = gr.Markdown(elem_id=f"{prefix}-style-result")
    return StyleView(preset, instruction, dropdowns, parsed, sculptor, style_result)
