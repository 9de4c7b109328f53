/* The BLAS NumPy uses, called from native programs' kernels (program.c, attention.c) through the
 * addresses of its cblas_sgemm and cblas_sgemv, found at plan time (gpuops/threads.py blas_sgemm): an
 * OpenBLAS built for 32- or 64-bit integers. */
#pragma once
#include <stdint.h>
#include "pool_threads.h"

typedef void (*blas_sgemm32)(int, int, int, int32_t, int32_t, int32_t, float, const float*, int32_t, const float*,
                             int32_t, float, float*, int32_t);
typedef void (*blas_sgemm64)(int, int, int, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                             int64_t, float, float*, int64_t);
typedef void (*blas_sgemv32)(int, int, int32_t, int32_t, float, const float*, int32_t, const float*, int32_t, float,
                             float*, int32_t);
typedef void (*blas_sgemv64)(int, int, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                             float*, int64_t);
enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111, BLAS_TRANS = 112 };

/* y (M x N, rows ldy apart) = alpha a (M x K) b, b K x N or, with trans_b, N x K (rows ldb apart), all
 * row-major; one row (M = 1) by sgemv where given (as NumPy's matmul sends it: sgemm would pack all of b
 * for it), else sgemm. ilp64: the library's integers are 64-bit. */
static inline void blas_product(intptr_t sgemm, int64_t ilp64, intptr_t sgemv, int64_t trans_b, int64_t M, int64_t N,
                                int64_t K, float alpha, const float* a, const float* b, int64_t ldb, float* y,
                                int64_t ldy) {
    const int tb = trans_b ? BLAS_TRANS : BLAS_NO_TRANS;
    if (M == 1 && sgemv) {  /* y = b^T a (b K x N), or b a (b N x K) */
        const int64_t rows = trans_b ? N : K, cols = trans_b ? K : N;
        const int t = trans_b ? BLAS_NO_TRANS : BLAS_TRANS;
        if (ilp64)
            ((blas_sgemv64)sgemv)(BLAS_ROW_MAJOR, t, rows, cols, alpha, b, ldb, a, 1, 0.0f, y, 1);
        else
            ((blas_sgemv32)sgemv)(BLAS_ROW_MAJOR, t, (int32_t)rows, (int32_t)cols, alpha, b, (int32_t)ldb, a, 1, 0.0f,
                                  y, 1);
    } else if (ilp64) {
        ((blas_sgemm64)sgemm)(BLAS_ROW_MAJOR, BLAS_NO_TRANS, tb, M, N, K, alpha, a, K, b, ldb, 0.0f, y, ldy);
    } else {
        ((blas_sgemm32)sgemm)(BLAS_ROW_MAJOR, BLAS_NO_TRANS, tb, (int32_t)M, (int32_t)N, (int32_t)K, alpha, a,
                              (int32_t)K, b, (int32_t)ldb, 0.0f, y, (int32_t)ldy);
    }
}

typedef struct {
    intptr_t sgemm, sgemv;
    int64_t ilp64, trans_b, M, N, K, ldb, ldy, by_rows;
    float alpha;
    const float *a, *b;
    float* y;
} BlasProduct;

/* Part `part` of a product: a slice of its rows, or of its columns. */
static void blas_product_part(void* ctx, int64_t part, int64_t parts) {
    const BlasProduct* p = ctx;
    int64_t lo, hi;
    if (p->by_rows) {
        pool_range(p->M, 1, part, parts, &lo, &hi);
        if (lo < hi)
            blas_product(p->sgemm, p->ilp64, p->sgemv, p->trans_b, hi - lo, p->N, p->K, p->alpha, p->a + lo * p->K,
                         p->b, p->ldb, p->y + lo * p->ldy, p->ldy);
    } else {
        pool_range(p->N, 16, part, parts, &lo, &hi);
        if (lo < hi)
            blas_product(p->sgemm, p->ilp64, p->sgemv, p->trans_b, p->M, hi - lo, p->K, p->alpha, p->a,
                         p->b + (p->trans_b ? lo * p->ldb : lo), p->ldb, p->y + lo, p->ldy);
    }
}

/* blas_product, split across the kernels' pool (pool_threads.h) while the BLAS runs on
 * one thread (its openblas_get_num_threads, `count`, says 1: native programs hold it so where nothing else
 * in the run wakes its workers, gpuops/onnx/programs.py), a part per thread, when each gets POOL_MIN_WORK
 * multiply-adds: the rows when a has more than b's columns, else the columns (each part's BLAS call packs
 * the operand it does not split). */
static inline void blas_product_parts(intptr_t sgemm, int64_t ilp64, intptr_t sgemv, intptr_t count, int64_t trans_b,
                                      int64_t M, int64_t N, int64_t K, float alpha, const float* a, const float* b,
                                      int64_t ldb, float* y, int64_t ldy) {
    const int64_t by_rows = M > N, units = by_rows ? M : N / 16;
    const int64_t t = count && ((int (*)(void))count)() == 1 ? pool_get_threads() : 1;
    BlasProduct p = {sgemm, sgemv, ilp64, trans_b, M, N, K, ldb, ldy, by_rows, alpha, a, b, y};
    const int64_t parts = t > 1 && M * N * K >= 2 * POOL_MIN_WORK ? (units < t ? units : t) : 1;
    pool_run(blas_product_part, &p, parts > 1 ? parts : 1);
}
