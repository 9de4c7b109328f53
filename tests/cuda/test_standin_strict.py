"""The CPU stand-in refuses (or counts as a host sync) what CuPy 14 refuses or syncs on.

The stand-in is the only witness of the CUDA path without a GPU, so each rule here is CuPy 14.2's,
read from its source (cited per test); a stand-in that accepted what a GPU rejects would hide a bug.
"""

import operator

import ml_dtypes
import numpy as np
import pytest

from gpuops import device as _device
from gpuops.dtypes import device_supported

pytestmark = pytest.mark.skipif(not _device.uses_standin(), reason="checks the CPU stand-in's own rules")


@pytest.fixture
def sd():
    from gpuops.testing import cuda_standin

    return cuda_standin


@pytest.fixture
def a(sd):
    return sd.xp.asarray(np.arange(6, dtype=np.float32))


# -- dtypes: cupy/_core/_dtype.pyx check_supported_dtype, cupy/_core/_scalar.pyx (bfloat16) --------

def test_bfloat16_lives_on_the_device_and_computes_there(sd):
    # CuPy 14 registers ml_dtypes' bfloat16 (NumPy >= 2.1.2) and has bfloat16 ufunc loops
    # (cupy/_util.pyx bf16_loop): gpuops keeps bfloat16 tensors on the device
    x = sd.xp.asarray(np.arange(4, dtype=ml_dtypes.bfloat16))
    assert x.dtype == np.dtype(ml_dtypes.bfloat16) and isinstance(x, sd.ndarray)
    y = x * 2 + 1
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.get().astype(np.float32), [1, 3, 5, 7])
    assert device_supported(ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.int4, ml_dtypes.uint4,
                                   ml_dtypes.float4_e2m1fn, "U3", "S2", object, "M8[s]", np.longdouble])
def test_what_cupy_cannot_hold_is_refused_with_its_value_error(sd, dtype):
    with pytest.raises(ValueError, match="Unsupported dtype"):
        sd.xp.asarray(np.zeros(2, dtype))
    with pytest.raises(ValueError, match="Unsupported dtype"):
        sd.cp.empty((2,), dtype=dtype)
    if np.dtype(dtype).kind != "g" and np.dtype(dtype).type.__module__ == "ml_dtypes":
        assert not device_supported(dtype)  # gpuops keeps them on the host


def test_big_endian_data_is_copied_little_endian_and_big_endian_arrays_are_refused(sd):
    # core.pyx _array_default: a host array is normalised to little-endian (_dtype.normalize_dtype);
    # creating a device array of a big-endian type is a ValueError
    x = sd.xp.asarray(np.arange(3, dtype=">f4"))
    assert x.dtype == np.dtype("<f4")
    np.testing.assert_array_equal(x.get(), [0, 1, 2])
    with pytest.raises(ValueError, match="big-endian"):
        sd.cp.zeros((2,), dtype=">i4")
    assert device_supported(">f4")  # uploaded, so device-resident


def test_set_takes_a_host_array_of_the_very_dtype_and_shape(sd):
    # core.pyx ndarray.set: numpy.ndarray only, dtype equal (byte order included), same shape
    x = sd.xp.zeros((3,), dtype=sd.xp.float32)
    with pytest.raises(TypeError, match="cannot be set to"):
        x.set(np.arange(3, dtype=">f4"))
    with pytest.raises(TypeError, match="cannot be set to"):
        x.set(np.arange(3, dtype=np.float64))
    with pytest.raises(ValueError, match="Shape mismatch"):
        x.set(np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match="Only numpy.ndarray"):
        x.set([0.0, 1.0, 2.0])
    x.set(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(x.get(), [0, 1, 2])


def test_a_big_endian_feed_is_uploaded_little_endian():
    # the session's pinned upload made a device array of the feed's own (big-endian) type: a
    # ValueError on CuPy (found by the fuzzer's byte-order mutation once the stand-in refused it)
    import gpuops

    from tests.test_cuda_path import chain_model, expected_chain

    sess = gpuops.InferenceSession(chain_model(n=2), device="cuda")
    x = np.arange(512, dtype=">f4").reshape(2, 256) - 100
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], expected_chain(x.astype(np.float32), 2))


