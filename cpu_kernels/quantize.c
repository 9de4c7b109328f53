/* Exact 8-bit integer GEMM for MatMulInteger and QLinearMatMul: C = (A - za) (B - zb) as int32,
 * wrapping modulo 2**32 (the spec's int32 accumulation; all sums here are unsigned, so wrapping is
 * defined). A is M x K uint8 or int8 with one zero point or one per row; B is K x N uint8 or int8
 * with one zero point or one per column. B is a weight, prepared once (pack_weight_8) as a "pack"
 * of int32:
 *     [0, 4)           K, N, whether B is int8, 0
 *     [4, 4 + N)       Bsum[n] = sum_k B[k, n]  (modulo 2**32)
 *     [4 + N, ...)     S = B transposed (N x K: row n is column n of B) as int8: B - 128 for uint8 B
 * With U = A as uint8 (A + 128 for int8 A), za' and zb' the zero points moved alike, and
 * T[n] = sum_k (B[k, n] - zb[n]) = Bsum[n] - K zb[n],
 *     sum_k (A - za)(B - zb) = sum_k (U - za')(S - zb') = U.S - zb' sum_k U - za' T,
 * where U.S is a uint8 x int8 dot product over contiguous K (vpdpbusd and the like, where the CPU
 * has them), 4 columns at a time, in int32 over chunks of K short enough not to overflow.
 * Returns 0, or 1 when out of memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "common.h"
#include "pool_threads.h"

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

#define HEADER 4

/* The pack of B (K x N, int8 if b_signed else uint8) described above, into pack (4 + N + ceil(N K / 4)). */
int pack_weight_8(const uint8_t* B, int64_t b_signed, int64_t K, int64_t N, int32_t* pack) {
    pack[0] = (int32_t)K;
    pack[1] = (int32_t)N;
    pack[2] = (int32_t)b_signed;
    pack[3] = 0;
    uint32_t* restrict sum = (uint32_t*)pack + HEADER;
    int8_t* restrict S = (int8_t*)(pack + HEADER + N);
    const uint8_t flip = b_signed ? 0 : 0x80;
    for (int64_t n = 0; n < N; ++n) sum[n] = 0;
    for (int64_t k = 0; k < K; ++k) {
        const uint8_t* restrict b = B + k * N;
        if (b_signed)
            for (int64_t n = 0; n < N; ++n) sum[n] += (uint32_t)(int32_t)(int8_t)b[n];
        else
            for (int64_t n = 0; n < N; ++n) sum[n] += b[n];
    }
    for (int64_t k0 = 0; k0 < K; k0 += 16)  /* transposed by 16 x 16 tiles */
        for (int64_t n0 = 0; n0 < N; n0 += 16) {
            if (K - k0 >= 16 && N - n0 >= 16) {
                uint8_t t[16][16];
                for (int k = 0; k < 16; ++k)
                    for (int n = 0; n < 16; ++n) t[n][k] = B[(k0 + k) * N + n0 + n] ^ flip;
                for (int n = 0; n < 16; ++n)
                    for (int k = 0; k < 16; ++k) S[(n0 + n) * K + k0 + k] = (int8_t)t[n][k];
            } else {
                for (int64_t k = k0; k < K && k < k0 + 16; ++k)
                    for (int64_t n = n0; n < N && n < n0 + 16; ++n) S[n * K + k] = (int8_t)(B[k * N + n] ^ flip);
            }
        }
    return 0;
}

typedef struct {
    const int8_t* S;
    const uint8_t* U;
    const uint32_t *zs, *T, *usum, *zu;
    uint32_t* C;
    int64_t M, K, N;
} ProductArgs;

