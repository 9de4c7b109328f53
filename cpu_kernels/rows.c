/* Row kernels, float32: the mean of each row (GlobalAveragePool), Softmax / LogSoftmax along rows and the
 * layer normalizations of transformers (LayerNormalization, the skip, embedding and RMS forms; the embedding
 * form gathering its rows by id too), one pass where NumPy makes four to ten over a small tensor. The same
 * arithmetic as the NumPy code: float32 sums, x - max(x) before exp, NaN anywhere in a row making its max
 * NaN, the statistics in two passes (the mean, then the mean square of the deviations). Returns 0
 * (embed_layernorm_f32: 1 for an out-of-range id). LRN's window sums over the channels too (lrn_f32). */
#include <math.h>
#include "vmath.h"
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
    const float s = vsum(a0 + a1);
    float tail = 0.0f;
    for (; i < n; ++i) tail += x[i];
    return s + tail;
}

/* y[r] = mean of row r of x (rows of n). */
int row_mean_f32(const float* x, float* y, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) y[r] = row_sum(x + r * n, n) / (float)n;
    return 0;
}

/* Reductions of rows (a program's ReduceSum, ReduceMean, ReduceSumSquare, ReduceMax, ReduceMin over the
 * trailing axes; ArgMax and ArgMin over the last): p = {rows, n, kind}; y float32, or int64 for the arg
 * kinds. Sums in VL lanes (row_sum's order, not NumPy's pairwise one: within the same float32 bound);
 * a NaN wins a max or min, and the first NaN an arg max or min, as NumPy's. */
enum { ROW_SUM, ROW_MEAN, ROW_SUM_SQUARE, ROW_MAX, ROW_MIN, ROW_ARGMAX, ROW_ARGMIN };

int reduce_rows_planned_f32(const int64_t* p, const float* x, const void* unused, void* out) {
    (void)unused;
    const int64_t rows = p[0], n = p[1], kind = p[2];
    float* y = out;
    int64_t* idx = out;
    float* sq = kind == ROW_SUM_SQUARE ? malloc(sizeof(float) * (size_t)(n ? n : 1)) : NULL;
    if (kind == ROW_SUM_SQUARE && !sq) return 1;
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        if (kind == ROW_SUM || kind == ROW_MEAN) {
            const float s = row_sum(xr, n);
            y[r] = kind == ROW_MEAN ? s / (float)n : s;
        } else if (kind == ROW_SUM_SQUARE) {
            for (int64_t i = 0; i < n; ++i) sq[i] = xr[i] * xr[i];
            y[r] = row_sum(sq, n);
        } else {
            const int larger = kind == ROW_MAX || kind == ROW_ARGMAX;
            float best = xr[0];
            int64_t at = 0;
            for (int64_t i = 1; i < n && best == best; ++i)
                if (xr[i] != xr[i] || (larger ? xr[i] > best : xr[i] < best)) best = xr[i], at = i;
            if (kind == ROW_MAX || kind == ROW_MIN)
                y[r] = best;
            else
                idx[r] = at;
        }
    }
    free(sq);
    return 0;
}

/* Rows [r0, r1) of softmax_rows_f32: the row's max (a NaN winning), e^(x - max) by vexp_neg (within 2 ulp)
 * summed in VL lanes, then divided by the sum (or x - max - log(sum)). */
static void softmax_rows(const float* x, float* y, int64_t r0, int64_t r1, int64_t n, int64_t log_) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        float m;
        const float s = vexp_row(xr, yr, n, !log_, &m);
        if (log_) {
            const float ls = logf(s);
            for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) - ls;
        } else {
            vscale_row(yr, n, 1.0f / s);
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

/* softmax_rows_f32 as a program step: p = {rows, n, log}. */
int softmax_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return softmax_rows_f32(x, y, p[0], p[1], p[2]);
}

/* The normalization of rows [r0, r1): see layernorm_f32. */
typedef struct {
    const float *x, *skip, *skip2, *bias, *gamma, *beta;
    float *y, *sum, *mean, *inv;
    int64_t rows, n, skip_rows, simplified;
    float epsilon;
} NormArgs;

