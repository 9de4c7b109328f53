"""Classic ML ops of the ``ai.onnx.ml`` domain, one module per family: preprocessing
(:mod:`.preprocess`), encoders and maps (:mod:`.encoders`), linear models and SVMs (:mod:`.linear`),
tree ensembles (:mod:`.trees`, the legacy ones in :mod:`.legacy_trees`). The legacy ops' score transforms are shared in :mod:`._common`."""

from . import encoders, legacy_trees, linear, preprocess, trees  # noqa: F401
