"""Issue 13 acceptance: with sampling, speculative decoding leaves the output distribution unchanged.

Small-vocabulary setting: V = 4 tokens, a context-dependent target P(·|ctx) and a different
draft Q(·|ctx) (random tables keyed by the context), blocks of K = 3 drafts. One trial runs the
speculative loop (draft → `verify_*` → append) until 3 tokens exist and records them: 64 outcomes
whose exact target probabilities are known. Test: Pearson chi-square over the 64 cells, pass when
the p-value exceeds 1e-3 (fixed seeds, so the verdict is deterministic). Power check: the same
test rejects (p < 1e-6) a verifier whose only bug is the classic one (resampling from P instead
of the residual max(P − Q, 0)).
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from mxserve.engine.speculative.probs import sample_from
from mxserve.engine.speculative.verify import Verdict, verify_block, verify_standard

V, K, N = 4, 3, 3
TRIALS = 6000
P_VALUE_THRESHOLD = 1e-3


def _table(salt: int):
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def dist(ctx: tuple[int, ...]) -> torch.Tensor:
        if ctx not in cache:
            gen = torch.Generator().manual_seed(hash((salt, ctx)) % 2**31)
            x = torch.rand(V, generator=gen, dtype=torch.float64) ** 2 + 0.05
            cache[ctx] = x / x.sum()
        return cache[ctx]

    return dist


TARGET, DRAFT = _table(1), _table(2)


def exact_target() -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.product(range(V), repeat=N):
        prob = 1.0
        for i, tok in enumerate(seq):
            prob *= float(TARGET(seq[:i])[tok])
        out[seq] = prob
    return out


def run_trials(verify, *, greedy_drafts: bool, seed: int) -> tuple[dict[tuple[int, ...], int], float]:
    rng = random.Random(seed)
    counts: dict[tuple[int, ...], int] = {}
    emitted = 0
    steps = 0
    for _ in range(TRIALS):
        seq: tuple[int, ...] = ()
        while len(seq) < N:
            drafts, qs = [], []
            ctx = seq
            for _ in range(K):
                q = DRAFT(ctx)
                if greedy_drafts:
                    tok = int(torch.argmax(q))
                    q = torch.zeros(V, dtype=torch.float64)
                    q[tok] = 1.0
                else:
                    tok = sample_from(q, rng.random())
                drafts.append(tok)
                qs.append(q)
                ctx = (*ctx, tok)
            p = torch.stack([TARGET((*seq, *drafts[:i])) for i in range(K + 1)])
            verdict: Verdict = verify(p, torch.stack(qs), drafts, [rng.random() for _ in range(K)], rng.random())
            assert len(verdict.token_ids) == verdict.num_accepted + 1
            assert list(verdict.token_ids[:-1]) == drafts[: verdict.num_accepted]
            seq = (*seq, *verdict.token_ids)
            emitted += len(verdict.token_ids)
            steps += 1
        counts[seq[:N]] = counts.get(seq[:N], 0) + 1
    return counts, emitted / steps


def chi_square_p_value(counts: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float]) -> float:
    total = sum(counts.values())
    stat = sum((counts.get(k, 0) - total * p) ** 2 / (total * p) for k, p in expected.items())
    dof = len(expected) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def wrong_residual(p, q, drafts, accept_uniforms, final_uniform) -> Verdict:
    """Standard rejection sampling with the classic bug: the correction is drawn from P itself."""
    for i, d in enumerate(drafts):
        if not accept_uniforms[i] < float(p[i, d] / q[i, d]):
            return Verdict(i, (*drafts[:i], sample_from(p[i], final_uniform)))
    return Verdict(len(drafts), (*drafts, sample_from(p[-1], final_uniform)))


@pytest.mark.parametrize("greedy_drafts", [False, True], ids=["probabilistic-drafts", "greedy-drafts"])
@pytest.mark.parametrize("verify", [verify_standard, verify_block], ids=["standard", "block"])
def test_sampled_output_distribution_is_the_targets(verify, greedy_drafts):
    counts, _ = run_trials(verify, greedy_drafts=greedy_drafts, seed=17)
    p_value = chi_square_p_value(counts, exact_target())
    assert p_value > P_VALUE_THRESHOLD, f"chi-square p-value {p_value:.2e} (64 cells, {TRIALS} trials)"


def test_the_chi_square_test_catches_a_biased_verifier():
    counts, _ = run_trials(wrong_residual, greedy_drafts=False, seed=17)
    assert chi_square_p_value(counts, exact_target()) < 1e-6


def test_block_verification_emits_at_least_as_many_tokens_per_step():
    _, standard = run_trials(verify_standard, greedy_drafts=False, seed=5)
    _, block = run_trials(verify_block, greedy_drafts=False, seed=5)
    assert block >= standard - 0.01, (block, standard)
