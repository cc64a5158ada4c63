"""``decode_sampling=device``: upstream's repetition-aware sampling drawn on the device, checked against the
distribution upstream's rules define (its nucleus, its whole-softmax redraw, the end id before ``min_len``, banned
ids), and a slot's tokens against its seed alone. Needs only torch: runs in the default environment."""

from __future__ import annotations

import functools
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from voicelab.backends.cosyvoice.device_sampling import SlotSampler, draw_tokens  # noqa: E402
from voicelab.backends.cosyvoice.sampling import RasParams, TokenRules, nucleus_size  # noqa: E402

VOCABULARY, DRAWS = 512, 40_000  # a small vocabulary (CosyVoice2's: 6,564) keeps 40,000 draws quick on the CPU
RULES = TokenRules(RasParams(), frozenset({509}), 509, torch.tensor([510, 511]))


def _logp(sharpness: float, seed: int) -> torch.Tensor:
    return (torch.randn(VOCABULARY, generator=torch.Generator().manual_seed(seed)) * sharpness).log_softmax(0)


def _nucleus(logp: torch.Tensor, min_len_met: bool = True) -> torch.Tensor:
    """Upstream's first draw's distribution over the vocabulary, from ``nucleus_size`` (the exact sampler's)."""
    scores = logp.clone()
    scores[RULES.banned] = -float("inf")
    if not min_len_met:
        scores[RULES.end_id] = -float("inf")
    prob = scores.softmax(0)
    top, ids = prob.sort(descending=True, stable=True)
    count = nucleus_size(top[:25], 0.8, 25)
    expected = torch.zeros(VOCABULARY, dtype=torch.float64)
    expected[ids[:count]] = top[:count].double() / top[:count].double().sum()
    return expected


def _drawn(logp: torch.Tensor, window: list[int], count: int = 5, min_len: int = 0, seed: int = 0) -> torch.Tensor:
    """How often each id comes out of ``DRAWS`` rows with the same scores and history, each its own uniforms."""
    gen = torch.Generator().manual_seed(seed)
    uniforms = torch.rand(DRAWS, 2, generator=gen)
    history = torch.tensor(window + [-1] * (10 - len(window))).expand(DRAWS, 10)
    counts, mins = torch.full((DRAWS,), count), torch.full((DRAWS,), min_len)
    tokens = draw_tokens(RULES, logp.expand(DRAWS, -1), uniforms, history, counts, mins)
    return torch.bincount(tokens, minlength=VOCABULARY).double() / DRAWS


def _total_variation(a: torch.Tensor, b: torch.Tensor, bins: torch.Tensor | None = None) -> float:
    """Between two distributions over the vocabulary; with ``bins``, over those ids each and the rest as one."""
    if bins is not None:
        rest = torch.ones(VOCABULARY, dtype=torch.bool)
        rest[bins] = False
        a, b = (torch.cat([d[bins], d[rest].sum()[None]]) for d in (a, b))
    return float((a - b).abs().sum() / 2)


def _cut_by_top_p() -> torch.Tensor:
    """Log-probabilities whose nucleus top_p cuts at three candidates (sums before them 0, 0.5, 0.75; then 0.85)."""
    prob = torch.full((VOCABULARY,), 1e-9)
    prob[[40, 7, 300, 12, 5]] = torch.tensor([0.5, 0.25, 0.1, 0.1, 0.05])
    return (prob / prob.sum()).log()


@pytest.mark.parametrize("shape", ["flat", "sharp", "peaked", "cut by top_p"])
def test_first_draw_follows_upstreams_nucleus(shape: str) -> None:
    """Flat and sharp: top_k (25) bounds the nucleus; peaked: one or two candidates; cut by top_p: three."""
    sharpness = {"flat": 0.5, "sharp": 2.0, "peaked": 6.0}
    logp = _cut_by_top_p() if shape not in sharpness else _logp(sharpness[shape], seed=len(shape))
    expected, drawn = _nucleus(logp), _drawn(logp, window=[])
    assert set(drawn.nonzero().flatten().tolist()) <= set(expected.nonzero().flatten().tolist())  # never outside
    assert _total_variation(drawn, expected) < 0.02  # 40,000 draws over at most 25 ids: ~0.01 by chance
    support = int((expected > 0).sum())
    assert support == {"flat": 25, "sharp": 25, "cut by top_p": 3}.get(shape, support) and support <= 25


def test_a_nucleus_one_candidate_larger_would_be_caught() -> None:
    """The comparison above can fail: upstream's nucleus with one more candidate is far from what is drawn."""
    logp = _cut_by_top_p()
    top, ids = logp.softmax(0).sort(descending=True, stable=True)
    other = torch.zeros(VOCABULARY, dtype=torch.float64)
    other[ids[:4]] = top[:4].double() / top[:4].double().sum()
    assert _total_variation(_drawn(logp, window=[]), other) > 0.05


