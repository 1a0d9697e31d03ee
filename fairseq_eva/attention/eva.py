"""EVA attention (Zheng, Yuan, Wang, Kong, ICLR 2023) in plain PyTorch: multi-head self-attention.

Each query n attends, in one softmax, to the keys of its local set E^n exactly and to one summary per
visible chunk (the paper's Eq. 13 with one sample per chunk; docs/design.md, "What EVA computes"):

    p   = softmax( [ q_n.k_m / sqrt(d) + b(m - n)  for m in E^n ]  ++  [ q_n.k~_c / sqrt(d)  for visible c ] )
    y_n = sum_{m in E^n} p_m v_m  +  sum_{visible c} p_c beta_c

with k~_c, beta_c the chunk summaries (chunks.py) and b the relative position bias (relative_position.py: T5
buckets of m - n, or with rpe_type "table" a learned bias per place of n and m in the block).
Which keys a block of queries sees is layout.py's BlockLayout. The layer keeps the projections, the chunk
summaries, the padding layout and incremental decoding; the joint softmax is a kernel's (kernels/, one
contract, chosen by `kernels.choose` once per call: docs/design.md, "Kernels"). Window 0 (bidirectional,
summaries only) is plain softmax attention over the summaries, which the layer computes itself.
Tensors are B x H x N x d views of the projections' B x N x (H d) memory ("token-major").
"""

import functools
import math
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ProjectedAttention, padding_order  # noqa: F401  (importable from here too)
from .chunks import PROPOSAL_MEANS, PROPOSALS, ChunkSummaries, chunk_segments
from .kernels import KERNELS, choose
from .layout import BlockLayout, additive_mask, visible_causal_chunks
from .mechanism import BIDIRECTIONAL, CAUSAL, Mechanism, Option
from .relative_position import RPE_TYPES, PlaceBias, RelativePositionBias, check_rpe

Cache = Dict[str, Tensor]
COMPILE_MODES = ("none", "default", "reduce-overhead")  # torch.compile's mode for the layer's attention ("none": eager)


def _attention(layer, q, k, v, lengths):
    return layer.attention(q, k, v, lengths)


@functools.lru_cache(maxsize=None)
def compiled_attention(mode):
    """EVAAttention.attention under torch.compile(fullgraph=True): one function for all layers, so that layers
    of one configuration share its graphs."""
    return torch.compile(_attention, fullgraph=True, mode=mode)


def _pad_positions(t, before, after):
    """Zero positions before / after the N of a B x H x N x d tensor, keeping its token-major memory."""
    if before == after == 0:
        return t
    return F.pad(t.transpose(1, 2), (0, 0, 0, 0, before, after)).transpose(1, 2)


