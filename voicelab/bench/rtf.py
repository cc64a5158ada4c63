"""Side-by-side speed of our PyTorch Piper backend and onnxruntime on the same voice and sentences.

Both runtimes get the same phoneme ids, the same thread count and the same scales (noise_w = 0 so
both predict identical durations and do identical work); runs are interleaved, alternating which
goes first, and each sentence's median over the repeats is kept. The last line is
``torch/onnxruntime time ratio: X`` (sum of torch medians / sum of onnxruntime medians).
"""

from __future__ import annotations

import os
import sys

# PyTorch's OpenMP (libgomp) reads this once, when torch loads. Passive waiting stops idle worker
# threads from spinning between operations, which on a small, shared CPU steals the cores the work
# needs (measured on the 2-core dev box under load: about 2.5x slower with spinning). Imports that
# load torch therefore come after this line; the app's worker process needs the same setting.
_torch_loaded_early = "torch" in sys.modules
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from voicelab.backends.piper.backend import PiperBackend, VitsControls  # noqa: E402

SENTENCES = (
    "Hi there.",
    "Are you coming to the party tonight?",
    "It costs 42 dollars and 17 cents, payable by March 3rd, 2021.",
    "Wait, no; that's not right: the train leaves at half past nine, not ten!",
    "The quick brown fox jumps over the lazy dog, and then it runs away into the forest to find its friends.",
)
LONG_UTTERANCE = (
    "On a quiet morning in early spring, the old lighthouse keeper climbed the winding stairs once more, "
    "polished the great lens until it gleamed, and watched the fishing boats drift slowly out to sea."
)


@dataclass(frozen=True)
class Row:
    chars: int
    audio_s: float
    torch_s: float
    ort_s: float

    @property
    def ratio(self) -> float:
        return self.torch_s / self.ort_s


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="voicelab bench rtf", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for both runtimes")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] for PyTorch")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per sentence and runtime")
    parser.add_argument("--voice", default=None, help="a Piper .onnx voice (default: en_US-joe-medium)")
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="time PyTorch alone (e.g. on a GPU box given converted .pt weights, where no .onnx is at hand)",
    )
    parser.add_argument(
        "--ort-spinning",
        choices=("on", "off"),
        default="on",
        help="onnxruntime's busy-waiting worker threads (on is its default, as Piper runs it)",
    )
    return parser.parse_args(argv)


def make_session(model_path: str, threads: int, device: str, spinning: bool = True) -> ort.InferenceSession:
    """onnxruntime with the same intra-op thread count; CUDA provider when asked for and installed."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    providers = ["CPUExecutionProvider"]
    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(model_path, options, providers=providers)


def timed(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def measure(
    backend: PiperBackend,
    session: ort.InferenceSession | None,
    ids: list[int],
    repeats: int,
    sync: Callable[[], None],
) -> tuple[float, float, float]:
    """(audio seconds, torch median s, onnxruntime median s) for one sentence, runs interleaved."""
    config = backend.config
    controls = VitsControls(noise_scale=config.noise_scale, length_scale=config.length_scale, noise_w=0.0)
    feed = {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([config.noise_scale, config.length_scale, 0.0], dtype=np.float32),
    }
    if config.num_speakers > 1:
        feed["sid"] = np.array([config.default_speaker_id], dtype=np.int64)
    audio = backend.synthesize_ids([ids], controls, None)[0]  # warm-up, both runtimes
    torch_times: list[float] = []
    ort_times: list[float] = []
    runs: list[tuple[list[float], Callable[[], object]]] = [
        (torch_times, lambda: backend.synthesize_ids([ids], controls, None))
    ]
    if session is not None:
        session.run(None, feed)
        runs.append((ort_times, lambda: session.run(None, feed)))
    for r in range(repeats):
        for times, fn in runs if r % 2 == 0 else runs[::-1]:
            times.append(timed(fn, sync))
    ort_median = statistics.median(ort_times) if ort_times else float("nan")
    return len(audio) / backend.sample_rate, statistics.median(torch_times), ort_median


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    backend = PiperBackend(args.voice)
    backend.load(args.device, args.dtype)
    session = (
        None
        if args.no_reference
        else make_session(str(backend.model_path), args.threads, args.device, args.ort_spinning == "on")
    )
    cuda = backend.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    print(f"voice {backend.voice_name}; torch {torch.__version__} on {backend.device} ({backend.dtype}), ", end="")
    if session is not None:
        print(f"onnxruntime {ort.__version__} on {session.get_providers()[0]} (spinning {args.ort_spinning}); ", end="")
    print(f"{args.threads} threads; {args.repeats} repeats")
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE" or _torch_loaded_early:
        print("note: torch was loaded before OMP_WAIT_POLICY=PASSIVE could apply; CPU figures may suffer under load")
    print(f"{'chars':>6} {'audio s':>8} {'torch s':>8} {'ort s':>8} {'ratio':>6}")
    rows: list[Row] = []
    for text in (*SENTENCES, LONG_UTTERANCE):
        ids = list(backend.text_to_sentences(text)[0])  # each text is one sentence
        row = Row(len(text), *measure(backend, session, ids, args.repeats, sync))
        rows.append(row)
        print(f"{row.chars:>6} {row.audio_s:>8.2f} {row.torch_s:>8.3f} {row.ort_s:>8.3f} {row.ratio:>6.2f}")
    long = rows[-1]
    print(f"RTF for a {long.audio_s:.1f} s utterance: torch {long.torch_s / long.audio_s:.4f}, ", end="")
    print(f"onnxruntime {long.ort_s / long.audio_s:.4f}")
    if session is None:
        print("torch/onnxruntime time ratio: not measured (--no-reference)")
        return 0
    ratio = sum(r.torch_s for r in rows) / sum(r.ort_s for r in rows)
    print(f"torch/onnxruntime time ratio: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
