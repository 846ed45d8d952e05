// Equi-join match finding over key words (kernels/keys.cu) of the build and probe sides.
//
// Every algorithm turns a probe chunk into per-probe-item match counts, an exclusive scan of the
// counts gives each item's first output position, and the pairs (build position, probe position)
// are then written into bounded output windows of whole probe items:
//   - NPJ: a global open-addressing table of the distinct build keys, each with its run in a
//     CSR array of build rows; the probe looks up (start, count) per item (`npj_*`), and
//     `csr_expand` writes the pairs.
//   - SMJ: both sides radix-sorted by key; a probe item's matches are the run of equal build keys,
//     found by binary search narrowed per warp (`smj_bounds`), then `csr_expand`.
//   - PHJ: both sides radix-partitioned on the low bits of the key; one block per work unit (a
//     build sub-partition of at most PHJ_CAPACITY rows and a slice of the probe partition) builds
//     a chained hash table in shared memory and probes it, once to count and once to write.
// Keys of type K are u32 or u64; the NPJ table is kernels/hash_table.cuh's, whose all-ones empty
// key lives in the extra slot at index `capacity`.
#include "common.cuh"
#include "hash_table.cuh"

// ---------------------------------------------------------------------------------------------
// NPJ: global table.

// Inserts each build key: item_slot[i] = its slot; counts[slot] += 1; *distinct += new keys;
// slot_row[slot] = the item's row (meaningful when every key is unique: then the table needs no
// CSR runs).
template <typename K>
__device__ __forceinline__ void npj_insert(const K* __restrict__ keys, const u32* __restrict__ item_rows, u64 n, K* __restrict__ slot_keys,
                                           u32* __restrict__ counts, u64 mask, u32* __restrict__ item_slot, u32* __restrict__ slot_row,
                                           u32* __restrict__ distinct) {
    __shared__ u32 block_new;
    if (threadIdx.x == 0) block_new = 0;
    __syncthreads();
    u32 mine = 0;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const K k = keys[i];
        bool inserted = false;
        // The table has more slots than build items: the probe always ends.
        const u64 s = ht_is_empty<K>(k) ? mask + 1 : ht_insert<K>(slot_keys, mask, (u64)k, k, mask + 1, &inserted);
        if (atomicAdd(&counts[s], 1u) == 0) mine++;
        item_slot[i] = (u32)s;
        slot_row[s] = item_rows ? item_rows[i] : (u32)i;
    }
    if (mine) atomicAdd(&block_new, mine);
    __syncthreads();
    if (threadIdx.x == 0 && block_new) atomicAdd(distinct, block_new);
}

extern "C" __global__ void npj_insert_k32(const u32* keys, const u32* item_rows, u64 n, u32* slot_keys, u32* counts, u64 mask,
                                          u32* item_slot, u32* slot_row, u32* distinct) {
    npj_insert<u32>(keys, item_rows, n, slot_keys, counts, mask, item_slot, slot_row, distinct);
}
extern "C" __global__ void npj_insert_k64(const u64* keys, const u32* item_rows, u64 n, unsigned long long* slot_keys, u32* counts,
                                          u64 mask, u32* item_slot, u32* slot_row, u32* distinct) {
    npj_insert<unsigned long long>((const unsigned long long*)keys, item_rows, n, slot_keys, counts, mask, item_slot, slot_row, distinct);
}

// CSR fill: csr_rows[starts[slot] + k] = row of item i, k taken from a per-slot cursor (the order
// inside a run is arbitrary; the order-preserving build sorts instead).
extern "C" __global__ void npj_fill(const u32* __restrict__ item_slot, const u32* __restrict__ item_rows, u64 n, const u32* __restrict__ starts,
                                    u32* __restrict__ cursor, u32* __restrict__ csr_rows) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 s = item_slot[i];
        const u32 pos = starts[s] + atomicAdd(&cursor[s], 1u);
        csr_rows[pos] = item_rows ? item_rows[i] : (u32)i;
    }
}

// The 16-byte table entry: for u32 keys {key, start, count, 0}, for u64 keys {key low, key high,
// start, count}.
template <typename K>
__device__ __forceinline__ uint4 make_entry(K k, u32 start, u32 count) {
    if (sizeof(K) == 4) return make_uint4((u32)k, start, count, 0);
    return make_uint4((u32)(u64)k, (u32)((u64)k >> 32), start, count);
}
template <typename K>
__device__ __forceinline__ K entry_key(uint4 e) {
    return sizeof(K) == 4 ? (K)e.x : (K)(((u64)e.y << 32) | (u64)e.x);
}
template <typename K>
__device__ __forceinline__ u32 entry_start(uint4 e) {
    return sizeof(K) == 4 ? e.y : e.z;
}
template <typename K>
__device__ __forceinline__ u32 entry_count(uint4 e) {
    return sizeof(K) == 4 ? e.z : e.w;
}

