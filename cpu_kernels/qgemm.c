/* 8-bit integer GEMM with int32 accumulation, and QLinearConv / ConvInteger / MatMulInteger / QLinearMatMul
 * on it.
 *
 * The product. C[m, n] = sum_k A[m, k] B[k, n] over bytes, one operand uint8 and the other int8 (the
 * form of vpdpbusd; other signednesses are shifted by 128 into it by the callers, their zero points
 * with them), accumulated in int32, wrapping modulo 2**32 as the spec's accumulation may. A is read by
 * rows, 4 bytes of k at a time (rows padded to a multiple of 4); B is "packed" in groups of 16 columns
 * (N rounded up to 16), the 4 k of column n side by side, so that one 64-byte load holds 4 k of a
 * group: [K/4][Np][4] (a conv's B, made at each call: consecutive k of a group Np 4 bytes apart, groups
 * 64) or group-major [Np/16][K/4][16][4] (a weight, packed once: a group's K rows contiguous, read in
 * order). Zero points are corrections, as MLAS does them:
 *     sum_k (a - za)(b - zb) = sum_k a b + rowc[m] + colc[n] - P[m] Q[n]
 * (P, Q: a zero point per row or column times the other operand's sums). The result is stored as
 * int32, or requantised: y = saturate(rint(float(c) * mult) + zy) in float32, rounding half to even,
 * NaN to the low end, as the NumPy code of gpuops.ops.quantize does.
 *
 * Where the CPU has AVX-512 VNNI (asked at run time, so that the file builds for any x86-64 level),
 * tiles of up to 16 rows x 64 columns run vpdpbusd, which adds four exact uint8 x int8 products to
 * each int32 lane (no intermediate saturation, unlike vpmaddubsw); with AVX2, vpmaddwd on the bytes
 * widened to int16 (exact too); elsewhere a portable loop computes the same bits.
 *
 * QLinearConv (qconv_u8, NCHW, 2-D; ConvInteger's qconv_i32 alike, out int32) packs the input's im2col
 * as B (padding cells hold the input's zero point, so they add nothing once centred; built from "phase
 * planes", below) and multiplies the weight, A, by it: the output rows are the output channels, its
 * columns the output pixels.
 * The exported functions return 0, or 1 when out of memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "pool_threads.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QG_X86 1
#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#endif

typedef struct {
    const uint8_t* A;  /* rows of lda bytes (lda a multiple of 4) */
    const uint8_t* B;  /* packed: 4 k of column n at B + (n / 16) bg + q bq + (n % 16) 4 */
    int64_t lda, bq, bg, M, N, Kq;
    int64_t a_signed;  /* A int8 and B uint8, else A uint8 and B int8 */
    const int32_t *rowc, *colc, *P, *Q;  /* corrections, each may be NULL (then P and Q both) */
    int64_t out8, y_signed;  /* out8: 1, requantised to 8 bits with mrow[m] (else mcol[n]); 2, float32
                                c mcol[n] + bias[n] (bias may be NULL); 0, int32 */
    const float *mrow, *mcol, *bias;
    float zy;
    void* Y;
    int64_t ldy;
    int64_t simd;  /* the widest instructions to use: 2 AVX-512 VNNI, 1 AVX2, 0 none (portable C) */
} Gemm;

/* C[m, n] after the corrections, as uint32 bits, to its output cell. */
static inline void store1(const Gemm* g, int64_t m, int64_t n, uint32_t c) {
    if (g->rowc) c += (uint32_t)g->rowc[m];
    if (g->colc) c += (uint32_t)g->colc[n];
    if (g->P) c -= (uint32_t)g->P[m] * (uint32_t)g->Q[n];
    if (!g->out8) {
        ((int32_t*)g->Y)[m * g->ldy + n] = (int32_t)c;
        return;
    }
    if (g->out8 == 2) {
        float f = (float)(int32_t)c * g->mcol[n];
        if (g->bias) f += g->bias[n];
        ((float*)g->Y)[m * g->ldy + n] = f;
        return;
    }
    const float lo = g->y_signed ? -128.0f : 0.0f, hi = g->y_signed ? 127.0f : 255.0f;
    const float q = rintf((float)(int32_t)c * (g->mrow ? g->mrow[m] : g->mcol[n])) + g->zy;
    const float v = q > lo ? q : lo;  /* NaN: lo */
    const int32_t i = (int32_t)(v < hi ? v : hi);
    if (g->y_signed)
        ((int8_t*)g->Y)[m * g->ldy + n] = (int8_t)i;
    else
        ((uint8_t*)g->Y)[m * g->ldy + n] = (uint8_t)i;
}

/* Row m, columns [n0, n1) (at most 64), portably. */
static void tile_c(const Gemm* g, int64_t m, int64_t n0, int64_t n1) {
    uint32_t acc[64];
    const int64_t w = n1 - n0;
    for (int64_t i = 0; i < w; ++i) acc[i] = 0;
    const uint8_t* a = g->A + m * g->lda;
    for (int64_t q = 0; q < g->Kq; ++q)
        for (int64_t i0 = 0; i0 < w; i0 += 16) {  /* a group of 16 columns */
            const uint8_t* restrict b = g->B + (n0 + i0) / 16 * g->bg + q * g->bq;
            const int64_t i1 = w - i0 < 16 ? w : i0 + 16;
            if (g->a_signed) {
                const int32_t a0 = (int8_t)a[4 * q], a1 = (int8_t)a[4 * q + 1], a2 = (int8_t)a[4 * q + 2],
                              a3 = (int8_t)a[4 * q + 3];
                for (int64_t i = i0; i < i1; ++i, b += 4)
                    acc[i] += (uint32_t)(a0 * b[0] + a1 * b[1] + a2 * b[2] + a3 * b[3]);
            } else {
                const int32_t a0 = a[4 * q], a1 = a[4 * q + 1], a2 = a[4 * q + 2], a3 = a[4 * q + 3];
                const int8_t* restrict s = (const int8_t*)b;
                for (int64_t i = i0; i < i1; ++i, s += 4)
                    acc[i] += (uint32_t)(a0 * s[0] + a1 * s[1] + a2 * s[2] + a3 * s[3]);
            }
        }
    for (int64_t i = 0; i < w; ++i) store1(g, m, n0 + i, acc[i]);
}

