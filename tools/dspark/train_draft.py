"""Train DSpark draft stages for a plain DeepSeek-V4 release checkpoint (issue 13, deliverable 4).

    PYTHONPATH=src python tools/dspark/train_draft.py --model DIR [--data DIR] --out DIR \
        --time-budget-s 240 [--device cuda] [--block-size K]

0. Data: windows of a corpus (--data, prepare_corpus.py's split) or, without --data, windows the
   target writes itself (`self_data.py`: sampled and greedy continuations; no corpus needed).
1. Target side (`target_features.py`): mxserve's own model runs every data window as a prefill
   through `forward_with_aux`, the call the engine makes at inference, giving the hc-mean hiddens
   of `dspark_target_layer_ids` (default: the last three layers, as the release's 40/41/42 of 43)
   and the target's greedy token at every row. A fixed share of the budget goes here.
2. Draft (`draft_torch.py`): a differentiable fp32 copy of `mxserve.model.dspark`, warm-started
   from the target's last layers (stage s ← layer n−3+s, its HyperHead and final norm), trained with
   AdamW. Objective: for anchors q, slot i predicts the token at q+1+i; per-slot cross-entropy
   against the TARGET's greedy tokens (not the data): greedy verification accepts exactly when
   draft == target argmax, and the target disagrees with the data often (held-out ppl ~18), so
   data labels would teach tokens the target never emits. The Markov bias is teacher-forced with
   prev = the previous slot's target token (the anchor for slot 0), which is what an accepted prefix
   feeds it at inference. Block widths cycle through --train-block-sizes so K in {3, 5, 7} all work.
3. Every --eval-every-s: a held-out acceptance proxy (greedy draft with its own Markov prev vs the
   target's greedy tokens along held-out data windows; exact only where the data equals the target's
   greedy continuation).
4. Export (`export_draft.py`) in the 0731 layout, quantized like the release, `validate()`d; then the
   REAL acceptance: `LLM(out, speculative_config=...)` greedy-decodes held-out prompts per K,
   checks the outputs equal plain greedy, reports mean acceptance length and decode tok/s.
Writes OUT (the checkpoint) and OUT/../<name>-train/{summary.json, loss.csv}; prints both.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draft_torch import TrainableDraft
from export_draft import with_dspark, write_draft_checkpoint
from self_data import self_windows
from target_features import target_features

from mxserve import LLM, SamplingParams
from mxserve.config import DSparkConfig
from mxserve.engine.tokenizer import Tokenizer
from mxserve.kernels.chooser import OVERRIDES_ENV, parse_overrides_env
from mxserve.model.checkpoint import CheckpointReader, to_full_precision


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="plain release checkpoint (the target)")
    p.add_argument("--data", type=Path, default=None,
                   help="folder with train.txt and heldout.txt (prepare_corpus.py); omitted: the target "
                        "writes its own windows (self_data.py)")
    p.add_argument("--self-windows", type=int, default=1024, help="without --data: train windows to generate")
    p.add_argument("--self-greedy-share", type=float, default=0.5,
                   help="without --data: share of greedy continuations among the generated windows")
    p.add_argument("--out", type=Path, required=True, help="output checkpoint folder (0731 layout)")
    p.add_argument("--time-budget-s", type=float, default=240.0, help="wall clock for features + training (the engine start and self-data generation come on top)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--kernels", default=None,
                   help="kernel_overrides for the target, e.g. moe=triton (default: every op Triton on CUDA, "
                        "the reference elsewhere; the reference kernels make the GPU data pass ~100x slower)")
    p.add_argument("--self-gen-s", type=float, default=90.0,
                   help="without --data: no new round of window generation starts after this many seconds")
    p.add_argument("--block-size", type=int, default=5, help="dspark_block_size written to config.json")
    p.add_argument("--train-block-sizes", default="3,5,7", help="K cycled over training steps")
    p.add_argument("--init-from-draft", action="store_true",
                   help="start from the draft --model already carries (mtp.*) instead of its last layers")
    p.add_argument("--markov-rank", type=int, default=64)
    p.add_argument("--noise-token", default="<｜read_url｜>", help="token (or id) used as the block's noise token")
    p.add_argument("--target-layers", default="", help="comma list; default the last three layers")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--feature-share", type=float, default=0.3, help="share of the budget for target features")
    p.add_argument("--max-train-windows", type=int, default=100000)
    p.add_argument("--heldout-windows", type=int, default=16)
    p.add_argument("--feature-batch", type=int, default=16)
    p.add_argument("--batch", type=int, default=16, help="windows per step")
    p.add_argument("--anchors", type=int, default=32, help="anchors per window per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                   help="after the 50-step warm-up: constant, or cosine decay to 10%% of --lr over the training "
                        "time (the budget is wall clock, so the decay follows time)")
    p.add_argument("--max-steps", type=int, default=10**9)
    p.add_argument("--bias-rate", type=float, default=1e-3, help="router bias update (aux-loss-free balancing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--eval-every-s", type=float, default=30.0)
    p.add_argument("--final-prompts", type=int, default=16)
    p.add_argument("--final-new-tokens", type=int, default=64)
    p.add_argument("--final-ks", default="3,5,7")
    p.add_argument("--max-model-len", type=int, default=1024)
    return p.parse_args(argv)


# ---------------------------------------------------------------------- optimisation
def learning_rate(base: float, step: int, progress: float, schedule: str, *, warmup_steps: int = 50,
                  floor: float = 0.1) -> float:
    """The step's learning rate: linear warm-up over `warmup_steps`, then `constant`, or `cosine`
    from `base` down to `floor` × base as `progress` (share of the training time spent) goes 0 → 1."""
    warm = min(1.0, (step + 1) / warmup_steps)
    if schedule == "constant":
        return base * warm
    if schedule != "cosine":
        raise ValueError(f"unknown learning-rate schedule {schedule!r}")
    progress = min(max(progress, 0.0), 1.0)
    return base * warm * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


# ---------------------------------------------------------------------- data
def token_stream(tok: Tokenizer, text: str) -> torch.Tensor:
    """Book by book (blank-line separated), without special tokens."""
    ids: list[int] = []
    for book in text.split("\n\n"):
        if book.strip():
            ids += tok.encode(book + "\n\n")
    return torch.tensor([i for i in ids if i not in (tok.bos_token_id, tok.eos_token_id)], dtype=torch.int64)


def make_windows(stream: torch.Tensor, num: int, seq_len: int, bos: int, gen: torch.Generator) -> torch.Tensor:
    """[num, seq_len]: BOS + seq_len−1 consecutive tokens from random starts (as the target was trained)."""
    body = seq_len - 1
    if stream.numel() <= body:
        raise ValueError(f"the data has {stream.numel()} tokens, fewer than --seq-len {seq_len}")
    starts = torch.randint(0, stream.numel() - body, (num,), generator=gen)
    rows = stream[starts[:, None] + torch.arange(body)]
    return torch.cat([torch.full((num, 1), bos), rows], dim=1)


# ---------------------------------------------------------------------- target → draft
def fp32_tensors(reader: CheckpointReader, prefix: str) -> dict[str, torch.Tensor]:
    """Every tensor under `prefix`, release names → fp32 (quantized linears widened exactly)."""
    out = {f"{p}.weight": to_full_precision(reader.load_linear(p), torch.float32)
           for p in reader.inventory.linears if p.startswith(prefix)}
    out |= {name: reader.load_tensor(name).float() for name in reader.inventory.tensors if name.startswith(prefix)}
    return out


def warm_start(reader: CheckpointReader, spec: DSparkConfig) -> dict[str, torch.Tensor]:
    """Stage s ← the target's layer n−S+s (attention and MoE shapes match; its compressor, indexer
    and hash table are dropped), the last stage's HyperHead/norm ← the target's. Release names → fp32."""
    n, out = reader.config.num_hidden_layers, {}
    for s in range(spec.num_stages):
        src, dst = f"layers.{n - spec.num_stages + s}.", f"mtp.{s}."
        for name, value in fp32_tensors(reader, src).items():
            if ".compressor." not in name and ".indexer." not in name and not name.endswith("tid2eid"):
                out[dst + name[len(src):]] = value
    last = f"mtp.{spec.num_stages - 1}."
    for name in ("norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale"):
        out[last + name] = reader.load_tensor(name).float()
    return out


def shipped_draft(reader: CheckpointReader) -> dict[str, torch.Tensor]:
    """Every `mtp.*` tensor of a checkpoint that already carries a draft, to continue training it."""
    if reader.config.dspark is None:
        raise SystemExit(f"--init-from-draft: {reader.path} carries no DSpark draft (no dspark_* keys)")
    return fp32_tensors(reader, "mtp.")


def sample_anchors(num_windows: int, seq_len: int, k: int, per_window: int, gen: torch.Generator) -> torch.Tensor:
    """[N, A] anchor positions in [1, seq_len − k] (slot k−1 needs the target token of row q+k−1)."""
    high = seq_len - k
    return torch.stack([torch.randperm(high, generator=gen)[:per_window] + 1 for _ in range(num_windows)])


def block_loss(draft: TrainableDraft, aux: torch.Tensor, greedy: torch.Tensor, windows: torch.Tensor,
               anchors: torch.Tensor, k: int, loads: list | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean per-slot CE against the target's greedy tokens; also the per-slot top-1 agreement [k]."""
    n, t = windows.shape
    dev = aux.device
    positions = torch.arange(t, device=dev).expand(n, t)
    ctx = draft.context_kv(aux, positions)
    anchor_tok = windows.gather(1, anchors)
    base = draft.base_logits(ctx, positions, anchor_tok, anchors, k, loads)  # [N, A, K, V]
    slot_rows = anchors[..., None] + torch.arange(k, device=dev)  # row q+i holds the target token for q+1+i
    labels = greedy.gather(1, slot_rows.flatten(1)).view_as(slot_rows)
    prev = torch.cat([anchor_tok[..., None], labels[..., :-1]], dim=-1)  # teacher-forced Markov input
    logits = base + draft.markov_bias(prev)
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view_as(labels)
    agree = (logits.argmax(-1) == labels).float().mean(dim=(0, 1))
    return ce.mean(), agree.detach()


