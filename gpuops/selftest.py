"""``gpuops selftest``: check an installation, as ``torch.utils.collect_env`` plus a smoke test.

It reports the versions that decide whether the CUDA path works (CuPy, the CUDA runtime, the driver,
NVRTC, the CUDA wheels installed) and the GPUs (NVML when present); compiles every kernel family of
:data:`gpuops.kernels.NAME_EXPRESSIONS` and runs each kernel-backed override against the generic op
on random and edge inputs (on the CPU: one op per native CPU kernel against its NumPy code); runs a
model (``light:resnet50`` by default) node by node and as a CUDA graph and compares both with the
cpu path, reporting host syncs per run and the graph-capture status. :func:`run` returns the report (a JSON-able dict); its ``"ok"`` is False on any mismatch or
error, and ``gpuops selftest`` then exits with 1.

The kernel cases' oracle is the generic op, the one every override must match; their edge inputs
are shared with the kernel tests (``tests/kernels``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import __version__, kernels
from . import device as _device
from .device import Device, get_device, to_host
from .errors import GpuopsError

DEFAULT_MODEL = "light:resnet50"
QUICK_MODEL = "light:squeezenet"
# kernel families: the kernel file each one compiles, in NAME_EXPRESSIONS order
FAMILIES = {f.removesuffix(".cu"): f for f in kernels.NAME_EXPRESSIONS}
# installed distributions worth reporting (name prefixes), as collect_env lists pip packages
PACKAGES = ("cupy", "cuda-", "nvidia-cuda-", "nvidia-cublas", "nvidia-ml-py", "onnx", "numpy", "array-api-compat",
            "ml-dtypes", "ml_dtypes")


# -- inputs --------------------------------------------------------------------------------------

def ints(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Uniform integers over the whole range of ``dtype``."""
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def quantize_input(rng: np.random.Generator, shape=(3, 5, 7)) -> np.ndarray:
    """float32 values for quantization, starting with ties (round half to even) and saturating values."""
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    x.flat[:8] = [0.5, 1.5, 2.5, -0.5, -2.5, 1e9, -1e9, 0.0]
    return x


# RoiAlign edge cases: inside; partly and wholly outside the image; zero area, zero width; reversed corners
ROIS = np.array([[0, 0, 5, 5], [1.3, 2.2, 9.7, 8.1], [-4, -3, 20, 15], [11, 9, 14, 13], [-9, -9, -3, -2],
                 [3, 3, 3, 3], [2, 5, 2, 9], [5, 6, 2, 1]], np.float32)
ROI_BATCH = np.array([0, 1, 1, 0, 1, 0, 1, 0], np.int64)


def nms_boxes(rng: np.random.Generator, B: int, N: int, center_point_box: int) -> np.ndarray:
    """[B, N, 4] boxes; corner boxes come with their corners in any diagonal order."""
    boxes = rng.uniform(0, 10, (B, N, 4)).astype(np.float32)
    if center_point_box:
        boxes[..., 2:] = rng.uniform(0.5, 4, (B, N, 2))
    else:
        flip = rng.random((B, N)) < 0.5
        boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes


