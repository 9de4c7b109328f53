"""The Python side of the environment: versions, where gpuops and array-api-compat come from,
gpuops' devices, CuPy's view of CUDA, whether the host-sync counter works, the light models.

    python3 -m benchmarks.gpu.env
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys

from .common import MODE, REAL, SYNCS, short

PACKAGES = ("cupy-cuda13x", "cupy-cuda12x", "numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "torch", "torchvision",
            "triton", "ml_dtypes", "array-api-compat", "pytest", "hypothesis", "setuptools", "nvidia-ml-py",
            "nvidia-cublas", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "scipy")


def main() -> int:
    print(f"python {sys.version.split()[0]} at {sys.executable} on {platform.platform()}, mode {MODE}")
    for name in PACKAGES:
        try:
            print(f"  {name:<20} {md.version(name)}")
        except md.PackageNotFoundError:
            pass
    try:
        import array_api_compat

        print("array-api-compat from", os.path.dirname(array_api_compat.__file__))
    except ImportError as e:
        print("array-api-compat MISSING (carry its wheel in .whl/: benchmarks/gpu_prep.sh):", short(e))
        return 1
    import gpuops

    print("gpuops", gpuops.__version__, "from", os.path.dirname(gpuops.__file__))
    print("devices", gpuops.devices())
    from gpuops.cli import resolve_model_path

    try:
        folder = os.path.dirname(resolve_model_path("light:resnet50"))
        print("light models", sorted(f[6:-5] for f in os.listdir(folder) if f.endswith(".onnx")))
    except Exception as e:
        print("light models: unavailable:", short(e))
    if not REAL:
        print("CuPy: not used (the stand-in runs the CUDA path)" if MODE == "standin" else "CuPy: no GPU")
        return 0
    dev = gpuops.get_device("cuda")
    cupy = dev.lib
    rt = cupy.cuda.runtime
    print("cupy", cupy.__version__, "runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion())
    try:
        from cupy_backends.cuda.libs import nvrtc

        print("nvrtc", nvrtc.getVersion())
    except Exception as e:
        print("nvrtc:", short(e))
    p = rt.getDeviceProperties(0)
    print("device", p["name"], "cc", cupy.cuda.Device(0).compute_capability, "SMs", p["multiProcessorCount"],
          "memory", p["totalGlobalMem"], "L2", p.get("l2CacheSize"))
    print("host-sync counter works:", SYNCS.works(dev))
    x = cupy.arange(5, dtype=cupy.float32)
    print("elementwise ok:", bool(((x * 2 + 1).get() == [1, 3, 5, 7, 9]).all()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
