"""Malformed MDF models fail at session creation with gpuops errors naming the element at fault;
failures while running name the node and parameter. ``import gpuops`` never imports modeci_mdf."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("modeci_mdf")

from modeci_mdf.mdf import (Condition, ConditionSet, Edge, InputPort, Node, OutputPort,  # noqa: E402
                            Parameter)

from gpuops import registry  # noqa: E402
from gpuops.errors import FeedError, GpuopsError, ModelError, NodeError, UnsupportedOpError  # noqa: E402
from gpuops.mdf import MDFSession  # noqa: E402
from gpuops.mdf.expr import Values  # noqa: E402
from gpuops.mdf.functions import ACTR, STANDARD  # noqa: E402
from gpuops.mdf.onnx_bridge import OnnxCall, schema  # noqa: E402
from gpuops.device import get_device  # noqa: E402

from .reference import mdf_model as model  # noqa: E402

SPEC_NAMES = Path(__file__).resolve().parent / "standard_functions_v0.2.txt"  # from the spec's headings


def node(nid, params=(), ports=(), outs=("out",)):
    n = Node(id=nid)
    n.input_ports.extend(InputPort(id=p) if isinstance(p, str) else p for p in ports)
    n.parameters.extend(params)
    n.output_ports.extend(OutputPort(id=o, value="1") for o in outs)
    return n


def make(*args, **kwargs):
    return MDFSession(model(*args, **kwargs), device="cpu")


def test_edges_naming_unknown_nodes_and_ports():
    a, b = node("A"), node("B", ports=["inp"])
    with pytest.raises(ModelError, match="edge 'e1': unknown sender node 'Z'"):
        make(a, b, edges=[Edge(id="e1", sender="Z", receiver="B", sender_port="out", receiver_port="inp")])
    with pytest.raises(ModelError, match="edge 'e2': unknown receiver node 'Q'"):
        make(a, b, edges=[Edge(id="e2", sender="A", receiver="Q", sender_port="out", receiver_port="inp")])
    with pytest.raises(ModelError, match="edge 'e3': node 'A' has no output port 'nope'"):
        make(a, b, edges=[Edge(id="e3", sender="A", receiver="B", sender_port="nope", receiver_port="inp")])
    with pytest.raises(ModelError, match="edge 'e4': node 'B' has no input port 'x'"):
        make(a, b, edges=[Edge(id="e4", sender="A", receiver="B", sender_port="out", receiver_port="x")])


def test_cycles_need_a_default_value():
    edges = [Edge(id="ab", sender="A", receiver="B", sender_port="out", receiver_port="inp"),
             Edge(id="ba", sender="B", receiver="A", sender_port="out", receiver_port="inp")]
    with pytest.raises(ModelError, match=r"A -> B -> A.*default_value|B -> A -> B.*default_value"):
        make(node("A", ports=["inp"]), node("B", ports=["inp"]), edges=edges)
    s = make(node("A", ports=[InputPort(id="inp", default_value=1.0)]), node("B", ports=["inp"]), edges=edges)
    s.run()
    assert s.execution_trace == ["A", "B"]
    loop = [Edge(id="self", sender="A", receiver="A", sender_port="out", receiver_port="inp")]
    with pytest.raises(ModelError, match="A -> A"):
        make(node("A", ports=["inp"]), edges=loop)


def test_missing_and_unknown_functions_and_args():
    missing = r"node 'N', parameter 'f': function 'linear' is missing argument\(s\) \['slope'\]"
    with pytest.raises(ModelError, match=missing):
        make(node("N", [Parameter(id="f", function="linear", args={"variable0": 1, "intercept": 0})]))
    # an argument may also come from the node's parameters, as in the reference engine
    make(node("N", [Parameter(id="slope", value=2), Parameter(id="f", function="linear",
                                                              args={"variable0": 1, "intercept": 0})]))
    with pytest.raises(ModelError, match="node 'N', parameter 'f': unknown function 'linaer'"):
        make(node("N", [Parameter(id="f", function="linaer", args={"variable0": 1})]))
    with pytest.raises(ModelError, match=r"parameter 'g'.*onnx::Gemm is missing input\(s\) \['B'\]"):
        make(node("N", [Parameter(id="g", function="onnx::Gemm", args={"A": "[[1.0]]"})]))
    with pytest.raises(ModelError, match=r"function 'retrieve_chunk' is missing argument\(s\) \['types'\]"):
        make(node("N", [Parameter(id="r", function="retrieve_chunk", args={"pattern": "{}", "dm_chunks": "[]"})]))
    with pytest.raises(UnsupportedOpError, match="onnx::Frobnicate"):
        make(node("N", [Parameter(id="g", function="onnx::Frobnicate", args={})]))


def test_expressions_name_node_and_element():
    with pytest.raises(ModelError, match=r"node 'N', parameter 'p': .*__import__"):
        make(node("N", [Parameter(id="p", value="__import__('os').getcwd()")]))
    with pytest.raises(ModelError, match=r"node 'N', output port 'o': .*unknown name 'q'"):
        n = node("N", [Parameter(id="p", value=1)], outs=())
        n.output_ports.append(OutputPort(id="o", value="p + q"))
        make(n)
    with pytest.raises(ModelError, match=r"node 'N', parameter 'x' \(time_derivative\)"):
        make(node("N", [Parameter(id="x", default_initial_value=0, time_derivative="x.y")]))


def test_ids_conditions_and_graphs():
    with pytest.raises(ModelError, match=r"duplicate node id\(s\) \['A'\]"):
        make(node("A"), node("A"))
    with pytest.raises(ModelError, match=r"node 'A': id\(s\) \['x'\] used more than once"):
        make(node("A", [Parameter(id="x", value=1)], ports=["x"]))
    with pytest.raises(ModelError, match="unknown condition type 'EveryNCals'"):
        make(node("A"), conditions=ConditionSet(node_specific={"A": Condition("EveryNCals", n=2)}))
    with pytest.raises(ModelError, match="condition is given for unknown node 'Z'"):
        make(node("A"), conditions=ConditionSet(node_specific={"Z": Condition("Always")}))
    with pytest.raises(ModelError, match="dependencies 'Z' is not a node"):
        make(node("A"), conditions=ConditionSet(node_specific={"A": Condition("EveryNCalls", dependencies="Z", n=1)}))
    with pytest.raises(ModelError, match="unknown time scale 'fortnight'"):
        make(node("A"), conditions=ConditionSet(termination={"fortnight": Condition("AfterPass", n=1)}))
    with pytest.raises(ModelError, match="node 'A' has no port, parameter or function 'nope'"):
        make(node("A"), conditions=ConditionSet(termination={"environment_state_update": Condition(
            "Threshold", dependency="A", parameter="nope", threshold=1, comparator=">=")}))
    with pytest.raises(ModelError, match=r"no graph 'h'; its graphs are \['g'\]"):
        MDFSession(model(node("A")), device="cpu", graph="h")


def test_files(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        MDFSession(tmp_path / "nope.json", device="cpu")
    with pytest.raises(ModelError, match="expected a .json or .yaml"):
        MDFSession(tmp_path / "model.onnx", device="cpu")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ModelError, match="cannot be read"):
        MDFSession(bad, device="cpu")
    with pytest.raises(ModelError, match="a path"):
        MDFSession(42, device="cpu")


def test_inputs_and_runtime_failures():
    s = make(node("N", [Parameter(id="p", value="inp / 0")], ports=["inp"]))
    with pytest.raises(FeedError, match=r"'nope' is not an input port; the input ports are \['N.inp'\]"):
        s.run(inputs={"nope": 1})
    with pytest.raises(NodeError, match="node 'N', parameter 'p': ZeroDivisionError"):
        s.run(inputs={"N.inp": 1})
    s = make(node("N", [Parameter(id="p", value="[1.0, 2.0] @ inp")], ports=["inp"]))
    with pytest.raises(NodeError, match="node 'N', parameter 'p'"):
        s.run(inputs={"inp": [1.0, 2.0, 3.0]})
    with pytest.raises(GpuopsError, match="output_device"):
        s.run(output_device="gpu")


def test_import_gpuops_does_not_import_modeci_mdf():
    code = ("import sys, gpuops, gpuops.mdf; "
            "bad = [m for m in ('modeci_mdf', 'graph_scheduler', 'modelspec') if m in sys.modules]; "
            "assert not bad, bad")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_standard_function_of_the_spec_is_dispatched():
    names = re.findall(r"^(\w\S*)$", SPEC_NAMES.read_text(), re.M)
    names = [n for n in names if n != "All"]
    assert len(names) > 150
    values = Values(get_device("cpu"))
    for name in names:
        if not name.startswith("onnx::"):
            assert name in STANDARD or name in ACTR, name
            continue
        op = name[6:]
        assert registry.versions("", op), name
        s = schema(op, 15)
        available = {i.name for i in s.inputs}
        if op in ("If", "Loop", "Scan"):  # graph attributes: no MDF form for them
            with pytest.raises(UnsupportedOpError, match="graph"):
                OnnxCall(op, [], available | set(s.attributes), values, 15, f"fn {name}")
            continue
        OnnxCall(op, [], available, values, 15, f"fn {name}")
