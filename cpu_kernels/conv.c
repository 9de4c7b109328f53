/* Depthwise 2-D convolution (group == channels), NCHW float32: what NumPy cannot do in one pass, a
 * per-channel multiply-add over the kernel taps. Output channel oc = c * mult + m reads input
 * channel c. Per input channel: its phase planes (common.h); then VL cells of ROWS output rows at a
 * time sum their taps in registers, clamped to [lo, hi] (a fused Relu or Clip). Narrow maps of many
 * channels go VL channels at a time instead (channel blocks, common.h). Returns 0, or 1 when out of
 * memory. */
/* Multiply-adds fused (one rounding per step, as the GEMM and direct kernels): -std=c11 turns GCC's
 * contraction off, and without it the taps run as separate multiplies and adds. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <stdlib.h>
#include "common.h"
#include "conv_params.h"
#include "pool_threads.h"

/* Depthwise conv over channel blocks (common.h): VL channels of VL output cells at a time. */
static int depthwise_blocks(const Windows* g, const float* x, const float* w, const float* bias, float* y,
                            int64_t C, int64_t mult, float lo, float hi, int64_t q0, int64_t q1) {
    Block b;
    if (block_init(g, &b, 0.0f)) return 1;
    const int64_t K = g->KH * g->KW, OHW = g->OH * g->OW;
    vfloat t[VL];
    float* wt = malloc(sizeof(vfloat) * (K + 1));  /* tap k of the block's VL channels at wt[k * VL], then the bias */
    if (!wt) {
        free(b.in_at);
        return 1;
    }
    const int64_t nb = (C + VL - 1) / VL;
    for (int64_t q = q0; q < q1; ++q) {  /* (image, channel block) pairs */
        const int64_t n = q / nb, c0 = q % nb * VL;
        const int64_t nc = C - c0 < VL ? C - c0 : VL;
        block_load(g, &b, x + (n * C + c0) * g->H * g->W, g->H * g->W, nc);
        for (int64_t m = 0; m < mult; ++m) {
            for (int64_t j = 0; j < VL; ++j) {
                const int64_t oc = (c0 + j) * mult + m;
                for (int64_t k = 0; k < K; ++k) wt[k * VL + j] = j < nc ? w[oc * K + k] : 0.0f;
                wt[K * VL + j] = j < nc && bias ? bias[oc] : 0.0f;
            }
            const vfloat bv = vload(wt + K * VL);
            float* yb = y + (n * C * mult + c0 * mult + m) * OHW;  /* lane j's plane: yb + j * mult * OHW */
            for (int64_t f = 0; f < OHW; f += VL) {
                const int64_t nf = OHW - f < VL ? OHW - f : VL;
                for (int64_t i0 = 0; i0 < VL; i0 += ROWS) {
                    vfloat a[ROWS];
                    for (int r = 0; r < ROWS; ++r) a[r] = bv;
                    for (int64_t k = 0; k < K; ++k) {
                        const vfloat wv = vload(wt + k * VL);
                        for (int r = 0; r < ROWS; ++r)
                            a[r] += wv * vload(b.blk + b.out_at[f + (i0 + r < nf ? i0 + r : 0)] + b.taps[k]);
                    }
                    for (int r = 0; r < ROWS; ++r) t[i0 + r] = vclamp(a[r], lo, hi);
                }
                tile_store(t, nf, nc, yb, mult * OHW, f);
            }
        }
    }
    free(wt);
    free(b.in_at);
    return 0;
}

/* Output planes [p0, p1) (p = n * C * mult + oc) of the 1x1 per-channel affine map (a BatchNormalization
 * as a 1x1 conv): one pass. */
static void depthwise_affine(const float* x, const float* w, const float* bias, float* y, int64_t C, int64_t HW,
                             int64_t mult, float lo, float hi, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t oc = p % (C * mult);
        const float* restrict xc = x + (p / (C * mult) * C + oc / mult) * HW;
        float* restrict yc = y + p * HW;
        const float wk = w[oc], b = bias ? bias[oc] : 0.0f;
        for (int64_t i = 0; i < HW; ++i) {
            const float v = xc[i] * wk + b;
            const float u = v < lo ? lo : v;  /* NaN stays */
            yc[i] = u > hi ? hi : u;
        }
    }
}

/* One output plane yc (OH x OW) of input plane buf's phase planes: ROWS output rows by VL cells at a time
 * sum their K taps (offs, weights wk, from the bias b) in registers, clamped to [lo, hi]. K is a constant
 * where the caller inlines it (3x3, 5x5): its taps unrolled, their weights in registers. A vector store
 * spills at most to y_end. */
