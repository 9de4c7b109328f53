/* Native programs: a run of planned kernels called in one go (gpuops/onnx/programs.py), and the small
 * planned kernels only programs need (copies into a concatenation, element-wise sums and products).
 *
 * A step calls fn(params, a, b, y): a planned kernel of this or another file (the *_planned_* functions,
 * whose parameters were set once per input shape). Its operands are locations: a byte offset into the
 * run's arena (>= 0), the external address ext[-1 - loc] (loc < 0: the program's inputs, outputs and
 * constants), or PROGRAM_NONE (NULL). */
#include "blas.h"
#include "common.h"

#define PROGRAM_NONE INT64_MIN

typedef int (*program_fn)(const void* params, const void* a, const void* b, void* y);
typedef int (*program_wide_fn)(const void* params, const void* a, const void* b, void* y, const void* c, void* z);
typedef int (*program_wider_fn)(const void* params, const void* a, const void* b, void* y, const void* c, void* z,
                                const void* d);

/* A step: fn (wide 1: a program_wide_fn, which also reads c and writes z; 2: a program_wider_fn, which
 * also reads d) and its locations. */
struct program_step {
    program_fn fn;
    const void* params;
    int64_t a, b, y, c, z, d, wide;
};

static inline void* locate(int64_t loc, char* arena, const int64_t* ext) {
    if (loc == PROGRAM_NONE) return NULL;
    return loc >= 0 ? (void*)(arena + loc) : (void*)(intptr_t)ext[-1 - loc];
}

/* Steps [0, n) in order; the first non-zero status is returned (a kernel's scratch allocation). */
int program_run(const struct program_step* steps, int64_t n, void* arena, const int64_t* ext) {
    char* base = arena;
    for (int64_t i = 0; i < n; ++i) {
        const struct program_step* s = steps + i;
        void *a = locate(s->a, base, ext), *b = locate(s->b, base, ext), *y = locate(s->y, base, ext);
        const int rc = s->wide == 2 ? ((program_wider_fn)s->fn)(s->params, a, b, y, locate(s->c, base, ext),
                                                                 locate(s->z, base, ext), locate(s->d, base, ext))
                       : s->wide ? ((program_wide_fn)s->fn)(s->params, a, b, y, locate(s->c, base, ext),
                                                            locate(s->z, base, ext))
                                 : s->fn(s->params, a, b, y);
        if (rc) return rc;
    }
    return 0;
}

/* p = {rows, bytes, stride, offset}: row r of a (bytes long) to y + r * stride + offset (one input of a
 * Concat: rows are the product of the dimensions before the axis). */
int copy_rows_planned(const int64_t* p, const void* a, const void* unused, void* y) {
    (void)unused;
    const int64_t rows = p[0], bytes = p[1], stride = p[2], offset = p[3];
    const char* src = a;
    char* dst = (char*)y + offset;
    for (int64_t r = 0; r < rows; ++r) memcpy(dst + r * stride, src + r * bytes, (size_t)bytes);
    return 0;
}

/* p = {rows, bytes, stride, offset}: row r of y (bytes long) from a + r * stride + offset (one output of a
 * Split). */
int copy_from_rows_planned(const int64_t* p, const void* a, const void* unused, void* y) {
    (void)unused;
    const int64_t rows = p[0], bytes = p[1], stride = p[2], offset = p[3];
    const char* src = (const char*)a + offset;
    char* dst = y;
    for (int64_t r = 0; r < rows; ++r) memcpy(dst + r * bytes, src + r * stride, (size_t)bytes);
    return 0;
}

enum { BINARY_ADD, BINARY_MUL, BINARY_MAX, BINARY_SUB, BINARY_DIV, BINARY_MAX_SWAPPED };

enum { BROADCAST_SAME, BROADCAST_CHANNEL, BROADCAST_SCALAR, BROADCAST_ROWS };

/* NumPy's maximum on x86 (its SIMD loops: maxps, which takes b where equal): a NaN in either wins; of
 * +0 and -0, b. */
static inline float max_np(float a, float b) { return (a > b || a != a) ? a : b; }

