"""The C loop's shared library: compiled from cpu_kernel.c once per source and CPU into the user's cache folder
($XDG_CACHE_HOME/fairseq_eva, else ~/.cache/fairseq_eva), and torch's own sgemm that it calls.

A build is tested before it is kept (a child process multiplies two matrices through it with torch's sgemm:
a 64-bit-integer BLAS would corrupt memory) and its size and checksum are written beside it; a cached
library that does not match them (truncated, overwritten) is rebuilt once before it is loaded, since loading a
damaged one can kill the process. Where the C loop cannot be had, one warning says why and what runs instead
of it where the kernel is auto.
"""

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_kernel.c")
SGEMM = "sgemm_"  # the Fortran BLAS name torch's library exports (its MKL in the x86-64 wheels)
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
INSTEAD = ("Where the kernel is auto (the default), EVA in float32 on the CPU runs the blockwise kernel in PyTorch "
           "instead: the same computation, slower")


class Unavailable(Exception):
    """Why the C loop cannot be had here, in the user's words."""


def cache_folder():
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fairseq_eva")


def _cpu_signature():
    """What -march=native depends on: a cache folder shared by different machines keeps one build each."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def library_path():
    """Where the build for this source and CPU is cached."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha1(f.read() + _cpu_signature().encode()).hexdigest()[:12]
    return os.path.join(cache_folder(), f"cpu_kernel_{digest}.so")


def _torch_library():
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise Unavailable(f"torch's own library (libtorch_cpu) is not in {folder}")


def sgemm():
    """(torch's library, the address of its sgemm); Unavailable where it exports none (a torch built without MKL)."""
    path = _torch_library()
    fn = getattr(ctypes.CDLL(path), SGEMM, None)
    if fn is None:
        raise Unavailable(f"torch's library {path} exports no {SGEMM} (a torch built without MKL)")
    return path, ctypes.cast(fn, ctypes.c_void_p).value


def _checksum(path):
    with open(path, "rb") as f:
        return f"{os.path.getsize(path)} {hashlib.sha256(f.read()).hexdigest()}"


def _intact(path):
    """Whether `path` is a library this module built: its size and sha256 as written beside it."""
    try:
        with open(path + ".sum") as f:
            return f.read().strip() == _checksum(path)
    except OSError:
        return False


_TEST_CALL = """
import ctypes, sys
kernel, torch_library = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
kernel.eva_check_sgemm.argtypes = [ctypes.c_void_p]
sys.exit(0 if kernel.eva_check_sgemm(ctypes.cast(getattr(torch_library, sys.argv[3]), ctypes.c_void_p)) == 1 else 3)
"""


def _test_call(library, torch_library):
    """Loads the build in a child process and multiplies two 2 x 2 matrices through torch's sgemm as it calls it."""
    child = subprocess.run([sys.executable, "-c", _TEST_CALL, library, torch_library, SGEMM], capture_output=True, text=True)
    if child.returncode == 3:
        raise Unavailable(f"torch's {SGEMM} does not take 32-bit integers (an ILP64 BLAS), which the C loop passes")
    if child.returncode != 0:
        raise Unavailable(f"the compiled library failed its test call (exit status {child.returncode}): "
                          f"{child.stderr.strip()[-300:]}")


def _build(path, torch_library):
    """Compiles cpu_kernel.c, tests it, and puts it at `path` with its checksum beside it (atomically: processes
    building at once each leave a whole file)."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise Unavailable(f"no C compiler: {cc!r} is not on the PATH (set CC to use another)")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
            library = os.path.join(tmp, "kernel.so")
            compiled = subprocess.run([cc, *FLAGS, SOURCE, "-o", library, "-lm"], capture_output=True, text=True)
            if compiled.returncode != 0:
                raise Unavailable(f"{cc} could not compile {SOURCE} with {' '.join(FLAGS)} (an OpenMP-capable compiler "
                                  f"is needed): {compiled.stderr.strip()[-500:]}")
            _test_call(library, torch_library)
            with open(library + ".sum", "w") as f:
                f.write(_checksum(library))
            os.replace(library, path)
            os.replace(library + ".sum", path + ".sum")
    except OSError as error:
        raise Unavailable(f"the cache folder {os.path.dirname(path)} cannot hold it ({error}); set XDG_CACHE_HOME "
                          "to move that folder") from None


def _load(torch_library):
    """The cached library, (re)built first where it is missing or damaged."""
    path = library_path()
    if not _intact(path):
        _build(path, torch_library)
    try:
        return ctypes.CDLL(path)
    except OSError as error:  # (a library it links to, libgomp, is missing at run time)
        raise Unavailable(f"{path} cannot be loaded ({error})") from None


_library = None
_reason = None


def library():
    """(the compiled kernel, sgemm's address), or None where the C loop cannot run here (one warning says why),
    or where FAIRSEQ_EVA_NO_C asks for the blockwise kernel."""
    global _library, _reason
    if _library is None:
        _library = False
        if os.environ.get("FAIRSEQ_EVA_NO_C"):
            _reason = "FAIRSEQ_EVA_NO_C is set"
            return None
        try:
            torch_library, address = sgemm()
            lib = _load(torch_library)
        except Unavailable as reason:
            _reason = str(reason)
            warnings.warn(f"fairseq_eva: the compiled CPU kernel (the C loop) is off: {reason}. {INSTEAD}.", stacklevel=2)
            return None
        ptr = ctypes.c_void_p
        lib.eva_forward.argtypes = [ptr] * 8
        lib.eva_backward.argtypes = [ptr] * 14
        _library = (lib, address)
    return _library or None


def unavailable():
    """Why the C loop does not run here, or None where it does (building it on the first call)."""
    library()
    return _reason


def prerequisite_missing():
    """Why the C loop cannot be built here (no compiler, no sgemm, no OpenMP), or None where it should build."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    try:
        sgemm()
    except Unavailable as reason:
        return str(reason)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "omp.c")
        with open(source, "w") as f:
            f.write("#include <omp.h>\nint threads(void) { return omp_get_max_threads(); }\n")
        if subprocess.run([cc, "-fopenmp", "-shared", "-fPIC", source, "-o", source + ".so"], capture_output=True).returncode:
            return f"{cc} takes no -fopenmp (Apple's clang has no OpenMP)"
    return None
