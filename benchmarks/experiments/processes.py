"""Child processes of the harnesses: start, wait, run with a log, and stop them all with the driver (SIGTERM), so
that a stopped harness leaves no training behind and resumes from its checkpoints; and the progress log."""

import os
import signal
import subprocess
import sys
import time


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


CHILDREN = set()  # the trainings and tools running now, stopped with this driver (stop_children)
STOPPING = []  # the signal that stops this driver, once it has come: no child starts after it


class Stopped(BaseException):
    """SIGTERM came: raised in the main thread, wherever it waits (for a child, for the runs' threads)."""


def descendants(pid):
    """The processes under `pid` (a training script's fairseq-hydra-train, torchrun's workers), from /proc."""
    children = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_children(signum, frame):
    """On SIGTERM, stop the running trainings (and what they started) instead of leaving them to train on
    unwatched; each resumes from its last checkpoint when the same command runs again. The handler only signals
    them: the main thread may be inside a child's wait, where waiting again would never return; `stopping_cleanly`
    reaps them once."""
    STOPPING.append(signum)
    for proc in list(CHILDREN):
        under = descendants(proc.pid)
        proc.terminate()
        for pid in under:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    raise Stopped(signum)


def stopping_cleanly(main):
    """Run `main` with SIGTERM stopping the children (stop_children), then reaping each once, and exit with the
    status of a process ended by that signal (128 + its number), saying how to resume."""
    signal.signal(signal.SIGTERM, stop_children)
    try:
        return main()
    except Stopped as stop:
        signum = stop.args[0]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the driver at once
    for proc in list(CHILDREN):
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        CHILDREN.discard(proc)
    print(f"stopped by signal {signum}: run the same command again to resume", file=sys.stderr, flush=True)
    sys.exit(128 + signum)


def start(cmd, **popen_options):
    """A child process (registered in CHILDREN until it is waited for); none once the driver is being stopped."""
    if STOPPING:
        raise Stopped(STOPPING[0])
    proc = subprocess.Popen([str(c) for c in cmd], **popen_options)
    CHILDREN.add(proc)
    return proc


def finish(proc):
    """Wait for a child process; its exit status."""
    proc.wait()
    CHILDREN.discard(proc)
    return proc.returncode


def fairseq_tool(name):
    """fairseq's command-line tool `name` (fairseq_cli.NAME) run by this interpreter: found wherever fairseq can be
    imported, also when its console scripts are not on PATH (a `pip install --target` install)."""
    return [sys.executable, "-m", f"fairseq_cli.{name}"]


def run(cmd, env, logfile=None, stdin=None, stdout=None):
    """Run a command (its stderr, and its stdout unless given a file, to logfile); on failure stop with the log's tail."""
    with open(logfile or os.devnull, "a") as out:
        returncode = finish(start(cmd, env=env, stdin=stdin, stdout=stdout or out, stderr=out))
    if returncode != 0:
        tail = open(logfile).read()[-3000:] if logfile else ""
        what = " ".join(str(c) for c in cmd[:3])  # names `python -m fairseq_cli.X` and `bash script.sh --raw` alike
        sys.exit(f"error: {what} failed (exit {returncode}); log {logfile}\n{tail}")