/* y[i] = a[i] op W for i < n, W an expression of i: one loop per op, so that each vectorises. */
#define BINARY_LOOPS(W)                                                                             \
    switch (op) {                                                                                   \
        case BINARY_ADD: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + (W); break;                  \
        case BINARY_MUL: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * (W); break;                  \
        case BINARY_MAX: for (int64_t i = 0; i < n; ++i) y[i] = max_np(a[i], (W)); break;           \
        case BINARY_SUB: for (int64_t i = 0; i < n; ++i) y[i] = a[i] - (W); break;                  \
        case BINARY_MAX_SWAPPED: for (int64_t i = 0; i < n; ++i) y[i] = max_np((W), a[i]); break;   \
        default: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (W);                                 \
    }

/* y = a op b over n floats, b of n floats (same) or one. */
static void binary_row(int64_t op, const float* a, const float* b, int same, float* y, int64_t n) {
    if (same) {
        BINARY_LOOPS(b[i])
    } else {
        const float v = b[0];
        BINARY_LOOPS(v)
    }
}

/* Over outer x channels x inner elements, a row at a time: ROW(a, b, same, y, n) with b of a's size
 * (BROADCAST_SAME), one value per channel (BROADCAST_CHANNEL), one value (BROADCAST_SCALAR), or inner values
 * repeated (BROADCAST_ROWS: the last axes). */
#define BROADCAST_ROWS_OF(ROW)                                                                           \
    const int64_t op = p[0], outer = p[1], C = p[2], inner = p[3], broadcast = p[4];                    \
    if (broadcast == BROADCAST_SAME) {                                                                   \
        ROW(op, a, b, 1, y, outer * C * inner);                                                          \
    } else if (broadcast == BROADCAST_ROWS) {                                                            \
        for (int64_t o = 0; o < outer; ++o) ROW(op, a + o * inner, b, 1, y + o * inner, inner);          \
    } else {                                                                                             \
        for (int64_t o = 0; o < outer; ++o)                                                              \
            for (int64_t c = 0; c < C; ++c)                                                              \
                ROW(op, a + (o * C + c) * inner, broadcast == BROADCAST_SCALAR ? b : b + c, 0,           \
                    y + (o * C + c) * inner, inner);                                                     \
    }                                                                                                    \
    return 0;

/* p = {op, outer, channels, inner, broadcast}: y = a op b (b op a is the caller's swap, for commutative
 * ops; BINARY_MAX_SWAPPED keeps Max's operand order, which picks between +0 and -0) over outer x channels
 * x inner floats, b broadcast as BROADCAST_ROWS_OF says. One rounding per element, as NumPy's. */
int binary_planned_f32(const int64_t* p, const float* a, const float* b, float* y) { BROADCAST_ROWS_OF(binary_row) }

/* y = a op b over n int32, b of n values (same) or one: Add, Sub or Mul, wrapping around as NumPy's. */
#define INT_LOOPS(W)                                                                          \
    switch (op) {                                                                             \
        case BINARY_ADD: for (int64_t i = 0; i < n; ++i) uy[i] = ua[i] + (W); break;          \
        case BINARY_SUB: for (int64_t i = 0; i < n; ++i) uy[i] = ua[i] - (W); break;          \
        default: for (int64_t i = 0; i < n; ++i) uy[i] = ua[i] * (W);                         \
    }

static void binary_row_i32(int64_t op, const int32_t* a, const int32_t* b, int same, int32_t* y, int64_t n) {
    const uint32_t* restrict ua = (const uint32_t*)a;
    const uint32_t* restrict ub = (const uint32_t*)b;
    uint32_t* restrict uy = (uint32_t*)y;
    if (same) {
        INT_LOOPS(ub[i])
    } else {
        const uint32_t v = ub[0];
        INT_LOOPS(v)
    }
}

/* binary_planned_f32's parameters, of int32 Add, Sub and Mul. */
int binary_planned_i32(const int64_t* p, const int32_t* a, const int32_t* b, int32_t* y) {
    BROADCAST_ROWS_OF(binary_row_i32)
}

