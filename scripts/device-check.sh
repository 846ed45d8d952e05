#!/usr/bin/env bash
# One device run: unpack the carried binaries, find NVRTC, run the GPU test suite, `doctor` twice
# (the second must load kernels from the disk cache), the transfer benchmark and the demo.
# Logs go to $OUT (or ./device-out); a short summary prints last.
#   usage: scripts/device-check.sh [test-filter]
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
source "$(dirname "$0")/device-env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.txt"

summary=()
step() { # name, command...
    local name=$1; shift
    local t0=$(date +%s%N)
    "$@" > "$out/$name.log" 2>&1; local rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    summary+=("$(printf '%-16s rc=%-3s %8d ms' "$name" "$rc" "$ms")")
    return $rc
}

# Every carried test binary: the library's, the bench crate's and its integration tests, the CLI's.
binaries=$(ls /tmp/b | grep -E '^[a-z_]+-[0-9a-f]{16}$')
export XDG_CACHE_HOME=/tmp/dfg-cache
# A GPU test fails, rather than skips, when the device or NVRTC cannot be loaded here.
export DFG_REQUIRE_GPU=1
rm -rf "$XDG_CACHE_HOME"
step doctor-1 datafusion-gpu doctor          # empty kernel cache: NVRTC compiles
step doctor-2 datafusion-gpu doctor          # a second process: disk-cache hit
for tests in $binaries; do
    step "tests-$tests" "/tmp/b/$tests" --test-threads 4 ${1:-}
done
step transfer datafusion-gpu bench transfer
# Extra transfer settings to compare, e.g. TRANSFER_VARIANTS="--staging 64M|--threads 8".
IFS='|' read -ra variants <<< "${TRANSFER_VARIANTS:-}"
for v in "${variants[@]}"; do
    step "transfer-${v// /}" datafusion-gpu bench transfer $v
done
step primitives datafusion-gpu bench primitives
step demo datafusion-gpu demo

echo "== test summary"; grep -E '^test result|FAILED|panicked|SKIPPED' "$out"/tests-*.log | head -40
echo "== doctor (second run)"; cat "$out/doctor-2.log"
echo "== doctor kernel source, first run:"; grep 'copy kernels' "$out/doctor-1.log"
echo "== transfer"; cat "$out/transfer.log"
for f in "$out"/transfer-*.log; do [ -e "$f" ] || continue; echo "-- $(basename "$f" .log)"; grep -E '^(upload|download|host copy)' "$f"; done
echo "== primitives"; cat "$out/primitives.log"
echo "== demo (tail)"; tail -8 "$out/demo.log"
echo "== steps"; printf '%s\n' "${summary[@]}"
