"""Activation functions (elementwise; opset 6 and later — ``consumed_inputs`` forms are in ``legacy.py``).

Float attributes are applied as Python floats, which NumPy/CuPy treat weakly, so float16 inputs stay
float16; ml_dtypes types (bfloat16) do promote, so results are cast back to the input's type.
Exponentials are written in their overflow-free forms (``expm1`` of the negative part, sigmoid from
``exp(-|x|)``, softplus as ``max(x, 0) + log1p(exp(-|x|))``). ``Tanh`` lives in ``elementwise.py``.
"""

import math

import numpy as np

from ..errors import NodeError
from ..registry import op
from .elementwise import clamp, erf, same_dtype


def cast_like(X, Y):
    return Y if Y.dtype == X.dtype else Y.astype(X.dtype)


@op("Relu", since=6, inplace=True)
def Relu(xp, X, *, out=None):
    return xp.maximum(X, 0, out=out)  # NaN stays NaN


@op("LeakyRelu", since=6)
def LeakyRelu(xp, X, *, alpha=0.01):
    return cast_like(X, xp.where(X >= 0, X, X * alpha))


@op("PRelu", since=7)
def PRelu(xp, X, slope):
    same_dtype("PRelu", X, slope)
    Y = xp.where(X < 0, X * slope, X)
    if Y.shape != X.shape:  # slope must broadcast to X, not the other way round
        raise NodeError(f"PRelu slope of shape {tuple(slope.shape)} does not broadcast to X of "
                         f"shape {tuple(X.shape)}")
    return Y


def _elu(xp, X, alpha):
    return xp.where(X > 0, X, alpha * xp.expm1(xp.minimum(X, 0)))


@op("Elu", since=6)
def Elu(xp, X, *, alpha=1.0):
    return cast_like(X, _elu(xp, X, alpha))


@op("Selu", since=6)
def Selu(xp, X, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return cast_like(X, gamma * _elu(xp, X, alpha))


@op("Celu", since=12)
def Celu(xp, X, *, alpha=1.0):
    return cast_like(X, xp.maximum(X, 0) + xp.minimum(alpha * xp.expm1(xp.minimum(X, 0) / alpha), 0))


def sigmoid(xp, X):
    e = xp.exp(-xp.abs(X))
    return xp.where(X >= 0, 1 / (1 + e), e / (1 + e))


@op("Sigmoid", since=6)
def Sigmoid(xp, X):
    return cast_like(X, sigmoid(xp, X))


@op("HardSigmoid", since=6)
def HardSigmoid(xp, X, *, alpha=0.2, beta=0.5):
    return cast_like(X, clamp(xp, X * alpha + beta, 0, 1))


@op("HardSwish", since=14)
def HardSwish(xp, X):
    return cast_like(X, X * clamp(xp, X * (1 / 6) + 0.5, 0, 1))


def softplus(xp, X):
    return xp.maximum(X, 0) + xp.log1p(xp.exp(-xp.abs(X)))


@op("Softplus", since=1)
def Softplus(xp, X):
    return cast_like(X, softplus(xp, X))


@op("Softsign", since=1)
def Softsign(xp, input):
    return cast_like(input, input / (1 + xp.abs(input)))


@op("Mish", since=18)
def Mish(xp, X):
    return cast_like(X, X * xp.tanh(softplus(xp, X)))


@op("Gelu", since=20)
def Gelu(xp, X, *, approximate="none"):
    x = X.astype(np.float32) if np.dtype(X.dtype).itemsize < 4 else X  # 1 + erf cancels: float16 loses it all
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return cast_like(X, 0.5 * x * (1 + xp.tanh(inner)))
    if approximate != "none":
        raise NodeError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return cast_like(X, 0.5 * x * (1 + erf(xp, x * (1 / math.sqrt(2)))))


@op("ThresholdedRelu", since=10)
def ThresholdedRelu(xp, X, *, alpha=1.0):
    return xp.where(X > alpha, X, xp.zeros_like(X))


@op("Swish", since=24)
def Swish(xp, X, *, alpha=1.0):
    return cast_like(X, X * sigmoid(xp, X * alpha))


@op("Shrink", since=9)
def Shrink(xp, input, *, bias=0.0, lambd=0.5):
    zero = xp.zeros_like(input)
    return cast_like(input, xp.where(input < -lambd, input + bias, xp.where(input > lambd, input - bias, zero)))
