"""Lossless verification of a draft block against the target's K + 1 distributions.

Notation (one request, one step): drafts d_0 … d_{k−1}; the target's distributions P_0 … P_k
(P_i is the distribution of the token after the anchor and d_0 … d_{i−1}; rows of one verify
forward); the draft's distributions Q_0 … Q_{k−1} (one-hot for greedy drafts). Every method
returns the number a of accepted drafts and the a + 1 tokens to append (the accepted drafts,
then one token drawn from a residual or, when all k pass, from P_k: the bonus).

* `verify_greedy`: the request samples greedily (P one-hot at the argmax): accept while
  d_i == argmax P_i; the last token is the argmax where they first differ. The appended tokens
  are bit-for-bit the tokens of non-speculative greedy decoding.
* `verify_standard` (Leviathan et al. 2023; Chen et al. 2023): accept d_i while
  u_i < P_i(d_i) / Q_i(d_i); at the first rejection draw from norm(max(P_i − Q_i, 0)).
* `verify_block` (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025):
  judges the prefixes jointly. With p_0 = 1 and p_i = min(1, p_{i−1}·P_{i−1}(d_{i−1})/Q_{i−1}(d_{i−1})),
  the residual after prefix i is r_i(x) = max(p_i·P_i(x) − Q_i(x), 0) (Q_k ≡ 0), and the
  prefix of length i is kept with h_i = Σr_i / (Σr_i + 1 − p_i) (h_k = p_k). The accepted length
  is the LONGEST i with u_i < h_i (0 if none); the last token is drawn from norm(r_a) (= P_k when
  a = k). Never accepts fewer tokens in expectation than `verify_standard`.
Both sampled methods reproduce the target's distribution exactly (tests/speculative check it by
exact enumeration and by a seeded chi-square test).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mxserve.engine.speculative.probs import sample_from


@dataclass(frozen=True)
class Verdict:
    num_accepted: int  # drafts accepted, 0 … k
    token_ids: tuple[int, ...]  # the accepted drafts then the drawn token (num_accepted + 1 of them)


def verify_greedy(target_argmax: Sequence[int], drafts: Sequence[int]) -> Verdict:
    """target_argmax: k + 1 argmax ids (rows 0 … k); drafts: k ids."""
    _check_lengths(len(target_argmax), len(drafts))
    a = 0
    while a < len(drafts) and drafts[a] == target_argmax[a]:
        a += 1
    return Verdict(a, (*drafts[:a], target_argmax[a]))


def verify_standard(p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], accept_uniforms: Sequence[float],
                    final_uniform: float) -> Verdict:
    """p [k + 1, V], q [k, V] probabilities (fp64); accept_uniforms: k draws; final_uniform: one."""
    k = _check(p, q, drafts, accept_uniforms)
    for i in range(k):
        d = drafts[i]
        target, draft = float(p[i, d]), float(q[i, d])
        if draft > 0 and accept_uniforms[i] < target / draft:
            continue
        residual = (p[i] - q[i]).clamp(min=0)
        if not float(residual.sum()) > 0:  # P == Q up to rounding: rejection had probability ~0
            residual = p[i]
        return Verdict(i, (*drafts[:i], sample_from(residual, final_uniform)))
    return Verdict(k, (*drafts, sample_from(p[k], final_uniform)))


def verify_block(p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], accept_uniforms: Sequence[float],
                 final_uniform: float) -> Verdict:
    """Same arguments as `verify_standard`; see the module docstring for the rule."""
    k = _check(p, q, drafts, accept_uniforms)
    weight = 1.0  # p_i, the prefix weight
    weights = [1.0]
    accepted = 0
    for i in range(1, k + 1):
        d = drafts[i - 1]
        draft = float(q[i - 1, d])
        weight = min(1.0, weight * float(p[i - 1, d]) / draft) if draft > 0 else 0.0
        weights.append(weight)
        if i < k:
            mass = float(_block_residual(p, q, i, weight).sum())
            denominator = mass + 1.0 - weight
            h = mass / denominator if denominator > 0 else 0.0
        else:
            h = weight
        if accept_uniforms[i - 1] < h:
            accepted = i  # the longest passing prefix wins
    if accepted == k:
        return Verdict(k, (*drafts, sample_from(p[k], final_uniform)))
    residual = _block_residual(p, q, accepted, weights[accepted])
    if not float(residual.sum()) > 0:  # only reachable through rounding
        residual = p[accepted]
    return Verdict(accepted, (*drafts[:accepted], sample_from(residual, final_uniform)))


def _block_residual(p: torch.Tensor, q: torch.Tensor, i: int, weight: float) -> torch.Tensor:
    return (weight * p[i] - q[i]).clamp(min=0)


def _check_lengths(num_targets: int, num_drafts: int) -> None:
    if num_targets != num_drafts + 1:
        raise ValueError(f"verification needs k + 1 target rows for k drafts, got {num_targets} rows, {num_drafts} drafts")


def _check(p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], accept_uniforms: Sequence[float]) -> int:
    k = len(drafts)
    _check_lengths(p.shape[0], k)
    if q.shape[0] != k or len(accept_uniforms) != k or q.shape[1:] != p.shape[1:]:
        raise ValueError(f"verification: p {tuple(p.shape)}, q {tuple(q.shape)}, {k} drafts, "
                         f"{len(accept_uniforms)} uniforms")
    return k
