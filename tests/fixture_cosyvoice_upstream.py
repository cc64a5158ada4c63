"""Test doubles of upstream CosyVoice's classes, shaped as ``CosyVoice2Model`` / ``CosyVoiceFrontEnd`` behave.

``FakeModel.tts`` runs ``llm_job`` in a thread that fills per-request dicts, polls them when streaming
(growing ``token_hop_len`` each chunk, as upstream does), and cleans its dicts only when run to the end, as
upstream does. ``FakeLlm.inference`` samples through ``self.sampling`` and stops at a stop id, or fails on
demand, as a dtype mismatch makes the real one fail inside the thread. The first sample of each chunk
carries the chunk's number (/ 100) over a quiet tone, so tests can hear the order.
Only torch and numpy are needed: no torchaudio, no upstream.
"""

from __future__ import annotations

import threading
import time
import uuid
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
        self.token_hop_len, self.token_max_hop_len = 25, 100
        self.tts_speech_token_dict: dict[str, list[int]] = {}
        self.llm_end_dict: dict[str, bool] = {}
        self.hift_cache_dict: dict[str, Any] = {}
        self.calls: list[dict[str, Any]] = []
        self.closed_early = 0
        self.running_jobs = self.most_jobs_at_once = 0

    def llm_job(
        self, text: torch.Tensor, prompt_text: torch.Tensor, prompt_token: Any, embedding: Any, key: str
    ) -> None:
        with self.lock:
            self.running_jobs += 1
            self.most_jobs_at_once = max(self.most_jobs_at_once, self.running_jobs)
        try:
            for token in self.llm.inference(text=text, text_len=torch.tensor([text.shape[1]]), prompt_text=prompt_text):
                self.tts_speech_token_dict[key].append(token)
            self.llm_end_dict[key] = True
        finally:
            with self.lock:
                self.running_jobs -= 1

    def tts(self, stream: bool = False, speed: float = 1.0, **model_input: Any) -> Iterator[dict[str, torch.Tensor]]:
        self.calls.append({**model_input, "stream": stream, "speed": speed, "hop": self.token_hop_len})
        key = str(uuid.uuid1())
        with self.lock:
            self.tts_speech_token_dict[key], self.llm_end_dict[key], self.hift_cache_dict[key] = [], False, None
        job = threading.Thread(target=self.llm_job, args=(model_input["text"], None, None, None, key))
        job.start()
        try:
            yield from self._stream(key) if stream else self._whole(key, job, speed)
        except GeneratorExit:
            self.closed_early += 1
            raise
        job.join()
        with self.lock:
            for table in (self.tts_speech_token_dict, self.llm_end_dict, self.hift_cache_dict):
                table.pop(key)

    def _whole(self, key: str, job: threading.Thread, speed: float) -> Iterator[dict[str, torch.Tensor]]:
        job.join()
        samples = int(len(self.tts_speech_token_dict[key]) * SAMPLES_PER_TOKEN / speed)
        yield {"tts_speech": tone(samples, 0)}

    def _stream(self, key: str) -> Iterator[dict[str, torch.Tensor]]:
        offset, number = 0, 0
        while True:
            time.sleep(0.002)
            if len(self.tts_speech_token_dict[key]) - offset >= self.token_hop_len:
                yield {"tts_speech": tone(self.token_hop_len * SAMPLES_PER_TOKEN, number)}
                offset, number = offset + self.token_hop_len, number + 1
                self.token_hop_len = min(self.token_max_hop_len, self.token_hop_len * 2)
            if self.llm_end_dict[key] and len(self.tts_speech_token_dict[key]) - offset < self.token_hop_len:
                break
        rest = len(self.tts_speech_token_dict[key]) - offset
        yield {"tts_speech": tone(rest * SAMPLES_PER_TOKEN, number)}


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
