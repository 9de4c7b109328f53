/* Scaled dot-product attention of a packed Q|K|V projection (com.microsoft Attention), float32,
 * one pass per (batch, head): the scores of each query row, their additive masks, the softmax and the
 * weighted sum of the value rows, written in the merged-heads layout. The arithmetic of the NumPy code
 * (gpuops/ops/contrib/transformer.py): score = (q . k) / divisor + mask (the divisor 1 / scale: the
 * exporters' Div of the scores by sqrt(head size), bit for bit, which a dynamically quantized model's
 * next rounding to 8 bits can tell from a product by 1 / sqrt(head size)), the mask being filter where a
 * key is masked plus filter again where it lies after the query (causal); softmax as rows.c's (e^(s -
 * max) within 2 ulp, times 1 / sum); the output's sums of products over the keys in four interleaved parts. Returns 0,
 * or 1 when its scratch cannot be allocated. */
#include <math.h>
#include "blas.h"
#include "vmath.h"
#include "pool_threads.h"

typedef struct {
    const float* qkv;
    const float* past;
    const int32_t* key_range;
    const uint8_t* masked;
    float* y;
    float* present;
    int64_t batch, seq, past_len, heads, hq, hv, key_form, mask_rows, causal;
    float divisor, filter;
    int failed;
} AttentionArgs;

/* Key (value) t of pair p (batch p / heads, head h = p % heads), whose batch's rows start at base: the
 * past's for t < past_len, the projection's after. */
static inline const float* key_row(const AttentionArgs* a, const float* base, int64_t p, int64_t h, int64_t t) {
    const int64_t P = a->past_len, N = a->heads;
    if (t < P) return a->past + (p * P + t) * a->hq;
    return base + (t - P) * N * (2 * a->hq + a->hv) + N * a->hq + h * a->hq;
}

static inline const float* value_row(const AttentionArgs* a, const float* base, int64_t p, int64_t h, int64_t t) {
    const int64_t P = a->past_len, N = a->heads;
    if (t < P) return a->past + (a->batch * N * P + p * P + t) * a->hv;
    return base + (t - P) * N * (2 * a->hq + a->hv) + 2 * N * a->hq + h * a->hv;
}

/* Columns [j0, j0 + m) of value t (m <= VL, other lanes 0): the past's rows (hv apart) for t < P, the
 * projection's (ld apart) after. */
static inline vfloat value_part(const float* past_v, const float* new_v, int64_t t, int64_t P, int64_t hv,
                                int64_t ld, int64_t j0, int64_t m) {
    const float* v = (t < P ? past_v + t * hv : new_v + (t - P) * ld) + j0;
    return m == VL ? vload(v) : vload_part(v, m, 0.0f);
}