#ifdef QG_X86
/* Rows [m0, m0 + MR) (those below M) by NV vectors of 16 columns from n0, with vpdpbusd; AS: A int8.
 * MR NV <= 16 accumulators, independent chains: MR is larger for narrow products (a vpdpbusd waits
 * for the one before it on its accumulator). */
static inline __attribute__((always_inline)) QG_TARGET void tile_vnni(const Gemm* g, int64_t m0, int64_t n0,
                                                                      const int MR, const int NV, const int AS) {
    const uint8_t* a[16];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) a[r] = g->A + (m0 + r < g->M ? m0 + r : g->M - 1) * g->lda;
    __m512i acc[16][4];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
    const uint8_t* b = g->B + n0 / 16 * g->bg;
    const int64_t step = g->bq, group = g->bg;
    for (int64_t q = 0; q < g->Kq; ++q, b += step) {
        __m512i bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512((const void*)(b + group * v));
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            int32_t w;
            memcpy(&w, a[r] + 4 * q, 4);
            const __m512i av = _mm512_set1_epi32(w);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v)
                acc[r][v] = AS ? _mm512_dpbusd_epi32(acc[r][v], bv[v], av) : _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
        }
    }
    const __m512 lo = _mm512_set1_ps(g->y_signed ? -128.0f : 0.0f), hi = _mm512_set1_ps(g->y_signed ? 127.0f : 255.0f);
    const __m512 zy = _mm512_set1_ps(g->zy);
    for (int r = 0; r < MR; ++r) {
        const int64_t m = m0 + r;
        if (m >= g->M) break;
        const __m512i rc = _mm512_set1_epi32(g->rowc ? g->rowc[m] : 0), pm = _mm512_set1_epi32(g->P ? g->P[m] : 0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            const int64_t n = n0 + 16 * v, left = g->N - n;
            if (left <= 0) break;
            const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            __m512i c = _mm512_add_epi32(acc[r][v], rc);
            if (g->colc) c = _mm512_add_epi32(c, _mm512_maskz_loadu_epi32(k, g->colc + n));
            if (g->P) c = _mm512_sub_epi32(c, _mm512_mullo_epi32(pm, _mm512_maskz_loadu_epi32(k, g->Q + n)));
            if (!g->out8) {
                _mm512_mask_storeu_epi32((int32_t*)g->Y + m * g->ldy + n, k, c);
                continue;
            }
            if (g->out8 == 2) {
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_maskz_loadu_ps(k, g->mcol + n));
                if (g->bias) f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(k, g->bias + n));
                _mm512_mask_storeu_ps((float*)g->Y + m * g->ldy + n, k, f);
                continue;
            }
            const __m512 mult = g->mrow ? _mm512_set1_ps(g->mrow[m]) : _mm512_maskz_loadu_ps(k, g->mcol + n);
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(c), mult);
            f = _mm512_add_ps(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zy);
            f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);  /* max(NaN, lo) is lo: the second operand */
            _mm512_mask_cvtepi32_storeu_epi8((int8_t*)g->Y + m * g->ldy + n, k, _mm512_cvtps_epi32(f));
        }
    }
}

#define QG_TILE(MR, NV, AS)                                                                  \
    static QG_TARGET void tile_vnni_##MR##_##NV##_##AS(const Gemm* g, int64_t m0, int64_t n0) { \
        tile_vnni(g, m0, n0, MR, NV, AS);                                                    \
    }
#define QG_TILES(AS) \
    QG_TILE(4, 1, AS) QG_TILE(8, 1, AS) QG_TILE(16, 1, AS) QG_TILE(4, 2, AS) QG_TILE(8, 2, AS) QG_TILE(4, 3, AS) \
    QG_TILE(4, 4, AS)
QG_TILES(0)
QG_TILES(1)
#undef QG_TILES
#undef QG_TILE

typedef void (*tile_fn)(const Gemm*, int64_t, int64_t);
/* [A int8][vectors - 1][rows: 4, 8, 16] (NULL: not made; fewer rows then) */
static const tile_fn vnni_tiles[2][4][3] = {
    {{tile_vnni_4_1_0, tile_vnni_8_1_0, tile_vnni_16_1_0}, {tile_vnni_4_2_0, tile_vnni_8_2_0, NULL},
     {tile_vnni_4_3_0, NULL, NULL}, {tile_vnni_4_4_0, NULL, NULL}},
    {{tile_vnni_4_1_1, tile_vnni_8_1_1, tile_vnni_16_1_1}, {tile_vnni_4_2_1, tile_vnni_8_2_1, NULL},
     {tile_vnni_4_3_1, NULL, NULL}, {tile_vnni_4_4_1, NULL, NULL}},
};

/* AVX2, exact: the bytes widened to int16 and multiplied in pairs by vpmaddwd (|a b| <= 32640, a pair's
 * sum fits int32), never vpmaddubsw, whose int16 pair sums saturate. Tiles of 1 or 2 rows by 16 columns
 * (8 accumulators: more spill out of AVX2's 16 registers). Where several tiles of rows read a group of 16
 * columns, B's group is widened once, into `wb` ([Kq][16][4] int16), for all of them: widened in every
 * tile, an 8-bit conv or product ran 1.5-2x longer (AMD EPYC, Zen 3). */
#define QG_AVX2 __attribute__((target("avx2")))
#define QG_AVX2_COLS 16
#define QG_AVX2_ROWS 2

/* 16 bytes of packed B (4 columns x 4 k) as int16: uint8 where A is int8, else int8. */
static inline __attribute__((always_inline)) QG_AVX2 __m256i widen16_avx2(const uint8_t* p, const int a_signed) {
    const __m128i v = _mm_loadu_si128((const __m128i*)p);
    return a_signed ? _mm256_cvtepu8_epi16(v) : _mm256_cvtepi8_epi16(v);
}