def _nms_inputs(rng, center_point_box=0, B=2, C=3, N=150):
    boxes = nms_boxes(rng, B, N, center_point_box)
    boxes[0, 7] = boxes[0, 3]  # a duplicate box: IoU exactly 1
    scores = (rng.integers(0, 20, (B, C, N)) / 20).astype(np.float32)  # many tied scores
    return [boxes, scores, np.array([10], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]


# -- kernel cases --------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelCase:
    """One kernel-backed override run against the generic op: ``op_type`` at ``opset`` on
    ``inputs(rng)`` with ``attrs``. Inputs at ``host`` positions stay NumPy arrays (the op's
    ``host_inputs``); ``rtol`` is relative to the largest magnitude of the generic op's output
    (0: bit-exact)."""

    name: str
    family: str
    op_type: str
    opset: int
    inputs: Callable[[np.random.Generator], list]
    attrs: dict = field(default_factory=dict)
    domain: str = ""
    host: tuple[int, ...] = ()
    rtol: float = 1e-5


def _floats(*shapes, dtype=np.float32):
    return lambda rng: [rng.standard_normal(s).astype(dtype) for s in shapes]


KERNEL_CASES: list[KernelCase] = [
    KernelCase("conv2d-strided-dilated-bias", "conv", "Conv", 11, _floats((2, 4, 9, 11), (6, 4, 3, 3), (6,)),
               dict(pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2])),
    KernelCase("conv2d-grouped-negative-pads", "conv", "Conv", 11, _floats((2, 4, 9, 11), (6, 2, 3, 3)),
               dict(group=2, pads=[-1, 2, 3, -2])),
    KernelCase("conv1d-depthwise-float16", "conv", "Conv", 11,
               _floats((2, 4, 13), (8, 1, 3), (8,), dtype=np.float16), dict(group=4, strides=[2], pads=[2, 1]),
               rtol=1e-2),
    KernelCase("conv2d-depthwise", "conv", "Conv", 11, _floats((1, 5, 7, 13), (5, 1, 3, 3), (5,)),
               dict(group=5, pads=[1, 1, 1, 1])),
    KernelCase("conv3d-empty-batch", "conv", "Conv", 11, _floats((0, 2, 4, 5, 6), (3, 2, 2, 2, 2)), {}),
    KernelCase("conv-transpose-output-padding", "conv", "ConvTranspose", 11,
               _floats((2, 4, 5, 6), (4, 3, 3, 3), (3,)), dict(strides=[2, 2], pads=[1, 0, 0, 1],
                                                                output_padding=[1, 0])),
    KernelCase("fused-conv-residual-leakyrelu", "conv", "FusedConv", 1,
               _floats((2, 3, 6, 7), (4, 3, 3, 3), (4,), (2, 4, 4, 5)),
               dict(activation="LeakyRelu", activation_params=[0.2]), domain="com.microsoft"),
    KernelCase("conv-integer-zero-points", "conv", "ConvInteger", 10,
               lambda rng: [ints(rng, (2, 4, 9, 11), np.uint8), ints(rng, (6, 4, 3, 3), np.int8),
                            ints(rng, (), np.uint8), ints(rng, (6,), np.int8)],
               dict(pads=[1, 2, 0, 1], strides=[2, 1]), rtol=0),
    KernelCase("quantize-int8-per-axis", "quantize", "QuantizeLinear", 21,
               lambda rng: [quantize_input(rng), rng.uniform(0.1, 2, 5).astype(np.float32),
                            ints(rng, (5,), np.int8)], dict(axis=1), rtol=0),
    KernelCase("quantize-uint16-blocked-float16", "quantize", "QuantizeLinear", 21,
               lambda rng: [quantize_input(rng).astype(np.float16), rng.uniform(0.1, 2, (3, 2, 7)).astype(np.float16),
                            ints(rng, (3, 2, 7), np.uint16)], dict(axis=1, block_size=3), rtol=0),
    KernelCase("quantize-uint8-no-zero-point", "quantize", "QuantizeLinear", 13,
               lambda rng: [quantize_input(rng, (4, 33)), np.array(0.3, np.float32)], rtol=0),
    KernelCase("dequantize-int8-per-axis", "quantize", "DequantizeLinear", 21,
               lambda rng: [ints(rng, (3, 5, 7), np.int8), rng.uniform(0.1, 2, 5).astype(np.float32),
                            ints(rng, (5,), np.int8)], dict(axis=1), rtol=0),
    KernelCase("dynamic-quantize", "quantize", "DynamicQuantizeLinear", 11,
               lambda rng: [(rng.standard_normal(12345) * 9).astype(np.float32)], rtol=0),
    KernelCase("dynamic-quantize-all-zero", "quantize", "DynamicQuantizeLinear", 11,
               lambda rng: [np.zeros((5, 3), np.float32)], rtol=0),
    KernelCase("matmul-integer-odd-tiles", "quantize", "MatMulInteger", 10,
               lambda rng: [ints(rng, (37, 29), np.uint8), ints(rng, (29, 23), np.int8), ints(rng, (37,), np.uint8),
                            ints(rng, (23,), np.int8)], rtol=0),
    KernelCase("qlinear-matmul", "quantize", "QLinearMatMul", 10,
               lambda rng: [ints(rng, (2, 19, 21), np.uint8), np.array(0.05, np.float32), ints(rng, (), np.uint8),
                            ints(rng, (21, 17), np.int8), np.array(0.02, np.float32), ints(rng, (), np.int8),
                            np.array(0.5, np.float32), ints(rng, (), np.int8)], rtol=0),
    KernelCase("roi-align-avg-edge-rois", "roi_align", "RoiAlign", 16,
               lambda rng: [rng.standard_normal((2, 3, 10, 13)).astype(np.float32), ROIS, ROI_BATCH],
               dict(output_height=3, output_width=5, sampling_ratio=0, spatial_scale=0.8)),
    KernelCase("roi-align-max-output-half-pixel", "roi_align", "RoiAlign", 16,
               lambda rng: [rng.standard_normal((2, 3, 10, 13)).astype(np.float32), ROIS, ROI_BATCH],
               dict(mode="max", coordinate_transformation_mode="output_half_pixel", output_height=2,
                    output_width=3, sampling_ratio=2)),
    KernelCase("roi-align-float16", "roi_align", "RoiAlign", 16,
               lambda rng: [rng.standard_normal((2, 3, 8, 8)).astype(np.float16), ROIS.astype(np.float16),
                            ROI_BATCH], dict(output_height=2, output_width=2), rtol=1e-2),
    KernelCase("nms-ties-duplicates", "nms", "NonMaxSuppression", 11, _nms_inputs, host=(2, 3, 4), rtol=0),
    KernelCase("nms-center-point-box", "nms", "NonMaxSuppression", 11, lambda rng: _nms_inputs(rng, 1),
               dict(center_point_box=1), host=(2, 3, 4), rtol=0),
    KernelCase("nms-no-boxes", "nms", "NonMaxSuppression", 11,
               lambda rng: [np.zeros((1, 0, 4), np.float32), np.zeros((1, 2, 0), np.float32),
                            np.array([5], np.int64), np.array([0.5], np.float32)], host=(2, 3), rtol=0),
]


