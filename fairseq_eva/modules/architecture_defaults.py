"""What an architecture sets of EVA: the paper's window, chunks and relative position bias of its model, one value
each (every other option takes its mechanism's declared default). As fairseq's architecture functions do, a value
given is kept."""

from fairseq.utils import safe_getattr


def eva_defaults(args, window_size, overlap, num_chunks, chunk_size, rpe=True):
    """The window, chunks and bias that the command line left unset. A non-zero chunk size given on the command line turns
    the architecture's default number of chunks off (and the other way round), since only one of the two may be set."""
    args.eva_window_size = safe_getattr(args, "eva_window_size", window_size)
    args.eva_overlap = safe_getattr(args, "eva_overlap", overlap)
    args.eva_rpe = safe_getattr(args, "eva_rpe", rpe)
    user_chunks = safe_getattr(args, "eva_num_chunks", None)
    user_size = safe_getattr(args, "eva_chunk_size", None)
    if user_chunks is None:
        args.eva_num_chunks = 0 if user_size else num_chunks
    if user_size is None:
        args.eva_chunk_size = 0 if user_chunks else chunk_size


def eva_decoder_defaults(args, window_size, chunk_size, overlap):
    """The translation decoder's causal EVA (--decoder-attention eva)."""
    args.eva_decoder_window_size = safe_getattr(args, "eva_decoder_window_size", window_size)
    args.eva_decoder_chunk_size = safe_getattr(args, "eva_decoder_chunk_size", chunk_size)
    args.eva_decoder_overlap = safe_getattr(args, "eva_decoder_overlap", overlap)