def check_options(
    embed_dim, num_heads, *, causal, window_size, overlap, num_chunks, chunk_size, proposal, use_rpe, rpe_num_buckets,
    rpe_max_distance, dropout, kernel, omega_noise, chunk_logit_offset, compile, proposal_mean, rpe_type,
    name=lambda field: field,
):
    """Raise a ValueError that names the first bad option; `name(field)` is how the caller's user writes the
    option (the fairseq layer passes `--eva-window-size` or `model.eva_window_size`)."""

    def need(ok, message):
        if not ok:
            raise ValueError(message)

    for field, value in (("embed_dim", embed_dim), ("num_heads", num_heads)):
        need(isinstance(value, int) and value > 0, f"{name(field)} must be a positive integer, got {value!r}")
    need(embed_dim % num_heads == 0, f"{name('num_heads')} ({num_heads}) must divide {name('embed_dim')} ({embed_dim})")
    for field, value in (("window_size", window_size), ("num_chunks", num_chunks), ("chunk_size", chunk_size),
                         ("rpe_num_buckets", rpe_num_buckets), ("rpe_max_distance", rpe_max_distance)):
        need(isinstance(value, int) and value >= 0, f"{name(field)} must be an integer >= 0, got {value!r}")
    chunks = name("num_chunks"), name("chunk_size")
    need(not (num_chunks and chunk_size), f"set {chunks[0]} ({num_chunks}) or {chunks[1]} ({chunk_size}), not both")
    need(0.0 <= dropout < 1.0, f"{name('dropout')} must be in [0, 1), got {dropout!r}")
    need(proposal in PROPOSALS, f"{name('proposal')} must be one of {', '.join(PROPOSALS)}; got {proposal!r}")
    need(proposal_mean in PROPOSAL_MEANS,
         f"{name('proposal_mean')} must be one of {', '.join(PROPOSAL_MEANS)}; got {proposal_mean!r}")
    need(isinstance(omega_noise, bool), f"{name('omega_noise')} must be true or false, got {omega_noise!r}")
    offset = name("chunk_logit_offset")
    need(isinstance(chunk_logit_offset, (int, float)) and math.isfinite(chunk_logit_offset),
         f"{offset} must be a finite number, got {chunk_logit_offset!r}")
    need(chunk_logit_offset == 0 or (use_rpe and window_size > 0 and (num_chunks or chunk_size)),
         f"{offset} ({chunk_logit_offset}) needs chunks and the relative position bias inside a window: "
         f"it is carried by that bias ({name('use_rpe')} true, {name('window_size')} > 0)")
    need(rpe_type in RPE_TYPES, f"{name('rpe_type')} must be one of {', '.join(RPE_TYPES)}; got {rpe_type!r}")
    need(rpe_type == "buckets" or (use_rpe and window_size > 0),
         f"{name('rpe_type')} table is a bias inside the window: it needs {name('use_rpe')} true and {name('window_size')} > 0")
    need(kernel == "auto" or kernel in KERNELS,
         f"{name('kernel')} must be one of auto, {', '.join(KERNELS)}; got {kernel!r}")
    need(compile in COMPILE_MODES, f"{name('compile')} must be one of {', '.join(COMPILE_MODES)}; got {compile!r}")
    need(compile == "none" or kernel not in KERNELS or KERNELS[kernel].compiles,
         f"{name('compile')} {compile!r} needs a kernel that torch.compile traces: {name('kernel')} auto or one of "
         f"{', '.join(n for n, spec in KERNELS.items() if spec.compiles)}; {kernel!r} is not one")
    window = name("window_size")
    if causal:
        need(window_size >= 1, f"{window} must be at least 1 in causal EVA, got {window_size}")
        need(num_chunks == 0, f"{name('num_chunks')} is for bidirectional EVA; causal EVA takes {name('chunk_size')}")
        need(chunk_size == 0 or window_size % chunk_size == 0,
             f"{name('chunk_size')} ({chunk_size}) must divide {window} ({window_size}) in causal EVA")
    else:
        need(window_size > 0 or num_chunks or chunk_size, f"{window} 0 needs chunks: set {chunks[0]} or {chunks[1]}")
        need(not overlap or (window_size > 0 and window_size % 2 == 0),
             f"{name('overlap')} needs an even {window} > 0, got {window_size}")
    if use_rpe and window_size > 0 and rpe_type == "buckets":
        check_rpe(rpe_num_buckets, rpe_max_distance, not causal, name)


