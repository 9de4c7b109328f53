/* Shared helpers of the native CPU kernels (see gpuops/native.py). */
#pragma once
#include <stdint.h>
#include <stdlib.h>

#include <string.h>

/* VL floats held in registers (GNU C vector extensions): one AVX-512 register, else one AVX2 register
 * (two NEON ones). Wider than the target's registers, gcc splits each vector and spills the halves
 * (16-float vectors on 16 ymm registers ran the depthwise, pool and direct kernels 2-10x slower than 8).
 * gpuops/native.py's vector_lanes() says which. Loads and stores are unaligned. */
#if defined(__AVX512F__)
#define VL 16
#else
#define VL 8
#endif
#define ROWS 4  /* output rows computed together: independent sums hide the add latency */
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(VL * sizeof(int32_t))));

/* A float parameter of a planned kernel's int64_t parameters (a double's bits: gpuops/onnx/programs.py). */
static inline float param_float(const int64_t* p, int64_t k) {
    double d;
    memcpy(&d, p + k, sizeof d);
    return (float)d;
}

static inline vfloat vload(const float* p) { vfloat v; memcpy(&v, p, sizeof v); return v; }

/* vmax(a, b): b where b > a, else a (a NaN in a stays, one in b is dropped; of equal lanes, +0 and -0,
 * a). vclamp(a, lo, hi): min(max(a, lo), hi) as NumPy's maximum and minimum, NaN staying NaN (the
 * activation epilogue of a fused conv: Relu is [0, inf], Clip [min, max], none [-inf, inf]). On x86
 * one max or min instruction per bound (x86's take the second operand where either is NaN or both are
 * equal), not a compare and a blend: the blends of AVX2 take 2-3 micro-ops on the ports of the
 * multiply-adds. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline vfloat vmax(vfloat a, vfloat b) { return (vfloat)_mm512_max_ps((__m512)b, (__m512)a); }
static inline vfloat vclamp(vfloat a, float lo, float hi) {
    return (vfloat)_mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), (__m512)a));
}
#elif defined(__AVX__)
#include <immintrin.h>
static inline vfloat vmax(vfloat a, vfloat b) { return (vfloat)_mm256_max_ps((__m256)b, (__m256)a); }
static inline vfloat vclamp(vfloat a, float lo, float hi) {
    return (vfloat)_mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), (__m256)a));
}
#else
static inline vfloat vmax(vfloat a, vfloat b) { const vint m = b > a; return (vfloat)((m & (vint)b) | (~m & (vint)a)); }
static inline vfloat vclamp(vfloat a, float lo, float hi) {
    const vint below = a < lo, above = a > hi;
    a = (vfloat)((below & (vint)((vfloat){0} + lo)) | (~below & (vint)a));
    return (vfloat)((above & (vint)((vfloat){0} + hi)) | (~above & (vint)a));
}
#endif

/* Store the first n (<= VL) lanes of v at p. room: the floats the caller may write from p on (to the
 * end of its output), where the lanes past n land on cells that a later store overwrites (rows are
 * written in order): with room for a whole vector the store is one vector store, no partial copy. */
static inline void vstore(float* p, vfloat v, int64_t n, int64_t room) {
    if (n == VL || room >= VL) {
        memcpy(p, &v, sizeof v);
        return;
    }
    float t[VL];
    memcpy(t, &v, sizeof v);
    for (int64_t j = 0; j < n; ++j) p[j] = t[j];
}

/* The start of the row's next VL-cell vector after ox (-1: done): VL apart, the last one moved back
 * to end at the row's end (recomputing a few cells) so that every store is a whole vector. */
static inline int64_t next_vector(int64_t ox, int64_t n) {
    if (ox + VL >= n) return -1;
    return ox + 2 * VL <= n ? ox + VL : n - VL;
}

/* Output cells o in [lo, hi) whose input index o * s + off lies in [0, n). */
static inline void valid_range(int64_t n, int64_t s, int64_t off, int64_t out, int64_t* lo, int64_t* hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = n - off <= 0 ? 0 : (n - off - 1) / s + 1;
    *lo = a < out ? a : out;
    *hi = b < out ? (b > *lo ? b : *lo) : out;
}

typedef struct {
    int64_t H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, Qh, Qw;
} Windows;