def test_structured_types_without_references_are_device_types(sd):
    x = sd.xp.asarray(np.zeros(2, "i4,f4"))
    assert x.dtype == np.dtype("i4,f4")


def test_sorting_bfloat16_is_refused_as_thrust_does(sd):
    # cupy/cuda/thrust.pyx sort/argsort/lexsort: cupy/cuda/common.pyx _get_dtype_id knows NumPy's types
    x = sd.xp.asarray(np.array([3, 1, 2], dtype=ml_dtypes.bfloat16))
    with pytest.raises(NotImplementedError, match="Sorting arrays with dtype 'bfloat16'"):
        sd.cp.sort(x)
    with pytest.raises(NotImplementedError, match="Sorting arrays with dtype 'bfloat16'"):
        x.argsort()
    with pytest.raises(TypeError, match="Sorting keys with dtype 'bfloat16'"):
        sd.cp.lexsort(x)
    np.testing.assert_array_equal(sd.xp.argsort(x.astype(np.float32)).get(), [1, 2, 0])


def test_bfloat16_unique_and_topk_sort_in_float32_on_the_device():
    # the ops fixed for CuPy's sorts: Unique and TopK of bfloat16 tensors, now device-resident
    import gpuops
    from onnx import TensorProto, helper

    x = np.array([[3, 1, 2, 1, 5]], dtype=ml_dtypes.bfloat16)
    for node, outs in [(helper.make_node("Unique", ["x"], ["y"], sorted=1), ["y"]),
                       (helper.make_node("TopK", ["x", "k"], ["v", "i"]), ["v", "i"])]:
        ins = [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 5])]
        feeds = {"x": x}
        if node.op_type == "TopK":
            ins.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
            feeds["k"] = np.array([2])
        g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                                                 for o in outs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)])
        want = gpuops.InferenceSession(m, device="cpu").run(None, feeds)
        got = gpuops.InferenceSession(m, device="cuda").run(None, feeds)
        for w, o in zip(want, got):
            assert o.dtype == w.dtype
            np.testing.assert_array_equal(o.astype(np.float32), w.astype(np.float32))


# -- device arrays as Python integers: cupy/_core/core.pyx (no __index__), internal.pyx get_size -------

def test_a_device_array_is_never_a_python_integer(sd, a):
    n = sd.xp.asarray(3)
    for use in (lambda: range(n), lambda: operator.index(n), lambda: [1, 2, 3, 4][n]):
        with pytest.raises(TypeError, match="integer"):
            use()


@pytest.mark.parametrize("call", [
    "xp.reshape(a, xp.asarray([2, 3]))", "a.reshape(xp.asarray(2), 3)", "a.reshape((xp.asarray(2), 3))",
    "xp.zeros(xp.asarray([2, 3]))", "xp.empty(xp.asarray(2))", "xp.full((xp.asarray(2),), 1.0)",
    "xp.broadcast_to(a, (xp.asarray(2), 6))", "xp.sum(a, axis=xp.asarray(0))", "a.sum(xp.asarray(0))",
    "xp.max(a, axis=(xp.asarray(0),))", "xp.expand_dims(a, xp.asarray(0))", "xp.moveaxis(m, xp.asarray(0), 1)",
    "xp.permute_dims(m, (xp.asarray(1), 0))", "a.transpose(xp.asarray(0))", "xp.concat([a, a], axis=xp.asarray(0))",
    "xp.take(a, xp.asarray([0]), axis=xp.asarray(0))", "xp.flip(a, axis=xp.asarray(0))", "xp.tile(a, xp.asarray(2))",
    "xp.squeeze(m[:1], axis=xp.asarray(0))", "m.swapaxes(xp.asarray(0), 1)", "xp.eye(xp.asarray(2))",
    "xp.arange(xp.asarray(3))", "xp.fft.rfft(a, n=xp.asarray(4))",
])
def test_device_arrays_as_shapes_or_axes_are_type_errors_not_reads(sd, a, call):
    # CuPy converts shapes and axes to Py_ssize_t (internal.pyx get_size, _reduction.pyx _get_axis,
    # _routines_manipulation.pyx); its ndarray has no __index__, so a device array there is a TypeError
    # and nothing is read back (ranges.py arange: numpy.dtype(type(val)) refuses it without a dtype)
    m = sd.xp.reshape(a, (2, 3))
    before = sd.sync_count()
    with pytest.raises(TypeError):
        eval(call, {"xp": sd.xp, "a": a, "m": m})
    assert sd.sync_count() == before


