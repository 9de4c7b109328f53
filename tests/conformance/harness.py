"""Shared helpers: run one onnx backend test case through gpuops and compare outputs."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import gpuops


@dataclass(frozen=True)
class ExpectedFailure:
    """An expected-failure entry: the exception type a case must fail with, a text its message must
    contain (whitespace runs count as one space), and why."""

    exception: str
    match: str
    reason: str

    def explains(self, error: BaseException) -> bool:
        """Whether ``error`` is this failure: its type (or a base class) is named ``exception`` and
        its message contains ``match``."""
        names = {c.__name__ for c in type(error).__mro__}
        return self.exception in names and self.match in _one_line(str(error))

    def line(self, name: str) -> str:
        return f'{name}  # {self.exception} "{self.match}" -- {self.reason}'

    @classmethod
    def of(cls, error: BaseException, reason: str) -> "ExpectedFailure":
        """The entry that ``error`` satisfies: its type and the start of its message."""
        return cls(type(error).__name__, _one_line(str(error))[:60].replace('"', "'").strip(), reason)


_ENTRY = re.compile(r'^(\w+)\s+"([^"]+)"\s+--\s+(\S.*)$')


def _one_line(text: str) -> str:
    return " ".join(text.split())


def load_expected_failures(path: Path) -> dict[str, ExpectedFailure]:
    """``name  # ExceptionType "text in its message" -- reason`` lines -> {name: ExpectedFailure};
    every entry must carry all three."""
    out: dict[str, ExpectedFailure] = {}
    if not path.exists():
        return out
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, rest = line.partition("#")
        m = _ENTRY.match(rest.strip())
        if not sep or not m:
            raise ValueError(f'{path.name}:{lineno}: entry {name.strip()!r} is not '
                             f'"name  # ExceptionType \"text in its message\" -- reason"')
        out[name.strip()] = ExpectedFailure(*m.groups())
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
