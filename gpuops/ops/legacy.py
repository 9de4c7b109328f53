"""Early-ONNX operator forms (opsets 1-6) and the custom ops of the modified operator subset.

(a) Early forms, registered at ``since=1`` so that ``elementwise.py``/``activation.py``/``cast.py``
only hold the modern semantics (which take over at the version that introduced them):

* Binary ops with ``broadcast``/``axis`` (Add, Sub, Mul, Div — also ``consumed_inputs`` — and Pow,
  And, Or, Xor, Equal, Less, Greater): without ``broadcast=1`` B must have A's shape; with it, B is a
  scalar (any size-1 tensor) or matches a contiguous run of A's dimensions, starting at ``axis`` or,
  without ``axis``, ending at A's last one (suffix matching). :func:`align_to` reshapes B so that
  NumPy broadcasting does exactly that, then the modern op runs.
* ``consumed_inputs`` (an in-place hint of Caffe2 days) is accepted and ignored on the unary ops,
  the activations with attributes, ``Clip`` (``min``/``max`` attributes, no bound when absent) and the
  variadic ``Sum``/``Mean``/``Max``/``Min``. ``PRelu`` 1-6: a size-1 slope is shared; a 1-D slope
  whose length is X's channel count (axis 1) applies per channel; otherwise NumPy broadcasting.
* ``Cast`` 1 names its target type as a string (``to="FLOAT"``).

(b) Custom ops of the modified subset (default domain, ``since=1``), with these chosen semantics:

* ``Relu6(X)`` = ``min(max(X, 0), 6)``.
* ``Dense(X, W, B?)`` = ``X @ W + B`` with W of shape ``[in, out]`` (X may have leading batch axes).
* ``DepthwiseConv2d(X, W, B?)``: NCHW depthwise convolution; W is ``[C * multiplier, 1, kh, kw]``
  and output channel ``c * multiplier + m`` convolves input channel ``c`` (ONNX Conv with
  ``group=C``, and run by the same :func:`conv.conv`). Attributes as Conv: ``strides``, ``pads``
  ``[top, left, bottom, right]``, ``dilations``, ``auto_pad`` (NOTSET, SAME_UPPER, SAME_LOWER, VALID),
  optional ``kernel_shape``.
* ``UpSampling2D(X)``: nearest-neighbour upsampling of the H and W axes of NCHW X, by the integer
  factors ``size=[sh, sw]`` or by ``scales`` (``[sh, sw]`` or ``[1, 1, sh, sw]``; output size
  ``floor(n * s)``, source index ``floor(i / s)``, as ONNX Upsample ``nearest``); neither given
  means ``size=[2, 2]`` (the Keras default).
* ``Add_(A, B)``: Add with NumPy broadcasting (the name marks an in-place add in the source
  framework; the result here is a new tensor).
"""

import math

import numpy as np
from onnx import TensorProto

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op
from . import activation as act
from . import elementwise as ew
from .cast import cast
from .conv import conv

# -- (a) binary ops with broadcast / axis ---------------------------------------------------------


def align_to(xp, A, B, *, broadcast=0, axis=None, op_type=""):
    """B reshaped so that NumPy broadcasting applies the opset-1 rule against A."""
    if not broadcast:
        if tuple(B.shape) != tuple(A.shape):
            raise NodeError(f"{op_type}: B of shape {tuple(B.shape)} must have A's shape {tuple(A.shape)} "
                            "unless broadcast=1")
        return B
    if B.size == 1:
        return xp.reshape(B, ())
    start = A.ndim - B.ndim if axis is None else (axis + A.ndim if axis < 0 else axis)
    fits = 0 <= start and start + B.ndim <= A.ndim and all(
        b in (1, a) for a, b in zip(A.shape[start:start + B.ndim], B.shape))
    if not fits:
        raise NodeError(f"{op_type}: B of shape {tuple(B.shape)} cannot be broadcast to A of shape "
                        f"{tuple(A.shape)} at axis {start}")
    return xp.reshape(B, tuple(B.shape) + (1,) * (A.ndim - start - B.ndim))


def _register_binary(op_type, fn, consumed_inputs):
    if consumed_inputs:
        def impl(xp, A, B, *, broadcast=0, axis=None, consumed_inputs=None):
            return fn(xp, A, align_to(xp, A, B, broadcast=broadcast, axis=axis, op_type=op_type))
    else:
        def impl(xp, A, B, *, broadcast=0, axis=None):
            return fn(xp, A, align_to(xp, A, B, broadcast=broadcast, axis=axis, op_type=op_type))
    impl.__name__ = impl.__qualname__ = f"{op_type}_1"
    op(op_type, since=1)(impl)


for _name, _fn in [("Add", ew.Add), ("Sub", ew.Sub), ("Mul", ew.Mul), ("Div", ew.Div)]:
    _register_binary(_name, _fn, consumed_inputs=True)
for _name, _fn in [("Pow", ew.Pow), ("And", ew.And), ("Or", ew.Or), ("Xor", ew.Xor),
                   ("Equal", ew.Equal), ("Less", ew.Less), ("Greater", ew.Greater)]:
    _register_binary(_name, _fn, consumed_inputs=False)


# -- (a) consumed_inputs on unary, activation and variadic ops -------------------------------------


def _register_unary(op_type, fn):
    def impl(xp, X, *, consumed_inputs=None):
        return fn(xp, X)
    impl.__name__ = impl.__qualname__ = f"{op_type}_1"
    op(op_type, since=1)(impl)


