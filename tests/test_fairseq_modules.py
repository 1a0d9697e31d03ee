"""Unit tests of the fairseq-facing modules (no subprocess): the MultiheadAttention adapter, the EVA
layers inside fairseq's decoder (incremental decoding, beam reordering), the options and their
build-time checks, padding invariance of the translation model."""

import argparse
import re
import types

import pytest
import torch

pytest.importorskip("fairseq")

from fairseq import options  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.modules import MultiheadAttention  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import fairseq_eva.plugin  # noqa: E402,F401  (registers the models)
from fairseq_eva.attention import EVAAttention  # noqa: E402
from fairseq_eva.models.roberta_eva import RobertaEVAModel  # noqa: E402
from fairseq_eva.models.transformer_eva import TransformerEVAModel  # noqa: E402
from fairseq_eva.models.transformer_lm_eva import TransformerLanguageModelEVA  # noqa: E402
from fairseq_eva.modules import EVAMultiheadAttention, EVAOptionError, eva_bool  # noqa: E402
from fairseq_eva.modules.hydra_keys import check_model_keys, known_model_keys  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def make_dictionary(n=60):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}")
    d.pad_to_multiple_(8)
    return d


def fake_task(dictionary):
    return types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary, max_positions=lambda: 128)


def parse(task, arch, *extra):
    """Parse a fairseq-train command line (architecture defaults applied as in fairseq-train)."""
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, ["/nonexistent", "--task", task, "--arch", arch, *extra])


def build(model_cls, task, arch, *extra, dictionary=None):
    torch.manual_seed(0)
    args = parse(task, arch, *extra)
    model = model_cls.build_model(args, fake_task(dictionary or make_dictionary()))
    return model.eval()


def tokens(batch, length, dictionary, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(dictionary.nspecial, len(dictionary) - 4, (batch, length), generator=g)


# ------------------------------------------------------------------ the adapter


@pytest.mark.parametrize("causal", [False, True])
def test_adapter_is_time_major_core(causal):
    torch.manual_seed(0)
    kwargs = dict(causal=causal, window_size=4, overlap=not causal, chunk_size=2 if causal else 0,
                  num_chunks=0 if causal else 3)
    adapter = EVAMultiheadAttention(32, 4, **kwargs).eval()
    core = EVAAttention(32, 4, **kwargs).eval()
    core.load_state_dict(adapter.state_dict())
    T, B = 13, 3
    x = torch.randn(T, B, 32)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, -4:] = True  # right padding
    if not causal:
        pad[2, :5] = True  # left padding, as fairseq pads sources
    out, weights = adapter(x, x, x, key_padding_mask=pad, need_weights=True)
    assert weights is None and out.shape == (T, B, 32)
    ref = core(x.transpose(0, 1), key_padding_mask=pad).transpose(0, 1)
    torch.testing.assert_close(out, ref)


def test_adapter_accepts_only_the_future_mask():
    T = 9
    causal = EVAMultiheadAttention(16, 2, causal=True, window_size=4, chunk_size=2).eval()
    x = torch.randn(T, 2, 16)
    future = torch.triu(torch.full((T, T), float("-inf")), 1)
    out, _ = causal(x, x, x, attn_mask=future)
    torch.testing.assert_close(out, causal(x, x, x)[0])  # causality is built in
    causal(x, x, x, attn_mask=torch.ones(T, T, dtype=torch.bool).triu(1))  # bool form
    with pytest.raises(ValueError, match="future mask"):
        causal(x, x, x, attn_mask=torch.zeros(T, T))  # no masking at all: not what EVA computes
    with pytest.raises(ValueError, match="future mask"):
        causal(x, x, x, attn_mask=torch.triu(torch.full((T, T), float("-inf")), 2))
    bidirectional = EVAMultiheadAttention(16, 2, window_size=4, num_chunks=2)
    with pytest.raises(ValueError, match="attn_mask"):
        bidirectional(x, x, x, attn_mask=future)
    with pytest.raises(ValueError, match="self-attention only"):
        bidirectional(x, torch.randn(5, 2, 16), torch.randn(5, 2, 16))


