/* Winograd convolution F(2x2, 3x3), float32: the input and output transforms around the 16 GEMMs
 * that NumPy runs with BLAS (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
 *
 * A 2x2 output tile is A^T [U * (B^T d B)] A, with d the 4x4 input tile at (2i - ph, 2j - pw) and
 * U = G g G^T the transformed 3x3 filter (computed in NumPy). Tile position k = 4u + v holds
 *   V[k][c][tile] = (B^T d B)[u][v] for every input channel c;    Mo[k] = U[k] @ V[k];
 *   Y[2i + a][2j + b] = (A^T Mo A)[a][b] + bias, clamped to [lo, hi] (a fused Relu or Clip).
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], A^T = [1 1 1 0; 0 1 -1 -1]: adds and subtracts only.
 *
 * Tiles are read as a 4x4 "kernel" of stride 2 over the phase planes (common.h), so the 16 values of
 * VL tiles of a tile row are 16 vector loads. Both transforms cover the tile rows [i0, i1) of one
 * image, at columns col0 + (i - i0) * tw + j of matrices with row length ld (several images and row
 * blocks share one GEMM). The caller gives Mo VL floats of slack past its end. */
#include <stdlib.h>
#include "common.h"
#include "conv_params.h"
#include "pool_threads.h"

typedef struct {
    const float* x;
    float* V;
    int64_t C, H, W, ph, pw, th, tw, i0, i1, ld, col0;
    int status;
} InputArgs;

/* Input channels [c0, c1) of winograd_f2k3_input_f32. */
static int input_channels(const InputArgs* a, int64_t c0, int64_t c1) {
    const Windows g = windows(a->H, a->W, a->th, a->tw, 4, 4, 2, 2, a->ph, a->pw, 1, 1);
    int64_t* offs = malloc(sizeof(int64_t) * 16 + sizeof(float) * planes_size(&g));  /* offsets, then planes */
    if (!offs) return 1;
    float* buf = (float*)(offs + 16);
    tap_offsets(&g, offs);
    const int64_t tw = a->tw, n = tw < VL ? tw : VL, C = a->C, ld = a->ld;
    for (int64_t c = c0; c < c1; ++c) {
        fill_plane_rows(&g, a->x + c * a->H * a->W, 0.0f, buf, a->i0, a->i1 + 1);
        for (int64_t i = a->i0; i < a->i1; ++i)
            for (int64_t j = 0; j >= 0; j = next_vector(j, tw)) {
                const float* src = buf + i * g.Qw + j;
                vfloat t[4][4];  /* B^T d, row by row */
                for (int col = 0; col < 4; ++col) {
                    const vfloat d0 = vload(src + offs[col]), d1 = vload(src + offs[4 + col]);
                    const vfloat d2 = vload(src + offs[8 + col]), d3 = vload(src + offs[12 + col]);
                    t[0][col] = d0 - d2;
                    t[1][col] = d1 + d2;
                    t[2][col] = d2 - d1;
                    t[3][col] = d1 - d3;
                }
                float* out = a->V + c * ld + a->col0 + (i - a->i0) * tw + j;
                const int64_t k_stride = C * ld;
                for (int u = 0; u < 4; ++u) {  /* ... B */
                    vstore(out + (4 * u + 0) * k_stride, t[u][0] - t[u][2], n, 0);
                    vstore(out + (4 * u + 1) * k_stride, t[u][1] + t[u][2], n, 0);
                    vstore(out + (4 * u + 2) * k_stride, t[u][2] - t[u][1], n, 0);
                    vstore(out + (4 * u + 3) * k_stride, t[u][1] - t[u][3], n, 0);
                }
            }
    }
    free(offs);
    return 0;
}

static void input_part(void* ctx, int64_t part, int64_t parts) {
    InputArgs* a = ctx;
    int64_t c0, c1;
    pool_range(a->C, 1, part, parts, &c0, &c1);
    if (c0 < c1 && input_channels(a, c0, c1)) a->status = 1;
}

