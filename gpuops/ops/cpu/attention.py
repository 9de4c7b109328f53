"""com.microsoft Attention on the CPU (``@op(..., device="cpu")``; QAttention's heads too, after its
8-bit projection, :mod:`.quantize`): the packed Q|K|V projection as one
``np.matmul`` plus the bias in place, then the scores, masks, softmax and weighted sum of the values of
every (batch, head) in one native pass (``cpu_kernels/attention.c``), written in the merged-heads
layout -- where the generic op splits the heads, transposes, multiplies, builds the additive mask,
adds it, calls the softmax and transposes back (some twenty NumPy calls).

float32, with or without past (its keys and values first; the present, when asked for, written by the
kernel), with a key-padding ``mask_index`` of key lengths ``(B)``, end and start positions ``(2B)`` or a
raw 0/1 mask ``(B, T)`` or ``(B, S, T)``, causal or not, without attention_bias; the rest (and CuPy
arrays, ``native.disabled()``) goes to the generic op of
:mod:`gpuops.ops.contrib.transformer`, the fallback and test oracle. With constant weights (the
``prepare`` hook), what a node's input and mask shapes decide (the heads, the mask's form, the kernel's
sizes) is derived once per shape and kept on the plan step: a small model's run is mostly such checks;
and a small projection (:data:`PROJECT_MAX`) is made by the kernel's own loops
(``attention_planned_f32``), without a BLAS call, the bias's pass and the array between them.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from ... import native, threads
from ...registry import op
from ..contrib import transformer as _transformer
from . import planned

MS = "com.microsoft"
_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


def _address(a: np.ndarray) -> int:
    return native.address(a) if a.flags.writeable else a.ctypes.data


def _key_mask(mask_index, Bn: int, S: int, T: int):
    """(key_range or None, masked bytes or None, key_form, mask_rows) for the kernel from ``mask_index``
    (None: no mask) over T keys, or None for a form it does not take."""
    if mask_index is None:
        return None, None, 0, 0
    if type(mask_index) is not np.ndarray or mask_index.dtype.kind not in "iub":
        return None
    dims = mask_index.shape
    if len(dims) == 1 and dims[0] in (Bn, 2 * Bn):
        m = mask_index
        if m.dtype != _I32 or not m.flags.c_contiguous:  # clipped to [0, T]: the same keys masked
            m = np.clip(m.astype(np.int64), 0, T).astype(np.int32)
        return m, None, 1 if dims[0] == Bn else 2, 0
    if dims == (Bn, T) or dims == (Bn, S, T):
        masked = np.less_equal(mask_index, 0).view(np.uint8)
        return None, masked, 0, 1 if len(dims) == 2 else S
    return None


def attention(input, weights, bias, mask_index, past, num_heads, unidirectional, qkv_hidden_sizes, scale,  # noqa: A002
              mask_filter_value, want_present):
    """Attention's (output, present or None) by the native kernel, or None where it does not apply."""
    fn = native.function("attention_f32")
    if fn is None or type(input) is not np.ndarray or type(weights) is not np.ndarray or input.dtype != _F32 \
            or weights.dtype != _F32 or input.ndim != 3 or weights.ndim != 2 or not input.size:
        return None
    Bn, S, D = input.shape
    hidden = weights.shape[1]
    if weights.shape[0] != D or not hidden:
        return None
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != _F32 or bias.shape != (hidden,)):
        return None
    if heads(hidden, num_heads, past, want_present, qkv_hidden_sizes) is None:
        return None
    qkv = np.matmul(input.reshape(Bn * S, D), weights)
    if bias is not None:
        np.add(qkv, bias, out=qkv)
    return attend(qkv.reshape(Bn, S, hidden), past, mask_index, num_heads, unidirectional, qkv_hidden_sizes, scale,
                  mask_filter_value, want_present)


