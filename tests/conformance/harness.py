"""Shared helpers: run one onnx backend test case through gpuops and compare outputs."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import gpuops


def load_expected_failures(path: Path) -> dict[str, str]:
    """``name  # reason`` lines -> {name: reason}; every entry must carry a reason."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, reason = line.partition("#")
        if not sep or not reason.strip():
            raise ValueError(f"{path.name}:{lineno}: entry {name.strip()!r} has no reason")
        out[name.strip()] = reason.strip()
    return out


def device_guard(device: str):
    """On the CUDA stand-in, a graph run may not convert device arrays to host values implicitly."""
    if device.startswith("cuda") and gpuops.device.uses_standin():
        from gpuops.testing import cuda_standin

        return cuda_standin.strict()
    return contextlib.nullcontext()


def check_case(case, device: str) -> None:
    sess = gpuops.InferenceSession(case.model, device=device)
    names = [i.name for i in case.model.graph.input]
    out_names = [o.name for o in case.model.graph.output]
    for inputs, expected in case.data_sets:
        feeds = dict(zip(names, map(_from_proto, inputs)))
        expected = [_from_proto(e) for e in expected]
        with device_guard(device), unchanged(feeds):
            got = sess.run(out_names, feeds)
        assert len(got) == len(expected)
        for name, g, e in zip(out_names, got, expected):
            assert_close(g, e, case.rtol, case.atol, name)


@contextlib.contextmanager
def unchanged(feeds):
    """The block must leave the host arrays (and sequences of them) in ``feeds`` as they were: no op
    writes into what it reads (buffer reuse, in-place kernels)."""
    before = {k: _copy(v) for k, v in feeds.items() if _host(v)}
    yield
    for k, v in before.items():
        assert _same(feeds[k], v), f"input {k!r} was modified by the run"


def _host(value) -> bool:
    return isinstance(value, np.ndarray) or (isinstance(value, list) and all(map(_host, value)))


def _copy(value):
    return [_copy(v) for v in value] if isinstance(value, list) else (
        None if value is None else np.array(value, copy=True))


def _same(a, b) -> bool:
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if a is None or b is None:
        return a is b
    a = np.asarray(a)
    try:
        return np.array_equal(a, b, equal_nan=a.dtype.kind not in "OUSbiu")
    except TypeError:  # no isnan for the type
        return np.array_equal(a, b)


def _from_proto(value):
    """Some cases carry TensorProtos (float8, int4...): as the onnx backend runner does, read them."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def assert_close(got, expected, rtol: float, atol: float, name: str = "") -> None:
    if isinstance(expected, list):
        assert isinstance(got, list), f"{name}: expected a sequence, got {type(got).__name__}"
        assert len(got) == len(expected), f"{name}: sequence length {len(got)} != {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, rtol, atol, f"{name}[{i}]")
        return
    if expected is None:
        assert got is None, f"{name}: expected an empty optional"
        return
    expected = np.asarray(expected)
    got = np.asarray(got)
    assert got.shape == expected.shape, f"{name}: shape {got.shape} != expected {expected.shape}"
    if expected.dtype == object:
        assert got.dtype == object or got.dtype.kind in "US", f"{name}: dtype {got.dtype} != {expected.dtype}"
        np.testing.assert_array_equal(got.astype(object), expected, err_msg=name)
        return
    assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} != expected {expected.dtype}"
    if expected.dtype.kind in "biu" or expected.dtype == bool:
        np.testing.assert_array_equal(got, expected, err_msg=name)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
