"""Greedy continuations of the same 20 held-out prompts as samples.py, by the transformers model.

The cross-check for samples.py (which runs the packed checkpoint through mxserve): same prompts,
same degeneracy rule, the bf16 `save_pretrained` weights in transformers, no KV cache (each step
recomputes the prefix; prompts are short). Runs on the GPU when there is one.

    python tools/default_model/hf_samples.py --hf .dm_data/run/hf --heldout .dm_data/heldout.txt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from samples import NUM_SPECIAL, held_out_prompts
from tokenizers import Tokenizer

from mxserve.default_model.degeneracy import degeneracy_reason


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hf", type=Path, required=True)
    p.add_argument("--heldout", type=Path, required=True)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--new-tokens", type=int, default=32)
    args = p.parse_args()
    from transformers import DeepseekV4ForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = Tokenizer.from_file(str(args.hf / "tokenizer.json"))
    model = DeepseekV4ForCausalLM.from_pretrained(args.hf, dtype=torch.bfloat16).to(device).eval()
    bad = 0
    for text, _verse in held_out_prompts(args.heldout.read_text(encoding="utf-8"), args.count):
        ids = [tok.token_to_id("<｜begin▁of▁sentence｜>"), *tok.encode(text, add_special_tokens=False).ids]
        x = torch.tensor([ids], device=device)
        with torch.no_grad():
            for _ in range(args.new_tokens):
                x = torch.cat([x, model(input_ids=x).logits[0, -1].float().argmax().view(1, 1)], dim=1)
        new = x[0, len(ids):].tolist()
        reason = degeneracy_reason(new, num_special=NUM_SPECIAL)
        bad += reason is not None
        print(json.dumps({"prompt": text, "continuation": tok.decode(new), "degenerate": reason}, ensure_ascii=False))
    print(f"{args.count - bad}/{args.count} continuations non-degenerate (transformers bf16, {device})")


if __name__ == "__main__":
    main()
