// quantize.cu -- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.
//
// Quantization parameters (scale, zero point) are indexed through three strides, which covers all
// three granularities of the spec with one formula. Viewing x as [outer, A, inner] around `axis`:
//   element i -> o = i / (A * inner), a = (i / inner) % A, j = i % inner
//   parameter index = o * so + (a / B) * sa + j * si
//   per-tensor: so = sa = si = 0           per-axis: sa = 1, B = 1 (so = si = 0)
//   blocked (block size B along axis, parameters [outer, ceil(A / B), inner]): so = ceil(A/B)*inner, sa = inner, si = 1
//
// Target encodings (`kind`): 0 integers, stored `bits` wide (8/16, or 4/2 for int4/uint4/int2/uint2,
// one value per byte in the low bits as ml_dtypes stores them); 1..4 the float8 formats below,
// stored as bytes. Rounding is half to even (rintf); integer results saturate to [qmin, qmax].
#include "common.cuh"

enum Float8Kind { F8_NONE = 0, F8_E4M3FN = 1, F8_E4M3FNUZ = 2, F8_E5M2 = 3, F8_E5M2FNUZ = 4 };

struct F8Format {
    int mant_bits, bias, max_code;  // max_code: the largest finite positive encoding
    bool fnuz, has_inf;             // fnuz: no -0, NaN is 0x80, no infinities
};

__device__ __forceinline__ F8Format f8_format(int kind) {
    switch (kind) {
        case F8_E4M3FN: return F8Format{3, 7, 0x7E, false, false};
        case F8_E4M3FNUZ: return F8Format{3, 8, 0x7F, true, false};
        case F8_E5M2: return F8Format{2, 15, 0x7B, false, true};
        default: return F8Format{2, 16, 0x7F, true, false};  // F8_E5M2FNUZ
    }
}

// float -> float8, round to nearest even; out of range gives inf (e5m2) or NaN (the others), as
// ml_dtypes' casts do.
__device__ __forceinline__ unsigned char float_to_f8(float f, int kind) {
    const F8Format F = f8_format(kind);
    const unsigned int bits = __float_as_uint(f);
    const unsigned int sign = (bits >> 31) << 7;
    const unsigned char nan = F.fnuz ? 0x80 : (unsigned char)(sign | (F.has_inf ? 0x7E : 0x7F));
    const unsigned char overflow = F.has_inf ? (unsigned char)(sign | 0x7C) : nan;
    const float a = fabsf(f);
    if (a != a) return nan;
    if (a > GPUOPS_FLT_MAX) return overflow;
    const int emin = 1 - F.bias;  // exponent of the smallest normal
    int e = (int)((bits >> 23) & 0xFF) - 127;
    if (e < emin) e = emin;
    // r = a in units of the quantum 2^(e - mant_bits), rounded half to even (the scaling is exact)
    int r = (int)rintf(ldexpf(a, F.mant_bits - e));
    if (r == 0) return F.fnuz ? 0 : (unsigned char)sign;  // fnuz has no negative zero
    if (r == (2 << F.mant_bits)) {  // rounded up into the next binade
        r >>= 1;
        ++e;
    }
    // a subnormal (r < 2^mant_bits, e == emin) encodes as r; a normal as biased exponent | fraction
    const int code = r < (1 << F.mant_bits) ? r : ((e + F.bias) << F.mant_bits) | (r - (1 << F.mant_bits));
    if (code > F.max_code) return overflow;
    return (unsigned char)(sign | (unsigned int)code);
}

__device__ __forceinline__ float f8_to_float(unsigned char c, int kind) {
    const F8Format F = f8_format(kind);
    const float nan = __int_as_float(0x7FC00000);
    if (F.fnuz && c == 0x80) return nan;
    const int sign = c >> 7, code = c & 0x7F;
    const int exp = code >> F.mant_bits, mant = code & ((1 << F.mant_bits) - 1);
    if (!F.fnuz && !F.has_inf && code == 0x7F) return nan;  // e4m3fn
    if (F.has_inf && exp == 0x1F) return mant ? nan : (sign ? -__int_as_float(0x7F800000) : __int_as_float(0x7F800000));
    float v = exp ? ldexpf((float)((1 << F.mant_bits) | mant), exp - F.bias - F.mant_bits)
                  : ldexpf((float)mant, 1 - F.bias - F.mant_bits);
    return sign ? -v : v;
}

// The integer stored in `bits` low bits of a byte (int4/uint4/int2/uint2) or in a full-width type.
template <class TQ>
__device__ __forceinline__ int load_int(TQ v, int bits, int is_signed) {
    if (bits >= 8) return (int)v;
    const int mask = (1 << bits) - 1, raw = (int)(unsigned char)v & mask;
    return is_signed ? (raw ^ (1 << (bits - 1))) - (1 << (bits - 1)) : raw;
}

