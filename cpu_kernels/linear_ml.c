/* Row kernels of the classic ML ops (ai.onnx.ml), float32, for the few rows they mostly run on: one call
 * where NumPy makes four to eight passes over a tiny array. Return 0.
 *
 * linear_classifier_f32: s[r, c] = (x[r] . w[c]) + b[c] (the products summed in order: within
 *   n_features ulp of the exact dot product, as BLAS's are), label[r] = the first class of the highest
 *   score (the first NaN where a row has one, as NumPy's argmax); with softmax != 0 the scores then become
 *   e^(s - max) / sum(e^(s - max)) (vmath.h's vexp_row and vscale_row, as rows.c's Softmax: within a few
 *   ulp). b may be NULL (no intercepts).
 * normalize_rows_f32: each row divided by its largest value (norm 0), the sum of its magnitudes (1) or
 *   its Euclidean length (2) summed in order (within n ulp of NumPy's pairwise sums); a row whose norm is
 *   0 is copied unchanged, a NaN norm makes the row NaN. */
#include <math.h>
#include <stdint.h>

#include "vmath.h"

int linear_classifier_f32(const float* x, const float* w, const float* b, float* s, int64_t* label, int64_t rows,
                          int64_t n_features, int64_t n_classes, int64_t softmax) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n_features;
        float* sr = s + r * n_classes;
        int64_t best = 0;
        for (int64_t c = 0; c < n_classes; ++c) {
            const float* wc = w + c * n_features;
            float acc = 0.0f;
            for (int64_t k = 0; k < n_features; ++k) acc += xr[k] * wc[k];
            const float v = b ? acc + b[c] : acc;
            sr[c] = v;
            if (sr[best] == sr[best] && (v != v || v > sr[best])) best = c;  /* a NaN stays the answer */
        }
        label[r] = best;
        if (softmax && n_classes) {
            float m;
            vscale_row(sr, n_classes, 1.0f / vexp_row(sr, sr, n_classes, 1, &m));
        }
    }
    return 0;
}

int normalize_rows_f32(const float* x, float* y, int64_t rows, int64_t n, int64_t norm) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float z = 0.0f;
        if (norm == 0) {
            z = n ? xr[0] : 0.0f;
            for (int64_t i = 1; i < n && z == z; ++i) z = xr[i] != xr[i] || xr[i] > z ? xr[i] : z;
        } else if (norm == 1) {
            for (int64_t i = 0; i < n; ++i) z += fabsf(xr[i]);
        } else {
            for (int64_t i = 0; i < n; ++i) {
                const float q = xr[i] * xr[i];
                z += q;
            }
            z = sqrtf(z);
        }
        if (z == 0.0f) z = 1.0f;
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] / z;
    }
    return 0;
}

/* As program steps (gpuops/onnx/programs.py). LinearClassifier, wide: p = {w, b (addresses, b or 0), rows,
 * features, classes, softmax}, the labels (int64) to y and the scores to z; Normalizer: p = {rows, n, norm}. */
int linear_classifier_planned_f32(const int64_t* p, const float* x, const void* unused, int64_t* label,
                                  const void* unused2, float* scores) {
    (void)unused;
    (void)unused2;
    return linear_classifier_f32(x, (const float*)(intptr_t)p[0], (const float*)(intptr_t)p[1], scores, label, p[2],
                                 p[3], p[4], p[5]);
}

int normalize_rows_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return normalize_rows_f32(x, y, p[0], p[1], p[2]);
}
