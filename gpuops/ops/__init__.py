"""Op families, one module each, written once against ``xp``. Importing this package registers them."""

from . import (  # noqa: F401
    activation,
    cast,
    contrib,  # com.microsoft and com.microsoft.nchwc
    control,
    constants,  # Shape, Size, Identity, Constant, ConstantOfShape, Range, EyeLike
    conv,
    cpu,  # CPU overrides: native kernels, NumPy-only paths, weights prepared per session
    cuda,  # kernel-backed CUDA overrides of conv, quantization and detection ops
    detection,
    elementwise,
    indexing,
    legacy,
    linalg,
    loss,
    ml,
    norm,
    pool,
    quantize,
    random,
    reduce,
    resize,
    rnn,
    selection,  # Compress, Unique, NonZero, Where, OneHot
    sequence,
    shape,
    signal,
    softmax,
    text,
    training,
)