# ------------------------------------------------------------------ decoders: incremental == full


def incremental(decoder, toks, encoder_out=None, reorder_at=None, new_order=None):
    """Feed tokens one at a time through fairseq's decoder; optionally reorder the state (beam search:
    the rows are beams of one sentence, so the encoder output needs no reordering)."""
    state = {}
    outs = []
    for t in range(toks.size(1)):
        if t == reorder_at:
            decoder.reorder_incremental_state_scripting(state, new_order)
        out, _ = decoder(toks[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        outs.append(out[:, -1])
    return torch.stack(outs, 1)


@pytest.mark.parametrize("overlap", ["false", "true"])
def test_lm_decoder_incremental_equals_full_forward(overlap):
    d = make_dictionary()
    model = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_tiny",
                  "--eva-window-size", "8", "--eva-chunk-size", "2", "--eva-overlap", overlap,
                  "--tokens-per-sample", "64", dictionary=d)
    attn = model.decoder.layers[0].self_attn
    assert isinstance(attn, EVAMultiheadAttention) and attn.causal and attn.overlap == (overlap == "true")
    toks = tokens(2, 37, d)  # several blocks and chunks
    with torch.no_grad():
        full, _ = model.decoder(toks)
        step = incremental(model.decoder, toks)
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-4)


def test_lm_reorder_incremental_state():
    d = make_dictionary()
    model = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_tiny",
                  "--eva-window-size", "4", "--eva-chunk-size", "2", "--tokens-per-sample", "64", dictionary=d)
    toks = tokens(3, 23, d)
    new_order = torch.tensor([2, 0, 0])
    cut = 11  # inside the third block, after chunks were summarised
    # after reordering, row i continues the prefix of row new_order[i] with its own suffix (fairseq's
    # decoder only reads the last token of prev_output_tokens when decoding incrementally)
    expected_toks = torch.cat([toks[new_order, :cut], toks[:, cut:]], 1)
    with torch.no_grad():
        full, _ = model.decoder(expected_toks)
        step = incremental(model.decoder, toks, reorder_at=cut, new_order=new_order)
    torch.testing.assert_close(step[:, cut:], full[:, cut:], atol=1e-5, rtol=1e-4)