for _name, _fn in [("Relu", act.Relu), ("Sigmoid", act.Sigmoid), ("Abs", ew.Abs), ("Neg", ew.Neg),
                   ("Exp", ew.Exp), ("Log", ew.Log), ("Tanh", ew.Tanh), ("Sqrt", ew.Sqrt),
                   ("Reciprocal", ew.Reciprocal), ("Floor", ew.Floor), ("Ceil", ew.Ceil)]:
    _register_unary(_name, _fn)


def _register_variadic(op_type, fn):
    def impl(xp, *data_0, consumed_inputs=None):
        return fn(xp, *data_0)
    impl.__name__ = impl.__qualname__ = f"{op_type}_1"
    op(op_type, since=1)(impl)


for _name, _fn in [("Sum", ew.Sum), ("Mean", ew.Mean), ("Max", ew.Max), ("Min", ew.Min)]:
    _register_variadic(_name, _fn)


@op("LeakyRelu", since=1)
def LeakyRelu_1(xp, X, *, alpha=0.01, consumed_inputs=None):
    return act.LeakyRelu(xp, X, alpha=alpha)


@op("Elu", since=1)
def Elu_1(xp, X, *, alpha=1.0, consumed_inputs=None):
    return act.Elu(xp, X, alpha=alpha)


@op("Selu", since=1)
def Selu_1(xp, X, *, alpha=1.6732, gamma=1.0507, consumed_inputs=None):
    return act.Selu(xp, X, alpha=alpha, gamma=gamma)


@op("HardSigmoid", since=1)
def HardSigmoid_1(xp, X, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    return act.HardSigmoid(xp, X, alpha=alpha, beta=beta)


@op("Clip", since=1)
def Clip_1(xp, input, *, min=None, max=None, consumed_inputs=None):
    Y = input if min is None else xp.maximum(input, min)
    return Y if max is None else xp.minimum(Y, max)


@op("PRelu", since=1)
def PRelu_1(xp, X, slope, *, consumed_inputs=None):
    if slope.size == 1:
        slope = xp.reshape(slope, ())
    elif slope.ndim == 1 and X.ndim >= 2 and slope.shape[0] == X.shape[1]:
        slope = xp.reshape(slope, (-1,) + (1,) * (X.ndim - 2))
    return act.PRelu(xp, X, slope)


@op("Cast", since=1)
def Cast_1(xp, input, *, to):
    if isinstance(to, str):
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise NodeError(f"Cast: unknown type name to={to!r}") from None
    return cast(xp, input, np_dtype(to))


# -- (b) custom ops --------------------------------------------------------------------------------


@op("Relu6", since=1)
def Relu6(xp, X):
    return xp.minimum(xp.maximum(X, 0), 6)


@op("Add_", since=1)
def Add_(xp, A, B):
    return ew.Add(xp, A, B)


@op("Dense", since=1)
def Dense(xp, X, W, B=None):
    if W.ndim != 2 or X.ndim < 1 or X.shape[-1] != W.shape[0]:
        raise NodeError(f"Dense: X of shape {tuple(X.shape)} does not fit W of shape {tuple(W.shape)} "
                        "(W must be [in, out] with in = X's last dimension)")
    Y = xp.matmul(X, W)
    return Y if B is None else Y + B


@op("DepthwiseConv2d", since=1)
def DepthwiseConv2d(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, kernel_shape=None,
                    pads=None, strides=None):
    return depthwise_conv2d(xp, X, W, B, conv, auto_pad=auto_pad, dilations=dilations, kernel_shape=kernel_shape,
                            pads=pads, strides=strides)


def depthwise_conv2d(xp, X, W, B, conv, **attrs):
    """DepthwiseConv2d by the convolution ``conv`` (a device override's own)."""
    if X.ndim != 4 or W.ndim != 4 or W.shape[1] != 1 or W.shape[0] % max(X.shape[1], 1):
        raise NodeError(f"DepthwiseConv2d: X must be NCHW and W [C*multiplier, 1, kh, kw]; got X "
                        f"{tuple(X.shape)}, W {tuple(W.shape)}")
    Y = conv(xp, X, W, B, group=X.shape[1], **attrs)
    if min(Y.shape[2:]) <= 0:  # conv returns an empty output there
        raise NodeError(f"DepthwiseConv2d: the kernel does not fit the padded input {tuple(X.shape[2:])}")
    return Y


@op("UpSampling2D", since=1)
def UpSampling2D(xp, X, *, size=None, scales=None):
    if X.ndim != 4:
        raise NodeError(f"UpSampling2D: X must be NCHW, got shape {tuple(X.shape)}")
    if size is not None:
        factors = [float(s) for s in size]
    elif scales is not None:
        factors = [float(s) for s in scales]
        if len(factors) == 4:
            if factors[:2] != [1.0, 1.0]:
                raise NodeError(f"UpSampling2D: scales {scales} must keep N and C (1, 1, sh, sw)")
            factors = factors[2:]
    else:
        factors = [2.0, 2.0]
    if len(factors) != 2 or min(factors) <= 0:
        raise NodeError(f"UpSampling2D: size/scales must give two positive factors, got {factors}")
    Y = X
    for axis, f in zip((2, 3), factors):
        if f == int(f):
            Y = xp.repeat(Y, int(f), axis=axis)
        else:
            n = X.shape[axis]
            idx = np.minimum(np.floor(np.arange(math.floor(n * f)) / f).astype(np.int64), n - 1)
            Y = xp.take(Y, xp.asarray(idx), axis=axis)
    return Y
