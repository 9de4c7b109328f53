"""The native kernels' declarations (gpuops/native_abi.py) against the C prototypes of cpu_kernels/*.c:
every exported function declared, every declaration of the C function's exact types; and the checker
catches a wrong declaration."""

import ctypes
import re

import pytest

from gpuops import native, native_abi

SOURCES = native_abi.c_sources(native.KERNEL_DIR)


def test_every_declaration_matches_its_c_prototype():
    problems = native_abi.check(native_abi.DECLARATIONS, SOURCES)
    assert not problems, "\n".join(problems)


def test_the_parser_sees_every_exported_function():
    """Each non-static function defined at the top of a C file (found here by a plain regex over the
    lines that begin a definition) is in the parser's output, and nothing static is."""
    for file, text in SOURCES.items():
        defined = set(re.findall(r"^(?!static\b)(?:const\s+)?[A-Za-z_][\w ]*?\**\s*\b([a-z_]\w*)\s*\([^;{]*?\)\s*\{",
                                 text, re.M | re.S))
        parsed = set(native_abi.parse(text))
        assert defined == parsed, file
        assert not [n for n in parsed if re.search(rf"^static\b[^;{{]*\b{n}\s*\(", text, re.M)], file
    assert sum(len(native_abi.parse(t)) for t in SOURCES.values()) == len(native_abi.KERNELS) == 113


def _with(file: str, old: str, new: str) -> dict[str, str]:
    decl = dict(native_abi.DECLARATIONS)
    assert old in decl[file]
    decl[file] = decl[file].replace(old, new)
    return decl


@pytest.mark.parametrize("file, old, new, says", [
    # a float parameter declared as an int64 (ctypes would pass the bits of an integer)
    ("pool.c", "int64_t mode", "float mode", "parameter 15 is int64_t mode, declared float mode"),
    # a missing parameter
    ("rows.c", "int64_t rows, int64_t n, int64_t log_", "int64_t rows, int64_t n",
     "softmax_rows_f32 takes 5 parameters, declared 4"),
    # const dropped, pointee changed, pointer depth changed
    ("gemm.c", "int gemm_pack_f32(const float* A", "int gemm_pack_f32(float* A", "parameter 0 is const float* A"),
    ("special.c", "int erf_f64(const double* x", "int erf_f64(const float* x", "parameter 0 is const double* x"),
    ("quantize.c", "int32_t* Y);", "int32_t** Y);", "parameter 8 is int32_t* Y, declared int32_t** Y"),
    # two parameters of one type swapped (their names tell)
    ("gemm.c", "int64_t M, int64_t K, int64_t N, int64_t rows, float lo",
     "int64_t K, int64_t M, int64_t N, int64_t rows, float lo", "parameter 6 is int64_t M, declared int64_t K"),
    # the return type
    ("rnn.c", "int gru_f32(", "void gru_f32(", "gru_f32 returns int, declared void"),
    # a function the C file does not have, and one it has that is not declared
    ("winograd.c", "winograd_f2k3_output_f32(", "winograd_f2k3_outputs_f32(", "has no such function"),
])
def test_a_wrong_declaration_is_caught(file, old, new, says):
    problems = native_abi.check(_with(file, old, new), SOURCES)
    assert problems and any(says in p for p in problems), problems


def test_an_undeclared_c_function_or_file_is_caught():
    decl = dict(native_abi.DECLARATIONS)
    del decl["direct_conv.c"]
    assert any("direct_conv2d_f32" in p and "not declared" in p for p in native_abi.check(decl, SOURCES))
    extra = "static int helper(int x) { return x; }\nint extra_f32(float* y) { return 0; }\n"
    sources = dict(SOURCES, **{"extra.c": extra})
    problems = native_abi.check(native_abi.DECLARATIONS, sources)
    assert problems == ["extra.c: int extra_f32(float* y) is exported but not declared in gpuops/native_abi.py"]
    sources = {k: v for k, v in SOURCES.items() if k != "rows.c"}
    assert "rows.c: declared, but there is no such C file" in native_abi.check(native_abi.DECLARATIONS, sources)


def test_parser_details():
    text = """
        /* int commented_out(int x); */
        #define MACRO(x) \\
            int not_a_function(x)
        typedef float vec __attribute__((vector_size(64)));
        struct args { const float* p; int64_t n; };
        static inline int helper(const float* restrict x) { return 0; }
        int f(const float* restrict x, float *y, const struct args* a, int64_t n, double d);
        int g(void) { int local(int); return 0; }
        int h(int64_t, unsigned int, struct args *);
    """
    got = native_abi.parse(text)
    assert list(got) == ["f", "g", "h"]
    assert str(got["f"]) == "int f(const float* x, float* y, const struct args* a, int64_t n, double d)"
    assert got["g"].params == ()
    assert [p.ctype for p in got["h"].params] == ["int64_t", "unsigned int", "struct args*"]
    assert [p.name for p in got["h"].params] == ["", "", ""]


def test_bindings_come_from_the_declarations():
    k = native_abi.KERNELS["depthwise_conv2d_f32"]
    assert k.file == "conv.c"
    assert k.argtypes == (ctypes.c_void_p,) * 4 + (ctypes.c_int64,) * 15 + (ctypes.c_float,) * 2
    assert k.restype is ctypes.c_int
    assert native_abi.KERNELS["erf_f64"].argtypes == (ctypes.c_void_p,) * 2 + (ctypes.c_int64,)
    assert set(native_abi.FILES) == {p for p in SOURCES if p.endswith(".c")}
    with pytest.raises(TypeError, match="no ctypes type"):
        native_abi.parse_param("struct args a").ctypes_type()
    with pytest.raises(KeyError, match="not declared"):
        native.function("no_such_kernel_f32")
    with pytest.raises(ValueError, match="declared for both"):
        native_abi.kernels({"a.c": "int f(int x);", "b.c": "int f(int x);"})


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler: native kernels fall back to NumPy")
def test_every_declared_function_is_bound_with_its_declared_types():
    for name, k in native_abi.KERNELS.items():
        fn = native.function(name)
        assert fn is not None, name
        assert tuple(fn.argtypes) == k.argtypes and fn.restype is k.restype, name
