"""Writes the exported-model fixtures of ``tests/optimizer/exports/``: small networks of real
architectures (an EfficientNet block with SiLU and squeeze-excitation, a MobileNetV3 block with
HardSwish / HardSigmoid, a BERT encoder with a padding mask, a GPT-2 block with the tanh GELU), with
random weights, exported by torch's TorchScript exporter and its dynamo exporter, with dynamic axes.

Run by hand (it needs torch, and onnxscript for dynamo) after changing an architecture:
``python -m tests.optimizer.make_exports``. The tests only read the files it writes.
"""

from __future__ import annotations

import math
import os
import warnings

import onnx

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exports")


def _models(bench: bool = False):
    """name -> (module, example args, (input names, output names), dynamic axes). ``bench``: the
    sizes timed in the commit messages (EfficientNet-B0's first stages at 112 x 112, a BERT of
    hidden size 256, 4 layers, at sequence length 128), too large to vendor."""
    import torch
    from torch import nn

    class SE(nn.Module):
        def __init__(self, c, r, act, gate):
            super().__init__()
            self.reduce, self.expand, self.act, self.gate = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1), act(), gate()

        def forward(self, x):
            s = x.mean((2, 3), keepdim=True)
            return x * self.gate(self.expand(self.act(self.reduce(s))))

    def cba(cin, cout, k, stride=1, groups=1, act=nn.SiLU):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class MBConv(nn.Module):
        """EfficientNet's inverted residual: expand, depthwise, squeeze-excitation, project."""

        def __init__(self, c, e, act=nn.SiLU, gate=nn.Sigmoid):
            super().__init__()
            self.block = nn.Sequential(cba(c, c * e, 1, act=act), cba(c * e, c * e, 3, groups=c * e, act=act),
                                       SE(c * e, max(4, c // 4), act, gate), cba(c * e, c, 1, act=None))

        def forward(self, x):
            return x + self.block(x)

    class EfficientNetBlock(nn.Module):
        def __init__(self, act=nn.SiLU, gate=nn.Sigmoid, width=16, blocks=2):
            super().__init__()
            self.stem = cba(3, width, 3, 2, act=act)
            self.blocks = nn.Sequential(*(MBConv(width, 4, act, gate) for _ in range(blocks)))
            self.head = cba(width, 64, 1, act=act)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.head(self.blocks(self.stem(x)))
            return self.fc(torch.flatten(x.mean((2, 3)), 1))

    class SelfAttention(nn.Module):
        """As Hugging Face's BERT writes it: view / permute per head, additive mask, softmax."""

        def __init__(self, h, heads):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
            self.heads, self.d = heads, h // heads
            self.norm = nn.LayerNorm(h, eps=1e-12)

        def split(self, x):
            return x.view(x.size(0), x.size(1), self.heads, self.d).permute(0, 2, 1, 3)

        def forward(self, x, bias):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d) + bias
            ctx = torch.matmul(scores.softmax(-1), v).permute(0, 2, 1, 3).contiguous()
            ctx = ctx.view(ctx.size(0), ctx.size(1), self.heads * self.d)
            return self.norm(self.o(ctx) + x)

    class Layer(nn.Module):
        def __init__(self, h, heads, ffn, gelu="none"):
            super().__init__()
            self.attn = SelfAttention(h, heads)
            self.up, self.down, self.act = nn.Linear(h, ffn), nn.Linear(ffn, h), nn.GELU(approximate=gelu)
            self.norm = nn.LayerNorm(h, eps=1e-12)

        def forward(self, x, bias):
            x = self.attn(x, bias)
            return self.norm(self.down(self.act(self.up(x))) + x)

    class Bert(nn.Module):
        def __init__(self, vocab=50, h=32, heads=4, ffn=64, layers=2, positions=64, gelu="none"):
            super().__init__()
            self.words, self.pos, self.types = nn.Embedding(vocab, h), nn.Embedding(positions, h), nn.Embedding(2, h)
            self.norm = nn.LayerNorm(h, eps=1e-12)
            self.layers = nn.ModuleList(Layer(h, heads, ffn, gelu) for _ in range(layers))

        def forward(self, input_ids, attention_mask, token_type_ids):
            positions = torch.arange(input_ids.size(1), device=input_ids.device).unsqueeze(0)
            x = self.norm(self.words(input_ids) + self.pos(positions) + self.types(token_type_ids))
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return x

    torch.manual_seed(0)
    image = (torch.randn(1, 3, 112 if bench else 32, 112 if bench else 32),)
    n, s = (1, 128) if bench else (2, 7)
    tokens = (torch.randint(0, 50, (n, s)), torch.ones(n, s, dtype=torch.int64), torch.zeros(n, s, dtype=torch.int64))
    tokens[1][-1, s // 2 + 2:] = 0  # padding in the last row
    bert_names = (["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state"])
    seq = {0: "batch", 1: "sequence"}
    if bench:
        return {"efficientnet_silu": (EfficientNetBlock(width=24, blocks=4), image, (["image"], ["logits"]),
                                      {"image": {0: "batch"}}),
                "bert_encoder": (Bert(vocab=1000, h=256, heads=4, ffn=1024, layers=4, positions=512), tokens,
                                 bert_names, dict.fromkeys(bert_names[0], seq))}
    return {
        "efficientnet_silu": (EfficientNetBlock(), image, (["image"], ["logits"]), {"image": {0: "batch"}}),
        "mobilenetv3_hardswish": (EfficientNetBlock(nn.Hardswish, nn.Hardsigmoid), image, (["image"], ["logits"]),
                                  {"image": {0: "batch"}}),
        "bert_encoder": (Bert(), tokens, bert_names, dict.fromkeys(bert_names[0], seq)),
        "gpt2_tanh_gelu": (Bert(gelu="tanh", layers=1), tokens, bert_names, dict.fromkeys(bert_names[0], seq)),
    }


def _randomize_batchnorm(model):
    """Non-trivial running statistics, so that a folded BatchNormalization is checked."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


EXPORTS = [  # (file name, model, exporter, opset)
    ("efficientnet_silu_torchscript17", "efficientnet_silu", "torchscript", 17),
    ("efficientnet_silu_dynamo18", "efficientnet_silu", "dynamo", 18),
    ("mobilenetv3_hardswish_torchscript13", "mobilenetv3_hardswish", "torchscript", 13),
    ("mobilenetv3_hardswish_torchscript17", "mobilenetv3_hardswish", "torchscript", 17),
    ("mobilenetv3_hardswish_dynamo18", "mobilenetv3_hardswish", "dynamo", 18),
    ("bert_encoder_torchscript14", "bert_encoder", "torchscript", 14),
    ("bert_encoder_torchscript17", "bert_encoder", "torchscript", 17),
    ("bert_encoder_dynamo18", "bert_encoder", "dynamo", 18),
    ("gpt2_tanh_gelu_torchscript14", "gpt2_tanh_gelu", "torchscript", 14),
    ("gpt2_tanh_gelu_dynamo18", "gpt2_tanh_gelu", "dynamo", 18),
]


def export(name, model, args, names, dynamic, exporter, opset, folder=HERE) -> str:
    import torch

    path = os.path.join(folder, name + ".onnx")
    kwargs = dict(input_names=names[0], output_names=names[1], opset_version=opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, args, path, dynamo=False, dynamic_axes=dynamic, do_constant_folding=True,
                              **kwargs)
        else:
            shapes = tuple({a: torch.export.Dim.DYNAMIC for a in dynamic[k]} for k in names[0])
            torch.onnx.export(model, args, path, dynamo=True, dynamic_shapes=shapes, external_data=False,
                              optimize=True, **kwargs)
    m = onnx.load(path)
    m.producer_name = f"torch {torch.__version__} {exporter}"
    m.doc_string = "random weights; written by tests/optimizer/make_exports.py"
    onnx.save(m, path)
    return path


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", metavar="DIR", help="write the bench-size models there instead")
    a = ap.parse_args(argv)
    folder = a.bench or HERE
    os.makedirs(folder, exist_ok=True)
    models = _models(bench=bool(a.bench))
    for name, key, exporter, opset in EXPORTS:
        if key not in models:
            continue
        model, args, names, dynamic = models[key]
        _randomize_batchnorm(model)
        model.eval()
        path = export(name, model, args, names, dynamic, exporter, opset, folder)
        print(f"{path}: {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
