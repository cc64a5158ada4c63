"""Where a lone whole CosyVoice request goes in NVIDIA's anchor shape, and how often its token loop waits for the GPU.

    python -m tools.cosyvoice_request_profile --model-dir DIR [--code DIR] [--runs 6] [--chars 20] [--slots 16]
        [--dtype float32] [--vocoder-graphs off] [--sampling exact] [--flow-half off]

Loads the model as the backend does (``load_runtime``) and runs ``--runs`` whole (unstreamed) requests one at a
time, each in a voice new to the cache (a cut of a test prompt, as ``bench cosyvoice``'s anchor phase makes them)
with a Mandarin text of ``--chars`` characters. Each line: the new voice's features, the first and last token and
the time per token, the flow's span (and its encoder's and decoder's), the vocoder's, the whole request and its RTF,
in ms from the request's start (the device synchronised around each stage, so the spans are the stages' own). One
more request then runs under ``torch.cuda.set_sync_debug_mode``: every operation that waited for the device, counted
by source line, over the tokens it decoded. Last, one step's sampling alone (``TokenRules.sample_rows`` on random
log-probabilities, 1 and ``--slots`` rows, the device synchronised around it, then the same for
``decode_sampling=device``): what a token costs besides the step's replay and the host's gaps. The first run carries
one-off warm-up; the p50 line leaves out the first two. No engine, no IPC; but with ``--scoring on`` (the default)
each run's voice and reply are then scored as the engine scores them on the same device (``engine_scoring_ms``):
what an engine request pays besides the backend for the similarity figures a user reads.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools.cosyvoice_first_audio import instrument, marks_ms, span, timed
from voicelab.bench.cosyvoice_anchor import anchor_texts, anchor_voice
from voicelab.bench.soak import base_prompts

SAMPLE_RATE = 24000
WARM_CALLS = 3  # untimed calls before a timed median


@dataclass(frozen=True)
class Stages:
    """One whole request's stages, in ms from its start; ``audio_s``: the seconds of speech it made."""

    features_ms: float
    tokens: int
    first_token_ms: float
    last_token_ms: float
    flow_ms: tuple[float, float]
    flow_encoder_ms: float  # of the flow: its encoder's span, then its decoder's (the ten Euler steps)
    flow_decoder_ms: float
    vocoder_ms: tuple[float, float]
    total_ms: float
    audio_s: float

    @property
    def rtf(self) -> float:
        return self.total_ms / 1000 / max(self.audio_s, 1e-9)

    def line(self) -> str:
        per_token = (self.last_token_ms - self.first_token_ms) / max(1, self.tokens - 1)
        return (
            f"features {self.features_ms:.0f} ms, {self.tokens} tokens from {self.first_token_ms:.0f} to "
            f"{self.last_token_ms:.0f} ms ({per_token:.2f} ms a token), "
            f"flow {self.flow_ms[0]:.0f}-{self.flow_ms[1]:.0f} (encoder {self.flow_encoder_ms:.0f}, decoder "
            f"{self.flow_decoder_ms:.0f}), "
            f"vocoder {self.vocoder_ms[0]:.0f}-{self.vocoder_ms[1]:.0f}, whole {self.total_ms:.0f} ms for "
            f"{self.audio_s:.2f} s of audio, RTF {self.rtf:.3f}"
        )


def stages(marks: list[tuple[str, float]], start: float, features_end: float, end: float, audio_s: float) -> Stages:
    """``marks`` as ``cosyvoice_first_audio.instrument`` stamps them (times in seconds); each stage's first span."""
    tokens, first = marks_ms(marks, start)
    return Stages(
        features_ms=1000 * (features_end - start),
        tokens=len(tokens),
        first_token_ms=tokens[0] if tokens else -1.0,
        last_token_ms=tokens[-1] if tokens else -1.0,
        flow_ms=span(first, "flow"),
        flow_encoder_ms=_length(span(first, "flow encoder")),
        flow_decoder_ms=_length(span(first, "flow decoder")),
        vocoder_ms=span(first, "vocoder"),
        total_ms=1000 * (end - start),
        audio_s=audio_s,
    )


def _length(stage: tuple[float, float]) -> float:
    return stage[1] - stage[0]


def instrument_flow(runtime: Any, marks: list[tuple[str, float]], sync: Callable[[], None]) -> None:
    """Stamp the flow's encoder and its decoder (the Euler steps) too, each synchronised around (instance
    attributes only): which half of the flow a slow request's time went to."""
    flow = runtime.model.flow
    flow.encoder.forward = timed("flow encoder", flow.encoder.forward, marks, sync)
    flow.decoder.forward = timed("flow decoder", flow.decoder.forward, marks, sync)


