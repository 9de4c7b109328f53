"""com.microsoft text and embedding ops: Tokenizer, MurmurHash3, WordConvEmbedding, TorchEmbedding.

Tokenizer and MurmurHash3 on strings run on the host by nature (string tensors are NumPy object
arrays on every device; the executor hands such nodes host arrays and moves numeric results back).
Tokenizer's regular expressions use Python's ``re`` (onnxruntime uses RE2; the common syntax agrees).
MurmurHash3 (x86_32) on numbers is vectorised in uint32 arithmetic and stays on the device: each
element hashes its own 4 or 8 bytes (little-endian), as onnxruntime keys it. WordConvEmbedding
(character CNN over words) and TorchEmbedding (a row gather) run on the device.
"""

from __future__ import annotations

import re

import numpy as np

from ...device import to_host
from ...errors import NodeError
from ...registry import op
from ..indexing import check_bounds

MS = "com.microsoft"

# -- Tokenizer ----------------------------------------------------------------------------------

_START, _END = "\x02", "\x03"


def _tokens(s: str, separators, tokenexp, mincharnum: int) -> list[str]:
    if tokenexp is not None:
        return [m.group(0) for m in tokenexp.finditer(s) if m.end() > m.start() and len(m.group(0)) >= mincharnum]
    if separators is None:  # character tokenization
        return list(s)
    out, pos = [], 0
    for m in separators.finditer(s):
        if m.end() == m.start():
            continue
        piece = s[pos:m.start()]
        if piece and len(piece) >= mincharnum:
            out.append(piece)
        pos = m.end()
    if pos < len(s) and len(s) - pos >= mincharnum:
        out.append(s[pos:])
    return out


@op("Tokenizer", domain=MS, since=1)
def Tokenizer(xp, X, *, mark, mincharnum, pad_value, separators=None, tokenexp=None):
    """Splits each string of a [C] or [N, C] tensor into tokens along a new last axis, framed by 0x02 /
    0x03 with ``mark`` and then padded with ``pad_value``."""
    if (separators is None) == (tokenexp is None):
        raise NodeError("Tokenizer needs exactly one of 'separators' and 'tokenexp'")
    x = np.asarray(to_host(X), dtype=object)
    if x.ndim not in (1, 2):
        raise NodeError(f"Tokenizer input must be [C] or [N, C], got shape {x.shape}")
    sep_re = exp_re = None
    if tokenexp is not None:
        exp_re = re.compile(tokenexp)
    elif not (len(separators) == 1 and separators[0] == ""):
        if any(s == "" for s in separators):
            raise NodeError("empty separators are only allowed alone (character tokenization)")
        sep_re = re.compile("|".join(f"(?:{s})" for s in separators))
    elif mincharnum > 1:
        raise NodeError("mincharnum is too big for character tokenization")
    rows = [_tokens(str(s), sep_re, exp_re, mincharnum) for s in x.reshape(-1)]
    width = max((len(r) for r in rows), default=0)
    if width == 0:
        return np.empty(x.shape + (0,), dtype=object)
    # padding goes outside the markers: [0x02, tokens.., 0x03, pad..]
    framed = [([_START] if mark else []) + r + ([_END] if mark else []) + [pad_value] * (width - len(r))
              for r in rows]
    return np.array(framed, dtype=object).reshape(x.shape + (len(framed[0]),))


# -- MurmurHash3 --------------------------------------------------------------------------------

_C1, _C2 = 0xCC9E2D51, 0x1B873593
_M32 = 0xFFFFFFFF


