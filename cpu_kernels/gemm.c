/* Single-precision GEMM for convolutions: Y[M, N] = A[M, K] B[K, N] + bias[m], clamped to [lo, hi]
 * (a fused Relu or Clip), where A is a conv's weights (M output channels) and B its columns (N output
 * cells). A is packed once per weight (gemm_pack_f32) into panels, k-major, and streams from L2 (fetched
 * a few k steps ahead); the B of a tile (or a conv's taps, read from its input's phase planes in place of
 * an im2col copy) is first copied into a strip, its rows one after another, that every panel of the
 * block then reads in order. Two layouts of the register tiles:
 * - channels on the vector lanes: MR cells x NR channels, per k MR floats of the strip broadcast against
 *   the panel's NV vectors. Small maps (7x7 = 49 cells) leave no lanes empty. K is split into blocks of
 *   at most KC (partial sums kept in a buffer in the tiles' own layout), channels into blocks that keep
 *   their panels in L2. The tiles are stored transposed, which costs as much as ~60 k of sums: for short
 *   K and large maps,
 * - cells on the vector lanes (rows): RR channels x RN cells, per k RR weights broadcast against RV
 *   vectors of the strip, stored as rows. */

/* Multiply-adds fused (one rounding, as OpenBLAS's FMA): -std=c11 turns GCC's contraction off, and
 * without it the sums run at three quarters of the speed. Clang contracts within an expression. */
#define _GNU_SOURCE  /* sysconf(_SC_LEVEL2_CACHE_SIZE) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include "common.h"
#include "conv_params.h"
#include "pool_threads.h"
#include <unistd.h>

#ifdef __AVX512F__
#define GV 16  /* floats per vector: one register */
#define MR 14  /* cells per tile: 7x7, 14x14, 28x28 and 56x56 maps are whole tiles or one half */
#define RR 8  /* channels per tile of cells on the lanes */
#define RV 3  /* vectors of cells per tile: RR x RV accumulators */
#else
#define GV 8  /* 16 registers of 8 floats (AVX2, two NEON registers): wider vectors would spill */
#define MR 6
#define RR 6
#define RV 2
#endif
#define NV 2  /* vectors of channels per tile: MR x NV accumulators */
#define NR (NV * GV)
#define RN (RV * GV)
#define PF 16  /* k steps the pack is fetched ahead (past its end on the last: a prefetch never faults) */
typedef float gvec __attribute__((vector_size(GV * sizeof(float))));
static inline gvec gload(const float* p) { gvec v; memcpy(&v, p, sizeof v); return v; }

/* Channels in the panel starting at channel p0: NR, or GV for a last one of at most GV. */
static inline int64_t panel_width(int64_t M, int64_t p0) { return M - p0 <= GV ? GV : NR; }

/* The pack of an M x K weight holds ceil(M / w) w K floats, w = gemm_pack_width_f32(rows). */
int gemm_pack_width_f32(int64_t rows) { return rows ? RR : GV; }

/* Pack A (M x K, rows lda apart), 0 past M: for cells on the lanes (rows), panel p holds A[p RR + r, k]
 * at pack[(p K + k) RR + r]; else the panel of width w from channel p0 holds A[p0 + j, k] at
 * pack[p0 K + k w + j]. */
int gemm_pack_f32(const float* A, int64_t lda, int64_t M, int64_t K, int64_t rows, float* pack) {
    for (int64_t p0 = 0; p0 < M; p0 += rows ? RR : NR) {
        const int64_t w = rows ? RR : panel_width(M, p0);
        for (int64_t j = 0; j < w; ++j) {
            float* restrict dst = pack + p0 * K + j;
            if (p0 + j < M)
                for (int64_t k = 0; k < K; ++k) dst[k * w] = A[(p0 + j) * lda + k];
            else
                for (int64_t k = 0; k < K; ++k) dst[k * w] = 0.0f;
        }
    }
    return 0;
}

/* min(max(a, lo), hi) as NumPy's maximum and minimum: NaN stays NaN. */
static inline gvec clamp(gvec a, float lo, float hi) {
    typedef int32_t gint __attribute__((vector_size(GV * sizeof(int32_t))));
    const gint below = a < lo, above = a > hi;
    a = (gvec)((below & (gint)((gvec){0} + lo)) | (~below & (gint)a));
    return (gvec)((above & (gint)((gvec){0} + hi)) | (~above & (gint)a));
}

/* acc[i][v] += sum over k < kc of b[k ldb + i] q[k nv GV + v GV ...] for i < mr (nv: a constant, 1 or
 * NV; mr: a constant, MR, or MR / 2 for a last tile of at most half the cells); meanwhile the `lines`
 * cache lines from `next` are fetched into L2, one every kc / lines k steps. */
static inline __attribute__((always_inline)) void tile(const float* restrict b, int64_t ldb, const float* restrict q,
                                                       int64_t kc, int nv, int mr, gvec acc[MR][NV],
                                                       const float* next, int64_t lines) {
    gvec s[MR][NV];
    for (int i = 0; i < mr; ++i)
        for (int v = 0; v < nv; ++v) s[i][v] = acc[i][v];
    const int64_t every = lines > 0 && kc / lines > 1 ? kc / lines : 1;
    for (int64_t k = 0, due = 0; k < kc; ++k) {
        gvec w[NV];
        for (int v = 0; v < nv; ++v) w[v] = gload(q + (k * nv + v) * GV);
        __builtin_prefetch(q + (k + PF) * nv * GV);  /* the pack streams from L2: ahead into L1 */
        if (lines > 0 && k == due) {
            __builtin_prefetch(next, 0, 1);
            next += 16;
            --lines;
            due += every;
        }
        for (int i = 0; i < mr; ++i) {
            const float x = b[k * ldb + i];
            for (int v = 0; v < nv; ++v) s[i][v] += x * w[v];
        }
    }
    for (int i = 0; i < mr; ++i)
        for (int v = 0; v < nv; ++v) acc[i][v] = s[i][v];
}