def heads(hidden: int, num_heads: int, past, want_present, qkv_hidden_sizes=None):
    """(hq, hv) of the heads of a projection of ``hidden`` columns, or None where the kernel does not apply."""
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [hidden // 3] * 3
    N = num_heads
    if len(sizes) != 3 or sum(sizes) != hidden or sizes[0] != sizes[1] or N < 1 or sizes[0] % N or sizes[2] % N \
            or not sizes[0]:
        return None
    hq, hv = sizes[0] // N, sizes[2] // N
    if (want_present or past is not None) and hq != hv:
        return None
    return hq, hv


def attend(qkv, past, mask_index, num_heads, unidirectional, qkv_hidden_sizes, scale, mask_filter_value,
           want_present):
    """Attention's (output, present or None) of its packed projection ``qkv`` (B, S, Q|K|V float32, bias
    added) by the native kernel, or None where it does not apply."""
    fn = native.function("attention_f32")
    if fn is None or type(qkv) is not np.ndarray or qkv.dtype != _F32 or qkv.ndim != 3 or not qkv.size:
        return None
    Bn, S, hidden = qkv.shape
    N = num_heads
    sizes = heads(hidden, N, past, want_present, qkv_hidden_sizes)
    if sizes is None:
        return None
    hq, hv = sizes
    qkv = qkv if qkv.flags.c_contiguous else np.ascontiguousarray(qkv)
    P = 0
    if past is not None:
        if type(past) is not np.ndarray or past.dtype != _F32 or past.ndim != 5 \
                or past.shape[:3] != (2, Bn, N) or past.shape[4] != hq:
            return None
        P = past.shape[3]
        past = past if past.flags.c_contiguous else np.ascontiguousarray(past)
    mask = _key_mask(mask_index, Bn, S, P + S)
    if mask is None:
        return None
    key_range, masked, key_form, mask_rows = mask
    y = np.empty((Bn, S, N * hv), np.float32)
    present = np.empty((2, Bn, N, P + S, hq), np.float32) if want_present else None
    native.call(fn, native.address(qkv), None if past is None else _address(past),
                None if key_range is None else _address(key_range), None if masked is None else native.address(masked),
                native.address(y), None if present is None else native.address(present), Bn, S, P, N, hq, hv,
                key_form, mask_rows, int(bool(unidirectional)), divisor(hq, scale), float(mask_filter_value))
    return y, present


def divisor(hq: int, scale) -> float:
    """What the scores are divided by: sqrt of the head size, or 1 / ``scale`` (what the exporters set)."""
    return math.sqrt(hq) if not scale else 1.0 / float(scale)


def program_mask_kind(mask, Bn: int, S: int, T: int) -> int | None:
    """The program kernels' form of a run-time mask over T keys (``cpu_kernels/attention.c``'s
    step_scratch): 0 none, 1 or 2 int32 key ranges, 3 or 4 int32 rows per batch or per query; None for
    another."""
    if mask is None:
        return 0
    if type(mask) is not planned.Operand or mask.dtype != _I32:
        return None
    return {(Bn,): 1, (2 * Bn,): 2, (Bn, T): 3, (Bn, S, T): 4}.get(tuple(mask.shape))


MAX_PLANS = 64  # a step's kept shapes: a model fed many shapes derives the rest each run
# The most multiply-adds of a projection that attention_planned_f32 makes itself (a tiny BERT's 24 x 32 x 96 is
# 74k): its plain loops beat a BLAS call and the bias's pass up to there, not on a large model's.
PROJECT_MAX = 1 << 17


class AttentionPlan(ctypes.Structure):
    """``struct attention_plan`` of ``cpu_kernels/attention.c``: attention_planned_f32's arguments but its
    input, mask and output."""

    _fields_ = [("w", ctypes.c_void_p), ("bias", ctypes.c_void_p)] + [
        (name, ctypes.c_int64) for name in ("batch", "seq", "d", "heads", "hq", "hv", "key_form", "mask_rows",
                                            "causal")] + [("divisor", ctypes.c_float), ("filter", ctypes.c_float)]


def _contiguous_f32(a):
    return type(a) is np.ndarray and a.dtype == _F32 and a.flags.c_contiguous and a.size


def prepare(constants, attrs):
    """Attention's ``prepare`` hook where the weights (and bias) are constants and the node's attributes
    are the kernel's: a dict of per-shape plans (:func:`_planned`), empty at first, with the weights' and
    bias's addresses (None where they are not C-contiguous float32); else None."""
    w, b = constants.get(1), constants.get(2)
    if type(w) is not np.ndarray or (2 in constants) != (b is not None) or attrs.get("do_rotary") \
            or attrs.get("past_present_share_buffer"):
        return None
    addresses = None
    if _contiguous_f32(w) and (b is None or _contiguous_f32(b)):
        addresses = (_address(w), None if b is None else _address(b))
    return {"weights": w, "bias": b, "addresses": addresses}


def _plan(input, weights, bias, mask_index, num_heads, unidirectional, qkv_hidden_sizes, scale,  # noqa: A002
          mask_filter_value, project):
    """What :func:`_planned` needs of an input and mask of these shapes (no past, no present): (rows, D, the
    output's shape, the kernel's arguments after present, and where attention_planned_f32 projects, its
    :class:`AttentionPlan` and that's address, else None twice), or None where the kernels do not take
    them. ``project``: the weights' and bias's addresses where attention_planned_f32 may project, else None."""
    if input.dtype != _F32 or weights.dtype != _F32 or input.ndim != 3 or weights.ndim != 2 or not input.size:
        return None
    Bn, S, D = input.shape
    hidden = weights.shape[1]
    if weights.shape[0] != D or not hidden or (bias is not None and (bias.dtype != _F32 or bias.shape != (hidden,))):
        return None
    sizes = heads(hidden, num_heads, None, False, qkv_hidden_sizes)
    if sizes is None:
        return None
    hq, hv = sizes
    if mask_index is None:
        key_form, mask_rows = 0, 0
    else:
        if type(mask_index) is not np.ndarray or mask_index.dtype != _I32 or mask_index.ndim != 1 \
                or mask_index.shape[0] not in (Bn, 2 * Bn):
            return None  # the other forms: attention()
        key_form, mask_rows = 1 if mask_index.shape[0] == Bn else 2, 0
    tail = (Bn, S, 0, num_heads, hq, hv, key_form, mask_rows, int(bool(unidirectional)), divisor(hq, scale),
            float(mask_filter_value))
    planned = None
    if project is not None and Bn * S * D * hidden <= PROJECT_MAX:
        planned = AttentionPlan(project[0], project[1], Bn, S, D, *tail[3:])
    return Bn * S, D, (Bn, S, num_heads * hv), tail, planned, None if planned is None else ctypes.addressof(planned)


def _planned(prepared, input, weights, bias, mask_index, num_heads, unidirectional, qkv_hidden_sizes,  # noqa: A002
             scale, mask_filter_value):
    """Attention's output by the kernel with what depends on the shapes kept in the step's ``prepared`` (its
    constant weights and bias; no past, no present; a mask of key lengths or spans, int32), or None."""
    if type(input) is not np.ndarray or weights is not prepared["weights"] or bias is not prepared["bias"]:
        return None
    fn = native.function("attention_f32")
    if fn is None:
        return None
    masked = mask_index is not None
    key = (input.shape, mask_index.shape if masked else None)
    plan = prepared.get(key)
    if plan is None:
        project = prepared["addresses"] if native.function("attention_planned_f32") is not None else None
        plan = _plan(input, weights, bias, mask_index, num_heads, unidirectional, qkv_hidden_sizes, scale,
                     mask_filter_value, project)
        if plan is None:
            return None
        if len(prepared) < MAX_PLANS:
            prepared[key] = plan
    elif input.dtype != _F32 or (masked and (type(mask_index) is not np.ndarray or mask_index.dtype != _I32)):
        return None
    rows, D, shape, tail, _, planned = plan
    if masked and not mask_index.flags.c_contiguous:
        return None
    if planned is not None and input.flags.c_contiguous:
        proj = native.function("attention_planned_f32")
        if proj is not None:
            y = np.empty(shape, np.float32)
            if proj(planned, _address(input), _address(mask_index) if masked else None, None, native.address(y)):
                raise MemoryError("native kernel attention_planned_f32 could not allocate its scratch")
            return y
    qkv = np.matmul(input.reshape(rows, D), weights)
    if bias is not None:
        np.add(qkv, bias, out=qkv)
    y = np.empty(shape, np.float32)
    if fn(native.address(qkv), None, _address(mask_index) if masked else None, None, native.address(y), None,
          *tail):
        raise MemoryError("native kernel attention_f32 could not allocate its scratch")
    return y


@op("Attention", domain=MS, since=1, n_outputs=True, device="cpu", prepare=prepare)
def Attention(xp, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,  # noqa: A002
              past_sequence_length=None, *, num_heads, unidirectional=0, qkv_hidden_sizes=None, scale=None,
              mask_filter_value=-10000.0, do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0,
              n_outputs=1, prepared=None):
    """The native kernel's attention (with constant weights, no past and a mask of key lengths, the
    shapes' work kept in ``prepared``), else the generic op."""
    if n_outputs <= 2 and attention_bias is None and not do_rotary and not past_present_share_buffer:
        if prepared is not None and n_outputs == 1 and past is None:
            y = _planned(prepared, input, weights, bias, mask_index, num_heads, unidirectional, qkv_hidden_sizes,
                         scale, mask_filter_value)
            if y is not None:
                return y
        got = attention(input, weights, bias, mask_index, past, num_heads, unidirectional, qkv_hidden_sizes, scale,
                        mask_filter_value, n_outputs > 1)
        if got is not None:
            return got[0] if n_outputs == 1 else got
    return _transformer.Attention(
        xp, input, weights, bias, mask_index, past, attention_bias, past_sequence_length, num_heads=num_heads,
        unidirectional=unidirectional, qkv_hidden_sizes=qkv_hidden_sizes, scale=scale,
        mask_filter_value=mask_filter_value, do_rotary=do_rotary, rotary_embedding_dim=rotary_embedding_dim,
        past_present_share_buffer=past_present_share_buffer, n_outputs=n_outputs)


# -- native programs (gpuops.onnx.programs) ------------------------------------------------------------


@planned.planned("Attention", MS)
def _attention_step(step, operands):
    """Attention without attention bias or rotary embedding: its mask absent, 1-D int32 key ranges, or int32
    masks of every key; a past of the kernel's form and its present. The projection by the BLAS and the
    kernel of :func:`attend`, in one call."""
    x, weights = operands[0], operands[1]
    bias, mask, past = (operands[i] if len(operands) > i else None for i in (2, 3, 4))
    a = step.attrs
    fn, sgemm = planned.kernel("attention_program_f32"), threads.blas_sgemm()
    if fn is None or sgemm is None or any(o is not None for o in operands[5:]) or a.get("do_rotary", 0) \
            or a.get("past_present_share_buffer", 0) or not planned.is_f32(x) or x.ndim != 3 \
            or not math.prod(x.shape) or type(weights) is not np.ndarray or weights.dtype != _F32 \
            or weights.ndim != 2 or not weights.flags.c_contiguous:
        return None
    Bn, S, D = x.shape
    hidden, N = weights.shape[1], a["num_heads"]
    want_present = len(step.outputs) > 1 and bool(step.outputs[1])
    if weights.shape[0] != D or not hidden or any(step.outputs[2:]):
        return None
    if bias is not None and (type(bias) is not np.ndarray or bias.dtype != _F32 or bias.shape != (hidden,)):
        return None
    sizes = heads(hidden, N, past, want_present, a.get("qkv_hidden_sizes"))
    if sizes is None:
        return None
    hq, hv = sizes
    P = 0
    if past is not None:
        if not planned.is_f32(past) or past.ndim != 5 or past.shape[:3] != (2, Bn, N) or past.shape[4] != hq:
            return None
        P = past.shape[3]
    kind = program_mask_kind(mask, Bn, S, P + S)
    if kind is None:
        return None
    b = None if bias is None else np.ascontiguousarray(bias)
    p = planned.params(sgemm[0], int(sgemm[1]), weights.ctypes.data, 0 if b is None else b.ctypes.data, Bn, S, D,
                       hidden, N, hq, hv, kind, int(bool(a.get("unidirectional", 0))), divisor(hq, a.get("scale")),
                       float(a.get("mask_filter_value", -10000.0)), P, sgemm[2], sgemm[3])
    call = planned.Call(fn, p, 0, None if mask is None else 3, None if past is None else 4,
                        1 if want_present else None, wide=True)
    extra = ((1, (2, Bn, N, P + S, hq)),) if want_present else ()
    return planned.NativeStep((Bn, S, N * hv), (call,), holds=(p, weights, b), extra=extra)