/* Pairs (batch, head) [p0, p1), with scratch kt (hq rows of tp floats) and sc (tp floats). */
static void attention_pairs(const AttentionArgs* a, int64_t p0, int64_t p1, float* kt, float* sc) {
    const int64_t S = a->seq, P = a->past_len, N = a->heads, hq = a->hq, hv = a->hv, ld = N * (2 * hq + hv);
    const int64_t T = P + S, tp = (T + VL - 1) / VL * VL, has_key = a->key_form || a->masked;
    const int64_t cache = a->batch * N * T * hv;  /* the present's K / V halves */
    const vfloat filter = vsplat(a->filter);
    vfloat lanes;  /* 0, 1, ..., VL - 1 */
    for (int j = 0; j < VL; ++j) lanes[j] = (float)j;
    for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / N, h = p % N;
        const float* base = a->qkv + b * S * ld;
        if (a->present)
            for (int64_t t = 0; t < T; ++t) {
                memcpy(a->present + (p * T + t) * hq, key_row(a, base, p, h, t), sizeof(float) * hq);
                memcpy(a->present + cache + (p * T + t) * hv, value_row(a, base, p, h, t), sizeof(float) * hv);
            }
        for (int64_t t = 0; t < T; ++t) {  /* K^T of this head, rows padded with zeros */
            const float* k = key_row(a, base, p, h, t);
            for (int64_t j = 0; j < hq; ++j) kt[j * tp + t] = k[j];
        }
        for (int64_t j = 0; j < hq; ++j)
            for (int64_t t = T; t < tp; ++t) kt[j * tp + t] = 0.0f;
        const float* past_v = value_row(a, base, p, h, 0);  /* when P > 0 */
        const float* new_v = value_row(a, base, p, h, P);
        int64_t lo = 0, hi = T;  /* keys outside [lo, hi) are masked (key lengths and starts) */
        if (a->key_form) {
            hi = a->key_range[b];
            if (a->key_form == 2) lo = a->key_range[a->batch + b];
        }
        for (int64_t s = 0; s < S; ++s) {
            const float* q = base + s * ld + h * hq;
            for (int64_t t = 0; t < tp; t += VL) {  /* q . k of VL keys; j even and odd in two chains */
                vfloat a0 = {0}, a1 = {0};
                int64_t j = 0;
                for (; j + 2 <= hq; j += 2) {
                    a0 = vfma(vsplat(q[j]), vload(kt + j * tp + t), a0);
                    a1 = vfma(vsplat(q[j + 1]), vload(kt + (j + 1) * tp + t), a1);
                }
                if (j < hq) a0 = vfma(vsplat(q[j]), vload(kt + j * tp + t), a0);
                const vfloat acc = (a0 + a1) / a->divisor;
                memcpy(sc + t, &acc, sizeof acc);
            }
            if (tp == VL && !a->masked) {  /* one vector of keys: the masks and the softmax in registers */
                vfloat x;
                memcpy(&x, sc, sizeof x);
                if (has_key || a->causal) {
                    const vfloat km = vselect((lanes < (float)lo) | (lanes >= (float)hi), filter, (vfloat){0});
                    const vfloat cm = vselect(lanes > (float)(s + P), filter, (vfloat){0});
                    x += has_key ? (a->causal ? km + cm : km) : cm;
                }
                x = vselect(lanes < (float)T, x, vsplat(-INFINITY));  /* vexp_row's padding */
                const float m = vmax_lanes(vmax_nan(vsplat(-INFINITY), x));
                const vfloat e = vexp_neg(x - m);
                const vfloat pr = e * (1.0f / vsum((vfloat){0} + e));
                memcpy(sc, &pr, sizeof pr);
            } else {
            if (has_key || a->causal) {
                const uint8_t* raw = a->masked ? a->masked + (b * a->mask_rows + (a->mask_rows > 1 ? s : 0)) * T : NULL;
                for (int64_t t = 0; t < T; ++t) {
                    const int key = raw ? raw[t] != 0 : (t < lo || t >= hi);
                    const float km = key ? a->filter : 0.0f, cm = t > s + P ? a->filter : 0.0f;
                    sc[t] += has_key ? (a->causal ? km + cm : km) : cm;
                }
            }
            float max;
            vscale_row(sc, T, 1.0f / vexp_row(sc, sc, T, 1, &max));  /* the softmax, as rows.c's */
            }
            float* out = a->y + (b * S + s) * N * hv + h * hv;
            for (int64_t j0 = 0; j0 < hv; j0 += VL) {  /* the weighted values, VL columns at a time */
                const int64_t m = hv - j0 < VL ? hv - j0 : VL;
                vfloat a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};  /* keys t mod 4: four chains of adds, not one */
                int64_t t = 0;
                for (; t + 4 <= T; t += 4) {
                    a0 = vfma(vsplat(sc[t]), value_part(past_v, new_v, t, P, hv, ld, j0, m), a0);
                    a1 = vfma(vsplat(sc[t + 1]), value_part(past_v, new_v, t + 1, P, hv, ld, j0, m), a1);
                    a2 = vfma(vsplat(sc[t + 2]), value_part(past_v, new_v, t + 2, P, hv, ld, j0, m), a2);
                    a3 = vfma(vsplat(sc[t + 3]), value_part(past_v, new_v, t + 3, P, hv, ld, j0, m), a3);
                }
                for (; t < T; ++t) a0 = vfma(vsplat(sc[t]), value_part(past_v, new_v, t, P, hv, ld, j0, m), a0);
                const vfloat acc = (a0 + a1) + (a2 + a3);
                if (m == VL)
                    memcpy(out + j0, &acc, sizeof acc);
                else
                    vstore_part(out + j0, acc, m);
            }
        }
    }
}

