"""The packaged default model (issue 5): it is where `default_model_path()` says, it passes the
checkpoint's manifest and inventory checks, its tokenizer carries the DeepSeek-V4 specials, and
mxserve's reference model (faithful numerics) greedily continues a KJV prompt sensibly. Its
trained DSpark draft (issue 13) ships in its own shard and speculates losslessly out of the box."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import mxserve
from mxserve import LLM, SamplingParams
from mxserve.default_model import default_model_path, heldout_sample_path
from mxserve.default_model.degeneracy import degeneracy_reason
from mxserve.engine.tokenizer import Tokenizer
from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.forward_batch import ForwardBatch

DRAFT_SHARD = "model-dspark-draft.safetensors"  # tools/dspark/ship_draft.py writes it
NUM_SPECIAL = 14  # ids 0..13: BOS, EOS, User, Assistant, think, /think, DSML, latest_reminder, 6 task tokens


@pytest.fixture(scope="module")
def reader() -> CheckpointReader:
    return CheckpointReader(default_model_path())


def test_path_is_the_packaged_directory_and_needs_no_torch() -> None:
    assert mxserve.default_model_path() == default_model_path()
    assert (default_model_path() / "config.json").is_file()
    assert heldout_sample_path().stat().st_size > 1000
    code = "import sys, mxserve; mxserve.default_model_path(); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_checkpoint_validates_in_release_formats(reader: CheckpointReader) -> None:
    reader.validate()  # SHA-256 manifest, shape/dtype inventory, packed values
    formats = reader.bytes_by_format()
    assert sum(formats.values()) <= 36_000_000, formats  # target 27.1 MB + draft 7.2 MB
    config = reader.config
    assert config.quantization is not None and config.expert_dtype == "fp4"
    assert {k.value for k in config.layer_kinds} == {"sliding", "csa", "hca"}
    assert 0 < config.num_hash_layers < config.num_hidden_layers  # hash and learned routing
    assert config.hc_mult == 4 and config.o_groups >= 2 and config.head_dim == 512


def test_tokenizer_has_the_specials_at_release_ids() -> None:
    tok = Tokenizer.from_dir(default_model_path())
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    assert max(vars(tok.special_ids).values()) < NUM_SPECIAL


def test_faithful_greedy_continuation_is_not_degenerate(reader: CheckpointReader) -> None:
    tok = Tokenizer.from_dir(default_model_path())
    model = DeepseekV4Model(reader.config, reader.load(progress=False), numerics="faithful")
    # A held-out verse opening (1 Thessalonians 5:13). Not every held-out prompt continues this
    # well: docs/default-model.md reports 13/20 non-degenerate over 20 prompts.
    prompt = [tok.bos_token_id, *tok.encode("5:13 And to esteem them very highly in love")]
    state = model.new_cache_state(max_sequences=1, max_positions=64, block_size=16)
    logits = model.forward(ForwardBatch.from_chunks([prompt], [0], [0], logits_for="last"), state)
    new: list[int] = []
    for _ in range(24):
        new.append(int(torch.argmax(logits[-1])))
        logits = model.forward(ForwardBatch.from_chunks([[new[-1]]], [0], [len(prompt) + len(new) - 1]), state)
    text = tok.decode(new)
    assert degeneracy_reason(new, num_special=NUM_SPECIAL, min_distinct_fraction=0.5, min_loop_tokens=10) is None, text
    assert sum(c.isalpha() for c in text) > len(text) // 2, text  # words, not punctuation or digits


def test_draft_ships_in_its_own_shard_next_to_the_target_shards(reader: CheckpointReader) -> None:
    dspark = reader.config.dspark
    assert dspark is not None and reader.config.layout.value == "0731"
    assert dspark.target_layer_ids == (5, 6, 7) and dspark.num_stages == 3
    shard_of = {name: entry.file.name for name, entry in reader.files.entries.items()}
    draft = {name for name in shard_of if name.startswith("mtp.")}
    assert {f"mtp.{s}" for s in range(3)} == {".".join(n.split(".")[:2]) for n in draft}
    assert {shard_of[n] for n in draft} == {DRAFT_SHARD}
    # The target stays in the two shards quality.json and the model card were measured on.
    assert {shard_of[n] for n in shard_of if n not in draft} == {
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_speculation_works_out_of_the_box_and_is_lossless() -> None:
    """K=3 greedy through the engine on the CPU equals plain greedy, and the trained draft gets
    tokens accepted (the CPU measured a mean acceptance length of 1.72 on 8 held-out prompts)."""
    tok = Tokenizer.from_dir(default_model_path())
    prompts = [[tok.bos_token_id, *tok.encode(t)] for t in ("And God said", "5:13 And to esteem them very highly")]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    plain = LLM(str(default_model_path()), device="cpu", max_model_len=256, progress=False)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    del plain
    spec = LLM(str(default_model_path()), device="cpu", max_model_len=256, progress=False,
               speculative_config={"method": "dspark", "num_speculative_tokens": 3})
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
    stats = spec.engine.spec_decode_stats.as_dict()
    assert got == want
    assert stats["num_draft_tokens"] > 0 and stats["num_accepted_tokens"] > 0, stats
    assert stats["mean_acceptance_length"] > 1.2, stats
