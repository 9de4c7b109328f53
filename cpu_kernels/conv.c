/* Depthwise 2-D convolution (group == channels), NCHW float32: what NumPy cannot do in one pass, a
 * per-channel multiply-add over the kernel taps. Output channel oc = c * mult + m reads input
 * channel c. Per input channel: its phase planes (common.h), then one multiply-add over the whole
 * output grid per tap, then the grid cropped into y. Returns 0, or 1 when out of memory. */
#include <stdlib.h>
#include "common.h"

int depthwise_conv2d_f32(const float* x, const float* w, const float* bias, float* y,
                         int64_t N, int64_t C, int64_t H, int64_t W, int64_t mult,
                         int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    const Windows g = windows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
    const int64_t cells = OH * g.Qw;
    float* buf = malloc(sizeof(float) * (planes_size(&g) + cells));
    if (!buf) return 1;
    float* restrict acc = buf + planes_size(&g);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
            fill_planes(&g, x + (n * C + c) * H * W, 0.0f, buf);
            for (int64_t m = 0; m < mult; ++m) {
                const int64_t oc = c * mult + m;
                const float* wk = w + oc * KH * KW;
                const float b = bias ? bias[oc] : 0.0f;
                for (int64_t i = 0; i < cells; ++i) acc[i] = b;
                for (int64_t ky = 0; ky < KH; ++ky)
                    for (int64_t kx = 0; kx < KW; ++kx) {
                        const float wv = wk[ky * KW + kx];
                        const float* restrict src = tap(&g, buf, ky, kx);
                        for (int64_t i = 0; i < cells; ++i) acc[i] += wv * src[i];
                    }
                float* yc = y + (n * C * mult + oc) * OH * OW;
                for (int64_t oy = 0; oy < OH; ++oy)
                    for (int64_t ox = 0; ox < OW; ++ox) yc[oy * OW + ox] = acc[oy * g.Qw + ox];
            }
        }
    free(buf);
    return 0;
}