static void attention_part(void* ctx, int64_t part, int64_t parts) {
    AttentionArgs* a = ctx;
    int64_t p0, p1;
    pool_range(a->batch * a->heads, 1, part, parts, &p0, &p1);
    if (p0 >= p1) return;
    const int64_t tp = (a->past_len + a->seq + VL - 1) / VL * VL;
    float* scratch = malloc(sizeof(float) * (a->hq + 1) * tp);
    if (!scratch) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    attention_pairs(a, p0, p1, scratch, scratch + a->hq * tp);
    free(scratch);
}

/* Attention over qkv (batch, seq, heads * (2 * hq + hv)): each row Q (heads * hq), K (heads * hq), V (heads *
 * hv), head-major; y (batch, seq, heads * hv). With past (2, batch, heads, past_len, hq) (hq == hv), its keys
 * and values come first: T = past_len + seq keys; present, when not NULL, gets all of them (2, batch,
 * heads, T, hq). Keys masked (filter added to their scores): with key_form 1, those at or past
 * key_range[b]; with key_form 2 also those before key_range[batch + b]; or, with `masked` (batch,
 * mask_rows, T) of 0/1 bytes (mask_rows 1 or seq), those marked 1; with causal, filter is added again to
 * the keys after the query (key t > past_len + s). The (batch, head) pairs are split across the pool's
 * threads (pool_threads.h). */
int attention_f32(const float* qkv, const float* past, const int32_t* key_range, const uint8_t* masked, float* y,
                  float* present, int64_t batch, int64_t seq, int64_t past_len, int64_t heads, int64_t hq,
                  int64_t hv, int64_t key_form, int64_t mask_rows, int64_t causal, float divisor, float filter) {
    AttentionArgs a = {qkv, past, key_range, masked, y, present, batch, seq, past_len, heads, hq, hv, key_form,
                       mask_rows, causal, divisor, filter, 0};
    const int64_t work = seq * (seq + past_len) * (hq + hv) + 1;  /* multiply-adds per pair */
    pool_run(attention_part, &a, pool_parts(batch * heads, POOL_MIN_WORK / work + 1));
    return a.failed;
}

/* Store v (plus the bias's bv when bias is set) as m <= VL columns at p. */
static inline void store_cols(float* p, vfloat v, const float* bias, vfloat bv, int64_t m) {
    if (bias) v += bv;
    if (m == VL)
        memcpy(p, &v, sizeof v);
    else
        vstore_part(p, v, m);
}

/* qkv = x w + bias (x: rows of d, w: d rows of n, bias NULL or n): each output's sum of d products over k in
 * order, then the bias added (np.matmul's product, then np.add's; the sums' order, not their terms, may
 * differ from a BLAS's). A vector of columns of four rows at a time: four chains of multiply-adds sharing
 * each load of w. */
