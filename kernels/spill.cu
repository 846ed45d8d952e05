// Out-of-core join (Lutz et al. 2022, Triton join): the partition of each row, and device concatenation
// of the pieces a partition was spilled in (device pieces, or row ranges of host chunks).
#include "common.cuh"

// Partition of each row that takes part in matching: the top bits of its key word (key words are
// mixed, so every bit is uniform; the in-memory join partitions on the low bits, so the two
// levels stay independent). `part` is zero-filled first: rows with a NULL key that takes no part
// stay in partition 0. `item_rows` maps items to rows (null: item i is row i).
extern "C" __global__ void spill_part_k32(const u32* __restrict__ keys, u64 items, const u32* __restrict__ item_rows,
                                          u32 shift, u32* __restrict__ part) {
    for (u64 i = global_thread_id(); i < items; i += grid_stride()) {
        const u64 row = item_rows ? (u64)item_rows[i] : i;
        part[row] = keys[i] >> shift;
    }
}

extern "C" __global__ void spill_part_k64(const u64* __restrict__ keys, u64 items, const u32* __restrict__ item_rows,
                                          u32 shift, u32* __restrict__ part) {
    for (u64 i = global_thread_id(); i < items; i += grid_stride()) {
        const u64 row = item_rows ? (u64)item_rows[i] : i;
        part[row] = (u32)(keys[i] >> shift);
    }
}

// Bits [first, first + n) of the LSB-first bitmap `src` (all set when src is null) into bits
// [at, at + n) of `dst`, which was zero-filled. Neighbouring pieces may share a word, hence
// atomicOr.
extern "C" __global__ void concat_bits(const u8* __restrict__ src, u64 first, u64 n, u64 at, u32* dst) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        if (src == 0 || bit_is_set(src, first + i)) {
            const u64 b = at + i;
            atomicOr(&dst[b >> 5], 1u << (b & 31));
        }
    }
}

// dst[i] = src[i] + delta for i < n: one piece's string offsets (n = its rows + 1) moved behind
// the bytes of the pieces before it.
extern "C" __global__ void concat_offsets_i32(const i32* __restrict__ src, u64 n, i64 delta, i32* __restrict__ dst) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = (i32)((i64)src[i] + delta);
    }
}

extern "C" __global__ void concat_offsets_i64(const i64* __restrict__ src, u64 n, i64 delta, i64* __restrict__ dst) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        dst[i] = src[i] + delta;
    }
}
