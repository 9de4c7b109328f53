"""In-process batch inference: table I/O (Parquet, .npy columns, .npz shards), the runner and `gpuops batch`."""

import numpy as np
import pytest

from gpuops import FeedError, GpuopsError
from gpuops.batch import read_table, run_table, write_table
from gpuops.cli import main

from .models import mlp, reference, rows

pa = pytest.importorskip("pyarrow")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_run_table_matches_reference(device, batch_size):
    model, table = mlp(), rows(23)
    out = run_table(model, table, batch_size=batch_size, device=device)
    want = reference(model, table)
    np.testing.assert_array_equal(out["id"], table["id"])
    np.testing.assert_allclose(out["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["s"], want["s"], rtol=1e-5, atol=1e-5)


def test_fixed_batch_axis_runs_in_chunks():
    model, table = mlp(batch=1), rows(5)
    out = run_table(model, table, batch_size=5, device="cpu")
    np.testing.assert_allclose(out["y"], reference(model, table)["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", ["table.parquet", "columns", "shards"])
def test_table_round_trip(tmp_path, form):
    table = rows(9)
    path = tmp_path / form
    if form == "shards":
        path.mkdir()
        np.savez(path / "a.npz", **{k: v[:4] for k, v in table.items()})
        np.savez(path / "b.npz", **{k: v[4:] for k, v in table.items()})
    else:
        write_table(path, table)
    back = read_table(path)
    assert sorted(back) == sorted(table)
    for k in table:
        np.testing.assert_array_equal(back[k], table[k])
        assert back[k].dtype == table[k].dtype


def test_bad_inputs_are_clear(tmp_path):
    model = mlp()
    with pytest.raises(GpuopsError, match="input .* does not exist"):
        read_table(tmp_path / "missing")
    (tmp_path / "pickled").mkdir()
    np.save(tmp_path / "pickled" / "x.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(GpuopsError, match="cannot read"):
        read_table(tmp_path / "pickled")
    bad = rows(10)
    bad["x"] = bad["x"][:, :3]  # every row has the wrong shape
    with pytest.raises(FeedError, match=r"rows 0\.\.7: input .x.: dimension 1 must be 4"):
        run_table(model, bad, batch_size=8, device="cpu")
    missing = {"x": rows(4)["x"]}
    with pytest.raises(FeedError, match=r"rows 0\.\.3: no column 'k'"):
        run_table(model, missing, batch_size=8, device="cpu")
    wrong = rows(4)
    wrong["x"] = wrong["x"].astype(np.int32)
    with pytest.raises(FeedError, match="column 'x' is int32"):
        run_table(model, wrong, batch_size=8, device="cpu")


def _split_bounds(model, table):
    """How far two correct float32 runs of :func:`.models.mlp` may differ per element when the rows
    are batched differently (the BLAS kernel, hence the summation order, depends on the batch).

    A sum of n float32 terms in any order is within gamma_n * sum |terms| of the exact sum
    (gamma_n = n u / (1 - n u), u = 2**-24), so two orders differ by at most twice that:
    y = relu(x @ W + b) sums K + 1 terms (K = 4); s = sum(y) + k sums 3 + 1 more on top of the
    y's own error."""
    from onnx import numpy_helper

    u = np.finfo(np.float32).eps / 2
    gamma = lambda n: n * u / (1 - n * u)  # noqa: E731
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    W, bias, x = inits["W"], inits["b"], table["x"].astype(np.float64)
    mag_y = np.abs(x) @ np.abs(W) + np.abs(bias)
    bound_y = 2 * gamma(W.shape[0] + 1) * mag_y
    mag_s = mag_y.sum(axis=1) + np.abs(table["k"])
    return {"y": bound_y, "s": bound_y.sum(axis=1) + 2 * gamma(W.shape[1] + 1) * mag_s}


def test_cli_batch_parquet_and_npy_agree(tmp_path, capsys):
    import onnx

    model, table = mlp(), rows(17)
    onnx.save(model, tmp_path / "m.onnx")
    write_table(tmp_path / "in.parquet", table)
    write_table(tmp_path / "in_npy", table)
    assert main(["batch", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.parquet"),
                 "--output", str(tmp_path / "out.parquet"), "--batch-size", "5", "--device", "cpu"]) == 0
    assert main(["batch", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in_npy"),
                 "--output", str(tmp_path / "out_npy"), "--batch-size", "4", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "17 rows" in captured.out and "rows/s" in captured.err and "ETA" in captured.err
    a, b = read_table(tmp_path / "out.parquet"), read_table(tmp_path / "out_npy")
    want = reference(model, table)
    bound = _split_bounds(model, table)
    for k in ("y", "s"):
        # batches of 5 and of 4: the GEMM may sum in another order, so not bit-identical
        assert np.all(np.abs(a[k].astype(np.float64) - b[k]) <= bound[k]), k
        np.testing.assert_allclose(a[k], want[k], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a["id"], table["id"])


def test_cli_batch_error_is_one_line(tmp_path, capsys):
    import onnx

    onnx.save(mlp(), tmp_path / "m.onnx")
    bad = rows(3)
    bad["k"] = bad["k"].astype(np.float64)
    write_table(tmp_path / "bad", bad)
    rc = main(["batch", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "bad"), "--output",
               str(tmp_path / "o"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc != 0 and "column 'k' is float64" in err and "Traceback" not in err


def test_import_gpuops_imports_neither_ray_nor_pyarrow():
    import subprocess
    import sys

    code = "import sys, gpuops, gpuops.batch; bad = {'ray', 'pyarrow'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)
