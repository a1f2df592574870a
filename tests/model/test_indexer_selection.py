"""The indexer inside the model selects exactly the tie-broken top-k over the causal candidates."""

from __future__ import annotations

import dataclasses

import pytest

from tests.model.conftest import exact_model, random_prompt, run_in_chunks


def brute_force(scores: list[float], k: int, num_valid: int) -> list[int]:
    ranked = sorted(range(num_valid), key=lambda i: (-scores[i], i))[:k]
    return ranked + [-1] * (k - len(ranked))


@pytest.mark.parametrize(("name", "chunk"), [("tied_indexer", 7), ("tied_indexer", 1), ("mixed", 64)])
def test_selection_is_the_tie_broken_top_k_of_exactly_the_causal_candidates(name, chunk):
    model = exact_model(name)
    ratio, top_k = model.config.compress_rate_csa, model.config.index_topk
    calls = []
    real = model.kernels.topk

    def recording(scores, k, *, num_valid):
        out = real(scores, k, num_valid=num_valid)
        calls.append((scores.clone(), k, num_valid.clone(), out.clone()))
        return out

    model.set_kernels(dataclasses.replace(model.kernels, topk=recording))
    tokens = random_prompt(model.config.vocab_size, 90, seed=21)
    run_in_chunks(model, tokens, chunk)
    assert calls, "the indexer never ran"
    num_csa_layers = sum(kind.value == "csa" for kind in model.config.layer_kinds)
    expected_valid = []  # per call: floor((p + 1) / ratio) for the chunk's positions, once per CSA layer
    for start in range(0, len(tokens), chunk):
        visible = [(p + 1) // ratio for p in range(start, min(start + chunk, len(tokens)))]
        if max(visible) > 0:  # with no complete entry yet the indexer has nothing to select
            expected_valid += [visible] * num_csa_layers
    assert [c[2].tolist() for c in calls] == expected_valid
    rows = ties = 0
    for scores, k, num_valid, out in calls:
        assert k == min(top_k, scores.shape[1])
        for row in range(scores.shape[0]):
            valid = int(num_valid[row])
            row_scores = scores[row].tolist()
            assert out[row].tolist() == brute_force(row_scores, k, valid)
            ties += len(row_scores[:valid]) - len(set(row_scores[:valid]))
            rows += 1
    if name == "tied_indexer":
        assert ties > 0, "the tied config produced no tied scores: the test would not exercise the tie-break"
    assert rows > 0
