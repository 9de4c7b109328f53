"""onnxruntime contrib operators: the ``com.microsoft`` domain and the ``com.microsoft.nchwc`` blocked-layout
family, one module per family. They are written against ``xp`` like the ai.onnx ops and reuse those
ops' functions (convolution, pooling, normalization, quantization, recurrences...) wherever the
semantics coincide. Importing this package registers them.

``text`` (Tokenizer, MurmurHash3 on strings) works on the host by nature: strings never live on a device.
"""

from . import detection, math, nchwc, quantized, rnn, text, transformer  # noqa: F401
from . import attention, fusion, normalization, quantized_ort  # noqa: F401  (onnxruntime's tools' ops)
from . import generation  # noqa: F401  (convert_generation's BeamSearch, GreedySearch, Sampling)
from . import quantized_ordered  # noqa: F401  (the optimizer's QOrdered fusions)
from . import encoder_decoder  # noqa: F401  (T5's relative position bias)
from . import private  # noqa: F401  (gpuops.optimizer's private fused ops)

MS_DOMAIN = "com.microsoft"
NCHWC_DOMAIN = "com.microsoft.nchwc"
