/* Shared helpers of the native CPU kernels (see gpuops/native.py). */
#pragma once
#include <stdint.h>

#include <string.h>

/* VL floats held in registers (GNU C vector extensions, which gcc and clang lower to the widest
 * vectors -march=native has: one AVX-512 register, two AVX2 ones). Loads and stores are unaligned. */
#define VL 16
#define ROWS 4  /* output rows computed together: independent sums hide the add latency */
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(VL * sizeof(int32_t))));

static inline vfloat vload(const float* p) { vfloat v; memcpy(&v, p, sizeof v); return v; }
static inline vfloat vmax(vfloat a, vfloat b) { const vint m = b > a; return (vfloat)((m & (vint)b) | (~m & (vint)a)); }

/* min(max(a, lo), hi) as NumPy's maximum and minimum: NaN stays NaN (the activation epilogue of a
 * fused conv: Relu is [0, inf], Clip [min, max], none [-inf, inf]). */
static inline vfloat vclamp(vfloat a, float lo, float hi) {
    const vint below = a < lo, above = a > hi;
    a = (vfloat)((below & (vint)((vfloat){0} + lo)) | (~below & (vint)a));
    return (vfloat)((above & (vint)((vfloat){0} + hi)) | (~above & (vint)a));
}

/* Store the first n (<= VL) lanes of v at p. room: the floats the caller may write from p on (to the
 * end of its output), where the lanes past n land on cells that a later store overwrites (rows are
 * written in order): with room for a whole vector the store is one vector store, no partial copy. */
static inline void vstore(float* p, vfloat v, int64_t n, int64_t room) {
    if (n == VL || room >= VL) {
        memcpy(p, &v, sizeof v);
        return;
    }
    float t[VL];
    memcpy(t, &v, sizeof v);
    for (int64_t j = 0; j < n; ++j) p[j] = t[j];
}

/* The start of the row's next VL-cell vector after ox (-1: done): VL apart, the last one moved back
 * to end at the row's end (recomputing a few cells) so that every store is a whole vector. */
static inline int64_t next_vector(int64_t ox, int64_t n) {
    if (ox + VL >= n) return -1;
    return ox + 2 * VL <= n ? ox + VL : n - VL;
}

/* Output cells o in [lo, hi) whose input index o * s + off lies in [0, n). */
static inline void valid_range(int64_t n, int64_t s, int64_t off, int64_t out, int64_t* lo, int64_t* hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = n - off <= 0 ? 0 : (n - off - 1) / s + 1;
    *lo = a < out ? a : out;
    *hi = b < out ? (b > *lo ? b : *lo) : out;
}

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

/* Floats of the phase planes, plus VL of slack: a row's last vector may read past the last plane. */
static inline int64_t planes_size(const Windows* g) { return g->sh * g->sw * g->Qh * g->Qw + VL; }

/* Fill rows [q0, q1) of the phase planes of plane x (pad: the value of cells outside the input). */
static inline void fill_plane_rows(const Windows* g, const float* x, float pad, float* buf, int64_t q0, int64_t q1) {
    for (int64_t a = 0; a < g->sh; ++a)
        for (int64_t b = 0; b < g->sw; ++b) {
            float* plane = buf + (a * g->sw + b) * g->Qh * g->Qw;
            int64_t lo, hi;
            valid_range(g->W, g->sw, b - g->pw, g->Qw, &lo, &hi);
            for (int64_t q = q0; q < q1; ++q) {
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
                else if (g->sw == 2)  /* a constant stride: vectorised with permutes */
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[2 * r];
                else
                    for (int64_t r = lo; r < hi; ++r) row[r] = xr[r * g->sw];
                for (int64_t r = hi; r < g->Qw; ++r) row[r] = pad;
            }
        }
    for (int64_t r = 0; r < VL; ++r) buf[g->sh * g->sw * g->Qh * g->Qw + r] = pad;
}

static inline void fill_planes(const Windows* g, const float* x, float pad, float* buf) {
    fill_plane_rows(g, x, pad, buf, 0, g->Qh);
}

/* Where each tap (ky, kx), row-major, reads in the phase planes for output cell (0, 0). */
static inline void tap_offsets(const Windows* g, int64_t* offs) {
    for (int64_t ky = 0; ky < g->KH; ++ky)
        for (int64_t kx = 0; kx < g->KW; ++kx) {
            const int64_t a = ky * g->dh % g->sh, b = kx * g->dw % g->sw;
            offs[ky * g->KW + kx] = (a * g->sw + b) * g->Qh * g->Qw + (ky * g->dh / g->sh) * g->Qw + kx * g->dw / g->sw;
        }
}
