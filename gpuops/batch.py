"""Batch inference over a table of rows: ``gpuops batch MODEL --input IN --output OUT``.

A table is a dict of column name -> NumPy array whose first axis is the row. It is read from and
written to either a Parquet file (tensor cells as Arrow ``fixed_shape_tensor`` columns, the form Ray
Data reads and writes; needs ``pyarrow``) or a folder of ``.npy`` files (one per column, named after
it) or ``.npz`` shards (each holding every column for a run of rows, concatenated in file-name order).

Model inputs are fed from the columns of the same name (or ``input_columns``); the outputs come back
as new columns. Columns that are not model inputs (ids, labels...) are carried through to the output,
so rows can be joined back. The same code writes the output whether the rows ran in-process
(:func:`run_table`) or on Ray actors (:mod:`gpuops.ray`), so both give identical files.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from .errors import FeedError, GpuopsError

Table = dict[str, np.ndarray]


# -- reading and writing tables --------------------------------------------------------------------

def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise GpuopsError("Parquet files need pyarrow (pip install 'gpuops[ray]' or pyarrow); "
                          "a folder of .npy/.npz files needs nothing more") from None
    return pyarrow


def read_table(path: str | os.PathLike) -> Table:
    """A Parquet file, a single ``.npy`` file (one column, named after the file) or ``.npz`` file
    (one column per array), or a folder of ``.npy`` columns / ``.npz`` shards -> columns."""
    path = Path(path)
    if not path.exists():
        raise GpuopsError(f"input {str(path)!r} does not exist")
    if path.is_file() and path.suffix.lower() == ".npy":
        return _same_rows({path.stem: _load(path)}, str(path))
    if path.is_file() and path.suffix.lower() == ".npz":
        return _load_npz(path)
    if _is_parquet(path):
        if not path.is_file():
            raise GpuopsError(f"input {str(path)!r} is not a file")
        pa = _pyarrow()
        try:
            table = pa.parquet.read_table(path)
        except Exception as e:
            raise GpuopsError(f"cannot read Parquet file {str(path)!r}: {e}") from None
        return {name: _column_to_numpy(table.column(name), name) for name in table.column_names}
    if not path.is_dir():
        raise GpuopsError(f"input {str(path)!r} is not a .parquet, .npy or .npz file, nor a folder of .npy/.npz files")
    npy, npz = sorted(path.glob("*.npy")), sorted(path.glob("*.npz"))
    if npy and npz:
        raise GpuopsError(f"{str(path)!r} mixes .npy columns and .npz shards; use one form")
    if not npy and not npz:
        raise GpuopsError(f"{str(path)!r} holds no .npy or .npz files")
    if npy:
        return _same_rows({f.stem: _load(f) for f in npy}, str(path))
    shards = [_load_npz(f) for f in npz]
    names = list(shards[0])
    for f, s in zip(npz, shards):
        if sorted(s) != sorted(names):
            raise GpuopsError(f"shard {f.name!r} has columns {sorted(s)}, the first shard {sorted(names)}")
    return {k: np.concatenate([s[k] for s in shards]) for k in names}


def _load(f: Path) -> np.ndarray:
    try:
        value = np.load(f, allow_pickle=False)
    except Exception as e:
        raise GpuopsError(f"cannot read {str(f)!r}: {e}") from None
    if not isinstance(value, np.ndarray):
        value.close()
        raise GpuopsError(f"{str(f)!r} is an .npz archive, not a single .npy array")
    return value


def _load_npz(f: Path) -> Table:
    try:
        with np.load(f, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                raise GpuopsError(f"{str(f)!r} is a single .npy array, not an .npz archive")
            return _same_rows({k: z[k] for k in z.files}, str(f))
    except GpuopsError:
        raise
    except Exception as e:
        raise GpuopsError(f"cannot read {str(f)!r}: {e}") from None


def _column_to_numpy(col, name: str) -> np.ndarray:
    pa = _pyarrow()
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(col.type, pa.FixedShapeTensorType):
        return col.to_numpy_ndarray()
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type):
        try:
            return np.stack([np.asarray(v) for v in col.to_pylist()])
        except ValueError:
            raise GpuopsError(f"column {name!r} holds rows of different shapes; batch inference needs "
                              "one shape per column") from None
    return col.to_numpy(zero_copy_only=False)


def _same_rows(table: Table, where: str) -> Table:
    rows = {k: (v.shape[0] if v.ndim else None) for k, v in table.items()}
    if None in rows.values() or len(set(rows.values())) > 1:
        raise GpuopsError(f"{where}: every column needs a leading row axis of the same length, got "
                          f"{ {k: tuple(v.shape) for k, v in table.items()} }")
    return table


def n_rows(table: Table) -> int:
    return next(iter(table.values())).shape[0] if table else 0


def check_output(path: str | os.PathLike) -> None:
    """Refuse, before any row runs, an output :func:`write_table` could not write: Parquet without
    pyarrow, a single ``.npy`` file (a table has several columns), a folder that is a file."""
    path = Path(path)
    if _is_parquet(path):
        _pyarrow()
    elif path.suffix.lower() == ".npy":
        raise GpuopsError(f"output {str(path)!r}: a table is several columns; write a .npz file, a .parquet "
                          "file or a folder (one .npy per column)")
    elif path.suffix.lower() != ".npz" and path.exists() and not path.is_dir():
        raise GpuopsError(f"output {str(path)!r} is a file; the output is a folder (one .npy per column), "
                          "or name a .npz or .parquet file")
    if path.suffix.lower() in (".npz", ".parquet", ".pq") and not path.parent.is_dir():
        raise GpuopsError(f"output {str(path)!r}: the folder {str(path.parent)!r} does not exist")


def save_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """One ``.npy`` entry per array in an ``.npz`` archive, keyed by name as given (``np.load``
    reads it back; strings are stored as NumPy unicode, never pickled)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in arrays.items():
            value = np.asarray(value)
            if value.dtype == object:
                value = value.astype(str)
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, value, allow_pickle=False)


