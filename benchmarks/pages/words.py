"""How the pages write what several sections show: lists, spans of ratios, seconds, and mechanisms' names."""

from fairseq_eva.attention import registry

BASELINE_NAMES = {name: mechanism.display_name for name, mechanism in registry.MECHANISMS.items()}


def listed(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def ratio_span(ratios):
    low, high = f"{ratios[0]:.2f}", f"{ratios[-1]:.2f}"
    return f"{low}x" if low == high else f"{low}-{high}x"


def seconds(x):
    return f"{x:.2f} s" if x >= 10 else f"{x:.3f} s"
