"""MDF expressions, parsed with :mod:`ast` against a whitelist and compiled to closures; never ``eval``.

An expression (a parameter ``value``, a function argument, an output port, a time derivative, a
condition ``test``...) compiles once into a function of the scope ``{name: value}``. What is allowed:
numbers, strings, ``True/False/None``, list/tuple/dict literals, names of the node's ports,
parameters and functions, arithmetic (``+ - * / // % ** @``, unary ``- + ~ not``), comparisons, ``and
or``, ``a if c else b``, indexing and slicing, and calls of whitelisted math functions
(``math.exp``, ``numpy.maximum``, ``exp``, ``abs``, ``min``...). Anything else is an
:class:`ExpressionError` naming where the expression sits.

Expressions are bounded so that a small file cannot hang or exhaust the session: at most
:data:`MAX_EXPRESSION_LENGTH` characters and :data:`MAX_EXPRESSION_DEPTH` levels of nesting, integer
powers of at most :data:`MAX_INT_BITS` bits, and arrays, strings or lists made by an expression
(``numpy.zeros``, ``numpy.tile``, ``'a' * n``...) of at most :data:`MAX_ELEMENTS` elements. Past a
bound, compiling is an :class:`ExpressionError`, running a :class:`~gpuops.errors.NodeError`.

Values are kept where they belong: Python numbers stay host scalars (on CUDA they are kernel
arguments), arrays stay arrays of the session's device (``xp``), and dicts, strings and lists (the
values of ACT-R models) are host objects. Ids that are not Python names (``/A/Add``, ``x.3``) work
as plain references: they are renamed before parsing.

One module, past 500 lines: the whitelist, the compiler and the bounds are one security boundary,
reviewed together.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import operator
import re
from functools import reduce
from typing import Any, Callable

import numpy as np

from ..device import Device, to_host
from ..errors import ModelError
from . import batch as B
from .batch import Batched

NOT_CONST = object()
MAX_EXPRESSION_LENGTH = 10_000  # characters
MAX_EXPRESSION_DEPTH = 100  # nesting levels of the syntax tree
MAX_INT_BITS = 4096  # the size of an integer power
MAX_ELEMENTS = 2 ** 27  # elements (1 GiB of float64) of an array, string or list an expression makes


class ExpressionError(ModelError):
    """An MDF expression uses syntax or names outside the whitelist, or exceeds a limit."""


class ExpressionLimit(ArithmeticError):
    """Evaluating an expression would exceed a limit (too big an integer, array or string)."""


class Expr:
    """A compiled expression: ``expr(scope)``; ``names`` are the scope names it reads and
    ``const`` its value when it reads none (else :data:`NOT_CONST`)."""

    __slots__ = ("fn", "names", "const", "source")

    def __init__(self, fn: Callable[[dict], Any], names: frozenset, const=NOT_CONST, source=None):
        self.fn, self.names, self.const, self.source = fn, names, const, source

    def __call__(self, scope: dict):
        return self.fn(scope)


# -- value helpers -----------------------------------------------------------------------------

class Values:
    """Where values live on one device: conversions between literals, host and device arrays."""

    def __init__(self, device: Device):
        self.device = device
        self.xp = device.xp
        self.array_type = device.lib.ndarray if device.lib is not None else np.ndarray

    def is_array(self, v) -> bool:
        return isinstance(v, self.array_type)

    def literal(self, v):
        """A literal from the model (number, list, dict, ndarray...) as the engine keeps it."""
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, (list, tuple)) and v and not any(self.is_array(x) for x in v):
            try:
                a = np.asarray(v)
            except ValueError:  # ragged
                return list(v)
            if a.dtype.kind in "biuf":
                return self.array(a)
            return list(v)
        if hasattr(v, "__dlpack__") and not self.is_array(v):  # torch, jax...: onto this device
            return self.array(v)
        return v

    def array(self, v):
        """Anything array-like -> an array on the device (host arrays of non-device dtypes stay)."""
        if self.is_array(v):
            return v
        if isinstance(v, (list, tuple, bool, int, float, complex)):
            v = np.asarray(v)
        return self.device.asarray(v)

    def truth(self, v) -> bool:
        """``bool(v)``; a device array is copied to the host explicitly (a synchronisation)."""
        if self.is_array(v):
            return bool(to_host(v))
        return bool(v)

    def host_scalar(self, v):
        return to_host(v).item() if self.is_array(v) else v


# -- the whitelist -----------------------------------------------------------------------------


def _pow(a, b, *mod):
    if not mod and type(a) in (int, bool) and type(b) in (int, bool) and b > 0 and abs(a) > 1 \
            and b * (abs(a).bit_length() - 1) > MAX_INT_BITS:
        raise ExpressionLimit(f"{a} ** {b} has more than {MAX_INT_BITS} bits")
    return pow(a, b, *mod)


def _mul(a, b):
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, list, tuple)) and type(n) in (int, bool) and len(seq) * n > MAX_ELEMENTS:
            raise ExpressionLimit(f"repeating a {type(seq).__name__} {n} times makes more than {MAX_ELEMENTS} items")
    return a * b


def _mod(a, b):
    if isinstance(a, str):
        raise ExpressionLimit("string formatting with % is not allowed")
    return a % b


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: _mod, ast.Pow: _pow,
           ast.MatMult: operator.matmul}

_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}

# numpy names (in both NumPy and CuPy) callable as numpy.X / np.X, and the math.X names mapped to them
_NUMPY_FUNCS = set("""exp expm1 log log10 log2 log1p sqrt square cbrt sin cos tan arcsin arccos arctan arctan2
    sinh cosh tanh arcsinh arccosh arctanh abs absolute fabs floor ceil trunc round rint sign maximum minimum
    fmax fmin power float_power mod fmod remainder hypot clip where sum prod mean std var max min amax amin
    argmax argmin cumsum dot matmul outer inner transpose reshape squeeze expand_dims concatenate stack
    tile repeat zeros ones zeros_like ones_like full full_like eye identity array asarray isnan isinf
    isfinite logical_and logical_or logical_not logical_xor heaviside degrees radians sinc""".split())
_MATH_FUNCS = {"exp": "exp", "expm1": "expm1", "log10": "log10", "log2": "log2", "log1p": "log1p",
               "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos",
               "atan": "arctan", "atan2": "arctan2", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
               "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "floor": "floor", "ceil": "ceil",
               "trunc": "trunc", "fabs": "fabs", "pow": "power", "fmod": "fmod", "hypot": "hypot",
               "degrees": "degrees", "radians": "radians", "isnan": "isnan", "isinf": "isinf"}
_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan, "tau": math.tau}
# bare names the standard functions' expressions use (modeci-mdf rewrites them to numpy.X)
_BARE_NUMPY = {"exp", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan", "maximum",
               "minimum", "sqrt", "log"}
_BUILTINS = {"abs", "min", "max", "sum", "round", "int", "float", "bool", "len", "pow"}
_MODULES = {"math", "numpy", "np"}


def _is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__mdf")


class _Compiler:
    def __init__(self, values: Values, known: set, where: str, source: str, renamed: dict):
        self.v, self.known, self.where, self.source, self.renamed = values, known, where, source, renamed
        self.names: set = set()

    def fail(self, why: str):
        raise ExpressionError(f"{self.where}: expression {_short(self.source)}: {why}")

    def compile(self, node: ast.AST) -> Callable[[dict], Any]:
        method = getattr(self, "c_" + type(node).__name__, None)
        if method is None:
            self.fail(f"{type(node).__name__} is not allowed in MDF expressions "
                      "(allowed: arithmetic, comparisons, indexing, conditionals and math functions)")
        return method(node)

    # leaves
    def c_Constant(self, node):
        value = node.value
        if not isinstance(value, (int, float, complex, str, bool, type(None))):
            self.fail(f"constant {value!r} is not allowed")
        return lambda s: value

    def c_Name(self, node):
        name = self.renamed.get(node.id, node.id)
        if name in self.known:
            self.names.add(name)
            return _lookup(name, self.where, self.source)
        self.fail(f"unknown name {name!r}" + (f" (known: {sorted(self.known)})" if len(self.known) < 40 else ""))

    def c_Attribute(self, node):  # math.pi, numpy.inf
        if isinstance(node.value, ast.Name) and node.value.id in _MODULES and node.attr in _CONSTANTS:
            value = _CONSTANTS[node.attr]
            return lambda s: value
        self.fail(f"attribute access {ast.unparse(node)!r} is not allowed")

    # containers
    def c_List(self, node):
        items = [self.compile(e) for e in node.elts]
        try:  # a literal: a numeric one becomes one device array, once
            value = self.v.literal(ast.literal_eval(node))
        except ValueError:
            xp = self.v.xp

            def items_of(s):
                out = [f(s) for f in items]
                return B.stack_items(xp, out) if B.is_batched(*out) else out

            return items_of
        return lambda s: value

    def c_Tuple(self, node):
        items = [self.compile(e) for e in node.elts]
        return lambda s: tuple(f(s) for f in items)

    def c_Dict(self, node):
        if any(k is None for k in node.keys):
            self.fail("dict unpacking is not allowed")
        pairs = [(self.compile(k), self.compile(v)) for k, v in zip(node.keys, node.values)]
        return lambda s: {k(s): v(s) for k, v in pairs}

    # operators
    def c_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            self.fail(f"operator {type(node.op).__name__} is not allowed")
        a, b = self.compile(node.left), self.compile(node.right)
        return lambda s: op(a(s), b(s))

    def c_UnaryOp(self, node):
        a = self.compile(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda s: -a(s)
        if isinstance(node.op, ast.UAdd):
            return lambda s: +a(s)
        if isinstance(node.op, ast.Invert):
            return lambda s: ~a(s)
        truth, xp = self.v.truth, self.v.xp

        def not_(s):
            value = a(s)
            if isinstance(value, Batched):
                return Batched(xp.logical_not(B.row_truth(value).a))
            return not truth(value)

        return not_

    def c_Compare(self, node):
        ops = [_CMPOPS[type(o)] for o in node.ops]
        parts = [self.compile(node.left)] + [self.compile(c) for c in node.comparators]
        if len(ops) == 1:
            op, a, b = ops[0], parts[0], parts[1]
            return lambda s: op(a(s), b(s))
        truth = self.v.truth

        def chain(s):
            left, rows = parts[0](s), None
            for op, f in zip(ops, parts[1:]):
                right = f(s)
                result = op(left, right)
                if rows is not None:
                    result = rows & result
                if isinstance(result, Batched):  # rows differ: every comparison, combined per row
                    rows = result
                elif not truth(result):
                    return result
                left = right
            return result

        return chain

    def c_BoolOp(self, node):
        parts = [self.compile(e) for e in node.values]
        truth = self.v.truth
        is_and = isinstance(node.op, ast.And)

        xp = self.v.xp

        def boolop(s):
            value = parts[0](s)
            for f in parts[1:]:
                if isinstance(value, Batched):  # per row: the first value whose truth decides
                    other, t = f(s), B.row_truth(value)
                    value = B.where(xp, t, other, value) if is_and else B.where(xp, t, value, other)
                elif truth(value) != is_and:
                    return value
                else:
                    value = f(s)
            return value

        return boolop

    def c_IfExp(self, node):
        test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
        truth, xp = self.v.truth, self.v.xp

        def ifexp(s):
            t = test(s)
            if isinstance(t, Batched):  # per row: both branches, then selected
                return B.where(xp, B.row_truth(t), body(s), orelse(s))
            return body(s) if truth(t) else orelse(s)

        return ifexp

    def c_Subscript(self, node):
        value, index = self.compile(node.value), self.compile(node.slice)
        xp = self.v.xp

        def subscript(s):
            v, i = value(s), index(s)
            if isinstance(i, Batched) or isinstance(i, tuple) and B.is_batched(*i):  # an index per row
                parts = list(i) if isinstance(i, tuple) else [i]
                return B.map_rows(xp, lambda x, *ix: x[tuple(ix) if isinstance(i, tuple) else ix[0]], [v, *parts])
            return v[i]

        return subscript

    def c_Slice(self, node):
        parts = [self.compile(p) if p is not None else (lambda s: None) for p in (node.lower, node.upper, node.step)]
        lo, hi, st = parts
        return lambda s: slice(lo(s), hi(s), st(s))

    # calls
    def c_Call(self, node):
        fn = self._function(node.func)
        args = [self.compile(a) for a in node.args]
        kwargs = {k.arg: self.compile(k.value) for k in node.keywords}
        if None in kwargs:
            self.fail("** arguments are not allowed")
        if not kwargs:
            return lambda s: fn(*[a(s) for a in args])
        return lambda s: fn(*[a(s) for a in args], **{k: f(s) for k, f in kwargs.items()})

    def _function(self, func: ast.AST) -> Callable:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in _MODULES:
            mod, name = func.value.id, func.attr
            if mod == "math":
                if name == "log":
                    return self._math_log()
                if name in _MATH_FUNCS:
                    return self._numpy(_MATH_FUNCS[name])
            elif name in _NUMPY_FUNCS:
                return self._numpy(name)
            self.fail(f"function {mod}.{name} is not allowed")
        if isinstance(func, ast.Name) and self.renamed.get(func.id, func.id) not in self.known:
            if func.id in _BARE_NUMPY:
                return self._numpy(func.id)
            if func.id in _BUILTINS:
                return self._builtin(func.id)
        self.fail(f"calling {ast.unparse(func)!r} is not allowed")

    def _numpy(self, name: str) -> Callable:
        v = self.v
        xp_fn, np_fn = getattr(v.xp, name), getattr(np, name)

        size_of = _MADE_SIZE.get(name)

        def call(*args, **kwargs):
            if size_of is not None:
                _check_size(name, size_of, args, kwargs)
            if B.is_batched(*args, *kwargs.values()):
                return _batched_call(v, name, xp_fn, args, kwargs)
            if any(v.is_array(a) for a in args) or any(v.is_array(a) for a in kwargs.values()):
                return xp_fn(*[v.array(a) if isinstance(a, list) else a for a in args], **kwargs)
            return _from_host(v, np_fn(*args, **kwargs))

        return call

    def _math_log(self) -> Callable:
        log = self._numpy("log")
        return lambda x, base=None: log(x) if base is None else log(x) / log(base)

    def _builtin(self, name: str) -> Callable:
        v = self.v
        xp = v.xp
        if name in ("int", "float", "bool"):
            cast = {"int": int, "float": float, "bool": bool}[name]
            return lambda x=0: (B.map_rows(xp, lambda r: cast(v.host_scalar(r)), [x]) if isinstance(x, Batched)
                                else cast(v.host_scalar(x)))
        if name in ("min", "max"):
            pair = xp.minimum if name == "min" else xp.maximum
            whole = xp.min if name == "min" else xp.max
            py = min if name == "min" else max

            def minmax(*args, **kwargs):
                if B.is_batched(*args):
                    return B.reduce(whole, args[0]) if len(args) == 1 else reduce(
                        lambda a, b: B.apply(pair, a, b), args)
                if any(v.is_array(a) for a in args):
                    return whole(args[0]) if len(args) == 1 else reduce(pair, args)
                return py(*args, **kwargs)

            return minmax
        if name == "sum":
            return lambda x, start=0: (B.reduce(xp.sum, x, axis=0) + start if isinstance(x, Batched) else
                                       xp.sum(x, axis=0) + start if v.is_array(x) else sum(x, start))
        if name == "round":
            return lambda x, n=None: (xp.round(x, n or 0) if v.is_array(x) else round(x, n))
        return {"abs": abs, "len": len, "pow": _pow}[name]


def _batched_call(v: Values, name: str, fn: Callable, args, kwargs):
    """A numpy function on batched arguments: element by element, a reduction over logical axes, a
    batched matrix product, or else once per row."""
    args = [v.array(a) if isinstance(a, list) else a for a in args]
    if name in B.ELEMENTWISE:
        return B.apply(fn, *args, **kwargs)
    if name in B.REDUCTIONS and isinstance(args[0], Batched) and not B.is_batched(*args[1:], *kwargs.values()):
        return B.reduce(fn, *args, **kwargs)
    if name in ("matmul", "dot") and len(args) == 2 and not kwargs and (name == "matmul" or max(
            B._logical_ndim(a) for a in args) <= 2):
        return B.matmul(*args)
    return B.map_rows(v.xp, fn, args, kwargs)


def _count(shape) -> int:
    return math.prod(int(d) for d in np.ravel(to_host(shape) if hasattr(shape, "dtype") else shape))


def _size(x) -> int:
    return int(getattr(x, "size", None) or np.size(x))


# numpy functions that make arrays of a size given by their arguments: that size, before calling
_MADE_SIZE = {
    "zeros": lambda shape, *a, **k: _count(shape),
    "ones": lambda shape, *a, **k: _count(shape),
    "full": lambda shape, *a, **k: _count(shape),
    "eye": lambda n, m=None, *a, **k: int(n) * int(n if m is None else m),
    "identity": lambda n, *a, **k: int(n) ** 2,
    "tile": lambda x, reps, **k: _size(x) * _count(reps),
    "repeat": lambda x, repeats, *a, **k: _size(x) * int(np.max(to_host(repeats) if hasattr(repeats, "dtype")
                                                                 else repeats, initial=0)),
    "outer": lambda a, b, **k: _size(a) * _size(b),
}


def _check_size(name: str, size_of: Callable, args, kwargs) -> None:
    try:
        n = size_of(*args, **kwargs)
    except (TypeError, ValueError, OverflowError):
        return  # malformed arguments: numpy reports them
    if n > MAX_ELEMENTS or n < 0:
        raise ExpressionLimit(f"numpy.{name} would make {n} elements (at most {MAX_ELEMENTS})")


def _lookup(name: str, where: str, source: str) -> Callable[[dict], Any]:
    def lookup(s):
        try:
            return s[name]
        except KeyError:
            raise ExpressionError(f"{where}: {name!r} has no value yet (expression {_short(source)})") from None

    return lookup


def _from_host(values: Values, r):
    """A NumPy result computed on host inputs: scalars as Python numbers, arrays on the device."""
    if isinstance(r, np.generic):
        return r.item()
    if isinstance(r, np.ndarray):
        return values.array(r)
    return r


# bare words the reference engine returns as strings (e.g. ONNX Pad's mode "constant")
_WORDS = frozenset(["constant", "math", "numpy", *dir(builtins)])
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|nan|infinity)\s*$", re.I)


def compile_expr(source: str, known: set, values: Values, where: str) -> Expr:
    """Compile an expression string; ``known`` are the names it may read."""
    text = source.strip()
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"{where}: expression {_short(source)} is {len(text)} characters long "
                              f"(at most {MAX_EXPRESSION_LENGTH})")
    if text in known:  # a plain reference, whatever the id looks like
        return Expr(_lookup(text, where, source), frozenset([text]), source=source)
    if text in _WORDS and text not in known:  # the reference engine keeps these words as strings
        return Expr(lambda s: text, frozenset(), text, source)
    if _NUMBER.match(text):
        try:
            value = int(text) if re.fullmatch(r"\s*[-+]?\d+\s*", text) else float(text)
        except ValueError as e:  # more digits than Python converts
            raise ExpressionError(f"{where}: number {_short(source)} is not valid: {e}") from None
        return Expr(lambda s: value, frozenset(), value, source)
    renamed = {}
    odd = sorted((k for k in known if not _is_identifier(k)), key=len, reverse=True)
    for i, name in enumerate(odd):
        if name in text:
            alias = f"__mdf{i}__"
            new = re.sub(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", alias, text)
            if new != text:
                renamed[alias] = name
                text = new
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"{where}: expression {_short(source)} is not valid: {e.msg}") from None
    except ValueError as e:  # a null byte: Python < 3.12 raises ValueError where 3.12 raises SyntaxError
        raise ExpressionError(f"{where}: expression {_short(source)} is not valid: {e}") from None
    except (RecursionError, MemoryError):  # the parser's own stack
        tree = None
    if tree is None or _depth(tree) > MAX_EXPRESSION_DEPTH:
        raise ExpressionError(f"{where}: expression {_short(source)} is nested more than "
                              f"{MAX_EXPRESSION_DEPTH} levels deep")
    c = _Compiler(values, known, where, source, renamed)
    fn = c.compile(tree.body)
    names = frozenset(c.names)
    const = NOT_CONST
    if not names:
        try:
            const = fn({})
        except ExpressionLimit as e:
            raise ExpressionError(f"{where}: expression {_short(source)}: {e}") from None
        except Exception:  # e.g. 1/0: reported when it runs
            const = NOT_CONST
        else:
            const = values.literal(const) if isinstance(const, list) else const
            value = const
            fn = lambda s: value  # noqa: E731
    return Expr(fn, names, const, source)


def _depth(tree: ast.AST) -> int:
    """Nesting depth of a syntax tree (iteratively: the tree may be deeper than Python's stack)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_EXPRESSION_DEPTH:
            break
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _short(source: str, n: int = 80) -> str:
    return repr(source) if len(source) <= n else repr(source[:n]) + f"... ({len(source)} characters)"


def compile_value(value: Any, known: set, values: Values, where: str) -> Expr:
    """A model value: an expression string, or a literal (number, list, dict, array...)."""
    if isinstance(value, str):
        return compile_expr(value, known, values, where)
    literal = values.literal(value)
    return Expr(lambda s: literal, frozenset(), literal, value)
