/* 2-D MaxPool / AveragePool, NCHW float32, over N * C planes. Undilated windows of row stride 1 or 2
 * go a plane at a time separably (pool_rows: a pass along the rows, then one down the columns); other
 * windows over the plane's phase planes (common.h, padded with -inf for max, 0 for average), VL cells
 * of ROWS output rows at a time reducing their windows in registers. An average is divided by the
 * counted cells. Narrow maps of many planes go VL planes at a time instead (channel blocks, common.h).
 *
 * mode 0: max; a window holding a NaN gives NaN, as NumPy's maximum.
 * mode 1: average over the window cells inside the input. mode 2: average over the window cells
 * inside the explicitly padded input: rows in [-ph, H + ph_end), columns in [-pw, W + pw_end)
 * (cells that ceil_mode adds never count). Returns 0, or 1 when out of memory. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include "common.h"
#include "conv_params.h"  /* vsigmoid */
#include "pool_threads.h"

static int64_t count_in(int64_t start, int64_t k, int64_t d, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t t = 0; t < k; ++t) n += start + t * d >= lo && start + t * d < hi;
    return n;
}

/* Pooling over channel blocks (common.h): VL planes of VL output cells at a time. */
static int pool_blocks(const Windows* g, const float* x, float* y, int64_t NC, int64_t mode, const float* rows,
                       const float* cols, int64_t q0, int64_t q1) {
    Block b;
    if (block_init(g, &b, mode ? 0.0f : -INFINITY)) return 1;
    const int64_t K = g->KH * g->KW, OHW = g->OH * g->OW;
    vfloat t[VL];
    for (int64_t p0 = q0 * VL; p0 < NC && p0 < q1 * VL; p0 += VL) {  /* blocks [q0, q1) of VL planes */
        const int64_t nc = NC - p0 < VL ? NC - p0 : VL;
        const int track = block_load(g, &b, x + p0 * g->H * g->W, g->H * g->W, nc) && !mode;  /* NaN to keep */
        for (int64_t f = 0; f < OHW; f += VL) {
            const int64_t nf = OHW - f < VL ? OHW - f : VL;
            for (int64_t i0 = 0; i0 < VL; i0 += ROWS) {
                const float* src[ROWS];
                vfloat a[ROWS];
                vint nan[ROWS];
                for (int r = 0; r < ROWS; ++r) {
                    src[r] = b.blk + b.out_at[f + (i0 + r < nf ? i0 + r : 0)];
                    a[r] = vload(src[r] + b.taps[0]);
                    nan[r] = a[r] != a[r];
                }
                for (int64_t k = 1; k < K; ++k)
                    for (int r = 0; r < ROWS; ++r) {
                        const vfloat v = vload(src[r] + b.taps[k]);
                        if (mode) {
                            a[r] += v;
                        } else {
                            a[r] = vmax(a[r], v);
                            if (track) nan[r] |= v != v;
                        }
                    }
                for (int r = 0; r < ROWS; ++r) {
                    const int64_t c = f + (i0 + r < nf ? i0 + r : 0);
                    t[i0 + r] = mode ? a[r] / (rows[c / g->OW] * cols[c % g->OW]) : (vfloat)((vint)a[r] | nan[r]);
                }
            }
            tile_store(t, nf, nc, y + p0 * OHW, OHW, f);
        }
    }
    free(b.in_at);
    return 0;
}

/* Planes [p0, p1) over their phase planes (buf: planes_size floats); a vector store spills at most to
 * the end of plane p1 - 1. */
