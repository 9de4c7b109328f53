"""MDF expressions and models for the fuzzer: a grammar of well-formed expressions (checked against
Python's own evaluation of the same text), hostile payloads, and mutated small models."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

SCOPE = {"a": 3.0, "b": 0.5, "n": 4, "x": np.array([[1.0, -2.0], [3.0, 0.5]])}
_FUNCS = ["abs", "math.exp", "math.sin", "numpy.tanh", "numpy.maximum", "exp", "cos", "numpy.sum", "max", "min"]
_BINARY = {"abs": 1, "math.exp": 1, "math.sin": 1, "numpy.tanh": 1, "numpy.maximum": 2, "exp": 1, "cos": 1,
           "numpy.sum": 1, "max": 2, "min": 2}
_SCALAR_ONLY = {"math.exp", "math.sin", "max", "min"}

_atoms = st.one_of(st.sampled_from(["a", "b", "n", "0", "1", "2.5", "-3", "1e-3", "math.pi", "True", "7 % 3"]),
                   st.integers(-9, 9).map(str), st.floats(-10, 10, allow_nan=False).map(lambda f: repr(round(f, 3))))
_array_atoms = st.sampled_from(["x", "x[0]", "x[:, 1]", "x[::-1]", "x[1, 0]"])


def _combine(children):
    return st.one_of(
        st.tuples(children, st.sampled_from(["+", "-", "*", "/", "<", ">=", "=="]), children).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from(["0", "1", "2", "0.5", "-1"])).map(lambda t: f"({t[0]}) ** {t[1]}"),
        st.tuples(st.sampled_from(["-", "+"]), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from([f for f in _FUNCS if f not in _SCALAR_ONLY]), children, children).map(
            lambda t: f"{t[0]}({t[1]}, {t[2]})" if _BINARY[t[0]] == 2 else f"{t[0]}({t[1]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if a > {t[2]} else {t[1]})"),
    )


scalar_expressions = st.recursive(_atoms, _combine, max_leaves=12)
array_expressions = st.recursive(st.one_of(_atoms, _array_atoms), _combine, max_leaves=10)

HOSTILE = [
    "9**9**9", "pow(10, 10**9)", "10**10**10", "2**2**2**2**2", "1" + "+1" * 100_000, "-" * 100_000 + "1",
    "9" * 5000, "(" * 1000 + "1" + ")" * 1000, "[" * 500 + "]" * 500, "__import__('os').system('true')",
    "a.__class__.__mro__", "(lambda: 1)()", "[i for i in range(10**9)]", "'a' * 10**10", "open('/etc/passwd')",
    "numpy.zeros(10**12)", "numpy.ones((2**20, 2**20))", "x ** 10**9", "math.factorial(10**6)", "eval('1')",
    "getattr(a, 'real')", "globals()", "a; b", "a if", "", " ", "\0", "a" * 20_000, "max(range(10**12))",
    "numpy.tile(x, 10**6)", "int('9' * 5000)", "float('1e999')", "1e999 - 1e999", "1/0", "n // 0", "n % 0",
    "numpy.arange(2**40)", "x[10**20]", "x[-10**20:10**20]", "{}.__class__", "str(a)", "len(x) * 'ab'",
]
# Hostile-looking but within gpuops' limits (gpuops.mdf.expr.MAX_*): these give Python's own value.
# x ** 10**9 is one float power per element; numpy.tile(x, 10**6) makes 4e6 elements (< 2**27);
# the rest are IEEE infinities/NaN, a clipped slice and a 4-character string.
BOUNDED = {"x ** 10**9", "numpy.tile(x, 10**6)", "float('1e999')", "1e999 - 1e999", "x[-10**20:10**20]",
           "len(x) * 'ab'"}
REFUSE_SECONDS = 10.0  # a refusal takes well under a second; this bounds a hang or a runaway evaluation


def python_value(source: str):
    """Python's (NumPy's) own value of a :data:`BOUNDED` expression, overflow allowed."""
    ns = {"math": math, "numpy": np, "float": float, "len": len, **SCOPE}
    with np.errstate(all="ignore"):
        return eval(source, {"__builtins__": {}}, ns)  # noqa: S307 - a fixed expression of this module


def oracle(source: str):
    """Python's value of a grammar expression (the test's own eval of text it generated), or None
    where Python raises or warns."""
    ns = {"math": math, "numpy": np, "np": np, "abs": abs, "max": max, "min": min, "exp": np.exp, "cos": np.cos,
          **SCOPE}
    try:
        with np.errstate(all="raise"):
            value = eval(source, {"__builtins__": {}}, ns)  # noqa: S307 - text from the grammar above
    except Exception:
        return None
    return None if np.iscomplexobj(value) else value  # Python's (-3) ** 0.5 is complex, NumPy's nan
