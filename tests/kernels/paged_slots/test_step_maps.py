"""A decode step's fused slot maps (`step_slot_maps_triton`, one launch) equal their torch twin
exactly, under the interpreter: every map of every site and candidate set, rows at position 0,
at and around compression boundaries, past the table, on absent pages and padding rows (all −1)."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.kernels.paged_slots import step_slot_maps
from mxserve.kernels.paged_slots.step_maps import map_layout, step_slot_maps_triton
from mxserve.kernels.paged_slots.step_maps_ref import (
    CandidateMapSpec,
    SiteMapSpec,
    StepMapSpec,
    step_slot_maps_ref,
)

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")

BLOCK = 8
SPEC = StepMapSpec(
    block_size=BLOCK, window_table="window", window=12,
    sites=(SiteMapSpec("csa_state", "csa", ratio=4, overlap=True), SiteMapSpec("idx_state", "idx", ratio=4, overlap=True),
           SiteMapSpec("hca_state", "hca", ratio=16, overlap=False)),
    candidates=(CandidateMapSpec("hca", ratio=16, num=5), CandidateMapSpec("idx", ratio=4, num=19)),
)


def _tables(num_rows: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    widths = {"window": 10, "csa_state": 10, "idx_state": 9, "hca_state": 10, "csa": 3, "idx": 3, "hca": 1}
    out = {}
    for name, width in widths.items():
        t = torch.randperm(200, generator=g)[: num_rows * width].view(num_rows, width).clone()
        t[torch.rand(num_rows, width, generator=g) < 0.15] = -1  # absent pages
        t[-1] = -1  # a padding row
        out[name] = t
    return out


def _flatten(maps) -> dict[str, torch.Tensor]:
    out = {"window_write": maps.window_write, "window_read": maps.window_read}
    for i, s in enumerate(maps.sites):
        out.update({f"site {i} {k}": getattr(s, k) for k in ("state_slots", "entry_slots", "entry_positions", "row_slots")})
    for i, c in enumerate(maps.candidates):
        out.update({f"candidates {i} {k}": getattr(c, k) for k in ("entry_ids", "slots", "visible")})
    return out


def _assert_equal(got, want) -> None:
    g, w = _flatten(got), _flatten(want)
    assert g.keys() == w.keys()
    for name in w:
        assert g[name].dtype == torch.int64 and g[name].shape == w[name].shape, name
        assert g[name].is_contiguous(), name
        diff = torch.nonzero(g[name] != w[name])
        assert diff.numel() == 0, f"{name}: first mismatch at {diff[0].tolist()}: {g[name][tuple(diff[0])]} vs " \
                                  f"{w[name][tuple(diff[0])]}"


@pytest.mark.parametrize("spec", [SPEC, StepMapSpec(BLOCK, "window", 5, SPEC.sites[2:], SPEC.candidates[:1]),
                                  StepMapSpec(BLOCK, "window", 3)], ids=["csa+hca", "hca", "window only"])
def test_equals_the_twin(spec):
    # position 0, boundaries of m = 4 and 16 (3, 4, 15, 16, 31, 63), past the window table (80+)
    positions = torch.tensor([0, 3, 4, 15, 16, 31, 63, 79, 81, 140, 0])
    tables = _tables(positions.shape[0], seed=len(spec.sites))
    got = step_slot_maps_triton(positions, tables, spec)
    want = step_slot_maps_ref(positions, tables, spec)
    _assert_equal(got, want)
    assert (got.window_read[-1] == -1).all() and (got.sites[0].row_slots[-1] == -1).all() if spec.sites else True
    assert map_layout(spec, positions.shape[0])[0] == sum(t.numel() for t in _flatten(got).values())


def test_dispatch_and_empty_batch(monkeypatch):
    tables = _tables(2, seed=4)
    positions = torch.tensor([7, 20])
    monkeypatch.delenv("MXSERVE_TORCH_PAGED_SLOTS", raising=False)
    monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")
    _assert_equal(step_slot_maps(positions, tables, SPEC), step_slot_maps_ref(positions, tables, SPEC))
    empty = step_slot_maps_triton(positions[:0], {k: v[:0] for k, v in tables.items()}, SPEC)
    assert empty.window_read.shape == (0, SPEC.window) and empty.candidates[1].slots.shape == (0, 19)


def test_refuses_bad_arguments():
    tables = _tables(2, seed=5)
    with pytest.raises(ValueError, match="table 'hca' must be int"):
        step_slot_maps_triton(torch.tensor([1, 2]), {k: v for k, v in tables.items() if k != "hca"}, SPEC)
    with pytest.raises(ValueError, match="positions must be int"):
        step_slot_maps_triton(torch.tensor([1.0, 2.0]), tables, SPEC)
    with pytest.raises(ValueError, match="at most 3 sites"):
        StepMapSpec(BLOCK, "window", 4, SPEC.sites * 2)
