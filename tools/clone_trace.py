"""Where each cached cloned request's time goes inside the engine, request by request, and what the device did.

    python -m tools.clone_trace [--device cuda] [--runs 20] [--kernels 6] [--sentences 2]

``clone_stages`` times each stage alone on one sentence and ``clone_profile`` gives cProfile's host view; this runs
whole cloned requests through ``EngineCore`` (the throughput bench's two-sentence texts and prompt, after warm-up)
with the calls a cloned request makes wrapped and timed, the device synchronised around each: the backend's chunks,
the renderer (its analysis and its synthesis inside it), the scoring (resampling, GE2E, ECAPA, the output's F0) and
the style check; ``--sentences 6`` traces requests of 23-30 s, the soak's longest (the warm-up's two-sentence
requests leave their shapes to be met in the trace). It prints every request sorted by latency, so the tail shows
which stage grew, then p50 / p95 per stage and the voice stage's CUDA graphs (the analysis', the encoders') with
their capture-time timings. ``--kernels N`` then profiles N unwrapped requests with
``torch.profiler``: CUDA kernels launched and the device's busy time per request against its wall time (a launch-
bound request keeps the device idle most of its time), and the ops with the most device time.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tools.clone_profile import clone_tool_parser, warmed_engine
from voicelab.bench.first_byte import nearest_rank
from voicelab.bench.throughput import request_text
from voicelab.engine.core import EngineCore
from voicelab.engine.messages import SynthesisRequest
from voicelab.voice.prompt import PromptAudio


@dataclass
class Ledger:
    """Milliseconds per stage for the request in flight, the device synchronised around each timed call."""

    device: str
    current: dict[str, float] = field(default_factory=dict)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        self.sync()
        started = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.current[stage] = self.current.get(stage, 0.0) + 1e3 * (time.perf_counter() - started)

    def count(self, stage: str) -> None:
        self.current[stage] = self.current.get(stage, 0.0) + 1


# (owner, attribute, stage): the calls a cached cloned request makes, outermost first; nested stages are inside
# their caller's figure (the analysis and the synthesis inside "render").
WRAPPED = (
    ("voicelab.voice.dsp", "transform_batch", "render"),
    ("voicelab.voice.pulse_graphs:AnalysisGraphs", "__call__", "  analysis"),
    ("voicelab.voice.pulse", "synthesise", "  synthesis"),
    ("voicelab.engine.scoring:CloneScorer", "_at_encoder_rate", "resample 16k"),
    ("voicelab.voice.matcher:VoiceMatcher", "similarities_to", "GE2E"),
    ("voicelab.judges.ecapa:EcapaJudge", "similarities", "ECAPA"),
    ("voicelab.engine.scoring", "median_f0_many", "F0"),
    ("voicelab.engine.voicing:VoiceStage", "plan", "plan"),
    ("voicelab.engine.voicing:VoiceStage", "style_check", "style check"),
)
COUNTED = (("voicelab.backends.shape_graphs:ShapeGraphs", "_capture", "captures"),)  # analysis and encoders


def _owner(path: str) -> Any:
    module, _, cls = path.partition(":")
    owner = __import__(module, fromlist=["_"])
    return getattr(owner, cls) if cls else owner


@contextlib.contextmanager
def wrapped(ledger: Ledger, core: EngineCore) -> Iterator[None]:
    """The stages timed (and the backend's chunk generator), restored afterwards."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, make(original))

    for path, name, stage in WRAPPED:

        def timing(original: Any, stage: str = stage) -> Any:
            @functools.wraps(original)
            def call(*args: Any, **kwargs: Any) -> Any:
                with ledger.timed(stage):
                    return original(*args, **kwargs)

            return call

        patch(_owner(path), name, timing)
    for path, name, stage in COUNTED:

        def counting(original: Any, stage: str = stage) -> Any:
            @functools.wraps(original)
            def call(*args: Any, **kwargs: Any) -> Any:
                ledger.count(stage)
                return original(*args, **kwargs)

            return call

        patch(_owner(path), name, counting)

    def chunks(original: Any) -> Any:
        def timed_chunks(plan: Any) -> Iterator[Any]:
            stream = original(plan)
            while True:
                with ledger.timed("synthesis (backend)"):
                    chunk = next(stream, None)
                if chunk is None:
                    return
                yield chunk

        return timed_chunks

    patch(core, "_chunks", chunks)
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def traced_requests(core: EngineCore, prompt: PromptAudio, runs: int, sentences: int = 2) -> list[dict[str, float]]:
    """``runs`` cloned requests with their stages: each a dict of stage -> ms, plus ``total`` and ``chunks``."""
    ledger = Ledger(core.device)
    rows = []
    with wrapped(ledger, core):
        for r in range(runs):
            ledger.current = {}
            ledger.sync()
            started = time.perf_counter()
            result = core.run(SynthesisRequest(request_text(0, r, sentences), seed=r, prompt=prompt))
            ledger.sync()
            total = 1e3 * (time.perf_counter() - started)
            timed = sum(v for k, v in ledger.current.items() if not k.startswith(" ") and k != "captures")
            audio_s = len(result.audio) / result.sample_rate
            figures = {"total": total, "rest": total - timed, "chunks": result.chunks, "audio s": audio_s}
            rows.append(ledger.current | figures)
    return rows


def print_stages(rows: list[dict[str, float]]) -> None:
    stages = ["total", "audio s", "chunks", "synthesis (backend)", *(s for _, _, s in WRAPPED), "rest", "captures"]
    print("| " + " | ".join(stages) + " |\n|" + "---|" * len(stages))
    for row in sorted(rows, key=lambda r: r["total"]):
        print("| " + " | ".join(f"{row.get(s, 0.0):.1f}" for s in stages) + " |")
    for name, q in (("p50", 0.5), ("p95", 0.95)):
        cells = [nearest_rank([row.get(s, 0.0) for row in rows], q) for s in stages]
        print(f"| {name}: " + " | ".join(f"{c:.1f}" for c in cells) + " |")


def print_kernels(core: EngineCore, prompt: PromptAudio, runs: int) -> None:
    """Kernels and device busy time per request against wall time, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in range(runs):
            torch.cuda.synchronize(core.device)
            started = time.perf_counter()
            core.run(SynthesisRequest(request_text(0, r, 2), seed=r, prompt=prompt))
            torch.cuda.synchronize(core.device)
            walls.append(1e3 * (time.perf_counter() - started))
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.device_time for e in kernels) / 1e3
    print(f"\n{runs} requests under torch.profiler: wall p50 {statistics.median(walls):.1f} ms (profiled, slower)")
    print(f"per request: {len(kernels) / runs:.0f} device events, device busy {busy / runs:.1f} ms")
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=30, max_name_column_width=60)
    print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = clone_tool_parser("python -m tools.clone_trace", __doc__)
    parser.add_argument("--kernels", type=int, default=0, help="requests profiled by torch.profiler (CUDA only)")
    parser.add_argument("--sentences", type=int, default=2, help="sentences per traced request")
    args = parser.parse_args(argv)
    with warmed_engine(args.device) as (core, prompt):
        what = f"{args.runs} cloned requests of {args.sentences} sentences each"
        print(f"{args.device}, renderer {core.voice.renderer}, {what}")
        print_stages(traced_requests(core, prompt, args.runs, args.sentences))
        for b in core.voice.graph_buckets():
            timing = f"eager {b.eager_ms:.2f} ms, replayed {b.graph_ms:.2f}"
            print(f"graph {b.stage} {b.rows}x{b.length}: {timing}, {'kept' if b.kept else 'eager'}")
        if args.kernels and args.device.startswith("cuda"):
            print_kernels(core, prompt, args.kernels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