def test_reading_device_integers_is_a_counted_sync(sd, a):
    # __int__/__float__/__bool__ = int(self.get()) ...; item()/tolist() = self.get()...; a slice bound
    # is read back with int() (internal.pyx _extract_slice_element); arange(..., dtype=) reads its
    # bounds back (int(numpy.ceil((stop - start) / step)))
    n = sd.xp.asarray(3)
    with sd.tally() as t:
        assert int(n) == 3 and float(n) == 3.0 and bool(n) and n.item() == 3 and n.tolist() == 3
        assert a[:n].shape == (3,)
        a[n:] = 0
        assert sd.cp.arange(n, dtype=np.int64).shape == (3,)
    assert t.syncs == ["int()", "float()", "bool()", ".item()", ".tolist()", "int()", "int()",
                       "arange() with device bounds"]
    with sd.strict(), pytest.raises(sd.HostSyncError):
        a[:n]
    with pytest.raises(ValueError, match="size 1"):
        a.item()  # checked before any read
    with pytest.raises(TypeError):
        n.item(0)  # CuPy's item() takes no index


# -- host operands and NumPy-only keywords: cupy/_core/_kernel.pyx, cupy/_math, cupy/_statistics -------

@pytest.mark.parametrize("call", [
    "a + np.ones(6, np.float32)", "np.ones(6, np.float32) + a", "a * np.asarray(2.0)", "a < np.ones(6)",
    "xp.add(a, np.ones(6))", "xp.maximum(np.ones(6), a)", "xp.where(a > 0, a, np.zeros(6))",
    "xp.where(np.ones(6, bool), a, a)", "xp.concat([a, np.ones(6, np.float32)])", "xp.stack([a, np.ones(6)])",
    "xp.matmul(xp.reshape(a, (2, 3)), np.ones((3, 2), np.float32))", "a + [1, 2, 3, 4, 5, 6]",
    "xp.add(a, 1, out=np.empty(6))",
])
def test_host_arrays_as_kernel_operands_are_type_errors(sd, a, call):
    # _kernel.pyx _preprocess_args: device arrays, Python and NumPy scalars only (CScalar refuses a
    # numpy.ndarray, 0-d included, and lists); concatenate: "Only cupy arrays can be concatenated"
    with pytest.raises(TypeError):
        eval(call, {"xp": sd.xp, "a": a, "np": np})


def test_scalars_and_0d_host_comparisons_stay_allowed(sd, a):
    # Python and NumPy scalars are kernel scalars; __richcmp__ takes a 0-d host array's item()
    assert (a + 1).shape == (6,) and (a * np.float32(2)).shape == (6,)
    assert (a == np.asarray(3.0)).get().sum() == 1
    assert not (a == None).get().any()  # noqa: E711 - CuPy compares with None elementwise: all False
    a[...] = np.arange(6, dtype=np.float32)  # assignment copies host data up (an explicit h2d)
    np.testing.assert_array_equal(sd.xp.take(a, np.array([1, 2])).get(), [1, 2])  # host indices are uploaded


