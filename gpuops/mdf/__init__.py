"""MDF (ModECI Model Description Format) models on the CPU or a CUDA GPU.

    from gpuops.mdf import MDFSession
    s = MDFSession("model.json", device="auto")
    outputs = s.run()                      # one evaluate(): {"node.port": array}
    outputs = s.run(time_increment=0.01)   # integrate time derivatives one step
    s.execution_trace                      # node ids executed during the last run

Models are read with ``modeci_mdf`` (``pip install 'gpuops[mdf]'``), imported only when a model is
loaded. Expressions are parsed against a whitelist (never ``eval``), ``onnx::*`` functions run on
gpuops' own ONNX ops, and scheduling conditions are graph-scheduler's.
"""

from .session import MDFSession

__all__ = ["MDFSession"]