/* The normalization of one row of n floats src into y (y may be src): see layernorm_f32. */
static inline void norm_row(const float* src, float* yr, const float* restrict g, const float* restrict b, int64_t n,
                            float epsilon, int64_t simplified, float* mean_out, float* inv_out) {
    const int64_t full = n / VL * VL, rest = n - full;
    vfloat acc = {0};
    for (int64_t i = 0; i < full; i += VL) acc += vload(src + i);
    if (rest) acc += vload_part(src + full, rest, 0.0f);
    const float mean = vsum(acc) / (float)n, shift = simplified ? 0.0f : mean;
    acc = (vfloat){0};
    for (int64_t i = 0; i < full; i += VL) {
        const vfloat d = vload(src + i) - shift;
        acc += d * d;
    }
    if (rest) {
        const vfloat d = vload_part(src + full, rest, shift) - shift;
        acc += d * d;
    }
    const float inv = 1.0f / sqrtf(vsum(acc) / (float)n + epsilon);
    if (b)
        for (int64_t i = 0; i < n; ++i) yr[i] = (src[i] - shift) * inv * g[i] + b[i];
    else
        for (int64_t i = 0; i < n; ++i) yr[i] = (src[i] - shift) * inv * g[i];
    if (mean_out) *mean_out = mean;
    if (inv_out) *inv_out = inv;
}

static void norm_rows(const NormArgs* a, int64_t r0, int64_t r1) {
    const int64_t n = a->n;
    for (int64_t r = r0; r < r1; ++r) {
        const float* restrict xr = a->x + r * n;
        float* yr = a->y + r * n;  /* may hold the sum: not restrict */
        const float* src = xr;
        if (a->skip || a->skip2 || a->bias) {  /* ((x + skip) + skip2) + bias, each rounded, kept in sum or y */
            float* s = a->sum ? a->sum + r * n : yr;
            const float* restrict k = a->skip ? a->skip + (r % a->skip_rows) * n : NULL;
            const float* restrict k2 = a->skip2 ? a->skip2 + r * n : NULL;
            const float* restrict c = a->bias;
            for (int64_t i = 0; i < n; ++i) s[i] = xr[i] + (k ? k[i] : 0.0f);
            if (k2)
                for (int64_t i = 0; i < n; ++i) s[i] += k2[i];
            if (c)
                for (int64_t i = 0; i < n; ++i) s[i] += c[i];
            src = s;
        }
        norm_row(src, yr, a->gamma, a->beta, n, a->epsilon, a->simplified, a->mean ? a->mean + r : NULL,
                 a->inv ? a->inv + r : NULL);
    }
}

static void norm_part(void* ctx, int64_t part, int64_t parts) {
    const NormArgs* a = ctx;
    int64_t r0, r1;
    pool_range(a->rows, 1, part, parts, &r0, &r1);
    norm_rows(a, r0, r1);
}

/* Layer normalization of rows of n floats, the statistics in float32: each row of x, plus (when not
 * NULL) row r % skip_rows of skip, row r of skip2 and the n values of bias, added in that order (the
 * sum kept in `sum` when not NULL); then y = (s - mean) / sqrt(var + epsilon) * gamma + beta (beta may
 * be NULL), or with `simplified` the RMS form y = s / sqrt(mean(s^2) + epsilon) * gamma. The row's
 * mean and 1 / sqrt(...) go to mean and inv when not NULL. The rows are split across the pool's
 * threads (pool_threads.h) from 16k elements per part. */
int layernorm_f32(const float* x, const float* skip, const float* skip2, const float* bias, const float* gamma,
                  const float* beta, float* y, float* sum, float* mean, float* inv, int64_t rows, int64_t n,
                  int64_t skip_rows, float epsilon, int64_t simplified) {
    NormArgs a = {x, skip, skip2, bias, gamma, beta, y, sum, mean, inv, rows, n, skip_rows, simplified, epsilon};
    pool_run(norm_part, &a, pool_parts(rows, (16384 + n) / (n + 1) + 1));
    return 0;
}

/* layernorm_f32 as a (wide) program step: p = {bias, gamma, beta (addresses or 0), rows, n, skip_rows,
 * epsilon (param_float), simplified}; skip: SkipLayerNormalization's (NULL: none); sum: its input + skip +
 * bias output (NULL: not wanted). */
int layernorm_planned_f32(const int64_t* p, const float* x, const float* skip, float* y, const void* unused,
                          float* sum) {
    (void)unused;
    return layernorm_f32(x, skip, NULL, (const float*)(intptr_t)p[0], (const float*)(intptr_t)p[1],
                         (const float*)(intptr_t)p[2], y, sum, NULL, NULL, p[3], p[4], p[5], param_float(p, 6), p[7]);
}

/* embed_layernorm_f32's arguments but its inputs and outputs, set once per node by the caller's plan
 * (gpuops/ops/cpu/embedding.py, EmbedPlan), so that a call converts thirteen arguments rather than
 * twenty-two: the tables (words, positions and segments rows of n floats; segment NULL: none), gamma and
 * beta (n floats; beta NULL: none) and epsilon. */
