"""How the zoo compares a dynamically quantized model (quantize_dynamic's output) with onnxruntime.

quantize_dynamic puts a DynamicQuantizeLinear before each quantized MatMul, Conv and QAttention: at run
time it rounds a float32 activation to 8 bits, with the step ``scale = range / 255`` of that tensor
(often ~1e-2). Two implementations compute the float32 values before it to within float32 rounding but
not bit for bit (another summation order: gpuops' native kernels, OpenBLAS's kernels for the core it
runs on, onnxruntime's MLAS), so a value within that distance of a rounding tie lands one 8-bit step
away in one of them, and the step goes on through every later layer and into the next quantizers'
values. Seen on 2026-11-28 (x86-64, onnxruntime 1.32, NumPy 2.4's OpenBLAS 0.3.31): vit, quantize_dynamic,
batch 1 on the CUDA stand-in, whose float MatMuls are NumPy's. With OPENBLAS_CORETYPE=Haswell (OpenBLAS's
AVX2 kernels, as on AMD EPYC) the attention's probabilities times V come out up to 2 ulps off
onnxruntime's; one of the 272 values the next DynamicQuantizeLinear rounds is 0.92660797 in onnxruntime,
whose quotient by the scale 0.009129143 is 101.499991 (-> 101), and 0.926608 (an ulp above) in gpuops,
whose float32 quotient is the tie 101.5 itself (-> 102, half to even); that one step ends as logits
2.4e-2 apart (7.1e-3 of their magnitude). With the SkylakeX kernels no value happened to cross a tie.
A fixed tolerance on the outputs either hides real errors of that size or holds the test to one
machine's summation order, so the comparison takes the two apart:

1. **everything but the quantizers' roundings**: the model is run *pinned*, each DynamicQuantizeLinear's
   three outputs (values, scale, zero point) replaced by graph inputs holding onnxruntime's (the node
   stays, its results going to extra graph outputs). What remains is exact integer arithmetic and float32
   ops on equal inputs, so the outputs and every quantizer's input must agree within the variant's
   tolerance for integer pipelines (EXACT_Q_TOL, as the QOperator models);
2. **the quantizers**: in that run each of gpuops' DynamicQuantizeLinear results (computed from its own
   input, within float32 rounding of onnxruntime's) must be, per the ONNX definition, a correct rounding
   of an input between the two runtimes' values: the scale within what the two inputs' ranges and two
   float32 roundings allow, the zero point and every 8-bit value the rounding of a quotient lying between
   the two runtimes' quotients, widened by the float32 rounding of computing it. A value may thus differ
   from onnxruntime's by one step only where a rounding tie lies in that interval: exactly the flips the
   float32 differences explain, and no others;
3. **the model as written** (with the paths gpuops takes there only, a DynamicQuantizeLinear fused into
   DynamicQuantizeMatMul, whose results equal the unfused nodes' bit for bit:
   tests/optimizer/test_matmul_integer_to_float.py): its outputs within that same float32 tolerance plus
   the bound that gpuops/bench/tolerance.py derives for the corpus's quantized models: each value a
   quantizer rounds adds one step of its range (``2 / (max q - min q)``, 2/255 for 8 bits) to the
   relative error bound of everything it feeds, the float32 sums adding ``gamma_K``, and two
   implementations differ by at most twice the bound times the output's magnitude (first order, as for
   the corpus). It counts every quantized value as possibly one step off, so it covers whatever flips
   happen, loosely (vit: 2 x 0.078 x 3.38 = 0.53 absolute, where the flip above moved the logits by
   2.4e-2); the tight checks are 1 and 2.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from gpuops.selftest import UNIT_ROUNDOFF

from gpuops.bench.tolerance import observe, tolerances
from ..ops.common import run_gpuops

QUANTIZER = "DynamicQuantizeLinear"
QMAX = 255  # DynamicQuantizeLinear's uint8: [0, 255]
OWN = "/gpuops"  # suffix of gpuops' own quantizer results in the pinned model


def quantizes_at_run_time(model: onnx.ModelProto) -> bool:
    return any(n.op_type == QUANTIZER for n in model.graph.node)


class Oracle:
    """onnxruntime's side of the comparison for one model and feeds: every value of the graph (graph
    optimizations off, the graph as written: :func:`gpuops.bench.tolerance.observe`), the outputs'
    quantization bounds, and the pinned model with its feeds."""

    def __init__(self, model: onnx.ModelProto, feeds: dict):
        self.model, self.feeds = model, feeds
        observed = observe(model, feeds)
        self.values = observed[1]
        self.bounds = tolerances(model, feeds, observed)
        self.pinned, self.quantizers = _pin(model, self.values)
        self.pinned_feeds = {**feeds, **{y: self.values[y] for _, ys in self.quantizers for y in ys}}

    def check(self, got: list, device: str, tol: float, what: str) -> None:
        """gpuops' outputs ``got`` of the model on ``device`` (the module doc's 3), then the pinned model
        run there (1 and 2); ``tol``: the variant's tolerance relative to max(1, |value|)."""
        for o, g in zip(self.model.graph.output, got):
            w, g = np.asarray(self.values[o.name]), np.asarray(g)
            _same_kind(g, w, f"{what} output {o.name}")
            if o.name not in self.bounds:  # not float: exact
                np.testing.assert_array_equal(g, w, err_msg=f"{what} output {o.name}")
                continue
            bound, how = self.bounds[o.name]
            scale = max(1.0, float(np.abs(w).max())) if w.size else 1.0
            diff = float(np.abs(g.astype(np.float64) - w).max()) if w.size else 0.0
            assert diff <= tol * scale + bound, (
                f"{what} output {o.name}: max |gpuops - onnxruntime| {diff:.3g} > {tol} x {scale:.3g} + the "
                f"quantizers' bound {bound:.3g} ({how})")
        self._check_pinned(device, tol, what + " (quantizers pinned to onnxruntime's values)")

    def _check_pinned(self, device, tol, what):
        names = [o.name for o in self.pinned.graph.output]
        got = dict(zip(names, run_gpuops(self.pinned, self.pinned_feeds, device)))
        got.update({k: v for k, v in self.feeds.items() if k not in got})  # a quantized graph input
        inputs = [x for x, _ in self.quantizers if x not in self.feeds]
        for name in [o.name for o in self.model.graph.output] + inputs:
            g, w = np.asarray(got[name]), np.asarray(self.values[name])
            _same_kind(g, w, f"{what}: {name}")
            if not w.size:
                continue
            err = float(np.abs(g.astype(np.float64) - w).max()) / max(1.0, float(np.abs(w).max()))
            assert err <= tol, f"{what}: {name}: error {err:.3g} > {tol} (relative to max(1, |value|))"
        for x, ys in self.quantizers:
            ort = [np.asarray(self.values[v]) for v in (x, *ys)]
            own = [np.asarray(got[v]) for v in (x, *(y + OWN for y in ys))]
            _check_quantizer(ort, own, f"{what}: {QUANTIZER} of {x}")


