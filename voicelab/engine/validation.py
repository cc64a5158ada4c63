"""The one validator for what a user asks: text, language, controls, options and prompt audio.

The generation service runs it once at its edge, for every front end (UI, CLI, benchmarks, HTTP); the engine
core runs the same function for callers that drive the engine directly, so there is one set of limits.
Torch-free. Every refusal is a ``VoiceLabError`` carrying the sentence a user sees.
"""

from __future__ import annotations

import math
import sys
import unicodedata
from collections.abc import Mapping
from dataclasses import replace

from voicelab.backends.base import Capabilities
from voicelab.backends.scripts import LANGUAGE_NAMES, check_readable
from voicelab.engine.messages import SynthesisRequest
from voicelab.errors import InvalidSettingError, InvalidTextError
from voicelab.voice.prompt import check_prompt_audio

SPEED_LIMITS = (0.25, 4.0)
SILENCE_LIMITS = (0.0, 5.0)
SEED_RANGE = (-(2**63), 2**64)  # what torch.Generator.manual_seed accepts
AUTO_LANGUAGE = "auto"


def clean_text(text: object, max_chars: int) -> str:
    """Drop control characters and surrounding space; refuse empty or over-long text with the user's sentence."""
    if not isinstance(text, str):
        raise InvalidTextError("Please type some text to speak.")
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text).strip()
    if not kept:
        raise InvalidTextError("Please type some text to speak.")
    if len(kept) > max_chars:
        raise InvalidTextError(
            f"The text is {len(kept):,} characters long; the limit is {max_chars:,}. Please shorten it or split it up."
        )
    return kept


def check_range(label: str, value: float, limits: tuple[float, float]) -> float:
    """``value`` as a float when finite and within ``limits``, else the sentence naming them."""
    low, high = limits
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidSettingError(f"{label} must be a number between {low:g} and {high:g}.")
    if not low <= value <= high:
        raise InvalidSettingError(f"{label} must be between {low:g} and {high:g}.")
    return float(value)


def check_seed(seed: int | None) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
        raise InvalidSettingError("The seed must be a whole number between -2^63 and 2^64 - 1.")
    return seed


def check_language(language: str, text: str, capabilities: Capabilities | None) -> str:
    """ "auto" or a language the backend speaks, and text whose letters that voice (or those voices) can read."""
    known = capabilities.languages if capabilities is not None else tuple(LANGUAGE_NAMES)
    if language != AUTO_LANGUAGE and language not in known:
        names = " and ".join(LANGUAGE_NAMES.get(code, code) for code in known)
        raise InvalidSettingError(f"The language {language!r} is not available; this voice speaks {names}.")
    if capabilities is not None:
        check_readable(text, known if language == AUTO_LANGUAGE else (language,))
    return language


def check_options(options: Mapping[str, float], capabilities: Capabilities | None) -> dict[str, float]:
    """Options by the backend's own ``OptionSpec`` limits; unknown names are refused, not ignored."""
    checked: dict[str, float] = {}
    for name, value in options.items():
        spec = capabilities.option(name) if capabilities is not None else None
        if spec is None:
            raise InvalidSettingError(f"The setting {name!r} does not apply to the loaded voice.")
        checked[name] = check_range(spec.label, value, (spec.low, spec.high))
    return checked


def validate_request(request: SynthesisRequest, capabilities: Capabilities | None, max_chars: int) -> SynthesisRequest:
    """The request with its text cleaned, or the first problem as a ``VoiceLabError``.

    ``capabilities`` is the loaded backend's (``None`` while the worker is still starting: options are then
    checked by the engine core when the job runs).
    """
    options = dict(request.options)
    if capabilities is not None:
        options = check_options(request.options, capabilities)
    if request.prompt is not None:
        check_prompt_audio(request.prompt)
        as_text("The transcript of the prompt", request.prompt.transcript, MAX_TRANSCRIPT_CHARS)
    as_text("The style instruction", request.instruction, MAX_FIELD_CHARS)
    text = clean_text(request.text, max_chars)
    return replace(
        request,
        text=text,
        language=check_language(request.language, text, capabilities),
        speed=check_range("Speed", request.speed, SPEED_LIMITS),
        sentence_silence_s=check_range("Silence between sentences", request.sentence_silence_s, SILENCE_LIMITS),
        seed=check_seed(request.seed),
        options=options,
    )


# ---- raw front-end values (Gradio's JSON, the HTTP API's fields) → typed values, or one sentence ----

TRUE_WORDS, FALSE_WORDS = ("true",), ("false",)  # the only strings a boolean field accepts (documented)
MAX_FIELD_CHARS = 2_000  # a style instruction, a name: bounded before anything parses it
MAX_TRANSCRIPT_CHARS = 1_000  # what someone can say in a 30 s prompt, with room to spare
NO_LIMIT = sys.maxsize  # the text to speak: ``clean_text`` applies the configured limit after cleaning


def _number_from(value: object) -> float | None:
    """A finite number from a number or a numeric string; ``None`` for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def as_number(label: str, value: object, limits: tuple[float, float]) -> float:
    """A number field: numbers and numeric strings within ``limits``; NaN, inf, null, lists and words refused."""
    number = _number_from(value)
    if number is None:
        raise InvalidSettingError(f"{label} must be a number between {limits[0]:g} and {limits[1]:g}.")
    return check_range(label, number, limits)


def as_whole(label: str, value: object, limits: tuple[int, int]) -> int:
    """A whole-number field (e.g. takes): 3, 3.0 and "3" are 3; 2.5, NaN and null are refused."""
    number = _number_from(value)
    if number is None or not number.is_integer() or not limits[0] <= number <= limits[1]:
        raise InvalidSettingError(f"{label} must be a whole number from {limits[0]} to {limits[1]}.")
    return int(number)


def as_seed(value: object) -> int | None:
    """The seed box: blank, null or negative means a fresh random seed; otherwise a whole number in range."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number = _number_from(value)
    if number is None or not number.is_integer():
        raise InvalidSettingError("The seed must be a whole number (or -1 for a random seed).")
    if number < 0:
        return None
    return check_seed(int(value) if isinstance(value, int) else int(number))


def as_bool(label: str, value: object) -> bool:
    """A yes/no field: only true/false (or the strings "true"/"false"); "yes", 1 and null are refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise InvalidSettingError(f"{label} must be true or false.")


def as_text(label: str, value: object, max_chars: int = MAX_FIELD_CHARS) -> str:
    """A free-text field: a string (null is empty), at most ``max_chars``; lists, dicts and numbers refused."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidSettingError(f"{label} must be plain text, not a list, a number or an object.")
    if len(value) > max_chars:
        raise InvalidSettingError(f"{label} is {len(value):,} characters long; the limit is {max_chars:,}.")
    return value


def as_choice(label: str, value: object, choices: tuple[str, ...], default: str) -> str:
    """A dropdown: one of ``choices`` (null or blank is ``default``)."""
    if value is None or value == "":
        return default
    if not isinstance(value, str) or value not in choices:
        raise InvalidSettingError(f"{label} must be one of: {', '.join(choices)}.")
    return value