static QG_AVX2 void widen_avx2(const Gemm* g, int64_t n0, int16_t* restrict wb) {
    const uint8_t* b = g->B + n0 / 16 * g->bg;
    for (int64_t q = 0; q < g->Kq; ++q, b += g->bq, wb += QG_AVX2_COLS * 4)
        for (int j = 0; j < QG_AVX2_COLS * 4; j += 16)
            _mm256_store_si256((__m256i*)(wb + j), widen16_avx2(b + j, (int)g->a_signed));
}

/* The corrections and the output of 8 columns of row m from n (all below N), as store1 does each. */
static inline __attribute__((always_inline)) QG_AVX2 void store8_avx2(const Gemm* g, int64_t m, int64_t n, __m256i c) {
    if (g->rowc) c = _mm256_add_epi32(c, _mm256_set1_epi32(g->rowc[m]));
    if (g->colc) c = _mm256_add_epi32(c, _mm256_loadu_si256((const __m256i*)(g->colc + n)));
    if (g->P)
        c = _mm256_sub_epi32(c, _mm256_mullo_epi32(_mm256_set1_epi32(g->P[m]),
                                                   _mm256_loadu_si256((const __m256i*)(g->Q + n))));
    if (!g->out8) {
        _mm256_storeu_si256((__m256i*)((int32_t*)g->Y + m * g->ldy + n), c);
        return;
    }
    __m256 f = _mm256_cvtepi32_ps(c);
    if (g->out8 == 2) {
        f = _mm256_mul_ps(f, _mm256_loadu_ps(g->mcol + n));
        if (g->bias) f = _mm256_add_ps(f, _mm256_loadu_ps(g->bias + n));
        _mm256_storeu_ps((float*)g->Y + m * g->ldy + n, f);
        return;
    }
    f = _mm256_mul_ps(f, g->mrow ? _mm256_set1_ps(g->mrow[m]) : _mm256_loadu_ps(g->mcol + n));
    f = _mm256_add_ps(_mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), _mm256_set1_ps(g->zy));
    f = _mm256_max_ps(f, _mm256_set1_ps(g->y_signed ? -128.0f : 0.0f));  /* max(NaN, lo) is lo: the second operand */
    f = _mm256_min_ps(f, _mm256_set1_ps(g->y_signed ? 127.0f : 255.0f));
    const __m256i i = _mm256_cvtps_epi32(f);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));  /* exact */
    _mm_storel_epi64((__m128i*)((uint8_t*)g->Y + m * g->ldy + n), g->y_signed ? _mm_packs_epi16(w, w) : _mm_packus_epi16(w, w));
}

/* Rows [m0, m0 + R) by the QG_AVX2_COLS columns from n0 that `wb` holds widened. */
static inline __attribute__((always_inline)) QG_AVX2 void tile_avx2(const Gemm* g, const int16_t* wb, int64_t m0,
                                                                    int64_t n0, const int AS, const int R,
                                                                    const int WIDE) {
    const uint8_t* b = g->B + n0 / 16 * g->bg;  /* WIDE 0: B widened here, in the tile (a product of one tile of rows) */
    enum { V = QG_AVX2_COLS / 4 };  /* vectors of 4 columns x 4 k */
    const uint8_t* a[4];
    for (int r = 0; r < R; ++r) a[r] = g->A + (m0 + r) * g->lda;
    __m256i acc[4][V];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_si256();
    for (int64_t q = 0; q < g->Kq; ++q, wb += WIDE ? QG_AVX2_COLS * 4 : 0, b += g->bq) {
        __m256i bv[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v)
            bv[v] = WIDE ? _mm256_load_si256((const __m256i*)(wb + 16 * v)) : widen16_avx2(b + 16 * v, AS);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            int32_t v4;
            memcpy(&v4, a[r] + 4 * q, 4);
            const __m128i a4 = AS ? _mm_cvtepi8_epi16(_mm_cvtsi32_si128(v4)) : _mm_cvtepu8_epi16(_mm_cvtsi32_si128(v4));
            const __m256i av = _mm256_broadcastq_epi64(a4);  /* the row's 4 k as int16, 4 times */
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v)
                acc[r][v] = _mm256_add_epi32(acc[r][v], _mm256_madd_epi16(bv[v], av));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < V; v += 2) {
            const int64_t m = m0 + r, n = n0 + 4 * v;
            /* lanes hold pair sums: (c0, c0, c1, c1 | c2, c2, c3, c3), (c4.. | c6..) -> c0..c7 */
            const __m256i c = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][v], acc[r][v + 1]), 0xD8);
            if (n + 8 <= g->N) {
                store8_avx2(g, m, n, c);
                continue;
            }
            uint32_t cs[8];
            _mm256_storeu_si256((__m256i*)cs, c);
            for (int i = 0; i < 8 && n + i < g->N; ++i) store1(g, m, n + i, cs[i]);
        }
}

#define QG_TILE(AS, R, WIDE)                                                                             \
    static QG_AVX2 void tile_avx2_##AS##_##R##_##WIDE(const Gemm* g, const int16_t* wb, int64_t m0, int64_t n0) { \
        tile_avx2(g, wb, m0, n0, AS, R, WIDE);                                                           \
    }
QG_TILE(0, 1, 0) QG_TILE(0, 2, 0) QG_TILE(1, 1, 0) QG_TILE(1, 2, 0)
QG_TILE(0, 1, 1) QG_TILE(0, 2, 1) QG_TILE(1, 1, 1) QG_TILE(1, 2, 1)
#undef QG_TILE
/* [B widened once per group][A int8][rows - 1]: a last tile of one row computes only it */
typedef void (*avx2_tile_fn)(const Gemm*, const int16_t*, int64_t, int64_t);
static const avx2_tile_fn avx2_tiles[2][2][QG_AVX2_ROWS] = {
    {{tile_avx2_0_1_0, tile_avx2_0_2_0}, {tile_avx2_1_1_0, tile_avx2_1_2_0}},
    {{tile_avx2_0_1_1, tile_avx2_0_2_1}, {tile_avx2_1_1_1, tile_avx2_1_2_1}}};

