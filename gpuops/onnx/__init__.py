"""ONNX front end: model loading, planning and the InferenceSession executor."""

from .session import InferenceSession, NodeArg

__all__ = ["InferenceSession", "NodeArg"]
