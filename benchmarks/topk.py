"""The indexer's tie-broken top-k on one GPU (session 5, issue 11): the radix-select kernel vs the
legacy one-program kernel vs torch.topk, and parity with the torch twin.

    PYTHONPATH=src python benchmarks/topk.py parity --c 16384 --k 512 --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py time --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py sweep --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py table --out $OUT/topk

parity: at one (C, k), rows 1/8/64 (the launch parameters, and so the code path, follow the row
count), random fp32 and heavily tied scores (7 values, -0.0 and 0.0 mixed), num_valid varied per
row: the select kernel's indices vs the twin's and the legacy kernel's, bit for bit.
time: CUDA-graph replay, median of 50 replays: `us_graph1` = one call per graph (comparable to
the session-4 numbers: includes the graph launch, ~2-3 us), `us_graph10` = ten calls per graph
(rotating inputs) per call, what a call costs inside a captured decode step. Rows 1/8/64 x
C 1024/16384 x k 512, random scores, num_valid = C; plus tied scores at one row.
sweep: the select kernel's launch variants (programs per row, warps), same timing.
One JSON file per section under --out.
table: at most 25 lines from the JSON files.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _cuda_timing import graph_time

DEV = "cuda"
ROWS = (1, 8, 64)


def scores_for(kind: str, rows: int, c: int, seed: int) -> torch.Tensor:
    g = torch.Generator(device=DEV).manual_seed(seed)
    if kind == "random":
        return torch.randn(rows, c, device=DEV, generator=g)
    s = torch.randint(-3, 4, (rows, c), device=DEV, generator=g).float() * 0.5
    flip = torch.rand(rows, c, device=DEV, generator=g) < 0.5
    return torch.where((s == 0) & flip, torch.full_like(s, -0.0), s)


def parity(c: int, k: int, out: Path) -> None:
    from mxserve.kernels.topk import topk_tiebroken_ref
    from mxserve.kernels.topk.triton import (
        select_launch_params,
        topk_tiebroken_triton_legacy,
        topk_tiebroken_triton_select,
    )

    rows_out = []
    for rows in ROWS:
        for kind in ("random", "tied"):
            t0 = time.time()
            scores = scores_for(kind, rows, c, seed=rows + c + k)
            g = torch.Generator(device=DEV).manual_seed(rows)
            num_valid = torch.randint(0, c + 1, (rows,), device=DEV, generator=g)
            num_valid[0] = c
            got = topk_tiebroken_triton_select(scores, k, num_valid=num_valid)
            want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
            legacy = topk_tiebroken_triton_legacy(scores, k, num_valid=num_valid)
            lp = select_launch_params(rows, c, k, scores.device)
            r = {"C": c, "k": k, "rows": rows, "inputs": kind, "P": lp["P"], "num_warps": lp["num_warps"],
                 "identical_to_twin": torch.equal(got, want), "identical_to_legacy": torch.equal(got, legacy),
                 "legacy_identical_to_twin": torch.equal(legacy, want), "s": round(time.time() - t0, 2)}
            if not r["identical_to_twin"]:
                bad = (got != want).nonzero()[:3].tolist()
                r["first_mismatches"] = [(i, j, int(got[i, j]), int(want[i, j])) for i, j in bad]
            rows_out.append(r)
            print(json.dumps(r), flush=True)
            (out / f"parity_C{c}_k{k}.json").write_text(json.dumps(rows_out, indent=1))  # kept if cut short


def _timed(fn, inputs: list) -> tuple[float, float]:
    """(us with one call per graph, us per call with ten calls per graph on rotating inputs)."""
    one = graph_time([lambda: fn(*inputs[0])], replays=50) * 1e6
    ten = graph_time([lambda a=a: fn(*a) for a in (inputs * 10)[:10]], replays=50) * 1e6
    return one, ten


def timing(out: Path) -> None:
    from mxserve.kernels.topk.triton import (
        select_launch_params,
        topk_tiebroken_triton_legacy,
        topk_tiebroken_triton_select,
    )

    k = 512
    rows_out = []

    def add(impl, rows, c, inputs_kind, fn, inputs, **extra):
        t0 = time.time()
        try:
            one, ten = _timed(fn, inputs)
            r = {"impl": impl, "rows": rows, "C": c, "k": k, "inputs": inputs_kind, "us_graph1": round(one, 2),
                 "us_graph10": round(ten, 2), **extra}
        except Exception as exc:  # one failing variant must not cost the others
            r = {"impl": impl, "rows": rows, "C": c, "k": k, "inputs": inputs_kind, "error": f"{type(exc).__name__}: {exc}"}
        r["s"] = round(time.time() - t0, 1)
        rows_out.append(r)
        print(json.dumps(r), flush=True)
        (out / "timing.json").write_text(json.dumps(rows_out, indent=1))

    for c in (1024, 16384):
        for rows in ROWS:
            inputs = [(scores_for("random", rows, c, seed=s), k, None, torch.full((rows,), c, device=DEV))
                      for s in range(3)]
            lp = select_launch_params(rows, c, k, inputs[0][0].device)
            add("select", rows, c, "random", topk_tiebroken_triton_select, inputs, P=lp["P"], num_warps=lp["num_warps"])
            add("legacy", rows, c, "random", topk_tiebroken_triton_legacy, inputs)
            add("torch.topk", rows, c, "random", lambda s, kk, m, nv: torch.topk(s, kk, dim=1), inputs)
        tied = [(scores_for("tied", 1, c, seed=s), k, None, torch.full((1,), c, device=DEV)) for s in range(3)]
        lp = select_launch_params(1, c, k, tied[0][0].device)
        add("select", 1, c, "tied", topk_tiebroken_triton_select, tied, P=lp["P"], num_warps=lp["num_warps"])
        add("legacy", 1, c, "tied", topk_tiebroken_triton_legacy, tied)


def sweep(out: Path) -> None:
    """The select kernel's launch variants (programs per row, warps), random scores, k = 512."""
    from mxserve.kernels.topk.triton import select_launch_params, topk_tiebroken_triton_select

    k = 512
    rows_out = []
    for c, rows, p, nw in ((16384, 1, 16, None), (16384, 1, 64, 8), (16384, 1, 64, 32), (16384, 64, 1, 8),
                           (16384, 64, 1, 32), (1024, 1, 16, None), (1024, 1, 64, 8), (1024, 64, 1, 8),
                           (1024, 8, 1, None)):
        inputs = [(scores_for("random", rows, c, seed=s), k, None, torch.full((rows,), c, device=DEV)) for s in range(3)]

        def fn(s, kk, m, nv, p=p, nw=nw):
            return topk_tiebroken_triton_select(s, kk, m, nv, programs_per_row=p, num_warps=nw)

        lp = select_launch_params(rows, c, k, inputs[0][0].device, p, nw)
        r = {"impl": "select-variant", "rows": rows, "C": c, "k": k, "P": lp["P"], "num_warps": lp["num_warps"]}
        t0 = time.time()
        try:
            r["us_graph1"], r["us_graph10"] = (round(x, 2) for x in _timed(fn, inputs))
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"
        r["s"] = round(time.time() - t0, 1)
        rows_out.append(r)
        print(json.dumps(r), flush=True)
        (out / "sweep.json").write_text(json.dumps(rows_out, indent=1))


