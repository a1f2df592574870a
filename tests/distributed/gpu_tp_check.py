"""GPU check of tensor/expert parallelism over NCCL (run by hand on a machine with >= 2 GPUs).

    PYTHONPATH=src OUT=/tmp/out python tests/distributed/gpu_tp_check.py

On the packaged default model in exact numerics, for TP=2, TP=2+EP (and TP=4 when 4 GPUs are
visible), each with the reference kernels and with every Triton kernel forced
(`kernel_overrides={"linear": "triton", "moe": "triton", "attention": "triton"}`, as the #15 runs
use): the ranks' logits over a batched chunked prefill + decode and an 8-token greedy run, against
one process on cuda:0 with THE SAME kernels (chosen by the same selection code); start-up time,
step time, per-rank weight bytes, and each rank's kernel choices. One executor per world size
is rebuilt per case (respawned if a case killed it). Each reference and case runs in its own
try/except; a table is printed and raw results go to $OUT/tp_check.json.
Last, through the engine (`LLMEngine`, what `mxserve serve --tensor-parallel-size 2` runs): greedy
tokens of TP=2 against one process with the same all-Triton kernels, and whether each decodes by
CUDA-graph replay. Under TP it does not (the driver's runner holds a `RemoteModel`, which has no
capturable decode path): the row reports that, with the runner's recorded eager reasons, rather
than claiming graph-captured decode was checked.
Expected: ~1-3 min on 2 H200 (Triton compiles once per process; the cache is shared).
NVLink multicast stays off (the device rules): the three variables below are set before anything starts.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"})

import torch

from mxserve import default_model_path
from mxserve.distributed import DistributedExecutor, ParallelConfig, RemoteModel, WorkerSpec
from mxserve.kernels.chooser import Platform
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.greedy import greedy_generate
from mxserve.model.kernel_selection import (
    choose_linear_per_layer,
    linear_dispatch_set,
    with_moe_and_attention,
)
from mxserve.model.kernel_set import REFERENCE_KERNELS
from mxserve.model.numerics import NumericPolicy

KERNELS = {"reference": {}, "triton": {"linear": "triton", "moe": "triton", "attention": "triton"}}
MAX_MODEL_LEN = 256


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float(((a - b).abs().amax(-1) / b.abs().amax(-1)).max())


def batched(model, vocab: int, device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(2, vocab, (40,), generator=g).tolist(), torch.randint(2, vocab, (13,), generator=g).tolist()
    state = model.new_cache_state(max_sequences=2, max_positions=48, block_size=16, device=device)
    steps = [([a[:26], b[:12]], [0, 0]), ([a[26:], b[12:]], [26, 12]), ([[7], [9]], [40, 13])]
    return [model.forward(ForwardBatch.from_chunks(c, ["a", "b"], s, device=device), state).cpu() for c, s in steps]


def one_process(reader: CheckpointReader, overrides: dict[str, str]) -> tuple[DeepseekV4Model, str]:
    """One process on cuda:0 with the engine's selection code and `overrides`; and its kernel labels."""
    device = torch.device("cuda:0")
    weights = {k: w.to(device) for k, w in reader.load(progress=False).items()}
    linear = REFERENCE_KERNELS
    if overrides.get("linear") == "triton":
        choices = choose_linear_per_layer(weights, Platform.probe(device), o_groups=reader.config.o_groups,
                                          faithful=False, forced="triton")
        linear = linear_dispatch_set(weights, choices)
    model = DeepseekV4Model(reader.config, weights, numerics="exact", kernels=linear)
    model.set_kernels(with_moe_and_attention(model, model.kernels, device=device, overrides=overrides,
                                             max_model_len=MAX_MODEL_LEN))
    labels = {op: model.kernels.label(op) for op in ("linear", "moe_experts", "sparse_attention")}
    return model, json.dumps(labels)


