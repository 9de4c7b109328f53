"""GELU written out -> com.microsoft Gelu (Erf form) or FastGelu (tanh form); a constant bias
added just before goes into the op (BiasGelu, FastGelu's bias).

TorchScript emits ``x * (1 + Erf(x / sqrt 2)) * 0.5`` (Div, Erf, Add, Mul, Mul); the dynamo exporter
(onnxscript) emits ``x * (0.5 * (1 + Erf(x * (1 / sqrt 2))))``; the factor 0.5 may also multiply x
first (as GPT-2's tanh form does: ``0.5 x (1 + Tanh(sqrt(2 / pi) (x + 0.044715 Pow(x, 3))))``);
TorchScript below opset 15 writes the cube as ``x * (x * x)``; jax2tf (magika) the scaled cube as
``x * (x * (0.044715 * x))``.
Every order of the two products, and of each Mul's and Add's operands, is matched."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from .graph import MS, Graph

_FLOATS = (TensorProto.FLOAT,)  # onnxruntime's CPU Gelu is float only


def _scalar(graph: Graph, name: str, want: float, rtol=1e-3) -> bool:
    v = graph.const_value(name)
    return v is not None and v.size == 1 and math.isclose(float(np.asarray(v).reshape(())), want, rel_tol=rtol)


def _other(node, name):
    return node.input[1] if node.input[0] == name else node.input[0]


def _erf_input(graph: Graph, erf):
    """x when the Erf reads x / sqrt(2) or x * (1 / sqrt(2)) (single use)."""
    n = graph.producer.get(erf.input[0])
    if n is None or n.domain not in ("", "ai.onnx") or not graph.single_use(erf.input[0]):
        return None, None
    if n.op_type == "Div" and _scalar(graph, n.input[1], math.sqrt(2)):
        return n.input[0], n
    if n.op_type == "Mul":
        for x, c in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
            if _scalar(graph, c, 1 / math.sqrt(2)):
                return x, n
    return None, None


def _products(graph: Graph, start: str, x: str):
    """The nodes multiplying ``start`` by x and by 0.5 (in any order), and the final output."""
    m1 = graph.only_consumer(start, "Mul")
    if m1 is None:
        return None
    o1 = _other(m1, start)
    if o1 == x or _scalar(graph, o1, 0.5):
        m2 = graph.only_consumer(m1.output[0], "Mul")
        if m2 is None:
            return None
        o2 = _other(m2, m1.output[0])
        if {o1 == x, o2 == x} == {True, False} and (_scalar(graph, o2, 0.5) or _scalar(graph, o1, 0.5)):
            return [m1, m2]
        return None
    half = graph.producer_of(o1, "Mul")  # (x * 0.5) * (1 + erf)
    if half is not None and graph.single_use(o1) and x in half.input and _scalar(graph, _other(half, x), 0.5):
        return [half, m1]
    return None


def _mul_by(graph: Graph, name: str, want: float):
    """(other operand, node) when ``name`` is a single-use Mul of something by the constant ``want``."""
    n = graph.producer_of(name, "Mul")
    if n is None or not graph.single_use(name):
        return None, None
    for x, c in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
        if _scalar(graph, c, want):
            return x, n
    return None, None


def _tanh_input(graph: Graph, tanh):
    """x when the Tanh reads sqrt(2 / pi) * (x + 0.044715 * Pow(x, 3)) (single uses)."""
    inner, m1 = _mul_by(graph, tanh.input[0], math.sqrt(2 / math.pi))
    add = graph.producer_of(inner, "Add") if inner else None
    if add is None or not graph.single_use(inner):
        return None, None
    for x, cube in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        p, m2 = _mul_by(graph, cube, 0.044715)
        powers = _cube(graph, p, x) if p else None
        if powers is not None:
            return x, [m1, add, m2, *powers]
        scaled = _scaled_cube(graph, cube, x)
        if scaled is not None:
            return x, [m1, add, *scaled]
    return None, None


def _scaled_cube(graph: Graph, p: str, x: str):
    """The nodes making ``p`` = x * (x * (0.044715 * x)) (single uses), as jax2tf writes the cube, any
    operand order."""
    outer = graph.producer_of(p, "Mul")
    if outer is None or not graph.single_use(p) or x not in outer.input:
        return None
    mid = graph.producer_of(_other(outer, x), "Mul")
    if mid is None or not graph.single_use(mid.output[0]) or x not in mid.input:
        return None
    y, inner = _mul_by(graph, _other(mid, x), 0.044715)
    return [outer, mid, inner] if y == x else None


def _cube(graph: Graph, p: str, x: str):
    """The nodes making ``p`` = x ** 3 (single use): Pow(x, 3), or x * (x * x) as TorchScript
    writes it below opset 15, either operand first."""
    if not graph.single_use(p):
        return None
    pw = graph.producer_of(p, "Pow")
    if pw is not None:
        return [pw] if pw.input[0] == x and _scalar(graph, pw.input[1], 3.0, 1e-6) else None
    outer = graph.producer_of(p, "Mul")
    if outer is None or x not in outer.input:
        return None
    square = graph.producer_of(_other(outer, x), "Mul")
    if square is None or list(square.input) != [x, x] or not graph.single_use(square.output[0]):
        return None
    return [outer, square]


def apply(graph: Graph) -> bool:
    removed = []
    for erf in graph.nodes:
        if erf.op_type not in ("Erf", "Tanh") or erf.domain not in ("", "ai.onnx") or erf in removed:
            continue
        if erf.op_type == "Erf":
            x, scale = _erf_input(graph, erf)
            scale = [scale]
        else:
            x, scale = _tanh_input(graph, erf)
        if x is None or graph.elem_type(x) not in _FLOATS:
            continue
        add = graph.only_consumer(erf.output[0], "Add")
        if add is None or not _scalar(graph, _other(add, erf.output[0]), 1.0, 1e-6):
            continue
        muls = _products(graph, add.output[0], x)
        if muls is None:
            continue
        last = muls[-1]
        last.op_type, last.domain = ("Gelu" if erf.op_type == "Erf" else "FastGelu"), MS
        last.input[:] = [x]
        del last.attribute[:]
        removed.extend([*scale, erf, add, *muls[:-1]])
        graph.use_domain(MS)
    changed = graph.remove(*removed)
    return _bias(graph) or changed


def _bias(graph: Graph) -> bool:
    """Gelu(A + bias) -> BiasGelu(A, bias), FastGelu(A + bias) -> FastGelu(A, bias), for a constant
    1-D bias along A's last axis (the projection before a transformer's activation)."""
    removed = []
    for node in graph.nodes:
        if node.domain != MS or node.op_type not in ("Gelu", "FastGelu") or len(node.input) != 1:
            continue
        add = graph.producer_of(node.input[0], "Add")
        if add is None or not graph.single_use(node.input[0]):
            continue
        for a, b in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
            bias, info = graph.const_value(b), graph.info(a)
            shape = info[1] if info else None  # the last axis static (a dynamic batch and sequence)
            if bias is not None and shape and shape[-1] is not None and bias.shape == (shape[-1],) and \
                    info[0] == TensorProto.FLOAT:
                node.op_type = "BiasGelu" if node.op_type == "Gelu" else "FastGelu"
                node.input[:] = [a, b]
                removed.append(add)
                break
    return graph.remove(*removed)
