// Stable LSD radix passes over unsigned keys with a payload: per-tile digit histograms, an
// exclusive scan of them (digit-major, so offsets[d * tiles + t] is where tile t's keys with
// digit d start), then a scatter that ranks keys stably inside each tile. One pass sorts by one
// digit of up to 8 bits; sorting by a bit range [begin, end) is a radix partition.
#include "common.cuh"

#define RADIX_THREADS 256
#define RADIX_WARPS (RADIX_THREADS / 32)
#define RADIX_BINS 256
// Items per thread: a tile is RADIX_THREADS * ITEMS items, 16 for 32-bit keys with 32-bit values
// and 8 otherwise, so that a tile's keys and values fit in 48 KB of shared memory with the
// counters. The host uses the same tile sizes.

template <typename K, int ITEMS>
__device__ __forceinline__ void histogram(const K* __restrict__ keys, u64 n, u32 shift, u32 mask, u32* __restrict__ hist) {
    __shared__ u32 counts[RADIX_BINS];
    for (u32 d = threadIdx.x; d < RADIX_BINS; d += RADIX_THREADS) counts[d] = 0;
    __syncthreads();
    const u64 base = (u64)blockIdx.x * (RADIX_THREADS * ITEMS);
#pragma unroll
    for (int j = 0; j < ITEMS; j++) {
        u64 i = base + (u64)j * RADIX_THREADS + threadIdx.x;
        if (i < n) atomicAdd(&counts[(u32)(keys[i] >> shift) & mask], 1u);
    }
    __syncthreads();
    for (u32 d = threadIdx.x; d <= mask; d += RADIX_THREADS) hist[(u64)d * gridDim.x + blockIdx.x] = counts[d];
}

// Shared memory of one tile's ranking.
struct TileRank {
    u32 warp_hist[RADIX_WARPS][RADIX_BINS];
    u32 tile_start[RADIX_BINS];    // digit's first sorted position inside the tile
    u32 global_start[RADIX_BINS];  // digit's first output position for this tile
    u32 scan_scratch[RADIX_WARPS];
    u32 scan_total;
};

// Ranks the tile of RADIX_THREADS * ITEMS keys at `base` for a stable scatter:
// 1. Warp w ranks the tile's items [w * 32 * ITEMS, (w + 1) * 32 * ITEMS) in ITEMS rounds of 32
//    consecutive items, with warp-private digit counters: rank = earlier items of the warp with
//    the same digit (no block barrier while ranking).
// 2. Per digit, an exclusive prefix over warps (warp order is input order) plus the digit's start
//    inside the tile gives each item its tile-local sorted position pos[r].
// Item r of this thread is tile item warp * 32 * ITEMS + r * 32 + lane; its digit is RADIX_BINS
// past the end of the input. Every thread of the block calls it; it ends with a barrier.
template <typename K, int ITEMS>
__device__ __forceinline__ void rank_tile(const K* __restrict__ keys_in, u64 n, u32 shift, u32 mask, const u32* __restrict__ offsets,
                                          TileRank& s, u64 base, u64 tile_n, K (&k)[ITEMS], u32 (&digit)[ITEMS], u32 (&pos)[ITEMS]) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Digit starts: this tile's count of each digit is in the (unscanned) histogram, whose scan
    // `offsets` also gives where the tile's run of each digit starts in the output.
    u32 count = 0;
    const u32 d0 = threadIdx.x;  // RADIX_THREADS == RADIX_BINS: one digit per thread
    if (d0 <= mask) {
        const u64 at = (u64)d0 * gridDim.x + blockIdx.x;
        s.global_start[d0] = offsets[at];
        // The next entry of the scanned histogram, minus this one, is the count.
        const u64 total_entries = (u64)(mask + 1) * gridDim.x;
        const u32 next = at + 1 < total_entries ? offsets[at + 1] : (u32)n;
        count = next - offsets[at];
    }
    for (u32 w = 0; w < RADIX_WARPS; w++) s.warp_hist[w][d0] = 0;
    const u32 start = block_exclusive_scan<RADIX_WARPS>(count, s.scan_scratch, &s.scan_total);
    s.tile_start[d0] = start;
    __syncthreads();

    u32 rank[ITEMS];
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 t = warp * 32 * ITEMS + r * 32 + lane;
        const bool valid = t < tile_n;
        digit[r] = RADIX_BINS;  // invalid lanes group together and count nowhere
        k[r] = 0;
        if (valid) {
            k[r] = keys_in[base + t];
            digit[r] = (u32)(k[r] >> shift) & mask;
        }
        const u32 peers = __match_any_sync(0xffffffffu, digit[r]);
        const u32 before = __popc(peers & lanemask_lt());
        u32 prior = 0;
        if (valid) prior = s.warp_hist[warp][digit[r]];
        rank[r] = prior + before;
        __syncwarp();
        if (valid && before == 0) s.warp_hist[warp][digit[r]] = prior + __popc(peers);
        __syncwarp();
    }
    __syncthreads();
    {
        u32 run = 0;
#pragma unroll
        for (u32 w = 0; w < RADIX_WARPS; w++) {
            const u32 c = s.warp_hist[w][d0];
            s.warp_hist[w][d0] = run;
            run += c;
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        pos[r] = digit[r] < RADIX_BINS ? s.tile_start[digit[r]] + s.warp_hist[warp][digit[r]] + rank[r] : 0;
    }
}