@torch.no_grad()
def acceptance_proxy(draft: TrainableDraft, aux: torch.Tensor, greedy: torch.Tensor, windows: torch.Tensor,
                     k: int, anchors_per_window: int, gen: torch.Generator) -> float:
    """Mean accepted length (1 + leading drafts equal to the target's greedy tokens), greedy draft
    with its OWN previous draft as the Markov input, over held-out anchors."""
    n, t = windows.shape
    anchors = sample_anchors(n, t, k, anchors_per_window, gen).to(aux.device)
    positions = torch.arange(t, device=aux.device).expand(n, t)
    base = draft.base_logits(draft.context_kv(aux, positions), positions, windows.gather(1, anchors), anchors, k)
    slot_rows = anchors[..., None] + torch.arange(k, device=aux.device)
    labels = greedy.gather(1, slot_rows.flatten(1)).view_as(slot_rows)
    prev, run = windows.gather(1, anchors), torch.ones_like(anchors, dtype=torch.bool)
    accepted = torch.zeros(anchors.shape, device=aux.device)
    for i in range(k):
        d = (base[:, :, i] + draft.markov_bias(prev)).argmax(-1)
        run &= d == labels[..., i]
        accepted += run.float()
        prev = d
    return float(1.0 + accepted.mean())


# ---------------------------------------------------------------------- final: the real engine
def real_acceptance(out_dir: Path, prompts: list[list[int]], new_tokens: int, ks: list[int], device: str,
                    max_model_len: int) -> dict:
    params = SamplingParams(max_tokens=new_tokens, temperature=0, ignore_eos=True)
    result, plain = {}, None
    for k in [0, *ks]:
        name = "off" if k == 0 else f"K={k}"
        try:
            spec = None if k == 0 else {"method": "dspark", "num_speculative_tokens": k}
            llm = LLM(str(out_dir), device=device, max_model_len=max_model_len, progress=False, speculative_config=spec)
            t0 = time.monotonic()
            outs = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
            run = {"batch_tok_s": len(prompts) * new_tokens / (time.monotonic() - t0)}
            stats = llm.engine.spec_decode_stats
            if stats is not None:
                run.update(stats.as_dict())
            if plain is None:
                plain = outs
            else:
                run["identical_to_plain"] = outs == plain
            result[name] = run
            del llm
        except Exception as exc:  # one K failing must not hide the others
            traceback.print_exc()
            result[name] = {"error": repr(exc)}
    return result


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    t_start = time.monotonic()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    reader = CheckpointReader(args.model)
    target_cfg = reader.config
    tok = Tokenizer.from_dir(args.model)
    n = target_cfg.num_hidden_layers
    layers = tuple(int(x) for x in args.target_layers.split(",")) if args.target_layers else tuple(range(n - 3, n))
    noise = int(args.noise_token) if args.noise_token.isdigit() else tok.token_id(args.noise_token)
    spec = DSparkConfig(block_size=args.block_size, noise_token_id=noise, target_layer_ids=layers,
                        markov_rank=args.markov_rank, num_stages=3)
    config = with_dspark(target_cfg, spec)
    train_ks = [int(k) for k in args.train_block_sizes.split(",")]
    if max(train_ks) >= args.seq_len - 1:
        raise ValueError(f"--train-block-sizes {train_ks} need --seq-len > {max(train_ks) + 1}")

    # 1. target features
    # 1 GiB of caches is plenty for this model; without a size the engine takes 90% of free GPU memory,
    # which the feature pass and the training then lack
    cuda = args.device.startswith("cuda")
    kernels = args.kernels if args.kernels is not None else ("linear=triton,moe=triton,attention=triton,hc=triton"
                                                             if cuda else "")
    llm = LLM(str(args.model), device=args.device, progress=False, kv_cache_memory=1 << 30 if cuda else None,
              max_model_len=args.max_model_len, kernel_overrides=parse_overrides_env({OVERRIDES_ENV: kernels}))
    model = llm.engine.model
    dev = model.embed.device
    if args.data is not None:
        train_stream = token_stream(tok, (args.data / "train.txt").read_text(encoding="utf-8"))
        held_stream = token_stream(tok, (args.data / "heldout.txt").read_text(encoding="utf-8"))
        held_windows = make_windows(held_stream, args.heldout_windows, args.seq_len, tok.bos_token_id, gen)
        train_windows = make_windows(train_stream, args.max_train_windows, args.seq_len, tok.bos_token_id, gen)
    else:  # self-distillation: disjoint seeds for the held-out windows; final prompts from real held-out text
        sample = args.model / "heldout_sample.txt"
        if not sample.is_file():
            raise SystemExit(f"--data omitted: the final prompts need {sample} (or pass --data)")
        held_stream = token_stream(tok, sample.read_text(encoding="utf-8"))
        t_gen = time.monotonic()
        held_windows = self_windows(llm, args.heldout_windows, args.seq_len, tok.bos_token_id, seed=args.seed + 7919,
                                    greedy_share=args.self_greedy_share)
        train_windows = self_windows(llm, min(args.self_windows, args.max_train_windows), args.seq_len,
                                     tok.bos_token_id, seed=args.seed, greedy_share=args.self_greedy_share,
                                     deadline=time.monotonic() + args.self_gen_s, log=True)
        print(f"self data: {train_windows.shape[0]} + {held_windows.shape[0]} held-out windows generated by the target "
              f"in {time.monotonic() - t_gen:.1f}s", flush=True)
    # the budget starts here: a slow data pass must not eat the feature pass (session 10's first run
    # generated for 96 s of a 100 s feature share and trained on 32 windows, which it memorised)
    t_budget = time.monotonic()
    held_aux, held_greedy = target_features(model, held_windows, layers, batch_windows=args.feature_batch)
    deadline = t_budget + args.feature_share * args.time_budget_s
    aux, greedy = target_features(model, train_windows, layers, batch_windows=args.feature_batch, deadline=deadline)
    train_windows = train_windows[: aux.shape[0]].to(dev)
    held_windows = held_windows.to(dev)
    data_agree = float((greedy[:, :-1] == train_windows[:, 1:]).float().mean())
    t_data, t_feat = t_budget - t_start, time.monotonic() - t_budget
    print(f"features: {aux.shape[0]} train windows x {args.seq_len} tokens in {t_feat:.1f}s "
          f"(target greedy == data on {data_agree:.1%} of rows)", flush=True)
    if aux.shape[0] < 8 * args.batch:
        print(f"WARNING: only {aux.shape[0]} train windows ({8 * args.batch} = 8 batches wanted): the draft will "
              f"memorise them; raise --time-budget-s or --feature-share", flush=True)
    embed, head = model.embed.float(), to_full_precision(reader.load_tensor("head.weight"), torch.float32).to(dev)
    del llm, model

    # 2. draft training
    draft = TrainableDraft(config, embed, head).to(dev)
    draft.init_weights(args.seed, shipped_draft(reader) if args.init_from_draft else warm_start(reader, spec))
    opt = torch.optim.AdamW(draft.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    work_dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    out_log = args.out.parent / f"{args.out.name}-train"
    out_log.mkdir(parents=True, exist_ok=True)
    rows, evals, step = [], [], 0
    train_end = t_budget + args.time_budget_s
    last_eval = time.monotonic()

    def evaluate() -> None:
        draft.eval()
        with torch.autocast(dev.type, dtype=work_dtype, enabled=dev.type == "cuda"):
            held = acceptance_proxy(draft, held_aux.to(work_dtype), held_greedy, held_windows, args.block_size,
                                    args.anchors, torch.Generator().manual_seed(args.seed + 2))
        evals.append({"step": step, "elapsed_s": round(time.monotonic() - t_start, 1), "heldout_accept_proxy": held})
        print(f"eval step {step}: held-out acceptance proxy (K={args.block_size}) {held:.3f}", flush=True)
        draft.train()

    evaluate()
    t_loop = time.monotonic()
    while step < args.max_steps and time.monotonic() < train_end:
        k = train_ks[step % len(train_ks)]
        idx = torch.randint(0, aux.shape[0], (args.batch,), generator=gen)
        anchors = sample_anchors(args.batch, args.seq_len, k, args.anchors, gen).to(dev)
        progress = (time.monotonic() - t_loop) / max(train_end - t_loop, 1e-9)
        lr = learning_rate(args.lr, step, progress, args.lr_schedule)
        for group in opt.param_groups:
            group["lr"] = lr
        loads: list = []
        with torch.autocast(dev.type, dtype=work_dtype, enabled=dev.type == "cuda"):
            loss, agree = block_loss(draft, aux[idx.to(dev)].to(work_dtype), greedy[idx.to(dev)],
                                     train_windows[idx.to(dev)], anchors, k, loads)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        draft.update_router_bias(loads, args.bias_rate)
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"step {step}: loss is {loss.item()}")
        rows.append({"step": step, "k": k, "loss": loss.item(), "agree_slot0": float(agree[0]),
                     "elapsed_s": round(time.monotonic() - t_start, 2)})
        if step % args.log_every == 0:
            print(f"step {step} K={k} loss {loss.item():.4f} top1-agree per slot "
                  f"{[round(float(a), 3) for a in agree]}", flush=True)
        step += 1
        if time.monotonic() - last_eval > args.eval_every_s:
            evaluate()
            last_eval = time.monotonic()
    evaluate()
    t_train = time.monotonic() - t_budget - t_feat

    # 3. export + validate + the real acceptance
    write_draft_checkpoint(args.model, args.out, config, draft.release_tensors())
    CheckpointReader(args.out).validate()
    print(f"wrote {args.out} (validate() passed)", flush=True)
    (out_log / "summary.json").write_text(json.dumps({"steps": step, "evals": evals, "real_acceptance": "pending",
                                                       "features_s": round(t_feat, 1), "train_s": round(t_train, 1)}))
    prompt_gen = torch.Generator().manual_seed(args.seed + 3)
    prompts = make_windows(held_stream, args.final_prompts, 48, tok.bos_token_id, prompt_gen).tolist()
    final = real_acceptance(args.out, prompts, args.final_new_tokens, [int(k) for k in args.final_ks.split(",")],
                            args.device, args.max_model_len) if args.final_prompts else {}

    first = sum(r["loss"] for r in rows[: min(10, len(rows))]) / max(1, min(10, len(rows)))
    last = sum(r["loss"] for r in rows[-10:]) / max(1, len(rows[-10:]))
    summary = {
        "model": str(args.model), "out": str(args.out), "device": args.device, "seed": args.seed,
        "dspark": {"block_size": spec.block_size, "noise_token_id": spec.noise_token_id,
                   "target_layer_ids": list(layers), "markov_rank": spec.markov_rank},
        "objective": "per-slot cross-entropy vs the target's greedy tokens, Markov teacher-forced",
        "train_block_sizes": train_ks, "lr": args.lr, "lr_schedule": args.lr_schedule,
        "steps": step, "train_windows": int(aux.shape[0]),
        "seq_len": args.seq_len, "target_greedy_equals_data": data_agree,
        "data_s": round(t_data, 1), "features_s": round(t_feat, 1), "train_s": round(t_train, 1),
        "loss_first10": first, "loss_last10": last, "evals": evals, "real_acceptance": final,
        "total_s": round(time.monotonic() - t_start, 1),
    }
    (out_log / "summary.json").write_text(json.dumps(summary, indent=2))
    with (out_log / "loss.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "k", "loss", "agree_slot0", "elapsed_s"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nloss {first:.4f} -> {last:.4f} over {step} steps; features {t_feat:.0f}s, training {t_train:.0f}s")
    print(f"{'run':6} {'accept len':>10} {'tok/s':>8} {'identical':>9}")
    for name, run in final.items():
        if "error" in run:
            print(f"{name:6} ERROR {run['error'][:80]}")
            continue
        print(f"{name:6} {run.get('mean_acceptance_length', 1.0):10.3f} {run['batch_tok_s']:8.1f} "
              f"{run.get('identical_to_plain', '-')!s:>9}")
    return summary


if __name__ == "__main__":
    main()
