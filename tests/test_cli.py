import numpy as np
import onnx
from onnx import TensorProto, helper

from gpuops.cli import main


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
    assert f"sum={np.maximum(x, 0).sum():.6g}" in capsys.readouterr().out


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