static void pool_planes(const Windows* g, const int64_t* offs, float* buf, const float* x, float* y, int64_t mode,
                        const float* rows, const float* cols, int64_t p0, int64_t p1) {
    const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, K = g->KH * g->KW;
    const float* y_end = y + p1 * OH * OW;  /* rows are written in order up to here */
    for (int64_t p = p0; p < p1; ++p) {
        const float* xp = x + p * H * W;
        fill_planes(g, xp, mode ? 0.0f : -INFINITY, buf);
        for (int64_t oy = 0; oy < OH; oy += ROWS) {
            const int64_t nr = OH - oy < ROWS ? OH - oy : ROWS;
            for (int64_t ox = 0; ox >= 0; ox = next_vector(ox, OW)) {
                const float* src = buf + oy * g->Qw + ox;
                vfloat a[ROWS];
                vint nan[ROWS];  /* max: lanes whose window held a NaN (the select drops it) */
                for (int r = 0; r < ROWS; ++r) {
                    a[r] = vload(src + offs[0] + (r < nr ? r : 0) * g->Qw);
                    nan[r] = a[r] != a[r];
                }
                if (mode)
                    for (int64_t t = 1; t < K; ++t)
                        for (int r = 0; r < ROWS; ++r) a[r] += vload(src + offs[t] + (r < nr ? r : 0) * g->Qw);
                else
                    for (int64_t t = 1; t < K; ++t)
                        for (int r = 0; r < ROWS; ++r) {
                            const vfloat v = vload(src + offs[t] + (r < nr ? r : 0) * g->Qw);
                            a[r] = vmax(a[r], v);
                            nan[r] |= v != v;
                        }
                for (int r = 0; r < nr; ++r) {
                    if (mode)
                        a[r] /= rows[oy + r] * vload(cols + ox);
                    else
                        a[r] = (vfloat)((vint)a[r] | nan[r]);  /* all bits set: a NaN */
                    float* dst = y + (p * OH + oy + r) * OW + ox;
                    vstore(dst, a[r], OW < VL ? OW : VL, y_end - dst);
                }
            }
        }
    }
}

#if VL == 16
#define EVENS 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#else
#define EVENS 0, 2, 4, 6, 8, 10, 12, 14
#endif

/* Whether pool_rows takes the windows: undilated, a stride of 1 or 2 along the rows. */
static int rows_apply(const Windows* g) { return g->dh == 1 && g->dw == 1 && g->sw <= 2; }

/* Floats of pool_rows's scratch: two padded input rows, then a reduced row per padded input row. */
static int64_t rows_size(const Windows* g) {
    const int64_t OWr = (g->OW + VL - 1) / VL * VL;
    return 2 * (g->sw * OWr + g->KW + VL) + ((g->OH - 1) * g->sh + g->KH) * OWr;
}

/* dst[0:n] = src[0:n], and pad up to the next whole vector; returns whether they hold a NaN. */
static int copy_row(float* dst, const float* src, int64_t n, float pad) {
    vint nan = {0};
    for (int64_t i = 0; i < n; i += VL) {
        const vfloat v = n - i >= VL ? vload(src + i) : vload_part(src + i, n - i, pad);
        nan |= v != v;
        memcpy(dst + i, &v, sizeof v);
    }
    int32_t lanes[VL], any = 0;  /* (indexing nan itself would keep it in memory across the loop) */
    memcpy(lanes, &nan, sizeof nan);
    for (int64_t j = 0; j < VL; ++j) any |= lanes[j];
    return any != 0;
}

/* The reduction of the n vectors at p, p + step, ..., in that order (max: keeps the first of equal
 * cells, +0 or -0; with track, a NaN gives all bits set as in pool_planes). */
static inline __attribute__((always_inline)) vfloat reduce_taps(const float* p, int64_t n, int64_t step, int64_t mode,
                                                               int track) {
    vfloat a = vload(p);
    vint nan = a != a;
    for (int64_t t = 1; t < n; ++t) {
        const vfloat v = vload(p + t * step);
        if (mode) {
            a += v;
        } else {
            a = vmax(a, v);
            if (track) nan |= v != v;
        }
    }
    return mode || !track ? a : (vfloat)((vint)a | nan);
}

/* h[0:OWr] = a padded input row's windows of KW cells at each output column (sw 1 or 2). */
static inline __attribute__((always_inline)) void reduce_row(const float* row, float* h, int64_t OWr, int64_t sw,
                                                             int64_t KW, int64_t mode, int track) {
    for (int64_t ox = 0; ox < OWr; ox += VL) {
        vfloat a = reduce_taps(row + sw * ox, KW, 1, mode, track);
        if (sw == 2) a = __builtin_shufflevector(a, reduce_taps(row + 2 * ox + VL, KW, 1, mode, track), EVENS);
        memcpy(h + ox, &a, sizeof a);
    }
}