static int has_avx2(void) {
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2");
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}

static int has_vnni(void) {
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vnni");
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}
#else
static int has_vnni(void) { return 0; }
static int has_avx2(void) { return 0; }
#endif

/* Column blocks of 64 [b0, b1) of the product, every row. */
static void gemm_blocks(const Gemm* g, int64_t b0, int64_t b1) {
#ifdef QG_X86
    if (g->simd >= 2 && has_vnni()) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t n0 = b * 64, left = g->N - n0;
            const int nv = left >= 64 ? 4 : (int)((left + 15) / 16);
            int64_t m0 = 0;
            for (int size = 2; size >= 0; --size) {  /* 16, 8, then 4 rows a tile */
                const tile_fn fn = vnni_tiles[g->a_signed ? 1 : 0][nv - 1][size];
                const int64_t mr = (int64_t)4 << size;
                if (!fn) continue;
                for (; g->M - m0 >= mr || (size == 0 && m0 < g->M); m0 += mr) fn(g, m0, n0);
            }
        }
        return;
    }
    if (g->simd >= 1 && has_avx2()) {
        /* B widened once per group of columns when several tiles of rows read it (64-byte aligned: a
         * vector load across two cache lines costs more; unaligned, one kernel's times had varied 2x
         * from process to process); else in the tile */
        const int wide = g->M > QG_AVX2_ROWS;
        int16_t* wb = wide ? aligned_alloc(64, (size_t)(g->Kq * QG_AVX2_COLS * 4) * sizeof(int16_t)) : NULL;
        if (wb || !wide) {  /* (out of memory: the portable loop below) */
            const avx2_tile_fn* fn = avx2_tiles[wide][g->a_signed ? 1 : 0];
            for (int64_t n0 = b0 * 64; n0 < b1 * 64 && n0 < g->N; n0 += QG_AVX2_COLS) {
                if (wide) widen_avx2(g, n0, wb);
                for (int64_t m0 = 0; m0 < g->M; m0 += QG_AVX2_ROWS)
                    fn[(g->M - m0 < QG_AVX2_ROWS ? g->M - m0 : QG_AVX2_ROWS) - 1](g, wb, m0, n0);
            }
            free(wb);
            return;
        }
    }
#endif
    for (int64_t b = b0; b < b1; ++b) {
        const int64_t n0 = b * 64, n1 = n0 + 64 < g->N ? n0 + 64 : g->N;
        for (int64_t m = 0; m < g->M; ++m) tile_c(g, m, n0, n1);
    }
}

typedef struct {
    const Gemm* g;
    int64_t row_parts;  /* each column part's rows split in this many (aligned to 16, the largest tile) */
} GemmSplit;

static void gemm_part(void* ctx, int64_t part, int64_t parts) {
    const GemmSplit* s = ctx;
    const Gemm* g = s->g;
    int64_t b0, b1, m0, m1;
    pool_range((g->N + 63) / 64, 1, part / s->row_parts, parts / s->row_parts, &b0, &b1);
    pool_range(g->M, 16, part % s->row_parts, s->row_parts, &m0, &m1);
    if (m0 == 0 && m1 == g->M) {
        gemm_blocks(g, b0, b1);
        return;
    }
    if (m0 == m1) return;
    Gemm rows = *g;  /* rows [m0, m1): A's, the per-row corrections and multipliers, Y's */
    rows.A += m0 * g->lda;
    rows.M = m1 - m0;
    if (g->rowc) rows.rowc += m0;
    if (g->P) rows.P += m0;
    if (g->mrow) rows.mrow += m0;
    rows.Y = (uint8_t*)g->Y + m0 * g->ldy * (g->out8 == 1 ? 1 : 4);
    gemm_blocks(&rows, b0, b1);
}

/* The product split across the pool's threads from POOL_MIN_WORK multiply-adds a part: by blocks of
 * 64 columns, and where those are too few to give each thread two parts (a conv of a small map, a
 * product of a few columns), each block's rows too. */
static void gemm_run(Gemm* g) {
    const int64_t blocks = (g->N + 63) / 64, per_block = 64 * 4 * g->Kq * g->M + 1;
    const int64_t parts = pool_parts(blocks, (POOL_MIN_WORK + per_block - 1) / per_block);
    const int64_t threads = pool_get_threads(), row_tiles = (g->M + 15) / 16;
    GemmSplit s = {g, 1};
    if (threads > 1 && parts < 2 * threads && row_tiles > 1) {
        const int64_t want = (2 * threads + parts - 1) / parts, worth = per_block * blocks / parts / (POOL_MIN_WORK / 4);
        s.row_parts = want < row_tiles ? want : row_tiles;
        if (s.row_parts > worth) s.row_parts = worth > 1 ? worth : 1;
    }
    if (parts * s.row_parts <= 1)
        gemm_blocks(g, 0, blocks);
    else
        pool_run(gemm_part, &s, parts * s.row_parts);
}

/* -- QLinearConv --------------------------------------------------------------------------------- */

/* A conv's scratch: kept per thread and reused (a fresh large block per call costs its page faults,
 * more than the conv itself on small images), freed when the thread ends; blocks over SCRATCH_KEEP
 * bytes are allocated and freed per call. */
#define SCRATCH_KEEP ((size_t)4 << 20)
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_keyed;

static void scratch_init(void) { scratch_keyed = pthread_key_create(&scratch_key, free) == 0; }

static uint8_t* scratch_get(size_t size) {
    pthread_once(&scratch_once, scratch_init);
    if (size > SCRATCH_KEEP || !scratch_keyed) return malloc(size);
    size_t* held = pthread_getspecific(scratch_key);  /* [size, then the block] */
    if (!held || held[0] < size) {
        free(held);
        held = malloc(sizeof(size_t) + size);
        if (held) held[0] = size;
        pthread_setspecific(scratch_key, held);
        if (!held) return NULL;
    }
    return (uint8_t*)(held + 1);
}

