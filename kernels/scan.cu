// Exclusive prefix sum of u32 values (reduce-then-scan over tiles). The host scans the tile
// totals recursively, then each tile adds its offset.
#include "common.cuh"

#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_WARPS (SCAN_THREADS / 32)

// partials[b] = sum of tile b.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_reduce_u32(const u32* __restrict__ in, u32* __restrict__ partials, u64 n) {
    __shared__ u32 warp_sums[SCAN_WARPS];
    __shared__ u32 total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE;
    u32 s = 0;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        u64 i = base + (u64)j * SCAN_THREADS + threadIdx.x;
        if (i < n) s += in[i];
    }
    block_exclusive_scan<SCAN_WARPS>(s, warp_sums, &total);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// out[i] = offsets[tile] + sum of in[tile start .. i). Each thread owns SCAN_ITEMS consecutive
// values, staged through shared memory so that global loads and stores stay coalesced.
extern "C" __global__ void __launch_bounds__(SCAN_THREADS) scan_tiles_u32(const u32* __restrict__ in, u32* __restrict__ out, const u32* __restrict__ offsets, u64 n) {
    __shared__ u32 tile[SCAN_TILE + SCAN_TILE / 32];
    __shared__ u32 warp_sums[SCAN_WARPS];
    __shared__ u32 total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE;
    // Padding one word per 32 avoids bank conflicts on the blocked reads.
#define PAD(i) ((i) + ((i) >> 5))
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        u32 k = j * SCAN_THREADS + threadIdx.x;
        u64 i = base + k;
        tile[PAD(k)] = i < n ? in[i] : 0;
    }
    __syncthreads();
    u32 v[SCAN_ITEMS];
    u32 s = 0;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        v[j] = tile[PAD(threadIdx.x * SCAN_ITEMS + j)];
        s += v[j];
    }
    u32 prefix = block_exclusive_scan<SCAN_WARPS>(s, warp_sums, &total) + offsets[blockIdx.x];
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        tile[PAD(threadIdx.x * SCAN_ITEMS + j)] = prefix;
        prefix += v[j];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        u32 k = j * SCAN_THREADS + threadIdx.x;
        u64 i = base + k;
        if (i < n) out[i] = tile[PAD(k)];
    }
#undef PAD
}
