"""Errors raised by gpuops. Every user-facing failure is a :class:`GpuopsError`."""


class GpuopsError(Exception):
    """Base class of every error gpuops raises on purpose."""


class ModelError(GpuopsError):
    """The model is malformed or cannot be loaded."""


class UnsupportedOpError(GpuopsError):
    """A node uses an operator, domain or version gpuops does not implement."""


class FeedError(GpuopsError):
    """A feed passed to ``run`` has an unknown name, is missing, or has a wrong dtype/shape."""


class NodeError(GpuopsError):
    """An op failed while running; the message names the node and op."""


class DeviceError(GpuopsError):
    """The requested device is unknown or unusable."""


class OutOfMemoryError(NodeError):
    """The device ran out of memory (or hit the session's memory limit) while running a node."""