static inline __attribute__((always_inline)) void depthwise_plane(const Windows* g, const float* buf,
                                                                   const int64_t* offs, const float* wk, float b,
                                                                   float lo, float hi, float* yc, const float* y_end,
                                                                   const int64_t K) {
    const int64_t OH = g->OH, OW = g->OW, Qw = g->Qw;
    vfloat wv[K];  /* the weights, where no store to y can change them */
    int64_t ov[K];
    for (int64_t t = 0; t < K; ++t) wv[t] = (vfloat){0} + wk[t], ov[t] = offs[t];
    for (int64_t oy = 0; oy < OH; oy += ROWS) {
        const int64_t nr = OH - oy < ROWS ? OH - oy : ROWS;
        const float* rows[ROWS];
        for (int r = 0; r < ROWS; ++r) rows[r] = buf + (oy + (r < nr ? r : 0)) * Qw;
        for (int64_t ox = 0; ox >= 0; ox = next_vector(ox, OW)) {
            vfloat a[ROWS];
            for (int r = 0; r < ROWS; ++r) a[r] = (vfloat){0} + b;
            for (int64_t t = 0; t < K; ++t)
                for (int r = 0; r < ROWS; ++r) a[r] += wv[t] * vload(rows[r] + ov[t] + ox);
            if (nr == ROWS && OW >= VL) {  /* whole vectors of whole rows: plain stores, the sums in registers */
                for (int r = 0; r < ROWS; ++r) {
                    const vfloat v = vclamp(a[r], lo, hi);
                    memcpy(yc + (oy + r) * OW + ox, &v, sizeof v);
                }
                continue;
            }
            for (int r = 0; r < nr; ++r) {
                float* dst = yc + (oy + r) * OW + ox;
                vstore(dst, vclamp(a[r], lo, hi), OW < VL ? OW : VL, y_end - dst);
            }
        }
    }
}

/* Input planes [p0, p1) (p = n * C + c) over their phase planes; their output planes p * mult + m are
 * contiguous, and a vector store spills at most to the end of the last of them. Each output plane gets
 * the epilogue epi (its residual in z, then its activation; NULL: none) while it is still in cache. */
static int depthwise_planes(const Windows* g, const float* x, const float* w, const float* bias, float* y,
                            int64_t C, int64_t mult, float lo, float hi, int64_t p0, int64_t p1,
                            const struct conv_params* epi, const float* z) {
    const int64_t K = g->KH * g->KW, OHW = g->OH * g->OW;
    int64_t* offs = malloc(sizeof(int64_t) * K + sizeof(float) * planes_size(g));  /* offsets, then planes */
    if (!offs) return 1;
    float* buf = (float*)(offs + K);
    tap_offsets(g, offs);
    const float* y_end = y + p1 * mult * OHW;  /* rows are written in order up to here */
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t c = p % C;
        fill_planes(g, x + p * g->H * g->W, 0.0f, buf);
        for (int64_t m = 0; m < mult; ++m) {
            const int64_t oc = c * mult + m;
            const float* wk = w + oc * K;
            const float b = bias ? bias[oc] : 0.0f;
            float* yc = y + (p * mult + m) * OHW;
            if (K == 9)
                depthwise_plane(g, buf, offs, wk, b, lo, hi, yc, y_end, 9);
            else if (K == 25)
                depthwise_plane(g, buf, offs, wk, b, lo, hi, yc, y_end, 25);
            else
                depthwise_plane(g, buf, offs, wk, b, lo, hi, yc, y_end, K);
            if (epi) epilogue_rows(yc, OHW, z ? z + (p * mult + m) * OHW : NULL, OHW, 0, 1, OHW, epi);
        }
    }
    free(offs);
    return 0;
}

typedef struct {
    const Windows* g;
    const float *x, *w, *bias;
    float* y;
    int64_t N, C, mult, path;  /* path 0: affine, 1: channel blocks, 2: phase planes */
    float lo, hi;
    const struct conv_params* epi;  /* the phase planes' epilogue of each output plane (NULL: none) */
    const float* z;
    int status;
} DepthwiseArgs;

static void depthwise_part(void* ctx, int64_t part, int64_t parts) {
    DepthwiseArgs* a = ctx;
    const Windows* g = a->g;
    int64_t lo, hi;
    if (a->path == 0) {
        pool_range(a->N * a->C * a->mult, 1, part, parts, &lo, &hi);
        depthwise_affine(a->x, a->w, a->bias, a->y, a->C, g->H * g->W, a->mult, a->lo, a->hi, lo, hi);
    } else if (a->path == 1) {
        pool_range(a->N * ((a->C + VL - 1) / VL), 1, part, parts, &lo, &hi);
        if (lo < hi && depthwise_blocks(g, a->x, a->w, a->bias, a->y, a->C, a->mult, a->lo, a->hi, lo, hi))
            a->status = 1;
    } else {
        pool_range(a->N * a->C, 1, part, parts, &lo, &hi);
        if (lo < hi && depthwise_planes(g, a->x, a->w, a->bias, a->y, a->C, a->mult, a->lo, a->hi, lo, hi, a->epi,
                                        a->z))
            a->status = 1;
    }
}

