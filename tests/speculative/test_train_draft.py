"""The DSpark draft trainer (tools/dspark/train_draft.py): its target features equal what the engine
captures at inference, its differentiable draft equals mxserve's draft, and a few CPU steps on the
default model give a checkpoint that validates, loads with speculation on and decodes losslessly."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from mxserve import LLM, SamplingParams, default_model_path
from mxserve.model.checkpoint import CheckpointReader, to_full_precision
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.dspark import DraftWindows, DSparkDraft
from mxserve.model.forward_batch import ForwardBatch
from mxserve.model.kv_state import Pool
from mxserve.testing import random_checkpoint

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "dspark"


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(TOOLS))
    try:
        yield {name: importlib.import_module(name) for name in ("draft_torch", "self_data", "target_features", "train_draft")}
    finally:
        sys.path.remove(str(TOOLS))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = random_checkpoint("tiny-0731", tmp_path_factory.mktemp("tiny") / "ckpt", seed=3, progress=False)
    reader = CheckpointReader(path)
    return reader.config, reader.load(progress=False)


def test_training_features_equal_the_engines_incremental_capture(tools, tiny):
    """Training runs each window as one batched prefill; inference captures prefill chunks and
    single-token decodes. Faithful numerics: equal within bf16 rounding."""
    config, weights = tiny
    model = DeepseekV4Model(config, weights)
    layers = config.dspark.target_layer_ids
    gen = torch.Generator().manual_seed(0)
    windows = torch.randint(2, config.vocab_size, (2, 24), generator=gen)
    aux, greedy = tools["target_features"].target_features(model, windows, layers, batch_windows=2)
    for w in range(2):
        state = model.new_cache_state(max_sequences=1, max_positions=24)
        seq = windows[w].tolist()
        rows, logits = [], []
        for start, stop in ((0, 13), *((p, p + 1) for p in range(13, 24))):  # prefill chunk, then decodes
            batch = ForwardBatch.from_chunks([seq[start:stop]], [0], [start])
            lg, a = model.forward_with_aux(batch, state, layers)
            rows.append(a)
            logits.append(lg)
        incremental = torch.cat(rows).float()
        assert torch.allclose(aux[w].float(), incremental, rtol=2e-2, atol=2e-2), (aux[w].float() - incremental).abs().max()
        assert (torch.cat(logits).argmax(-1) == greedy[w]).float().mean() > 0.9


def test_differentiable_draft_equals_mxserve_draft(tools, tiny):
    """Same weights, exact numerics (fp32 caches): the training copy's base logits and Markov bias
    equal `DSparkDraft.block_logits` / `markov_bias` (fp32 vs fp64 reductions: rel. 1e-3)."""
    config, weights = tiny
    target = DeepseekV4Model(config, weights, numerics="exact")
    layers, k, length = config.dspark.target_layer_ids, 5, 40  # 40 > sliding_window: the window band matters
    seq = torch.randint(2, config.vocab_size, (length + 1,), generator=torch.Generator().manual_seed(1)).tolist()
    state = target.new_cache_state(max_sequences=1, max_positions=length + k)
    _, aux = target.forward_with_aux(ForwardBatch.from_chunks([seq[:length]], [0], [0]), state, layers)
    draft = DSparkDraft.for_target(target, weights)
    windows = DraftWindows(config, target.policy, num_blocks=64, block_size=state.block_size)
    positions = torch.arange(length)
    draft.write_context(windows, aux, positions, state.slots(Pool.WINDOW, 0, positions))
    expected = draft.block_logits(windows, state, [0], [seq[length]], [length], k)[0]

    mine = tools["draft_torch"].TrainableDraft(config, to_full_precision(weights["embed.weight"], torch.float32),
                                               to_full_precision(weights["head.weight"], torch.float32))
    warm = {}
    for prefix in mine.linear_names:
        warm[f"{prefix}.weight"] = to_full_precision(weights[prefix], torch.float32)
    for name in mine.tensor_specs:
        warm[name] = weights[name].float()
    mine.init_weights(0, warm)
    with torch.no_grad():
        ctx = mine.context_kv(aux.float()[None], positions[None])
        got = mine.base_logits(ctx, positions[None], torch.tensor([[seq[length]]]), torch.tensor([[length]]), k)[0, 0]
        prev = torch.tensor([seq[length], 7])
        assert torch.allclose(mine.markov_bias(prev), draft.markov_bias(prev), rtol=1e-4, atol=1e-5)
    scale = expected.abs().max()
    assert (got - expected).abs().max() <= 1e-3 * scale, ((got - expected).abs().max(), scale)
    assert (got.argmax(-1) == expected.argmax(-1)).all()


def test_train_a_few_steps_on_the_default_model(tools, tmp_path):
    """A few CPU steps with tiny windows: the loss goes down, the 0731 output validates, loads with
    speculation and decodes greedily exactly like the plain model."""
    data = tmp_path / "data"
    data.mkdir()
    heldout = (default_model_path() / "heldout_sample.txt").read_text(encoding="utf-8")
    (data / "train.txt").write_text(heldout[: len(heldout) // 2], encoding="utf-8")
    (data / "heldout.txt").write_text(heldout[len(heldout) // 2:], encoding="utf-8")
    out = tmp_path / "drafted"
    summary = tools["train_draft"].main([
        "--model", str(default_model_path()), "--data", str(data), "--out", str(out), "--device", "cpu",
        "--time-budget-s", "600", "--max-steps", "12", "--seq-len", "24", "--max-train-windows", "4",
        "--heldout-windows", "2", "--feature-batch", "4", "--batch", "4", "--anchors", "8", "--lr", "3e-3",
        "--train-block-sizes", "3", "--block-size", "3", "--final-prompts", "2", "--final-new-tokens", "8",
        "--final-ks", "3", "--eval-every-s", "1e9",
    ])
    assert summary["steps"] == 12
    assert summary["loss_last10"] < summary["loss_first10"]
    reader = CheckpointReader(out)
    reader.validate()
    assert reader.config.dspark is not None and reader.config.dspark.target_layer_ids == (5, 6, 7)
    spec_run = summary["real_acceptance"]["K=3"]
    assert spec_run["identical_to_plain"] is True, spec_run
    assert spec_run["num_draft_tokens"] > 0 and spec_run["mean_acceptance_length"] >= 1.0
    assert (out.parent / "drafted-train" / "summary.json").is_file()


def test_self_windows_are_replayable_and_greedy_where_they_say(tools):
    """Self-distillation data: seeded (same seed, same windows; another seed, other windows), each
    window starts with BOS, and the greedy share really is the target's greedy continuation (its
    last token is the argmax after the rest)."""
    llm = LLM(device="cpu", progress=False)
    bos = llm.engine.tokenizer.bos_token_id
    make = tools["self_data"].self_windows
    a = make(llm, 4, 12, bos, seed=1, prefix=(2, 6))
    assert a.shape == (4, 12) and (a[:, 0] == bos).all()
    assert torch.equal(a, make(llm, 4, 12, bos, seed=1, prefix=(2, 6)))
    assert not torch.equal(a[:2], make(llm, 4, 12, bos, seed=2, prefix=(2, 6))[:2])
    greedy = SamplingParams(max_tokens=1, temperature=0)
    for row in a[2:].tolist():
        assert llm.generate([row[:-1]], greedy)[0].outputs[0].token_ids[0] == row[-1]
    with pytest.raises(ValueError, match="greedy_share"):
        make(llm, 4, 12, bos, seed=1, greedy_share=1.5)


def test_self_data_training_without_a_corpus(tools, tmp_path):
    """No --data: the target writes its train and held-out windows itself, the budget starts after
    that, and the result is a valid 0731 checkpoint that records how long each part took."""
    out = tmp_path / "self_drafted"
    summary = tools["train_draft"].main([
        "--model", str(default_model_path()), "--out", str(out), "--device", "cpu", "--self-windows", "4",
        "--time-budget-s", "600", "--max-steps", "4", "--seq-len", "24", "--heldout-windows", "2",
        "--feature-batch", "4", "--batch", "4", "--anchors", "8", "--train-block-sizes", "3", "--block-size", "3",
        "--final-prompts", "0", "--eval-every-s", "1e9", "--init-from-draft", "--lr-schedule", "cosine",
    ])
    assert summary["steps"] == 4 and summary["train_windows"] == 4 and summary["data_s"] > 0
    assert summary["lr_schedule"] == "cosine"
    CheckpointReader(out).validate()
    # --init-from-draft started from the packaged draft: its first held-out proxy beats a fresh start's 1.0
    assert summary["evals"][0]["heldout_accept_proxy"] > 1.0


def test_learning_rate_warms_up_then_holds_or_decays(tools):
    lr = tools["train_draft"].learning_rate
    assert lr(1e-3, 0, 0.0, "constant") == pytest.approx(2e-5)  # step 1 of a 50-step warm-up
    assert lr(1e-3, 49, 0.0, "cosine") == pytest.approx(1e-3)
    assert lr(1e-3, 500, 0.9, "constant") == pytest.approx(1e-3)
    assert lr(1e-3, 500, 0.5, "cosine") == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    assert lr(1e-3, 500, 1.0, "cosine") == pytest.approx(1e-4) == lr(1e-3, 500, 3.0, "cosine")
    with pytest.raises(ValueError, match="schedule"):
        lr(1e-3, 0, 0.0, "linear")
