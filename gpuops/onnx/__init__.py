"""ONNX front end: model loading, the plan built from it, shape specialization and the InferenceSession API
(the executor that runs a plan is :mod:`gpuops.executor`)."""

from .session import InferenceSession, NodeArg

__all__ = ["InferenceSession", "NodeArg"]
