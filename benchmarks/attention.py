"""Issue 11 on one H200: the Triton attention kernels at DeepSeek-V4-Flash shapes, and their
correctness on the GPU (one device call; every section in try/except so one failure does not
cost the others).

    PYTHONPATH=src python benchmarks/attention.py --out $OUT/attn.json      # ~2 min incl. compiles

Sections:
1. parity: each kernel vs its torch twin on the GPU (writers bit for bit on the cache bytes;
   attention / indexer within stated tolerances; top-k identical indices; batch invariance).
2. model: the tiny-all random checkpoint on the GPU, greedy 24 tokens, reference kernels vs every
   Triton attention kernel (faithful and exact numerics): first divergence and its top-2 logit
   gap in nats (a flip at a gap < 0.1 nat is a near tie, not a bug).
3. bench: Flash shapes (64 heads x 512, window 128, CSA top-512 of ctx/4 entries, HCA ctx/128
   entries, indexer 64 heads x 128) at contexts 4K and 64K, batch 1, 8, 64: time per kernel
   (CUDA-graph replay, median; do_bench where a call cannot be captured: each row says which), bytes gathered from the caches vs the 4.27 TB/s spec (and
   the device copy bandwidth measured here), TFLOP/s, ratio vs the torch reference in the same
   run (reference timed where it fits the time budget), indexer top-k vs torch.topk, and a
   per-layer sum for a CSA and an HCA decode layer.
4. ab (`--ab VARIANT ...`, session 7): the sparse attention alone at Flash shapes (4K: CSA = window
   128 + top-512, HCA = window 128 + 32 entries), batch 1, 8, 64, per kernel variant ("pieces" =
   the session-5 kernels; "halves" = the launcher's default, split mode below 32 tokens, fold mode
   from 32; "halves-split"/"halves-fold" force a mode; "-fold2", "-split1", "-stages2", "-nopdl"
   change one launch parameter): us per call (CUDA-graph replay of the same inputs, median of 20, L2-warm as
   in sessions 4-6), TFLOP/s (4 flops per head, key and channel), error vs "pieces", and whether
   the output has the default "halves" bits (every halves variant must: same partials, same fold).
Not here (see the report): CUDA-graph capture of the decode step, the end-to-end tok/s vs
transformers `generate`, the random Flash-shaped 4-layer model (its experts take minutes to write).
"""

# ruff: noqa: B023  (every lambda is timed at once, inside the loop iteration that defines it)
from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
import traceback
from pathlib import Path

import torch
from _cuda_timing import graph_time

RESULTS: dict = {"parity": {}, "model": {}, "bench": [], "ab": [], "errors": {}}
DEV = "cuda"
SPEC_TBPS = 4.27


def section(name):
    def wrap(fn):
        def run(*args, **kwargs):
            t0 = time.time()
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # keep going: the lead gets one shot at this script
                RESULTS["errors"][name] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            print(f"[{name}] {time.time() - t0:.1f} s", flush=True)
        return run
    return wrap


def rope_table():
    from mxserve.config import YarnScaling
    from mxserve.model.rope import inverse_frequencies

    return inverse_frequencies(64, 160000.0, YarnScaling(16.0, 65536, 32.0, 1.0)).to(DEV)


_FILL: list = []


def fill_generator() -> torch.Generator:
    """An explicit generator for the cache fills: a capture that fails inside `timed_graph` can
    leave the default CUDA generator in capture state, and the next default-generator draw raises."""
    if not _FILL:
        _FILL.append(torch.Generator(device=DEV).manual_seed(7))
    return _FILL[0]


