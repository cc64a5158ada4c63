"""A Piper voice's ``.onnx.json``: sample rate, phoneme map, espeak voice and default scales."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voicelab.errors import BackendLoadError


@dataclass(frozen=True)
class VoiceConfig:
    """What the frontend and the backend need from the voice config (None-free: Piper's defaults filled in)."""

    name: str
    sample_rate: int
    num_symbols: int
    num_speakers: int
    phoneme_type: str  # only "espeak" is supported
    espeak_voice: str
    phoneme_id_map: Mapping[str, tuple[int, ...]]
    language: str  # e.g. "en_US"
    noise_scale: float = 0.667
    length_scale: float = 1.0
    noise_w: float = 0.8
    hop_length: int = 256
    vowel_clusters: frozenset[tuple[str, ...]] = frozenset()
    speaker_id_map: Mapping[str, int] | None = None
    default_speaker_id: int = 0


def read_voice_config(path: str | Path, name: str = "") -> VoiceConfig:
    """Parse a Piper ``.onnx.json``; raises BackendLoadError with one sentence when it is unusable."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackendLoadError(f"The voice config {path} does not exist.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackendLoadError(f"The voice config {path} could not be read as JSON ({exc}).") from exc
    try:
        if not isinstance(raw, dict):
            raise TypeError(f"expected a JSON object, found {type(raw).__name__}")
        return _from_dict(raw, name or path.name.removesuffix(".onnx.json").removesuffix(".json"))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BackendLoadError(f"The voice config {path} is missing or has a bad field ({exc}).") from exc


def _from_dict(raw: dict[str, Any], name: str) -> VoiceConfig:
    inference = raw.get("inference", {})
    language = raw.get("language", {}).get("code") or raw["espeak"]["voice"]
    phoneme_type = str(raw.get("phoneme_type", "espeak"))
    if phoneme_type != "espeak":
        raise ValueError(f"phoneme_type {phoneme_type!r} is not supported, only 'espeak'")
    return VoiceConfig(
        name=name,
        sample_rate=int(raw["audio"]["sample_rate"]),
        num_symbols=int(raw["num_symbols"]),
        num_speakers=int(raw.get("num_speakers", 1)),
        phoneme_type=phoneme_type,
        espeak_voice=str(raw["espeak"]["voice"]),
        phoneme_id_map={str(k): tuple(int(i) for i in v) for k, v in raw["phoneme_id_map"].items()},
        language=str(language),
        noise_scale=float(inference.get("noise_scale", 0.667)),
        length_scale=float(inference.get("length_scale", 1.0)),
        noise_w=float(inference.get("noise_w", 0.8)),
        hop_length=int(raw.get("hop_length", 256)),
        vowel_clusters=frozenset(tuple(c) for c in raw.get("vowel_clusters") or ()),
        speaker_id_map={str(k): int(v) for k, v in raw.get("speaker_id_map", {}).items()} or None,
        default_speaker_id=int(raw.get("default_speaker_id", 0)),
    )
