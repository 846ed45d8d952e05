// Materialisation: building output columns from row ids. A row id of NULL_ROW stands for the
// missing side of an outer join and produces NULL. Fixed-width values, bitmaps (validity and
// Boolean values) and strings (i32 or i64 offsets) each have their gather.
#include "common.cuh"

// out[i] = in[idx[i]], or zero for NULL_ROW.
#define GATHER_NULLABLE(NAME, T, ZERO)                                                                                  \
    extern "C" __global__ void NAME(const T* __restrict__ in, const u32* __restrict__ idx, T* __restrict__ out, u64 n) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {                                                   \
            const u32 r = idx[i];                                                                                       \
            out[i] = r == NULL_ROW ? ZERO : in[r];                                                                      \
        }                                                                                                               \
    }
GATHER_NULLABLE(mat_gather_w1, u8, 0)
GATHER_NULLABLE(mat_gather_w2, unsigned short, 0)
GATHER_NULLABLE(mat_gather_w4, u32, 0)
GATHER_NULLABLE(mat_gather_w8, u64, 0)
GATHER_NULLABLE(mat_gather_w16, uint4, make_uint4(0, 0, 0, 0))

// Bit i of `out` = idx[i] is a row and (bits is null, or bit idx[i] of bits is set). For a
// validity bitmap, `bits` is the input's validity (null when it has no nulls) and the unset bits
// are counted into *zeros; for Boolean values `zeros` is null. One warp writes one 32-bit word.
extern "C" __global__ void mat_gather_bits(const u8* __restrict__ bits, const u32* __restrict__ idx, u64 n, u32* __restrict__ out,
                                           unsigned long long* __restrict__ zeros) {
    const u64 lane = threadIdx.x & 31;
    const u64 words = (n + 31) / 32;
    const u64 warp = global_thread_id() / 32, warps = grid_stride() / 32;
    u32 unset = 0;
    for (u64 w = warp; w < words; w += warps) {
        const u64 i = w * 32 + lane;
        bool bit = false;
        if (i < n) {
            const u32 r = idx[i];
            bit = r != NULL_ROW && (bits == nullptr || bit_is_set(bits, r));
            unset += bit ? 0 : 1;
        }
        const u32 word = __ballot_sync(0xffffffffu, bit);
        if (lane == 0) out[w] = word;
    }
    if (zeros != nullptr) {
        for (int d = 16; d > 0; d >>= 1) unset += __shfl_down_sync(0xffffffffu, unset, d);
        if (lane == 0 && unset > 0) atomicAdd(zeros, (unsigned long long)unset);
    }
}

// Lengths of the strings at idx (0 for NULL_ROW).
template <typename O>
__device__ __forceinline__ void str_lengths(const O* __restrict__ offsets, const u32* __restrict__ idx, u64 n, u32* __restrict__ lens) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 r = idx[i];
        lens[i] = r == NULL_ROW ? 0u : (u32)(offsets[r + 1] - offsets[r]);
    }
}

extern "C" __global__ void mat_str_lengths32(const i32* offsets, const u32* idx, u64 n, u32* lens) { str_lengths<i32>(offsets, idx, n, lens); }
extern "C" __global__ void mat_str_lengths64(const i64* offsets, const u32* idx, u64 n, u32* lens) { str_lengths<i64>(offsets, idx, n, lens); }

// Copies the strings at idx to their output starts (the exclusive scan of the lengths); one warp
// per string, lanes over its bytes. Writes the output offsets, out_offsets[n] = total included.
template <typename O>
__device__ __forceinline__ void str_copy(const O* __restrict__ in_offsets, const u8* __restrict__ in_bytes, const u32* __restrict__ idx,
                                         const u64* __restrict__ starts, u64 n, u64 total, O* __restrict__ out_offsets,
                                         u8* __restrict__ out_bytes) {
    const u64 lane = threadIdx.x & 31;
    const u64 warp = global_thread_id() / 32, warps = grid_stride() / 32;
    for (u64 i = warp; i < n; i += warps) {
        const u64 dst = starts[i];
        if (lane == 0) out_offsets[i] = (O)dst;
        const u32 r = idx[i];
        if (r == NULL_ROW) continue;
        const u64 src = (u64)in_offsets[r];
        const u64 len = (u64)in_offsets[r + 1] - src;
        for (u64 b = lane; b < len; b += 32) out_bytes[dst + b] = in_bytes[src + b];
    }
    if (global_thread_id() == 0) out_offsets[n] = (O)total;
}

extern "C" __global__ void mat_str_copy32(const i32* in_offsets, const u8* in_bytes, const u32* idx, const u64* starts, u64 n, u64 total,
                                          i32* out_offsets, u8* out_bytes) {
    str_copy<i32>(in_offsets, in_bytes, idx, starts, n, total, out_offsets, out_bytes);
}

extern "C" __global__ void mat_str_copy64(const i64* in_offsets, const u8* in_bytes, const u32* idx, const u64* starts, u64 n, u64 total,
                                          i64* out_offsets, u8* out_bytes) {
    str_copy<i64>(in_offsets, in_bytes, idx, starts, n, total, out_offsets, out_bytes);
}

