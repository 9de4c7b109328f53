import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import gpuops
from gpuops.cli import build_parser, main, summary

ROOT = Path(__file__).resolve().parents[1]


def test_info(capsys):
    assert main(["info"]) == 0
    assert "default device:" in capsys.readouterr().out


def test_run_with_random_and_given_inputs(tmp_path, capsys):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
    assert main(["run", str(path), "--device", "cpu", "--batch", "3"]) == 0
    out = capsys.readouterr().out
    assert "output  y: float32[3, 4]" in out and "latency median" in out
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--device", "cpu", "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    y = np.maximum(x, 0)
    assert (f"output  y: float32[2, 4]  min {y.min():.6g}  max {y.max():.6g}  mean {y.mean():.6g}  argmax [0, 3]"
            in capsys.readouterr().out)


def test_run_reports_gpuops_errors(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.onnx"), "--device", "cpu"]) == 1
    assert "gpuops: error: model file not found" in capsys.readouterr().err
    assert main(["run", "light:nonexistent", "--device", "cpu"]) == 1
    assert "the onnx package ships" in capsys.readouterr().err


def test_bench_passes_its_options_to_the_runner(tmp_path, capsys):
    rc = main(["bench", "--quick", "--no-mdf", "--models", "quantized_mlp", "--device", "cpu", "--out", str(tmp_path)])
    assert rc == 0
    assert "quantized_mlp" in (tmp_path / "bench.md").read_text()


def test_run_refuses_bad_input_files_in_one_line(tmp_path, capsys):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
    (tmp_path / "text.npy").write_text("not an array")
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "archive.npz", x=np.zeros(2, np.float32))
    for item, why in [(f"x={tmp_path / 'missing.npy'}", "No such file"), (f"x={tmp_path / 'text.npy'}", "pickled"),
                      (f"x={tmp_path / 'pickled.npy'}", "allow_pickle"), (f"x={tmp_path / 'archive.npz'}", "single array"),
                      (f"x={tmp_path}", "Is a directory"), ("x", "NAME=FILE.npy")]:
        assert main(["run", str(path), "--device", "cpu", "--input", item]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpuops: error: ") and err.count("\n") == 1 and why in err, err


def _relu(tmp_path, shape=("N", 4)):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)
    return path


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"gpuops {gpuops.__version__}"


def test_every_option_has_help():
    import argparse

    from gpuops.bench.runner import build_parser as bench_parser

    parsers = [build_parser(), bench_parser()]
    for action in parsers[0]._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers += [p for name, p in action.choices.items() if name != "bench"]
    for parser in parsers:
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{parser.prog} {'/'.join(action.option_strings) or action.dest} has no help"


def test_run_without_timed_runs_says_so(tmp_path, capsys):
    assert main(["run", str(_relu(tmp_path)), "--device", "cpu", "--repeat", "0"]) == 0
    out = capsys.readouterr().out
    assert "latency not timed (--repeat 0" in out and "output  y: float32[1, 4]" in out


def test_run_saves_outputs_and_sets_threads(tmp_path, capsys):
    path = _relu(tmp_path)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--device", "cpu", "--threads", "1", "--repeat", "1",
                 "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "threads 1" in text and f"wrote   {out}" in text
    with np.load(out) as z:
        assert z.files == ["y"]
        np.testing.assert_array_equal(z["y"], np.maximum(x, 0))


@pytest.mark.parametrize("args, why", [
    (["--batch", "-2"], "argument --batch: must be at least 1, got -2"),
    (["--repeat", "-1"], "argument --repeat: must be at least 0, got -1"),
    (["--threads", "0"], "argument --threads: must be at least 1, got 0"),
    (["--seed", "-1"], "argument --seed: must be at least 0, got -1"),
    (["--batch", "two"], "argument --batch: 'two' is not an integer"),
    (["--output", "o.txt"], "--output 'o.txt': the file name must end with .npz"),
    (["--output", "missing/o.npz"], "the folder 'missing' does not exist"),
])
def test_run_refuses_bad_options_in_a_line(tmp_path, capsys, args, why):
    try:
        rc = main(["run", str(_relu(tmp_path)), "--device", "cpu", *args])
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and why in err and "Traceback" not in err, err


def test_summary_names_a_classifiers_classes():
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]], np.float32)
    assert summary(scores) == "float32[2, 3]  min 0.1  max 0.7  mean 0.333333  argmax [1, 0]"
    assert summary(np.array([1.0, np.nan])) == "float64[2]  min 1  max 1  mean 1  (1 NaN)"
    assert summary(np.array(["a", "b"], dtype=object)) == "object[2]"


def test_an_unexpected_failure_is_one_line_and_the_traceback_is_on_request(tmp_path, capsys, monkeypatch):
    from gpuops import cli

    def broken(a):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "cmd_info", broken)
    assert main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: a bug" in err and "-v" in err
    with pytest.raises(ZeroDivisionError):
        main(["-v", "info"])


def _without(modules: list[str], args: list[str]) -> subprocess.CompletedProcess:
    """``gpuops ARGS`` in a fresh interpreter where ``modules`` do not import."""
    code = ("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules) +
            "from gpuops.__main__ import main\nsys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def test_missing_optional_dependencies_are_named_before_any_work(tmp_path):
    p = _without(["onnxruntime"], ["bench", "--peers", "--quick", "--out", str(tmp_path / "b")])
    assert p.returncode == 2 and "needs onnxruntime: pip install onnxruntime" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "b").exists()
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    p = _without(["pyarrow"], ["batch", str(_relu(tmp_path)), "--input", str(tmp_path / "x.npy"),
                                "--output", str(tmp_path / "o.parquet"), "--device", "cpu"])
    assert p.returncode == 1 and "need pyarrow" in p.stderr and "rows" not in p.stderr, p.stderr


def test_batch_takes_single_files_and_refuses_other_dtypes_unless_cast(tmp_path, capsys):
    path = _relu(tmp_path)
    x = np.linspace(-1, 1, 20).reshape(5, 4)  # float64
    np.save(tmp_path / "rows.npy", x)
    assert main(["batch", str(path), "--input", str(tmp_path / "rows.npy"), "--output", str(tmp_path / "o.npz"),
                 "--device", "cpu"]) == 1
    assert "column 'rows' is float64, model input 'x' wants float32 (--cast converts it)" in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()
    assert main(["batch", str(path), "--input", str(tmp_path / "rows.npy"), "--output", str(tmp_path / "o.npz"),
                 "--device", "cpu", "--cast"]) == 0
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["y"], np.maximum(x.astype(np.float32), 0))
    np.savez(tmp_path / "rows.npz", x=x.astype(np.float32), id=np.arange(5))
    assert main(["batch", str(path), "--input", str(tmp_path / "rows.npz"), "--output", str(tmp_path / "out"),
                 "--device", "cpu"]) == 0
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == ["id.npy", "x.npy", "y.npy"]


@pytest.mark.parametrize("args, why", [
    (["--input", "nowhere.npy", "--output", "o.npz"], "input 'nowhere.npy' does not exist"),
    (["--input", "nowhere", "--output", "o"], "input 'nowhere' does not exist"),
    (["--input", "x.npy", "--output", "o.npy"], "a table is several columns"),
    (["--input", "x.npy", "--output", "gone/o.npz"], "the folder 'gone' does not exist"),
])
def test_batch_explains_bad_paths(tmp_path, capsys, monkeypatch, args, why):
    path = _relu(tmp_path)
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    assert main(["batch", str(path), *args, "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert why in err and err.count("\n") == 1, err
