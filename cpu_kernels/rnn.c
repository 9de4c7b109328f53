/* The LSTM recurrence of gpuops/ops/rnn.py's fused path (activations sigmoid, tanh, tanh; no clip,
 * peepholes, input_forget or sequence_lens), float32, over every time step at once.
 *
 * Layouts (those _fused_lstm builds): gates in the order [c~, o, f, i], the sigmoid gates' weights
 * and biases halved so that sigmoid(x) = tanh(x / 2) / 2 + 1/2 is tanh(g) / 2 + 1/2.
 *   xw  (T, 4, D, batch, H): the input projection plus both biases, per step in step order
 *   rt  (D, H, 4H): R^T per direction, its columns gate-major in that order
 *   h0, c0, h_n, c_n  (D, batch, H)
 *   y   (T, D, batch, H): h of every step, in step order (the caller flips a reverse direction)
 * Per step, direction and batch row: g = xw + h @ rt, then c = f * c + i * tanh(c~), h = o * tanh(c),
 * with the products and sums in the order the NumPy loop uses. Directions are independent; each
 * runs all its steps in turn so that its rt stays in cache (the two of a bidirectional layer on
 * threads of their own: pool_threads.h). Returns 0, or 1 when out of memory.
 * lstm_q8_f32 is the same recurrence with R in 8 bits (com.microsoft DynamicQuantizeLSTM's): rq (D, NB, H,
 * 64) int8, the 4H columns in that order packed in NB = ceil(4H / 64) blocks of 64 (the last one padded),
 * each column's product scaled by rs and shifted by its zero point rz (D, 4H) after the sum,
 * h @ (rs * (rq - rz)) = rs * (h @ rq - rz * sum(h)): a quarter of the float R's bytes to read per step,
 * where a large R (H = 512: 4 MB a direction) streams from memory at every step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "common.h"
#include "pool_threads.h"
#include "vmath.h"

#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define MADD(a, b, c) fmaf(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* float32 tanh(x) = sign(x) * e / (e + 2), e = expm1(2|x|), without branches so that loops over it
 * vectorise. expm1(z) = 2^n * expm1(r) + 2^n - 1 with z = n ln2 + r, r in [-ln2/2, ln2/2] (ln2 in two
 * parts: n * LN2_HI is exact), expm1(r) = r + r^2 * Q(r), Q fitted so that 1 + r + r^2 * Q(r) is
 * e^r within 3e-9 relative.
 * n is rounded by adding 1.5 * 2^23, whose low bits then hold n (defined for NaN too: no float to
 * int conversion). |x| is clamped to 10 (tanh is 1 in float32 beyond 9.01); NaN propagates.
 * Max error over every float32: 2.61 ulp against tanh in double (at 0.0624; 3 ulp from numpy.tanh). */
static inline float tanh_f32(float x) {
    const float a = fabsf(x);
    const float z = 2.0f * (a > 10.0f ? 10.0f : a);
    union { float f; uint32_t u; } k = {MADD(z, 1.44269504f, 12582912.0f)}, s;
    const float n = k.f - 12582912.0f;
    float r = MADD(n, -0.693145752f, z);
    r = MADD(n, -1.42860677e-6f, r);
    const float q = MADD(MADD(MADD(MADD(1.38146e-3f, r, 8.36871e-3f), r, 4.166839e-2f), r, 1.6666521e-1f), r,
                         4.9999993e-1f);
    s.u = (k.u + 127u) << 23;  /* 2^n: the exponent field n + 127 */
    const float e = MADD(s.f, MADD(r * r, q, r), s.f - 1.0f);
    return copysignf(e / (e + 2.0f), x);
}

/* acc (batch rows lda apart) += h (batch, K) @ r (K rows ldr apart), over N columns: for each four
 * rows of r, once over every batch row. */
