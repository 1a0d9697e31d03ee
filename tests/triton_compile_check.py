"""Compile every program of the Triton kernel for a GPU architecture without a GPU (Triton ships ptxas): what the
interpreter runs, the compiler must accept too. Run without TRITON_INTERPRET:

    python tests/triton_compile_check.py 90     (sm_90; prints one line per program)

Each launch of the kernel's launchers (op.forward, op.backward, the summaries' ops) is caught instead of run and compiled with the
argument types and constexprs it would have had, for the paper's layouts (d = 64) and float32/float16/bfloat16;
an autotuned program once for each of its configs.
"""

import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction

from fairseq_eva.attention.kernels.triton import op, summaries
from fairseq_eva.attention.layout import BlockLayout

TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
         torch.int8: "i8", torch.int32: "i32", torch.int64: "i64"}
LAYOUTS = [  # name, layout, N, C
    ("mlm", BlockLayout.bidirectional(256, False), 512, 128),
    ("mt", BlockLayout.bidirectional(16, True), 64, 8),
    ("lm", BlockLayout.causal_blocks(128, True, 8), 512, 64),
]


def signature(fn, args, kwargs):
    """(argument types, constexprs, options) of a launch."""
    constexpr = {p.num for p in fn.params if p.is_constexpr}
    types, constants = {}, {}
    for i, name in enumerate(fn.arg_names):
        value = args[i] if i < len(args) else kwargs[name]
        if i in constexpr:
            types[name], constants[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            types[name] = "*" + TYPES[value.dtype]
        elif isinstance(value, int):
            types[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        else:
            types[name] = "fp32"
    return types, constants, {k: v for k, v in kwargs.items() if k not in fn.arg_names}


def launches(dtype, layout, N, C):
    """The launches of a forward and a backward with every option on (RPE, chunk_ok, lengths, dropout)."""
    caught = []
    JITFunction.run = lambda self, *args, grid, warmup, **kwargs: caught.append((self, args, kwargs))

    def every_config(self, *args, grid, warmup, **kwargs):  # an autotuned program: each config it would try
        self.nargs = dict(zip(self.arg_names, args))
        caught.extend((self.fn, args, {**kwargs, **config.all_kwargs()}) for config in self.prune_configs(kwargs))

    Autotuner.run = every_config
    B, H, d = 1, 2, 64
    q, k, v = (torch.randn(B, H, N, d, dtype=dtype) for _ in range(3))
    ks, beta = (torch.randn(B, H, C, d, dtype=dtype) for _ in range(2))
    rpe, ok, lengths = torch.randn(H, layout.num_offsets), torch.ones(B, C, dtype=torch.bool), torch.tensor([N - 3])
    shape = (layout.window, layout.offset, layout.width, layout.causal, layout.overlap, layout.chunks_per_block)
    seed = torch.tensor([2**40])
    y, lse = op.forward(q, k, v, ks, beta, ok, rpe, lengths, seed, *shape, 0.1, d**-0.5)
    op.backward(y, q, k, v, ks, beta, ok, rpe, lengths, seed, y, lse, *shape, 0.1, d**-0.5, True)
    # the chunk summaries: right padding and a chunk size a row; omega float32, as sigma's LayerNorm leaves it
    lengths, sizes, omega = lengths.int(), torch.tensor([N // C], dtype=torch.int32), torch.randn(B, H, C, d)
    means = summaries.chunk_means_op(q, k, lengths, sizes, 0, C)
    summaries.chunk_means_backward_op(*means, q, k, lengths, sizes, 0)
    beta_c, lse_c = summaries.chunk_beta_op(k, v, omega, lengths, sizes, 0, d**-0.5)
    summaries.chunk_beta_backward_op(beta_c, k, v, omega, beta_c, lse_c, lengths, sizes, 0, d**-0.5)
    return caught


def main(arch):
    for name, layout, N, C in LAYOUTS:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for fn, args, kwargs in launches(dtype, layout, N, C):
                types, constants, options = signature(fn, args, kwargs)
                kernel = triton.compile(triton.compiler.ASTSource(fn, types, constants), target=GPUTarget("cuda", arch, 32),
                                        options=options)
                tiles = f" {constants['BLOCK_M']}x{constants['BLOCK_N']}" if "BLOCK_M" in constants else ""
                print(f"sm_{arch} {name} {str(dtype)[6:]} {fn.__name__}{tiles}: {kernel.metadata.shared} bytes of shared memory")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 90)
