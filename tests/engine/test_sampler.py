"""Sampler: greedy and ties, seeded replay independent of batch composition, and statistical
checks of temperature / top-k / top-p / min-p against an independent fp64 reference.

Statistics: each distribution test draws NUM_DRAWS tokens from one row (one seed, positions
0..NUM_DRAWS-1, so the draws are the position-keyed stream itself) and runs Pearson's chi-square
test against the renormalised reference distribution. Seeds are fixed, so each test is
deterministic; the stated significance is P_MIN = 1e-3 (a correct sampler fails a given test with
probability 1e-3 over seed choices). A power check shows the same test rejects a wrong
distribution, so a pass means something.
"""

from __future__ import annotations

import math

import pytest
import torch

from mxserve.engine.sampler import Sampler, SamplerOutput, position_uniform
from mxserve.engine.sampling_params import SamplingParams

NUM_DRAWS = 20_000
P_MIN = 1e-3
# Twelve logits in no particular order, so the sampler's sort matters; spread enough that
# top-k/top-p/min-p boundaries fall between tokens, not on them.
LOGITS = [1.0, 3.0, -0.5, 2.2, 0.0, 2.5, -2.0, 1.5, -1.0, 2.0, 0.5, -3.0]
SAMPLER = Sampler()


def reference_distribution(
    logits: list[float], *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> list[float]:
    """Written independently of the sampler, in fp64 Python: temperature → top-k → top-p (on the
    renormalised top-k distribution) → min-p, then renormalise."""
    scaled = [x / temperature for x in logits]
    peak = max(scaled)
    weights = [math.exp(x - peak) for x in scaled]
    probs = [w / sum(weights) for w in weights]
    order = sorted(range(len(logits)), key=lambda i: (-probs[i], i))
    kept = order[: top_k or len(order)]
    if top_p < 1:
        kept_mass = sum(probs[i] for i in kept)
        nucleus, mass = [], 0.0
        for i in kept:
            nucleus.append(i)
            mass += probs[i] / kept_mass
            if mass >= top_p:
                break
        kept = nucleus
    kept = [i for i in kept if probs[i] >= min_p * probs[order[0]]]
    total = sum(probs[i] for i in kept)
    return [probs[i] / total if i in kept else 0.0 for i in range(len(logits))]


def draw_counts(logits: list[float], params: SamplingParams, *, seed: int = 2024, num: int = NUM_DRAWS) -> list[int]:
    rows = torch.tensor(logits, dtype=torch.float32).expand(num, len(logits)).contiguous()
    out = SAMPLER.sample(rows, [params] * num, [seed] * num, list(range(num)))
    return torch.bincount(out.token_ids, minlength=len(logits)).tolist()


def chi_square_p_value(counts: list[int], expected: list[float]) -> float:
    """Pearson's test; the survival function of chi-square(df) is the regularised upper incomplete
    gamma Q(df/2, x/2) (torch.special.gammaincc; no scipy). Tokens outside the support must
    never be drawn."""
    num = sum(counts)
    outside = [i for i, p in enumerate(expected) if p == 0 and counts[i]]
    assert not outside, f"drawn outside the support: {[(i, counts[i]) for i in outside]}"
    # Cells expecting fewer than 5 draws are pooled into one (the usual validity rule).
    cells = [(counts[i], expected[i] * num) for i, p in enumerate(expected) if p * num >= 5]
    rare = [(counts[i], expected[i] * num) for i, p in enumerate(expected) if 0 < p * num < 5]
    if rare:
        cells.append((sum(c for c, _ in rare), sum(e for _, e in rare)))
    statistic = sum((observed - wanted) ** 2 / wanted for observed, wanted in cells)
    dof = len(cells) - 1
    if dof == 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2)))


def assert_matches(params: SamplingParams, **reference_kwargs):
    expected = reference_distribution(LOGITS, **reference_kwargs)
    counts = draw_counts(LOGITS, params)
    p_value = chi_square_p_value(counts, expected)
    assert p_value > P_MIN, f"{params}: chi-square p = {p_value:.2e}; counts {counts}, expected {expected}"
    return expected, counts


