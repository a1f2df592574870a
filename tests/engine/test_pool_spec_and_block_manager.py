"""PoolSpec page arithmetic and BlockManager allocation: per-pool growth, all-or-nothing, free."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mxserve.engine.block_manager import BlockManager
from mxserve.engine.pool_spec import DEEPSEEK_V4_POOL_NAMES, PoolSpec, deepseek_v4_pool_specs
from tests.engine.factories import make_request


@pytest.mark.parametrize(
    ("num_positions", "positions_per_unit", "block_size", "pages"),
    [
        (0, 1, 4, 0), (1, 1, 4, 1), (4, 1, 4, 1), (5, 1, 4, 2),
        (3, 4, 4, 0),  # a compressed entry exists only once its 4 positions are seen
        (4, 4, 4, 1), (16, 4, 4, 1), (19, 4, 4, 1), (20, 4, 4, 2),
        (127, 128, 64, 0), (128, 128, 64, 1), (52_000, 128, 64, 7),
    ],
)
def test_pages_needed_table(num_positions, positions_per_unit, block_size, pages):
    assert PoolSpec("p", 10, block_size, positions_per_unit).pages_needed(num_positions) == pages


@given(st.integers(0, 10**6), st.integers(1, 256), st.integers(1, 256))
def test_pages_needed_is_the_fewest_pages_holding_every_unit(num_positions, positions_per_unit, block_size):
    spec = PoolSpec("p", 1, block_size, positions_per_unit)
    units = num_positions // positions_per_unit
    pages = spec.pages_needed(num_positions)
    assert pages * block_size >= units > (pages - 1) * block_size or pages == units == 0


@pytest.mark.parametrize("field_name", ["num_blocks", "block_size", "positions_per_unit"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_pool_spec_rejects_bad_values_naming_them(field_name, bad):
    values = {"num_blocks": 8, "block_size": 4, "positions_per_unit": 1, field_name: bad}
    with pytest.raises(ValueError, match=f"{field_name}.*{bad!r}"):
        PoolSpec("window", **values)


def test_deepseek_v4_pools_and_rates():
    specs = {s.name: s for s in deepseek_v4_pool_specs(num_blocks=10, block_size=64, compress_rate_csa=4, compress_rate_hca=128)}
    assert tuple(specs) == DEEPSEEK_V4_POOL_NAMES
    rates = {name: spec.positions_per_unit for name, spec in specs.items()}
    assert rates == {"window": 1, "csa": 4, "hca": 128, "indexer": 4, "csa_state": 1, "hca_state": 1, "indexer_state": 1}
    per_pool = dict.fromkeys(DEEPSEEK_V4_POOL_NAMES, 3) | {"window": 9}
    specs = deepseek_v4_pool_specs(num_blocks=per_pool, block_size=64, compress_rate_csa=4, compress_rate_hca=128)
    assert {s.name: s.num_blocks for s in specs} == per_pool
    with pytest.raises(ValueError, match=r"missing \['hca'\]"):
        deepseek_v4_pool_specs(num_blocks={n: 1 for n in DEEPSEEK_V4_POOL_NAMES if n != "hca"}, block_size=64,
                               compress_rate_csa=4, compress_rate_hca=128)


def test_block_manager_rejects_duplicate_pool_names():
    with pytest.raises(ValueError, match="unique"):
        BlockManager([PoolSpec("a", 1, 1, 1), PoolSpec("a", 2, 1, 1)])


def _two_pools(window_pages: int = 8, compressed_pages: int = 8) -> BlockManager:
    return BlockManager([PoolSpec("window", window_pages, 4, 1), PoolSpec("csa", compressed_pages, 2, 4)])


def test_tables_grow_per_pool_by_their_own_rule():
    manager = _two_pools()
    request = make_request("r", 20)
    assert manager.allocate(request, 5)  # 5 positions: 2 window pages, 1 csa entry → 1 page
    assert manager.block_tables(request) == {"window": (0, 1), "csa": (0,)}
    request.num_computed_tokens = 5
    assert manager.allocate(request, 11)  # 16 positions: 4 window pages, 4 entries → 2 pages
    assert manager.block_tables(request) == {"window": (0, 1, 2, 3), "csa": (0, 1)}
    assert manager.num_positions(request) == 16
    assert (manager.num_free("window"), manager.num_free("csa")) == (4, 6)
    assert manager.usage("window") == 0.5 and manager.usage() == 0.5 and manager.usage("csa") == 0.25


def test_allocate_is_all_or_nothing_across_pools():
    manager = _two_pools(window_pages=8, compressed_pages=1)  # csa holds 2 entries = 8 positions
    request = make_request("r", 20)
    before = manager.block_tables(request)
    assert not manager.can_allocate(request, 12)  # window fits (3 pages), csa needs 2 pages
    assert not manager.allocate(request, 12)
    assert manager.block_tables(request) == before == {"window": (), "csa": ()}
    assert manager.num_free("window") == 8 and manager.num_free("csa") == 1
    assert manager.allocate(request, 8)


def test_free_returns_every_page_and_is_idempotent():
    manager = _two_pools()
    a, b = make_request("a", 20), make_request("b", 20)
    assert manager.allocate(a, 9) and manager.allocate(b, 13)
    assert set(manager.block_tables(a)["window"]).isdisjoint(manager.block_tables(b)["window"])
    manager.free(a)
    manager.free(a)
    assert manager.block_tables(a) == {"window": (), "csa": ()}
    manager.free(b)
    assert manager.is_all_free() and manager.usage() == 0.0


def test_block_table_snapshots_do_not_change_when_the_table_grows():
    manager = _two_pools()
    request = make_request("r", 20)
    manager.allocate(request, 4)
    snapshot = manager.block_tables(request)
    request.num_computed_tokens = 4
    manager.allocate(request, 4)
    assert snapshot["window"] == (0,) and manager.block_tables(request)["window"] == (0, 1)
    with pytest.raises(TypeError):
        snapshot["window"] = ()  # type: ignore[index]