def _rotl(xp, v, r):
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def _mix_block(xp, h, k):
    k = _rotl(xp, k * np.uint32(_C1), 15) * np.uint32(_C2)
    h = _rotl(xp, h ^ k, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(xp, h):
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _murmur_bytes(data: bytes, seed: int) -> int:
    """MurmurHash3_x86_32 of one byte string (host)."""
    h = seed & _M32
    n = len(data) // 4
    for i in range(n):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    tail = data[4 * n:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


@op("MurmurHash3", domain=MS, since=1)
def MurmurHash3(xp, X, *, positive=1, seed=0):
    out = np.uint32 if positive else np.int32
    if np.dtype(X.dtype).kind in "OUS":
        x = np.asarray(to_host(X), dtype=object)
        h = np.array([_murmur_bytes(str(s).encode("utf-8"), seed) for s in x.reshape(-1)], dtype=np.uint32)
        return xp.asarray(h.reshape(x.shape).view(out))
    size = np.dtype(X.dtype).itemsize
    if size not in (4, 8):
        raise NodeError(f"MurmurHash3 hashes 4- or 8-byte numbers or strings, not {X.dtype}")
    words = xp.reshape(xp.ascontiguousarray(X).view(np.uint32), tuple(X.shape) + (size // 4,))
    h = xp.full(tuple(X.shape), seed & _M32, dtype=np.uint32)
    for i in range(size // 4):
        h = _mix_block(xp, h, words[..., i])
    h = _fmix(xp, h ^ np.uint32(size))
    return h.view(out)


# -- embeddings ---------------------------------------------------------------------------------

@op("WordConvEmbedding", domain=MS, since=1)
def WordConvEmbedding(xp, Sequence, W, B, C, *, char_embedding_size=None, conv_window_size=None,
                      embedding_size=None):
    """Per word (a row of character ids, 0 = padding): character embeddings C[ids], a 1-D convolution
    of width ``W.shape[2]`` over them (W: [filters, 1, width, char_embedding]), + B, tanh, and the
    maximum over the windows. A word's length is its count of non-zero ids (0 if it starts with 0);
    windows run over the first max(length, width) characters. Words of length 0 give zeros."""
    if W.ndim != 4 or Sequence.ndim != 2 or C.ndim != 2:
        raise NodeError(f"expected Sequence (words, chars), W (filters, 1, width, dim), C (vocab, dim); got "
                        f"{tuple(Sequence.shape)}, {tuple(W.shape)}, {tuple(C.shape)}")
    M, _, width, dim = W.shape
    for name, value, actual in (("embedding_size", embedding_size, M), ("conv_window_size", conv_window_size, width),
                                ("char_embedding_size", char_embedding_size, C.shape[1])):
        if value is not None and value != -1 and value != actual:
            raise NodeError(f"{name}={value} does not match the weights ({actual})")
    if C.shape[1] != dim:
        raise NodeError(f"char embedding size {C.shape[1]} differs from the convolution's {dim}")
    S, L = Sequence.shape
    if L < width:
        raise NodeError(f"words of {L} characters are shorter than the window {width}")
    check_bounds(xp, Sequence, (C.shape[0],), "Sequence")
    ids = Sequence.astype(np.int64)
    length = xp.where(ids[:, 0] > 0, xp.sum((ids > 0).astype(np.int64), axis=1), 0)  # (S,)
    rows = xp.reshape(ids % max(C.shape[0], 1), (-1,))  # negative from the end; in range if the check is deferred
    emb = xp.reshape(xp.take(C, rows, axis=0), (S, L, dim)).astype(np.float32)
    P = L - width + 1
    windows = xp.concat([emb[:, t:t + P, :] for t in range(width)], axis=2)  # (S, P, width*dim)
    conv = xp.matmul(windows, xp.reshape(W, (M, width * dim)).astype(np.float32).T) + B.astype(np.float32)
    act = xp.tanh(conv)
    n_windows = xp.maximum(length, width) - width + 1  # (S,)
    valid = xp.reshape(xp.arange(P, dtype=np.int64), (1, P)) < n_windows[:, None]
    best = xp.max(xp.where(valid[:, :, None], act, np.float32(-1e12)), axis=1)
    return xp.where((length > 0)[:, None], best, np.float32(0.0)).astype(W.dtype)


@op("TorchEmbedding", domain=MS, since=1)
def TorchEmbedding(xp, weight, indices, padding_idx=None, scale_grad_by_freq=None):
    """weight[indices] (``padding_idx`` and ``scale_grad_by_freq`` only shape gradients)."""
    if weight.ndim != 2:
        raise NodeError(f"weight must be 2-D, got shape {tuple(weight.shape)}")
    check_bounds(xp, indices, (weight.shape[0],))
    idx = indices.astype(np.int64)
    idx = idx % max(weight.shape[0], 1)  # negative from the end; a deferred bounds check's run stays in range
    return xp.reshape(xp.take(weight, xp.reshape(idx, (-1,)), axis=0), tuple(indices.shape) + (weight.shape[1],))