@contextlib.contextmanager
def recording_launches():
    """Record the kernel files whose functions are fetched (each launch fetches its function), so a
    case can tell a kernel run from a fallback to the generic op."""
    seen: set[str] = set()
    original = kernels.get_function

    def get_function(file, name_expression, *args, **kwargs):
        seen.add(file)
        return original(file, name_expression, *args, **kwargs)

    kernels.get_function = get_function
    try:
        yield seen
    finally:
        kernels.get_function = original


def compare(got: list, want: list, rtol: float, atol: float = 0.0) -> tuple[bool, float, str]:
    """(ok, max |got - want|, what differs): dtypes and shapes must match; values bit-exactly when
    ``rtol`` and ``atol`` are 0, else within ``atol + rtol * max |want|``."""
    worst = 0.0
    if len(got) != len(want):
        return False, float("inf"), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(to_host(g)), np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            return False, float("inf"), f"output {i}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if not g.size:
            continue
        if g.dtype.kind not in "fiub":
            g, w = g.view(np.uint8), w.view(np.uint8)  # float8 / int4 ...: compare the bytes
        g64, w64 = np.atleast_1d(g.astype(np.float64)), np.atleast_1d(w.astype(np.float64))
        if np.any(np.isnan(g64) != np.isnan(w64)):
            return False, float("nan"), f"output {i}: NaN where the reference has none, or the reverse"
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(g64 - w64)
        diff[(g64 == w64) | np.isnan(w64)] = 0.0  # equal infinities; NaN where NaN is expected
        worst = max(worst, float(diff.max()))
        scale = float(np.max(np.abs(np.nan_to_num(w64, nan=0.0, posinf=0.0, neginf=0.0))))
        if worst > atol + rtol * scale:
            return False, worst, f"output {i}: max |diff| {worst:.3g} > {atol + rtol * scale:.3g}"
    return True, worst, ""


