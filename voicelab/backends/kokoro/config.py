"""Kokoro-82M v1.0's dimensions, as one small dataclass the top-level model is built from."""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE_RATE = 24000
STYLE_DIM = 256  # ref_s: the first 128 condition the decoder (timbre), the last 128 the predictor (prosody)
SAMPLES_PER_FRAME = 600  # one alignment frame: 2 F0 steps x 300 samples


@dataclass(frozen=True)
class KokoroDims:
    """Kokoro v1.0 (StyleTTS2 with an ISTFTNet decoder); every size the modules take."""

    n_token: int = 178
    hidden: int = 512
    style: int = 128
    n_layer: int = 3
    max_dur: int = 50
    text_kernel: int = 5
    bert_embedding: int = 128
    bert_hidden: int = 768
    bert_heads: int = 12
    bert_ffn: int = 2048
    bert_layers: int = 12
    bert_positions: int = 512
    upsample_rates: tuple[int, ...] = (10, 6)
    upsample_kernels: tuple[int, ...] = (20, 12)
    upsample_channels: int = 512
    resblock_kernels: tuple[int, ...] = (3, 7, 11)
    resblock_dilations: tuple[int, ...] = (1, 3, 5)
    n_fft: int = 20
    hop: int = 5
    harmonics: int = 8
