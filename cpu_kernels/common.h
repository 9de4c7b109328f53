/* Shared helpers of the native CPU kernels (see gpuops/native.py). */
#pragma once
#include <stdint.h>

/* Output cells o in [lo, hi) whose input index o * s + off lies in [0, n). */
static inline void valid_range(int64_t n, int64_t s, int64_t off, int64_t out, int64_t* lo, int64_t* hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = n - off <= 0 ? 0 : (n - off - 1) / s + 1;
    *lo = a < out ? a : out;
    *hi = b < out ? (b > *lo ? b : *lo) : out;
}

/* A windowed op over one H x W plane (conv tap, pool window) made of long contiguous loops.
 *
 * The padded plane is split by stride phase: padded cell (a + sh * q, b + sw * r) goes to cell (q, r)
 * of phase plane (a, b), each Qh x Qw with Qh = OH + (KH - 1) * dh / sh, Qw = OW + (KW - 1) * dw / sw,
 * stored one after the other (plus Qw cells of slack). Kernel tap (ky, kx) of output cell (oy, ox)
 * then reads cell (oy + ky * dh / sh, ox + kx * dw / sw) of phase plane (ky * dh % sh, kx * dw % sw):
 * over the output grid OH x Qw, flat, one shifted slice of the phase plane for all cells. Grid
 * columns ox >= OW are waste (their reads may wrap into the next row); the caller crops them. */
typedef struct {
    int64_t H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, Qh, Qw;
} Windows;

static inline Windows windows(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                              int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    Windows g = {H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, 0, 0};
    g.Qh = OH + (KH - 1) * dh / sh;
    g.Qw = OW + (KW - 1) * dw / sw;
    return g;
}

static inline int64_t planes_size(const Windows* g) { return g->sh * g->sw * g->Qh * g->Qw + g->Qw; }

/* Fill the phase planes of plane x (pad: the value of cells outside the input). */
static inline void fill_planes(const Windows* g, const float* x, float pad, float* buf) {
    for (int64_t a = 0; a < g->sh; ++a)
        for (int64_t b = 0; b < g->sw; ++b) {
            float* plane = buf + (a * g->sw + b) * g->Qh * g->Qw;
            int64_t lo, hi;
            valid_range(g->W, g->sw, b - g->pw, g->Qw, &lo, &hi);
            for (int64_t q = 0; q < g->Qh; ++q) {
                float* row = plane + q * g->Qw;
                const int64_t iy = a + g->sh * q - g->ph;
                if (iy < 0 || iy >= g->H) {
                    for (int64_t r = 0; r < g->Qw; ++r) row[r] = pad;
                    continue;
                }
                const float* xr = x + iy * g->W + b - g->pw;
                for (int64_t r = 0; r < lo; ++r) row[r] = pad;
                if (g->sw == 1)
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[r];
                else
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[r * g->sw];
                for (int64_t r = hi; r < g->Qw; ++r) row[r] = pad;
            }
        }
    float* slack = buf + g->sh * g->sw * g->Qh * g->Qw;
    for (int64_t r = 0; r < g->Qw; ++r) slack[r] = pad;
}

/* Where tap (ky, kx) starts reading in the phase planes. */
static inline const float* tap(const Windows* g, const float* buf, int64_t ky, int64_t kx) {
    const int64_t a = ky * g->dh % g->sh, b = kx * g->dw % g->sw;
    return buf + (a * g->sw + b) * g->Qh * g->Qw + (ky * g->dh / g->sh) * g->Qw + kx * g->dw / g->sw;
}
