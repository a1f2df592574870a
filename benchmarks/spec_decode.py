"""Single-stream decode with DSpark speculation vs without (issue 13), on the packaged default model.

One engine per setting (`off`, then K in --ks, each with the graphed speculative step, K in
--no-lookahead-ks graphed without the draft lookahead, and K in --eager-ks with
MXSERVE_SPEC_GRAPHS=0: the eager step it replaces), all alive at once, each warmed
up (Triton compiles, graph captures). Then --repeats rounds; in each, every setting decodes every
held-out prompt alone, greedy, --new-tokens tokens (interleaved, so host drift during the run
hits every setting alike). Reported per setting: the median single-stream tok/s over
those calls (streamed with `LLM.stream`; end to end, the ~24-token prefill included, and decode
only, from the first token on), the same-run ratios against `off`, the mean acceptance length, whether every output equals `off`'s, how many steps took the
graphed path and why any did not.

    PYTHONPATH=src python benchmarks/spec_decode.py --ks 3 5 7 --out $OUT/spec.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from e2e_vs_transformers import parse_kernels, prompts_for

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path


def build(k: int, graphed: bool, args, lookahead: bool = True) -> LLM:
    """One engine (its own KV budget, so several live side by side), warmed up: compiles, captures."""
    os.environ["MXSERVE_SPEC_GRAPHS"] = "auto" if graphed else "0"
    os.environ["MXSERVE_SPEC_LOOKAHEAD"] = "1" if lookahead else "0"
    spec = {"method": "dspark", "num_speculative_tokens": k} if k else None
    llm = LLM(str(default_model_path()), device=args.device, numerics="faithful", max_model_len=512,
              kernel_overrides=parse_kernels(args.kernels), speculative_config=spec, progress=False,
              kv_cache_memory=1 << 30)
    llm.generate([[0, 7, 8, 9]], SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True))
    return llm


def time_round(llm: LLM, prompts: list[list[int]], args
               ) -> tuple[list[float], list[float], list[float], list[list[int]]]:
    """Each prompt decoded alone, streamed: per call the end-to-end tok/s (all tokens / wall, the
    prefill included), the decode-only tok/s (tokens after the first snapshot / time after it: the
    prefill step, a fixed eager cost on every setting, left out), the time to the first snapshot
    (ms), and the tokens."""
    params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True)
    rates, decode_rates, first_ms, outputs = [], [], [], []
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for prompt in prompts:
        sync()
        start = time.perf_counter()
        first_at, first_tokens, out = None, 0, ()
        for snapshot in llm.stream(prompt, params):
            out = snapshot.outputs[0].token_ids
            if first_at is None:
                first_at, first_tokens = time.perf_counter(), len(out)
        sync()
        end = time.perf_counter()
        rates.append(len(out) / (end - start))
        decode_rates.append((len(out) - first_tokens) / (end - first_at))
        first_ms.append((first_at - start) * 1e3)
        outputs.append(list(out))
    return rates, decode_rates, first_ms, outputs


def summary(k: int, graphed: bool, lookahead: bool, llm: LLM, rates: list[float], decode_rates: list[float],
            first_ms: list[float], outputs: list[list[int]], stats0) -> dict:
    runner = llm.engine.runner
    row = {"k": k, "graphed": graphed, "lookahead": lookahead, "tok_s_median": statistics.median(rates), "tok_s": rates,
           "decode_tok_s_median": statistics.median(decode_rates), "decode_tok_s": decode_rates,
           "first_token_ms_median": statistics.median(first_ms), "first_token_ms": first_ms,
           "outputs": outputs, "eager_reasons": dict(runner.eager_stats.counts)}
    if k:
        stats = llm.engine.spec_decode_stats.as_dict()
        verifies = stats["num_verifies"] - stats0["num_verifies"]
        accepted = stats["num_accepted_tokens"] - stats0["num_accepted_tokens"]
        row["mean_acceptance_length"] = 1 + accepted / max(verifies, 1)
        row["stats_total"] = stats
        graphs = runner.step_graphs
        row["graphed_steps"] = graphs.num_steps if graphs is not None else 0
        row["lookahead_drafts_used"] = graphs.num_ahead_used if graphs is not None else 0
        row["graphs_unavailable"] = graphs.unavailable if graphs is not None else "off"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--eager-ks", type=int, nargs="*", default=[3], help="K values also run with the eager step")
    ap.add_argument("--no-lookahead-ks", type=int, nargs="*", default=[],
                    help="K values also run graphed without the draft lookahead (MXSERVE_SPEC_LOOKAHEAD=0)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton")
    ap.add_argument("--out", type=Path, default=Path("spec.json"))
    args = ap.parse_args()
    prompts = prompts_for(default_model_path(), args.prompts)
    settings = ([(0, True, True)] + [(k, True, True) for k in args.ks] + [(k, True, False) for k in args.no_lookahead_ks]
                + [(k, False, False) for k in args.eager_ks])
    engines = [build(k, graphed, args, lookahead) for k, graphed, lookahead in settings]
    stats0 = [llm.engine.spec_decode_stats.as_dict() if k else None
              for (k, _, _), llm in zip(settings, engines, strict=True)]
    rates: list[list[float]] = [[] for _ in settings]
    decode_rates: list[list[float]] = [[] for _ in settings]
    first_ms: list[list[float]] = [[] for _ in settings]
    outputs: list[list[list[int]]] = [[] for _ in settings]
    for _ in range(args.repeats):  # rounds interleave the settings: host drift hits them alike
        for i, llm in enumerate(engines):
            got_rates, got_decode, got_first, got = time_round(llm, prompts, args)
            rates[i] += got_rates
            decode_rates[i] += got_decode
            first_ms[i] += got_first
            outputs[i] = got
    rows = [summary(k, graphed, lookahead, llm, rates[i], decode_rates[i], first_ms[i], outputs[i], stats0[i])
            for i, ((k, graphed, lookahead), llm) in enumerate(zip(settings, engines, strict=True))]
    base = rows[0]
    for row in rows:
        row["ratio_vs_off"] = row["tok_s_median"] / base["tok_s_median"]
        row["decode_ratio_vs_off"] = row["decode_tok_s_median"] / base["decode_tok_s_median"]
        row["identical_to_off"] = row["outputs"] == base["outputs"]
    args.out.write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1))
    print(f"{'setting':<14} {'tok/s':>8} {'x off':>6} {'decode':>8} {'x off':>6} {'1st ms':>7} {'accept len':>10} "
          f"{'same':>5} {'graphed':>8}  eager reasons")
    for row in rows:
        name = "off" if not row["k"] else f"K={row['k']}" + ("" if row["graphed"] else " eager") + (
            " no-ahead" if row["k"] and row["graphed"] and not row["lookahead"] else "")
        accept = f"{row['mean_acceptance_length']:.2f}" if row["k"] else "-"
        print(f"{name:<14} {row['tok_s_median']:8.1f} {row['ratio_vs_off']:6.2f} {row['decode_tok_s_median']:8.1f} "
              f"{row['decode_ratio_vs_off']:6.2f} {row['first_token_ms_median']:7.1f} {accept:>10} "
              f"{row['identical_to_off']!s:>5} {row.get('graphed_steps', '-')!s:>8}  {row['eager_reasons']}")


if __name__ == "__main__":
    main()
