/* Special functions, elementwise, where NumPy has none: the error function by the C library's erff / erf
 * (within an ulp or two), one call per element, where gpuops' NumPy code spends some hundred array
 * passes on a series and a continued fraction. Return 0. */
#include <math.h>
#include <stdint.h>

int erf_f32(const float* restrict x, float* restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = erff(x[i]);
    return 0;
}

int erf_f64(const double* restrict x, double* restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = erf(x[i]);
    return 0;
}
