"""A voice prompt as upstream's inputs, computed from tensors (upstream's frontend reads files via torchaudio.load).

The steps mirror upstream's ``CosyVoiceFrontEnd``: 24 kHz mel features for the flow, whisper log-mel (128 bins)
through the speech-tokenizer graph for the LLM and flow prompt tokens, 80-bin kaldi fbank through CAM++ for the
speaker embedding; for 24 kHz models the feature and token lengths are aligned (2 mel frames per token).
The libraries (whisper, torchaudio.functional, the frontend's ONNX sessions) come from the optional install.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

PROMPT_RATE = 16000


@dataclass(frozen=True)
class SpeakerEntry:
    """What one prompt contributes to every request in it (upstream's ``spk2info`` value, minus text)."""

    speech_feat: torch.Tensor  # (1, frames, 80) at 50 frames/s
    speech_token: torch.Tensor  # (1, tokens) int32 at 25 tokens/s
    embedding: torch.Tensor  # (1, 192)

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in (self.speech_feat, self.speech_token, self.embedding))


class UpstreamFeaturizer:
    """Prompt → ``SpeakerEntry`` with upstream's frontend objects (feature extractor and ONNX sessions)."""

    def __init__(self, frontend: Any, sample_rate: int, device: torch.device) -> None:
        self.frontend = frontend
        self.sample_rate = sample_rate
        self.device = device

    def speaker(self, samples: np.ndarray) -> SpeakerEntry:
        speech = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).unsqueeze(0)
        feat = self._speech_feat(speech)
        token = self._speech_token(speech)
        if self.sample_rate == 24000:
            length = min(feat.shape[1] // 2, token.shape[1])
            feat, token = feat[:, : 2 * length], token[:, :length]
        return SpeakerEntry(feat.to(self.device), token.to(self.device), self._embedding(speech).to(self.device))

    def _speech_feat(self, speech: torch.Tensor) -> torch.Tensor:
        import torchaudio.functional as taf

        resampled = taf.resample(speech, PROMPT_RATE, self.sample_rate)
        return self.frontend.feat_extractor(resampled).squeeze(dim=0).transpose(0, 1).unsqueeze(0)

    def _speech_token(self, speech: torch.Tensor) -> torch.Tensor:
        import whisper

        session = self.frontend.speech_tokenizer_session
        mel = whisper.log_mel_spectrogram(speech, n_mels=128)
        names = [i.name for i in session.get_inputs()]
        feed = {names[0]: mel.detach().cpu().numpy(), names[1]: np.array([mel.shape[2]], dtype=np.int32)}
        tokens = np.asarray(session.run(None, feed)[0]).reshape(-1)
        return torch.tensor(tokens, dtype=torch.int32).unsqueeze(0)

    def _embedding(self, speech: torch.Tensor) -> torch.Tensor:
        import torchaudio.compliance.kaldi as kaldi

        fbank = kaldi.fbank(speech, num_mel_bins=80, dither=0, sample_frequency=PROMPT_RATE)
        fbank = fbank - fbank.mean(dim=0, keepdim=True)
        session = self.frontend.campplus_session
        out = session.run(None, {session.get_inputs()[0].name: fbank.unsqueeze(0).cpu().numpy()})[0]
        return torch.tensor(np.asarray(out, dtype=np.float32).reshape(1, -1))
