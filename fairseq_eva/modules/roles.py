"""The self-attentions of the plugin's models (roles), and the model attribute of each option of a mechanism in a
role: `--performer-num-features` is `performer_num_features`, EVA's `--eva-window-size` is `eva_window_size` (and,
in the translation decoder, `eva_decoder_window_size`); fairseq-hydra-train spells them `model.eva_window_size`."""

ENCODER = "encoder"  # bidirectional (translation encoder, RoBERTa)
DECODER = "decoder"  # causal, in the translation decoder (its EVA has its own --eva-decoder-* options)
LM = "lm"  # causal, in the language model's decoder (the common options)

WHERE = {ENCODER: "encoder self-attention", DECODER: "decoder self-attention", LM: "language model self-attention"}

# The translation decoder's causal EVA has its own window, chunk size and overlap: the encoder's are the paper's
# bidirectional setting. Its help texts are those of these options.
OWN = {DECODER: {
    "window_size": ("eva_decoder_window_size", "causal EVA in the decoder (--decoder-attention eva): block size w"),
    "chunk_size": ("eva_decoder_chunk_size", "causal EVA in the decoder: chunk size, must divide the decoder window; "
                                             "0 = no chunks (block-local attention)"),
    "overlap": ("eva_decoder_overlap", "causal EVA in the decoder: E also takes the whole previous block (true/false)"),
}}
# options a role does not read: the translation decoder's causal EVA has chunks of a size, not a number of them
UNREAD = {DECODER: ("num_chunks",)}


def causal(role):
    return role != ENCODER


def side(role):
    """Whose sizes a role's attention has: the encoder's or the decoder's (encoder_embed_dim, ...)."""
    return "encoder" if role == ENCODER else "decoder"


def attribute(role, mechanism, option):
    """The model attribute that sets `option` (an Option) of `mechanism` in `role`."""
    own = OWN.get(role, {}).get(option.name)
    if own and mechanism.prefix == "eva":
        return own[0]
    return f"{mechanism.prefix}_{option.flag or option.name}"


def reads(role, option):
    """Whether `role` reads `option` (an Option) at all."""
    return option.name not in UNREAD.get(role, ())


def option_name(attribute, hydra):
    """How the user writes a model attribute: `model.eva_window_size` (hydra) or `--eva-window-size`."""
    return f"model.{attribute}" if hydra else "--" + attribute.replace("_", "-")
