"""Conv, ConvTranspose and com.microsoft FusedConv on CUDA: im2col / col2im kernels around cuBLAS
GEMMs (``xp.matmul``), a direct depthwise kernel, and the bias + activation epilogue fused into one
kernel. A Conv is one GEMM per group over a whole chunk of images: im2col lays the images' columns side
by side, and the epilogue kernel writes the [M, N, O] result out as [N, M, O]. A batch of per-image
GEMMs (CuPy's broadcast matmul) had made the whole conv run at 7-11 TFLOP/s at batch 32 on an H200,
against 29-36 for ``cupy.matmul`` of the one GEMM (benchmarks/results/2026-11-28-h200). ConvInteger
and QLinearConv: im2col of the centred int32 input around the integer GEMM kernel, then the
requantize kernel (quantize.cu).

Every convolution is run as a 3-D one (1-D and 2-D get unit leading spatial axes). float32 and
float16 run on the kernels (float16 GEMMs accumulate as cuBLAS does; TF32 for float32 GEMMs is
CuPy's opt-in, ``CUPY_TF32=1``); other dtypes and ranks go to the generic op.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import NodeError
from ...registry import op
from ..windows import check_bias, check_conv_output, conv_geometry, spatial_attrs
from ._launch import NULL, contiguous, f32, generic, i32, i64, launch, on_device, optional
from .quantize import int_matmul, requantize

_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
_BYTE_INTS = (np.dtype(np.uint8), np.dtype(np.int8))
_ACTIVATIONS = {"": 0, "Relu": 1, "LeakyRelu": 2, "Sigmoid": 3, "Tanh": 4, "Clip": 5, "HardSigmoid": 6}
_COL_BYTES = 256 << 20  # im2col buffer budget: larger batches are processed in chunks of images


def _ctype(dtype) -> str:
    return "float" if np.dtype(dtype) == np.float32 else "__half"


def _as3(values, fill: int) -> list[int]:
    values = [int(v) for v in values]
    return [fill] * (3 - len(values)) + values


def activation_code(activation: str | None, params) -> tuple[int, float, float]:
    """(kernel code, alpha, beta) for a FusedConv activation name and its activation_params."""
    name = activation or ""
    if name not in _ACTIVATIONS:
        raise NodeError(f"FusedConv: unsupported activation {name!r} (supported: {sorted(_ACTIVATIONS)[1:]})")
    params = list(params or [])
    defaults = {"LeakyRelu": [0.01], "HardSigmoid": [0.2, 0.5], "Clip": [-np.inf, np.inf]}.get(name, [])
    params = params + defaults[len(params):]
    alpha = params[0] if params else 0.0
    beta = params[1] if len(params) > 1 else 0.0
    return _ACTIVATIONS[name], float(alpha), float(beta)


def _geometry(X, W, kernel_shape, strides, dilations, pads):
    """(kernel, strides, dilations, pads_begin, pads_end), validated: the generic op's helper."""
    if kernel_shape and [int(k) for k in kernel_shape] != [int(k) for k in W.shape[2:]]:
        raise NodeError(f"kernel_shape {list(kernel_shape)} does not match W shape {tuple(W.shape)}")
    kernel = [int(k) for k in W.shape[2:]]
    kernel, strides, dilations, pb, pe = spatial_attrs(X.ndim - 2, kernel, strides, dilations, pads)
    if min(strides + dilations, default=1) < 1:
        raise NodeError(f"strides {strides} and dilations {dilations} must be positive")
    return kernel, [int(v) for v in strides], [int(v) for v in dilations], [int(v) for v in pb], [int(v) for v in pe]


class _ConvShape:
    """Validated geometry of a Conv node, in the 3-D form the kernels take."""

    def __init__(self, X, W, group, kernel_shape, strides, dilations, pads, auto_pad):
        self.N, self.C = int(X.shape[0]), int(X.shape[1])
        self.M, self.Cg, self.G = int(W.shape[0]), int(W.shape[1]), int(group)
        if self.G < 1 or self.C != self.Cg * self.G or self.M % self.G:
            raise NodeError(f"Conv: input channels {self.C}, weight shape {tuple(W.shape)} and group {self.G} "
                            "are inconsistent")
        in_shape = [int(d) for d in X.shape[2:]]
        kernel, strides, dilations, begin, end = _geometry(X, W, kernel_shape, strides, dilations, pads)
        begin, end, self.out_shape = conv_geometry(in_shape, kernel, strides, dilations, begin, end, auto_pad)
        check_conv_output(in_shape, self.out_shape, kernel, dilations, begin, end)
        self.O, self.K = math.prod(self.out_shape), math.prod(kernel)
        self.pointwise = self.K == 1 and all(v == 1 for v in strides) and not any(begin) and not any(end)
        self.args = tuple(i32(v) for v in (*_as3(in_shape, 1), *_as3(self.out_shape, 1), *_as3(kernel, 1),
                                           *_as3(strides, 1), *_as3(begin, 0), *_as3(dilations, 1)))

    @property
    def y_shape(self) -> tuple[int, ...]:
        return (self.N, self.M, *self.out_shape)


