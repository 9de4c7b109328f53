/* Direct 2-D convolution, group 1, for inputs of few channels (a CNN's first layer: 3 image planes),
 * NCHW float32, without an im2col copy. Per image: the phase planes of every input channel (common.h);
 * then per VL cells of NR output rows, MB output channels at a time sum their C * KH * KW taps, each
 * tap's NR input vectors loaded once for all MB channels and each tap weight once for the NR rows; bias,
 * then clamped to [lo, hi] (a fused Relu or Clip). Returns 0, or 1 when out of memory. */

/* Sums as fused multiply-adds (one rounding per step, as BLAS kernels do): -std=c11 turns GCC's
 * contraction off (clang contracts within an expression). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#include <stdlib.h>
#include "common.h"
#include "conv_params.h"
#include "pool_threads.h"

#if defined(__AVX512F__)
#define MB 24  /* output channels summed together, MB vectors of sums in registers (of 32) */
#define MB_SMALL 16  /* for M a multiple of 16 and not of 24: no chunk left part empty */
#define MB_TINY 8  /* for fewer channels (a stem of 8) */
#define NR 1  /* output rows summed together */
#else
/* AVX2 (no broadcast operand in a multiply-add: a load per weight): 4 channels of 3 rows, 12 sums in
 * the 16 registers, load 7 vectors for 12 multiply-adds where 8 channels of a row loaded 9 for 8 (and
 * 8 sums were too few to hide the adds' latency): 1.2x faster on squeezenet's first conv (3 x 3 taps
 * of 3 planes, 64 channels). One chunk size: fewer channels, fewer sums, ran slower than the padding
 * of M to a multiple of 4 costs. */
#define MB 4
#define NR 3
#endif

/* Output channels [m0, m0 + mb) of the VL cells from (oy + r, ox), r < nr: mb and nr constants where
 * inlined, so that the sums stay in registers. */
static inline __attribute__((always_inline)) void chunk(int mb, int nr, const Windows* g, const int64_t* offs,
                                                        const float* buf, int64_t CK,
                                                        const float* wt, int64_t Mp, const float* bv, int64_t M,
                                                        int64_t m0, int64_t oy, int64_t ox, float* yn, float lo,
                                                        float hi, int64_t oy1) {
    const int64_t OW = g->OW, OHW = g->OH * OW, Qw = g->Qw;
    vfloat a[NR][MB];
#pragma GCC unroll 32
    for (int r = 0; r < nr; ++r)
#pragma GCC unroll 32
        for (int j = 0; j < mb; ++j) a[r][j] = vsplat(bv[m0 + j]);
    for (int64_t i = 0; i < CK; ++i) {  /* one loop over the taps of all channels: fewer exits to mispredict */
        const float* src = buf + offs[i] + oy * Qw + ox;
        vfloat v[NR];
#pragma GCC unroll 32
        for (int r = 0; r < nr; ++r) v[r] = vload(src + r * Qw);
        const float* wk = wt + i * Mp + m0;
#pragma GCC unroll 32
        for (int j = 0; j < mb; ++j) {
            const vfloat w = vsplat(wk[j]);
#pragma GCC unroll 32
            for (int r = 0; r < nr; ++r) a[r][j] += w * v[r];
        }
    }
    float* y0 = yn + m0 * OHW + oy * OW + ox;
    const int64_t n = OW < VL ? OW : VL, room = (oy1 - oy) * OW - ox;  /* a spill past the row stays in the part's rows */
#pragma GCC unroll 32
    for (int j = 0; j < mb; ++j)
        if (m0 + j < M)
#pragma GCC unroll 32
            for (int r = 0; r < nr; ++r) vstore(y0 + j * OHW + r * OW, vclamp(a[r][j], lo, hi), n, room - r * OW);
}

typedef struct {
    const Windows* g;
    const int64_t* offs;
    const float *buf, *wt, *bv;
    float* yn;
    int64_t CK, Mp, M, mb;
    float lo, hi;
} DirectArgs;

/* Output rows [oy, oy + nr) of every channel, mb channels along the rows at a time: the stores run
 * along mb * nr rows, streams that the prefetcher follows (the output is past L2 on a first conv), while
 * the rows' input stays in L1. */
static inline __attribute__((always_inline)) void span(const DirectArgs* a, int mb, int nr, int64_t oy,
                                                       int64_t oy1) {
    for (int64_t m0 = 0; m0 < a->M; m0 += mb)
        for (int64_t ox = 0; ox >= 0; ox = next_vector(ox, a->g->OW))
            chunk(mb, nr, a->g, a->offs, a->buf, a->CK, a->wt, a->Mp, a->bv, a->M, m0, oy, ox, a->yn,
                  a->lo, a->hi, oy1);
}

