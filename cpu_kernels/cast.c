/* float32 <-> float16 (Cast on the CPU): rounded to nearest even, as NumPy's astype and IEEE 754, by the
 * F16C instructions 8 values at a time where the CPU has them (-march=native), else the compiler's
 * _Float16 conversions. NumPy converts an element at a time in software, ~2 ns each. A NaN comes out
 * quiet (NumPy keeps a signalling one signalling). Each returns 1, converting nothing, where the
 * compiler has no _Float16 (the caller converts). */
#include <stdint.h>
#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#if defined(__FLT16_MAX__)
int cast_f32_f16(const float* x, void* y, int64_t n) {
    _Float16* dst = y;
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; ++i) dst[i] = (_Float16)x[i];
    return 0;
}

int cast_f16_f32(const void* x, float* y, int64_t n) {
    const _Float16* src = x;
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
#endif
    for (; i < n; ++i) y[i] = (float)src[i];
    return 0;
}
#else
int cast_f32_f16(const float* x, void* y, int64_t n) { return (void)x, (void)y, (void)n, 1; }

int cast_f16_f32(const void* x, float* y, int64_t n) { return (void)x, (void)y, (void)n, 1; }
#endif

/* As a program step (gpuops/onnx/programs.py): p = {n, to float16 (1) or to float32 (0)}. */
int cast_half_planned(const int64_t* p, const void* a, const void* unused, void* y) {
    (void)unused;
    return p[1] ? cast_f32_f16(a, y, p[0]) : cast_f16_f32(a, y, p[0]);
}
