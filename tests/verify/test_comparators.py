"""Comparators and the faithful-vs-exact distance measurement."""

from __future__ import annotations

import math

import pytest
import torch

from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.numerics import NumericPolicy
from mxserve.testing import random_checkpoint
from mxserve.verify.comparators import compare_logits, first_divergence
from mxserve.verify.mode_distance import measure_mode_distance


def test_identical_logits_compare_as_zero():
    logits = torch.randn(5, 11)
    c = compare_logits(logits, logits.clone())
    assert c.max_abs_logprob_delta_nats == 0 and c.num_argmax_flips == 0 and c.first_flip_position is None
    assert c.max_abs_logit_delta == 0 and c.min_cosine == pytest.approx(1.0)


def test_a_constant_shift_changes_logits_but_not_logprobs():
    logits = torch.randn(4, 9)
    c = compare_logits(logits + 3.0, logits)
    assert c.max_abs_logprob_delta_nats < 1e-6 and c.num_argmax_flips == 0  # fp32 rounding of the shift
    assert c.max_abs_logit_delta == pytest.approx(3.0)


def test_flip_position_and_margin_are_reported():
    ref = torch.tensor([[2.0, 0.0, 0.0], [1.0, 0.9, -5.0], [0.0, 3.0, 0.0]])
    cand = ref.clone()
    cand[1] = torch.tensor([0.9, 1.0, -5.0])  # swap the near-tie at position 1
    c = compare_logits(cand, ref)
    assert c.num_argmax_flips == 1 and c.first_flip_position == 1
    assert c.first_flip_reference_margin_nats == pytest.approx(0.1, abs=1e-6)
    assert c.max_abs_logprob_delta_nats == pytest.approx(0.1, abs=1e-6)


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_faithful_mode_really_differs_from_exact_and_exact_matches_itself(tmp_path):
    random_checkpoint("tiny-all", tmp_path, seed=0, progress=False)
    reader = CheckpointReader(tmp_path)
    weights = reader.load(progress=False)
    prompt = torch.randint(2, reader.config.vocab_size, (40,), generator=torch.Generator().manual_seed(0)).tolist()

    same = measure_mode_distance(reader.config, weights, prompt, 3, candidate=NumericPolicy.for_mode("exact"))
    assert same.comparison.max_abs_logit_delta == 0.0 and same.first_greedy_divergence is None

    faithful = measure_mode_distance(reader.config, weights, prompt, 3)
    c = faithful.comparison
    assert c.num_positions == len(prompt) + 3 - 1  # contexts 0 .. len(prompt)+1
    assert math.isfinite(c.max_abs_logprob_delta_nats) and c.mean_abs_logprob_delta_nats > 0