static void scratch_put(uint8_t* p, size_t size) {
    if (size > SCRATCH_KEEP || !scratch_keyed) free(p);
}

/* Parameter array of qconv_u8 (int64 each; pointers as addresses). */
enum {
    CV_N, CV_C, CV_H, CV_W, CV_M, CV_KH, CV_KW, CV_OH, CV_OW, CV_SH, CV_SW, CV_PH, CV_PW, CV_DH, CV_DW, CV_G,
    CV_XSIGNED, CV_ZX, CV_YSIGNED, CV_ZY, CV_SIMD, CV_WPACK, CV_ROWC, CV_ZW, CV_MULT, CV_WPACKT, CV_MP, CV_OUT8,
    CV_WSUM, CV_COUNT
};

/* A conv reads its input through "phase planes": per input channel and per phase (py, px) of the
 * strides, plane[i][j] = the padded input at row i sh + py, column j sw + px (the zero point where
 * that is padding), Hph x Wph cells with Wph = OW + the widest tap offset. Tap (kh, kw) of output
 * cell (oy, ox) is then cell (oy + a, ox + b) of one plane (a = kh dh / sh, b = kw dw / sw): over
 * the output computed Wph cells wide (the cells past OW are dropped), each tap's im2col row is one
 * contiguous run, OH Wph long. */
typedef struct {
    int64_t sh, sw, Hph, Wph, plane;  /* plane: bytes per plane, with room for the runs' overhang */
} Phases;

static void phases_build(const int64_t* p, const uint8_t* x, int64_t Cg, const Phases* f, uint8_t zx, uint8_t* out) {
    const int64_t H = p[CV_H], W = p[CV_W], ph = p[CV_PH], pw = p[CV_PW], sh = f->sh, sw = f->sw;
    const int64_t Hph = f->Hph, Wph = f->Wph;
    const uint8_t flip = p[CV_XSIGNED] ? 0x80 : 0;
    for (int64_t c = 0; c < Cg; ++c)
        for (int64_t py = 0; py < sh; ++py)
            for (int64_t px = 0; px < sw; ++px) {
                uint8_t* plane = out + ((c * sh + py) * sw + px) * f->plane;
                /* columns j with 0 <= j sw + px - pw < W: [lo, hi) */
                const int64_t off = px - pw;
                int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
                int64_t hi = W - off > 0 ? (W - off + sw - 1) / sw : 0;
                if (hi > Wph) hi = Wph;
                if (lo > hi) lo = hi;
                for (int64_t i = 0; i < Hph; ++i) {
                    uint8_t* restrict d = plane + i * Wph;
                    const int64_t iy = i * sh + py - ph;
                    if (iy < 0 || iy >= H) {
                        memset(d, zx, (size_t)Wph);
                        continue;
                    }
                    const uint8_t* restrict s = x + (c * H + iy) * W;
                    for (int64_t j = 0; j < lo; ++j) d[j] = zx;
                    if (sw == 1) {
                        for (int64_t j = lo; j < hi; ++j) d[j] = s[j + off] ^ flip;
                    } else if (sw == 2) {
                        int64_t j = lo;
#if defined(__SSE2__)
                        const __m128i even = _mm_set1_epi16(0xFF), f8 = _mm_set1_epi8((char)flip);
                        for (; j + 16 <= hi && 2 * j + off + 32 <= W; j += 16) {  /* the even bytes of 32 */
                            const __m128i v0 = _mm_loadu_si128((const __m128i*)(s + 2 * j + off));
                            const __m128i v1 = _mm_loadu_si128((const __m128i*)(s + 2 * j + off + 16));
                            const __m128i e = _mm_packus_epi16(_mm_and_si128(v0, even), _mm_and_si128(v1, even));
                            _mm_storeu_si128((__m128i*)(d + j), _mm_xor_si128(e, f8));
                        }
#endif
                        for (; j < hi; ++j) d[j] = s[2 * j + off] ^ flip;
                    } else {
                        for (int64_t j = lo; j < hi; ++j) d[j] = s[j * sw + off] ^ flip;
                    }
                    for (int64_t j = hi; j < Wph; ++j) d[j] = zx;
                }
                memset(plane + Hph * Wph, zx, (size_t)(f->plane - Hph * Wph));
            }
}

/* o[4 i + j] = r_j[i] for i < n. */
static void interleave4(uint8_t* restrict o, const uint8_t* r0, const uint8_t* r1, const uint8_t* r2,
                        const uint8_t* r3, int64_t n) {
    int64_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i*)(r0 + i)), b = _mm_loadu_si128((const __m128i*)(r1 + i));
        const __m128i c = _mm_loadu_si128((const __m128i*)(r2 + i)), d = _mm_loadu_si128((const __m128i*)(r3 + i));
        const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
        _mm_storeu_si128((__m128i*)(o + 4 * i), _mm_unpacklo_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i*)(o + 4 * i + 16), _mm_unpackhi_epi16(ab0, cd0));
        _mm_storeu_si128((__m128i*)(o + 4 * i + 32), _mm_unpacklo_epi16(ab1, cd1));
        _mm_storeu_si128((__m128i*)(o + 4 * i + 48), _mm_unpackhi_epi16(ab1, cd1));
    }
#endif
    for (; i < n; ++i) {
        o[4 * i] = r0[i];
        o[4 * i + 1] = r1[i];
        o[4 * i + 2] = r2[i];
        o[4 * i + 3] = r3[i];
    }
}

/* Each tap's (kh, kw) offset in a channel's phase planes: its plane, and its run's start there. */
static void im2col_taps(const int64_t* p, const Phases* f, int64_t* taps) {
    const int64_t KH = p[CV_KH], KW = p[CV_KW], dh = p[CV_DH], dw = p[CV_DW];
    for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t y = kh * dh, x = kw * dw;
            taps[kh * KW + kw] = (y % f->sh * f->sw + x % f->sw) * f->plane + y / f->sh * f->Wph + x / f->sw;
        }
}