// Stable scatter of one tile of (key, value) pairs: ranked by `rank_tile`, reordered by digit in
// shared memory, then written out in that order, so that consecutive threads write consecutive
// positions of the same digit run (coalesced). keys_out may be null.
template <typename K, typename V, int ITEMS>
__device__ __forceinline__ void scatter(const K* __restrict__ keys_in, const V* __restrict__ vals_in, K* __restrict__ keys_out,
                                        V* __restrict__ vals_out, u64 n, u32 shift, u32 mask, const u32* __restrict__ offsets) {
    constexpr int TILE = RADIX_THREADS * ITEMS;
    __shared__ TileRank rs;
    __shared__ K s_keys[TILE];
    __shared__ V s_vals[TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u64 base = (u64)blockIdx.x * TILE;
    const u64 tile_n = n - base < (u64)TILE ? n - base : (u64)TILE;
    K k[ITEMS];
    u32 digit[ITEMS];
    u32 pos[ITEMS];
    rank_tile<K, ITEMS>(keys_in, n, shift, mask, offsets, rs, base, tile_n, k, digit, pos);
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        if (digit[r] < RADIX_BINS) {
            s_keys[pos[r]] = k[r];
            s_vals[pos[r]] = vals_in[base + warp * 32 * ITEMS + r * 32 + lane];
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 j = r * RADIX_THREADS + threadIdx.x;
        if (j < tile_n) {
            const K key = s_keys[j];
            const u32 d = (u32)(key >> shift) & mask;
            const u32 out = rs.global_start[d] + (j - rs.tile_start[d]);
            if (keys_out) keys_out[out] = key;
            vals_out[out] = s_vals[j];
        }
    }
}

// Histograms for tiles of 16 and 8 items per thread; a pass uses the scatter's tile size.
#define HISTOGRAM(NAME, K, ITEMS)                                                                                 \
    extern "C" __global__ void __launch_bounds__(RADIX_THREADS) NAME(const K* keys, u64 n, u32 shift, u32 mask, u32* hist) { \
        histogram<K, ITEMS>(keys, n, shift, mask, hist);                                                          \
    }
HISTOGRAM(radix_histogram_k32_i16, u32, 16)
HISTOGRAM(radix_histogram_k32_i8, u32, 8)
HISTOGRAM(radix_histogram_k64_i8, u64, 8)
HISTOGRAM(radix_histogram_k64_i16, u64, 16)

#define SCATTER(NAME, K, V, ITEMS)                                                                               \
    extern "C" __global__ void __launch_bounds__(RADIX_THREADS)                                                  \
        NAME(const K* keys_in, const V* vals_in, K* keys_out, V* vals_out, u64 n, u32 shift, u32 mask, const u32* offsets) { \
        scatter<K, V, ITEMS>(keys_in, vals_in, keys_out, vals_out, n, shift, mask, offsets);                   \
    }
SCATTER(radix_scatter_k32_v32, u32, u32, 16)
SCATTER(radix_scatter_k32_v64, u32, u64, 8)
SCATTER(radix_scatter_k64_v32, u64, u32, 8)
SCATTER(radix_scatter_k64_v64, u64, u64, 8)

// ---------------------------------------------------------------------------------------------
// A pass that moves the keys and several value arrays through one stable permutation: the tile
// is ranked once, then the keys and each value array in turn are reordered through shared
// memory and written out coalesced. This is GFTR's transformation of every payload column with
// its keys (Wu et al. 2025), without ranking (or re-reading the keys) once per column.
// vals_in / vals_out hold `nv` device addresses; bit j of `wide` says value array j has 8-byte
// values (else 4). A null vals_in[j] stands for the identity (value = input index, 4 bytes):
// the row ids of a first pass, never written to memory before it. keys_out may be null on a
// last pass whose keys are not needed.
// Shared memory: one buffer of TILE 8-byte slots holds the tile's keys, then each value array
// in turn (4-byte values use its first half), so that a tile of 16 items per thread (4096
// items, runs of 16 items per digit on average for 256 digits) fits in 48 KB with the counters.
template <typename K, int ITEMS>
__device__ __forceinline__ void scatter_multi(const K* __restrict__ keys_in, K* __restrict__ keys_out, u64 n, u32 shift, u32 mask,
                                              const u32* __restrict__ offsets, const u64* __restrict__ vals_in,
                                              const u64* __restrict__ vals_out, u32 nv, u32 wide) {
    constexpr int TILE = RADIX_THREADS * ITEMS;
    __shared__ TileRank rs;
    __shared__ u64 s_buf[TILE];
    K* s_keys = (K*)s_buf;
    u32* s_words = (u32*)s_buf;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u64 base = (u64)blockIdx.x * TILE;
    const u64 tile_n = n - base < (u64)TILE ? n - base : (u64)TILE;
    K k[ITEMS];
    u32 digit[ITEMS];
    u32 pos[ITEMS];
    rank_tile<K, ITEMS>(keys_in, n, shift, mask, offsets, rs, base, tile_n, k, digit, pos);
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        if (digit[r] < RADIX_BINS) s_keys[pos[r]] = k[r];
    }
    __syncthreads();
    // Output index of each sorted slot j this thread writes.
    u32 out[ITEMS];
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 j = r * RADIX_THREADS + threadIdx.x;
        out[r] = 0;
        if (j < tile_n) {
            const K key = s_keys[j];
            const u32 d = (u32)(key >> shift) & mask;
            out[r] = rs.global_start[d] + (j - rs.tile_start[d]);
            if (keys_out) keys_out[out[r]] = key;
        }
    }
    // Each value array through the same permutation: every item's load is issued before the
    // first shared-memory store, so that ITEMS loads per thread are in flight at once.
    for (u32 v = 0; v < nv; v++) {
        const bool w8 = (wide >> v) & 1;
        const u8* src = (const u8*)vals_in[v];
        u8* dst = (u8*)vals_out[v];
        __syncthreads();  // the previous array's slots (or the keys) have been read out
        if (w8) {
            u64 x[ITEMS];
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                const u64 i = base + warp * 32 * ITEMS + r * 32 + lane;
                x[r] = digit[r] < RADIX_BINS ? __ldg((const unsigned long long*)src + i) : 0;
            }
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                if (digit[r] < RADIX_BINS) s_buf[pos[r]] = x[r];
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                const u32 j = r * RADIX_THREADS + threadIdx.x;
                if (j < tile_n) ((u64*)dst)[out[r]] = s_buf[j];
            }
        } else {
            u32 x[ITEMS];
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                const u64 i = base + warp * 32 * ITEMS + r * 32 + lane;
                x[r] = digit[r] >= RADIX_BINS ? 0 : src ? __ldg((const u32*)src + i) : (u32)i;
            }
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                if (digit[r] < RADIX_BINS) s_words[pos[r]] = x[r];
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < ITEMS; r++) {
                const u32 j = r * RADIX_THREADS + threadIdx.x;
                if (j < tile_n) ((u32*)dst)[out[r]] = s_words[j];
            }
        }
    }
}

