"""Which token loop a loaded CosyVoice LLM runs: upstream's own (repaired mask), ``FastDecoder`` or
``DecodeBatcher``, chosen once at load time from the backend options ``fast_decode`` and ``decode_slots``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher, install_batched_decode
from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, FastDecoder, fix_step_mask, install_fast_decode
from voicelab.backends.cosyvoice.static_qwen import KERNELS
from voicelab.errors import BackendLoadError

MODES = ("auto", "on", "off")
SAMPLINGS = ("auto", "exact", "device")


@dataclass(frozen=True)
class DecodeChoice:
    """mode: "auto" (fast on CUDA, upstream's loop elsewhere), "on" or "off". slots: requests decoded together
    (1: one at a time, a second concurrent request runs upstream's loop; more: continuous batching). own_stream:
    the backend option ``decode_stream`` (off by default: the batcher steps on the default stream; see
    ``batch_decode``). kernels: the backend option ``decode_kernels``: "auto" (the default: on CUDA with Triton,
    each step shape replays whichever of the two is faster where they agree, ``step_choice``; PyTorch's kernels
    elsewhere), "torch" or "triton" (the step's layers as ``fused_step``'s Triton kernels; CUDA only). sampling: the
    backend option ``decode_sampling``: "exact" (upstream's tokens for a seed), "device" (the same distribution
    drawn on the device, ``device_sampling``; the fast path only) or "auto" (the option's default: "device" on the
    fast path; on an H100 it took the anchor's RTF from 0.073 to 0.067 and 16 clients from 3.93 to 4.39
    requests/s)."""

    mode: str = "auto"
    slots: int = 1
    own_stream: bool = False  # the batcher's steps on a CUDA stream of their own (``batch_decode.py``)
    kernels: str = "auto"
    sampling: str = "exact"

    @classmethod
    def parse(cls, mode: str, slots: str, kernels: str = "auto", sampling: str = "auto") -> DecodeChoice:
        """From the option strings; ``ValueError`` with one sentence for anything else."""
        if mode not in MODES:
            raise ValueError(f"fast_decode must be one of {', '.join(MODES)}, not {mode!r}")
        if not slots.isdigit() or not 1 <= int(slots) <= 64:
            raise ValueError(f"decode_slots must be a whole number from 1 to 64, not {slots!r}")
        if kernels not in KERNELS:
            raise ValueError(f"decode_kernels must be one of {', '.join(KERNELS)}, not {kernels!r}")
        if sampling not in SAMPLINGS:
            raise ValueError(f"decode_sampling must be one of {', '.join(SAMPLINGS)}, not {sampling!r}")
        return cls(mode, int(slots), kernels=kernels, sampling=sampling)


def prepare_llm(llm: Any, device: str, choice: DecodeChoice, mask_stops: bool) -> FastDecoder | DecodeBatcher | None:
    """At load time: repair upstream's eager step mask, then install the fast path if ``choice`` asks for it.
    Must run before ``upstream.install_guards`` wraps the sampler. ``None``: upstream's loop stays in charge."""
    fix_step_mask(llm.llm)
    if choice.mode == "off" or (choice.mode == "auto" and not device.startswith("cuda")):
        option = _fast_path_only(choice)
        if option is not None:
            raise BackendLoadError(f"{option} runs on the fast decode path: leave fast_decode on (CUDA).")
        return None
    kernels = resolve_kernels(choice.kernels, device)
    sampling = "device" if choice.sampling == "auto" else choice.sampling
    if choice.slots > 1:  # stepping only the rows in use: alone in 16 slots, 296 tokens/s, not 163 (1 slot: 270; H200)
        config = BatchConfig(
            choice.slots,
            mask_stops=mask_stops,
            shrink_rows=True,
            own_stream=choice.own_stream,
            kernels=kernels,
            sampling=sampling,
        )
        return install_batched_decode(llm, config)
    return install_fast_decode(llm, FastDecodeConfig(mask_stops=mask_stops, kernels=kernels, sampling=sampling))


def _fast_path_only(choice: DecodeChoice) -> str | None:
    """The first option asked for that only the fast path honours (None: none)."""
    if choice.kernels == "triton":
        return "decode_kernels=triton"
    return "decode_sampling=device" if choice.sampling == "device" else None


def resolve_kernels(kernels: str, device: str) -> str:
    """What the step runner gets for the fast path on ``device``: ``triton`` checked (``BackendLoadError``), and
    ``auto`` only where there is a choice to make (CUDA, where graphs are captured, with Triton installed)."""
    if kernels == "triton":
        _check_triton(device)
    elif kernels == "auto" and not (device.startswith("cuda") and _triton_importable()):
        return "torch"
    return kernels


def _check_triton(device: str) -> None:
    """``decode_kernels=triton`` needs a CUDA device (or Triton's interpreter, ``TRITON_INTERPRET=1``, as the CPU
    tests use) and Triton itself (it comes with PyTorch's CUDA builds)."""
    if not device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendLoadError(f"decode_kernels=triton runs on a CUDA device, not {device}: leave it at torch there.")
    if not _triton_importable():
        raise BackendLoadError(
            "decode_kernels=triton needs the triton package (it comes with PyTorch's CUDA builds): install it, or "
            "leave decode_kernels at auto or torch."
        )


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