/* acc[r][v] = sum over k < K of a[k RR + r] b[k ldb + v GV ...] (nv: a constant, at most RV). */
static inline __attribute__((always_inline)) void rows_tile(const float* restrict a, const float* restrict b,
                                                            int64_t ldb, int64_t K, int nv, gvec acc[RR][RV]) {
    gvec s[RR][RV];
    for (int r = 0; r < RR; ++r)
        for (int v = 0; v < nv; ++v) s[r][v] = (gvec){0};
    for (int64_t k = 0; k < K; ++k) {
        gvec x[RV];
        for (int v = 0; v < nv; ++v) x[v] = gload(b + k * ldb + v * GV);
        for (int r = 0; r < RR; ++r) {
            const float w = a[k * RR + r];
            for (int v = 0; v < nv; ++v) s[r][v] += w * x[v];
        }
    }
    for (int r = 0; r < RR; ++r)
        for (int v = 0; v < nv; ++v) acc[r][v] = s[r][v];
}

/* Every panel of RR channels of pack (K rows) against a strip of nv vectors of cells (K rows of RN
 * floats), bias added and clamp applied, vector v of channel r stored at Y + r ldy + at[v], len[v] cells. */
static void rows_panels(const float* pack, const float* strip, int64_t M, int64_t K, int64_t nv, const float* bias,
                        float lo, float hi, float* Y, int64_t ldy, const int64_t at[RV], const int64_t len[RV]) {
    for (int64_t p0 = 0; p0 < M; p0 += RR) {
        const int64_t mc = M - p0 < RR ? M - p0 : RR;
        const float* a = pack + p0 * K;
        gvec acc[RR][RV];
        if (nv == RV)
            rows_tile(a, strip, RN, K, RV, acc);
        else if (nv == 1)
            rows_tile(a, strip, RN, K, 1, acc);
#if RV > 2
        else if (nv == 3)
            rows_tile(a, strip, RN, K, 3, acc);
#endif
        else
            rows_tile(a, strip, RN, K, 2, acc);
        for (int64_t r = 0; r < mc; ++r) {
            const float br = bias ? bias[p0 + r] : 0.0f;
            for (int64_t v = 0; v < nv; ++v) {
                const gvec o = clamp(acc[r][v] + br, lo, hi);
                float* restrict y = Y + (p0 + r) * ldy + at[v];
                if (len[v] == GV) {
                    memcpy(y, &o, sizeof o);
                } else {
                    float t[GV];
                    memcpy(t, &o, sizeof o);
                    for (int64_t j = 0; j < len[v]; ++j) y[j] = t[j];
                }
            }
        }
    }
}

/* gemm_f32 with cells on the lanes, for short K (where the transposed store of the tiles above costs
 * as much as their sums): RR channels x RN cells per tile, stored as rows. */
static int gemm_rows(const float* pack, const float* B, int64_t ldb, const float* bias, float* Y, int64_t ldy,
                     int64_t M, int64_t K, int64_t N, float lo, float hi) {
    /* the strip's rows one after another (the last cells' padded to RN), which every panel then reads in
     * order: rows of B far apart cost a page (TLB) miss each */
    float* strip = malloc(sizeof(float) * (size_t)(K * RN + 1));
    if (!strip) return 1;
    for (int64_t n0 = 0; n0 < N; n0 += RN) {
        const int64_t nc = N - n0 < RN ? N - n0 : RN, nv = (nc + GV - 1) / GV;
        if (nc == RN)
            for (int64_t k = 0; k < K; ++k) memcpy(strip + k * RN, B + k * ldb + n0, sizeof(float) * RN);
        else
            for (int64_t k = 0; k < K; ++k)
                for (int64_t i = 0; i < RN; ++i) strip[k * RN + i] = i < nc ? B[k * ldb + n0 + i] : 0.0f;
        int64_t at[RV], len[RV];
        for (int v = 0; v < RV; ++v) {
            at[v] = n0 + v * GV;
            len[v] = nc - v * GV < GV ? nc - v * GV : GV;
        }
        rows_panels(pack, strip, M, K, nv, bias, lo, hi, Y, ldy, at, len);
    }
    free(strip);
    return 0;
}

/* A tile of mc channels from p0 and nc cells from n0, bias (bb: its channels) added and clamp applied,
 * stored transposed into Y through t. */
static inline __attribute__((always_inline)) void store_tile(const float* bb, float lo, float hi, float* Y,
                                                             int64_t ldy, int64_t p0, int64_t n0, int64_t mc,
                                                             int64_t nc, gvec acc[MR][NV]) {
    float t[MR][NR];
    for (int v = 0; v < NV; ++v) {
        const gvec bv = gload(bb + v * GV);
        for (int i = 0; i < MR; ++i) acc[i][v] = clamp(acc[i][v] + bv, lo, hi);
    }
    for (int i = 0; i < MR; ++i)
        for (int v = 0; v < NV; ++v) memcpy(&t[i][v * GV], &acc[i][v], sizeof(gvec));
    if (nc == MR)  /* constant bounds: unrolled */
        for (int64_t j = 0; j < mc; ++j) {
            float* restrict y = Y + (p0 + j) * ldy + n0;
            for (int i = 0; i < MR; ++i) y[i] = t[i][j];
        }
    else
        for (int64_t j = 0; j < mc; ++j) {
            float* restrict y = Y + (p0 + j) * ldy + n0;
            for (int64_t i = 0; i < nc; ++i) y[i] = t[i][j];
        }
}

