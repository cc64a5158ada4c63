"""CosyVoice's speech-token LLM alone: upstream's eager loop vs VoiceLab's fast decode path, side by side in one run.

    python -m tools.cosyvoice_decode --model-dir DIR [--code DIR] [--device cuda] [--dtype float32]
        [--tokens 200] [--requests 4] [--clients 1,2,4,8,16] [--json OUT.json]

Both sides get the same requests: the prompt embedding upstream's ``Qwen2LM.inference`` builds from random text
tokens (20), a prompt transcript (10) and a prompt's speech tokens (150, a 6 s prompt), and exactly ``--tokens``
speech tokens each (min = max length, stop ids masked, as VoiceLab does for random weights). Upstream runs as its
``llm_job`` thread runs it (``inference`` with its own loop and ``ras_sampling``, as loaded: no mask repair), one
request at a time and 2 at once (its webui's queue); VoiceLab runs ``FastDecoder`` (static cache, CUDA-graph
steps, sampling on the device) one at a time, then ``DecodeBatcher`` with 1..N concurrent clients, then a lone
request in that batcher with ``shrink_rows``. Reported per side: tokens/s over all requests, per-request latency
p50, time to the first token p50, peak allocated; and what each decoder's cache and graph pool take.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROMPT_SPEECH, PROMPT_TEXT, TEXT = 150, 10, 20
END_OF_PROMPT = 151646  # CosyVoice3's LLM asserts it is in the text


@dataclass(frozen=True)
class Row:
    side: str
    clients: int
    requests: int
    tokens_per_s: float
    latency_p50_s: float
    first_token_p50_ms: float
    peak_allocated_mb: float


def load_llm(model_dir: Path, code_dir: str, device: str, dtype: str) -> Any:
    """Upstream's LLM of a model directory alone, float32 weights read as ``upstream.load_runtime`` reads them."""
    import torch
    from hyperpyyaml import load_hyperpyyaml

    from voicelab.backends.cosyvoice.upstream import TORCH_DTYPES, block_downloads, model_version

    block_downloads()
    if code_dir and str(Path(code_dir).resolve()) not in sys.path:
        sys.path.insert(0, str(Path(code_dir).resolve()))
    version = model_version(model_dir)
    with open(model_dir / f"cosyvoice{version}.yaml") as handle:
        configs = load_hyperpyyaml(handle, overrides={"qwen_pretrain_path": str(model_dir / "CosyVoice-BlankEN")})
    llm = configs["llm"].to(torch.float32)
    del configs
    llm.load_state_dict(torch.load(model_dir / "llm.pt", map_location="cpu", weights_only=True), strict=True)
    return llm.to(device=device, dtype=TORCH_DTYPES[dtype]).eval()


def mask_upstream_stops(llm: Any) -> Any:
    """Upstream's sampler never picks a stop id (what ``upstream._mask_stop_tokens`` does for random weights);
    returns the unwrapped sampler."""
    stops = list(llm.stop_token_ids)
    original = llm.sampling

    def sampling(scores: Any, decoded: list[int], top_k: int) -> int:
        scores[stops] = -float("inf")
        return int(original(scores, decoded, top_k))

    llm.sampling = sampling
    return original


def request_inputs(llm: Any, index: int, tokens: int) -> dict[str, Any]:
    """``inference`` keyword arguments for request ``index``, making exactly ``tokens`` speech tokens."""
    import torch

    gen = torch.Generator().manual_seed(index)
    device = llm.llm_decoder.weight.device
    prompt_text = torch.randint(0, 5000, (1, PROMPT_TEXT), generator=gen)
    prompt_text[0, -1] = END_OF_PROMPT
    ratio = tokens / TEXT
    return {
        "text": torch.randint(0, 5000, (1, TEXT), generator=gen).to(device),
        "text_len": torch.tensor([TEXT], device=device),
        "prompt_text": prompt_text.to(device),
        "prompt_text_len": torch.tensor([PROMPT_TEXT], device=device),
        "prompt_speech_token": torch.randint(0, 6561, (1, PROMPT_SPEECH), generator=gen).to(device),
        "prompt_speech_token_len": torch.tensor([PROMPT_SPEECH], device=device),
        "embedding": torch.zeros(1, 192, device=device),
        "max_token_text_ratio": ratio,
        "min_token_text_ratio": ratio,
    }


def _one(run: Callable[[], Iterator[int]]) -> tuple[float, float, int]:
    """(latency s, first token s, tokens) of one request."""
    started = time.perf_counter()
    first, count = 0.0, 0
    for _ in run():
        count += 1
        if count == 1:
            first = time.perf_counter() - started
    return time.perf_counter() - started, first, count


