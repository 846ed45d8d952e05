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