/* Columns [n0, n1) of product's C (n0 a multiple of 4): the sums, then the zero points' terms. */
static void product_part(void* ctx, int64_t part, int64_t parts) {
    const ProductArgs* a = ctx;
    const int64_t M = a->M, K = a->K, N = a->N;
    int64_t n0, n1;
    pool_range(N, 4, part, parts, &n0, &n1);
    uint32_t* C = a->C;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) C[m * N + n] = 0;
    for (int64_t k0 = 0; k0 < K; k0 += KCHUNK) {
        const int64_t nk = K - k0 < KCHUNK ? K - k0 : KCHUNK;
        int64_t n = n0;
        for (; n + 4 <= n1; n += 4) {
            const int8_t* s = a->S + n * K + k0;
            for (int64_t m = 0; m < M; ++m)
                dot4(a->U + m * K + k0, s, s + K, s + 2 * K, s + 3 * K, nk, C + m * N + n);
        }
        for (; n < n1; ++n)
            for (int64_t m = 0; m < M; ++m) C[m * N + n] += (uint32_t)dot1(a->U + m * K + k0, a->S + n * K + k0, nk);
    }
    for (int64_t m = 0; m < M; ++m) {
        uint32_t* restrict c = C + m * N;
        for (int64_t n = n0; n < n1; ++n) c[n] -= a->zs[n] * a->usum[m] + a->zu[m] * a->T[n];
    }
}

/* C (M x N, uint32 bits of the int32 result). Zero points: za_rows (one per row, of A's type) else
 * za; zb_cols (one per column, of B's type) else zb. Columns split across the pool's threads
 * (pool_threads.h) in groups of 4, from POOL_MIN_WORK multiply-adds per part. */
static int product(const int32_t* pack, const void* A, int64_t M, int64_t a_signed, const void* za_rows,
                   int64_t za, const void* zb_cols, int64_t zb, uint32_t* restrict C) {
    const int64_t K = pack[0], N = pack[1], b_signed = pack[2];
    const int32_t* Bsum = pack + HEADER;
    const int8_t* S = (const int8_t*)(pack + HEADER + N);
    uint32_t* zs = malloc(sizeof(uint32_t) * (size_t)(2 * N + 2 * M) + (a_signed ? (size_t)(M * K) : 0));
    if (!zs) return 1;
    uint32_t *T = zs + N, *usum = T + N, *zu = usum + M;
    for (int64_t n = 0; n < N; ++n) {
        int64_t z = zb;
        if (zb_cols) z = b_signed ? ((const int8_t*)zb_cols)[n] : ((const uint8_t*)zb_cols)[n];
        zs[n] = (uint32_t)(b_signed ? z : z - 128);
        T[n] = (uint32_t)Bsum[n] - (uint32_t)K * (uint32_t)z;
    }
    const uint8_t* U = A;
    if (a_signed) {
        uint8_t* shifted = (uint8_t*)(zu + M);
        for (int64_t i = 0; i < M * K; ++i) shifted[i] = ((const uint8_t*)A)[i] ^ 0x80;
        U = shifted;
    }
    for (int64_t m = 0; m < M; ++m) {
        const uint8_t* u = U + m * K;
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += u[k];
        usum[m] = s;
        int64_t z = za;
        if (za_rows) z = a_signed ? ((const int8_t*)za_rows)[m] : ((const uint8_t*)za_rows)[m];
        zu[m] = (uint32_t)(a_signed ? z + 128 : z);
    }
    ProductArgs args = {S, U, zs, T, usum, zu, C, M, K, N};
    const int64_t per_group = 4 * M * K + 1;
    pool_run(product_part, &args, pool_parts((N + 3) / 4, (POOL_MIN_WORK + per_group - 1) / per_group));
    free(zs);
    return 0;
}

/* MatMulInteger: Y = the int32 product. */
int matmul_integer_u8(const int32_t* pack, const void* A, int64_t M, const void* za_rows, int64_t za,
                      const void* zb_cols, int64_t zb, int64_t a_signed, int32_t* Y) {
    return product(pack, A, M, a_signed, za_rows, za, zb_cols, zb, (uint32_t*)Y);
}

/* QLinearMatMul: Y = saturate(rint(float(C) * (a_scale * b_scale / y_scale)) + y_zp), in float32
 * as the NumPy code (rint rounds half to even; NaN saturates to the low end). a_scale: as_rows (one
 * per row) else as; b_scale: bs_cols (one per column) else bs. signs: 1 if A is int8, + 2 if Y is. */
