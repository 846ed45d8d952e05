// Exclusive prefix sums of u32 and u64 values (reduce-then-scan over tiles). The host scans the
// tile totals recursively, then each tile adds its offset. `scan_u32_to_u64` widens while it
// scans, for counts whose total may pass 2^32 (join output sizes).
#include "common.cuh"

#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_WARPS (SCAN_THREADS / 32)

// partials[b] = sum of tile b.
template <typename I, typename O>
__device__ __forceinline__ void scan_reduce(const I* __restrict__ in, O* __restrict__ partials, u64 n) {
    __shared__ O warp_sums[SCAN_WARPS];
    __shared__ O total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE;
    O s = 0;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        u64 i = base + (u64)j * SCAN_THREADS + threadIdx.x;
        if (i < n) s += (O)in[i];
    }
    block_exclusive_scan<SCAN_WARPS, O>(s, warp_sums, &total);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// out[i] = offsets[tile] + sum of in[tile start .. i). Each thread owns SCAN_ITEMS consecutive
// values, staged through shared memory so that global loads and stores stay coalesced. When
// `total_out` is not null, the last tile also writes the grand total there.
template <typename I, typename O>
__device__ __forceinline__ void scan_tiles(const I* __restrict__ in, O* __restrict__ out, const O* __restrict__ offsets, u64 n,
                                           O* __restrict__ total_out) {
    __shared__ O tile[SCAN_TILE + SCAN_TILE / 32];
    __shared__ O warp_sums[SCAN_WARPS];
    __shared__ O total;
    const u64 base = (u64)blockIdx.x * SCAN_TILE;
    // Padding one word per 32 avoids bank conflicts on the blocked reads.
#define PAD(i) ((i) + ((i) >> 5))
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        u32 k = j * SCAN_THREADS + threadIdx.x;
        u64 i = base + k;
        tile[PAD(k)] = i < n ? (O)in[i] : 0;
    }
    __syncthreads();
    O v[SCAN_ITEMS];
    O s = 0;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; j++) {
        v[j] = tile[PAD(threadIdx.x * SCAN_ITEMS + j)];
        s += v[j];
    }
    O prefix = block_exclusive_scan<SCAN_WARPS, O>(s, warp_sums, &total) + offsets[blockIdx.x];
    if (total_out != nullptr && blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) *total_out = offsets[blockIdx.x] + total;
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

#define SCAN(REDUCE, TILES, I, O)                                                                                          \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS) REDUCE(const I* in, O* partials, u64 n) {                    \
        scan_reduce<I, O>(in, partials, n);                                                                                \
    }                                                                                                                      \
    extern "C" __global__ void __launch_bounds__(SCAN_THREADS)                                                             \
        TILES(const I* in, O* out, const O* offsets, u64 n, O* total_out) {                                               \
        scan_tiles<I, O>(in, out, offsets, n, total_out);                                                                  \
    }
SCAN(scan_reduce_u32, scan_tiles_u32, u32, u32)
SCAN(scan_reduce_u64, scan_tiles_u64, u64, u64)
SCAN(scan_reduce_u32_to_u64, scan_tiles_u32_to_u64, u32, u64)