// Packs slot s into its entry (make_entry), read by one load in the probe. When every key is
// unique, `starts` is the slot's build row (slot_row), stored in place of a CSR start.
template <typename K>
__device__ __forceinline__ void npj_pack(const K* __restrict__ slot_keys, const u32* __restrict__ counts, const u32* __restrict__ starts,
                                         u64 slots, uint4* __restrict__ table) {
    for (u64 s = global_thread_id(); s < slots; s += grid_stride()) {
        const u32 c = counts[s];
        const u32 start = c > 0 ? starts[s] : 0;
        // The extra slot (index slots - 1) holds the all-ones key when present.
        const K k = s + 1 == slots ? ht_empty_key<K>() : slot_keys[s];
        table[s] = make_entry<K>(k, start, c);
    }
}

extern "C" __global__ void npj_pack_k32(const u32* slot_keys, const u32* counts, const u32* starts, u64 slots, uint4* table) {
    npj_pack<u32>(slot_keys, counts, starts, slots, table);
}
extern "C" __global__ void npj_pack_k64(const u64* slot_keys, const u32* counts, const u32* starts, u64 slots, uint4* table) {
    npj_pack<u64>(slot_keys, counts, starts, slots, table);
}

// Probe: start[j], count[j] of probe key j (count 0 when absent).
template <typename K>
__device__ __forceinline__ void npj_probe(const K* __restrict__ keys, u64 n, const uint4* __restrict__ table, u64 mask, u32* __restrict__ start,
                                          u32* __restrict__ count) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) {
        const K k = keys[j];
        uint4 e = make_uint4(0, 0, 0, 0);  // absent: count 0
        if (ht_is_empty<K>(k)) {
            e = table[mask + 1];
        } else {
            // hash_table.cuh's probe, over the packed entries (one 16-byte load per slot).
            for (u64 s = (u64)k & mask;; s = (s + 1) & mask) {
                const uint4 t = __ldg(&table[s]);
                const K ek = entry_key<K>(t);
                if (ek == k) e = t;
                if (ek == k || ht_is_empty<K>(ek)) break;
            }
        }
        start[j] = entry_start<K>(e);
        count[j] = entry_count<K>(e);
    }
}

extern "C" __global__ void npj_probe_k32(const u32* keys, u64 n, const uint4* table, u64 mask, u32* start, u32* count) {
    npj_probe<u32>(keys, n, table, mask, start, count);
}
extern "C" __global__ void npj_probe_k64(const u64* keys, u64 n, const uint4* table, u64 mask, u32* start, u32* count) {
    npj_probe<u64>(keys, n, table, mask, start, count);
}

// ---------------------------------------------------------------------------------------------
// Output windows.

// Window w holds the probe items [out_j[w], out_j[w + 1]): out_j[w] is the first item whose
// output starts at or after w * bound (0 for w = 0, n for w = nwin); out_o[w] is where that
// item's output starts (total for n).
extern "C" __global__ void window_bounds(const u64* __restrict__ offsets, u64 n, u64 total, u64 bound, u64 nwin, u64* __restrict__ out_j,
                                         u64* __restrict__ out_o) {
    for (u64 w = global_thread_id(); w <= nwin; w += grid_stride()) {
        u64 j;
        if (w == 0) {
            j = 0;
        } else if (w == nwin) {
            j = n;
        } else {
            const u64 target = w * bound;
            u64 lo = 0, hi = n;
            while (lo < hi) {
                const u64 mid = (lo + hi) / 2;
                if (offsets[mid] < target) lo = mid + 1;
                else hi = mid;
            }
            j = lo;
        }
        out_j[w] = j;
        out_o[w] = j < n ? offsets[j] : total;
    }
}

