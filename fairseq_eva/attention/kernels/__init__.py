"""EVA's kernels behind one contract (contract.py): each module here registers one kernel."""

from . import reference, triton_kernel  # noqa: F401  (register)
from .contract import AUTO_ORDER, KERNELS, Kernel, KernelSpec, choose, register

__all__ = ["AUTO_ORDER", "KERNELS", "Kernel", "KernelSpec", "choose", "register"]