/* store_tile's tile stored as it is held: cell n0 + i's mc channels at Y + (n0 + i) ldy + p0. */
static inline __attribute__((always_inline)) void store_rows(const float* bb, float lo, float hi, float* Y,
                                                             int64_t ldy, int64_t p0, int64_t n0, int64_t mc,
                                                             int64_t nc, gvec acc[MR][NV]) {
    for (int64_t i = 0; i < nc; ++i) {
        float t[NR];
        for (int v = 0; v < NV; ++v) {
            const gvec o = clamp(acc[i][v] + gload(bb + v * GV), lo, hi);
            memcpy(t + v * GV, &o, sizeof o);
        }
        memcpy(Y + (n0 + i) * ldy + p0, t, sizeof(float) * (size_t)mc);
    }
}

/* Channels per block of the pack that stays in L2 while every tile of cells runs over it: half of L2
 * for the block, whole panels, at least one. */
static int64_t block_channels(int64_t kc) {
    static int64_t l2;
    if (!l2) {
        const long s = sysconf(_SC_LEVEL2_CACHE_SIZE);
        l2 = s > 0 ? s : 1 << 20;
    }
    const int64_t m = l2 / 2 / (sizeof(float) * (kc > 0 ? kc : 1)) / NR * NR;
    return m > NR ? m : NR;
}

#define KC 512  /* k per block, at most: a strip of MR cells' rows (MR KC floats) stays in L1 */

/* r[v] = sum over k < K of b[k] q[k nv GV + v GV ...] (nv: a constant, 1 or NV), in four partial sums
 * (k mod 4) added at the end: one chain of multiply-adds would wait on each one's latency. */
static inline __attribute__((always_inline)) void gemv_panel(const float* restrict q, const float* restrict b,
                                                             int64_t K, int nv, gvec r[NV]) {
    gvec s[4][NV];
    for (int u = 0; u < 4; ++u)
        for (int v = 0; v < nv; ++v) s[u][v] = (gvec){0};
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
        __builtin_prefetch(q + (k + PF) * nv * GV);
        for (int u = 0; u < 4; ++u)
            for (int v = 0; v < nv; ++v) s[u][v] += b[k + u] * gload(q + ((k + u) * nv + v) * GV);
    }
    for (; k < K; ++k)
        for (int v = 0; v < nv; ++v) s[0][v] += b[k] * gload(q + (k * nv + v) * GV);
    for (int v = 0; v < nv; ++v) r[v] = (s[0][v] + s[1][v]) + (s[2][v] + s[3][v]);
}

/* A product of one cell (a fully connected layer's one row), B[k] at b[k]: each panel streams once
 * against it, without tiles of cells that would be all but empty. */
static void gemv(const float* pack, const float* b, const float* bias, float* Y, int64_t ldy, int64_t M, int64_t K,
                 float lo, float hi) {
    for (int64_t p0 = 0; p0 < M; p0 += NR) {
        const int64_t w = panel_width(M, p0), mc = M - p0 < w ? M - p0 : w;
        gvec r[NV];
        if (w == NR)
            gemv_panel(pack + p0 * K, b, K, NV, r);
        else
            gemv_panel(pack + p0 * K, b, K, 1, r);
        float bb[NR] = {0}, t[NR];  /* the panel's bias, 0 past M; its sums, biased and clamped */
        for (int64_t j = 0; bias && j < mc; ++j) bb[j] = bias[p0 + j];
        for (int v = 0; v < w / GV; ++v) {
            const gvec o = clamp(r[v] + gload(bb + v * GV), lo, hi);
            memcpy(t + v * GV, &o, sizeof o);
        }
        for (int64_t j = 0; j < mc; ++j) Y[(p0 + j) * ldy] = t[j];
    }
}

#define STRIPS_FLOATS 32768  /* the strips of a group of tiles at most (128 KiB, in L2 beside a panel) */

/* The strip of the tile of nc cells from n0 (MR floats per k, 0 past nc) for k in [k0, k0 + kc), from B
 * as cells_gemm reads it. */
static inline void fill_strip(float* strip, const float* x, int64_t ldb, const int64_t* koff, const int64_t* cells,
                              int64_t k0, int64_t kc, int64_t n0, int64_t nc, int xrows) {
    if (koff) {
        int64_t co[MR];
        int runs[MR], nr = 0;  /* where runs of cells next to each other in the planes start */
        for (int i = 0; i < MR; ++i) {
            co[i] = cells[n0 + (i < nc ? i : 0)];
            if (i == 0 || co[i] != co[i - 1] + 1) runs[nr++] = i;
        }
        if (nc == MR && nr <= 3)  /* a vector move per run, in order: each one's lanes past its run (into the
                                   * next run, or the next k, or the next strip) are written again after */
            for (int64_t k = 0; k < kc; ++k) {
                const float* r = x + koff[k0 + k];
                for (int j = 0; j < nr; ++j) {
                    const gvec v = gload(r + co[runs[j]]);
                    memcpy(strip + k * MR + runs[j], &v, sizeof v);
                }
            }
        else
            for (int64_t k = 0; k < kc; ++k) {
                const float* restrict r = x + koff[k0 + k];
                for (int i = 0; i < MR; ++i) strip[k * MR + i] = i < nc ? r[co[i]] : 0.0f;
            }
    } else if (xrows) {
        for (int i = 0; i < MR; ++i) {
            const float* restrict r = x + (n0 + i) * ldb + k0;
            if (i < nc)
                for (int64_t k = 0; k < kc; ++k) strip[k * MR + i] = r[k];
            else
                for (int64_t k = 0; k < kc; ++k) strip[k * MR + i] = 0.0f;
        }
    } else if (nc == MR) {
        for (int64_t k = 0; k < kc; ++k) memcpy(strip + k * MR, x + (k0 + k) * ldb + n0, sizeof(float) * MR);
    } else {
        for (int64_t k = 0; k < kc; ++k)
            for (int i = 0; i < MR; ++i) strip[k * MR + i] = i < nc ? x[(k0 + k) * ldb + n0 + i] : 0.0f;
    }
}

