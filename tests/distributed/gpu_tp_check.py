"""GPU check of tensor/expert parallelism over NCCL (run by hand on a machine with >= 2 GPUs).

    PYTHONPATH=src OUT=/tmp/out python tests/distributed/gpu_tp_check.py

For TP=2, TP=2+EP (and TP=4 when 4 GPUs are visible) on the packaged default model in exact
numerics: the ranks' logits over a batched chunked prefill + decode and an 8-token greedy run,
against one process on cuda:0; start-up time, step time, per-rank weight bytes. Each case runs in
its own try/except; a table is printed and raw results go to $OUT/tp_check.json.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

import torch

from mxserve import default_model_path
from mxserve.distributed import DistributedExecutor, ParallelConfig, RemoteModel, WorkerSpec
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.greedy import greedy_generate
from mxserve.model.numerics import NumericPolicy


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float(((a - b).abs().amax(-1) / b.abs().amax(-1)).max())


def batched(model, vocab: int, device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(2, vocab, (40,), generator=g).tolist(), torch.randint(2, vocab, (13,), generator=g).tolist()
    state = model.new_cache_state(max_sequences=2, max_positions=48, block_size=16, device=device)
    steps = [([a[:26], b[:12]], [0, 0]), ([a[26:], b[12:]], [26, 12]), ([[7], [9]], [40, 13])]
    return [model.forward(ForwardBatch.from_chunks(c, ["a", "b"], s, device=device), state).cpu() for c, s in steps]


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {gpus} GPU(s)")
    path = default_model_path()
    reader = CheckpointReader(path)
    config = reader.config
    ref = None
    try:
        weights = {k: w.to("cuda:0") for k, w in reader.load(progress=False).items()}
        ref = DeepseekV4Model(config, weights, numerics="exact")
        ref_steps = batched(ref, config.vocab_size, "cuda:0")
        prompt = torch.randint(2, config.vocab_size, (9,), generator=torch.Generator().manual_seed(3)).tolist()
        ref_tokens, ref_logits = greedy_generate(ref, prompt, 8)
    except Exception as exc:
        traceback.print_exc()
        results.append({"case": "reference", "error": repr(exc)})
    cases = [(2, False), (2, True)] + ([(4, False)] if gpus >= 4 else [])
    for n, ep in cases if ref is not None else []:
        row: dict = {"case": f"TP={n}{'+EP' if ep else ''}"}
        executor = None
        try:
            if gpus < n:
                raise RuntimeError(f"needs {n} GPUs, {gpus} visible")
            started = time.monotonic()
            executor = DistributedExecutor.spawn(WorkerSpec(str(path), ParallelConfig(n, ep), "exact", None, False,
                                                            "cuda", None))
            row["startup_s"] = round(time.monotonic() - started, 1)
            row["weight_bytes_per_rank"] = [r.weight_bytes for r in executor.reports]
            remote = RemoteModel(config, NumericPolicy.for_mode("exact"), executor)
            started = time.monotonic()
            steps = batched(remote, config.vocab_size, "cpu")
            row["batched_s"] = round(time.monotonic() - started, 2)
            row["max_rel_batched"] = max(max_rel(x, y) for x, y in zip(steps, ref_steps, strict=True))
            row["argmax_equal"] = all(bool((x.argmax(-1) == y.argmax(-1).cpu()).all())
                                      for x, y in zip(steps, ref_steps, strict=True))
            tokens, logits = greedy_generate(remote, prompt, 8)
            row["greedy_equal"] = tokens == ref_tokens
            row["max_rel_greedy"] = max_rel(logits, ref_logits)
            row["pass"] = row["max_rel_batched"] <= 1e-5 and row["argmax_equal"] and row["greedy_equal"]
        except Exception as exc:
            traceback.print_exc()
            row["error"] = repr(exc)
        finally:
            if executor is not None:
                executor.close()
        results.append(row)
        print(row, flush=True)
    (out_dir / "tp_check.json").write_text(json.dumps(results, indent=2))
    print(f"\n{'case':<10} {'start s':>8} {'max rel':>10} {'greedy':>7} {'pass':>5}")
    for r in results:
        print(f"{r['case']:<10} {r.get('startup_s', '-'):>8} {r.get('max_rel_batched', float('nan')):>10.2e} "
              f"{r.get('greedy_equal', '-')!s:>7} {r.get('pass', r.get('error', '-'))!s:>5}")


if __name__ == "__main__":
    main()
