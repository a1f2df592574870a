"""`DSparkDraft`: the 0731 DSpark draft forward (dsv4-0731 §3.2 steps 2-7).

Three V4 blocks `mtp.{0,1,2}` (sliding-only, bias-routed MoE with the shared expert), fed by
* context: `main_x = main_norm(main_proj(concat of the target's hc-mean hiddens after
  dspark_target_layer_ids))`, whose per-stage `kv_norm(wkv(main_x))` + RoPE fills each stage's
  window for committed positions (`write_context`);
* a block of K tokens `[anchor, noise × (K−1)]` at positions q … q+K−1, embedded with the
  target's shared `embed.weight` and expanded to hc identical streams (`block_logits`).
After stage 2: HyperHead (`mtp.2.hc_head_*`), `mtp.2.norm`, the target's shared head in fp32 →
base logits U_i; slot i predicts position q+1+i. The Markov correction is sequential (each
draft depends on the previous one): logits_i = U_i + W2·W1[prev], prev starting at the anchor
(`draft_tokens`, with the caller's sampling rule). The confidence head is not used (static K).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch

from mxserve.config import ModelConfig
from mxserve.formats import QuantizedWeight
from mxserve.kernels.linear import Weight
from mxserve.kernels.moe import ExpertWeights
from mxserve.model.attention import AttentionWeights
from mxserve.model.decode_batch import paged_slots
from mxserve.model.dspark.attention import draft_block_attention
from mxserve.model.dspark.windows import DraftWindows
from mxserve.model.hyper_connection import HyperConnectionWeights, hc_head_normed, hc_pre_normed
from mxserve.model.kernel_set import REFERENCE_KERNELS, KernelSet
from mxserve.model.kv_state import ModelCacheState, Pool
from mxserve.model.moe import MoEWeights, moe_forward
from mxserve.model.numerics import NumericPolicy
from mxserve.model.rope import RopeTables
from mxserve.model.weights import WeightStore

# (step i, logits_i [B, V] fp32 after the Markov bias) → draft token ids [B] int64
PickFn = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StageWeights:
    hc_attn: HyperConnectionWeights
    attn_norm: torch.Tensor
    attention: AttentionWeights  # no compressor, no indexer
    hc_ffn: HyperConnectionWeights
    ffn_norm: torch.Tensor
    moe: MoEWeights  # bias routing (never hash), shared expert


class DSparkDraft:
    def __init__(
        self, config: ModelConfig, weights: Mapping[str, torch.Tensor | QuantizedWeight], *, policy: NumericPolicy,
        embed: torch.Tensor, head: Weight, kernels: KernelSet = REFERENCE_KERNELS, resident_weights: bool = False,
    ) -> None:
        """`embed`, `head`: the target's shared embedding table and LM head (the draft has none).
        Raises ValueError for a config without DSpark keys, KeyError naming a missing tensor."""
        if config.dspark is None:
            raise ValueError("DSparkDraft: the checkpoint has no DSpark draft (no dspark_* keys in config.json)")
        self.config, self.policy, self.kernels = config, policy, kernels
        self.spec = config.dspark
        self.embed, self.head = embed, head
        store = WeightStore(weights, resident=resident_weights)
        self.main_proj = store.linear("mtp.0.main_proj")
        self.main_norm = store.tensor("mtp.0.main_norm.weight")
        self.stages = [self._bind_stage(store, s) for s in range(self.spec.num_stages)]
        last = f"mtp.{self.spec.num_stages - 1}."
        self.hc_head_weights = tuple(store.tensor(f"{last}hc_head_{k}") for k in ("fn", "base", "scale"))
        self.final_norm = store.tensor(f"{last}norm.weight")
        # Markov head applied in fp32 (dsv4-0731 §3.2 step 7): W1 [V, r] rows, W2 [V, r] used r → V.
        self.markov_w1 = store.tensor(f"{last}markov_head.markov_w1.weight").float()
        self.markov_w2 = store.tensor(f"{last}markov_head.markov_w2.weight").float()
        # ratio 0 layers: the main table, no YaRN; on the weights' device (a CPU table would be
        # copied to the GPU at every use: a host sync that keeps the draft out of a CUDA graph)
        self.inv_freq = RopeTables(config, device=embed.device).main

    @classmethod
    def for_target(cls, target, weights: Mapping[str, torch.Tensor | QuantizedWeight], *,
                   resident_weights: bool = False) -> DSparkDraft:
        """The draft of a built `DeepseekV4Model` (shares its embedding, head, numerics, kernels)."""
        return cls(target.config, weights, policy=target.policy, embed=target.embed, head=target.head,
                   kernels=target.kernels, resident_weights=resident_weights)

    def _bind_stage(self, store: WeightStore, s: int) -> StageWeights:
        p, cfg = f"mtp.{s}.", self.config

        def hc(site: str) -> HyperConnectionWeights:
            return HyperConnectionWeights(
                store.tensor(f"{p}hc_{site}_fn"), store.tensor(f"{p}hc_{site}_base"), store.tensor(f"{p}hc_{site}_scale")
            )

        def expert(q: str) -> ExpertWeights:
            return ExpertWeights(store.linear(f"{q}w1"), store.linear(f"{q}w2"), store.linear(f"{q}w3"))

        a, f = f"{p}attn.", f"{p}ffn."
        attention = AttentionWeights(
            wq_a=store.linear(f"{a}wq_a"), q_norm=store.tensor(f"{a}q_norm.weight"), wq_b=store.linear(f"{a}wq_b"),
            wkv=store.linear(f"{a}wkv"), kv_norm=store.tensor(f"{a}kv_norm.weight"), wo_a=store.linear(f"{a}wo_a"),
            wo_b=store.linear(f"{a}wo_b"), sink=store.tensor(f"{a}attn_sink"), compressor=None, indexer=None,
        )
        moe = MoEWeights(
            gate=store.tensor(f"{f}gate.weight"), bias=store.tensor(f"{f}gate.bias"), tid2eid=None,
            experts=tuple(expert(f"{f}experts.{e}.") for e in range(cfg.n_routed_experts)),
            # the shared expert must be loaded and run (the vLLM loader trap, dsv4-0731 §3.4)
            shared=expert(f"{f}shared_experts.") if cfg.n_shared_experts else None,
        )
        return StageWeights(hc("attn"), store.tensor(f"{p}attn_norm.weight"), attention, hc("ffn"),
                            store.tensor(f"{p}ffn_norm.weight"), moe)

    # ------------------------------------------------------------------ context
    @torch.no_grad()
    def write_context(self, windows: DraftWindows, aux: torch.Tensor, positions: torch.Tensor,
                      slots: torch.Tensor) -> None:
        """Commit context rows: aux [N, len(target_layer_ids)·D] (the target's captured hiddens of
        COMMITTED positions), positions [N], window slots [N] (−1 rows are skipped)."""
        if aux.shape[0] == 0:
            return
        cfg, sd, qi = self.config, self.policy.stream_dtype, self.policy.quantize_gemm_inputs
        kernels = self.kernels
        main_x = kernels.rms_norm(kernels.linear(aux.to(sd), self.main_proj, quantize_input=qi, out_dtype=sd),
                                  self.main_norm, cfg.rms_norm_eps)
        for s, stage in enumerate(self.stages):  # kv norm + RoPE + encode + insert: the target's window op
            w = stage.attention
            kernels.kv_insert(kernels.linear(main_x, w.wkv, quantize_input=qi, out_dtype=sd), w.kv_norm,
                              cfg.rms_norm_eps, positions, self.inv_freq, windows[s], slots)

    # ------------------------------------------------------------------ the block
    @torch.no_grad()
    def block_logits(self, windows: DraftWindows, state: ModelCacheState, seq_ids: Sequence[Hashable],
                     anchors: Sequence[int], anchor_positions: Sequence[int], block_width: int) -> torch.Tensor:
        """Base logits U [B, K, V] fp32 for B sequences: block [anchor, noise × (K−1)] at positions
        anchor_position … anchor_position+K−1; context = each stage's window before the anchor."""
        cfg = self.config
        num_seqs, k = len(seq_ids), block_width
        if not (len(anchors) == len(anchor_positions) == num_seqs) or k <= 0:
            raise ValueError(f"block_logits: {num_seqs} sequences, {len(anchors)} anchors, "
                             f"{len(anchor_positions)} positions, block_width={k}")
        device = self.embed.device
        starts = torch.tensor(list(anchor_positions), dtype=torch.int64, device=device)
        # the context window: the W positions before the anchor (negative → no entry)
        window = torch.arange(-cfg.sliding_window, 0, device=device)
        window_slots = torch.stack([state.slots(Pool.WINDOW, seq, start + window)
                                    for seq, start in zip(seq_ids, starts, strict=True)])
        anchor_ids = torch.tensor(list(anchors), dtype=torch.int64, device=device)
        return self.block_forward(windows, anchor_ids, starts, window_slots, k)

    def block_forward(self, windows: DraftWindows, anchors: torch.Tensor, anchor_positions: torch.Tensor,
                      window_slots: torch.Tensor, block_width: int) -> torch.Tensor:
        """`block_logits` on device tensors: anchors [B], anchor_positions [B] int64, the context
        window's slots [B, W] (−1 = no entry) → U [B, K, V] fp32. Static shapes for a given (B, K)
        and no host sync: what a CUDA graph of the draft captures (`greedy_drafts`)."""
        cfg, k = self.config, block_width
        num_seqs, device = anchors.shape[0], anchors.device
        tokens = torch.full((num_seqs, k), self.spec.noise_token_id, dtype=torch.int64, device=device)
        tokens[:, 0] = anchors
        positions = (anchor_positions[:, None] + torch.arange(k, device=device)[None, :]).reshape(-1)
        tokens = tokens.reshape(-1)

        hc_args = dict(hc_eps=cfg.hc_eps, rms_eps=cfg.rms_norm_eps)
        streams = self.embed[tokens].to(self.policy.stream_dtype)[:, None, :].expand(-1, cfg.hc_mult, -1).contiguous()
        kernels = self.kernels
        for s, stage in enumerate(self.stages):
            normed, post, comb = hc_pre_normed(kernels, streams, stage.hc_attn, stage.attn_norm,
                                               sinkhorn_iters=cfg.hc_sinkhorn_iters, **hc_args)
            out = draft_block_attention(
                normed, positions, stage.attention, block_width=k,
                window_cache=windows[s], window_slots=window_slots, config=cfg, policy=self.policy,
                kernels=self.kernels, inv_freq=self.inv_freq,
            )
            streams = kernels.hc_post(out, streams, post, comb)
            normed, post, comb = hc_pre_normed(kernels, streams, stage.hc_ffn, stage.ffn_norm,
                                               sinkhorn_iters=cfg.hc_sinkhorn_iters, **hc_args)
            out = moe_forward(normed, tokens, stage.moe, cfg, self.policy, self.kernels)
            streams = kernels.hc_post(out, streams, post, comb)
        hidden = hc_head_normed(kernels, streams, self.hc_head_weights, self.final_norm, **hc_args)
        return self.kernels.linear(hidden, self.head).view(num_seqs, k, -1)

    @torch.no_grad()
    def greedy_drafts(self, windows: DraftWindows, anchors: torch.Tensor, anchor_positions: torch.Tensor,
                      window_table: torch.Tensor, block_size: int, block_width: int) -> torch.Tensor:
        """Greedy drafts [B, K] int64 from device tensors only: anchors [B], anchor_positions [B],
        each row's window-pool block table [B, pages] (−1 = none; a padding row's all −1). The
        block forward and the Markov loop with argmax picks, no host sync: the speculative step's
        draft graph (`mxserve.engine.speculative.step_graphs`)."""
        offsets = torch.arange(-self.config.sliding_window, 0, device=anchors.device)
        window_slots = paged_slots(window_table, anchor_positions[:, None] + offsets[None, :], block_size)
        base = self.block_forward(windows, anchors, anchor_positions, window_slots, block_width)
        drafts, _ = self.draft_tokens(base, anchors, lambda _, logits: torch.argmax(logits, dim=-1))
        return drafts

    # ------------------------------------------------------------------ Markov correction
    def markov_bias(self, prev: torch.Tensor) -> torch.Tensor:
        """W2 · W1[prev] for prev [B] → [B, V] fp32."""
        return self.markov_w1[prev] @ self.markov_w2.t()

    def draft_tokens(self, base: torch.Tensor, anchors: torch.Tensor, pick: PickFn,
                     num_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequential Markov loop over base logits [B, K, V]: prev = anchor; for i < num_tokens
        (default K): logits_i = U_i + markov_bias(prev), d_i = pick(i, logits_i), prev = d_i.
        Returns (drafts [B, n] int64, corrected logits [B, n, V] fp32)."""
        n = base.shape[1] if num_tokens is None else num_tokens
        if not 0 <= n <= base.shape[1]:
            raise ValueError(f"draft_tokens: num_tokens={n} outside [0, {base.shape[1]}]")
        prev = anchors.to(device=base.device, dtype=torch.int64)
        drafts, logits = [], []
        for i in range(n):
            logits_i = base[:, i] + self.markov_bias(prev)
            prev = pick(i, logits_i).to(torch.int64)
            drafts.append(prev)
            logits.append(logits_i)
        if not drafts:
            return base.new_zeros(base.shape[0], 0, dtype=torch.int64), base.new_zeros(base.shape[0], 0, base.shape[2])
        return torch.stack(drafts, dim=1), torch.stack(logits, dim=1)
