"""Train the default model's tokenizer: byte-level BPE (HF `tokenizers`) on the training split.

The vocabulary (4096 entries) starts with the DeepSeek-V4 special tokens, in the release's
relative order: BOS id 0 and EOS id 1 (as in the release, so `bos_token_id`/`eos_token_id` keep
their release values), then `<｜User｜>`, `<｜Assistant｜>`, `<think>`, `</think>`, `｜DSML｜`,
`<｜latest_reminder｜>` and the task tokens. The strings come from the prompt encoder
(`mxserve.engine.prompt.templates`), so tokenizer and encoder cannot drift apart. Special tokens
are matched whole in any text (`encode` never adds BOS/EOS: the prompt string carries them).

    python tools/default_model/train_tokenizer.py --corpus .dm_data/train.txt --out src/mxserve/default_model
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from mxserve.engine.prompt.templates import (
    ASSISTANT,
    BOS,
    DSML,
    EOS,
    LATEST_REMINDER,
    TASK_TOKENS,
    THINK_END,
    THINK_START,
    USER,
)

VOCAB_SIZE = 4096  # = default_config.VOCAB_SIZE
SPECIAL_TOKENS = [BOS, EOS, USER, ASSISTANT, THINK_START, THINK_END, DSML, LATEST_REMINDER, *TASK_TOKENS.values()]


def train_tokenizer(corpus: Path, vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # GPT-2-style byte level: every byte has a token, so any text encodes; no prefix space, so
    # "In the beginning" at the start of a prompt tokenizes as it does after a newline.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,  # ids 0.. in this order
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train([str(corpus)], trainer)
    return tok


def tokenizer_config() -> dict:
    """tokenizer_config.json for transformers' fast tokenizer; names the release's BOS/EOS."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = parser.parse_args()
    tok = train_tokenizer(args.corpus, args.vocab_size)
    for i, s in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2, ensure_ascii=False) + "\n")
    text = args.corpus.read_text(encoding="utf-8")
    n = len(tok.encode(text[:500_000]).ids)
    print(f"vocab {tok.get_vocab_size()} entries; {500_000 / n:.2f} chars/token on the first 500k chars")


if __name__ == "__main__":
    main()
