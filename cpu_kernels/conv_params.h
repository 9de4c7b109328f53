/* The arguments of a 2-D float32 conv but its input, residual and output, set once per weight and input
 * shape by the caller's plan (gpuops/ops/cpu/conv.py, ConvParams), so that a call converts four
 * arguments rather than twenty: the *_planned_f32 kernels of conv.c (depthwise), direct_conv.c (few
 * input channels) and gemm.c (im2col + packed GEMM). */
#pragma once
#include <math.h>
#include <stdint.h>
#include "common.h"
#include "pool_threads.h"
#include "vmath.h"

struct conv_params {
    int64_t N, C, H, W, M;  /* images, input channels, input rows and columns, output channels */
    int64_t KH, KW, OH, OW, sh, sw, ph, pw, dh, dw;  /* kernel, output, strides, begin pads, dilations */
    int64_t group, rows;  /* groups; gemm.c: the packs' layout (gemm_pack_f32's rows) */
    const float* weights;  /* the weight (M, C / group, KH, KW), or gemm.c: group g's pack at weights + g wstride */
    int64_t wstride;
    const float* bias;  /* M floats, or NULL */
    float lo, hi;  /* the clamp of a fused Relu or Clip ([-inf, inf]: none) */
    int64_t act;  /* or another fused activation (CONV_ACT_*: then lo and hi are not used), with its */
    float alpha, beta;  /* parameters */
    const void* gemm;  /* winograd.c: gemm.c's gemm_f32 */
};

enum { CONV_CLAMP, CONV_HARD_SIGMOID, CONV_HARD_SWISH, CONV_SIGMOID, CONV_LEAKY_RELU, CONV_SILU };

/* Whether the kernels' own store applies p's epilogue (a clamp, no residual), or leaves it to
 * epilogue_rows. */
static inline int conv_store_clamps(const struct conv_params* p, const float* z) {
    return !z && p->act == CONV_CLAMP;
}

static inline Windows conv_windows(const struct conv_params* p) {
    return windows(p->H, p->W, p->OH, p->OW, p->KH, p->KW, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw);
}

/* sigmoid(v) in every lane: with e = e^-|v|, 1 / (1 + e) for v >= 0 and e / (1 + e) below (no overflow
 * either way); NaN stays NaN. */
static inline vfloat vsigmoid(vfloat v) {
    const vint neg = v < 0.0f;
    const vfloat e = vexp_neg(vselect(neg, v, -v));
    return vselect(neg, e, vsplat(1.0f)) / (1.0f + e);
}

/* v * sigmoid(v) (SiLU) in every lane. */
static inline vfloat vsilu(vfloat v) { return v * vsigmoid(v); }

/* yr = EXPR of v, v = yr (+ zr), over a row of n floats, VL at a time in explicit vectors: written as
 * scalar selects, GCC leaves a conditional multiply (LeakyRelu) unvectorised under -ftrapping-math and
 * calls expf one float at a time. */
#define CONV_EPILOGUE(EXPR)                                                                           \
    do {                                                                                              \
        int64_t l = 0;                                                                                \
        for (; l + VL <= n; l += VL) {                                                                \
            const vfloat v = zr ? vload(yr + l) + vload(zr + l) : vload(yr + l);                      \
            const vfloat e = (EXPR);                                                                  \
            memcpy(yr + l, &e, sizeof e);                                                             \
        }                                                                                             \
        if (l < n) {                                                                                  \
            const vfloat v = zr ? vload_part(yr + l, n - l, 0.0f) + vload_part(zr + l, n - l, 0.0f)   \
                                : vload_part(yr + l, n - l, 0.0f);                                    \
            vstore_part(yr + l, (EXPR), n - l);                                                       \
        }                                                                                             \
    } while (0)

/* Rows [r0, r1) of y (rows of n floats, ld apart), the conv with its bias: + z (a FusedConv's residual,
 * rows ldz apart; NULL: none), then p's activation, summed and applied in that order as the separate
 * passes would. */
static inline void epilogue_rows(float* y, int64_t ld, const float* z, int64_t ldz, int64_t r0, int64_t r1,
                                 int64_t n, const struct conv_params* p) {
    const float lo = p->lo, hi = p->hi, alpha = p->alpha, beta = p->beta;
    const int64_t act = p->act;
    for (int64_t r = r0; r < r1; ++r) {
        float* restrict yr = y + r * ld;
        const float* restrict zr = z ? z + r * ldz : NULL;
        if (act == CONV_HARD_SIGMOID)
            CONV_EPILOGUE(vclamp(v * alpha + beta, 0.0f, 1.0f));
        else if (act == CONV_HARD_SWISH)
            CONV_EPILOGUE(v * vclamp(v * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f));
        else if (act == CONV_SIGMOID)
            CONV_EPILOGUE(vsigmoid(v));
        else if (act == CONV_SILU)
            CONV_EPILOGUE(vsilu(v));
        else if (act == CONV_LEAKY_RELU)
            CONV_EPILOGUE(vselect(v >= 0.0f, v, v * alpha));
        else
            CONV_EPILOGUE(vclamp(v, lo, hi));
    }
}

typedef struct {
    float* y;
    const float* z;
    int64_t rows, n;
    const struct conv_params* p;
} EpilogueRows;

static void epilogue_rows_part(void* ctx, int64_t part, int64_t parts) {
    const EpilogueRows* a = ctx;
    int64_t r0, r1;
    pool_range(a->rows, 1, part, parts, &r0, &r1);
    epilogue_rows(a->y, a->n, a->z, a->n, r0, r1, a->n, a->p);
}

/* epilogue_rows over y's rows [0, rows) of n floats one after another (z's too), split across the pool's
 * threads (pool_threads.h) from 16k floats a part: the pass after a whole conv (depthwise, direct). */
static inline void epilogue_rows_split(float* y, const float* z, int64_t rows, int64_t n, const struct conv_params* p) {
    EpilogueRows a = {y, z, rows, n, p};
    pool_run(epilogue_rows_part, &a, pool_parts(rows, (16384 + n) / (n + 1) + 1));
}