__device__ __forceinline__ i64 param_index(i64 i, i64 A, i64 inner, i64 B, i64 so, i64 sa, i64 si) {
    return (i / (A * inner)) * so + ((i / inner) % A) / B * sa + (i % inner) * si;
}

// y = saturate(rint(x / scale) + zero_point), or float8(x / scale) (saturated to the finite range
// when `saturate`). The division happens in TS, the scale's type (x is first converted to TS, the
// quotient rounded to TS), as the generic op does it.
template <class TX, class TS, class TQ>
__global__ void quantize_linear(const TX* __restrict__ x, const TS* __restrict__ scale,
                                const TQ* __restrict__ zero_point, TQ* __restrict__ y, i64 total, i64 A,
                                i64 inner, i64 B, i64 so, i64 sa, i64 si, int kind, int bits, int qmin, int qmax,
                                int saturate) {
    GRID_STRIDE_LOOP(i, total) {
        const i64 p = param_index(i, A, inner, B, so, sa, si);
        const float xs = to_float(from_float<TS>(to_float(x[i])));
        const float q = to_float(from_float<TS>(xs / to_float(scale[p])));
        if (kind == F8_NONE) {
            float r = fminf(fmaxf(rintf(q), -1048576.0f), 1048576.0f);  // no int overflow below
            int v = (int)r + (zero_point ? load_int(zero_point[p], bits, qmin < 0) : 0);
            v = min(max(v, qmin), qmax);
            y[i] = (TQ)(bits >= 8 ? v : (v & ((1 << bits) - 1)));
        } else {
            float v = q;
            if (q != q) {  // the NaN of the input, else of the scale, with its sign (ONNX keeps it)
                const float xf = to_float(x[i]);
                v = copysignf(q, (xf != xf ? sign_bit(x[i]) : sign_bit(scale[p])) ? -1.0f : 1.0f);
            }
            if (saturate) {
                const F8Format F = f8_format(kind);
                const float fmax = f8_to_float((unsigned char)F.max_code, kind);
                if (q == q) v = fminf(fmaxf(v, -fmax), fmax);  // (fminf/fmaxf would turn NaN into a bound)
            }
            y[i] = (TQ)float_to_f8(v, kind);
        }
    }
}

// y = (x - zero_point) * scale in float32, converted to TY. Float8 inputs have no zero point.
template <class TQ, class TS, class TY>
__global__ void dequantize_linear(const TQ* __restrict__ x, const TS* __restrict__ scale,
                                  const TQ* __restrict__ zero_point, TY* __restrict__ y, i64 total, i64 A, i64 inner,
                                  i64 B, i64 so, i64 sa, i64 si, int kind, int bits, int is_signed) {
    GRID_STRIDE_LOOP(i, total) {
        const i64 p = param_index(i, A, inner, B, so, sa, si);
        float v;
        if (kind == F8_NONE) {
            v = (float)load_int(x[i], bits, is_signed);
            if (zero_point) v = v - (float)load_int(zero_point[p], bits, is_signed);
        } else {
            v = f8_to_float((unsigned char)x[i], kind);
        }
        y[i] = from_float<TY>(v * to_float(scale[p]));
    }
}

// DynamicQuantizeLinear, pass 1: stats[0] = bits of max(x, 0), stats[1] = bits of -min(x, 0).
// Both are non-negative floats, whose bit patterns order like the floats, so atomicMax on the
// unsigned bits is a float max. stats must start at 0. Launch with DQ_BLOCK threads per block.
#define DQ_BLOCK 256

