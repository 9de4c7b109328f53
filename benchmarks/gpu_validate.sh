#!/usr/bin/env bash
# gpu_validate.sh: gpuops on a lent GPU machine (H100/H200, no network), in ONE command of 8 minutes.
#
#   bash benchmarks/gpu_prep.sh                     # where PyPI is reachable: the wheels into .whl/
#   bash benchmarks/gpu_validate.sh OUTDIR          # on the GPU machine, .whl/ carried; limit ~560 s
#   GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin bash benchmarks/gpu_validate.sh OUTDIR
#                                                   # dry run without a GPU (CI runs one)
#
# It uses the machine's own python3 (PY=...) and CuPy: the wheels carried in .whl/ (array-api-compat)
# go into a temporary site folder (pip --no-index --no-deps --target) and gpuops runs from this tree
# (PYTHONPATH). Parts, the most valuable first, each under `timeout` of min(its cap, the budget left);
# none starts with under 15 s left (GPU_VALIDATE_BUDGET, default 480 s, includes everything):
#   env            GPU detection (nvidia-smi -L, then CuPy's device count), versions, the carried wheels,
#                  the tree built as a wheel offline (the install route), gpuops info
#   selftest       python3 -m gpuops selftest --device cuda --json
#   tests-kernels  pytest -m cuda tests/kernels (the kernels on real CuPy)
#   tests-cuda     pytest tests/test_cuda_path.py tests/cuda (pools, streams, graphs, syncs)
#   light          the onnx package's 9 light models on cuda, with and without cuda_graph=True, against
#                  the cpu path: logits (the final Softmax's input) within GPU_VALIDATE_RTOL of max |logit|,
#                  host syncs per run (CuPy's own sync hook), cuda_graph_status(), latency
#   zoo            the test zoo's cnn, bert and gpt exports (dynamic axes) the same way, and at a new batch
#   perf           resnet50 at batch 1 and 32, +-cuda_graph, host and device-resident feeds, against
#                  onnxruntime's CPU provider
#   torch          torchvision resnet50 eager on the same GPU, TF32 on and off
#   conv           gpuops' Conv TFLOP/s against cupy.matmul of the same GEMM and torch's cuDNN
#   memcheck       compute-sanitizer memcheck over the selftest's kernel cases
#   compile        torch.compile resnet50, with whatever time is left
# Python of the parts: benchmarks/gpu/*.py. On the stand-in (GPUOPS_CUDA_BACKEND=gpuops.testing.cuda_standin,
# no GPU) every part runs on gpuops' CPU stand-in of CuPy but torch, compile, cuDNN and compute-sanitizer,
# which need the hardware (summary.txt says so); timings there mean nothing.
#
# Settings (environment; the stand-in's defaults after the ';'): GPU_VALIDATE_BUDGET (s),
# GPU_VALIDATE_PARTS (comma list: only these), GPU_VALIDATE_MODELS (the 9 light models; 3 quick ones),
# GPU_VALIDATE_ZOO (cnn,bert,gpt), GPU_VALIDATE_BATCHES (1,32; 1), GPU_VALIDATE_PERF_MODEL (resnet50),
# GPU_VALIDATE_TESTS (tests-cuda's paths), GPU_VALIDATE_TIME_PER_RUN (s per latency, 1.0; 0.2),
# GPU_VALIDATE_REPS (cap on timed runs; 3), GPU_VALIDATE_CAP_SCALE (times each part's cap, 1; 2),
# GPU_VALIDATE_RTOL (1e-4), GPU_VALIDATE_SELFTEST_ARGS (e.g. --quick), GPU_VALIDATE_INSTALL_CHECK (1),
# PY (python3).
# Results in OUTDIR (default ./gpu-validate-out), 7 files: summary.txt (a line per part, then the key
# numbers), env.txt, selftest.json, perf.json, tests.txt, memcheck.txt, gpu_validate.log (all output).
# Exit status: 0 when every part run is ok, 1 when one failed or timed out (or there is no GPU and no
# stand-in), 2 on bad arguments.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
case ${1:-} in
    -h | --help) usage; exit 0 ;;
    -*) echo "gpu_validate: unknown option $1" >&2; usage >&2; exit 2 ;;
