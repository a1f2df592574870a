"""Bitwise and bounded tensor comparison that says where it failed.

Exactness claims (codec tables, repacks, oracle agreement) are checked bit for bit, so a failure
must name the first mismatching coordinates and both values; these helpers raise AssertionError
with that message. NaN equals NaN here (codes that decode to NaN must agree on being NaN); -0 and
+0 are equal unless `signed_zeros=True`.
"""

from __future__ import annotations

import torch


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def assert_tensors_equal(
    actual: torch.Tensor, expected: torch.Tensor, what: str = "tensor", signed_zeros: bool = False
) -> None:
    """Raise AssertionError unless shapes match and every element is equal (NaN == NaN)."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.is_floating_point() or e.is_floating_point():
        a, e = a.to(torch.float64), e.to(torch.float64)
        same = (a == e) | (torch.isnan(a) & torch.isnan(e))
        if signed_zeros:
            same &= (a != 0) | (torch.signbit(a) == torch.signbit(e))
    else:
        same = a.to(torch.int64) == e.to(torch.int64)
    if not bool(same.all()):
        bad = ~same
        at = _first(bad)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {same.numel()} elements differ; first at {at}: "
            f"actual {a[at].item()!r}, expected {e[at].item()!r}"
        )


def assert_within(
    actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor, what: str = "tensor"
) -> None:
    """Raise AssertionError unless |actual - expected| <= bound elementwise (float64 arithmetic)."""
    if tuple(actual.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a, e = actual.detach().cpu().to(torch.float64), expected.detach().cpu().to(torch.float64)
    b = torch.as_tensor(bound).detach().cpu().to(torch.float64).expand_as(a)
    err = (a - e).abs()
    ok = err <= b
    if not bool(ok.all()):
        at = _first(~ok)
        raise AssertionError(
            f"{what}: {int((~ok).sum())} of {ok.numel()} elements exceed the bound; first at {at}: "
            f"actual {a[at].item()!r}, expected {e[at].item()!r}, |err| {err[at].item()!r} > bound {b[at].item()!r}"
        )
