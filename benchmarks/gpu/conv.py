"""gpuops' CUDA Conv (im2col kernel, cuBLAS GEMM, bias epilogue) in TFLOP/s, against ``cupy.matmul``
of the same GEMM and torch's cuDNN conv (TF32 off) when torch is there, with the difference from
onnxruntime's CPU conv and from cuDNN.

    python3 -m benchmarks.gpu.conv OUT/perf.json [--shapes all|small]

The conv runs as a one-node model through ``gpuops.InferenceSession`` (input and output on the device),
so a run includes the session's per-run cost (tens of microseconds): the small shapes show it. Times
are CUDA events on the current stream (wall clock on the stand-in, where TFLOP/s mean nothing).
The record goes under ``conv``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import gpuops

from .common import MODE, REAL, RTOL, cuda_device, device_sync, fmt, merge, short, timed

SHAPES = [  # name, N, C, H, W, M, k, stride, pad
    ("3x3 256->256 @14x14 b32", 32, 256, 14, 14, 256, 3, 1, 1),
    ("1x1 1024->256 @14x14 b32", 32, 1024, 14, 14, 256, 1, 1, 0),
    ("3x3 512->512 @7x7 b32", 32, 512, 7, 7, 512, 3, 1, 1),
    ("7x7/2 3->64 @224 b32 (stem)", 32, 3, 224, 224, 64, 7, 2, 3),
    ("3x3 64->64 @56x56 b1", 1, 64, 56, 56, 64, 3, 1, 1),
    ("3x3 128->128 @28x28 b8", 8, 128, 28, 28, 128, 3, 1, 1),
]
SMALL = [  # for the stand-in, where the kernels run on the CPU emulator
    ("3x3 8->16 @12x12 b2", 2, 8, 12, 12, 16, 3, 1, 1),
    ("5x5/2 3->8 @20x20 b1 (stem-like)", 1, 3, 20, 20, 8, 5, 2, 2),
]


def conv_model(N, C, H, W, M, k, s, p, w: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, M, Ho, Wo])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def event_ms(lib, fn, reps: int = 20) -> float:
    """Median CUDA-event time of ``fn()`` on the current stream, in ms."""
    fn()
    fn()
    start, end = lib.cuda.Event(), lib.cuda.Event()
    ts = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(lib.cuda.get_elapsed_time(start, end))
    return float(np.median(ts))


def one_shape(shape, dev, torch) -> dict:
    name, N, C, H, W, M, k, s, p = shape
    r: dict = {"shape": name, "problems": []}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((M, C, k, k)) / np.sqrt(C * k * k)).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    model = conv_model(N, C, H, W, M, k, s, p, w, b)
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    K, cols = C * k * k, N * Ho * Wo
    flops = 2.0 * M * K * cols
    r.update(gemm=[M, K, cols], gflop=round(flops / 1e9, 3))

    sess = gpuops.InferenceSession(model, device="cuda")
    xd = {"x": dev.asarray(x)}
    run = lambda: sess.run(None, xd, output_device="device")[0]  # noqa: E731
    y = dev.to_host(run())
    a2 = dev.asarray(rng.standard_normal((M, K)).astype(np.float32))
    b2 = dev.asarray(rng.standard_normal((K, cols)).astype(np.float32))
    lib = dev.lib
    matmul = lambda: (getattr(lib, "matmul", None) or dev.xp.matmul)(a2, b2)  # noqa: E731
    if REAL:
        t_conv, t_mm = event_ms(lib, run), event_ms(lib, matmul)
    else:
        sync = lambda: device_sync(dev)  # noqa: E731
        t_conv, t_mm = timed(run, sync, reps=3, warm=1)["median_ms"], timed(matmul, sync, reps=3, warm=1)["median_ms"]
    r.update(gpuops_ms=round(t_conv, 4), gpuops_tflops=round(flops / t_conv / 1e9, 2), matmul_ms=round(t_mm, 4),
             matmul_tflops=round(flops / t_mm / 1e9, 2), gpuops_over_matmul=round(t_conv / t_mm, 2))
    sess.close()
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 4
        ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        d = float(np.abs(y - ref).max()) / float(np.abs(ref).max())
        r["rel_diff_vs_ort"] = d
        if d > RTOL:
            r["problems"].append(f"differs from onnxruntime by {fmt(d)} of max |y| > {RTOL:g}")
    except ImportError as e:
        r["ort"] = f"skipped: {short(e)}"
    if torch is None:
        r["cudnn"] = "SKIPPED: no GPU" if not REAL else "SKIPPED: no torch with CUDA"
        return r
    tx, tw, tb = (torch.from_dlpack(dev.asarray(a)) for a in (x, w, b))
    f = lambda: torch.nn.functional.conv2d(tx, tw, tb, stride=s, padding=p)  # noqa: E731
    ref = f()
    t = event_ms(lib, f)
    d = float(np.abs(y - ref.cpu().numpy()).max()) / float(ref.abs().max())
    r.update(cudnn_ms=round(t, 4), cudnn_tflops=round(flops / t / 1e9, 2), rel_diff_vs_cudnn=d)
    if d > RTOL:
        r["problems"].append(f"differs from cuDNN by {fmt(d)} of max |y| > {RTOL:g}")
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shapes", choices=("all", "small"), default="all" if REAL else "small")
    a = ap.parse_args(argv)
    dev = cuda_device()
    torch = None
    if REAL:
        try:
            import torch

            if not torch.cuda.is_available():
                torch = None
            else:
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False
        except ImportError:
            torch = None
    res: dict = {"mode": MODE, "device": str(dev), "cudnn": "torch " + torch.__version__ if torch else "SKIPPED",
                 "shapes": []}
    bad = 0
    for shape in SHAPES if a.shapes == "all" else SMALL:
        try:
            r = one_shape(shape, dev, torch)
        except Exception as e:
            r = {"shape": shape[0], "problems": [short(e, 800)]}
        bad += bool(r["problems"])
        res["shapes"].append(r)
        merge(a.out, "conv", res)
        print({k: r.get(k) for k in ("shape", "gpuops_tflops", "matmul_tflops", "cudnn_tflops", "rel_diff_vs_ort",
                                     "rel_diff_vs_cudnn", "problems") if k in r}, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