def test_a_repeated_token_is_redrawn_over_the_whole_softmax_without_it() -> None:
    """Upstream: when the nucleus draw is in the last ten tokens (win_size * tau_r = 1), draw again over the whole
    softmax with that token excluded. Expected: for a token t in the window, its nucleus mass goes to every other id
    in proportion to its probability."""
    logp = _logp(2.0, seed=7)
    nucleus = _nucleus(logp)
    likely = nucleus.argsort(descending=True)[:2].tolist()
    prob = logp.clone()
    prob[RULES.banned] = -float("inf")
    prob = prob.softmax(0).double()
    expected = nucleus.clone()
    expected[likely] = 0.0
    for token in likely:
        others = prob.clone()
        others[token] = 0.0
        expected += nucleus[token] * others / others.sum()
    drawn = _drawn(logp, window=[likely[0], 9, likely[1]])
    bins = nucleus.nonzero().flatten()  # each nucleus id, and the rest of the vocabulary as one bin
    assert _total_variation(drawn, expected, bins) < 0.02
    assert drawn[likely[0]] > 0  # redrawn from the other token's draws (the whole softmax)
    assert float(drawn[RULES.banned].sum()) == 0.0
    assert _total_variation(drawn, nucleus, bins) > 0.1  # the rule moved the draws: this test would see it missing


def test_end_id_waits_for_min_len_and_banned_ids_never_come() -> None:
    logp = torch.full((VOCABULARY,), -20.0)
    logp[RULES.end_id], logp[510], logp[5] = 0.0, 5.0, -1.0  # the end id and a banned id are the likeliest
    early = _drawn(logp.log_softmax(0), window=[], count=1, min_len=2)
    assert float(early[RULES.end_id]) == 0.0 and float(early[510]) == 0.0 and float(early[5]) > 0.99
    late = _drawn(logp.log_softmax(0), window=[], count=2, min_len=2)
    assert float(late[RULES.end_id]) > 0.7  # min_len met: the end id is the nucleus' first candidate


def test_weights_rounding_to_the_total_never_draw_an_id_of_no_weight() -> None:
    logp = torch.full((2, VOCABULARY), -float("inf"))
    logp[:, :3] = torch.tensor([0.0, -1.0, -2.0])
    uniforms = torch.tensor([[1 - 2**-24, 1 - 2**-24], [0.0, 0.0]])
    window = torch.full((2, 10), -1)
    tokens = draw_tokens(RULES, logp, uniforms, window, torch.full((2,), 5), torch.zeros(2, dtype=torch.long))
    assert all(0 <= t < 3 for t in tokens.tolist())


def test_a_slots_tokens_depend_on_its_seed_not_on_its_neighbours() -> None:
    """Three requests drawn step by step in a four-slot sampler, then the first alone: the same tokens; the window
    and count advance per slot, and the next step's inputs are each slot's token at its position."""
    logps = torch.stack([_logp(1.0, seed) for seed in range(4)])

    def run(slots: list[int]) -> dict[int, list[int]]:
        sampler = SlotSampler(RULES, 4, 64, torch.device("cpu"))
        for slot in slots:
            sampler.admit(slot, torch.Generator().manual_seed(100 + slot), min_len=2, start=10 + slot)
        tokens, positions = torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)
        out: dict[int, list[int]] = {slot: [] for slot in slots}
        for _ in range(12):
            drawn = sampler.draw(logps)
            sampler.feed(drawn, tokens, positions)
            for slot in slots:
                out[slot].append(int(drawn[slot]))
        assert positions.tolist() == [(10 + s + 11 if s in slots else 0) for s in range(4)]
        assert tokens.tolist() == [(out[s][-1] if s in slots else 0) for s in range(4)]
        return out

    together, alone = run([0, 1, 3]), run([0])
    assert together[0] == alone[0]
    assert together[0] != together[1]
    assert all(RULES.end_id not in tokens[:2] for tokens in together.values())


def test_the_batched_decoder_with_device_sampling_gives_each_request_its_seeds_tokens(tmp_path: Any) -> None:
    """Upstream's tiny LLM in a two-slot batcher drawing on the device: three requests side by side (one waits for
    a slot) get the tokens each gets alone, of the lengths asked; another seed gives other tokens. Needs upstream's
    code (skips in the default environment)."""
    from tests.fixture_cosyvoice_llm import require_upstream, run_concurrently, tiny_llm
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher
    from voicelab.backends.cosyvoice.fast_decode import fix_step_mask

    require_upstream()
    llm = tiny_llm(tmp_path)
    fix_step_mask(llm.llm)

    def prompt(length: int, seed: int) -> torch.Tensor:
        return torch.randn(1, length, 896, generator=torch.Generator().manual_seed(seed)) * 0.05

    jobs = [(prompt(9, 1), 4, 12, 10), (prompt(15, 2), 2, 6, 11), (prompt(5, 3), 8, 16, 12)]
    batcher = DecodeBatcher(llm, BatchConfig(slots=2, capacity=128, sampling="device"))
    try:
        alone = [list(batcher.decode(p, low, high, seed=s)) for p, low, high, s in jobs]

        def decoded(job: tuple[torch.Tensor, int, int, int]) -> list[int]:
            return list(batcher.decode(job[0], job[1], job[2], seed=job[3]))

        together = run_concurrently([functools.partial(decoded, job) for job in jobs], timeout_s=300)
        reseeded = list(batcher.decode(jobs[0][0], 4, 12, seed=99))
    finally:
        batcher.close()
    assert together == alone
    assert [len(tokens) for tokens in alone] == [12, 6, 16]
    assert reseeded != alone[0] and len({tuple(t[:6]) for t in alone}) == 3
    assert batcher.cycles.count.get(2, 0) > 0  # side by side: two rows a cycle