struct embed_plan {
    const float *word, *position, *segment, *gamma, *beta;
    int64_t n, words, positions, segments;
    float epsilon;
};

typedef struct {
    const struct embed_plan* p;
    const void *ids, *segment_ids, *position_ids;
    float *y, *sum;
    int64_t rows, seq, position_count, wide;
    int failed;
} EmbedArgs;

/* Row `row` of a table of `count` rows from the id at i of ids (int64 when wide, else int32; an int64 one
 * wrapped to int32 first with `narrow`, as a Cast would), negative ids counting from the end; -1 when out of
 * range. */
static inline int64_t table_row(const void* ids, int64_t wide, int64_t narrow, int64_t i, int64_t count) {
    int64_t v = wide ? ((const int64_t*)ids)[i] : ((const int32_t*)ids)[i];
    if (wide && narrow) v = (int32_t)v;
    if (v < 0) v += count;
    return v >= 0 && v < count ? v : -1;
}

static void embed_rows(EmbedArgs* a, int64_t r0, int64_t r1) {
    const struct embed_plan* p = a->p;
    const int64_t n = p->n;
    const float* segment = a->segment_ids ? p->segment : NULL;
    const int64_t narrow = a->wide & 16;
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t w = table_row(a->ids, a->wide & 1, narrow, r, p->words);
        const int64_t t = a->position_ids ? table_row(a->position_ids, a->wide & 4, 0, r % a->position_count,
                                                      p->positions)
                                          : r % a->seq;
        const int64_t g = segment ? table_row(a->segment_ids, a->wide & 2, narrow, r, p->segments) : 0;
        if (w < 0 || t < 0 || g < 0) {
            a->failed = 1;
            return;
        }
        const float* restrict wr = p->word + w * n;
        const float* restrict pr = p->position + t * n;
        float* yr = a->y + r * n;
        float* s = a->sum ? a->sum + r * n : yr;
        for (int64_t i = 0; i < n; ++i) s[i] = wr[i] + pr[i];
        if (segment) {
            const float* restrict gr = segment + g * n;
            for (int64_t i = 0; i < n; ++i) s[i] += gr[i];
        }
        norm_row(s, yr, p->gamma, p->beta, n, p->epsilon, 0, NULL, NULL);
    }
}

static void embed_part(void* ctx, int64_t part, int64_t parts) {
    EmbedArgs* a = ctx;
    int64_t r0, r1;
    pool_range(a->rows, 1, part, parts, &r0, &r1);
    embed_rows(a, r0, r1);
}

/* com.microsoft EmbedLayerNormalization of batch x seq ids, rows of p->n floats: row r (= b * seq + s) is
 * (word[ids[r]] + position[t]) + segment[segment_ids[r]] (no segment unless both p->segment and segment_ids
 * are set; each sum rounded), t being position_ids[r % position_count] (position_ids NULL: s), kept in
 * `sum` when not NULL; then normalized as layernorm_f32's rows, y = (s - mean) / sqrt(var + epsilon) *
 * gamma + beta. Ids are int32, or int64 where `wide` has bit 1 (ids), 2 (segment_ids), 4 (position_ids) or
 * 8 (mask); with 16, the int64 ids and mask but the position ids are wrapped to int32 first (gpuops'
 * private CastEmbedLayerNormalization: the Casts of an exporter's int64 inputs taken in). Negative ids count
 * from the end of their table. mask_index (when not NULL) gets, per batch
 * row, the count of 1s in that row of mask (batch x mask_cols; NULL: 0). The rows are split across the
 * pool's threads (pool_threads.h) from 16k elements per part. Returns 0, or 1 when an id is out of range (y
 * and sum then hold garbage). */
int embed_layernorm_f32(const struct embed_plan* p, const void* ids, const void* segment_ids,
                        const void* position_ids, const void* mask, float* y, float* sum, int32_t* mask_index,
                        int64_t batch, int64_t seq, int64_t position_count, int64_t mask_cols, int64_t wide) {
    EmbedArgs a = {p, ids, segment_ids, position_ids, y, sum, batch * seq, seq, position_count, wide, 0};
    const int64_t rows = batch * seq, n = p->n;
    pool_run(embed_part, &a, pool_parts(rows, (16384 + n) / (n + 1) + 1));
    if (a.failed) return 1;
    if (mask_index) {
        for (int64_t b = 0; b < batch; ++b) {
            int32_t c = 0;
            if (mask && (wide & 8)) {
                const int64_t* m = (const int64_t*)mask + b * mask_cols;
                if (wide & 16)
                    for (int64_t j = 0; j < mask_cols; ++j) c += (int32_t)m[j] == 1;
                else
                    for (int64_t j = 0; j < mask_cols; ++j) c += m[j] == 1;
            } else if (mask) {
                const int32_t* m = (const int32_t*)mask + b * mask_cols;
                for (int64_t j = 0; j < mask_cols; ++j) c += m[j] == 1;
            }
            mask_index[b] = c;
        }
    }
    return 0;
}