static inline Windows windows(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                              int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    Windows g = {H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, 0, 0};
    g.Qh = OH + (KH - 1) * dh / sh;
    g.Qw = OW + (KW - 1) * dw / sw;
    return g;
}

/* Floats of the phase planes, plus VL of slack: a row's last vector may read past the last plane. */
static inline int64_t planes_size(const Windows* g) { return g->sh * g->sw * g->Qh * g->Qw + VL; }

/* The even and odd lanes of the 2 VL lanes of a then b. */
#if defined(__clang__) && VL == 16
#define EVEN_OF(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define ODD_OF(a, b) __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
#elif defined(__clang__)
#define EVEN_OF(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14)
#define ODD_OF(a, b) __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15)
#elif VL == 16
#define EVEN_OF(a, b) __builtin_shuffle(a, b, (vint){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30})
#define ODD_OF(a, b) __builtin_shuffle(a, b, (vint){1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31})
#else
#define EVEN_OF(a, b) __builtin_shuffle(a, b, (vint){0, 2, 4, 6, 8, 10, 12, 14})
#define ODD_OF(a, b) __builtin_shuffle(a, b, (vint){1, 3, 5, 7, 9, 11, 13, 15})
#endif

/* Cells [lo0, hi0) of row e and [lo1, hi1) of row o of the two column phases (b = 0, 1) of stride 2:
 * e[r] = xr[2 r], o[r] = xr[2 r + 1]. Where both phases are inside the row, 2 VL input cells are split
 * into the two rows at once by two shuffles (the last vector moved back to end at the common range's
 * end); the cells of one phase alone, at the row's ends, one by one. */
static inline void fill_pair_rows(const float* xr, float* e, float* o, int64_t lo0, int64_t hi0, int64_t lo1,
                                  int64_t hi1) {
    const int64_t lo = lo0 > lo1 ? lo0 : lo1, hi = hi0 < hi1 ? hi0 : hi1;
    int64_t done = lo;  /* [lo, done) went by vectors */
    if (hi - lo >= VL) {
        for (int64_t r = lo;; r += VL) {
            if (r + VL > hi) r = hi - VL;
            const vfloat a = vload(xr + 2 * r), b = vload(xr + 2 * r + VL);
            const vfloat ve = EVEN_OF(a, b), vo = ODD_OF(a, b);
            memcpy(e + r, &ve, sizeof ve);
            memcpy(o + r, &vo, sizeof vo);
            if (r + VL >= hi) break;
        }
        done = hi;
    }
    for (int64_t k = lo0; k < (hi0 < lo ? hi0 : lo); ++k) e[k] = xr[2 * k];
    for (int64_t k = lo0 > done ? lo0 : done; k < hi0; ++k) e[k] = xr[2 * k];
    for (int64_t k = lo1; k < (hi1 < lo ? hi1 : lo); ++k) o[k] = xr[2 * k + 1];
    for (int64_t k = lo1 > done ? lo1 : done; k < hi1; ++k) o[k] = xr[2 * k + 1];
}

/* Fill rows [q0, q1) of the phase planes of plane x (pad: the value of cells outside the input). */
static inline void fill_plane_rows(const Windows* g, const float* x, float pad, float* buf, int64_t q0, int64_t q1) {
    for (int64_t a = 0; a < g->sh; ++a)
        for (int64_t b = 0; b < g->sw; ++b) {
            float* plane = buf + (a * g->sw + b) * g->Qh * g->Qw;
            int64_t lo, hi;
            valid_range(g->W, g->sw, b - g->pw, g->Qw, &lo, &hi);
            int64_t lo1 = 0, hi1 = 0;  /* stride 2: phase b + 1's range, filled with this one */
            const int pair = g->sw == 2 && b == 0;
            if (pair) valid_range(g->W, 2, 1 - g->pw, g->Qw, &lo1, &hi1);
            float* plane1 = plane + g->Qh * g->Qw;
            for (int64_t q = q0; q < q1; ++q) {
                float* row = plane + q * g->Qw;
                float* row1 = pair ? plane1 + q * g->Qw : row;
                const int64_t iy = a + g->sh * q - g->ph;
                if (iy < 0 || iy >= g->H) {
                    for (int64_t r = 0; r < g->Qw; ++r) row[r] = row1[r] = pad;
                    continue;
                }
                const float* xr = x + iy * g->W + b - g->pw;
                for (int64_t r = 0; r < lo; ++r) row[r] = pad;
                if (g->sw == 1)
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[r];
                else if (pair) {
                    fill_pair_rows(xr, row, row1, lo, hi, lo1, hi1);
                    for (int64_t r = 0; r < lo1; ++r) row1[r] = pad;
                    for (int64_t r = hi1; r < g->Qw; ++r) row1[r] = pad;
                } else
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[r * g->sw];
                for (int64_t r = hi; r < g->Qw; ++r) row[r] = pad;
            }
            b += pair;  /* phase 1 came with phase 0 */
        }
    for (int64_t r = 0; r < VL; ++r) buf[g->sh * g->sw * g->Qh * g->Qw + r] = pad;
}