/* gemm_f32 with channels on the lanes, B[k][n] at x[k ldb + n], or at x[koff[k] + cells[n]] (koff not
 * NULL: the taps of a conv's phase planes, read in place of an im2col copy), or (xrows: a fully
 * connected layer's rows) at x[n ldb + k], Y[m][n] then stored at Y[n ldy + m]. Per block of K and of
 * channels, the tiles of MR cells of a group (fill_strip: STRIPS_FLOATS) are first copied into strips
 * (their rows one after another, 0 past N), which each panel of the block then reads in order, one tile
 * after another. Each cell's sum runs in the order of k; a product of one
 * cell (CELLS_ONE: the whole product, not one cell of a part of it, which must sum as the others) runs
 * by gemv. */
enum { CELLS_XROWS = 1, CELLS_ONE = 2 };  /* cells_gemm's flags */

static int cells_gemm(const float* pack, const float* x, int64_t ldb, const int64_t* koff, const int64_t* cells,
                      const float* bias, float* Y, int64_t ldy, int64_t M, int64_t K, int64_t N, float lo, float hi,
                      int flags) {
    const int xrows = flags & CELLS_XROWS;
    if (N == 1 && (flags & CELLS_ONE) && !koff && (ldb == 1 || xrows)) {
        gemv(pack, x, bias, Y, xrows ? 1 : ldy, M, K, lo, hi);
        return 0;
    }
    if (N == 1 && (flags & CELLS_ONE)) {  /* the column copied: its floats one after another */
        float* b = malloc(sizeof(float) * (size_t)(K + 1));
        if (!b) return 1;
        for (int64_t k = 0; k < K; ++k) b[k] = koff ? x[koff[k] + cells[0]] : x[k * ldb];
        gemv(pack, b, bias, Y, ldy, M, K, lo, hi);
        free(b);
        return 0;
    }
    const int64_t nblocks = K > KC ? (K + KC - 1) / KC : 1, kb = (K + nblocks - 1) / nblocks;
    const int64_t ntiles = (N + MR - 1) / MR, mpad = (M + NR - 1) / NR * NR, mb = block_channels(kb);
    /* tiles whose strips are filled together, then each panel runs over all of them: a panel fetched from
     * memory (a weight read once per run) is then used group times as it arrives */
    int64_t group = STRIPS_FLOATS / (kb * MR > 0 ? kb * MR : 1);
    group = group < 1 ? 1 : group > ntiles ? ntiles : group;
    float* strips = malloc(sizeof(float) * (size_t)(group * kb * MR + GV));  /* (+ GV: a last move's lanes) */
    /* partial sums between blocks of K: tile (n-tile, panel) at sums + (n-tile mpad + p0) MR */
    gvec* sums = nblocks > 1 ? aligned_alloc(sizeof(gvec), sizeof(float) * (size_t)(ntiles * mpad * MR)) : NULL;
    if (!strips || (nblocks > 1 && !sums)) {
        free(strips);
        free(sums);
        return 1;
    }
    for (int64_t k0 = 0, last = 0; !last; k0 += kb) {  /* once when K == 0: Y = bias */
        const int64_t kc = K - k0 < kb ? K - k0 : kb;
        last = k0 + kc == K;
        const int first = k0 == 0;
        for (int64_t m0 = 0; m0 < M; m0 += mb) {
            const int64_t m1 = M - m0 < mb ? M : m0 + mb;
            for (int64_t t0 = 0; t0 < ntiles; t0 += group) {
                const int64_t t1 = t0 + group < ntiles ? t0 + group : ntiles;
                for (int64_t nt = t0; nt < t1; ++nt)
                    fill_strip(strips + (nt - t0) * kc * MR, x, ldb, koff, cells, k0, kc, nt * MR,
                               N - nt * MR < MR ? N - nt * MR : MR, xrows);
                for (int64_t p0 = m0; p0 < m1; p0 += NR) {
                    const int64_t w = panel_width(M, p0), mc = M - p0 < w ? M - p0 : w;
                    const float* q = pack + p0 * K + k0 * w;
                    float bb[NR] = {0};  /* the panel's bias, 0 past M */
                    for (int64_t j = 0; last && bias && j < mc; ++j) bb[j] = bias[p0 + j];
                    /* the next panel fetched into L2 over this one's tiles (a weight read once per run
                     * comes from memory: light resnet50 ran about 5% faster with it) */
                    const float* next = p0 + NR < m1 ? pack + (p0 + NR) * K + k0 * panel_width(M, p0 + NR) : NULL;
                    const int64_t lines = next ? (kc * panel_width(M, p0 + NR) + 15) / 16 : 0;
                    for (int64_t nt = t0; nt < t1; ++nt) {
                        const int64_t n0 = nt * MR, nc = N - n0 < MR ? N - n0 : MR;
                        const float* strip = strips + (nt - t0) * kc * MR;
                        /* this tile's share of the next panel's lines, spread over its k steps: issued
                         * all before the tile they hid nothing (a 40 x 1024 x 8210 fully connected layer,
                         * its 34 MB weight from memory: 12.0 -> 10.1 ms spread, AMD EPYC, Zen 3) */
                        const int64_t l0 = lines * (nt - t0) / (t1 - t0), l1 = lines * (nt - t0 + 1) / (t1 - t0);
                        const float* pf = next ? next + 16 * l0 : NULL;
                        gvec acc[MR][NV];
                        gvec* saved = sums ? sums + (nt * mpad + p0) * MR / GV : NULL;
                        for (int i = 0; i < MR; ++i)
                            for (int v = 0; v < NV; ++v) acc[i][v] = first ? (gvec){0} : saved[i * NV + v];
                        if (2 * nc <= MR)  /* half the cells: half the sums */
                            w == NR ? tile(strip, MR, q, kc, NV, MR / 2, acc, pf, l1 - l0)
                                    : tile(strip, MR, q, kc, 1, MR / 2, acc, pf, l1 - l0);
                        else
                            w == NR ? tile(strip, MR, q, kc, NV, MR, acc, pf, l1 - l0)
                                    : tile(strip, MR, q, kc, 1, MR, acc, pf, l1 - l0);
                        if (!last) {
                            for (int i = 0; i < MR; ++i)
                                for (int v = 0; v < NV; ++v) saved[i * NV + v] = acc[i][v];
                        } else if (xrows) {
                            store_rows(bb, lo, hi, Y, ldy, p0, n0, mc, nc, acc);
                        } else {
                            store_tile(bb, lo, hi, Y, ldy, p0, n0, mc, nc, acc);
                        }
                    }
                }
            }
        }
    }
    free(strips);
    free(sums);
    return 0;
}

