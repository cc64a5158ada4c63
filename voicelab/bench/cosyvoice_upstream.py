"""Upstream CosyVoice driven as its ``webui.py`` drives it, for ``bench cosyvoice``'s side-by-side run.

``AutoModel(model_dir=...)`` then, per request, a ``spk2info`` entry for a prompt not seen before and
``inference_zero_shot(text, prompt_text, prompt_wav_path, zero_shot_spk_id, stream=False)`` with the chunks joined, as
the webui's ``generate_audio`` does; two requests at a time at most (its queue's concurrency limit). Three things are
changed so that it runs at all on this stack, each the smallest possible: downloads are refused (modelscope stand-in);
upstream's ``load_wav`` reads with soundfile (torchaudio 2.11's ``load`` needs torchcodec); the Qwen body is re-read
in float32 (transformers 5 loads it in bf16 beside fp32 heads). For random weights the same speech-token cap as
VoiceLab's is installed, so both sides make the same number of tokens.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _soundfile_load_wav(wav: str, target_sr: int, min_sr: int = 16000) -> Any:
    import soundfile as sf
    import torch
    import torchaudio.functional as taf

    samples, rate = sf.read(wav, dtype="float32", always_2d=True)
    speech = torch.from_numpy(samples.mean(axis=1)).unsqueeze(0)
    assert rate >= min_sr, f"wav sample rate {rate} must be greater than {target_sr}"
    return taf.resample(speech, rate, target_sr) if rate != target_sr else speech


def load_naive(model_dir: Path, code_dir: str) -> Any:
    """Upstream's own AutoModel, with the three changes the module docstring lists."""
    import torch

    from voicelab.backends.cosyvoice.backend import CosyVoiceConfig
    from voicelab.backends.cosyvoice.upstream import RequestWatches, block_downloads, install_guards

    block_downloads()
    if code_dir:
        sys.path.insert(0, str(Path(code_dir).resolve()))
    import cosyvoice.cli.frontend as upstream_frontend
    from cosyvoice.cli.cosyvoice import AutoModel

    upstream_frontend.load_wav = _soundfile_load_wav  # type: ignore[attr-defined]
    model = AutoModel(model_dir=str(model_dir))
    model.model.llm.float()
    model.model.llm.load_state_dict(torch.load(model_dir / "llm.pt", map_location=model.model.device), strict=True)
    install_guards(model.model, RequestWatches(), CosyVoiceConfig(model_dir).token_cap)
    return model


def run_naive(model: Any, text: str, prompt_text: str, prompt_wav: str, seed: int) -> tuple[np.ndarray, float, float]:
    """One webui-style request: (audio, latency s, time to first audio s). Each prompt not seen before gets its own
    ``spk2info`` entry (``add_zero_shot_spk``), never removed, as the seeds' WebUIs keep one per upload; its cost
    counts in the request's latency, as it would for the user waiting."""
    import torch

    torch.manual_seed(seed)
    started = time.perf_counter()
    if prompt_wav not in model.frontend.spk2info:
        model.add_zero_shot_spk(prompt_text, prompt_wav, prompt_wav)
    first = 0.0
    pieces = []
    for output in model.inference_zero_shot(text, prompt_text, prompt_wav, zero_shot_spk_id=prompt_wav, stream=False):
        first = first or time.perf_counter() - started
        pieces.append(output["tts_speech"].numpy().flatten())
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    return audio, time.perf_counter() - started, first
