"""Greedy continuations of 20 held-out prompts by the packaged checkpoint (issue 5 acceptance).

Prompts: 20 verses spread evenly over the held-out books; each prompt is BOS + the verse's
reference and its first 8 words (e.g. "BOS 3:16 For God so loved the world, that"), in the
training files' normalised form. The checkpoint runs in mxserve with faithful numerics: by
default through the engine (`mxserve.LLM`, all 20 prompts batched, ~30 s on a 2-core CPU; the
engine's tests hold it token-identical to the reference model), or with `--reference` through
`DeepseekV4Model` one prompt at a time (minutes per prompt on 2 cores). Each continuation is
`--new-tokens` greedy tokens, checked with `mxserve.default_model.degeneracy`. Prints a JSON list (prompt, continuation, the true verse,
degeneracy verdict) and a one-line tally.

    python tools/default_model/samples.py --heldout .dm_data/heldout.txt --out docs/default-model-samples.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mxserve.default_model import default_model_path
from mxserve.default_model.degeneracy import degeneracy_reason
from mxserve.engine.tokenizer import Tokenizer
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch

NUM_SPECIAL = 14  # tokenizer ids 0..13 are the DeepSeek-V4 special tokens (train_tokenizer.py)


def held_out_prompts(text: str, count: int, words: int = 8, offset: float = 0.0) -> list[tuple[str, str]]:
    """(prompt text, full verse) for `count` verses evenly spaced over the held-out text; `offset`
    (a fraction of the spacing) shifts the picks, so a disjoint prompt set can select checkpoints."""
    verses = [line for line in text.splitlines() if line[:1].isdigit() and len(line.split()) > words + 4]
    picks = [verses[int((i + offset) * len(verses) / count)] for i in range(count)]
    return [(" ".join(v.split()[: words + 1]), v) for v in picks]


def greedy(model: DeepseekV4Model, prompt: list[int], num_new: int) -> list[int]:
    state = model.new_cache_state(max_sequences=1, max_positions=len(prompt) + num_new + 1, block_size=64)
    logits = model.forward(ForwardBatch.from_chunks([prompt], [0], [0], logits_for="last"), state)
    out: list[int] = []
    for _ in range(num_new):
        out.append(int(torch.argmax(logits[-1])))
        pos = len(prompt) + len(out) - 1
        logits = model.forward(ForwardBatch.from_chunks([[out[-1]]], [0], [pos]), state)
    return out


def engine_continuations(model_dir: Path, prompts: list[list[int]], num_new: int, numerics: str) -> list[list[int]]:
    from mxserve import LLM, SamplingParams

    llm = LLM(str(model_dir), device="cpu", numerics=numerics, progress=False)
    params = SamplingParams(temperature=0, max_tokens=num_new, ignore_eos=True, skip_special_tokens=False)
    return [list(out.outputs[0].token_ids) for out in llm.generate(prompts, params)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heldout", type=Path, required=True)
    p.add_argument("--model", type=Path, default=default_model_path())
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--numerics", default="faithful", choices=["faithful", "exact"])
    p.add_argument("--reference", action="store_true", help="decode with DeepseekV4Model instead of the engine")
    p.add_argument("--offset", type=float, default=0.0,
                   help="shift the picks by this fraction of their spacing (0.5: a prompt set disjoint from the "
                        "acceptance set, for choosing between training runs)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    tok = Tokenizer.from_dir(args.model)
    prompts = held_out_prompts(args.heldout.read_text(encoding="utf-8"), args.count, offset=args.offset)
    ids = [[tok.bos_token_id, *tok.encode(text)] for text, _ in prompts]
    if args.reference:
        reader = CheckpointReader(args.model)
        model = DeepseekV4Model(reader.config, reader.load(progress=False), numerics=args.numerics)
        continuations = [greedy(model, x, args.new_tokens) for x in ids]
    else:
        continuations = engine_continuations(args.model, ids, args.new_tokens, args.numerics)
    results = []
    for (text, verse), new in zip(prompts, continuations, strict=True):
        results.append({"prompt": text, "continuation": tok.decode(new), "reference_verse": verse,
                        "degenerate": degeneracy_reason(new, num_special=NUM_SPECIAL)})
        print(json.dumps(results[-1], ensure_ascii=False), flush=True)
    bad = [r for r in results if r["degenerate"]]
    print(f"{len(results) - len(bad)}/{len(results)} continuations non-degenerate")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