def test_translation_decoder_with_causal_eva_incremental_equals_full_forward():
    d = make_dictionary()
    model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", "--decoder-attention", "eva",
                  "--eva-decoder-window-size", "4", "--eva-decoder-chunk-size", "2", "--eva-decoder-overlap", "true",
                  dictionary=d)
    assert isinstance(model.decoder.layers[0].self_attn, EVAMultiheadAttention)
    assert isinstance(model.decoder.layers[0].encoder_attn, MultiheadAttention)
    src = tokens(2, 15, d, seed=1)
    src[1, :4] = d.pad()  # left-padded source
    tgt = tokens(2, 19, d, seed=2)
    beams = src[:1].expand(2, -1)  # two beams of one sentence: beam search reorders within a sentence
    new_order, cut = torch.tensor([1, 1]), 9
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=(src != d.pad()).sum(1))
        full, _ = model.decoder(tgt, encoder_out=enc)
        step = incremental(model.decoder, tgt, encoder_out=enc)
        enc = model.encoder(beams, src_lengths=(beams != d.pad()).sum(1))
        reordered = incremental(model.decoder, tgt, encoder_out=enc, reorder_at=cut, new_order=new_order)
        expected, _ = model.decoder(torch.cat([tgt[new_order, :cut], tgt[:, cut:]], 1), encoder_out=enc)
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(reordered[:, cut:], expected[:, cut:], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------ models, options, defaults


def test_arch_defaults_and_bool_options():
    wmt = parse("translation", "transformer_eva_wmt_en_de")
    assert (wmt.encoder_attention, wmt.decoder_attention) == ("eva", "softmax")
    assert (wmt.eva_window_size, wmt.eva_overlap, wmt.eva_num_chunks, wmt.eva_chunk_size) == (16, True, 8, 0)
    assert wmt.eva_rpe is True and wmt.encoder_layers == 6 and wmt.encoder_embed_dim == 512
    off = parse("translation", "transformer_eva_wmt_en_de", "--eva-overlap", "false", "--eva-rpe", "False",
                "--eva-chunk-size", "4")
    assert off.eva_overlap is False and off.eva_rpe is False
    assert (off.eva_num_chunks, off.eva_chunk_size) == (0, 4)  # a chunk size turns the default C off
    lm = parse("language_modeling", "transformer_lm_eva_wiki103")
    assert (lm.decoder_attention, lm.eva_window_size, lm.eva_chunk_size, lm.eva_num_chunks) == ("eva", 128, 8, 0)
    assert lm.decoder_layers == 16 and lm.adaptive_input and lm.decoder_embed_dim == 1024
    lm32 = parse("language_modeling", "transformer_lm_eva_wiki103_32l")
    assert lm32.decoder_layers == 32 and lm32.decoder_layerdrop == 0.2
    mlm = parse("masked_lm", "roberta_eva")
    assert (mlm.eva_window_size, mlm.eva_num_chunks, mlm.max_positions) == (256, 128, 2048)
    assert mlm.encoder_normalize_before and not mlm.layernorm_embedding  # roberta_prenorm
    assert parse("masked_lm", "roberta_eva_4096").max_positions == 4096
    assert eva_bool("yes") is True and eva_bool("0") is False
    with pytest.raises(argparse.ArgumentTypeError):
        eva_bool("maybe")


def test_softmax_option_gives_fairseqs_layers_with_the_same_names():
    d = make_dictionary()
    eva = build(TransformerEVAModel, "translation", "transformer_eva_tiny", dictionary=d)
    soft = build(TransformerEVAModel, "translation", "transformer_eva_tiny", "--encoder-attention", "softmax",
                 dictionary=d)
    assert isinstance(eva.encoder.layers[0].self_attn, EVAMultiheadAttention)
    assert type(soft.encoder.layers[0].self_attn) is MultiheadAttention
    assert type(eva.decoder.layers[0].self_attn) is MultiheadAttention  # decoder default: softmax
    eva_keys, soft_keys = set(eva.state_dict()), set(soft.state_dict())
    assert soft_keys <= eva_keys  # EVA only adds (chunk projections, relative bias)
    assert all(".self_attn.chunks." in k or ".self_attn.rpe." in k for k in eva_keys - soft_keys)
    lm = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_tiny", "--decoder-attention",
               "softmax", "--tokens-per-sample", "64", dictionary=d)
    assert type(lm.decoder.layers[0].self_attn) is MultiheadAttention
    mlm = build(RobertaEVAModel, "masked_lm", "roberta_eva_tiny", "--encoder-attention", "softmax", dictionary=d)
    assert type(mlm.encoder.sentence_encoder.layers[0].self_attn) is MultiheadAttention


def test_lm_rows_differ_only_in_attention():
    """transformer_lm_eva with --decoder-attention softmax is the softmax row of an EVA comparison: the same
    pre-norm decoder (final LayerNorm, embeddings of --decoder-embed-dim), and with one window over the
    whole sequence and neither chunks nor relative bias, EVA given the same weights computes the same."""
    d = make_dictionary()
    size = ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2",
            "--decoder-layers", "2", "--tokens-per-sample", "48"]
    soft = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva", *size,
                 "--decoder-attention", "softmax", dictionary=d)
    eva = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva", *size,
                "--eva-window-size", "48", "--eva-chunk-size", "0", "--eva-rpe", "false", dictionary=d)
    assert soft.decoder.layers[0].normalize_before and soft.decoder.layer_norm is not None
    assert soft.decoder.embed_tokens.embedding_dim == 32 and soft.decoder.project_in_dim is None
    assert type(soft.decoder.layers[0].self_attn) is MultiheadAttention
    assert isinstance(eva.decoder.layers[0].self_attn, EVAMultiheadAttention)
    assert set(soft.state_dict()) == set(eva.state_dict())
    eva.load_state_dict(soft.state_dict())
    src = tokens(3, 48, d)
    with torch.no_grad():
        expected, got = soft(src)[0], eva(src)[0]
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


