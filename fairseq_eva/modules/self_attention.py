"""The registry's attention modules with fairseq's MultiheadAttention calling convention (a thin adapter).

- inputs are Time x Batch x Channel; `key_padding_mask` is Batch x Time, True at pads;
- self-attention only: `key` and `value` must be `query` itself (or None);
- `incremental_state` goes through fairseq's incremental-state helpers; the core's decoding cache is
  the module's input buffer, and `reorder_incremental_state` reorders it for beam search; while
  decoding incrementally `key_padding_mask` is not used (see `forward`);
- returns `(output, None)`: the mechanisms never form the attention matrix, so no weights are returned;
- `attn_mask`: causality is built into a causal mechanism, so the decoder's mask is not applied, but it is
  checked to be the usual future mask (nothing else can be honoured); a bidirectional one takes none.

The adapter is a mix-in placed before the core module's class (`multihead(core_class)`), so parameter names
(q_proj, k_proj, v_proj, out_proj) are those of fairseq's MultiheadAttention.
"""

import functools
from typing import Dict, Optional, Tuple

import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from torch import Tensor

from ..attention import EVAAttention


class FairseqSelfAttention(FairseqIncrementalState):
    """fairseq's calling convention around a core attention module (see the module docstring)."""

    def __init__(self, embed_dim, num_heads, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self._checked_mask = None  # (data_ptr, shape, dtype, device, version) of a verified future mask
        self.batch_check = None  # called with each batch (B x N x C) before the attention runs: a memory estimate

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor] = None,
        value: Optional[Tensor] = None,
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = False,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if (key is not None and key is not query) or (value is not None and value is not query):
            raise ValueError(f"{self.name} is self-attention only: key and value must be the query itself")
        if static_kv or before_softmax:
            raise ValueError(f"{self.name} supports neither static_kv nor before_softmax")
        self._check_attn_mask(attn_mask, query.size(0))
        cache = None
        if incremental_state is not None:
            cache = self._get_input_buffer(incremental_state)
            # fairseq's SequenceGenerator feeds a pad only to a dead beam (score -inf, e.g. the beams
            # beside the forced prefix of a prompt); the cores' caches have no per-row mask, so such a
            # token is attended as a token of that beam, whose outputs are never used.
            key_padding_mask = None
        if self.batch_check is not None:
            self.batch_check(query.transpose(0, 1))
        out = super().forward(query.transpose(0, 1), key_padding_mask, cache)
        if incremental_state is not None:
            self._set_input_buffer(incremental_state, cache)
        return out.transpose(0, 1), None

    def _check_attn_mask(self, attn_mask: Optional[Tensor], length: int):
        if attn_mask is None:
            return
        if not self.causal:
            raise ValueError(f"bidirectional {self.name} takes no attn_mask (use key_padding_mask for pads)")
        signature = (attn_mask.data_ptr(), tuple(attn_mask.shape), attn_mask.dtype, attn_mask.device,
                     attn_mask._version)
        if signature == self._checked_mask:
            return
        ok = attn_mask.dim() == 2 and tuple(attn_mask.shape) == (length, length)
        if ok:
            future = torch.ones(length, length, dtype=torch.bool, device=attn_mask.device).triu(1)
            if attn_mask.dtype == torch.bool:
                ok = torch.equal(attn_mask, future)
            else:  # additive: -inf (or a large negative value) on the future, 0 elsewhere
                blocked = attn_mask <= -1e4
                ok = torch.equal(blocked, future) and bool((attn_mask.masked_fill(future, 0) == 0).all())
        if not ok:
            raise ValueError(
                f"causal {self.name} builds causality in and can only be given fairseq's future mask as attn_mask "
                f"(-inf above the diagonal, 0 elsewhere, {length} x {length}); got another mask of shape "
                f"{tuple(attn_mask.shape)}"
            )
        self._checked_mask = signature

    # ------------------------------------------------ fairseq's incremental-state interface

    def _get_input_buffer(
        self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]]
    ) -> Dict[str, Optional[Tensor]]:
        result = self.get_incremental_state(incremental_state, "attention_state")
        return result if result is not None else {}

    def _set_input_buffer(
        self,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
        buffer: Dict[str, Optional[Tensor]],
    ):
        return self.set_incremental_state(incremental_state, "attention_state", buffer)

    def reorder_incremental_state(
        self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]], new_order: Tensor
    ):
        """Select the beams of the decoding cache (called by fairseq's SequenceGenerator)."""
        buffer = self._get_input_buffer(incremental_state)
        if buffer:
            self.reorder_cache(buffer, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state


@functools.lru_cache(maxsize=None)
def multihead(core_class):
    """core_class with fairseq's calling convention: a class named like EVAAttention -> EVAMultiheadAttention."""
    name = core_class.__name__.removesuffix("Attention") + "MultiheadAttention"
    return type(name, (FairseqSelfAttention, core_class), {"name": core_class.__name__.removesuffix("Attention"),
                                                          "__module__": __name__})


EVAMultiheadAttention = multihead(EVAAttention)
