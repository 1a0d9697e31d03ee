"""How many tensor operations one forward + backward of a layer dispatches: the host's share of its time.

On a GPU each operation costs the host a few microseconds to dispatch, and most launch a kernel. A layer whose
kernels are fast is bound by that count (docs/results.md, "How fast on a GPU?": bidirectional EVA
costs about 5 ms a call at every length). The count needs no GPU, so changes that cut it are measured here:
every layer of the GPU check's speed tables (benchmarks/gpu_check/layers.py, LAYERS) with the kernel CUDA runs
(`--kernel triton`, under Triton's interpreter when there is no GPU, chunk summaries included), and the four
projections alone.

    python -m benchmarks.op_count                    # N = 512, batch 1, the Triton kernel
    python -m benchmarks.op_count --kernel fused

"operations" counts every aten call (views included); "new tensors" counts those that make a tensor rather
than a view of one, an upper bound on the kernels launched; the most frequent operations follow.
"""

import argparse
import collections
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it, and those whose output is not a view of an input."""

    def __init__(self):
        super().__init__()
        self.ops, self.new = collections.Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        self.new += all(r.alias_info is None for r in func._schema.returns)
        return func(*args, **(kwargs or {}))


def count(layer, x):
    """(operations, new tensors, Counter by name) of one forward + backward, the call the GPU check times
    (speed.layer_call), after a warm-up call."""
    from benchmarks import speed  # imports the kernels: after main() has chosen Triton's interpreter

    call = speed.layer_call(layer, x, torch.randn_like(x))
    call()
    with OpCounter() as counter:
        call()
    return sum(counter.ops.values()), counter.new, counter.ops


def cuda_path():
    """Under Triton's interpreter, take the path a CUDA tensor takes: the chunk summaries' Triton programs too
    (chunks.fused_summaries), not the PyTorch summaries the CPU kernels use."""
    from fairseq_eva.attention import chunks

    chunks._use_triton = lambda q: chunks.TRITON


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", default="triton", help="the EVA layers' kernel (default: triton, CUDA's default)")
    parser.add_argument("--length", type=int, default=512, help="N (the count does not depend on it; default 512)")
    parser.add_argument("--top", type=int, default=8, help="the most frequent operations to list (8)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and args.kernel == "triton":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when Triton first compiles, after this
    from benchmarks import baselines, gpu_check

    if device == "cpu" and args.kernel == "triton":
        cuda_path()

    layers = {name: build(args.kernel) for name, build in gpu_check.LAYERS.items() if name.startswith("eva")}
    layers["projections"] = baselines.ProjectedAttention(gpu_check.D_MODEL, gpu_check.HEADS, lambda q, k, v: q + k + v)
    x = torch.randn(1, args.length, gpu_check.D_MODEL, device=device, requires_grad=True)
    print(f"one forward + backward, N = {args.length}, batch 1, kernel {args.kernel}, {device}\n")
    print("| layer | operations | new tensors | most frequent |\n|---|---|---|---|")
    for name, layer in layers.items():
        total, new, ops = count(layer.to(device).train(), x)
        common = ", ".join(f"{op} {n}" for op, n in ops.most_common(args.top))
        print(f"| {name} | {total} | {new} | {common} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