def sync_sources(caught: Iterable[warnings.WarningMessage]) -> collections.Counter[str]:
    """The warnings ``set_sync_debug_mode`` raised, counted by ``file:line`` of the call that waited."""
    return collections.Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught)


def run_voice(index: int) -> tuple[Any, int, str]:
    """Run ``index``'s voice: the anchor phase's cut of one of the four test prompts (samples, rate, transcript)."""
    return anchor_voice(index, base_prompts())


def one_request(
    runtime: Any, index: int, text: str, marks: list[tuple[str, float]], sync: Callable[[], None]
) -> tuple[Stages, Any]:
    """Request ``index`` (its seed too) in the anchor phase's voice ``index``, new to the cache; its stages and
    its audio."""
    from voicelab.backends.cosyvoice.modes import plan_mode

    samples, _, transcript = run_voice(index)
    sync()
    start = time.perf_counter()
    plan = plan_mode(runtime.version, runtime.normalize_prompt(transcript), "")
    entry = runtime.speaker(samples)
    sync()
    features_end = time.perf_counter()
    marks.clear()
    audio = [a for s in runtime.normalize(text) for a in runtime.run(runtime.inputs(plan, s, entry), False, 1.0, index)]
    sync()
    end = time.perf_counter()
    joined = np.concatenate(audio) if audio else np.zeros(0, dtype=np.float32)
    return stages(list(marks), start, features_end, end, joined.size / SAMPLE_RATE), joined


def engine_scoring_ms(
    stage: Any, index: int, audio: np.ndarray, sync: Callable[[], None]
) -> tuple[float, float, float]:
    """What request ``index`` pays around the backend, ms: the clip's intake (decoded, resampled, trimmed; in the
    serving process, before the queue), the new voice's profile as a natively cloning backend's request builds it
    before the backend starts (``VoiceStage.voice_for``: GE2E and ECAPA embeddings, median pitch), and the reply's
    scores after it ends (``VoiceStage.scores_many``), the device synchronised around each. The engine's own code,
    so the figures move with it."""
    import io

    import soundfile as sf

    from voicelab.backends.base import SpeechRequest
    from voicelab.engine.voicing import Finished, VoicePlan
    from voicelab.voice.intake import load_prompt

    samples, rate, _ = run_voice(index)
    clip = io.BytesIO()
    sf.write(clip, samples, rate, format="WAV")
    sync()
    stamps = [time.perf_counter()]
    prompt = load_prompt(clip.getvalue())
    stamps.append(time.perf_counter())
    cached = stage.voice_for(prompt, (), _no_calibration)
    sync()
    stamps.append(time.perf_counter())
    plan = VoicePlan(SpeechRequest("", "zh"), {}, cached.profile, False, stage.device, stage.renderer)
    stage.scores_many([Finished(audio, audio, plan)], SAMPLE_RATE)
    sync()
    stamps.append(time.perf_counter())
    intake, profile, reply = (1000 * (b - a) for a, b in itertools.pairwise(stamps))
    return intake, profile, reply


def _no_calibration(*_: Any) -> Any:
    raise AssertionError("a natively cloned voice is never matched, so never calibrated")


def print_scoring(device: str, replies: list[np.ndarray], sync: Callable[[], None]) -> None:
    """One line per run: the engine's scoring of its voice and reply (``engine_scoring_ms``), the first carrying
    the encoders' load; a run's voice is new to the stage, as it was to the backend."""
    from voicelab.engine.voicing import VoiceStage

    stage = VoiceStage(device, len(replies) + 1)
    for index, audio in enumerate(replies):
        intake, profile, reply = engine_scoring_ms(stage, index, audio, sync)
        print(f"run {index} around the backend: intake {intake:.1f} ms, the new voice's profile {profile:.1f} ms "
              f"before the backend, the reply's scores {reply:.1f} ms after it ({audio.size / SAMPLE_RATE:.2f} s)",
              flush=True)  # fmt: skip


def sampling_ms(rules: Any, vocab: int, rows: int, like: Any, repeats: int = 50) -> float:
    """Median ms of one step's sampling of ``rows`` rows (each with its own generator and a ten-token history)
    from random log-probabilities in ``like``'s dtype and device; ``sample_rows`` ends by reading the tokens, so
    each call's time is its own."""
    import torch

    from voicelab.backends.cosyvoice.sampling import Row

    logp = _random_logp(rows, vocab, like)
    states = [Row(list(range(i, i + 10)), 0, torch.Generator(like.device).manual_seed(i)) for i in range(rows)]
    return _median_ms(lambda: rules.sample_rows(logp, states), repeats)


