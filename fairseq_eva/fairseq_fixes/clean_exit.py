"""Exit cleanly after training: stop fairseq's batch-prefetching threads before Python shuts down.

fairseq's BufferedIterator prefetches batches on a daemon thread (`iterators.BackgroundConsumer`) that
makes them with torch operations, which release the GIL. Training stops at --max-update wherever that
falls in an epoch, and nothing stops the thread. If it is inside such an operation when the interpreter
finalizes, taking the GIL back ends the thread with pthread_exit, whose unwinding through the noexcept
destructor of pybind11's gil_scoped_release calls std::terminate: "terminate called without an active
exception" and SIGABRT after "done training" (pytorch/pytorch#38228). The thread is busy there when
training stops early in an epoch, while it is still filling its queue: the tiny translation run of the
GPU check, 200 updates of 33-batch epochs, stopped 2 batches into its 7th epoch and aborted each time.

At exit (atexit handlers run before finalization) each such thread is told to stop after the batch it is
making, and its queue is emptied until the thread has ended.
"""

import atexit
import queue
import sys
import threading
import time


def stop_background_loaders(timeout=10.0):
    """Ends fairseq's live prefetching threads; returns how many were still alive after `timeout` seconds."""
    iterators = sys.modules.get("fairseq.data.iterators")
    if iterators is None:
        return 0
    threads = [t for t in threading.enumerate() if isinstance(t, iterators.BackgroundConsumer) and t.is_alive()]
    for thread in threads:
        thread._max_len = 0  # its loop breaks after its next put, then puts the end marker
    deadline = time.monotonic() + timeout
    for thread in threads:
        while thread.is_alive() and time.monotonic() < deadline:
            _drain(thread._queue)  # a full queue would block those puts
            thread.join(0.01)
    return sum(thread.is_alive() for thread in threads)


def _drain(batches):
    try:
        while True:
            batches.get_nowait()
    except queue.Empty:
        pass


def install():
    """Stop the threads at interpreter exit (idempotent)."""
    atexit.unregister(stop_background_loaders)
    atexit.register(stop_background_loaders)
