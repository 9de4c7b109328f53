"""GPU benchmarks of gpuops' custom kernels, compared in one run with what they should be measured
against:

* convolution (im2col + cuBLAS, depthwise, 1x1) vs a cuBLAS GEMM of equal FLOPs (cupy.matmul), and
  vs PyTorch's cuDNN conv2d when torch is installed;
* RoiAlign and NonMaxSuppression vs torchvision.ops.roi_align / batched_nms when installed;
* QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear vs the device's copy bandwidth (a
  device-to-device copy of the same number of bytes).

    python -m gpuops.bench.kernels [--out DIR] [--quick]

Prints one JSON document (and writes kernels.json under --out); each ``ratio`` is gpuops' median over
the peer's (below 1: gpuops is faster), as in every gpuops benchmark. Needs CuPy and a CUDA GPU; without
them it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path


def _timer(cupy, repeat: int):
    from cupyx.profiler import benchmark

    def run(fn) -> dict:
        r = benchmark(fn, n_repeat=repeat, n_warmup=3)
        gpu = sorted(float(t) * 1e3 for t in r.gpu_times.ravel())
        return {"median_ms": gpu[len(gpu) // 2], "min_ms": gpu[0]}

    return run


def _optional(name):
    try:
        return __import__(name)
    except Exception:
        return None


def conv_benchmarks(cupy, xp, time, quick: bool) -> list[dict]:
    from gpuops.ops.cuda import conv as cuda_conv

    torch = _optional("torch")
    cases = [  # name, X shape, W shape, attrs
        ("resnet-3x3", (32, 64, 56, 56), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
        ("resnet-3x3-stride2", (32, 128, 28, 28), (256, 128, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
        ("pointwise", (32, 256, 28, 28), (512, 256, 1, 1), {}),
        ("depthwise-3x3", (32, 256, 56, 56), (256, 1, 3, 3), dict(pads=[1, 1, 1, 1], group=256)),
        ("conv3d", (4, 32, 16, 32, 32), (64, 32, 3, 3, 3), dict(pads=[1] * 6)),
    ]
    if quick:
        cases = cases[:2]
    out = []
    for name, xs, ws, attrs in cases:
        for dtype in ("float32", "float16"):
            X = cupy.random.standard_normal(xs, dtype="float32").astype(dtype)
            W = cupy.random.standard_normal(ws, dtype="float32").astype(dtype)
            B = cupy.random.standard_normal(ws[0], dtype="float32").astype(dtype)
            Y = cuda_conv.conv(xp, X, W, B, **attrs)
            G = attrs.get("group", 1)
            O = Y.size // (Y.shape[0] * Y.shape[1])
            K = W.size // W.shape[0]  # Cg * prod(kernel)
            flops = 2 * Y.shape[0] * Y.shape[1] * O * K
            row = {"case": name, "dtype": dtype, "x": xs, "w": ws, "flops": flops,
                   "gpuops": time(lambda: cuda_conv.conv(xp, X, W, B, **attrs))}
            # the same FLOPs as one GEMM: [M, Cg*K] @ [Cg*K, N*O] per group
            a = cupy.random.standard_normal((G, ws[0] // G, K), dtype="float32").astype(dtype)
            b = cupy.random.standard_normal((G, K, Y.shape[0] * O), dtype="float32").astype(dtype)
            row["cublas_gemm_equal_flops"] = time(lambda: cupy.matmul(a, b))
            if torch is not None and len(xs) == 4:
                tx, tw, tb = (torch.as_tensor(v, device="cuda") for v in (X, W, B))
                pad = attrs.get("pads", [0] * 4)[0]
                stride = attrs.get("strides", [1, 1])[0]
                row["torch_cudnn"] = time(lambda: torch.nn.functional.conv2d(tx, tw, tb, stride, pad, 1, G))
            for k in ("cublas_gemm_equal_flops", "torch_cudnn"):
                if k in row:
                    row[k]["ratio"] = row["gpuops"]["median_ms"] / row[k]["median_ms"]  # gpuops / peer
            row["gpuops"]["tflops"] = flops / row["gpuops"]["median_ms"] / 1e9
            out.append(row)
    return out


def detection_benchmarks(cupy, xp, time, quick: bool) -> list[dict]:
    import numpy as np

    from gpuops.ops.cuda import detection

    torch, torchvision = _optional("torch"), _optional("torchvision")
    out = []
    rng = np.random.default_rng(0)
    # RoiAlign: a Mask R-CNN-like feature map and 1000 rois
    X = cupy.random.standard_normal((2, 256, 64, 64), dtype="float32")
    xy = rng.uniform(0, 400, (1000, 2))
    rois = cupy.asarray(np.concatenate([xy, xy + rng.uniform(8, 200, (1000, 2))], 1).astype(np.float32))
    bi = cupy.asarray(rng.integers(0, 2, 1000).astype(np.int64))
    kw = dict(output_height=7, output_width=7, sampling_ratio=2, spatial_scale=1 / 8)
    row = {"case": "roi_align 2x256x64x64, 1000 rois, 7x7",
           "gpuops": time(lambda: detection.roi_align(xp, X, rois, bi, half_pixel=True, **kw))}
    if torchvision is not None:
        tX = torch.as_tensor(X, device="cuda")
        tr = torch.cat([torch.as_tensor(bi, device="cuda")[:, None].float(), torch.as_tensor(rois, device="cuda")], 1)
        row["torchvision"] = time(lambda: torchvision.ops.roi_align(tX, tr, (7, 7), 1 / 8, 2, aligned=True))
        row["torchvision"]["ratio"] = row["gpuops"]["median_ms"] / row["torchvision"]["median_ms"]
    out.append(row)
    # NonMaxSuppression: 80 classes x 1000 boxes
    for n in ([1000] if quick else [1000, 4000]):
        xy = rng.uniform(0, 600, (1, n, 2))
        boxes = cupy.asarray(np.concatenate([xy, xy + rng.uniform(10, 150, (1, n, 2))], 2)[..., [1, 0, 3, 2]]
                             .astype(np.float32))
        scores = cupy.asarray(rng.random((1, 80, n)).astype(np.float32))
        host = (np.array([100], np.int64), np.array([0.5], np.float32), np.array([0.05], np.float32))
        row = {"case": f"nms 80 classes x {n} boxes",
               "gpuops": time(lambda: detection.non_max_suppression(xp, boxes, scores, *host))}
        if torchvision is not None:
            tb = torch.as_tensor(boxes[0][:, [1, 0, 3, 2]], device="cuda").repeat(80, 1)
            ts = torch.as_tensor(scores[0], device="cuda").reshape(-1)
            idx = torch.arange(80, device="cuda").repeat_interleave(n)

            def tv():
                keep = ts > 0.05
                return torchvision.ops.batched_nms(tb[keep], ts[keep], idx[keep], 0.5)

            row["torchvision_batched_nms"] = time(tv)
            row["torchvision_batched_nms"]["ratio"] = row["gpuops"]["median_ms"] / \
                row["torchvision_batched_nms"]["median_ms"]
        out.append(row)
    return out


def quantize_benchmarks(cupy, xp, time, quick: bool) -> list[dict]:
    import numpy as np

    from gpuops.ops.cuda import quantize as cuda_quant

    n = (16 if quick else 64) << 20
    x = cupy.random.standard_normal((n // 1024, 1024), dtype="float32")
    scale = cupy.asarray(np.float32(0.05))
    zp = cupy.asarray(np.int8(3))
    axis_scale = cupy.random.uniform(0.01, 0.1, 1024, dtype="float32")
    axis_zp = cupy.zeros(1024, dtype=cupy.int8)
    q = cuda_quant.quantize(xp, x, scale, zp)
    src, dst = cupy.empty(5 * n // 2, cupy.uint8), cupy.empty(5 * n // 2, cupy.uint8)
    copy = time(lambda: dst.__setitem__(Ellipsis, src))  # reads + writes 5n bytes, like a 4+1 byte op
    copy["gbps"] = 2 * src.nbytes / copy["median_ms"] / 1e6
    cases = {
        "quantize per-tensor f32->int8": lambda: cuda_quant.quantize(xp, x, scale, zp),
        "quantize per-axis f32->int8": lambda: cuda_quant.quantize(xp, x, axis_scale, axis_zp, axis=1),
        "dequantize per-tensor int8->f32": lambda: cuda_quant.dequantize(xp, q, scale, zp),
        "dynamic quantize f32->uint8": lambda: cuda_quant.DynamicQuantizeLinear(xp, x),
    }
    out = [{"case": f"device copy of {5 * n // 2} bytes", "reference": copy}]
    for name, fn in cases.items():
        t = time(fn)
        passes = 2 if name.startswith("dynamic") else 1  # dynamic reads x twice
        t["gbps"] = (5 * n + (passes - 1) * 4 * n) / t["median_ms"] / 1e6
        t["fraction_of_copy_bandwidth"] = t["gbps"] / copy["gbps"]
        out.append({"case": name, "elements": n, "gpuops": t})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder to write kernels.json into")
    ap.add_argument("--quick", action="store_true", help="fewer, smaller cases")
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args(argv)
    try:
        import array_api_compat.cupy as xp
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, or no GPU
        print(json.dumps({"skipped": f"needs CuPy and a CUDA GPU ({type(e).__name__}: {e})"}))
        return 0
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    time = _timer(cupy, a.repeat)
    result = {
        "env": {"gpu": name, "date": datetime.date.today().isoformat(), "cupy": cupy.__version__,
                "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "python": platform.python_version()},
        "conv": conv_benchmarks(cupy, xp, time, a.quick),
        "detection": detection_benchmarks(cupy, xp, time, a.quick),
        "quantize": quantize_benchmarks(cupy, xp, time, a.quick),
    }
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "kernels.json").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
