"""``gpuops selftest``: check an installation, as ``torch.utils.collect_env`` plus a smoke test.

It reports the versions that decide whether the CUDA path works (CuPy, the CUDA runtime, the driver,
NVRTC, the CUDA wheels installed) and the GPUs (NVML when present); compiles every kernel family of
:data:`gpuops.kernels.NAME_EXPRESSIONS` and runs each kernel-backed override against the generic op
on random and edge inputs (on the CPU: one op per native CPU kernel against its NumPy code); runs a
model (``light:resnet50`` by default) on the cpu against onnx's reference evaluator, and node by node
and as a CUDA graph against the cpu path, reporting host syncs per run and the graph-capture status.
:func:`run` returns the report (a JSON-able dict); its ``"ok"`` is False on any mismatch, error or
missing runtime dependency, and ``gpuops selftest`` then exits with 1.

A model's outputs, and the logits before a final Softmax, are compared by relative error
(``max |diff| / max |value|``) within a float32 error bound derived from the model
(:func:`error_bounds`: ``|err| <= gamma_K sum |a_i b_i|``, ``gamma_K ~ K u``, for each dot product of K
terms, summed along the network); a Softmax output is held to what its logits' difference allows
(:func:`compare_outputs`): the light models' constant weights make their logits equal and huge, so
their softmax flips between uniform and one-hot at the logits' last bit.

The kernel cases' oracle is the generic op, the one every override must match; their edge inputs
are shared with the kernel tests (``tests/kernels``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
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


def compare(got: list, want: list, rtol: float, atol: float = 0.0) -> tuple[bool, float, str, float]:
    """(ok, max |got - want|, what differs, max relative difference): dtypes and shapes must match;
    values bit-exactly when ``rtol`` and ``atol`` are 0, else within ``atol + rtol * max |want|``. The
    relative difference is the absolute one over ``max |want|`` of the same output."""
    worst = worst_rel = 0.0
    if len(got) != len(want):
        return False, float("inf"), f"{len(got)} outputs, expected {len(want)}", float("inf")
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(to_host(g)), np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            return (False, float("inf"), f"output {i}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}",
                    float("inf"))
        if not g.size:
            continue
        diff, scale, why = _difference(g, w)
        if why:
            return False, float("nan"), f"output {i}: {why}", float("nan")
        worst = max(worst, diff)
        worst_rel = max(worst_rel, _relative(diff, scale))
        if diff > atol + rtol * scale:
            return (False, worst, f"output {i}: max |diff| {diff:.3g} (relative {_relative(diff, scale):.3g}) > "
                    f"{atol + rtol * scale:.3g}", worst_rel)
    return True, worst, "", worst_rel


def _relative(diff: float, scale: float) -> float:
    return diff / scale if scale else (0.0 if diff == 0 else float("inf"))


def _difference(g: np.ndarray, w: np.ndarray) -> tuple[float, float, str]:
    """(max |g - w|, max |w| over its finite values, why they differ in kind or ''): same shapes; NaN
    must be where the reference has NaN, equal infinities count as equal."""
    if g.dtype.kind not in "fiub":
        g, w = g.view(np.uint8), w.view(np.uint8)  # float8 / int4 ...: compare the bytes
    g64, w64 = np.atleast_1d(g.astype(np.float64)), np.atleast_1d(w.astype(np.float64))
    if np.any(np.isnan(g64) != np.isnan(w64)):
        return float("nan"), 0.0, "NaN where the reference has none, or the reverse"
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g64 - w64)
    diff[(g64 == w64) | np.isnan(w64)] = 0.0  # equal infinities; NaN where NaN is expected
    scale = float(np.max(np.abs(np.nan_to_num(w64, nan=0.0, posinf=0.0, neginf=0.0))))
    return float(diff.max()), scale, ""


def run_kernel_case(case: KernelCase, dev: Device, seed: int = 0) -> dict:
    """Run one case on ``dev``; the record says whether the override matched the generic op and ran
    a kernel of its family."""
    import array_api_compat.numpy as npx

    from . import ops as _ops  # noqa: F401  (the generic ops)
    from . import registry
    from .ops import cuda as _cuda_ops  # noqa: F401  (the overrides)

    rec = {"name": case.name, "op": case.op_type, "opset": case.opset}
    override = registry.resolve(case.domain, case.op_type, case.opset, device="cuda")
    generic = registry.resolve(case.domain, case.op_type, case.opset, device=None)
    with np.errstate(all="ignore"):  # saturating edge inputs (1e9 is inf in float16)
        inputs = case.inputs(np.random.default_rng(seed))
        want = generic.fn(npx, *inputs, **case.attrs)
    args = [a if i in case.host else dev.asarray(a) for i, a in enumerate(inputs)]
    with recording_launches() as launched:
        got = override.fn(dev.xp, *args, **case.attrs)
    got, want = (list(v) if isinstance(v, tuple) else [v] for v in (got, want))
    ok, diff, why, rel = compare(got, want, case.rtol)
    file = FAMILIES[case.family]
    if override.device != "cuda":
        ok, why = False, f"{case.op_type} has no CUDA override at opset {case.opset}"
    elif file not in launched:
        empty = all(np.size(w) == 0 for w in want)  # nothing to compute: no launch is right
        if not empty:
            ok, why = False, f"no {file} kernel ran (the override fell back to the generic op)"
    rec.update(ok=ok, max_abs_diff=diff, max_rel_diff=rel, kernels=sorted(launched))
    if why:
        rec["error"] = why
    return rec


# -- native CPU kernels (cpu_kernels/*.c) ---------------------------------------------------------


def _cpu_op(op_type: str, *inputs, domain: str = "", const=(), **attrs):
    """A call of ``op_type``'s implementation on the cpu device (its ``device="cpu"`` override, else the
    generic op) as a session makes it: the ``prepare`` hook run once on the inputs at positions
    ``const`` (a session's initializers), its result passed as ``prepared=``."""
    import array_api_compat.numpy as npx

    from . import ops  # noqa: F401  (registers every op family)
    from .registry import resolve

    impl = resolve(domain, op_type, 10 ** 6, device="cpu")
    kw = dict(attrs)
    if impl.prepare is not None:
        prepared = impl.prepare({i: inputs[i] for i in const}, dict(attrs))
        if prepared is not None:
            kw["prepared"] = prepared
    return lambda: impl.fn(npx, *inputs, **kw)


def _native_cases(rng) -> list[tuple[str, str, Callable]]:
    """(name, C file, a call of the op whose CPU path runs that file's kernel)."""
    x = rng.standard_normal((2, 32, 15, 13)).astype(np.float32)
    w3 = (rng.standard_normal((16, 32, 3, 3)) / 17).astype(np.float32)
    dw = rng.standard_normal((32, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    w1, b1 = (rng.standard_normal((64, 32, 1, 1)) / 6).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    seq = rng.standard_normal((5, 1, 8)).astype(np.float32)
    W, R = (rng.standard_normal((2, 64, n)).astype(np.float32) / 4 for n in (8, 16))
    a8, w8 = ints(rng, (1, 256), np.uint8), ints(rng, (256, 256), np.uint8)  # a constant weight: prepared
    w8.flags.writeable = False
    s, z = np.array(0.05, np.float32), np.array(128, np.uint8)
    ms = "com.microsoft"
    return [
        ("depthwise conv", "conv.c", _cpu_op("Conv", x, dw, const=(1,), group=32, pads=[1, 1, 1, 1], strides=[2, 1])),
        ("im2col conv", "conv.c", _cpu_op("Conv", x, w3, b, const=(1, 2), strides=[2, 2])),
        ("fused conv + relu", "conv.c", _cpu_op("FusedConv", x[:, :16], w3[:, :16, :1, :1], b, domain=ms,
                                                const=(1, 2), activation="Relu")),
        ("winograd conv", "winograd.c", _cpu_op("Conv", x, w3, b, const=(1, 2), pads=[1, 1, 1, 1])),
        ("fused conv + residual", "conv.c", _cpu_op("FusedConv", x[:, :16], w3[:, :16, :1, :1], b, x[:, 16:],
                                                    domain=ms, const=(1, 2), activation="Relu")),
        ("direct conv", "direct_conv.c", _cpu_op("Conv", x[:, :3], w3[:, :3], b, const=(1, 2), pads=[1, 1, 1, 1])),
        ("conv gemm", "gemm.c", _cpu_op("Conv", x, w1, b1, const=(1, 2))),
        ("max pool", "pool.c", _cpu_op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        ("max pool, wide rows", "pool.c", _cpu_op("MaxPool", x.reshape(2, 4, 15, 104), kernel_shape=[3, 3])),
        ("erf", "special.c", _cpu_op("Erf", x)),
        ("global average pool", "rows.c", _cpu_op("GlobalAveragePool", x)),
        ("softmax", "rows.c", _cpu_op("Softmax", x, axis=-1)),
        ("average pool", "pool.c", _cpu_op("AveragePool", x, kernel_shape=[3, 2], pads=[1, 0, 1, 1])),
        ("lstm", "rnn.c", _cpu_op("LSTM", seq, W, R, const=(1, 2), hidden_size=16, direction="bidirectional")),
        ("qlinear matmul", "quantize.c", _cpu_op("QLinearMatMul", a8, s, z, w8, s, z, s, z, const=(1, 2, 3, 4, 5, 6, 7))),
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
            ok, diff, why, rel = compare(got, want, rtol=1e-5, atol=1e-5)
            if not calls:
                ok, why = False, f"no {file} kernel ran (unavailable: {native.status()['files'].get(file)})"
            rec.update(ok=ok, max_abs_diff=diff, max_rel_diff=rel, **({"error": why} if why else {}))

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
    ok, diff, why, rel = compare(got, want, 1e-5)
    return {"name": "cupy-elementwise-reduction-matmul", "ok": ok, "max_abs_diff": diff, "max_rel_diff": rel,
            **({"error": why} if why else {})}


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


# -- tolerances ----------------------------------------------------------------------------------

UNIT_ROUNDOFF = 2.0 ** -24  # float32's u = eps / 2 (eps = np.finfo(np.float32).eps = 2**-23)
DEFAULT_RTOL = 1e-3  # only where no bound can be derived (a shape unknown, control flow), and said so
# the element-wise roundings a node may add to its sums (a bias, a scale, BatchNormalization's five,
# an exp, a division): a node that sums K terms per output element adds gamma(K + NODE_ROUNDINGS)
NODE_ROUNDINGS = 8
# ops whose float32 result is exactly the function of their (rounded) inputs: they add no error
EXACT_OPS = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "Identity", "Dropout", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin",
    "Relu", "Pad", "Shape", "Size", "Expand", "Tile", "Clip", "Max", "Min", "Constant", "ConstantOfShape",
    "DepthToSpace", "SpaceToDepth", "Abs", "Neg", "Sign", "Floor", "Ceil", "ArgMax", "ArgMin", "Where",
    "Equal", "Greater", "Less", "Not", "And", "Or", "Range", "NonZero", "TopK"})
SOFTMAX_OPS = ("Softmax", "LogSoftmax")


def gamma(k: int) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)``: a float32 sum or dot product of ``k`` terms is off by at
    most ``gamma_k * sum |a_i b_i|`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.,
    eq. 3.5), whatever the order of summation (blocked BLAS kernels of any core type, pairwise sums,
    split-K on a GPU, with or without FMA). ``2 gamma_k ~ k eps`` bounds two such sums' difference."""
    ku = k * UNIT_ROUNDOFF
    return ku / (1 - ku) if ku < 1 else float("inf")


def _static_shapes(model) -> dict[str, list]:
    from onnx import shape_inference

    try:
        graph = shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # a model over 2 GiB, an op onnx cannot infer: what the model declares
        graph = model.graph
    shapes = {}
    for v in [*graph.value_info, *graph.input, *graph.output]:
        t = v.type.tensor_type
        if t.HasField("shape"):
            shapes[v.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    return shapes


def _terms(node, shapes: dict) -> int:
    """How many terms ``node`` sums per output element (0: none)."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def shape(i):
        s = shapes.get(node.input[i]) if len(node.input) > i and node.input[i] else None
        if s is None or None in s:
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): input {i} has no static shape")
        return s

    def given(i):
        return int(len(node.input) > i and bool(node.input[i]))

    op = node.op_type
    if op in ("Conv", "FusedConv"):  # W [M, C/group, *kernel]; a bias; FusedConv's residual
        return math.prod(shape(1)[1:]) + given(2) + given(3)
    if op == "ConvTranspose":  # W [C, M/group, *kernel]
        w = shape(1)
        return w[0] // int(attrs.get("group", 1)) * math.prod(w[2:]) + given(2)
    if op == "Gemm":
        a = shape(0)
        return (a[0] if attrs.get("transA", 0) else a[-1]) + given(2)
    if op == "MatMul":
        return shape(0)[-1]
    if op in ("GlobalAveragePool", "GlobalLpPool"):
        return math.prod(shape(0)[2:])
    if op in ("AveragePool", "LpPool"):
        return math.prod(attrs["kernel_shape"])
    if op == "LRN":
        return int(attrs["size"])
    if op in ("Sum", "Mean"):
        return len(node.input)
    if op in (*SOFTMAX_OPS, "LayerNormalization"):  # axis to the last: opset 13's one axis at most
        x = shape(0)
        return math.prod(x[int(attrs.get("axis", -1)) % len(x):])
    if op in ("InstanceNormalization", "GroupNormalization"):
        return math.prod(shape(0)[1:])
    if op.startswith("Reduce"):  # the axes attribute, else (opset 18's axes input) every axis
        x = shape(0)
        axes = attrs.get("axes") or range(len(x))
        return math.prod(x[a] for a in axes)
    return 0  # element-wise (BatchNormalization in inference: x * scale' + bias')


def error_bounds(model) -> dict[str, float]:
    """First-order bounds on the relative error of each value a float32 implementation computes for
    ``model``: ``{name: r}`` with ``|computed - exact| <= r * |exact|``.

    A node adds to the largest bound of its inputs ``gamma(K + NODE_ROUNDINGS)``, K being the number of
    terms it sums per output element (:func:`gamma`: a Conv's ``C / group * prod(kernel)``, plus one
    for a bias; Gemm's and MatMul's inner dimension; an average pool's window, a reduction's length,
    LRN's size); an element-wise op adds ``gamma(NODE_ROUNDINGS)``, an exact op (:data:`EXACT_OPS`)
    nothing. An input's relative error passes through a sum unchanged when the sum does not cancel
    (``sum |a_i b_i| = |sum a_i b_i|``), as in the onnx light models, whose weights are positive
    constants and whose input (``arange(n) / n``) and activations are non-negative; on these models
    the errors measured with OpenBLAS's Haswell and SkylakeX kernels and on the CUDA path are 70 to
    1000 times below the bound. Where sums cancel (random weights), the bound relative to the largest
    value still holds in practice but is not guaranteed; ``--rtol`` overrides it. Past an exponential
    (a Softmax) an error is no longer relative to the value (logits of 1e3 off by 1e-4 move their
    softmax by 1e-4 relative): :func:`compare_outputs` holds a Softmax output to its logits instead.

    Raises ValueError when a shape it needs is not static or the model has control flow."""
    shapes = _static_shapes(model)
    bound: dict[str, float] = {}
    for node in model.graph.node:
        if any(a.type in (5, 10) for a in node.attribute):  # GRAPH, GRAPHS: If, Loop, Scan
            raise ValueError(f"node {node.name or node.output[0]!r} ({node.op_type}): subgraphs are not analysed")
        before = max((bound.get(x, 0.0) for x in node.input if x), default=0.0)
        add = 0.0 if node.op_type in EXACT_OPS else gamma(_terms(node, shapes) + NODE_ROUNDINGS)
        for y in node.output:
            bound[y] = before + add
    return bound


def output_tolerances(model, rtol: float | None = None) -> tuple[dict[str, float], str]:
    """({graph output: tolerance on max |a - b| / max |b|}, how it was set) for comparing two float32
    implementations of ``model``: each is within ``r * |exact|`` (:func:`error_bounds`), so they differ
    by at most ``2 r max |exact|``. ``rtol`` replaces the bound."""
    names = [o.name for o in model.graph.output]
    if rtol is not None:
        return dict.fromkeys(names, rtol), "--rtol"
    try:
        bound = error_bounds(model)
    except ValueError as e:
        return dict.fromkeys(names, DEFAULT_RTOL), f"rtol {DEFAULT_RTOL:g} (no bound: {e})"
    return {n: 2 * bound.get(n, 0.0) for n in names}, "float32 error bound (gpuops.selftest.error_bounds)"


def softmax_outputs(model) -> dict[str, dict]:
    """``{output: {"op", "logits", "axes", "n"?}}`` for each graph output made by a Softmax or
    LogSoftmax node whose input is also a graph output (see :func:`with_inner_outputs`): ``axes`` the
    normalized axes (opset < 13: ``axis`` to the last; else ``axis`` alone), negative when relative to
    the end."""
    from onnx import helper

    outputs = {o.name for o in model.graph.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    specs = {}
    for node in model.graph.node:
        if node.op_type in SOFTMAX_OPS and node.output[0] in outputs and node.input[0] in outputs:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            axis = int(attrs.get("axis", -1 if opset >= 13 else 1))
            specs[node.output[0]] = {"op": node.op_type, "logits": node.input[0], "axis": axis,
                                     "coerced": opset < 13}
    return specs


def _softmax_axes(spec: dict, ndim: int) -> tuple[int, ...]:
    axis = spec["axis"] % max(ndim, 1)
    return tuple(range(axis, ndim)) if spec["coerced"] else (axis,)


def compare_outputs(names: list[str], got: list, want: list, tolerances: dict[str, float],
                    softmax: dict[str, dict] | None = None, atol: float = 0.0) -> list[dict]:
    """One record per output, ``{"name", "ok", "rel_err", "tolerance", "max_abs_diff", "error"?, "note"?}``:
    ``rel_err = max |got - want| / max |want|`` must be at most ``atol / max |want| + tolerance``.

    A Softmax output whose logits are compared too (``softmax``, :func:`softmax_outputs`) is held to
    what the logits' difference allows: logits off by at most ``d`` move each probability by a factor
    within ``exp(+-2d)``, so ``|p' - p| <= p (expm1(2d) + 2 gamma(n + NODE_ROUNDINGS))`` over a softmax
    of ``n`` terms (each side's own exp, sum and division; a LogSoftmax: ``2d`` absolute). The onnx
    light models' logits are all about equal and up to 1e31, so a last-bit difference (1e3 and more)
    turns their uniform softmax into one-hot: there the tolerance exceeds 1 (the values say nothing)
    and only the sum of each softmax row, within ``gamma`` of 1, is checked."""
    softmax = softmax or {}
    got = [np.asarray(to_host(g)) for g in got]
    want = [np.asarray(w) for w in want]
    by_name = dict(zip(names, zip(got, want)))
    records = []
    if len(got) != len(names) or len(want) != len(names):
        return [{"name": "*", "ok": False, "error": f"{len(got)} outputs, expected {len(want)}"}]
    for name, g, w in zip(names, got, want):
        rec: dict = {"name": name}
        records.append(rec)
        if g.dtype != w.dtype or g.shape != w.shape:
            rec.update(ok=False, error=f"{g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}")
            continue
        if not g.size:
            rec.update(ok=True, rel_err=0.0, tolerance=0.0, max_abs_diff=0.0)
            continue
        diff, scale, why = _difference(g, w)
        if why:
            rec.update(ok=False, error=why)
            continue
        tol = tolerances.get(name, DEFAULT_RTOL)
        spec = softmax.get(name)
        if spec is not None and spec["logits"] in by_name:
            zg, zw = by_name[spec["logits"]]
            if zg.shape == zw.shape and zg.size:
                d, _, _ = _difference(zg, zw)
                axes = _softmax_axes(spec, g.ndim)
                n = math.prod(g.shape[a] for a in axes)
                own = 2 * gamma(n + NODE_ROUNDINGS)
                if spec["op"] == "LogSoftmax":
                    tol = own + (2 * d / scale if scale else float("inf"))
                else:
                    with np.errstate(over="ignore"):
                        tol = own + float(np.expm1(2 * d))
                if spec["op"] == "Softmax" and tol >= 1:
                    row = np.abs(g.astype(np.float64).sum(axis=axes) - 1).max()
                    rec["note"] = (f"softmax of logits that differ by up to {d:.3g} (relative "
                                   f"{_relative(d, float(np.abs(zw).max())):.2g}): ill-conditioned, only its rows' "
                                   f"sums are compared (off 1 by {row:.2g})")
                    if not row <= own:
                        rec.update(ok=False, rel_err=_relative(diff, scale), tolerance=tol, max_abs_diff=diff,
                                   error=f"a softmax row sums to 1 +- {row:.3g}, more than {own:.3g}")
                        continue
        rel = _relative(diff, scale)
        rec.update(ok=bool(diff <= atol + tol * scale), rel_err=rel, tolerance=tol, max_abs_diff=diff)
        if not rec["ok"]:
            rec["error"] = f"relative error {rel:.3g} > tolerance {tol:.3g}" + (f" (+ atol {atol:g})" if atol else "")
    return records


def _worst(outputs: list[dict]) -> dict | None:
    """The compared output closest to (or furthest past) its tolerance."""
    scored = [o for o in outputs if "rel_err" in o and "note" not in o]
    return max(scored, key=lambda o: o["rel_err"] / o["tolerance"] if o["tolerance"] else
               (float("inf") if o["rel_err"] else 0.0), default=None)


# -- models --------------------------------------------------------------------------------------

def model_inputs(spec: str, inputs, seed: int = 0) -> dict:
    """Feeds for the model ``spec`` with graph ``inputs`` (:class:`NodeArg`): a ``light:NAME`` model
    gets the input onnx's backend test runner gives it (``arange(n) / n``), any other model random
    feeds of its declared shapes (batch 1)."""
    from .models import random_feed

    if not spec.startswith("light:"):
        rng = np.random.default_rng(seed)
        return {a.name: random_feed(a, rng, 1) for a in inputs}
    feeds = {}
    for a in inputs:
        n = int(np.prod(a.shape))
        feeds[a.name] = (np.arange(n, dtype=np.float32).reshape(a.shape) / n).astype(np.float32)
    return feeds


def with_inner_outputs(model):
    """``model`` (a path or an ``onnx.ModelProto``, copied) with, as extra graph outputs, the data input
    of each node that makes a graph output: a classifier's logits before its Softmax, which the
    comparisons hold to the float32 error bound (the softmax of the light models' huge, equal logits
    is not comparable; see :func:`compare_outputs`)."""
    import onnx

    model = onnx.load(model) if isinstance(model, str) else onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name for o in model.graph.output}
    hidden = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | outputs
    for node in model.graph.node:
        if outputs.intersection(node.output) and node.input and node.input[0] not in hidden:
            model.graph.output.append(onnx.ValueInfoProto(name=node.input[0]))
            hidden.add(node.input[0])
    return model


def reference_evaluator(model):
    """onnx's ReferenceEvaluator for ``model``, with two of its ops replaced by the spec's, both of
    which put the light models' logits far off (onnx 1.23 still):

    * LRN sums the squares of channels ``c`` that run over the batch size instead of the channel count
      (onnx/onnx#7805): bvlc_alexnet, zfnet512, inception_v1;
    * BatchNormalization before opset 14 computes batch statistics (training mode) whenever
      ``momentum`` is set, which its schema's default always does, though one output means
      inference: resnet50, shufflenet, inception_v2, densenet121."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class LRN(OpRun):
        op_domain = ""

        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            # square_sum[n, c] = sum of x[n, i]**2, max(0, c - floor((size-1)/2)) <= i <= min(C-1, c + ceil((size-1)/2))
            below, above = (size - 1) // 2, math.ceil((size - 1) / 2)
            square_sum = np.zeros_like(x)
            for c in range(x.shape[1]):
                square_sum[:, c] = np.sum(x[:, max(0, c - below):c + above + 1] ** 2, axis=1)
            return ((x / (bias + (alpha / size) * square_sum) ** beta).astype(x.dtype),)

    class BatchNormalization(OpRun):
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=1e-5, **attrs):
            if "training_mode" in attrs:  # opset 14
                training = bool(attrs["training_mode"])
            elif "is_test" in attrs:  # opset 6
                training = not attrs["is_test"]
            else:  # opsets 7 to 13: the optional outputs are the training mode's
                training = len(self.onnx_node.output) > 1
            if training:
                raise NotImplementedError("training-mode BatchNormalization is not checked")
            shape = (-1,) + (1,) * (x.ndim - 2)
            y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape)
            return ((y + bias.reshape(shape)).astype(x.dtype),)

    return ReferenceEvaluator(model, new_ops=[LRN, BatchNormalization])


def _second_feeds(feeds: dict) -> dict:
    """Different values of the same shapes (a graph replay must not read the previous feed)."""
    return {k: (v[::-1].copy() if v.ndim else v) if v.dtype.kind != "f" else (v * -0.5 + 0.25).astype(v.dtype)
            for k, v in feeds.items()}


def model_check(spec: str, dev: Device, rtol: float | None = None, atol: float = 0.0) -> dict:
    """``spec`` on the cpu path, against onnx's reference evaluator (a light model, or any model when
    ``dev`` is the cpu), and on a CUDA ``dev`` node by node (with the host syncs of the run) and as a
    CUDA graph (capture, then a replay on different feeds), each against the cpu path. Every graph
    output and the logits before it are compared by relative error against :func:`output_tolerances`
    (``rtol`` overrides the derived bound; ``atol`` adds an absolute slack).

    The light models' stored outputs are not used: they hold only the softmax, whose values are
    arbitrary at the last bit of their logits (:func:`compare_outputs`)."""
    from .models import resolve_model_path
    from .onnx import InferenceSession

    rec: dict = {"model": spec, "runs": []}
    model = with_inner_outputs(resolve_model_path(spec))
    tolerances, how = output_tolerances(model, rtol)
    softmax = softmax_outputs(model)
    cpu_sess = InferenceSession(model, device="cpu")
    feeds = model_inputs(spec, cpu_sess.get_inputs())
    feeds2 = _second_feeds(feeds)
    cpu = cpu_sess.run(None, feeds)
    cpu2 = cpu_sess.run(None, feeds2)
    names = [o.name for o in cpu_sess.get_outputs()]
    rec.update(outputs=names, tolerances=tolerances, tolerance_from=how)

    def check(got, want) -> tuple[bool, list[dict], str]:
        outs = compare_outputs(names, got, want, tolerances, softmax, atol)
        why = "; ".join(f"output {o['name']!r}: {o['error']}" for o in outs if not o["ok"])
        return all(o["ok"] for o in outs), outs, why

    def record(name: str, got, want, against: str, **extra) -> dict:
        ok, outs, why = check(got, want)
        run = {"name": name, "against": against, "ok": ok, "outputs": outs, **extra}
        worst = _worst(outs)
        if worst is not None:
            run.update(max_rel_err=worst["rel_err"], tolerance=worst["tolerance"], worst_output=worst["name"])
        if why:
            run["error"] = why
        rec["runs"].append(run)
        return run

    if spec.startswith("light:") or dev.kind != "cuda":  # the reference evaluator is slow on big models
        record("cpu", cpu, reference_evaluator(model).run(None, feeds), "onnx reference evaluator")
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
                         new_feeds_change_outputs=not check(cpu, cpu2)[0])
            ok, outs, why = check(replay, cpu2)
            worst = _worst(outs)
            run["ok"] = run["ok"] and ok
            if worst is not None and worst["rel_err"] > run.get("max_rel_err", -1.0):
                run.update(max_rel_err=worst["rel_err"], tolerance=worst["tolerance"],
                           worst_output=worst["name"] + " (replay)")
            if why:
                run["error"] = "; ".join(filter(None, [run.get("error"), f"replay on new feeds: {why}"]))
            sess.close()

        for name, fn in (("cuda", node_by_node), ("cuda_graph", graph)):
            item = {"name": name}
            if not _guarded(item, fn):
                rec["runs"].append(item)
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
        env["cupy"] = f"CPU stand-in ({_device.BACKEND_ENV}={_device.cuda_backend().name}); kernels run on the CPU emulator (g++)"
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

def missing_dependencies(device: str = "auto") -> list[str]:
    """A message for each runtime dependency that does not import (naming the package and the pip
    command that installs it); CuPy too for a ``cuda`` device (not for ``auto``, which falls back to
    the cpu, nor on the CPU stand-in)."""
    import importlib

    from .dependencies import RUNTIME_DEPENDENCIES, missing_dependency

    modules = list(RUNTIME_DEPENDENCIES)
    if str(device).strip().lower().startswith("cuda") and not _device.uses_standin():
        modules.append("cupy")
    out = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # ImportError, or a broken installation (a missing shared library...)
            out.append(f"{missing_dependency(module)} [{type(e).__name__}: {e}]"[:600])
    return out


def run(device: str = "auto", model: str | None = DEFAULT_MODEL, rtol: float | None = None, atol: float = 0.0,
        strict: bool = False) -> dict:
    """The selftest report. ``model=None`` skips the model check. Model outputs are compared by
    relative error against a float32 error bound derived from the model (:func:`output_tolerances`);
    ``rtol`` replaces that bound, ``atol`` adds an absolute slack. With ``strict``, host syncs in a
    run or a model that does not capture as a CUDA graph also count as failures. A runtime
    dependency that does not import is a failure (and nothing else runs)."""
    report: dict = {"ok": False, "failures": [], "notes": []}
    dev = None
    report["failures"] += missing_dependencies(device)
    if not report["failures"]:
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
        noted: set[str] = set()
        if "error" in rec and "runs" not in rec:
            report["failures"].append(f"model {model}: {rec['error']}")
        for r in rec.get("runs", []):
            if not r.get("ok"):
                report["failures"].append(f"model {model} {r['name']}: {r.get('error', 'mismatch')}")
            for o in r.get("outputs", []):
                if "note" in o and o["name"] not in noted:
                    noted.add(o["name"])
                    report["notes"].append(f"model {model} {r['name']}: output {o['name']!r} is the {o['note']}")
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


def _rel_diff(case: dict) -> str:
    """A kernel case's largest difference relative to the largest value of the reference output."""
    if "max_rel_diff" not in case:
        return ""
    return f"rel diff {case['max_rel_diff']:.2g}" + (f" (abs {case['max_abs_diff']:.2g})" if case["max_abs_diff"] else "")


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
            lines.append(f"  {status} {c['name']:<36} {_rel_diff(c)}  {c.get('error', '')}".rstrip())
    if report.get("native"):
        lines += ["", "native CPU kernels (cpu_kernels/*.c) against the NumPy code"]
        for c in report["native"]:
            status = "ok  " if c.get("ok") else "FAIL"
            lines.append(f"  {status} {c['name'] + ' (' + c['file'] + ')':<36} {_rel_diff(c)}  "
                         f"{c.get('error', '')}".rstrip())
    for m in report.get("models", []):
        how = f" (tolerances: {m['tolerance_from']}; errors relative to each output's largest value)" \
            if "tolerance_from" in m else ""
        lines += ["", f"model {m['model']}{how}"] + ([f"  ERROR {m['error']}"] if "error" in m and "runs" not in m else [])
        for r in m.get("runs", []):
            status = "ok  " if r.get("ok") else "FAIL"
            parts = [f"vs {r['against']}: max rel err {r['max_rel_err']:.2g} (tolerance {r['tolerance']:.2g}, "
                     f"output {r['worst_output']!r})" if "max_rel_err" in r else
                     (f"vs {r['against']}" if "against" in r else "")]
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