static int gemm_cells(const float* pack, const float* B, int64_t ldb, const float* bias, float* Y, int64_t ldy,
                      int64_t M, int64_t K, int64_t N, float lo, float hi, int flags) {
    return cells_gemm(pack, B, ldb, NULL, NULL, bias, Y, ldy, M, K, N, lo, hi, flags);
}

/* gemm_rows of a conv without its columns: the cells go in segments of at most GV cells of one output
 * row (segment i: at seg[i] in a plane, segn[i] cells, stored at Y + yat[i]), B[k] of a segment read as
 * one vector at x + koff[k] + seg[i] (the phase planes, whose slack covers a last segment's spill) and
 * copied into strip (K RN floats); the same sums in the same order. */
static void conv_rows(const float* pack, const float* x, const int64_t* koff, const int64_t* seg,
                      const int64_t* segn, const int64_t* yat, int64_t nseg, const float* bias, float* Y, int64_t ldy,
                      int64_t M, int64_t K, float lo, float hi, float* strip) {
    for (int64_t s0 = 0; s0 < nseg; s0 += RV) {
        const int64_t ns = nseg - s0 < RV ? nseg - s0 : RV;
        for (int64_t k = 0; k < K; ++k)  /* as gemm_rows: the segments' rows copied one after another */
            for (int64_t v = 0; v < ns; ++v) memcpy(strip + k * RN + v * GV, x + koff[k] + seg[s0 + v], sizeof(gvec));
        rows_panels(pack, strip, M, K, ns, bias, lo, hi, Y, ldy, yat + s0, segn + s0);
    }
}

/* Rows [q0, q1) of the phase planes (common.h) of C input planes (HW floats apart) into buf (P floats
 * apart), 0 in the padding (pads: else the caller zeroed buf, and which cells are padding does not
 * depend on q0 and q1): fill_plane_rows of every channel, the padding worked out once per phase
 * rather than per channel and row. */
static void fill_input_rows(const Windows* g, const float* x, int64_t C, int64_t HW, float* buf, int64_t P,
                            int64_t q0, int64_t q1, int pads) {
    const int64_t Qw = g->Qw, sw = g->sw;
    for (int64_t a = 0; a < g->sh; ++a)
        for (int64_t b = 0; b < g->sw; ++b) {
            int64_t lo, hi, v0, v1;
            valid_range(g->W, g->sw, b - g->pw, Qw, &lo, &hi);
            valid_range(g->H, g->sh, a - g->ph, g->Qh, &v0, &v1);
            const int64_t n = hi - lo;
            for (int64_t c = 0; c < C; ++c) {
                float* plane = buf + c * P + (a * g->sw + b) * g->Qh * Qw;
                const float* xc = x + c * HW + b - g->pw + lo * sw;
                for (int64_t q = q0; q < q1; ++q) {
                    float* restrict row = plane + q * Qw;
                    if (q < v0 || q >= v1) {
                        if (pads)
                            for (int64_t r = 0; r < Qw; ++r) row[r] = 0.0f;
                        continue;
                    }
                    if (pads)
                        for (int64_t r = 0; r < lo; ++r) row[r] = 0.0f;
                    const float* restrict xr = xc + (a + g->sh * q - g->ph) * g->W;
                    float* restrict dst = row + lo;
                    if (sw == 1)
                        for (int64_t r = 0; r < n; ++r) dst[r] = xr[r];
                    else if (sw == 2)
                        for (int64_t r = 0; r < n; ++r) dst[r] = xr[2 * r];
                    else
                        for (int64_t r = 0; r < n; ++r) dst[r] = xr[r * sw];
                    if (pads)
                        for (int64_t r = hi; r < Qw; ++r) row[r] = 0.0f;
                }
            }
        }
}