/* An output row (at y) from the KH reduced rows of its windows (at h, OWr apart). */
static inline __attribute__((always_inline)) void output_row(const float* h, float* y, const float* y_end, int64_t OW,
                                                             int64_t OWr, int64_t KH, int64_t mode, int track,
                                                             float row_count, const float* cols) {
    for (int64_t ox = 0; ox < OW; ox += VL) {
        vfloat a = reduce_taps(h + ox, KH, OWr, mode, track);
        if (mode) a /= row_count * vload(cols + ox);
        vstore(y + ox, a, OW - ox < VL ? OW - ox : VL, y_end - (y + ox));
    }
}

/* Planes [p0, p1) of undilated windows, sw 1 or 2, separably (buf: rows_size floats): each padded
 * input row reduced over the KW cells of each output column's window (at every column, then the even
 * ones for sw 2), then each output row over the KH reduced rows of its windows. The taps go in the
 * window's row-major order, so a max is the tap-by-tap loop's to the bit; a sum rounds otherwise. NaNs
 * are tracked only through the rows that hold one. Inlined for 3 x 3 windows (constant trip counts). */
static inline __attribute__((always_inline)) void rows_of(const Windows* g, float* buf, const float* x, float* y,
                                                          int64_t mode, const float* rows, const float* cols,
                                                          int64_t p0, int64_t p1, int64_t KH, int64_t KW) {
    const int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, sh = g->sh, sw = g->sw;
    const int64_t OWr = (OW + VL - 1) / VL * VL, Pw = sw * OWr + KW, Ph = (OH - 1) * sh + KH;
    const int64_t lo = g->pw < Pw ? g->pw : Pw, n = W < Pw - lo ? W : Pw - lo;  /* row cells from the input */
    const float pad = mode ? 0.0f : -INFINITY;
    const vfloat padv = (vfloat){0} + pad;
    const int64_t Ps = Pw + VL;  /* a padded row's floats: a copy's last vector spills up to VL - 1 */
    float* h = buf + 2 * Ps;  /* Ph rows of OWr */
    const float* y_end = y + p1 * OH * OW;  /* rows are written in order up to here */
    for (int64_t j = 0; j < 2 * Ps; ++j) buf[j] = pad;
    for (int64_t p = p0; p < p1; ++p) {
        const float* xp = x + p * H * W;
        int nan[2] = {0, 0}, any = 0;  /* in the padded rows; in the plane */
        for (int64_t q = 0; q < Ph; ++q) {
            float* hq = h + q * OWr;
            const int64_t iy = q - g->ph;
            /* Rows q and q + 1 padded, in turn at buf and buf + Ps (cell j: input column j - pw): a row
             * is copied one row ahead of its loads, which would wait on the copy's stores otherwise. */
            if (q == 0 && iy >= 0 && iy < H) nan[0] = copy_row(buf + lo, xp + iy * W, n, pad);
            if (iy + 1 >= 0 && iy + 1 < H && q + 1 < Ph) {
                nan[(q + 1) % 2] = copy_row(buf + (q + 1) % 2 * Ps + lo, xp + (iy + 1) * W, n, pad);
                if (p + 1 < p1)  /* the next plane's row into L2 ahead of its turn (10-15% on 112 x 112) */
                    for (int64_t j = 0; j < n; j += 16) __builtin_prefetch(xp + (H + iy + 1) * W + j, 0, 2);
            }
            if (iy < 0 || iy >= H) {
                for (int64_t ox = 0; ox < OWr; ox += VL) memcpy(hq + ox, &padv, sizeof padv);
                continue;
            }
            const float* row = buf + q % 2 * Ps;
            const int track = !mode && nan[q % 2];
            any |= track;
            if (mode)
                sw == 2 ? reduce_row(row, hq, OWr, 2, KW, 1, 0) : reduce_row(row, hq, OWr, 1, KW, 1, 0);
            else if (!track)
                sw == 2 ? reduce_row(row, hq, OWr, 2, KW, 0, 0) : reduce_row(row, hq, OWr, 1, KW, 0, 0);
            else
                reduce_row(row, hq, OWr, sw, KW, 0, 1);
        }
        for (int64_t oy = 0; oy < OH; ++oy) {
            const float* ho = h + oy * sh * OWr;
            float* yo = y + (p * OH + oy) * OW;
            if (mode)
                output_row(ho, yo, y_end, OW, OWr, KH, 1, 0, rows[oy], cols);
            else
                any ? output_row(ho, yo, y_end, OW, OWr, KH, 0, 1, 0.0f, cols)
                    : output_row(ho, yo, y_end, OW, OWr, KH, 0, 0, 0.0f, cols);
        }
    }
}

