/* A classifier's head, a row at a time, float32: the mean of each row (GlobalAveragePool) and Softmax /
 * LogSoftmax along rows, one pass where NumPy makes four or five over a small tensor (each cold after a
 * conv). The same arithmetic as the NumPy code: float32 sums, x - max(x) before exp, NaN anywhere in a
 * row making its max NaN. Returns 0. */
#include <math.h>
#include "common.h"
#include "pool_threads.h"

/* The sum of n floats over VL lanes, then the lanes halved in a tree of vector adds. */
static inline float row_sum(const float* x, int64_t n) {
    vfloat a0 = {0}, a1 = {0};
    int64_t i = 0;
    for (; i + 2 * VL <= n; i += 2 * VL) {
        a0 += vload(x + i);
        a1 += vload(x + i + VL);
    }
    if (i + VL <= n) {
        a0 += vload(x + i);
        i += VL;
    }
    vfloat s = a0 + a1;
    s += SHUF(s, s, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    s += SHUF(s, s, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    s += SHUF(s, s, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    s += SHUF(s, s, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    float tail = 0.0f;
    for (; i < n; ++i) tail += x[i];
    return s[0] + tail;
}

/* y[r] = mean of row r of x (rows of n). */
int row_mean_f32(const float* x, float* y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) y[r] = row_sum(x + r * n, n) / (float)n;
    return 0;
}

/* Rows [r0, r1) of softmax_rows_f32. */
static void softmax_rows(const float* x, float* y, int64_t r0, int64_t r1, int64_t n, int64_t log_) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* restrict xr = x + r * n;
        float* restrict yr = y + r * n;
        float m = xr[0];
        for (int64_t i = 1; i < n; ++i) m = xr[i] > m || xr[i] != xr[i] ? xr[i] : m;  /* a NaN wins, and stays */
        for (int64_t i = 0; i < n; ++i) yr[i] = expf(xr[i] - m);
        const float s = row_sum(yr, n);
        if (log_) {
            const float ls = logf(s);
            for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
        } else {
            for (int64_t i = 0; i < n; ++i) yr[i] /= s;
        }
    }
}

typedef struct {
    const float* x;
    float* y;
    int64_t rows, n, log_;
} SoftmaxArgs;

static void softmax_part(void* ctx, int64_t part, int64_t parts) {
    const SoftmaxArgs* a = ctx;
    int64_t r0, r1;
    pool_range(a->rows, 1, part, parts, &r0, &r1);
    softmax_rows(a->x, a->y, r0, r1, a->n, a->log_);
}

/* Softmax (log_ == 0) or LogSoftmax of each row of x (rows of n) into y; the rows are split across the
 * pool's threads (pool_threads.h) from 16k elements per part. */
int softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, int64_t log_) {
    SoftmaxArgs a = {x, y, rows, n, log_};
    pool_run(softmax_part, &a, pool_parts(rows, (16384 + n) / (n + 1) + 1));
    return 0;
}

int rows_set_threads(int64_t n) { return pool_threads_set(n); }