@pytest.mark.parametrize(
    "model_cls, task, arch, extra, expected",
    [
        (TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_wiki103", ["--eva-chunk-size", "5"],
         "--eva-chunk-size (5) must divide --eva-window-size (128)"),
        (TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_tiny", ["--eva-num-chunks", "4"],
         "--eva-num-chunks is for bidirectional EVA; causal EVA takes --eva-chunk-size"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny", ["--eva-num-chunks", "4", "--eva-chunk-size", "2"],
         "set --eva-num-chunks (4) or --eva-chunk-size (2), not both"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny", ["--eva-window-size", "5"],
         "--eva-overlap needs an even --eva-window-size > 0"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny",
         ["--decoder-attention", "eva", "--eva-decoder-chunk-size", "3"],
         "--eva-decoder-chunk-size (3) must divide --eva-decoder-window-size (4)"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny", ["--eva-rpe-max-distance", "3"],
         "--eva-rpe-max-distance (3) is too small"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny", ["--eva-rpe", "false", "--eva-rpe-type", "table"],
         "--eva-rpe-type table is a bias inside the window: it needs --eva-rpe true and --eva-window-size > 0"),
        (TransformerEVAModel, "translation", "transformer_eva_tiny", ["--attention-dropout", "1.5"],
         "--attention-dropout must be in [0, 1)"),
        (RobertaEVAModel, "masked_lm", "roberta_eva_tiny", ["--encoder-attention-heads", "5"],
         "--encoder-attention-heads (5) must divide --encoder-embed-dim (64)"),
        (RobertaEVAModel, "masked_lm", "roberta_eva_tiny", ["--eva-proposal", "mlp"], "--eva-proposal"),
    ],
)
def test_bad_options_are_refused_at_build_time_naming_the_option(model_cls, task, arch, extra, expected):
    if "--eva-proposal" in extra:  # argparse refuses it already, naming the option
        with pytest.raises(SystemExit):
            parse(task, arch, *extra)
        return
    with pytest.raises(EVAOptionError) as error:  # a ValueError
        build(model_cls, task, arch, *extra)
    assert expected in str(error.value)
    # the same model config as fairseq-hydra-train gives it (the model's keys only): the options are named as
    # its keys
    args = vars(parse(task, arch, *extra))
    model_keys = known_model_keys(model_cls)
    with pytest.raises(EVAOptionError) as error:
        model_cls.build_model(OmegaConf.create({k: v for k, v in args.items() if k in model_keys and (
            v is None or isinstance(v, (bool, int, float, str)))}), fake_task(make_dictionary()))
    hydra_names = re.sub(r"--([a-z-]+)", lambda m: "model." + m.group(1).replace("-", "_"), expected)
    assert hydra_names in str(error.value) and "--" not in str(error.value)