int qlinear_matmul_u8(const int32_t* pack, const void* A, int64_t M, const void* za_rows, int64_t za,
                      const void* zb_cols, int64_t zb, int64_t signs, const float* as_rows, float as,
                      const float* bs_cols, float bs, float ys, int64_t y_zp, void* Y) {
    const int64_t N = pack[1], y_signed = signs & 2;
    uint32_t* C = malloc(sizeof(uint32_t) * (size_t)(M * N + N));
    if (!C || product(pack, A, M, signs & 1, za_rows, za, zb_cols, zb, C)) {
        free(C);
        return 1;
    }
    float* restrict mult = (float*)(C + M * N);
    const float lo = y_signed ? -128.0f : 0.0f, hi = y_signed ? 127.0f : 255.0f;
    const float zp = (float)y_zp;
    for (int64_t m = 0; m < M; ++m) {
        const float a = as_rows ? as_rows[m] : as;
        if (bs_cols)
            for (int64_t n = 0; n < N; ++n) mult[n] = a * bs_cols[n] / ys;
        else
            for (int64_t n = 0; n < N; ++n) mult[n] = a * bs / ys;
        const uint32_t* restrict c = C + m * N;
        for (int64_t n = 0; n < N; ++n) {  /* fmin(fmax(q, lo), hi), written so that it vectorises */
            const float q = rintf((float)(int32_t)c[n] * mult[n]) + zp;
            const float v = q > lo ? q : lo;  /* NaN: lo */
            mult[n] = v < hi ? v : hi;
        }
        if (y_signed)
            for (int64_t n = 0; n < N; ++n) ((int8_t*)Y)[m * N + n] = (int8_t)mult[n];
        else
            for (int64_t n = 0; n < N; ++n) ((uint8_t*)Y)[m * N + n] = (uint8_t)mult[n];
    }
    free(C);
    return 0;
}

/* qlinear_matmul_u8's arguments but A and Y, set once per weight and input shape (the caller's
 * plan), so that a call converts three arguments rather than fifteen. */
struct qlinear_args {
    const int32_t* pack;
    int64_t M;
    const void* za_rows;
    int64_t za;
    const void* zb_cols;
    int64_t zb;
    int64_t signs;
    const float* as_rows;
    const float* bs_cols;
    float as, bs, ys;
    int64_t y_zp;
};

int qlinear_matmul_u8_planned(const struct qlinear_args* p, const void* A, void* Y) {
    return qlinear_matmul_u8(p->pack, A, p->M, p->za_rows, p->za, p->zb_cols, p->zb, p->signs, p->as_rows, p->as,
                             p->bs_cols, p->bs, p->ys, p->y_zp, Y);
}

/* QuantizeLinear, float32 to 8 bits with one scale and zero point: y = saturate(rint(x / scale) + zp)
 * in float32, as the NumPy code (NaN saturates to the low end). y_signed: int8 output. */
int quantize_linear_f32(const float* x, int64_t n, float scale, int64_t zp, int64_t y_signed, void* y) {
    const float lo = y_signed ? -128.0f : 0.0f, hi = y_signed ? 127.0f : 255.0f, z = (float)zp;
#define QUANTIZE(T)                                        \
    for (int64_t i = 0; i < n; ++i) {                      \
        const float q = rintf(x[i] / scale) + z;           \
        const float v = q > lo ? q : lo; /* NaN: lo */     \
        ((T*)y)[i] = (T)(v < hi ? v : hi);                 \
    }
    if (y_signed) QUANTIZE(int8_t) else QUANTIZE(uint8_t)
#undef QUANTIZE
    return 0;
}

/* DequantizeLinear, 8 bits to float32 with one scale and zero point: y = (x - zp) * scale. */
int dequantize_linear_f32(const void* x, int64_t n, int64_t x_signed, int64_t zp, float scale, float* y) {
    const float z = (float)zp;
    if (x_signed)
        for (int64_t i = 0; i < n; ++i) y[i] = ((float)((const int8_t*)x)[i] - z) * scale;
    else
        for (int64_t i = 0; i < n; ++i) y[i] = ((float)((const uint8_t*)x)[i] - z) * scale;
    return 0;
}

/* DynamicQuantizeLinear of float32 to uint8, in float32 as the NumPy code: the range [lo, hi]
 * widened to hold 0, scale = (hi - lo) / 255 (1 when hi == lo), zero point
 * rint(clamp(-lo / scale, 0, 255)), y = clamp(rint(x / scale) + zero point, 0, 255).
 * dynamic_range_u8 finds the scale and zero point: 2, writing nothing, when x holds a NaN or an
 * infinity (the NumPy code then runs). */
