"""Batched MDF values: N model instances evaluated in lock-step as one array program.

A :class:`Batched` value holds a device array whose leading axis is the instance (the row); the
rest is the value one instance would have (its *logical* shape). Values without that axis
(constants, defaults, weights) are shared by every row. Python operators on batched values act row
by row as they would on one instance: operands are aligned on their logical shapes (a batched
scalar meets an unbatched matrix as ``(N, 1, 1)``), indexing and slicing apply to the logical axes,
``@`` is a batched matrix product, and reductions (``numpy.sum``...) reduce logical axes only.
Functions with no row-wise form here run once per row (:func:`map_rows`), which is exact but slow.
Conditionals on batched values (``a if c else b``, ``and``/``or``, parameter conditions) select per
row with ``where``, evaluating both branches.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np


# numpy functions that act element by element (all arguments broadcast together)
ELEMENTWISE = frozenset("""exp expm1 log log10 log2 log1p sqrt square cbrt sin cos tan arcsin arccos arctan
    arctan2 sinh cosh tanh arcsinh arccosh arctanh abs absolute fabs floor ceil trunc rint sign maximum
    minimum fmax fmin power float_power mod fmod remainder hypot clip where isnan isinf isfinite logical_and
    logical_or logical_not logical_xor heaviside degrees radians sinc round zeros_like ones_like
    full_like""".split())
# numpy reductions taking ``axis`` (None: every logical axis)
REDUCTIONS = frozenset("sum prod mean std var max min amax amin argmax argmin".split())


class BatchError(ValueError):
    """Something cannot be evaluated row by row (reported as a NodeError naming where)."""


class Batched:
    """A value of every row: ``a`` has the rows on its leading axis."""

    __slots__ = ("a",)
    __array_ufunc__ = None  # NumPy operators defer to ours (ndarray + Batched -> Batched.__radd__)
    __array_priority__ = 1000

    def __init__(self, a):
        self.a = a

    @property
    def n(self) -> int:
        return self.a.shape[0]

    @property
    def shape(self) -> tuple:
        return tuple(self.a.shape[1:])

    @property
    def ndim(self) -> int:
        return self.a.ndim - 1

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def size(self) -> int:
        return self.a.size

    def __repr__(self):
        return f"Batched({self.a!r})"

    def __len__(self):
        if self.a.ndim < 2:
            raise TypeError("len() of a batched scalar")
        return self.a.shape[1]

    def __bool__(self):
        raise BatchError("the truth of a batched value differs per row; use it in a condition "
                         "(a if c else b, and/or, parameter conditions), which select per row")

    def __getitem__(self, index):
        if isinstance(index, Batched) or isinstance(index, tuple) and any(isinstance(i, Batched) for i in index):
            raise BatchError("an index that differs per row (expressions index row by row)")
        if not isinstance(index, tuple):
            index = (index,)
        return wrap(self.a[(slice(None),) + index])

    def astype(self, dtype):
        return Batched(self.a.astype(dtype))

    def __neg__(self):
        return Batched(-self.a)

    def __pos__(self):
        return Batched(+self.a)

    def __abs__(self):
        return Batched(abs(self.a))

    def __invert__(self):
        return Batched(~self.a)

    def __round__(self, n=None):
        return Batched(self.a.round(n or 0))

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)


def _binary(op: Callable) -> tuple[Callable, Callable]:
    def forward(self, other):
        return apply(op, self, other)

    def backward(self, other):
        return apply(op, other, self)

    return forward, backward


for _name, _op in [("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv), ("mod", operator.mod),
                   ("pow", operator.pow), ("and", operator.and_), ("or", operator.or_), ("xor", operator.xor)]:
    _f, _b = _binary(_op)
    setattr(Batched, f"__{_name}__", _f)
    setattr(Batched, f"__r{_name}__", _b)
for _name, _op in [("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge),
                   ("eq", operator.eq), ("ne", operator.ne)]:
    setattr(Batched, f"__{_name}__", _binary(_op)[0])
Batched.__hash__ = None


def is_batched(*values) -> bool:
    return any(isinstance(v, Batched) for v in values)


def wrap(a) -> Batched:
    return Batched(a)


def _logical_ndim(v) -> int:
    if isinstance(v, Batched):
        return v.ndim
    if v is None or isinstance(v, (int, float, bool, complex)):
        return 0
    return np.ndim(v) if not hasattr(v, "ndim") else v.ndim


def aligned(*values) -> list:
    """Operands as arrays that broadcast row by row: batched ones padded with unit axes after the
    row axis up to the largest logical rank; unbatched ones as they are."""
    rank = max(_logical_ndim(v) for v in values)
    out = []
    for v in values:
        if isinstance(v, Batched):
            a = v.a
            missing = rank - v.ndim
            if missing:
                a = a.reshape(a.shape[:1] + (1,) * missing + a.shape[1:])
            out.append(a)
        else:
            out.append(v)
    return out


def apply(fn: Callable, *args, **kwargs):
    """``fn`` applied element by element to operands of which some are batched."""
    if not is_batched(*args, *kwargs.values()):
        return fn(*args, **kwargs)
    arrays = aligned(*args, *kwargs.values())
    pos, kw = arrays[:len(args)], dict(zip(kwargs, arrays[len(args):]))
    return Batched(fn(*pos, **kw))


def matmul(a, b):
    """``a @ b`` row by row (1-d operands as in ``numpy.matmul``)."""
    if not is_batched(a, b):
        return a @ b
    a_vec, b_vec = _logical_ndim(a) == 1, _logical_ndim(b) == 1
    xa = a.a if isinstance(a, Batched) else a
    xb = b.a if isinstance(b, Batched) else b
    if a_vec:
        xa = xa[..., None, :]
    if b_vec:
        xb = xb[..., :, None]
    r = xa @ xb
    if a_vec:
        r = r[..., 0, :]
    if b_vec:
        r = r[..., 0]
    return Batched(r)


def where(xp, mask, a, b):
    """Per row ``a`` where ``mask`` holds, else ``b``."""
    return Batched(xp.where(*aligned(mask, a, b)))


def row_truth(v: Batched) -> Batched:
    """``bool`` of each row's value."""
    a = v.a if v.a.dtype == bool else v.a != 0
    return Batched(a.reshape(a.shape[0], -1).all(axis=1) if a.ndim > 1 else a)


