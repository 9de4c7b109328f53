"""Optimized and unoptimized plans agree on every onnx node conformance case.

(The conformance suite itself runs every case at the default level, "all", against the expected
outputs on cpu and on the CUDA path.) Here each case's model is optimized; where the optimizer
changed the graph, the case runs at "none" and at "all" on cpu and the outputs must agree.
"""

import warnings
from pathlib import Path

import gpuops
from gpuops.optimizer import optimize
from tests.conformance.harness import _from_proto, assert_close, load_expected_failures

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

XFAIL = load_expected_failures(Path(__file__).parent.parent / "conformance" / "expected_failures.txt")


def _graph_changed(model) -> bool:
    opt = optimize(model)
    return (len(opt.graph.initializer) != len(model.graph.initializer)
            or [n.SerializeToString() for n in opt.graph.node] != [n.SerializeToString() for n in model.graph.node])


def test_optimized_and_unoptimized_agree_on_every_case():
    changed = 0
    for case in collect_testcases():
        if case.name in XFAIL or not _graph_changed(case.model):
            continue
        changed += 1
        names = [i.name for i in case.model.graph.input]
        sessions = [gpuops.InferenceSession(case.model, device="cpu", optimize=lvl) for lvl in ("none", "all")]
        for inputs, _ in case.data_sets:
            feeds = dict(zip(names, map(_from_proto, inputs)))
            want, got = (s.run(None, feeds) for s in sessions)
            for out, g, w in zip(case.model.graph.output, got, want):
                assert_close(g, w, max(case.rtol, 1e-5), max(case.atol, 1e-6), f"{case.name} {out.name}")
    assert changed > 300  # the expanded (function-body) cases give the folding and fusions work
