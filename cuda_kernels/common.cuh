// common.cuh -- helpers shared by gpuops' kernels (included textually by gpuops/kernels.py).
//
// Rules every kernel file follows, so that one source serves NVRTC (CuPy), nvcc and the CPU emulator:
//  * no standard headers: NVRTC has none; only <cuda_fp16.h>, which the emulator stands in for;
//  * kernels are templates (or plain functions) reached through CuPy name expressions;
//  * pointer parameters are const-correct (the emulator checks writes against read-only arrays);
//  * every loop over elements is a grid-stride loop, so any grid size is correct;
//  * shared memory is statically sized; barriers are reached by all threads of a block;
//  * arithmetic that must match the reference bit for bit is written so that contraction into FMA
//    cannot change it (the modules are compiled with --fmad=false; the emulator with -ffp-contract=off).
#pragma once

#include <cuda_fp16.h>

typedef long long i64;
typedef unsigned long long u64;

#define GPUOPS_FLT_MAX 3.402823466e+38f

// for (i64 i = ...; i < n; i += stride): every thread of the grid strides over [0, n).
#define GRID_STRIDE_LOOP(i, n)                                                                  \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// Element type <-> float, the compute type of every kernel.
template <class T>
__device__ __forceinline__ float to_float(T v) { return (float)v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v) { return (T)v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// The sign bit of a stored value. A GPU's arithmetic returns a canonical NaN (0x7FFFFFFF) whatever its
// operands' signs, where x86 keeps the NaN operand's sign: a NaN's sign is read from the storage.
template <class T>
__device__ __forceinline__ bool sign_bit(T v) { return __float_as_uint((float)v) >> 31; }
template <>
__device__ __forceinline__ bool sign_bit<__half>(__half v) { return __half_as_ushort(v) >> 15; }

// Activation epilogue (Conv bias + activation; com.microsoft FusedConv's `activation` attribute).
enum Activation { ACT_NONE = 0, ACT_RELU = 1, ACT_LEAKY_RELU = 2, ACT_SIGMOID = 3, ACT_TANH = 4, ACT_CLIP = 5,
                  ACT_HARD_SIGMOID = 6 };

// A NaN stays NaN, as in the generic ops (fmaxf / fminf would turn it into the bound).
__device__ __forceinline__ float clamp_nan(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

__device__ __forceinline__ float activate(float v, int act, float alpha, float beta) {
    switch (act) {
        case ACT_RELU: return v < 0.0f ? 0.0f : v;
        case ACT_LEAKY_RELU: return v >= 0.0f ? v : v * alpha;
        case ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
        case ACT_TANH: return tanhf(v);
        case ACT_CLIP: return clamp_nan(v, alpha, beta);
        case ACT_HARD_SIGMOID: return clamp_nan(alpha * v + beta, 0.0f, 1.0f);
        default: return v;
    }
}