/* Channels per panel of a pack in layout rows: its parts split channels at these boundaries. */
static inline int64_t panel_channels(int64_t rows) { return rows ? RR : NR; }

/* Parts that split the channels of an M x K x N product, each over every cell, or 0: the cells are
 * split instead. Channels when the weight outweighs the columns (small maps: each part of the cells
 * would stream all of it from L3), two parts per thread. */
static int64_t channel_parts(int64_t M, int64_t K, int64_t N, int64_t rows) {
    const int64_t t = pool_get_threads(), panels = (M + panel_channels(rows) - 1) / panel_channels(rows);
    if (t <= 1 || M <= N || panels < 2 || M * K * N < 2 * POOL_MIN_WORK) return 0;
    return panels < 2 * t ? panels : 2 * t;
}

typedef struct {
    const float *pack, *B, *bias;
    float* Y;
    int64_t ldb, ldy, M, K, N, rows, by_channels, xrows;
    float lo, hi;
    int status;
} GemmArgs;

/* Part `part` of the columns, split at tile boundaries, or of the channels (by_channels), at panel
 * boundaries: each cell is summed as in one part. */
static void gemm_part(void* ctx, int64_t part, int64_t parts) {
    GemmArgs* a = ctx;
    int64_t n0 = 0, n1 = a->N, m0 = 0, m1 = a->M;
    if (a->by_channels)
        pool_range(a->M, panel_channels(a->rows), part, parts, &m0, &m1);
    else
        pool_range(a->N, a->rows ? RN : MR, part, parts, &n0, &n1);
    if (n1 <= n0 || m1 <= m0) return;
    const float* pack = a->pack + m0 * a->K;
    const float* bias = a->bias ? a->bias + m0 : NULL;
    const int64_t M = m1 - m0, N = n1 - n0;
    const int one = a->N == 1 ? CELLS_ONE : 0;
    int status;
    if (a->xrows)
        status = cells_gemm(pack, a->B + n0 * a->ldb, a->ldb, NULL, NULL, bias, a->Y + n0 * a->ldy + m0, a->ldy, M,
                            a->K, N, a->lo, a->hi, CELLS_XROWS | one);
    else if (a->rows)
        status = gemm_rows(pack, a->B + n0, a->ldb, bias, a->Y + m0 * a->ldy + n0, a->ldy, M, a->K, N, a->lo, a->hi);
    else
        status = gemm_cells(pack, a->B + n0, a->ldb, bias, a->Y + m0 * a->ldy + n0, a->ldy, M, a->K, N, a->lo, a->hi,
                            one);
    if (status) a->status = status;
}

/* Y (M x N, rows ldy apart) = pack (gemm_pack_f32 of A, with the same rows) B (K x N, rows ldb apart)
 * + bias (NULL: 0), clamped to [lo, hi] (NaN stays). The columns, or the channels (channel_parts), are
 * split across the pool's threads (pool_threads.h) when each gets at least POOL_MIN_WORK multiply-adds.
 * Returns 0, or 1 when out of memory. */
static int gemm_split(GemmArgs* a) {
    a->by_channels = channel_parts(a->M, a->K, a->N, a->rows);
    const int64_t tile = a->rows ? RN : MR, per_tile = tile * (a->M * a->K > 0 ? a->M * a->K : 1);
    const int64_t min_tiles = (POOL_MIN_WORK + per_tile - 1) / per_tile;
    const int64_t parts = a->by_channels ? a->by_channels : pool_parts((a->N + tile - 1) / tile, min_tiles);
    pool_run(gemm_part, a, parts);
    return a->status;
}

int gemm_f32(const float* pack, const float* B, int64_t ldb, const float* bias, float* Y, int64_t ldy, int64_t M,
             int64_t K, int64_t N, int64_t rows, float lo, float hi) {
    GemmArgs a = {pack, B, bias, Y, ldb, ldy, M, K, N, rows, 0, 0, lo, hi, 0};
    return gemm_split(&a);
}

/* A fully connected layer: Y (N x M, rows ldy apart) = X (N x K, rows ldx apart) W^T + bias, clamped to
 * [lo, hi], pack = gemm_pack_f32 of W (M x K) in the channels layout (rows 0): gemm_f32's product with
 * X's rows as its cells, read and written as rows. Split as gemm_f32's. Returns 0, or 1 when out of memory. */
int fc_f32(const float* pack, const float* X, int64_t ldx, const float* bias, float* Y, int64_t ldy, int64_t M,
           int64_t K, int64_t N, float lo, float hi) {
    GemmArgs a = {pack, X, bias, Y, ldx, ldy, M, K, N, 0, 0, 1, lo, hi, 0};
    return gemm_split(&a);
}

/* fc_f32 as a program step: p = {pack, bias (addresses), ldx, ldy, M, K, N, lo, hi (param_float)}. */
int fc_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return fc_f32((const float*)(intptr_t)p[0], x, p[2], (const float*)(intptr_t)p[1], y, p[3], p[4], p[5], p[6],
                  param_float(p, 7), param_float(p, 8));
}

