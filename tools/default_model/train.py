"""Train the default model with transformers' DeepseekV4ForCausalLM (issue 5 item 4).

The architecture is `default_config.default_model_config()` (release spelling), turned into a
transformers config with mxserve's own translation (`release_to_hf_config`). Data: the KJV
training split (prepare_corpus.py) tokenized with the packaged tokenizer; each book is
`BOS text EOS`; a training sequence is BOS followed by 1023 tokens that start at a random line
start (so a prompt "BOS + a verse opening" is in distribution). Held-out loss is measured on
fixed non-overlapping windows of the held-out books, built the same way (`heldout_windows`,
shared with perplexity.py).

What transformers leaves to the trainer, done here as DeepSeek-V4 does it:
* hash routing: `tid2eid` is a fixed, seeded random table of `top_k` distinct experts per token
  (transformers initialises it to zeros, which would send every token to expert 0 twice);
* learned routing: auxiliary-loss-free balancing, i.e. after each step every learned gate's
  `e_score_correction_bias` moves by `bias_update_rate * sign(mean load - expert load)`.
Not trained: the CSA indexer (its top-k is not differentiable and transformers has no indexer
loss), so it selects with its seeded initial weights; documented in docs/default-model.md.

Schedule: AdamW, linear warmup then cosine decay over a fixed *wall-clock* budget (the device
lease is counted in seconds, not steps); bf16 autocast over fp32 master weights; fixed seed.
The weights with the best held-out loss are kept (the corpus is small enough to overfit).

Outputs in --out: hf/ (save_pretrained, bf16 with the modules transformers keeps in fp32 left
fp32, sharded to --max-shard-size, tokenizer files alongside), loss.csv, summary.json.

    # smoke test on the CPU (a few steps, tiny batch):
    python tools/default_model/train.py --data .dm_data --out /tmp/dm --device cpu \
        --batch-size 1 --max-steps 3 --eval-windows 1
    # the real run (H200):
    python tools/default_model/train.py --data .dm_data --out $OUT --time-budget-s 480
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import time
from pathlib import Path

import torch
from default_config import TRAIN_CONTEXT, default_model_config
from tokenizers import Tokenizer

from mxserve.model.checkpoint.hf_config import release_to_hf_config

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "src" / "mxserve" / "default_model"


# ---------------------------------------------------------------------------- data
def encode_books(tok: Tokenizer, text: str, bos: int, eos: int) -> list[int]:
    """`BOS book EOS` for every book (books are separated by a blank line in the corpus files)."""
    ids: list[int] = []
    for book in text.split("\n\n"):
        if book.strip():
            ids += [bos, *tok.encode(book + "\n\n", add_special_tokens=False).ids, eos]
    return ids


def line_starts(tok: Tokenizer, stream: torch.Tensor) -> torch.Tensor:
    """Positions right after a token that ends in a newline (where a verse line begins)."""
    newline_ids = [i for i in range(tok.get_vocab_size()) if (t := tok.id_to_token(i)) and t.endswith("Ċ")]
    is_nl = torch.isin(stream, torch.tensor(newline_ids))
    return (is_nl.nonzero().squeeze(1) + 1)[:-1]


def heldout_windows(tok: Tokenizer, text: str, num_windows: int, seq_len: int = TRAIN_CONTEXT) -> torch.Tensor:
    """[num_windows, seq_len] fixed evaluation windows: BOS + the next seq_len-1 held-out tokens,
    consecutive and non-overlapping from the start of the held-out books."""
    bos, eos = tok.token_to_id("<｜begin▁of▁sentence｜>"), tok.token_to_id("<｜end▁of▁sentence｜>")
    stream = torch.tensor([t for t in encode_books(tok, text, bos, eos) if t != bos])
    body = seq_len - 1
    if num_windows * body > stream.numel():
        raise ValueError(f"held-out text has {stream.numel()} tokens, fewer than {num_windows} windows")
    windows = stream[: num_windows * body].view(num_windows, body)
    return torch.cat([torch.full((num_windows, 1), bos), windows], dim=1)


class Batches:
    """Random training windows: BOS + seq_len-1 tokens from a random line start."""

    def __init__(self, stream: torch.Tensor, starts: torch.Tensor, bos: int, seq_len: int, seed: int) -> None:
        self.stream, self.bos, self.body = stream, bos, seq_len - 1
        self.starts = starts[starts + self.body <= stream.numel()]
        self.gen = torch.Generator().manual_seed(seed)

    def next(self, batch_size: int) -> torch.Tensor:
        pick = self.starts[torch.randint(len(self.starts), (batch_size,), generator=self.gen)]
        rows = self.stream[pick.unsqueeze(1) + torch.arange(self.body)]
        return torch.cat([torch.full((batch_size, 1), self.bos), rows], dim=1)


# ---------------------------------------------------------------------------- model
def build_model(seed: int, experts_impl: str):
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = default_model_config()
    hf_config = DeepseekV4Config(**release_to_hf_config(config, dtype="bfloat16"))
    hf_config._experts_implementation = experts_impl
    torch.manual_seed(seed)
    model = DeepseekV4ForCausalLM(hf_config)
    # Fixed hash table: k distinct experts per token id (argsort of seeded noise).
    gen = torch.Generator().manual_seed(seed + 1)
    for i in range(config.num_hash_layers):
        gate = model.model.layers[i].mlp.gate
        table = torch.rand(config.vocab_size, config.n_routed_experts, generator=gen).argsort(dim=1)
        gate.tid2eid.copy_(table[:, : config.num_experts_per_tok])
    return config, model


class LoadBalancer:
    """DeepSeek's aux-loss-free balancing: nudge each learned gate's bias toward equal load."""

    def __init__(self, model, rate: float) -> None:
        from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4TopKRouter

        self.rate = rate
        self.loads: dict[torch.nn.Module, torch.Tensor] = {}
        self.gates = [m for m in model.modules() if isinstance(m, DeepseekV4TopKRouter)]
        for gate in self.gates:
            gate.register_forward_hook(self._record)

    def _record(self, gate, _inputs, outputs) -> None:
        counts = torch.bincount(outputs[2].reshape(-1), minlength=gate.num_experts).float()
        self.loads[gate] = self.loads.get(gate, 0) + counts

    @torch.no_grad()
    def step(self) -> float:
        """Update the biases; returns the worst max/mean load ratio seen this step."""
        worst = 1.0
        for gate, load in self.loads.items():
            gate.e_score_correction_bias += self.rate * torch.sign(load.mean() - load)
            worst = max(worst, float(load.max() / load.mean()))
        self.loads.clear()
        return worst


@torch.no_grad()
def load_init_weights(model, hf_dir: Path) -> None:
    """Copy a previous run's saved weights (every tensor, strictly by name) into `model`. The save is
    read back by transformers itself, which undoes the checkpoint renaming save_pretrained applied."""
    from transformers import DeepseekV4ForCausalLM

    saved = DeepseekV4ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.load_state_dict(saved.state_dict(), strict=True)


def unlikelihood_loss(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Token-level unlikelihood: mean over positions of -sum_c log(1 - p(c)), c ranging over the
    tokens seen earlier in the sequence (up to and including the current one) except the true next
    token. logits [B, T, V] predict x[:, 1:]."""
    logits, targets = logits[:, :-1].float(), x[:, 1:]
    probs = logits.softmax(dim=-1)
    seen = torch.zeros_like(probs, dtype=torch.int32).scatter_(2, x[:, :-1, None], 1).cumsum(dim=1) > 0
    seen.scatter_(2, targets[:, :, None], False)
    penalty = -torch.log1p(-probs.clamp(max=1 - 1e-5)) * seen
    return penalty.sum(dim=-1).mean()


