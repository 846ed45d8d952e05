// Shared helpers for every kernel family. Compiled by NVRTC at run time (no CUDA toolkit at build
// time), so only built-in types are used: no <cstdint>.
#pragma once

typedef unsigned char u8;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

// Index of this thread in a 1-D grid, and the grid's stride, as 64-bit values so that inputs
// over 2^31 elements index correctly.
__device__ __forceinline__ u64 global_thread_id() {
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ u64 grid_stride() {
    return (u64)gridDim.x * (u64)blockDim.x;
}

// Bit i of an Arrow validity bitmap (LSB-first), 1 = valid.
__device__ __forceinline__ bool bit_is_set(const u8* bits, u64 i) {
    return (bits[i >> 3] >> (i & 7)) & 1;
}

// Bits of lanes below this one in the warp.
__device__ __forceinline__ u32 lanemask_lt() {
    u32 m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

// Inclusive prefix sum across the warp.
__device__ __forceinline__ u32 warp_inclusive_scan(u32 v) {
    const u32 lane = threadIdx.x & 31;
#pragma unroll
    for (u32 d = 1; d < 32; d <<= 1) {
        u32 t = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += t;
    }
    return v;
}

// Exclusive prefix sum of one value per thread across a block of `WARPS` warps; `warp_sums`
// is shared scratch of WARPS entries. Returns the thread's exclusive prefix and writes the
// block's total to *total. Every thread of the block must call it.
template <int WARPS>
__device__ __forceinline__ u32 block_exclusive_scan(u32 v, u32* warp_sums, u32* total) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 inc = warp_inclusive_scan(v);
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        u32 s = lane < WARPS ? warp_sums[lane] : 0;
        u32 si = warp_inclusive_scan(s);
        if (lane < WARPS) warp_sums[lane] = si - s;
        if (lane == WARPS - 1) *total = si;
    }
    __syncthreads();
    return warp_sums[warp] + inc - v;
}
