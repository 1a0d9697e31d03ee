"""EVA's joint-softmax kernels (kernels/) for the other mechanisms made of non-overlapping local blocks plus
summaries in one softmax (Combiner, Transformer-LS): each block of queries attends, in one softmax, to its own
block's keys and to a set of summaries (k~, beta), with the kernels' memory (nothing N x N), dropout and
relative position bias."""

import math

import torch
import torch.nn.functional as F

from .kernels import choose
from .layout import BlockLayout


def pad_to_blocks(t, window):
    """Zero positions after the N of a B x H x N x d tensor up to a multiple of `window`."""
    extra = math.ceil(t.size(2) / window) * window - t.size(2)
    return t if extra == 0 else F.pad(t.transpose(1, 2), (0, 0, 0, 0, 0, extra)).transpose(1, 2)


def joint_softmax(module, q, k, v, window, k_summary=None, beta=None, chunk_ok=None, lengths=None, rpe=None):
    """softmax([scale q_n.k_m + rpe(m - n) for m in n's block ; scale q_n.k~_c for shown c]) [V_block ; beta].

    q, k, v: B x H x N x d, N a multiple of `window`; k_summary, beta: B x H x C x d or None; chunk_ok: B x C,
    False hides a summary; lengths: B, keys at or after lengths[b] are hidden (None: all real); rpe: a
    relative_position.RelativePositionBias, a PlaceBias of window x window, or None. `module.dropout` is applied
    to the probabilities in training. A query that sees no key gets zeros."""
    layout = BlockLayout.bidirectional(window, False)
    dropout = module.dropout.p if module.training else 0.0
    table = None if rpe is None else rpe.table(layout, q.device)  # H x num_offsets, or H x window x window
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, k_summary, beta))
    bias_grad = table is not None and table.requires_grad
    spec = choose("auto", q, needs_grad=needs_grad or bias_grad, dropout=dropout, bias_grad=bias_grad,
                  bias_grid=table is not None and table.dim() == 3, layout=layout)
    seed = torch.randint(2**62, (1,), device=q.device) if dropout > 0 else None  # torch.manual_seed replays it
    y, _ = spec.run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=chunk_ok, rpe=table,
                    lengths=lengths, dropout=dropout, seed=seed, scale=module.scale)
    return y
