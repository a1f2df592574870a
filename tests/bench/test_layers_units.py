"""bench layers' pure parts: the layer plan, the floors' arithmetic, the aliased caches."""

from __future__ import annotations

import torch

from mxserve.bench.layers.build import bench_config, layer_plan
from mxserve.bench.layers.cache import build_cache_state
from mxserve.bench.layers.roofline import active_params_per_token, cache_read_bytes
from mxserve.config import AttentionKind
from mxserve.model.kv_state import Pool
from mxserve.model.numerics import NumericPolicy
from mxserve.testing.tiny_configs import get_config

FLASH = get_config("flash")


def test_flash_plan_takes_the_most_frequent_kinds_first():
    assert layer_plan(FLASH, 2) == (AttentionKind.CSA, AttentionKind.HCA)
    assert layer_plan(FLASH, 4) == (AttentionKind.CSA, AttentionKind.HCA, AttentionKind.SLIDING, AttentionKind.CSA)
    cut = bench_config(FLASH, layer_plan(FLASH, 3))
    assert cut.num_hidden_layers == 3 and cut.layer_kinds == (AttentionKind.CSA, AttentionKind.HCA, AttentionKind.SLIDING)
    assert cut.num_hash_layers == 0 and cut.hidden_size == 4096 and cut.n_routed_experts == 256


def test_flash_floor_bytes_by_hand():
    # batch 1 at 4096 tokens of context: window 128 entries; CSA: 1024 indexer keys + 512 top-k entries;
    # HCA: 32 entries; fp8_ds_mla 584 B per entry, fp8 indexer keys 132 B.
    kw = dict(num_seqs=1, context_len=4096, new_tokens=1, kv_entry_bytes=584, indexer_entry_bytes=132)
    assert cache_read_bytes(FLASH, AttentionKind.SLIDING, **kw) == 128 * 584
    assert cache_read_bytes(FLASH, AttentionKind.CSA, **kw) == 128 * 584 + 1024 * 132 + 512 * 584
    assert cache_read_bytes(FLASH, AttentionKind.HCA, **kw) == 128 * 584 + 32 * 584
    assert cache_read_bytes(FLASH, AttentionKind.HCA, **{**kw, "num_seqs": 64}) == 64 * (128 + 32) * 584
    # active parameters: attention 4096·1024 + 32768·1024 + 512·4096 + 8192·4096 + 4096·8192 (= 107.0M) and
    # 7 experts of 3·2048·4096 (176.2M) and the router 256·4096
    assert active_params_per_token(FLASH, AttentionKind.SLIDING) == 106_954_752 + 176_160_768 + 1_048_576


def test_cache_state_aliases_old_positions_and_keeps_entries_real():
    config = get_config("tiny-all")  # window 32, CSA 4, HCA 16
    policy = NumericPolicy.for_mode("faithful")
    state = build_cache_state(config, policy, num_seqs=2, context_len=1000, new_tokens=1, block_size=16,
                              device=torch.device("cpu"))
    window = state.block_tables[Pool.WINDOW][1]
    assert len(window) == -(-1001 // 16) and window[0] == 0 and len(set(window)) < len(window)  # old pages → junk page 0
    csa = state.block_tables[Pool.CSA][1]
    assert 0 not in csa and len(set(csa)) == len(csa) == -(-250 // 16)  # every entry page is real
    assert not set(state.block_tables[Pool.CSA][0]) & set(csa)  # sequences do not share real pages
    # the filled entries decode to finite values where the step reads them
    hca_layer = next(c for c in state.layers if c.compressed is not None and c.indexer is None)
    entries = hca_layer.compressed.read(state.slots(Pool.HCA, 1, torch.arange(62)))
    assert torch.isfinite(entries).all() and entries.abs().sum() > 0