# ----------------------------------------------------------------------------------- greedy


def test_greedy_is_argmax_with_lowest_id_on_ties():
    logits = torch.tensor([[1.0, 5.0, 5.0, 2.0], [7.0, 7.0, 7.0, 7.0], [-1.0, -3.0, 0.0, 0.0]])
    for params in (SamplingParams(temperature=0), SamplingParams(temperature=1e-7, top_k=2, top_p=0.1)):
        for seeds in ([0, 0, 0], [5, 6, 7]):
            out = SAMPLER.sample(logits, [params] * 3, seeds, [3, 4, 5])
            assert out.token_ids.tolist() == [1, 0, 2]
            assert out.token_ids.dtype == torch.int64


def test_greedy_rows_unaffected_by_sampled_rows_in_the_batch():
    logits = torch.randn(6, 100, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=0 if r % 2 else 1.3) for r in range(6)]
    out = SAMPLER.sample(logits, params, list(range(6)), [9] * 6)
    argmax = logits.argmax(dim=-1)
    assert out.token_ids[1::2].tolist() == argmax[1::2].tolist()


def test_top_k_one_is_argmax_with_lowest_id_on_ties():
    logits = torch.tensor([[0.0, 4.0, 4.0, 1.0]]).expand(50, 4).contiguous()
    out = SAMPLER.sample(logits, [SamplingParams(top_k=1, temperature=2.0)] * 50, list(range(50)), [0] * 50)
    assert set(out.token_ids.tolist()) == {1}


# ------------------------------------------------------------------------ replay and seeds


def test_seeded_sampling_is_reproducible():
    logits = torch.randn(16, 257, generator=torch.Generator().manual_seed(2))
    params = [SamplingParams(temperature=0.9, top_p=0.95, seed=s) for s in range(16)]
    first = SAMPLER.sample(logits, params, list(range(16)), list(range(100, 116)))
    second = Sampler().sample(logits.clone(), params, list(range(16)), list(range(100, 116)))
    assert torch.equal(first.token_ids, second.token_ids)
    assert torch.equal(first.logprobs, second.logprobs)


def _subject_logits(position: int, vocab_size: int) -> torch.Tensor:
    return 2.0 * torch.randn(vocab_size, generator=torch.Generator().manual_seed(10_000 + position))


NEEDS_CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize(
    ("device", "vocab_size", "batch_size", "num_positions"),
    [
        ("cpu", 50, 8, 64),
        ("cpu", 4099, 8, 24),
        # DeepSeek-V4's vocabulary; batch sizes that change CUDA launch grids.
        pytest.param("cuda", 129_280, 8, 32, marks=NEEDS_CUDA),
        pytest.param("cuda", 129_280, 96, 16, marks=NEEDS_CUDA),
    ],
)
def test_seeded_request_independent_of_batch_composition_and_row(device, vocab_size, batch_size, num_positions):
    """The same request alone (one CPU thread) and in a batch with random other requests, at a
    different row each position (default threads) → identical tokens at every position."""
    subject = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.01, seed=7)
    gen = torch.Generator().manual_seed(3)
    kinds = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.3, top_k=5),
        SamplingParams(top_p=0.5),
        SamplingParams(min_p=0.2, temperature=1.7),
        SamplingParams(temperature=1.2, top_k=1000, top_p=0.99),
        SamplingParams(temperature=0.6, logprobs=5),
    ]
    neighbours = [kinds[i % len(kinds)] for i in range(batch_size - 1)]
    threads = torch.get_num_threads()
    alone, batched = [], []
    for pos in range(num_positions):
        logits = _subject_logits(pos, vocab_size)
        torch.set_num_threads(1)
        try:
            alone.append(SAMPLER.sample(logits[None, :].to(device), [subject], [7], [pos]).token_ids.item())
        finally:
            torch.set_num_threads(threads)
        row = (pos * 5) % batch_size
        batch = 3.0 * torch.randn(batch_size, vocab_size, generator=gen)
        batch[row] = logits
        params = list(neighbours)
        params.insert(row, subject)
        seeds = torch.randint(0, 2**40, (batch_size,), generator=gen).tolist()
        seeds[row] = 7
        positions = torch.randint(0, 5000, (batch_size,), generator=gen).tolist()
        positions[row] = pos
        batched.append(SAMPLER.sample(batch.to(device), params, seeds, positions).token_ids[row].item())
    assert alone == batched
    assert len(set(alone)) > 5  # the subject really samples (not a disguised argmax)


