"""The C loop's shared library: compiled from cpu_kernel.c once per source and CPU into the user's cache
folder ($XDG_CACHE_HOME/fairseq_eva, else ~/.cache/fairseq_eva), and torch's own sgemm that it calls."""

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings

import torch

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernel.c")


def _sgemm():
    """The address of the sgemm torch's own library exports (its MKL in the x86-64 Linux wheels), or None."""
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            fn = getattr(ctypes.CDLL(path), "sgemm_", None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value
    return None


def _cpu_signature():
    """What -march=native depends on: a cache folder shared by different machines keeps one build each."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _compile():
    """The C loop as a shared library, compiled once per source and CPU into the user's cache folder; None
    where it cannot be built (no C compiler)."""
    with open(SOURCE) as f:
        source = f.read()
    digest = hashlib.sha1((source + _cpu_signature()).encode()).hexdigest()[:12]
    folder = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fairseq_eva")
    path = os.path.join(folder, f"cpu_kernel_{digest}.so")
    try:
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                library = os.path.join(tmp, "kernel.so")
                cc = os.environ.get("CC", "cc")
                subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-shared",
                                "-fPIC", SOURCE, "-o", library, "-lm"], check=True, capture_output=True)
                os.replace(library, path)  # atomic: processes compiling at once each leave a whole file
        return ctypes.CDLL(path)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        warnings.warn(f"fairseq_eva: the CPU kernel could not be built ({e}); running the blockwise kernel instead "
                      f"(slower). {detail.decode()[-500:]}")
        return None


_library = None


def library():
    """(the compiled kernel, sgemm's address), or None where either is missing: then the blockwise kernel runs."""
    global _library
    if _library is None:
        _library = False
        sgemm = None if os.environ.get("FAIRSEQ_EVA_NO_C") else _sgemm()
        lib = sgemm and _compile()
        if lib:
            ptr = ctypes.c_void_p
            lib.eva_forward.argtypes = [ptr] * 8
            lib.eva_backward.argtypes = [ptr] * 14
            _library = (lib, sgemm)
    return _library or None