/* layernorm_channels_f32's arguments: `outer` blocks of c planes of hw floats. */
typedef struct {
    const float *x, *gamma, *beta;
    float *y, *mean, *inv;
    int64_t outer, c, hw, planes;
    float epsilon;
} ChannelNormArgs;

/* Positions [p, p + m) (m <= VL) of block o: the statistics of VL positions at once, one lane each, summed
 * over the c channels in order; the results go to y's planes as x's, or to its rows (c floats per
 * position), VL channels at a time as a transposed tile. */
static void channel_norm_block(const void* args, int64_t o, int64_t p, int64_t m) {
    const ChannelNormArgs* a = args;
    const int64_t c = a->c, hw = a->hw;
    const float* x = a->x + o * c * hw + p;
    vfloat acc = {0};
    for (int64_t k = 0; k < c; ++k) acc += m == VL ? vload(x + k * hw) : vload_part(x + k * hw, m, 0.0f);
    const vfloat mean = acc / (float)c;
    acc = (vfloat){0};
    for (int64_t k = 0; k < c; ++k) {
        const vfloat d = (m == VL ? vload(x + k * hw) : vload_part(x + k * hw, m, 0.0f)) - mean;
        acc += d * d;
    }
    vfloat inv;
    for (int j = 0; j < VL; ++j) inv[j] = 1.0f / sqrtf(acc[j] / (float)c + a->epsilon);
    if (a->planes) {
        float* y = a->y + o * c * hw + p;
        for (int64_t k = 0; k < c; ++k) {
            const vfloat v = m == VL ? vload(x + k * hw) : vload_part(x + k * hw, m, 0.0f);
            const vfloat r = (v - mean) * inv * a->gamma[k] + (a->beta ? a->beta[k] : 0.0f);
            if (m == VL)
                memcpy(y + k * hw, &r, sizeof r);
            else
                vstore_part(y + k * hw, r, m);
        }
    } else {
        float* y = a->y + (o * hw + p) * c;
        for (int64_t k0 = 0; k0 < c; k0 += VL) {
            const int64_t kn = c - k0 < VL ? c - k0 : VL;
            vfloat t[VL];
            for (int64_t k = 0; k < VL; ++k) {
                if (k >= kn) {
                    t[k] = (vfloat){0};
                    continue;
                }
                const float* xk = x + (k0 + k) * hw;
                const vfloat v = m == VL ? vload(xk) : vload_part(xk, m, 0.0f);
                t[k] = (v - mean) * inv * a->gamma[k0 + k] + (a->beta ? a->beta[k0 + k] : 0.0f);
            }
            transpose_tile(t);
            for (int64_t j = 0; j < m; ++j) {
                if (kn == VL)
                    memcpy(y + j * c + k0, &t[j], sizeof t[j]);
                else
                    vstore_part(y + j * c + k0, t[j], kn);
            }
        }
    }
    if (a->mean) vstore_part(a->mean + o * hw + p, mean, m);  /* m == VL: vstore_part's mask is all ones */
    if (a->inv) vstore_part(a->inv + o * hw + p, inv, m);
}

/* Part `part` of the blocks of VL positions of `outer` blocks of planes of hw floats: block(a, o, p, m) for
 * each, positions [p, p + m) of block o. */
static inline void position_blocks(const void* a, int64_t outer, int64_t hw, int64_t part, int64_t parts,
                                   void (*block)(const void*, int64_t, int64_t, int64_t)) {
    const int64_t blocks = (hw + VL - 1) / VL;
    int64_t lo, hi;
    pool_range(outer * blocks, 1, part, parts, &lo, &hi);
    for (int64_t i = lo; i < hi; ++i) {
        const int64_t o = i / blocks, p = i % blocks * VL;
        block(a, o, p, hw - p < VL ? hw - p : VL);
    }
}

static void channel_norm_part(void* ctx, int64_t part, int64_t parts) {
    const ChannelNormArgs* a = ctx;
    position_blocks(a, a->outer, a->hw, part, parts, channel_norm_block);
}

