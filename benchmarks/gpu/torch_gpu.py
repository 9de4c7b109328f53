"""torchvision's resnet50 on the same GPU, the peer for gpuops' resnet50 numbers (perf.py).

    python3 -m benchmarks.gpu.torch_gpu OUT/perf.json eager [--batches 1,32]
    python3 -m benchmarks.gpu.torch_gpu OUT/perf.json compile --seconds 200

``eager``: cuDNN with TF32 on (torch's default for convolutions) and off (gpuops computes in float32),
inputs on the GPU, and with the input copied from and the output back to the host. ``compile``:
torch.compile (TF32 off), while ``--seconds`` allow. torchvision's resnet50 is v1.5 (stride on the
3x3) with random weights; the light model is v1: the same layers and nearly the same work. Records go
under ``torch_eager`` and ``torch_compile``.
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import REAL, merge, short, timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("mode", choices=("eager", "compile"))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--seconds", type=float, default=240, help="compile: no new batch past this")
    a = ap.parse_args(argv)
    key = f"torch_{a.mode}"
    deadline = time.time() + a.seconds
    try:
        import torch
        import torchvision
    except ImportError as e:
        merge(a.out, key, {"skipped": short(e)})
        print("SKIPPED:", short(e))
        return 0
    if not (REAL and torch.cuda.is_available()):
        merge(a.out, key, {"skipped": "needs a CUDA GPU"})
        print("SKIPPED: needs a CUDA GPU")
        return 0
    sync = torch.cuda.synchronize
    m = torchvision.models.resnet50(weights=None).cuda().eval()
    res: dict = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                 "device": torch.cuda.get_device_name(0), "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    with torch.inference_mode():
        for b in [int(x) for x in a.batches.split(",") if x]:
            x = torch.randn(b, 3, 224, 224, device="cuda")
            if a.mode == "eager":
                for tf32 in (True, False):
                    torch.backends.cudnn.allow_tf32 = tf32
                    res[f"eager_tf32_{'on' if tf32 else 'off'}_b{b}"] = timed(lambda: m(x), sync, reps=30, warm=3)
                torch.backends.cudnn.allow_tf32 = True
                xh = x.cpu()
                res[f"eager_host_io_b{b}"] = timed(lambda: m(xh.cuda()).cpu(), sync, reps=30)
            else:
                if time.time() > deadline - 30:
                    res[f"compile_b{b}"] = "skipped: too little time left"
                    break
                torch.backends.cudnn.allow_tf32 = False
                mc = torch.compile(m)
                t = time.perf_counter()
                mc(x)
                sync()
                r = {"compile_s": round(time.perf_counter() - t, 1)}
                r.update(timed(lambda: mc(x), sync, reps=30))
                res[f"compile_tf32_off_b{b}"] = r
            merge(a.out, key, res)
            print(b, {k: v for k, v in res.items() if k.endswith(f"_b{b}")}, flush=True)
    merge(a.out, key, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