static void gemm_acc(float* acc, int64_t lda, const float* h, const float* r, int64_t ldr, int64_t batch,
                     int64_t K, int64_t N) {
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        const float* restrict r0 = r + k * ldr;
        const float* restrict r1 = r0 + ldr;
        const float* restrict r2 = r1 + ldr;
        const float* restrict r3 = r2 + ldr;
        for (int64_t b = 0; b < batch; ++b) {
            float* restrict a = acc + b * lda;
            const float h0 = h[b * K + k], h1 = h[b * K + k + 1], h2 = h[b * K + k + 2], h3 = h[b * K + k + 3];
            for (int64_t j = 0; j < N; ++j)
                a[j] = MADD(h3, r3[j], MADD(h2, r2[j], MADD(h1, r1[j], MADD(h0, r0[j], a[j]))));
        }
    }
    for (; k < K; ++k) {
        const float* restrict r0 = r + k * ldr;
        for (int64_t b = 0; b < batch; ++b) {
            float* restrict a = acc + b * lda;
            const float h0 = h[b * K + k];
            for (int64_t j = 0; j < N; ++j) a[j] = MADD(h0, r0[j], a[j]);
        }
    }
}

/* acc (batch rows lda apart) += h (batch, K) @ (s * (q - z)) over N columns of the 8-bit q, each column's
 * scale s and zero point z applied after its sum. q is packed in blocks of QB columns (the last one
 * padded), each block's K rows of QB one after the other: a block's sums stay in registers over its
 * rows, which it reads in order, once per batch row and step. */
#define QB 64  /* columns a block (gpuops/ops/cpu/rnn.py's Q8_BLOCK) */
#define QV (QB / VL)  /* vectors of column sums in registers */

/* VL int8 at p as floats (sign extension and conversion in vector registers, which gcc's generic
 * vector conversions of 8-bit lanes do not use). */