/* A whole conv as this GEMM (conv_params.h) without an im2col copy: blocks of output rows of one image at
 * a time, the rows of the input's phase planes (common.h) that a block reads filled (each part of a
 * threaded run touches only its own rows of its planes), then one GEMM per
 * group whose B is read from the planes (conv_cells, conv_rows), bias and clamp in its store; a 1x1
 * stride-1 unpadded conv reads X itself as B. */
#define COLS_BYTES (1 << 22)  /* the columns of one block (read, not copied) at most... */
#define ZERO_ONCE 8192  /* planes of at most this many floats are zeroed whole, once per call, and their
                          * rows filled without their padding (small maps, where writing it costs most) */
#define CELL_COST 32  /* multiply-adds' worth of work per output cell besides its sums (conv2d_gemm_planned_f32) */
#define COLS_MIN 2048  /* ...but at least this many cells, so that each GEMM runs over enough of them */

typedef struct {
    const struct conv_params* p;
    const Windows* g;
    const float *x, *z;
    float* y;
    int64_t chunk, direct;  /* output rows per block; 1: X itself is B (a 1x1 stride-1 unpadded conv) */
    int64_t by_channels;  /* parts split each group's channels (channel_parts), not the output rows */
    int status;
} ConvGemmArgs;

/* Output rows [r0, r1) of all images (row r: image r / OH, row r % OH), all channels, or (by_channels)
 * all rows of channels [m0, m1) of each group: each cell summed as in one part. */
static void conv_gemm_part(void* ctx, int64_t part, int64_t parts) {
    ConvGemmArgs* a = ctx;
    const struct conv_params* p = a->p;
    const Windows* g = a->g;
    const int64_t K = p->KH * p->KW, C = p->C, CK = C * K, CKg = CK / p->group, Mg = p->M / p->group;
    int64_t r0 = 0, r1 = p->N * p->OH, m0 = 0, m1 = Mg;
    if (a->by_channels)
        pool_range(Mg, panel_channels(p->rows), part, parts, &m0, &m1);
    else
        pool_range(p->N * p->OH, 1, part, parts, &r0, &r1);
    if (r0 >= r1 || m0 >= m1) return;
    const int64_t OH = p->OH, OW = p->OW, OHW = OH * OW, HW = p->H * p->W, P = planes_size(g);
    int64_t chunk = a->chunk < r1 - r0 ? a->chunk : r1 - r0;
    if (chunk > OH) chunk = OH;
    int64_t *offs = NULL, *koff = NULL, *cells = NULL, *segn = NULL, *yat = NULL;
    float* buf = NULL;
    if (!a->direct) {  /* B read from the phase planes of the input channels */
        /* (+ GV floats: cells_gemm's vector moves read past a run at the planes' end) */
        offs = malloc(sizeof(int64_t) * (K + CK + 3 * chunk * OW) +
                      sizeof(float) * (C * P + GV + (p->rows ? CKg * RN : 0)));
        if (!offs) {
            a->status = 1;
            return;
        }
        tap_offsets(g, offs);
        koff = offs + K;
        cells = koff + CK;  /* the channels layout's cells, or the rows layout's segments */
        segn = cells + chunk * OW;
        yat = segn + chunk * OW;
        buf = (float*)(yat + chunk * OW);
        if (C * P <= ZERO_ONCE)
            memset(buf, 0, sizeof(float) * C * P);
        else
            for (int64_t c = 0; c < C; ++c)  /* the slack a last vector of a row may read */
                memset(buf + (c + 1) * P - VL, 0, sizeof(float) * VL);
        memset(buf + C * P, 0, sizeof(float) * GV);
        for (int64_t c = 0; c < C; ++c)
            for (int64_t t = 0; t < K; ++t) koff[c * K + t] = c * P + offs[t];
    }
    const int store = conv_store_clamps(p, a->z), one = p->N * OHW == 1 ? CELLS_ONE : 0;
    const float lo = store ? p->lo : -__builtin_inff(), hi = store ? p->hi : __builtin_inff();
    for (int64_t r = r0; r < r1;) {
        const int64_t n = r / OH, oy0 = r % OH;
        int64_t oy1 = oy0 + chunk < OH ? oy0 + chunk : OH;
        if (oy1 - oy0 > r1 - r) oy1 = oy0 + (r1 - r);
        const int64_t L = (oy1 - oy0) * OW;
        const float* xn = a->x + n * C * HW;
        float* yn = a->y + n * p->M * OHW + oy0 * OW;
        if (a->direct) {
            for (int64_t gi = 0; gi < p->group && !a->status; ++gi) {
                const float* pack = p->weights + gi * p->wstride + m0 * CKg;
                const float* bias = p->bias ? p->bias + gi * Mg + m0 : NULL;
                const float* b = xn + oy0 * OW + gi * CKg * HW;
                float* yg = yn + (gi * Mg + m0) * OHW;
                const int status = p->rows ? gemm_rows(pack, b, HW, bias, yg, OHW, m1 - m0, CKg, L, lo, hi)
                                           : gemm_cells(pack, b, HW, bias, yg, OHW, m1 - m0, CKg, L, lo, hi, one);
                if (status) a->status = status;
            }
        } else {
            const int64_t last = oy1 + (g->KH - 1) * g->dh / g->sh;
            fill_input_rows(g, xn, C, HW, buf, P, oy0, last < g->Qh ? last : g->Qh, C * P > ZERO_ONCE);
            int64_t nseg = 0;
            if (p->rows)
                for (int64_t oy = oy0; oy < oy1; ++oy)
                    for (int64_t ox = 0; ox < OW; ox += GV, ++nseg) {
                        cells[nseg] = oy * g->Qw + ox;
                        segn[nseg] = OW - ox < GV ? OW - ox : GV;
                        yat[nseg] = (oy - oy0) * OW + ox;
                    }
            else
                for (int64_t oy = oy0; oy < oy1; ++oy)
                    for (int64_t ox = 0; ox < OW; ++ox) cells[(oy - oy0) * OW + ox] = oy * g->Qw + ox;
            for (int64_t gi = 0; gi < p->group; ++gi) {
                const float* pack = p->weights + gi * p->wstride + m0 * CKg;
                const float* bias = p->bias ? p->bias + gi * Mg + m0 : NULL;
                float* yg = yn + (gi * Mg + m0) * OHW;
                int status = 0;
                if (p->rows)
                    conv_rows(pack, buf, koff + gi * CKg, cells, segn, yat, nseg, bias, yg, OHW, m1 - m0, CKg, lo, hi,
                              buf + C * P);
                else
                    status = cells_gemm(pack, buf, 0, koff + gi * CKg, cells, bias, yg, OHW, m1 - m0, CKg, L, lo, hi,
                                        one);
                if (status) a->status = status;
            }
        }
        if (!store)
            for (int64_t gi = 0; gi < p->group; ++gi)
                epilogue_rows(yn, OHW, a->z ? a->z + n * p->M * OHW + oy0 * OW : NULL, OHW, gi * Mg + m0, gi * Mg + m1,
                              L, p);
        r += oy1 - oy0;
    }
    free(offs);
}

