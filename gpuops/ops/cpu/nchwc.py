"""com.microsoft.nchwc Conv and pooling ops on the CPU (``@op(..., device="cpu")``): the generic ops'
reordering (:mod:`gpuops.ops.contrib.nchwc`) around this package's Conv and pooling, a Conv's plain
filter made once per session and its :class:`.conv.ConvWeights` kept with it.
"""

from __future__ import annotations

import numpy as np

from ...registry import op
from ..contrib import nchwc as _nchwc
from ..contrib.nchwc import NCHWC
from ..conv import conv as _generic_conv
from . import conv as _conv
from . import pool as _pool
from ._common import Kept, frozen, on_host


class NchwcWeights(Kept):
    """The session's block size and, for a Conv with a constant filter W (and bias B), the plain filter
    per input channels of a group (with its :class:`.conv.ConvWeights`)."""

    def __init__(self, block: int, W=None, B=None):
        super().__init__()
        self.block, self.W, self.B = block, W, B

    def plain(self, per_group_in: int) -> _conv.ConvWeights:
        def make():
            from ...device import get_device

            w = frozen(np.ascontiguousarray(_nchwc.plain_filter(get_device("cpu").xp, self.W, self.block,
                                                                per_group_in)))
            return _conv.ConvWeights(w, self.B)

        return self.get(("plain", per_group_in), make)


def _prepare_conv(constants, attrs):
    kept = NchwcWeights(_nchwc.session_block_size(constants, attrs))
    W, B = constants.get(1), constants.get(2)
    if type(W) is np.ndarray and W.ndim == 4 and W.dtype.kind == "f":
        kept.W, kept.B = W, B if type(B) is np.ndarray else None
        try:
            kept.plain(W.shape[1])  # a group's input channels, as the filter's layout was chosen
        except Exception:  # a filter the op refuses, when it runs
            pass
    return kept


def _prepare_block(constants, attrs):
    return NchwcWeights(_nchwc.session_block_size(constants, attrs))


def _block(prepared) -> int:
    return _nchwc.call_block_size(None if prepared is None else prepared.block)


@op("Conv", domain=NCHWC, since=1, device="cpu", prepare=_prepare_conv)
def Conv(xp, X, W, B=None, Sum=None, *, activation=None, activation_params=None, auto_pad="NOTSET",
         dilations=None, group=1, kernel_shape=None, pads=None, strides=None, prepared=None):
    attrs = dict(activation=activation, activation_params=activation_params, auto_pad=auto_pad,
                 dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)
    b = _block(prepared)
    if not on_host(X, W, B, Sum):
        return _nchwc.nchwc_conv(xp, X, W, B, Sum, b, _generic_conv, **attrs)
    if prepared is None or prepared.W is not W or (B is not None and B is not prepared.B):
        return _nchwc.nchwc_conv(xp, X, W, B, Sum, b, _conv.conv, **attrs)
    chosen = []

    def filters(per_group_in):
        chosen.append(prepared.plain(per_group_in))
        return chosen[0].W

    def conv(xp, x, w, B, **attrs):
        return _conv.conv(xp, x, w, B, kept=chosen[0] if chosen else None, **attrs)

    return _nchwc.nchwc_conv(xp, X, W, B, Sum, b, conv, filters=filters, **attrs)


@op("MaxPool", domain=NCHWC, since=1, device="cpu", prepare=_prepare_block)
def MaxPool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None, storage_order=0,
            strides=None, prepared=None):
    return _nchwc.pooled(xp, X, _block(prepared), _pool.MaxPool, auto_pad=auto_pad, ceil_mode=ceil_mode,
                         dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)


@op("AveragePool", domain=NCHWC, since=1, device="cpu", prepare=_prepare_block)
def AveragePool(xp, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape,
                pads=None, strides=None, prepared=None):
    return _nchwc.pooled(xp, X, _block(prepared), _pool.AveragePool, auto_pad=auto_pad, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad, dilations=dilations, kernel_shape=kernel_shape,
                         pads=pads, strides=strides)


@op("GlobalAveragePool", domain=NCHWC, since=1, device="cpu", prepare=_prepare_block)
def GlobalAveragePool(xp, X, *, prepared=None):
    return _nchwc.pooled(xp, X, _block(prepared), lambda xp, X: _pool.GlobalAveragePool(xp, X))
