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

// Inclusive prefix sum across the warp (u32 or u64).
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
    const u32 lane = threadIdx.x & 31;
#pragma unroll
    for (u32 d = 1; d < 32; d <<= 1) {
        T t = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += t;
    }
    return v;
}

// Exclusive prefix sum of one value per thread across a block of `WARPS` warps; `warp_sums`
// is shared scratch of WARPS entries. Returns the thread's exclusive prefix and writes the
// block's total to *total. Every thread of the block must call it.
template <int WARPS, typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* warp_sums, T* total) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    T inc = warp_inclusive_scan<T>(v);
    if (lane == 31) warp_sums[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        T s = lane < WARPS ? warp_sums[lane] : 0;
        T si = warp_inclusive_scan<T>(s);
        if (lane < WARPS) warp_sums[lane] = si - s;
        if (lane == WARPS - 1) *total = si;
    }
    __syncthreads();
    return warp_sums[warp] + inc - v;
}

// String offsets from each row's length, a block of THREADS threads a tile of THREADS * ITEMS
// rows, tile t's first row starting at starts[t] (whoever laid the rows out, or an earlier pass
// over the tiles, knows it): out[0] = 0 and out[i + 1] = where row i ends. `length(i)` is row
// i's length. Each thread takes ITEMS consecutive rows.
template <int THREADS, int ITEMS, typename O, typename Length>
__device__ __forceinline__ void tile_offsets(Length length, const u64* __restrict__ starts, O* __restrict__ out, u64 n) {
    __shared__ u64 warp_sums[THREADS / 32];
    __shared__ u64 total;
    const u64 first = (u64)blockIdx.x * (THREADS * ITEMS) + (u64)threadIdx.x * ITEMS;
    u64 v[ITEMS];
    u64 s = 0;
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
        const u64 i = first + j;
        v[j] = i < n ? length(i) : 0;
        s += v[j];
    }
    u64 end = block_exclusive_scan<THREADS / 32, u64>(s, warp_sums, &total) + starts[blockIdx.x];
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
        const u64 i = first + j;
        end += v[j];
        if (i < n) out[i + 1] = (O)end;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 0;
}

// Marks "no row": an outer join's missing side, gathered as NULL.
#define NULL_ROW 0xffffffffu

// Bijective 32- and 64-bit mixers (MurmurHash3's finalisers): every step is invertible, so
// equal outputs mean equal inputs, and the low bits are well spread for radix partitioning.
__device__ __forceinline__ u32 mix32(u32 h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

__device__ __forceinline__ u64 mix64(u64 k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

// How a key column's nulls are treated (kernels/keys.cu).
#define NULLS_ABSENT 0  // the column has no nulls (validity is null)
#define NULLS_DROP 1    // NULL never equals anything: the row does not take part
#define NULLS_VALUE 2   // NULL equals NULL: a null bit (narrow) or marker (wide) joins the key

// The key word of row i of one narrow fixed-width key column whose rows all take part: the
// value's bits with the null bit above them (NULLS_VALUE), mixed to 32 bits when `width32`, to
// 64 otherwise. The same word as packing then finishing (kernels/keys.cu), in one step, so that
// group-by kernels can read a key column directly.
template <typename U>
__device__ __forceinline__ u64 single_word(const U* __restrict__ values, const u8* __restrict__ validity, u64 i, u32 null_mode,
                                           u32 width32) {
    constexpr u32 bits = 8 * sizeof(U);
    const bool valid = validity == nullptr || bit_is_set(validity, i);
    u64 a = (null_mode == NULLS_VALUE && !valid) ? 1ull : 0ull;
    const u64 v = valid ? (u64)values[i] : 0ull;
    a = bits >= 64 ? v : ((a << bits) | v);
    return width32 ? (u64)mix32((u32)a) : mix64(a);
}