static int dynamic_range_u8(const float* x, int64_t n, float* out_scale, uint8_t* out_zp) {
    float hi = 0.0f, lo = 0.0f;
    int bad = 0;
    /* the range in VL lanes, then across them: the same bounds in any order (but for the sign of a zero
     * bound, which changes nothing below) */
    vfloat vh = {0}, vl = {0};
    vint nan = {0};
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        const vfloat v = vload(x + i);
        const vint above = v > vh, below = v < vl;
        vh = (vfloat)((above & (vint)v) | (~above & (vint)vh));
        vl = (vfloat)((below & (vint)v) | (~below & (vint)vl));
        nan |= v != v;
    }
    for (int j = 0; j < VL; ++j) {
        hi = vh[j] > hi ? vh[j] : hi;
        lo = vl[j] < lo ? vl[j] : lo;
        bad |= nan[j] != 0;
    }
    for (; i < n; ++i) {
        const float v = x[i];
        hi = v > hi ? v : hi;
        lo = v < lo ? v : lo;
        bad |= v != v;
    }
    if (bad || hi - lo != hi - lo || isinf(hi - lo)) return 2;
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float z = 0.0f - lo / scale;
    z = z > 0.0f ? z : 0.0f;
    z = rintf(z < 255.0f ? z : 255.0f);
    out_scale[0] = scale;
    out_zp[0] = (uint8_t)z;
    return 0;
}

static void dynamic_apply_u8(const float* x, int64_t n, float scale, uint8_t zp, uint8_t* y) {
    const float z = (float)zp;
    for (int64_t i = 0; i < n; ++i) {
        const float q = rintf(x[i] / scale) + z;
        const float v = q > 0.0f ? q : 0.0f;
        y[i] = (uint8_t)(v < 255.0f ? v : 255.0f);
    }
}

/* Into out_scale[0] and out_zp[0], and y. */
int dynamic_quantize_u8(const float* x, int64_t n, float* out_scale, uint8_t* out_zp, uint8_t* y) {
    float scale;
    uint8_t zp;
    const int rc = dynamic_range_u8(x, n, &scale, &zp);
    if (rc) return rc;
    dynamic_apply_u8(x, n, scale, zp, y);
    out_scale[0] = scale;
    out_zp[0] = zp;
    return 0;
}

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF /* a * ra + b * rb rounded twice, as the NumPy code (GCC: off under -std=c11) */
#endif

/* com.microsoft QLinearAdd of 8-bit a and b (each n values, or one: step 0) to 8-bit y, as the NumPy
 * code (MLAS's formula): y = saturate(rint((a - za) (sa / sc) + (b - zb) (sb / sc) + zc)) in float32.
 * signs: 1 if a is int8, + 2 if b is, + 4 if y is. */
int qlinear_add_8(const void* a, int64_t a_step, const void* b, int64_t b_step, int64_t n, int64_t signs,
                  float a_scale, int64_t a_zp, float b_scale, int64_t b_zp, float c_scale, int64_t c_zp, void* y) {
    const float ra = a_scale / c_scale, rb = b_scale / c_scale, za = (float)a_zp, zb = (float)b_zp, zc = (float)c_zp;
    const float lo = signs & 4 ? -128.0f : 0.0f, hi = signs & 4 ? 127.0f : 255.0f;
#define QADD_LOOP(TA, TB, TY, IA, IB)                                                     \
    for (int64_t i = 0; i < n; ++i) {                                                     \
        const float va = ((float)((const TA*)a)[IA] - za) * ra;                           \
        const float vb = ((float)((const TB*)b)[IB] - zb) * rb;                           \
        const float q = rintf(va + vb + zc);                                              \
        const float v = q > lo ? q : lo; /* NaN: lo */                                    \
        ((TY*)y)[i] = (TY)(v < hi ? v : hi);                                              \
    }
#define QADD(TA, TB, TY)                      \
    if (a_step && b_step)                     \
        QADD_LOOP(TA, TB, TY, i, i)           \
    else                                      \
        QADD_LOOP(TA, TB, TY, i * a_step, i * b_step)
    switch (signs) {
        case 0: QADD(uint8_t, uint8_t, uint8_t) break;
        case 1: QADD(int8_t, uint8_t, uint8_t) break;
        case 2: QADD(uint8_t, int8_t, uint8_t) break;
        case 3: QADD(int8_t, int8_t, uint8_t) break;
        case 4: QADD(uint8_t, uint8_t, int8_t) break;
        case 5: QADD(int8_t, uint8_t, int8_t) break;
        case 6: QADD(uint8_t, int8_t, int8_t) break;
        default: QADD(int8_t, int8_t, int8_t) break;
    }
#undef QADD
#undef QADD_LOOP
    return 0;
}