static void project_rows(const float* x, const float* w, const float* bias, float* qkv, int64_t rows, int64_t d,
                         int64_t n) {
    for (int64_t c0 = 0; c0 < n; c0 += VL) {
        const int64_t m = n - c0 < VL ? n - c0 : VL;
        const vfloat bv = !bias ? (vfloat){0} : m == VL ? vload(bias + c0) : vload_part(bias + c0, m, 0.0f);
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            const float* x0 = x + r * d;
            vfloat a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t k = 0; k < d; ++k) {
                const vfloat wv = m == VL ? vload(w + k * n + c0) : vload_part(w + k * n + c0, m, 0.0f);
                a0 = vfma(vsplat(x0[k]), wv, a0);
                a1 = vfma(vsplat(x0[d + k]), wv, a1);
                a2 = vfma(vsplat(x0[2 * d + k]), wv, a2);
                a3 = vfma(vsplat(x0[3 * d + k]), wv, a3);
            }
            store_cols(qkv + r * n + c0, a0, bias, bv, m);
            store_cols(qkv + (r + 1) * n + c0, a1, bias, bv, m);
            store_cols(qkv + (r + 2) * n + c0, a2, bias, bv, m);
            store_cols(qkv + (r + 3) * n + c0, a3, bias, bv, m);
        }
        for (; r < rows; ++r) {
            vfloat a0 = {0};
            for (int64_t k = 0; k < d; ++k) {
                const vfloat wv = m == VL ? vload(w + k * n + c0) : vload_part(w + k * n + c0, m, 0.0f);
                a0 = vfma(vsplat(x[r * d + k]), wv, a0);
            }
            store_cols(qkv + r * n + c0, a0, bias, bv, m);
        }
    }
}

/* attention_planned_f32's arguments but its input, mask and output, set once per weight and input shape by
 * the caller's plan (gpuops/ops/cpu/attention.py, AttentionPlan), so that a call converts four arguments
 * rather than seventeen. */
struct attention_plan {
    const float* w;  /* (d, heads * (2 * hq + hv)) */
    const float* bias;  /* heads * (2 * hq + hv) floats, or NULL */
    int64_t batch, seq, d, heads, hq, hv, key_form, mask_rows, causal;
    float divisor, filter;
};

/* attention_f32 of the projection of x (batch, seq, d) by p->w plus p->bias, computed here into scratch
 * (project_rows) on the calling thread: for small inputs, where a BLAS call, the bias's pass and the array
 * between them cost more than the products. No past, no present; key_range and masked as attention_f32's. */
int attention_planned_f32(const struct attention_plan* p, const float* x, const int32_t* key_range,
                          const uint8_t* masked, float* y) {
    const int64_t n = p->heads * (2 * p->hq + p->hv), rows = p->batch * p->seq;
    float* qkv = malloc(sizeof(float) * (rows * n + 1));
    if (!qkv) return 1;
    project_rows(x, p->w, p->bias, qkv, rows, p->d, n);
    const int failed = attention_f32(qkv, NULL, key_range, masked, y, NULL, p->batch, p->seq, 0, p->heads, p->hq,
                                     p->hv, p->key_form, p->mask_rows, p->causal, p->divisor, p->filter);
    free(qkv);
    return failed;
}

int attention_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }

/* The program steps' mask (attention_program_f32's p): kind 0 none, 1 or 2 key ranges (the int32 mask_index of
 * batch or 2 batch values), 3 one int32 mask row of the T keys per batch, 4 one per query. A step's scratch
 * holds its projection qkv (rows x hidden floats), then for kinds 3 and 4 the masked bytes of the mask (mask
 * <= 0, as the op): NULL when out of memory. */
static float* step_scratch(int64_t rows, int64_t hidden, int64_t kind, const int32_t* mask, int64_t B, int64_t S,
                           int64_t T, uint8_t** masked) {
    const int64_t masked_n = kind == 3 ? B * T : kind == 4 ? B * S * T : 0;
    float* qkv = malloc(sizeof(float) * (size_t)(rows * hidden) + (size_t)masked_n + 1);
    *masked = NULL;
    if (qkv && masked_n) {
        *masked = (uint8_t*)(qkv + rows * hidden);
        for (int64_t i = 0; i < masked_n; ++i) (*masked)[i] = mask[i] <= 0;
    }
    return qkv;
}