def test_unknown_model_keys_are_refused_naming_the_closest():
    """fairseq-hydra-train hands a legacy model its `model.` keys as a free dict: a key that the model does not
    read stops the build (tests/test_fairseq_lm.py runs the real tool)."""
    lm = OmegaConf.create({"_name": "transformer_lm_eva_tiny", "eva_window_size": 8, "decoder_layers": 2})
    check_model_keys(lm, TransformerLanguageModelEVA)  # known keys pass
    with pytest.raises(EVAOptionError, match=re.escape(
            "model.eva_windw_size is not an option of transformer_lm_eva_tiny (did you mean model.eva_window_size?)")):
        check_model_keys(OmegaConf.merge(lm, {"eva_windw_size": 8}), TransformerLanguageModelEVA)
    # an option of the translation model that the language model does not use
    with pytest.raises(EVAOptionError, match=r"^model\.eva_decoder_overlap is not an option of transformer_lm_eva_tiny"):
        check_model_keys(OmegaConf.merge(lm, {"eva_decoder_overlap": True}), TransformerLanguageModelEVA)
    check_model_keys(OmegaConf.create({"_name": "transformer_eva_tiny", "eva_decoder_overlap": True}), TransformerEVAModel)
    with pytest.raises(EVAOptionError, match=r"^model\.zzz is not an option of transformer_lm_eva_tiny$"):
        check_model_keys(OmegaConf.merge(lm, {"zzz": 1}), TransformerLanguageModelEVA)


def test_known_model_keys_follow_the_models_options():
    """A new option is known as soon as a model's add_args adds it: the check is driven by the parser."""

    class WithNewOption(TransformerLanguageModelEVA):
        @classmethod
        def add_args(cls, parser):
            super().add_args(parser)
            parser.add_argument("--eva-new-option")

    cfg = OmegaConf.create({"_name": "transformer_lm_eva_tiny", "eva_new_option": "x"})
    check_model_keys(cfg, WithNewOption)
    with pytest.raises(EVAOptionError, match="model.eva_new_option is not an option"):
        check_model_keys(cfg, TransformerLanguageModelEVA)
    # what the architectures set is known too (fairseq runs them on the config before the build)
    assert "add_bos_token" in known_model_keys(TransformerLanguageModelEVA)


def test_attention_kind_is_checked_for_hand_written_configs():
    args = parse("translation", "transformer_eva_tiny")
    args.encoder_attention = "linear"
    with pytest.raises(ValueError, match="--encoder-attention must be one of eva, softmax"):
        TransformerEVAModel.build_model(args, fake_task(make_dictionary()))


def test_translation_encoder_output_does_not_depend_on_the_batch():
    d = make_dictionary()
    model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", dictionary=d)
    sentence = tokens(1, 11, d, seed=3)
    longer = tokens(2, 23, d, seed=4)
    batch = torch.full((3, 23), d.pad())
    batch[:2] = longer
    batch[2, -11:] = sentence[0]  # left-padded, as fairseq batches sources
    with torch.no_grad():
        alone = model.encoder(sentence, src_lengths=torch.tensor([11]))["encoder_out"][0][:, 0]
        batched = model.encoder(batch, src_lengths=(batch != d.pad()).sum(1))["encoder_out"][0][-11:, 2]
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-4)


def test_paper_architectures_build_and_run_at_small_width():
    """The adaptive-input Wikitext-103 LM (16 and 32 layers with LayerDrop) and RoBERTa pre-norm with EVA:
    the architectures' structure at a small width and vocabulary."""
    d = make_dictionary(120)
    small = ["--decoder-embed-dim", "32", "--decoder-input-dim", "32", "--decoder-output-dim", "32",
             "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4", "--adaptive-input-cutoff", "40,80",
             "--adaptive-softmax-cutoff", "40,80", "--tokens-per-sample", "64", "--eva-window-size", "16",
             "--eva-chunk-size", "4"]
    for arch, layers in (("transformer_lm_eva_wiki103", 16), ("transformer_lm_eva_wiki103_32l", 32)):
        model = build(TransformerLanguageModelEVA, "language_modeling", arch, *small, dictionary=d)
        assert len(model.decoder.layers) == layers
        assert type(model.decoder.embed_tokens).__name__ == "AdaptiveInput"
        assert model.decoder.adaptive_softmax is not None
        model.train()  # LayerDrop (32 layers) is active in training only
        out, _ = model(tokens(2, 40, d))
        assert torch.isfinite(out).all()
    mlm = build(RobertaEVAModel, "masked_lm", "roberta_eva", "--encoder-layers", "2", "--encoder-embed-dim", "32",
                "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4", "--eva-window-size", "8",
                "--eva-num-chunks", "4", dictionary=d)
    attn = mlm.encoder.sentence_encoder.layers[0].self_attn
    assert isinstance(attn, EVAMultiheadAttention) and not attn.causal and attn.num_chunks == 4
    assert mlm.encoder.sentence_encoder.layer_norm is not None  # pre-norm: a final layer norm
    src = tokens(2, 30, d)
    src[1, 20:] = d.pad()
    out, _ = mlm(src)
    assert out.shape == (2, 30, len(d)) and torch.isfinite(out).all()


