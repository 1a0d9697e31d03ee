"""The elementwise passes of the blockwise kernel: bias, softmax and dropout forward, and their backward.

A group's logits S are B x H x G x w x keys (float32, contiguous): B rows, H heads, G blocks of w queries,
the first `width` keys local (they get the bias, H x w x width, the same for every block) and the rest
chunk summaries, of which block g sees those before seen[g] (causal groups; the others have weight 0).
Forward, row by row (S is overwritten):

    x = S + [bias ; 0],   lse = log sum exp x,   P = exp(x - lse),   S <- Z * P,

Z the dropout mask (0 or scale). Backward, given the logits S again, dP = dY V^T and lse:

    P = exp(x - lse),   S <- Z * P (for dV),   dP <- dS = P * (Z * dP - rowsum(P * Z * dP)),
    d_bias += dS over blocks.

(rowsum(P * Z * dP) is rowsum(dY * Y), but taking it from Y would keep Y alive until this backward.)

Each pass is written twice: in PyTorch (any device and dtype: the reference, with torch's fused softmax and
its backward, which recompute lse themselves) and, for float32 CPU tensors, as one C loop per row,
compiled on first use (about a second, cached; without a compiler the PyTorch passes run). The C loop
reads each row once where PyTorch makes several passes over the group; on the CPU those passes, not the
matrix products, made the blockwise kernel slower than torch's fused one.

Dropout masks are a function of (seed, element): on the CPU a counter-based hash (the same in both
implementations, so the backward draws the forward's mask again and the two can be compared); on other
devices torch's generator, seeded per group. Draws are 16 bits: an element is dropped when its draw is
below round(p 2^16), and kept ones are scaled by 2^16 / (2^16 - that threshold), so E[Z] = 1 exactly.
"""

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings

import torch

MASK32 = 0xFFFFFFFF

C_SOURCE = r"""
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* lowbias32 (C. Wellons): a bijection of 32-bit integers with good avalanche. */
static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x;
}

/* The 16-bit dropout draws of elements [e0, e0 + n) of a group: two to a hash of (seed, e / 2), low half
   first. They land in d[odd .. odd + n), odd = e0 & 1; d holds n + 2 at least. */
static const uint16_t *draws16(uint32_t s0, uint32_t s1, uint32_t e0, int64_t n, uint16_t *restrict d) {
    uint32_t p0 = e0 >> 1;
    int64_t pairs = (int64_t)((e0 + (uint32_t)n + 1) >> 1) - p0;
    for (int64_t k = 0; k < pairs; k++) {
        uint32_t h = mix32(mix32(p0 + (uint32_t)k + s0) ^ s1);
        d[2 * k] = (uint16_t)(h & 0xFFFFu);
        d[2 * k + 1] = (uint16_t)(h >> 16);
    }
    return d + (e0 & 1);
}

static inline float max2(float a, float b) { return a > b ? a : b; }  /* vmaxps; fmaxf would be a call */

/* exp(x) for x <= 0 (x - max), to about 2 ulp; 0 below -87 (Cephes' expf, written to vectorise). */
static inline float exp_nonpositive(float x) {
    float c = max2(x, -87.0f);
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round(c / ln 2): 12582912 = 1.5 2^23 */
    float r = c - n * 0.693359375f + n * 2.12194440e-4f;               /* c - n ln 2, in two parts */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += (int32_t)n << 23;  /* p 2^n */
    memcpy(&p, &bits, sizeof p);
    return x < -87.0f ? 0.0f : p;
}

static inline void add_bias(float *restrict x, const float *restrict bias, int64_t width) {
    if (!bias) return;
    for (int64_t j = 0; j < width; j++) x[j] = max2(x[j] + bias[j], -FLT_MAX);
}

void eva_softmax_dropout_forward(float *S, float *lse, const float *bias, const int64_t *seen, int64_t B, int64_t H, int64_t G,
                                 int64_t w, int64_t keys, int64_t width, uint32_t threshold, float scale,
                                 uint32_t s0, uint32_t s1, int threads) {
    #pragma omp parallel num_threads(threads)
    {
    uint16_t *buffer = threshold ? malloc((keys + 2) * sizeof *buffer) : 0;
    if (threshold && !buffer) abort();
    #pragma omp for schedule(static)
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t gi = 0; gi < G * w; gi++) {
                int64_t r = (b * H + h) * G * w + gi;
                float *restrict x = S + r * keys;
                int64_t n = seen ? seen[gi / w] : keys;
                add_bias(x, bias ? bias + (h * w + gi % w) * width : 0, width);
                float m = -FLT_MAX, sum = 0.0f;
                #pragma omp simd reduction(max : m)
                for (int64_t j = 0; j < n; j++) m = max2(m, x[j]);
                for (int64_t j = 0; j < n; j++) x[j] = exp_nonpositive(x[j] - m);
                for (int64_t j = n; j < keys; j++) x[j] = 0.0f;
                #pragma omp simd reduction(+ : sum)
                for (int64_t j = 0; j < n; j++) sum += x[j];
                lse[r] = m + logf(sum);
                float inv = 1.0f / sum, kept = inv * scale;
                uint32_t e0 = (uint32_t)(r * keys);
                if (threshold) {
                    const uint16_t *draw = draws16(s0, s1, e0, n, buffer);
                    for (int64_t j = 0; j < n; j++) x[j] *= draw[j] >= threshold ? kept : 0.0f;
                } else {
                    for (int64_t j = 0; j < n; j++) x[j] *= inv;
                }
            }
    free(buffer);
    }
}

void eva_softmax_dropout_backward(float *S, float *dP, const float *lse, const float *bias,
                                  const int64_t *seen, float *d_bias, int64_t B, int64_t H, int64_t G, int64_t w, int64_t keys,
                                  int64_t width, uint32_t threshold, float scale, uint32_t s0, uint32_t s1,
                                  int threads) {
    /* heads in parallel: the rows of one head share its d_bias */
    #pragma omp parallel num_threads(threads)
    {
    uint16_t *buffer = threshold ? malloc((keys + 2) * sizeof *buffer) : 0;
    float *P = malloc(keys * sizeof *P);
    if ((threshold && !buffer) || !P) abort();
    #pragma omp for schedule(static)
    for (int64_t h = 0; h < H; h++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t gi = 0; gi < G * w; gi++) {
                int64_t r = (b * H + h) * G * w + gi;
                float *restrict x = S + r * keys, *restrict dp = dP + r * keys;
                add_bias(x, bias ? bias + (h * w + gi % w) * width : 0, width);
                float l = lse[r], d = 0.0f;
                int64_t n = seen ? seen[gi / w] : keys;
                for (int64_t j = n; j < keys; j++) x[j] = dp[j] = 0.0f;
                for (int64_t j = 0; j < n; j++) P[j] = exp_nonpositive(x[j] - l);
                if (threshold) {
                    const uint16_t *draw = draws16(s0, s1, (uint32_t)(r * keys), n, buffer);
                    for (int64_t j = 0; j < n; j++) x[j] = draw[j] >= threshold ? scale * P[j] : 0.0f;
                } else {
                    for (int64_t j = 0; j < n; j++) x[j] = P[j];
                }
                #pragma omp simd reduction(+ : d)
                for (int64_t j = 0; j < n; j++) d += x[j] * dp[j];
                for (int64_t j = 0; j < n; j++) dp[j] = x[j] * dp[j] - P[j] * d;  /* P (Z dP - d) */
                if (d_bias) {
                    float *db = d_bias + (h * w + gi % w) * width;
                    for (int64_t j = 0; j < width; j++) db[j] += dp[j];
                }
            }
    free(buffer);
    free(P);
    }
}
"""


