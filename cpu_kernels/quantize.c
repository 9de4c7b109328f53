/* Exact 8-bit integer GEMM for MatMulInteger and QLinearMatMul: C = (A - za) (B - zb) as int32,
 * wrapping modulo 2**32 (the spec's int32 accumulation; all sums here are unsigned, so wrapping is
 * defined). A is M x K uint8 or int8 with one zero point or one per row; B is a weight, prepared once
 * by the caller (gpuops/ops/quantize.py) as a "pack" of int32:
 *     [0, N)       zb'[n] = zb[n] - 128 for uint8 B, zb[n] for int8 B
 *     [N, 2N)      T[n] = sum_k (B[k, n] - zb[n])  (modulo 2**32)
 *     [2N, ...)    S = B transposed (N x K, row n = column n of B) as int8: B - 128 for uint8 B
 * With U = A as uint8 (A + 128 for int8 A) and za' the zero point moved alike,
 *     sum_k (A - za)(B - zb) = sum_k (U - za')(S - zb') = U.S - zb' sum_k U - za' T,
 * where U.S is a uint8 x int8 dot product (vpdpbusd and the like, where the CPU has them) over
 * contiguous K, computed for 4 columns at once, in int32 over chunks of K short enough not to
 * overflow. Returns 0, or 1 when out of memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#define KCHUNK 32768 /* 32768 * 255 * 128 < 2**31: one chunk's dot product fits int32 */

static inline int32_t dot1(const uint8_t* restrict u, const int8_t* restrict s, int64_t n) {
    int32_t acc = 0;
    for (int64_t k = 0; k < n; ++k) acc += (int32_t)u[k] * (int32_t)s[k];
    return acc;
}

static inline void dot4(const uint8_t* restrict u, const int8_t* restrict s0, const int8_t* restrict s1,
                        const int8_t* restrict s2, const int8_t* restrict s3, int64_t n, uint32_t* out) {
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t k = 0; k < n; ++k) {
        const int32_t x = u[k];
        a0 += x * s0[k];
        a1 += x * s1[k];
        a2 += x * s2[k];
        a3 += x * s3[k];
    }
    out[0] += (uint32_t)a0;
    out[1] += (uint32_t)a1;
    out[2] += (uint32_t)a2;
    out[3] += (uint32_t)a3;
}

/* C (M x N, uint32 bits of the int32 result). za: NULL (zero), or za_step 0 (one) / 1 (per row),
 * of A's type. */
static int product(const void* A, int64_t a_signed, const void* za, int64_t za_step, const int32_t* pack,
                   int64_t M, int64_t K, int64_t N, uint32_t* restrict C) {
    const int32_t* zb = pack;
    const int32_t* T = pack + N;
    const int8_t* S = (const int8_t*)(pack + 2 * N);
    const uint8_t* U = A;
    uint8_t* shifted = NULL;
    if (a_signed) {
        shifted = malloc(M * K > 0 ? (size_t)(M * K) : 1);
        if (!shifted) return 1;
        const uint8_t* a = A;
        for (int64_t i = 0; i < M * K; ++i) shifted[i] = a[i] ^ 0x80;
        U = shifted;
    }
    memset(C, 0, sizeof(uint32_t) * (size_t)(M * N));
    for (int64_t k0 = 0; k0 < K; k0 += KCHUNK) {
        const int64_t nk = K - k0 < KCHUNK ? K - k0 : KCHUNK;
        int64_t n = 0;
        for (; n + 4 <= N; n += 4) {
            const int8_t* s = S + n * K + k0;
            for (int64_t m = 0; m < M; ++m)
                dot4(U + m * K + k0, s, s + K, s + 2 * K, s + 3 * K, nk, C + m * N + n);
        }
        for (; n < N; ++n)
            for (int64_t m = 0; m < M; ++m) C[m * N + n] += (uint32_t)dot1(U + m * K + k0, S + n * K + k0, nk);
    }
    for (int64_t m = 0; m < M; ++m) {
        const uint8_t* u = U + m * K;
        uint32_t usum = 0;
        for (int64_t k = 0; k < K; ++k) usum += u[k];
        int64_t z = 0;
        if (za) z = a_signed ? ((const int8_t*)za)[m * za_step] : ((const uint8_t*)za)[m * za_step];
        const uint32_t zu = (uint32_t)(a_signed ? z + 128 : z);
        uint32_t* restrict c = C + m * N;
        for (int64_t n = 0; n < N; ++n) c[n] -= (uint32_t)zb[n] * usum + zu * (uint32_t)T[n];
    }
    free(shifted);
    return 0;
}

/* MatMulInteger: Y = the int32 product. */
int matmul_integer_u8(const void* A, int64_t a_signed, const void* za, int64_t za_step, const int32_t* pack,
                      int32_t* Y, int64_t M, int64_t K, int64_t N) {
    return product(A, a_signed, za, za_step, pack, M, K, N, (uint32_t*)Y);
}

/* QLinearMatMul: Y = saturate(rint(float(C) * (a_scale * b_scale / y_scale)) + y_zero_point), in
 * float32 as the NumPy code (rint rounds half to even; NaN saturates to the low end). The scales are
 * float32: a_scale one (step 0) or per row (1), b_scale one or per column; y_scale and y_zp one. */
int qlinear_matmul_u8(const void* A, int64_t a_signed, const void* za, int64_t za_step, const int32_t* pack,
                      const float* a_scale, int64_t as_step, const float* b_scale, int64_t bs_step,
                      const float* y_scale, const void* y_zp, int64_t y_signed, void* Y,
                      int64_t M, int64_t K, int64_t N) {
    uint32_t* C = malloc(sizeof(uint32_t) * (size_t)(M * N + N));
    if (!C || product(A, a_signed, za, za_step, pack, M, K, N, C)) {
        free(C);
        return 1;
    }
    float* restrict mult = (float*)(C + M * N);
    const float lo = y_signed ? -128.0f : 0.0f, hi = y_signed ? 127.0f : 255.0f;
    const float zp = y_signed ? (float)*(const int8_t*)y_zp : (float)*(const uint8_t*)y_zp;
    const float ys = *y_scale;
    for (int64_t m = 0; m < M; ++m) {
        const float as = a_scale[m * as_step];
        if (m == 0 || as_step)
            for (int64_t n = 0; n < N; ++n) mult[n] = as * b_scale[n * bs_step] / ys;
        const uint32_t* restrict c = C + m * N;
        if (y_signed) {
            int8_t* restrict y = (int8_t*)Y + m * N;
            for (int64_t n = 0; n < N; ++n)
                y[n] = (int8_t)fminf(fmaxf(rintf((float)(int32_t)c[n] * mult[n]) + zp, lo), hi);
        } else {
            uint8_t* restrict y = (uint8_t*)Y + m * N;
            for (int64_t n = 0; n < N; ++n)
                y[n] = (uint8_t)fminf(fmaxf(rintf((float)(int32_t)c[n] * mult[n]) + zp, lo), hi);
        }
    }
    free(C);
    return 0;
}