def engine_rows(prompt: list[int]) -> list[dict]:
    """TP=2 vs one process through LLMEngine (exact numerics, all-Triton kernels): greedy tokens, and
    how each decoded (graph replay or eager, with the runner's reasons)."""
    from mxserve.engine.llm import LLM
    from mxserve.engine.sampling_params import SamplingParams

    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    prompts = [prompt, prompt[::-1]]
    rows, tokens = [], {}
    for n in (1, 2):
        row: dict = {"case": f"engine TP={n} triton"}
        try:
            started = time.monotonic()
            llm = LLM(None, progress=False, device="cuda", numerics="exact", kernel_overrides=KERNELS["triton"],
                      max_model_len=MAX_MODEL_LEN, tensor_parallel_size=n)
            row["startup_s"] = round(time.monotonic() - started, 1)
            outs = llm.generate(prompts, params)
            tokens[n] = [list(o.outputs[0].token_ids) for o in outs]
            runner = llm.engine.runner
            row["runner_has_decode_graphs"] = getattr(runner, "decode_graphs", None) is not None
            row["eager_reasons"] = dict(runner.eager_stats.counts)
            if n > 1:
                row["graph_decode_under_tp"] = (
                    "not available: the TP driver's ModelRunner holds a RemoteModel on the driver's CPU (no "
                    "decode_forward, not capturable); ranks run TensorParallelModel.forward (per-chunk path, "
                    "host-side token-id check)" if getattr(runner, "decode_graphs", None) is None
                    else "the runner has decode graphs: see eager_reasons")
                row["greedy_equal"] = tokens.get(1) == tokens[2]
                row["pass"] = row["greedy_equal"]
            llm.engine.close()
        except Exception as exc:
            traceback.print_exc()
            row["error"] = repr(exc)
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {gpus} GPU(s)")
    path = default_model_path()
    reader = CheckpointReader(path)
    config = reader.config
    prompt = torch.randint(2, config.vocab_size, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    refs: dict[str, tuple] = {}
    for kernels, overrides in KERNELS.items():
        try:
            started = time.monotonic()
            ref, labels = one_process(reader, overrides)
            ref_steps = batched(ref, config.vocab_size, "cuda:0")
            ref_tokens, ref_logits = greedy_generate(ref, prompt, 8)
            refs[kernels] = (ref_steps, ref_tokens, ref_logits)
            results.append({"case": f"1 proc {kernels}", "labels": labels, "s": round(time.monotonic() - started, 1)})
            del ref
        except Exception as exc:
            traceback.print_exc()
            results.append({"case": f"1 proc {kernels}", "error": repr(exc)})
        print(results[-1], flush=True)
    cases = [(n, ep, k) for n in (2, 4) if n == 2 or gpus >= 4 for ep in (False, True) for k in KERNELS]
    executors: dict[int, DistributedExecutor] = {}
    for n, ep, kernels in cases:
        row: dict = {"case": f"TP={n}{'+EP' if ep else ''} {kernels}"}
        try:
            if gpus < n:
                raise RuntimeError(f"needs {n} GPUs, {gpus} visible")
            if kernels not in refs:
                raise RuntimeError(f"no one-process reference with {kernels} kernels (see above)")
            ref_steps, ref_tokens, ref_logits = refs[kernels]
            spec = WorkerSpec(str(path), ParallelConfig(n, ep), "exact", None, False, "cuda", None,
                              tuple(sorted(KERNELS[kernels].items())), MAX_MODEL_LEN)
            started = time.monotonic()
            if n in executors:
                executors[n].rebuild(spec)
            else:
                executors[n] = DistributedExecutor.spawn(spec)
            executor = executors[n]
            row["startup_s"] = round(time.monotonic() - started, 1)
            row["weight_bytes_per_rank"] = [r.weight_bytes for r in executor.reports]
            row["kernel_log_rank0"] = list(executor.reports[0].kernel_log)
            row["kernel_log_other_ranks"] = {r.rank: [x for x in r.kernel_log if x not in executor.reports[0].kernel_log]
                                             for r in executor.reports[1:]}  # only where a rank chose differently
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
            dead = executors.pop(n, None)  # a failed rebuild/step may leave the ranks unusable: respawn next time
            if dead is not None:
                try:
                    dead.close()
                except Exception:
                    traceback.print_exc()
        results.append(row)
        print(row, flush=True)
    for executor in executors.values():
        try:
            executor.close()
        except Exception:
            traceback.print_exc()
    if gpus >= 2:
        results += engine_rows(prompt)
    (out_dir / "tp_check.json").write_text(json.dumps(results, indent=2))
    print(f"\n{'case':<22} {'start s':>8} {'max rel':>10} {'greedy':>7} {'pass':>5}")
    for r in results:
        print(f"{r['case']:<22} {r.get('startup_s', r.get('s', '-'))!s:>8} {r.get('max_rel_batched', float('nan')):>10.2e} "
              f"{r.get('greedy_equal', '-')!s:>7} {r.get('pass', r.get('error', '-'))!s:>5}")


if __name__ == "__main__":
    main()
