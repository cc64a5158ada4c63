"""Which upstream mode a request uses, and the texts that mode hands to upstream (torch-free).

zero-shot: prompt + transcript; cross-lingual: prompt only; instruct: prompt + a natural-language instruction
(upstream's ``inference_instruct2``). CosyVoice3's LLM wants a system prefix ending in ``<|endofprompt|>``
in the prompt text (or in the text itself when there is no prompt text); it is added here so users never type it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

END_OF_PROMPT = "<|endofprompt|>"
SYSTEM_PREFIX = "You are a helpful assistant."


class Mode(Enum):
    ZERO_SHOT = "zero-shot"
    CROSS_LINGUAL = "cross-lingual"
    INSTRUCT = "instruct"


@dataclass(frozen=True)
class ModePlan:
    """mode: the upstream mode. prompt_text: what goes into the LLM's prompt-text slot ("" for cross-lingual).
    text_prefix: put before every text segment (CosyVoice3 cross-lingual only).
    """

    mode: Mode
    prompt_text: str
    text_prefix: str = ""


def _with_end(text: str) -> str:
    return text if END_OF_PROMPT in text else text + END_OF_PROMPT


def plan_mode(version: int, transcript: str, instruction: str) -> ModePlan:
    """Instruction wins over transcript; no transcript and no instruction means cross-lingual."""
    instruction, transcript = instruction.strip(), transcript.strip()
    if instruction:
        body = f"{SYSTEM_PREFIX} {instruction}" if version >= 3 and SYSTEM_PREFIX not in instruction else instruction
        return ModePlan(Mode.INSTRUCT, _with_end(body))
    if transcript:
        if version >= 3 and END_OF_PROMPT not in transcript:
            transcript = SYSTEM_PREFIX + END_OF_PROMPT + transcript
        return ModePlan(Mode.ZERO_SHOT, transcript)
    return ModePlan(Mode.CROSS_LINGUAL, "", SYSTEM_PREFIX + END_OF_PROMPT if version >= 3 else "")


def segment_text(plan: ModePlan, segment: str) -> str:
    """The text upstream's LLM reads for one normalised segment."""
    if plan.text_prefix and END_OF_PROMPT not in segment:
        return plan.text_prefix + segment
    return segment
