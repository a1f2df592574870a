"""`DecodeAddresses` computes the step's maps in one `step_slot_maps` launch (the Triton kernel
under the interpreter here, what CUDA runs) or map by map (the twin path): every accessor the
decode path calls returns the same integers both ways, on the tiny-all model's pools (CSA, its
indexer and HCA sites, both candidate sets), rows at compression boundaries and padding rows."""

from __future__ import annotations

import os

import pytest
import torch

from mxserve.config import AttentionKind
from mxserve.model.attention import indexer_compressor_site, kind_compressor_site
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.decode_addresses import DecodeAddresses
from mxserve.model.decode_batch import DecodeGeometry, build_decode_batch
from mxserve.model.kv_state import ModelCacheState, Pool
from mxserve.model.numerics import NumericPolicy


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
def test_fused_maps_equal_the_map_by_map_path(tiny_all, monkeypatch):
    monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")
    monkeypatch.delenv("MXSERVE_TORCH_PAGED_SLOTS", raising=False)
    config = CheckpointReader(tiny_all).config
    state = ModelCacheState(config, NumericPolicy.for_mode("exact"), num_blocks=64, block_size=8)
    geometry = DecodeGeometry.for_positions(config, 8, 96)
    positions = [0, 3, 15, 16, 47, 63, 95]
    batch = build_decode_batch([5] * len(positions), list(range(len(positions))), positions, state, geometry,
                               num_rows=8)  # one padding row
    fused, twin = DecodeAddresses(batch, geometry, config), DecodeAddresses(batch, geometry, config, fused=False)
    assert fused._fused and not twin._fused
    monkeypatch.setenv("MXSERVE_PER_MAP_SLOTS", "1")  # the A/B switch: session 5's path
    assert not DecodeAddresses(batch, geometry, config)._fused

    def every_map(a: DecodeAddresses) -> dict[str, torch.Tensor]:
        out = {"window write": a.window_write(), "window read": a.window_read()}
        for site in (kind_compressor_site(config, AttentionKind.CSA), indexer_compressor_site(config),
                     kind_compressor_site(config, AttentionKind.HCA)):
            c = a.compressor(site)
            out.update({f"{site.state_pool} {k}": getattr(c, k)
                        for k in ("state_slots", "entry_slots", "entry_positions", "row_slots")})
        for pool, ratio, num in ((Pool.HCA, config.compress_rate_hca, geometry.hca_candidates),
                                 (Pool.INDEXER, config.compress_rate_csa, geometry.indexer_candidates)):
            ids, slots = a.candidates(pool, ratio, num)
            out.update({f"{pool} ids": ids, f"{pool} slots": slots, f"{pool} visible": a.visible(ratio)})
        return out

    got, want = every_map(fused), every_map(twin)
    assert not fused._fused and len(fused._memo) == len(twin._memo)  # the launch filed every key the path asks
    for name, w in want.items():
        assert got[name].shape == w.shape and torch.equal(got[name], w), name
    assert (got["window read"][-1] == -1).all() and (got["hca_state row_slots"][-1] == -1).all()  # padding row
    assert got["csa_state entry_slots"][1] >= 0 and got["csa_state entry_slots"][2] >= 0  # 3 and 15 complete one


def _map_tensors(value) -> list[torch.Tensor]:
    """The tensors of one kept map: a tensor, an (ids, slots) pair or a `CompressorAddresses`."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, tuple):
        return list(value)
    return [value.state_slots, value.entry_slots, value.entry_positions, value.row_slots]


@pytest.mark.parametrize("fused", [False, True])
def test_prime_computes_every_map_the_decode_step_reads(tiny_all, fused, monkeypatch):
    """`prime` (before a branched step's first fork, model/decode_branches.py) files every map the
    layers ask for: a whole decode step afterwards computes no map of its own (on a side lane it would
    be read unordered by the main stream), and the primed maps are the ones a step computes lazily."""
    if fused and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the one-launch maps need the Triton interpreter on the CPU")
    if fused:
        monkeypatch.setenv("MXSERVE_TRITON_PAGED_SLOTS", "1")
    from mxserve.model.deepseek_v4 import DeepseekV4Model

    reader = CheckpointReader(tiny_all)
    model = DeepseekV4Model(reader.config, reader.load(), numerics="exact")
    geometry = DecodeGeometry.for_positions(model.config, 8, 96)

    def step(prime: bool):
        state = model.new_cache_state(max_sequences=3, max_positions=96, block_size=8)
        batch = build_decode_batch([5, 6, 7], [0, 1, 2], [3, 15, 63], state, geometry, num_rows=4)
        addresses = DecodeAddresses(batch, geometry, model.config, fused=fused)
        kept = None
        if prime:
            addresses.prime()
            kept = dict(addresses._memo)

            def only_kept(key, compute):
                assert key in kept, f"the step computed map {key!r}, which prime did not"
                return kept[key]

            monkeypatch.setattr(addresses, "_once", only_kept)
        return model._decode(batch, state, geometry, addresses, ())[0], addresses._memo

    primed_logits, primed = step(prime=True)
    lazy_logits, lazy = step(prime=False)
    assert torch.equal(primed_logits, lazy_logits)
    assert set(primed) == set(lazy), "prime computed maps the step never reads, or missed some"
    for key, value in primed.items():
        for a, b in zip(_map_tensors(value), _map_tensors(lazy[key]), strict=True):
            assert torch.equal(a, b), key