def write_table(path: str | os.PathLike, table: Table) -> None:
    """Columns -> a Parquet file (``*.parquet``), an ``.npz`` file, or a folder with one ``.npy`` per
    column."""
    path = Path(path)
    if path.suffix.lower() == ".npz":
        save_npz(path, table)
        return
    if _is_parquet(path):
        pa = _pyarrow()
        cols = {}
        for k, v in table.items():
            v = np.ascontiguousarray(v)
            cols[k] = pa.FixedShapeTensorArray.from_numpy_ndarray(v) if v.ndim > 1 else pa.array(v)
        path.parent.mkdir(parents=True, exist_ok=True)
        pa.parquet.write_table(pa.table(cols), path)
        return
    path.mkdir(parents=True, exist_ok=True)
    for k, v in table.items():
        np.save(path / f"{_file_name(k)}.npy", v, allow_pickle=False)


def _file_name(column: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in column)


# -- feeding a model ---------------------------------------------------------------------------------

def feeds_of(session, batch: Mapping[str, np.ndarray], input_columns: Mapping[str, str] | None = None,
             first_row: int | None = None) -> dict[str, np.ndarray]:
    """The session's feeds from a batch of columns; a missing column or a cell of the wrong shape or
    dtype is a :class:`FeedError` naming the rows of the batch (``first_row``: the batch's offset)."""
    columns = dict(input_columns or {})
    where = describe_rows(session, batch, columns, first_row)
    feeds = {}
    for arg in session.get_inputs():
        col = columns.get(arg.name, arg.name)
        if col not in batch:
            raise FeedError(f"{where}: no column {col!r} for model input {arg.name!r}; the batch has "
                            f"{sorted(batch)}")
        value = np.asarray(batch[col])
        if value.dtype == object:
            raise FeedError(f"{where}: column {col!r} holds rows of different shapes or types; model input "
                            f"{arg.name!r} wants {arg.type} {arg.shape}")
        if arg.dtype is not None and value.dtype != arg.dtype:  # never cast silently, as run() does not
            raise FeedError(f"{where}: column {col!r} is {value.dtype}, model input {arg.name!r} wants "
                            f"{arg.type}" + (" (gpuops batch --cast converts it)" if _castable(value.dtype, arg.dtype)
                                             else ""))
        feeds[arg.name] = value
    return feeds


def _castable(have: np.dtype, want: np.dtype) -> bool:
    """A cast ``--cast`` makes: within a kind of number (float64 -> float32, int32 -> int64...)."""
    return np.dtype(have).kind == np.dtype(want).kind and np.dtype(have).kind in "iuf"


def model_inputs(model) -> dict[str, np.dtype | None]:
    """The model's graph inputs a table must feed (initializers that are also inputs are optional, so
    not listed) and their dtypes, from the model file without building a session."""
    from .dtypes import np_dtype
    from .onnx.model import load_model

    graph = load_model(model).graph
    inits = {t.name for t in graph.initializer}
    out = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        try:
            out[vi.name] = np.dtype(np_dtype(t.elem_type)) if t is not None and t.elem_type else None
        except Exception:  # a type NumPy has no dtype for: the session reports it
            out[vi.name] = None
    return out


