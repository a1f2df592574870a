"""Private Triton kernel of the compressor's state-row write; launched only through `state_write.py`.

One program per (token, block of BLOCK_C channels): row = [a | z + ape[p mod m]] in fp32, stored
at the token's state slot. The twin (`fused_ref.compressor_state_write_ref`) indexes ape, adds,
concatenates and hands the row to the cache's writer: ~45 small launches on a GPU per call (the
fixed-shape byte scatter), 9 calls per default-model decode step. The only arithmetic is one fp32
add per z channel, the twin's own, so the stored words are the twin's bit for bit.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxserve.kernels.early_start import wait_for_previous


@triton.jit
def _compressor_state_write_kernel(
    a_ptr, z_ptr, ape_ptr, positions_ptr, slots_ptr, state_ptr, a_stride, z_stride, ratio,
    state_block_size, state_row_words, state_page_words, WIDTH: tl.constexpr, BLOCK_C: tl.constexpr,
    PDL: tl.constexpr = False,  # early start: kernels/early_start.py
):
    """state row of slot s (words): block(s) * page_words + pos(s) * row_words, then [a | z + ape];
    tokens with slot -1 (padding rows) return at once and write nothing."""
    wait_for_previous(PDL)  # before any load or store (kernels/early_start.py)
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + t)
    if slot >= 0:
        c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        cm = c < WIDTH
        phase = tl.load(positions_ptr + t) % ratio  # positions are >= 0: C's % is the floor modulo
        a = tl.load(a_ptr + t * a_stride + c, mask=cm)
        z = tl.load(z_ptr + t * z_stride + c, mask=cm) + tl.load(ape_ptr + phase * WIDTH + c, mask=cm)
        block = slot // state_block_size
        row = block * state_page_words + (slot - block * state_block_size) * state_row_words
        tl.store(state_ptr + row + c, a, mask=cm)
        tl.store(state_ptr + row + WIDTH + c, z, mask=cm)
