"""EVA's kernels behind one contract (contract.py): each module here registers one kernel; `choose` picks."""

from . import blockwise, c_loop, fused, reference  # noqa: F401  (each registers its kernel)
from .contract import AUTO_ORDER, KERNELS, Kernel, KernelSpec, choose, register

# from . import triton_kernel  (the Triton kernel, added at merge)

__all__ = ["AUTO_ORDER", "KERNELS", "Kernel", "KernelSpec", "choose", "register"]
