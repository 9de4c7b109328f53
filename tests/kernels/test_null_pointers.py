"""Absent pointer arguments: CuPy 13 launches a ``None`` kernel argument as a garbage pointer (CuPy
issue #9046 on GitHub), so no launch may pass one. The stand-in refuses ``None`` like
that hardware would misbehave; the kernels take an 8-byte integer zero as the null pointer, which
both CuPy 13 and 14 launch as NULL. Every override that has an optional operand (bias, residual,
zero point) runs here without it, against the generic op."""

import array_api_compat.numpy as anp
import numpy as np
import pytest

from gpuops import kernels, registry
from gpuops.testing import cuda_standin, emulator
from gpuops.ops.cuda import _launch

pytestmark = pytest.mark.skipif(not emulator.available(), reason="no C++ compiler (g++) for the CUDA emulator")

RNG = np.random.default_rng(12)


def _conv_epilogue():
    return kernels.get_function("conv.cu", "conv_epilogue<float>", cuda_standin.BACKEND, 0)


def test_standin_launch_refuses_none_and_takes_a_null_pointer():
    xp = cuda_standin.xp
    y = xp.asarray(np.arange(6, dtype=np.float32).reshape(1, 2, 3))
    bias = xp.asarray(np.array([10, 20], np.float32))
    args = (y, bias, None, y, np.int64(6), np.int32(1), np.int32(2), np.int64(3), np.int32(0), np.float32(0),
            np.float32(0))
    with pytest.raises(TypeError, match="argument 2 is None"):
        _conv_epilogue()((1,), (32,), args)
    _conv_epilogue()((1,), (32,), args[:2] + (_launch.NULL,) + args[3:])
    np.testing.assert_array_equal(y.get(), np.arange(6, dtype=np.float32).reshape(1, 2, 3) + [[[10], [20]]])


def test_emulator_checks_null_pointers():
    fn = emulator.RawModule(code=kernels.source("conv.cu"), options=kernels.OPTIONS,
                            name_expressions=kernels.NAME_EXPRESSIONS["conv.cu"]).get_function("conv_epilogue<float>")
    y = np.ones((1, 2, 3), np.float32)
    tail = (np.int64(6), np.int32(1), np.int32(2), np.int64(3), np.int32(1), np.float32(0), np.float32(0))  # ReLU
    with pytest.raises(emulator.LaunchError, match="None is not a null pointer"):
        fn((1,), (32,), (y, None, None, y, *tail))
    with pytest.raises(emulator.LaunchError, match="null pointer"):  # a nonzero address cannot be emulated
        fn((1,), (32,), (y, np.uint64(64), 0, y, *tail))
    with pytest.raises(emulator.LaunchError, match="null pointer"):  # 4 bytes would misalign the arguments
        fn((1,), (32,), (y, np.int32(0), 0, y, *tail))
    fn((1,), (32,), (y, np.uint64(0), 0, y, *tail))  # a Python int travels as int64, as in CuPy
    np.testing.assert_array_equal(y, np.ones((1, 2, 3), np.float32))


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _q(*shape, dtype=np.uint8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


# (op, opset, inputs (None: absent), attributes): each launches a kernel with an absent pointer operand
CASES = {
    "depthwise-no-bias": ("Conv", 22, (_f(1, 3, 5, 5), _f(3, 1, 3, 3)), dict(group=3)),
    "conv-no-bias-residual": ("FusedConv", 1, (_f(1, 2, 5, 5), _f(4, 2, 3, 3), None, _f(1, 4, 3, 3)),
                              dict(activation="Relu")),
    "conv-bias-no-residual": ("FusedConv", 1, (_f(1, 2, 5, 5), _f(4, 2, 3, 3), _f(4)), dict(activation="Relu")),
    "conv-transpose-no-bias": ("ConvTranspose", 22, (_f(1, 2, 3, 3), _f(2, 3, 2, 2)), {}),
    "quantize-no-zero-point": ("QuantizeLinear", 21, (_f(2, 3, 4) * 20, np.float32(0.25)), {}),
    "dequantize-no-zero-point": ("DequantizeLinear", 21, (_q(2, 3, 4), np.float32(0.25)), {}),
    "matmul-integer-no-zero-points": ("MatMulInteger", 10, (_q(3, 4), _q(4, 5, dtype=np.int8)), {}),
    "qlinear-conv-no-bias": ("QLinearConv", 10, (_q(1, 2, 4, 4), np.float32(0.1), np.uint8(3), _q(3, 2, 2, 2),
                                                 np.float32(0.05), np.uint8(1), np.float32(0.2), np.uint8(5)), {}),
}


@pytest.mark.parametrize("case", CASES)
def test_overrides_launch_absent_operands_as_null_pointers(case):
    op_type, opset, inputs, attrs = CASES[case]
    domain = "com.microsoft" if op_type == "FusedConv" else ""
    impl = registry.resolve(domain, op_type, opset, device="cuda")
    assert impl.device == "cuda"
    xp = cuda_standin.xp
    want = registry.resolve(domain, op_type, opset, device="cpu").fn(
        anp, *[None if a is None else np.asarray(a) for a in inputs], **attrs)
    with cuda_standin.strict():
        got = impl.fn(xp, *[None if a is None else xp.asarray(np.asarray(a)) for a in inputs], **attrs)
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
