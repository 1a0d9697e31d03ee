"""The rows of the small models: the long-context grammar of row names (softmax, exact, eva[-W-N][-V],
local[-W][-V], another mechanism of the registry at EVA's cost) and their attention options; and the translation
table's rows at sample scale, each config's attention scaled as the demo scales EVA-32's."""

import functools
import math
import re

# EVA variants (a row name's last part): diagnostics of whether EVA's definition costs it against local attention
VARIANTS = {"nonoise": ["--eva-omega-noise", "false"], "linear": ["--eva-proposal", "linear"],
            "identity": ["--eva-proposal", "identity"], "logsize": ["--eva-chunk-logit-offset"],
            "average": ["--eva-proposal-mean", "average"], "noattdrop": ["--attention-dropout", "0"],
            "table": ["--eva-rpe-type", "table"]}
LOCAL_VARIANTS = ("noattdrop", "table")  # the variants that a local row takes too (the others concern chunks)
ROW = re.compile(r"(?:(softmax|exact)|(local)(?:-([1-9][0-9]*))?|(eva)(?:-([1-9][0-9]*)-([1-9][0-9]*))?)(?:-(%s))?"
                 % "|".join(VARIANTS))


def match_row(row):
    """ROW's match of a row name, None where it names no row (a variant that its kind does not take)."""
    m = ROW.fullmatch(row)
    if m is None or m.group(7) is None or m.group(4) or (m.group(2) and m.group(7) in LOCAL_VARIANTS):
        return m
    return None


DEFAULTS = {"lm": (128, 8), "mlm": (256, 128)}  # EVA's window, and chunk size (lm) or number of chunks C (mlm)
DEFAULT_ROWS = "softmax,eva,local"
DIM, HEADS = 256, 4  # the model's default width and heads (--dim, --heads)
# a row named after another mechanism of the registry, NAME or NAME-V (V: the value of its cost option)
MECHANISM_ROW = re.compile(r"([a-z][a-z0-9_]*?)(?:-([1-9][0-9]*))?")
KIND_ORDER = ("softmax", "exact", "eva", "local")  # the rows that ROW names; the other mechanisms follow in the registry's order
# settings of the lm rows on top of the paper's masked-LM ones: the paper has no causal Performer; its positive
# (FAVOR+) features, the Performer's own for causal attention, rather than the masked LM's ReLU features
LM_SETTINGS = {"performer": {"kernel": "positive"}}


def mechanisms():
    """benchmarks.mechanisms (the knobs, the paper's settings, knob_for_cost) and the attention registry, imported
    when a row needs them (they import torch and fairseq)."""
    from benchmarks import mechanisms as bench
    from fairseq_eva.attention import registry

    return bench, registry


def eva_setting(task):
    """The registry's options of the task's eva row (DEFAULTS), whose cost the other mechanisms' rows match."""
    window, chunks = DEFAULTS[task]
    if task == "lm":
        return dict(window_size=window, chunk_size=chunks, num_chunks=0)
    return dict(window_size=window, num_chunks=chunks, chunk_size=0)


def valid_rows(task):
    """The rows of a task, as --help writes them, for the refusals."""
    bench, registry = mechanisms()
    direction = registry.CAUSAL if task == "lm" else registry.BIDIRECTIONAL
    others = [name + ("[-V]" if name in bench.KNOBS else "") for name in registry.choices(direction)
              if name not in KIND_ORDER]
    return ", ".join(["softmax", "exact", f"eva[-W-N][-{'|'.join(VARIANTS)}]",
                      f"local[-W][-{'|'.join(LOCAL_VARIANTS)}]", *others])


@functools.lru_cache(maxsize=None)
def mechanism_setting(task, row, block, dim=DIM, heads=HEADS):
    """(mechanism, its options) of a row named after a mechanism of the registry other than softmax, eva and
    local: the paper's settings (the lm's where they differ) with the option that sets its cost chosen so that
    the cost per token at `block` tokens, width `dim` and `heads` heads comes closest to the task's eva row, or
    set to V (NAME-V). ValueError names a row that is not one of the task's."""
    bench, registry = mechanisms()
    m = MECHANISM_ROW.fullmatch(row)
    name = m.group(1) if m else None
    if name is None or name in KIND_ORDER or name not in registry.MECHANISMS:
        raise ValueError(f"unknown row {row!r}; {task} rows: {valid_rows(task)}")
    causal = task == "lm"
    mechanism = registry.get(name)
    if not mechanism.supports(causal):
        raise ValueError(f"row {row!r}: {name} attention is {' and '.join(mechanism.directions)} only, no {task} row; "
                         f"{task} rows: {valid_rows(task)}")
    options = {**bench.PAPER.get(name, {}), **(LM_SETTINGS.get(name, {}) if causal else {})}
    if name == "linformer":  # a column of length projections per position: one per position of the block
        options["max_positions"] = block
    knob = bench.KNOBS.get(name)
    if m.group(2) and knob is None:
        raise ValueError(f"row {row!r}: {name} attention has no option that sets its cost; its row is {name}")
    if m.group(2):
        options[knob] = int(m.group(2))
    elif knob:
        target = mechanism_cost("eva", eva_setting(task), block, dim, heads, causal)
        options[knob] = bench.knob_for_cost(name, block, dim, heads, target, options, causal)
    import torch

    try:
        with torch.device("meta"):
            registry.build(name, dim, heads, causal=causal, **options)
    except ValueError as error:
        raise ValueError(f"row {row!r}: {error}") from None
    return name, options


