"""Rebuild the corpus' exporter models: ``python benchmarks/corpus/generate.py [--only NAME,...]``.

Small real architectures defined here, with seeded random weights, exported by the real exporters:
torch's TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) and its dynamo exporter
(``dynamo=True``, which needs onnxscript), and skl2onnx on scikit-learn models fitted on its bundled
data sets. The files go to ``tests/corpus/models/`` (vendored: each is well under 2 MB) and their
entries, sha256 included, replace the ``"kind": "exported"`` entries of ``manifest.json``.

Needs torch (``pip install torch``; measured with 2.13.0, CPU build), onnxscript, scikit-learn and
skl2onnx. The exporters' output changes with their versions: the manifest records the versions used.
The TorchScript exporter's files are the same byte for byte on a rerun; the dynamo exporter's are not
(their value names differ), so ``--only`` rebuilds just the entries named.

- ``resnet_small``: ResNet-18's layout (BasicBlocks 2-2-2-2, BatchNorm, max pool, average pool) at
  widths 8-16-32-64, 64x64 RGB.
- ``effnet_small``: EfficientNet-B0-like MBConv blocks (1x1 expand, depthwise 3x3 / 5x5, squeeze and
  excitation, SiLU everywhere, residuals).
- ``mobilenetv3_small``: MobileNetV3-like blocks (HardSwish, HardSigmoid squeeze-excitation, ReLU).
- ``mobilenetv2_small``: MobileNetV2's inverted residuals (ReLU6, no squeeze-excitation), half width.
- ``convnext_small``: ConvNeXt blocks (depthwise 7x7, LayerNorm over channels through permutes, 4x
  MLP with erf GELU, layer scale), patchify stem, 3 stages at widths 16-32-64.
- ``vit_tiny``: a ViT (8x8 patch embedding, class token, learned positions, torch's
  nn.TransformerEncoder with pre-LayerNorm and GELU, 2 layers, 4 heads, hidden 32).
- ``bert_tiny``: a BERT encoder (word, position and token-type embeddings, 2 layers, 4 heads, hidden
  32, erf GELU, post-LayerNorm, additive attention mask), dynamic batch and sequence.
- ``gpt2_tiny``: a GPT-2 decoder with past keys and values (2 layers, 4 heads, hidden 32, pre-LayerNorm,
  tanh GELU, causal mask over past + new tokens), dynamic batch, sequence and past length.
- onnxruntime's model tools on those exports (what users run before deploying): the transformer
  optimizer (``bert_tiny_ortopt``, ``gpt2_tiny_ortopt``: Attention, SkipLayerNormalization, FastGelu...),
  dynamic quantization (``bert_tiny_qdynamic``: DynamicQuantizeLinear, MatMulInteger), static
  quantization (``resnet_small_qdq``: QDQ, u8 activations, s8 per-channel weights;
  ``resnet_small_qoperator``: QLinearConv), float16 conversion (``effnet_small_fp16``, inputs and
  outputs kept float32).
- skl2onnx: ``skl_logreg`` (StandardScaler + LogisticRegression: Scaler, LinearClassifier, Normalizer),
  ``skl_forest`` (RandomForestRegressor: TreeEnsembleRegressor), ``skl_mlp`` (MLPClassifier),
  ``skl_kmeans`` (KMeans: distances through Gemm, ArgMin).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "corpus" / "models"
MANIFEST = Path(__file__).resolve().parent / "manifest.json"

# -- torch architectures --------------------------------------------------------------------------


def _torch_models():
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class ResNetSmall(nn.Module):
        def __init__(self, widths=(8, 16, 32, 64), classes=10):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], widths[0]
            for i, w in enumerate(widths):
                layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
                cin = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            y = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))

    class SqueezeExcite(nn.Module):
        def __init__(self, c, r, act, gate):
            super().__init__()
            self.reduce, self.expand = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)
            self.act, self.gate = act, gate

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * self.gate(self.expand(self.act(self.reduce(s))))

    class MBConv(nn.Module):
        def __init__(self, cin, cout, expand, k, stride, act, gate, se=True):
            super().__init__()
            mid = cin * expand
            layers = [] if expand == 1 else [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act()]
            layers += [nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False), nn.BatchNorm2d(mid), act()]
            if se:
                layers.append(SqueezeExcite(mid, max(4, cin // 4), act(), gate()))
            layers += [nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    class EffNetSmall(nn.Module):
        # (expand, channels, kernel, stride) per block, EfficientNet-B0's stages at a quarter of the width
        CFG = [(1, 8, 3, 1), (6, 12, 3, 2), (6, 12, 3, 1), (6, 20, 5, 2), (6, 20, 5, 1), (6, 40, 3, 2), (6, 56, 5, 1)]

        def __init__(self, classes=10):
            super().__init__()
            blocks, cin = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU()], 16
            for e, c, k, s in self.CFG:
                blocks.append(MBConv(cin, c, e, k, s, nn.SiLU, nn.Sigmoid))
                cin = c
            blocks += [nn.Conv2d(cin, 160, 1, bias=False), nn.BatchNorm2d(160), nn.SiLU()]
            self.features = nn.Sequential(*blocks)
            self.head = nn.Linear(160, classes)

        def forward(self, x):
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    class MobileNetV3Small(nn.Module):
        # (expand, channels, kernel, stride, activation, squeeze-excitation), MobileNetV3-Small's first blocks
        CFG = [(1, 16, 3, 2, nn.ReLU, True), (4, 24, 3, 2, nn.ReLU, False), (3, 24, 3, 1, nn.ReLU, False),
               (4, 40, 5, 2, nn.Hardswish, True), (6, 40, 5, 1, nn.Hardswish, True), (3, 48, 5, 1, nn.Hardswish, True)]

        def __init__(self, classes=10):
            super().__init__()
            blocks, cin = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()], 16
            for e, c, k, s, act, se in self.CFG:
                blocks.append(MBConv(cin, c, e, k, s, act, nn.Hardsigmoid, se))
                cin = c
            blocks += [nn.Conv2d(cin, 144, 1, bias=False), nn.BatchNorm2d(144), nn.Hardswish()]
            self.features = nn.Sequential(*blocks)
            self.head = nn.Sequential(nn.Linear(144, 256), nn.Hardswish(), nn.Linear(256, classes))

        def forward(self, x):
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    class SelfAttention(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.heads, self.dim = heads, hidden // heads
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))

        def split(self, x):  # (B, S, H) -> (B, heads, S, d)
            return x.view(x.shape[0], x.shape[1], self.heads, self.dim).transpose(1, 2)

        def attend(self, q, k, v, bias):
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dim) + bias
            y = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2)
            return self.o(y.reshape(y.shape[0], y.shape[1], self.heads * self.dim))

    class BertLayer(nn.Module):
        def __init__(self, hidden, heads, inter):
            super().__init__()
            self.attn = SelfAttention(hidden, heads)
            self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
            self.up, self.down = nn.Linear(hidden, inter), nn.Linear(inter, hidden)

        def forward(self, x, bias):
            a = self.attn
            x = self.ln1(x + a.attend(a.split(a.q(x)), a.split(a.k(x)), a.split(a.v(x)), bias))
            return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))

    class BertTiny(nn.Module):
        def __init__(self, vocab=100, hidden=32, heads=4, inter=64, layers=2, max_pos=32):
            super().__init__()
            self.words, self.pos, self.types = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden), nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(BertLayer(hidden, heads, inter) for _ in range(layers))
            self.pool = nn.Linear(hidden, hidden)

        def forward(self, input_ids, attention_mask, token_type_ids):
            pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            x = self.ln(self.words(input_ids) + self.pos(pos) + self.types(token_type_ids))
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            for layer in self.layers:
                x = layer(x, bias)
            return x, torch.tanh(self.pool(x[:, 0]))

    class GptBlock(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.attn = SelfAttention(hidden, heads)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x, past):
            a, h = self.attn, self.ln1(x)
            k = torch.cat([past[0], a.split(a.k(h))], 2)
            v = torch.cat([past[1], a.split(a.v(h))], 2)
            s, t = x.shape[1], k.shape[2]  # new tokens, past + new
            i = torch.arange(s, device=x.device).unsqueeze(1) + (t - s)
            causal = torch.arange(t, device=x.device).unsqueeze(0) <= i
            bias = torch.where(causal, 0.0, torch.finfo(x.dtype).min)
            x = x + a.attend(a.split(a.q(h)), k, v, bias)
            x = x + self.down(nn.functional.gelu(self.up(self.ln2(x)), approximate="tanh"))
            return x, torch.stack([k, v])

    class Gpt2Tiny(nn.Module):
        def __init__(self, vocab=100, hidden=32, heads=4, layers=2, max_pos=64):
            super().__init__()
            self.words, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden)
            self.blocks = nn.ModuleList(GptBlock(hidden, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(hidden)

        def forward(self, input_ids, past_0, past_1):
            p = past_0.shape[3]
            pos = torch.arange(p, p + input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            x = self.words(input_ids) + self.pos(pos)
            presents = []
            for block, past in zip(self.blocks, (past_0, past_1)):
                x, present = block(x, past)
                presents.append(present)
            return (torch.matmul(self.ln(x), self.words.weight.t()), *presents)

    class MobileNetV2Small(nn.Module):
        # (expand, channels, stride) per inverted residual, MobileNetV2's first stages at half width
        CFG = [(1, 8, 1), (6, 12, 2), (6, 12, 1), (6, 16, 2), (6, 16, 1), (6, 32, 2), (6, 32, 1), (6, 48, 1)]

        def __init__(self, classes=10):
            super().__init__()
            blocks, cin = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()], 16
            for e, c, s in self.CFG:
                blocks.append(MBConv(cin, c, e, 3, s, nn.ReLU6, None, se=False))
                cin = c
            blocks += [nn.Conv2d(cin, 320, 1, bias=False), nn.BatchNorm2d(320), nn.ReLU6()]
            self.features = nn.Sequential(*blocks)
            self.head = nn.Linear(320, classes)

        def forward(self, x):
            return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    class ChannelsLayerNorm(nn.LayerNorm):  # ConvNeXt's LayerNorm over the channels of NCHW
        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXtBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, 1, 3, groups=c)
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.up, self.down = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.gamma = nn.Parameter(torch.full((c,), 0.5))

        def forward(self, x):
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.gamma * self.down(nn.functional.gelu(self.up(y)))
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXtSmall(nn.Module):
        def __init__(self, widths=(16, 32, 64), depths=(1, 1, 2), classes=10):
            super().__init__()
            layers = [nn.Conv2d(3, widths[0], 4, 4), ChannelsLayerNorm(widths[0], eps=1e-6)]
            for i, (w, d) in enumerate(zip(widths, depths)):
                if i:
                    layers += [ChannelsLayerNorm(widths[i - 1], eps=1e-6), nn.Conv2d(widths[i - 1], w, 2, 2)]
                layers += [ConvNeXtBlock(w) for _ in range(d)]
            self.features = nn.Sequential(*layers)
            self.norm, self.head = nn.LayerNorm(widths[-1], eps=1e-6), nn.Linear(widths[-1], classes)

        def forward(self, x):
            return self.head(self.norm(self.features(x).mean((2, 3))))

    class ViTTiny(nn.Module):
        def __init__(self, patch=8, hidden=32, heads=4, layers=2, classes=10, size=64):
            super().__init__()
            self.embed = nn.Conv2d(3, hidden, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, (size // patch) ** 2 + 1, hidden) * 0.02)
            layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, classes)

        def forward(self, x):
            x = self.embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.head(self.norm(self.encoder(x))[:, 0])

    return {"resnet_small": ResNetSmall, "effnet_small": EffNetSmall, "mobilenetv3_small": MobileNetV3Small,
            "mobilenetv2_small": MobileNetV2Small, "convnext_small": ConvNeXtSmall, "vit_tiny": ViTTiny,
            "bert_tiny": BertTiny, "gpt2_tiny": Gpt2Tiny}


def _randomize_norms(model, seed):
    """Trained-looking BatchNorm statistics and LayerNorm affines (fresh ones are 0/1: an export would
    then hide what a trained model's normalization does)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
    return model.eval()


IMAGE = {"x": {"dtype": "float32", "shape": [1, 3, 64, 64], "dist": "normal", "scale": 1.0}}
TOKENS = {"input_ids": {"dtype": "int64", "shape": [2, 12], "dist": "integers", "low": 0, "high": 100},
          "attention_mask": {"dtype": "int64", "shape": [2, 12], "dist": "mask"},
          "token_type_ids": {"dtype": "int64", "shape": [2, 12], "dist": "integers", "low": 0, "high": 2}}
PAST = {"dtype": "float32", "shape": [2, 2, 4, 7, 8], "dist": "normal", "scale": 1.0}  # (k|v, B, heads, past, d)
DECODE = {"input_ids": {"dtype": "int64", "shape": [2, 3], "dist": "integers", "low": 0, "high": 100},
          "past_0": PAST, "past_1": PAST}

# name -> (input names, output names, dynamic axes {input: {axis: name}}, feeds)
TORCH_IO = {
    "resnet_small": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "effnet_small": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "mobilenetv3_small": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "mobilenetv2_small": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "convnext_small": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "vit_tiny": (["x"], ["logits"], {"x": {0: "batch"}}, IMAGE),
    "bert_tiny": (["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state", "pooler_output"],
                  {k: {0: "batch", 1: "sequence"} for k in TOKENS}, TOKENS),
    "gpt2_tiny": (["input_ids", "past_0", "past_1"], ["logits", "present_0", "present_1"],
                  {"input_ids": {0: "batch", 1: "sequence"}, "past_0": {1: "batch", 3: "past"},
                   "past_1": {1: "batch", 3: "past"}}, DECODE),
}


def export_torch(name: str, exporter: str, workdir: Path) -> Path:
    import torch
    from gpuops.bench.corpus import make_feeds

    torch.manual_seed(0)
    model = _randomize_norms(_torch_models()[name](), seed=1)
    inputs, outputs, axes, feeds = TORCH_IO[name]
    args = tuple(torch.from_numpy(v) for v in make_feeds(feeds, np.random.default_rng(0)).values())
    path = workdir / f"{name}_{exporter}.onnx"
    if exporter == "torchscript":
        torch.onnx.export(model, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    else:
        dims = {k: {a: torch.export.Dim.AUTO for a in v} for k, v in axes.items()}
        program = torch.onnx.export(model, args, input_names=inputs, output_names=outputs, dynamic_shapes=dims,
                                    opset_version=18, dynamo=True, external_data=False)
        program.save(str(path), external_data=False)
    return path


# -- onnxruntime's model tools ------------------------------------------------------------------------

ORT_TOOLS = {  # entry -> (source export, tool)
    "bert_tiny_ortopt": ("bert_tiny_torchscript", "optimizer-bert"),
    "gpt2_tiny_ortopt": ("gpt2_tiny_torchscript", "optimizer-gpt2"),
    "bert_tiny_qdynamic": ("bert_tiny_torchscript", "quantize_dynamic"),
    "resnet_small_qdq": ("resnet_small_torchscript", "quantize_static-QDQ"),
    "resnet_small_qoperator": ("resnet_small_torchscript", "quantize_static-QOperator"),
    "effnet_small_fp16": ("effnet_small_torchscript", "float16"),
}


def ort_tool(name: str, workdir: Path) -> Path:
    """``name``'s source export (already in OUT) through its onnxruntime tool."""
    import onnx
    from gpuops.bench.corpus import make_feeds

    source, tool = ORT_TOOLS[name]
    src, out = OUT / f"{source}.onnx", workdir / f"{name}.onnx"
    if tool.startswith("optimizer-"):
        from onnxruntime.transformers.optimizer import optimize_model

        model = optimize_model(str(src), model_type=tool.split("-")[1], num_heads=4, hidden_size=32, opt_level=0)
        model.save_model_to_file(str(out))
    elif tool == "quantize_dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    elif tool.startswith("quantize_static"):
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = workdir / f"{name}_pre.onnx"
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        rng = np.random.default_rng(7)
        batches = iter([make_feeds(TORCH_IO[source.rsplit("_", 1)[0]][3], rng) for _ in range(8)])

        class Calibration:
            def get_next(self):
                return next(batches, None)

        quantize_static(str(pre), str(out), Calibration(), quant_format=getattr(QuantFormat, tool.split("-")[1]),
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    else:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(out))
    return out


# -- skl2onnx ---------------------------------------------------------------------------------------


def export_sklearn(name: str, workdir: Path) -> tuple[Path, dict]:
    from skl2onnx import to_onnx
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits, load_iris
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    iris_x, iris_y = load_iris(return_X_y=True)
    digits_x, digits_y = load_digits(return_X_y=True)
    iris_x, digits_x = iris_x.astype(np.float32), digits_x.astype(np.float32)
    if name == "skl_logreg":
        est, x, opts = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(iris_x, iris_y), iris_x, {"zipmap": False}
    elif name == "skl_forest":
        est, x, opts = RandomForestRegressor(n_estimators=20, max_depth=8, random_state=0).fit(iris_x, iris_y), iris_x, None
    elif name == "skl_mlp":
        est = MLPClassifier(hidden_layer_sizes=(64, 32), max_iter=200, random_state=0).fit(digits_x, digits_y)
        x, opts = digits_x, {"zipmap": False}
    else:
        est, x, opts = KMeans(n_clusters=8, n_init=2, random_state=0).fit(digits_x), digits_x, None
    model = to_onnx(est, x[:1], options=opts, target_opset=18)
    path = workdir / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    # feeds: rows of the training data (its value range), batch 16
    lo, hi = float(x.min()), float(x.max())
    feeds = {model.graph.input[0].name: {"dtype": "float32", "shape": [16, x.shape[1]], "dist": "uniform",
                                         "low": lo, "high": hi}}
    return path, feeds


# -- manifest ---------------------------------------------------------------------------------------

SKLEARN = ("skl_logreg", "skl_forest", "skl_mlp", "skl_kmeans")
TORCH = [(n, e) for n in TORCH_IO for e in ("torchscript", "dynamo")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated entry names (default: all)")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import onnxruntime
    import sklearn
    import skl2onnx
    import torch

    only = {n for n in a.only.split(",") if n}
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": []}
    entries = {e["name"]: e for e in manifest["models"]}
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = ([(f"{n}_{e}", n, e) for n, e in TORCH] + [(n, n, "skl2onnx") for n in SKLEARN]
                + [(n, src, "onnxruntime") for n, (src, _) in ORT_TOOLS.items()])
        for entry_name, arch, exporter in jobs:
            if only and entry_name not in only:
                continue
            if exporter == "skl2onnx":
                path, feeds = export_sklearn(arch, Path(tmp))
                tool = f"skl2onnx {skl2onnx.__version__} (scikit-learn {sklearn.__version__})"
            elif exporter == "onnxruntime":  # arch: the source entry, whose feeds it takes
                path, feeds = ort_tool(entry_name, Path(tmp)), entries[arch]["feeds"]
                tool = f"onnxruntime {onnxruntime.__version__} {ORT_TOOLS[entry_name][1]} of {arch}"
            else:
                path, feeds = export_torch(arch, exporter, Path(tmp)), TORCH_IO[arch][3]
                tool = f"torch {torch.__version__} {'TorchScript' if exporter == 'torchscript' else 'dynamo'} exporter"
            dest = OUT / f"{entry_name}.onnx"
            dest.write_bytes(path.read_bytes())
            entries[entry_name] = {"name": entry_name, "kind": "exported", "file": dest.name, "vendored": True,
                                   "source": {"generator": "benchmarks/corpus/generate.py", "architecture": arch,
                                              "exporter": tool},
                                   "licence": "Apache-2.0 (this repository's)", "sha256": sha256(dest),
                                   "bytes": dest.stat().st_size, "feeds": feeds}
            print(f"{entry_name}: {dest.stat().st_size / 1e3:.0f} kB ({tool})")
    manifest["models"] = sorted(entries.values(), key=lambda e: (e["kind"] != "trained", e["name"]))
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
