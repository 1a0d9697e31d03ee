/* EVA's blockwise kernel on the CPU (float32): per head and block of queries, the matrix products (torch's
   own sgemm, passed in as a pointer) and the softmax passes between them, while the block's logits are in
   cache. What it computes is blockwise.py's, mask for mask; __init__.py calls it through ctypes. */

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* lowbias32 (C. Wellons): a bijection of 32-bit integers with good avalanche. */
static inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x;
}

/* The seed of global row r's dropout draws. */
static inline uint32_t row_seed(uint32_t s0, int64_t r) { return mix32((uint32_t)r + s0); }

/* The 16-bit dropout draws of a row's first n elements: two to a hash of (row seed, j / 2), low half first. */
static const uint16_t *row_draws(uint32_t seed, uint32_t s1, int64_t n, uint16_t *restrict d) {
    for (int64_t k = 0; k < (n + 1) / 2; k++) {
        uint32_t h = mix32(mix32((uint32_t)k + seed) ^ s1);
        d[2 * k] = (uint16_t)(h & 0xFFFFu);
        d[2 * k + 1] = (uint16_t)(h >> 16);
    }
    return d;
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

/* x (n logits, biased) <- Z * softmax(x); returns the log-sum-exp. */
static float softmax_dropout_row(float *restrict x, int64_t n, uint32_t threshold, float scale, uint32_t seed, uint32_t s1,
                                 uint16_t *restrict buffer) {
    float m = -FLT_MAX, sum = 0.0f;
    #pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = max2(m, x[j]);
    for (int64_t j = 0; j < n; j++) x[j] = exp_nonpositive(x[j] - m);
    #pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) sum += x[j];
    float inv = 1.0f / sum, kept = inv * scale;
    if (threshold) {
        const uint16_t *draw = row_draws(seed, s1, n, buffer);
        for (int64_t j = 0; j < n; j++) x[j] *= draw[j] >= threshold ? kept : 0.0f;
    } else {
        for (int64_t j = 0; j < n; j++) x[j] *= inv;
    }
    return m + logf(sum);
}

/* Given a row's biased logits x, dP and lse: x <- Z * P, dp <- dS = P (Z dP - rowsum(Z P dP)), and
   d_bias (its first width entries) += dS. P: a buffer of n. */
static void softmax_dropout_row_backward(float *restrict x, float *restrict dp, float *restrict P, float lse, int64_t n,
                                         uint32_t threshold, float scale, uint32_t seed, uint32_t s1,
                                         uint16_t *restrict buffer, float *restrict d_bias, int64_t width) {
    float d = 0.0f;
    for (int64_t j = 0; j < n; j++) P[j] = exp_nonpositive(x[j] - lse);
    if (threshold) {
        const uint16_t *draw = row_draws(seed, s1, n, buffer);
        for (int64_t j = 0; j < n; j++) x[j] = draw[j] >= threshold ? scale * P[j] : 0.0f;
    } else {
        for (int64_t j = 0; j < n; j++) x[j] = P[j];
    }
    #pragma omp simd reduction(+ : d)
    for (int64_t j = 0; j < n; j++) d += x[j] * dp[j];
    for (int64_t j = 0; j < n; j++) dp[j] = x[j] * dp[j] - P[j] * d;
    if (d_bias)
        for (int64_t j = 0; j < width; j++) d_bias[j] += dp[j];
}

typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *, const float *, const float *,
                         const int *, const float *, const int *, const float *, float *, const int *);

typedef struct {
    int64_t B, H, N, d, w, offset, width, C;  /* N: a multiple of w; C: the summaries given */
    const int64_t *chunks_seen;  /* per block: how many summaries it sees (a prefix) */
    const int64_t *lengths;      /* B: keys at or after lengths[b] are hidden */
    const uint8_t *chunk_ok;     /* B x C, or NULL: a summary is hidden where 0 */
    const float *bias;           /* H x w x width, or NULL: added to the local logits */
    float scale, keep;
    uint32_t threshold, s0, s1;
    int threads;
    sgemm_fn sgemm;
} eva_layer;

/* Row-major C (m x n) = alpha op(A) op(B) + beta C by the column-major sgemm (C^T = op(B)^T op(A)^T). */
static void gemm(const eva_layer *L, char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    int mi = (int)m, ni = (int)n, ki = (int)k, la = (int)lda, lb = (int)ldb, lc = (int)ldc;
    L->sgemm(&tb, &ta, &ni, &mi, &ki, &alpha, B, &lb, A, &la, &beta, C, &lc);
}

