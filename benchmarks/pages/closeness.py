"""How close EVA comes to softmax attention (approximation.json): its error by window and chunks, and against
the other mechanisms at equal cost."""

from benchmarks.pages import records
from benchmarks.pages.words import BASELINE_NAMES, listed


def approximation_grid(causal):
    """EVA's error against softmax attention on the model inputs: rows the window, columns C (bidirectional) or the
    chunk size (causal), from approximation.json."""

    def render():
        rows = [r for r in records.load("approximation.json")["results"]["model"]["rows"]
                if r["mechanism"] == "eva" and r["causal"] == causal]
        error = {(r["window"], r.get("chunk_size") if causal else r["chunks"]): r["error"] for r in rows}
        windows = sorted({r["window"] for r in rows})
        if causal:
            sizes = sorted({r["chunk_size"] for r in rows}, key=lambda s: (s != 0, -s))
            chunks = {r["chunk_size"]: r["chunks"] for r in rows}
            head = ["s = 0 (C = 0)"] + [f"{s} ({chunks[s]})" for s in sizes if s]
            lines = ["| causal, model inputs (columns: chunk size s, C = N / s) | " + " | ".join(head) + " |"]
            columns = sizes
        else:
            columns = sorted({r["chunks"] for r in rows})
            head = [f"C = {columns[0]}"] + [str(c) for c in columns[1:]]
            lines = ["| bidirectional, model inputs | " + " | ".join(head) + " |"]
        lines.append("|---" * (len(columns) + 1) + "|")
        for i, w in enumerate(windows):
            cells = [f"{error[w, c]:.3f}" if (w, c) in error else "-" for c in columns]
            lines.append(f"| {f'abs(E) = {w}' if i == 0 else w} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    return render


def approximation_equal_cost(inputs):
    def render():
        from benchmarks import approximation

        return approximation.markdown(records.load("approximation.json")["results"][inputs]["equal_cost"], inputs).strip()

    return render


def approximation_summary():
    """EVA against each mechanism of the equal-cost tables, one line an input set and direction: those it is closer
    to softmax attention than at every setting, those it is further than at every setting, and the rest."""
    def name(mechanism):
        return "Performer-ReLU" if mechanism == "performer-relu" else BASELINE_NAMES.get(mechanism, mechanism)

    lines = []
    for inputs, label in (("model", "the trained model's inputs"), ("random", "random inputs")):
        rows = records.load("approximation.json")["results"][inputs]["equal_cost"]
        for causal in (False, True):
            error = {(r["mechanism"], tuple(r["eva"].values())): r["error"] for r in rows if r["causal"] == causal}
            settings = sorted({s for m, s in error if m == "eva"})
            closer, further, between = [], [], []
            for mechanism in dict.fromkeys(m for m, _ in error if m != "eva"):
                ahead = [error["eva", s] < error[mechanism, s] for s in settings if (mechanism, s) in error]
                (closer if all(ahead) else further if not any(ahead) else between).append(name(mechanism))
            parts = [f"closer to softmax attention than {listed(closer)} at every setting of the table" if closer else "",
                     f"further than {listed(further)} at every setting" if further else "",
                     f"closer than {listed(between)} at some settings and further at others" if between else ""]
            lines.append(f"- {label}, {'causal' if causal else 'bidirectional'}: EVA is "
                         f"{'; '.join(p for p in parts if p)}.")
    return "\n".join(lines)


TABLES = {
    "approximation-bidirectional": approximation_grid(False),
    "approximation-causal": approximation_grid(True),
    "approximation-equal-cost-model": approximation_equal_cost("model"),
    "approximation-equal-cost-random": approximation_equal_cost("random"),
    "approximation-summary": approximation_summary,
}
