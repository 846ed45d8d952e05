#!/usr/bin/env bash
# One device run: unpack the carried binaries (../shared/tools/device-pack --tests), run the GPU
# tests (optionally filtered), then each `datafusion-gpu` command of BENCH. Logs go to $OUT (or
# ./device-out); a short summary prints last.
#   usage: TESTS=<filter|skip> JOIN_TESTS=<run|skip> BENCH="bench join ...; bench aggregate ..." \
#          scripts/device-run.sh
set -uo pipefail
# Logs and results collect in a work folder, packed into one $OUT/run.tar.gz at the end (the
# device tool returns at most 8 files).
final=${OUT:-device-out}; out=/tmp/dfg-run; rm -rf "$out"; mkdir -p "$out" "$final"
source "$(dirname "$0")/device-env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/nvidia-smi.txt"
export XDG_CACHE_HOME=/tmp/dfg-cache
# A GPU test fails, rather than skips, when the device or NVRTC cannot be loaded here.
export DFG_REQUIRE_GPU=1
tests=$(ls /tmp/b | grep -E '^datafusion_gpu-[0-9a-f]+$' | head -1)
t0=$(date +%s)
if [ "${TESTS:-}" != skip ]; then
    # Everything but the join differential tests first, then those (about 5 minutes).
    timeout "${TEST_TIMEOUT:-420}" "/tmp/b/$tests" --test-threads 4 --skip join::tests ${TESTS:-} > "$out/tests.log" 2>&1
    echo "tests (other) rc=$? in $(( $(date +%s) - t0 )) s"
    if [ "${JOIN_TESTS:-run}" != skip ]; then
        timeout "${JOIN_TEST_TIMEOUT:-420}" "/tmp/b/$tests" --test-threads 2 join::tests ${TESTS:-} > "$out/tests-join.log" 2>&1
        echo "tests (join) rc=$? in $(( $(date +%s) - t0 )) s"
    fi
fi
i=0
IFS=';' read -ra benches <<< "${BENCH:-}"
for b in "${benches[@]}"; do
    [ -n "${b// }" ] || continue
    i=$((i + 1)); t1=$(date +%s)
    timeout "${BENCH_TIMEOUT:-300}" datafusion-gpu $b > "$out/bench$i.log" 2> "$out/bench$i.err"
    echo "bench $i ($b) rc=$? in $(( $(date +%s) - t1 )) s"
done
for log in "$out/tests.log" "$out/tests-join.log"; do
    [ -f "$log" ] || continue
    echo "== $(basename "$log")"
    grep -E '^test result|FAILED|panicked|differential:|compared' "$log" | head -30
    grep -E 'MISMATCH' "$log" | cut -c1-600 | head -25
done
for j in $(seq 1 $i); do
    echo "== bench $j"; tail -3 "$out/bench$j.err"; cat "$out/bench$j.log"
done
tar czf "$final/run.tar.gz" -C "$out" .