static void pool_rows(const Windows* g, float* buf, const float* x, float* y, int64_t mode, const float* rows,
                      const float* cols, int64_t p0, int64_t p1) {
    if (g->KH == 3 && g->KW == 3)
        rows_of(g, buf, x, y, mode, rows, cols, p0, p1, 3, 3);
    else
        rows_of(g, buf, x, y, mode, rows, cols, p0, p1, g->KH, g->KW);
}

typedef struct {
    const Windows* g;
    const int64_t* offs;
    const float* x;
    float* y;
    int64_t NC, mode, blocks;
    const float *rows, *cols;
    int status;
} PoolArgs;

static void pool_part(void* ctx, int64_t part, int64_t parts) {
    PoolArgs* a = ctx;
    int64_t lo, hi;
    if (a->blocks) {
        pool_range((a->NC + VL - 1) / VL, 1, part, parts, &lo, &hi);
        if (lo < hi && pool_blocks(a->g, a->x, a->y, a->NC, a->mode, a->rows, a->cols, lo, hi)) a->status = 1;
        return;
    }
    pool_range(a->NC, 1, part, parts, &lo, &hi);
    if (lo >= hi) return;
    const int separable = rows_apply(a->g);
    float* buf = malloc(sizeof(float) * (separable ? rows_size(a->g) : planes_size(a->g)));
    if (!buf) {
        a->status = 1;
        return;
    }
    if (separable)
        pool_rows(a->g, buf, a->x, a->y, a->mode, a->rows, a->cols, lo, hi);
    else
        pool_planes(a->g, a->offs, buf, a->x, a->y, a->mode, a->rows, a->cols, lo, hi);
    free(buf);
}

/* The planes are split across the pool's threads (pool_threads.h), each computed as in one part, when
 * each part gets at least POOL_MIN_WORK window cells. */
int pool2d_f32(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
               int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
               int64_t mode, int64_t ph_end, int64_t pw_end) {
    const Windows g = windows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
    const int64_t K = KH * KW;
    int64_t* offs = malloc(sizeof(int64_t) * K + sizeof(float) * (OH + OW + VL));
    if (!offs) return 1;
    float* rows = (float*)(offs + K);  /* window cells per output row and column that count (averages) */
    float* cols = rows + OH;  /* VL of slack for the last vector */
    tap_offsets(&g, offs);
    for (int64_t oy = 0; oy < OH && mode; ++oy)
        rows[oy] = (float)(mode == 1 ? count_in(oy * sh - ph, KH, dh, 0, H) : count_in(oy * sh - ph, KH, dh, -ph, H + ph_end));
    for (int64_t ox = 0; ox < OW && mode; ++ox)
        cols[ox] = (float)(mode == 1 ? count_in(ox * sw - pw, KW, dw, 0, W) : count_in(ox * sw - pw, KW, dw, -pw, W + pw_end));
    PoolArgs a = {&g, offs, x, y, NC, mode, use_blocks(NC, OW), rows, cols, 0};
    const int64_t per_plane = K * OH * OW + 1, units = a.blocks ? (NC + VL - 1) / VL : NC;
    const int64_t per_unit = a.blocks ? per_plane * VL : per_plane;
    pool_run(pool_part, &a, pool_parts(units, (POOL_MIN_WORK + per_unit - 1) / per_unit));
    free(offs);
    return a.status;
}

/* pool2d_f32 as a program step: p holds its arguments after the two arrays. */
int pool2d_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return pool2d_f32(x, y, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12], p[13],
                      p[14], p[15]);
}