def test_different_seeds_and_positions_give_different_draws():
    logits = torch.zeros(1, 1000)  # uniform: any two streams agree at a position w.p. 1/1000
    params = [SamplingParams(seed=1)]

    def stream(seed: int, positions: range) -> list[int]:
        return [SAMPLER.sample(logits, params, [seed], [p]).token_ids.item() for p in positions]

    one, two = stream(1, range(32)), stream(2, range(32))
    assert sum(a == b for a, b in zip(one, two, strict=True)) <= 2
    assert sum(a == b for a, b in zip(one, stream(1, range(32, 64)), strict=True)) <= 2
    assert len(set(one)) > 25


def test_position_keyed_draws_are_pinned():
    """The draw for (seed, position) is part of the replay contract: recorded seeded runs must
    replay after upgrades. These values change only if the hash does."""
    assert position_uniform(0, 0) == 0.28176129772258496
    assert position_uniform(1234, 5678) == 0.07490957302984291
    draws = [position_uniform(99, p) for p in range(10_000)]
    assert all(0.0 <= u < 1.0 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.01


# --------------------------------------------------------------------------- distributions


def test_unfiltered_sampling_matches_softmax():
    assert_matches(SamplingParams())


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_scales_the_distribution(temperature):
    _, counts = assert_matches(SamplingParams(temperature=temperature), temperature=temperature)
    # Lower temperature sharpens: the most likely token gets more than its T = 1 share.
    top = max(range(len(LOGITS)), key=LOGITS.__getitem__)
    base = reference_distribution(LOGITS)[top]
    assert (counts[top] / NUM_DRAWS > base) == (temperature < 1)


def test_chi_square_has_power():
    """Draws at T = 2 tested against T = 1 are rejected: the test detects a wrong distribution."""
    counts = draw_counts(LOGITS, SamplingParams(temperature=2.0))
    assert chi_square_p_value(counts, reference_distribution(LOGITS)) < P_MIN


@pytest.mark.parametrize("top_k", [1, 3, 6])
def test_top_k_samples_only_the_k_largest_with_renormalised_frequencies(top_k):
    _, counts = assert_matches(SamplingParams(top_k=top_k), top_k=top_k)
    k_largest = sorted(range(len(LOGITS)), key=lambda i: -LOGITS[i])[:top_k]
    assert {i for i, c in enumerate(counts) if c} == set(k_largest)


@pytest.mark.parametrize("top_p", [0.3, 0.6, 0.9])
def test_top_p_samples_only_the_nucleus_with_renormalised_frequencies(top_p):
    expected, counts = assert_matches(SamplingParams(top_p=top_p), top_p=top_p)
    nucleus = {i for i, p in enumerate(expected) if p > 0}
    assert {i for i, c in enumerate(counts) if c} == nucleus and len(nucleus) < len(LOGITS)


@pytest.mark.parametrize("min_p", [0.1, 0.3])
def test_min_p_drops_tokens_below_the_threshold(min_p):
    _, counts = assert_matches(SamplingParams(min_p=min_p), min_p=min_p)
    probs = reference_distribution(LOGITS)
    allowed = {i for i, p in enumerate(probs) if p >= min_p * max(probs)}
    assert {i for i, c in enumerate(counts) if c} == allowed


def test_all_filters_together_in_vllm_order():
    kwargs = dict(temperature=0.7, top_k=6, top_p=0.85, min_p=0.05)
    _, counts = assert_matches(SamplingParams(**kwargs), **kwargs)
    assert 1 < sum(c > 0 for c in counts) < 6  # top-p cuts inside the top-6


def test_temperature_to_zero_limit():
    logits = [0.0, 1.0, 0.9, -1.0, 0.95]
    shares = []
    for temperature in (1.0, 0.3, 0.1, 0.03):
        counts = draw_counts(logits, SamplingParams(temperature=temperature), num=4000)
        shares.append(counts[1] / 4000)
    assert shares == sorted(shares) and shares[-1] > 0.8
    # At T = 1e-3 the runner-up (logit gap 0.05) has probability e^-50: always the argmax.
    assert draw_counts(logits, SamplingParams(temperature=1e-3), num=2000)[1] == 2000


def test_masked_tokens_are_never_sampled():
    logits = [0.0, -math.inf, 1.0, -math.inf, 0.5, -math.inf]
    counts = draw_counts(logits, SamplingParams(temperature=3.0), num=3000)
    assert counts[1] == counts[3] == counts[5] == 0 and min(counts[0], counts[2], counts[4]) > 0


# ------------------------------------------------------------------------- output contract


def test_logprobs_are_of_the_raw_distribution():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(5))
    params = [SamplingParams(temperature=0.4, top_k=3, logprobs=2), SamplingParams(temperature=0),
              SamplingParams(temperature=1.5, logprobs=5), SamplingParams(top_p=0.5)]
    out = SAMPLER.sample(logits, params, [1, 2, 3, 4], [0, 0, 0, 0])
    raw = torch.log_softmax(logits, dim=-1)
    assert isinstance(out, SamplerOutput)
    assert out.logprobs.dtype == torch.float32
    assert torch.equal(out.logprobs, raw.gather(1, out.token_ids[:, None])[:, 0])
    top = out.top_logprobs
    assert top is not None and top.num_top == 5 and torch.equal(top.token_ids, out.token_ids)
    records = top.to_positions([p.logprobs or 0 for p in params])
    assert [len(r.top) for r in records] == [2, 0, 5, 0]
    assert records[2].top[0].token_id == int(logits[2].argmax())