enum { COMPARE_EQUAL, COMPARE_GREATER, COMPARE_GREATER_EQUAL, COMPARE_LESS, COMPARE_LESS_EQUAL };

/* y[i] = (a[i] cmp W) as a bool byte, for i < n. */
#define COMPARE_LOOPS(W)                                                                                  \
    switch (op) {                                                                                         \
        case COMPARE_EQUAL: for (int64_t i = 0; i < n; ++i) y[i] = a[i] == (W); break;                    \
        case COMPARE_GREATER: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > (W); break;                   \
        case COMPARE_GREATER_EQUAL: for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= (W); break;            \
        case COMPARE_LESS: for (int64_t i = 0; i < n; ++i) y[i] = a[i] < (W); break;                      \
        default: for (int64_t i = 0; i < n; ++i) y[i] = a[i] <= (W);                                      \
    }

/* y = (a cmp b) over n values of type T as bool bytes, b of n values (same) or one. */
#define COMPARE_ROW(T)                  \
    if (same) {                         \
        COMPARE_LOOPS(b[i])             \
    } else {                            \
        const T v = b[0];               \
        COMPARE_LOOPS(v)                \
    }

static void compare_row_f32(int64_t op, const float* a, const float* b, int same, uint8_t* y, int64_t n) {
    COMPARE_ROW(float)
}
static void compare_row_i32(int64_t op, const int32_t* a, const int32_t* b, int same, uint8_t* y, int64_t n) {
    COMPARE_ROW(int32_t)
}
static void compare_row_i64(int64_t op, const int64_t* a, const int64_t* b, int same, uint8_t* y, int64_t n) {
    COMPARE_ROW(int64_t)
}

/* p as binary_planned_f32's, op a COMPARE_*: y = a cmp b as bools (a NaN compares false, +0 equals -0, as
 * NumPy's), b broadcast as BROADCAST_ROWS_OF says; of float32, int32 and int64 values. */
int compare_planned_f32(const int64_t* p, const float* a, const float* b, uint8_t* y) {
    BROADCAST_ROWS_OF(compare_row_f32)
}
int compare_planned_i32(const int64_t* p, const int32_t* a, const int32_t* b, uint8_t* y) {
    BROADCAST_ROWS_OF(compare_row_i32)
}
int compare_planned_i64(const int64_t* p, const int64_t* a, const int64_t* b, uint8_t* y) {
    BROADCAST_ROWS_OF(compare_row_i64)
}

/* Data movement (Transpose, Slice, Resize to the nearest, Gather of constant indices, Pad...), as the
 * index of each output element in the input, worked out at plan time. p = {n, index (int32_t[n]
 * address), fill (param_float)}: y[i] = a[index[i]], or fill where the index is negative (padding). */
int gather_planned_f32(const int64_t* p, const float* a, const void* unused, float* y) {
    (void)unused;
    const int64_t n = p[0];
    const int32_t* index = (const int32_t*)(intptr_t)p[1];
    const float fill = param_float(p, 2);
    for (int64_t i = 0; i < n; ++i) y[i] = index[i] >= 0 ? a[index[i]] : fill;
    return 0;
}

/* The same where the indices run in long stretches: p = {runs, table (int64_t[2 runs]: start in a,
 * length)}, the stretches copied one after another into y. */
int runs_planned_f32(const int64_t* p, const float* a, const void* unused, float* y) {
    (void)unused;
    const int64_t runs = p[0];
    const int64_t* table = (const int64_t*)(intptr_t)p[1];
    for (int64_t r = 0; r < runs; ++r) {
        memcpy(y, a + table[2 * r], sizeof(float) * (size_t)table[2 * r + 1]);
        y += table[2 * r + 1];
    }
    return 0;
}