esac
(($# <= 1)) || { echo "gpu_validate: one argument, the output folder" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$PWD/gpu-validate-out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
PY=${PY:-python3}
BUDGET=${GPU_VALIDATE_BUDGET:-480}
RESERVE=10 # seconds kept for the summary
T0=$SECONDS
SUM=$OUT/summary.txt
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_validate.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
rm -f "$OUT"/{summary.txt,env.txt,selftest.json,perf.json,perf.json.tmp,tests.txt,memcheck.txt,gpu_validate.log}
exec > >(tee -a "$OUT/gpu_validate.log") 2>&1
TEE=$!
cd "$ROOT" || exit 2

FAILED=()
NOTE="" # appended to the next part's line
left() { echo $((BUDGET - RESERVE - (SECONDS - T0))); }
line() { printf '%-14s %s\n' "$1" "$2" | tee -a "$SUM"; }
skip() { line "$1" "SKIPPED ($2)"; }
selected() { [[ -z ${GPU_VALIDATE_PARTS:-} || ,${GPU_VALIDATE_PARTS}, == *",$1,"* ]]; }

# part NAME CAP FILE CMD...: CMD under `timeout min(CAP, budget left)`, its stdout appended to FILE (- for
# the log only; a .txt file gets a header per part). One line per part in summary.txt. With DRY=reason
# the part runs what the stand-in can of it and its line says SKIPPED (reason) when that went well.
part() {
    local name=$1 cap=$2 file=$3 t rc s st note=$NOTE dry=${DRY:-}
    shift 3
    NOTE="" DRY=""
    if ! selected "$name"; then
        skip "$name" "not in GPU_VALIDATE_PARTS"
        return 0
    fi
    t=$(left)
    cap=$((cap * CAP_SCALE))
    ((t > cap)) && t=$cap
    if ((t < 15)); then
        skip "$name" "budget spent: $(left)s left"
        return 0
    fi
    echo "== $name: timeout ${t}s, $(left)s of the budget left, $(date -u +%T): $*"
    s=$SECONDS
    if [[ $file == - ]]; then
        timeout -k 10 "$t" "$@"
    elif [[ $file == *.txt ]]; then
        { echo "== $name: $*"; timeout -k 10 "$t" "$@"; } >>"$file"
    else
        timeout -k 10 "$t" "$@" >>"$file"
    fi
    rc=$?
    s=$((SECONDS - s))
    if ((rc == 124 || rc == 137)); then
        st="TIMEOUT after ${s}s (cap ${t}s)"
    elif ((rc != 0)); then
        st="FAIL (rc=$rc) ${s}s"
    elif [[ -n $dry ]]; then
        line "$name" "SKIPPED ($dry: ok in ${s}s)${note:+  $note}"
        return 0
    else
        st="ok       $(printf '%4ss' "$s")"
    fi
    ((rc == 0)) || FAILED+=("$name")
    [[ $file == *.txt && $name == tests-* ]] && note="$(last_result "$file")${note:+; $note}"
    line "$name" "$st${note:+  $note}"
    return 0
}
last_result() { grep -E '^=*\s*[0-9]+ (passed|failed|skipped|error|deselected)' "$1" | tail -1 | tr -d '='; }

# -- where things are -------------------------------------------------------------------------------
COMMIT=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null)
if [[ -n $COMMIT ]]; then
    git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null || COMMIT="$COMMIT+changes"
fi
PREPARED=$(head -1 "$ROOT/.whl/gpuops-commit" 2>/dev/null) # what gpu_prep.sh saw
[[ -n $PREPARED ]] && COMMIT="${COMMIT:-unknown} (.whl prepared at ${PREPARED:0:12})"
echo "# gpu_validate $(date -u +%FT%TZ) gpuops $COMMIT on $(hostname), budget ${BUDGET}s, out $OUT" >"$SUM"

# -- env: the carried wheels, GPU detection, versions ------------------------------------------------
SITE=$WORK/site
ENV_NOTE=()
{
    echo "== carried wheels (.whl/*.whl) -> $SITE"
    if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
        if timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --target "$SITE" "$ROOT"/.whl/*.whl; then
            ls "$SITE"
        else
            echo "pip install of the carried wheels FAILED"
        fi
    else
        echo "none carried (benchmarks/gpu_prep.sh puts them in .whl/)"
    fi
} >"$OUT/env.txt" 2>&1
compgen -G "$ROOT/.whl/*.whl" >/dev/null && ENV_NOTE+=("wheels: $(cd "$ROOT/.whl" && echo *.whl)")
export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}

HAVE_GPU=0 WHY="" CAP_SCALE=${GPU_VALIDATE_CAP_SCALE:-1} STANDIN=gpuops.testing.cuda_standin
if ! command -v nvidia-smi >/dev/null 2>&1; then
    WHY="no nvidia-smi"
elif ! timeout 30 nvidia-smi -L >/dev/null 2>&1; then
    WHY="nvidia-smi -L failed"
elif ! timeout 90 "$PY" -c "import sys, cupy
sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)" >/dev/null 2>&1; then
    WHY="CuPy sees no CUDA device"
else
    HAVE_GPU=1
fi
if ((HAVE_GPU)); then
    unset GPUOPS_CUDA_BACKEND
    MODE=gpu
    line GPU "yes: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
elif [[ ${GPUOPS_CUDA_BACKEND:-} == "$STANDIN" ]]; then
    MODE=standin
    line GPU "NO ($WHY): a dry run on gpuops' CPU stand-in of CuPy (GPUOPS_CUDA_BACKEND=$STANDIN); timings mean nothing"
    export GPU_VALIDATE_TIME_PER_RUN=${GPU_VALIDATE_TIME_PER_RUN:-0.2} GPU_VALIDATE_REPS=${GPU_VALIDATE_REPS:-3}
    CAP_SCALE=${GPU_VALIDATE_CAP_SCALE:-2} # the stand-in is 100 times slower than a GPU, or more
else
    MODE=none
    line GPU "NO ($WHY); GPUOPS_CUDA_BACKEND=$STANDIN makes this a dry run on gpuops' CPU stand-in"
fi
export GPU_VALIDATE_MODE=$MODE

{
    echo "== machine"
    uname -a
    nproc
    free -g 2>/dev/null | head -2
    echo "== nvidia-smi"
    timeout 20 nvidia-smi 2>&1 || echo "(no nvidia-smi)"
    timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,pci.bus_id,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv 2>&1 || true
    echo "== tools"
    for t in nvcc compute-sanitizer ncu gcc g++; do printf '%-18s %s\n' "$t" "$(command -v "$t" || echo -)"; done
    timeout 10 nvcc --version 2>&1 | tail -2 || true
    echo "== python: $PY ($(command -v "$PY"))"
    timeout 120 "$PY" -m benchmarks.gpu.env
    echo "env.py exit status $?"
    echo "== gpuops info"
    timeout 120 "$PY" -m gpuops info 2>&1 || true
} >>"$OUT/env.txt" 2>&1
grep -q "^env.py exit status 0" "$OUT/env.txt" || ENV_NOTE+=("env.py FAILED: see env.txt")
grep -q "^array-api-compat MISSING" "$OUT/env.txt" && ENV_NOTE+=("array-api-compat MISSING: carry its wheel")

if [[ ${GPU_VALIDATE_INSTALL_CHECK:-1} == 1 ]]; then # the install route: the tree as a wheel, offline
    {
        echo "== the install route: pip install --no-deps --no-build-isolation of a copy of the tree"
        mkdir -p "$WORK/src"
        cp -r "$ROOT"/{gpuops,cuda_kernels,cpu_kernels,setup.py,pyproject.toml,README.md} "$WORK/src/"
        find "$WORK/src" -name __pycache__ -prune -exec rm -rf {} +
        if timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir \
            --disable-pip-version-check --target "$WORK/wheel-site" "$WORK/src" 2>&1 | tail -25 &&
            (cd / && PYTHONPATH=$WORK/wheel-site:$SITE timeout 60 "$PY" -c "import gpuops, gpuops.kernels as k
print('installed', gpuops.__file__, 'kernels', sorted(p.name for p in k.KERNEL_DIR.glob('*.cu')))"); then
            echo "install route ok"
        fi
    } >>"$OUT/env.txt" 2>&1
    if grep -q "^install route ok" "$OUT/env.txt"; then
        ENV_NOTE+=("install route ok")
    else
        ENV_NOTE+=("install route FAILED (env.txt, setuptools $("$PY" -c 'import setuptools
print(setuptools.__version__)' 2>/dev/null || echo missing) here)")
    fi
fi
ENV_S=$((SECONDS - T0))
ENV_NOTES=$(printf '%s; ' "${ENV_NOTE[@]}")
if grep -q "^env.py exit status 0" "$OUT/env.txt"; then
    line env "ok       $(printf '%4ss' "$ENV_S")  ${ENV_NOTES%; }"
else
    FAILED+=(env)
    line env "FAIL ${ENV_S}s  ${ENV_NOTES%; }"
fi

# -- the parts ----------------------------------------------------------------------------------------
MODELS=bvlc_alexnet,densenet121,inception_v1,inception_v2,resnet50,shufflenet,squeezenet,vgg19,zfnet512
[[ $MODE == gpu ]] || MODELS=bvlc_alexnet,shufflenet,squeezenet # the quick ones, on the stand-in
MODELS=${GPU_VALIDATE_MODELS:-$MODELS}
ZOO=${GPU_VALIDATE_ZOO:-cnn,bert,gpt}
BATCHES=${GPU_VALIDATE_BATCHES:-$([[ $MODE == gpu ]] && echo 1,32 || echo 1)}
PERF_MODEL=${GPU_VALIDATE_PERF_MODEL:-resnet50}
read -ra CUDA_TESTS <<<"${GPU_VALIDATE_TESTS:-tests/test_cuda_path.py tests/cuda}"
PYTEST=("$PY" -m pytest -q -p no:randomly -p no:cacheprovider -rfE --durations=5)
HW="no GPU"
if [[ $MODE == none ]]; then
    for p in selftest tests-kernels tests-cuda light zoo perf torch conv memcheck compile; do
        skip "$p" "no GPU and no stand-in"
    done
    FAILED+=("no GPU")
else
    read -ra SELFTEST_ARGS <<<"${GPU_VALIDATE_SELFTEST_ARGS:-}"
    part selftest 150 "$OUT/selftest.json" "$PY" -m gpuops selftest --device cuda --json "${SELFTEST_ARGS[@]}"
    [[ -s $OUT/selftest.json ]] && "$PY" -c 'import json, sys; from gpuops.selftest import format_report
print(format_report(json.load(open(sys.argv[1]))))' "$OUT/selftest.json" 2>&1 | tail -80
    [[ $MODE == standin ]] && NOTE="stand-in: the cuda-marked tests skip without a GPU"
    part tests-kernels 110 "$OUT/tests.txt" "${PYTEST[@]}" -m cuda tests/kernels
    part tests-cuda 120 "$OUT/tests.txt" "${PYTEST[@]}" "${CUDA_TESTS[@]}"
    part light 150 - "$PY" -m benchmarks.gpu.light "$OUT/perf.json" --light "$MODELS"
    part zoo 60 - "$PY" -m benchmarks.gpu.light "$OUT/perf.json" --zoo "$ZOO"
    part perf 120 - "$PY" -m benchmarks.gpu.perf "$OUT/perf.json" --batches "$BATCHES" --model "$PERF_MODEL"
    TORCH=0
    ((HAVE_GPU)) && timeout 120 "$PY" -c "import sys, torch, torchvision
sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1 && TORCH=1
    if ((TORCH)); then
        part torch 60 - "$PY" -m benchmarks.gpu.torch_gpu "$OUT/perf.json" eager --batches "$BATCHES"
    elif ((HAVE_GPU)); then
        skip torch "no torch and torchvision with CUDA in $PY"
    else
        skip torch "$HW: torchvision resnet50 eager on the GPU needs one"
    fi
    ((HAVE_GPU)) || NOTE="stand-in: small shapes against onnxruntime; TFLOP/s and cuDNN SKIPPED ($HW)"
    ((HAVE_GPU && !TORCH)) && NOTE="cuDNN SKIPPED (no torch with CUDA)"
    part conv 60 - "$PY" -m benchmarks.gpu.conv "$OUT/perf.json"
    SAN=""
    for c in "$(command -v compute-sanitizer)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
        "$("$PY" -c 'import sys; print(sys.prefix)' 2>/dev/null)"/lib/python3*/site-packages/nvidia/*/bin/compute-sanitizer; do
        [[ -n $c && -x $c ]] && SAN=$c && break
    done
    if ((HAVE_GPU)) && [[ -n $SAN ]]; then
        "$SAN" --version >"$OUT/memcheck.txt" 2>&1
        part memcheck 90 "$OUT/memcheck.txt" "$SAN" --tool memcheck --error-exitcode 99 --print-limit 30 \
            "$PY" -m benchmarks.gpu.kernels_once
    elif ((HAVE_GPU)); then
        skip memcheck "no compute-sanitizer (PATH, CUDA_HOME, the cuda-toolkit[sanitizer] wheel)"
    else
        DRY="$HW: compute-sanitizer needs one; the kernel cases ran once without it" \
            part memcheck 60 "$OUT/memcheck.txt" "$PY" -m benchmarks.gpu.kernels_once
    fi
    t=$(left)
    if ((TORCH && t > 75)); then
        part compile $((t - 5)) - "$PY" -m benchmarks.gpu.torch_gpu "$OUT/perf.json" compile --batches "$BATCHES" \
            --seconds $((t - 15))
    elif ((TORCH)); then
        skip compile "budget spent: ${t}s left, torch.compile needs 75"
    elif ((HAVE_GPU)); then
        skip compile "no torch and torchvision with CUDA in $PY"
    else
        skip compile "$HW: torch.compile on the GPU needs one"
    fi
fi

# -- the key numbers ----------------------------------------------------------------------------------
{
    echo "== key numbers (mode $MODE, $((SECONDS - T0))s)"
    timeout 60 "$PY" -m benchmarks.gpu.summary "$OUT" 2>&1
    if ((${#FAILED[@]})); then
        echo "== FAILED: ${FAILED[*]}"
    else
        echo "== every part run is ok"
    fi
} | tee -a "$SUM"
rm -f "$OUT/perf.json.tmp"
files=$(find "$OUT" -maxdepth 1 -type f -printf '%f ')
echo "== gpu_validate done in $((SECONDS - T0))s; $(wc -w <<<"$files") files in $OUT: $files"
exec >&- 2>&-
wait "$TEE" 2>/dev/null # the log is complete before the caller collects OUTDIR
((${#FAILED[@]} == 0))
