"""fairseq's `wall` log field after a resume from a checkpoint saved within an epoch.

`wall` is a stopwatch (fairseq's StopwatchMeter) started when the Trainer is built and never stopped: it
reads the seconds since then. A checkpoint stores the meters' state, and a stopwatch's state is only its
stopped sum (0 here), not its start. When fairseq resumes within an epoch (a checkpoint of
--save-interval-updates), `Trainer.load_checkpoint` replaces the meters by the stored ones and restarts
only the TimeMeters ("their start times don't make sense anymore"): the new `wall` has no start and reads
0 for the rest of the run. (Resumed at an epoch's end, fairseq keeps its own meters and `wall` counts.)
The plugin wraps `load_checkpoint` so that the restored `wall` keeps the start of the one it
replaced: it reads the seconds since this process's Trainer was built, as in a fresh run and after a
resume at an epoch's end.
"""

import functools


def _keep_wall_start(load_checkpoint):
    @functools.wraps(load_checkpoint)
    def wrapper(*args, **kwargs):
        from fairseq.logging import metrics

        before = metrics.get_meter("default", "wall")
        result = load_checkpoint(*args, **kwargs)
        after = metrics.get_meter("default", "wall")
        if before is not None and after is not before and getattr(after, "start_time", 0) is None:
            after.start_time = before.start_time
        return result

    return wrapper

