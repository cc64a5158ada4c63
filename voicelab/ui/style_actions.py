"""The style actions of the Clone and Design tabs: the dropdowns at the edge, the parsed-style text, presets."""

from __future__ import annotations

from typing import Any

import gradio as gr

from voicelab.engine.validation import as_text
from voicelab.errors import VoiceLabError
from voicelab.instruct.controls import UNSPECIFIED, controls_to_style, resolve_style
from voicelab.instruct.parser import ParsedInstruction
from voicelab.instruct.style import Style
from voicelab.studio import MAX_TAKES
from voicelab.ui.localized import find_preset

CONTROL_NAMES = ("age", "gender", "pitch", "pitch_variation", "volume", "speed", "emotion")  # controls_to_style order


def style_labels(chosen: tuple[object, ...]) -> list[str]:
    """The seven Voice-Sculptor dropdowns' raw values as labels, each coerced at the edge (Clone and Design)."""
    return [
        as_text(name.replace("_", " ").capitalize(), value, 64) or UNSPECIFIED
        for name, value in zip(CONTROL_NAMES, chosen, strict=True)
    ]


def describe_style(style: Style) -> str:
    """A style as a user reads it, e.g. "speed 0.75x · pitch +3.0 st · emotion happy"."""
    units = {
        "speed": lambda v: f"speed {v:g}x",
        "pitch_semitones": lambda v: f"pitch {v:+.1f} st",
        "pitch_range": lambda v: f"pitch range {v:g}x",
        "volume_db": lambda v: f"volume {v:+.0f} dB",
    }
    parts = [units[k](v) if k in units else f"{k} {v}" for k, v in style.to_dict().items()]
    return " · ".join(parts) if parts else "neutral (the voice as it is)"


def describe_parsed(parsed: ParsedInstruction) -> str:
    """What the instruction and dropdowns resolved to, and which words were not understood."""
    lines = [f"**Style:** {describe_style(parsed.style)}"]
    if parsed.matched:
        lines.append(f"**Understood:** {', '.join(parsed.matched)}")
    if parsed.not_rendered:
        lines.append(f"**Not rendered** (read, but nothing the voice can do): {', '.join(parsed.not_rendered)}")
    if parsed.not_understood:
        lines.append(f"**Not understood:** {', '.join(parsed.not_understood)}")
    return "\n\n".join(lines)


def preview_style(instruction: str, *choices: str | None) -> str:
    """Live preview under the instruction box (no generation); a bad input shows its sentence here."""
    try:
        return describe_parsed(resolve_style(instruction or "", controls_to_style(*choices)))
    except VoiceLabError as exc:
        return f"**{exc}**"


def show_takes(count: float) -> list[Any]:
    """As many players as takes asked for."""
    return [gr.update(visible=i < int(count)) for i in range(MAX_TAKES)]


def apply_preset(name: str | None) -> tuple[Any, ...]:
    """Picking a preset fills the instruction and sample text and resets the dropdowns."""
    if not name:
        return (gr.skip(), gr.skip(), *[gr.skip()] * len(CONTROL_NAMES))
    preset = find_preset(name)
    return (preset.instruction, preset.sample_text, *[UNSPECIFIED] * len(CONTROL_NAMES))