/* Where a block's operands are: block blk of head h of batch row b. */
typedef struct {
    int64_t b, h, blk;
    int64_t K, keys, a, e;      /* summaries seen, logits a row, local columns inside the sequence [a, e) */
    int64_t q, local, summary;  /* offsets: the block's first query, its first local key, the summaries */
} block;

static block locate(const eva_layer *L, int64_t b, int64_t h, int64_t blk) {
    block t = {b, h, blk};
    int64_t hd = L->H * L->d, lo = blk * L->w + L->offset;
    t.K = L->chunks_seen[blk];
    t.keys = L->width + t.K;
    t.a = lo < 0 ? -lo : 0;
    t.e = L->N - lo < L->width ? L->N - lo : L->width;
    t.q = (b * L->N + blk * L->w) * hd + h * L->d;
    t.local = (b * L->N + lo + t.a) * hd + h * L->d;
    t.summary = (b * L->H + h) * L->C * L->d;
    return t;
}

/* S (w x keys) = scale Q [K_local ; K~]^T, the hidden keys at -FLT_MAX, plus the bias. */
static void logits(const eva_layer *L, const block *t, const float *q, const float *k, const float *ks, float *S) {
    int64_t hd = L->H * L->d, keys = t->keys, lo = t->blk * L->w + L->offset;
    gemm(L, 'N', 'T', L->w, t->e - t->a, L->d, L->scale, q + t->q, hd, k + t->local, hd, 0.0f, S + t->a, keys);
    if (t->K) gemm(L, 'N', 'T', L->w, t->K, L->d, L->scale, q + t->q, hd, ks + t->summary, L->d, 0.0f, S + L->width, keys);
    int64_t seen_end = L->lengths[t->b] - lo;  /* local columns at or after it are past the row's length */
    if (seen_end > t->e) seen_end = t->e;
    if (seen_end < t->a) seen_end = t->a;
    const uint8_t *ok = L->chunk_ok ? L->chunk_ok + t->b * L->C : 0;
    for (int64_t i = 0; i < L->w; i++) {
        float *x = S + i * keys;
        for (int64_t j = 0; j < t->a; j++) x[j] = -FLT_MAX;
        for (int64_t j = seen_end; j < L->width; j++) x[j] = -FLT_MAX;
        if (ok)
            for (int64_t c = 0; c < t->K; c++)
                if (!ok[c]) x[L->width + c] = -FLT_MAX;
        add_bias(x, L->bias ? L->bias + (t->h * L->w + i) * L->width : 0, L->width);
    }
}

static inline int64_t row_id(const eva_layer *L, const block *t, int64_t i) {
    return (t->b * L->H + t->h) * L->N + t->blk * L->w + i;
}

/* Returns 0, or -1 where a thread could not allocate its buffers (then nothing was computed). */
int eva_forward(const eva_layer *L, const float *q, const float *k, const float *v, const float *ks, const float *beta,
                float *out, float *lse) {
    int64_t hd = L->H * L->d, w = L->w, keys_max = L->width + L->C;
    int failed = 0;
    #pragma omp parallel num_threads(L->threads)
    {
    float *S = malloc(w * keys_max * sizeof *S);
    uint16_t *buffer = malloc((keys_max + 2) * sizeof *buffer);
    if (!S || !buffer) {
        #pragma omp atomic write
        failed = 1;
    }
    #pragma omp barrier
    if (!failed)
    #pragma omp for collapse(3) schedule(static)
    for (int64_t h = 0; h < L->H; h++)
        for (int64_t b = 0; b < L->B; b++)
            for (int64_t blk = 0; blk < L->N / w; blk++) {
                block t = locate(L, b, h, blk);
                logits(L, &t, q, k, ks, S);
                for (int64_t i = 0; i < w; i++) {
                    int64_t r = row_id(L, &t, i);
                    lse[r] = softmax_dropout_row(S + i * t.keys, t.keys, L->threshold, L->keep, row_seed(L->s0, r), L->s1,
                                                 buffer);
                }
                /* Y = (Z P) [V_local ; beta] */
                gemm(L, 'N', 'N', w, L->d, t.e - t.a, 1.0f, S + t.a, t.keys, v + t.local, hd, 0.0f, out + t.q, hd);
                if (t.K)  /* (a block's own queries are local keys: t.e > t.a, the product above wrote out) */
                    gemm(L, 'N', 'N', w, L->d, t.K, 1.0f, S + L->width, t.keys, beta + t.summary, L->d, 1.0f, out + t.q, hd);
            }
    free(S);
    free(buffer);
    }
    return failed ? -1 : 0;
}

/* dk, dv, dks, dbeta, dbias are accumulated into (zeros from the caller); dq is written. Returns 0, or -1 where a
   thread could not allocate its buffers. */