def device_sampling_ms(rules: Any, vocab: int, rows: int, like: Any, repeats: int = 50) -> float:
    """The same for ``SlotSampler`` (``decode_sampling=device``; on CUDA from its graph, as the batcher replays it):
    one draw of ``rows`` slots and the next step's inputs, then the tokens read."""
    import torch

    from voicelab.backends.cosyvoice.device_sampling import SlotSampler

    logp = _random_logp(rows, vocab, like)
    sampler = SlotSampler(rules, rows, repeats + WARM_CALLS, like.device)
    into = (
        torch.zeros(rows, dtype=torch.long, device=like.device),
        torch.zeros(rows, dtype=torch.long, device=like.device),
    )
    if like.is_cuda:
        sampler.capture(logp, *into, [rows])
    for slot in range(rows):
        sampler.admit(slot, torch.Generator(like.device).manual_seed(slot), 0, 10)
    return _median_ms(lambda: sampler.next_inputs(logp, *into).tolist(), repeats)


def _random_logp(rows: int, vocab: int, like: Any) -> Any:
    """Fixed random (rows, vocab) log-probabilities, sharp as a trained LLM's, in ``like``'s dtype and device."""
    import torch

    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)).mul(4).log_softmax(1).to(like)


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    """Median host ms of ``repeats`` calls after ``WARM_CALLS`` untimed ones (each call ends by reading the
    device, so its time is its own)."""
    for _ in range(WARM_CALLS):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    import torch

    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice
    from voicelab.backends.cosyvoice.upstream import load_runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--code", default="", help="an upstream checkout (default: the installed package)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--slots", type=int, default=16, help="decode slots, as --backend-options decode_slots")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--chars", type=int, default=20, help="Mandarin characters a request")
    parser.add_argument("--vocoder-graphs", choices=("on", "off"), default="on", help="as --backend-options")
    parser.add_argument("--sampling", choices=("exact", "device"), default="device", help="as decode_sampling")
    parser.add_argument("--flow-half", choices=("on", "off"), default="on", help="as --backend-options flow_half")
    parser.add_argument("--scoring", choices=("on", "off"), default="on", help="time the engine's scoring too")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    decode = DecodeChoice("on", args.slots, sampling=args.sampling)
    runtime = load_runtime(
        args.model_dir,
        args.code,
        args.device,
        args.dtype,
        500,
        decode,
        vocoder_graphs=args.vocoder_graphs == "on",
        flow_half=args.flow_half == "on",
    )
    marks: list[tuple[str, float]] = []
    instrument(runtime, marks, sync)
    instrument_flow(runtime, marks, sync)
    texts = anchor_texts(args.runs + 1, args.chars)
    rtfs, replies = [], []
    for index in range(args.runs):
        line, audio = one_request(runtime, index, texts[index], marks, sync)
        print(f"run {index}: {line.line()}", flush=True)
        rtfs.append((line.rtf, line.total_ms))
        replies.append(audio)
    if len(rtfs) > 2:
        print(f"p50 of runs 2-{args.runs - 1}: RTF {statistics.median(r for r, _ in rtfs[2:]):.3f}, "
              f"{statistics.median(t for _, t in rtfs[2:]):.0f} ms")  # fmt: skip
    if args.scoring == "on":
        print_scoring(args.device, replies, sync)
    if cuda:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode(1)
            try:
                line, _ = one_request(runtime, args.runs, texts[args.runs], marks, sync)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        sources = sync_sources(caught)
        counts = dict(sources.most_common(12))
        print(f"host syncs: {sum(sources.values())} over {line.tokens} tokens; by line: {counts}")
    decoder = runtime.decoder
    if decoder is not None:
        logp = decoder.runner.logp
        alone = {rows: sampling_ms(decoder.rules, logp.shape[-1], rows, logp) for rows in sorted({1, args.slots})}
        print("sampling alone, ms a step: " + ", ".join(f"{rows} rows {ms:.3f}" for rows, ms in alone.items()))
        alone = {rows: device_sampling_ms(decoder.rules, logp.shape[-1], rows, logp) for rows in alone}
        print("device sampling alone (decode_sampling=device), ms a step: "
              + ", ".join(f"{rows} rows {ms:.3f}" for rows, ms in alone.items()))  # fmt: skip
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
