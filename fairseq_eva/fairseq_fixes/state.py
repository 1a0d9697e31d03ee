"""What the fixes' wrappers of different fairseq functions tell each other, in one place.

fairseq calls them in turn within one run: it reads a checkpoint (`load_checkpoint_to_cpu`), then builds its
model (`build_model`); a trainer's `load_checkpoint` reads the file inside it; fairseq-train loads and saves
checkpoints, and Ctrl-C comes later. Only the wrappers of the table write this; the plugin's models read
`building_from_checkpoint`.
"""

import contextlib

_noted = {}  # the checkpoint whose model is about to be built: path, task, data, embedding rows (model_fit)
_building = []  # whether each model being built comes from a checkpoint (model_fit)
_trainers = []  # the trainers whose load_checkpoint is running (same_attention)
run = {}  # this process's training run: its checkpoint config, trainer, the newest checkpoint written (interrupt)


def note_checkpoint(**noted):
    """What a checkpoint that fairseq has just read holds, for the model built from it next."""
    _noted.clear()
    _noted.update(noted)


def take_checkpoint():
    """What `note_checkpoint` noted (a dict, empty if nothing), forgotten once taken."""
    noted = dict(_noted)
    _noted.clear()
    return noted


@contextlib.contextmanager
def building(from_checkpoint):
    """While fairseq builds a model: whether it comes from a checkpoint."""
    _building.append(bool(from_checkpoint))
    try:
        yield
    finally:
        _building.pop()


def building_from_checkpoint():
    """Whether the model being built comes from a checkpoint (an evaluation tool, the hub), not from options given
    for a new model."""
    return bool(_building and _building[-1])


@contextlib.contextmanager
def loading_into(trainer):
    """While a trainer's load_checkpoint runs."""
    _trainers.append(trainer)
    try:
        yield
    finally:
        _trainers.pop()


def trainer_loading():
    """The trainer whose load_checkpoint is running, or None."""
    return _trainers[-1] if _trainers else None
