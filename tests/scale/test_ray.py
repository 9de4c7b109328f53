"""gpuops.ray on a local Ray cluster (2 CPUs, device cpu): Predictor, MDFSweep and `gpuops batch --ray`."""

import os

import numpy as np
import pytest

ray = pytest.importorskip("ray")
rd = pytest.importorskip("ray.data")

import gpuops.ray as gray  # noqa: E402
from gpuops.batch import read_table, run_table, write_table  # noqa: E402
from gpuops.cli import main  # noqa: E402

from .models import mlp, rows  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    ctx = rd.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


def _dataset(table):
    return rd.from_items([{k: v[i] for k, v in table.items()} for i in range(len(table["id"]))])


def _sorted_by_id(batches):
    out = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    order = np.argsort(out["id"])
    return {k: v[order] for k, v in out.items()}


def test_predictor_equals_single_session_loop():
    model, table = mlp(), rows(40)
    ds = _dataset(table).map_batches(gray.Predictor, fn_constructor_kwargs={"model": model.SerializeToString(),
                                                                            "device": "cpu"},
                                     concurrency=2, batch_size=8, batch_format="numpy")
    got = _sorted_by_id(list(ds.iter_batches(batch_size=None, batch_format="numpy")))
    want = run_table(model, table, batch_size=1, device="cpu")
    np.testing.assert_array_equal(got["id"], table["id"])
    for k in ("y", "s"):  # BLAS may round differently for other batch compositions
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)


def test_predictor_column_mapping_and_object_store_model():
    model, table = mlp(), rows(12)
    renamed = {"features": table["x"], "count": table["k"], "id": table["id"]}
    ref = ray.put(model.SerializeToString())
    ds = _dataset(renamed).map_batches(
        gray.Predictor, fn_constructor_kwargs={"model": ref, "device": "cpu",
                                               "input_columns": {"x": "features", "k": "count"},
                                               "output_columns": {"y": "pred"}},
        concurrency=1, batch_size=5, batch_format="numpy")
    got = _sorted_by_id(list(ds.iter_batches(batch_size=None, batch_format="numpy")))
    want = run_table(model, table, batch_size=12, device="cpu")
    np.testing.assert_allclose(got["pred"], want["y"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["s"], want["s"], rtol=1e-6, atol=1e-6)


class _DiesOnce(gray.Predictor):
    """Kills its own actor process on the third batch it sees, once per test (a marker file)."""

    def __init__(self, marker, **kw):
        super().__init__(**kw)
        self.marker, self.seen = marker, 0

    def __call__(self, batch):
        self.seen += 1
        if self.seen == 3 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


def test_killed_actor_loses_and_duplicates_no_row(tmp_path):
    model, table = mlp(), rows(48)
    marker = str(tmp_path / "died")
    ds = _dataset(table).map_batches(_DiesOnce, fn_constructor_kwargs={"marker": marker, "model": model.SerializeToString(),
                                                                       "device": "cpu"},
                                     concurrency=2, batch_size=4, batch_format="numpy")
    got = _sorted_by_id(list(ds.iter_batches(batch_size=None, batch_format="numpy")))
    assert os.path.exists(marker), "the actor never died: the test did not test a restart"
    np.testing.assert_array_equal(got["id"], table["id"])  # every row once, none lost or repeated
    np.testing.assert_allclose(got["y"], run_table(model, table, device="cpu")["y"], rtol=1e-6, atol=1e-6)


def test_bad_row_is_a_clear_error_not_a_hang():
    model, table = mlp(), rows(8)
    table["x"] = table["x"][:, :2]
    ds = _dataset(table).map_batches(gray.Predictor, fn_constructor_kwargs={"model": model.SerializeToString(),
                                                                            "device": "cpu"},
                                     concurrency=1, batch_size=4, batch_format="numpy")
    with pytest.raises(Exception, match=r"FeedError.*batch of 4 rows with id (0\.\.3|4\.\.7): input 'x': dimension 1 must be 4"):
        ds.take_all()


def test_cli_batch_ray_output_identical_to_in_process(tmp_path):
    import onnx

    model, table = mlp(), rows(21)
    onnx.save(model, tmp_path / "m.onnx")
    write_table(tmp_path / "in.parquet", table)
    args = ["batch", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.parquet"), "--batch-size", "4",
            "--device", "cpu"]
    assert main([*args, "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*args, "--output", str(tmp_path / "ray.parquet"), "--ray", "--workers", "2"]) == 0
    assert (tmp_path / "local.parquet").read_bytes() == (tmp_path / "ray.parquet").read_bytes()
    assert read_table(tmp_path / "ray.parquet")["id"].tolist() == list(range(21))


FN = __import__("pathlib").Path(__file__).parent.parent / "mdf" / "examples" / "FN.mdf.json"


def _fn_sweep_rows():
    grid_i, grid_a = np.meshgrid(np.linspace(-0.5, 0.5, 3), np.array([0.5, 1.0]))
    return {"FNpop_0.Iext": grid_i.ravel(), "FNpop_0.a_w": grid_a.ravel(), "id": np.arange(grid_i.size)}


def _fn_one_at_a_time(table, steps):
    from gpuops.mdf import MDFSession

    out = []
    for i in range(len(table["id"])):
        s = MDFSession(str(FN), device="cpu")
        for _ in range(steps):
            r = s.run(time_increment=5e-5, params={"FNpop_0.Iext": table["FNpop_0.Iext"][i],
                                                   "FNpop_0.a_w": table["FNpop_0.a_w"][i]})
        out.append(np.asarray(r["FNpop_0.OUTPUT"]))
    return np.stack(out)


def test_mdf_sweep_rows_equal_unbatched_sessions():
    table = _fn_sweep_rows()
    sweep = gray.MDFSweep(str(FN), device="cpu", outputs=["FNpop_0.OUTPUT"], time_increment=5e-5, steps=20)
    got = sweep(dict(table))
    np.testing.assert_allclose(got["FNpop_0.OUTPUT"].reshape(len(table["id"]), -1).ravel(),
                               _fn_one_at_a_time(table, 20).ravel(), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got["FNpop_0.OUTPUT"], got["FNpop_0.OUTPUT"].ravel()[0])  # the rows really differ


def test_mdf_sweep_on_ray_data():
    table = _fn_sweep_rows()
    ds = _dataset(table).map_batches(gray.MDFSweep, fn_constructor_kwargs={
        "model": str(FN), "device": "cpu", "outputs": ["FNpop_0.OUTPUT"], "time_increment": 5e-5, "steps": 20},
        concurrency=2, batch_size=2, batch_format="numpy")
    got = _sorted_by_id(list(ds.iter_batches(batch_size=None, batch_format="numpy")))
    np.testing.assert_allclose(got["FNpop_0.OUTPUT"].ravel(), _fn_one_at_a_time(table, 20).ravel(),
                               rtol=1e-12, atol=1e-12)


def test_mdf_sweep_refuses_a_model_that_cannot_be_batched():
    from gpuops import ModelError

    actr = FN.parent / "ACT-R" / "count.json"
    with pytest.raises(ModelError, match="ACT-R functions .* cannot be batched"):
        gray.MDFSweep(str(actr), device="cpu")({"id": np.arange(2)})
