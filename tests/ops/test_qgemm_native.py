"""The native 8-bit kernels: QLinearConv, ConvInteger, MatMulInteger and QLinearMatMul (cpu_kernels/qgemm.c),
DynamicQuantizeLinear and QLinearAdd (cpu_kernels/quantize.c) against
the generic NumPy ops (exact: same integer sums, same float32 requantisation) with and without the
AVX-512 VNNI and AVX2 paths, and against onnxruntime in sessions (weights as initializers, so the packs and
plans kept per session are the ones that run)."""

import itertools

import numpy as np
import pytest
from onnx import helper

from gpuops import native
from gpuops.ops import quantize as generic
from gpuops.ops.cpu import qgemm
from gpuops.ops.cpu import quantize as cpu

from tests.ops.common import make_model, run_both
from tests.ort_versions import ort_older_than

pytestmark = pytest.mark.skipif(native.function("qconv_u8") is None, reason="native kernels unavailable")

U8, S8 = np.uint8, np.int8


def _ints(rng, dtype, shape):
    lo, hi = (0, 256) if dtype == U8 else (-128, 128)
    return rng.integers(lo, hi, size=shape).astype(dtype)


@pytest.fixture(params=[2, 1, 0], ids=["vnni", "avx2", "portable"])
def simd(request, monkeypatch):
    monkeypatch.setattr(qgemm, "SIMD", request.param)
    return request.param