// Tiles of 16 items per thread (the default) and 8 (kept to compare them in `bench primitives`).
#define SCATTER_MULTI(NAME, K, ITEMS)                                                                               \
    extern "C" __global__ void __launch_bounds__(RADIX_THREADS)                                                     \
        NAME(const K* keys_in, K* keys_out, u64 n, u32 shift, u32 mask, const u32* offsets, const u64* vals_in,     \
             const u64* vals_out, u32 nv, u32 wide) {                                                               \
        scatter_multi<K, ITEMS>(keys_in, keys_out, n, shift, mask, offsets, vals_in, vals_out, nv, wide);          \
    }
SCATTER_MULTI(radix_scatter_multi_k32_i16, u32, 16)
SCATTER_MULTI(radix_scatter_multi_k64_i16, u64, 16)
SCATTER_MULTI(radix_scatter_multi_k32_i8, u32, 8)
SCATTER_MULTI(radix_scatter_multi_k64_i8, u64, 8)

// ---------------------------------------------------------------------------------------------
// Partition boundaries (the partitioned hash join's and the partition group-by's).

// Partition p of keys sorted by their bits [shift, shift + bits) occupies [offsets[p], offsets[p + 1]).
template <typename K>
__device__ __forceinline__ void radix_boundaries(const K* __restrict__ keys, u64 n, u32 bits, u32 shift, u32* __restrict__ offsets) {
    const u64 parts = 1ull << bits;
    const u64 mask = parts - 1;
    for (u64 i = global_thread_id(); i <= n; i += grid_stride()) {
        const u64 here = i < n ? (((u64)keys[i] >> shift) & mask) : parts;
        const long long prev = i > 0 ? (long long)(((u64)keys[i - 1] >> shift) & mask) : -1;
        for (long long p = prev + 1; p <= (long long)here; p++) offsets[p] = (u32)i;
    }
}

extern "C" __global__ void radix_boundaries_k32(const u32* keys, u64 n, u32 bits, u32 shift, u32* offsets) { radix_boundaries<u32>(keys, n, bits, shift, offsets); }
extern "C" __global__ void radix_boundaries_k64(const u64* keys, u64 n, u32 bits, u32 shift, u32* offsets) { radix_boundaries<u64>(keys, n, bits, shift, offsets); }
