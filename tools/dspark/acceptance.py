"""Real acceptance of a checkpoint's DSpark draft through the engine (issue 13, on the H200):
greedy decoding of held-out prompts with speculation off and K in --ks, per run the batch tok/s,
the engine's speculative counters (mean acceptance length, accepted/drafted) and whether the
tokens equal the non-speculative run.

    PYTHONPATH=src python tools/dspark/acceptance.py --model DIR --ks 3,5,7 --out $OUT/accept.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from train_draft import make_windows, real_acceptance, token_stream

from mxserve.engine.tokenizer import Tokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--ks", default="3,5,7")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("accept.json"))
    args = ap.parse_args()
    tok = Tokenizer.from_dir(args.model)
    stream = token_stream(tok, (args.model / "heldout_sample.txt").read_text(encoding="utf-8"))
    prompts = make_windows(stream, args.prompts, 48, tok.bos_token_id, torch.Generator().manual_seed(5)).tolist()
    result = real_acceptance(args.model, prompts, args.new_tokens, [int(k) for k in args.ks.split(",")],
                             args.device, max_model_len=512)
    args.out.write_text(json.dumps(result, indent=1))
    for name, run in result.items():
        print(name, json.dumps(run))


if __name__ == "__main__":
    main()
