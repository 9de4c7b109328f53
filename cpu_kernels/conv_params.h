/* The arguments of a 2-D float32 conv but its input, residual and output, set once per weight and input
 * shape by the caller's plan (gpuops/ops/cpu/conv.py, ConvParams), so that a call converts four
 * arguments rather than twenty: the *_planned_f32 kernels of conv.c (depthwise), direct_conv.c (few
 * input channels) and gemm.c (im2col + packed GEMM). */
#pragma once
#include <stdint.h>
#include "common.h"

struct conv_params {
    int64_t N, C, H, W, M;  /* images, input channels, input rows and columns, output channels */
    int64_t KH, KW, OH, OW, sh, sw, ph, pw, dh, dw;  /* kernel, output, strides, begin pads, dilations */
    int64_t group, rows;  /* groups; gemm.c: the packs' layout (gemm_pack_f32's rows) */
    const float* weights;  /* the weight (M, C / group, KH, KW), or gemm.c: group g's pack at weights + g wstride */
    int64_t wstride;
    const float* bias;  /* M floats, or NULL */
    float lo, hi;  /* the clamp of a fused Relu or Clip ([-inf, inf]: none) */
};

static inline Windows conv_windows(const struct conv_params* p) {
    return windows(p->H, p->W, p->OH, p->OW, p->KH, p->KW, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw);
}

/* Rows [r0, r1) of y (rows of n floats, ld apart): y = min(max(y + z, lo), hi), z's rows ldz apart (a
 * FusedConv's residual after its conv and bias, summed in that order as the separate passes would). */
static inline void residual_rows(float* y, int64_t ld, const float* z, int64_t ldz, int64_t r0, int64_t r1,
                                 int64_t n, float lo, float hi) {
    for (int64_t r = r0; r < r1; ++r) {
        float* restrict yr = y + r * ld;
        const float* restrict zr = z + r * ldz;
        for (int64_t l = 0; l < n; ++l) {
            const float v = yr[l] + zr[l];
            const float u = v < lo ? lo : v;  /* NaN stays */
            yr[l] = u > hi ? hi : u;
        }
    }
}