def threshold(p):
    """Draws below this (of 2^16) are dropped."""
    return round(p * 2**16)


def keep_scale(p):
    return 2**16 / (2**16 - threshold(p))


def _seed_words(seed):
    """Two 32-bit words of splitmix64(seed): the groups' seeds seed + i give unrelated masks."""
    z = (seed + 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    z ^= z >> 31
    return z & MASK32, z >> 32


def _mix32(x):
    """lowbias32 on int64 tensors holding 32-bit values (the products split so that none overflows)."""

    def times(x, c):
        return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32

    x = x ^ (x >> 16)
    x = times(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = times(x, 0x846CA68B)
    return x ^ (x >> 16)


def draws(shape, seed, device):
    """16-bit dropout draws (int32 in [0, 2^16)) of a group of `shape`, a function of the seed alone."""
    count = 1
    for n in shape:
        count *= n
    if device.type == "cpu":  # the C loop's hash
        s0, s1 = _seed_words(seed)
        pairs = torch.arange((count + 1) // 2, dtype=torch.int64)
        h = _mix32(_mix32((pairs + s0) & MASK32) ^ s1)
        return torch.stack([h & 0xFFFF, h >> 16], dim=-1).flatten()[:count].view(shape).to(torch.int32)
    generator = torch.Generator(device=device).manual_seed(seed)
    bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(-(2**63), None, generator=generator)
    return (bits.view(torch.int16)[:count].view(shape).to(torch.int32) + 2**15)


def _mask(S, p, seed):
    """Z of a group (S's shape and dtype): 0 or keep_scale(p)."""
    keep = draws(S.shape, seed, S.device) >= threshold(p)
    return keep.to(S.dtype).mul_(keep_scale(p))


def _biased_logits(S, bias, seen):
    """S + [bias ; 0] in place, the keys a block does not see at the lowest value; returns the bias width."""
    width = 0 if bias is None else bias.size(-1)
    if bias is not None:
        S[..., :width].add_(bias[None, :, None])  # H x w x width -> 1 x H x 1 x w x width
    if seen is not None:
        unseen = torch.arange(S.size(-1), device=S.device) >= torch.tensor(seen, device=S.device)[:, None]  # G x keys
        S.masked_fill_(unseen[:, None], torch.finfo(S.dtype).min)
    return width


def forward_torch(S, bias, seen, p, seed):
    """(Z * softmax(S + [bias ; 0]), lse), lse B x H x G x w; S is overwritten."""
    _biased_logits(S, bias, seen)
    lse = torch.logsumexp(S, dim=-1)
    P = torch.softmax(S, dim=-1)
    if p > 0:
        P.mul_(_mask(P, p, seed))
    return P, lse


def backward_torch(S, dP, lse, bias, seen, d_bias, p, seed):
    """(Z * P, dS); d_bias (H x w x width) += dS of the local keys over blocks. S and dP are overwritten.
    The fused softmax recomputes what lse holds (fewer passes on a GPU)."""
    width = _biased_logits(S, bias, seen)
    P = torch.softmax(S, dim=-1)
    if p > 0:
        Z = _mask(P, p, seed)
        dP.mul_(Z)
    dS = torch._softmax_backward_data(dP, P, -1, P.dtype)  # P * (Z dP - rowsum(P Z dP))
    if p > 0:
        P.mul_(Z)
    if d_bias is not None:
        d_bias += dS[..., :width].sum((0, 2))
    return P, dS


_library = None


def _cpu_signature():
    """What -march=native depends on: a cache folder shared by different machines keeps one build each."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _compile():
    """The C loops as a shared library, compiled once per source and kept in the user's cache folder."""
    digest = hashlib.sha1((C_SOURCE + _cpu_signature()).encode()).hexdigest()[:12]
    folder = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "fairseq_eva")
    path = os.path.join(folder, f"softmax_dropout_{digest}.so")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            source, library = os.path.join(tmp, "loops.c"), os.path.join(tmp, "loops.so")
            with open(source, "w") as f:
                f.write(C_SOURCE)
            cc = os.environ.get("CC", "cc")
            subprocess.run([cc, "-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC",
                            source, "-o", library, "-lm"], check=True, capture_output=True)
            os.replace(library, path)  # atomic: processes compiling at once each leave a whole file
    lib = ctypes.CDLL(path)
    i64, u32, f32, ptr = ctypes.c_int64, ctypes.c_uint32, ctypes.c_float, ctypes.c_void_p
    lib.eva_softmax_dropout_forward.argtypes = [ptr] * 4 + [i64] * 6 + [u32, f32, u32, u32, ctypes.c_int]
    lib.eva_softmax_dropout_backward.argtypes = [ptr] * 6 + [i64] * 6 + [u32, f32, u32, u32, ctypes.c_int]
    return lib


def library():
    """The compiled loops, or None where they cannot be built (no C compiler): then PyTorch's passes run."""
    global _library
    if _library is None:
        if os.environ.get("FAIRSEQ_EVA_NO_C"):
            _library = False
        else:
            try:
                _library = _compile()
            except (OSError, subprocess.CalledProcessError) as e:
                detail = getattr(e, "stderr", b"") or b""
                warnings.warn(f"fairseq_eva: the C loops of the blockwise kernel could not be built ({e}); "
                              f"running its PyTorch passes instead (slower on the CPU). {detail.decode()[-500:]}")
                _library = False
    return _library or None


def _use_c(S):
    return S.device.type == "cpu" and S.dtype == torch.float32 and S.numel() < 2**32 and library() is not None


def _ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _dims(S, bias):
    B, H, G, w, keys = S.shape
    return B, H, G, w, keys, 0 if bias is None else bias.size(-1)


def _seen_array(seen):
    return None if seen is None else (ctypes.c_int64 * len(seen))(*seen)


def forward(S, bias, seen, p, seed):
    """forward_torch, by the C loop where it applies (S contiguous float32 on the CPU), in place of S."""
    if not _use_c(S):
        return forward_torch(S, bias, seen, p, seed)
    lse = S.new_empty(S.shape[:-1])
    bias = None if bias is None else bias.contiguous()
    assert S.is_contiguous()
    library().eva_softmax_dropout_forward(_ptr(S), _ptr(lse), _ptr(bias), _seen_array(seen), *_dims(S, bias), threshold(p),
                                          keep_scale(p), *_seed_words(seed), torch.get_num_threads())
    return S, lse


def backward(S, dP, lse, bias, seen, d_bias, p, seed):
    """backward_torch, by the C loop where it applies, in place of S and dP."""
    if not _use_c(S):
        return backward_torch(S, dP, lse, bias, seen, d_bias, p, seed)
    # bound to names: a temporary's memory would be freed before the C loop reads it
    bias = None if bias is None else bias.contiguous()
    lse = lse.contiguous()
    assert S.is_contiguous() and dP.is_contiguous() and (d_bias is None or d_bias.is_contiguous())
    library().eva_softmax_dropout_backward(_ptr(S), _ptr(dP), _ptr(lse), _ptr(bias),
                                           _seen_array(seen), _ptr(d_bias), *_dims(S, bias), threshold(p), keep_scale(p),
                                           *_seed_words(seed), torch.get_num_threads())
    return S, dP
