"""CosyVoice3's causal HiFT as a CUDA graph can hold it: its streamed first chunk, whose shapes recur.

A streamed CosyVoice3 request's first chunk reaches the vocoder as ``(hop + pad) * ratio`` mel frames, one length
per prompt pad, like CosyVoice2's (``vocoder_graphs.streamed_shapes``); every later chunk carries the whole mel so
far (upstream re-vocodes it and keeps the new samples), so its length is the reply's own and it runs eagerly.
Eager, the first chunk was the largest part of CosyVoice3's first audio: on an H100 (2026-12-05,
``tools.cosyvoice_first_audio --model-dir cv3full``) 166-219 ms of a 308-362 ms first audio, while the request's LLM
kept decoding beside it, against CosyVoice2's graphed chunk at 7 ms. The causal vocoder is hundreds of small kernels,
an F0 predictor in float64 and host-to-device copies on every call.

Upstream's causal vocoder draws nothing at inference: its harmonics' initial phases (``SineGen2.rand_ini``) and its
excitation noise (``SineGen2.sine_waves``, 300 s of it) are fixed at construction and live on the host, and each
call copies the slice it needs to the device. ``causal_vocode`` is upstream's ``CausalHiFTGenerator.inference(...,
finalize=False)`` with those read from device copies made once (``CausalRecipe``). Its 80 causal convolutions
(``CausalConv1d``) each make their zero padding on the host and copy it over, a copy a graph cannot hold and, eager,
a wait for everything queued before it on the stream (the request's own decode steps among them);
``zero_padding_on_device`` makes those zeros on the device instead (the same zeros), for the graphs and the eager
calls alike. ``GraphedVocoder`` compares each capture with upstream's eager call and keeps it only where equal and
faster.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from voicelab.backends.cosyvoice.hift_source import Shape, harmonic_source

STAGE = "vocoder (causal HiFT), streamed first chunk"


def causal_vocode(
    hift: Any, feat: torch.Tensor, phases: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's ``CausalHiFTGenerator.inference(feat, finalize=False)``: the F0 (float64, as upstream runs its
    predictor) without the look-ahead frames, a sine per harmonic from the fixed initial ``phases`` with the fixed
    ``noise`` (``SineGen2`` causal), merged by the source module's linear layer, then ``decode`` unfinalised."""
    f0 = hift.f0_predictor(feat.to(torch.float64), finalize=False).to(feat)
    source = harmonic_source(hift, hift.f0_upsamp(f0[:, None]).transpose(1, 2), phases, noise, mode="nearest")
    look_ahead = int(hift.f0_predictor.condnet[0].causal_padding)
    return hift.decode(x=feat[:, :, :-look_ahead], s=source, finalize=False), source


def zero_padding_on_device(module: torch.nn.Module) -> int:
    """Every upstream ``CausalConv1d`` under ``module`` makes its zero padding where its input lives (on the
    instance; ``forward`` otherwise as upstream's); the number changed."""
    changed = 0
    for sub in module.modules():
        causal = any(kind.__name__ == "CausalConv1d" for kind in type(sub).__mro__)  # weight norm subclasses it
        if causal and isinstance(sub, torch.nn.Conv1d):
            sub.forward = types.MethodType(_padded_on_device, sub)  # type: ignore[method-assign]
            changed += 1
    return changed


def _padded_on_device(conv: Any, x: torch.Tensor, cache: torch.Tensor | None = None) -> torch.Tensor:
    """Upstream's ``CausalConv1d.forward``, its default cache made by ``new_zeros`` instead of ``torch.zeros(...)
    .to(x)``: no host tensor, no copy."""
    steps = x.shape[2]
    if cache is None or cache.size(2) == 0:
        cache = x.new_zeros(x.shape[0], x.shape[1], conv.causal_padding)
    assert cache.size(2) == conv.causal_padding
    padded = torch.concat([cache, x] if conv.causal_type == "left" else [x, cache], dim=2)
    out: torch.Tensor = torch.nn.Conv1d.forward(conv, padded)
    assert out.shape[2] == steps
    return out


class CausalRecipe:
    """What ``GraphedVocoder`` needs to stand in for a CosyVoice3 HiFT: which calls a graph serves (unfinalised, of
    a captured length), the graph's inputs (the mel alone; the fixed phases and noise are device copies made here,
    enough for ``most_frames``), and upstream's own call to fall back on and to compare with. Makes the HiFT's
    padding on the device (``zero_padding_on_device``), its eager calls included."""

    stage = STAGE

    def __init__(self, hift: Any, most_frames: int) -> None:
        gen = hift.m_source.l_sin_gen
        device = next(hift.parameters()).device
        samples = most_frames * int(hift.f0_upsamp.scale_factor)
        self.hift = hift
        zero_padding_on_device(hift)
        self.phases = gen.rand_ini.to(device)
        self.noise = gen.sine_waves[:, :samples].to(device)
        hift.f0_predictor.to(torch.float64)  # as upstream's first call leaves it, before any capture

    @staticmethod
    def options(*args: Any, **kwargs: Any) -> dict[str, Any]:
        """Upstream's ``inference`` arguments after the mel, by name."""
        if args:
            kwargs["finalize"] = args[0]
        return kwargs

    @staticmethod
    def shape(feat: torch.Tensor, options: dict[str, Any]) -> Shape | None:
        """An unfinalised call's mel length, with 0 cached source samples (the causal vocoder keeps no source)."""
        return None if options.get("finalize", True) else (int(feat.shape[2]), 0)

    def synthetic(self, shape: Shape, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        channels = int(self.hift.conv_pre.in_channels)
        feat = torch.randn(1, channels, shape[0], device=self.noise.device, generator=generator)
        return feat, {"finalize": False}

    def inputs(self, feat: torch.Tensor, options: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        return (feat,)

    def vocode(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (feat,) = inputs
        return causal_vocode(self.hift, feat, self.phases, self.noise)
