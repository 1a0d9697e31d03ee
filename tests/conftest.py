"""Fixtures shared by the test modules."""

import os

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for the module's tests: small tensors gain nothing from more, threads spin badly on
    a small shared machine, and allocations then do not depend on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The Triton kernel runs on the CPU under Triton's interpreter (tests/test_kernel_triton.py). Set before triton or
# fairseq_eva is imported: the kernel registers the CPU as a device only then.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
