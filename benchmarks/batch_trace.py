"""Where a batch's wall time goes, step by step: the serving sweep's workload without the HTTP server.

N closed-loop clients each send --requests-per-client requests one after another (greedy,
--prompt-len random tokens, --output-len tokens, EOS ignored), as `mxserve bench serve` does, into
one `LLMEngine` driven step by step here. Every step is timed (wall, around `engine.step()`) and
classified by what it ran: `decode` (only one-token chunks, with or without drafts), `prefill`,
or `mixed`; `eager` when the runner recorded an eager reason for it, `+capture` when a CUDA graph
was captured during it. Printed per kind: steps, seconds, share of the wall, median ms; then the
ten slowest steps, and the aggregate output tok/s. One warm-up round runs first (Triton compiles)
unless --no-warm-up; --capture-at-start captures every graph bucket before it, as the server does.

    PYTHONPATH=src python benchmarks/batch_trace.py --device cuda --concurrency 8 --k 7 --capture-at-start
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import defaultdict
from pathlib import Path

from e2e_vs_transformers import parse_kernels

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path


def captured(runner) -> int:
    """How many graphs the runner holds (decode buckets, or the speculative step's parts)."""
    graphs = getattr(runner, "step_graphs", None)
    if graphs is not None:
        return sum(len(b) for b in graphs.captured_buckets().values())
    return len(runner.decode_graphs.captured_buckets()) if runner.decode_graphs is not None else 0


def run_round(llm: LLM, args, rng: random.Random, tag: str) -> tuple[list[dict], float, int]:
    """One closed-loop round: (per-step records, wall seconds, output tokens)."""
    engine, runner = llm.engine, llm.engine.runner
    params = SamplingParams(max_tokens=args.output_len, temperature=0, ignore_eos=True)
    vocab = engine.model_config.vocab_size
    left = {c: args.requests_per_client for c in range(args.concurrency)}
    owner: dict[str, int] = {}

    def send(client: int) -> None:
        rid = f"{tag}-{client}-{left[client]}"
        left[client] -= 1
        owner[rid] = client
        engine.add_request(rid, [rng.randrange(3, vocab) for _ in range(args.prompt_len)], params)

    for client in left:
        send(client)
    seen_chunks: list = []
    real_execute = runner.execute

    def recording(step, sampling):
        seen_chunks.append(step.chunks)
        return real_execute(step, sampling)

    runner.execute = recording
    records, tokens = [], 0
    start = time.perf_counter()
    try:
        while engine.has_unfinished_requests():
            eager_before, graphs_before = sum(runner.eager_stats.counts.values()), captured(runner)
            seen_chunks.clear()
            t0 = time.perf_counter()
            outputs = engine.step()
            wall = time.perf_counter() - t0
            chunks = seen_chunks[0] if seen_chunks else ()
            decodes = sum(1 for c in chunks if c.num_tokens == 1)
            kind = "decode" if chunks and decodes == len(chunks) else "prefill" if not decodes else "mixed"
            if sum(runner.eager_stats.counts.values()) > eager_before:
                kind += " eager"
            if captured(runner) > graphs_before:
                kind += " +capture"
            records.append({"kind": kind, "ms": wall * 1e3, "chunks": len(chunks), "decodes": decodes,
                            "prefill_tokens": sum(c.num_tokens for c in chunks if c.num_tokens != 1),
                            "drafts": sum(getattr(c, "num_draft_tokens", 0) for c in chunks)})
            for out in outputs:
                if out.finished:
                    tokens += len(out.outputs[0].token_ids)
                    client = owner.pop(out.request_id)
                    if left[client]:
                        send(client)
    finally:
        runner.execute = real_execute
    return records, time.perf_counter() - start, tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--k", type=int, default=0, help="DSpark draft tokens (0 = no speculation)")
    p.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton",
                   help="kernel overrides (MXSERVE_KERNEL_OVERRIDES syntax); '' = engine defaults")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--prefill-cap", type=int, default=256, help="long_prefill_token_threshold")
    p.add_argument("--capture-at-start", action="store_true")
    p.add_argument("--no-warm-up", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    spec = {"method": "dspark", "num_speculative_tokens": args.k} if args.k else None
    llm = LLM(str(default_model_path()), device=args.device, max_model_len=4096, max_num_seqs=64,
              max_num_batched_tokens=args.max_num_batched_tokens, long_prefill_token_threshold=args.prefill_cap,
              kernel_overrides=parse_kernels(args.kernels), speculative_config=spec, progress=False)
    if args.capture_at_start:
        print(llm.engine.capture_graphs().line())
    rng = random.Random(0)
    if not args.no_warm_up:
        run_round(llm, argparse.Namespace(**{**vars(args), "output_len": 16}), rng, "warm")
    records, wall, tokens = run_round(llm, args, rng, "timed")
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_kind[r["kind"]].append(r["ms"])
    rows = getattr(llm.engine.runner, "num_prefill_row_steps", 0)
    print(f"N={args.concurrency} K={args.k} capture_at_start={args.capture_at_start} prefill row steps={rows}: "
          f"{len(records)} steps, "
          f"{wall:.2f} s, {tokens} tokens, {tokens / wall:.1f} tok/s aggregate")
    print(f"{'kind':<24} {'steps':>6} {'s':>7} {'share':>6} {'median ms':>10}")
    for kind, ms in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
        print(f"{kind:<24} {len(ms):6d} {sum(ms) / 1e3:7.2f} {sum(ms) / 1e3 / wall:6.1%} {statistics.median(ms):10.2f}")
    print("slowest steps:", ", ".join(f"{r['ms']:.0f} ms {r['kind']} ({r['decodes']} dec, {r['prefill_tokens']} "
                                      f"pre, {r['drafts']} drafts)"
                                      for r in sorted(records, key=lambda r: -r["ms"])[:10]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "wall_s": wall,
                                        "tokens": tokens, "steps": records}, indent=1))


if __name__ == "__main__":
    main()
