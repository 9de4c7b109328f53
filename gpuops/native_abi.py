"""The C functions of ``cpu_kernels/*.c`` that Python calls: one declaration each, in one place.

:data:`DECLARATIONS` holds, per C file, the prototypes of the functions it exports, written as in C
(parameter names included: they document the order the call sites pass arguments in). The ctypes
bindings are built from them (:func:`gpuops.native.function` takes just the function's name), so no
call site types arguments by hand, and ``tests/test_native_abi.py`` parses the prototypes of the C
files themselves and checks every declaration against them (:func:`check`): a changed, added or
removed C function whose declaration here was not changed with it fails that test.

The C side of the convention: every exported function returns an ``int`` status (0, or non-zero when
its scratch could not be allocated; :func:`gpuops.native.call`) -- but ``gemm_pack_width_f32``, which
returns a width, and ``embed_layernorm_f32``, whose 1 is an id out of range -- and takes pointers to
arrays (any pointer is passed as an address, ``c_void_p``), ``int64_t`` sizes and flags, and
``float``/``double`` parameters. Functions that are not exported are ``static``. A file whose kernels
split their work across threads (``cpu_kernels/pool_threads.h``) exports ``<stem>_bind_threads(run,
get)``, which :mod:`gpuops.native` calls at load with the addresses of ``threads.c``'s ``threads_run``
and ``threads_get``: the one pool of the process, whose count :func:`gpuops.native.set_threads` sets.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

DECLARATIONS: dict[str, str] = {
    "attention.c": """
        int attention_f32(const float* qkv, const float* past, const int32_t* key_range, const uint8_t* masked,
                          float* y, float* present, int64_t batch, int64_t seq, int64_t past_len, int64_t heads,
                          int64_t hq, int64_t hv, int64_t key_form, int64_t mask_rows, int64_t causal, float divisor,
                          float filter);
        int attention_program_f32(const int64_t* p, const float* x, const int32_t* mask, float* y, const float* past,
                                  float* present);
        int qattention_program_f32(const int64_t* p, const void* x, const float* x_scale, float* y, const void* x_zp,
                                   float* unused, const int32_t* mask);
        int attention_planned_f32(const struct attention_plan* p, const float* x, const int32_t* key_range,
                                  const uint8_t* masked, float* y);
        int attention_bind_threads(const void* run, const void* get);
    """,
    "cast.c": """
        int cast_f32_f16(const float* x, void* y, int64_t n);
        int cast_f16_f32(const void* x, float* y, int64_t n);
        int cast_half_planned(const int64_t* p, const void* a, const void* unused, void* y);
    """,
    "conv.c": """
        int depthwise_conv2d_f32(const float* x, const float* w, const float* bias, float* y,
                                 int64_t N, int64_t C, int64_t H, int64_t W, int64_t mult,
                                 int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                                 int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                                 float lo, float hi);
        int im2col2d_f32(const float* x, float* cols, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                         int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                         int64_t dw, int64_t oy0, int64_t oy1);
        int bias_clamp_f32(float* y, const float* bias, int64_t M, int64_t L, int64_t ld, float lo, float hi);
        int bias_residual_clamp_f32(float* y, const float* bias, const float* z, int64_t N, int64_t M, int64_t L,
                                    float lo, float hi);
        int depthwise_conv2d_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y);
        int conv_bind_threads(const void* run, const void* get);
    """,
    "direct_conv.c": """
        int direct_conv2d_f32(const float* x, const float* w, const float* bias, float* y, int64_t N, int64_t C,
                              int64_t H, int64_t W, int64_t M, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                              int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                              float lo, float hi);
        int direct_conv2d_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y);
        int direct_conv_bind_threads(const void* run, const void* get);
    """,
    "gemm.c": """
        int gemm_pack_width_f32(int64_t rows);
        int gemm_pack_f32(const float* A, int64_t lda, int64_t M, int64_t K, int64_t rows, float* pack);
        int gemm_f32(const float* pack, const float* B, int64_t ldb, const float* bias, float* Y, int64_t ldy,
                     int64_t M, int64_t K, int64_t N, int64_t rows, float lo, float hi);
        int conv2d_gemm_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y);
        int fc_f32(const float* pack, const float* X, int64_t ldx, const float* bias, float* Y, int64_t ldy,
                   int64_t M, int64_t K, int64_t N, float lo, float hi);
        int fc_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int gemm_bind_threads(const void* run, const void* get);
    """,
    "linear_ml.c": """
        int linear_classifier_f32(const float* x, const float* w, const float* b, float* s, int64_t* label,
                                  int64_t rows, int64_t n_features, int64_t n_classes, int64_t softmax);
        int normalize_rows_f32(const float* x, float* y, int64_t rows, int64_t n, int64_t norm);
        int linear_classifier_planned_f32(const int64_t* p, const float* x, const void* unused, int64_t* label,
                                          const void* unused2, float* scores);
        int normalize_rows_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
    """,
    "pool.c": """
        int pool2d_f32(const float* x, float* y, int64_t NC, int64_t H, int64_t W, int64_t OH, int64_t OW,
                       int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                       int64_t dw, int64_t mode, int64_t ph_end, int64_t pw_end);
        int squeeze_excite_f32(const float* x, const float* w1t, const float* b1, const float* w2t, const float* b2,
                               float* y, int64_t N, int64_t C, int64_t HW, int64_t R, int64_t inner, int64_t gate,
                               float alpha, float beta);
        int pool2d_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int max_pool2d_planned_8(const int64_t* p, const void* x, const void* unused, void* y);
        int squeeze_excite_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int pool_bind_threads(const void* run, const void* get);
    """,
    "program.c": """
        int program_run(const struct program_step* steps, int64_t n, void* arena, const int64_t* ext);
        int program_bind_threads(const void* run, const void* get);
        int copy_rows_planned(const int64_t* p, const void* a, const void* unused, void* y);
        int copy_from_rows_planned(const int64_t* p, const void* a, const void* unused, void* y);
        int binary_planned_f32(const int64_t* p, const float* a, const float* b, float* y);
        int binary_planned_i32(const int64_t* p, const int32_t* a, const int32_t* b, int32_t* y);
        int compare_planned_f32(const int64_t* p, const float* a, const float* b, uint8_t* y);
        int compare_planned_i32(const int64_t* p, const int32_t* a, const int32_t* b, uint8_t* y);
        int compare_planned_i64(const int64_t* p, const int64_t* a, const int64_t* b, uint8_t* y);
        int gather_planned_f32(const int64_t* p, const float* a, const void* unused, float* y);
        int runs_planned_f32(const int64_t* p, const float* a, const void* unused, float* y);
        int matmul_planned_f32(const int64_t* p, const float* a, const float* b, float* y);
        int gather_rows_planned(const int64_t* p, const void* indices, const void* unused, void* y);
        int cast_planned(const int64_t* p, const void* a, const void* unused, void* y);
    """,
    "qgemm.c": """
        int qconv_u8(const int64_t* p, const void* x, void* y);
        int qconv_i32(const int64_t* p, const void* x, const void* zx, int32_t* y);
        int qgemm_u8(const int64_t* p, const void* a, const void* za, void* y);
        int qgemm_f32(const int64_t* p, const void* a, const void* za, const float* a_scale, float* y);
        int qconv_planned_u8(const int64_t* p, const void* x, const void* unused, void* y);
        int qgemm_planned_8(const int64_t* q, const void* a, const void* unused, void* y);
        int qgemm_bind_threads(const void* run, const void* get);
        int dynamic_quantize_matmul_planned_f32(const int64_t* q, const float* a, const void* unused, float* y);
    """,
    "quantize.c": """
        int pack_weight_8(const uint8_t* B, int64_t b_signed, int64_t K, int64_t N, int32_t* pack);
        int matmul_integer_u8(const int32_t* pack, const void* A, int64_t M, const void* za_rows, int64_t za,
                              const void* zb_cols, int64_t zb, int64_t a_signed, int32_t* Y);
        int qlinear_matmul_u8(const int32_t* pack, const void* A, int64_t M, const void* za_rows, int64_t za,
                              const void* zb_cols, int64_t zb, int64_t signs, const float* as_rows, float as,
                              const float* bs_cols, float bs, float ys, int64_t y_zp, void* Y);
        int qlinear_matmul_u8_planned(const struct qlinear_args* p, const void* A, void* Y);
        int quantize_linear_f32(const float* x, int64_t n, float scale, int64_t zp, int64_t y_signed, void* y);
        int dequantize_linear_f32(const void* x, int64_t n, int64_t x_signed, int64_t zp, float scale, float* y);
        int dynamic_quantize_u8(const float* x, int64_t n, float* out_scale, uint8_t* out_zp, uint8_t* y);
        int dynamic_range_planned_u8(const int64_t* p, const float* a, const void* unused_b, uint8_t* y,
                                     const void* unused_c, float* z);
        int dynamic_apply_planned_u8(const int64_t* p, const float* a, const float* scale, uint8_t* y, const uint8_t* zp,
                                     void* unused_z);
        int qlinear_global_average_pool_8(const void* x, int64_t rows, int64_t n, int64_t signs, float x_scale,
                                          int64_t x_zp, float y_scale, int64_t y_zp, void* y);
        int qlinear_add_8(const void* a, int64_t a_step, const void* b, int64_t b_step, int64_t n, int64_t signs,
                          float a_scale, int64_t a_zp, float b_scale, int64_t b_zp, float c_scale, int64_t c_zp,
                          void* y);
        int quantize_planned_f32(const int64_t* p, const float* x, const void* unused, void* y);
        int dequantize_planned_f32(const int64_t* p, const void* x, const void* unused, float* y);
        int qlinear_add_planned_8(const int64_t* p, const void* a, const void* b, void* y);
        int qlinear_global_average_pool_planned_8(const int64_t* p, const void* x, const void* unused, void* y);
        int quantize_bind_threads(const void* run, const void* get);
    """,
    "rnn.c": """
        int lstm_f32(const float* xw, const float* rt, const float* h0, const float* c0, float* y, float* h_n,
                     float* c_n, int64_t T, int64_t D, int64_t batch, int64_t H);
        int lstm_program_f32(const int64_t* p, const float* x, const float* h0, float* y, const float* c0, float* c_n);
        int lstm_q8_f32(const float* xw, const int8_t* rq, const float* rs, const float* rz, const float* h0,
                        const float* c0, float* y, float* h_n, float* c_n, int64_t T, int64_t D, int64_t batch,
                        int64_t H);
        int lstm_q8_projection_f32(const float* x, const int8_t* q, const float* s, const float* z, const float* bias,
                                   float* y, int64_t M, int64_t K, int64_t ldx, int64_t N, int64_t H, int64_t ldm,
                                   int64_t ldg);
        int gru_f32(const float* xw, const float* rt, const float* rbh, const float* h0, float* y, float* h_n,
                    int64_t T, int64_t D, int64_t batch, int64_t H, int64_t lbr);
        int rnn_bind_threads(const void* run, const void* get);
    """,
    "rows.c": """
        int row_mean_f32(const float* x, float* y, int64_t rows, int64_t n);
        int reduce_rows_planned_f32(const int64_t* p, const float* x, const void* unused, void* out);
        int softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, int64_t log_);
        int softmax_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int layernorm_f32(const float* x, const float* skip, const float* skip2, const float* bias, const float* gamma,
                          const float* beta, float* y, float* sum, float* mean, float* inv, int64_t rows, int64_t n,
                          int64_t skip_rows, float epsilon, int64_t simplified);
        int layernorm_planned_f32(const int64_t* p, const float* x, const float* skip, float* y, const void* unused,
                                  float* sum);
        int embed_layernorm_f32(const struct embed_plan* p, const void* ids, const void* segment_ids,
                                const void* position_ids, const void* mask, float* y, float* sum,
                                int32_t* mask_index, int64_t batch, int64_t seq, int64_t position_count,
                                int64_t mask_cols, int64_t wide);
        int layernorm_channels_f32(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                   float* inv, int64_t outer, int64_t c, int64_t hw, float epsilon, int64_t planes);
        int layernorm_channels_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int lrn_f32(const float* x, float* y, int64_t outer, int64_t c, int64_t hw, int64_t before, int64_t after,
                    float alpha, float beta, float bias);
        int rows_bind_threads(const void* run, const void* get);
    """,
    "special.c": """
        int erf_f32(const float* x, float* y, int64_t n);
        int gelu_f32(const float* x, float* y, int64_t n);
        int erf_f64(const double* x, double* y, int64_t n);
        int sigmoid_f32(const float* x, float* y, int64_t n);
        int quick_gelu_f32(const float* x, float* y, int64_t n, float alpha);
        int bias_gelu_f32(const float* x, const float* bias, float* y, int64_t size, int64_t n);
        int fast_gelu_f32(const float* x, const float* bias, float* y, int64_t size, int64_t n);
        int unary_planned_f32(const int64_t* p, const float* a, const void* unused, float* y);
        int gelu_planned_f32(const int64_t* p, const float* x, const void* unused, float* y);
        int special_bind_threads(const void* run, const void* get);
    """,
    "threads.c": """
        int64_t threads_get(void);
        int threads_set(int64_t n);
        int threads_run(const void* fn_address, void* ctx, int64_t parts);
    """,
    "tree_ensemble.c": """
        int tree_leaves_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                            const int32_t* children, const uint8_t* missing, const int32_t* roots,
                            const int32_t* tree_depth, const int32_t* leaf_slot, int64_t rows, int64_t n_features,
                            int64_t n_trees, int64_t same_mode, int64_t tracks_missing, int32_t* out);
        int tree_sum_f32(const float* x, const int32_t* feature, const float* threshold, const int8_t* mode,
                         const int32_t* children, const uint8_t* missing, const int32_t* roots,
                         const int32_t* tree_depth, const int32_t* leaf_slot, int64_t rows, int64_t n_features,
                         int64_t n_trees, int64_t same_mode, int64_t tracks_missing, const double* weights,
                         int64_t n_targets, double* y);
        int tree_leaves_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                            const int32_t* children, const uint8_t* missing, const int32_t* roots,
                            const int32_t* tree_depth, const int32_t* leaf_slot, int64_t rows, int64_t n_features,
                            int64_t n_trees, int64_t same_mode, int64_t tracks_missing, int32_t* out);
        int tree_sum_f64(const double* x, const int32_t* feature, const double* threshold, const int8_t* mode,
                         const int32_t* children, const uint8_t* missing, const int32_t* roots,
                         const int32_t* tree_depth, const int32_t* leaf_slot, int64_t rows, int64_t n_features,
                         int64_t n_trees, int64_t same_mode, int64_t tracks_missing, const double* weights,
                         int64_t n_targets, double* y);
        int tree_sum_planned_f32(const struct tree_args* f, const float* x, int64_t rows, int64_t n_features,
                                 double* y);
        int tree_sum_planned_f64(const struct tree_args* f, const double* x, int64_t rows, int64_t n_features,
                                 double* y);
        int tree_ensemble_bind_threads(const void* run, const void* get);
    """,
    "winograd.c": """
        int winograd_f2k3_input_f32(const float* x, float* V, int64_t C, int64_t H, int64_t W, int64_t ph,
                                    int64_t pw, int64_t th, int64_t tw, int64_t i0, int64_t i1, int64_t ld,
                                    int64_t col0);
        int winograd_f2k3_output_f32(const float* Mo, const float* bias, float* y, int64_t M, int64_t OH,
                                     int64_t OW, int64_t tw, int64_t i0, int64_t i1, int64_t ld, int64_t col0,
                                     float lo, float hi);
        int winograd_f2k3_planned_f32(const struct conv_params* p, const float* x, const float* z, float* y);
        int winograd_bind_threads(const void* run, const void* get);
    """,
}

# The C types a declaration may use by value, and their ctypes; any pointer is a c_void_p (an address).
SCALARS: dict[str, type] = {
    "int": ctypes.c_int, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint8_t": ctypes.c_uint8,
    "float": ctypes.c_float, "double": ctypes.c_double,
}


@dataclass(frozen=True)
class Param:
    """One parameter: ``base`` (``float``, ``struct qlinear_args``, ``void``...), ``pointer`` depth,
    whether the pointee is ``const``, and the name (``""`` when the prototype has none)."""

    base: str
    pointer: int = 0
    const: bool = False
    name: str = ""

    @property
    def ctype(self) -> str:
        """The C type as written, without the name: ``const float*``."""
        return ("const " if self.const else "") + self.base + "*" * self.pointer

    def ctypes_type(self) -> type:
        if self.pointer:
            return ctypes.c_void_p
        if self.base not in SCALARS:
            raise TypeError(f"no ctypes type for the C type {self.ctype!r} (pointers and {sorted(SCALARS)} only)")
        return SCALARS[self.base]


@dataclass(frozen=True)
class Prototype:
    name: str
    returns: Param
    params: tuple[Param, ...]

    def __str__(self) -> str:
        args = ", ".join(f"{p.ctype} {p.name}".strip() for p in self.params)
        return f"{self.returns.ctype} {self.name}({args or 'void'})"


@dataclass(frozen=True)
class Kernel:
    """A declared function: its file in ``cpu_kernels/``, its prototype, and the ctypes types of its
    arguments and result."""

    file: str
    prototype: Prototype

    @property
    def name(self) -> str:
        return self.prototype.name

    @property
    def argtypes(self) -> tuple[type, ...]:
        return tuple(p.ctypes_type() for p in self.prototype.params)

    @property
    def restype(self) -> type:
        return self.prototype.returns.ctypes_type()


# -- a parser for the prototypes of plain C files (ours: no K&R definitions, no function pointers) -----

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_PREPROCESSOR = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)  # with continuation lines
_QUALIFIERS = {"restrict", "__restrict", "__restrict__", "volatile", "register", "inline", "__inline",
               "__inline__", "extern"}
_TYPE_WORDS = {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool", "struct",
               "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t",
               "ptrdiff_t"}
_FUNCTION = re.compile(r"^(?P<ret>[\w\s\*]*?[\w\*])\s*\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)$", re.S)
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")


def _strip(text: str) -> str:
    return _PREPROCESSOR.sub("", _COMMENT.sub(" ", text))


def _top_level(text: str):
    """The texts before each ``{`` or ``;`` at brace depth 0: the declarators of definitions and
    declarations (function bodies, struct bodies and initialisers are skipped)."""
    depth, paren, start = 0, 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        elif ch == "{":
            if depth == 0 and paren == 0:
                yield text[start:i]
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                start = i + 1
        elif ch == ";" and depth == 0 and paren == 0:
            yield text[start:i]
            start = i + 1


def parse_param(text: str) -> Param:
    """``"const float* restrict x"`` -> Param("float", 1, True, "x")."""
    text = text.replace("*", " * ")
    words = [w for w in text.split() if w not in _QUALIFIERS]
    stars = words.count("*")
    head = words[:words.index("*")] if stars else words
    const = "const" in head
    tail = [w for w in words[len(head):] if w not in ("*", "const")]
    head = [w for w in head if w != "const"]
    name = ""
    if tail:
        name = tail[-1]
    elif len(head) > 1 and head[-1] not in _TYPE_WORDS and head[-2] != "struct":
        name = head.pop()
    return Param(" ".join(head), stars, const, name)


def parse(text: str) -> dict[str, Prototype]:
    """The prototypes of the non-``static`` functions declared or defined in C source ``text``."""
    out: dict[str, Prototype] = {}
    for decl in _top_level(_strip(text)):
        decl = " ".join(_ATTRIBUTE.sub(" ", decl).split())
        m = _FUNCTION.match(decl)
        if not m:
            continue
        words = m["ret"].split()
        if words and words[0] in ("typedef",) or "static" in words or "=" in decl:
            continue
        params = [p.strip() for p in m["params"].split(",")] if m["params"].strip() not in ("", "void") else []
        out[m["name"]] = Prototype(m["name"], parse_param(m["ret"]), tuple(parse_param(p) for p in params))
    return out


def check(declarations: dict[str, str], sources: dict[str, str]) -> list[str]:
    """Every difference between ``declarations`` (file -> prototypes, as :data:`DECLARATIONS`) and the C
    files' own prototypes (``sources``: file -> its text, headers included, which declare nothing
    exported): a function declared but absent or of another type, and one exported but not declared.
    Types, ``const``, pointer depth, the number of parameters and their names must agree."""
    problems = []
    for file in sorted(set(declarations) | set(sources)):
        if file not in sources:
            problems.append(f"{file}: declared, but there is no such C file")
            continue
        have = parse(sources[file])
        want = parse(declarations.get(file, ""))
        for name in sorted(set(have) - set(want)):
            problems.append(f"{file}: {have[name]} is exported but not declared in gpuops/native_abi.py")
        for name in sorted(set(want) - set(have)):
            problems.append(f"{file}: {want[name]} is declared but {file} has no such function")
        for name in sorted(set(want) & set(have)):
            c, d = have[name], want[name]
            if c.returns.ctype != d.returns.ctype:
                problems.append(f"{file}: {name} returns {c.returns.ctype}, declared {d.returns.ctype}")
            if len(c.params) != len(d.params):
                problems.append(f"{file}: {name} takes {len(c.params)} parameters, declared {len(d.params)}:\n"
                                f"  C:        {c}\n  declared: {d}")
                continue
            for i, (pc, pd) in enumerate(zip(c.params, d.params)):
                if pc.ctype != pd.ctype or pc.name != pd.name:
                    problems.append(f"{file}: {name} parameter {i} is {pc.ctype} {pc.name}, declared "
                                    f"{pd.ctype} {pd.name}")
    return problems


def c_sources(kernel_dir: Path) -> dict[str, str]:
    """``cpu_kernels/``'s C files and headers, by file name."""
    return {p.name: p.read_text() for p in sorted(kernel_dir.iterdir()) if p.suffix in (".c", ".h")}


def kernels(declarations: dict[str, str] = DECLARATIONS) -> dict[str, Kernel]:
    """The declared functions by name (names are unique across files, as in one C program)."""
    out: dict[str, Kernel] = {}
    for file, text in declarations.items():
        for name, proto in parse(text).items():
            if name in out:
                raise ValueError(f"{name} is declared for both {out[name].file} and {file}")
            out[name] = Kernel(file, proto)
    return out


FILES: tuple[str, ...] = tuple(sorted(DECLARATIONS))


def __getattr__(name: str):
    """``KERNELS``: :func:`kernels` of :data:`DECLARATIONS`, parsed on first use (not at ``import gpuops``)."""
    if name == "KERNELS":
        globals()["KERNELS"] = value = kernels()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
