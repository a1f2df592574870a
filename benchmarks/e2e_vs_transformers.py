"""Issue 11's end-to-end target: the default model decodes >= 15x faster than transformers
`generate` at batch 1 and >= 50x in aggregate at 64 concurrent requests (GPU).

Both sides run the packaged default model: transformers' `DeepseekV4ForCausalLM` on the checkpoint's
own weights dequantized to bf16 (the oracle's name map, `mxserve.verify.oracle.hf_state_dict`), greedy
`generate` with its KV cache; mxserve through `LLM` with the kernels of `--kernels` (default: every
Triton kernel, which also enables CUDA-graph decode) in faithful numerics. Same prompts (BOS + 24
held-out tokens), `--new-tokens` tokens each, EOS ignored on both sides; one warm-up call each
first (compiles, cuBLAS handles). Output tok/s = prompts x new tokens / wall time of one call
(the prefill of 25 tokens is included on both sides).

    PYTHONPATH=src python benchmarks/e2e_vs_transformers.py --out $OUT/e2e.json
    PYTHONPATH=src python benchmarks/e2e_vs_transformers.py --device cpu --batches 1 --new-tokens 4   # smoke

`--step-times` also records mxserve's per-step wall times: the prefill step(s) apart from the
decode steps, so a batch's tok/s can be read as prefill + steps x ms/step. `--hf-new-tokens`
runs transformers for fewer tokens (its tok/s is then a rate over those tokens; the speedup
compares rates).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path
from mxserve.engine.tokenizer import Tokenizer

TARGETS = {1: 15.0, 64: 50.0}  # batch -> required speedup (issue 11)


def prompts_for(model_dir: Path, count: int, length: int = 24) -> list[list[int]]:
    tok = Tokenizer.from_dir(model_dir)
    ids = tok.encode((model_dir / "heldout_sample.txt").read_text(encoding="utf-8"))
    step = max(1, (len(ids) - length) // count)
    return [[tok.bos_token_id, *ids[(i * step) % (len(ids) - length):][:length]] for i in range(count)]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def transformers_model(model_dir: Path, device: str):
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    from mxserve.model.checkpoint import CheckpointReader
    from mxserve.model.checkpoint.hf_config import release_to_hf_config
    from mxserve.verify.oracle import hf_state_dict

    reader = CheckpointReader(model_dir)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    hf = DeepseekV4ForCausalLM(DeepseekV4Config(**release_to_hf_config(reader.config, dtype="float32")))
    missing = hf.load_state_dict(hf_state_dict(reader.config, reader.load(progress=False)), strict=False).missing_keys
    if missing:
        raise SystemExit(f"error: transformers parameters not set from the checkpoint: {missing[:5]}")
    return hf.to(device=device, dtype=dtype).eval()


def time_transformers(hf, prompts: list[list[int]], new_tokens: int, device: str) -> float:
    ids = torch.tensor(prompts, device=device)
    kwargs = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                  pad_token_id=0)
    with torch.no_grad():
        hf.generate(ids, **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        _sync(device)
        t0 = time.perf_counter()
        out = hf.generate(ids, **kwargs)
        _sync(device)
    elapsed = time.perf_counter() - t0
    if out.shape[1] != ids.shape[1] + new_tokens:
        raise RuntimeError(f"transformers generated {out.shape[1] - ids.shape[1]} tokens, asked {new_tokens}")
    return elapsed


class StepClock:
    """Wall time of each engine step of one `generate`, split into steps with a prefill chunk and
    pure-decode steps. A step ends with its one host read of the sampled tokens, which waits for
    the device, so a step's wall time includes its GPU work."""

    def __init__(self, llm: LLM) -> None:
        self.engine = llm.engine
        self.steps: list[tuple[float, bool]] = []  # (seconds, has a prefill chunk)
        self._step, self._schedule = self.engine.step, self.engine.scheduler.schedule
        self._last_prefill = False

        def schedule():
            out = self._schedule()
            self._last_prefill = any(c.num_tokens != 1 for c in out.chunks)
            return out

        def step():
            t0 = time.perf_counter()
            outs = self._step()
            self.steps.append((time.perf_counter() - t0, self._last_prefill))
            return outs

        self.engine.step, self.engine.scheduler.schedule = step, schedule

    def summary(self) -> dict:
        decode = sorted(s for s, prefill in self.steps if not prefill)
        prefill = [s for s, is_prefill in self.steps if is_prefill]
        return {"num_steps": len(self.steps), "prefill_steps_ms": [1e3 * s for s in prefill],
                "decode_steps": len(decode), "decode_step_ms_median": 1e3 * decode[len(decode) // 2] if decode else None,
                "decode_step_ms_mean": 1e3 * sum(decode) / len(decode) if decode else None,
                "decode_step_ms_min": 1e3 * decode[0] if decode else None}


def time_mxserve(llm: LLM, prompts: list[list[int]], new_tokens: int, device: str,
                 clock: StepClock | None = None, repeats: int = 1) -> tuple[float, list[float], dict | None]:
    """(median wall seconds, every call's wall, the step clock's summary of the median call) over
    `repeats` timed calls after one warm-up call."""
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))  # warm-up: graphs, compiles
    _sync(device)
    calls = []
    for _ in range(repeats):
        if clock is not None:
            clock.steps.clear()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        _sync(device)
        calls.append((time.perf_counter() - t0, clock.summary() if clock is not None else None))
        if any(len(o.outputs[0].token_ids) != new_tokens for o in outs):
            raise RuntimeError("mxserve generated a different number of tokens than asked")
    walls = [wall for wall, _ in calls]
    median_wall, median_steps = sorted(calls, key=lambda c: c[0])[len(calls) // 2]
    return median_wall, walls, median_steps


def parse_kernels(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item) if text else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernels", default="linear=triton,moe=triton,attention=triton,hc=triton",
                    help="mxserve kernel overrides (MXSERVE_KERNEL_OVERRIDES syntax); '' = engine defaults")
    ap.add_argument("--hf-new-tokens", type=int, default=None,
                    help="transformers' new tokens (default --new-tokens); its tok/s is compared as a rate")
    ap.add_argument("--step-times", action="store_true",
                    help="record mxserve's per-step wall times (prefill steps apart from decode steps)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="timed mxserve calls per batch (the median call is reported, every wall listed)")
    ap.add_argument("--out", type=Path, default=Path("e2e.json"))
    args = ap.parse_args()
    model_dir = default_model_path()
    hf = transformers_model(model_dir, args.device)
    llm = LLM(str(model_dir), device=args.device, numerics="faithful", kernel_overrides=parse_kernels(args.kernels),
              max_model_len=512, max_num_seqs=max(args.batches), progress=False)
    clock = StepClock(llm) if args.step_times else None
    hf_new = args.hf_new_tokens or args.new_tokens
    rows = []
    for batch in args.batches:
        prompts = prompts_for(model_dir, batch)
        hf_s = time_transformers(hf, prompts, hf_new, args.device)
        mx_s, mx_walls, mx_steps = time_mxserve(llm, prompts, args.new_tokens, args.device, clock, args.repeats)
        tokens = batch * args.new_tokens
        hf_tok_s = batch * hf_new / hf_s
        row = {"batch": batch, "new_tokens": args.new_tokens, "hf_new_tokens": hf_new, "transformers_s": hf_s,
               "mxserve_s": mx_s, "transformers_tok_s": hf_tok_s, "mxserve_tok_s": tokens / mx_s,
               "mxserve_calls_s": mx_walls, "speedup": (tokens / mx_s) / hf_tok_s, "target": TARGETS.get(batch)}
        row["met"] = None if row["target"] is None else row["speedup"] >= row["target"]
        if mx_steps is not None:
            row["mxserve_steps"] = mx_steps
        rows.append(row)
        print(json.dumps(row), flush=True)
    graphs = llm.engine.runner.decode_graphs
    summary = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
               "kernels": args.kernels, "numerics": "faithful", "transformers_dtype": str(next(hf.parameters()).dtype),
               "cuda_graph_buckets": list(graphs.captured_buckets()) if graphs is not None else [],
               "eager_reasons": dict(llm.engine.runner.eager_stats.counts), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"{'batch':>5} {'transformers tok/s':>19} {'mxserve tok/s':>14} {'speedup':>8} {'target':>7}"
          + (f" {'prefill ms':>11} {'decode ms/step (median, min)':>29}" if clock is not None else ""))
    for r in rows:
        line = (f"{r['batch']:>5} {r['transformers_tok_s']:>19.1f} {r['mxserve_tok_s']:>14.1f} {r['speedup']:>8.1f} "
                f"{r['target'] if r['target'] is not None else '-':>7}")
        if "mxserve_steps" in r:
            st = r["mxserve_steps"]
            pre = "+".join(f"{ms:.1f}" for ms in st["prefill_steps_ms"])
            line += f" {pre:>11} {st['decode_step_ms_median'] or 0:>20.2f}, {st['decode_step_ms_min'] or 0:.2f}"
        print(line)


if __name__ == "__main__":
    main()
