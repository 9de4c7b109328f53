"""Random generators: RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli,
Multinomial.

Numbers are drawn on the host with a NumPy ``Generator`` and moved to the device with
``xp.asarray`` (one host->device copy per call): this keeps a ``seed`` reproducible across devices
and runs. A node with a ``seed`` starts a fresh generator from it on every call, so the same seed
gives the same output each run; a node without one draws from a process-wide generator.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..dtypes import np_dtype
from ..errors import NodeError
from ..registry import op

_unseeded = np.random.default_rng()
_FLOATS = {np.dtype(t) for t in (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)}


def _rng(seed: float | None) -> np.random.Generator:
    if seed is None:
        return _unseeded
    # the float attribute's bits are the seed: distinct seeds give distinct streams
    return np.random.default_rng(int(np.asarray(seed, dtype=np.float64).view(np.uint64)))


def _float_dtype(dtype: int | None, like=None) -> np.dtype:
    dt = np_dtype(dtype) if dtype is not None else np.dtype(like.dtype)
    if dt not in _FLOATS:
        raise NodeError(f"random values must have a floating-point type, got {dt}")
    return dt


def _normal(xp, shape, dt, mean, scale, seed):
    if shape is None:
        raise NodeError("the 'shape' attribute is required")
    values = _rng(seed).standard_normal(tuple(shape)) * scale + mean
    return xp.asarray(values.astype(dt))


def _uniform(xp, shape, dt, low, high, seed):
    if shape is None:
        raise NodeError("the 'shape' attribute is required")
    values = _rng(seed).uniform(low, high, tuple(shape))
    return xp.asarray(values.astype(dt))


@op("RandomNormal", since=1)  # 22 only adds bfloat16
def RandomNormal(xp, *, shape=None, dtype=1, mean=0.0, scale=1.0, seed=None):
    return _normal(xp, shape, _float_dtype(dtype), mean, scale, seed)


@op("RandomUniform", since=1)
def RandomUniform(xp, *, shape=None, dtype=1, high=1.0, low=0.0, seed=None):
    return _uniform(xp, shape, _float_dtype(dtype), low, high, seed)


@op("RandomNormalLike", since=1)
def RandomNormalLike(xp, input, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    return _normal(xp, input.shape, _float_dtype(dtype, input), mean, scale, seed)


@op("RandomUniformLike", since=1)
def RandomUniformLike(xp, input, *, dtype=None, high=1.0, low=0.0, seed=None):
    return _uniform(xp, input.shape, _float_dtype(dtype, input), low, high, seed)


@op("Bernoulli", since=15)
def Bernoulli(xp, input, *, dtype=None, seed=None):
    """1 with probability ``input``, else 0; output type ``dtype`` (default: input's type)."""
    ct = np.float64 if input.dtype == np.float64 else np.float32
    u = xp.asarray(_rng(seed).random(tuple(input.shape), dtype=ct))  # in [0, 1)
    out = np_dtype(dtype) if dtype is not None else np.dtype(input.dtype)
    return (u < input.astype(ct)).astype(out)


@op("Multinomial", since=7)
def Multinomial(xp, input, *, dtype=6, sample_size=1, seed=None):
    """``sample_size`` class indices per row of unnormalized log-probabilities [batch, classes]."""
    out = np_dtype(dtype)
    if out not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise NodeError(f"Multinomial dtype must be int32 or int64, got {out}")
    if input.ndim != 2:
        raise NodeError(f"Multinomial expects a [batch_size, class_size] input, got shape {tuple(input.shape)}")
    batch, classes = (int(d) for d in input.shape)
    logits = input.astype(np.float64)
    p = xp.exp(logits - xp.max(logits, axis=1, keepdims=True))
    cdf = xp.cumsum(p, axis=1)
    u = xp.asarray(_rng(seed).random((batch, int(sample_size)))) * cdf[:, -1:]
    # the sampled class is the first whose cumulative probability exceeds u
    idx = xp.sum(cdf[:, None, :] <= u[:, :, None], axis=-1)
    return xp.minimum(idx, classes - 1).astype(out)