// Dictionary keys of any integer width, widened to u32 row ids of the values (NULL_ROW where the
// key is null), so that the values can be gathered: decoding a dictionary column on the device.
template <typename T>
__device__ __forceinline__ void dict_rows(const T* __restrict__ keys, const u8* __restrict__ validity, u64 n, u32* __restrict__ rows) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const bool valid = validity == nullptr || bit_is_set(validity, i);
        rows[i] = valid ? (u32)keys[i] : NULL_ROW;
    }
}
extern "C" __global__ void mat_dict_rows_w1(const u8* k, const u8* v, u64 n, u32* r) { dict_rows<u8>(k, v, n, r); }
extern "C" __global__ void mat_dict_rows_w2(const unsigned short* k, const u8* v, u64 n, u32* r) { dict_rows<unsigned short>(k, v, n, r); }
extern "C" __global__ void mat_dict_rows_w4(const u32* k, const u8* v, u64 n, u32* r) { dict_rows<u32>(k, v, n, r); }
extern "C" __global__ void mat_dict_rows_w8(const u64* k, const u8* v, u64 n, u32* r) { dict_rows<u64>(k, v, n, r); }

// Dictionary-coded strings (the table cache's packed string columns, src/columns/packed.rs):
// row i holds values[codes[i]], or nothing where it is null. Rows come in tiles of DICT_TILE
// (`DICTIONARY_TILE_ROWS` there); the encoder sums each tile's bytes with dict_tile_bytes_* and
// scans the sums into each tile's start, so that decoding is a block a tile for the offsets
// (dict_offsets_*) and a thread a row for the bytes (dict_bytes_*: the values are few and short,
// and stay in the caches). K is the code type (u8 or u16), O the offset type (i32 or i64).
#define DICT_THREADS 256
#define DICT_ITEMS 8
#define DICT_TILE (DICT_THREADS * DICT_ITEMS)

template <typename K, typename O>
__device__ __forceinline__ u64 dict_row_bytes(const K* __restrict__ codes, const u8* __restrict__ validity,
                                              const O* __restrict__ value_offsets, u64 i) {
    if (validity != nullptr && !bit_is_set(validity, i)) return 0;
    const u64 c = (u64)codes[i];
    return (u64)(value_offsets[c + 1] - value_offsets[c]);
}

// sums[b] = the bytes of tile b's rows; a block of DICT_THREADS threads a tile.
template <typename K, typename O>
__device__ __forceinline__ void dict_tile_bytes(const K* __restrict__ codes, const u8* __restrict__ validity,
                                                const O* __restrict__ value_offsets, u64 n, u64* __restrict__ sums) {
    __shared__ u64 warp_sums[DICT_THREADS / 32];
    __shared__ u64 total;
    const u64 first = (u64)blockIdx.x * DICT_TILE + (u64)threadIdx.x * DICT_ITEMS;
    u64 s = 0;
#pragma unroll
    for (int j = 0; j < DICT_ITEMS; j++) {
        const u64 i = first + j;
        if (i < n) s += dict_row_bytes<K, O>(codes, validity, value_offsets, i);
    }
    block_exclusive_scan<DICT_THREADS / 32, u64>(s, warp_sums, &total);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

// out[0] = 0 and out[i + 1] = where row i ends, tile t's rows starting at starts[t].
template <typename K, typename O>
__device__ __forceinline__ void dict_offsets(const K* __restrict__ codes, const u8* __restrict__ validity,
                                             const O* __restrict__ value_offsets, const u64* __restrict__ starts, u64 n,
                                             O* __restrict__ out) {
    tile_offsets<DICT_THREADS, DICT_ITEMS, O>(
        [=](u64 i) { return dict_row_bytes<K, O>(codes, validity, value_offsets, i); }, starts, out, n);
}

// Each valid row's value copied to where dict_offsets put it.
template <typename K, typename O>
__device__ __forceinline__ void dict_bytes(const K* __restrict__ codes, const u8* __restrict__ validity,
                                           const O* __restrict__ value_offsets, const u8* __restrict__ value_bytes,
                                           const O* __restrict__ out_offsets, u64 n, u8* __restrict__ out) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        if (validity != nullptr && !bit_is_set(validity, i)) continue;
        const u64 c = (u64)codes[i];
        const u64 src = (u64)value_offsets[c], len = (u64)value_offsets[c + 1] - src;
        const u64 dst = (u64)out_offsets[i];
        for (u64 b = 0; b < len; b++) out[dst + b] = value_bytes[src + b];
    }
}

#define DICT_KERNELS(TILE_BYTES, OFFSETS, BYTES, K, O)                                                                 \
    extern "C" __global__ void __launch_bounds__(DICT_THREADS)                                                          \
        TILE_BYTES(const K* codes, const u8* validity, const O* value_offsets, u64 n, u64* sums) {                      \
        dict_tile_bytes<K, O>(codes, validity, value_offsets, n, sums);                                                 \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(DICT_THREADS)                                                          \
        OFFSETS(const K* codes, const u8* validity, const O* value_offsets, const u64* starts, u64 n, O* out) {         \
        dict_offsets<K, O>(codes, validity, value_offsets, starts, n, out);                                             \
    }                                                                                                                   \
    extern "C" __global__ void BYTES(const K* codes, const u8* validity, const O* value_offsets, const u8* value_bytes, \
                                     const O* out_offsets, u64 n, u8* out) {                                            \
        dict_bytes<K, O>(codes, validity, value_offsets, value_bytes, out_offsets, n, out);                             \
    }
DICT_KERNELS(mat_dict_tile_bytes_k1_o32, mat_dict_offsets_k1_o32, mat_dict_bytes_k1_o32, u8, i32)
DICT_KERNELS(mat_dict_tile_bytes_k1_o64, mat_dict_offsets_k1_o64, mat_dict_bytes_k1_o64, u8, i64)
DICT_KERNELS(mat_dict_tile_bytes_k2_o32, mat_dict_offsets_k2_o32, mat_dict_bytes_k2_o32, unsigned short, i32)
DICT_KERNELS(mat_dict_tile_bytes_k2_o64, mat_dict_offsets_k2_o64, mat_dict_bytes_k2_o64, unsigned short, i64)