def add_residual_dropout(model, p: float) -> None:
    """Dropout on each decoder layer's attention and MoE outputs (training mode only; eval and the
    saved weights are unaffected). The blocks return a tensor or a tuple whose first item is the output."""
    if p <= 0:
        return

    def hook(module, _inputs, output):
        if not module.training:
            return output
        if isinstance(output, tuple):
            return (torch.nn.functional.dropout(output[0], p, True), *output[1:])
        return torch.nn.functional.dropout(output, p, True)

    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)


def heldout_loss(model, windows: torch.Tensor, device: str, batch_size: int) -> float:
    """Mean next-token cross-entropy (nats) over every predicted position of the windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        x = windows[i : i + batch_size].to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            logits = model(input_ids=x).logits.float()
        total += float(torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"))
        count += x[:, 1:].numel()
    model.train()
    return total / count


def lr_at(step: int, elapsed_s: float, args) -> float:
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = min(1.0, elapsed_s / args.time_budget_s)
    if args.max_steps:
        progress = max(progress, step / args.max_steps)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def save_bf16(model, out: Path, max_shard_size: str, tokenizer_dir: Path) -> None:
    """save_pretrained in bf16, leaving fp32 what transformers itself keeps fp32 (hc, norms, sinks...)."""
    keep = tuple(model._keep_in_fp32_modules_strict)
    state = {k: (v if any(f".{m}." in f".{k}" or k.endswith(f".{m}") for m in keep) else v.to(torch.bfloat16))
             for k, v in model.state_dict().items()}
    model.save_pretrained(out, state_dict=state, max_shard_size=max_shard_size)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)


# ---------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="directory with train.txt and heldout.txt")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--seq-len", type=int, default=TRAIN_CONTEXT)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--min-lr-ratio", type=float, default=0.05)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--time-budget-s", type=float, default=480.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0 = budget only)")
    p.add_argument("--eval-every-s", type=float, default=30.0)
    p.add_argument("--eval-windows", type=int, default=16)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--bias-update-rate", type=float, default=1e-3)
    p.add_argument("--experts-impl", default="eager", help="transformers experts backend (eager, grouped_mm, ...)")
    p.add_argument("--max-shard-size", default="14MB")
    p.add_argument("--tokenizer", type=Path, default=PACKAGE_DIR, help="directory with tokenizer.json")
    p.add_argument("--init", type=Path, default=None,
                   help="start from the weights of a previous run's bf16 save (its hf/ directory)")
    p.add_argument("--unlikelihood-alpha", type=float, default=0.0,
                   help="weight of token-level unlikelihood training (Welleck et al. 2019): pushes down the "
                        "probability of tokens already in the context that are not the next token, the remedy "
                        "for greedy repetition loops; 0 = plain language-model loss")
    p.add_argument("--residual-dropout", type=float, default=0.0,
                   help="dropout on every attention and MoE block output while training (regularises a model "
                        "that is far larger than its corpus)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = args.device

    tok = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))
    bos, eos = tok.token_to_id("<｜begin▁of▁sentence｜>"), tok.token_to_id("<｜end▁of▁sentence｜>")
    stream = torch.tensor(encode_books(tok, (args.data / "train.txt").read_text(encoding="utf-8"), bos, eos))
    batches = Batches(stream, line_starts(tok, stream), bos, args.seq_len, args.seed)
    eval_windows = heldout_windows(tok, (args.data / "heldout.txt").read_text(encoding="utf-8"),
                                   args.eval_windows, args.seq_len)
    print(f"train tokens {stream.numel()}, eval windows {tuple(eval_windows.shape)}", flush=True)

    _config, model = build_model(args.seed, args.experts_impl)
    if args.init is not None:
        load_init_weights(model, args.init)
    model.to(device).train()
    add_residual_dropout(model, args.residual_dropout)
    num_params = sum(p.numel() for p in model.parameters())
    print(f"parameters {num_params / 1e6:.2f} M", flush=True)
    balancer = LoadBalancer(model, args.bias_update_rate)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")

    # the CSV is flushed at every logged step so a run killed at its time limit keeps its curve
    with open(args.out / "loss.csv", "w", newline="") as log:
        writer = csv.writer(log)
        writer.writerow(["step", "elapsed_s", "tokens", "lr", "train_loss", "heldout_loss", "max_load_ratio"])
        best = (float("inf"), -1, None)
        start = time.perf_counter()
        last_eval = start
        step, tokens = 0, 0
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= args.time_budget_s or (args.max_steps and step >= args.max_steps):
                break
            lr = lr_at(step, elapsed, args)
            for group in opt.param_groups:
                group["lr"] = lr
            x = batches.next(args.batch_size).to(device, non_blocking=True)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                out = model(input_ids=x, labels=x)
            loss = out.loss
            if args.unlikelihood_alpha > 0:
                loss = loss + args.unlikelihood_alpha * unlikelihood_loss(out.logits, x)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            load_ratio = balancer.step()
            step += 1
            tokens += x.numel()
            now = time.perf_counter()
            do_eval = now - last_eval >= args.eval_every_s or now - start >= args.time_budget_s or step == args.max_steps
            if step % args.log_every == 0 or do_eval:
                held = ""
                if do_eval:
                    held = heldout_loss(model, eval_windows, device, args.batch_size)
                    last_eval = time.perf_counter()
                    if held < best[0]:
                        best = (held, step, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
                train_loss = float(loss.detach())
                writer.writerow([step, f"{now - start:.1f}", tokens, f"{lr:.3e}", f"{train_loss:.4f}",
                                 f"{held:.4f}" if held != "" else "", f"{load_ratio:.2f}"])
                log.flush()
                print(f"step {step:5d} t {now - start:6.1f}s tok {tokens / 1e6:7.2f}M lr {lr:.2e} loss {train_loss:.4f}"
                      + (f" heldout {held:.4f} (ppl {math.exp(held):.2f})" if held != "" else "")
                      + f" load {load_ratio:.2f}", flush=True)
        train_s = time.perf_counter() - start

    model.load_state_dict(best[2])
    final = heldout_loss(model, eval_windows, device, args.batch_size)
    save_bf16(model.cpu(), args.out / "hf", args.max_shard_size, args.tokenizer)
    summary = {"steps": step, "tokens": tokens, "train_s": round(train_s, 1), "best_step": best[1],
               "heldout_loss_fp32_autocast": round(final, 4), "heldout_ppl": round(math.exp(final), 3),
               "num_params": num_params, "args": {k: str(v) for k, v in vars(args).items()},
               "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