def table(out: Path) -> None:
    lines = []
    parity_rows = [r for f in sorted(out.glob("parity_*.json")) for r in json.loads(f.read_text())]
    if parity_rows:
        bad = [r for r in parity_rows if not (r["identical_to_twin"] and r["identical_to_legacy"])]
        lines.append(f"parity: {len(parity_rows) - len(bad)}/{len(parity_rows)} cases identical to twin and legacy"
                     + "".join(f"\n  MISMATCH C={r['C']} k={r['k']} rows={r['rows']} {r['inputs']} P={r['P']}: "
                               f"twin={r['identical_to_twin']} legacy={r['identical_to_legacy']}" for r in bad[:4]))
    timing_file = out / "timing.json"
    if timing_file.exists():
        rows = json.loads(timing_file.read_text())
        by = {(r["impl"], r["rows"], r["C"], r["inputs"]): r for r in rows if "error" not in r}
        lines.append("k=512, us per call (1 call/graph | 10 calls/graph)       select/legacy/torch.topk, P, speedups")
        for r in rows:
            if r["impl"] != "select":
                continue
            key = (r["rows"], r["C"], r["inputs"])
            leg, top = by.get(("legacy", *key)), by.get(("torch.topk", *key))
            sel = r.get("us_graph1")
            parts = [f"rows={r['rows']:>2} C={r['C']:>5} {r['inputs']:<6}",
                     f"sel {sel} | {r.get('us_graph10')}" if sel else f"sel ERROR {r.get('error', '')[:40]}",
                     f"leg {leg['us_graph1']} | {leg['us_graph10']}" if leg else "leg -",
                     f"topk {top['us_graph1']} | {top['us_graph10']}" if top else "",
                     f"P={r.get('P')} w={r.get('num_warps')}"]
            if sel and leg:
                parts.append(f"x{leg['us_graph1'] / sel:.1f} vs legacy")
            if sel and top:
                parts.append(f"x{top['us_graph1'] / sel:.1f} vs topk")
            lines.append("  ".join(p for p in parts if p))
        errors = [r for r in rows if "error" in r]
        if errors:
            lines.append(f"timing errors: {len(errors)}, first: {errors[0]['impl']} {errors[0]['error'][:120]}")
    sweep_file = out / "sweep.json"
    if sweep_file.exists():
        variants = json.loads(sweep_file.read_text())
        if variants:
            lines.append("variants: " + "; ".join(
                f"r{r['rows']} C{r['C']} P{r.get('P')} w{r.get('num_warps')}: "
                + (f"{r['us_graph1']}|{r['us_graph10']}" if "us_graph1" in r else "ERR") for r in variants))
    print("\n".join(lines[:25]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["parity", "time", "sweep", "table"])
    ap.add_argument("--c", type=int, default=16384)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "parity":
        parity(args.c, args.k, args.out)
    elif args.what == "time":
        timing(args.out)
    elif args.what == "sweep":
        sweep(args.out)
    else:
        table(args.out)


if __name__ == "__main__":
    main()
