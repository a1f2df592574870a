"""RoPE tables and rotation against transformers' DeepSeek-V4 implementation and spec §2."""

from __future__ import annotations

import math

import torch

from mxserve.config import ModelConfig
from mxserve.model.rope import RopeTables, _yarn_ramp_bounds, apply_rope
from tests.model.hf_oracle import hf_config_from


def test_flash_yarn_table_matches_spec_and_transformers():
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4RotaryEmbedding

    flash = ModelConfig()
    ours = RopeTables(flash)
    assert _yarn_ramp_bounds(flash.rope_scaling, 64, 160000.0) == (15.0, 25.0)  # spec §2: low 15, high 25
    assert ours.compress[0] == 1.0 and math.isclose(float(ours.compress[1]), 0.6877, rel_tol=1e-3)
    assert math.isclose(float(ours.compress[31]), 5.68e-7, rel_tol=1e-2)
    hf = DeepseekV4RotaryEmbedding(hf_config_from(flash))
    torch.testing.assert_close(ours.compress, hf.compress_inv_freq, rtol=1e-6, atol=0)
    torch.testing.assert_close(ours.main, hf.main_inv_freq, rtol=1e-6, atol=0)
    assert hf.compress_attention_scaling == 1.0  # no YaRN mscale on cos/sin


def test_rotation_is_interleaved_on_the_last_channels_and_inverse_undoes_it():
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb

    table = RopeTables(ModelConfig()).compress
    x = torch.randn(5, 3, 512, dtype=torch.float32)
    positions = torch.tensor([0, 1, 7, 4096, 70000])
    rotated = apply_rope(x, positions, table)
    assert torch.equal(rotated[..., :448], x[..., :448])  # NoPE channels untouched
    angles = positions[:, None].float() * table[None, :]
    hf = apply_rotary_pos_emb(x.transpose(0, 1), angles.cos(), angles.sin(), unsqueeze_dim=0).transpose(0, 1)
    torch.testing.assert_close(rotated, hf, rtol=1e-6, atol=1e-6)
    # pair (448, 449) rotates like a complex number by angle pos * f_0
    a, b = x[3, 0, 448], x[3, 0, 449]
    c, s = math.cos(4096 * float(table[0])), math.sin(4096 * float(table[0]))
    assert math.isclose(float(rotated[3, 0, 448]), float(a * c - b * s), rel_tol=1e-5, abs_tol=1e-5)
    back = apply_rope(rotated, positions, table, inverse=True)
    torch.testing.assert_close(back, x, rtol=1e-5, atol=1e-5)