/* [lo, hi): the taps k < K of a window starting at `start` (stride `d` between taps) that fall in [0, n). */
static inline void taps_inside(int64_t start, int64_t K, int64_t d, int64_t n, int64_t* lo, int64_t* hi) {
    *lo = start >= 0 ? 0 : (-start + d - 1) / d;
    const int64_t last = n - 1 - start;  /* the last tap inside: k * d <= last */
    *hi = last < 0 ? 0 : (last / d + 1 < K ? last / d + 1 : K);
    if (*lo > *hi) *lo = *hi;
}

/* MaxPool of 8-bit maps (a quantized model's, between its QLinearConvs): the largest cell of each window's
 * cells inside the map, exact. p = {planes, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, signed}; every
 * window holds a cell of the map (the binding checks). */
int max_pool2d_planned_8(const int64_t* p, const void* x, const void* unused, void* y) {
    (void)unused;
    const int64_t planes = p[0], H = p[1], W = p[2], OH = p[3], OW = p[4], KH = p[5], KW = p[6], sh = p[7],
                  sw = p[8], ph = p[9], pw = p[10], dh = p[11], dw = p[12], is_signed = p[13];
    for (int64_t c = 0; c < planes; ++c)
        for (int64_t oy = 0; oy < OH; ++oy) {
            int64_t ky0, ky1;
            taps_inside(oy * sh - ph, KH, dh, H, &ky0, &ky1);
            for (int64_t ox = 0; ox < OW; ++ox) {
                int64_t kx0, kx1;
                taps_inside(ox * sw - pw, KW, dw, W, &kx0, &kx1);
                const int64_t at = (c * H + oy * sh - ph) * W + ox * sw - pw, out = (c * OH + oy) * OW + ox;
                if (is_signed) {
                    int8_t m = INT8_MIN;
                    for (int64_t ky = ky0; ky < ky1; ++ky)
                        for (int64_t kx = kx0; kx < kx1; ++kx) {
                            const int8_t v = ((const int8_t*)x)[at + ky * dh * W + kx * dw];
                            m = v > m ? v : m;
                        }
                    ((int8_t*)y)[out] = m;
                } else {
                    uint8_t m = 0;
                    for (int64_t ky = ky0; ky < ky1; ++ky)
                        for (int64_t kx = kx0; kx < kx1; ++kx) {
                            const uint8_t v = ((const uint8_t*)x)[at + ky * dh * W + kx * dw];
                            m = v > m ? v : m;
                        }
                    ((uint8_t*)y)[out] = m;
                }
            }
        }
    return 0;
}

/* Squeeze-and-excitation (gpuops/ops/contrib/private.py's SqueezeExcite): y = x * gate(W2 inner(W1 mean(x) + b1)
 * + b2), a mean and a gate per plane of x (N images of C planes of HW floats). The weights come transposed,
 * w1t = W1^T (C, R) and w2t = W2^T (R, C), so that the products run along contiguous rows of outputs. */
enum { SE_RELU, SE_HARD_SWISH, SE_SILU };  /* inner */
enum { SE_SIGMOID, SE_HARD_SIGMOID };  /* gate */

typedef struct {
    const float* x;
    float *y, *s;  /* s: a plane's mean, then its gate */
    int64_t planes, HW, scale;  /* scale: the last pass (y = x * s), else the means */
} SeArgs;

/* v[0:n] = act(v) (one of SE_*: the inner's, or 8 + SE_SIGMOID, 8 + SE_HARD_SIGMOID: the gate's), VL at a time. */
static void se_activate(float* v, int64_t n, int64_t act, float alpha, float beta) {
    for (int64_t i = 0; i < n; i += VL) {
        const int64_t m = n - i < VL ? n - i : VL;
        vfloat a = m == VL ? vload(v + i) : vload_part(v + i, m, 0.0f);
        if (act == SE_RELU)
            a = vclamp(a, 0.0f, __builtin_inff());
        else if (act == SE_HARD_SWISH)
            a = a * vclamp(a * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);
        else if (act == SE_SILU)
            a = vsilu(a);
        else if (act == 8 + SE_SIGMOID)
            a = vsigmoid(a);
        else
            a = vclamp(a * alpha + beta, 0.0f, 1.0f);
        if (m == VL)
            memcpy(v + i, &a, sizeof a);
        else
            vstore_part(v + i, a, m);
    }
}