def test_the_core_imports_without_fairseq():
    import subprocess
    import sys

    code = ("import sys; sys.modules['fairseq'] = None\n"  # fairseq not importable
            "import fairseq_eva, torch\n"
            "assert 'fairseq_eva.models' not in sys.modules\n"
            "y = fairseq_eva.EVAAttention(16, 2, window_size=4, num_chunks=2)(torch.randn(1, 9, 16))\n"
            "print(tuple(y.shape))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1, 9, 16)"


@pytest.mark.parametrize("n, max_tokens", [(13, 1000), (500, 64), (16, 1000)])
def test_fairseqs_batching_keeps_every_sentence(n, max_tokens):
    """fairseq 0.12.3 drops a last batch whose size is not a multiple of --required-batch-size-multiple;
    with fairseq_eva imported every index is in exactly one batch, in order, within max_tokens."""
    import numpy as np
    from fairseq.data import data_utils

    lengths = np.random.RandomState(n).randint(1, 9, n).astype(np.int64)
    indices = np.argsort(lengths, kind="stable").astype(np.int64)
    batches = data_utils.batch_by_size(indices, lambda i: lengths[i], max_tokens=max_tokens,
                                       required_batch_size_multiple=8, num_tokens_vec=lengths[indices])
    assert np.array_equal(np.concatenate(batches), indices)
    assert all(len(b) * lengths[b].max() <= max_tokens for b in batches)
    assert all(len(b) % 8 == 0 for b in batches[:-1])


def test_eva_omega_noise_reaches_every_eva_self_attention():
    """--eva-omega-noise false turns the training sample off in every EVA layer with chunks; the default keeps
    the paper's sampled omega; a value that is not a boolean is refused by argparse."""
    d = make_dictionary()
    extra = ["--decoder-attention", "eva"]
    for flag, expected in (([], True), (["--eva-omega-noise", "false"], False)):
        model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, *flag, dictionary=d)
        layers = [m for m in model.modules() if isinstance(m, EVAAttention) and m.chunks is not None]
        assert layers and {m.chunks.omega_noise for m in layers} == {expected}
    with pytest.raises(SystemExit):
        parse("translation", "transformer_eva_tiny", "--eva-omega-noise", "maybe")


def test_eva_proposal_mean_reaches_every_eva_self_attention():
    """--eva-proposal-mean average (the authors' bidirectional code: mu halved) reaches every EVA layer with chunks,
    encoder and decoder; the default is the paper's sum; another value is refused by argparse."""
    d = make_dictionary()
    extra = ["--decoder-attention", "eva"]
    for flag, expected in (([], "sum"), (["--eva-proposal-mean", "average"], "average")):
        model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, *flag, dictionary=d)
        layers = [m for m in model.modules() if isinstance(m, EVAAttention) and m.chunks is not None]
        assert {m.causal for m in layers} == {False, True}
        assert {m.chunks.proposal_mean for m in layers} == {expected}
    with pytest.raises(SystemExit):
        parse("translation", "transformer_eva_tiny", "--eva-proposal-mean", "half")


