"""EVA's kernels behind one contract (contract.py): each module here registers one kernel; `choose` picks."""

from . import blockwise, c_loop, fused, reference, triton  # noqa: F401  (each registers its kernel)
from .contract import AUTO_ORDER, KERNELS, Kernel, KernelSpec, choose, register

__all__ = ["AUTO_ORDER", "KERNELS", "Kernel", "KernelSpec", "choose", "register"]
