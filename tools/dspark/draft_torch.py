"""A differentiable fp32 copy of the DSpark draft math (`mxserve.model.dspark`) for training.

mxserve's draft (`DSparkDraft`) runs under no_grad, reads its context from fp8_ds_mla caches and
computes many reductions in fp64 for batch invariance; none of that is needed to learn weights.
This module holds the same parameters under the 0731 release names (`mtp.{s}.*`, dsv4-0731
§2.3) as fp32 tensors and recomputes the same forward (§3.2 steps 2-7) with autograd:

* context: main_x = main_norm(main_proj(aux)); per stage kv_norm(wkv(main_x)) + RoPE (main table)
  over whole training windows, so every anchor's 128-position window is a band of one tensor;
* block [anchor, noise × (K−1)] at positions q … q+K−1, three V4 blocks (mHC, attention over the
  window band + all K block keys with the sink, bias-routed MoE + shared expert, clamped SwiGLU);
* HyperHead, `mtp.{last}.norm`, the target's frozen head → U, plus the Markov bias W2·W1[prev].

Differences from inference, on purpose: no fp8 rounding of context KV or activations (QAT
points), no weight quantization (the export quantizes once; the final acceptance is measured
through the real engine on the quantized checkpoint). Routing selection is not differentiated;
the router bias follows DeepSeek's auxiliary-loss-free update (`update_router_bias`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mxserve.config import DSparkConfig, ModelConfig
from mxserve.model.checkpoint import build_inventory
from mxserve.model.rope import RopeTables


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)


def _rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The rotation of `mxserve.model.rope.apply_rope` (pairs 2i, 2i+1 of the last channels); any leading dims."""
    rope_dim = 2 * inv_freq.numel()
    angles = positions.float()[..., None] * inv_freq.to(x.device)  # [..., r/2]
    cos, sin = angles.cos(), angles.sin()
    if inverse:
        sin = -sin
    while cos.dim() < x.dim():  # broadcast over head dims between positions and channels
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    rope = x[..., -rope_dim:]
    even, odd = rope[..., 0::2], rope[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return torch.cat((x[..., :-rope_dim], rotated), dim=-1)


class TrainableDraft(nn.Module):
    """Parameters keyed by release name (dots → '__' inside the ParameterDict)."""

    def __init__(self, config: ModelConfig, embed: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__()
        if config.dspark is None:
            raise ValueError("TrainableDraft: config has no dspark_* keys")
        self.config: ModelConfig = config
        self.spec: DSparkConfig = config.dspark
        self.register_buffer("embed", embed.float(), persistent=False)  # the target's, frozen
        self.register_buffer("head", head.float(), persistent=False)
        self.register_buffer("inv_freq", RopeTables(config).main.float(), persistent=False)
        inv = build_inventory(config)
        self.linear_names = [p for p in inv.linears if p.startswith("mtp.")]
        self.tensor_specs = {n: s for n, s in inv.tensors.items() if n.startswith("mtp.")}
        params: dict[str, nn.Parameter] = {}
        for p in self.linear_names:
            spec = inv.linears[p]
            params[self._key(f"{p}.weight")] = nn.Parameter(torch.empty(spec.logical_shape))
        for name, spec in self.tensor_specs.items():
            if name.endswith("gate.bias"):
                continue  # a buffer: updated by the load-balancing rule, not by gradients
            params[self._key(name)] = nn.Parameter(torch.empty(spec.shape))
        self.params = nn.ParameterDict(params)
        for s in range(self.spec.num_stages):
            self.register_buffer(f"bias_{s}", torch.zeros(config.n_routed_experts))

    @staticmethod
    def _key(name: str) -> str:
        return name.replace(".", "__")

    def p(self, name: str) -> torch.Tensor:
        return self.params[self._key(name)]

    def bias(self, s: int) -> torch.Tensor:
        return getattr(self, f"bias_{s}")

    # ------------------------------------------------------------------ init / export
    @torch.no_grad()
    def init_weights(self, seed: int, warm: dict[str, torch.Tensor] | None = None) -> None:
        """Random init (std 1/sqrt(in) linears, unit norms, mHC like the target); then overwrite
        every tensor present in `warm` (release names → fp32, e.g. a target layer's weights)."""
        g = torch.Generator().manual_seed(seed)
        d = self.config.hidden_size
        for key, prm in self.params.items():
            name = key.replace("__", ".")
            shape = prm.shape
            if name.endswith("norm.weight"):
                prm.fill_(1.0)
            elif name.endswith("attn_sink"):
                prm.zero_()
            elif name.endswith("_scale"):
                prm.fill_(1.0)
            elif name.endswith("_base") or name.endswith("confidence_head.proj.weight"):
                prm.zero_()
            elif name.endswith("markov_w2.weight"):
                prm.zero_()  # the Markov bias starts at 0; W1 random so W2 gets gradient
            elif name.endswith("markov_w1.weight"):
                prm.copy_(torch.randn(shape, generator=g) * 0.02)
            else:
                prm.copy_(torch.randn(shape, generator=g) / math.sqrt(shape[-1]))
        # main_proj starts as "take the last target layer's hidden": [0 … 0 | I]
        mp = self.p("mtp.0.main_proj.weight")
        mp.mul_(0.01)
        mp[:, -d:] += torch.eye(d, device=mp.device)
        for name, value in (warm or {}).items():
            if name.endswith("gate.bias"):
                self.bias(int(name.split(".")[1])).copy_(value)
            elif self._key(name) in self.params:
                self.p(name).copy_(value.float())

    def release_tensors(self) -> dict[str, torch.Tensor]:
        """Every `mtp.*` tensor of the inventory: linears as fp32 `<prefix>` [out, in], plain tensors by name."""
        out: dict[str, torch.Tensor] = {}
        for p in self.linear_names:
            out[p] = self.p(f"{p}.weight").detach().float().cpu()
        for name in self.tensor_specs:
            t = self.bias(int(name.split(".")[1])) if name.endswith("gate.bias") else self.p(name)
            out[name] = t.detach().float().cpu()
        return out

    # ------------------------------------------------------------------ pieces
    def _lin(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        return F.linear(x, self.p(f"{prefix}.weight").to(x.dtype))

    def _hc_mix(self, streams: torch.Tensor, prefix: str, site: str) -> torch.Tensor:
        flat = streams.flatten(-2).float()
        flat = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return flat @ self.p(f"{prefix}hc_{site}_fn").t()

    def _hc_pre(self, streams: torch.Tensor, prefix: str, site: str):
        cfg, hc = self.config, self.config.hc_mult
        m = self._hc_mix(streams, prefix, site)
        pre_m, post_m, comb_m = m.split([hc, hc, hc * hc], dim=-1)
        pre_b, post_b, comb_b = self.p(f"{prefix}hc_{site}_base").split([hc, hc, hc * hc])
        scale = self.p(f"{prefix}hc_{site}_scale")
        pre = torch.sigmoid(pre_m * scale[0] + pre_b) + cfg.hc_eps
        post = 2 * torch.sigmoid(post_m * scale[1] + post_b)
        comb = torch.softmax((comb_m * scale[2] + comb_b).unflatten(-1, (hc, hc)), dim=-1) + cfg.hc_eps
        comb = comb / (comb.sum(dim=-2, keepdim=True) + cfg.hc_eps)
        for _ in range(cfg.hc_sinkhorn_iters - 1):
            comb = comb / (comb.sum(dim=-1, keepdim=True) + cfg.hc_eps)
            comb = comb / (comb.sum(dim=-2, keepdim=True) + cfg.hc_eps)
        return (pre.unsqueeze(-1) * streams).sum(dim=-2), post, comb

    @staticmethod
    def _hc_post(out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
        return post.unsqueeze(-1) * out.unsqueeze(-2) + torch.einsum("...ij,...id->...jd", comb, streams)

    def context_kv(self, aux: torch.Tensor, positions: torch.Tensor) -> list[torch.Tensor]:
        """aux [N, T, L·D] → per stage K = V [N, T, head_dim] (RoPE at `positions` [N, T])."""
        eps = self.config.rms_norm_eps
        main_x = _rms(self._lin(aux, "mtp.0.main_proj"), eps) * self.p("mtp.0.main_norm.weight")
        out = []
        for s in range(self.spec.num_stages):
            a = f"mtp.{s}.attn."
            kv = _rms(self._lin(main_x, f"{a}wkv"), eps) * self.p(f"{a}kv_norm.weight")
            out.append(_rope(kv, positions, self.inv_freq))
        return out

    def _attention(self, x, s, ctx_kv, ctx_pos, anchor_pos, block_pos):
        """x [N, A, K, D] normed; ctx_kv [N, T, hd], ctx_pos [N, T]; anchor_pos [N, A]; block_pos [N, A, K]."""
        cfg, a = self.config, f"mtp.{s}.attn."
        n, na, k, _ = x.shape
        heads, hd, eps = cfg.num_attention_heads, cfg.head_dim, cfg.rms_norm_eps
        qr = _rms(self._lin(x, f"{a}wq_a"), eps) * self.p(f"{a}q_norm.weight")
        q = self._lin(qr, f"{a}wq_b").unflatten(-1, (heads, hd))
        q = _rope(_rms(q, eps), block_pos, self.inv_freq)  # [N, A, K, H, hd]
        kv = _rope(_rms(self._lin(x, f"{a}wkv"), eps) * self.p(f"{a}kv_norm.weight"), block_pos, self.inv_freq)
        scale = hd**-0.5
        s_ctx = torch.einsum("nakhd,ntd->nakht", q, ctx_kv) * scale
        # window: positions anchor−W … anchor−1 of the same training window
        rel = anchor_pos[:, :, None] - ctx_pos[:, None, :]  # [N, A, T]
        ok = (rel >= 1) & (rel <= cfg.sliding_window)
        s_ctx = s_ctx.masked_fill(~ok[:, :, None, None, :], float("-inf"))
        s_blk = torch.einsum("nakhd,najd->nakhj", q, kv) * scale  # non-causal: every block key
        sink = self.p(f"{a}attn_sink").to(s_ctx.dtype)[None, None, None, :, None].expand(n, na, k, heads, 1)
        probs = torch.softmax(torch.cat((s_ctx.float(), s_blk.float(), sink.float()), dim=-1), dim=-1).to(q.dtype)
        t = ctx_kv.shape[1]
        out = torch.einsum("nakht,ntd->nakhd", probs[..., :t], ctx_kv) + torch.einsum(
            "nakhj,najd->nakhd", probs[..., t:t + k], kv)
        out = _rope(out, block_pos, self.inv_freq, inverse=True)
        groups = cfg.o_groups
        wo_a = self.p(f"{a}wo_a.weight").to(out.dtype)
        grouped = torch.einsum("nakgi,gri->nakgr", out.flatten(-2).unflatten(-1, (groups, -1)),
                               wo_a.view(groups, -1, wo_a.shape[-1]))
        return self._lin(grouped.flatten(-2), f"{a}wo_b")

    def _expert(self, x: torch.Tensor, prefix: str) -> torch.Tensor:
        lim = self.config.swiglu_limit
        h = F.silu(self._lin(x, f"{prefix}w1").clamp(max=lim)) * self._lin(x, f"{prefix}w3").clamp(-lim, lim)
        return h

    def _moe(self, x: torch.Tensor, s: int, loads: list[torch.Tensor] | None) -> torch.Tensor:
        cfg, f = self.config, f"mtp.{s}.ffn."
        shape, x2 = x.shape, x.reshape(-1, x.shape[-1])
        scores = torch.sqrt(F.softplus(x2.float() @ self.p(f"{f}gate.weight").float().t()))
        with torch.no_grad():
            ids = torch.topk(scores + self.bias(s), cfg.num_experts_per_tok, dim=-1).indices
        picked = scores.gather(1, ids)
        weights = picked / picked.sum(-1, keepdim=True) * cfg.routed_scaling_factor
        out = torch.zeros(x2.shape, dtype=torch.float32, device=x2.device)  # fp32 sum of expert outputs
        for e in range(cfg.n_routed_experts):
            rows, slot = torch.nonzero(ids == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            h = self._expert(x2[rows], f"{f}experts.{e}.") * weights[rows, slot, None].to(x2.dtype)
            out = out.index_add(0, rows, self._lin(h, f"{f}experts.{e}.w2").float())
        if cfg.n_shared_experts:
            out = out + self._lin(self._expert(x2, f"{f}shared_experts."), f"{f}shared_experts.w2").float()
        if loads is not None:
            loads.append(torch.bincount(ids.flatten(), minlength=cfg.n_routed_experts).float())
        return out.view(shape)

    # ------------------------------------------------------------------ forward
    def base_logits(self, ctx_kv: list[torch.Tensor], ctx_pos: torch.Tensor, anchors: torch.Tensor,
                    anchor_pos: torch.Tensor, block_width: int, loads: list[torch.Tensor] | None = None) -> torch.Tensor:
        """anchors / anchor_pos [N, A] → U [N, A, K, V] fp32 (before the Markov bias)."""
        cfg, k, eps = self.config, block_width, self.config.rms_norm_eps
        tokens = torch.full((*anchors.shape, k), self.spec.noise_token_id, dtype=torch.long, device=anchors.device)
        tokens[..., 0] = anchors
        block_pos = anchor_pos[..., None] + torch.arange(k, device=anchors.device)
        dtype = ctx_kv[0].dtype
        streams = self.embed[tokens].to(dtype)[..., None, :].expand(*tokens.shape, cfg.hc_mult, -1)
        for s in range(self.spec.num_stages):
            p = f"mtp.{s}."
            x, post, comb = self._hc_pre(streams, p, "attn")
            x = _rms(x, eps) * self.p(f"{p}attn_norm.weight")
            out = self._attention(x.to(dtype), s, ctx_kv[s], ctx_pos, anchor_pos, block_pos)
            streams = self._hc_post(out.float(), streams.float(), post, comb).to(dtype)
            x, post, comb = self._hc_pre(streams, p, "ffn")
            x = _rms(x, eps) * self.p(f"{p}ffn_norm.weight")
            out = self._moe(x.to(dtype), s, loads)
            streams = self._hc_post(out.float(), streams.float(), post, comb).to(dtype)
        last = f"mtp.{self.spec.num_stages - 1}."
        m = self._hc_mix(streams, last, "head")
        pre = torch.sigmoid(m * self.p(f"{last}hc_head_scale")[0] + self.p(f"{last}hc_head_base")) + cfg.hc_eps
        hidden = (pre.unsqueeze(-1) * streams.float()).sum(dim=-2)
        hidden = _rms(hidden, eps) * self.p(f"{last}norm.weight")
        return hidden.float() @ self.head.t()

    def markov_bias(self, prev: torch.Tensor) -> torch.Tensor:
        last = f"mtp.{self.spec.num_stages - 1}.markov_head."
        return self.p(f"{last}markov_w1.weight")[prev].float() @ self.p(f"{last}markov_w2.weight").float().t()

    @torch.no_grad()
    def update_router_bias(self, loads: list[torch.Tensor], rate: float) -> None:
        """DeepSeek-V3/V4 auxiliary-loss-free balancing: raise the bias of under-loaded experts."""
        for s, load in enumerate(loads):
            self.bias(s).add_(rate * torch.sign(load.mean() - load))