int eva_backward(const eva_layer *L, const float *q, const float *k, const float *v, const float *ks, const float *beta,
                 const float *dy, const float *lse, float *dq, float *dk, float *dv, float *dks, float *dbeta, float *dbias) {
    int64_t hd = L->H * L->d, w = L->w, width = L->width, keys_max = width + L->C;
    int failed = 0;
    #pragma omp parallel num_threads(L->threads)
    {
    float *S = malloc(w * keys_max * sizeof *S), *dP = malloc(w * keys_max * sizeof *dP), *P = malloc(keys_max * sizeof *P);
    uint16_t *buffer = malloc((keys_max + 2) * sizeof *buffer);
    if (!S || !dP || !P || !buffer) {
        #pragma omp atomic write
        failed = 1;
    }
    #pragma omp barrier
    if (!failed)
    #pragma omp for schedule(static)  /* heads in parallel: the rows of one head share its dbias */
    for (int64_t h = 0; h < L->H; h++)
        for (int64_t b = 0; b < L->B; b++)
            for (int64_t blk = 0; blk < L->N / w; blk++) {
                block t = locate(L, b, h, blk);
                int64_t keys = t.keys, local = t.e - t.a;
                logits(L, &t, q, k, ks, S);
                /* dP = dY [V_local ; beta]^T, 0 for the keys outside the sequence */
                for (int64_t i = 0; i < w; i++) {
                    memset(dP + i * keys, 0, t.a * sizeof *dP);
                    memset(dP + i * keys + t.e, 0, (width - t.e) * sizeof *dP);
                }
                gemm(L, 'N', 'T', w, local, L->d, 1.0f, dy + t.q, hd, v + t.local, hd, 0.0f, dP + t.a, keys);
                if (t.K) gemm(L, 'N', 'T', w, t.K, L->d, 1.0f, dy + t.q, hd, beta + t.summary, L->d, 0.0f, dP + width, keys);
                for (int64_t i = 0; i < w; i++) {
                    int64_t r = row_id(L, &t, i);
                    softmax_dropout_row_backward(S + i * keys, dP + i * keys, P, lse[r], keys, L->threshold, L->keep,
                                                 row_seed(L->s0, r), L->s1, buffer, dbias ? dbias + (h * w + i) * width : 0,
                                                 width);
                }
                /* S holds Z P and dP holds dS: dV += (Z P)^T dY, dQ = scale dS K, dK += scale dS^T Q */
                gemm(L, 'T', 'N', local, L->d, w, 1.0f, S + t.a, keys, dy + t.q, hd, 1.0f, dv + t.local, hd);
                gemm(L, 'N', 'N', w, L->d, local, L->scale, dP + t.a, keys, k + t.local, hd, 0.0f, dq + t.q, hd);
                gemm(L, 'T', 'N', local, L->d, w, L->scale, dP + t.a, keys, q + t.q, hd, 1.0f, dk + t.local, hd);
                if (t.K) {
                    gemm(L, 'T', 'N', t.K, L->d, w, 1.0f, S + width, keys, dy + t.q, hd, 1.0f, dbeta + t.summary, L->d);
                    gemm(L, 'N', 'N', w, L->d, t.K, L->scale, dP + width, keys, ks + t.summary, L->d, 1.0f, dq + t.q, hd);
                    gemm(L, 'T', 'N', t.K, L->d, w, L->scale, dP + width, keys, q + t.q, hd, 1.0f, dks + t.summary, L->d);
                }
            }
    free(S);
    free(dP);
    free(P);
    free(buffer);
    }
    return failed ? -1 : 0;
}

/* The build's check that the BLAS takes 32-bit integers (an ILP64 one would read 64 bits for each and run on
   sizes that are not there, corrupting memory): the integer arguments of a 2 x 2 product sit in the low half
   of 64-bit slots, m's with a high half of 1, so that a 32-bit BLAS reads 2 for every one and a 64-bit one reads
   m = 2^32 + 2 with leading dimensions of 2, which it refuses (or miscomputes). Returns 1 where the product is
   right. Run in a child process at build time: a BLAS that aborts on bad arguments takes only the child down. */
int eva_check_sgemm(sgemm_fn sgemm) {
    int32_t m[2] = {2, 1}, n[2] = {2, 0};  /* little-endian: the low half first */
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, one = 1.0f, zero = 0.0f;
    float c[4] = {0, 0, 0, 0};
    sgemm("N", "N", m, n, n, &one, a, n, b, n, &zero, c, n);
    /* column-major: A = [1 3; 2 4], B = [5 7; 6 8], AB = [23 31; 34 46] */
    return c[0] == 23.0f && c[1] == 34.0f && c[2] == 31.0f && c[3] == 46.0f;
}
