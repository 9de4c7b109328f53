"""Writes the tf2onnx fixtures of ``tests/optimizer/exports/``: Keras blocks with swish and
hard_swish / hard_sigmoid (EfficientNet's and MobileNetV3's), random weights, converted by tf2onnx
from a tf.function with a dynamic batch.

Run by hand where tensorflow and tf2onnx are installed (a separate virtual environment: they pin
their own protobuf): ``python tests/optimizer/make_tf_exports.py``. The tests only read the files.
"""

from __future__ import annotations

import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exports")


def _block(act, gate, width=16):
    """Conv-BN-act stem, a depthwise conv, squeeze-excitation gated by ``gate``, a projection and a
    residual, NHWC as Keras has it; a dense head."""
    import keras
    from keras import layers

    x = inp = keras.Input((32, 32, 3), name="image")
    x = layers.Activation(act)(layers.BatchNormalization()(layers.Conv2D(width, 3, 2, "same", use_bias=False)(x)))
    r = x
    x = layers.Activation(act)(layers.BatchNormalization()(layers.Conv2D(width * 4, 1, use_bias=False)(x)))
    x = layers.Activation(act)(layers.BatchNormalization()(layers.DepthwiseConv2D(3, padding="same",
                                                                                  use_bias=False)(x)))
    s = layers.GlobalAveragePooling2D(keepdims=True)(x)
    s = layers.Conv2D(width * 4, 1, activation=gate)(layers.Conv2D(4, 1, activation=act)(s))
    x = layers.BatchNormalization()(layers.Conv2D(width, 1, use_bias=False)(layers.Multiply()([x, s])))
    x = layers.Add()([x, r])
    x = layers.GlobalAveragePooling2D()(layers.Activation(act)(layers.Conv2D(64, 1)(x)))
    return keras.Model(inp, layers.Dense(10)(x))


def main():
    import numpy as np
    import onnx
    import tensorflow as tf
    import tf2onnx

    rng = np.random.default_rng(0)
    # (the gate as tf.sigmoid: Keras 3's "sigmoid" activation after a swish trips tf2onnx 1.17's transpose optimizer)
    for name, act, gate in (("efficientnet_swish_tf2onnx", "swish", tf.sigmoid),
                            ("mobilenetv3_hardswish_tf2onnx", "hard_swish", "hard_sigmoid")):
        model = _block(act, gate)
        for layer in model.layers:  # non-trivial BatchNormalization statistics
            if layer.__class__.__name__ == "BatchNormalization":
                layer.set_weights([w + rng.uniform(0.1, 0.5, w.shape).astype(np.float32) for w in layer.get_weights()])
        fn = tf.function(lambda image, model=model: model(image, training=False))
        spec = (tf.TensorSpec((None, 32, 32, 3), tf.float32, name="image"),)
        proto, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
        proto.producer_name = f"tf2onnx {tf2onnx.__version__} (tensorflow {tf.__version__})"
        proto.doc_string = "random weights; written by tests/optimizer/make_tf_exports.py"
        path = os.path.join(HERE, name + ".onnx")
        onnx.save(proto, path)
        print(f"{path}: {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
