"""Loading MDF models through ``modeci_mdf`` (the ``mdf`` extra), imported only when needed."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import GpuopsError, ModelError


def mdf_module():
    """``modeci_mdf.mdf``, or a clear error naming the extra to install."""
    try:
        import modeci_mdf.mdf as mdf
    except ImportError as e:
        raise GpuopsError(f"MDF models need modeci-mdf: pip install 'gpuops[mdf]' ({e})") from None
    return mdf


def load_model(source):
    """A ``modeci_mdf`` Model from a ``.json``/``.yaml`` path or a Model (returned as is)."""
    mdf = mdf_module()
    if isinstance(source, mdf.Model):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ModelError(f"an MDF model is a path (.json/.yaml) or a modeci_mdf Model, not {type(source).__name__}")
    path = Path(source)
    if path.suffix.lower() not in (".json", ".yaml", ".yml"):
        raise ModelError(f"MDF model {str(path)!r}: expected a .json or .yaml file")
    if not path.is_file():
        raise ModelError(f"MDF model {str(path)!r} does not exist")
    try:
        return mdf.Model.from_file(str(path))
    except Exception as e:
        raise ModelError(f"MDF model {str(path)!r} cannot be read: {type(e).__name__}: {e}") from e


def select_graph(model, graph=None):
    """The graph with id ``graph`` (the first one when None)."""
    graphs = list(model.graphs or [])
    if not graphs:
        raise ModelError(f"MDF model {model.id!r} has no graphs")
    if graph is None:
        return graphs[0]
    for g in graphs:
        if g.id == graph:
            return g
    raise ModelError(f"MDF model {model.id!r} has no graph {graph!r}; its graphs are {[g.id for g in graphs]}")