/* com.microsoft QLinearGlobalAveragePool, channels first: per row of n 8-bit values (rows of x, one
 * per image and channel), as the NumPy code (MLAS's formula): the int32 sum of (x - x_zp), times
 * x_scale / (y_scale n) in float32, rounded half to even, plus y_zp, saturated. signs: 1 if x is
 * int8, + 2 if y is. */
int qlinear_global_average_pool_8(const void* x, int64_t rows, int64_t n, int64_t signs, float x_scale, int64_t x_zp,
                                  float y_scale, int64_t y_zp, void* y) {
    const float ratio = x_scale / (y_scale * (float)n), zy = (float)y_zp;
    const float lo = signs & 2 ? -128.0f : 0.0f, hi = signs & 2 ? 127.0f : 255.0f;
    const uint32_t shift = (uint32_t)x_zp * (uint32_t)n;
    for (int64_t r = 0; r < rows; ++r) {
        uint32_t sum = 0;
        if (signs & 1) {
            const int8_t* restrict v = (const int8_t*)x + r * n;
            for (int64_t i = 0; i < n; ++i) sum += (uint32_t)(int32_t)v[i];
        } else {
            const uint8_t* restrict v = (const uint8_t*)x + r * n;
            for (int64_t i = 0; i < n; ++i) sum += v[i];
        }
        const float q = rintf((float)(int32_t)(sum - shift) * ratio) + zy;
        const float c = q > lo ? q : lo; /* NaN: lo */
        const float v = c < hi ? c : hi;
        if (signs & 2)
            ((int8_t*)y)[r] = (int8_t)v;
        else
            ((uint8_t*)y)[r] = (uint8_t)v;
    }
    return 0;
}

int quantize_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }

/* The per-tensor kernels above as program steps (gpuops/onnx/programs.py), their scalars in p
 * (param_float for scales). Quantize: p = {n, scale, zp, y_signed}; dequantize: p = {n, x_signed, zp,
 * scale}; QLinearAdd of two inputs of one shape: p = {n, signs, a_scale, a_zp, b_scale, b_zp, c_scale,
 * c_zp}; QLinearGlobalAveragePool: p = {rows, n, signs, x_scale, x_zp, y_scale, y_zp}. */
int quantize_planned_f32(const int64_t* p, const float* x, const void* unused, void* y) {
    (void)unused;
    return quantize_linear_f32(x, p[0], param_float(p, 1), p[2], p[3], y);
}

int dequantize_planned_f32(const int64_t* p, const void* x, const void* unused, float* y) {
    (void)unused;
    return dequantize_linear_f32(x, p[0], p[1], p[2], param_float(p, 3), y);
}

int qlinear_add_planned_8(const int64_t* p, const void* a, const void* b, void* y) {
    return qlinear_add_8(a, 1, b, 1, p[0], p[1], param_float(p, 2), p[3], param_float(p, 4), p[5],
                         param_float(p, 6), p[7], y);
}

/* DynamicQuantizeLinear in two calls, p = {n}: the range of a into its scale (z) and zero point (y), 2 for a
 * NaN or an infinity (the node then runs: gpuops/onnx/programs.py's RERUN); then a quantized into y with
 * those (b, c). */
int dynamic_range_planned_u8(const int64_t* p, const float* a, const void* unused_b, uint8_t* y, const void* unused_c,
                             float* z) {
    (void)unused_b, (void)unused_c;
    return dynamic_range_u8(a, p[0], z, y);
}

int dynamic_apply_planned_u8(const int64_t* p, const float* a, const float* scale, uint8_t* y, const uint8_t* zp,
                             void* unused_z) {
    (void)unused_z;
    dynamic_apply_u8(a, p[0], scale[0], zp[0], y);
    return 0;
}

int qlinear_global_average_pool_planned_8(const int64_t* p, const void* x, const void* unused, void* y) {
    (void)unused;
    return qlinear_global_average_pool_8(x, p[0], p[1], p[2], param_float(p, 3), p[4], param_float(p, 5), p[6], y);
}
