"""Where a lone streamed CosyVoice request's first audio goes: per stage, from the runtime's own calls.

    python -m tools.cosyvoice_first_audio --model-dir DIR [--code DIR] [--slots 16] [--runs 8] [--vocoder-graphs off]

Loads the model as the backend does (``load_runtime``), makes one prompt's features (a cached voice from then on),
and runs ``--runs`` streamed requests of 200-character texts (their first sentence) one at a time, stopping each at
its first chunk. Each line: the first token, how many tokens had come by the time the first chunk's flow started
(upstream's first hop, padded to whole hops of prompt and chunk, plus the look-ahead), the flow's and the vocoder's
spans and the first audio, all in ms from the request's start (the device synchronised around each stage, so the
spans are the stages' own). Then one decode step replayed alone at 1, 2 and ``--slots`` rows, and one token's
sampling. The first run includes one-off warm-up; read the others. No engine, no IPC: the model's own time.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voicelab.bench.cosyvoice_sides import corpus_cut
from voicelab.bench.soak import DEFAULT_PROMPTS

PROMPT = DEFAULT_PROMPTS / "arctic_slt_en_female.wav"


@dataclass(frozen=True)
class Timeline:
    """One request's stages in ms from its start; ``tokens_by_flow``: tokens there when the first flow call began."""

    first_token_ms: float
    tokens_by_flow: int
    token_gap_ms: float
    flow_ms: tuple[float, float]
    vocoder_ms: tuple[float, float]
    first_audio_ms: float

    def line(self) -> str:
        return (
            f"first token {self.first_token_ms:.0f} ms, {self.tokens_by_flow} tokens by the first flow call "
            f"(median gap {self.token_gap_ms:.2f} ms), flow {self.flow_ms[0]:.0f}-{self.flow_ms[1]:.0f}, "
            f"vocoder {self.vocoder_ms[0]:.0f}-{self.vocoder_ms[1]:.0f}, first audio {self.first_audio_ms:.0f} ms"
        )


def marks_ms(marks: list[tuple[str, float]], start: float) -> tuple[list[float], dict[str, float]]:
    """``instrument``'s marks in ms from ``start``: every token's time, and each other mark's first occurrence."""
    tokens = [1000 * (t - start) for name, t in marks if name == "token"]
    first = {name: 1000 * (t - start) for name, t in reversed(marks) if name != "token"}
    return tokens, first


def span(first: dict[str, float], stage: str) -> tuple[float, float]:
    """A stage's first span from ``marks_ms``'s first occurrences ("flow" or "vocoder"; 0 where it did not run)."""
    return first.get(f"{stage}+", 0.0), first.get(f"{stage}-", 0.0)


def timeline(marks: list[tuple[str, float]], start: float, first_audio: float) -> Timeline:
    """``marks``: ("token", t), ("flow+", t), ("flow-", t), ("vocoder+", t), ("vocoder-", t) in seconds."""
    tokens, first = marks_ms(marks, start)
    audio_ms = 1000 * (first_audio - start)
    flow_start = first.get("flow+", audio_ms)
    gaps = [b - a for a, b in itertools.pairwise(tokens)] or [0.0]
    return Timeline(
        first_token_ms=tokens[0] if tokens else -1.0,
        tokens_by_flow=sum(1 for t in tokens if t <= flow_start),
        token_gap_ms=statistics.median(gaps),
        flow_ms=span(first, "flow"),
        vocoder_ms=span(first, "vocoder"),
        first_audio_ms=audio_ms,
    )


def timed(name: str, call: Callable[..., Any], marks: list[tuple[str, float]], sync: Callable[[], None]) -> Any:
    """``call`` stamped "name+" before and "name-" after into ``marks``, the device synchronised around it."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync()
        marks.append((name + "+", time.perf_counter()))
        out = call(*args, **kwargs)
        sync()
        marks.append((name + "-", time.perf_counter()))
        return out

    return wrapper


def instrument(runtime: Any, marks: list[tuple[str, float]], sync: Callable[[], None]) -> None:
    """Stamp the flow, the vocoder and every token the decode path yields (instance attributes only)."""
    model = runtime.model
    model.flow.inference = timed("flow", model.flow.inference, marks, sync)
    model.hift.inference = timed("vocoder", model.hift.inference, marks, sync)
    decoder = runtime.decoder
    if decoder is None:
        return
    decode = decoder.decode

    def stamped(*args: Any, **kwargs: Any) -> Iterator[int]:
        for token in decode(*args, **kwargs):
            marks.append(("token", time.perf_counter()))
            yield token

    decoder.decode = stamped


def _step_times(runtime: Any, slots: int, sync: Callable[[], None], repeats: int = 50) -> list[str]:
    runner = getattr(runtime.decoder, "runner", None)
    if runner is None:
        return ["(no fast decode path: upstream's loop)"]
    lines = []
    for rows in sorted({1, 2, slots}):
        sync()
        started = time.perf_counter()
        for _ in range(repeats):
            runner.step(300, rows)
        sync()
        lines.append(f"decode step, {rows} row(s): {1000 * (time.perf_counter() - started) / repeats:.2f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    import soundfile as sf
    import torch

    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice
    from voicelab.backends.cosyvoice.modes import plan_mode
    from voicelab.backends.cosyvoice.upstream import load_runtime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--code", default="", help="an upstream checkout (default: the installed package)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--slots", type=int, default=16, help="decode slots, as --backend-options decode_slots")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--vocoder-graphs", choices=("on", "off"), default="on", help="as --backend-options")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    decode = DecodeChoice.parse("on", str(args.slots))
    runtime = load_runtime(  # the backend's defaults: the flow in float16
        args.model_dir,
        args.code,
        args.device,
        "float32",
        500,
        decode,
        vocoder_graphs=args.vocoder_graphs == "on",
        flow_half=True,
    )
    samples, _ = sf.read(PROMPT, dtype="float32")
    entry = runtime.speaker(samples)
    plan = plan_mode(runtime.version, PROMPT.with_suffix(".txt").read_text().strip(), "")
    marks: list[tuple[str, float]] = []
    instrument(runtime, marks, sync)
    for run in range(args.runs):
        sentence = runtime.normalize(corpus_cut(run, 200))[0]
        start = time.perf_counter()
        inputs = runtime.inputs(plan, sentence, entry)
        marks.clear()
        chunks = runtime.run(inputs, True, 1.0, seed=run)
        next(chunks)
        first_audio = time.perf_counter()
        getattr(chunks, "close", lambda: None)()  # stops the request's thread, drops its entries
        print(f"run {run}: {len(sentence)} characters; " + timeline(list(marks), start, first_audio).line(), flush=True)
    for line in _step_times(runtime, args.slots, sync):
        print(line)
    runtime.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
