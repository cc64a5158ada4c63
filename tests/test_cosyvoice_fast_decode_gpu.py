"""The fast decode path on CUDA: CUDA-graph steps equal the same steps run eagerly, the fast path equals upstream's
own loop (mask repaired) on fixed seeds in float32, half precision runs, and a batch equals each request alone.

The LLM is the full-size random one from ``VOICELAB_COSYVOICE_RANDOM_DIR`` when set (a ``random_model`` output),
else the tiny one built here. Needs an NVIDIA GPU, transformers, HyperPyYAML and an upstream checkout
(``VOICELAB_COSYVOICE_CODE``, else ``.cosy/upstream``); skipped without them.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.fixture_cosyvoice_llm import require_upstream, run_concurrently, tiny_llm

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
TOKENS = 48
T = TypeVar("T")
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def cuda_llm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU with CUDA")
    code = require_upstream()
    given = os.environ.get("VOICELAB_COSYVOICE_RANDOM_DIR")
    if given:
        from tools.cosyvoice_decode import load_llm

        return load_llm(Path(given), str(code), "cuda", "float32")
    return tiny_llm(tmp_path_factory.mktemp("tiny-llm")).cuda()


@pytest.fixture
def llm(cuda_llm: Any) -> Iterator[Any]:
    """The module's LLM with upstream's step mask repaired; every wrapper a test installs is removed after it."""
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    fix_step_mask(cuda_llm.llm)
    sampling = cuda_llm.sampling
    yield cuda_llm
    for name in ("inference_wrapper", "forward_one_step"):
        vars(cuda_llm).pop(name, None)
        vars(cuda_llm.llm).pop(name, None)
    cuda_llm.sampling = sampling


def _tokens(llm: Any, index: int, seed: int, tokens: int = TOKENS) -> list[int]:
    from tools.cosyvoice_decode import request_inputs

    torch.manual_seed(seed)
    return [int(t) for t in llm.inference(**request_inputs(llm, index, tokens))]


def _greedy(llm: Any) -> None:
    llm.sampling = functools.partial(llm.sampling.func, **{**llm.sampling.keywords, "top_k": 1, "tau_r": 2.0})


def _with_fast(llm: Any, graphs: bool, seeds: tuple[int, ...] = SEEDS) -> tuple[list[list[int]], Any]:
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, install_fast_decode

    decoder = install_fast_decode(llm, FastDecodeConfig(capacity=1024, graphs=graphs))
    try:
        return [_tokens(llm, seed, seed) for seed in seeds], decoder
    finally:
        del llm.inference_wrapper


def test_graph_steps_equal_eager_steps(llm: Any) -> None:
    graphed, decoder = _with_fast(llm, graphs=True)
    eager, _ = _with_fast(llm, graphs=False)
    assert decoder.runner.captured
    assert graphed == eager
    assert all(len(tokens) == TOKENS for tokens in graphed)
    reports = [r for r in decoder.runner.reports if r.stage != "llm prefill"]  # the panel: one per step graph
    assert len(reports) == len(decoder.runner.graphs) and sum(r.bytes for r in reports) > 0
    assert all(r.stage == "llm step" and r.kept and r.graph_ms > 0 and r.eager_ms > 0 for r in reports)
    assert all(r.graph_ms < r.eager_ms for r in reports if r.rows == 1)  # launch-bound: one row, one graph


def test_fast_path_equals_upstream_in_float32(llm: Any) -> None:
    """Same seed, same tokens. Our attention is not transformers' kernel, so log-probabilities differ by about
    1e-6; on the random model's flat distributions two of the top 26 candidates are sometimes that close, and one
    such near-tie reorders the sort and changes every later draw. So: at most one seed of three may part ways,
    and not before 16 tokens (a real mismatch in masking, positions or sampling diverges at once)."""
    upstream = [_tokens(llm, seed, seed) for seed in SEEDS]
    fast, _ = _with_fast(llm, graphs=True)
    same = [f == u for f, u in zip(fast, upstream, strict=True)]
    prefixes = [_agreed(f, u) for f, u in zip(fast, upstream, strict=True)]
    assert sum(same) >= len(SEEDS) - 1, prefixes
    assert all(equal or agreed >= 16 for equal, agreed in zip(same, prefixes, strict=True)), prefixes
    assert len({tuple(t) for t in fast}) == len(SEEDS)


def _agreed(first: list[int], second: list[int]) -> int:
    """How many leading tokens two sequences share."""
    count = 0
    while count < min(len(first), len(second)) and first[count] == second[count]:
        count += 1
    return count


def test_greedy_tokens_identical_to_upstream(llm: Any) -> None:
    _greedy(llm)
    upstream = [_tokens(llm, seed, seed) for seed in SEEDS]
    fast, _ = _with_fast(llm, graphs=True)
    assert fast == upstream


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_triton_kernels_replay_as_they_run_and_decode_as_pytorchs_step(cuda_llm: Any, dtype: str) -> None:
    """``decode_kernels=triton``: its graphs replay its eager steps token for token, and it decodes PyTorch's step's
    greedy tokens (sums taken in another order: near-ties may part ways, as against upstream above, in float32 not
    before 16 tokens; in bfloat16 the first four agree)."""
    pytest.importorskip("triton")
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, fix_step_mask, install_fast_decode

    llm = copy.deepcopy(cuda_llm).to(getattr(torch, dtype))
    fix_step_mask(llm.llm)
    _greedy(llm)

    def decode(**config: Any) -> tuple[list[list[int]], Any]:
        decoder = install_fast_decode(llm, FastDecodeConfig(capacity=1024, **config))
        try:
            return [_tokens(llm, seed, seed) for seed in SEEDS], decoder
        finally:
            del llm.inference_wrapper

    graphed, decoder = decode(graphs=True, kernels="triton")
    eager, _ = decode(graphs=False, kernels="triton")
    reference, _ = decode(graphs=True)
    assert decoder.runner.captured and decoder.runner.qwen.kernels == "triton"
    assert graphed == eager and all(len(tokens) == TOKENS for tokens in graphed)
    prefixes = [_agreed(t, r) for t, r in zip(graphed, reference, strict=True)]
    least = 16 if dtype == "float32" else 4  # bfloat16 rounds each kernel's output: near-ties part sooner
    assert all(t == r or agreed >= least for t, r, agreed in zip(graphed, reference, prefixes, strict=True)), prefixes


def test_auto_kernels_keep_one_graph_per_shape_and_decode_as_pytorchs_step(cuda_llm: Any) -> None:
    """``decode_kernels=auto``: every shape captured with both sides, one kept per shape (the panel lists both, the
    kept one marked), and the chosen steps decode PyTorch's step's greedy tokens (near-ties as above)."""
    pytest.importorskip("triton")
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, fix_step_mask, install_fast_decode

    llm = copy.deepcopy(cuda_llm)
    fix_step_mask(llm.llm)
    _greedy(llm)
    decoded = {}
    for kernels in ("auto", "torch"):
        decoder = install_fast_decode(llm, FastDecodeConfig(capacity=1024, kernels=kernels))
        try:
            decoded[kernels] = [_tokens(llm, seed, seed) for seed in SEEDS]
        finally:
            del llm.inference_wrapper
        if kernels == "auto":
            runner = decoder.runner
    assert runner.captured and set(runner.kernels_for) == set(runner.graphs)
    steps = [report for report in runner.reports if report.stage != "llm prefill"]
    assert {report.stage for report in steps} == {"llm step", "llm step (triton)"}
    assert len(steps) == 2 * len(runner.graphs)
    for shape, side in runner.kernels_for.items():
        kept = [r for r in steps if (r.rows, r.length) == shape and r.kept]
        assert len(kept) == 1 and kept[0].stage == ("llm step" if side == "torch" else "llm step (triton)")
    prefixes = [_agreed(a, t) for a, t in zip(decoded["auto"], decoded["torch"], strict=True)]
    assert all(a == t or agreed >= 16 for a, t, agreed in zip(*decoded.values(), prefixes, strict=True)), prefixes


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_graphs(cuda_llm: Any, dtype: str) -> None:
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    half = copy.deepcopy(cuda_llm).to(getattr(torch, dtype))
    fix_step_mask(half.llm)
    graphed, decoder = _with_fast(half, graphs=True)
    eager, _ = _with_fast(half, graphs=False)
    assert decoder.runner.cache.keys.dtype == getattr(torch, dtype)
    assert graphed == eager and all(len(tokens) == TOKENS for tokens in graphed)
    full, half_logp = _prefill_logp(cuda_llm), _prefill_logp(half)
    assert (full - half_logp.float()).abs().max() < 0.5  # the same distribution, to half precision
    del half
    torch.cuda.empty_cache()


def _prefill_logp(llm: Any) -> Any:
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    weight = llm.llm_decoder.weight
    cache = StaticKvCache(QwenShape.of(llm.llm.model.config), 1, 256, weight.dtype, weight.device)
    embeds = torch.randn(1, 100, weight.shape[1], generator=torch.Generator().manual_seed(5)) * 0.05
    with torch.inference_mode():
        return StepRunner(llm, cache, graphs=False).prefill(embeds.to(weight), 0)


def test_a_batch_of_different_requests_equals_each_run_alone(llm: Any) -> None:
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher

    def prompt(index: int) -> Any:
        return torch.randn(1, 60 + 40 * index, llm.llm_input_size, device="cuda") * 0.05

    jobs = [(prompt(i), 8, 16 + 8 * i, 100 + i) for i in range(6)]  # six requests, four slots: two wait
    batcher = DecodeBatcher(llm, BatchConfig(slots=4, capacity=1024))
    try:
        alone = [list(batcher.decode(p, lo, hi, seed=s)) for p, lo, hi, s in jobs]

        def decoded(job: tuple[Any, int, int, int]) -> list[int]:
            prompt, low, high, seed = job
            return list(batcher.decode(prompt, low, high, seed=seed))

        together = run_concurrently([functools.partial(decoded, job) for job in jobs], timeout_s=600)
    finally:
        batcher.close()
    assert batcher.runner.captured
    assert together == alone
    assert [len(t) for t in alone] == [16 + 8 * i for i in range(6)]


def test_the_driver_steps_on_its_own_stream_and_waits_for_a_prompt_made_on_another(llm: Any) -> None:
    """With ``own_stream`` (the ``decode_stream=on`` option) the batcher's steps leave the default stream to the
    flow and vocoder; a prompt written on the caller's stream behind ~0.1 s of device work is still read whole
    (the event hand-over), so the tokens are the same."""
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher

    base = torch.randn(1, 80, llm.llm_input_size, device="cuda") * 0.05
    batcher = DecodeBatcher(llm, BatchConfig(slots=2, capacity=1024, own_stream=True))
    try:
        assert batcher.stream is not None and batcher.stream != torch.cuda.default_stream()
        expected = list(batcher.decode(base.clone(), 8, 24, seed=7))
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # the caller's stream is busy before the prompt is written
            late = torch.empty_like(base)
            late.copy_(base)
            tokens = list(batcher.decode(late, 8, 24, seed=7))
    finally:
        batcher.close()
    assert tokens == expected


@pytest.mark.parametrize("shrink_rows", [False, True])
def test_batched_greedy_equals_upstream(llm: Any, shrink_rows: bool) -> None:
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, install_batched_decode

    _greedy(llm)
    upstream = [_tokens(llm, index, 0) for index in range(3)]
    batcher = install_batched_decode(llm, BatchConfig(slots=3, capacity=1024, shrink_rows=shrink_rows))
    try:
        results = run_concurrently([functools.partial(_tokens, llm, i, 0) for i in range(3)], timeout_s=600)
    finally:
        batcher.close()
    assert results == upstream


def _prompts(llm: Any) -> list[Any]:
    """Three prompt embeddings of different lengths (60, 80, 100 positions) on the GPU."""
    return [torch.randn(1, 60 + 20 * i, llm.llm_input_size, device="cuda") * 0.05 for i in range(3)]


def _side_by_side(batcher: Any, prompts: list[Any]) -> list[Any]:
    """The prompts decoded at once in ``batcher``: 40 tokens each (None for one still running), seed = index."""
    return run_concurrently(
        [functools.partial(lambda p, s: list(batcher.decode(p, 40, 40, seed=s)), p, i) for i, p in enumerate(prompts)],
        timeout_s=600,
    )


def _with_waits_counted(call: Callable[[], T]) -> tuple[T, list[str]]:
    """``call``'s result, and the ``file:line`` of every operation that waited for the device during it
    (``torch.cuda.set_sync_debug_mode``)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(1)
        try:
            result = call()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return result, [f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message)]