def _same_kind(g, w, what):
    assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"


def _pin(model: onnx.ModelProto, values: dict):
    """(the pinned model, [(quantizer input, (its three outputs))]): each top-level DynamicQuantizeLinear's
    outputs become graph inputs (fed onnxruntime's ``values``); the node writes ``<output>/gpuops``
    instead, a graph output, and its input is a graph output too."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    graph_outputs = {o.name for o in m.graph.output}
    known = {i.name for i in m.graph.input} | graph_outputs | {t.name for t in m.graph.initializer}
    quantizers = []
    for node in m.graph.node:
        if node.op_type != QUANTIZER or node.domain not in ("", "ai.onnx"):
            continue
        assert not graph_outputs.intersection(node.output), f"{QUANTIZER} {node.output}: a graph output"
        x, ys = node.input[0], tuple(node.output)
        if x not in known:
            m.graph.output.append(onnx.ValueInfoProto(name=x))
            known.add(x)
        for i, y in enumerate(ys):
            v = np.asarray(values[y])
            m.graph.input.append(helper.make_tensor_value_info(y, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
            node.output[i] = y + OWN
            m.graph.output.append(onnx.ValueInfoProto(name=node.output[i]))
        quantizers.append((x, ys))
    return m, quantizers


def _roundings(a, b, magnitude):
    """``(low, high)``: the integers that a quotient between the exact quotients ``a`` and ``b`` (of
    that magnitude) rounds to, half to even as the ONNX definition, when a runtime computes it in
    float32: each runtime's float32 quotient is within two roundings of its exact one (a reciprocal and
    a product, or a division and the zero point's addition), each at most ``u (|quotient| + QMAX)``."""
    eps = 2 * UNIT_ROUNDOFF * (np.abs(magnitude) + QMAX)
    return np.rint(np.minimum(a, b) - eps), np.rint(np.maximum(a, b) + eps)


