"""The one interface every EVA kernel implements, and the registry that picks one.

A kernel computes EVA's joint softmax for every query block of a BlockLayout (layout.py):

    p   = softmax( [ scale q_n.k_m + bias(h, n, m)  for the local keys m of n's block ]
                   ++ [ scale q_n.k~_c  for the chunk summaries c the block sees ] )
    y_n = sum_m p_m Z_m v_m + sum_c p_c Z_c beta_c

bias(h, n, m) the relative position bias: by the offset m - n (rpe H x num_offsets, layout.offset_index), or by
place (rpe H x w x width: rpe[h, i, j], i n's place in its block, j m's among the block's local keys; rpe_grid),
Z the attention-dropout mask (0 with probability p, else 1 / (1 - p); local and chunk weights alike), and
returns (y, lse): y B x H x N x d and lse, B x H x N in float32 at least, the natural log-sum-exp of each
query's logits (before dropout; unspecified for a query that sees no key). Keys a query does not see get no
weight: local keys outside [0, lengths[b]), local keys after the query when the layout is causal, summaries
the layout does not show the block (a causal prefix), and summaries with chunk_ok False. A query that sees
nothing returns zeros, never NaN.

Every kernel takes the same keyword arguments (`Kernel`) and is registered with what it accepts
(`KernelSpec`); `choose` is the one place where "auto" becomes a kernel.
"""

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor

from ..layout import BlockLayout, lowest


class Kernel(Protocol):
    def __call__(
        self,
        *,
        layout: BlockLayout,
        q: Tensor,  # B x H x N x d, any strides (the layer passes views of B x N x H x d memory); N a multiple of layout.window
        k: Tensor,  # B x H x N x d
        v: Tensor,  # B x H x N x d
        k_summary: Optional[Tensor],  # B x H x C x d, the chunk key summaries k~ (None: no chunks)
        beta: Optional[Tensor],  # B x H x C x d, the chunk value summaries
        chunk_ok: Optional[Tensor],  # B x C bool: False hides a summary (a chunk with no real token); None: all shown
        # the local bias: H x layout.num_offsets by relative offset (see layout.offset_index), or H x w x width by
        # place (the grid every block shares: a per-place table); rpe_grid gives the grid of either
        rpe: Optional[Tensor],
        lengths: Optional[Tensor],  # B integers: keys at or after lengths[b] are hidden; None: all N keys are real
        dropout: float,  # attention dropout probability (0 in evaluation)
        # the dropout seed, a 1-element int64 tensor on q's device (None when dropout is 0; an int is taken too): the
        # same seed gives the same mask, forward and backward. A CUDA kernel reads it on the device; a CPU kernel may
        # take int(seed), which costs nothing there
        seed: Optional[Tensor],
        scale: float,  # the logits' scale, head_dim ** -0.5
    ) -> Tuple[Tensor, Tensor]: ...


@dataclass(frozen=True)
class KernelSpec:
    """A registered kernel and what it accepts. `unavailable()` gives the reason it cannot run on this machine
    (a missing compiler, Triton not installed) or None."""

    name: str
    run: Kernel
    devices: FrozenSet[str]
    dtypes: FrozenSet[torch.dtype]
    backward: bool = True  # can train (autograd through q, k, v, the summaries)
    dropout: bool = True  # takes attention dropout > 0
    bias_grad: bool = True  # gives the RPE table its gradient
    compiles: bool = True  # torch.compile(fullgraph=True) traces it (the layer's `compile` option)
    unavailable: Callable[[], Optional[str]] = lambda: None
    summary: str = ""
    # what depends on the call beyond the fields above (torch's fused CPU kernel takes no dropout, its CUDA one
    # does): check(q, layout=..., needs_grad=..., dropout=..., bias_grad=..., bias_grid=...) -> a reason, or None
    check: Callable[..., Optional[str]] = lambda q, **call: None

    def refusal(self, q: Tensor, *, needs_grad: bool, dropout: float, bias_grad: bool, bias_grid: bool = False,
                layout: Optional[BlockLayout] = None, compiling: bool = False) -> Optional[str]:
        """Every reason this kernel cannot compute this call, joined by "; ", or None when it can (layout None: any
        layout): a user who fixes one learns the others at once. bias_grid: the bias is a per-place grid (rpe)."""
        if compiling and not self.compiles:  # its other checks may not trace either
            return "torch.compile cannot trace it"
        reasons = []
        if q.device.type not in self.devices:
            reasons.append(f"it runs on {'/'.join(sorted(self.devices))}, not {q.device.type}")
        if q.dtype not in self.dtypes:
            names = ", ".join(sorted(str(t).replace("torch.", "") for t in self.dtypes))
            reasons.append(f"it takes {names}, not {str(q.dtype).replace('torch.', '')}")
        if needs_grad and not self.backward:
            reasons.append("it has no backward (evaluation only)")
        if dropout > 0 and not self.dropout:
            reasons.append("it takes no attention dropout")
        if bias_grad and not self.bias_grad:
            reasons.append("it gives no gradient to a trainable relative position bias")
        reasons.append(self.check(q, layout=layout, needs_grad=needs_grad, dropout=dropout, bias_grad=bias_grad,
                                  bias_grid=bias_grid))
        reasons.append(self.unavailable())
        reasons = [reason for reason in reasons if reason is not None]
        return "; ".join(reasons) if reasons else None


