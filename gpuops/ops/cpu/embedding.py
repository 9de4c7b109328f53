"""com.microsoft EmbedLayerNormalization on the CPU (``@op(..., device="cpu")``), and gpuops' private
CastEmbedLayerNormalization (its int64 ids' Casts taken in, :mod:`gpuops.optimizer.embed_layernorm_cast`):
one native call (``cpu_kernels/rows.c``'s ``embed_layernorm_f32``) gathers the word, position and segment
rows by id, adds them, normalizes each row as :mod:`.normalization`'s layer norms do and counts the mask
index, where the generic op makes a dozen NumPy calls. The tables, gamma, beta and epsilon are given to
the kernel once per node (an :class:`EmbedPlan` in the step's prepared parameters). An id out of range
(the kernel returns 1), other dtypes and forms, CuPy arrays and ``native.disabled()`` go to the generic
op, which stays the fallback and the test oracle, and names a bad id.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ... import native
from ...registry import op
from ..contrib import private as _private
from ..contrib import transformer as _transformer
from ..contrib.private import DOMAIN as PRIVATE
from .normalization import _F32, MS, _address, _param, prepare_params

_IDS = {np.dtype(np.int32): 0, np.dtype(np.int64): 1}  # embed_layernorm_f32's `wide` bit of an id array


def _ids(a, bit: int):
    """``a``'s ``wide`` bits for the kernel (int32: 0, int64: ``bit``), or None when it does not take ``a``."""
    if type(a) is not np.ndarray or not a.flags.c_contiguous:
        return None
    w = _IDS.get(a.dtype)
    return None if w is None else w * bit


def _table(t, D=None) -> bool:
    return type(t) is np.ndarray and t.dtype == _F32 and t.ndim == 2 and t.flags.c_contiguous and t.shape[1] \
        and (D is None or t.shape[1] == D)


class EmbedPlan(ctypes.Structure):
    """``struct embed_plan`` of ``cpu_kernels/rows.c``: embed_layernorm_f32's tables, gamma, beta (their
    addresses), sizes and epsilon."""

    _fields_ = [(name, ctypes.c_void_p) for name in ("word", "position", "segment", "gamma", "beta")] + [
        (name, ctypes.c_int64) for name in ("n", "words", "positions", "segments")] + [("epsilon", ctypes.c_float)]


def _embed_plan(prepared, word, position, segment, gamma, beta, epsilon):
    """What the kernel takes of the node's tables, gamma, beta and epsilon (kept in ``prepared`` under "embed"
    when they are the node's constants): the sources and epsilon, D, the position rows, the
    :class:`EmbedPlan` and its address, and gamma's and beta's :class:`Param` (which hold what it points
    to); or None."""
    if not _table(word) or not _table(position, word.shape[1]) or (segment is not None and not _table(segment,
                                                                                                     word.shape[1])):
        return None
    D = word.shape[1]
    g = _param(prepared, 5, gamma, (D,), 3)
    b = None if beta is None else _param(prepared, 6, beta, (D,), 3)
    if g is None or g.src.dtype != _F32 or (beta is not None and (b is None or b.src.dtype != _F32)):
        return None
    struct = EmbedPlan(_address(word), _address(position), None if segment is None else _address(segment), g.address,
                       None if b is None else b.address, D, word.shape[0], position.shape[0],
                       0 if segment is None else segment.shape[0], epsilon)
    plan = (word, position, segment, gamma, beta, epsilon, D, position.shape[0], struct, ctypes.addressof(struct),
            g, b)
    tables = prepared.get("tables", {}) if prepared is not None else {}
    if tables.get(2) is word and tables.get(3) is position and (segment is None or tables.get(4) is segment) \
            and prepared.get(5) is g and (b is None or prepared.get(6) is b):  # constants only
        prepared["embed"] = plan
    return plan


def prepare_embed(constants, attrs):
    """EmbedLayerNormalization's ``prepare`` hook: :func:`prepare_params` of gamma and beta, the constant
    tables (word, position, segment by position) under "tables", and constant position ids with their
    address and ``wide`` bits under "position_ids"."""
    kept = prepare_params(5, 6)(constants, attrs) or {}
    tables = {i: a for i, a in constants.items() if i in (2, 3, 4) and type(a) is np.ndarray}
    if tables:
        kept["tables"] = tables
    pid = constants.get(8)  # position ids folded to a constant (an exporter's Range of the sequence)
    bits = _ids(pid, 4)
    if bits is not None and pid.size:
        kept["position_ids"] = (pid, _address(pid), bits)
    return kept or None