def mechanism_cost(name, options, block, dim, heads, causal):
    """Multiply-adds per token of one layer's attention (the registry's formula)."""
    return mechanisms()[1].get(name).macs_per_token(block, dim, heads, causal=causal, **options)


def row_options(task, row, block, dim=DIM, heads=HEADS):
    """The attention options of a row of a task at blocks of `block` tokens, width `dim` and `heads` heads (the
    rows are listed in --help); ValueError says what is wrong with the name."""
    m = match_row(row)
    attention = "--decoder-attention" if task == "lm" else "--encoder-attention"
    if m is None:
        name, options = mechanism_setting(task, row, block, dim, heads)
        flags = [[f"--{name}-{option}".replace("_", "-"), str(value).lower() if isinstance(value, bool) else str(value)]
                 for option, value in options.items()]
        return [attention, name, *(word for flag in flags for word in flag)]
    kind = m.group(1) or m.group(2) or m.group(4)
    if kind == "softmax":
        return [attention, "softmax"]
    window = block if kind == "exact" else int(m.group(3) or m.group(5) or DEFAULTS[task][0])
    chunks = int(m.group(6) or DEFAULTS[task][1]) if kind == "eva" else 0
    if block % window:
        raise ValueError(f"the block length ({block}) must be a multiple of row {row}'s {task} EVA window ({window})")
    chunk_options = ["--eva-chunk-size", chunks] if task == "lm" else ["--eva-num-chunks", chunks, "--eva-chunk-size", 0]
    variant = VARIANTS[m.group(7)] if m.group(7) else []
    if m.group(7) == "logsize":  # its value, log(chunk size); lm: chunks of `chunks` tokens, mlm: `chunks` over the block
        variant = [*variant, f"{math.log(chunks if task == 'lm' else block / chunks):.4f}"]
    return [attention, "eva", "--eva-window-size", str(window), *map(str, chunk_options), "--eva-rpe", "true", *variant]


def command_cost(command):
    """Multiply-adds per token of one layer's attention, in units of the width D, of the model a training command
    (a row's command.txt) trains: the registry's formula at its options and --tokens-per-sample; None when the
    command does not say (no attention option)."""
    words = command.split()

    def value(flag):
        return words[words.index(flag) + 1] if flag in words and words.index(flag) + 1 < len(words) else None

    causal = "--decoder-attention" in words
    side = "decoder" if causal else "encoder"
    name = value(f"--{side}-attention")
    block, dim, heads = value("--tokens-per-sample"), value(f"--{side}-embed-dim"), value(f"--{side}-attention-heads")
    if None in (name, block, dim, heads):
        return None
    _, registry = mechanisms()
    if name not in registry.MECHANISMS:
        return None
    options = {}
    for option in registry.get(name).options:
        prefix = "eva" if name in ("eva", "local") else name
        given = value(f"--{prefix}-{option.name}".replace("_", "-"))
        if given is not None:
            options[option.name] = given.lower() in ("true", "1", "yes") if option.type is bool else option.type(given)
    return mechanism_cost(name, options, int(block), int(dim), int(heads), causal) / int(dim)


def row_kind(row):
    """The kind of a row's name (softmax, exact, eva, local or a mechanism of the registry), None if it names none."""
    m = match_row(row)
    if m:
        return m.group(1) or m.group(2) or m.group(4)
    m = MECHANISM_ROW.fullmatch(row)
    if m is None or m.group(1) in KIND_ORDER or m.group(1) not in mechanisms()[1].MECHANISMS:
        return None
    return m.group(1)


# Sample scale: the demo's tiny translation model and schedule (scripts/demo.sh), and each row's attention
# settings scaled from its config (scripts/paper_table.py --help).
TINY = ["model._name=transformer_eva_tiny", "lr_scheduler.warmup_updates=60", "common.log_interval=10",
        "dataset.num_workers=0", "optimization.update_freq=[1]"]
SCALED = {"softmax": [], "eva16": ["model.eva_window_size=2", "model.eva_num_chunks=4"],
          "eva32": ["model.eva_window_size=4", "model.eva_num_chunks=4"],
          "eva64": ["model.eva_window_size=8", "model.eva_num_chunks=4"],
          "performer128": ["model.performer_num_features=32"], "lara16": ["model.lara_num_landmarks=4"],
          "lara32": ["model.lara_num_landmarks=8"], "lara64": ["model.lara_num_landmarks=16"]}
# Rows beside the paper's at sample scale, each EVA-16's layer with one part taken away: exact softmax attention
# with EVA's relative position bias (one window over the whole sentence, no chunks) tells the bias from the
# approximation; local (EVA-16's window, no chunks) tells the windows from the chunk summaries.
CONTROLS = {"exact": ("eva16", ["model.eva_window_size=256", "model.eva_overlap=false", "model.eva_num_chunks=0"]),
            "local": ("eva16", ["model.eva_window_size=2", "model.eva_num_chunks=0"])}
# lm and mlm rows at sample scale: scripts/long_context.py's row of the same attention
SAMPLE_ROWS = {"lm": {"softmax_16l": "softmax", "eva_16l": "eva", "elu_16l": "elu", "rfa_16l": "rfa", "t2r_16l": "t2r"},
               "mlm": {f"{name}_2048": name for name in ("softmax", "eva", "local", "performer", "linformer", "lara",
                                                         "reformer", "combiner", "long_short")}}