/* Planes [p0, p1): their means into s, or y = x * s. */
static void se_part(void* ctx, int64_t part, int64_t parts) {
    const SeArgs* a = ctx;
    const int64_t HW = a->HW;
    int64_t p0, p1;
    pool_range(a->planes, 1, part, parts, &p0, &p1);
    if (HW < 2 * VL) {  /* a few cells a plane: a vector loop's set-up would cost more than its work */
        const float* restrict x = a->x;
        float* restrict s = a->s;
        for (int64_t p = p0; p < p1; ++p) {
            if (a->scale) {
                for (int64_t i = p * HW; i < (p + 1) * HW; ++i) a->y[i] = x[i] * s[p];
            } else {
                float acc = 0.0f;
                for (int64_t i = p * HW; i < (p + 1) * HW; ++i) acc += x[i];
                s[p] = acc / (float)HW;
            }
        }
        return;
    }
    for (int64_t p = p0; p < p1; ++p) {
        const float* restrict xp = a->x + p * HW;
        if (a->scale) {
            float* restrict yp = a->y + p * HW;
            const float g = a->s[p];
            for (int64_t i = 0; i < HW; ++i) yp[i] = xp[i] * g;
        } else {
            vfloat acc = {0};
            int64_t i = 0;
            for (; i + VL <= HW; i += VL) acc += vload(xp + i);
            if (i < HW) acc += vload_part(xp + i, HW - i, 0.0f);
            a->s[p] = vsum(acc) / (float)HW;
        }
    }
}

/* out[0:n] = b + sum over k < K of wt[k * n : (k + 1) * n] * v[k], four k at a time. */
static void matvec_t(const float* restrict wt, const float* restrict v, const float* restrict b, float* restrict out,
                     int64_t K, int64_t n) {
    for (int64_t j = 0; j < n; ++j) out[j] = b[j];
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        const float* w0 = wt + k * n;
        const float v0 = v[k], v1 = v[k + 1], v2 = v[k + 2], v3 = v[k + 3];
        for (int64_t j = 0; j < n; ++j) out[j] += w0[j] * v0 + w0[n + j] * v1 + w0[2 * n + j] * v2 + w0[3 * n + j] * v3;
    }
    for (; k < K; ++k)
        for (int64_t j = 0; j < n; ++j) out[j] += wt[k * n + j] * v[k];
}

int squeeze_excite_f32(const float* x, const float* w1t, const float* b1, const float* w2t, const float* b2, float* y,
                       int64_t N, int64_t C, int64_t HW, int64_t R, int64_t inner, int64_t gate, float alpha,
                       float beta) {
    float* buf = malloc(sizeof(float) * (N * C + R));  /* the planes' s, the hidden values */
    if (!buf) return 1;
    SeArgs a = {x, y, buf, N * C, HW, 0};
    float* h = buf + N * C;
    const int64_t parts = pool_parts(N * C, (POOL_MIN_WORK + HW) / (HW + 1));
    pool_run(se_part, &a, parts);
    for (int64_t n = 0; n < N; ++n) {
        float* s = a.s + n * C;
        matvec_t(w1t, s, b1, h, C, R);
        se_activate(h, R, inner, 0.0f, 0.0f);
        matvec_t(w2t, h, b2, s, R, C);
        se_activate(s, C, 8 + gate, alpha, beta);
    }
    a.scale = 1;
    pool_run(se_part, &a, parts);
    free(buf);
    return 0;
}

/* squeeze_excite_f32 as a program step: p = {w1t, b1, w2t, b2 (addresses), N, C, HW, R, inner, gate,
 * alpha, beta (param_float)}. */
int squeeze_excite_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return squeeze_excite_f32(x, (const float*)(intptr_t)p[0], (const float*)(intptr_t)p[1],
                              (const float*)(intptr_t)p[2], (const float*)(intptr_t)p[3], y, p[4], p[5], p[6], p[7],
                              p[8], p[9], param_float(p, 10), param_float(p, 11));
}

int pool_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
