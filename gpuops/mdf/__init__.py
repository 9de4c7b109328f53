"""MDF (ModECI Model Description Format) models on the CPU or a CUDA GPU.

    from gpuops.mdf import MDFSession
    s = MDFSession("model.json", device="auto")
    outputs = s.run()                      # one evaluate(): {"node.port": array}
    outputs = s.run(time_increment=0.01)   # integrate time derivatives one step
    outputs = s.run(params={"node.param": 2.0})   # override a parameter from now on
    s.execution_trace                      # node ids executed during the last run

    sweep = MDFSession("model.json", batch=1024)   # 1024 instances in lock-step (leading axis)
    sweep.run(params={"node.param": np.linspace(0, 1, 1024)})

Models are read with ``modeci_mdf`` (``pip install 'gpuops[mdf]'``), imported only when a model is
loaded. Expressions are parsed against a whitelist (never ``eval``), ``onnx::*`` functions run on
gpuops' own ONNX ops, and scheduling conditions follow graph-scheduler (run by gpuops' own scheduler,
see :mod:`gpuops.mdf.schedule`; batched evaluation: :mod:`gpuops.mdf.batch`).
"""

from .session import MDFSession

__all__ = ["MDFSession"]
