"""Text ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch, TfIdfVectorizer, ImageDecoder.

String tensors are NumPy object arrays and never leave the host (no device has a string type), so
these ops work on the host by nature: string outputs stay NumPy object arrays, numeric outputs
(RegexFullMatch's booleans, StringSplit's counts, TfIdfVectorizer's vectors, ImageDecoder's pixels)
are moved to the device with ``xp.asarray``. TfIdfVectorizer on integer input runs on the device.
ImageDecoder needs Pillow, which gpuops does not depend on.
"""

from __future__ import annotations

import io
import operator
import re

import numpy as np

from ..device import to_host
from ..errors import NodeError
from ..registry import op
from .elementwise import clamp


def _strings(X) -> np.ndarray:
    """A string tensor as a NumPy object array (string tensors belong on the host; ``to_host`` is a
    no-op for them and an explicit copy if one was placed on a device)."""
    return np.asarray(to_host(X), dtype=object)


def _per_char(word: str, change) -> str:
    """Case change character by character (like C's towupper / towlower, as onnxruntime): a
    character whose mapping is several characters (German sharp s) is left as is."""
    out = change(word)
    if len(out) == len(word):
        return out
    return "".join(c if len(m := change(c)) != 1 else m for c in word)


@op("StringNormalizer", since=10)
def StringNormalizer(xp, X, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=None):
    """Drops the elements found in ``stopwords``, then changes case. Input [C] or [1, C]; when every
    element is dropped the output is [""] (shape [1] or [1, 1]). Case changes use Unicode's simple
    per-character mappings; ``locale`` is accepted and not otherwise used."""
    x = _strings(X)
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise NodeError(f"StringNormalizer accepts [C] or [1, C] input, got shape {x.shape}")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise NodeError(f"case_change_action must be NONE, LOWER or UPPER, got {case_change_action!r}")
    words = list(x.reshape(-1))
    if stopwords:
        if is_case_sensitive:
            stops = set(stopwords)
            words = [w for w in words if w not in stops]
        else:
            stops = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stops]
    if case_change_action != "NONE":
        change = str.lower if case_change_action == "LOWER" else str.upper
        words = [_per_char(w, change) for w in words]
    out = np.array(words or [""], dtype=object)
    return out if x.ndim == 1 else out.reshape(1, -1)