def run_kernel_case(case: KernelCase, dev: Device, seed: int = 0) -> dict:
    """Run one case on ``dev``; the record says whether the override matched the generic op and ran
    a kernel of its family."""
    import array_api_compat.numpy as npx

    from . import ops as _ops  # noqa: F401  (the generic ops)
    from . import registry
    from .ops import cuda as _cuda_ops  # noqa: F401  (the overrides)

    rec = {"name": case.name, "op": case.op_type, "opset": case.opset}
    override = registry.resolve(case.domain, case.op_type, case.opset, device="cuda")
    generic = registry.resolve(case.domain, case.op_type, case.opset, device="cpu")
    with np.errstate(all="ignore"):  # saturating edge inputs (1e9 is inf in float16)
        inputs = case.inputs(np.random.default_rng(seed))
        want = generic.fn(npx, *inputs, **case.attrs)
    args = [a if i in case.host else dev.asarray(a) for i, a in enumerate(inputs)]
    with recording_launches() as launched:
        got = override.fn(dev.xp, *args, **case.attrs)
    got, want = (list(v) if isinstance(v, tuple) else [v] for v in (got, want))
    ok, diff, why = compare(got, want, case.rtol)
    file = FAMILIES[case.family]
    if override.device != "cuda":
        ok, why = False, f"{case.op_type} has no CUDA override at opset {case.opset}"
    elif file not in launched:
        empty = all(np.size(w) == 0 for w in want)  # nothing to compute: no launch is right
        if not empty:
            ok, why = False, f"no {file} kernel ran (the override fell back to the generic op)"
    rec.update(ok=ok, max_abs_diff=diff, kernels=sorted(launched))
    if why:
        rec["error"] = why
    return rec


# -- native CPU kernels (cpu_kernels/*.c) ---------------------------------------------------------


