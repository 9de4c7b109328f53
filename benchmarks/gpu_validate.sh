#!/usr/bin/env bash
# Validate gpuops on a machine with an NVIDIA GPU and no network access, in parts that each fit in
# 10 minutes. Everything lands in benchmarks/results/<date>-<gpu>/ (or --out DIR).
#
#   benchmarks/build_wheelhouse.sh /path/wheels              # on a machine with the package registry
#   benchmarks/gpu_validate.sh --wheelhouse /path/wheels     # on the GPU machine: every part
#   benchmarks/gpu_validate.sh --list-parts                  # the parts, numbered
#   benchmarks/gpu_validate.sh --wheelhouse W --part 1       # one part (repeat --part, or 2,3,4)
#   benchmarks/gpu_validate.sh --dry-run                     # print the commands only
#
# Part 1 installs gpuops[cuda,test,bench] (editable) from the wheelhouse into a virtual environment
# (--venv, default ~/.cache/gpuops-validate/venv; --venv DIR without --wheelhouse uses one that is
# already there) and records the device, driver and versions. Later parts: `gpuops selftest --json`;
# the test suite against real CuPy, one part per test folder (the conformance suite per file and
# device; the longest suites in shards), each under `timeout`; compute-sanitizer memcheck and
# racecheck on the kernel tests (when compute-sanitizer is found: PATH, CUDA_HOME, or the
# cuda-toolkit[sanitizer] wheel); `gpuops bench`. CUPY_CACHE_DIR is kept between parts, so CuPy's
# kernel compilation is paid once. A part's log, exit status and
# JUnit XML go to <out>/parts/; <out>/summary.md is rewritten after every invocation. The exit
# status is non-zero when any part run in this invocation failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PART_TIMEOUT=${GPUOPS_PART_TIMEOUT:-590}
CACHE=${GPUOPS_VALIDATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuops-validate}
wheelhouse="" venv="$CACHE/venv" out="" extra="cuda" dry=0 list=0
selected=()

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
    echo "options: --wheelhouse DIR  --venv DIR  --out DIR  --cuda 12|13  --part N[,M]  --list-parts  --dry-run"
}

while (($#)); do
    case $1 in
        --wheelhouse) wheelhouse=$(cd "$2" && pwd); shift 2 ;;
        --venv) venv=$(realpath -m "$2"); shift 2 ;;
        --out) out=$(realpath -m "$2"); shift 2 ;;
        --cuda) case $2 in 12) extra=cuda ;; 13) extra=cuda13 ;; *) echo "--cuda takes 12 or 13" >&2; exit 2 ;; esac
                shift 2 ;;
        --part) IFS=, read -ra more <<<"$2"; selected+=("${more[@]}"); shift 2 ;;
        --list-parts) list=1; shift ;;
        --dry-run) dry=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu_validate: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
cd "$ROOT"

# -- the parts --------------------------------------------------------------------------------------
# A test part is PATH[@DEVICE][#I/N]: a test folder or file; for the conformance suite, the device
# it runs on (GPUOPS_CONFORMANCE_DEVICES); the I-th of N interleaved shards (benchmarks/pytest_shard.py)
# for the suites whose CuPy kernel compilation, paid once per new kernel, could pass 10 minutes.
declare -A SHARDS=([tests/conformance/test_node_cases.py@cuda]=4 [tests/conformance/test_node_cases.py@cpu]=2
    [tests/ops]=2)