def prepare_columns(table: Table, inputs: Mapping[str, np.dtype | None], *, cast: bool = False) -> tuple[Table, dict]:
    """Check the table against the model's inputs before any row runs: returns the table (with
    ``cast``, columns of another width of the same kind converted to the input's dtype) and the
    ``input_columns`` to use (a table of one column feeds a model of one input whatever its name).
    A missing column or a dtype that differs is a :class:`FeedError`."""
    columns = {}
    if len(inputs) == 1 and len(table) == 1 and next(iter(inputs)) not in table:
        columns = {next(iter(inputs)): next(iter(table))}
    table = dict(table)
    for name, dtype in inputs.items():
        col = columns.get(name, name)
        if col not in table:
            raise FeedError(f"no column {col!r} for model input {name!r}; the table has {sorted(table)}")
        have = table[col].dtype
        if dtype is None or have == dtype:
            continue
        if cast and _castable(have, dtype):
            table[col] = table[col].astype(dtype)
        else:
            hint = " (--cast converts it)" if _castable(have, dtype) and not cast else ""
            raise FeedError(f"column {col!r} is {have}, model input {name!r} wants {dtype}{hint}")
    return table, columns


def describe_rows(session, batch: Mapping[str, np.ndarray], input_columns: Mapping[str, str],
                  first_row: int | None) -> str:
    """How an error names a batch: its row range when known, else the range of an integer key column
    (an id that is not a model input), else its size."""
    rows = n_rows(dict(batch))
    if first_row is not None:
        return f"rows {first_row}..{first_row + rows - 1}"
    inputs = {input_columns.get(a.name, a.name) for a in session.get_inputs()}
    for name, col in batch.items():
        col = np.asarray(col)
        if name not in inputs and col.ndim == 1 and col.dtype.kind in "iu" and col.size:
            return f"the batch of {rows} rows with {name} {col.min()}..{col.max()}"
    return f"a batch of {rows} rows"


def run_batch(session, batch: Mapping[str, np.ndarray], *, input_columns=None, output_columns=None,
              first_row: int | None = None) -> Table:
    """Run one batch; returns the batch's columns with the outputs added (``output_columns`` renames
    them: model output name -> column name). A model whose batch axis is fixed runs the rows in chunks
    of that size."""
    batch = dict(batch)
    feeds = feeds_of(session, batch, input_columns, first_row)
    rows = n_rows(batch)
    fixed = _fixed_batch(session)
    names = [o.name for o in session.get_outputs()]
    try:
        if fixed is None or fixed == rows:
            outs = session.run(names, feeds)
        elif rows % fixed:
            raise FeedError(f"the model's batch axis is fixed at {fixed}; a batch of {rows} rows does not divide")
        else:
            parts = [session.run(names, {k: v[i:i + fixed] for k, v in feeds.items()}) for i in range(0, rows, fixed)]
            outs = [np.concatenate(p) for p in zip(*parts)]
    except FeedError as e:
        raise FeedError(f"{describe_rows(session, batch, dict(input_columns or {}), first_row)}: {e}") from None
    rename = dict(output_columns or {})
    for name, value in zip(names, outs):
        batch[rename.get(name, name)] = np.asarray(value)
    return batch


def _fixed_batch(session) -> int | None:
    dims = {a.shape[0] for a in session.get_inputs() if a.shape}
    fixed = [d for d in dims if isinstance(d, int) and d > 0]
    return fixed[0] if len(fixed) == 1 and len(dims) == 1 else None


def batches(table: Table, batch_size: int) -> Iterator[tuple[int, Table]]:
    for start in range(0, n_rows(table), batch_size):
        yield start, {k: v[start:start + batch_size] for k, v in table.items()}


def concat(parts: list[Table]) -> Table:
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def run_table(model, table: Table, *, batch_size: int = 64, device: str = "auto", progress: Callable | None = None,
              input_columns=None, output_columns=None, **session_options) -> Table:
    """Every row of ``table`` through ``model`` in-process, ``batch_size`` rows at a time."""
    from .onnx import InferenceSession

    if batch_size < 1:
        raise GpuopsError(f"batch size must be at least 1, got {batch_size}")
    session = InferenceSession(model, device=device, **session_options)
    parts = []
    for start, batch in batches(table, batch_size):
        parts.append(run_batch(session, batch, input_columns=input_columns, output_columns=output_columns,
                               first_row=start))
        if progress is not None:
            progress(n_rows(batch))
    return concat(parts)


class Progress:
    """A one-line progress bar on stderr: rows done, rows/s and the time left."""

    def __init__(self, total: int, stream=None, min_interval: float = 0.2):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        self.t0 = self._last = time.perf_counter()
        self.min_interval = min_interval
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def __call__(self, rows: int) -> None:
        self.done += rows
        now = time.perf_counter()
        if now - self._last >= self.min_interval or self.done >= self.total:
            self._last = now
            self.stream.write(("\r" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
            self.stream.flush()

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} rows  "
                f"{rate:,.1f} rows/s  ETA {eta:,.1f} s")

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def load_model_bytes(model: Any) -> bytes:
    """A model path, bytes or ModelProto as serialized bytes (what travels to remote workers)."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        from .onnx.model import load_model

        return load_model(model).SerializeToString()
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise GpuopsError(f"model must be a path, bytes or onnx.ModelProto, not {type(model).__name__}")