@op("StringSplit", since=20)
def StringSplit(xp, X, *, delimiter=None, maxsplit=None):
    """Substrings padded with "" to the longest split ([..., max_count]), and their counts (int64).
    No (or an empty) delimiter splits on runs of whitespace and drops leading/trailing whitespace
    (also after the last of ``maxsplit`` splits). An empty string has no substrings. (Both as
    onnxruntime.)"""
    x = _strings(X)
    sep = delimiter or None
    limit = -1 if maxsplit is None else int(maxsplit)

    def split(s: str) -> list[str]:
        if not s:
            return []
        p = s.split(sep, limit)
        if sep is None and p:
            p[-1] = p[-1].rstrip()
        return p

    parts = [split(s) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    Y = np.full((len(parts), width), "", dtype=object)
    for i, p in enumerate(parts):
        Y[i, :len(p)] = p
    return Y.reshape(*x.shape, width), xp.asarray(counts)


_concat = np.frompyfunc(operator.add, 2, 1)


@op("StringConcat", since=20)
def StringConcat(xp, X, Y):
    """Element-wise concatenation with broadcasting."""
    return np.asarray(_concat(_strings(X), _strings(Y)), dtype=object)


@op("RegexFullMatch", since=20)
def RegexFullMatch(xp, X, *, pattern=None):
    """True where the whole string matches ``pattern`` (RE2 syntax, run with Python's ``re``, which
    accepts the RE2 subset models use)."""
    if pattern is None:
        raise NodeError("RegexFullMatch needs the 'pattern' attribute")
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise NodeError(f"invalid regular expression {pattern!r}: {e}") from e
    x = _strings(X)
    match = np.array([regex.fullmatch(s) is not None for s in x.reshape(-1)], dtype=bool)
    return xp.asarray(match.reshape(x.shape))


# -- TfIdfVectorizer -------------------------------------------------------------------------------


def _pool_grams(pool: list, ngram_counts: list[int], min_n: int, max_n: int):
    """{n: (grams [G, n], n-gram numbers [G])} for the sizes n in [min_n, max_n]. n-grams are
    numbered across all sizes in pool order (``ngram_indexes`` is parallel to them); a repeated
    n-gram keeps its last number, as in the reference."""
    out, number = {}, 0
    bounds = list(ngram_counts) + [len(pool)]
    for n in range(1, len(ngram_counts) + 1):
        start, end = bounds[n - 1], bounds[n]
        count = max(end - start, 0) // n
        if min_n <= n <= max_n and count:
            last = {tuple(pool[start + i * n:start + (i + 1) * n]): number + i for i in range(count)}
            out[n] = (list(last), list(last.values()))
        number += count
    return out


@op("TfIdfVectorizer", since=9)
def TfIdfVectorizer(xp, X, *, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts,
                    ngram_indexes, pool_int64s=None, pool_strings=None, weights=None):
    """Counts of the pool's n-grams (items ``skip + 1`` apart, for every skip up to ``max_skip_count``;
    1-grams once) per row, weighted by ``mode``. ``weights`` is indexed by output coordinate, as in
    onnxruntime and the onnx reference. Each (size, skip) pair is one vectorised pass: every window
    becomes an integer code, looked up in the pool's sorted codes, and the hits are counted by binary
    search in their sorted slots (``bincount`` reads a size back to the host on CuPy)."""
    if mode not in ("TF", "IDF", "TFIDF"):
        raise NodeError(f"TfIdfVectorizer mode must be TF, IDF or TFIDF, got {mode!r}")
    if (pool_int64s is None) == (pool_strings is None):
        raise NodeError("TfIdfVectorizer needs exactly one of pool_int64s and pool_strings")
    out_size = max(ngram_indexes) + 1
    if pool_strings is not None:  # strings -> integer ids on the host, then the integer path
        ids: dict[str, int] = {}
        pool = [ids.setdefault(s, len(ids)) for s in pool_strings]
        x = _strings(X)
        X = xp.asarray(np.array([ids.get(s, -1) for s in x.reshape(-1)], dtype=np.int64).reshape(x.shape))
    else:
        pool = list(pool_int64s)
    if X.ndim > 2:
        raise NodeError(f"TfIdfVectorizer accepts [C] or [N, C] input, got shape {tuple(X.shape)}")
    rows = xp.reshape(X, (1, -1) if X.ndim < 2 else tuple(X.shape)).astype(np.int64)
    n_rows, C = (int(d) for d in rows.shape)
    # tokens -> dense ids 0..V-1 of the pool's vocabulary, V for any other token; an n-gram of ids is
    # then one exact integer code (base V + 1), looked up by binary search in the pool's sorted codes
    vocab = np.unique(np.asarray(pool, dtype=np.int64))
    V = len(vocab)
    vocab_d = xp.asarray(vocab)
    if V:
        pos = clamp(xp, xp.searchsorted(vocab_d, rows), 0, V - 1)
        ids = xp.where(vocab_d[pos] == rows, pos, V)
    else:
        ids = xp.zeros(rows.shape, dtype=np.int64)
    dump = n_rows * out_size  # the count slot of windows that match no n-gram
    counts = xp.zeros((dump + 1,), dtype=np.int64)
    every_slot = xp.arange(dump + 1, dtype=np.int64)
    row_base = xp.reshape(xp.arange(n_rows, dtype=np.int64) * out_size, (n_rows, 1))
    for n, (grams, numbers) in _pool_grams(pool, ngram_counts, min_gram_length, max_gram_length).items():
        if (V + 1) ** n >= 2 ** 63:
            raise NodeError(f"TfIdfVectorizer: {n}-grams over a vocabulary of {V} do not fit int64 codes")
        codes = [sum(int(i) * (V + 1) ** (n - 1 - j) for j, i in enumerate(np.searchsorted(vocab, g)))
                 for g in grams]
        order = np.argsort(codes)
        codes_d = xp.asarray(np.asarray(codes, dtype=np.int64)[order])
        cols_d = xp.asarray(np.asarray(ngram_indexes, dtype=np.int64)[np.asarray(numbers)[order]])
        for skip in range(max_skip_count + 1 if n > 1 else 1):  # 1-grams are counted once
            span = (n - 1) * (skip + 1)
            if span >= C:
                continue
            P = C - span  # windows: items start, start + skip + 1, ...
            wc = xp.zeros((n_rows, P), dtype=np.int64)
            for j in range(n):
                offset = j * (skip + 1)
                wc = wc * (V + 1) + ids[:, offset:offset + P]
            at = clamp(xp, xp.searchsorted(codes_d, xp.reshape(wc, (-1,))), 0, len(codes) - 1)
            at = xp.reshape(at, wc.shape)
            slot = xp.where(codes_d[at] == wc, row_base + cols_d[at], dump)
            slot = xp.sort(xp.reshape(slot, (-1,)))
            counts = counts + (xp.searchsorted(slot, every_slot, side="right")
                               - xp.searchsorted(slot, every_slot, side="left"))
    counts = xp.reshape(counts[:dump], (n_rows, out_size)).astype(np.float32)
    if mode == "TF":
        out = counts
    else:
        w = xp.asarray(np.asarray(weights, dtype=np.float32)) if weights else xp.ones((out_size,), dtype=np.float32)
        out = xp.where(counts > 0, w, 0.0).astype(np.float32) if mode == "IDF" else counts * w
    return out if X.ndim == 2 else out[0]


@op("ImageDecoder", since=20, syncs="decodes the bytes on the host")
def ImageDecoder(xp, encoded_stream, *, pixel_format="RGB"):
    """Decodes an encoded image (uint8 bytes) to uint8 [H, W, 3] (RGB or BGR) or [H, W, 1]
    (Grayscale) with Pillow on the host."""
    try:
        import PIL.Image
    except ImportError as e:
        raise NodeError("ImageDecoder needs Pillow, which is not installed (pip install pillow)") from e
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise NodeError(f"pixel_format must be RGB, BGR or Grayscale, got {pixel_format!r}")
    data = to_host(encoded_stream).tobytes()
    try:
        img = PIL.Image.open(io.BytesIO(data))
        img = img.convert("L" if pixel_format == "Grayscale" else "RGB")
        pixels = np.asarray(img, dtype=np.uint8)
    except Exception as e:  # noqa: BLE001 - Pillow raises many kinds of errors
        raise NodeError(f"ImageDecoder cannot decode the image: {e}") from e
    if pixel_format == "Grayscale":
        pixels = pixels[:, :, None]
    elif pixel_format == "BGR":
        pixels = pixels[:, :, ::-1]
    return xp.asarray(np.ascontiguousarray(pixels))