/* 9-25 taps a cell against the GEMM's hundreds: 3x3 depthwise convs of 16-72 channels on 16x16-32x32 maps
 * ran at 7-10 G multiply-adds a second on one core of the AMD EPYC (2026-11-29), stride-2 ones at 5 G, the
 * GEMM's 1x1 convs at 35-40 G. */
#define DEPTHWISE_COST 4

/* The work is split across the pool's threads (pool_threads.h) by planes or channel blocks, each
 * computed as in one part, when each part gets at least POOL_MIN_WORK multiply-adds of the GEMM's worth.
 * The phase planes path applies epi (with the residual z) to each output plane as it is made, and says so
 * in *applied. */
static int depthwise(const Windows* g, const float* x, const float* w, const float* bias, float* y, int64_t N,
                     int64_t C, int64_t mult, float lo, float hi, const struct conv_params* epi, const float* z,
                     int* applied) {
    DepthwiseArgs a = {g, x, w, bias, y, N, C, mult, 2, lo, hi, epi, z, 0};
    const int64_t per_plane = g->KH * g->KW * g->OH * g->OW + 1;
    /* stride-1 rows of two vectors or more: one copy of each plane costs less than the channel blocks'
     * transposes in and out (3x3 on 16x32x32: 19.3 -> 15.5 us a call, 48x32x32: 47.2 -> 40.0 us; on 28-wide
     * rows the blocks still win) */
    const int wide = g->sw == 1 && g->OW >= 2 * VL;
    int64_t units = N * C, per_unit = per_plane * mult;
    if (g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->OH == g->H &&
        g->OW == g->W) {
        a.path = 0;
        units = N * C * mult;
        per_unit = per_plane;
    } else if (use_blocks(C, g->OW) && !wide) {
        a.path = 1;
        units = N * ((C + VL - 1) / VL);
        per_unit = per_plane * mult * VL;
    }
    *applied = a.path == 2 && epi;
    /* a depthwise multiply-add costs about DEPTHWISE_COST of the GEMM's, for which POOL_MIN_WORK is set;
     * twice that through strided phase planes, whose fill is most of such a call */
    per_unit *= g->sh > 1 || g->sw > 1 ? 2 * DEPTHWISE_COST : DEPTHWISE_COST;
    pool_run(depthwise_part, &a, pool_parts(units, (POOL_MIN_WORK + per_unit - 1) / per_unit));
    return a.status;
}

int depthwise_conv2d_f32(const float* x, const float* w, const float* bias, float* y,
                         int64_t N, int64_t C, int64_t H, int64_t W, int64_t mult,
                         int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, float lo, float hi) {
    const Windows g = windows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
    int applied;
    return depthwise(&g, x, w, bias, y, N, C, mult, lo, hi, NULL, NULL, &applied);
}

/* im2col of the output rows [oy0, oy1) of one NCHW image (any stride, padding, dilation), for the
 * blocked im2col + GEMM: cols[(c * KH + ky) * KW + kx][(oy - oy0) * OW + ox] is the input cell that
 * tap (ky, kx) of output cell (oy, ox) reads in channel c, 0 in the padding. From the phase planes
 * each row is one contiguous copy, where a strided view copies an element at a time. */
typedef struct {
    const Windows* g;
    const float* x;
    float* cols;
    int64_t C, oy0, oy1;
    int status;
} Im2colArgs;

/* Input channels [c0, c1) of im2col2d_f32: rows (c * KH + ky) * KW + kx of the columns. */
static void im2col_part(void* ctx, int64_t part, int64_t parts) {
    Im2colArgs* a = ctx;
    const Windows* g = a->g;
    int64_t c0, c1;
    pool_range(a->C, 1, part, parts, &c0, &c1);
    if (c0 >= c1) return;
    const int64_t K = g->KH * g->KW, OW = g->OW, oy0 = a->oy0, oy1 = a->oy1, L = (oy1 - oy0) * OW;
    const int64_t last = oy1 + (g->KH - 1) * g->dh / g->sh;
    int64_t* offs = malloc(sizeof(int64_t) * K + sizeof(float) * planes_size(g));  /* offsets, then planes */
    if (!offs) {
        a->status = 1;
        return;
    }
    float* buf = (float*)(offs + K);
    tap_offsets(g, offs);
    for (int64_t c = c0; c < c1; ++c) {
        fill_plane_rows(g, a->x + c * g->H * g->W, 0.0f, buf, oy0, last < g->Qh ? last : g->Qh);
        for (int64_t t = 0; t < K; ++t) {
            float* restrict dst = a->cols + (c * K + t) * L;
            for (int64_t oy = oy0; oy < oy1; ++oy) {
                const float* restrict src = buf + offs[t] + oy * g->Qw;
                for (int64_t ox = 0; ox < OW; ++ox) dst[(oy - oy0) * OW + ox] = src[ox];
            }
        }
    }
    free(offs);
}

