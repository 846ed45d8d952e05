#!/usr/bin/env bash
# Builds and runs the kernel harnesses of benches/kernels on a device machine (nvcc and ncu come
# with the device image, not with this project's build). Output: a table of kernel times, and,
# with PROFILE=1, Nsight Compute's sections for the production and variant scatter kernels.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/kernels-out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels -Xptxas -v radix_pass.cu -o /tmp/radix_pass 2> "$OUT/ptxas.txt" || {
    cat "$OUT/ptxas.txt"; exit 1; }
# Registers and shared memory per kernel.
awk '/Compiling entry function/ {name=$(NF-2)} /Used [0-9]+ registers/ {print name, $0}' "$OUT/ptxas.txt" \
    | grep -E "scatter_multi|v_(match|ballot)" | sed -e 's/ptxas info    ://' | cut -c1-160 || true
/tmp/radix_pass "${LOG2N:-27}" "${PAYLOADS:-5}" "${REPS:-10}" | tee "$OUT/radix_pass.txt"
if [ "${PROFILE:-0}" = 1 ]; then
    prof() {  # kernel regex, launches to skip, file
        ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
            --section Occupancy --section LaunchStats --section SchedulerStats -k "regex:$1" --launch-skip "$2" \
            --launch-count 1 /tmp/radix_pass 27 "${PAYLOADS:-5}" 1 > "$OUT/$3" 2>&1 || true
        echo "== $3"
        grep -E "Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|Mem Busy|Max Bandwidth|Shared Memory Configuration" "$OUT/$3" | head -40
    }
    prof "radix_scatter_multi_k32_i16" 6 ncu-production.txt
    prof "v_ballot_i16$" 3 ncu-ballot.txt
    prof "p_b3" 0 ncu-p-b3.txt
fi
