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
    tile_offsets<OFFSETS_THREADS, OFFSETS_ITEMS, u64>([=](u64 i) { return (u64)lengths[i]; }, starts, out, n);
}
extern "C" __global__ void __launch_bounds__(OFFSETS_THREADS)
    offsets_from_u8_lengths(const unsigned char* lengths, const u64* starts, u64* out, u64 n) {
    offsets_from_lengths<unsigned char>(lengths, starts, out, n);
}
extern "C" __global__ void __launch_bounds__(OFFSETS_THREADS)
    offsets_from_u32_lengths(const u32* lengths, const u64* starts, u64* out, u64 n) {
    offsets_from_lengths<u32>(lengths, starts, out, n);
}

// The range of a column's values, every slot included (null slots too, so that packing them is
// lossless): block b writes out[3b] = its least value, out[3b + 1] = its greatest and
// out[3b + 2] = 1 when one of its 16-byte values does not fit 8 bytes (else 0). Values are read
// as signed 8-byte integers (4-byte ones sign-extended, 16-byte ones by their low word). The
// host reduces the blocks' triples (`columns::packed`). 256 threads a block.
#define RANGE_THREADS 256
template <int WIDTH>
__device__ __forceinline__ void value_range(const void* __restrict__ src, u64 n, i64* __restrict__ out) {
    __shared__ i64 lows[RANGE_THREADS / 32], highs[RANGE_THREADS / 32];
    __shared__ int wides[RANGE_THREADS / 32];
    i64 lo = 0x7fffffffffffffffLL, hi = (i64)0x8000000000000000ULL;
    int wide = 0;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        i64 v;
        if (WIDTH == 4) {
            v = ((const int*)src)[i];
        } else if (WIDTH == 8) {
            v = ((const i64*)src)[i];
        } else {
            v = ((const i64*)src)[2 * i];
            wide |= ((const i64*)src)[2 * i + 1] != (v >> 63);
        }
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    for (int d = 16; d > 0; d >>= 1) {
        i64 l = __shfl_down_sync(0xffffffffu, lo, d);
        i64 h = __shfl_down_sync(0xffffffffu, hi, d);
        int w = __shfl_down_sync(0xffffffffu, wide, d);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
        wide |= w;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        lows[warp] = lo;
        highs[warp] = hi;
        wides[warp] = wide;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < RANGE_THREADS / 32; w++) {
            lo = lows[w] < lo ? lows[w] : lo;
            hi = highs[w] > hi ? highs[w] : hi;
            wide |= wides[w];
        }
        out[3 * blockIdx.x] = lo;
        out[3 * blockIdx.x + 1] = hi;
        out[3 * blockIdx.x + 2] = wide;
    }
}
extern "C" __global__ void __launch_bounds__(RANGE_THREADS) value_range_i32(const void* src, u64 n, i64* out) {
    value_range<4>(src, n, out);
}
extern "C" __global__ void __launch_bounds__(RANGE_THREADS) value_range_i64(const void* src, u64 n, i64* out) {
    value_range<8>(src, n, out);
}
extern "C" __global__ void __launch_bounds__(RANGE_THREADS) value_range_i128(const void* src, u64 n, i64* out) {
    value_range<16>(src, n, out);
}

// Packing, the inverse of the widen_* kernels above: each value's distance above `base` in one,
// two or three bytes (a frame of reference), or the value itself in fewer bytes. The caller has
// checked with value_range_* that every value fits. FROM is the values' width in bytes (4, 8 or
// 16, of which the low 8 are read).
template <int FROM>
__device__ __forceinline__ i64 packed_value(const void* __restrict__ src, u64 i) {
    if (FROM == 4) return ((const int*)src)[i];
    if (FROM == 8) return ((const i64*)src)[i];
    return ((const i64*)src)[2 * i];
}
#define PACK_OFFSET(NAME, FROM, TO)                                                                           \
    extern "C" __global__ void NAME(const void* __restrict__ src, TO* __restrict__ dst, u64 n, long long base) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                        \
            dst[i] = (TO)(packed_value<FROM>(src, i) - base);                                                \
        }                                                                                                    \
    }
PACK_OFFSET(pack_i32_to_u8, 4, unsigned char)
PACK_OFFSET(pack_i32_to_u16, 4, unsigned short)
PACK_OFFSET(pack_i64_to_u8, 8, unsigned char)
PACK_OFFSET(pack_i64_to_u16, 8, unsigned short)
PACK_OFFSET(pack_i128_to_u8, 16, unsigned char)
PACK_OFFSET(pack_i128_to_u16, 16, unsigned short)
#define PACK_OFFSET_U24(NAME, FROM)                                                                           \
    extern "C" __global__ void NAME(const void* __restrict__ src, u8* __restrict__ dst, u64 n, long long base) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                        \
            u64 d = (u64)(packed_value<FROM>(src, i) - base);                                                \
            dst[3 * i] = (u8)d;                                                                              \
            dst[3 * i + 1] = (u8)(d >> 8);                                                                   \
            dst[3 * i + 2] = (u8)(d >> 16);                                                                  \
        }                                                                                                    \
    }
PACK_OFFSET_U24(pack_i32_to_u24, 4)
PACK_OFFSET_U24(pack_i64_to_u24, 8)
PACK_OFFSET_U24(pack_i128_to_u24, 16)
// The values themselves in 4 or 8 bytes (the inverse of widen_i32_to_i64, widen_i32_to_i128 and
// widen_i64_to_i128).
#define PACK_TRUNCATE(NAME, FROM, TO)                                                                         \
    extern "C" __global__ void NAME(const void* __restrict__ src, TO* __restrict__ dst, u64 n) {             \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                        \
            dst[i] = (TO)packed_value<FROM>(src, i);                                                         \
        }                                                                                                    \
    }
PACK_TRUNCATE(pack_i64_to_i32, 8, int)
PACK_TRUNCATE(pack_i128_to_i32, 16, int)
PACK_TRUNCATE(pack_i128_to_i64, 16, long long)