KERNELS: Dict[str, KernelSpec] = {}

# "auto": the first kernel of the device's list that accepts the call
AUTO_ORDER: Dict[str, Sequence[str]] = {
    "cpu": ["c_loop", "fused", "blockwise"],  # the C loop is the fastest there, training or not
    "cuda": ["triton", "fused", "blockwise"],
}


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in KERNELS or spec.name == "auto":
        raise ValueError(f"a kernel named {spec.name!r} is registered already")
    KERNELS[spec.name] = spec
    return spec


def choose(name: str, q: Tensor, *, needs_grad: bool, dropout: float, bias_grad: bool, bias_grid: bool = False,
           layout: Optional[BlockLayout] = None, compiling: Optional[bool] = None) -> KernelSpec:
    """The kernel that computes this call: `name`, or for "auto" the first of AUTO_ORDER[device] that accepts it
    (under torch.compile, or for a call about to be compiled, one that it traces). A named kernel that cannot raises
    a ValueError that says why."""
    compiling = torch.compiler.is_compiling() if compiling is None else compiling
    call = dict(needs_grad=needs_grad, dropout=dropout, bias_grad=bias_grad, bias_grid=bias_grid, layout=layout,
                compiling=compiling)
    if name != "auto":
        if name not in KERNELS:
            raise ValueError(f"unknown EVA kernel {name!r}; one of: auto, {', '.join(KERNELS)}")
        reason = KERNELS[name].refusal(q, **call)
        if reason is not None:
            raise ValueError(f"the EVA kernel {name!r} cannot run this call: {reason}; use kernel 'auto'")
        return KERNELS[name]
    tried = []
    for candidate in AUTO_ORDER.get(q.device.type, ()):
        if candidate not in KERNELS:  # a kernel this installation does not ship
            continue
        reason = KERNELS[candidate].refusal(q, **call)
        if reason is None:
            return KERNELS[candidate]
        tried.append(f"{candidate}: {reason}")
    raise ValueError(f"no EVA kernel runs on {q.device.type} with {q.dtype}: " + " | ".join(tried))


def rpe_grid(rpe: Optional[Tensor], layout: BlockLayout, device=None) -> Optional[Tensor]:
    """The contract's rpe as the H x w x width grid every block shares: a per-place grid as it is, an offset table
    gathered by layout.offset_index (autograd takes either's gradient back to it); None stays None."""
    if rpe is None:
        return None
    if rpe.dim() == 3:
        if rpe.shape[1:] != (layout.window, layout.width):
            raise ValueError(f"a per-place RPE grid must be heads x {layout.window} x {layout.width}, not {tuple(rpe.shape)}")
        return rpe
    return rpe[:, layout.offset_index(device)]


def zero_unseen(y: Tensor, lse: Tensor, dtype: torch.dtype) -> Tensor:
    """y with the queries that see no key set to 0, as the contract says: their logits are all at lowest(dtype)
    (the kernels' additive mask), so their lse lies far below any real logit's. masked_fill returns (and its
    backward gives y's gradient) a contiguous tensor: taken on the B x N x H x d view, both keep the token-major
    layout in which the kernels write y and read its gradient, instead of a copy into it each way."""
    return y.transpose(1, 2).masked_fill((lse < lowest(dtype) / 2).transpose(1, 2)[..., None], 0).transpose(1, 2)
