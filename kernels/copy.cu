// Bulk copies and fills: the device-memory bandwidth probe of `doctor`, and building blocks for
// materialisation.
#include "common.cuh"

// dst[i] = src[i] over 16-byte words; each thread moves one 16-byte vector per iteration, so a
// warp reads and writes 512 contiguous bytes.
extern "C" __global__ void copy_u128(const uint4* __restrict__ src, uint4* __restrict__ dst, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = src[i];
    }
}

// Byte copy for the tail that is not a multiple of 16 bytes.
extern "C" __global__ void copy_u8(const u8* __restrict__ src, u8* __restrict__ dst, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = src[i];
    }
}

// dst[i] = value for i < n.
extern "C" __global__ void fill_u32(u32* __restrict__ dst, u32 value, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = value;
    }
}

// dst holds n 16-byte little-endian integers, each the sign extension of src[i]: Decimal128 values
// that crossed the link as 8-byte integers (see `columns::device::upload_pieces`).
extern "C" __global__ void widen_i64_to_i128(const long long* __restrict__ src, long long* __restrict__ dst, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        long long v = src[i];
        dst[2 * i] = v;
        dst[2 * i + 1] = v >> 63;
    }
}

// dst holds n 16-byte little-endian integers, each the sign extension of src[i]: Decimal128 values
// that crossed the link as 4-byte integers.
extern "C" __global__ void widen_i32_to_i128(const int* __restrict__ src, long long* __restrict__ dst, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        long long v = src[i];
        dst[2 * i] = v;
        dst[2 * i + 1] = v >> 63;
    }
}

// dst[i] is the sign extension of src[i]: Int64 values that crossed the link as 4-byte integers.
extern "C" __global__ void widen_i32_to_i64(const int* __restrict__ src, long long* __restrict__ dst, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = src[i];
    }
}

// Frame of reference: dst[i] = base + src[i], integers that crossed the link as their distance above
// `base` in one or two bytes (`Narrowing::Offset`), widened to 4, 8 or 16 bytes (Int32 and Date32,
// Int64, Decimal128 sign-extended).
#define WIDEN_OFFSET(NAME, FROM, TO)                                                                     \
    extern "C" __global__ void NAME(const FROM* __restrict__ src, TO* __restrict__ dst, u64 n, long long base) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                   \
            dst[i] = (TO)(base + (long long)src[i]);                                                    \
        }                                                                                               \
    }
WIDEN_OFFSET(widen_u8_to_i32, unsigned char, int)
WIDEN_OFFSET(widen_u16_to_i32, unsigned short, int)
WIDEN_OFFSET(widen_u8_to_i64, unsigned char, long long)
WIDEN_OFFSET(widen_u16_to_i64, unsigned short, long long)

#define WIDEN_OFFSET_128(NAME, FROM)                                                                     \
    extern "C" __global__ void NAME(const FROM* __restrict__ src, long long* __restrict__ dst, u64 n, long long base) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                   \
            long long v = base + (long long)src[i];                                                     \
            dst[2 * i] = v;                                                                             \
            dst[2 * i + 1] = v >> 63;                                                                   \
        }                                                                                               \
    }
WIDEN_OFFSET_128(widen_u8_to_i128, unsigned char)
WIDEN_OFFSET_128(widen_u16_to_i128, unsigned short)

// The same from 3-byte little-endian distances (a host image's, `columns::image`): value i is
// bytes 3i..3i+3 of src. A warp reads 96 contiguous bytes.
#define WIDEN_OFFSET_U24(NAME, TO)                                                                       \
    extern "C" __global__ void NAME(const u8* __restrict__ src, TO* __restrict__ dst, u64 n, long long base) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                   \
            const u8* p = src + 3 * i;                                                                  \
            long long d = (long long)p[0] | ((long long)p[1] << 8) | ((long long)p[2] << 16);           \
            dst[i] = (TO)(base + d);                                                                    \
        }                                                                                               \
    }
WIDEN_OFFSET_U24(widen_u24_to_i32, int)
WIDEN_OFFSET_U24(widen_u24_to_i64, long long)

extern "C" __global__ void widen_u24_to_i128(const u8* __restrict__ src, long long* __restrict__ dst, u64 n, long long base) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u8* p = src + 3 * i;
        long long v = base + ((long long)p[0] | ((long long)p[1] << 8) | ((long long)p[2] << 16));
        dst[2 * i] = v;
        dst[2 * i + 1] = v >> 63;
    }
}

// String offsets rebuilt from each row's length: out[0] = 0 and out[i + 1] is where row i ends.
// Rows come in tiles of OFFSETS_TILE (`LENGTH_TILE_ROWS` in src/columns/host.rs) and starts[t] is
// where tile t's first row starts: the host lays the rows out and knows it, so each block scans
// one tile and no pass over the tiles is needed. String columns assembled from Arrow views cross
// the link this way, 1 or 4 bytes a row instead of 8 (`AssembledColumn::from_views`).
#define OFFSETS_THREADS 256
#define OFFSETS_ITEMS 8
#define OFFSETS_TILE (OFFSETS_THREADS * OFFSETS_ITEMS)
template <typename L>
__device__ __forceinline__ void offsets_from_lengths(const L* __restrict__ lengths, const u64* __restrict__ starts,
                                                     u64* __restrict__ out, u64 n) {
    __shared__ u64 warp_sums[OFFSETS_THREADS / 32];
    __shared__ u64 total;
    const u64 first = (u64)blockIdx.x * OFFSETS_TILE + (u64)threadIdx.x * OFFSETS_ITEMS;
    u64 v[OFFSETS_ITEMS];
    u64 s = 0;
#pragma unroll
    for (int j = 0; j < OFFSETS_ITEMS; j++) {
        u64 i = first + j;
        v[j] = i < n ? (u64)lengths[i] : 0;
        s += v[j];
    }
    u64 end = block_exclusive_scan<OFFSETS_THREADS / 32, u64>(s, warp_sums, &total) + starts[blockIdx.x];
#pragma unroll
    for (int j = 0; j < OFFSETS_ITEMS; j++) {
        u64 i = first + j;
        end += v[j];
        if (i < n) out[i + 1] = end;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 0;
}
extern "C" __global__ void __launch_bounds__(OFFSETS_THREADS)
    offsets_from_u8_lengths(const unsigned char* lengths, const u64* starts, u64* out, u64 n) {
    offsets_from_lengths<unsigned char>(lengths, starts, out, n);
}
extern "C" __global__ void __launch_bounds__(OFFSETS_THREADS)
    offsets_from_u32_lengths(const u32* lengths, const u64* starts, u64* out, u64 n) {
    offsets_from_lengths<u32>(lengths, starts, out, n);
}
