#!/usr/bin/env bash
# gpu_prep.sh: get a gpuops checkout ready for benchmarks/gpu_validate.sh on a GPU machine without
# network (Python 3.12, CuPy for CUDA 13, numpy, onnx, onnxruntime, torch, pytest there; array-api-compat
# missing). Run it where PyPI is reachable:
#
#   bash benchmarks/gpu_prep.sh [CHECKOUT]        # default: the checkout this script is in
#
# It downloads the missing wheels (cp312, manylinux x86_64, --no-deps; GPU_PREP_WHEELS replaces the
# list, GPU_PREP_EXTRA adds NAME==VERSION ...) into CHECKOUT/.whl/, git-ignored through
# .git/info/exclude, with the commit id beside them; keeps a wheel already there; checks the sizes
# (wheels at most 5 MiB, everything that travels under 64 MiB: the tracked and untracked-not-ignored
# files plus .whl/); and prints the device command, what to carry and the time limit.
set -euo pipefail
case ${1:-} in
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
esac
DEST=$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/..}" && pwd)
cd "$DEST"
git rev-parse --git-dir >/dev/null 2>&1 || { echo "gpu_prep: $DEST is not a git checkout" >&2; exit 2; }
[[ -f benchmarks/gpu_validate.sh ]] || { echo "gpu_prep: no benchmarks/gpu_validate.sh in $DEST" >&2; exit 2; }
read -ra WHEELS <<<"${GPU_PREP_WHEELS:-array-api-compat==1.16.0}"
read -ra EXTRA <<<"${GPU_PREP_EXTRA:-}"
WHEELS+=("${EXTRA[@]}")
WHEEL_LIMIT=$((5 << 20)) TOTAL_LIMIT=$((64 << 20))

mkdir -p .whl
ex="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$ex")"
touch "$ex"
grep -qxF "/.whl/" "$ex" || echo "/.whl/" >>"$ex"
want=()
for w in "${WHEELS[@]}"; do # NAME==VERSION: a wheel of that name and version already there is kept
    name=${w%%==*} version=${w#*==}
    if [[ $w == *==* ]] && compgen -G ".whl/${name//-/_}-${version}-*.whl" >/dev/null; then
        echo "gpu_prep: $w already in .whl/"
    else
        want+=("$w")
    fi
done
if ((${#want[@]})); then
    python3 -m pip download -q --no-deps --only-binary=:all: --disable-pip-version-check --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d .whl "${want[@]}"
fi
git rev-parse HEAD >.whl/gpuops-commit
git diff --quiet HEAD -- || echo "with uncommitted changes" >>.whl/gpuops-commit

whl=$(find .whl -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
tree=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } | sort -zu |
    xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
carried=$(du -sb .whl | cut -f1)
mib() { awk -v b="$1" 'BEGIN {printf "%.2f MiB", b / 1048576}'; }
echo "gpu_prep: wheels $(mib "$whl") (limit 5 MiB): $(cd .whl && echo ./*.whl)"
echo "gpu_prep: checkout $(mib "$tree") + .whl $(mib "$carried") = $(mib $((tree + carried))) (limit 64 MiB)"
bad=0
((whl <= WHEEL_LIMIT)) || { echo "gpu_prep: the wheels are over 5 MiB" >&2; bad=1; }
((tree + carried < TOTAL_LIMIT)) || { echo "gpu_prep: what travels is over 64 MiB" >&2; bad=1; }
cat <<EOF
gpu_prep: on the GPU machine, from the checkout's root:
    command:   bash benchmarks/gpu_validate.sh "\$OUT"
    carry:     .whl
    timeout_s: 560   (the parts' budget is 480 s: GPU_VALIDATE_BUDGET)
EOF
exit "$bad"
