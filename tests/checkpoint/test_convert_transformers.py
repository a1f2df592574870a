"""transformers DeepseekV4ForCausalLM <-> release layout, through `mxserve convert`.

Bounds stated and checked per element (s = the element's block/group scale):
* FP8 e4m3 linears (3 mantissa bits): |w - ŵ| <= 2^-4 |w| + 2^-10 s;
* MXFP4 e2m1 experts (1 mantissa bit): |w - ŵ| <= 2^-2 |w| + 2^-2 s;
* BF16 tensors (8 significant bits, round to nearest): |w - ŵ| <= 2^-8 |w|;
* F32 / I64 tensors: exact. With --no-quantize every tensor comes back bit-exact.
Besides the bound, quantized weights must equal mxserve.formats' dequantize(quantize(w)).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mxserve.cli.main import app
from mxserve.config import ModelConfig
from mxserve.formats import dequantize_fp8_block, dequantize_mxfp4, quantize_fp8_block, quantize_mxfp4
from mxserve.formats.pow2 import ue8m0_value
from mxserve.model.checkpoint import CheckpointReader, ReleaseFormat, build_inventory
from mxserve.model.checkpoint.convert import TransformersSource
from mxserve.model.checkpoint.files import SafetensorsDir
from mxserve.testing import TINY_CONFIGS

transformers = pytest.importorskip("transformers")

runner = CliRunner()


def _hf_config():
    c = TINY_CONFIGS["tiny-all"]
    types = {"sliding": "sliding_attention", "csa": "compressed_sparse_attention", "hca": "heavily_compressed_attention"}
    return transformers.DeepseekV4Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, head_dim=c.head_dim, q_lora_rank=c.q_lora_rank,
        o_groups=c.o_groups, o_lora_rank=c.o_lora_rank, sliding_window=c.sliding_window,
        index_n_heads=c.index_n_heads, index_head_dim=c.index_head_dim, index_topk=c.index_topk,
        n_routed_experts=c.n_routed_experts, num_experts_per_tok=c.num_experts_per_tok,
        moe_intermediate_size=c.moe_intermediate_size, n_shared_experts=c.n_shared_experts, hc_mult=c.hc_mult,
        layer_types=[types[k.value] for k in c.layer_kinds],
        compress_rates={types["csa"]: c.compress_rate_csa, types["hca"]: c.compress_rate_hca},
        mlp_layer_types=["hash_moe"] * c.num_hash_layers + ["moe"] * (c.num_hidden_layers - c.num_hash_layers),
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=4096,
    )


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(_hf_config())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # Default init leaves these at zero / one: give them non-default values.
        for name, p in model.named_parameters():
            if name.endswith(("sinks", ".base", "hc_base", "position_bias")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name.endswith(("scale", "hc_scale")) or "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("tid2eid"):
                b.copy_(torch.rand(b.shape[0], model.config.n_routed_experts, generator=g).argsort(1)[:, : b.shape[1]])
    return model


def _convert(src: Path, dst: Path, *flags: str) -> Path:
    result = runner.invoke(app, ["convert", str(src), str(dst), *flags])
    assert result.exit_code == 0, result.output
    return dst


def _hf_dir(model, path: Path, original_format: bool) -> Path:
    model.save_pretrained(path, save_original_format=original_format)
    (path / "tokenizer.json").write_text('{"version": "1.0"}')
    return path


def _load_hf(path: Path) -> dict[str, torch.Tensor]:
    model, info = transformers.DeepseekV4ForCausalLM.from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_both_transformers_spellings_read_identically(hf_model, tmp_path: Path):
    """save_pretrained's default "original format" names and plain state-dict names."""
    default = TransformersSource(_hf_dir(hf_model, tmp_path / "default", True))
    plain = TransformersSource(_hf_dir(hf_model, tmp_path / "plain", False))
    inventory = build_inventory(default.config(quantized=True))
    assert default.config(quantized=True) == plain.config(quantized=True)
    names = [*inventory.tensors, *(s.weight_name for s in inventory.linears.values())]
    for name in names:
        assert torch.equal(default.tensor(name), plain.tensor(name)), name
    assert len(names) == len(inventory.tensors) + len(inventory.linears)