static inline void fill_planes(const Windows* g, const float* x, float pad, float* buf) {
    fill_plane_rows(g, x, pad, buf, 0, g->Qh);
}

/* Where each tap (ky, kx), row-major, reads in the phase planes for output cell (0, 0). */
static inline void tap_offsets(const Windows* g, int64_t* offs) {
    for (int64_t ky = 0; ky < g->KH; ++ky)
        for (int64_t kx = 0; kx < g->KW; ++kx) {
            const int64_t a = ky * g->dh % g->sh, b = kx * g->dw % g->sw;
            offs[ky * g->KW + kx] = (a * g->sw + b) * g->Qh * g->Qw + (ky * g->dh / g->sh) * g->Qw + kx * g->dw / g->sw;
        }
}

/* Channel blocks: VL planes interleaved, so that one vector holds one cell of VL planes whatever the
 * map's size (onnxruntime's NCHWc layout, built per block here), with no lanes left empty on narrow
 * maps and no phase planes to fill. The block is the padded input: cell (q, r) at
 * blk[(q * Pw + r) * VL + j] holds plane j's input cell (q - ph, r - pw), pad outside the input.
 * Planes go in and results come out VL x VL tiles at a time, transposed in registers. */
typedef struct {
    int64_t Ph, Pw;  /* padded extent the windows read */
    int64_t* in_at;  /* H * W: where input cell (iy, ix) lands in the block */
    int64_t* out_at;  /* OH * OW: where output cell (oy, ox)'s window starts in the block */
    int64_t* taps;  /* KH * KW: tap (ky, kx) from the window's start */
    float* blk;  /* Ph * Pw * VL */
} Block;

/* Whether the channel blocks beat the phase planes (measured on 3x3 windows): enough planes to fill
 * most of a block's lanes, and output rows short enough that a row's vectors are mostly empty or
 * few (the phase planes then cost more to fill than the taps to sum). */
static inline int use_blocks(int64_t planes, int64_t OW) { return planes >= VL / 2 && OW <= 2 * VL; }

/* The tables and the block, padded with pad everywhere (block_load overwrites only input cells). NULL
 * when out of memory; free with free(b->in_at). */
static inline int block_init(const Windows* g, Block* b, float pad) {
    b->Ph = (g->OH - 1) * g->sh + (g->KH - 1) * g->dh + 1;
    b->Pw = (g->OW - 1) * g->sw + (g->KW - 1) * g->dw + 1;
    const int64_t n = g->H * g->W + g->OH * g->OW + g->KH * g->KW;
    b->in_at = malloc(sizeof(int64_t) * n + sizeof(float) * (b->Ph * b->Pw * VL + VL));
    if (!b->in_at) return 1;
    b->out_at = b->in_at + g->H * g->W;
    b->taps = b->out_at + g->OH * g->OW;
    b->blk = (float*)(b->in_at + n);
    for (int64_t iy = 0; iy < g->H; ++iy)
        for (int64_t ix = 0; ix < g->W; ++ix) {
            const int64_t q = iy + g->ph, r = ix + g->pw;  /* past Ph or Pw: a cell no window reads */
            b->in_at[iy * g->W + ix] = q < b->Ph && r < b->Pw ? (q * b->Pw + r) * VL : -1;
        }
    for (int64_t oy = 0; oy < g->OH; ++oy)
        for (int64_t ox = 0; ox < g->OW; ++ox) b->out_at[oy * g->OW + ox] = (oy * g->sh * b->Pw + ox * g->sw) * VL;
    for (int64_t ky = 0; ky < g->KH; ++ky)
        for (int64_t kx = 0; kx < g->KW; ++kx) b->taps[ky * g->KW + kx] = (ky * g->dh * b->Pw + kx * g->dw) * VL;
    const vfloat padv = (vfloat){0} + pad;
    for (int64_t c = 0; c < b->Ph * b->Pw; ++c) memcpy(b->blk + c * VL, &padv, sizeof padv);
    return 0;
}