@pytest.mark.parametrize("model_cls,task,arch", [(TransformerEVAModel, "translation", "transformer_eva_tiny"),
                                                (RobertaEVAModel, "masked_lm", "roberta_eva_tiny")])
def test_eva_chunk_logit_offset_reaches_every_eva_self_attention(model_cls, task, arch):
    """--eva-chunk-logit-offset B lowers every EVA layer's relative position bias by B (the default, 0, leaves it
    about 0), also after RoBERTa's initialisation redraws every embedding table; with --eva-rpe false nothing
    can carry it and the model is refused, naming both options."""
    d = make_dictionary()
    extra = ["--decoder-attention", "eva"] if task == "translation" else []
    for flag, mean in (([], 0.0), (["--eva-chunk-logit-offset", "2.5"], -2.5)):
        model = build(model_cls, task, arch, *extra, *flag, dictionary=d)
        layers = [m for m in model.modules() if isinstance(m, EVAAttention)]
        assert len(layers) >= 2
        for m in layers:
            assert abs(m.rpe(torch.arange(-8, 9)).mean().item() - mean) < 0.05
    with pytest.raises(EVAOptionError, match="--eva-chunk-logit-offset .* needs chunks .*--eva-rpe true"):
        build(model_cls, task, arch, "--eva-chunk-logit-offset", "1", "--eva-rpe", "false", dictionary=d)


def test_eva_rpe_type_table_reaches_every_eva_self_attention():
    """--eva-rpe-type table (hydra: model.eva_rpe_type) gives every EVA layer, encoder and decoder, a per-place bias
    of w x width x H parameters; the default is the buckets; another value is refused by argparse. fairseq's
    decoder decodes with it as its full forward computes."""
    from fairseq_eva.attention import PlaceBias, RelativePositionBias

    d = make_dictionary()
    extra = ["--decoder-attention", "eva"]
    default = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, dictionary=d)
    assert {type(m.rpe) for m in default.modules() if isinstance(m, EVAAttention)} == {RelativePositionBias}
    model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, "--eva-rpe-type", "table", dictionary=d)
    layers = [m for m in model.modules() if isinstance(m, EVAAttention)]
    assert len(layers) == 4 and {type(m.rpe) for m in layers} == {PlaceBias}
    for m in layers:  # tiny: 4 heads; encoder window 4 with overlap (width 8), decoder window 4 (width 4)
        width = 2 * m.window_size if m.overlap else m.window_size
        assert sum(p.numel() for p in m.rpe.parameters()) == m.window_size * width * m.num_heads == (128 if m.overlap else 64)
    assert "eva_rpe_type" in known_model_keys(TransformerEVAModel)
    with pytest.raises(SystemExit):
        parse("translation", "transformer_eva_tiny", "--eva-rpe-type", "offsets")
    lm = build(TransformerLanguageModelEVA, "language_modeling", "transformer_lm_eva_tiny", "--eva-window-size", "8",
               "--eva-chunk-size", "2", "--eva-overlap", "true", "--eva-rpe-type", "table", "--tokens-per-sample", "64",
               dictionary=d)
    assert isinstance(lm.decoder.layers[0].self_attn.rpe, PlaceBias)
    toks = tokens(2, 21, d)
    with torch.no_grad():
        torch.testing.assert_close(incremental(lm.decoder, toks), lm.decoder(toks)[0], atol=1e-5, rtol=1e-4)


def test_a_pinned_triton_kernel_is_refused_with_a_per_place_table():
    """The Triton kernel takes the bias by offset only: pinned with --eva-rpe-type table, the model is refused when
    it is built, saying so and naming the kernels that can run it."""
    with pytest.raises(EVAOptionError, match=r"--eva-kernel triton cannot run on this machine \(.*it takes the relative "
                                              r"position bias by offset only, not a per-place table \(--eva-rpe-type "
                                              r"table\).*\): use one of auto, blockwise, "):
        build(RobertaEVAModel, "masked_lm", "roberta_eva_tiny", "--eva-kernel", "triton", "--eva-rpe-type", "table")