template <class T>
__global__ void minmax_reduce(const T* __restrict__ x, i64 n, unsigned int* __restrict__ stats) {
    __shared__ float s_hi[DQ_BLOCK];
    __shared__ float s_neg_lo[DQ_BLOCK];
    float hi = 0.0f, neg_lo = 0.0f;
    GRID_STRIDE_LOOP(i, n) {
        const float v = to_float(x[i]);
        hi = fmaxf(hi, v);
        neg_lo = fmaxf(neg_lo, 0.0f - v);
    }
    s_hi[threadIdx.x] = hi;
    s_neg_lo[threadIdx.x] = neg_lo;
    __syncthreads();
    for (int stride = DQ_BLOCK / 2; stride > 0; stride >>= 1) {
        if ((int)threadIdx.x < stride) {
            s_hi[threadIdx.x] = fmaxf(s_hi[threadIdx.x], s_hi[threadIdx.x + stride]);
            s_neg_lo[threadIdx.x] = fmaxf(s_neg_lo[threadIdx.x], s_neg_lo[threadIdx.x + stride]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicMax(&stats[0], __float_as_uint(s_hi[0] + 0.0f));  // + 0 turns -0 into +0
        atomicMax(&stats[1], __float_as_uint(s_neg_lo[0] + 0.0f));
    }
}

// Pass 2: scale = (hi - lo) / 255 (1 when hi == lo, i.e. x is all zeros, as onnxruntime), zero point = rint(clip(-lo / scale, 0, 255)),
// y = clip(rint(x / scale) + zero point, 0, 255). The first thread also writes scale and zero point.
template <class T>
__global__ void dynamic_quantize(const T* __restrict__ x, const unsigned int* __restrict__ stats,
                                 unsigned char* __restrict__ y, T* __restrict__ y_scale,
                                 unsigned char* __restrict__ y_zero_point, i64 n) {
    const float hi = __uint_as_float(stats[0]), lo = 0.0f - __uint_as_float(stats[1]);
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    const float zp = rintf(fminf(fmaxf(0.0f - lo / scale, 0.0f), 255.0f));
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        y_scale[0] = from_float<T>(scale);
        y_zero_point[0] = (unsigned char)zp;
    }
    GRID_STRIDE_LOOP(i, n) {
        y[i] = (unsigned char)fminf(fmaxf(rintf(to_float(x[i]) / scale) + zp, 0.0f), 255.0f);
    }
}

// -- integer matmul (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) ---------------------

// C[b] = (A[b % a_mod] - a_zp) @ (B[b % b_mod] - b_zp), int32, for b in [0, batches): A [.., M, K],
// B [.., K, N], C [batches, M, N]. a_zp is a scalar or one per row of A, b_zp a scalar or one per
// column of B (either may be null). The accumulation wraps modulo 2^32, as the spec allows for int32.
// 16x16 tiles staged in shared memory; launch with block (QG_TILE, QG_TILE) and grid
// (ceil(N / QG_TILE), ceil(M / QG_TILE), any number of batch slices).
#define QG_TILE 16

template <class TA, class TB>
__global__ void gemm_s32(const TA* __restrict__ A, const TB* __restrict__ B, const TA* __restrict__ a_zp,
                         const TB* __restrict__ b_zp, int* __restrict__ C, int M, int N, int K, i64 batches,
                         i64 a_mod, i64 b_mod, int a_zp_per_row, int b_zp_per_col) {
    __shared__ int As[QG_TILE][QG_TILE + 1];
    __shared__ int Bs[QG_TILE][QG_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * QG_TILE + ty, col = blockIdx.x * QG_TILE + tx;
    for (i64 bt = blockIdx.z; bt < batches; bt += gridDim.z) {
        const TA* a = A + (bt % a_mod) * M * K;
        const TB* b = B + (bt % b_mod) * K * N;
        unsigned int acc = 0;  // unsigned: wrapping is defined
        for (int k0 = 0; k0 < K; k0 += QG_TILE) {
            int av = 0, bv = 0;
            if (row < M && k0 + tx < K) {
                av = (int)a[(i64)row * K + k0 + tx];
                if (a_zp) av -= (int)a_zp[a_zp_per_row ? row : 0];
            }
            if (k0 + ty < K && col < N) {
                bv = (int)b[(i64)(k0 + ty) * N + col];
                if (b_zp) bv -= (int)b_zp[b_zp_per_col ? col : 0];
            }
            As[ty][tx] = av;
            Bs[ty][tx] = bv;
            __syncthreads();
            for (int k = 0; k < QG_TILE; ++k) acc += (unsigned int)(As[ty][k] * Bs[k][tx]);
            __syncthreads();
        }
        if (row < M && col < N) C[(bt * M + row) * N + col] = (int)acc;
    }
}

// A scale's index for element (r, c): mode 0 scalar, 1 one per row, 2 one per column.
__device__ __forceinline__ i64 scale_index(int mode, i64 r, i64 c) { return mode == 1 ? r : (mode == 2 ? c : 0); }

// y = saturate(rint((acc + bias[r]) * (s1 * s2 / s3)) + zero_point) for acc viewed as [.., R, Cn]
// (row r = (i / Cn) % R, column c = i % Cn); s3 and the zero point are scalars, bias (per row) may
// be null. The multiplier is computed as (s1 * s2) / s3 in float32, as the generic op does.
template <class TY>
__global__ void requantize(const int* __restrict__ acc, const int* __restrict__ bias, const float* __restrict__ s1,
                           const float* __restrict__ s2, const float* __restrict__ s3, const TY* __restrict__ zero_point,
                           TY* __restrict__ y, i64 total, i64 R, i64 Cn, int s1_mode, int s2_mode, int qmin,
                           int qmax) {
    GRID_STRIDE_LOOP(i, total) {
        const i64 r = (i / Cn) % R, c = i % Cn;
        int a = acc[i];
        if (bias) a = (int)((unsigned int)a + (unsigned int)bias[r]);
        const float m = s1[scale_index(s1_mode, r, c)] * s2[scale_index(s2_mode, r, c)] / s3[0];
        const float q = fminf(fmaxf(rintf((float)a * m), -1048576.0f), 1048576.0f);
        const int v = (int)q + (zero_point ? (int)zero_point[0] : 0);
        y[i] = (TY)min(max(v, qmin), qmax);
    }
}
