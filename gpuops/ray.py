"""Scale out on Ray (``pip install 'gpuops[ray]'``): batch inference and MDF parameter sweeps.

Ray Data's usual recipe, one actor per GPU::

    import ray, gpuops.ray
    ds = ray.data.read_parquet("images.parquet")
    ds = ds.map_batches(gpuops.ray.Predictor, fn_constructor_kwargs={"model": "resnet50.onnx"},
                        concurrency=4, num_gpus=1, batch_size=64)
    ds.write_parquet("predictions/")

Each actor builds one :class:`gpuops.InferenceSession` on the GPU Ray gave it (Ray sets
``CUDA_VISIBLE_DEVICES``, so ``device="auto"`` means that GPU) and maps batch columns to model inputs.
``import gpuops`` never imports Ray; this module does, when used.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from .batch import Table, concat, load_model_bytes, n_rows, run_batch
from .errors import FeedError, GpuopsError


def import_ray():
    try:
        import ray
    except ImportError:
        raise GpuopsError("gpuops.ray needs Ray: pip install 'gpuops[ray]'") from None
    return ray


def _resolve(model: Any) -> Any:
    """A model passed through the object store arrives as an ObjectRef inside constructor kwargs."""
    ray = import_ray()
    return ray.get(model) if isinstance(model, ray.ObjectRef) else model


class Predictor:
    """A callable class for ``Dataset.map_batches``: one :class:`~gpuops.InferenceSession` per actor.

    ``model`` is a path (seen by every worker), bytes or an ``onnx.ModelProto`` (or an ObjectRef to
    bytes, from ``ray.put``). ``input_columns`` maps model input names to column names (default:
    the same names); ``output_columns`` maps output names to column names. Each batch is returned
    with the outputs added beside its columns. ``session_options`` go to the session
    (``memory_limit``, ``cuda_graph``...).
    """

    def __init__(self, model, *, device: str = "auto", input_columns: Mapping[str, str] | None = None,
                 output_columns: Mapping[str, str] | None = None, **session_options):
        from .onnx import InferenceSession

        self.session = InferenceSession(_resolve(model), device=device, **session_options)
        self.input_columns, self.output_columns = input_columns, output_columns

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_batch(self.session, batch, input_columns=self.input_columns, output_columns=self.output_columns)


class MDFSweep:
    """A callable class for ``Dataset.map_batches`` that runs an MDF model once per row of parameter
    overrides: a parameter sweep.

    Columns named like ``"node.param"`` (or mapped by ``param_columns``: parameter key -> column) are
    parameter values for that row; ``outputs`` picks the output ports to return (default: all), as
    columns of the same names. With ``time_increment``, each row integrates ``steps`` steps. A batch's
    rows run as one batched session (``MDFSession(..., batch=rows)``); a model that cannot be batched
    (ACT-R) is refused with the session's ``ModelError``.
    """

    def __init__(self, model, *, device: str = "auto", outputs: list[str] | None = None,
                 param_columns: Mapping[str, str] | None = None, time_increment: float | None = None,
                 steps: int = 1):
        self.model = _resolve(model)
        self.device, self.outputs = device, outputs
        self.param_columns = dict(param_columns or {})
        self.time_increment, self.steps = time_increment, int(steps)

    def _params(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.param_columns:
            missing = [c for c in self.param_columns.values() if c not in batch]
            if missing:
                raise FeedError(f"MDFSweep: no column(s) {missing} in the batch (it has {sorted(batch)})")
            return {key: np.asarray(batch[col]) for key, col in self.param_columns.items()}
        return {k: np.asarray(v) for k, v in batch.items() if "." in k}

    def _evaluate(self, session, params) -> dict:
        out = None
        for _ in range(self.steps):
            out = session.run(time_increment=self.time_increment, params=params)
        keys = self.outputs or sorted(out)
        unknown = [k for k in keys if k not in out]
        if unknown:
            raise GpuopsError(f"MDFSweep: unknown output(s) {unknown}; the model has {sorted(out)}")
        return {k: out[k] for k in keys}

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch = dict(batch)
        params = self._params(batch)
        from .mdf import MDFSession

        rows = n_rows(batch)
        outs = self._evaluate(MDFSession(self.model, device=self.device, batch=rows), params)
        batch.update({k: np.asarray(v).reshape(rows, *np.shape(v)[1:]) for k, v in outs.items()})
        return batch


# -- the `gpuops batch --ray` driver -----------------------------------------------------------------

def run_table(model, table: Table, *, batch_size: int = 64, device: str = "auto", address: str | None = None,
              workers: int | None = None, progress=None, input_columns=None, output_columns=None,
              **session_options) -> Table:
    """Every row of ``table`` through ``model`` on Ray actors (one per GPU, or ``workers``), in row order.
    Connects to the cluster at ``address`` (``"auto"`` or ``ray://...``), or starts a local Ray."""
    ray = import_ray()
    import pyarrow as pa
    import ray.data as rd

    if batch_size < 1:
        raise GpuopsError(f"batch size must be at least 1, got {batch_size}")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True, **({} if address else {"num_cpus": os.cpu_count() or 1}))
    gpus = int(ray.cluster_resources().get("GPU", 0)) if device != "cpu" else 0
    n = workers or max(gpus, 1)
    ctx = rd.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    cols = {k: (pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(v)) if v.ndim > 1 else pa.array(v))
            for k, v in table.items()}
    whole = pa.table(cols)
    ds = rd.from_arrow([whole.slice(i, batch_size) for i in range(0, max(whole.num_rows, 1), batch_size)])
    model_ref = ray.put(load_model_bytes(model))
    ds = ds.map_batches(Predictor, batch_size=batch_size, batch_format="numpy", concurrency=n,
                        num_gpus=1 if gpus else 0, num_cpus=0 if gpus else 1,
                        fn_constructor_kwargs={"model": model_ref, "device": device, "input_columns": input_columns,
                                               "output_columns": output_columns, **session_options})
    parts = []
    for b in ds.iter_batches(batch_size=batch_size, batch_format="numpy"):
        parts.append({k: np.asarray(v) for k, v in b.items()})
        if progress is not None:
            progress(n_rows(parts[-1]))
    return concat(parts)
