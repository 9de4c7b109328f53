"""PyTorch versions of the generated benchmark models, built from the ONNX model's own weights.

Only the models written for this suite have one (the light models are Caffe2 exports with no torch
source). Each function takes the ONNX model and returns ``run(feeds) -> [outputs]`` on torch's CPU
(or CUDA when gpuops runs on CUDA and torch sees a GPU).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def transformer_encoder(model: onnx.ModelProto, torch, dev) -> Callable:
    w = {k: torch.as_tensor(v, device=dev) for k, v in _weights(model).items()}
    batch, seq, heads, dh = (int(v) for v in w["shape_split"])
    layers = sorted({k.split("_")[0] for k in w if k.startswith("l") and k[1].isdigit()})
    F = torch.nn.functional

    def run(feeds):
        with torch.inference_mode():
            h = torch.as_tensor(feeds["x"], device=dev)
            for p in layers:
                q, k, v = ((h @ w[f"{p}_{n}"]).view(batch, seq, heads, dh).transpose(1, 2) for n in "qkv")
                att = torch.softmax(q @ k.transpose(-1, -2) * w["scale"], dim=-1) @ v
                h = F.layer_norm(h + att.transpose(1, 2).reshape(batch, seq, -1) @ w[f"{p}_o"], (h.shape[-1],),
                                 w[f"{p}_g1"], w[f"{p}_b1"])
                f = F.gelu(h @ w[f"{p}_ff1"]) @ w[f"{p}_ff2"]
                h = F.layer_norm(h + f, (h.shape[-1],), w[f"{p}_g2"], w[f"{p}_b2"])
            return [h.cpu().numpy()]

    return run


def lstm(model: onnx.ModelProto, torch, dev) -> Callable:
    w = _weights(model)
    hidden = w["R"].shape[-1]
    lstm = torch.nn.LSTM(w["W"].shape[-1], hidden, bidirectional=True).to(dev)
    # ONNX gate order is i, o, f, c; torch's is i, f, g(c), o
    order = np.concatenate([np.arange(hidden) + g * hidden for g in (0, 2, 3, 1)])
    with torch.no_grad():
        for d, suffix in enumerate(("", "_reverse")):
            getattr(lstm, f"weight_ih_l0{suffix}").copy_(torch.as_tensor(w["W"][d][order]))
            getattr(lstm, f"weight_hh_l0{suffix}").copy_(torch.as_tensor(w["R"][d][order]))
            getattr(lstm, f"bias_ih_l0{suffix}").copy_(torch.as_tensor(w["B"][d][:4 * hidden][order]))
            getattr(lstm, f"bias_hh_l0{suffix}").copy_(torch.as_tensor(w["B"][d][4 * hidden:][order]))
    head = torch.as_tensor(w["head"], device=dev)

    def run(feeds):
        with torch.inference_mode():
            y, _ = lstm(torch.as_tensor(feeds["x"], device=dev))  # [seq, batch, 2*hidden], fwd then bwd
            return [(y @ head).cpu().numpy()]

    return run


BUILDERS = {"transformer_encoder": transformer_encoder, "lstm": lstm}


def torch_peers(name: str, model: onnx.ModelProto, device: str, threads: int | None = None) -> dict[str, Callable]:
    """``threads``: torch's intra-op CPU threads (the count gpuops runs with)."""
    if name not in BUILDERS:
        return {}
    try:
        import torch
    except ImportError:
        return {}
    if threads:
        torch.set_num_threads(threads)
    on_cuda = device.startswith("cuda") and torch.cuda.is_available()
    dev = torch.device("cuda" if on_cuda else "cpu")
    return {f"torch-{dev.type}": BUILDERS[name](model, torch, dev)}