/* A matrix product by the BLAS NumPy uses (its cblas_sgemm, found at plan time): p = {sgemm, int64 (its
 * integers are 64-bit), M, N, K, transB, b (a constant's address, or 0: the step's b), alpha (param_float),
 * sgemv, openblas_get_num_threads (or 0), ldy (0: N)}: y (M x N, rows ldy apart) = alpha a (M x K) b (K x N,
 * or N x K with transB), a and b row-major and contiguous. One row (M = 1) goes to cblas_sgemv, as NumPy's
 * matmul sends it: sgemm would pack all of b for it. Split across the kernels' pool while the BLAS runs on
 * one thread (blas.h). */
int matmul_planned_f32(const int64_t* p, const float* a, const float* b, float* y) {
    const int64_t M = p[2], N = p[3], K = p[4], tb = p[5], ldy = p[10] ? p[10] : N;
    if (p[6]) b = (const float*)(intptr_t)p[6];
    if (!M || !N) return 0;
    if (!K) {
        for (int64_t r = 0; r < M; ++r) memset(y + r * ldy, 0, sizeof(float) * (size_t)N);
        return 0;
    }
    blas_product_parts((intptr_t)p[0], p[1], (intptr_t)p[8], (intptr_t)p[9], tb, M, N, K, param_float(p, 7), a, b,
                       tb ? K : N, y, ldy);
    return 0;
}

/* Gather of rows of a table (any element type) by int64 (or int32) indices: p = {rows, row_bytes, table,
 * count, 32-bit indices, one-hot}. Gather's (one-hot 0): a negative index counts from the end, and an
 * index out of range returns 2 (nothing written past what was done): the caller runs the node itself,
 * which raises its error. A one-hot's product (OneHotMatMul): an index outside [0, rows) gives a row of
 * zeros. */
int gather_rows_planned(const int64_t* p, const void* indices, const void* unused, void* y) {
    (void)unused;
    const int64_t rows = p[0], row_bytes = p[1], count = p[3], one_hot = p[5];
    const char* table = (const char*)(intptr_t)p[2];
    for (int64_t i = 0; i < count; ++i) {
        int64_t k = p[4] ? ((const int32_t*)indices)[i] : ((const int64_t*)indices)[i];
        char* row = (char*)y + i * row_bytes;
        if (one_hot && (k < 0 || k >= rows)) {
            memset(row, 0, (size_t)row_bytes);
            continue;
        }
        if (k < 0) k += rows;
        if (k < 0 || k >= rows) return 2;
        memcpy(row, table + k * row_bytes, (size_t)row_bytes);
    }
    return 0;
}

enum { CAST_I64_I32, CAST_I64_F32, CAST_I32_F32, CAST_F32_I32, CAST_U8_F32, CAST_I8_F32 };

/* p = {kind, n}: the casts NumPy's astype makes on x86 (int64 to int32 keeps the low 32 bits; to float32
 * rounds to nearest; float32 to int32 truncates, and gives INT32_MIN for NaN and out of range values, as
 * cvttps2dq does; 8-bit integers to float32 are exact). */
int cast_planned(const int64_t* p, const void* a, const void* unused, void* y) {
    (void)unused;
    const int64_t n = p[1];
    switch (p[0]) {
        case CAST_I64_I32:
            for (int64_t i = 0; i < n; ++i) ((int32_t*)y)[i] = (int32_t)(uint32_t)((const uint64_t*)a)[i];
            break;
        case CAST_F32_I32:
            for (int64_t i = 0; i < n; ++i) {
                const float v = ((const float*)a)[i];
                ((int32_t*)y)[i] = v >= -2147483648.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
            }
            break;
        case CAST_U8_F32:
            for (int64_t i = 0; i < n; ++i) ((float*)y)[i] = (float)((const uint8_t*)a)[i];
            break;
        case CAST_I8_F32:
            for (int64_t i = 0; i < n; ++i) ((float*)y)[i] = (float)((const int8_t*)a)[i];
            break;
        case CAST_I64_F32:
            for (int64_t i = 0; i < n; ++i) ((float*)y)[i] = (float)((const int64_t*)a)[i];
            break;
        default:
            for (int64_t i = 0; i < n; ++i) ((float*)y)[i] = (float)((const int32_t*)a)[i];
    }
    return 0;
}

int program_bind_threads(const void* run, const void* get) { return pool_bind(run, get); }