#if defined(__AVX512F__)  /* (vmath.h includes immintrin.h) */
static inline vfloat widen8(const int8_t* p) {
    return (vfloat)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
#elif defined(__AVX2__)
_Static_assert(VL == 8, "one AVX2 register");
static inline vfloat widen8(const int8_t* p) {
    return (vfloat)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}
#else
static inline vfloat widen8(const int8_t* p) {
    vfloat v;
    for (int j = 0; j < VL; ++j) v[j] = (float)p[j];
    return v;
}
#endif

static void gemm_acc_q8(float* acc, int64_t lda, const float* h, const int8_t* q, const float* s, const float* z,
                        int64_t batch, int64_t K, int64_t N) {
    for (int64_t b = 0; b < batch; ++b) {
        const float* restrict hb = h + b * K;
        float* restrict a = acc + b * lda;
        float hsum = 0.0f;
        for (int64_t k = 0; k < K; ++k) hsum += hb[k];
        for (int64_t j0 = 0; j0 < N; j0 += QB) {
            const int8_t* qb = q + j0 * K;  /* the block's K rows of QB, one after the other */
            vfloat dot[QV] = {{0}};
            for (int64_t k = 0; k < K; ++k) {
                const float hk = hb[k];
                for (int v = 0; v < QV; ++v) dot[v] = vfma(vsplat(hk), widen8(qb + k * QB + v * VL), dot[v]);
            }
            const int64_t n = N - j0 < QB ? N - j0 : QB;
            for (int64_t j = 0; j < n; ++j)
                a[j0 + j] = MADD(s[j0 + j], MADD(-z[j0 + j], hsum, dot[j / VL][j % VL]), a[j0 + j]);
        }
    }
}

/* The input projection of DynamicQuantizeLSTM with W in 8 bits, as gemm_acc_q8 does the recurrence:
 * y(m, j) = s[j] * (x[m] @ q[:, j] - z[j] * sum(x[m])) + bias[j] for m < M (rows ldx apart), j < N, q packed
 * as lstm_q8_f32's R (K rows). Column j = g * H + h goes to y + m * ldm + g * ldg + h (the projection's
 * step-major layout). Two vectors of columns at a time: widened to floats once (K x 2 VL, in bw), then
 * multiplied by tiles of up to Q8_ROWS rows, the rows split evenly among the tiles. */
#define Q8_ROWS 6

typedef struct {
    const float *x, *rowsum, *s, *z, *bias;
    const int8_t* q;
    float* y;
    int64_t M, K, ldx, N, H, ldm, ldg;
    int status;
} Q8Product;

/* Row m's sums of the pair's n columns (their output offsets off) to y. */
static inline void q8_store(const Q8Product* a, int64_t m, int64_t j0, int64_t n, const int64_t* off, vfloat lo,
                            vfloat hi) {
    float* y = a->y + m * a->ldm;
    const float t = a->rowsum[m];
    for (int64_t l = 0; l < n; ++l) {
        const int64_t j = j0 + l;
        y[off[l]] = MADD(a->s[j], MADD(-a->z[j], t, l < VL ? lo[l] : hi[l - VL]), a->bias[j]);
    }
}

/* Rows [m, m + R) by the widened columns bw (K x 2 VL) from column j0; R a constant once inlined. */
static inline __attribute__((always_inline)) void q8_tile(const Q8Product* a, const float* bw, int64_t m, int64_t j0,
                                                           int64_t n, const int64_t* off, const int R) {
    vfloat acc[Q8_ROWS][2] = {{{0}}};
    const float* x = a->x + m * a->ldx;
    const int64_t ldx = a->ldx;
    for (int64_t k = 0; k < a->K; ++k) {
        const vfloat b0 = vload(bw + k * 2 * VL), b1 = vload(bw + k * 2 * VL + VL);
        for (int r = 0; r < R; ++r) {
            const vfloat v = vsplat(x[r * ldx + k]);
            acc[r][0] = vfma(v, b0, acc[r][0]);
            acc[r][1] = vfma(v, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; ++r) q8_store(a, m + r, j0, n, off, acc[r][0], acc[r][1]);
}

static void q8_product_part(void* ctx, int64_t part, int64_t parts) {
    Q8Product* a = ctx;
    const int64_t K = a->K, M = a->M, pairs = (a->N + 2 * VL - 1) / (2 * VL);
    int64_t p0, p1;
    pool_range(pairs, 1, part, parts, &p0, &p1);
    if (p0 >= p1) return;
    float* bw = aligned_alloc(64, sizeof(float) * (size_t)(2 * VL * (K > 0 ? K : 1)));
    if (!bw) {
        a->status = 1;
        return;
    }
    const int64_t tiles = (M + Q8_ROWS - 1) / Q8_ROWS;
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t j0 = p * 2 * VL;
        const int8_t* qb = a->q + (j0 / QB) * K * QB + j0 % QB;  /* the pair's columns in its block */
        for (int64_t k = 0; k < K; ++k) {
            const vfloat w[2] = {widen8(qb + k * QB), widen8(qb + k * QB + VL)};
            memcpy(bw + k * 2 * VL, w, sizeof w);
        }
        const int64_t n = a->N - j0 < 2 * VL ? a->N - j0 : 2 * VL;
        int64_t off[2 * VL];
        for (int64_t l = 0; l < n; ++l) off[l] = (j0 + l) / a->H * a->ldg + (j0 + l) % a->H;
        for (int64_t t = 0, m = 0; t < tiles; ++t) {
            const int64_t rows = (M - m) / (tiles - t) + ((M - m) % (tiles - t) != 0);
            switch (rows) {
                case 6: q8_tile(a, bw, m, j0, n, off, 6); break;
                case 5: q8_tile(a, bw, m, j0, n, off, 5); break;
                case 4: q8_tile(a, bw, m, j0, n, off, 4); break;
                case 3: q8_tile(a, bw, m, j0, n, off, 3); break;
                case 2: q8_tile(a, bw, m, j0, n, off, 2); break;
                default: q8_tile(a, bw, m, j0, n, off, 1);
            }
            m += rows;
        }
    }
    free(bw);
}

int lstm_q8_projection_f32(const float* x, const int8_t* q, const float* s, const float* z, const float* bias,
                           float* y, int64_t M, int64_t K, int64_t ldx, int64_t N, int64_t H, int64_t ldm,
                           int64_t ldg) {
    float* rowsum = malloc(sizeof(float) * (size_t)(M > 0 ? M : 1));
    if (!rowsum) return 1;
    for (int64_t m = 0; m < M; ++m) {
        float t = 0.0f;
        for (int64_t k = 0; k < K; ++k) t += x[m * ldx + k];
        rowsum[m] = t;
    }
    Q8Product a = {x, rowsum, s, z, bias, q, y, M, K, ldx, N, H, ldm, ldg, 0};
    const int64_t pairs = (N + 2 * VL - 1) / (2 * VL);
    pool_run(q8_product_part, &a, pool_parts(pairs, POOL_MIN_WORK / (2 * VL * (M * K > 0 ? M * K : 1)) + 1));
    free(rowsum);
    return a.status;
}

/* acc row b, gate g <- xw (T, G, D, batch, H) at step t, direction d. */
static void load_gates(float* acc, const float* xw, int64_t t, int64_t d, int64_t G, int64_t D, int64_t batch,
                       int64_t H, int64_t gates) {
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t g = 0; g < gates; ++g)
            memcpy(acc + (b * G + g) * H, xw + (((t * G + g) * D + d) * batch + b) * H, sizeof(float) * H);
}

typedef struct {
    const float *xw, *rt, *rbh, *h0, *c0;
    const int8_t* rq;  /* lstm_q8_f32's R, with its columns' scales and zero points: */
    const float *rs, *rz;
    float *y, *h_n, *c_n;
    int64_t T, D, batch, H, lbr, gru;
    int status;
} RnnArgs;

/* Direction d of lstm_f32 / lstm_q8_f32 (acc: batch * 4H floats of its own). */
static void lstm_direction(const RnnArgs* args, int64_t d, float* acc) {
    const float *xw = args->xw, *h0 = args->h0;
    float *y = args->y, *h_n = args->h_n;
    const int64_t T = args->T, D = args->D, batch = args->batch, H = args->H;
    const int64_t G = 4 * H, BH = batch * H;
    float* c = args->c_n + d * BH;
    memcpy(c, args->c0 + d * BH, sizeof(float) * BH);
    for (int64_t t = 0; t < T; ++t) {
        const float* h = t ? y + ((t - 1) * D + d) * BH : h0 + d * BH;
        load_gates(acc, xw, t, d, 4, D, batch, H, 4);
        if (args->rq)
            gemm_acc_q8(acc, G, h, args->rq + d * H * ((G + QB - 1) / QB * QB), args->rs + d * G, args->rz + d * G,
                        batch, H, G);
        else
            gemm_acc(acc, G, h, args->rt + d * H * G, G, batch, H, G);
        for (int64_t b = 0; b < batch; ++b) {
            float* restrict a = acc + b * G;
            float* restrict cb = c + b * H;
            float* restrict yb = y + (t * D + d) * BH + b * H;
            for (int64_t j = 0; j < G; ++j) a[j] = tanh_f32(a[j]);
            for (int64_t j = H; j < G; ++j) a[j] = a[j] * 0.5f + 0.5f;
            const float *ct = a, *o = a + H, *f = a + 2 * H, *i = a + 3 * H;
            for (int64_t j = 0; j < H; ++j) cb[j] = f[j] * cb[j] + i[j] * ct[j];
            for (int64_t j = 0; j < H; ++j) yb[j] = o[j] * tanh_f32(cb[j]);
        }
    }
    memcpy(h_n + d * BH, T ? y + ((T - 1) * D + d) * BH : h0 + d * BH, sizeof(float) * BH);
}

static void gru_direction(const RnnArgs* a, int64_t d, float* acc);

/* Directions [d0, d1): each has its own scratch. */
static void rnn_part(void* ctx, int64_t part, int64_t parts) {
    RnnArgs* a = ctx;
    int64_t d0, d1;
    pool_range(a->D, 1, part, parts, &d0, &d1);
    if (d0 >= d1) return;
    const int64_t G = (a->gru ? 3 : 4) * a->H;
    float* acc = malloc(sizeof(float) * (a->batch * G + a->batch * a->H + 1));
    if (!acc) {
        a->status = 1;
        return;
    }
    for (int64_t d = d0; d < d1; ++d)
        if (a->gru)
            gru_direction(a, d, acc);
        else
            lstm_direction(a, d, acc);
    free(acc);
}

/* The directions (independent) are split across the pool's threads (pool_threads.h) when each is
 * POOL_MIN_WORK multiply-adds or more. */
static int rnn(RnnArgs* a) {
    const int64_t per_direction = a->T * a->batch * a->H * (a->gru ? 3 : 4) * a->H;
    pool_run(rnn_part, a, pool_parts(a->D, per_direction >= POOL_MIN_WORK ? 1 : a->D + 1));
    return a->status;
}

int lstm_f32(const float* xw, const float* rt, const float* h0, const float* c0, float* y, float* h_n, float* c_n,
             int64_t T, int64_t D, int64_t batch, int64_t H) {
    RnnArgs a = {xw, rt, NULL, h0, c0, NULL, NULL, NULL, y, h_n, c_n, T, D, batch, H, 0, 0, 0};
    return rnn(&a);
}

/* An LSTM of the fused loop's kind (no sequence_lens, layout 0) as a (wide) program step: p = {w (D, n, 4H):
 * W^T in the fused gate order and scales, bias (D, 4H) likewise (both biases), rt, T, D, batch, n, H, reverse
 * (1: the one direction runs backwards; a second direction always does)}. x (T, batch, n), h0 and c0 (D,
 * batch, H; NULL: zeros), y (T, D, batch, H) in time order, c_n (D, batch, H; NULL: scratch). The
 * projection xw = x w + bias a step's batch rows at a time (gemm_acc), in scratch; then lstm_f32's steps. */
int lstm_program_f32(const int64_t* p, const float* x, const float* h0, float* y, const float* c0, float* c_n) {
    const float *w = (const float*)(intptr_t)p[0], *bias = (const float*)(intptr_t)p[1];
    const float* rt = (const float*)(intptr_t)p[2];
    const int64_t T = p[3], D = p[4], batch = p[5], n = p[6], H = p[7], rev1 = p[8], G = 4 * H, BH = batch * H;
    const int64_t steps = T * D * batch * G, states = D * BH;
    const int flip = rev1 || D == 2;
    float* buf = malloc(sizeof(float) * (size_t)(steps + batch * G + 3 * states + (flip ? T * states : 0) + 1));
    if (!buf) return 1;
    float *xw = buf, *acc = xw + steps, *zeros = acc + batch * G, *hn = zeros + states, *cs = hn + states;
    float* ys = flip ? cs + states : y;  /* the steps' outputs in step order */
    memset(zeros, 0, sizeof(float) * (size_t)states);
    for (int64_t d = 0; d < D; ++d) {
        const int rev = d == 1 || rev1;
        for (int64_t t = 0; t < T; ++t) {  /* step t reads x at time t, or T - 1 - t backwards */
            for (int64_t b = 0; b < batch; ++b) memcpy(acc + b * G, bias + d * G, sizeof(float) * (size_t)G);
            gemm_acc(acc, G, x + (rev ? T - 1 - t : t) * batch * n, w + d * n * G, G, batch, n, G);
            for (int64_t b = 0; b < batch; ++b)  /* gate g of row b to xw (T, 4, D, batch, H) */
                for (int64_t g = 0; g < 4; ++g)
                    memcpy(xw + (((t * 4 + g) * D + d) * batch + b) * H, acc + b * G + g * H, sizeof(float) * (size_t)H);
        }
    }
    float* cn = c_n ? c_n : cs;
    const int rc = lstm_f32(xw, rt, h0 ? h0 : zeros, c0 ? c0 : zeros, ys, hn, cn, T, D, batch, H);
    if (!rc && flip)  /* time order: a backward direction's step s is time T - 1 - s */
        for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < D; ++d) {
                const int64_t s = d == 1 || rev1 ? T - 1 - t : t;
                memcpy(y + (t * D + d) * BH, ys + (s * D + d) * BH, sizeof(float) * (size_t)BH);
            }
    free(buf);
    return rc;
}