static inline __attribute__((always_inline)) void rows(const DirectArgs* a, int nr, int64_t oy, int64_t oy1) {
#if defined(MB_SMALL)
    if (a->mb == MB_TINY)
        span(a, MB_TINY, nr, oy, oy1);
    else if (a->mb == MB_SMALL)
        span(a, MB_SMALL, nr, oy, oy1);
    else
#endif
        span(a, MB, nr, oy, oy1);
}

/* Output rows [oy0, oy1) of one image, all channels, NR rows at a time (the last NR moved back to end
 * at oy1, recomputing a few; a part of fewer rows one at a time): each cell summed as in one part. */
static void direct_part(void* ctx, int64_t part, int64_t parts) {
    const DirectArgs* a = ctx;
    int64_t oy0, oy1;
    pool_range(a->g->OH, 1, part, parts, &oy0, &oy1);
    if (NR > 1 && oy1 - oy0 < NR) {
        for (int64_t oy = oy0; oy < oy1; ++oy) rows(a, 1, oy, oy1);
        return;
    }
    for (int64_t oy = oy0; oy < oy1; oy += NR) rows(a, NR, oy + NR <= oy1 ? oy : oy1 - NR, oy1);
}

/* Each image's output rows are split across the pool's threads (pool_threads.h) when each part gets
 * at least POOL_MIN_WORK multiply-adds. */
int direct_conv2d_f32(const float* x, const float* w, const float* bias, float* y, int64_t N, int64_t C,
                      int64_t H, int64_t W, int64_t M, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t sh,
                      int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, float lo, float hi) {
    const Windows g = windows(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw);
#if defined(MB_SMALL)
    /* the chunk that pads M least (the larger one on a tie) */
    const int64_t pad = (M + MB - 1) / MB * MB, pad_small = (M + MB_SMALL - 1) / MB_SMALL * MB_SMALL;
    const int mb = (M + MB_TINY - 1) / MB_TINY * MB_TINY < (pad < pad_small ? pad : pad_small) ? MB_TINY
                   : pad_small < pad ? MB_SMALL : MB;
#else
    const int mb = MB;
#endif
    const int64_t K = KH * KW, CK = C * K, P = planes_size(&g), Mp = (M + mb - 1) / mb * mb;
    int64_t* offs = malloc(sizeof(int64_t) * CK + sizeof(float) * (C * P + CK * Mp + Mp));
    if (!offs) return 1;
    float* buf = (float*)(offs + CK);  /* channel c's phase planes at buf + c * P */
    float* wt = buf + C * P;  /* tap (c, t) of output channel m at wt[(c * K + t) * Mp + m], 0 past M */
    float* bv = wt + CK * Mp;
    tap_offsets(&g, offs);  /* tap (c, t) reads from buf + offs[c * K + t] */
    for (int64_t i = K; i < CK; ++i) offs[i] = offs[i - K] + P;
    for (int64_t m = 0; m < Mp; ++m) {
        for (int64_t i = 0; i < CK; ++i) wt[i * Mp + m] = m < M ? w[m * CK + i] : 0.0f;
        bv[m] = m < M && bias ? bias[m] : 0.0f;
    }
    const int64_t per_row = CK * Mp * OW + 1;
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) fill_planes(&g, x + (n * C + c) * H * W, 0.0f, buf + c * P);
        DirectArgs a = {&g, offs, buf, wt, bv, y + n * M * OH * OW, CK, Mp, M, mb, lo, hi};
        pool_run(direct_part, &a, pool_parts(OH, (POOL_MIN_WORK + per_row - 1) / per_row));
    }
    free(offs);
    return 0;
}

/* direct_conv2d_f32 of p (conv_params.h: group 1), then z (a residual of y's shape, or NULL) and p's
 * activation when its store cannot apply them. */
int direct_conv2d_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y) {
    const int store = conv_store_clamps(p, z);
    const float inf = __builtin_inff();
    const int status = direct_conv2d_f32(x, p->weights, p->bias, y, p->N, p->C, p->H, p->W, p->M, p->KH, p->KW,
                                         p->OH, p->OW, p->sh, p->sw, p->ph, p->pw, p->dh, p->dw,
                                         store ? p->lo : -inf, store ? p->hi : inf);
    if (!status && !store) epilogue_rows_split(y, z, p->N * p->M, p->OH * p->OW, p);
    return status;
}

int direct_conv_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
