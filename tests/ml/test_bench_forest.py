"""The forest benchmark (gpuops/bench/ml.py) runs, and both runtimes agree on its model; its speed is
measured by ``gpuops bench --forest``, never asserted here."""

import json
from types import SimpleNamespace

import numpy as np

from gpuops.bench import ml


def test_small_forest_bench_agrees_with_onnxruntime():
    r = ml.bench(trees=6, depth=3, rows=300, features=5, repeat=1)
    assert r["agree"] and r["ratio"] > 0 and len(r["runs_s"]["gpuops"]) == 1


def test_the_model_is_a_complete_forest():
    model = ml.forest_model(trees=3, depth=2, features=4)
    node = model.graph.node[0]
    attrs = {a.name: a for a in node.attribute}
    assert node.op_type == "TreeEnsembleRegressor" and len(attrs["nodes_treeids"].ints) == 3 * 7
    assert sum(m == b"LEAF" for m in attrs["nodes_modes"].strings) == 3 * 4


def test_gpuops_bench_forest_writes_its_result(tmp_path, monkeypatch):
    monkeypatch.setattr(ml, "bench", lambda **kw: {**kw, "model": "forest", "median_s": {}, "ratio": 0.5,
                                                  "agree": True})
    a = SimpleNamespace(quick=True, threads=None, device="auto", repeat=20, out=str(tmp_path))
    assert ml.run(a) == 0
    doc = json.loads((tmp_path / "forest.json").read_text())
    assert doc["device"] == "cpu" and doc["threads"] == 1 and doc["rows"] == 10_000 and np.isclose(doc["ratio"], 0.5)