/* attention_f32 of a step's qkv with its mask of that kind. */
static int step_attend(const float* qkv, const float* past, const int32_t* mask, const uint8_t* masked, float* y,
                       float* present, int64_t B, int64_t S, int64_t P, int64_t heads, int64_t hq, int64_t hv,
                       int64_t kind, int64_t causal, float divisor, float filter) {
    const int ranges = kind == 1 || kind == 2;
    return attention_f32(qkv, past, ranges ? mask : NULL, masked, y, present, B, S, P, heads, hq, hv, ranges ? kind : 0,
                         kind == 3 ? 1 : kind == 4 ? S : 0, causal, divisor, filter);
}

/* Attention as a (wide) program step (gpuops/onnx/programs.py): the packed projection qkv = x W + bias
 * by the BLAS (blas.h), into scratch, then attention_f32. p = {sgemm, 64-bit integers, W, bias (or 0), batch,
 * seq, D, hidden, heads, hq, hv, mask kind (step_scratch's), causal, divisor, filter (param_float), past length,
 * sgemv (a one-row projection's), openblas_get_num_threads (or 0)};
 * past, present: (2, batch, heads, past, hq) and (2, batch, heads, past + seq, hq), or NULL. */
int attention_program_f32(const int64_t* p, const float* x, const int32_t* mask, float* y, const float* past,
                          float* present) {
    const int64_t B = p[4], S = p[5], D = p[6], hidden = p[7], rows = B * S, kind = p[11], P = p[15];
    const float* w = (const float*)(intptr_t)p[2];
    const float* bias = (const float*)(intptr_t)p[3];
    uint8_t* masked;
    float* qkv = step_scratch(rows, hidden, kind, mask, B, S, P + S, &masked);
    if (!qkv) return 1;
    blas_product_parts((intptr_t)p[0], p[1], (intptr_t)p[16], (intptr_t)p[17], 0, rows, hidden, D, 1.0f, x, w, hidden,
                       qkv, hidden);
    if (bias)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < hidden; ++j) qkv[r * hidden + j] += bias[j];
    const int rc = step_attend(qkv, past, mask, masked, y, present, B, S, P, p[8], p[9], p[10], kind, p[12],
                               param_float(p, 13), param_float(p, 14));
    free(qkv);
    return rc;
}

typedef int (*qgemm_f32_fn)(const int64_t* p, const void* a, const void* za, const float* a_scale, float* y);

/* com.microsoft QAttention without past or present as a program step (wider: gpuops/onnx/programs.py): its
 * projection qkv = MatMulIntegerToFloat of x (8-bit; its scale x_scale, its zero point x_zp or NULL, both
 * read at run time) by qgemm.c's qgemm_f32 (an address, with its parameters), into scratch, then
 * attention_f32. p = {qgemm_f32, its parameters, batch, seq, hidden, heads, hq, hv, mask kind (step_scratch's),
 * causal, divisor, filter (param_float)}. */
int qattention_program_f32(const int64_t* p, const void* x, const float* x_scale, float* y, const void* x_zp,
                           float* unused, const int32_t* mask) {
    (void)unused;
    const int64_t B = p[2], S = p[3], hidden = p[4], kind = p[8];
    uint8_t* masked;
    float* qkv = step_scratch(B * S, hidden, kind, mask, B, S, S, &masked);
    if (!qkv) return 1;
    int rc = ((qgemm_f32_fn)(intptr_t)p[0])((const int64_t*)(intptr_t)p[1], x, x_zp, x_scale, qkv);
    if (!rc)
        rc = step_attend(qkv, NULL, mask, masked, y, NULL, B, S, 0, p[5], p[6], p[7], kind, p[9], param_float(p, 10),
                         param_float(p, 11));
    free(qkv);
    return rc;
}