def test_a_batched_step_waits_for_the_device_twice_whatever_its_rows(llm: Any) -> None:
    """Three requests decoded side by side: every row of a step is sampled at once, so the host waits for the
    device about twice a step (the rows' top-k probabilities, then their tokens), where each row alone waited six
    or seven times a token (counted by ``torch.cuda.set_sync_debug_mode``)."""
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher

    prompts = _prompts(llm)
    batcher = DecodeBatcher(llm, BatchConfig(slots=4, capacity=1024, mask_stops=True))  # no early stop id
    try:
        list(batcher.decode(prompts[0], 4, 4, seed=1))  # graphs and caches warmed outside the count
        decoded, syncs = _with_waits_counted(functools.partial(_side_by_side, batcher, prompts))
    finally:
        batcher.close()
    tokens = sum(len(d) for d in decoded)
    assert tokens == 120
    where = {line: syncs.count(line) for line in set(syncs)}
    assert 40 <= len(syncs) <= 2 * 40 + 40, f"{len(syncs)} waits over {tokens} tokens in about 40 steps: {where}"


def test_device_sampling_never_waits_in_a_step_and_a_batch_equals_each_run_alone(llm: Any) -> None:
    """``decode_sampling=device``: three requests side by side draw the tokens each draws alone (each from its own
    seed's uniforms), and no operation in the token loop waits for the device (the tokens are read behind an
    event once the next step is queued); what waits is the prefills."""
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher

    prompts = _prompts(llm)
    batcher = DecodeBatcher(llm, BatchConfig(slots=4, capacity=1024, mask_stops=True, sampling="device"))
    try:
        alone = [list(batcher.decode(p, 40, 40, seed=i)) for i, p in enumerate(prompts)]
        together, syncs = _with_waits_counted(functools.partial(_side_by_side, batcher, prompts))
    finally:
        batcher.close()
    assert together == alone and [len(t) for t in alone] == [40, 40, 40]
    assert len({tuple(t) for t in alone}) == 3
    where = {line: syncs.count(line) for line in set(syncs)}
    assert not any(name.startswith(("device_sampling", "batch_decode")) for name in where), where
    assert len(syncs) <= 3 * 6, f"{len(syncs)} waits for 3 prefills and ~40 steps: {where}"