/* The packed im2col ([Kq][Lp][4], L = OH Wph columns) of a channel group's phase planes; taps: each
 * tap's (kh, kw) run offset in a channel's planes (scratch of KH KW). */
static void im2col_packed(const int64_t* p, const Phases* f, const uint8_t* planes, int64_t Cg, uint8_t* restrict Bp,
                          int64_t L, int64_t Lp, const uint8_t* zeros, int64_t* taps) {
    const int64_t T = p[CV_KH] * p[CV_KW], Kq = (Cg * T + 3) / 4, channel = f->sh * f->sw * f->plane;
    im2col_taps(p, f, taps);
    int64_t c = 0, t = 0;  /* tap k = (c, t), counted up without divisions */
    for (int64_t q = 0; q < Kq; ++q) {
        const uint8_t* r[4];
        for (int j = 0; j < 4; ++j) {
            if (c >= Cg) {
                r[j] = zeros;  /* k past K: zero rows (their weights are zero) */
                continue;
            }
            r[j] = planes + c * channel + taps[t];
            if (++t == T) {
                t = 0;
                ++c;
            }
        }
        uint8_t* d = Bp + q * Lp * 4;
        interleave4(d, r[0], r[1], r[2], r[3], L);
        memset(d + L * 4, 0, (size_t)((Lp - L) * 4));
    }
}

/* Whether to compute the conv with the output's pixels as rows and its channels as columns (the
 * weight packed as B: CV_WPACKT, [Kq][Mp][4] per group): for small maps, whose pixels fill few of the
 * 16 lanes a column vector holds, where there are more channels than pixels. */
static int pixel_rows(int64_t pixels, int64_t columns, int64_t Mg) {
    const int64_t cells = (Mg + 3) / 4 * 4 * ((columns + 15) / 16 * 16);
    const int64_t cells_t = (pixels + 3) / 4 * 4 * ((Mg + 15) / 16 * 16);
    return 2 * cells_t < cells;
}

/* The pixels-as-rows product: rows[l] = the taps of output pixel l (Kgp bytes, zero-padded), their
 * sums when the weight has zero points, then tmp[l][m], written to y transposed (channels first). */
static void conv_pixel_rows(const int64_t* p, const Phases* f, const uint8_t* planes, int64_t Cg, int64_t Mg,
                            int64_t Kgp, int64_t g, const int64_t* taps, const int32_t* rowc, uint8_t* rows,
                            int32_t* sums, uint8_t* tmp, uint8_t* yg) {
    const int64_t OH = p[CV_OH], OW = p[CV_OW], T = p[CV_KH] * p[CV_KW], channel = f->sh * f->sw * f->plane;
    const int64_t L = OH * OW;
    const int32_t* zw = (const int32_t*)(intptr_t)p[CV_ZW];
    for (int64_t l = 0; l < L; ++l) {
        const uint8_t* at = planes + l / OW * f->Wph + l % OW;
        uint8_t* restrict r = rows + l * Kgp;
        int64_t k = 0;
        for (int64_t c = 0; c < Cg; ++c, at += channel)
            for (int64_t t = 0; t < T; ++t) r[k++] = at[taps[t]];
        for (; k < Kgp; ++k) r[k] = 0;
        if (zw) {
            uint32_t sum = 0;
            for (int64_t i = 0; i < Kgp; ++i) sum += r[i];
            sums[l] = (int32_t)sum;
        }
    }
    const int64_t Mp = p[CV_MP];
    const int8_t* wpackt = (const int8_t*)(intptr_t)p[CV_WPACKT] + g * (Kgp / 4) * Mp * 4;
    const float* mult = (const float*)(intptr_t)p[CV_MULT];
    Gemm gm = {rows, (const uint8_t*)wpackt, Kgp, Mp * 4, 64, L, Mg, Kgp / 4, 0, NULL, rowc + g * Mg, zw ? sums : NULL,
               zw ? zw + g * Mg : NULL, p[CV_OUT8], p[CV_YSIGNED], NULL, mult ? mult + g * Mg : NULL, NULL,
               (float)p[CV_ZY], tmp, Mg, p[CV_SIMD]};
    gemm_run(&gm);
    if (p[CV_OUT8]) {
        for (int64_t m = 0; m < Mg; ++m)
            for (int64_t l = 0; l < L; ++l) yg[m * L + l] = tmp[l * Mg + m];
    } else {
        const int32_t* t32 = (const int32_t*)tmp;
        int32_t* y32 = (int32_t*)yg;
        for (int64_t m = 0; m < Mg; ++m)
            for (int64_t l = 0; l < L; ++l) y32[m * L + l] = t32[l * Mg + m];
    }
}

/* The conv of p (qconv_u8's) with the input's zero point zx (moved to uint8) and the per-channel
 * constant rowc (int32). */
