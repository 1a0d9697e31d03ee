"""Adding a mechanism touches its own module and nothing of the plugin: a mechanism declared and registered outside
fairseq_eva (here, a user directory written by this test that imports the plugin) is a choice of every model, with
its own generated options: fairseq-train trains it, --help lists its options, the checkpoint records them, a count
beyond the machine's memory is refused by its declared estimate, an option of it with another mechanism is refused,
and docs/usage.md's table would list it. All fairseq jobs run in one process."""

import pytest

pytest.importorskip("fairseq")

import torch  # noqa: E402

from fairseq_helpers import last_line, lm_data, run_jobs  # noqa: E402

# Softmax attention whose every query also sees `slots` keys of zero with zero values (the weights then sum to less
# than one, as an attention sink lets them), at a fixed temperature: the whole mechanism, declaration included.
SINK = '''
import torch
import torch.nn.functional as F

import fairseq_eva.plugin  # noqa: F401  (the plugin's models)
from fairseq_eva.attention import registry
from fairseq_eva.attention.base import key_mask
from fairseq_eva.attention.layout import additive_mask
from fairseq_eva.attention.mechanism import BIDIRECTIONAL, CAUSAL, Mechanism, Memory, Option
from fairseq_eva.attention.softmax import SoftmaxAttention


class SinkAttention(SoftmaxAttention):
    def __init__(self, embed_dim, num_heads, causal=False, dropout=0.0, slots=1, temperature=1.0):
        if not isinstance(slots, int) or slots < 0:
            raise ValueError(f"slots must be an integer >= 0, got {slots!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout)
        self.slots, self.scale = slots, self.scale / temperature

    def _attend(self, q, k, v, hidden):
        B, H, _, d = q.shape
        zeros = q.new_zeros(B, H, self.slots, d)
        hidden = F.pad(hidden, (self.slots, 0))
        p = self.dropout.p if self.training else 0.0
        return F.scaled_dot_product_attention(q, torch.cat([zeros, k], 2), torch.cat([zeros, v], 2),
                                              attn_mask=additive_mask(hidden, q.dtype), dropout_p=p, scale=self.scale)

    def attend(self, x, q, k, v, lengths):
        B, H, N, _ = q.shape
        hidden = torch.zeros(B, 1, N, N, dtype=torch.bool, device=q.device)
        if lengths is not None:
            hidden = hidden | ~key_mask(lengths, N, q.device)[:, None, None, :]
        if self.causal:
            hidden = hidden | torch.ones(N, N, dtype=torch.bool, device=q.device).triu(1)
        return self._attend(q, k, v, hidden)

    def step(self, x, q, k, v, cache):
        if "k" in cache:
            k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        cache["k"], cache["v"] = k, v
        return self._attend(q, k, v, torch.zeros(1, 1, 1, k.size(2), dtype=torch.bool, device=q.device))


def sink_cost(N, embed_dim, num_heads, causal=False, slots=1, **_):
    """2 (N + S) D. Softmax's, over S more keys."""
    return 2 * (N + slots) * embed_dim


registry.register(Mechanism(
    "sink", "sink_plugin:SinkAttention", (BIDIRECTIONAL, CAUSAL),
    (Option("slots", int, 1, "number S of zero keys every query also sees"),
     Option("temperature", float, 1.0, "divides every logit")),
    sink_cost, "softmax attention with S attention-sink slots", title="Sink",
    memory=Memory(("slots",), lambda B, N, H, d, o: 2 * B * H * N * (N + o["slots"]), 4)))
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = lm_data(tmp_path_factory)["bin"]
    root = tmp_path_factory.mktemp("new_mechanism")
    (root / "sink_plugin").mkdir()
    (root / "sink_plugin" / "__init__.py").write_text(SINK, encoding="utf-8")
    plugin = str(root / "sink_plugin")
    train = ("train", data, "--user-dir", plugin, "--cpu", "--task", "language_modeling", "--arch",
             "transformer_lm_eva_tiny", "--tokens-per-sample", 64, "--max-tokens", 512, "--optimizer", "adam",
             "--lr", "1e-3", "--max-update", 3, "--no-epoch-checkpoints")
    jobs = {
        "train": (*train, "--decoder-attention", "sink", "--sink-slots", 2, "--save-dir", root / "sink"),
        "help": {"code": f"import sys; from fairseq_cli import train; sys.argv = ['fairseq-train', '--help', "
                         f"'--user-dir', {plugin!r}, '--arch', 'transformer_lm_eva_tiny']; train.cli_main()"},
        "memory": (*train, "--decoder-attention", "sink", "--sink-slots", 10**8, "--save-dir", root / "refused"),
        "unused": (*train, "--decoder-attention", "elu", "--sink-slots", 3, "--save-dir", root / "refused"),
    }
    return {"root": root, **run_jobs(jobs, cwd=root)}


def test_it_trains_with_its_own_options_and_the_checkpoint_records_them(runs):
    status, log = runs["train"]
    assert status == 0, log[-3000:]
    assert "SinkMultiheadAttention" in log  # fairseq prints the model: the registry built the layer
    state = torch.load(runs["root"] / "sink" / "checkpoint_last.pt", weights_only=False)
    model = state["cfg"]["model"]
    assert (model.decoder_attention, model.sink_slots, model.sink_temperature) == ("sink", 2, 1.0)


def test_help_lists_its_options_with_their_help_texts(runs):
    status, log = runs["help"]
    assert status == 0, log[-3000:]
    words = " ".join(log.split())  # argparse wraps the help texts
    assert "--sink-slots INT sink attention: number S of zero keys every query also sees (default 1)" in words
    assert "--sink-temperature FLOAT sink attention: divides every logit (default 1.0)" in words


def test_its_memory_estimate_refuses_a_count_beyond_the_machine(runs):
    line = last_line(runs["memory"])
    assert line.startswith("fairseq-train: error: --sink-slots 100000000 needs at least "), line
    assert line.endswith("give a smaller --sink-slots (or fewer tokens a batch)"), line


def test_its_option_with_another_mechanism_is_refused(runs):
    assert last_line(runs["unused"]) == (
        "fairseq-train: error: --sink-slots 3: no self-attention of this model uses it (--decoder-attention elu): "
        "leave it out, or choose the mechanism it configures")


def test_the_mechanisms_table_lists_it(tmp_path, monkeypatch):
    from fairseq_eva.attention import registry
    from fairseq_eva.modules.docs_tables import mechanism_table

    (tmp_path / "sink_plugin").mkdir()
    (tmp_path / "sink_plugin" / "__init__.py").write_text(SINK, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import sink_plugin  # noqa: F401

    try:
        assert ("| `sink`: softmax attention with S attention-sink slots | bidirectional, causal | `--sink-slots` (1), "
                "`--sink-temperature` (1.0) | 2 (N + S) D |") in mechanism_table()
        assert registry.get("sink").display_name == "Sink"
    finally:
        registry.MECHANISMS.pop("sink")