/* The channels are split across the pool's threads (pool_threads.h), 16 stores per tile each. */
int winograd_f2k3_input_f32(const float* x, float* V, int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw,
                            int64_t th, int64_t tw, int64_t i0, int64_t i1, int64_t ld, int64_t col0) {
    InputArgs a = {x, V, C, H, W, ph, pw, th, tw, i0, i1, ld, col0, 0};
    const int64_t per_channel = 64 * (i1 - i0) * (tw + VL) + 1;
    pool_run(input_part, &a, pool_parts(C, (POOL_MIN_WORK + per_channel - 1) / per_channel));
    return a.status;
}

typedef struct {
    const float *Mo, *bias;
    float* y;
    int64_t M, OH, OW, tw, i0, i1, ld, col0;
    float lo, hi;
} OutputArgs;

/* Output channels [m_lo, m_hi) of winograd_f2k3_output_f32. */
static void output_channels(const OutputArgs* p, int64_t m_lo, int64_t m_hi) {
    const float *Mo = p->Mo, *bias = p->bias;
    float* y = p->y;
    const int64_t M = p->M, OH = p->OH, OW = p->OW, tw = p->tw, i0 = p->i0, i1 = p->i1, ld = p->ld, col0 = p->col0;
    const float lo = p->lo, hi = p->hi;
    const int64_t k_stride = M * ld;
    for (int64_t m = m_lo; m < m_hi; ++m) {
        const float b = bias ? bias[m] : 0.0f;
        float* ym = y + m * OH * OW;
        for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = 0; j >= 0; j = next_vector(j, tw)) {
                const float* src = Mo + m * ld + col0 + (i - i0) * tw + j;
                vfloat s[2][4];  /* A^T Mo, column by column */
                for (int v = 0; v < 4; ++v) {
                    const vfloat m0 = vload(src + v * k_stride), m1 = vload(src + (4 + v) * k_stride);
                    const vfloat m2 = vload(src + (8 + v) * k_stride), m3 = vload(src + (12 + v) * k_stride);
                    s[0][v] = m0 + m1 + m2;
                    s[1][v] = m1 - m2 - m3;
                }
                for (int a = 0; a < 2 && 2 * i + a < OH; ++a) {  /* ... A, interleaved into row 2i + a */
                    const vfloat e = vclamp(s[a][0] + s[a][1] + s[a][2] + b, lo, hi);
                    const vfloat o = vclamp(s[a][1] - s[a][2] - s[a][3] + b, lo, hi);
                    float fe[VL], fo[VL], row[2 * VL];
                    memcpy(fe, &e, sizeof e);
                    memcpy(fo, &o, sizeof o);
                    for (int l = 0; l < VL; ++l) {
                        row[2 * l] = fe[l];
                        row[2 * l + 1] = fo[l];
                    }
                    const int64_t cells = OW - 2 * j < 2 * VL ? OW - 2 * j : 2 * VL;
                    float* dst = ym + (2 * i + a) * OW + 2 * j;
                    for (int64_t l = 0; l < cells; ++l) dst[l] = row[l];
                }
            }
    }
}

static void output_part(void* ctx, int64_t part, int64_t parts) {
    const OutputArgs* a = ctx;
    int64_t m_lo, m_hi;
    pool_range(a->M, 1, part, parts, &m_lo, &m_hi);
    output_channels(a, m_lo, m_hi);
}

/* The output channels are split across the pool's threads (pool_threads.h). */
int winograd_f2k3_output_f32(const float* Mo, const float* bias, float* y, int64_t M, int64_t OH, int64_t OW,
                             int64_t tw, int64_t i0, int64_t i1, int64_t ld, int64_t col0, float lo, float hi) {
    OutputArgs a = {Mo, bias, y, M, OH, OW, tw, i0, i1, ld, col0, lo, hi};
    const int64_t per_channel = 64 * (i1 - i0) * (tw + VL) + 1;
    pool_run(output_part, &a, pool_parts(M, (POOL_MIN_WORK + per_channel - 1) / per_channel));
    return 0;
}

/* gemm.c's gemm_f32 */
typedef int (*GemmF32)(const float*, const float*, int64_t, const float*, float*, int64_t, int64_t, int64_t,
                       int64_t, int64_t, float, float);

#define BLOCK_FLOATS (1 << 19)  /* V and Mo of one block of tile rows (about L2), at most (unless one row needs more) */

typedef struct {
    const struct conv_params* p;
    const float *x, *z;
    float* y;
    int64_t rows, blocks;  /* tile rows per block; blocks per image */
    int status;
} WinogradArgs;