// Writes the pairs of probe items [j0, j1): item j's matches are build positions
// start[j] .. start[j] + count[j], written at offsets[j] - o_base onwards.
extern "C" __global__ void csr_expand(const u32* __restrict__ start, const u32* __restrict__ count, const u64* __restrict__ offsets, u64 j0,
                                      u64 j1, u64 o_base, u32* __restrict__ out_b, u32* __restrict__ out_p) {
    for (u64 j = j0 + global_thread_id(); j < j1; j += grid_stride()) {
        const u32 c = count[j];
        if (c == 0) continue;
        const u64 o = offsets[j] - o_base;
        const u32 s = start[j];
        for (u32 k = 0; k < c; k++) {
            out_b[o + k] = s + k;
            out_p[o + k] = (u32)j;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SMJ: bounds of equal-key runs in the sorted build keys.

template <typename K>
__device__ __forceinline__ u64 lower_bound(const K* __restrict__ a, u64 lo, u64 hi, K k) {
    while (lo < hi) {
        const u64 mid = (lo + hi) / 2;
        if (a[mid] < k) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

template <typename K>
__device__ __forceinline__ u64 upper_bound(const K* __restrict__ a, u64 lo, u64 hi, K k) {
    while (lo < hi) {
        const u64 mid = (lo + hi) / 2;
        if (a[mid] <= k) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// For sorted probe keys: start[j] = first build position with key == probe[j], count[j] = run
// length. Each warp first bounds the range of its 32 consecutive keys, then each lane searches
// inside it.
template <typename K>
__device__ __forceinline__ void smj_bounds(const K* __restrict__ build, u64 nb, const K* __restrict__ probe, u64 np, u32* __restrict__ start,
                                           u32* __restrict__ count) {
    const u64 lane = threadIdx.x & 31;
    const u64 warp = global_thread_id() / 32, warps = grid_stride() / 32;
    for (u64 base = warp * 32; base < np; base += warps * 32) {
        const u64 last = base + 31 < np ? base + 31 : np - 1;
        const u64 L = lower_bound<K>(build, 0, nb, probe[base]);
        const u64 H = upper_bound<K>(build, L, nb, probe[last]);
        const u64 j = base + lane;
        if (j < np) {
            const K k = probe[j];
            const u64 lo = lower_bound<K>(build, L, H, k);
            const u64 hi = upper_bound<K>(build, lo, H, k);
            start[j] = (u32)lo;
            count[j] = (u32)(hi - lo);
        }
    }
}

extern "C" __global__ void smj_bounds_k32(const u32* build, u64 nb, const u32* probe, u64 np, u32* start, u32* count) {
    smj_bounds<u32>(build, nb, probe, np, start, count);
}
extern "C" __global__ void smj_bounds_k64(const u64* build, u64 nb, const u64* probe, u64 np, u32* start, u32* count) {
    smj_bounds<u64>(build, nb, probe, np, start, count);
}

// ---------------------------------------------------------------------------------------------
// PHJ.

#define PHJ_THREADS 512
#define PHJ_CAPACITY 4096  // build rows per work unit (the shared-memory table's entries)
#define PHJ_HEADS 4096     // chain heads
#define PHJ_END 0xffffu
// A unit: x = build begin, y = build length | PHJ_ONLY when the unit holds its whole build
// partition, z = probe begin, w = probe length.
#define PHJ_ONLY 0x80000000u

// Shared-memory chained table of one unit's build rows: keys, then heads, then 16-bit links.
template <typename K>
struct PhjTable {
    K* keys;
    u32* heads;
    unsigned short* next;
};

template <typename K>
__device__ __forceinline__ PhjTable<K> phj_table() {
    extern __shared__ __align__(16) u8 smem[];
    PhjTable<K> t;
    t.keys = (K*)smem;
    t.heads = (u32*)(smem + sizeof(K) * PHJ_CAPACITY);
    t.next = (unsigned short*)(smem + sizeof(K) * PHJ_CAPACITY + 4 * PHJ_HEADS);
    return t;
}

template <typename K>
__device__ __forceinline__ u32 phj_hash(K k, u32 bits) {
    return (u32)((u64)k >> bits) & (PHJ_HEADS - 1);
}

template <typename K>
__device__ __forceinline__ void phj_build(const PhjTable<K>& t, const K* __restrict__ bkeys, u32 b_begin, u32 b_len, u32 bits) {
    for (u32 h = threadIdx.x; h < PHJ_HEADS; h += blockDim.x) t.heads[h] = 0xffffffffu;
    __syncthreads();
    for (u32 i = threadIdx.x; i < b_len; i += blockDim.x) {
        const K k = bkeys[b_begin + i];
        t.keys[i] = k;
        t.next[i] = (unsigned short)atomicExch(&t.heads[phj_hash<K>(k, bits)], i);
    }
    __syncthreads();
}

// counts[j] += matches of probe item j in the unit's build rows.
template <typename K>
__device__ __forceinline__ void phj_count(const K* __restrict__ bkeys, const K* __restrict__ pkeys, const uint4* __restrict__ units, u64 nunits,
                                          u32 bits, u32* __restrict__ counts) {
    const PhjTable<K> t = phj_table<K>();
    for (u64 u = blockIdx.x; u < nunits; u += gridDim.x) {
        const uint4 unit = units[u];
        const u32 b_len = unit.y & ~PHJ_ONLY;
        phj_build<K>(t, bkeys, unit.x, b_len, bits);
        for (u32 j = threadIdx.x; j < unit.w; j += blockDim.x) {
            const K k = pkeys[unit.z + j];
            u32 c = 0;
            u32 i = t.heads[phj_hash<K>(k, bits)];
            while (i != 0xffffffffu && i != PHJ_END) {
                c += t.keys[i] == k;
                i = t.next[i];
            }
            if (c) {
                if (unit.y & PHJ_ONLY) counts[unit.z + j] = c;
                else atomicAdd(&counts[unit.z + j], c);
            }
        }
        __syncthreads();
    }
}

// Writes the pairs of the probe items in [j0, j1): item j's pairs go to offsets[j] - o_base
// onwards, in chain order (through a per-item cursor when its build partition spans units).
template <typename K>
__device__ __forceinline__ void phj_write(const K* __restrict__ bkeys, const K* __restrict__ pkeys, const uint4* __restrict__ units, u64 nunits,
                                          u32 bits, const u64* __restrict__ offsets, u32* __restrict__ cursor, u64 j0, u64 j1, u64 o_base,
                                          u32* __restrict__ out_b, u32* __restrict__ out_p) {
    const PhjTable<K> t = phj_table<K>();
    for (u64 u = blockIdx.x; u < nunits; u += gridDim.x) {
        const uint4 unit = units[u];
        const u64 p0 = unit.z, p1 = (u64)unit.z + unit.w;
        if (p1 <= j0 || p0 >= j1) continue;  // uniform across the block
        const u32 b_len = unit.y & ~PHJ_ONLY;
        phj_build<K>(t, bkeys, unit.x, b_len, bits);
        const u64 lo = p0 > j0 ? p0 : j0, hi = p1 < j1 ? p1 : j1;
        for (u64 jj = lo + threadIdx.x; jj < hi; jj += blockDim.x) {
            const K k = pkeys[jj];
            u32 i = t.heads[phj_hash<K>(k, bits)];
            u64 o = offsets[jj] - o_base;
            while (i != 0xffffffffu && i != PHJ_END) {
                if (t.keys[i] == k) {
                    const u64 at = (unit.y & PHJ_ONLY) ? o++ : offsets[jj] - o_base + atomicAdd(&cursor[jj], 1u);
                    out_b[at] = unit.x + i;
                    out_p[at] = (u32)jj;
                }
                i = t.next[i];
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(PHJ_THREADS)
    phj_count_k32(const u32* bkeys, const u32* pkeys, const uint4* units, u64 nunits, u32 bits, u32* counts) {
    phj_count<u32>(bkeys, pkeys, units, nunits, bits, counts);
}
extern "C" __global__ void __launch_bounds__(PHJ_THREADS)
    phj_count_k64(const u64* bkeys, const u64* pkeys, const uint4* units, u64 nunits, u32 bits, u32* counts) {
    phj_count<u64>(bkeys, pkeys, units, nunits, bits, counts);
}
extern "C" __global__ void __launch_bounds__(PHJ_THREADS)
    phj_write_k32(const u32* bkeys, const u32* pkeys, const uint4* units, u64 nunits, u32 bits, const u64* offsets, u32* cursor, u64 j0,
                  u64 j1, u64 o_base, u32* out_b, u32* out_p) {
    phj_write<u32>(bkeys, pkeys, units, nunits, bits, offsets, cursor, j0, j1, o_base, out_b, out_p);
}
extern "C" __global__ void __launch_bounds__(PHJ_THREADS)
    phj_write_k64(const u64* bkeys, const u64* pkeys, const uint4* units, u64 nunits, u32 bits, const u64* offsets, u32* cursor, u64 j0,
                  u64 j1, u64 o_base, u32* out_b, u32* out_p) {
    phj_write<u64>(bkeys, pkeys, units, nunits, bits, offsets, cursor, j0, j1, o_base, out_b, out_p);
}