/* Channels split across the pool's threads (pool_threads.h) from POOL_MIN_WORK copied cells per part. */
int im2col2d_f32(const float* x, float* cols, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                 int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                 int64_t oy0, int64_t oy1) {
    const Windows g = windows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
    Im2colArgs a = {&g, x, cols, C, oy0, oy1, 0};
    const int64_t per_channel = KH * KW * (oy1 - oy0) * OW + H * W + 1;
    pool_run(im2col_part, &a, pool_parts(C, (POOL_MIN_WORK + per_channel - 1) / per_channel));
    return a.status;
}

typedef struct {
    float* y;
    const float *bias, *z;
    int64_t rows, M, L, ld;
    float lo, hi;
} EpilogueArgs;

/* Rows [r0, r1) of the epilogues below: + bias[r % M] (+ z's row when z), clamped. */
static void epilogue_part(void* ctx, int64_t part, int64_t parts) {
    const EpilogueArgs* a = ctx;
    int64_t r0, r1;
    pool_range(a->rows, 1, part, parts, &r0, &r1);
    const float lo = a->lo, hi = a->hi;
    for (int64_t r = r0; r < r1; ++r) {
        float* restrict row = a->y + r * a->ld;
        const float b = a->bias ? a->bias[r % a->M] : 0.0f;
        if (a->z) {
            const float* restrict zr = a->z + r * a->L;
            for (int64_t l = 0; l < a->L; ++l) {
                const float v = (row[l] + b) + zr[l];
                const float u = v < lo ? lo : v;  /* NaN stays */
                row[l] = u > hi ? hi : u;
            }
        } else {
            for (int64_t l = 0; l < a->L; ++l) {
                const float v = row[l] + b;
                const float u = v < lo ? lo : v;  /* NaN stays */
                row[l] = u > hi ? hi : u;
            }
        }
    }
}

/* The epilogue of a conv computed as a GEMM, in place over y (M rows of L, ld apart): + bias[m] (bias
 * may be NULL), clamped to [lo, hi] (a fused Relu or Clip), in one pass; rows split across the pool's
 * threads from POOL_MIN_WORK cells per part. */
int bias_clamp_f32(float* y, const float* bias, int64_t M, int64_t L, int64_t ld, float lo, float hi) {
    EpilogueArgs a = {y, bias, NULL, M, M > 0 ? M : 1, L, ld, lo, hi};
    pool_run(epilogue_part, &a, pool_parts(M, (POOL_MIN_WORK + L) / (L + 1)));
    return 0;
}

/* The epilogue of a conv with a residual input (com.microsoft FusedConv's Z), in place over y (N images
 * of M rows of L): y + bias[m] (bias may be NULL) + z, clamped to [lo, hi], in one pass, summed in that
 * order as the separate passes would. */
int bias_residual_clamp_f32(float* y, const float* bias, const float* z, int64_t N, int64_t M, int64_t L,
                            float lo, float hi) {
    EpilogueArgs a = {y, bias, z, N * M, M > 0 ? M : 1, L, L, lo, hi};
    pool_run(epilogue_part, &a, pool_parts(N * M, (POOL_MIN_WORK + L) / (L + 1)));
    return 0;
}

/* depthwise_conv2d_f32 of p (conv_params.h: group == C, M = C * multiplier), then z (a residual of y's
 * shape, or NULL) and p's activation when its store cannot apply them. */
int depthwise_conv2d_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y) {
    const int store = conv_store_clamps(p, z);
    const float inf = __builtin_inff();
    const Windows g = conv_windows(p);
    int applied = 0;
    const int status = depthwise(&g, x, p->weights, p->bias, y, p->N, p->C, p->M / p->C, store ? p->lo : -inf,
                                 store ? p->hi : inf, store ? NULL : p, z, &applied);
    if (!status && !store && !applied) epilogue_rows_split(y, z, p->N * p->M, p->OH * p->OW, p);
    return status;
}

int conv_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