def test_quantized_round_trip_within_quantization_error(hf_model, tmp_path: Path):
    src = _hf_dir(hf_model, tmp_path / "hf", True)
    release = _convert(src, tmp_path / "release", "--to", "release")
    reader = CheckpointReader(release)
    reader.validate()
    assert (release / "tokenizer.json").exists()
    assert reader.config.num_mtp_blocks == 0 and reader.config.compress_ratios == (0, 4, 16, 4, 16, 0)
    assert reader.config.num_hash_layers == 2 and reader.config.compress_rate_hca == 16
    back = _load_hf(_convert(release, tmp_path / "back", "--to", "transformers"))
    original = {k: v.detach() for k, v in hf_model.state_dict().items()}
    assert set(back) == set(original)

    files = SafetensorsDir(release)
    checked = {"fp8": 0, "mxfp4": 0, "bf16": 0, "exact": 0}
    for prefix, spec in reader.inventory.linears.items():
        m = prefix.split(".")
        if "experts" in m:
            layer, e, w = int(m[1]), int(m[4]), m[5]
            packed = original[f"model.layers.{layer}.mlp.experts.{'down_proj' if w == 'w2' else 'gate_up_proj'}"]
            inter = packed.shape[1] // 2
            x = packed[e] if w == "w2" else (packed[e, :inter] if w == "w1" else packed[e, inter:])
            new = back[f"model.layers.{layer}.mlp.experts.{'down_proj' if w == 'w2' else 'gate_up_proj'}"]
            x_hat = new[e] if w == "w2" else (new[e, :inter] if w == "w1" else new[e, inter:])
        else:
            x, x_hat = None, None
            for k in original:
                if k.endswith(_hf_suffix(prefix)) and k.startswith(f"model.layers.{m[1]}."):
                    x, x_hat = original[k], back[k]
            assert x is not None, prefix
        x, x_hat = x.float(), x_hat.float()
        err = (x - x_hat).abs()
        if spec.release_format is ReleaseFormat.FP8_BLOCK:
            s = ue8m0_value(files.raw_bytes(spec.scale_name)).repeat_interleave(128, 0).repeat_interleave(128, 1)
            s = s[: x.shape[0], : x.shape[1]]
            assert bool((err <= x.abs() * 2**-4 + s * 2**-10).all()), prefix
            if checked["fp8"] % 8 == 0:  # a sample: the formats' own quantize-dequantize, bit for bit
                assert torch.equal(x_hat, dequantize_fp8_block(*quantize_fp8_block(x))), prefix
            checked["fp8"] += 1
        elif spec.release_format is ReleaseFormat.MXFP4:
            s = ue8m0_value(files.raw_bytes(spec.scale_name)).repeat_interleave(32, 1)
            assert bool((err <= x.abs() * 2**-2 + s * 2**-2).all()), prefix
            if checked["mxfp4"] % 16 == 0:
                assert torch.equal(x_hat, dequantize_mxfp4(*quantize_mxfp4(x))), prefix
            checked["mxfp4"] += 1
        else:
            assert bool((err <= x.abs() * 2**-8).all()), prefix
            checked["bf16"] += 1
    for key, x in original.items():
        if x.dtype == torch.int64 or any(t in key for t in ("sinks", "_hc.", "hc_head", "position_bias", "correction")):
            assert torch.equal(back[key].to(x.dtype), x), key
            checked["exact"] += 1
        elif "norm" in key or "embed" in key or "lm_head" in key or key.endswith("mlp.gate.weight"):
            assert bool(((back[key].float() - x).abs() <= x.abs() * 2**-8).all()), key
    assert checked["fp8"] > 30 and checked["mxfp4"] == 6 * 8 * 3 and checked["bf16"] > 10 and checked["exact"] > 40


def _hf_suffix(prefix: str) -> str:
    from mxserve.model.checkpoint.hf_names import BLOCK_NAMES

    rest = prefix.split(".", 2)[2] + ".weight"
    return BLOCK_NAMES[rest]


def test_no_quantize_round_trip_is_exact(hf_model, tmp_path: Path):
    src = _hf_dir(hf_model, tmp_path / "hf", True)
    release = _convert(src, tmp_path / "release", "--to", "release", "--no-quantize")
    reader = CheckpointReader(release)
    reader.validate()
    assert not any(n.endswith(".scale") for n in reader.tensor_names)
    assert reader.config.quantization is None
    back = _load_hf(_convert(release, tmp_path / "back", "--to", "transformers"))
    for key, x in hf_model.state_dict().items():
        assert back[key].dtype == x.dtype and torch.equal(back[key], x), key


def test_release_to_transformers_and_back_keeps_mtp_and_values(tiny_all: Path, tmp_path: Path):
    hf = _convert(tiny_all, tmp_path / "hf", "--to", "transformers")
    _load_hf(hf)  # transformers itself loads it: names and shapes are its own
    again = CheckpointReader(_convert(hf, tmp_path / "again", "--to", "release", "--no-quantize"))
    again.validate()
    first = CheckpointReader(tiny_all)
    assert again.config == ModelConfig.from_dict({**first.config.to_dict(), "quantization_config": None})
    for prefix in ("layers.1.attn.wq_b", "layers.4.ffn.experts.2.w3", "mtp.0.h_proj", "mtp.0.ffn.shared_experts.w2"):
        assert torch.equal(again.load_linear(prefix).float(),
                           first.load_linear(prefix).dequantize(torch.float32)), prefix
    for name in ("mtp.0.hc_head_fn", "layers.0.ffn.gate.tid2eid", "layers.2.attn.compressor.ape"):
        assert torch.equal(again.load_tensor(name), first.load_tensor(name)), name


def test_convert_refuses_quantized_transformers_output(tiny_all: Path, tmp_path: Path):
    result = runner.invoke(app, ["convert", str(tiny_all), str(tmp_path / "x"), "--to", "transformers", "--quantize"])
    assert result.exit_code == 2 and "full precision" in result.stderr
