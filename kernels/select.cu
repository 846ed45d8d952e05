// Selection and flags: stable compaction of the positions whose byte flag has a wanted value,
// row-id sequences, setting flags at gathered positions, and packing byte flags into Arrow bitmaps.
#include "common.cuh"

#define SEL_THREADS 256
#define SEL_ITEMS 8
#define SEL_TILE (SEL_THREADS * SEL_ITEMS)
#define SEL_WARPS (SEL_THREADS / 32)

// counts[t] = number of i in tile t with flags[i] == want.
extern "C" __global__ void __launch_bounds__(SEL_THREADS) select_count(const u8* __restrict__ flags, u64 n, u32 want, u32* __restrict__ counts) {
    __shared__ u32 warp_sums[SEL_WARPS];
    __shared__ u32 total;
    const u64 base = (u64)blockIdx.x * SEL_TILE;
    u32 c = 0;
#pragma unroll
    for (int j = 0; j < SEL_ITEMS; j++) {
        const u64 i = base + (u64)j * SEL_THREADS + threadIdx.x;
        if (i < n && flags[i] == want) c++;
    }
    block_exclusive_scan<SEL_WARPS, u32>(c, warp_sums, &total);
    if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// out[offsets[t] + rank] = i for each selected i of tile t, in increasing order of i. Each thread
// owns SEL_ITEMS consecutive positions of the tile.
extern "C" __global__ void __launch_bounds__(SEL_THREADS)
    select_write(const u8* __restrict__ flags, u64 n, u32 want, const u32* __restrict__ offsets, u32* __restrict__ out) {
    __shared__ u32 warp_sums[SEL_WARPS];
    __shared__ u32 total;
    const u64 base = (u64)blockIdx.x * SEL_TILE + (u64)threadIdx.x * SEL_ITEMS;
    u32 mine = 0;
    u8 f[SEL_ITEMS];
#pragma unroll
    for (int j = 0; j < SEL_ITEMS; j++) {
        const u64 i = base + j;
        f[j] = i < n && flags[i] == want;
        mine += f[j];
    }
    u32 pos = block_exclusive_scan<SEL_WARPS, u32>(mine, warp_sums, &total) + offsets[blockIdx.x];
#pragma unroll
    for (int j = 0; j < SEL_ITEMS; j++) {
        if (f[j]) out[pos++] = (u32)(base + j);
    }
}

// out[i] = i.
extern "C" __global__ void iota_u32(u32* out, u64 n) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) out[i] = (u32)i;
}

// flags[idx[i]] = 1 for every i whose idx is a row (not NULL_ROW).
extern "C" __global__ void set_flags(const u32* __restrict__ idx, u64 n, u8* __restrict__ flags) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 r = idx[i];
        if (r != NULL_ROW) flags[r] = 1;
    }
}

// Bit i of `bitmap` = (flags[idx ? idx[i] : i] != 0). One warp writes one 32-bit word; the
// bitmap holds ceil(n / 32) words.
extern "C" __global__ void flags_to_bitmap(const u8* __restrict__ flags, const u32* __restrict__ idx, u64 n, u32* __restrict__ bitmap) {
    const u64 lane = threadIdx.x & 31;
    const u64 words = (n + 31) / 32;
    const u64 warp = global_thread_id() / 32, warps = grid_stride() / 32;
    for (u64 w = warp; w < words; w += warps) {
        const u64 i = w * 32 + lane;
        bool bit = false;
        if (i < n) {
            const u64 r = idx ? (u64)idx[i] : i;
            bit = flags[r] != 0;
        }
        const u32 word = __ballot_sync(0xffffffffu, bit);
        if (lane == 0) bitmap[w] = word;
    }
}

// pairs_out[i] = pairs_in[sel[i]] for two u32 arrays at once (compacting join pairs).
extern "C" __global__ void gather_pairs(const u32* __restrict__ a, const u32* __restrict__ b, const u32* __restrict__ sel, u64 n,
                                        u32* __restrict__ a_out, u32* __restrict__ b_out) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 s = sel[i];
        a_out[i] = a[s];
        b_out[i] = b[s];
    }
}

// out[i] = map ? map[idx[i]] : idx[i] (NULL_ROW stays NULL_ROW): positions to row ids.
extern "C" __global__ void compose_rows(const u32* __restrict__ map, const u32* __restrict__ idx, u64 n, u32* __restrict__ out) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 p = idx[i];
        out[i] = p == NULL_ROW ? NULL_ROW : map[p];
    }
}

// flags[i] |= !ok[i]: rows that do not take part count as flagged.
extern "C" __global__ void or_not_flags(const u8* __restrict__ ok, u64 n, u8* __restrict__ flags) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        if (!ok[i]) flags[i] = 1;
    }
}