static int conv_run(const int64_t* p, const void* x, uint8_t zx, const int32_t* rowc, void* y) {
    const int64_t N = p[CV_N], C = p[CV_C], M = p[CV_M], G = p[CV_G], OH = p[CV_OH], OW = p[CV_OW];
    const int64_t Cg = C / G, Mg = M / G, Kg = Cg * p[CV_KH] * p[CV_KW], Kgp = (Kg + 3) / 4 * 4;
    const int64_t HW = p[CV_H] * p[CV_W], size = p[CV_OUT8] ? 1 : 4;  /* bytes per output cell */
    Phases f;
    f.sh = p[CV_SH];
    f.sw = p[CV_SW];
    const int64_t a_max = (p[CV_KH] - 1) * p[CV_DH] / f.sh, b_max = (p[CV_KW] - 1) * p[CV_DW] / f.sw;
    f.Hph = OH + a_max;
    f.Wph = OW + b_max;
    f.plane = f.Hph * f.Wph + b_max + 16;
    const int64_t L = OH * f.Wph, Lp = (L + 15) / 16 * 16, compact = f.Wph != OW;
    const int by_pixel = p[CV_WPACKT] && pixel_rows(OH * OW, L, Mg);
    const int8_t* wpack = (const int8_t*)(intptr_t)p[CV_WPACK];
    const int32_t* zw = (const int32_t*)(intptr_t)p[CV_ZW];
    const float* mult = (const float*)(intptr_t)p[CV_MULT];
    const size_t planes_size = (size_t)(Cg * f.sh * f.sw * f.plane);
    /* B (or the pixels' rows), the output before compaction (or transposition), the column sums; the
     * int32 parts first, aligned */
    const size_t bp_size = (size_t)(Kgp * Lp), out_size = compact || by_pixel ? (size_t)(Mg * L * size) : 0;
    const size_t sums = zw ? (size_t)(4 * Lp) : 0;
    const size_t taps_size = (size_t)(8 * p[CV_KH] * p[CV_KW]);
    const size_t total = taps_size + sums + out_size + bp_size + planes_size + (size_t)L + 64;
    uint8_t* buf = scratch_get(total);
    if (!buf) return 1;
    int64_t* taps = (int64_t*)buf;
    int32_t* colsum = (int32_t*)(buf + taps_size);
    uint8_t *out = buf + taps_size + sums, *Bp = out + out_size, *planes = Bp + bp_size, *zeros = planes + planes_size;
    memset(zeros, 0, (size_t)L);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t g = 0; g < G; ++g) {
            phases_build(p, (const uint8_t*)x + (n * C + g * Cg) * HW, Cg, &f, zx, planes);
            uint8_t* yg = (uint8_t*)y + (n * M + g * Mg) * OH * OW * size;
            if (by_pixel) {
                if (n == 0 && g == 0) im2col_taps(p, &f, taps);
                conv_pixel_rows(p, &f, planes, Cg, Mg, Kgp, g, taps, rowc, Bp, colsum, out, yg);
                continue;
            }
            im2col_packed(p, &f, planes, Cg, Bp, L, Lp, zeros, taps);
            if (zw) {
                for (int64_t l = 0; l < Lp; ++l) colsum[l] = 0;
                for (int64_t q = 0; q < Kgp / 4; ++q) {
                    const uint8_t* restrict b = Bp + q * Lp * 4;
                    for (int64_t l = 0; l < Lp; ++l) colsum[l] += b[4 * l] + b[4 * l + 1] + b[4 * l + 2] + b[4 * l + 3];
                }
            }
            Gemm gm = {(const uint8_t*)(wpack + g * Mg * Kgp), Bp, Kgp, Lp * 4, 64, Mg, L, Kgp / 4, 1, rowc + g * Mg, NULL,
                       zw ? zw + g * Mg : NULL, zw ? colsum : NULL, p[CV_OUT8], p[CV_YSIGNED],
                       mult ? mult + g * Mg : NULL, NULL, NULL, (float)p[CV_ZY], compact ? out : yg, L, p[CV_SIMD]};
            gemm_run(&gm);
            if (compact)  /* the output's rows without the cells past OW */
                for (int64_t m = 0; m < Mg; ++m)
                    for (int64_t oy = 0; oy < OH; ++oy)
                        memcpy(yg + (m * OH + oy) * OW * size, out + (m * L + oy * f.Wph) * size, (size_t)(OW * size));
        }
    scratch_put(buf, total);
    return 0;
}

/* QLinearConv of NCHW 8-bit x to NCHW 8-bit y, every parameter in p (CV_*): sizes and attributes; the
 * input's signedness and zero point (moved to uint8: +128 for int8); the output's signedness and
 * zero point; whether to use SIMD; the weight as int8 rows of Kgp bytes per output channel (Kgp:
 * Cg KH KW rounded up to 4, zero-padded; uint8 weights moved by -128), the per-channel constant
 * (bias - zx sum(w) + K zx zw, wrapped to int32), the weight zero points (int32, moved alike; 0: all
 * zero) and the float32 multipliers x_scale * w_scale / y_scale; the weight packed as B for small
 * maps (0: none) with its rows' stride; CV_OUT8 1. */
int qconv_u8(const int64_t* p, const void* x, void* y) {
    return conv_run(p, x, (uint8_t)p[CV_ZX], (const int32_t*)(intptr_t)p[CV_ROWC], y);
}

/* ConvInteger: as qconv_u8 (CV_OUT8 0, no multipliers), out int32, the input's zero point read from zx
 * (x's type; NULL: CV_ZX's); the per-channel constant - zx sum(w) + K zx zw made here from the weight's
 * row sums CV_WSUM (int32, moved). */
int qconv_i32(const int64_t* p, const void* x, const void* zx, int32_t* y) {
    const int64_t M = p[CV_M], K = p[CV_C] / p[CV_G] * p[CV_KH] * p[CV_KW];
    uint32_t z = (uint32_t)p[CV_ZX];
    if (zx) z = p[CV_XSIGNED] ? (uint32_t)(*(const int8_t*)zx + 128) : *(const uint8_t*)zx;
    const int32_t *wsum = (const int32_t*)(intptr_t)p[CV_WSUM], *zw = (const int32_t*)(intptr_t)p[CV_ZW];
    int32_t* rowc = malloc((size_t)(4 * M));
    if (!rowc) return 1;
    for (int64_t m = 0; m < M; ++m)
        rowc[m] = (int32_t)(z * ((uint32_t)K * (zw ? (uint32_t)zw[m] : 0u) - (uint32_t)wsum[m]));
    const int status = conv_run(p, x, (uint8_t)z, rowc, y);
    free(rowc);
    return status;
}

/* -- MatMulInteger / QLinearMatMul by a packed weight ------------------------------------------------ */

enum {
    MM_M, MM_K, MM_N, MM_ASIGNED, MM_OUT, MM_YSIGNED, MM_ZY, MM_SIMD, MM_BPACK, MM_T, MM_ZB, MM_MULT, MM_BIAS,
    MM_C, MM_COUNT
};