def stack_items(xp, items: list) -> Batched:
    """A list literal some of whose items are batched, as one batched array (items on axis 1)."""
    n = next(v.n for v in items if isinstance(v, Batched))
    arrays = [xp.asarray(a) for a in aligned(*items)]
    shape = np.broadcast_shapes(*[a.shape[1:] if isinstance(v, Batched) else a.shape
                                  for v, a in zip(items, arrays)])
    rows = [xp.broadcast_to(a if isinstance(v, Batched) else a[None], (n, *shape))
            for v, a in zip(items, arrays)]
    return Batched(xp.stack(rows, axis=1))


def reduce(fn: Callable, x: Batched, axis=None, **kwargs):
    """A numpy reduction over logical axes of a batched value."""
    if axis is None:
        axis = tuple(range(1, x.a.ndim))
        if not axis:  # a batched scalar: reducing a scalar is the scalar
            return Batched(fn(x.a[:, None], axis=1, **kwargs))
    elif isinstance(axis, (tuple, list)):
        axis = tuple(a + 1 if a >= 0 else a for a in axis)
    else:
        axis = axis + 1 if axis >= 0 else axis
    return Batched(fn(x.a, axis=axis, **kwargs))


def map_rows(xp, fn: Callable, args: list, kwargs: dict | None = None) -> Any:
    """``fn`` called once per row on that row's values; the results stacked on a new row axis."""
    kwargs = kwargs or {}
    n = next(v.n for v in [*args, *kwargs.values()] if isinstance(v, Batched))
    rows = []
    for i in range(n):
        pick = lambda v: v.a[i] if isinstance(v, Batched) else v  # noqa: E731
        rows.append(fn(*[pick(a) for a in args], **{k: pick(v) for k, v in kwargs.items()}))
    return stack(xp, rows)


def stack(xp, rows: list):
    first = rows[0]
    if isinstance(first, tuple):
        return tuple(stack(xp, [r[k] for r in rows]) for k in range(len(first)))
    if isinstance(first, list) and first and hasattr(first[0], "shape"):
        return [stack(xp, [r[k] for r in rows]) for k in range(len(first))]
    if not all(hasattr(r, "shape") or isinstance(r, (bool, int, float)) for r in rows):
        raise BatchError(f"a row-wise result of type {type(first).__name__} cannot be batched")
    return Batched(xp.stack([xp.asarray(r) for r in rows]))