def measure(side: str, llm: Any, clients: int, requests: int, tokens: int) -> Row:
    """``requests`` requests from ``clients`` threads at once through ``llm.inference``."""
    import torch

    cuda = llm.llm_decoder.weight.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    results: list[tuple[float, float, int]] = []
    lock = threading.Lock()
    work = list(range(requests))

    def client() -> None:
        while True:
            with lock:
                if not work:
                    return
                index = work.pop()
            torch.manual_seed(index)
            result = _one(functools.partial(llm.inference, **request_inputs(llm, index, tokens)))
            with lock:
                results.append(result)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    made = sum(r[2] for r in results)
    return Row(
        side, clients, requests, made / wall, statistics.median(r[0] for r in results),
        1000 * statistics.median(r[1] for r in results), peak,
    )  # fmt: skip


def _device_bytes(cuda: bool) -> tuple[int, int]:
    """(allocated, reserved) on the current CUDA device; zeros elsewhere."""
    import torch

    if not cuda:
        return 0, 0
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()


def _grown(name: str, before: tuple[int, int], after: tuple[int, int]) -> dict[str, float]:
    """What building a decoder (its static cache, its graphs' pool) added, in MiB."""
    return {
        f"{name}: cache allocated MiB": (after[0] - before[0]) / 2**20,
        f"{name}: cache + graph pool reserved MiB": (after[1] - before[1]) / 2**20,
    }


def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, float]]:
    import torch

    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, install_batched_decode
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, install_fast_decode

    llm = load_llm(Path(args.model_dir), args.code, args.device, args.dtype)
    sampler = mask_upstream_stops(llm)
    with torch.inference_mode():
        measure("warm-up", llm, 1, 1, 8)
    rows = [measure("upstream eager", llm, c, args.requests, args.tokens) for c in (1, 2)]
    llm.sampling = sampler  # the fast path reads ras_sampling's parameters and masks stops itself
    cuda = args.device.startswith("cuda")
    before = _device_bytes(cuda)
    decoder = install_fast_decode(llm, FastDecodeConfig(mask_stops=True))
    memory = _grown("fast", before, _device_bytes(cuda))
    memory["fast_graphs_captured"] = float(len(decoder.runner.graphs))
    measure("warm-up", llm, 1, 1, 8)
    rows.append(measure("fast (1 slot)", llm, 1, max(args.requests, 4), args.tokens))
    clients = [int(c) for c in args.clients.split(",")]
    before = _device_bytes(cuda)
    batcher = install_batched_decode(llm, BatchConfig(slots=max(clients), mask_stops=True))
    memory.update(_grown(f"batch {max(clients)} slots", before, _device_bytes(cuda)))
    memory["batch_graphs_captured"] = float(len(batcher.runner.graphs))
    try:
        for count in clients:
            rows.append(measure("fast batched", llm, count, max(2 * count, args.requests), args.tokens))
    finally:
        batcher.close()
    batcher = install_batched_decode(llm, BatchConfig(slots=max(clients), mask_stops=True, shrink_rows=True))
    try:  # a lone request in the same large cache, stepping only the slots in use
        rows.append(measure("batched, shrink", llm, 1, max(args.requests, 4), args.tokens))
    finally:
        batcher.close()
    return rows, memory


def report(rows: Sequence[Row], memory: dict[str, float]) -> str:
    base = rows[0]
    lines = [
        f"{'side':16} {'clients':>7} {'reqs':>5} {'tokens/s':>9} {'x upstr':>8} {'lat p50 s':>9} "
        f"{'x faster':>8} {'1st tok ms':>10} {'peak MiB':>9}"
    ]
    for row in rows:
        lines.append(
            f"{row.side:16} {row.clients:7d} {row.requests:5d} {row.tokens_per_s:9.1f} "
            f"{row.tokens_per_s / base.tokens_per_s:8.2f} {row.latency_p50_s:9.3f} "
            f"{base.latency_p50_s / row.latency_p50_s:8.2f} {row.first_token_p50_ms:10.1f} {row.peak_allocated_mb:9.0f}"
        )
    lines += [f"{name}: {value:.1f}" for name, value in memory.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.cosyvoice_decode", description=__doc__)
    parser.add_argument("--model-dir", required=True, help="a CosyVoice2/3 model directory (random_model output)")
    parser.add_argument("--code", default="", help="an upstream FunAudioLLM/CosyVoice checkout")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--tokens", type=int, default=200, help="speech tokens per request (8 s of speech)")
    parser.add_argument("--requests", type=int, default=4, help="requests per upstream measurement")
    parser.add_argument("--clients", default="1,2,4,8,16", help="concurrent clients for the batched path")
    parser.add_argument("--json", default="", help="also write the rows here")
    args = parser.parse_args(argv)
    rows, memory = run(args)
    print(f"CosyVoice LLM decode, {args.model_dir}, {args.device}, {args.dtype}, {args.tokens} tokens a request")
    print(report(rows, memory))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "memory": memory}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