@pytest.mark.parametrize("call,err", [
    ("xp.sum(a, where=a > 0)", "unexpected keyword argument 'where'"),
    ("xp.max(a, initial=0.0)", "unexpected keyword argument 'initial'"),
    ("xp.min(a, initial=0.0)", "unexpected keyword argument 'initial'"),
    ("xp.prod(a, initial=1.0)", "unexpected keyword argument 'initial'"),
    ("xp.mean(a, where=a > 0)", "unexpected keyword argument 'where'"),
    ("xp.any(a, where=a > 0)", "unexpected keyword argument 'where'"),
    ("xp.all(a, where=a > 0)", "unexpected keyword argument 'where'"),
    ("a.sum(initial=0.0)", "unexpected keyword argument 'initial'"),
    ("a.max(where=a > 0, initial=0)", "unexpected keyword argument"),
    ("xp.add(a, a, where=a > 0)", "Wrong arguments"),
    ("xp.exp(a, order='C')", "Wrong arguments"),
    ("sd.cp.reshape(a, shape=(2, 3))", "unexpected keyword argument 'shape'"),  # CuPy 14: newshape
    ("sd.cp.sort(a, stable=True)", "unexpected keyword argument 'stable'"),
    ("sd.cp.clip(a, min=0, max=1)", "unexpected keyword argument 'min'"),
    ("xp.cumsum(a, include_initial=True)", "unexpected keyword argument 'include_initial'"),
])
def test_numpy_only_keywords_are_refused(sd, a, call, err):
    # cupy/_math/sumprod.py sum(a, axis, dtype, out, keepdims); _statistics/order.py amax/amin(a, axis,
    # out, keepdims); _logic/truth.py; _statistics/meanvar.py; _kernel.pyx ufunc.__call__ takes out,
    # dtype, casting only ("Wrong arguments"); _manipulation/shape.py reshape(a, newshape, order, *, copy)
    with pytest.raises(TypeError, match=err):
        eval(call, {"xp": sd.xp, "a": a, "sd": sd})


@pytest.mark.parametrize("call,err", [
    ("xp.piecewise(a, [a > 0], [lambda v: v, 0])", NotImplementedError),  # _functional/piecewise.py
    ("sd.cp.maximum.reduce(a)", NotImplementedError),  # _kernel.pyx ufunc.reduce: add and multiply only
    ("sd.cp.minimum.accumulate(a)", NotImplementedError),
    ("sd.cp.maximum.at(a, [0], 1.0)", NotImplementedError),  # ufunc.at: no scatter op for maximum
    ("sd.cp.ma", AttributeError), ("sd.cp.strings", AttributeError), ("sd.cp.vecdot", AttributeError),
    ("sd.cp.unstack", AttributeError), ("sd.cp.linalg.matrix_norm", AttributeError),
    ("a.to_device('cpu')", AttributeError), ("a.itemset(0, 1)", AttributeError), ("a.ctypes", AttributeError),
])
def test_what_cupy_lacks_is_refused(sd, a, call, err):
    with pytest.raises(err):
        eval(call, {"xp": sd.xp, "a": a, "sd": sd})


