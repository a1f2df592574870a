"""The indexer's tie-broken top-k on one GPU (session 5, issue 11): the radix-select kernel vs the
legacy one-program kernel vs torch.topk, and parity with the torch twin; session 7: the rank path
(`topk_tiebroken_triton_rank`) against the select kernel and torch.topk.

    PYTHONPATH=src python benchmarks/topk.py parity --c 16384 --k 512 --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py time --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py sweep --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py table --out $OUT/topk
    PYTHONPATH=src python benchmarks/topk.py ab --out $OUT/topk          (session 7)
    PYTHONPATH=src python benchmarks/topk.py rank-sweep --out $OUT/topk  (session 7)
    PYTHONPATH=src python benchmarks/topk.py ab-table --out $OUT/topk    (session 7)

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
ab: at (rows, C) = (1, 1024), (8, 1024), (1, 16384), (64, 16384) [+ (64, 1024)], k = 512: the rank
path's indices vs the twin's on random, tied (7 values, -0.0/0.0) and equal rows with num_valid
varied per row, then `us_graph1` / `us_graph10` (as `time`) for rank, select and torch.topk on
random rows with num_valid = C, plus rank on tied rows (the exact bound's fallback). ab.json.
rank-sweep: the rank path's launch variants (programs a row, members, warps, chunks), random rows.
ab-table: at most 25 lines: old (select) vs new (rank) vs torch.topk, in-step speedups, targets.
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


AB_CASES = ((1, 1024), (8, 1024), (1, 16384), (64, 16384), (64, 1024))
ISSUE11_TARGET = 10.0  # rank in-step >= 10x torch.topk in-step (issue 11)


def _row(impl, rows, c, kind, fn, inputs, **extra) -> dict:
    t0 = time.time()
    r = {"impl": impl, "rows": rows, "C": c, "k": 512, "inputs": kind, **extra}  # extra may carry another k
    try:
        one, ten = _timed(fn, inputs)
        r |= {"us_graph1": round(one, 2), "us_graph10": round(ten, 2)}
    except Exception as exc:  # one failing variant must not cost the others
        r["error"] = f"{type(exc).__name__}: {exc}"[:300]
    r["s"] = round(time.time() - t0, 1)
    print(json.dumps(r), flush=True)
    return r


def ab(out: Path, cases=AB_CASES, k: int = 512, tied_select: bool = False) -> None:
    """Parity of the rank path with the twin, then rank vs select vs torch.topk (see the docstring).
    `tied_select`: also time select on the tied rows (the rank path's slow case) at every row count."""
    from mxserve.kernels.topk import topk_tiebroken_ref
    from mxserve.kernels.topk.triton import (
        rank_launch_params,
        topk_tiebroken_triton_rank,
        topk_tiebroken_triton_select,
    )

    rows_out = []

    def save(r):
        rows_out.append(r)
        (out / "ab.json").write_text(json.dumps(rows_out, indent=1))  # kept if cut short

    for rows, c in cases:
        for kind in ("random", "tied", "equal"):
            scores = (torch.zeros(rows, c, device=DEV) if kind == "equal"
                      else scores_for(kind, rows, c, seed=rows + c))
            g = torch.Generator(device=DEV).manual_seed(rows)
            num_valid = torch.randint(0, c + 1, (rows,), device=DEV, generator=g)
            num_valid[0] = c
            r = {"impl": "parity", "rows": rows, "C": c, "inputs": kind}
            try:
                got = topk_tiebroken_triton_rank(scores, k, num_valid=num_valid)
                want = topk_tiebroken_ref(scores, k, num_valid=num_valid)
                r["identical_to_twin"] = torch.equal(got, want)
                if not r["identical_to_twin"]:
                    bad = (got != want).nonzero()[:3].tolist()
                    r["first_mismatches"] = [(i, j, int(got[i, j]), int(want[i, j])) for i, j in bad]
            except Exception as exc:  # recorded; the timing below still runs
                r |= {"identical_to_twin": False, "first_mismatches": f"{type(exc).__name__}: {exc}"[:200]}
            print(json.dumps(r), flush=True)
            save(r)
    for rows, c in cases:
        lp = rank_launch_params(rows, c, k, torch.device(DEV))
        shape = {"P": lp["rank"]["P"], "MB": lp["rank"]["MB"], "Q": lp["bound"]["Q"] if lp["bound"] else 0}
        for kind in ("random", "tied") if rows == 1 or tied_select else ("random",):
            inputs = [(scores_for(kind, rows, c, seed=s), k, None, torch.full((rows,), c, device=DEV))
                      for s in range(3)]
            save(_row("rank", rows, c, kind, topk_tiebroken_triton_rank, inputs, k=k, **shape))
            if tied_select and kind == "tied":
                save(_row("select", rows, c, kind, topk_tiebroken_triton_select, inputs, k=k))
            if kind == "random":
                save(_row("select", rows, c, kind, topk_tiebroken_triton_select, inputs, k=k))
                save(_row("torch.topk", rows, c, kind, lambda s, kk, m, nv: torch.topk(s, kk, dim=1), inputs, k=k))


RANK_VARIANTS = (  # (rows, C, overrides)
    (64, 16384, {"programs_per_row": 5}), (64, 16384, {"programs_per_row": 8}),
    (64, 16384, {"programs_per_row": 4, "members": 256, "num_warps": 4}),
    (64, 16384, {"programs_per_row": 10, "members": 64, "num_warps": 1}),
    (64, 16384, {"chunks_per_row": 1}), (64, 16384, {"use_float": False}),
    (1, 16384, {"chunks_per_row": 32}), (1, 16384, {"programs_per_row": 64}),
    (8, 1024, {"programs_per_row": 32, "members": 32}), (1, 1024, {"programs_per_row": 64, "members": 16}),
)


def rank_sweep(out: Path) -> None:
    from mxserve.kernels.topk.triton import topk_tiebroken_triton_rank

    k = 512
    rows_out = []
    for rows, c, ov in RANK_VARIANTS:
        inputs = [(scores_for("random", rows, c, seed=s), k, None, torch.full((rows,), c, device=DEV)) for s in range(3)]

        def fn(s, kk, m, nv, ov=ov):
            return topk_tiebroken_triton_rank(s, kk, m, nv, **ov)

        rows_out.append(_row("rank-variant", rows, c, "random", fn, inputs, variant=ov))
        (out / "rank_sweep.json").write_text(json.dumps(rows_out, indent=1))


def _cell(r: dict | None) -> str:
    return f"{r['us_graph1']:>6.1f} |{r['us_graph10']:>6.1f}" if r else f"{'-':>14}"


def ab_table(out: Path) -> None:
    lines = []
    f = out / "ab.json"
    rows = json.loads(f.read_text()) if f.exists() else []
    par = [r for r in rows if r["impl"] == "parity"]
    bad = [r for r in par if not r["identical_to_twin"]]
    lines.append(f"parity (rank vs twin, random/tied/equal, num_valid varied): {len(par) - len(bad)}/{len(par)} identical"
                 + "".join(f"\n  MISMATCH rows={r['rows']} C={r['C']} {r['inputs']}: {r.get('first_mismatches')}"
                           for r in bad[:3]))
    by = {(r["impl"], r["rows"], r["C"], r["inputs"]): r for r in rows if "us_graph1" in r}
    lines.append("k=512, us per call: 1 call/graph | 10 calls/graph (in-step); speedups in-step")
    lines.append(f"{'rows x C':>11} {'rank (new)':>14} {'select (old)':>14} {'torch.topk':>14} {'vs old':>7} {'vs topk':>8}  target")
    for rows_, c in AB_CASES:
        new, old, top = (by.get((i, rows_, c, "random")) for i in ("rank", "select", "torch.topk"))
        if not (new or old or top):
            continue
        vs_old = f"x{old['us_graph10'] / new['us_graph10']:.1f}" if new and old else "-"
        vs_top = top["us_graph10"] / new["us_graph10"] if new and top else None
        target = (f"{'MET' if vs_top >= ISSUE11_TARGET else 'missed'} (<= {top['us_graph10'] / ISSUE11_TARGET:.1f} us)"
                  if vs_top else "")
        lines.append(f"{rows_:>4} x{c:>6} {_cell(new)} {_cell(old)} {_cell(top)} {vs_old:>7} "
                     f"{f'x{vs_top:.1f}' if vs_top else '-':>8}  {target}")
    for rows_, c in AB_CASES:
        t = by.get(("rank", rows_, c, "tied"))
        if t:
            lines.append(f"rank, tied rows (exact-bound fallback) {rows_} x {c}: {t['us_graph1']} | {t['us_graph10']} us")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines.append(f"timing errors: {len(errors)}, first: {errors[0]['impl']} {errors[0]['rows']}x{errors[0]['C']}: "
                     f"{errors[0]['error'][:150]}")
    f = out / "rank_sweep.json"
    if f.exists():
        for r in json.loads(f.read_text()):
            lines.append(f"variant {r['rows']}x{r['C']} {r['variant']}: "
                         + (f"{r['us_graph1']} | {r['us_graph10']}" if "us_graph1" in r else f"ERR {r['error'][:60]}"))
    print("\n".join(lines[:25]))


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
    ap.add_argument("what", choices=["parity", "time", "sweep", "table", "ab", "rank-sweep", "ab-table"])
    ap.add_argument("--c", type=int, default=16384)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", default=None, help="ab: ROWSxC,ROWSxC,... instead of the built-in cases")
    ap.add_argument("--tied-select", action="store_true", help="ab: time select on tied rows too")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "parity":
        parity(args.c, args.k, args.out)
    elif args.what == "time":
        timing(args.out)
    elif args.what == "sweep":
        sweep(args.out)
    elif args.what == "ab":
        cases = (AB_CASES if args.cases is None
                 else tuple(tuple(int(v) for v in case.split("x")) for case in args.cases.split(",")))
        ab(args.out, cases, args.k, args.tied_select)
    elif args.what == "rank-sweep":
        rank_sweep(args.out)
    elif args.what == "ab-table":
        ab_table(args.out)
    else:
        table(args.out)


if __name__ == "__main__":
    main()