def test_one_slot_with_device_sampling_replays_its_draw_and_never_waits_in_the_token_loop(llm: Any) -> None:
    """``decode_slots=1`` with ``decode_sampling=device`` (the default): the one-row draw is captured, a seed
    fixes the tokens, and no operation in the token loop waits for the device (the prefill's waits aside)."""
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, install_fast_decode

    decoder = install_fast_decode(llm, FastDecodeConfig(capacity=1024, mask_stops=True, sampling="device"))
    try:
        assert decoder.sampler is not None and sorted(decoder.sampler.graphs) == [1]
        first = _tokens(llm, 0, 3)
        again, where = _with_waits_counted(functools.partial(_tokens, llm, 0, 3))
        other = _tokens(llm, 0, 4)
    finally:
        del llm.inference_wrapper
    assert first == again != other and len(first) == TOKENS
    assert not any(name.startswith(("device_sampling", "fast_decode")) for name in where), where


def test_prefill_graphs_equal_the_eager_prefill_and_never_wait(cuda_llm: Any) -> None:
    """Prompts of 60, 100 and 300 positions prefilled from their captured buckets (padded to 64, 128, 320): the
    first token's log-probabilities and the slot's keys as the eager prefill leaves them, the padding's keys
    nowhere in the slot, and no operation waiting for the device."""
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    weight = cuda_llm.llm_decoder.weight
    shape = QwenShape.of(cuda_llm.llm.model.config)
    graphed = StepRunner(cuda_llm, StaticKvCache(shape, 2, 1024, weight.dtype, weight.device), graphs=True)
    eager = StepRunner(cuda_llm, StaticKvCache(shape, 2, 1024, weight.dtype, weight.device), graphs=False)
    assert graphed.prefills is not None and {64, 128, 320} <= set(graphed.prefills.graphs)
    assert {r.length for r in graphed.reports if r.stage == "llm prefill" and r.kept} == set(graphed.prefills.graphs)
    with torch.inference_mode():
        for length in (60, 100, 300):
            prompt = torch.randn(1, length, cuda_llm.llm_input_size, device="cuda") * 0.05
            got, where = _with_waits_counted(functools.partial(graphed.prefill, prompt, 1))
            expected = eager.prefill(prompt, 1)
            assert where == [], where
            assert (got - expected).abs().max() < 1e-3
            keys, reference = graphed.cache.keys[:, 1, :, :length], eager.cache.keys[:, 1, :, :length]
            assert (keys - reference).abs().max() <= 1e-3 * reference.abs().max()
            assert not graphed.cache.keys[:, 1, :, length:].any()
            graphed.cache.keys.zero_()