def test_eva_kernel_pins_the_kernel_of_every_eva_self_attention():
    """--eva-kernel (hydra: model.eva_kernel) reaches every EVA self-attention, encoder and decoder; the default
    is auto; a pinned kernel computes the model (here the blockwise kernel, on the same weights as auto, to
    float32 rounding); an unknown name is refused by argparse."""
    d = make_dictionary()
    extra = ["--decoder-attention", "eva"]
    auto = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, dictionary=d)
    pinned = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, "--eva-kernel", "blockwise", dictionary=d)
    layers = [m for m in pinned.modules() if isinstance(m, EVAAttention)]
    assert len(layers) == 4 and {m.causal for m in layers} == {False, True}
    assert {m.kernel for m in layers} == {"blockwise"}
    assert {m.kernel for m in auto.modules() if isinstance(m, EVAAttention)} == {"auto"}
    pinned.load_state_dict(auto.state_dict())
    src, prev = tokens(2, 21, d), tokens(2, 17, d, seed=1)
    with torch.no_grad():
        expected = auto(src, torch.tensor([21, 21]), prev)[0]
        got = pinned(src, torch.tensor([21, 21]), prev)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    hydra = vars(parse("translation", "transformer_eva_tiny", *extra, "--eva-kernel", "fused"))
    known = known_model_keys(TransformerEVAModel)  # fairseq-hydra-train gives a model its own keys only
    model = TransformerEVAModel.build_model(OmegaConf.create({k: v for k, v in hydra.items() if k in known and (
        v is None or isinstance(v, (bool, int, float, str)))}), fake_task(d))
    assert {m.kernel for m in model.modules() if isinstance(m, EVAAttention)} == {"fused"}
    with pytest.raises(SystemExit):
        parse("translation", "transformer_eva_tiny", "--eva-kernel", "flash")


def test_a_pinned_kernel_that_cannot_train_is_refused_when_training_begins():
    """torch's fused CPU kernel evaluates a model with a trainable RPE but cannot train it: model.train() (which
    fairseq's trainer calls before its first step) refuses it in one EVAOptionError; without the RPE it trains."""
    d = make_dictionary()
    model = build(TransformerEVAModel, "translation", "transformer_eva_tiny", "--eva-kernel", "fused", dictionary=d)
    model.eval()
    with pytest.raises(EVAOptionError, match=r"--eva-kernel fused cannot train this model \(torch's fused CPU kernel gives "
                                              r"no gradient to a trainable relative position bias.*train with one of auto, "):
        model.train()
    frozen = build(TransformerEVAModel, "translation", "transformer_eva_tiny", "--eva-kernel", "fused", "--eva-rpe",
                   "false", "--attention-dropout", "0", dictionary=d)
    frozen.train()
    assert frozen.training


def test_eva_compile_reaches_every_eva_self_attention():
    """--eva-compile (hydra: model.eva_compile) sets each EVA self-attention's compile mode; the default is none
    (eager); an unknown mode is refused by argparse."""
    d = make_dictionary()
    extra = ["--decoder-attention", "eva"]
    default = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, dictionary=d)
    assert {m.compile for m in default.modules() if isinstance(m, EVAAttention)} == {"none"}
    compiled = build(TransformerEVAModel, "translation", "transformer_eva_tiny", *extra, "--eva-compile", "default",
                     dictionary=d)
    layers = [m for m in compiled.modules() if isinstance(m, EVAAttention)]
    assert len(layers) == 4 and {m.compile for m in layers} == {"default"}
    assert "eva_compile" in known_model_keys(TransformerEVAModel)
    with pytest.raises(SystemExit):
        parse("translation", "transformer_eva_tiny", "--eva-compile", "max-autotune")
