#!/usr/bin/env bash
# Runs one benchmark job and writes JSON, Markdown and PNG results to $GPUOPS_RESULTS.
# Arguments are passed to `gpuops bench`; GPUOPS_DEVICE and GPUOPS_BENCH_ARGS set defaults, and
# GPUOPS_SCENARIO (single-stream, offline, server, ray or all) runs MLPerf-style scenarios instead of the suite.
set -euo pipefail
out="${GPUOPS_RESULTS:-/results}"
mkdir -p "$out"
gpuops info
# shellcheck disable=SC2086
exec gpuops bench --device "${GPUOPS_DEVICE:-auto}" --out "$out" ${GPUOPS_SCENARIO:+--scenario "$GPUOPS_SCENARIO"} \
    ${GPUOPS_BENCH_ARGS:-} "$@"