#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)

/* t[i][j] <- t[j][i] for a VL x VL tile: rounds of swapping the off-diagonal blocks of VL / 2, ..., 2, 1. */
#if VL == 16
static inline void transpose_tile(vfloat* t) {
    for (int i = 0; i < 8; ++i) {
        const vfloat a = t[i], c = t[i + 8];
        t[i] = SHUF(a, c, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        t[i + 8] = SHUF(a, c, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = h; i < h + 4; ++i) {
            const vfloat a = t[i], c = t[i + 4];
            t[i] = SHUF(a, c, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
            t[i + 4] = SHUF(a, c, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        }
    for (int h = 0; h < 16; h += 4)
        for (int i = h; i < h + 2; ++i) {
            const vfloat a = t[i], c = t[i + 2];
            t[i] = SHUF(a, c, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
            t[i + 2] = SHUF(a, c, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
        }
    for (int i = 0; i < 16; i += 2) {
        const vfloat a = t[i], c = t[i + 1];
        t[i] = SHUF(a, c, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        t[i + 1] = SHUF(a, c, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
}
#else
_Static_assert(VL == 8, "transpose_tile's shuffles are written for 8 or 16 lanes");
static inline void transpose_tile(vfloat* t) {
    for (int i = 0; i < 4; ++i) {
        const vfloat a = t[i], c = t[i + 4];
        t[i] = SHUF(a, c, 0, 1, 2, 3, 8, 9, 10, 11);
        t[i + 4] = SHUF(a, c, 4, 5, 6, 7, 12, 13, 14, 15);
    }
    for (int h = 0; h < 8; h += 4)
        for (int i = h; i < h + 2; ++i) {
            const vfloat a = t[i], c = t[i + 2];
            t[i] = SHUF(a, c, 0, 1, 8, 9, 4, 5, 12, 13);
            t[i + 2] = SHUF(a, c, 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int i = 0; i < 8; i += 2) {
        const vfloat a = t[i], c = t[i + 1];
        t[i] = SHUF(a, c, 0, 8, 2, 10, 4, 12, 6, 14);
        t[i + 1] = SHUF(a, c, 1, 9, 3, 11, 5, 13, 7, 15);
    }
}
#endif

/* Load nc planes (plane_stride floats apart) into the block's input cells, VL cells at a time. Returns
 * whether they hold a NaN. */
static inline int block_load(const Windows* g, const Block* b, const float* x, int64_t plane_stride, int64_t nc) {
    const int64_t HW = g->H * g->W;
    vint nan = {0};
    vfloat t[VL];
    for (int64_t f = 0; f < HW; f += VL) {
        const int64_t n = HW - f < VL ? HW - f : VL;
        for (int64_t j = 0; j < VL; ++j) {
            if (j >= nc) {
                t[j] = (vfloat){0};
            } else if (n == VL) {
                t[j] = vload(x + j * plane_stride + f);
            } else {
                t[j] = (vfloat){0};
                memcpy(&t[j], x + j * plane_stride + f, sizeof(float) * n);
            }
        }
        for (int64_t j = 0; j < VL; ++j) nan |= t[j] != t[j];
        transpose_tile(t);
        for (int64_t i = 0; i < n; ++i)
            if (b->in_at[f + i] >= 0) memcpy(b->blk + b->in_at[f + i], &t[i], sizeof(vfloat));
    }
    for (int64_t j = 1; j < VL; ++j) nan[0] |= nan[j];
    return nan[0] != 0;
}

/* Store n (<= VL) cells of results t[i] (lanes: planes) as lanes [0, nc) to nc planes, plane_stride
 * floats apart, from cell f on. */
static inline void tile_store(vfloat* t, int64_t n, int64_t nc, float* y, int64_t plane_stride, int64_t f) {
    transpose_tile(t);
    for (int64_t j = 0; j < nc; ++j) vstore(y + j * plane_stride + f, t[j], n, 0);
}
