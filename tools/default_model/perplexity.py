"""Held-out perplexity of the default model: transformers bf16 vs the packed checkpoint in mxserve.

Both models score the same windows (`train.heldout_windows`: BOS + 1023 consecutive held-out
tokens, non-overlapping, from the start of the held-out books) and the same positions (every
token after BOS), so the ratio compares the quantized release checkpoint with the weights it was
quantized from and nothing else:
* bf16: transformers' DeepseekV4ForCausalLM loaded from the `save_pretrained` directory in bf16
  (transformers keeps its fp32 modules fp32), one forward per window;
* quantized: mxserve's reference model (`DeepseekV4Model`, numerics "faithful" by default) over
  the release checkpoint (FP8 128x128 UE8M0 dense, MXFP4 experts), one prefill per window.

    python tools/default_model/perplexity.py --heldout .dm_data/heldout.txt \
        --hf .dm_data/run/hf --release src/mxserve/default_model --windows 4

Prints one JSON line: per-window and mean loss (nats/token) and perplexity for each model, and
the ratio quantized/bf16.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from train import heldout_windows


def nll_transformers(hf_dir: Path, windows: torch.Tensor) -> list[float]:
    """Mean next-token NLL per window of the bf16 transformers model."""
    from transformers import DeepseekV4ForCausalLM

    model = DeepseekV4ForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16).eval()
    out = []
    with torch.no_grad():
        for w in windows:
            logits = model(input_ids=w[None]).logits[0].float()
            out.append(float(torch.nn.functional.cross_entropy(logits[:-1], w[1:])))
    return out


def nll_mxserve(release_dir: Path, windows: torch.Tensor, numerics: str) -> list[float]:
    """Mean next-token NLL per window of mxserve's reference model on the release checkpoint."""
    from mxserve.model.checkpoint import CheckpointReader
    from mxserve.model.deepseek_v4 import DeepseekV4Model
    from mxserve.model.forward_batch import ForwardBatch

    reader = CheckpointReader(release_dir)
    model = DeepseekV4Model(reader.config, reader.load(progress=False), numerics=numerics)
    out = []
    for w in windows:
        state = model.new_cache_state(max_sequences=1, max_positions=len(w) + 1, block_size=64)
        logits = model.forward(ForwardBatch.from_chunks([w.tolist()], [0], [0]), state)
        out.append(float(torch.nn.functional.cross_entropy(logits[:-1].float(), w[1:])))
    return out


def summarize(nll: list[float], seconds: float) -> dict:
    mean = sum(nll) / len(nll)
    return {"nll_per_window": [round(x, 4) for x in nll], "nll": round(mean, 4), "ppl": round(math.exp(mean), 3),
            "seconds": round(seconds, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heldout", type=Path, required=True, help="heldout.txt from prepare_corpus.py")
    p.add_argument("--hf", type=Path, help="transformers save_pretrained directory (bf16 model)")
    p.add_argument("--release", type=Path, help="release checkpoint directory (quantized)")
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: the release dir's)")
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--numerics", default="faithful", choices=["faithful", "exact"])
    args = p.parse_args()
    tok_path = args.tokenizer or (args.release or args.hf) / "tokenizer.json"
    windows = heldout_windows(Tokenizer.from_file(str(tok_path)), args.heldout.read_text(encoding="utf-8"),
                              args.windows)
    result: dict = {"windows": list(windows.shape)}
    if args.hf:
        t = time.perf_counter()
        result["bf16_transformers"] = summarize(nll_transformers(args.hf, windows), time.perf_counter() - t)
    if args.release:
        t = time.perf_counter()
        result[f"release_mxserve_{args.numerics}"] = summarize(
            nll_mxserve(args.release, windows, args.numerics), time.perf_counter() - t)
    if args.hf and args.release:
        result["ppl_ratio"] = round(result[f"release_mxserve_{args.numerics}"]["ppl"] / result["bf16_transformers"]["ppl"], 4)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
