"""HiFT's excitation as upstream builds it, with its random numbers given: what a vocoder graph can capture.

Upstream's ``SineGen2`` turns the predicted F0 into a sine per harmonic, each from an initial phase, adds noise, and
``SourceModuleHnNSF`` merges the harmonics with a linear layer and a tanh. CosyVoice2's HiFT draws the phases and
the noise on every call (``vocoder_graphs.draw`` makes them before a replay); CosyVoice3's causal HiFT fixes them at
construction (``causal_vocoder.CausalRecipe`` keeps device copies). Both graphs call ``harmonic_source``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

Shape = tuple[int, int]  # a vocoder call as both recipes key their graphs: (mel frames, cached source samples)


def harmonic_source(
    hift: Any, f0: torch.Tensor, phases: torch.Tensor, noise: torch.Tensor, mode: str = "linear"
) -> torch.Tensor:
    """The source (1, 1, samples) for ``f0`` (1, samples, 1, upsampled to the audio rate): ``phases`` (1,
    harmonics) in cycles, the fundamental's 0; ``noise`` (1, at least samples, harmonics); ``mode``: how the summed
    phase is brought back to the audio rate (upstream's "linear", "nearest" where causal)."""
    gen = hift.m_source.l_sin_gen
    numbers = torch.arange(1, int(gen.harmonic_num) + 2, dtype=f0.dtype, device=f0.device).reshape(1, 1, -1)
    cycles = (f0 * numbers / gen.sampling_rate) % 1
    cycles[:, 0, :] = cycles[:, 0, :] + phases
    cycles = F.interpolate(cycles.transpose(1, 2), scale_factor=1 / gen.upsample_scale, mode="linear").transpose(1, 2)
    angle = torch.cumsum(cycles, dim=1) * 2 * math.pi
    angle = F.interpolate(angle.transpose(1, 2) * gen.upsample_scale, scale_factor=gen.upsample_scale, mode=mode)
    sines = torch.sin(angle.transpose(1, 2)) * gen.sine_amp
    voiced = (f0 > gen.voiced_threshold).type(torch.float32)
    noise_amp = voiced * gen.noise_std + (1 - voiced) * gen.sine_amp / 3
    excitation = sines * voiced + noise_amp * noise[:, : sines.shape[1]]
    return hift.m_source.l_tanh(hift.m_source.l_linear(excitation)).transpose(1, 2)