def test_what_cupy_has_of_them_still_works(sd, a):
    np.testing.assert_array_equal(sd.cp.add.reduce(a).get(), 15)
    np.testing.assert_array_equal(sd.xp.piecewise(a, [a > 2], [1.0, 0.0]).get(), [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(sd.xp.reshape(a, (2, 3)).shape, (2, 3))
    np.testing.assert_array_equal(sd.xp.vecdot(a, a).get(), 55)  # array-api-compat's, as on CuPy 14
    assert len(sd.xp.unstack(sd.xp.reshape(a, (2, 3)))) == 2
    b = sd.xp.zeros((6,), dtype=sd.xp.float32)
    sd.cp.add.at(b, sd.xp.asarray([0, 0]), 1.0)
    np.testing.assert_array_equal(b.get()[:2], [2, 0])


@pytest.mark.parametrize("call,err", [
    ("sd.cp.clip(a, np.zeros(6), 1.0)", TypeError),  # ndarray.clip -> the _clip ufunc: "Unsupported type"
    ("a.clip(0.0, np.ones(6))", TypeError),
    ("sd.cp.dot(a, np.ones(6, np.float32))", TypeError),  # _routines_linalg.pyx dot(_ndarray_base a, b)
    ("a.dot(np.ones(6, np.float32))", TypeError),
    ("sd.cp.searchsorted(a, np.ones(2))", NotImplementedError),  # _sorting/search.py _searchsorted
    ("sd.cp.searchsorted(np.ones(2), a)", NotImplementedError),
    ("sd.cp.full((6,), np.ones(6))", ValueError),  # _manipulation/basic.py copyto: non-scalar numpy.ndarray
    ("sd.cp.copyto(a, np.ones(6, np.float32))", ValueError),
    ("sd.cp.sum([1.0, 2.0])", AttributeError),  # sumprod.py sum(a) is a.sum(): a list has none
    ("sd.cp.isin(a, np.ones(2))", TypeError),  # _logic/truth.py in1d: an elementwise kernel over ar2
])
def test_host_operands_of_methods_and_copies_are_refused(sd, a, call, err):
    with pytest.raises(err):
        eval(call, {"a": a, "sd": sd, "np": np})


def test_functions_that_call_a_host_arrays_method_answer_on_the_host(sd, a):
    # cupy.sum(a) is a.sum() (sumprod.py, order.py, meanvar.py...): on a NumPy array, NumPy's result
    host = np.arange(4, dtype=np.float32)
    for got in (sd.cp.sum(host), sd.cp.max(host, axis=0), sd.cp.mean(host), sd.cp.clip(host, 1, 2)):
        assert isinstance(got, (np.ndarray, np.generic)) and not isinstance(got, sd.ndarray)
    np.testing.assert_array_equal(sd.cp.clip(host, 1, 2), [1, 1, 2, 2])
    assert isinstance(sd.cp.sum(a), sd.ndarray)
    np.testing.assert_array_equal(sd.cp.full((2,), np.asarray(3.0)).get(), [3, 3])  # a size-1 host array


# -- captures: cupy/cuda/memory.pyx (copy_to_host_async, copy_from_host_async), cupy/cuda/graph.pyx -----

def test_host_copies_in_a_capture_raise_cupys_runtime_errors(sd, a):
    # MemoryPointer.copy_to_host_async / copy_from_host_async refuse a capturing stream with these
    # RuntimeErrors; .get(), .item() and a pageable upload all go through them
    s = sd.cuda.Stream(non_blocking=True)
    with s:
        for read in (a.get, lambda: a[0].item()):
            s.begin_capture()
            with pytest.raises(RuntimeError, match=f"^{sd.CAPTURING_D2H}"):
                read()
            with pytest.raises(sd.StreamCaptureError):
                s.end_capture()
        for write in (lambda: a.set(np.zeros(6, np.float32)), lambda: sd.xp.asarray(np.ones(3, np.float32))):
            s.begin_capture()
            with pytest.raises(RuntimeError, match=f"^{sd.CAPTURING_H2D}"):
                write()
            with pytest.raises(sd.StreamCaptureError):
                s.end_capture()
    assert sd.CAPTURING_D2H == "the current stream is capturing, so D2H transfers are disallowed"


def test_a_graph_takes_no_weak_reference_as_cupys_cdef_graph(sd, a):
    import weakref

    s = sd.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        b = a * 2
        g = s.end_capture()
    with pytest.raises(TypeError):
        weakref.ref(g)
    g.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(b.get(), np.arange(6) * 2)