static int matmul(const int64_t* p, const void* a, const void* za, const float* a_scale, void* y) {
    const int64_t M = p[MM_M], K = p[MM_K], N = p[MM_N], Kp = (K + 3) / 4 * 4;
    const int64_t a_signed = p[MM_ASIGNED], out = p[MM_OUT];
    const int32_t* T = (const int32_t*)(intptr_t)p[MM_T];
    const int32_t* zb = (const int32_t*)(intptr_t)p[MM_ZB];
    const float* mult = (const float*)(intptr_t)p[MM_MULT];
    const int copy = a_signed || Kp != K;
    uint8_t* buf = malloc((size_t)(4 * N + 4 * M + (out == 2 ? 4 * N : 0) + (copy ? M * Kp : 0)) + 8);
    if (!buf) return 1;
    int32_t *colc = (int32_t*)buf, *asum = colc + N;
    float* scale = (float*)(asum + M);
    const uint8_t* A = a;
    if (copy) {
        uint8_t* c = (uint8_t*)(scale + (out == 2 ? N : 0));
        const uint8_t flip = a_signed ? 0x80 : 0;
        for (int64_t m = 0; m < M; ++m) {
            const uint8_t* restrict s = (const uint8_t*)a + m * K;
            uint8_t* restrict d = c + m * Kp;
            for (int64_t k = 0; k < K; ++k) d[k] = s[k] ^ flip;
            for (int64_t k = K; k < Kp; ++k) d[k] = 0;
        }
        A = c;
    }
    const uint32_t z = za ? (a_signed ? (uint32_t)((int32_t)*(const int8_t*)za + 128) : *(const uint8_t*)za)
                          : (a_signed ? 128u : 0u);
    const int32_t* cb = (const int32_t*)(intptr_t)p[MM_C];
    for (int64_t n = 0; n < N; ++n) colc[n] = (int32_t)(z * (uint32_t)T[n] + (cb ? (uint32_t)cb[n] : 0u));
    if (zb)
        for (int64_t m = 0; m < M; ++m) {
            const uint8_t* restrict r = A + m * Kp;
            uint32_t s = 0;
            for (int64_t k = 0; k < Kp; ++k) s += r[k];
            asum[m] = (int32_t)s;
        }
    if (out == 2) {  /* a_scale * b_scale in float32, as the NumPy code */
        for (int64_t n = 0; n < N; ++n) scale[n] = a_scale[0] * mult[n];
        mult = scale;
    }
    Gemm gm = {A, (const uint8_t*)(intptr_t)p[MM_BPACK], Kp, 64, Kp * 16, M, N, Kp / 4, 0, NULL, colc,
               zb ? asum : NULL, zb, out, p[MM_YSIGNED], NULL, mult, (const float*)(intptr_t)p[MM_BIAS],
               (float)p[MM_ZY], y, N, p[MM_SIMD]};
    gemm_run(&gm);
    free(buf);
    return 0;
}

/* Y = (A - za) (B - zb), A: M x K 8-bit rows (int8 if a_signed), za: A's one zero point (a pointer to
 * it, of A's type; NULL: 0), B a weight packed as int8, group-major ([Np/16][K/4][16][4], Np = N rounded
 * up to 16; uint8 weights moved by -128)
 * with T[n] = K zb[n] - sum_k B[k, n] (int32, moved alike) and zb (int32 per column, moved alike;
 * 0: all zero), plus C[n] (MM_C, int32; 0: none: QGemm's C). Out (MM_OUT): int32 (0), else
 * requantised to 8 bits with mult[n] and zy (1). */
int qgemm_u8(const int64_t* p, const void* a, const void* za, void* y) { return matmul(p, a, za, NULL, y); }

/* As qgemm_u8, out float32 (MM_OUT 2, MatMulIntegerToFloat): y = float(the product) (a_scale[0]
 * mult[n]) + bias[n] (MM_BIAS; 0: none), in float32 as the NumPy code. */
int qgemm_f32(const int64_t* p, const void* a, const void* za, const float* a_scale, float* y) {
    return matmul(p, a, za, a_scale, y);
}

int qgemm_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }

typedef int (*dynamic_quantize_fn)(const float* x, int64_t n, float* out_scale, uint8_t* out_zp, uint8_t* y);

/* DynamicQuantizeMatMul as a program step: q = {p (qgemm_f32's parameters), A's size, quantize.c's
 * dynamic_quantize_u8 (an address)}: A quantized to 8 bits into scratch, then qgemm_f32 with its scale and
 * zero point. A NaN or an infinity in A returns the quantizer's 2 (PROGRAM's rerun: the op's own code). */
int dynamic_quantize_matmul_planned_f32(const int64_t* q, const float* a, const void* unused, float* y) {
    (void)unused;
    const int64_t n = q[1];
    float* scale = malloc(2 * sizeof(float) + (size_t)n);  /* the scale, the zero point, then A's bytes */
    if (!scale) return 1;
    uint8_t *zp = (uint8_t*)(scale + 1), *aq = (uint8_t*)(scale + 2);
    int status = ((dynamic_quantize_fn)(intptr_t)q[2])(a, n, scale, zp, aq);
    if (!status) status = qgemm_f32((const int64_t*)(intptr_t)q[0], aq, zp, scale, y);
    free(scale);
    return status;
}

/* The planned calls of native programs (gpuops/onnx/programs.py): QLinearConv's qconv_u8 with its plan's
 * parameters p, and QGemm's kernels with q = {p, A's zero point, a_scale (float out) or 0}. */
int qconv_planned_u8(const int64_t* p, const void* x, const void* unused, void* y) {
    (void)unused;
    return qconv_u8(p, x, y);
}

int qgemm_planned_8(const int64_t* q, const void* a, const void* unused, void* y) {
    (void)unused;
    const int64_t* p = (const int64_t*)(intptr_t)q[0];
    const void* za = (const void*)(intptr_t)q[1];
    if (q[2]) return qgemm_f32(p, a, za, (const float*)(intptr_t)q[2], y);
    return qgemm_u8(p, a, za, y);
}