emit() {
    local n=${SHARDS[$1]:-1} i
    if ((n == 1)); then
        echo "$1"
    else
        for ((i = 1; i <= n; i++)); do echo "$1#$i/$n"; done
    fi
}
test_parts() {
    local d f
    for d in tests/*/; do
        d=${d%/}
        compgen -G "$d/test_*.py" >/dev/null || continue
        if [[ $d == tests/conformance ]]; then  # the largest: one part per file and device
            for f in "$d"/test_*.py; do emit "$f@cpu" && emit "$f@cuda"; done
        else
            emit "$d"
        fi
    done
    echo "tests/test_*.py"
}
mapfile -t TESTS < <(test_parts)
PARTS=(install selftest "${TESTS[@]}" memcheck racecheck bench-resnet50 bench-suite)

if ((list)); then
    for i in "${!PARTS[@]}"; do printf '%2d  %s\n' "$((i + 1))" "${PARTS[i]}"; done
    exit 0
fi
if ((${#selected[@]} == 0)); then
    mapfile -t selected < <(seq 1 "${#PARTS[@]}")
fi
for k in "${!selected[@]}"; do  # a part by number or by name
    n=${selected[k]}
    for i in "${!PARTS[@]}"; do
        if [[ ${PARTS[i]} == "$n" ]]; then n=$((i + 1)); fi
    done
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > ${#PARTS[@]})); then
        echo "gpu_validate: no part $n (there are ${#PARTS[@]}; see --list-parts)" >&2
        exit 2
    fi
    selected[k]=$n
done

# -- where results go -------------------------------------------------------------------------------
gpu_name() {
    local name=""
    if command -v nvidia-smi >/dev/null; then
        name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
    fi
    name=${name:-unknown-gpu}
    name=${name// /-}
    echo "${name//[^A-Za-z0-9._-]/}"
}
if [[ -z $out ]]; then
    out="benchmarks/results/$(date -u +%Y-%m-%d)-$(gpu_name)"
fi
PY="$venv/bin/python"
GPUOPS="$venv/bin/gpuops"
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$CACHE/cupy}
export GPUOPS_EMU_CACHE=${GPUOPS_EMU_CACHE:-$CACHE/emulator}
unset GPUOPS_CUDA_STANDIN  # the real CuPy, not the CPU stand-in

# run CMD...: run it (or print it with --dry-run)
run() {
    if ((dry)); then
        printf '%q ' "$@"
        echo
    else
        "$@"
    fi
}

# to FILE CMD...: run it with stdout into FILE (printed with --dry-run)
to() {
    local file=$1
    shift
    if ((dry)); then
        printf '%q ' "$@"
        echo "> $file"
    else
        "$@" >"$file"
    fi
}

sanitizer() {
    local cand
    for cand in "$(command -v compute-sanitizer || true)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
        "$venv"/lib/python3*/site-packages/nvidia/cuda_sanitizer_api/bin/compute-sanitizer \
        "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/compute-sanitizer; do
        if [[ -n $cand && -x $cand ]]; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

test_part() {  # test_part PATH[@DEVICE][#I/N]
    local name=$1 path=${1%%[@#]*} dev args=()
    if [[ $name == *@* ]]; then
        dev=${name#*@}
        run export GPUOPS_CONFORMANCE_DEVICES="${dev%%#*}"
    fi
    if [[ $name == *#* ]]; then
        args=(-p benchmarks.pytest_shard --shard "${name#*#}")
    fi
    if [[ $path == "tests/test_*.py" ]]; then
        pytest_part "$(slug "$name")" "${args[@]}" tests/test_*.py
    else
        pytest_part "$(slug "$name")" "${args[@]}" "$path"
    fi
}

pytest_part() {  # pytest_part NAME PATH...
    local name=$1
    shift
    run timeout "$PART_TIMEOUT" "$PY" -m pytest -q -p no:randomly -p no:cacheprovider \
        --junitxml "$out/parts/$name.xml" "$@"
}

part_install() {
    if [[ -n $wheelhouse ]]; then
        run python3 -m venv "$venv"
        local pip=("$venv/bin/pip" install --no-index --find-links "$wheelhouse")
        run "${pip[@]}" --upgrade pip setuptools wheel
        run "${pip[@]}" -e ".[$extra,test,bench]"
        # the compute-sanitizer wheel and onnxruntime-gpu (the bench's CUDA EP peer; it replaces the CPU
        # onnxruntime, whose API it includes) when the wheelhouse has them
        if compgen -G "$wheelhouse/nvidia_cuda_sanitizer_api*.whl" >/dev/null; then
            run "${pip[@]}" "cuda-toolkit[sanitizer]"
        fi
        if compgen -G "$wheelhouse/onnxruntime_gpu-*.whl" >/dev/null; then
            run "$venv/bin/pip" uninstall -y onnxruntime
            run "${pip[@]}" "onnxruntime-gpu[cuda,cudnn]"
        fi
    elif [[ ! -x $PY ]] && ((!dry)); then
        echo "gpu_validate: no environment at $venv; pass --wheelhouse DIR (build_wheelhouse.sh makes one)" >&2
        return 1
    fi
    run mkdir -p "$out/env"
    to "$out/env/nvidia-smi.txt" nvidia-smi
    to "$out/env/nvidia-smi-q.txt" nvidia-smi -q
    to "$out/env/gpu.csv" nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap,pci.bus_id \
        --format=csv
    to "$out/env/pip-freeze.txt" "$PY" -m pip freeze
    to "$out/env/gpuops-info.json" "$GPUOPS" info --json
    to "$out/env/uname.txt" uname -a
    if ((dry)) || command -v nvcc >/dev/null; then to "$out/env/nvcc.txt" nvcc --version; fi
    local san
    if san=$(sanitizer); then to "$out/env/compute-sanitizer.txt" "$san" --version; fi
}

part_selftest() {
    local rc=0
    to "$out/selftest.json" timeout "$PART_TIMEOUT" "$GPUOPS" selftest --device cuda --json --strict || rc=$?
    # the same report as text, into the part's log
    run "$PY" -c 'import json, sys; from gpuops.selftest import format_report
print(format_report(json.load(open(sys.argv[1]))))' "$out/selftest.json" || true
    return "$rc"
}

part_sanitizer() {  # part_sanitizer TOOL FILE...: kernel tests on the GPU (their cupy-parametrized cases)
    local tool=$1 san
    shift
    if ! san=$(sanitizer); then
        if ((dry)); then
            san=compute-sanitizer
        else
            echo "SKIPPED: compute-sanitizer not found (PATH, CUDA_HOME, or the cuda-toolkit[sanitizer] wheel)"
            return 0
        fi
    fi
    run timeout "$PART_TIMEOUT" "$san" --tool "$tool" --error-exitcode 99 --print-limit 50 \
        "$PY" -m pytest -q -p no:randomly -p no:cacheprovider -x -k cupy --junitxml "$out/parts/$tool.xml" "$@"
}

part_bench() {  # part_bench NAME BENCH-ARGS...
    local name=$1
    shift
    run timeout "$PART_TIMEOUT" "$GPUOPS" bench --device cuda --out "$out/$name" "$@"
    # with cuda_graph too, once the bench has such an option
    if ((dry)); then
        echo "# and with --cuda-graph (out: $out/$name-cuda-graph) when gpuops bench has that option"
    elif "$GPUOPS" bench --help 2>/dev/null | grep -q -- '--cuda-graph'; then
        run timeout "$PART_TIMEOUT" "$GPUOPS" bench --device cuda --cuda-graph --out "$out/$name-cuda-graph" "$@"
    else
        echo "note: gpuops bench has no --cuda-graph option: cuda_graph runs are not measured" \
            "(light models also run at batch 1 only)"
    fi
}

run_part() {  # run_part N: the N-th part
    local name=${PARTS[$1 - 1]}
    case $name in
        install) part_install ;;
        selftest) part_selftest ;;
        tests/*) test_part "$name" ;;
        memcheck) part_sanitizer memcheck tests/kernels ;;
        # racecheck checks shared memory: the kernels that use it (quantize.cu, nms.cu)
        racecheck) part_sanitizer racecheck tests/kernels/test_{quantize,integer,detection}_kernels.py ;;
        bench-resnet50) part_bench "$name" --models resnet50 --batch 1,32 --no-mdf ;;
        bench-suite) part_bench "$name" --quick ;;
    esac
}

slug() {  # a file name for a part
    local s=${1#tests/}
    s=${s/.py/}
    s=${s//[\/@#]/-}
    echo "${s//\*/all}"
}

write_summary() {
    {
        echo "# gpuops GPU validation: $(basename "$out")"
        echo
        if [[ -s $out/env/gpu.csv ]]; then
            echo '```'
            cat "$out/env/gpu.csv"
            echo '```'
            echo
        fi
        echo "| part | name | status | seconds |"
        echo "|---|---|---|---|"
        local i name s rc secs
        for i in "${!PARTS[@]}"; do
            name=${PARTS[i]}
            s=$(slug "$name")
            [[ -f $out/parts/$s.rc ]] || continue
            read -r rc secs <"$out/parts/$s.rc"
            status=$([[ $rc == 0 ]] && echo pass || echo "FAIL ($rc)")
            grep -q '^SKIPPED' "$out/parts/$s.log" 2>/dev/null && status=skipped
            echo "| $((i + 1)) | $name | $status | $secs |"
        done
    } >"$out/summary.md"
}

# -- run --------------------------------------------------------------------------------------------
if ((dry)); then
    echo "# CUPY_CACHE_DIR=$CUPY_CACHE_DIR GPUOPS_EMU_CACHE=$GPUOPS_EMU_CACHE; results in $out"
    for n in "${selected[@]}"; do
        echo "# part $n: ${PARTS[n - 1]}"
        run_part "$n"
    done
    exit 0
fi

mkdir -p "$out/parts" "$CUPY_CACHE_DIR" "$GPUOPS_EMU_CACHE"
failed=()
for n in "${selected[@]}"; do
    name=${PARTS[n - 1]}
    s=$(slug "$name")
    echo "== part $n/${#PARTS[@]}: $name (log: $out/parts/$s.log)"
    start=$SECONDS
    set +e
    (set -euo pipefail; run_part "$n") 2>&1 | tee "$out/parts/$s.log"
    rc=${PIPESTATUS[0]}
    set -e
    echo "$rc $((SECONDS - start))" >"$out/parts/$s.rc"
    if ((rc != 0)); then
        failed+=("$n:$name")
        echo "== part $n ($name) FAILED with exit status $rc"
    fi
done
write_summary
echo "== results in $out (summary.md)"
if ((${#failed[@]})); then
    echo "== failed parts: ${failed[*]}" >&2
    exit 1
fi