def kv_cache(num_entries: int, mode: str = "fp8_ds_mla", head_dim: int = 512, block_size: int = 64, fill: bool = True):
    from mxserve.kernels.cache import PagedKVCache

    cache = PagedKVCache(-(-num_entries // block_size), block_size, mode=mode, head_dim=head_dim, device=DEV)
    if fill:
        n = cache.num_slots
        for start in range(0, n, 1 << 18):
            stop = min(n, start + (1 << 18))
            cache.write(torch.arange(start, stop, device=DEV), torch.randn(stop - start, head_dim, device=DEV,
                                                                            generator=fill_generator()))
    return cache


def indexer_cache(num_entries: int, block_size: int = 64):
    from mxserve.kernels.cache import PagedIndexerKeyCache

    cache = PagedIndexerKeyCache(-(-num_entries // block_size), block_size, device=DEV)
    for start in range(0, cache.num_slots, 1 << 18):
        stop = min(cache.num_slots, start + (1 << 18))
        cache.write(torch.arange(start, stop, device=DEV), torch.randn(stop - start, 128, device=DEV,
                                                                        generator=fill_generator()))
    return cache


# ------------------------------------------------------------------------------------------ parity
@section("parity")
def parity() -> None:
    from mxserve.kernels.attention_ops.triton_ops import (
        compressor_emit_triton,
        kv_insert_triton,
        q_norm_rope_triton,
    )
    from mxserve.kernels.cache import CompressorStateCache
    from mxserve.kernels.indexer import indexer_scores_ref
    from mxserve.kernels.indexer.triton import indexer_scores_cache_triton
    from mxserve.kernels.sparse_attention import sparse_attention_ref
    from mxserve.kernels.sparse_attention.triton import sparse_attention_triton
    from mxserve.kernels.topk import topk_tiebroken_ref
    from mxserve.kernels.topk.triton import topk_tiebroken_triton
    from mxserve.model.fused_ref import compressor_emit_ref, kv_insert_ref, q_norm_rope_ref

    f = rope_table()
    g = torch.Generator(device=DEV).manual_seed(0)
    res = RESULTS["parity"]
    q = torch.randn(33, 64, 512, device=DEV, generator=g).bfloat16()
    pos = torch.randint(0, 70000, (33,), device=DEV, generator=g)
    res["q_norm_rope_bitwise"] = torch.equal(q_norm_rope_triton(q, pos, f, 1e-6), q_norm_rope_ref(q, pos, f, 1e-6))
    a, b = kv_cache(256, fill=False, block_size=64), kv_cache(256, fill=False, block_size=64)
    kv = torch.randn(100, 512, device=DEV, generator=g).bfloat16()
    slots = torch.randperm(256, device=DEV, generator=g)[:100]
    w = torch.rand(512, device=DEV, generator=g).bfloat16() + 0.5
    kv_insert_triton(kv, w, 1e-6, pos.repeat(4)[:100], f, a, slots)
    kv_insert_ref(kv, w, 1e-6, pos.repeat(4)[:100], f, b, slots)
    res["kv_insert_bytes_bitwise"] = torch.equal(a.buffer, b.buffer)
    # compressor emit, CSA (overlap, ratio 4) into fp8_ds_mla
    state = CompressorStateCache(8, 16, 2048, device=DEV)
    rows = torch.randn(128, 2048, device=DEV, generator=g)
    state.write(torch.arange(128, device=DEV), rows)
    t = torch.arange(3, 128, 4, device=DEV)
    row_slots = (t[:, None] - 7 + torch.arange(8, device=DEV)[None, :]).clamp(min=-1)
    row_slots = torch.where(row_slots < 0, -1, row_slots)
    ent = torch.arange(t.numel(), device=DEV)
    c1, c2 = kv_cache(64, fill=False, block_size=16), kv_cache(64, fill=False, block_size=16)
    args = dict(ratio=4, overlap=True, norm_weight=w, eps=1e-6, inv_freq=f, out_dtype=torch.bfloat16,
                round_pooled_to_bf16=True)
    compressor_emit_triton(state, row_slots, ent, ent * 4, entry_cache=c1, **args)
    compressor_emit_ref(state, row_slots, ent, ent * 4, entry_cache=c2, **args)
    res["compressor_emit_bytes_bitwise"] = torch.equal(c1.buffer, c2.buffer)
    # attention on fp8_ds_mla
    win, comp = kv_cache(4096, block_size=64), kv_cache(8192, block_size=64)
    qa = (torch.randn(9, 64, 512, device=DEV, generator=g) * 0.05).bfloat16()
    ws = torch.randint(-1, 4096, (9, 128), device=DEV, generator=g)
    cs = torch.randint(-1, 8192, (9, 512), device=DEV, generator=g)
    sink = torch.randn(64, device=DEV, generator=g)
    out = sparse_attention_triton(qa, [(win, ws), (comp, cs)], sink, 512**-0.5)
    ref = sparse_attention_ref(qa, [(win, ws), (comp, cs)], sink, 512**-0.5)
    res["attention_max_rel_err"] = float(((out - ref).abs().amax(dim=(1, 2)) / ref.abs().amax(dim=(1, 2))).max())
    alone = sparse_attention_triton(qa[4:5], [(win, ws[4:5]), (comp, cs[4:5])], sink, 512**-0.5)
    res["attention_batch_invariant"] = torch.equal(alone[0], out[4])
    # indexer + top-k
    icache = indexer_cache(4096)
    iq = torch.randn(9, 64, 128, device=DEV, generator=g).bfloat16()
    iw = torch.randn(9, 64, device=DEV, generator=g) * 0.01
    islots = torch.arange(4096, device=DEV)
    sc = indexer_scores_cache_triton(iq, iw, icache, islots)
    sr = indexer_scores_ref(iq, iw, icache.read(islots))
    res["indexer_max_rel_err"] = float(((sc - sr).abs().amax(1) / sr.abs().amax(1)).max())
    res["indexer_zero_ties_preserved"] = torch.equal(sc == 0, sr == 0)
    res["topk_identical_on_triton_scores"] = torch.equal(topk_tiebroken_triton(sc, 512), topk_tiebroken_ref(sc, 512))
    tied = torch.randint(-2, 3, (16, 16384), device=DEV, generator=g).float()
    nv = torch.randint(0, 16384, (16,), device=DEV, generator=g)
    res["topk_identical_with_ties"] = torch.equal(topk_tiebroken_triton(tied, 512, num_valid=nv),
                                                  topk_tiebroken_ref(tied, 512, num_valid=nv))
    print(json.dumps(res, indent=1), flush=True)


# ------------------------------------------------------------------------------------------- model
@section("model")
def model_parity(num_new: int) -> None:
    from mxserve.kernels.attention_chooser import attention_ops
    from mxserve.model.checkpoint import CheckpointReader
    from mxserve.model.deepseek_v4 import DeepseekV4Model
    from mxserve.model.forward_batch import ForwardBatch
    from mxserve.model.kernel_set import REFERENCE_KERNELS
    from mxserve.testing import random_checkpoint

    tmp = Path(tempfile.mkdtemp()) / "tiny-all"
    random_checkpoint("tiny-all", tmp, seed=1)
    reader = CheckpointReader(tmp)
    weights = {k: v.to(DEV) for k, v in reader.load(progress=False).items()}
    prompt = [0, *torch.randint(2, reader.config.vocab_size, (47,), generator=torch.Generator().manual_seed(3)).tolist()]

    def greedy(model):
        state = model.new_cache_state(max_sequences=1, max_positions=len(prompt) + num_new + 1, block_size=16, device=DEV)
        logits = model.forward(ForwardBatch.from_chunks([prompt], [0], [0], device=DEV), state)[-1:]
        tokens, all_logits = list(prompt), [logits]
        for _ in range(num_new):
            tokens.append(int(all_logits[-1][-1].argmax()))
            all_logits.append(model.forward(ForwardBatch.from_chunks([[tokens[-1]]], [0], [len(tokens) - 1],
                                                                     device=DEV), state))
        return tokens[len(prompt):], torch.cat(all_logits[:-1]).float().cpu()

    for numerics in ("faithful", "exact"):
        model = DeepseekV4Model(reader.config, weights, numerics=numerics)
        t0 = time.time()
        ref_tokens, ref_logits = greedy(model)
        t_ref = time.time() - t0
        model.set_kernels(dataclasses.replace(REFERENCE_KERNELS, **attention_ops("triton")))
        t0 = time.time()  # includes the Triton compiles of the first call
        tokens, logits = greedy(model)
        t_tri = time.time() - t0
        first = next((i for i, (x, y) in enumerate(zip(tokens, ref_tokens, strict=True)) if x != y), None)
        row = {"tokens_equal": tokens == ref_tokens, "first_divergence": first, "num_new": num_new,
               "ref_s": round(t_ref, 2), "triton_s": round(t_tri, 2)}
        if first is not None:
            lp = torch.log_softmax(ref_logits[first], -1)
            top2 = lp.topk(2).values
            row["ref_top2_gap_nats"] = float(top2[0] - top2[1])
            row["ref_logprob_gap_of_triton_choice_nats"] = float(lp.max() - lp[tokens[first]])
        common = min(len(logits), len(ref_logits)) if first is None else first + 1
        row["max_rel_logit_err_until_divergence"] = float(
            ((logits[:common] - ref_logits[:common]).abs().amax(-1) / ref_logits[:common].abs().amax(-1)).max())
        RESULTS["model"][numerics] = row
        print(numerics, row, flush=True)


# ------------------------------------------------------------------------------------------- bench
GRAPH = {"last": None}  # how the last `timed_graph` call was timed (reported per row)


def timed_graph(fn) -> float:
    """Median ms per call of `fn` replayed in a CUDA graph (no Python/launch overhead: what a
    graph-captured decode step pays); `timed` (do_bench, eager) where the call cannot be captured,
    and the row says so."""
    try:
        ms = graph_time([fn], replays=20) * 1e3
        GRAPH["last"] = "graph"
    except Exception as exc:  # a host sync inside: not capturable
        torch.cuda.synchronize()
        GRAPH["last"] = f"eager ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        ms = timed(fn)
    return ms


def timed(fn, budget_ms: float = 60.0) -> float:
    """Median ms per call in eager mode (triton.testing.do_bench): includes the launcher's Python."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=budget_ms))  # median ms


def copy_bandwidth_tbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms * 1e-3) / 1e12


@section("bench")
def bench(contexts, batches, ref_max_batch: int) -> None:
    from mxserve.kernels.attention_ops.triton_ops import (
        compressor_emit_triton,
        kv_insert_triton,
        q_norm_rope_triton,
        rope_triton,
    )
    from mxserve.kernels.cache import CompressorStateCache
    from mxserve.kernels.indexer import indexer_scores_ref
    from mxserve.kernels.indexer.triton import indexer_scores_cache_triton
    from mxserve.kernels.sparse_attention import sparse_attention_ref
    from mxserve.kernels.sparse_attention.triton import sparse_attention_triton
    from mxserve.kernels.topk import topk_tiebroken_ref
    from mxserve.kernels.topk.triton import topk_tiebroken_triton
    from mxserve.model.fused_ref import q_norm_rope_ref

    copy_tbps = copy_bandwidth_tbps()
    RESULTS["copy_tbps"] = copy_tbps
    print(f"device copy bandwidth {copy_tbps:.2f} TB/s (spec {SPEC_TBPS})", flush=True)
    f = rope_table()
    g = torch.Generator(device=DEV).manual_seed(1)
    heads, d, window, topk = 64, 512, 128, 512

    def row(kernel, ctx, batch, ms, ref_ms=None, bytes_=0, flops=0, **extra):
        r = {"kernel": kernel, "ctx": ctx, "batch": batch, "ms": ms, "us": ms * 1e3,
             "TBps": bytes_ / (ms * 1e-3) / 1e12 if bytes_ else None,
             "frac_spec_bw": bytes_ / (ms * 1e-3) / 1e12 / SPEC_TBPS if bytes_ else None,
             "TFLOPs": flops / (ms * 1e-3) / 1e12 if flops else None,
             "ref_ms": ref_ms, "speedup_vs_ref": (ref_ms / ms) if ref_ms else None, "timing": GRAPH["last"],
             **extra}
        RESULTS["bench"].append(r)
        print(json.dumps(r), flush=True)
        return r

    for ctx in contexts:
        n_csa, n_hca = ctx // 4, ctx // 128
        for batch in batches:
            try:
                do_ref = batch <= ref_max_batch
                win = kv_cache(batch * window, block_size=64)
                comp = kv_cache(batch * n_csa, block_size=64)
                hca = kv_cache(max(64, batch * n_hca), block_size=64)
                seq = torch.arange(batch, device=DEV)
                ws = (seq[:, None] * window + torch.arange(window, device=DEV)[None, :])  # [B, 128]
                cs = seq[:, None] * n_csa + torch.stack(
                    [torch.randperm(n_csa, device=DEV, generator=g)[:topk] for _ in range(batch)])
                hs = seq[:, None] * n_hca + torch.arange(n_hca, device=DEV)[None, :]
                q = (torch.randn(batch, heads, d, device=DEV, generator=g) * 0.05).bfloat16()
                sink = torch.randn(heads, device=DEV, generator=g)
                per_layer = {"csa": 0.0, "hca": 0.0}
                for kind, (cache, slots) in (("csa", (comp, cs)), ("hca", (hca, hs))):
                    srcs = [(win, ws), (cache, slots)]
                    ms = timed_graph(lambda srcs=srcs: sparse_attention_triton(q, srcs, sink, d**-0.5))
                    keys = window + slots.shape[1]
                    ref_ms = timed(lambda srcs=srcs: sparse_attention_ref(q, srcs, sink, d**-0.5), 30) if do_ref else None
                    row(f"attention_{kind}", ctx, batch, ms, ref_ms, bytes_=batch * keys * 584,
                        flops=4 * batch * heads * keys * d)
                    per_layer[kind] += ms
                # indexer scores over all ctx/4 entries of each sequence (one call per sequence, as
                # the model does) + tie-broken top-512 (one call for the batch) vs torch.topk
                icache = indexer_cache(batch * n_csa)
                iq = torch.randn(batch, 64, 128, device=DEV, generator=g).bfloat16()
                iw = torch.randn(batch, 64, device=DEV, generator=g) * 0.01
                islots = torch.arange(n_csa, device=DEV)
                ms = timed_graph(lambda: indexer_scores_cache_triton(iq, iw, icache, islots))
                ref_ms = timed(lambda: indexer_scores_ref(iq, iw, icache.read(islots)), 30) if do_ref else None
                row("indexer_scores", ctx, batch, ms, ref_ms, bytes_=n_csa * 132 + batch * 64 * 128 * 2,
                    flops=2 * batch * 64 * 128 * n_csa)
                per_layer["csa"] += ms
                scores = torch.randn(batch, n_csa, device=DEV, generator=g)
                ms = timed_graph(lambda: topk_tiebroken_triton(scores, topk))
                torch_ms = timed_graph(lambda: torch.topk(scores, topk, dim=1))
                ref_ms = timed(lambda: topk_tiebroken_ref(scores, topk), 30)
                row("topk", ctx, batch, ms, ref_ms, torch_topk_ms=torch_ms, speedup_vs_torch_topk=torch_ms / ms)
                per_layer["csa"] += ms
                # q path, window insert, compressor emits, inverse RoPE (decode: one token per sequence)
                pos = torch.full((batch,), ctx - 1, device=DEV)
                qr = torch.randn(batch, heads, d, device=DEV, generator=g).bfloat16()
                ms = timed_graph(lambda: q_norm_rope_triton(qr, pos, f, 1e-6))
                ref_ms = timed(lambda: q_norm_rope_ref(qr, pos, f, 1e-6), 30) if do_ref else None
                row("q_norm_rope", ctx, batch, ms, ref_ms, bytes_=2 * qr.numel() * 2)
                per_layer["csa"] += ms
                per_layer["hca"] += ms
                ms_inv = timed_graph(lambda: rope_triton(qr, pos, f, inverse=True))
                row("inverse_rope", ctx, batch, ms_inv, bytes_=2 * qr.numel() * 2)
                per_layer["csa"] += ms_inv
                per_layer["hca"] += ms_inv
                kvw = torch.randn(batch, d, device=DEV, generator=g).bfloat16()
                nw = torch.ones(d, device=DEV)
                wslots = seq * window + (ctx - 1) % window
                ms = timed_graph(lambda: kv_insert_triton(kvw, nw, 1e-6, pos, f, win, wslots))
                row("kv_insert", ctx, batch, ms, bytes_=batch * (d * 2 + 584))
                per_layer["csa"] += ms
                per_layer["hca"] += ms
                for kind, ratio, overlap, cache in (("csa", 4, True, comp), ("hca", 128, False, hca)):
                    width = (2 if overlap else 1) * d
                    r = (2 if overlap else 1) * ratio
                    state = CompressorStateCache(max(1, -(-batch * r // 64)) + 1, 64, 2 * width, device=DEV)
                    state.write(torch.arange(batch * r, device=DEV), torch.randn(batch * r, 2 * width, device=DEV, generator=g))
                    row_slots = torch.arange(batch * r, device=DEV).view(batch, r)
                    eslots = torch.arange(batch, device=DEV) * (cache.num_slots // batch)
                    ms = timed_graph(lambda state=state, row_slots=row_slots, eslots=eslots, cache=cache, ratio=ratio,
                               overlap=overlap: compressor_emit_triton(
                                   state, row_slots, eslots, pos, ratio=ratio, overlap=overlap, norm_weight=nw, eps=1e-6,
                                   inv_freq=f, out_dtype=torch.bfloat16, round_pooled_to_bf16=True, entry_cache=cache))
                    row(f"compressor_emit_{kind}", ctx, batch, ms, bytes_=batch * (r * width * 2 * 4 + 584),
                        note="worst case: every sequence emits this step")
                    per_layer[kind] += ms
                for kind, ms in per_layer.items():
                    row(f"layer_sum_{kind}", ctx, batch, ms,
                        note="sum of the kernels above (no projections/GEMMs); CSA includes its main compressor "
                             "emit, not the indexer's")
            except Exception as exc:
                RESULTS["errors"][f"bench ctx={ctx} batch={batch}"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()


# ---------------------------------------------------------------------------------------------- ab
def ab_params(variant: str, heads: int):
    """LaunchParams of an A/B variant (see the module docstring, section 4)."""
    from mxserve.kernels.attention_ops.cache_args import EntryMode
    from mxserve.kernels.sparse_attention import triton as launcher

    if variant == "pieces":  # the session-5 configuration, whatever the launcher's default
        return launcher.LaunchParams(dot=1, block_h=64, block_k=64, piece=64, num_warps=4)
    base = launcher.halves_params(launcher.launch_params(EntryMode.DS_MLA, heads, 512))
    changes = {"halves": {}, "halves-split": {"fold_min_tokens": 1 << 30}, "halves-fold": {"fold_min_tokens": 1},
               "halves-fold2": {"fold_ch_blocks": 2}, "halves-split1": {"split_ch_blocks": 1},
               "halves-stages2": {"fold_stages": 2}, "halves-nopdl": {"pdl": False}}[variant]
    return dataclasses.replace(base, **changes)


@section("ab")
def ab(contexts, batches, variants) -> None:
    from mxserve.kernels.sparse_attention.triton import sparse_attention_triton

    g = torch.Generator(device=DEV).manual_seed(5)
    heads, d, window, topk = 64, 512, 128, 512
    for ctx in contexts:
        n_csa, n_hca = ctx // 4, ctx // 128
        for batch in batches:
            win = kv_cache(batch * window, block_size=64)
            comp = kv_cache(batch * n_csa, block_size=64)
            hca = kv_cache(max(64, batch * n_hca), block_size=64)
            seq = torch.arange(batch, device=DEV)
            ws = seq[:, None] * window + torch.arange(window, device=DEV)[None, :]
            cs = seq[:, None] * n_csa + torch.stack(
                [torch.randperm(n_csa, device=DEV, generator=g)[:topk] for _ in range(batch)])
            hs = seq[:, None] * n_hca + torch.arange(n_hca, device=DEV)[None, :]
            q = (torch.randn(batch, heads, d, device=DEV, generator=g) * 0.05).bfloat16()
            sink = torch.randn(heads, device=DEV, generator=g)
            for kind, srcs in (("csa", [(win, ws), (comp, cs)]), ("hca", [(win, ws), (hca, hs)])):
                keys = window + srcs[1][1].shape[1]
                outs = {}
                for variant in variants:
                    try:
                        lp = ab_params(variant, heads)
                        outs[variant] = sparse_attention_triton(q, srcs, sink, d**-0.5, params=lp)
                        ms = timed_graph(lambda lp=lp, srcs=srcs: sparse_attention_triton(q, srcs, sink, d**-0.5,
                                                                                          params=lp))
                        want, got = outs.get("pieces"), outs[variant]
                        r = {"kernel": f"ab_{kind}", "variant": variant, "ctx": ctx, "batch": batch, "ms": ms,
                             "us": ms * 1e3, "TFLOPs": 4 * batch * heads * keys * d / (ms * 1e-3) / 1e12,
                             "timing": GRAPH["last"],
                             "fold": batch >= lp.fold_min_tokens if lp.kernel == "halves" else None,
                             "rel_err_vs_pieces": None if want is None else float(
                                 ((got - want).abs().amax(dim=(1, 2)) / want.abs().amax(dim=(1, 2))).max()),
                             "same_bits_as_halves": None if "halves" not in outs or lp.kernel != "halves"
                             else bool(torch.equal(got, outs["halves"]))}
                    except Exception as exc:  # one variant failing must not cost the others
                        r = {"kernel": f"ab_{kind}", "variant": variant, "ctx": ctx, "batch": batch,
                             "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                        traceback.print_exc()
                    RESULTS["ab"].append(r)
                    print(json.dumps(r), flush=True)
            del win, comp, hca


def ab_table() -> str:
    """us per call (TFLOP/s at the largest batch) per variant and shape, one line per variant."""
    rows = RESULTS["ab"]
    shapes = sorted({(r["kernel"], r["ctx"], r["batch"]) for r in rows}, key=lambda x: (x[0], x[1], x[2]))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    head = "variant | " + " | ".join(f"{k[3:]} {c // 1024}K b{b}" for k, c, b in shapes)
    lines = [head]
    for v in variants:
        cells = []
        for k, c, b in shapes:
            r = next((r for r in rows if (r["kernel"], r["ctx"], r["batch"], r["variant"]) == (k, c, b, v)), None)
            if r is None or "error" in r:
                cells.append("ERR" if r else "")
                continue
            flags = ("" if r["same_bits_as_halves"] in (None, True) else " BITS!") + (
                "" if (r["rel_err_vs_pieces"] or 0) <= 2e-4 else " ERR!")
            cells.append(f"{r['us']:.1f}" + (f" ({r['TFLOPs']:.0f}TF)" if b >= 64 else "") + flags)
        lines.append(f"{v} | " + " | ".join(cells))
    return "\n".join(lines)


def table() -> str:
    lines = ["| kernel | ctx | batch | us | TB/s | %spec | TFLOP/s | x ref | x torch.topk |", "|---|---|---|---|---|---|---|---|---|"]

    def fmt(v, p=2):
        return "" if v is None else f"{v:.{p}f}"

    for r in RESULTS["bench"]:
        lines.append(f"| {r['kernel']} | {r['ctx']} | {r['batch']} | {r['us']:.1f} | {fmt(r['TBps'])} | "
                     f"{fmt(r['frac_spec_bw'] and 100 * r['frac_spec_bw'], 0)} | {fmt(r['TFLOPs'], 1)} | "
                     f"{fmt(r['speedup_vs_ref'], 1)} | {fmt(r.get('speedup_vs_torch_topk'), 2)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("attn.json"))
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 65536])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--ref-max-batch", type=int, default=8, help="time the fp64 torch reference up to this batch")
    ap.add_argument("--num-new", type=int, default=24)
    ap.add_argument("--skip", nargs="*", default=[], choices=["parity", "model", "bench"])
    ap.add_argument("--ab", nargs="*", default=None, help="only the sparse-attention A/B over these variants "
                    "(pieces halves halves-split halves-fold halves-fold2 halves-split1 halves-stages2 halves-nopdl)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: benchmarks/attention.py needs a CUDA GPU")
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["command"] = "python benchmarks/attention.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "skip")
    t0 = time.time()
    if args.ab is not None:
        args.skip = ["parity", "model", "bench"]
        ab(args.contexts, args.batches, args.ab or ["pieces", "halves"])
    if "parity" not in args.skip:
        parity()
    if "model" not in args.skip:
        model_parity(args.num_new)
    if "bench" not in args.skip:
        bench(args.contexts, args.batches, args.ref_max_batch)
    RESULTS["total_s"] = time.time() - t0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(RESULTS, indent=1, default=str))
    print("\nparity:", json.dumps(RESULTS["parity"]))
    for k, v in RESULTS["model"].items():
        print("model", k, json.dumps(v))
    if RESULTS["bench"]:
        print(table())
    if RESULTS["ab"]:
        print(ab_table())
    if RESULTS["errors"]:
        print("ERRORS:", json.dumps(RESULTS["errors"], indent=1))
    print(f"total {RESULTS['total_s']:.0f} s; raw results in {args.out}")


if __name__ == "__main__":
    main()