def embed_norm(input_ids, segment_ids, word, position, segment, gamma, beta, mask, position_ids, epsilon,
               prepared, outputs=3, narrow=False):
    """EmbedLayerNormalization's (Y, mask_index, sum) by the native kernel (``rows.c``'s
    ``embed_layernorm_f32``: the gathers, sums, normalization and mask index in one call), or None where it
    does not apply or an id is out of range (the generic op then says which); the first ``outputs`` of
    them, the others None. The tables' sizes and addresses (an :class:`EmbedPlan`) are kept in the step's
    prepared parameters. ``narrow``: int64 ids and mask (not position ids) are wrapped to int32 first."""
    fn = native.function("embed_layernorm_f32")
    if fn is None or type(input_ids) is not np.ndarray or input_ids.ndim != 2 or not input_ids.size:
        return None
    wide = _ids(input_ids, 1)
    if wide is None:
        return None
    if narrow:
        wide |= 16
    plan = prepared.get("embed") if prepared is not None else None
    if plan is None or plan[0] is not word or plan[1] is not position or plan[2] is not segment \
            or plan[3] is not gamma or plan[4] is not beta or plan[5] != epsilon:
        plan = _embed_plan(prepared, word, position, segment, gamma, beta, epsilon)
        if plan is None:
            return None
    D, positions, _, struct = plan[6:10]
    Bn, S = input_ids.shape
    seg_addr = None
    if segment is not None and segment_ids is not None:
        bits = _ids(segment_ids, 2)
        if bits is None or segment_ids.shape != (Bn, S):
            return None
        wide |= bits
        seg_addr = _address(segment_ids)
    pos_addr, position_count = None, 0
    if position_ids is None:
        if S > positions:
            return None
    else:
        hit = prepared.get("position_ids") if prepared is not None else None
        if hit is not None and hit[0] is position_ids:
            bits, pos_addr = hit[2], hit[1]
        else:
            bits = _ids(position_ids, 4)
            pos_addr = None if bits is None else _address(position_ids)
        if bits is None or position_ids.ndim > 2 or position_ids.shape[-1:] != (S,) \
                or position_ids.size not in (S, Bn * S):
            return None
        wide |= bits
        position_count = position_ids.size
    mask_addr, mask_cols, mask_index = None, 0, None
    if outputs > 1:
        if mask is not None:
            if type(mask) is not np.ndarray or mask.ndim != 2:
                return None
            bits = _ids(mask, 8)
            if bits is None or mask.shape[0] != Bn or not mask.size:
                m = mask.astype(np.int32) if narrow and mask.dtype.kind in "iu" else mask
                mask_index = np.add.reduce(m == 1, axis=1, dtype=np.int32)
            else:
                wide |= bits
                mask_addr, mask_cols = _address(mask), mask.shape[1]
    y = np.empty((Bn, S, D), np.float32)
    s = np.empty((Bn, S, D), np.float32) if outputs > 2 else None
    if outputs > 1 and mask_index is None:
        mask_index = np.empty((Bn,), np.int32)
        m_addr = native.address(mask_index)
    else:
        m_addr = None
    if fn(struct, _address(input_ids), seg_addr, pos_addr, mask_addr, native.address(y),
          None if s is None else native.address(s), m_addr, Bn, S, position_count, mask_cols, wide):
        return None
    return y, mask_index, s


@op("EmbedLayerNormalization", domain=MS, since=1, device="cpu", prepare=prepare_embed, n_outputs=True)
def EmbedLayerNormalization(xp, input_ids, segment_ids=None, word_embedding=None, position_embedding=None,
                            segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                            epsilon=1e-12, mask_index_type=1, prepared=None, n_outputs=3):
    """The native kernel's embedding and normalization: only the outputs the node has (no sum without it)."""
    got = embed_norm(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta,
                     mask, position_ids, epsilon, prepared, n_outputs)
    if got is None:
        got = _transformer.EmbedLayerNormalization(
            xp, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
            position_ids, epsilon=epsilon, mask_index_type=mask_index_type)
    return got[0] if n_outputs == 1 else got[:n_outputs]


@op("CastEmbedLayerNormalization", domain=PRIVATE, since=1, device="cpu", prepare=prepare_embed)
def CastEmbedLayerNormalization(xp, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
                                gamma, beta, mask, position_ids=None, *, epsilon=1e-12, mask_index_type=1,
                                prepared=None):
    """The native kernel's embedding and normalization of int64 (or int32) ids and mask, wrapped to int32 by
    the kernel as it reads them (another integer mask cast first)."""
    if type(mask) is np.ndarray and mask.dtype.kind in "biuf" and mask.dtype not in _IDS:
        mask = mask.astype(np.int32)
    got = embed_norm(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta,
                     mask, position_ids, epsilon, prepared, 2, narrow=True)
    if got is None:
        return _private.CastEmbedLayerNormalization(
            xp, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
            position_ids, epsilon=epsilon, mask_index_type=mask_index_type)
    return got[:2]