def test_one_slot_draws_on_the_device_too_and_torch_manual_seed_fixes_its_tokens(tmp_path: Any) -> None:
    """``FastDecoder`` (one slot, ``decode_slots=1``) with device sampling: a request's tokens are fixed by
    ``torch.manual_seed`` as upstream's are, differ between seeds, keep min_len and max_len, and equal what the
    batched decoder draws for the same prompt and seed (one sampler, two loops). Needs upstream's code."""
    from tests.fixture_cosyvoice_llm import require_upstream, tiny_llm
    from voicelab.backends.cosyvoice.batch_decode import BatchConfig, DecodeBatcher
    from voicelab.backends.cosyvoice.fast_decode import FastDecodeConfig, FastDecoder, fix_step_mask

    require_upstream()
    llm = tiny_llm(tmp_path)
    fix_step_mask(llm.llm)
    prompt = torch.randn(1, 9, 896, generator=torch.Generator().manual_seed(1)) * 0.05
    decoder = FastDecoder(llm, FastDecodeConfig(capacity=128, sampling="device"))

    def tokens(seed: int) -> list[int]:
        torch.manual_seed(seed)
        return list(decoder.decode(prompt, 4, 12))

    first, again, other = tokens(5), tokens(5), tokens(6)
    assert first == again and first != other
    assert all(4 <= len(t) <= 12 for t in (first, other))
    torch.manual_seed(5)
    seed = int(torch.randint(0, 2**62, (1,)).item())  # what the one-slot loop seeds its generator with
    batcher = DecodeBatcher(llm, BatchConfig(slots=2, capacity=128, sampling="device"))
    try:
        assert list(batcher.decode(prompt, 4, 12, seed=seed)) == first
    finally:
        batcher.close()


def test_the_option_names_its_values_and_a_wrong_one_is_refused_in_a_sentence() -> None:
    """``decode_sampling``: auto (the default: the device wherever the fast path runs), exact or device; a wrong
    value, or device where the fast path does not run, is refused in one sentence before anything loads."""
    from types import SimpleNamespace

    from voicelab.backends.cosyvoice.backend import create
    from voicelab.backends.cosyvoice.decode_setup import DecodeChoice, prepare_llm
    from voicelab.errors import BackendLoadError
    from voicelab.settings import HELP, Settings

    assert DecodeChoice.parse("auto", "16", "auto", "exact").sampling == "exact"
    assert DecodeChoice.parse("auto", "1").sampling == "auto"
    assert "decode_sampling=auto|exact|device" in HELP["backend_options"]
    with pytest.raises(BackendLoadError) as refused:
        create(Settings(backend="cosyvoice", backend_options="decode_sampling=gpu"))
    sentence = "CosyVoice backend option: decode_sampling must be one of auto, exact, device, not 'gpu'."
    assert str(refused.value) == sentence
    llm = SimpleNamespace(llm=SimpleNamespace(forward_one_step=lambda *args: None))
    assert prepare_llm(llm, "cpu", DecodeChoice(sampling="auto"), mask_stops=False) is None  # upstream's loop
    with pytest.raises(BackendLoadError) as refused:
        prepare_llm(llm, "cpu", DecodeChoice(sampling="device"), mask_stops=False)
    assert str(refused.value) == "decode_sampling=device runs on the fast decode path: leave fast_decode on (CUDA)."


@pytest.mark.gpu
def test_on_cuda_the_captured_draws_equal_the_eager_ones_step_by_step() -> None:
    """Each row bucket's draw is captured once (no random numbers inside: the uniforms are drawn at admission), and
    replaying it gives the eager draw's tokens and next inputs, step after step, as the state advances."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    device = torch.device("cuda")
    rules = TokenRules(RasParams(), RULES.stop_ids, RULES.end_id, RULES.banned.to(device))
    logp = torch.stack([_logp(s, seed) for seed, s in enumerate((0.5, 2.0, 4.0, 1.0))]).to(device)
    runs = []
    for graphs in (True, False):
        sampler = SlotSampler(rules, 4, 64, device)
        into = (torch.zeros(4, dtype=torch.long, device=device), torch.zeros(4, dtype=torch.long, device=device))
        if graphs:
            sampler.capture(logp, *into, (1, 2, 4))
            assert sorted(sampler.graphs) == [1, 2, 4] and all(r.kept for r in sampler.reports)
        for slot in (0, 2, 3):
            sampler.admit(slot, torch.Generator(device).manual_seed(slot), min_len=2, start=5)
        steps = [(sampler.next_inputs(logp[:rows], *into).tolist(), into[0].tolist(), into[1].tolist())
                 for rows in (4, 4, 1, 4, 2, 4) * 3]  # fmt: skip
        runs.append(steps)
    assert runs[0] == runs[1]
