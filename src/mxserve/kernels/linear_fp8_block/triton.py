"""Launchers of the block-scaled FP8 linear Triton kernels: validate, pick launch parameters, launch.

Paths (the kernel files say why the arithmetic is ordered the way it is):
- weight-only: float x (fp32/bf16/fp16) against FP8 codes widened to fp16 in registers; x is
  scaled per (row, 128 channels) by a power of two into fp16 range inside the kernel (exact for
  bf16 x; fp32 x is split hi + lo: two dots, ~22 bits).
- W8A8 (`quantize_input`): x quantized per token per 128 channels to e4m3fn codes with
  power-of-two scales (`quantize_activation_fp8_block`, equal to the faithful fake quantization);
  the dot runs on FP8 tensor cores (sm_89+), else both sides widen to fp16 (exact products).
  Decode launches quantize x inside the linear's programs (`DecodeOptions.fused_act_quant`, on by
  default: one launch instead of two, the same codes, scales and output bits — the kernel
  docstring's X_MODE 4); `fused_act_quant=False` is the off switch (the `act_quant` launch first).
- output dtype (`out_dtype`, fp32 by default): bf16/fp16 results are rounded (to nearest even) by
  the launch's final store, the same bits as the fp32 result followed by `.to(out_dtype)` and one
  cast launch fewer. The opt-in GEMV and fast-prefill tiles cast after their launch instead.
- launch shapes (`tile`): "decode" = 16-token tile, BLOCK_N x (KB_PER_GROUP·128) weight slab per
  program on a fixed split-K grid (one group per program, also when the layer has one group);
  "prefill" = tiled GEMM; "auto" = decode up to `decode_max_m(n, k)` rows: 64 for layers of at most
  2^18 weights (cdiv(M, 16) row tiles in one launch), 16 for larger ones; MXSERVE_LINEAR_DECODE_MAX_M
  sets it for every layer. Same arithmetic in both, so rows are batch-invariant.
  "gemv" = the CUDA-core FMA GEMV (`_gemv_kernel.py`) for M <= 4: faster at M = 1..4 where the
  MMA's 16-wide token tile is mostly padding, NOT bit-identical to the MMA path (opt-in).
  "prefill_fast" = a plain pipelined Hopper GEMM for prefill (`_prefill_fast_kernel.py`; opt-in,
  bf16 x or W8A8 only): a row's bits do not depend on M within this tile (one config per layer
  shape, no split-K), but they differ from the decode/default tiles' (another summation order:
  weight-only chains one fp32 accumulator over K with the block scale folded into the widened
  weight; W8A8 promotes per 128-K block like the default). So a layer that runs decode on the
  default tile and prefill on this one is NOT batch-invariant across the switch.
- split-K partials (`split_sum`): "fused" = one launch, the tile's last program adds the partials
  in split order (arrival counters; the kernel docstring says why it is correct); "two_launch" =
  partials, then `_sum_groups_kernel`; "auto" = fused for decode launches, two launches for the
  few-tile GEMM split (`set_split_sum` changes what "auto" means, process-wide; session 7 tried
  "auto" = fused up to 64 rows: the interpreter gives the same bits, but its GPU test did not
  finish in its 60 s budget on the H200 and the 64-row step was not faster, so it was reverted).
  Both add the same
  partials in the same order, so the bits are equal (tested). The counters are a persistent int32
  buffer per device, 0 between launches (the kernel resets them), allocated on the first call
  outside CUDA-graph capture (a warm-up); a capture that would need a larger buffer runs two
  launches instead of allocating inside the graph.
- prepared activations (experiment, off the default path): `prepare_activation_fp16` runs the
  weight-only kernel's per-(row, 128-block) activation scaling as its own launch, and
  `launch_linear_fp8_block(x_hi, w, x_inv=...)` feeds the result to the MMA like W8A8's codes;
  the same bits as the in-kernel preparation. It tells whether the decode's gap to W8A8 is the
  per-block preparation or the weight widening (benchmarks/kernels.py --prepared-x).
- FNUZ (e4m3fnuz) weights: widened through their 256-entry value table (exact). `to_ocp_weight`
  converts once at load to use the native conversion and FP8 tensor cores instead.
- Under TRITON_INTERPRET=1 (CPU tests) each block's dot is an fp32 product-and-sum: the
  interpreter's fp16/bf16 dot is wrong (seen with triton 3.9), and numpy's fp32 matmul sums in an
  order that changes with the tile shape; the product-sum tests the same indexing, masking,
  activation scaling, scale folding and group order, bit-reproducibly across M.
- decode options (`DecodeOptions`, `set_decode_options`; issue 9): choices that leave every bit
  as it is, so they can change per process without touching batch invariance: mask-free tile
  loads where the shapes have no partial tile or block (`even`, on by default: 299 → 277 K-loop
  instructions per 2 KB of weights per warp, Triton 3.6 for sm_90); programmatic dependent launch
  with an L2 prefetch of the first weight blocks before the wait on the previous kernel (`pdl`);
  the activation preparation as its own launch (`prep_x`: 32 instead of 40 conversions per 2 KB);
  a fixed weight-only config (`wo_config`). The last three follow a rule by layer size measured on
  the H200 (`LARGE_DECODE_WEIGHTS`) unless set; `one_group="in_program"` is the pre-issue-9 code
  for one-group layers, for same-run comparisons.
- On a GPU the decode and prefill launch parameters are autotuned over small config lists keyed
  on (N, K, mode) (and an M bucket for prefill) — never on the exact M. Configs only change tile
  sizes, warps and stages, not KB_PER_GROUP, so they do not change a row's bits (tested on the GPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch
import triton

from mxserve.formats import E4M3FN, QuantizedWeight, decode_table, fp8_fnuz_to_ocp
from mxserve.kernels import side_streams
from mxserve.kernels.act_quant import fake_quant_fp8, quantize_fp8_block
from mxserve.kernels.linear_fp8_block._gemv_kernel import _gemv_fma_kernel
from mxserve.kernels.linear_fp8_block._linear_fp8_block_kernel import (
    _blockdot_kernel,
    _prep_x_kernel,
    _sum_groups_kernel,
)
from mxserve.kernels.linear_fp8_block._prefill_fast_kernel import _prefill_fast_kernel
from mxserve.kernels.linear_fp8_block.reference import (
    BLOCK_K,
    check_fp8_block_weight,
)
from mxserve.kernels.triton_switch import interpreting

DECODE_MAX_M = 16  # rows up to which the decode launch (16-token tile, split-K grid) runs on large layers
# the env switch that sets the bound for every layer (`decode_max_m`): up to 64 rows as cdiv(M, 16) row
# tiles of the decode launch, one launch per linear instead of act_quant + GEMM + `_sum_groups_kernel`
DECODE_MAX_M_ENV = "MXSERVE_LINEAR_DECODE_MAX_M"
DECODE_MAX_M_LIMIT = 64
SMALL_LAYER_WEIGHTS = 1 << 18  # layers up to this many weights take the decode launch up to ...
SMALL_LAYER_DECODE_MAX_M = 64  # ... this many rows when MXSERVE_LINEAR_DECODE_MAX_M is unset (`decode_max_m`)
XQ_FEW_ROWS_MAX = 2  # fused W8A8 decode: up to this many rows, only the live rows are quantized
GEMV_MAX_M = 4  # rows the opt-in FMA GEMV takes
_FEW_PROGRAMS = 264  # below this many output tiles (2 per H200 SM) the GEMM launch also splits K
_GROUP_TARGET_PROGRAMS = 512  # decode programs the K grouping aims at (~4 per H200 SM)
_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TILES = ("auto", "decode", "prefill", "gemv", "prefill_fast")
SPLIT_SUMS = ("auto", "fused", "two_launch")
_MIN_COUNTERS = 1 << 16  # first counter buffer per device (256 KB): every decode layer of the release fits
_MIN_BLOCK_N = 16  # the counters are sized for the smallest tile any config may use
_luts: dict[tuple[str, str], torch.Tensor] = {}
_split_sum = {"default": "auto"}  # what `split_sum="auto"` resolves through; see `set_split_sum`
# per (device, side lane): two launches that may run at once (`kernels/side_streams.py`) never share one
_counters: dict[tuple[torch.device, str], torch.Tensor] = {}
_outgrown_counters: list[torch.Tensor] = []  # never freed: a captured CUDA graph may still point at them
_SPLIT_ROTATE = {"value": 0}  # tests only: which split arrives last under the interpreter

# (BLOCK_N, num_warps, num_stages) tried for the decode launch; (BLOCK_N, BLOCK_M, warps, stages)
# for prefill. BLOCK_N >= 64 with 4 or 8 warps keeps every config on the same (wgmma) instruction.
# Short lists on purpose: every config is compiled per mode (first GPU run: a 6-config list with
# shape-dependent constexprs spent minutes compiling before timing anything).
DECODE_CONFIGS = [(64, 4, 4), (128, 4, 4), (64, 4, 6)]
PREFILL_CONFIGS = [(128, 128, 8, 3), (128, 256, 8, 3), (128, 64, 4, 4)]
GEMV_CONFIGS = [(64, 4), (128, 4)]  # (BLOCK_N, warps)
# (BLOCK_N, BLOCK_M, BLOCK_K, warps, stages) of the opt-in fast prefill tile, per mode. Two each
# (every config is one compile). Triton 3.9 for sm_90 (tests/kernels/linear_fp8_block/
# sm90_compile_prefill_fast.py), no spills anywhere:
# - W8A8 128x128x128 / 8 warps / 4 stages: 185 registers, 128 KB shared, 1 program per SM;
#   128x64 / 4 warps: 189 registers, 96 KB, 2 per SM (one program's scale FFMAs overlap the
#   other's MMA; and wq_a||wkv has 192 tiles of 128x128 on 132 SMs at M = 2048);
# - weight-only 128x128x128 / 8 warps / 3 stages: 187 registers, 144 KB, 1 per SM, one wgmma
#   group in flight while the next K step widens (356 K-loop instructions per warp per step);
#   128x128x64 / 8 warps / 4 stages: 121 registers, 96 KB, 2 per SM (225 per 64-K step).
#   (128 x 256 tokens: 250 registers, and every wgmma waited for: dropped.)
PREFILL_FAST_CONFIGS = {
    "w8a8": [(128, 128, 128, 8, 4), (128, 64, 128, 4, 4)],
    "wo": [(128, 128, 128, 8, 3), (128, 128, 64, 8, 4)],
}
_PREFILL_FAST_GROUP_M = 16  # 16 x 128 tokens: at M = 2048 a wave walks all m-tiles of a few n-tiles
# the interpreter caps tensors at 2^20 elements and has no autotuning: one fixed config per launch
_INTERP = {"decode": (64, 4, 1), "prefill": (64, 32, 4, 1), "gemv": (64, 4), "prefill_fast": (64, 32, 128, 4, 1)}
_FORCED: dict[str, tuple | None] = {"decode": None, "prefill": None, "gemv": None,  # benchmarks' sweeps
                                    "prefill_fast": None}


# The weight-only decode plan by layer size, measured on the H200 (session 5 call 1,
# benchmarks/gpu_s5_linear.sh; every variant bit-identical to the autotuned launch at 7 Flash shapes
# x M 1/8/16): layers of >= 32 Mi weights (wq_b, wo_b, the head) stream fastest with the activations
# prepared in their own launch on 64-feature tiles (head 189.5 -> 143.7 us at M = 1, wo_b 18.6 ->
# 15.4, wq_b 15.8 -> 14.0); smaller layers with a programmatic dependent launch on 128-feature tiles
# of 8 warps (wq_a||wkv 8.8 -> 7.0, shared w13 11.3 -> 10.3, shared w2 7.9 -> 6.9, indexer wq_b
# 7.9 -> 6.8). W8A8 decode keeps its autotuned launch (not part of that comparison).
# Session 13 (calls 2 and 3: benchmarks/linear_grid_ab.py, and linear_tiled_ab.py at caabd3c; same bits): the small
# layers' dependent launch on 64-feature tiles of 4 warps and 2 stages instead — a program of these
# layers walks 2-4 K blocks, so deeper pipelines mostly cost registers and occupancy. At M = 8 / 16 it
# was faster on all four in both calls (wq_a||wkv 9.0 -> 7.2-8.1 / 11.4 -> 8.3-9.4 us, shared w13 11.5 ->
# 10.2-11.2 / 13.6 -> 11.7-12.4, shared w2 8.2 -> 7.1-7.7 / 9.5-10.0 -> 8.3-9.0, indexer wq_b 7.6 ->
# 6.7-7.3 / 8.5-8.8 -> 7.7-8.3); at M = 1 between 4% slower and 13% faster per layer and call.
LARGE_DECODE_WEIGHTS = 1 << 25
LARGE_DECODE_CONFIG = (64, 4, 4)  # (BLOCK_N, warps, stages)
SMALL_DECODE_CONFIG = (64, 4, 2)


@dataclass(frozen=True)
class DecodeOptions:
    """How `launch_linear_fp8_block` runs; every field leaves a row's bits unchanged (GPU-checked by
    benchmarks/gpu_s5_linear.sh, interpreter-checked by tests/kernels/linear_fp8_block/test_decode_options.py).
    `pdl`, `prep_x`, `wo_config` left at None follow the shape rule above when `shape_rule` is on
    (the default) and are off / autotuned when it is off; a value given is used as given."""

    even: bool = True  # mask-free loads when N % 128 == 0, K % 128 == 0 and the groups tile K (every launch)
    pdl: bool | None = None  # decode: programmatic dependent launch + L2 prefetch of the first weight blocks
    prep_x: bool | None = None  # decode, weight-only bf16/fp16 x: `prepare_activation_fp16` launch + X_MODE 3
    one_group: str = "split"  # decode of a one-group layer: "split" (issue 9 call 3) or "in_program" (before)
    wo_config: tuple[int, int, int] | None = None  # decode weight-only (BLOCK_N, warps, stages)
    shape_rule: bool = True  # unset fields by the measured rule (LARGE_DECODE_WEIGHTS)
    # decode W8A8: the programs quantize their own slices of x (X_MODE 4, one launch) instead of
    # reading codes + scales from an `act_quant` launch (X_MODE 1); same bits (tested). Off switch,
    # and the most rows it takes (above: the act_quant launch; for an A/B by batch size)
    fused_act_quant: bool = True
    fused_act_quant_max_m: int | None = None  # None: every decode launch (up to `decode_max_m(n, k)` rows)
    # the shape rule's W8A8 half (H200, session 6 call 3, benchmarks/gpu_s6_w8a8.sh, L2-cold graph replay at
    # M = 1): the fused launch wins on the small layers (wkv 8.8 -> 6.3 us, shared w2 9.6 -> 7.7, indexer
    # wq_b 9.4 -> 7.8) but loses on the >= 32 Mi-weight ones, whose programs each quantize the whole x
    # (wq_b 13.2 -> 15.0, wo_b 16.0 -> 18.4, head 152 -> 159 against the act_quant launch + the same
    # bf16 epilogue). None = by that rule under `shape_rule`; a bool = for every layer size.
    fused_act_quant_large: bool | None = None

    def __post_init__(self) -> None:
        if self.one_group not in ("split", "in_program"):
            raise ValueError(f"DecodeOptions: {self.one_group=} must be 'split' or 'in_program'")
        if self.fused_act_quant_max_m is not None and not 1 <= self.fused_act_quant_max_m <= DECODE_MAX_M_LIMIT:
            raise ValueError(f"DecodeOptions: {self.fused_act_quant_max_m=} must be None or in "
                             f"1..{DECODE_MAX_M_LIMIT} (the decode launch's rows)")
        if self.wo_config is not None and (len(self.wo_config) != 3 or 128 % self.wo_config[0]):
            raise ValueError(f"DecodeOptions: {self.wo_config=} must be (BLOCK_N dividing 128, warps, stages)")

    def weight_only_plan(self, n: int, k: int, groups: int) -> tuple[bool, bool, tuple[int, int, int] | None]:
        """(pdl, prep_x, config or None = autotune) of a weight-only decode launch of an [n, k]
        weight (grouped launches take no rule: wo_a was not part of the measurement)."""
        if self.shape_rule and groups == 1:
            large = n * k >= LARGE_DECODE_WEIGHTS
            rule = (False, True, LARGE_DECODE_CONFIG) if large else (True, False, SMALL_DECODE_CONFIG)
        else:
            rule = (False, False, None)
        return (rule[0] if self.pdl is None else self.pdl, rule[1] if self.prep_x is None else self.prep_x,
                rule[2] if self.wo_config is None else self.wo_config)


_decode_options = {"value": DecodeOptions()}


def set_decode_options(options: DecodeOptions | None = None, **changes) -> DecodeOptions:
    """Process-wide decode options (benchmarks, bring-up): `options` whole, or `changes` applied to
    the current ones. Returns the previous options (restore them with `set_decode_options(prev)`)."""
    prev = _decode_options["value"]
    _decode_options["value"] = replace(options if options is not None else prev, **changes)
    return prev


def decode_max_m(n: int, k: int) -> int:
    """Rows up to which `tile="auto"` takes the decode launch for an [n, k] weight. Above 16 rows the
    decode launch runs cdiv(M, 16) row tiles with its fused split-sum and (W8A8) fused activation
    quantization: ONE launch where the prefill tile takes act_quant + the GEMM + `_sum_groups_kernel`.
    Same bits either way (the tiles share the arithmetic; tests/kernels/linear_fp8_block/
    test_decode_max_m.py), so the choice may follow M and the shape freely.
    Unset MXSERVE_LINEAR_DECODE_MAX_M: SMALL_LAYER_DECODE_MAX_M rows for layers of at most
    SMALL_LAYER_WEIGHTS weights, DECODE_MAX_M for the rest. H200, session 8 call 2 (gpu_s8_linear64.sh,
    CUDA-graph replay): the default model's layers (<= 256 Ki weights) at 17..64 rows 0.43-0.70x the
    time of the three launches (step device time 1.78 -> 1.59 ms at 64 requests); its 1 Mi-weight head
    0.82x at 17 rows but 1.19x at 33 and 64; Flash's 6 Mi and 16 Mi layers 1.0-2.0x (each row tile
    reads the weights again). A value (DECODE_MAX_M .. DECODE_MAX_M_LIMIT) applies to every layer: 16
    is the off switch. Read per call, so a benchmark can A/B it in one process (outside capture)."""
    raw = os.environ.get(DECODE_MAX_M_ENV)
    if raw is None or raw == "":
        return SMALL_LAYER_DECODE_MAX_M if n * k <= SMALL_LAYER_WEIGHTS else DECODE_MAX_M
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not DECODE_MAX_M <= value <= DECODE_MAX_M_LIMIT:
        raise ValueError(f"linear_fp8_block: {DECODE_MAX_M_ENV}={raw!r} must be an integer in "
                         f"{DECODE_MAX_M}..{DECODE_MAX_M_LIMIT}")
    return value


def has_fp8_tensor_cores(device: torch.device) -> bool:
    """NVIDIA sm_89+ (Ada, Hopper, Blackwell) multiply e4m3 x e4m3 natively."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def kb_per_group(n: int, k: int) -> int:
    """128-K blocks per summation group: a function of the layer shape only (never of M or the
    device), so every launch of a layer adds the same partial sums in the same order. Enough
    groups that the decode grid (64-feature tiles x groups) reaches ~512 programs."""
    num_kb = triton.cdiv(k, BLOCK_K)
    n_tiles = triton.cdiv(n, 64)
    groups = max(1, min(num_kb, _GROUP_TARGET_PROGRAMS // n_tiles))
    return triton.cdiv(num_kb, groups)


def force_config(tile: str, config: tuple | None) -> None:
    """Pin one launch config (bypassing autotuning) for `tile`; None restores autotuning (benchmarks)."""
    if tile not in _FORCED:
        raise ValueError(f"force_config: {tile=} must be one of {sorted(_FORCED)}")
    _FORCED[tile] = config


def set_split_sum(mode: str) -> None:
    """Process-wide choice behind `split_sum="auto"`: "auto" (fused at decode), "fused" (every
    split launch) or "two_launch" (the off switch for the fused path). Benchmarks and bring-up."""
    if mode not in SPLIT_SUMS:
        raise ValueError(f"set_split_sum: {mode=} must be one of {SPLIT_SUMS}")
    _split_sum["default"] = mode


def split_counters(device: torch.device, num: int) -> torch.Tensor | None:
    """The fused split-K arrival counters (int32, all 0 between launches) of the current stream's
    lane on `device` (`side_streams.current_lane`: launches on different lanes may run at once, so
    each lane has its own), at least `num`.

    Grown (never shrunk, never freed: a captured graph keeps its pointer) outside graph capture;
    None while capturing with a buffer too small — torch.zeros inside a capture only records the
    memset, so eager calls before the first replay would read garbage. The caller then runs two
    launches, which give the same bits."""
    key = (device, side_streams.current_lane(device))
    buf = _counters.get(key)
    if buf is not None and buf.numel() >= num:
        return buf
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    size = max(num, _MIN_COUNTERS, 2 * buf.numel() if buf is not None else 0)
    if buf is not None:
        _outgrown_counters.append(buf)
    _counters[key] = torch.zeros(size, dtype=torch.int32, device=device)  # stream-ordered memset, no host sync
    return _counters[key]


def to_ocp_weight(weight: QuantizedWeight) -> QuantizedWeight:
    """An e4m3fnuz weight as the equal-valued e4m3fn one (codes kept, scale bytes - 1); raises
    ValueError where no exact conversion exists (FNUZ ±240 codes, scale byte 0). Call at load."""
    check_fp8_block_weight(weight)
    if weight.fmt == E4M3FN:
        return weight
    codes, scales = fp8_fnuz_to_ocp(weight.codes, weight.scales)
    return QuantizedWeight.from_fp8_block(codes, scales, weight.block, E4M3FN)


def _lut(weight: QuantizedWeight) -> torch.Tensor:
    key = (weight.fmt.name, str(weight.device))
    if key not in _luts:
        _luts[key] = decode_table(weight.fmt, weight.device)
    return _luts[key]


def linear_fp8_block_triton(
    x: torch.Tensor, weight: QuantizedWeight, *, quantize_input: bool = False, tile: str = "auto",
    weight_decode: str = "auto", split_sum: str = "auto", out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """x [..., K] · W[N, K]ᵀ → [..., N] in `out_dtype` (None: fp32), see `linear_fp8_block_ref`.

    `tile`, `split_sum`: see the module docstring. `weight_decode`: "auto" (native e4m3fn
    conversion for e4m3fn, value table otherwise) or "lut". `out_dtype` bf16/fp16: the fp32
    result rounded to nearest even (== `.to(out_dtype)`), by the launch itself where it can."""
    weight = check_fp8_block_weight(weight)
    n, k = weight.shape
    out_dtype = _check_out_dtype(out_dtype)
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"linear_fp8_block: x must be one of {_X_DTYPES}, got {x.dtype=}")
    if x.shape[-1] != k:
        raise ValueError(f"linear_fp8_block: {x.shape=} does not match weight in_features {k} ({weight.shape=})")
    if tile not in TILES:
        raise ValueError(f"linear_fp8_block: {tile=} must be one of {TILES}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()  # the kernels read 128 contiguous channels per block
    if tile == "gemv":
        if quantize_input:
            x2 = fake_quant_fp8(x2.float(), block=BLOCK_K)  # exact values; products exact in fp32
        out = launch_gemv_fp8_block(x2, weight, weight_decode=weight_decode).to(out_dtype)  # a cast launch
    elif tile == "prefill_fast":
        if weight_decode != "auto" or weight.fmt != E4M3FN:
            raise ValueError(f"linear_fp8_block: tile='prefill_fast' takes e4m3fn weights (to_ocp_weight) and "
                             f"weight_decode='auto', got {weight.fmt.name=} {weight_decode=}")
        if quantize_input and x2.shape[0]:
            x_codes, x_scales = quantize_fp8_block(x2)
            out = launch_prefill_fast(x_codes, weight, x_scales=x_scales)
        else:
            out = launch_prefill_fast(x2, weight)
        out = out.to(out_dtype)  # a cast launch (this tile has no output-dtype epilogue)
    elif quantize_input and x2.shape[0] and _fuses_act_quant(x2, weight, tile):
        # decode W8A8, one launch: the programs quantize their own slices of x (same codes and scales)
        out = launch_linear_fp8_block(x2, weight, quantize_x=True, tile=tile, weight_decode=weight_decode,
                                      split_sum=split_sum, out_dtype=out_dtype)
    elif quantize_input and x2.shape[0]:
        x_codes, x_scales = quantize_fp8_block(x2)  # fused kernel, bit-identical to the twin
        out = launch_linear_fp8_block(x_codes, weight, x_scales=x_scales, tile=tile, weight_decode=weight_decode,
                                      split_sum=split_sum, out_dtype=out_dtype)
    elif _uses_prepared_x(x2, weight, tile, weight_decode):
        x_hi, x_inv = prepare_activation_fp16(x2)  # the in-kernel preparation's bits, once per call
        out = launch_linear_fp8_block(x_hi, weight, tile=tile, weight_decode=weight_decode, split_sum=split_sum,
                                      x_inv=x_inv, out_dtype=out_dtype)
    else:
        out = launch_linear_fp8_block(x2, weight, tile=tile, weight_decode=weight_decode, split_sum=split_sum,
                                      out_dtype=out_dtype)
    return out.reshape(*lead, n)


OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_out_dtype(out_dtype: torch.dtype | None) -> torch.dtype:
    """None → fp32; else one of OUT_DTYPES (ValueError naming the value)."""
    if out_dtype is None:
        return torch.float32
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"linear_fp8_block: out_dtype must be None or one of {OUT_DTYPES}, got {out_dtype=}")
    return out_dtype


def _fuses_act_quant(x2: torch.Tensor, weight: QuantizedWeight, tile: str) -> bool:
    """`DecodeOptions.fused_act_quant`: a decode launch (the prefill tile would re-quantize x once
    per output tile of 128 features, and its act_quant launch is a small part of a GEMM), of a
    small layer unless `fused_act_quant_large` says otherwise (the measured rule above)."""
    opts = _decode_options["value"]
    m = x2.shape[0]
    is_decode = tile == "decode" or (tile == "auto" and m <= decode_max_m(*weight.shape))
    large = weight.shape[0] * weight.shape[1] >= LARGE_DECODE_WEIGHTS
    fuse_large = opts.fused_act_quant_large if opts.fused_act_quant_large is not None else not opts.shape_rule
    within = opts.fused_act_quant_max_m is None or m <= opts.fused_act_quant_max_m
    return is_decode and opts.fused_act_quant and within and (fuse_large or not large)


def _uses_prepared_x(x2: torch.Tensor, weight: QuantizedWeight, tile: str, weight_decode: str) -> bool:
    """`DecodeOptions.prep_x`: a decode launch of bf16/fp16 x on the e4m3fn fast path."""
    m = x2.shape[0]
    is_decode = tile == "decode" or (tile == "auto" and m <= decode_max_m(*weight.shape))
    _, prep_x, _ = _decode_options["value"].weight_only_plan(*weight.shape, groups=1)
    return (prep_x and is_decode and m > 0 and x2.dtype in (torch.bfloat16, torch.float16)
            and weight.fmt == E4M3FN and weight_decode == "auto")


def grouped_linear_fp8_block_triton(x: torch.Tensor, weight: QuantizedWeight, *, tile: str = "auto",
                                    split_sum: str = "auto", out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Block-diagonal grouped projection (wo_a): x [T, G, K] float, weight [G·R, K] FP8_BLOCK whose
    rows g·R .. (g+1)·R − 1 form group g → fp32 [T, G, R]. One launch for all groups (grid axis 2);
    weight-only (the release runs wo_a without activation quantization). R must be a multiple of 128
    (each group starts on a scale-block row). `out_dtype` as in `linear_fp8_block_triton`."""
    weight = check_fp8_block_weight(weight)
    if x.dim() != 3 or x.dtype not in _X_DTYPES:
        raise ValueError(f"grouped_linear_fp8_block: x must be [T, G, K] in {_X_DTYPES}, got {tuple(x.shape)=} {x.dtype=}")
    t, groups, k = x.shape
    rows, wk = weight.shape
    if wk != k or groups == 0 or rows % groups or (rows // groups) % BLOCK_K:
        raise ValueError(f"grouped_linear_fp8_block: {tuple(x.shape)=} does not fit weight {(rows, wk)} in {groups} "
                         f"groups of a multiple of {BLOCK_K} rows")
    if x.stride(2) != 1:
        x = x.contiguous()
    out = launch_linear_fp8_block(x, weight, tile=tile, groups=groups, split_sum=split_sum, out_dtype=out_dtype)
    return out.view(t, groups, rows // groups)


def _check_launch(x_op: torch.Tensor, weight: QuantizedWeight, x_scales: torch.Tensor | None, tile: str,
                  weight_decode: str, split_sum: str = "auto") -> None:
    k = weight.shape[1]
    if x_op.device != weight.device:
        raise ValueError(f"linear_fp8_block: {x_op.device=} but {weight.device=}")
    if weight.codes.stride() != (k, 1):
        raise ValueError(f"linear_fp8_block: weight codes must be row-major contiguous, got {weight.codes.stride()=}")
    if weight.scales.stride(-1) != 1:
        raise ValueError(f"linear_fp8_block: scale rows must be contiguous, got {weight.scales.stride()=}")
    if tile not in TILES:
        raise ValueError(f"linear_fp8_block: {tile=} must be one of {TILES}")
    if split_sum not in SPLIT_SUMS:
        raise ValueError(f"linear_fp8_block: {split_sum=} must be one of {SPLIT_SUMS}")
    if weight_decode not in ("auto", "lut"):
        raise ValueError(f"linear_fp8_block: {weight_decode=} must be 'auto' or 'lut'")
    if x_op.device.type != "cuda" and not interpreting():
        raise ValueError(f"linear_fp8_block triton backend needs a CUDA tensor or TRITON_INTERPRET=1, got {x_op.device=}")
    if x_op.shape[-1] != k or x_op.stride(-1) != 1:
        raise ValueError(f"linear_fp8_block: x must be [..., {k}] with unit channel stride, got {x_op.shape=} "
                         f"{x_op.stride()=}")
    if x_scales is not None and (
        x_op.dtype != torch.uint8 or x_scales.dtype != torch.float32 or x_op.dim() != 2
        or tuple(x_scales.shape) != (x_op.shape[0], triton.cdiv(k, BLOCK_K)) or x_scales.stride(1) != 1
    ):
        raise ValueError(
            f"linear_fp8_block: W8A8 needs uint8 codes [M, K] and fp32 scales [M, ceil(K/128)] with unit stride, got "
            f"{x_op.dtype=} {x_scales.dtype=} {tuple(x_scales.shape)=} {x_scales.stride()=}"
        )
    if x_scales is None and x_op.dtype not in _X_DTYPES:
        raise ValueError(f"linear_fp8_block: x must be one of {_X_DTYPES}, got {x_op.dtype=}")


def prepare_activation_fp16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16/fp16 x [M, K] → (fp16 [M, K] = x·2^k, fp32 [M, ceil(K/128)] = 2^-k), k per row and
    128-channel block putting the block's largest magnitude in [2^14, 2^15): exactly the weight-only
    kernel's in-kernel preparation (the same JIT helper), as its own launch. Experiment (issue 9)."""
    if x.dim() != 2 or x.dtype not in (torch.bfloat16, torch.float16) or x.stride(1) != 1:
        raise ValueError(f"prepare_activation_fp16: x must be bf16/fp16 [M, K] with unit channel stride, got "
                         f"{tuple(x.shape)=} {x.dtype=} {x.stride()=}")
    m, k = x.shape
    num_kb = triton.cdiv(k, BLOCK_K)
    hi = torch.empty((m, k), dtype=torch.float16, device=x.device)
    inv = torch.empty((m, num_kb), dtype=torch.float32, device=x.device)
    if m and k:
        _prep_x_kernel[(triton.cdiv(m, 16), num_kb)](x, hi, inv, m, k, x.stride(0), hi.stride(0), inv.stride(0),
                                                     BLOCK_M=16)
    return hi, inv


def launch_linear_fp8_block(
    x_op: torch.Tensor, weight: QuantizedWeight, *, x_scales: torch.Tensor | None = None, tile: str = "auto",
    weight_decode: str = "auto", groups: int = 1, split_sum: str = "auto", x_inv: torch.Tensor | None = None,
    quantize_x: bool = False, out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The tensor-core kernel on float x [M, K] (or [M, G, K] with `groups`), or (W8A8) e4m3fn
    codes x_op uint8 [M, K] with `x_scales` fp32 [M, ceil(K/128)], or (prepared, see
    `prepare_activation_fp16`) fp16 x_op [M, K] with `x_inv` fp32 [M, ceil(K/128)], or (W8A8,
    `quantize_x`) float x [M, K] quantized inside the programs. → [M, N] in `out_dtype` (None: fp32).
    Public so benchmarks can time the GEMM apart from the activation quantization/preparation."""
    weight = check_fp8_block_weight(weight)
    out_dtype = _check_out_dtype(out_dtype)
    if quantize_x and (x_scales is not None or x_inv is not None or groups != 1 or x_op.dtype not in _X_DTYPES):
        raise ValueError(f"linear_fp8_block: quantize_x takes float x [M, K] alone (no x_scales / x_inv, one group); "
                         f"got {x_op.dtype=} {x_scales is None=} {x_inv is None=} {groups=}")
    if x_inv is not None:
        if x_scales is not None or groups != 1 or x_op.dtype != torch.float16:
            raise ValueError(f"linear_fp8_block: x_inv takes fp16 x from prepare_activation_fp16, no x_scales, one "
                             f"group; got {x_op.dtype=} {x_scales is None=} {groups=}")
        _check_launch(x_op, weight, None, tile, weight_decode, split_sum)
        if x_inv.dtype != torch.float32 or tuple(x_inv.shape) != (x_op.shape[0], triton.cdiv(weight.shape[1], BLOCK_K)):
            raise ValueError(f"linear_fp8_block: x_inv must be fp32 [M, ceil(K/128)], got {x_inv.dtype=} "
                             f"{tuple(x_inv.shape)=}")
    else:
        _check_launch(x_op, weight, x_scales, tile, weight_decode, split_sum)
    if tile == "gemv":
        raise ValueError("linear_fp8_block: tile='gemv' runs through launch_gemv_fp8_block")
    if tile == "prefill_fast":
        raise ValueError("linear_fp8_block: tile='prefill_fast' runs through launch_prefill_fast")
    rows, k = weight.shape
    n = rows // groups  # output features per group
    m = x_op.shape[0]
    out = torch.empty((m, rows), dtype=out_dtype, device=x_op.device)
    if m == 0 or rows == 0:
        return out

    # --- launch parameters ---------------------------------------------------------------------
    x_fp8 = x_scales is not None or quantize_x  # e4m3fn activation codes (loaded, or made in the program)
    x_mode = 4 if quantize_x else (1 if x_scales is not None else (3 if x_inv is not None else 0))
    use_lut = weight_decode == "lut" or weight.fmt != E4M3FN
    if interpreting():
        dot = 0  # fp32 product-sum: the interpreter's fp16/bf16 dot is wrong
    elif x_fp8 and not use_lut and has_fp8_tensor_cores(x_op.device):
        dot = 2  # e4m3 x e4m3 on FP8 tensor cores
    else:
        dot = 1  # widen to fp16 (exact for FP8 codes and the scaled activations)
    consts = dict(X_MODE=x_mode, X_PIECES=1 if (x_fp8 or x_op.dtype != torch.float32) else 2,
                  DOT=dot, W_KIND=1 if use_lut else 0)
    group = kb_per_group(n, k)
    num_groups = triton.cdiv(triton.cdiv(k, BLOCK_K), group)
    is_decode = tile == "decode" or (tile == "auto" and m <= decode_max_m(n, k))
    # spread K over programs (same groups, so the same bits) at decode and wherever the output
    # tiles are too few to fill the GPU (nominal 128x128 tiles; e.g. wq_a at M = 64 has 12). Decode
    # takes the one-group-per-program code even for a one-group layer (wq_b, head): the same
    # additions (a group partial is never -0.0, so 0 + g0 == g0), and 115 registers instead of 141
    # (Triton 3.9 for sm_90, tests/kernels/linear_fp8_block/sm90_compile.py): 4 programs per SM
    # instead of 3, so wq_b's 512 programs fit in one wave instead of 1.3
    opts = _decode_options["value"]
    few_tiles = groups * triton.cdiv(n, 128) * triton.cdiv(m, 128) < _FEW_PROGRAMS
    split = (is_decode and (num_groups > 1 or opts.one_group == "split")) or (num_groups > 1 and few_tiles)
    num_splits = num_groups if split else 1
    mode = _split_sum["default"] if split_sum == "auto" else split_sum
    counters = None
    if num_splits > 1 and (mode == "fused" or (mode == "auto" and is_decode)):
        counters = split_counters(out.device, groups * triton.cdiv(m, 16) * triton.cdiv(n, _MIN_BLOCK_N))
    # --------------------------------------------------------------------------------------------

    if x_inv is not None:
        x_scales = x_inv  # X_MODE 3 reads its 2^-k where W8A8 reads its scales
    if x_scales is None:
        x_scales = out  # unused (X_MODE 0): any pointer will do
    x3 = x_op if x_op.dim() == 3 else x_op.unsqueeze(1)
    xs3 = x_scales.unsqueeze(1) if x_scales.dim() == 2 else x_scales
    lut = _lut(weight) if use_lut else weight.scales  # unused pointer when not use_lut
    dest = torch.empty((num_splits, m, rows), dtype=torch.float32, device=x_op.device) if num_splits > 1 else out
    args = (x3, xs3, weight.codes, weight.scales, lut, dest, m, n, k,
            x3.stride(0), x3.stride(1), xs3.stride(0), xs3.stride(1) if groups > 1 else 0, weight.codes.stride(0),
            weight.scales.stride(0), dest.stride(0) if num_splits > 1 else 0, rows, num_splits,
            0 if is_decode else _m_bucket(m))
    # EVEN: no partial tile (every BLOCK_N divides 128) and no partial or missing K block in any group
    even = opts.even and n % 128 == 0 and k % BLOCK_K == 0 and triton.cdiv(k, BLOCK_K) % group == 0
    meta = dict(KB_PER_GROUP=group, NUM_GROUPS=num_groups, SPLIT=split, FUSED_SUM=counters is not None, EVEN=even,
                **consts)
    if quantize_x and is_decode and m <= XQ_FEW_ROWS_MAX:
        # quantize only the live rows (kernel docstring, "few rows"): at M = 1 the fused K loop is 192
        # instead of 488 warp instructions per 64 x 128 block; at 4 and 8 rows the broadcast costs more
        # than it saves (453 and 733; Triton 3.9 for sm_90, sm90_compile.py), so those take the tile
        meta.update(XQ_ROWS=m)
    if counters is not None:
        meta.update(sum_ptr=out, cnt_ptr=counters, SPLIT_ROTATE=_SPLIT_ROTATE["value"])
    weight_only = x_mode in (0, 3) and not use_lut
    rule_pdl, _, rule_config = opts.weight_only_plan(n, k, groups)
    pdl = opts.pdl if opts.pdl is not None else (rule_pdl and weight_only)
    if is_decode and pdl and not interpreting():
        meta.update(PDL=True, launch_pdl=True)  # the kernel docstring ("Early start") says why it is safe
    z = groups * num_splits
    if is_decode:
        cfg = _INTERP["decode"] if interpreting() else _FORCED["decode"]
        if cfg is None and rule_config is not None and weight_only:
            cfg = rule_config
        if cfg is None:
            _decode_tuned()[lambda mt: (triton.cdiv(n, mt["BLOCK_N"]), triton.cdiv(m, 16), z)](*args, BLOCK_M=16, **meta)
        else:
            block_n, warps, stages = cfg
            _blockdot_kernel[(triton.cdiv(n, block_n), triton.cdiv(m, 16), z)](
                *args, BLOCK_M=16, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **meta)
    else:
        cfg = _INTERP["prefill"] if interpreting() else _FORCED["prefill"]
        if cfg is None:
            _prefill_tuned()[lambda mt: (triton.cdiv(n, mt["BLOCK_N"]), triton.cdiv(m, mt["BLOCK_M"]), z)](
                *args, **meta)
        else:
            block_n, block_m, warps, stages = cfg
            _blockdot_kernel[(triton.cdiv(n, block_n), triton.cdiv(m, block_m), z)](
                *args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages, **meta)
    if num_splits > 1 and counters is None:
        block = 1024
        _sum_groups_kernel[(triton.cdiv(m * rows, block),)](dest, out, m * rows, dest.stride(0), NUM_GROUPS=num_groups,
                                                            BLOCK=block)
    return out


def launch_prefill_fast(x_op: torch.Tensor, weight: QuantizedWeight, *, x_scales: torch.Tensor | None = None
                        ) -> torch.Tensor:
    """The opt-in fast prefill tile (module docstring): bf16 x [M, K] (weight-only), or (W8A8)
    e4m3fn codes x_op uint8 [M, K] with `x_scales` fp32 [M, ceil(K/128)] → fp32 [M, N].
    e4m3fn weights only. Public so benchmarks can time the GEMM apart from the quantization."""
    weight = check_fp8_block_weight(weight)
    _check_launch(x_op, weight, x_scales, "prefill_fast", "auto")
    if weight.fmt != E4M3FN:
        raise ValueError(f"linear_fp8_block: tile='prefill_fast' takes e4m3fn weights, got {weight.fmt.name=}")
    w8a8 = x_scales is not None
    if x_op.dim() != 2 or (not w8a8 and x_op.dtype != torch.bfloat16):
        raise ValueError(f"linear_fp8_block: tile='prefill_fast' takes bf16 x [M, K] weight-only (or W8A8 codes), "
                         f"got {x_op.dtype=} {tuple(x_op.shape)=}")
    n, k = weight.shape
    m = x_op.shape[0]
    out = torch.empty((m, n), dtype=torch.float32, device=x_op.device)
    if m == 0 or n == 0:
        return out

    # --- launch parameters ---------------------------------------------------------------------
    if interpreting():
        dot = 0  # fp32 product-sum: the interpreter's fp16/bf16 dot is wrong
    elif not w8a8 or has_fp8_tensor_cores(x_op.device):
        dot = 2  # FP8 (W8A8) or bf16 (weight-only) tensor cores
    else:
        dot = 1  # W8A8 codes widened to fp16 (exact) without FP8 tensor cores
    xs = x_scales if w8a8 else out  # unused pointer weight-only
    x_in = x_op.view(torch.float8_e4m3fn) if w8a8 else x_op  # typed pointers: no bitcast in the kernel
    args = (x_in, xs, weight.codes.view(torch.float8_e4m3fn), weight.scales, out, m, n, k,
            x_op.stride(0), xs.stride(0), weight.codes.stride(0), weight.scales.stride(0), out.stride(0))
    meta = dict(GROUP_M=_PREFILL_FAST_GROUP_M, W8A8=w8a8, DOT=dot)
    # --------------------------------------------------------------------------------------------

    cfg = _INTERP["prefill_fast"] if interpreting() else _FORCED["prefill_fast"]
    if cfg is None:
        _prefill_fast_tuned("w8a8" if w8a8 else "wo")[
            lambda mt: (triton.cdiv(m, mt["BLOCK_M"]) * triton.cdiv(n, mt["BLOCK_N"]),)](
            *args, EVEN_K=k % 128 == 0, **meta)
    else:
        block_n, block_m, block_k, warps, stages = cfg
        _prefill_fast_kernel[(triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)](
            *args, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0,
            num_warps=warps, num_stages=stages, **meta)
    return out


def launch_gemv_fp8_block(x: torch.Tensor, weight: QuantizedWeight, *, weight_decode: str = "auto") -> torch.Tensor:
    """The CUDA-core FMA GEMV (opt-in, M <= GEMV_MAX_M): float x [M, K] → fp32 [M, N]."""
    weight = check_fp8_block_weight(weight)
    _check_launch(x, weight, None, "gemv", weight_decode)
    n, k = weight.shape
    m = x.shape[0]
    if x.dim() != 2 or m > GEMV_MAX_M:
        raise ValueError(f"linear_fp8_block: the GEMV takes x [M <= {GEMV_MAX_M}, K], got {tuple(x.shape)=}")
    out = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m == 0 or n == 0:
        return out
    use_lut = weight_decode == "lut" or weight.fmt != E4M3FN
    group = kb_per_group(n, k)
    num_groups = triton.cdiv(triton.cdiv(k, BLOCK_K), group)
    dest = torch.empty((num_groups, m, n), dtype=torch.float32, device=x.device) if num_groups > 1 else out.unsqueeze(0)
    lut = _lut(weight) if use_lut else weight.scales
    block_m = 1 if m == 1 else (2 if m == 2 else 4)
    cfg = _INTERP["gemv"] if interpreting() else _FORCED["gemv"]
    args = (x, weight.codes, weight.scales, lut, dest, m, n, k, x.stride(0), weight.codes.stride(0),
            weight.scales.stride(0), dest.stride(0), n)
    if cfg is None:
        _gemv_tuned()[lambda mt: (triton.cdiv(n, mt["BLOCK_N"]), num_groups)](
            *args, KB_PER_GROUP=group, BLOCK_M=block_m, W_LUT=use_lut)
    else:
        block_n, warps = cfg
        _gemv_fma_kernel[(triton.cdiv(n, block_n), num_groups)](
            *args, KB_PER_GROUP=group, BLOCK_M=block_m, BLOCK_N=block_n, W_LUT=use_lut, num_warps=warps)
    if num_groups > 1:
        block = 1024
        _sum_groups_kernel[(triton.cdiv(m * n, block),)](dest, out, m * n, dest.stride(0), NUM_GROUPS=num_groups,
                                                         BLOCK=block)
    return out


# --- autotuned kernels (built on first GPU use; the interpreter never autotunes) ----------------
_tuned: dict[str, object] = {}
_MODE_KEYS = ["N", "K", "X_MODE", "X_PIECES", "DOT", "W_KIND", "KB_PER_GROUP", "SPLIT", "FUSED_SUM", "EVEN", "PDL",
              "XQ_ROWS"]


def _m_bucket(m: int) -> int:
    """Prefill autotuning key: the power-of-two bucket of M (<= 64, 128, 256, ... 4096+)."""
    return min(max(64, 1 << (m - 1).bit_length()), 4096)


def _decode_tuned():
    if "decode" not in _tuned:
        configs = [triton.Config({"BLOCK_N": bn}, num_warps=w, num_stages=s) for bn, w, s in DECODE_CONFIGS]
        _tuned["decode"] = triton.autotune(configs=configs, key=_MODE_KEYS)(_blockdot_kernel)
    return _tuned["decode"]


def _prefill_tuned():
    if "prefill" not in _tuned:
        configs = [triton.Config({"BLOCK_N": bn, "BLOCK_M": bm}, num_warps=w, num_stages=s)
                   for bn, bm, w, s in PREFILL_CONFIGS]
        _tuned["prefill"] = triton.autotune(configs=configs, key=[*_MODE_KEYS, "M_BUCKET"])(_blockdot_kernel)
    return _tuned["prefill"]


def _prefill_fast_tuned(mode: str):
    """Autotuned per (N, K, mode) — never on M, so a layer keeps one config (and one arithmetic)
    for every M. The first call of a layer shape picks it: time it at a prefill-sized M."""
    name = f"prefill_fast_{mode}"
    if name not in _tuned:
        configs = [triton.Config({"BLOCK_N": bn, "BLOCK_M": bm, "BLOCK_K": bk}, num_warps=w, num_stages=s)
                   for bn, bm, bk, w, s in PREFILL_FAST_CONFIGS[mode]]
        _tuned[name] = triton.autotune(configs=configs, key=["N", "K", "W8A8", "DOT", "EVEN_K"])(_prefill_fast_kernel)
    return _tuned[name]


def _gemv_tuned():
    if "gemv" not in _tuned:
        configs = [triton.Config({"BLOCK_N": bn}, num_warps=w) for bn, w in GEMV_CONFIGS]
        _tuned["gemv"] = triton.autotune(configs=configs, key=["N", "K", "BLOCK_M", "W_LUT", "KB_PER_GROUP"])(
            _gemv_fma_kernel)
    return _tuned["gemv"]