def _native_cases(rng) -> list[tuple[str, str, Callable]]:
    """(name, C file, a call of the op whose CPU path runs that file's kernel)."""
    import array_api_compat.numpy as npx

    from .ops import conv, elementwise, pool, quantize, rnn, softmax
    from .ops.contrib import transformer

    x = rng.standard_normal((2, 32, 15, 13)).astype(np.float32)
    w3 = (rng.standard_normal((16, 32, 3, 3)) / 17).astype(np.float32)
    dw = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    w1, b1 = (rng.standard_normal((64, 32, 1, 1)) / 6).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    seq = rng.standard_normal((5, 1, 8)).astype(np.float32)
    W, R = (rng.standard_normal((2, 64, n)).astype(np.float32) / 4 for n in (8, 16))
    a8, w8 = ints(rng, (1, 256), np.uint8), ints(rng, (256, 256), np.uint8)  # a kept weight: packed
    w8.flags.writeable = False
    s, z = np.array(0.05, np.float32), np.array(128, np.uint8)
    return [
        ("depthwise conv", "conv.c", lambda: conv.Conv(npx, x, dw, group=32, pads=[1, 1, 1, 1], strides=[2, 1])),
        ("im2col conv", "conv.c", lambda: conv.Conv(npx, x, w3, b, strides=[2, 2])),
        ("fused conv + relu", "conv.c", lambda: transformer.FusedConv(npx, x[:, :16], w3[:, :16, :1, :1], b,
                                                                       activation="Relu")),
        ("winograd conv", "winograd.c", lambda: conv.Conv(npx, x, w3, b, pads=[1, 1, 1, 1])),
        ("fused conv + residual", "conv.c", lambda: transformer.FusedConv(npx, x[:, :16], w3[:, :16, :1, :1], b,
                                                                           x[:, 16:], activation="Relu")),
        ("direct conv", "direct_conv.c", lambda: conv.Conv(npx, x[:, :3], w3[:, :3], b, pads=[1, 1, 1, 1])),
        ("conv gemm", "gemm.c", lambda: conv.Conv(npx, x, w1, b1)),
        ("max pool", "pool.c", lambda: pool.MaxPool(npx, x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("max pool, wide rows", "pool.c", lambda: pool.MaxPool(npx, x.reshape(2, 4, 15, 104), kernel_shape=[3, 3])),
        ("erf", "special.c", lambda: elementwise.Erf(npx, x)),
        ("global average pool", "rows.c", lambda: pool.GlobalAveragePool(npx, x)),
        ("softmax", "rows.c", lambda: softmax.Softmax(npx, x, axis=-1)),
        ("average pool", "pool.c", lambda: pool.AveragePool(npx, x, kernel_shape=[3, 2], pads=[1, 0, 1, 1])),
        ("lstm", "rnn.c", lambda: rnn.LSTM(npx, seq, W, R, hidden_size=16, direction="bidirectional")),
        ("qlinear matmul", "quantize.c", lambda: quantize.QLinearMatMul(npx, a8, s, z, w8, s, z, s, z)),
    ]


def native_checks(seed: int = 0) -> list[dict]:
    """Each native CPU kernel file compiled, and one op per kernel run natively against its NumPy code
    (the oracle): ``[{"name", "file", "ok", "max_abs_diff", "error"?}]``; empty when native kernels are
    off or no compiler is installed."""
    from . import native

    if not native.enabled() or native.compiler() is None:
        return []
    out = []
    for name, file, call in _native_cases(np.random.default_rng(seed)):
        rec = {"name": name, "file": file}
        calls: list[str] = []
        original = native.call

        def recording(fn, *args):
            calls.append(fn.__name__)
            return original(fn, *args)

        def check():
            native.call = recording
            try:
                got = call()
            finally:
                native.call = original
            with native.disabled():
                want = call()
            got, want = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (got, want))
            ok, diff, why = compare(got, want, rtol=1e-5, atol=1e-5)
            if not calls:
                ok, why = False, f"no {file} kernel ran (unavailable: {native.status()['files'].get(file)})"
            rec.update(ok=ok, max_abs_diff=diff, **({"error": why} if why else {}))

        _guarded(rec, check)
        out.append(rec)
    return out


def compile_family(family: str, dev: Device) -> dict:
    """Compile one kernel file with all its instantiations on ``dev``; fetches every function."""
    file = FAMILIES[family]
    names = kernels.NAME_EXPRESSIONS[file]
    start = time.perf_counter()
    for name in names:
        kernels.get_function(file, name, dev.lib, dev.index)
    return {"file": file, "instantiations": len(names), "compile_s": round(time.perf_counter() - start, 3)}


def cupy_check(dev: Device) -> dict:
    """CuPy's own kernels (elementwise, reduction, cuBLAS matmul), which need NVRTC and the CUDA
    headers just like ours, against NumPy."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 32)).astype(np.float32)
    x, y = dev.asarray(a), dev.asarray(b)
    got = [dev.xp.exp(x) * 2 + 1, dev.xp.sum(x, axis=0), dev.xp.matmul(x, y)]
    want = [np.exp(a) * 2 + 1, np.sum(a, axis=0), a @ b]
    ok, diff, why = compare(got, want, 1e-5)
    return {"name": "cupy-elementwise-reduction-matmul", "ok": ok, "max_abs_diff": diff, **({"error": why} if why else {})}


def kernel_checks(dev: Device, families=None, seed: int = 0) -> list[dict]:
    """One record per kernel family, after one for CuPy's own kernels: compilation and cases."""
    cupy = {"family": "cupy", "cases": []}
    _guarded(cupy, lambda: cupy["cases"].append(cupy_check(dev)))
    out = [cupy]
    for family in families or FAMILIES:
        rec = {"family": family, "cases": []}
        if _guarded(rec, lambda: rec.update(compile_family(family, dev))):
            for case in (c for c in KERNEL_CASES if c.family == family):
                item = {"name": case.name}
                _guarded(item, lambda: item.update(run_kernel_case(case, dev, seed)))
                rec["cases"].append(item)
        out.append(rec)
    for rec in out:
        rec["ok"] = "error" not in rec and all(c.get("ok") for c in rec["cases"])
    return out


def _guarded(rec: dict, fn) -> bool:
    """Run ``fn``; an exception becomes ``rec["error"]`` (and ``ok`` False) instead of ending the selftest."""
    try:
        fn()
        return True
    except Exception as e:
        rec.update(ok=False, error=f"{type(e).__name__}: {e}".strip()[:2000],
                   where=traceback.format_exc(limit=-3).strip().splitlines()[-3:])
        return False


# -- models --------------------------------------------------------------------------------------

def model_inputs(spec: str, path: str, inputs, seed: int = 0) -> tuple[dict, list | None]:
    """(feeds, expected outputs or None) for the model ``spec`` at ``path`` with graph ``inputs``
    (:class:`NodeArg`). A ``light:NAME`` model gets the input onnx's backend test runner gives it
    (``arange(n) / n``) and its stored expected outputs; any other model random feeds of its declared
    shapes (batch 1)."""
    import onnx
    from onnx import numpy_helper

    from .cli import _random_feed

    if not spec.startswith("light:"):
        rng = np.random.default_rng(seed)
        return {a.name: _random_feed(a, rng, 1) for a in inputs}, None
    feeds = {}
    for a in inputs:
        n = int(np.prod(a.shape))
        feeds[a.name] = (np.arange(n, dtype=np.float32).reshape(a.shape) / n).astype(np.float32)
    prefix = path[: -len(".onnx")]
    n_out = len(onnx.load(path, load_external_data=False).graph.output)
    return feeds, [numpy_helper.to_array(onnx.load_tensor(f"{prefix}_output_{i}.pb")) for i in range(n_out)]


def with_inner_outputs(path: str):
    """The model at ``path`` with, as extra graph outputs, the data input of each node that makes a
    graph output (a classifier's logits before its Softmax). The light models' weights are constant,
    so their softmax outputs are uniform whatever the convolutions compute; the logits are not."""
    import onnx

    model = onnx.load(path)
    outputs = {o.name for o in model.graph.output}
    hidden = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | outputs
    for node in model.graph.node:
        if outputs.intersection(node.output) and node.input and node.input[0] not in hidden:
            model.graph.output.append(onnx.ValueInfoProto(name=node.input[0]))
            hidden.add(node.input[0])
    return model


def _second_feeds(feeds: dict) -> dict:
    """Different values of the same shapes (a graph replay must not read the previous feed)."""
    return {k: (v[::-1].copy() if v.ndim else v) if v.dtype.kind != "f" else (v * -0.5 + 0.25).astype(v.dtype)
            for k, v in feeds.items()}


def model_check(spec: str, dev: Device, rtol: float = 1e-3, atol: float = 1e-4) -> dict:
    """``spec`` on the cpu path (against onnx's stored outputs for a light model), and on a CUDA
    ``dev`` node by node (with the host syncs of the run) and as a CUDA graph (capture, then a replay
    on different feeds), each against the cpu path."""
    from .cli import resolve_model_path
    from .onnx import InferenceSession

    rec: dict = {"model": spec, "runs": []}
    path = resolve_model_path(spec)
    model = with_inner_outputs(path)
    cpu_sess = InferenceSession(model, device="cpu")
    feeds, expected = model_inputs(spec, path, cpu_sess.get_inputs())
    feeds2 = _second_feeds(feeds)
    cpu = cpu_sess.run(None, feeds)
    cpu2 = cpu_sess.run(None, feeds2)
    rec["outputs"] = [o.name for o in cpu_sess.get_outputs()]

    def record(name: str, got, want, against: str, **extra) -> dict:
        ok, diff, why = compare(got, want, rtol, atol)
        run = {"name": name, "against": against, "ok": ok, "max_abs_diff": diff, **extra}
        if why:
            run["error"] = why
        rec["runs"].append(run)
        return run

    if expected is not None:
        record("cpu", cpu[:len(expected)], expected, "onnx stored outputs")
    if dev.kind == "cuda":
        def node_by_node():
            sess = InferenceSession(model, device=dev)
            got = sess.run(None, feeds, profile=True)
            syncs = sess.last_profile["host_syncs"]
            record("cuda", got, cpu, "cpu", host_syncs=int(syncs["count"]), sync_nodes=list(syncs["nodes"]))
            sess.close()

        def graph():
            sess = InferenceSession(model, device=dev, cuda_graph=True)
            first = sess.run(None, feeds)  # captures
            replay = sess.run(None, feeds2)
            status = sess.cuda_graph_status()
            # a replay that read the previous feed shows only where the two feeds' outputs differ
            run = record("cuda_graph", first, cpu, "cpu", graph=status,
                         new_feeds_change_outputs=not compare(cpu, cpu2, rtol, atol)[0])
            ok, diff, why = compare(replay, cpu2, rtol, atol)
            run.update(ok=run["ok"] and ok, max_abs_diff=max(run["max_abs_diff"], diff))
            if why:
                run["error"] = "; ".join(filter(None, [run.get("error"), f"replay on new feeds: {why}"]))
            sess.close()

        for name, fn in (("cuda", node_by_node), ("cuda_graph", graph)):
            item = {"name": name}
            if not _guarded(item, fn):
                rec["runs"].append(item)
    elif expected is None:  # cpu only, and no stored outputs: onnx's reference evaluator
        from onnx.reference import ReferenceEvaluator

        record("cpu", cpu, ReferenceEvaluator(model).run(None, feeds), "onnx reference evaluator")
    rec["ok"] = bool(rec["runs"]) and all(r.get("ok") for r in rec["runs"])
    return rec


# -- environment ---------------------------------------------------------------------------------

def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _query(fn):
    try:
        return fn()
    except Exception as e:
        return f"unavailable ({type(e).__name__}: {e})"[:300]


def _nvrtc(lib):
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError:
        nvrtc = lib.cuda.nvrtc
    return nvrtc


def environment(dev: Device | None) -> dict:
    """Versions and devices, CuPy's view of CUDA included (each item says why when unavailable)."""
    env = {"gpuops": __version__, "python": platform.python_version(), "platform": platform.platform(),
           "numpy": np.__version__, "standin": _device.uses_standin(), "device": str(dev) if dev else None}
    env["packages"] = sorted({f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                              if (d.metadata["Name"] or "").lower().startswith(PACKAGES)})
    lib = _device._cupy()
    if lib is None:
        env["cupy"] = "not importable (pip install 'gpuops[cuda]')"
    elif _device.uses_standin():
        env["cupy"] = "CPU stand-in (GPUOPS_CUDA_STANDIN=1); kernels run on the CPU emulator (g++)"
    else:
        env["cupy"] = lib.__version__
        rt = lib.cuda.runtime
        env["cuda_runtime"] = _query(lambda: _cuda_version(rt.runtimeGetVersion()))
        env["cuda_driver"] = _query(lambda: _cuda_version(rt.driverGetVersion()))
        env["nvrtc"] = _query(lambda: ".".join(map(str, _nvrtc(lib).getVersion())))
        env["cuda_path"] = _query(lambda: lib.cuda.get_cuda_path())
    gpus = []
    for d in _query(_device.devices) if lib is not None else []:
        if isinstance(d, dict) and d.get("kind") == "cuda":
            if not _device.uses_standin():
                idx = int(d["name"].partition(":")[2])
                d["compute_capability"] = _query(lambda: lib.cuda.Device(idx).compute_capability)
            gpus.append(d)
    env["gpus"] = gpus
    return env


# -- the whole check -----------------------------------------------------------------------------

def run(device: str = "auto", model: str | None = DEFAULT_MODEL, rtol: float = 1e-3, atol: float = 1e-4,
        strict: bool = False) -> dict:
    """The selftest report. ``model=None`` skips the model check. With ``strict``, host syncs in a
    run or a model that does not capture as a CUDA graph also count as failures."""
    report: dict = {"ok": False, "failures": [], "notes": []}
    dev = None
    try:
        dev = get_device(device)
    except GpuopsError as e:
        report["failures"].append(f"device {device!r}: {e}")
    report["environment"] = environment(dev)
    if dev is None:
        return report
    start = time.perf_counter()
    if dev.kind == "cuda":
        report["kernels"] = kernel_checks(dev)
        for fam in report["kernels"]:
            if "error" in fam:
                report["failures"].append(f"kernels {fam['family']}: {fam['error']}")
            for c in fam["cases"]:
                if not c.get("ok"):
                    report["failures"].append(f"kernel case {c['name']}: {c.get('error', 'mismatch')}")
    else:
        report["notes"].append("device cpu: no CUDA kernel checks (they need a CUDA device)")
        report["native"] = native_checks()
        if not report["native"]:
            report["notes"].append("native CPU kernels off or no C compiler: the NumPy code runs")
        for c in report["native"]:
            if not c.get("ok"):
                report["failures"].append(f"native kernel {c['name']}: {c.get('error', 'mismatch')}")
    if model:
        rec = {"model": model}
        _guarded(rec, lambda: rec.update(model_check(model, dev, rtol, atol)))
        report["models"] = [rec]
        if "error" in rec and "runs" not in rec:
            report["failures"].append(f"model {model}: {rec['error']}")
        for r in rec.get("runs", []):
            if not r.get("ok"):
                report["failures"].append(f"model {model} {r['name']}: {r.get('error', 'mismatch')}")
            if r.get("host_syncs"):
                msg = f"model {model} {r['name']}: {r['host_syncs']} host sync(s) per run at {r['sync_nodes']}"
                (report["failures"] if strict else report["notes"]).append(msg)
            if r.get("new_feeds_change_outputs") is False:
                report["notes"].append(f"model {model}: the second feeds give the same outputs, so a replay "
                                       "reading a stale feed would go unnoticed")
            graph = r.get("graph")
            if graph is not None and not graph.get("captured"):
                msg = (f"model {model}: not captured as a CUDA graph (node {graph.get('blocking_node')}: "
                       f"{graph.get('reason')})")
                (report["failures"] if strict else report["notes"]).append(msg)
    report["seconds"] = round(time.perf_counter() - start, 2)
    report["ok"] = not report["failures"]
    return report


def format_report(report: dict) -> str:
    """The report as text, collect_env style."""
    env = report["environment"]
    lines = [f"gpuops selftest on {env.get('device') or 'no device'}", ""]
    for key in ("gpuops", "python", "platform", "numpy", "cupy", "cuda_runtime", "cuda_driver", "nvrtc", "cuda_path"):
        if key in env:
            lines.append(f"  {key:<13} {env[key]}")
    for g in env.get("gpus", []):
        extra = ", ".join(f"{k}={v}" for k, v in g.items() if k not in ("name", "kind"))
        lines.append(f"  {g['name']:<13} {extra}")
    if env.get("packages"):
        lines.append(f"  {'packages':<13} " + " ".join(env["packages"]))
    for fam in report.get("kernels", []):
        head = f"{fam['family']}: " + (f"{fam['instantiations']} instantiations of {fam['file']} compiled in "
                                      f"{fam['compile_s']:.2f} s" if "file" in fam else "CuPy's own kernels")
        lines += ["", head] + ([f"  ERROR {fam['error']}"] if "error" in fam else [])
        for c in fam["cases"]:
            status = "ok  " if c.get("ok") else "FAIL"
            diff = f"max |diff| {c['max_abs_diff']:.3g}" if "max_abs_diff" in c else ""
            lines.append(f"  {status} {c['name']:<36} {diff}  {c.get('error', '')}".rstrip())
    if report.get("native"):
        lines += ["", "native CPU kernels (cpu_kernels/*.c) against the NumPy code"]
        for c in report["native"]:
            status = "ok  " if c.get("ok") else "FAIL"
            diff = f"max |diff| {c['max_abs_diff']:.3g}" if "max_abs_diff" in c else ""
            lines.append(f"  {status} {c['name'] + ' (' + c['file'] + ')':<36} {diff}  {c.get('error', '')}".rstrip())
    for m in report.get("models", []):
        lines += ["", f"model {m['model']}"] + ([f"  ERROR {m['error']}"] if "error" in m and "runs" not in m else [])
        for r in m.get("runs", []):
            status = "ok  " if r.get("ok") else "FAIL"
            parts = [f"vs {r['against']} max |diff| {r['max_abs_diff']:.3g}" if "max_abs_diff" in r else ""]
            if "host_syncs" in r:
                parts.append(f"host syncs per run {r['host_syncs']}" + (f" {r['sync_nodes']}" if r["sync_nodes"] else ""))
            if "graph" in r:
                g = r["graph"]
                parts.append("graph captured" if g.get("captured") else
                             f"graph not captured (node {g.get('blocking_node')}: {g.get('reason')})")
            lines.append(f"  {status} {r['name']:<11} " + "; ".join(p for p in parts if p) +
                         (f"  {r['error']}" if "error" in r else ""))
    lines.append("")
    lines += [f"note: {n}" for n in report["notes"]]
    lines += [f"FAILED: {f}" for f in report["failures"]]
    lines.append("selftest passed" if report["ok"] else f"selftest FAILED ({len(report['failures'])} problem(s))")
    return "\n".join(lines)