def _gemm_chunks(xp, X, W, g: _ConvShape, t: str, gemm):
    """Yields ``(n0, n, R)``: the convolution of images ``n0 .. n0 + n`` as ``R [G, M/G, n*O]`` (that is
    ``[M, n, O]``) = ``gemm(W [G, M/G, C/G*K], col [G, C/G*K, n*O])``, one GEMM per group over all the
    chunk's images (cuBLAS runs one large GEMM far faster than a batch of per-image ones). ``col``
    comes from the im2col kernel (X itself for a 1x1 convolution of one image); chunks of images keep
    it within ``_COL_BYTES``."""
    N, C, G, Cg, O, K = g.N, g.C, g.G, g.Cg, g.O, g.K
    Wg = xp.reshape(W, (G, g.M // G, Cg * K))
    if g.pointwise and N == 1:
        yield 0, 1, gemm(Wg, xp.reshape(X, (G, Cg, O)))
        return
    chunk = max(1, min(N, _COL_BYTES // max(1, C * K * O * X.itemsize)))
    if chunk == N:  # (the common case: no views of a buffer)
        col = xp.empty((C * K, N, O), dtype=X.dtype)
        launch("conv.cu", f"im2col<{t}>", X, col.size, (X, col, i64(col.size), i32(N), i32(C), *g.args))
        yield 0, N, gemm(Wg, xp.reshape(col, (G, Cg * K, N * O)))
        return
    buf = xp.empty(C * K * chunk * O, dtype=X.dtype)
    for n0 in range(0, N, chunk):
        n = min(chunk, N - n0)
        col = xp.reshape(buf[:C * K * n * O], (C * K, n, O))
        launch("conv.cu", f"im2col<{t}>", X, col.size, (X[n0:n0 + n], col, i64(col.size), i32(n), i32(C), *g.args))
        yield n0, n, gemm(Wg, xp.reshape(col, (G, Cg * K, n * O)))


def conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None, act=(0, 0.0, 0.0), Z=None):
    """Y = act(conv(X, W) + B + Z) with the kernels. Returns None when the generic op must run."""
    if not on_device(X, W, B, Z):
        return None
    check_bias(B, W.shape[0])
    if X.dtype not in _FLOATS or W.dtype != X.dtype or not 3 <= X.ndim <= 5 or W.ndim != X.ndim:
        return None
    if (B is not None and B.dtype != X.dtype) or (Z is not None and Z.dtype != X.dtype):
        return None
    g = _ConvShape(X, W, group, kernel_shape, strides, dilations, pads, auto_pad)
    if math.prod(g.y_shape) == 0:
        return xp.empty(g.y_shape, dtype=X.dtype)
    t = _ctype(X.dtype)
    code, alpha, beta = act
    X, W = contiguous(xp, X), contiguous(xp, W)
    if g.G == g.C and g.Cg == 1 and Z is None:  # depthwise: direct kernel, epilogue fused
        Y = xp.empty(g.y_shape, dtype=X.dtype)
        launch("conv.cu", f"depthwise_conv<{t}>", X, Y.size, (X, W, optional(xp, B), Y, i64(Y.size), i32(g.C),
                                                              i32(g.M), *g.args, i32(code), f32(alpha), f32(beta)))
        return Y
    if g.N == 1:  # the epilogue in place, when there is one
        ((_, _, R),) = _gemm_chunks(xp, X, W, g, t, xp.matmul)
        if B is not None or Z is not None or code:
            launch("conv.cu", f"conv_epilogue<{t}>", R, R.size, (R, optional(xp, B), optional(xp, Z), R, i64(R.size),
                                                                i32(1), i32(g.M), i64(g.O), i32(code), f32(alpha),
                                                                f32(beta)))
        return xp.reshape(R, g.y_shape)
    B, Z = optional(xp, B), optional(xp, Z)
    Y = xp.empty(g.y_shape, dtype=X.dtype)
    for n0, n, R in _gemm_chunks(xp, X, W, g, t, xp.matmul):  # R [M, n, O] written out as Y's [n, M, O]
        out = Y if n == g.N else Y[n0:n0 + n]
        z = Z if Z is NULL or n == g.N else Z[n0:n0 + n]
        launch("conv.cu", f"conv_epilogue<{t}>", out, out.size, (R, B, z, out, i64(out.size), i32(n), i32(g.M),
                                                                i64(g.O), i32(code), f32(alpha), f32(beta)))
    return Y


def conv_integer(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """int32 convolution of (x - x_zero_point) and (w - w_zero_point) (w's zero point may be per output
    channel): the centred int32 input through im2col<int>, then the integer GEMM kernel. None when
    the generic op must run."""
    if not on_device(x, w, x_zero_point, w_zero_point) or not 3 <= x.ndim <= 5 or w.ndim != x.ndim:
        return None
    if any(np.dtype(a.dtype) not in _BYTE_INTS for a in (x, w)):
        return None
    M = int(w.shape[0])
    if (x_zero_point is not None and (x_zero_point.size != 1 or x_zero_point.dtype != x.dtype)) or (
            w_zero_point is not None and (w_zero_point.dtype != w.dtype or w_zero_point.ndim > 1
                                          or w_zero_point.size not in (1, M))):
        return None
    g = _ConvShape(x, w, group, kernel_shape, strides, dilations, pads, auto_pad)
    if math.prod(g.y_shape) == 0:
        return xp.zeros(g.y_shape, dtype=np.int32)
    X = x.astype(np.int32)
    if x_zero_point is not None:
        X = X - xp.reshape(x_zero_point, ()).astype(np.int32)
    W = w.astype(np.int32)
    if w_zero_point is not None:
        W = W - xp.reshape(w_zero_point, (-1,) + (1,) * (w.ndim - 1)).astype(np.int32)
    X, W = contiguous(xp, X), contiguous(xp, W)
    gemm = lambda a, b: int_matmul(xp, a, b)  # noqa: E731
    if g.N == 1:
        ((_, _, R),) = _gemm_chunks(xp, X, W, g, "int", gemm)
        return xp.reshape(R, g.y_shape)
    Y = xp.empty(g.y_shape, dtype=np.int32)
    for n0, n, R in _gemm_chunks(xp, X, W, g, "int", gemm):  # R [M, n, O] to Y's [n, M, O]
        Y[n0:n0 + n] = xp.reshape(xp.moveaxis(xp.reshape(R, (g.M, n, g.O)), 1, 0), (n, *g.y_shape[1:]))
    return Y


def _conv_op(since: int):
    def Conv(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
             strides=None):
        Y = conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                 pads=pads, strides=strides)
        if Y is None:
            return generic("Conv", since)(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                                          kernel_shape=kernel_shape, pads=pads, strides=strides)
        return Y

    return Conv


for _v in (1, 11, 22):
    op("Conv", since=_v, device="cuda")(_conv_op(_v))


@op("FusedConv", domain="com.microsoft", since=1, device="cuda")
def FusedConv(xp, X, W, B=None, Z=None, *, activation="", activation_params=None, auto_pad="NOTSET",
              dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    Y = None
    if (activation or "") in _ACTIVATIONS:  # the epilogue's activations; others run the generic op
        Y = conv(xp, X, W, B, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                 pads=pads, strides=strides, act=activation_code(activation, activation_params), Z=Z)
    if Y is None:
        return generic("FusedConv", 1, "com.microsoft")(
            xp, X, W, B, Z, activation=activation, activation_params=activation_params, auto_pad=auto_pad,
            dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads, strides=strides)
    return Y


# -- ConvTranspose -------------------------------------------------------------------------------


def conv_transpose_geometry(in_shape, kernel, strides, dilations, pads_begin, pads_end, auto_pad, output_padding,
                            output_shape, same_upper_head_small=True):
    """(begin pads, end pads, output spatial shape) for ConvTranspose, as the generic op computes them.
    An output_shape (given, or in * stride for SAME_*) determines the pads; the odd unit of padding
    goes to the end for SAME_UPPER from opset 11 (``same_upper_head_small``), to the start in opset 1."""
    nd = len(in_shape)
    output_padding = [int(p) for p in output_padding] if output_padding else [0] * nd
    if len(output_padding) != nd:
        raise NodeError(f"output_padding {output_padding} does not match {nd} spatial axes")
    full = [strides[i] * (in_shape[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    if output_shape:
        out = [int(s) for s in output_shape][-nd:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [in_shape[i] * strides[i] for i in range(nd)]
    else:
        if auto_pad == "VALID":
            pads_begin, pads_end = [0] * nd, [0] * nd
        return pads_begin, pads_end, [max(0, f - b - e) for f, b, e in zip(full, pads_begin, pads_end)]
    head_small = (auto_pad == "SAME_UPPER") == same_upper_head_small
    begin, end = [], []
    for f, o in zip(full, out):
        small, large = (f - o) // 2, (f - o) - (f - o) // 2
        begin.append(small if head_small else large)
        end.append(large if head_small else small)
    return begin, end, out


def conv_transpose(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None, act=(0, 0.0, 0.0),
                   same_upper_head_small=True):
    """ConvTranspose as GEMM (col = W^T x per group) + the col2im gather kernel with the epilogue."""
    if not on_device(X, W, B):
        return None
    check_bias(B, W.shape[1] * group)
    if X.dtype not in _FLOATS or W.dtype != X.dtype or not 3 <= X.ndim <= 5 or W.ndim != X.ndim:
        return None
    if B is not None and B.dtype != X.dtype:
        return None
    N, C = int(X.shape[0]), int(X.shape[1])
    in_shape = [int(s) for s in X.shape[2:]]
    G = int(group)
    if G < 1 or int(W.shape[0]) != C or C % G:
        raise NodeError(f"ConvTranspose: input channels {C}, weight shape {tuple(W.shape)} and group {G} "
                        "are inconsistent")
    Mg = int(W.shape[1])
    M, Cg = Mg * G, C // G
    kernel, strides, dilations, begin, end = _geometry(X, W, kernel_shape, strides, dilations, pads)
    begin, end, out_shape = conv_transpose_geometry(in_shape, kernel, strides, dilations, begin, end, auto_pad,
                                                    output_padding, output_shape, same_upper_head_small)
    Y = xp.empty((N, M, *out_shape), dtype=X.dtype)
    if Y.size == 0:
        return Y
    t = _ctype(X.dtype)
    I, K = math.prod(in_shape), math.prod(kernel)
    Wt = xp.swapaxes(xp.reshape(contiguous(xp, W), (G, Cg, Mg * K)), -1, -2)  # [G, Mg*K, Cg]
    col = xp.matmul(Wt, xp.reshape(contiguous(xp, X), (N, G, Cg, I)))  # [N, G, Mg*K, I] = [N, M*K, I]
    col = contiguous(xp, col)
    code, alpha, beta = act
    geometry = (*map(i32, _as3(out_shape, 1)), *map(i32, _as3(in_shape, 1)), *map(i32, _as3(kernel, 1)),
                *map(i32, _as3(strides, 1)), *map(i32, _as3(begin, 0)), *map(i32, _as3(dilations, 1)))
    launch("conv.cu", f"col2im<{t}>", Y, Y.size,
           (col, optional(xp, B), Y, i64(Y.size), i32(M), *geometry, i32(code), f32(alpha), f32(beta)))
    return Y


def _conv_transpose_op(since: int):
    def ConvTranspose(xp, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                      output_padding=None, output_shape=None, pads=None, strides=None):
        kw = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                  output_padding=output_padding, output_shape=output_shape, pads=pads, strides=strides)
        Y = conv_transpose(xp, X, W, B, same_upper_head_small=since >= 11, **kw)
        return generic("ConvTranspose", since)(xp, X, W, B, **kw) if Y is None else Y

    return ConvTranspose


for _v in (1, 11, 22):
    op("ConvTranspose", since=_v, device="cuda")(_conv_transpose_op(_v))


# -- ConvInteger / QLinearConv -------------------------------------------------------------------


@op("ConvInteger", since=10, device="cuda")
def ConvInteger(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                kernel_shape=None, pads=None, strides=None):
    kw = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
              strides=strides)
    Y = conv_integer(xp, x, w, x_zero_point, w_zero_point, **kw)
    return generic("ConvInteger", 10)(xp, x, w, x_zero_point, w_zero_point, **kw) if Y is None else Y


@op("QLinearConv", since=10, device="cuda")
def QLinearConv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """The int32 accumulator of conv_integer, then the requantize kernel adds the bias and scales by
    x_scale * w_scale / y_scale (w_scale scalar or per output channel)."""
    kw = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
              strides=strides)
    Y = None
    M = int(w.shape[0])
    if (on_device(x_scale, w_scale, y_scale, y_zero_point, B) and x_scale.size == 1 and y_scale.size == 1
            and w_scale.ndim <= 1 and w_scale.size in (1, M) and (B is None or (B.dtype == np.int32 and B.size == M))):
        acc = conv_integer(xp, x, w, x_zero_point, w_zero_point, **kw)
        if acc is not None:
            spatial = math.prod(acc.shape[2:])
            Y = requantize(xp, acc, x_scale, 0, w_scale, 1 if w_scale.size > 1 else 0, y_scale, y_zero_point,
                           rows=M, cols=spatial, bias=B)
    if Y is None:
        return generic("QLinearConv", 10)(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                                          y_zero_point, B, **kw)
    return Y
