"""The selftest's kernel checks: each kernel family compiled and every kernel-backed override run
against the generic op on random and edge inputs (shared with ``tests/kernels``), CuPy's own kernels
against NumPy, and on the CPU one op per native kernel against its NumPy code."""

from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .. import kernels
from ..device import Device
from .bounds import compare

# kernel families: the kernel file each one compiles, in NAME_EXPRESSIONS order
FAMILIES = {f.removesuffix(".cu"): f for f in kernels.NAME_EXPRESSIONS}


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


def _forest(trees: int, depth: int, targets: int, prefix: str, modes=("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE")):
    """The attributes of a legacy tree ensemble (TreeEnsembleRegressor/Classifier) of complete trees
    over 4 features, seeded: random modes, thresholds, NaN tracking and (target, weight) leaves."""
    rng = np.random.default_rng(trees * 100 + depth)
    inner, n = 2 ** depth - 1, 2 ** (depth + 1) - 1
    ids = np.arange(n)
    leaf = ids >= inner
    a = {"nodes_treeids": np.repeat(np.arange(trees), n).tolist(), "nodes_nodeids": np.tile(ids, trees).tolist(),
         "nodes_featureids": np.where(np.tile(leaf, trees), 0, rng.integers(4, size=trees * n)).tolist(),
         "nodes_modes": np.where(np.tile(leaf, trees), "LEAF", rng.choice(modes, trees * n)).tolist(),
         "nodes_values": rng.normal(size=trees * n).astype(np.float32).tolist(),
         "nodes_truenodeids": np.tile(np.where(leaf, 0, 2 * ids + 1), trees).tolist(),
         "nodes_falsenodeids": np.tile(np.where(leaf, 0, 2 * ids + 2), trees).tolist(),
         "nodes_missing_value_tracks_true": rng.integers(2, size=trees * n).tolist()}
    leaves = trees * (inner + 1)
    a.update({f"{prefix}_treeids": np.repeat(np.arange(trees), inner + 1).tolist(),
              f"{prefix}_nodeids": np.tile(ids[leaf], trees).tolist(),
              f"{prefix}_ids": rng.integers(targets, size=leaves).tolist(),
              f"{prefix}_weights": rng.normal(size=leaves).astype(np.float32).tolist()})
    return a


def _tree_rows(rng, dtype=np.float32):
    x = rng.standard_normal((300, 4)).astype(dtype)
    x[::7, 1] = np.nan
    return [x]


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
    KernelCase("tree-regressor-sum-nan-tracking", "tree_ensemble", "TreeEnsembleRegressor", 3, _tree_rows,
               dict(n_targets=3, base_values=[0.5, 0.0, -1.0], **_forest(12, 5, 3, "target")), domain="ai.onnx.ml"),
    KernelCase("tree-regressor-max", "tree_ensemble", "TreeEnsembleRegressor", 3, _tree_rows,
               dict(n_targets=2, aggregate_function="MAX", **_forest(7, 4, 2, "target")), domain="ai.onnx.ml"),
    KernelCase("tree-classifier-softmax", "tree_ensemble", "TreeEnsembleClassifier", 3, _tree_rows,
               dict(classlabels_int64s=[3, 5, 7], post_transform="SOFTMAX", **_forest(9, 4, 3, "class")),
               domain="ai.onnx.ml"),
    KernelCase("tree-regressor-float64", "tree_ensemble", "TreeEnsembleRegressor", 3,
               lambda rng: _tree_rows(rng, np.float64), dict(n_targets=1, **_forest(6, 6, 1, "target")),
               domain="ai.onnx.ml"),
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


def run_kernel_case(case: KernelCase, dev: Device, seed: int = 0) -> dict:
    """Run one case on ``dev``; the record says whether the override matched the generic op and ran
    a kernel of its family."""
    import array_api_compat.numpy as npx

    from .. import ops as _ops  # noqa: F401  (the generic ops)
    from .. import registry
    from ..ops import cuda as _cuda_ops  # noqa: F401  (the overrides)

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

    from .. import ops  # noqa: F401  (registers every op family)
    from ..registry import resolve

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
        ("tree ensemble", "tree_ensemble.c", _cpu_op("TreeEnsembleRegressor", *_tree_rows(rng), domain="ai.onnx.ml",
                                                     n_targets=3, **_forest(12, 5, 3, "target"))),
    ]


def native_checks(seed: int = 0) -> list[dict]:
    """Each native CPU kernel file compiled, and one op per kernel run natively against its NumPy code
    (the oracle): ``[{"name", "file", "ok", "max_abs_diff", "error"?}]``; empty when native kernels are
    off or no compiler is installed."""
    from .. import native

    if not native.enabled() or native.compiler() is None:
        return []
    out = []
    for name, file, call in _native_cases(np.random.default_rng(seed)):
        rec = {"name": name, "file": file}
        calls: list[str] = []
        original, original_function = native.call, native.function

        def recording(fn, *args):
            calls.append(fn.__name__)
            return original(fn, *args)

        def recording_function(name):  # kernels bound once per input shape are called without native.call
            fn = original_function(name)
            if fn is None:
                return None

            def counted(*args):
                calls.append(name)
                return fn(*args)

            counted.__name__ = name
            return counted

        def check():
            native.call, native.function = recording, recording_function
            try:
                got = call()
            finally:
                native.call, native.function = original, original_function
            with native.disabled():
                want = call()
            got, want = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (got, want))
            ok, diff, why, rel = compare(got, want, rtol=1e-5, atol=1e-5)
            if not calls:
                ok, why = False, f"no {file} kernel ran (unavailable: {native.status()['files'].get(file)})"
            rec.update(ok=ok, max_abs_diff=diff, max_rel_diff=rel, **({"error": why} if why else {}))

        guarded(rec, check)
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
    guarded(cupy, lambda: cupy["cases"].append(cupy_check(dev)))
    out = [cupy]
    for family in families or FAMILIES:
        rec = {"family": family, "cases": []}
        if guarded(rec, lambda: rec.update(compile_family(family, dev))):
            for case in (c for c in KERNEL_CASES if c.family == family):
                item = {"name": case.name}
                guarded(item, lambda: item.update(run_kernel_case(case, dev, seed)))
                rec["cases"].append(item)
        out.append(rec)
    for rec in out:
        rec["ok"] = "error" not in rec and all(c.get("ok") for c in rec["cases"])
    return out


def guarded(rec: dict, fn) -> bool:
    """Run ``fn``; an exception becomes ``rec["error"]`` (and ``ok`` False) instead of ending the selftest."""
    try:
        fn()
        return True
    except Exception as e:
        rec.update(ok=False, error=f"{type(e).__name__}: {e}".strip()[:2000],
                   where=traceback.format_exc(limit=-3).strip().splitlines()[-3:])
        return False