def _conv_case(rng, x_dtype, w_dtype, y_dtype, per_channel, w_zero, *, C=5, M=6, H=7, W=9, k=3, n=2, group=1,
               bias=True, y_scale=0.2):
    x = _ints(rng, x_dtype, (n, C, H, W))
    w = _ints(rng, w_dtype, (M, C // group, k, k))
    shape = (M,) if per_channel else ()
    ws = rng.uniform(0.001, 0.01, size=shape).astype(np.float32)
    wz = _ints(rng, w_dtype, shape) if w_zero else np.zeros(shape, w_dtype)
    xz = _ints(rng, x_dtype, ())
    yz = np.array(60 if y_dtype == U8 else -3, y_dtype)
    B = rng.integers(-5000, 5000, size=(M,)).astype(np.int32) if bias else None
    return (x, np.array(0.05, np.float32), xz, w, ws, wz, np.array(y_scale, np.float32), yz, B)


@pytest.mark.parametrize("x_dtype,w_dtype,y_dtype", list(itertools.product([U8, S8], repeat=3)))
@pytest.mark.parametrize("per_channel,w_zero", [(False, False), (True, False), (False, True), (True, True)])
def test_qlinear_conv_native_equals_generic(simd, x_dtype, w_dtype, y_dtype, per_channel, w_zero):
    rng = np.random.default_rng(hash((x_dtype, w_dtype, y_dtype, per_channel, w_zero)) % 2 ** 32)
    args = _conv_case(rng, x_dtype, w_dtype, y_dtype, per_channel, w_zero)
    attrs = dict(pads=[1, 1, 1, 1])
    got = cpu.QLinearConv(np, *args, **attrs)
    np.testing.assert_array_equal(got, generic.QLinearConv(np, *args, **attrs))
    assert got.dtype == y_dtype


_GEOMETRIES = [
    dict(k=1, attrs=dict()), dict(k=7, H=20, W=17, attrs=dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    dict(k=3, attrs=dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    dict(k=3, attrs=dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    dict(k=7, H=11, W=75, attrs=dict(strides=[2, 2], pads=[3, 3, 3, 3])),  # wide rows: stride 2's vector path
    dict(k=1, H=5, W=66, attrs=dict(strides=[2, 2])),
    dict(k=3, attrs=dict(strides=[2, 3], pads=[0, 1, 2, 0])), dict(k=3, attrs=dict(auto_pad="SAME_UPPER")),
    dict(k=2, attrs=dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    dict(C=6, M=9, group=3, attrs=dict(pads=[1] * 4, group=3)),
    dict(C=4, M=8, group=4, attrs=dict(pads=[1] * 4, group=4)), dict(H=2, W=2, C=64, M=64, attrs=dict(pads=[1] * 4)),
    dict(H=2, W=2, C=8, M=64, group=2, attrs=dict(pads=[1] * 4, group=2)),  # pixels as rows (small maps)
    dict(H=1, W=1, C=16, M=20, attrs=dict(pads=[1] * 4)), dict(H=4, W=4, C=8, M=64, k=1, attrs=dict(strides=[2, 2])),
    dict(H=33, W=40, C=16, M=70, attrs=dict(pads=[1] * 4)), dict(bias=False, attrs=dict()),
    dict(C=1, M=1, H=1, W=1, k=1, attrs=dict()), dict(C=3, H=5, W=5, k=5, attrs=dict()),
]


@pytest.mark.parametrize("geometry", _GEOMETRIES, ids=lambda g: str(g))
def test_qlinear_conv_native_geometry(simd, geometry):
    g = dict(geometry)
    attrs = g.pop("attrs")
    rng = np.random.default_rng(7)
    for x_dtype, w_dtype in [(U8, S8), (S8, S8), (U8, U8)]:
        args = _conv_case(rng, x_dtype, w_dtype, U8, True, True, **g)
        np.testing.assert_array_equal(cpu.QLinearConv(np, *args, **attrs), generic.QLinearConv(np, *args, **attrs))


def test_qlinear_conv_native_saturation_and_ties(simd):
    """Outputs past both ends of the range saturate; products that land on .5 round to even."""
    x = np.full((1, 2, 3, 3), 255, U8)
    x[0, 1] = 0
    w = np.array([[1, 0], [-1, 0], [0, 1], [1, 1]], S8).reshape(4, 2, 1, 1)
    xz = np.array(0, U8)
    for y_scale in (0.5, 2.0, 4.0, 0.001):  # 255 / 2 = 127.5 -> 128, 255 / 4 = 63.75; 0.001: saturated
        args = (x, np.array(1.0, np.float32), xz, w, np.array(1.0, np.float32), np.array(0, S8),
                np.array(y_scale, np.float32), np.array(0, U8), np.array([0, 0, 0, 1], np.int32))
        got = cpu.QLinearConv(np, *args)
        np.testing.assert_array_equal(got, generic.QLinearConv(np, *args))
    x = np.arange(9, dtype=U8).reshape(1, 1, 3, 3)  # (x - 0) * 0.5: exact halves, rounded half to even
    args = (x, np.array(0.5, np.float32), np.array(0, U8), np.ones((1, 1, 1, 1), S8), np.array(1.0, np.float32),
            np.array(0, S8), np.array(1.0, np.float32), np.array(0, U8))
    np.testing.assert_array_equal(cpu.QLinearConv(np, *args).ravel(), np.rint(np.arange(9) * 0.5).astype(U8))


def test_qlinear_conv_int32_wraps(simd):
    """A sum past int32 wraps modulo 2**32, as the generic op's int32 accumulation."""
    x = np.full((1, 1, 1, 1), 255, U8)
    w = np.full((1, 1, 1, 1), -128, S8)
    B = np.array([2 ** 31 - 1], np.int32)
    args = (x, np.array(1.0, np.float32), np.array(0, U8), w, np.array(1.0, np.float32), np.array(0, S8),
            np.array(1e-9, np.float32), np.array(0, S8), B)
    np.testing.assert_array_equal(cpu.QLinearConv(np, *args), generic.QLinearConv(np, *args))


def _conv_attrs(**attrs):
    return dict(dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None), **attrs)


def _zero(rng, dtype, kind, n):
    """A zero point: None, the type's lowest or highest value, or one per channel (both ends among them)."""
    if kind == "none":
        return None
    info = np.iinfo(dtype)
    if kind == "per_channel":
        z = _ints(rng, dtype, (n,))
        z[:2] = (info.min, info.max)[:n]
        return z
    return np.array(info.min if kind == "min" else info.max, dtype)


def _conv_integer_case(rng, x_dtype, w_dtype, xz, wz, *, C=5, M=6, H=7, W=9, k=3, n=2, group=1, **_):
    x, w = _ints(rng, x_dtype, (n, C, H, W)), _ints(rng, w_dtype, (M, C // group, k, k))
    return x, w, _zero(rng, x_dtype, xz, 1) if xz != "random" else _ints(rng, x_dtype, ()), _zero(rng, w_dtype, wz, M)


def _native_conv_integer(x, w, xz, wz, attrs):
    """The native kernel's ConvInteger (asserted to run), and the generic op's."""
    got = cpu._native_conv_integer(x, xz, w, wz, _conv_attrs(**attrs), None)
    assert got is not None
    return got, generic.ConvInteger(np, x, w, xz, wz, **attrs)


@pytest.mark.parametrize("x_dtype,w_dtype", list(itertools.product([U8, S8], repeat=2)), ids=str)
@pytest.mark.parametrize("xz", ["none", "min", "max", "random"])
@pytest.mark.parametrize("wz", ["none", "min", "max", "per_channel"])
def test_conv_integer_native_equals_generic(simd, x_dtype, w_dtype, xz, wz):
    rng = np.random.default_rng(hash((x_dtype, w_dtype, xz, wz)) % 2 ** 32)
    got, want = _native_conv_integer(*_conv_integer_case(rng, x_dtype, w_dtype, xz, wz), dict(pads=[1] * 4))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("geometry", _GEOMETRIES + [dict(C=1, M=24, H=16, W=40, attrs=dict(strides=[2, 2],
                                                                                           pads=[1] * 4))],
                         ids=lambda g: str(g))
def test_conv_integer_native_geometry(simd, geometry):
    g = dict(geometry)
    attrs = g.pop("attrs")
    rng = np.random.default_rng(8)
    for x_dtype, w_dtype, xz, wz in [(U8, U8, "random", "max"), (S8, S8, "min", "per_channel"),
                                     (U8, S8, "max", "none"), (S8, U8, "none", "min")]:
        np.testing.assert_array_equal(*_native_conv_integer(*_conv_integer_case(rng, x_dtype, w_dtype, xz, wz, **g),
                                                             attrs))


def test_conv_integer_int32_wraps(simd):
    """Sums past int32 wrap modulo 2**32, as the generic op's int32 result."""
    x = np.full((1, 4160, 4, 4), 255, U8)
    w = np.full((2, 4160, 4, 4), -128, S8)
    w[1, :2] = 127
    got, want = _native_conv_integer(x, w, np.array(0, U8), None, {})
    assert (x[0].astype(np.int64) * w[0]).sum() < -2 ** 31
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("w_dtype,wz", [(U8, "random"), (U8, "per_channel"), (S8, "none")], ids=str)
def test_conv_integer_session(w_dtype, wz):
    """DynamicQuantizeLinear's zero point, read at run time, by the plan kept per session: as the generic
    session, and as onnxruntime where it has the kernel."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = _ints(rng, w_dtype, (16, 8, 3, 3))
    z = _ints(rng, w_dtype, ()) if wz == "random" else _zero(rng, w_dtype, wz, 16)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "zx"]),
             helper.make_node("ConvInteger", ["q", "w", "zx"] + (["wz"] if z is not None else []), ["y"],
                              pads=[1, 1, 1, 1], strides=[2, 2])]
    inits = [("w", w)] + ([("wz", z)] if z is not None else [])
    model = make_model(nodes, {"x": x}, outputs=["y"], inits=inits, opset=11)
    import gpuops

    sess = gpuops.InferenceSession(model, device="cpu")
    for _ in range(3):
        got = sess.run(None, {"x": x})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _generic_session(model, {"x": x})[0])
    if w_dtype == U8 and wz != "per_channel":  # what onnxruntime's kernel takes
        np.testing.assert_array_equal(got, run_both(model, {"x": x})[1][0])


@pytest.mark.parametrize("x_dtype,w_dtype", [(U8, S8), (U8, U8), (S8, S8)])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_session_matches_onnxruntime(x_dtype, w_dtype, per_channel):
    rng = np.random.default_rng(3)
    x, xs, xz, w, ws, wz, ys, yz, B = _conv_case(rng, x_dtype, w_dtype, U8 if x_dtype == U8 else S8, per_channel,
                                                 w_dtype == U8, C=8, M=16, H=12, W=12, n=1)
    if per_channel and w_dtype == U8 and ort_older_than("1.24"):  # 1.23 wants equal per-channel zero points
        wz[:] = wz[0]
    inits = [("xs", xs), ("xz", xz), ("w", w), ("ws", ws), ("wz", wz), ("ys", ys), ("yz", yz), ("B", B)]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"], ["y"],
                            pads=[1, 1, 1, 1], strides=[1, 1])
    model = make_model(node, {"x": x}, inits=inits, opset=10)
    got, want = run_both(model, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def _session(model, feeds):
    import gpuops

    return gpuops.InferenceSession(model, device="cpu").run(None, feeds)


def _generic_session(model, feeds):
    with native.disabled():
        return _session(model, feeds)


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, S8), (U8, U8), (S8, S8), (S8, U8)])
@pytest.mark.parametrize("shape", [(1, 32), (2, 7, 32), (5, 33), (70, 130)], ids=str)
@pytest.mark.parametrize("b_zero", ["none", "scalar", "per_column"])
@pytest.mark.parametrize("N", [20, 83])
def test_matmul_integer_native(simd, a_dtype, b_dtype, shape, b_zero, N):
    rng = np.random.default_rng(5)
    K = shape[-1]
    a = _ints(rng, a_dtype, shape)
    b = _ints(rng, b_dtype, (K, N))
    az = _ints(rng, a_dtype, ())
    inits = [("b", b)]
    names = ["a", "b", "az"]
    if b_zero != "none":
        inits.append(("bz", _ints(rng, b_dtype, (N,) if b_zero == "per_column" else ())))
        names.append("bz")
    node = helper.make_node("MatMulInteger", names, ["y"])
    model = make_model(node, {"a": a, "az": az}, inits=inits, opset=10)
    feeds = {"a": a, "az": az}
    got = _session(model, feeds)[0]
    np.testing.assert_array_equal(got, _generic_session(model, feeds)[0])
    assert got.dtype == np.int32
    bz = dict(inits).get("bz", np.zeros((), b_dtype))
    exact = (a.astype(np.int64) - az.astype(np.int64)) @ (b.astype(np.int64) - bz.astype(np.int64))
    np.testing.assert_array_equal(got, exact.astype(np.int32))  # |sums| < 2**31 at these sizes
    # what onnxruntime's kernel takes; 1.23 gets 8 of the (70, 130) products wrong on an Intel Xeon with
    # AVX-512 VNNI and AMX (against the exact sums above): compared from 1.24 on
    ort_wrong = shape == (70, 130) and ort_older_than("1.24")
    if (a_dtype, b_dtype) != (S8, U8) and b_zero != "per_column" and not ort_wrong:
        np.testing.assert_array_equal(got, run_both(model, feeds)[1][0])


# N: within one group of the AVX2 path's widened columns (16), and several groups with a tail of 3
WIDTHS = pytest.mark.parametrize("N", [24, 83])


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, S8), (U8, U8), (S8, S8)])
@pytest.mark.parametrize("per_column", [False, True])
@WIDTHS
def test_qlinear_matmul_native(simd, a_dtype, b_dtype, per_column, N):
    rng = np.random.default_rng(6)
    M, K = 9, 40
    a = _ints(rng, a_dtype, (M, K))
    b = _ints(rng, b_dtype, (K, N))
    shape = (N,) if per_column else ()
    inits = [("as", np.array(0.02, np.float32)), ("az", _ints(rng, a_dtype, ())), ("b", b),
             ("bs", rng.uniform(0.001, 0.01, size=shape).astype(np.float32)), ("bz", np.zeros(shape, b_dtype)),
             ("ys", np.array(0.05, np.float32)), ("yz", np.array(100 if a_dtype == U8 else -7, a_dtype))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = make_model(node, {"a": a}, inits=inits, opset=10)
    got = _session(model, {"a": a})[0]
    np.testing.assert_array_equal(got, _generic_session(model, {"a": a})[0])
    np.testing.assert_array_equal(got, run_both(model, {"a": a})[1][0])


def test_dynamic_quantize_linear_native():
    rng = np.random.default_rng(8)
    cases = [rng.standard_normal((3, 7, 32)), np.zeros(5), np.full(4, 3.0), np.full(4, -1.0), rng.uniform(0, 10, 100),
             rng.uniform(-10, 0, 100), np.array([0.5, -0.5, 1.5, 2.5]) * 127.5, np.array([np.nan, 1.0]),
             np.array([np.inf, 1.0]), np.array(2.0), rng.standard_normal((64, 64)).T, np.full(33, -0.0),
             np.where(rng.random(40) < 0.5, -0.0, rng.uniform(0, 1, 40))]
    for v in (np.nan, np.inf, -np.inf, 1e3, -1e3):  # in the first vector, a middle one, the tail
        for at in (0, 21, 36):
            cases.append(rng.standard_normal(37))
            cases[-1][at] = v
    for x in cases:
        x = np.asarray(x, np.float32)
        got, want = cpu.DynamicQuantizeLinear(np, x), generic.DynamicQuantizeLinear(np, x)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("types", list(itertools.product([U8, S8], repeat=3)), ids=str)
@pytest.mark.parametrize("shapes", [((2, 8, 5, 5), (2, 8, 5, 5)), ((2, 8, 5, 5), ()), ((), (3, 4)), ((1,), (7,))],
                         ids=str)
def test_qlinear_add_native(types, shapes):
    from gpuops.ops.contrib import quantized

    rng = np.random.default_rng(9)
    ta, tb, ty = types
    for c_scale in (0.07, 0.01, 1.0, 0.08):  # 0.08 = 0.04 + 0.04: halves, rounded half to even
        A, B = _ints(rng, ta, shapes[0]), _ints(rng, tb, shapes[1])
        args = (A, np.array(0.04, np.float32), _ints(rng, ta, ()), B, np.array(0.04, np.float32), _ints(rng, tb, ()),
                np.array(c_scale, np.float32), _ints(rng, ty, ()))
        got, want = cpu.QLinearAdd(np, *args), quantized.QLinearAdd(np, *args)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, S8), (U8, U8), (S8, S8)])
@pytest.mark.parametrize("per_column,bias", [(False, False), (True, True), (False, True)])
@WIDTHS
def test_matmul_integer_to_float_native(simd, a_dtype, b_dtype, per_column, bias, N):
    rng = np.random.default_rng(10)
    K = 32
    a = _ints(rng, a_dtype, (2, 5, K))
    inits = [("b", _ints(rng, b_dtype, (K, N))),
             ("bs", rng.uniform(0.001, 0.01, size=(N,) if per_column else ()).astype(np.float32)),
             ("bz", np.zeros((), b_dtype) if b_dtype == S8 else np.array(128, U8))]
    names = ["a", "b", "as", "bs", "az", "bz"]
    if bias:
        inits.append(("bias", rng.standard_normal(N).astype(np.float32)))
        names.append("bias")
    feeds = {"a": a, "as": np.array(0.03, np.float32), "az": _ints(rng, a_dtype, ())}
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain="com.microsoft")
    model = make_model(node, feeds, inits=inits, opset=13, opsets={"com.microsoft": 1})
    got = _session(model, feeds)[0]
    np.testing.assert_array_equal(got, _generic_session(model, feeds)[0])
    assert got.dtype == np.float32
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "b", "bs", "bz"] + (["bias"] if bias else []), ["y"],
                            domain="com.microsoft")
    feeds = {"x": rng.standard_normal((3, K)).astype(np.float32)}
    model = make_model(node, feeds, inits=inits, opset=13, opsets={"com.microsoft": 1})
    np.testing.assert_array_equal(_session(model, feeds)[0], _generic_session(model, feeds)[0])
    import gpuops

    sess = gpuops.InferenceSession(model, device="cpu")  # later runs of a shape: the product's kept plan
    for x in (feeds["x"], rng.standard_normal((3, K)).astype(np.float32) * 7, np.full((3, K), np.nan, np.float32)):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _generic_session(model, {"x": x})[0])


@pytest.mark.parametrize("types", list(itertools.product([U8, S8], repeat=2)), ids=str)
@pytest.mark.parametrize("shape", [(1, 64, 2, 2), (2, 3, 5, 7), (1, 4, 3, 3, 3), (2, 5, 1)], ids=str)
def test_qlinear_global_average_pool_native(types, shape):
    from gpuops.ops.contrib import quantized

    rng = np.random.default_rng(11)
    tx, ty = types
    for y_scale in (0.03, 0.001, 0.5):
        args = (_ints(rng, tx, shape), np.array(0.02, np.float32), _ints(rng, tx, ()), np.array(y_scale, np.float32),
                _ints(rng, ty, ()))
        got, want = cpu.QLinearGlobalAveragePool(np, *args), quantized.QLinearGlobalAveragePool(np, *args)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_dtype,b_dtype", [(U8, S8), (U8, U8), (S8, S8)])
@pytest.mark.parametrize("trans_b,out8,with_c,alpha", [(1, True, True, 1.0), (0, True, False, 0.5),
                                                       (1, False, True, 1.0), (0, False, True, 2.0)])
def test_qgemm_native(simd, a_dtype, b_dtype, trans_b, out8, with_c, alpha):
    rng = np.random.default_rng(12)
    M, K, N = 3, 64, 10
    b = _ints(rng, b_dtype, (N, K) if trans_b else (K, N))
    inits = [("as", np.array(0.02, np.float32)), ("az", _ints(rng, a_dtype, ())), ("b", b),
             ("bs", rng.uniform(0.001, 0.01, size=(N,)).astype(np.float32)),
             ("bz", np.zeros(N, b_dtype) if b_dtype == S8 else np.full(N, 128, U8)),
             ("c", rng.integers(-5000, 5000, size=(N,)).astype(np.int32) if with_c else np.zeros(0, np.int32))]
    names = ["a", "as", "az", "b", "bs", "bz", "c" if with_c else ""]
    if out8:
        inits += [("ys", np.array(0.05, np.float32)), ("yz", np.array(100 if a_dtype == U8 else -7, a_dtype))]
        names += ["ys", "yz"]
    a = _ints(rng, a_dtype, (M, K))
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=trans_b, alpha=alpha)
    model = make_model(node, {"a": a}, inits=inits, opset=13, opsets={"com.microsoft": 1})
    got = _session(model, {"a": a})[0]
    np.testing.assert_array_equal(got, _generic_session(model, {"a": a})[0])


@pytest.mark.parametrize("dtype", [U8, S8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
                                   dict(kernel_shape=[2, 2]), dict(kernel_shape=[3, 3], ceil_mode=1, strides=[2, 2]),
                                   dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2])], ids=str)
def test_max_pool_8_bit(dtype, attrs):
    """8-bit MaxPool through the float32 kernel: the generic op's results (quantized models' pools)."""
    from gpuops.ops import pool as generic_pool
    from gpuops.ops.cpu import pool

    x = _ints(np.random.default_rng(13), dtype, (2, 3, 9, 8))
    got = pool.MaxPool(np, x, **attrs)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, generic_pool.MaxPool(np, x, **attrs))
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    np.testing.assert_array_equal(*[r[0] for r in run_both(make_model(node, {"x": x}, opset=12), {"x": x})])


@pytest.mark.parametrize("types", [(U8, U8, U8), (S8, S8, S8), (U8, U8, S8)], ids=str)
def test_qlinear_add_session(types):
    """Constant parameters: the prepared path, against the generic op and onnxruntime."""
    rng = np.random.default_rng(14)
    ta, tb, ty = types
    feeds = {"a": _ints(rng, ta, (1, 8, 6, 6)), "b": _ints(rng, tb, (1, 8, 6, 6))}
    inits = [("as", np.array(0.04, np.float32)), ("az", _ints(rng, ta, ())), ("bs", np.array(0.03, np.float32)),
             ("bz", _ints(rng, tb, ())), ("cs", np.array(0.05, np.float32)), ("cz", _ints(rng, ty, ()))]
    node = helper.make_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                            domain="com.microsoft")
    model = make_model(node, feeds, inits=inits, opset=13, opsets={"com.microsoft": 1})
    got = _session(model, feeds)[0]
    assert got.dtype == ty
    np.testing.assert_array_equal(got, _generic_session(model, feeds)[0])
    if ta == tb == ty:  # what onnxruntime's kernel takes
        np.testing.assert_array_equal(got, run_both(model, feeds)[1][0])
