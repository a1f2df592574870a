"""Issue 8: the 0731 layout (DSpark draft in mtp.{0,1,2}, 46-style compress_ratios) runs target-only
exactly like the preview layout when the main-model weights are the same."""

from __future__ import annotations

import torch

from mxserve.model.checkpoint import CheckpointReader
from mxserve.model.deepseek_v4 import DeepseekV4Model
from mxserve.model.greedy import greedy_generate
from mxserve.testing import random_checkpoint


def test_same_main_weights_give_identical_target_only_tokens_and_logits(tmp_path):
    random_checkpoint("tiny-all", tmp_path / "preview", seed=3, progress=False)
    random_checkpoint("tiny-0731", tmp_path / "v0731", seed=3, progress=False)
    preview, v0731 = CheckpointReader(tmp_path / "preview"), CheckpointReader(tmp_path / "v0731")
    assert preview.config.layout.value == "preview" and v0731.config.layout.value == "0731"
    assert v0731.config.num_mtp_blocks == 0 and v0731.config.dspark.num_stages == 3

    w_preview, w_0731 = preview.load(progress=False), v0731.load(progress=False)
    main = [n for n in w_preview if not n.startswith("mtp.")]
    assert main and all(n in w_0731 for n in main)
    drafts = [n for n in w_0731 if n.startswith("mtp.")]
    assert {n.split(".")[1] for n in drafts} == {"0", "1", "2"}  # three DSpark stages loaded, packed
    for name in main:  # the precondition: byte-identical main weights in both layouts
        a, b = w_preview[name], w_0731[name]
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), name
        else:
            assert torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales), name

    prompt = torch.randint(2, preview.config.vocab_size, (70,), generator=torch.Generator().manual_seed(1)).tolist()
    tokens_a, logits_a = greedy_generate(DeepseekV4Model(preview.config, w_preview, resident_weights=True), prompt, 16)
    tokens_b, logits_b = greedy_generate(DeepseekV4Model(v0731.config, w_0731, resident_weights=True), prompt, 16)
    assert tokens_a == tokens_b
    assert torch.equal(logits_a, logits_b)
