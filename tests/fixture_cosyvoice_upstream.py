"""Test doubles of upstream CosyVoice's classes, shaped as ``CosyVoice2Model`` / ``CosyVoiceFrontEnd`` behave.

``FakeModel`` has upstream's ``llm_job`` (fills the per-request token list, then sets the end flag) and a
``token2wav`` that records each call and answers with a tone as long as the chunk's new tokens.
``FakeLlm.inference`` samples through ``self.sampling`` and stops at a stop id, or fails on demand, as a dtype
mismatch makes the real one fail inside the thread. The first sample of each chunk
carries the chunk's number (/ 100) over a quiet tone, so tests can hear the order.
Only torch and numpy are needed: no torchaudio, no upstream.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from voicelab.backends.cosyvoice.backend import CosyVoiceBackend, CosyVoiceConfig
from voicelab.backends.cosyvoice.features import SpeakerEntry
from voicelab.backends.cosyvoice.upstream import UpstreamRuntime
from voicelab.settings import Settings

SAMPLES_PER_TOKEN = 960  # 24 kHz / 25 tokens per second
STOP = 6561


def tone(samples: int, number: int) -> torch.Tensor:
    """A quiet 180 Hz tone whose first sample carries ``number / 100``."""
    wave = 0.1 * torch.sin(2 * torch.pi * 180 * torch.arange(samples) / 24000)
    if samples:
        wave[0] = number / 100
    return wave.unsqueeze(0)


def decode(tokens: torch.Tensor) -> str:
    return "".join(chr(int(t)) for t in tokens.reshape(-1))


class FakeFrontend:
    def text_normalize(self, text: str, split: bool = True, text_frontend: bool = True) -> list[str] | str:
        if not split:
            return text.strip()
        return [s.strip() for s in text.replace("!", ".").split(".") if s.strip()]

    def _extract_text_token(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.tensor([[ord(c) for c in text]], dtype=torch.int32)
        return tokens, torch.tensor([tokens.shape[1]], dtype=torch.int32)


class FakeLlm:
    """Emits 2 tokens per text token, then a stop id; ``fail_after`` makes it raise mid-way instead."""

    def __init__(self) -> None:
        self.speech_token_size = STOP
        self.stop_token_ids = [STOP, STOP + 1, STOP + 2]
        self.fail_after: int | None = None
        self.stop_first = False  # make the stop id the best choice from the start (random weights may)
        self.token_delay_s = 0.0
        self.fail_on: str | None = None  # fail a request whose text contains this (the others go on)
        self.emitted = 0
        self.sampling = self._argmax

    @staticmethod
    def _argmax(scores: torch.Tensor, decoded: list[int], top_k: int) -> int:
        return int(torch.argmax(scores))

    def inference(self, text: torch.Tensor, text_len: torch.Tensor, **kwargs: Any) -> Iterator[int]:
        self.emitted = 0
        if self.fail_on is not None and self.fail_on in decode(text):
            raise RuntimeError(f"this request's text has {self.fail_on!r}")
        for step in range(1000):
            if self.fail_after is not None and step >= self.fail_after:
                raise RuntimeError("mat1 and mat2 must have the same dtype")
            scores = torch.zeros(STOP + 3)
            scores[step % 100] = 1.0
            if self.stop_first or step >= 2 * int(text_len[0]):
                scores[STOP] = 2.0
            token = self.sampling(scores, [], 25)
            if token in self.stop_token_ids:
                return
            time.sleep(self.token_delay_s)
            self.emitted += 1
            yield token


class FakeModel:
    def __init__(self) -> None:
        self.llm = FakeLlm()
        self.lock = threading.Lock()
        self.flow = types.SimpleNamespace(pre_lookahead_len=3, inference=lambda **kwargs: None)
        self.hift = types.SimpleNamespace(inference=lambda **kwargs: None)  # called as upstream's token2wav does
        self.token_hop_len, self.token_max_hop_len, self.stream_scale_factor = 25, 100, 2
        self.tts_speech_token_dict: dict[str, list[int]] = {}
        self.llm_end_dict: dict[str, bool] = {}
        self.hift_cache_dict: dict[str, Any] = {}
        self.calls: list[dict[str, Any]] = []  # each request's non-empty llm_job inputs, by upstream's names
        self.wave_calls: list[dict[str, Any]] = []  # each token2wav call
        self.running_jobs = self.most_jobs_at_once = 0

    def llm_job(
        self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_token: torch.Tensor, embedding: Any, key: str
    ) -> None:
        named = {"text": text, "prompt_text": prompt_text, "llm_prompt_speech_token": prompt_token}
        with self.lock:
            self.calls.append({name: value for name, value in named.items() if value.shape[1]})
            self.running_jobs += 1
            self.most_jobs_at_once = max(self.most_jobs_at_once, self.running_jobs)
        try:
            for token in self.llm.inference(text=text, text_len=torch.tensor([text.shape[1]]), prompt_text=prompt_text):
                self.tts_speech_token_dict[key].append(token)
            self.llm_end_dict[key] = True
        finally:
            with self.lock:
                self.running_jobs -= 1

    def token2wav(
        self,
        token: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        token_offset: int,
        uuid: str,
        stream: bool = False,
        finalize: bool = False,
        speed: float = 1.0,
    ) -> torch.Tensor:
        """A tone as long as the chunk's new tokens (upstream's look-ahead tokens wait for the next chunk)."""
        self.wave_calls.append(
            {
                "key": uuid,
                "tokens": token.shape[1],
                "offset": token_offset,
                "stream": stream,
                "finalize": finalize,
                "speed": speed,
            }
        )
        self.flow.inference(token=token, finalize=finalize)
        self.hift.inference(speech_feat=token)
        number = (self.hift_cache_dict[uuid] or {}).get("chunks", 0)
        self.hift_cache_dict[uuid] = {"chunks": number + 1}
        new = token.shape[1] - token_offset - (0 if finalize else self.flow.pre_lookahead_len)
        return tone(int(new * SAMPLES_PER_TOKEN / speed), number)


class FakeFeaturizer:
    def __init__(self) -> None:
        self.calls = 0

    def speaker(self, samples: np.ndarray) -> SpeakerEntry:
        self.calls += 1
        tokens = len(samples) // 640
        return SpeakerEntry(
            torch.zeros(1, 2 * tokens, 80), torch.ones(1, tokens, dtype=torch.int32), torch.ones(1, 192)
        )


def fake_runtime(version: int = 2, token_cap: int | None = None) -> UpstreamRuntime:
    return UpstreamRuntime(FakeFrontend(), FakeModel(), FakeFeaturizer(), version, 24000, token_cap)


def create(settings: Settings) -> CosyVoiceBackend:
    """``CosyVoiceBackend`` over these doubles, by "module:factory" path, for the worker engine on CPU."""
    slots = int(settings.backend_option("decode_slots", "1"))
    config = CosyVoiceConfig(Path(settings.cosyvoice_dir), "", settings.profile_cache_size, slots)

    def loader(*args: Any) -> UpstreamRuntime:
        runtime = fake_runtime(2)
        runtime.model.llm.token_delay_s = float(settings.backend_option("token_delay_ms", "0")) / 1000
        return runtime

    return CosyVoiceBackend(config, loader=loader)
