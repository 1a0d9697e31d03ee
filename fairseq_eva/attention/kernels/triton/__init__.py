"""EVA's joint softmax as one fused Triton kernel, forward and backward (registered as "triton").

Launch grid and what each program does (B rows, H heads, N positions, w the window, C summaries):

- forward (forward.py), grid (N / w * ceil(w / BLOCK_M), B H): a tile of BLOCK_M queries of one block runs an
  online softmax over tiles of BLOCK_N keys, first its local keys (RPE added, hidden keys masked), then the
  summaries the block sees (a staircase prefix when causal), and writes y and lse.
- backward (backward.py), four launches:
  dQ, the forward's grid: delta = rowsum(dY * Y), stored, and dQ over the same keys;
  dK and dV, grid (N / BLOCK_N, B H): a key tile loops over the query blocks whose local keys hold it;
  d k~ and d beta, grid (C / BLOCK_N, B H, splits): a summary tile loops over the blocks that see it, the
  blocks split round-robin into partial sums that torch adds (no float atomics anywhere);
  the RPE gradient, grid (w / BLOCK_M * width / BLOCK_N, H, splits), only when the table needs one: dS summed
  over rows and blocks for each (query, local column), mapped onto the table's offsets by op.table_gradient.
Dropout: the seed is a 1-element int64 tensor the programs load (no host synchronisation). Keys 4 g .. 4 g + 3 of
query row (b H + h) N + n take the four words of one Philox draw (tl.randint4x) at counter (g, row), key being the
local column j or width + c; the forward and every backward program draw it again: no mask is stored, and the
tiling does not change it (tiles.dropout_keep).

Tiles: on a GPU the forward, dQ and dK dV programs are autotuned (tiles.autotuned: BLOCK_M, BLOCK_N, warps and stages a
head size, window, layout and dtype, cached on disk), the others take op.py's; a call may name its tiles, and the
interpreter runs the fixed ones. summaries.py holds the chunk summaries' programs (chunks.py uses them on CUDA).

Triton is imported only when the kernel runs: this package imports without it. It runs on CUDA, and on the CPU
under Triton's interpreter (TRITON_INTERPRET=1, for the tests).
"""

import functools
import os

import torch

from ..contract import KernelSpec, register
from .op import triton_attention


@functools.lru_cache(maxsize=None)
def _unavailable():
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    return None


def _check(q, *, bias_grid, **call):
    """Its programs read the bias from the offset table (a row of it per query): a per-place grid has no such row."""
    if bias_grid:
        return "it takes the relative position bias by offset only, not a per-place table (--eva-rpe-type table)"
    return None


TRITON = register(KernelSpec(
    name="triton",
    run=triton_attention,
    devices=frozenset({"cuda"} | ({"cpu"} if os.environ.get("TRITON_INTERPRET") == "1" else set())),
    dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32}),
    dropout=True,
    bias_grad=True,
    unavailable=_unavailable,
    check=_check,
    summary="one fused Triton kernel, forward and backward (FlashAttention-2 style); CUDA, or the CPU interpreted",
))