def test_no_top_logprobs_unless_asked():
    out = SAMPLER.sample(torch.randn(2, 8), [SamplingParams()] * 2, [0, 1], [0, 0])
    assert out.top_logprobs is None
    asked_zero = SAMPLER.sample(torch.randn(1, 8), [SamplingParams(logprobs=0)], [0], [0]).top_logprobs
    assert asked_zero is not None and asked_zero.num_top == 0


def test_empty_batch():
    out = SAMPLER.sample(torch.empty(0, 8), [], [], [])
    assert out.token_ids.shape == (0,) and out.logprobs.shape == (0,)


@pytest.mark.parametrize(
    ("logits", "num_rows", "match"),
    [
        (torch.zeros(2, 8, dtype=torch.float16), 2, "fp32"),
        (torch.zeros(8), 1, r"\[B, V\]"),
        (torch.zeros(2, 0), 2, "empty vocabulary"),
        (torch.zeros(2, 8), 3, "one params/seed/position per row"),
    ],
)
def test_bad_batch_shapes_raise(logits, num_rows, match):
    with pytest.raises(ValueError, match=match):
        SAMPLER.sample(logits, [SamplingParams()] * num_rows, [0] * num_rows, [0] * num_rows)


@pytest.mark.parametrize(
    ("params", "seeds", "positions", "match"),
    [
        ([SamplingParams()], [0], [-1], r"positions\[0\]"),
        ([SamplingParams()], [True], [0], r"seeds\[0\]"),
        ([SamplingParams()], [0], [1.0], r"positions\[0\]"),
        ([{"temperature": 1.0}], [0], [0], r"params\[0\]"),
    ],
)
def test_bad_row_inputs_raise(params, seeds, positions, match):
    with pytest.raises(ValueError, match=match):
        SAMPLER.sample(torch.zeros(1, 4), params, seeds, positions)
