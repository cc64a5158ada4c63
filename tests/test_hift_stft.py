"""The HiFT vocoder's sync-free STFT and inverse STFT against torch's, framed as upstream's ``_stft``/``_istft`` call
them (n_fft 16, hop 4, a periodic Hann window; CosyVoice2's and 3's HiFT)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.signal import get_window

from voicelab.backends.cosyvoice.hift_stft import HiftStft, make_sync_free

N_FFT, HOP = 16, 4
WINDOW = torch.from_numpy(get_window("hann", N_FFT, fftbins=True).astype(np.float32))


@pytest.mark.parametrize("samples", [40, 27_840, 99_841])
def test_the_forward_transform_is_torch_stft(samples: int) -> None:
    x = torch.randn(2, samples, generator=torch.Generator().manual_seed(samples))
    expected = torch.view_as_real(torch.stft(x, N_FFT, HOP, N_FFT, window=WINDOW, return_complex=True))
    real, imag = HiftStft(WINDOW, HOP).stft(x)
    assert real.shape == expected[..., 0].shape
    assert torch.allclose(real, expected[..., 0], atol=2e-5) and torch.allclose(imag, expected[..., 1], atol=2e-5)


@pytest.mark.parametrize("frames", [2, 59, 6_961])
def test_the_inverse_is_torch_istft_and_ignores_dc_and_nyquist_imaginary_parts(frames: int) -> None:
    """HiFT's decoder makes any phase at every bin, DC and Nyquist included; ``irfft`` drops their imaginary parts,
    and so must the inverse here. Magnitudes above 100 are clipped first, as upstream does."""
    gen = torch.Generator().manual_seed(frames)
    magnitude = torch.exp(3 * torch.randn(1, N_FFT // 2 + 1, frames, generator=gen))  # some past the clip at 100
    phase = torch.sin(torch.randn(1, N_FFT // 2 + 1, frames, generator=gen))
    clipped = torch.clip(magnitude, max=1e2)
    spectrum = torch.complex(clipped * torch.cos(phase), clipped * torch.sin(phase))
    expected = torch.istft(spectrum, N_FFT, HOP, N_FFT, window=WINDOW)
    got = HiftStft(WINDOW, HOP).istft(magnitude, phase)
    assert got.shape == expected.shape == (1, HOP * (frames - 1))
    assert float((got - expected).abs().max()) <= 1e-5 * max(1.0, float(expected.abs().max()))


def test_an_upstream_like_vocoder_gets_both_as_its_own_methods() -> None:
    class Hift(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(1, 1, 1)
            self.stft_window = WINDOW
            self.istft_params = {"n_fft": N_FFT, "hop_len": HOP}

        def _stft(self, x: torch.Tensor) -> None:
            raise AssertionError("upstream's STFT was called")

    hift = Hift()
    transforms = make_sync_free(hift)
    assert transforms is not None and transforms.hop == HOP
    real, _ = hift._stft(torch.randn(1, 64))  # type: ignore[func-returns-value]
    assert real.shape == (1, N_FFT // 2 + 1, 17)
    assert make_sync_free(torch.nn.Linear(2, 2)) is None