class EVAAttention(ProjectedAttention):
    """Multi-head EVA self-attention with fairseq-style q/k/v/out projections.

    Bidirectional (causal=False): blocks of `window_size` (with `overlap`, plus window_size/2 on each
    side) and chunks covering the whole sequence, given as `num_chunks` C or `chunk_size`.
    Causal (causal=True): E^n is n's block up to n (plus the previous block with `overlap`); chunks of
    `chunk_size` (dividing the window) are visible once they end before E^n starts.
    No chunks (0) is plain block-local attention. Inputs are batch first: B x N x embed_dim.
    chunk_logit_offset: nats added to every chunk logit, e.g. log(chunk size), as if each summary stood for its
    chunk's keys (a diagnostic; the paper's is 0). The softmax does not change when all its logits move
    together, so the relative position bias carries it exactly, as a constant -offset added to it: no kernel
    sees it, and every parameter gets the gradient it would get with the offset in the chunk logits.
    kernel: "auto" (the first kernel of kernels.AUTO_ORDER that takes the call), or a registered kernel's name.
    proposal_mean: "sum" (the paper's mu_c = sigma_q(q mean) + k~_c) or "average" (half of it, as the authors'
    bidirectional code; docs/design.md, "Where this differs from the paper and the authors' code").
    compile: "none" (eager), or torch.compile's mode ("default", "reduce-overhead") for `attention`, compiled with
    fullgraph=True; the projections stay eager.
    rpe_type: the relative position bias (use_rpe): "buckets" (T5 buckets of the offset key minus query) or "table"
    (a learned bias per head, query place and local key place, H x w x width: the authors' masked-LM local attention
    bias; relative_position.PlaceBias).
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        causal=False,
        window_size=16,
        overlap=False,
        num_chunks=0,
        chunk_size=0,
        proposal="layernorm",
        use_rpe=True,
        rpe_num_buckets=32,
        rpe_max_distance=128,
        dropout=0.0,
        bias=True,
        kernel="auto",
        omega_noise=True,
        chunk_logit_offset=0.0,
        compile="none",
        proposal_mean="sum",
        rpe_type="buckets",
    ):
        check_options(
            embed_dim, num_heads, causal=causal, window_size=window_size, overlap=overlap, num_chunks=num_chunks,
            chunk_size=chunk_size, proposal=proposal, use_rpe=use_rpe, rpe_num_buckets=rpe_num_buckets,
            rpe_max_distance=rpe_max_distance, dropout=dropout, kernel=kernel, omega_noise=omega_noise,
            chunk_logit_offset=chunk_logit_offset, compile=compile, proposal_mean=proposal_mean, rpe_type=rpe_type,
        )
        # the settings the contract's __init__ needs in build_before_reset (plain values may precede Module.__init__)
        self.kernel, self.compile = kernel, compile
        self.window_size, self.overlap = window_size, bool(overlap)
        self.num_chunks, self.chunk_size = num_chunks, chunk_size
        self._summaries = (proposal, omega_noise, proposal_mean) if num_chunks or chunk_size else None
        self._bias = (rpe_type, rpe_num_buckets, rpe_max_distance, -chunk_logit_offset) if use_rpe and window_size > 0 \
            else None
        # q, k, v are three Linears, as in fairseq's MultiheadAttention, and `project` multiplies by their
        # concatenation on CUDA: one product instead of three. A single fused parameter would change the optimizer
        # state of a run saved before (a size error on resume in float32; under --fp16 the Adam moments of fairseq's
        # flat float32 buffer would land permuted).
        super().__init__(embed_dim, num_heads, causal=causal, dropout=dropout, bias=bias)

    def build_before_reset(self):
        """The chunk summaries' proposal and the relative position bias."""
        self.chunks = None if self._summaries is None else ChunkSummaries(self.head_dim, *self._summaries)
        self.rpe = None
        if self._bias is not None:
            rpe_type, num_buckets, max_distance, shift = self._bias
            if rpe_type == "table":
                self.rpe = PlaceBias(self.num_heads, self.window_size, self._layout().width, shift=shift)
            else:
                self.rpe = RelativePositionBias(self.num_heads, not self.causal, num_buckets, max_distance, shift=shift)
        del self._summaries, self._bias

    def project(self, x):
        """q, k, v (each B x H x N x d) of x (B x N x embed_dim). On CUDA views of one B x N x 3 x H x d product (one
        launch instead of three; the Triton kernels read such views as they are). Elsewhere three products, each
        token-major: the C loop copies views of one product into that layout and keeps the copies for the backward
        (3 B x N x embed_dim more at the peak of a training step), and the chunk summaries, which keep k and v,
        would keep the whole product, q's third too."""
        B, N, _ = x.shape
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if not (x.is_cuda or self.kernel == "triton"):  # (a pinned Triton kernel: its path, also under the interpreter)
            return tuple(self.split_heads(p(x)) for p in projections)
        weight = torch.cat([p.weight for p in projections])
        bias = None if self.q_proj.bias is None else torch.cat([p.bias for p in projections])
        qkv = F.linear(x, weight, bias).view(B, N, 3, self.num_heads, self.head_dim)
        # (unbind's backward then stacks the gradients straight into the product's layout, with no further copy)
        return tuple(t.transpose(1, 2) for t in qkv.unbind(2))

    def _layout(self, window=None):
        """The BlockLayout of the local keys (window > 0), of the layer's window or of `window`."""
        window = window or self.window_size
        if self.causal:
            return BlockLayout.causal_blocks(window, self.overlap, self.chunk_size)
        return BlockLayout.bidirectional(window, self.overlap)

    def _window(self, N):
        """The window laid out over N positions: the layer's, or, where one block of it covers the whole sequence,
        the shortest that still does (the sequence would otherwise be padded to the full window: a window of 10,000
        over 200 tokens held gigabytes). The local sets, and so the output, are the same: one block holds every
        position (and no chunk is visible in causal EVA). A per-place bias (rpe_type table) is tied to its window."""
        w = self.window_size
        if w <= N or N == 0 or isinstance(self.rpe, PlaceBias):
            return w
        step = self.chunk_size if self.causal and self.chunk_size else 2 if self.overlap and not self.causal else 1
        return -(-N // step) * step

    @property
    def chunk_logit_offset(self):
        """The chunk logit offset, which the relative position bias carries as its shift (0 without it)."""
        return 0.0 if self.rpe is None else -self.rpe.shift

    def extra_repr(self):
        chunks = f"num_chunks={self.num_chunks}" if self.num_chunks else f"chunk_size={self.chunk_size}"
        return f"causal={self.causal}, window_size={self.window_size}, overlap={self.overlap}, {chunks}"

    # ---------------------------------------------------------------- full forward

    def attend(self, x, q, k, v, lengths):
        """The whole sequence, each row's real tokens first (the contract's forward lays them out: each sequence from
        its own first real token, so that its output does not depend on the batch it is in)."""
        return self._attention(q)(q, k, v, lengths)

    def attention(self, q, k, v, lengths=None):
        """The layer without its projections: q, k, v and the output are B x H x N x d; lengths (B) are
        the numbers of real tokens, which come first (None: all real)."""
        return self._causal(q, k, v) if self.causal else self._bidirectional(q, k, v, lengths)

    def _attention(self, q):
        """self.attention, or its compiled form (the `compile` option). A kernel that refuses q inside the compiled
        function reaches the user wrapped in torch._dynamo's error: refused here instead, in its own words."""
        if self.compile == "none":
            return self.attention
        grad = torch.is_grad_enabled() and q.requires_grad
        rpe_grad = grad and self.rpe is not None and any(p.requires_grad for p in self.rpe.parameters())
        choose(self.kernel, q, needs_grad=grad, dropout=self._dropout_p(), bias_grad=rpe_grad,
               bias_grid=isinstance(self.rpe, PlaceBias), compiling=True)
        return functools.partial(compiled_attention(self.compile), self)

    def _dropout_p(self):
        return self.dropout.p if self.training else 0.0

    def _sdpa(self, q, k, v, bias=None):
        """Fused softmax attention; bias: an additive mask that broadcasts to the scores."""
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=self._dropout_p(), scale=self.scale)

    def _rpe_bias(self, i, relative_position):
        """1 x H x ... biases of query place i in its block against local keys at these offsets (key minus query)."""
        if isinstance(self.rpe, PlaceBias):  # by place: the key's among the block's local keys
            return self.rpe(i, relative_position + i - self._layout().offset).unsqueeze(0)
        return self.rpe(relative_position.to(torch.long)).unsqueeze(0)  # (broadcast over blocks)

    def _kernel(self, layout, q, k, v, k_summary=None, beta=None, chunk_ok=None, lengths=None):
        """The joint softmax by the kernel `choose` picks for this call (kernels/contract.py)."""
        rpe = None if self.rpe is None else self.rpe.table(layout, q.device)  # H x num_offsets, or H x w x width
        dropout = self._dropout_p()
        needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, k_summary, beta))
        bias_grad = torch.is_grad_enabled() and rpe is not None and rpe.requires_grad  # (a per-place table is a leaf)
        spec = choose(self.kernel, q, needs_grad=needs_grad or bias_grad, dropout=dropout, bias_grad=bias_grad,
                      bias_grid=rpe is not None and rpe.dim() == 3, layout=layout)
        # drawn on the device, so the host need not wait for it; torch.manual_seed replays it
        seed = torch.randint(2**62, (1,), device=q.device) if dropout > 0 else None
        y, _ = spec.run(layout=layout, q=q, k=k, v=v, k_summary=k_summary, beta=beta, chunk_ok=chunk_ok, rpe=rpe,
                        lengths=lengths, dropout=dropout, seed=seed, scale=self.scale)
        return y

    def _bidirectional(self, q, k, v, lengths):
        B, H, N, d = q.shape
        w = self._window(N)
        k_summary = beta = chunk_ok = None
        if self.chunks is not None:
            k_summary, beta, chunk_ok = self._bidirectional_chunks(q, k, v, lengths)  # B x H x C x d, B x C
        if w == 0:  # every query sees every chunk: plain softmax attention over the summaries
            hidden = None if chunk_ok is None else additive_mask(~chunk_ok, q.dtype)[:, None, None, :]
            return self._sdpa(q, k_summary, beta, hidden)
        layout = self._layout(w)
        nb = math.ceil(N / w)
        if nb * w > N:  # queries padded to whole blocks: the keys after N are hidden
            q, k, v = (_pad_positions(t, 0, nb * w - N) for t in (q, k, v))
            lengths = torch.full((B,), N, device=q.device) if lengths is None else lengths
        return self._kernel(layout, q, k, v, k_summary, beta, chunk_ok, lengths)[:, :, :N]

    def _bidirectional_chunks(self, q, k, v, lengths):
        """Chunks over each sequence's own L real tokens: C chunks of ceil(L / C), or chunks of chunk_size."""
        B, H, N, d = q.shape
        if lengths is None:
            size = self.chunk_size or math.ceil(N / self.num_chunks)
            if N % size == 0:
                return (*self.chunks.uniform(q, k, v, size), None)
            lengths = torch.full((B,), N, device=q.device)
        return self.chunks.segmented(q, k, v, chunk_segments(lengths, N, self.num_chunks, self.chunk_size))

    def _causal(self, q, k, v):
        """Pads (of the batch and of the last block) come after every real query, which sees none of them: the
        kernel gets no lengths."""
        N = q.size(2)
        w, s = self._window(N), self.chunk_size
        layout = self._layout(w)
        nb = math.ceil(N / w)
        q, k, v = (_pad_positions(t, 0, nb * w - N) for t in (q, k, v))
        k_summary = beta = None
        if s and layout.visible_chunks(nb - 1, nb * w // s) > 0:  # some block sees a chunk
            k_summary, beta = self.chunks.uniform(q, k, v, s)
        return self._kernel(layout, q, k, v, k_summary, beta)[:, :, :N]

    # ---------------------------------------------------------------- incremental decoding

    def step(self, x, q, k, v, cache: Cache):
        """One token (q, k, v: B x H x 1 x d). The cache holds the current block's q, k, v, the previous block's k, v
        (overlap), and k~, beta of every completed chunk: O(w + N / s), not O(N).

        The step calls SDPA itself rather than a kernel of the contract: a kernel computes whole blocks of w
        queries, so one query would cost w of them, and every key the query sees (its local keys, the summaries)
        is already gathered here, which one SDPA call over them needs and nothing more."""
        w, s = self.window_size, self.chunk_size
        k_block = torch.cat([cache["k_block"], k], dim=2) if "k_block" in cache else k
        v_block = torch.cat([cache["v_block"], v], dim=2) if "v_block" in cache else v
        i = k_block.size(2) - 1  # position of this token in its block
        keys, vals, offset = k_block, v_block, 0
        if "k_prev" in cache:
            keys, vals, offset = torch.cat([cache["k_prev"], k_block], 2), torch.cat([cache["v_prev"], v_block], 2), -w
        relative = torch.arange(keys.size(2), device=x.device)[None, :] + offset - i  # 1 x width
        bias = self._rpe_bias(i, relative).to(q.dtype) if self.rpe is not None else None  # 1 x H x 1 x width
        if "k_chunks" in cache:
            block = cache["k_chunks"].size(2) * s // w  # index of this token's block
            visible = visible_causal_chunks(block, self.overlap, w // s)
            if visible > 0:
                keys = torch.cat([keys, cache["k_chunks"][:, :, :visible]], dim=2)
                vals = torch.cat([vals, cache["beta_chunks"][:, :, :visible]], dim=2)
                bias = None if bias is None else F.pad(bias, (0, visible))
        out = self._sdpa(q, keys, vals, bias)  # B x H x 1 x d

        if s:
            q_block = torch.cat([cache["q_block"], q], dim=2) if "q_block" in cache else q
            cache["q_block"] = q_block
            if (i + 1) % s == 0:  # a chunk is complete: summarise it as the full forward does
                k_summary, beta = self.chunks.uniform(q_block[:, :, -s:], k_block[:, :, -s:], v_block[:, :, -s:], s)
                if "k_chunks" in cache:
                    k_summary = torch.cat([cache["k_chunks"], k_summary], dim=2)
                    beta = torch.cat([cache["beta_chunks"], beta], dim=2)
                cache["k_chunks"], cache["beta_chunks"] = k_summary, beta
        cache["k_block"], cache["v_block"] = k_block, v_block
        if i + 1 == w:  # the block is complete
            if self.overlap:
                cache["k_prev"], cache["v_prev"] = k_block, v_block
            for name in ("q_block", "k_block", "v_block"):
                cache.pop(name, None)
        return out


def eva_cost(N, embed_dim, num_heads, causal=False, window_size=16, overlap=False, num_chunks=0, chunk_size=0, **_):
    """2 (|E| + C) D + 2 D. 2 (|E| + C) D for the joint softmax over the local keys and the chunk summaries,
    about 2 D for the summaries themselves (the proposal's projections are per chunk, negligible). Causal: a
    query sees on average half its block (plus the previous block with overlap), and the chunks before its
    block, N / (2 s) on average. Local attention: C = 0."""
    local = (2 * window_size if overlap else window_size) if not causal else (
        window_size / 2 + (window_size if overlap else 0))
    local = min(local, N)  # a window longer than the sequence holds N keys
    if causal:
        chunks = N / (2 * chunk_size) if chunk_size else 0
    else:
        chunks = min(num_chunks, N) if num_chunks else (N / chunk_size if chunk_size else 0)
    return 2 * (local + chunks) * embed_dim + (2 * embed_dim if chunks else 0)


# EVAAttention's options, in the order of the help (its keyword defaults equal these: a test keeps them so). The
# architectures set the paper's window and chunks (fairseq_eva/models/); fairseq's --attention-dropout is `dropout`.
_CHUNK_OPTIONS = ("num_chunks", "chunk_size")
OPTIONS = (
    Option("window_size", int, 16,
           "size w of the local blocks; the local set E of a query is its block (plus w/2 on each side with "
           "--eva-overlap, so abs(E) = 2w); 0 = no local set (bidirectional only)"),
    Option("overlap", bool, False,
           "overlapping local windows (true/false); bidirectional: E also takes w/2 positions on each side of "
           "the block (the paper's EVA-32 is w = 16 with overlap); causal: E also takes the whole previous block"),
    Option("num_chunks", int, 0,
           "number C of chunks (bidirectional EVA) summarising the whole sequence, chunk size ceil(L / C) for a "
           "sequence of L tokens; 0 = use --eva-chunk-size (both 0: no chunks, plain block-local attention)"),
    Option("chunk_size", int, 0,
           "fixed chunk size instead of a fixed number of chunks; in causal EVA it must divide the window "
           "size; 0 = use --eva-num-chunks"),
    Option("proposal", str, "layernorm",
           "projection sigma of the chunk summaries that form the proposal: Linear + LayerNorm (the paper's, "
           "'layernorm'), Linear only, or the identity", PROPOSALS),
    Option("proposal_mean", str, "sum",
           "the proposal mean of a chunk, mu = sigma_q(q mean) + sigma_k(k mean) (sum, the paper's) or half of "
           "it (average, as the authors' bidirectional code; their causal code sums)", PROPOSAL_MEANS),
    Option("omega_noise", bool, True,
           "in training, draw each chunk's proposal sample omega = mu + noise (true, the paper's) or take "
           "omega = mu as at evaluation (false, a diagnostic)"),
    Option("chunk_logit_offset", float, 0.0,
           "nats added to every chunk summary's logit, e.g. log(chunk size), as if a summary stood for all "
           "its chunk's keys (a diagnostic; the paper's is 0); carried exactly by the relative position bias, "
           "lowered by this value, so it needs --eva-rpe true"),
    Option("use_rpe", bool, True,
           "a learned relative position bias inside the local set (true/false), of --eva-rpe-type", flag="rpe"),
    Option("rpe_type", str, "buckets",
           "the relative position bias: buckets (default; T5 buckets of the offset key minus query, "
           "--eva-rpe-num-buckets scalars a head) or table (the authors' masked-LM local attention bias: one learned "
           "scalar per head, query place in its block and local key place, not a function of the offset; w x width x H "
           "parameters a layer, width = w, or 2w with --eva-overlap); table needs --eva-rpe true and a window",
           RPE_TYPES),
    Option("rpe_num_buckets", int, 32,
           "number of relative position buckets (per direction: half, a quarter when bidirectional, are "
           "exact distances)"),
    Option("rpe_max_distance", int, 128, "relative distance beyond which all positions share the last bucket"),
    Option("kernel", str, "auto",
           "the kernel of every EVA self-attention: auto (default: the fastest that takes each call on its "
           "device) or one pinned by name (an error where it cannot run a call)", ("auto", *KERNELS)),
    Option("compile", str, "none",
           "run each EVA self-attention's attention (the projections aside) under torch.compile(fullgraph=True) "
           "in this mode; none (default): eager. Shapes that change every batch recompile: bucket the lengths",
           COMPILE_MODES),
)

MECHANISMS = (
    Mechanism(
        "eva", ".eva:EVAAttention", (BIDIRECTIONAL, CAUSAL), OPTIONS, eva_cost,
        "EVA: exact softmax over a local window plus one control-variate estimate per chunk",
        title="EVA", check=check_options),
    Mechanism(
        "local", ".eva:EVAAttention", (BIDIRECTIONAL, CAUSAL),
        tuple(o for o in OPTIONS if o.name not in _CHUNK_OPTIONS), eva_cost,
        "block-local attention: EVA without chunks (the paper's Local baseline)",
        fixed=tuple((name, 0) for name in _CHUNK_OPTIONS), knob="window_size", flags="eva",
        check=check_options),
)
