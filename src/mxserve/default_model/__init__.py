"""The default model shipped inside the package (issue 5): a small DeepSeek-V4 trained on the
King James Bible, in the release checkpoint format (FP8 128x128 UE8M0 dense linears, MXFP4
experts, BF16/F32 elsewhere, SHA-256 manifest) with its tokenizer. docs/default-model.md is its
model card; tools/default_model/ rebuilds it.

Pure pathlib: importing this module (or calling `default_model_path`) loads no torch.
"""

from __future__ import annotations

from pathlib import Path

_DIR = Path(__file__).resolve().parent

HELDOUT_SAMPLE_FILE = "heldout_sample.txt"  # the start of the held-out books, for quick perplexity checks


def default_model_path() -> Path:
    """Directory of the packaged default checkpoint (config.json, shards, manifest, tokenizer)."""
    return _DIR


def heldout_sample_path() -> Path:
    """A few KB of held-out KJV text (never trained on), in the training files' normalised form."""
    return _DIR / HELDOUT_SAMPLE_FILE