int lstm_q8_f32(const float* xw, const int8_t* rq, const float* rs, const float* rz, const float* h0, const float* c0,
                float* y, float* h_n, float* c_n, int64_t T, int64_t D, int64_t batch, int64_t H) {
    RnnArgs a = {xw, NULL, NULL, h0, c0, rq, rs, rz, y, h_n, c_n, T, D, batch, H, 0, 0, 0};
    return rnn(&a);
}

/* The GRU of _fused_gru (activations sigmoid, tanh; no clip or sequence_lens), float32. Gates in the
 * ONNX order [z, r, h~], z's and r's weights and biases halved (sigmoid as above).
 *   xw  (T, 3, D, batch, H): the input projection plus biases: Wb + Rb for z and r; Wbh for h~, plus
 *       Rbh unless lbr (linear_before_reset)
 *   rt  (D, H, 3H): R^T per direction;  rbh (D, H): Rbh with lbr, else NULL
 *   h0, h_n (D, batch, H);  y (T, D, batch, H) in step order
 * Per step: z, r = sigmoid(xw + h @ rt); h~ = tanh(xw_h + r * (h @ rt_h + rbh)) with lbr, else
 * tanh(xw_h + (r * h) @ rt_h); h = h~ + z * (h - h~). */
/* Direction d of gru_f32 (acc: batch * 3H + batch * H floats of its own). */
static void gru_direction(const RnnArgs* args, int64_t d, float* acc) {
    const float *xw = args->xw, *rt = args->rt, *rbh = args->rbh, *h0 = args->h0;
    float *y = args->y, *h_n = args->h_n;
    const int64_t T = args->T, D = args->D, batch = args->batch, H = args->H, lbr = args->lbr;
    const int64_t G = 3 * H, BH = batch * H;
    float* rh = acc + batch * G;  /* r * h, without lbr */
    const float* r = rt + d * H * G;
    for (int64_t t = 0; t < T; ++t) {
        const float* h = t ? y + ((t - 1) * D + d) * BH : h0 + d * BH;
        load_gates(acc, xw, t, d, 3, D, batch, H, 2);
        for (int64_t b = 0; b < batch && lbr; ++b) {  /* h @ rt_h + rbh, apart from xw_h */
            if (rbh) memcpy(acc + b * G + 2 * H, rbh + d * H, sizeof(float) * H);
            else memset(acc + b * G + 2 * H, 0, sizeof(float) * H);
        }
        gemm_acc(acc, G, h, r, G, batch, H, lbr ? G : 2 * H);
        for (int64_t b = 0; b < batch; ++b) {
            float* restrict a = acc + b * G;
            for (int64_t j = 0; j < 2 * H; ++j) a[j] = tanh_f32(a[j]) * 0.5f + 0.5f;
        }
        if (!lbr) {
            for (int64_t b = 0; b < batch; ++b) {
                const float* restrict rb = acc + b * G + H;
                const float* restrict hb = h + b * H;
                float* restrict out = rh + b * H;
                for (int64_t j = 0; j < H; ++j) out[j] = rb[j] * hb[j];
                memcpy(acc + b * G + 2 * H, xw + (((t * 3 + 2) * D + d) * batch + b) * H, sizeof(float) * H);
            }
            gemm_acc(acc + 2 * H, G, rh, r + 2 * H, G, batch, H, H);
        }
        for (int64_t b = 0; b < batch; ++b) {
            float* restrict a = acc + b * G;
            const float *z = a, *rg = a + H, *hb = h + b * H;
            float* restrict hh = a + 2 * H;
            float* restrict yb = y + (t * D + d) * BH + b * H;
            if (lbr) {
                const float* restrict x = xw + (((t * 3 + 2) * D + d) * batch + b) * H;
                for (int64_t j = 0; j < H; ++j) hh[j] = rg[j] * hh[j] + x[j];
            }
            for (int64_t j = 0; j < H; ++j) hh[j] = tanh_f32(hh[j]);
            for (int64_t j = 0; j < H; ++j) yb[j] = hh[j] + z[j] * (hb[j] - hh[j]);
        }
    }
    memcpy(h_n + d * BH, T ? y + ((T - 1) * D + d) * BH : h0 + d * BH, sizeof(float) * BH);
}

int gru_f32(const float* xw, const float* rt, const float* rbh, const float* h0, float* y, float* h_n, int64_t T,
            int64_t D, int64_t batch, int64_t H, int64_t lbr) {
    RnnArgs a = {xw, rt, rbh, h0, NULL, NULL, NULL, NULL, y, h_n, NULL, T, D, batch, H, lbr, 1, 0};
    return rnn(&a);
}

int rnn_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
