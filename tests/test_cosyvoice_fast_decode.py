"""The fast decode path against upstream's own LLM code, on the CPU (its static cache run eagerly).

Needs transformers, HyperPyYAML and an upstream CosyVoice checkout (see ``fixture_cosyvoice_llm``): CI and the
default .venv have none of them, so every test here skips there. Run them from a CosyVoice environment, e.g.
``.venv-cosy/bin/python -m pytest -q tests/test_cosyvoice_fast_decode.py`` (or ``./run.sh test --backend cosyvoice``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_cosyvoice_llm import require_upstream, run_concurrently, tiny_llm, upstream_sampling

torch = pytest.importorskip("torch")
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_upstream()
    return tmp_path_factory.mktemp("tiny-llm")


@pytest.fixture
def llm(llm_dir: Path) -> Any:
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    model = tiny_llm(llm_dir)
    fix_step_mask(model.llm)
    return model


def _inputs(text_tokens: int = 3) -> dict[str, Any]:
    """Keyword arguments of ``Qwen2LM.inference``: a zero-shot prompt, ``text_tokens`` of text (min 2x, max 6x)."""
    gen = torch.Generator().manual_seed(7)
    text = torch.randint(0, 5000, (1, text_tokens), generator=gen)
    prompt_text = torch.randint(0, 5000, (1, 4), generator=gen)
    prompt_speech = torch.randint(0, 6561, (1, 6), generator=gen)
    return {
        "text": text,
        "text_len": torch.tensor([text_tokens]),
        "prompt_text": prompt_text,
        "prompt_text_len": torch.tensor([4]),
        "prompt_speech_token": prompt_speech,
        "prompt_speech_token_len": torch.tensor([6]),
        "embedding": torch.zeros(1, 192),
        "max_token_text_ratio": 6,
        "min_token_text_ratio": 2,
    }


def _tokens(run: Callable[[], Iterator[int]], seed: int) -> list[int]:
    torch.manual_seed(seed)
    return [int(t) for t in run()]


def _upstream_then_fast(llm: Any, seeds: tuple[int, ...], **config: Any) -> tuple[list[list[int]], list[list[int]]]:
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, install_fast_decode

    def run() -> Iterator[int]:
        return llm.inference(**_inputs())

    upstream = [_tokens(run, seed) for seed in seeds]
    install_fast_decode(llm, FastDecodeConfig(**config))
    return upstream, [_tokens(run, seed) for seed in seeds]


def test_sampling_draws_upstreams_token_for_every_seed() -> None:
    require_upstream()
    from voicelab.backends.cosyvoice.sampling import RasParams, TokenRules

    common, rules = upstream_sampling(), TokenRules(RasParams(), frozenset(), 0, None)  # min_len 0: no end mask
    gen = torch.Generator().manual_seed(11)
    flat = torch.randn(6564, generator=gen)
    peaked = flat * 8
    tied = torch.randn(40, generator=gen).repeat_interleave(4)[:6564].repeat(42)[:6564]  # stable sort order matters
    for name, scores in {"flat": flat, "peaked": peaked, "tied": tied, "bf16": peaked.bfloat16()}.items():
        likely = int(scores.argmax())
        for decoded in ([], [likely] * 10, [1, 2, likely]):
            drawn = set()
            for seed in range(12):
                torch.manual_seed(seed)
                theirs = common.ras_sampling(scores.log_softmax(0), list(decoded), 25, top_p=0.8, top_k=25)
                torch.manual_seed(seed)
                ours = rules.sample(scores.log_softmax(0), decoded, 0)
                assert ours == theirs, (name, decoded, seed)
                drawn.add(ours)
            assert len(drawn) > 1 or (name in ("peaked", "bf16") and not decoded), (name, decoded)  # seeds matter


def test_rows_drawn_together_equal_each_row_drawn_alone() -> None:
    """A decode step's rows sampled at once (each from its own generator, some below min_len, two with their
    likeliest token just decoded, so upstream's whole-softmax redraw fires) give each row's token drawn alone, and
    the log-probabilities are left as they were."""
    import torch

    from voicelab.backends.cosyvoice.sampling import RasParams, Row, TokenRules

    rules = TokenRules(RasParams(), frozenset({6561}), 6561, torch.tensor([6562, 6563]))
    gen = torch.Generator().manual_seed(3)
    sharpness = torch.tensor([[1.0], [8.0], [2.0], [8.0], [0.5], [4.0]])
    for dtype in (torch.float32, torch.bfloat16):
        logp = (torch.randn(6, 6564, generator=gen) * sharpness).to(dtype).log_softmax(1)
        likely = logp.float().argmax(1).tolist()
        history = [[], [likely[1]] * 3, [1, 2], [likely[3]], list(range(40)), [7, likely[5]]]
        redrawn = 0
        for seed in range(8):
            rows = [Row(decoded, 2, torch.Generator().manual_seed(seed * 10 + i)) for i, decoded in enumerate(history)]
            before = logp.clone()
            together = rules.sample_rows(logp, rows)
            assert torch.equal(logp, before)
            for index, decoded in enumerate(history):
                alone = rules.sample(logp[index], decoded, 2, torch.Generator().manual_seed(seed * 10 + index))
                assert together[index] == alone, (dtype, seed, index)
            redrawn += (together[1] != likely[1]) + (together[3] != likely[3])
        assert redrawn, "the repetition rule never replaced a token, so its batched redraw went untested"


def test_nucleus_size_adds_in_the_scores_dtype() -> None:
    from voicelab.backends.cosyvoice.sampling import nucleus_size

    assert nucleus_size(torch.tensor([0.5, 0.29, 0.2, 0.01]), 0.8, 25) == 3  # 0.79 < 0.8: one more
    assert nucleus_size(torch.tensor([0.9, 0.1]), 0.8, 25) == 1
    assert nucleus_size(torch.full((40,), 0.01), 0.8, 25) == 25  # top_k bounds it
    assert nucleus_size(torch.tensor([0.5, 0.29, 0.2]).bfloat16(), 0.8, 25) == 3


def test_fast_path_draws_upstreams_tokens_for_fixed_seeds(llm: Any) -> None:
    upstream, fast = _upstream_then_fast(llm, SEEDS)
    assert fast == upstream
    assert all(6 <= len(tokens) <= 18 for tokens in fast)
    assert len({tuple(tokens) for tokens in fast}) == len(SEEDS)  # seeds differ, so the comparison can fail


def test_greedy_tokens_identical(llm_dir: Path) -> None:
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    llm = tiny_llm(llm_dir, top_k=1, tau_r=2.0)  # one candidate, the repetition rule never fires
    fix_step_mask(llm.llm)
    upstream, fast = _upstream_then_fast(llm, (0, 5))
    assert fast == upstream
    assert fast[0] == fast[1] and len(fast[0]) == 18  # greedy: the seed does not matter


def test_stop_token_after_min_len_and_masked_stops(llm: Any) -> None:
    with torch.no_grad():
        llm.llm_decoder.bias[llm.speech_token_size] += 1000.0  # the end token wins as soon as it is allowed
    upstream, fast = _upstream_then_fast(llm, (0,))
    assert fast == upstream and len(fast[0]) == 6  # min_len = 2 x 3 text tokens
    del llm.inference_wrapper
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, install_fast_decode

    install_fast_decode(llm, FastDecodeConfig(mask_stops=True))
    assert len(_tokens(lambda: llm.inference(**_inputs()), 0)) == 18  # max_len = 6 x 3


def test_requests_too_long_for_the_cache_run_upstreams_loop(llm: Any) -> None:
    upstream, fast = _upstream_then_fast(llm, (3,), capacity=16)
    assert fast == upstream


def test_a_request_asking_more_than_the_cache_holds_is_cut_to_it_not_sent_to_upstreams_loop(llm_dir: Path) -> None:
    """Upstream's max_len (6x text here, 20x in the real config) is a ceiling: a long text must not lose the fast
    path for it. Greedy, so the fast path's tokens are upstream's first ones, as many as the cache has room for."""
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, fix_step_mask, install_fast_decode
    from voicelab.backends.cosyvoice.kv_cache import decode_room

    llm = tiny_llm(llm_dir, top_k=1, tau_r=2.0)
    fix_step_mask(llm.llm)
    seen: list[int] = []
    original = llm.inference_wrapper

    def spy(lm_input: torch.Tensor, *args: Any) -> Iterator[int]:
        seen.append(int(lm_input.shape[1]))
        return original(lm_input, *args)

    llm.inference_wrapper = spy
    upstream = _tokens(lambda: llm.inference(**_inputs()), 0)
    assert len(upstream) == 18
    decoder = install_fast_decode(llm, FastDecodeConfig(capacity=seen[0] + 10))
    fast = _tokens(lambda: llm.inference(**_inputs()), 0)
    assert fast == upstream[:10] and not decoder.lock.locked()
    assert len(seen) == 1, "the long request ran upstream's loop (the spy under the fast path) instead of the fast path"
    assert decode_room(15, 6, 18, 20) is None and decode_room(15, 6, 18, 40) == 18


def test_static_step_log_probs_match_a_full_forward(llm: Any) -> None:
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    embeds = torch.randn(1, 9, 896, generator=torch.Generator().manual_seed(3)) * 0.05
    token = 123
    full = torch.cat([embeds, llm.speech_embedding.weight[token].view(1, 1, -1)], dim=1)
    cache = StaticKvCache(QwenShape.of(llm.llm.model.config), 1, 256, torch.float32, torch.device("cpu"))
    runner = StepRunner(llm, cache, graphs=False)
    with torch.inference_mode():
        hidden = llm.llm.model(inputs_embeds=full, output_hidden_states=True).hidden_states[-1]
        expected = llm.llm_decoder(hidden).log_softmax(-1)[0]
        first = runner.prefill(embeds, 0)
        runner.tokens.fill_(token)
        runner.positions.fill_(9)
        second = runner.step(10)[0]
    torch.testing.assert_close(first, expected[8], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(second, expected[9], atol=1e-4, rtol=1e-4)


def test_a_prompt_padded_to_its_prefill_bucket_fills_its_slot_as_prefilled_alone(llm: Any) -> None:
    """The path each prefill graph holds (padded to the bucket, staged, copied into the slot), run eagerly: the same
    first-token log-probabilities and the same keys and values at the prompt's positions of the slot asked for,
    nothing written past them or into other slots; a prompt longer than every bucket is left to the plain prefill."""
    from voicelab.backends.cosyvoice.kv_cache import QwenShape, StaticKvCache
    from voicelab.backends.cosyvoice.prefill_graphs import PrefillGraphs
    from voicelab.backends.cosyvoice.step_graphs import StepRunner

    shape = QwenShape.of(llm.llm.model.config)
    plain = StepRunner(llm, StaticKvCache(shape, 2, 64, torch.float32, torch.device("cpu")), graphs=False)
    cache = StaticKvCache(shape, 2, 64, torch.float32, torch.device("cpu"))
    vocabulary = plain.logp.shape[1]
    padded = PrefillGraphs(StepRunner(llm, cache, graphs=False).qwen, cache, plain._head, vocabulary, graphs=False,
                           buckets=(16, 32))  # fmt: skip
    with torch.inference_mode():
        for length, slot in ((9, 1), (23, 0), (16, 1)):
            prompt = _prompt(length, seed=length)
            expected = plain.prefill(prompt, slot)
            got = padded.prefill(prompt, slot)
            assert got is not None
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
            for mine, theirs in ((cache.keys, plain.cache.keys), (cache.values, plain.cache.values)):
                torch.testing.assert_close(mine[:, slot, :, :length], theirs[:, slot, :, :length], atol=1e-5, rtol=0)
        assert not cache.keys[:, :, :, 23:].any() and not cache.values[:, 1, :, 16:].any()
        assert padded.prefill(_prompt(33, seed=5), 0) is None
    assert padded.graphs == {} and padded.reports == []  # on the CPU nothing is captured


def test_upstream_eager_step_attends_to_every_position_once_fixed(llm_dir: Path) -> None:
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    llm = tiny_llm(llm_dir)
    embeds = torch.randn(1, 8, 896, generator=torch.Generator().manual_seed(4)) * 0.05

    def last_step() -> Any:
        with torch.inference_mode():
            _, cache = llm.llm.forward_one_step(embeds[:, :7], torch.ones(1, 7, 7, dtype=torch.bool))
            out, _ = llm.llm.forward_one_step(embeds[:, 7:], torch.ones(1, 1, 1, dtype=torch.bool), cache)
        return out[0, -1]

    with torch.inference_mode():
        full = llm.llm.model(inputs_embeds=embeds, output_hidden_states=True).hidden_states[-1][0, -1]
    broken = last_step()
    fix_step_mask(llm.llm)
    torch.testing.assert_close(last_step(), full, atol=1e-4, rtol=1e-4)
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:  # the bug fix_step_mask exists for
        assert not torch.allclose(broken, full, atol=1e-3)


def _prompt(length: int, seed: int) -> Any:
    return torch.randn(1, length, 896, generator=torch.Generator().manual_seed(seed)) * 0.05


def test_a_batch_of_different_requests_equals_each_run_alone(llm: Any) -> None:
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher

    jobs = [(_prompt(9, 1), 4, 12, 10), (_prompt(15, 2), 2, 6, 11), (_prompt(5, 3), 8, 16, 12)]  # leave early, late
    batcher = DecodeBatcher(llm, BatchConfig(slots=2, capacity=128))  # three requests, two slots: one waits
    try:
        alone = [list(batcher.decode(p, lo, hi, seed=s)) for p, lo, hi, s in jobs]
        cycles_alone = dict(batcher.cycles.count)

        def decoded(job: tuple[Any, int, int, int]) -> list[int]:
            prompt, low, high, seed = job
            return list(batcher.decode(prompt, low, high, seed=seed))

        together = run_concurrently([functools.partial(decoded, job) for job in jobs], timeout_s=300)
    finally:
        batcher.close()
    assert together == alone
    assert [len(tokens) for tokens in alone] == [12, 6, 16]
    assert cycles_alone == {1: 34}  # a cycle per token, one row each
    rows = {n: count - cycles_alone.get(n, 0) for n, count in batcher.cycles.count.items()}
    assert rows.get(2, 0) > 0 and sum(n * count for n, count in rows.items()) == 34  # side by side: two rows a cycle
    assert "2 rows" in batcher.cycles.line()
    assert len({tuple(t[:6]) for t in alone}) == 3


def test_cycle_times_log_the_mean_by_row_count_then_start_again(caplog: pytest.LogCaptureFixture) -> None:
    from voicelab.backends.cosyvoice.batch_decode import CycleTimes

    cycles = CycleTimes(every=4)
    with caplog.at_level("DEBUG", logger="voicelab.backends.cosyvoice.batch_decode"):
        for rows, seconds in ((1, 0.0016), (16, 0.010), (16, 0.012), (1, 0.0018), (2, 0.002)):
            cycles.add(rows, seconds)
    assert [r.getMessage() for r in caplog.records] == [
        "decode cycles, ms by rows: 1 rows 1.70 (x2), 16 rows 11.00 (x2)"
    ]
    assert cycles.count == {2: 1}


@pytest.mark.parametrize("shrink_rows", [False, True])
def test_batched_greedy_decode_equals_upstreams_loop(llm_dir: Path, shrink_rows: bool) -> None:
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, install_batched_decode
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    llm = tiny_llm(llm_dir, top_k=1, tau_r=2.0)
    fix_step_mask(llm.llm)
    upstream = _tokens(lambda: llm.inference(**_inputs()), 0)
    batcher = install_batched_decode(llm, BatchConfig(slots=3, capacity=128, shrink_rows=shrink_rows))
    try:
        assert _tokens(lambda: llm.inference(**_inputs()), 0) == upstream
    finally:
        batcher.close()


def test_decode_options_parse_and_cpu_auto_keeps_upstreams_loop(llm: Any) -> None:
    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice, prepare_llm

    assert DecodeChoice.parse("on", "4") == DecodeChoice("on", 4, sampling="auto")  # the fast path draws on the device
    for mode, slots in (("fast", "1"), ("on", "0"), ("on", "two")):
        with pytest.raises(ValueError):
            DecodeChoice.parse(mode, slots)
    assert prepare_llm(llm, "cpu", DecodeChoice(), mask_stops=False) is None
    assert "inference_wrapper" not in vars(llm)