/* Layer normalization over the channels of channels-first data (LayerNormalization over the last axis of
 * a channels-last view of it, as ConvNeXt's permute -> LayerNorm exports it): x holds `outer` blocks of c
 * planes of hw floats; position q = o * hw + p is normalized over its c values x[(o * c + k) * hw + p], the
 * statistics in float32 in two passes, and y = (x - mean) / sqrt(var + epsilon) * gamma + beta (beta may be
 * NULL) written channels-last, y[q * c + k], or with `planes` channels-first as x, y[(o * c + k) * hw + p].
 * mean[q] and inv[q] (1 / sqrt(...)) when not NULL. */
int layernorm_channels_f32(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* inv,
                           int64_t outer, int64_t c, int64_t hw, float epsilon, int64_t planes) {
    ChannelNormArgs a = {x, gamma, beta, y, mean, inv, outer, c, hw, planes, epsilon};
    const int64_t blocks = outer * ((hw + VL - 1) / VL);
    pool_run(channel_norm_part, &a, pool_parts(blocks, (16384 + c * VL) / (c * VL + 1) + 1));
    return 0;
}

/* layernorm_channels_f32 as a program step, Y as X: p = {gamma, beta (addresses), outer, c, hw, epsilon
 * (param_float)}. */
int layernorm_channels_planned_f32(const int64_t* p, const float* x, const void* unused, float* y) {
    (void)unused;
    return layernorm_channels_f32(x, (const float*)(intptr_t)p[0], (const float*)(intptr_t)p[1], y, NULL, NULL, p[2],
                                  p[3], p[4], param_float(p, 5), 1);
}

/* lrn_f32's arguments: `outer` blocks of c planes of hw floats. */
typedef struct {
    const float* x;
    float* y;
    int64_t outer, c, hw, before, after;
    float alpha, beta, bias;
} LrnArgs;

/* Positions [p, p + m) (m <= VL) of block o, VL at once: each channel's window of squares summed in the
 * order of the channels (as the generic op adds its shifted slices), then y = x / (bias + alpha s)^beta. */
static void lrn_block(const void* args, int64_t o, int64_t p, int64_t m) {
    const LrnArgs* a = args;
    const int64_t c = a->c, hw = a->hw;
    const float* x = a->x + o * c * hw + p;
    float* y = a->y + o * c * hw + p;
    for (int64_t k = 0; k < c; ++k) {
        const int64_t j0 = k - a->before > 0 ? k - a->before : 0, j1 = k + a->after < c ? k + a->after + 1 : c;
        vfloat s = {0};
        for (int64_t j = j0; j < j1; ++j) {
            const vfloat v = m == VL ? vload(x + j * hw) : vload_part(x + j * hw, m, 0.0f);
            const vfloat q = v * v;  /* rounded before the sum, as x * x is */
            s = s + q;
        }
        const vfloat d = a->alpha * s;
        const vfloat base = a->bias + d;
        vfloat den;
        if (a->beta == 0.75f) {  /* d^(3/4) = sqrt(d) sqrt(sqrt(d)): within 2 ulp of powf, vectorized */
            vfloat r;
            for (int l = 0; l < VL; ++l) r[l] = sqrtf(base[l]);
            for (int l = 0; l < VL; ++l) den[l] = r[l] * sqrtf(r[l]);
        } else {
            for (int l = 0; l < VL; ++l) den[l] = powf(base[l], a->beta);
        }
        const vfloat v = m == VL ? vload(x + k * hw) : vload_part(x + k * hw, m, 0.0f);
        const vfloat r = v / den;
        if (m == VL)
            memcpy(y + k * hw, &r, sizeof r);
        else
            vstore_part(y + k * hw, r, m);
    }
}

static void lrn_part(void* ctx, int64_t part, int64_t parts) {
    const LrnArgs* a = ctx;
    position_blocks(a, a->outer, a->hw, part, parts, lrn_block);
}

/* LRN over the channels of x (`outer` blocks of c planes of hw floats): y = x / (bias + alpha s)^beta, s the
 * sum of the squares over channels [k - before, k + after] (alpha: the op's alpha / size). */
int lrn_f32(const float* x, float* y, int64_t outer, int64_t c, int64_t hw, int64_t before, int64_t after,
            float alpha, float beta, float bias) {
    LrnArgs a = {x, y, outer, c, hw, before, after, alpha, beta, bias};
    const int64_t blocks = outer * ((hw + VL - 1) / VL), per_block = c * (before + after + 2) * VL;
    pool_run(lrn_part, &a, pool_parts(blocks, (POOL_MIN_WORK + per_block - 1) / per_block));
    return 0;
}

int rows_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
