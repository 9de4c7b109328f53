/* A conv's GEMM with its epilogue: Y = clamp(A @ X + bias) in one pass over Y, float32, where A (M x K)
 * is the conv's weights and X (K x L) its columns (the input itself for a 1x1 conv). A comes packed:
 * MR rows interleaved per block, A_p[(i * K + k) * MR + r] = A[i * MR + r][k], rows past M zero. X is
 * read in place, a strip of NR columns at a time: the strip stays in L1 while every row block of A
 * runs over it, a tile of MR x NR sums held in registers, and each tile is stored once, biased and
 * clamped (no second pass over Y). Returns 0, or 1 when out of memory. */
#include <stdlib.h>
#include "common.h"

/* Sums as fused multiply-adds (one rounding per step, as BLAS kernels do): ISO C mode (-std=c11)
 * keeps a * b + c as two operations otherwise, half the throughput. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#if defined(__AVX512F__)
#define MR 8  /* rows per tile: MR * NV vectors of sums (16 of the 32 registers) */
#define NV 2  /* vectors of columns per tile (1 or 2) */
#else
#define MR 6  /* 12 sums on the 16 AVX2 registers (a vector is two of them) */
#define NV 1
#endif
#define NR (NV * VL)

/* One rows x (nv * VL) tile (rows <= MR, nv <= NV: constants where inlined): bias + the sums over K of
 * a's rows [0, mr) (lda apart) times x's columns (ldx apart), clamped, stored into the rows [0, mr) of y
 * (ldy apart). */
static inline __attribute__((always_inline)) void tile(int rows, int nv, const float* a, int64_t lda,
                                                       const float* restrict x, int64_t ldx, int64_t K,
                                                       const float* bias, int64_t mr, float* y, int64_t ldy,
                                                       float lo, float hi) {
    const float* restrict ar[MR];  /* the rows past mr repeat row 0: computed, never stored */
    vfloat s0[MR], s1[MR];  /* the sums of the first and (nv == 2) second vector of columns */
    for (int r = 0; r < rows; ++r) {
        ar[r] = a + (r < mr ? r : 0) * lda;
        s0[r] = s1[r] = (vfloat){0} + (bias && r < mr ? bias[r] : 0.0f);
    }
    for (int64_t k = 0; k < K; ++k) {
        __builtin_prefetch(x + k * ldx + 4 * NR);  /* the next strips' rows, for the first row block */
        const vfloat b0 = vload(x + k * ldx), b1 = nv > 1 ? vload(x + k * ldx + VL) : b0;
        for (int r = 0; r < rows; ++r) {
            s0[r] += ar[r][k] * b0;
            if (nv > 1) s1[r] += ar[r][k] * b1;
        }
    }
    for (int r = 0; r < rows && r < mr; ++r) {
        const vfloat c0 = vclamp(s0[r], lo, hi);
        memcpy(y + r * ldy, &c0, sizeof c0);
        if (nv > 1) {
            const vfloat c1 = vclamp(s1[r], lo, hi);
            memcpy(y + r * ldy + VL, &c1, sizeof c1);
        }
    }
}

/* The tiles of the columns [l, l + nv * VL): MR rows at a time, the rest in a tile of MR, MR / 2 or 2
 * rows (at most 3 rows computed in vain). */
static inline __attribute__((always_inline)) void strip(int nv, const float* a, const float* x, int64_t ldx,
                                                        const float* bias, float* y, int64_t ldy, int64_t M,
                                                        int64_t K, int64_t l, float lo, float hi) {
    int64_t i = 0;
    for (; i + MR <= M; i += MR)
        tile(MR, nv, a + i * K, K, x + l, ldx, K, bias ? bias + i : NULL, MR, y + i * ldy + l, ldy, lo, hi);
    const int64_t rest = M - i;
    const float* bi = bias ? bias + i : NULL;
    if (rest > MR / 2)
        tile(MR, nv, a + i * K, K, x + l, ldx, K, bi, rest, y + i * ldy + l, ldy, lo, hi);
    else if (rest > 2)
        tile(MR / 2, nv, a + i * K, K, x + l, ldx, K, bi, rest, y + i * ldy + l, ldy, lo, hi);
    else if (rest > 0)
        tile(2, nv, a + i * K, K, x + l, ldx, K, bi, rest, y + i * ldy + l, ldy, lo, hi);
}

/* y (M rows of L, ldy apart) = clamp(a @ x + bias, lo, hi) (bias may be NULL), x K rows of L, ldx apart. */
static int gemm1(const float* a, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy, int64_t M,
                 int64_t K, int64_t L, float lo, float hi) {
    if (L < VL) {  /* narrower than a vector: through zero-padded copies of x and y */
        float* t = calloc((size_t)(K + M) * VL, sizeof(float));
        if (!t) return 1;
        float* yt = t + K * VL;
        for (int64_t k = 0; k < K; ++k) memcpy(t + k * VL, x + k * ldx, sizeof(float) * L);
        strip(1, a, t, VL, bias, yt, VL, M, K, 0, lo, hi);
        for (int64_t m = 0; m < M; ++m) memcpy(y + m * ldy, yt + m * VL, sizeof(float) * L);
        free(t);
        return 0;
    }
    int64_t l = 0;
    for (; l + NR <= L; l += NR) strip(NV, a, x, ldx, bias, y, ldy, M, K, l, lo, hi);
    /* the rest a vector at a time, the last one moved back to end at L (recomputing a few columns) */
    for (; l < L; l += VL) strip(1, a, x, ldx, bias, y, ldy, M, K, l + VL <= L ? l : L - VL, lo, hi);
    return 0;
}

/* A grouped conv's GEMMs: group g multiplies rows [g M, (g + 1) M) of a (the weights, contiguous, K
 * per row) with rows [g K, (g + 1) K) of x into rows [g M, (g + 1) M) of y, bias[g M...] added. */
int gemm_bias_clamp_f32(const float* a, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy,
                        int64_t groups, int64_t M, int64_t K, int64_t L, float lo, float hi) {
    for (int64_t g = 0; g < groups; ++g)
        if (gemm1(a + g * M * K, x + g * K * ldx, ldx, bias ? bias + g * M : NULL, y + g * M * ldy, ldy, M, K, L, lo,
                  hi))
            return 1;
    return 0;
}
