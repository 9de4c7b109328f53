"""Tolerances derived from the arithmetic: float32 error bounds of a model's outputs
(``|err| <= gamma_K sum |a_i b_i|`` per dot product of K terms, summed along the network), and the
comparison of outputs within them, softmax outputs held to what their logits allow."""

from __future__ import annotations

import math

import numpy as np

from ..device import to_host

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


def terms(node, shapes: dict) -> int:
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
        add = 0.0 if node.op_type in EXACT_OPS else gamma(terms(node, shapes) + NODE_ROUNDINGS)
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


def softmax_axes(spec: dict, ndim: int) -> tuple[int, ...]:
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
                axes = softmax_axes(spec, g.ndim)
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


def worst(outputs: list[dict]) -> dict | None:
    """The compared output closest to (or furthest past) its tolerance."""
    scored = [o for o in outputs if "rel_err" in o and "note" not in o]
    return max(scored, key=lambda o: o["rel_err"] / o["tolerance"] if o["tolerance"] else
               (float("inf") if o["rel_err"] else 0.0), default=None)


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