def _range_scale(x: np.ndarray) -> float:
    return (max(0.0, float(x.max())) - min(0.0, float(x.min()))) / QMAX if x.size else 0.0


def _check_quantizer(ort: list, own: list, what: str) -> None:
    """gpuops' DynamicQuantizeLinear ``own = [x, y, scale, zero point]`` against onnxruntime's ``ort`` (the
    module doc's 2): y = saturate(round(x / scale) + zero point), scale = (max(0, max x) - min(0, min x))
    / 255, zero point = saturate(round(-min(0, min x) / scale)), each from its own x."""
    (xo, yo, so, zo), (xg, yg, sg, zg) = [[np.asarray(a, np.float64) for a in side] for side in (ort, own)]
    for a, b, name in ((yg, yo, "values"), (sg, so, "scale"), (zg, zo, "zero point")):
        assert a.shape == b.shape, f"{what}: {name} of shape {a.shape}, expected {b.shape}"
    so, sg, zg = float(so), float(sg), float(zg)
    # the exact scales of the two inputs, each computed with two float32 roundings (a difference, a quotient)
    allowed = abs(_range_scale(xg) - _range_scale(xo)) + 2 * UNIT_ROUNDOFF * (abs(so) + abs(sg))
    assert abs(sg - so) <= allowed, f"{what}: scale {sg!r}, onnxruntime's {so!r} (at most {allowed:.3g} apart)"
    if so == 0 or sg == 0:  # an all-zero input: nothing to round
        np.testing.assert_array_equal(np.asarray(own[1]), np.asarray(ort[1]), err_msg=what)
        return
    zo_exact, zg_exact = -min(0.0, float(xo.min())) / so, -min(0.0, float(xg.min())) / sg
    low, high = _roundings(zo_exact, zg_exact, max(zo_exact, zg_exact))
    assert np.clip(low, 0, QMAX) <= zg <= np.clip(high, 0, QMAX), \
        f"{what}: zero point {zg:g}, not a rounding of {zg_exact!r} (onnxruntime: {float(zo):g} from {zo_exact!r})"
    to, tg = xo / so, xg / sg
    low, high = _roundings(to, tg, np.maximum(np.abs(to), np.abs(tg)))
    bad = (yg < np.clip(low + zg, 0, QMAX)) | (yg > np.clip(high + zg, 0, QMAX))
    if bad.any():
        i = tuple(int(k) for k in np.unravel_index(int(np.argmax(bad)), bad.shape))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} values are no rounding of their input, e.g. at {i}: gpuops "
            f"{yg[i]:g} from x / scale = {float(tg[i])!r}, onnxruntime {yo[i]:g} from {float(to[i])!r} (zero points "
            f"{zg:g}, {float(zo):g}); {int((yg != yo).sum())} values differ in all")