/* Blocks [b0, b1) of all images' (block b: image b / blocks, tile rows from (b % blocks) rows): the input
 * transform, the 16 products and the output transform of each, in scratch of its own. */
static int winograd_blocks(const WinogradArgs* a, int64_t b0, int64_t b1) {
    const struct conv_params* p = a->p;
    const GemmF32 gemm = (GemmF32)(intptr_t)p->gemm;
    const int64_t C = p->C, M = p->M, OH = p->OH, OW = p->OW, th = (OH + 1) / 2, tw = (OW + 1) / 2;
    float* V = malloc(sizeof(float) * (size_t)(16 * (C + M) * a->rows * tw + VL));
    if (!V) return 1;
    float* Mo = V + 16 * C * a->rows * tw;
    const int store = conv_store_clamps(p, a->z);
    const float inf = __builtin_inff(), lo = store ? p->lo : -inf, hi = store ? p->hi : inf;
    int status = 0;
    for (int64_t b = b0; b < b1 && !status; ++b) {
        const int64_t n = b / a->blocks, i0 = b % a->blocks * a->rows, i1 = i0 + a->rows < th ? i0 + a->rows : th;
        const int64_t ld = (i1 - i0) * tw;
        const float* xn = a->x + n * C * p->H * p->W;
        float* yn = a->y + n * M * OH * OW;
        status = winograd_f2k3_input_f32(xn, V, C, p->H, p->W, p->ph, p->pw, th, tw, i0, i1, ld, 0);
        for (int64_t k = 0; k < 16 && !status; ++k)
            status = gemm(p->weights + k * p->wstride, V + k * C * ld, ld, NULL, Mo + k * M * ld, ld, M, C, ld,
                          p->rows, -inf, inf);
        if (status) break;
        winograd_f2k3_output_f32(Mo, p->bias, yn, M, OH, OW, tw, i0, i1, ld, 0, lo, hi);
        if (!store) {  /* the block's rows of each channel, one after another: one row of them all */
            const int64_t r0 = 2 * i0, r1 = 2 * i1 < OH ? 2 * i1 : OH, at = r0 * OW;
            for (int64_t m = 0; m < M; ++m)
                epilogue_rows(yn + m * OH * OW + at, 0, a->z ? a->z + (n * M + m) * OH * OW + at : NULL, 0, 0, 1,
                              (r1 - r0) * OW, p);
        }
    }
    free(V);
    return status;
}

static void winograd_part(void* ctx, int64_t part, int64_t parts) {
    WinogradArgs* a = ctx;
    int64_t b0, b1;
    pool_range(a->p->N * a->blocks, 1, part, parts, &b0, &b1);
    if (b0 < b1 && winograd_blocks(a, b0, b1)) a->status = 1;
}

/* A whole conv of p (conv_params.h: 3x3, stride and dilation 1, one group) by F(2x2, 3x3), y = act(conv(x)
 * + bias (+ z: a residual of y's shape, or NULL)): p->weights holds the 16 products' packed U[k]
 * (gemm_pack_f32 of M x C, layout p->rows), p->wstride floats apart, and p->gemm is gemm_f32, which
 * multiplies them (no weight is packed per call, as a BLAS would). Blocks of tile rows of one image at a
 * time, their scratch about L2; with at least two blocks per thread, the threads take whole blocks (the
 * transforms and products inside a part then run on its thread: the pool is busy), else each transform
 * and product is split across them. Returns 0, or 1 when out of memory. */
int winograd_f2k3_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y) {
    const int64_t OW = p->OW, th = (p->OH + 1) / 2, tw = (OW + 1) / 2;
    const int64_t per_row = 16 * (p->C + p->M) * tw;
    int64_t rows = BLOCK_FLOATS / (per_row > 0 ? per_row : 1);
    rows = rows < 1 ? 1 : rows > th ? th : rows;
    WinogradArgs a = {p, x, z, y, rows, (th + rows - 1) / rows, 0};
    const int64_t blocks = p->N * a.blocks, t = pool_get_threads(), most = POOL_PARTS_PER_THREAD * t;
    pool_run(winograd_part, &a, t > 1 && blocks >= 2 * t ? (blocks < most ? blocks : most) : 1);
    return a.status;
}

int winograd_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
