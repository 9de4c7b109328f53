#!/usr/bin/env bash
# Build the wheelhouse benchmarks/gpu_validate.sh installs from on a GPU machine without network.
# Run it on a machine that reaches the package registry, with the Python version (and platform)
# of the GPU machine, or pass --python-version to download for another one:
#
#   benchmarks/build_wheelhouse.sh DIR [--cuda 12|13] [--python-version 3.11] [--no-ort-gpu]
#
# DIR gets gpuops' own wheel and every dependency of gpuops[cuda,test,bench] (cuda13 for --cuda 13)
# as wheels -- CuPy's [ctk] CUDA wheels (NVRTC, headers, cuBLAS...) included -- plus the build
# tools of an editable install (pip, setuptools, wheel), the compute-sanitizer wheel
# (cuda-toolkit[sanitizer], same CUDA major) and, when one exists for that CUDA major,
# onnxruntime-gpu with its CUDA and cuDNN wheels (the benchmark's CUDA EP peer).
# Then copy DIR to the GPU machine and run: benchmarks/gpu_validate.sh --wheelhouse DIR
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cuda=12 pyver="" ort=1 dir=""

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

while (($#)); do
    case $1 in
        --cuda) cuda=$2; shift 2 ;;
        --python-version) pyver=$2; shift 2 ;;
        --no-ort-gpu) ort=0; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "build_wheelhouse: unknown option $1" >&2; exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
if [[ -z $dir ]]; then
    usage >&2
    exit 2
fi
case $cuda in
    12) extra=cuda ort_spec="onnxruntime-gpu[cuda,cudnn]<1.26" ;;  # the last CUDA 12 builds on PyPI
    13) extra=cuda13 ort_spec="onnxruntime-gpu[cuda,cudnn]>=1.31" ;;
    *) echo "build_wheelhouse: --cuda takes 12 or 13" >&2; exit 2 ;;
esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# pip wheel: every dependency as a wheel (a dependency published only as a source distribution is
# built here, so the GPU machine never needs a build backend); pip download for another Python
# (binary wheels only).
if [[ -n $pyver ]]; then
    get=(python3 -m pip download --dest "$dir" --only-binary=:all: --python-version "$pyver"
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64)
else
    get=(python3 -m pip wheel --wheel-dir "$dir")
fi

cd "$ROOT"
python3 -m pip wheel --no-deps --wheel-dir "$dir" .
"${get[@]}" ".[$extra,test,bench]" "cuda-toolkit[sanitizer]==$cuda.*" pip "setuptools>=68" wheel
if ((ort)); then
    "${get[@]}" "$ort_spec" || echo "build_wheelhouse: no $ort_spec (the bench runs without the CUDA EP peer)"
fi
echo "wheelhouse: $dir ($(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1))"