/* Y (N, M, OH, OW) = act(conv(X, W) + bias (+ z: a residual of Y's shape, or NULL)) for the conv of
 * p (conv_params.h; its weights: gemm_pack_f32 packs of each group's rows of W as (M, C / group * KH *
 * KW), in layout p->rows). The output rows, or on small maps the channels (channel_parts), are split
 * across the pool's threads (pool_threads.h) when each part gets at least POOL_MIN_WORK multiply-adds.
 * Returns 0, or 1 when out of memory. */
typedef struct {
    const struct conv_params* p;
    const float* x;
    float* xs;
} SampleArgs;

/* Planes [c0, c1) of the (N C) input planes, the cells a strided 1x1 conv reads. */
static void sample_part(void* ctx, int64_t part, int64_t parts) {
    const SampleArgs* a = ctx;
    const struct conv_params* p = a->p;
    int64_t c0, c1;
    pool_range(p->N * p->C, 1, part, parts, &c0, &c1);
    for (int64_t c = c0; c < c1; ++c) {
        const float* xc = a->x + c * p->H * p->W;
        float* out = a->xs + c * p->OH * p->OW;
        for (int64_t oy = 0; oy < p->OH; ++oy) {
            const float* row = xc + oy * p->sh * p->W;
            for (int64_t ox = 0; ox < p->OW; ++ox) out[oy * p->OW + ox] = row[ox * p->sw];
        }
    }
}

int conv2d_gemm_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y) {
    if (p->KH == 1 && p->KW == 1 && !p->ph && !p->pw && (p->sh > 1 || p->sw > 1) && p->OH > 0 && p->OW > 0 &&
        (p->OH - 1) * p->sh < p->H && (p->OW - 1) * p->sw < p->W) {
        /* a strided 1x1 conv without padding: the cells it reads copied out, then the direct 1x1 conv of
         * them (its columns read as they lie, not through phase planes) */
        float* xs = malloc(sizeof(float) * (size_t)(p->N * p->C * p->OH * p->OW));
        if (!xs) return 1;
        SampleArgs s = {p, x, xs};
        const int64_t per_plane = p->OH * p->OW + 1;
        pool_run(sample_part, &s, pool_parts(p->N * p->C, (16384 + per_plane - 1) / per_plane + 1));
        struct conv_params q = *p;
        q.H = p->OH, q.W = p->OW, q.sh = q.sw = 1;
        const int status = conv2d_gemm_planned_f32(&q, xs, z, y);
        free(xs);
        return status;
    }
    const Windows g = conv_windows(p);
    const int64_t K = p->KH * p->KW, CK = p->C * K, OW = p->OW > 0 ? p->OW : 1;
    const int64_t direct = K == 1 && p->sh == 1 && p->sw == 1 && p->ph == 0 && p->pw == 0 && p->OH == p->H &&
                           p->OW == p->W;
    int64_t chunk = COLS_BYTES / (sizeof(float) * (CK > 0 ? CK : 1) * OW);
    if (chunk * OW < COLS_MIN) chunk = (COLS_MIN + OW - 1) / OW;
    if (p->N * p->OH * p->OW == 0) return 0;
    /* each output cell costs its CK / group multiply-adds and about CELL_COST more (its B loads, store and
     * epilogue): 1x1 convs of 8-16 input channels ran at 11-17 G multiply-adds a second on one core of the
     * AMD EPYC (2026-11-29), those of 64 or more at 35-40 G */
    const int64_t groups = p->group > 0 ? p->group : 1, Mg = p->M / groups;
    const int64_t per_row = p->M * (CK / groups + CELL_COST) * OW;
    const int64_t by_channels = channel_parts(Mg, CK / groups, p->N * p->OH * p->OW, p->rows);
    ConvGemmArgs a = {p, &g, x, z, y, chunk < 1 ? 1 : chunk, direct, by_channels, 0};
    pool_run(conv_gemm_part, &a, by_channels ? by_channels
                                             : pool_parts(p->N * p->OH, (POOL_MIN_WORK + per_row - 1) / per_row));
    return a.status;
}

int gemm_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
