// Grouped aggregation (Wu et al. 2025, hash group-by, Algorithm 1): group ids from a global table of
// key words, then per-group accumulators updated by atomics, in shared memory when the groups of
// a block fit (one flush per block), in global memory otherwise.
//
// Group ids:
//   - `gb_insert_kX`: each row's key word (kernels/keys.cu) goes into an open-addressing table;
//     the row whose insertion claimed a slot becomes its group's representative, and every row
//     records its slot. A key equal to the all-ones empty marker lives in the extra slot `mask+1`.
//   - the occupied slots are compacted (primitives/select.rs) into dense group ids, and
//     `gb_assign` gives every row its group.
//   With few groups, `gb_small_*` does all of it in one pass (below).
//   Wide keys (hash words) are then confirmed against the representative's key columns; rows
//   whose hash collided with another key take another round (src/aggregate/groups.rs).
//
// Accumulators: one kernel per operation (`agg_*`), the input's element type chosen at run time
// (uniform over the launch). A row takes part when its value is valid and its FILTER column is
// true. `counts`, when given, counts the rows that took part (a SUM/MIN/MAX over no rows is NULL).
#include "common.cuh"
#include "hash_table.cuh"

// ---------------------------------------------------------------------------------------------
// Group ids.

// A first table sized for few groups may be too small: after `max_fill` groups (or a probe around
// the whole table) the insert sets *overflow and stops, and the caller retries with a larger
// table, at last one of twice the rows. That one cannot overflow and is passed max_fill = ~0: it counts nothing (one
// counter taking an atomic per group would serialise millions of groups).
#define FILL_SHARDS 32  // counters of a bounded table's groups
#define FILL_STRIDE 32  // u32s between two counters (one 128-byte line each)

template <typename K>
__device__ __forceinline__ void gb_insert(const K* __restrict__ keys, const u32* __restrict__ active, u64 n, K* __restrict__ slot_keys,
                                          u64 mask, u32* __restrict__ slot_row, u32* __restrict__ row_slot, u32* __restrict__ filled,
                                          u32 max_fill, u32* __restrict__ overflow) {
    const bool bounded = max_fill != 0xffffffffu;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        if (bounded && *(volatile u32*)overflow) return;
        const u32 row = active ? active[i] : (u32)i;
        const K k = keys[row];
        u64 s;
        if (ht_is_empty<K>(k)) {
            s = mask + 1;
            if (__ldcg(&slot_row[s]) == NULL_ROW) atomicCAS(&slot_row[s], NULL_ROW, row);
        } else {
            // A bounded table gives up after a short probe: it is overfull (the whole grid claims
            // slots before any thread sees the overflow flag), and long probes of every thread
            // would cost more than the retry.
            bool inserted = false;
            s = ht_insert<K>(slot_keys, mask, (u64)k, k, bounded ? 65 : mask + 1, &inserted);
            if (s == HT_NONE) {
                *(volatile u32*)overflow = 1;
                return;
            }
            if (inserted) {
                slot_row[s] = row;
                // The groups are counted in FILL_SHARDS counters (by slot), each allowed
                // max_fill of them: one counter would serialise hundreds of thousands of
                // groups on one address.
                if (bounded && atomicAdd(&filled[(s & (FILL_SHARDS - 1)) * FILL_STRIDE], 1u) >= max_fill) *(volatile u32*)overflow = 1;
            }
        }
        row_slot[row] = (u32)s;
    }
}

extern "C" __global__ void gb_insert_k32(const u32* keys, const u32* active, u64 n, u32* slot_keys, u64 mask, u32* slot_row,
                                         u32* row_slot, u32* filled, u32 max_fill, u32* overflow) {
    gb_insert<u32>(keys, active, n, slot_keys, mask, slot_row, row_slot, filled, max_fill, overflow);
}
extern "C" __global__ void gb_insert_k64(const u64* keys, const u32* active, u64 n, unsigned long long* slot_keys, u64 mask,
                                         u32* slot_row, u32* row_slot, u32* filled, u32 max_fill, u32* overflow) {
    gb_insert<unsigned long long>((const unsigned long long*)keys, active, n, slot_keys, mask, slot_row, row_slot, filled, max_fill,
                                  overflow);
}

// keys[i] &= mask: hash words cut to a few bits, so that tests meet hash collisions.
extern "C" __global__ void gb_mask_k64(u64* keys, u64 n, u64 mask) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) keys[i] &= mask;
}

// flags[s] = 1 where slot s holds a group.
extern "C" __global__ void gb_occupied(const u32* __restrict__ slot_row, u64 n, u8* __restrict__ flags) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) flags[i] = slot_row[i] != NULL_ROW;
}

// For the j-th occupied slot s = slots[j]: dense[s] = j, rep[j] = slot_row[s].
extern "C" __global__ void gb_dense(const u32* __restrict__ slots, u64 groups, const u32* __restrict__ slot_row, u32* __restrict__ dense,
                                    u32* __restrict__ rep) {
    for (u64 j = global_thread_id(); j < groups; j += grid_stride()) {
        const u32 s = slots[j];
        dense[s] = (u32)j;
        rep[j] = slot_row[s];
    }
}

// group_of_row[row] = offset + dense[row_slot[row]] for each active row; rep_of[i] = the
// representative row of that group (from rep_all, every round's representatives so far).
extern "C" __global__ void gb_assign(const u32* __restrict__ active, u64 n, const u32* __restrict__ row_slot, const u32* __restrict__ dense,
                                     u32 offset, const u32* __restrict__ rep_all, u32* __restrict__ group_of_row, u32* __restrict__ rep_of) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u32 row = active ? active[i] : (u32)i;
        const u32 g = offset + dense[row_slot[row]];
        group_of_row[row] = g;
        if (rep_of) rep_of[i] = rep_all[g];
    }
}

// One-pass group ids for few groups (a block meets fewer than GB_CACHE_FILL distinct words):
// each row's key word (read, or computed from one narrow key column) is looked up in the block's
// shared-memory cache of (word, group id); a miss goes to the global open-addressing table, where
// the row that claims a slot takes the next dense id from counters[0] and publishes it in
// slot_gid[slot] (rows of the same key elsewhere wait for it). Rows get their group straight
// away: no slot array, no compaction pass, no assign pass, and frequent keys cost a
// shared-memory read instead of global atomics. More groups (a block's cache past
// GB_CACHE_FILL, more than max_fill in the table, or a long probe) set counters[1] and stop; the
// caller then runs the general path. The all-ones word lives in slot mask+1, claimed through
// counters[2].

#define GB_THREADS 1024     // threads per block; the caller launches two per SM
#define GB_CACHE 8192       // cached words per block, in dynamic shared memory (sizeof(K) + 4 bytes each)
#define GB_CACHE_PROBES 4   // a word not found (or not placed) within this many slots goes global
#define GB_CACHE_FILL (GB_CACHE / 2)  // a block that caches this many words gives up (short probes)
#define GB_LOST 0xfffffffeu // the slot's claimer found the table full

// A block's cache of (key word, group id), open addressing over GB_CACHE slots, words and ids
// in two arrays. The first thread of the block to miss a word places it (its id pending) and
// fetches the id from the global table; the block's other threads with that word wait for it in
// shared memory instead of all going to the global table at once (at the start every thread
// misses: with few groups, hundreds of thousands of threads would otherwise fight over a few
// global slots). A word that finds no slot within GB_CACHE_PROBES is fetched without caching.
#define GB_PENDING 0xfffffffdu

template <typename K>
struct GroupCache {
    K* keys;
    u32* gid;
    __device__ __forceinline__ GroupCache(u8* smem) : keys((K*)smem), gid((u32*)(smem + GB_CACHE * sizeof(K))) {}
    __device__ __forceinline__ void clear(u32 j) {
        keys[j] = ht_empty_key<K>();
        gid[j] = GB_PENDING;
    }
    // The id of word k (never the empty word), from home slot c on; `placed` when this thread
    // took a new slot for it.
    template <typename F>
    __device__ __forceinline__ u32 get(K k, u32 c, bool& placed, F fetch) {
        volatile u32* vg = gid;
        bool inserted = false;
        const u64 s = ht_insert<K>(keys, GB_CACHE - 1, c, k, GB_CACHE_PROBES, &inserted);
        if (s == HT_NONE) return fetch();
        if (inserted) {
            const u32 g = fetch();
            vg[s] = g;
            placed = true;
            return g;
        }
        u32 g = vg[s];
        while (g == GB_PENDING) g = vg[s];
        return g;
    }
};

// Where a row's key word comes from.
template <typename K>
struct WordArray {
    const K* keys;
    __device__ __forceinline__ K at(u64 i) const { return keys[i]; }
};
template <typename K, typename U>
struct NarrowColumn {
    const U* values;
    const u8* validity;
    u32 null_mode;
    __device__ __forceinline__ K at(u64 i) const { return (K)single_word<U>(values, validity, i, null_mode, sizeof(K) == 4); }
};

// The dense group id of word k from the global table (claimed for `row` when new), or GB_LOST.
template <typename K>
__device__ __forceinline__ u32 gb_global_id(K k, u32 row, K* __restrict__ slot_keys, u64 mask, u32* __restrict__ slot_gid,
                                            u32* __restrict__ reps, u32* __restrict__ counters, u32 max_fill) {
    u64 s;
    bool mine = false;
    if (ht_is_empty<K>(k)) {
        s = mask + 1;
        mine = __ldcg(&counters[2]) == 0u && atomicCAS(&counters[2], 0u, 1u) == 0u;
    } else {
        s = ht_insert<K>(slot_keys, mask, (u64)k, k, 65, &mine);
        if (s == HT_NONE) {
            *(volatile u32*)&counters[1] = 1;
            return GB_LOST;
        }
    }
    if (mine) {
        const u32 g = atomicAdd(&counters[0], 1u);
        if (g >= max_fill) {
            *(volatile u32*)&counters[1] = 1;
            atomicExch(&slot_gid[s], GB_LOST);
            return GB_LOST;
        }
        reps[g] = row;
        __threadfence();
        atomicExch(&slot_gid[s], g);
        return g;
    }
    // The claimer publishes the id (or GB_LOST) right after its claim: wait for it. A slot's id
    // changes once, from NULL_ROW, so a cached read is either final or NULL_ROW.
    u32 g = slot_gid[s];
    while (g == NULL_ROW) g = *(volatile u32*)&slot_gid[s];
    return g;
}

template <typename K, typename Src>
__device__ __forceinline__ void gb_small(Src src, u64 n, K* __restrict__ slot_keys, u64 mask, u32* __restrict__ slot_gid,
                                         u32* __restrict__ reps, u32* __restrict__ group_of_row, u32* __restrict__ rep_of,
                                         u32* __restrict__ counters, u32 max_fill) {
    extern __shared__ __align__(16) u8 gb_smem[];
    GroupCache<K> cache(gb_smem);
    __shared__ u32 c_fill;
    for (u32 j = threadIdx.x; j < GB_CACHE; j += blockDim.x) cache.clear(j);
    if (threadIdx.x == 0) c_fill = 0;
    __syncthreads();
    u32 iter = 0;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        // Stop soon after another thread found the table full (a claim past max_fill, or a long
        // probe, returns at once; other rows' work is then wasted, not wrong).
        if ((++iter & 31) == 0 && *(volatile u32*)&counters[1]) return;
        const K k = src.at(i);
        const auto fetch = [&]() { return gb_global_id<K>(k, (u32)i, slot_keys, mask, slot_gid, reps, counters, max_fill); };
        u32 g;
        if (ht_is_empty<K>(k)) {
            g = fetch();
        } else {
            bool placed = false;
            g = cache.get(k, (u32)k & (GB_CACHE - 1), placed, fetch);
            // A block that meets more words than its cache holds well: too many groups for
            // this path (every row would go to the global table); the general path runs.
            if (placed && atomicAdd(&c_fill, 1u) + 1 >= GB_CACHE_FILL) {
                *(volatile u32*)&counters[1] = 1;
                return;
            }
        }
        if (g == GB_LOST) return;
        group_of_row[i] = g;
        if (rep_of) rep_of[i] = __ldcg(&reps[g]);
    }
}

// gb_small_kX(keys, n, slot_keys, mask, slot_gid, reps, group_of_row, rep_of, counters, max_fill)
extern "C" __global__ void __launch_bounds__(GB_THREADS) gb_small_k32(const u32* keys, u64 n, u32* slot_keys, u64 mask, u32* slot_gid, u32* reps, u32* group_of_row,
                                        u32* rep_of, u32* counters, u32 max_fill) {
    gb_small<u32>(WordArray<u32>{keys}, n, slot_keys, mask, slot_gid, reps, group_of_row, rep_of, counters, max_fill);
}
extern "C" __global__ void __launch_bounds__(GB_THREADS) gb_small_k64(const u64* keys, u64 n, unsigned long long* slot_keys, u64 mask, u32* slot_gid, u32* reps,
                                        u32* group_of_row, u32* rep_of, u32* counters, u32 max_fill) {
    gb_small<unsigned long long>(WordArray<unsigned long long>{(const unsigned long long*)keys}, n, slot_keys, mask, slot_gid, reps,
                                 group_of_row, rep_of, counters, max_fill);
}
// gb_small_wN_kX(values, validity, null_mode, n, slot_keys, mask, slot_gid, reps, group_of_row,
// rep_of, counters, max_fill): the words of one narrow column, computed on the fly.
#define GB_SMALL_COLUMN(NAME, U, K)                                                                                                   \
    extern "C" __global__ void __launch_bounds__(GB_THREADS)                                                                          \
        NAME(const U* values, const u8* validity, u32 null_mode, u64 n, K* slot_keys, u64 mask, u32* slot_gid,                        \
                                    u32* reps, u32* group_of_row, u32* rep_of, u32* counters, u32 max_fill) {                         \
        gb_small<K>(NarrowColumn<K, U>{values, validity, null_mode}, n, slot_keys, mask, slot_gid, reps, group_of_row, rep_of,        \
                    counters, max_fill);                                                                                              \
    }
GB_SMALL_COLUMN(gb_small_w1_k32, u8, u32)
GB_SMALL_COLUMN(gb_small_w2_k32, unsigned short, u32)
GB_SMALL_COLUMN(gb_small_w4_k32, u32, u32)
GB_SMALL_COLUMN(gb_small_w1_k64, u8, unsigned long long)
GB_SMALL_COLUMN(gb_small_w2_k64, unsigned short, unsigned long long)
GB_SMALL_COLUMN(gb_small_w4_k64, u32, unsigned long long)
GB_SMALL_COLUMN(gb_small_w8_k64, u64, unsigned long long)

// Sort group-by: flags[j] = 1 where sorted position j starts a run of equal key words.
template <typename K>
__device__ __forceinline__ void gb_run_starts(const K* __restrict__ keys, u64 n, u32* __restrict__ flags) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) flags[j] = j == 0 || keys[j] != keys[j - 1];
}
extern "C" __global__ void gb_run_starts_k32(const u32* keys, u64 n, u32* flags) { gb_run_starts<u32>(keys, n, flags); }
extern "C" __global__ void gb_run_starts_k64(const u64* keys, u64 n, u32* flags) { gb_run_starts<u64>(keys, n, flags); }

// Sort group-by: the run of sorted position j is its group: group_of_row[rows[j]] = run, and the
// first row of a run (the earliest, the sort being stable) represents it.
extern "C" __global__ void gb_scatter_runs(const u32* __restrict__ rows, const u32* __restrict__ starts_before, const u32* __restrict__ flags,
                                           u64 n, u32* __restrict__ group_of_row, u32* __restrict__ rep) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) {
        const u32 g = starts_before[j] + flags[j] - 1;
        group_of_row[rows[j]] = g;
        if (flags[j]) rep[g] = rows[j];
    }
}

// prev[j] = rows[j - 1] (rows[0] for j = 0): adjacent pairs for the key comparison of wide keys.
extern "C" __global__ void gb_adjacent(const u32* __restrict__ rows, u64 n, u32* __restrict__ prev) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) prev[j] = rows[j == 0 ? 0 : j - 1];
}

// Wide sort group-by: *collided = 1 if some adjacent sorted pair has equal hash words (no run
// start) but keys found different (eq[j] == 0 compares positions j - 1 and j).
extern "C" __global__ void gb_collisions(const u32* __restrict__ flags, const u8* __restrict__ eq, u64 n, u32* __restrict__ collided) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) {
        if (!flags[j] && !eq[j]) *collided = 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Partition group-by (Wu et al. 2025): rows radix-partitioned on their mixed key words, so a key's
// rows share one partition; one block per partition numbers the partition's keys in a
// shared-memory table. Partition p's groups get ids goff[p] + 0..counts[p], so group ids are
// clustered by position and the reductions accumulate in shared memory (MODE_RANGED).

#define GP_THREADS 512
#define GP_SLOTS 8192  // table slots of a partition (GP_THREADS * 16), in dynamic shared memory;
                       // partitions are sized for a quarter of them, and one whose keys fill every
                       // slot overflows
#define GP_NONE 0xffffffffu

// The slot of key k in a partition's table (k = ~0 lives in the extra slot GP_SLOTS); inserts
// it when `insert`. Returns GP_NONE when absent (lookup) or when the table is full (insert).
template <typename K>
__device__ __forceinline__ u32 gp_slot(K* s_keys, K k, bool insert) {
    if (ht_is_empty<K>(k)) return GP_SLOTS;
    const u64 home = mix32((u32)(k >> 20) ^ (u32)k);
    bool inserted = false;
    const u64 s = insert ? ht_insert<K>(s_keys, GP_SLOTS - 1, home, k, GP_SLOTS, &inserted)
                         : ht_find<K>(s_keys, GP_SLOTS - 1, home, k, GP_SLOTS);
    return s == HT_NONE ? GP_NONE : (u32)s;
}

// For each partition p (rows offsets[p]..offsets[p+1] of the partitioned key words): local[pos]
// = the partition-relative id of the row's key (ids in slot order), rep_pos[offsets[p] + l] =
// the partition-relative position of key l's first row, counts[p] = its keys. A partition with
// more than GP_SLOTS keys sets *overflow (the caller regroups the batch another way).
// Dynamic shared memory: GP_SLOTS keys, then GP_SLOTS + 1 values (first position, then id).
template <typename K>
__device__ __forceinline__ void gp_ids(const K* __restrict__ keys, const u32* __restrict__ offsets, u32 parts, u32* __restrict__ local,
                                       u32* __restrict__ rep_pos, u32* __restrict__ counts, u32* __restrict__ overflow) {
    extern __shared__ __align__(16) u8 gp_smem[];
    K* s_keys = (K*)gp_smem;
    u32* s_val = (u32*)(gp_smem + GP_SLOTS * sizeof(K));
    __shared__ u32 s_total;
    __shared__ u32 s_warps[GP_THREADS / 32];
    constexpr u32 PER = GP_SLOTS / GP_THREADS;
    for (u32 p = blockIdx.x; p < parts; p += gridDim.x) {
        const u32 b = offsets[p], e = offsets[p + 1];
        if (b == e) {
            if (threadIdx.x == 0) counts[p] = 0;
            continue;
        }
        for (u32 j = threadIdx.x; j <= GP_SLOTS; j += blockDim.x) {
            if (j < GP_SLOTS) s_keys[j] = ht_empty_key<K>();
            s_val[j] = GP_NONE;
        }
        __syncthreads();
        bool lost = false;
        for (u32 pos = b + threadIdx.x; pos < e; pos += blockDim.x) {
            const u32 s = gp_slot<K>(s_keys, keys[pos], true);
            // The first row of a key keeps it (positions rise per thread: skip the atomic
            // once a smaller one is in, or a frequent key serialises the block).
            if (s == GP_NONE) lost = true;
            else if (pos - b < *(volatile u32*)&s_val[s]) atomicMin(&s_val[s], pos - b);
        }
        if (__syncthreads_or(lost)) {
            if (threadIdx.x == 0) {
                counts[p] = 0;
                *overflow = 1;
            }
            __syncthreads();
            continue;
        }
        // Ids in slot order: thread t numbers slots t*PER .. t*PER+PER-1; the extra slot last.
        u32 mine = 0;
#pragma unroll
        for (u32 q = 0; q < PER; q++) mine += s_val[threadIdx.x * PER + q] != GP_NONE;
        u32 id = block_exclusive_scan<GP_THREADS / 32, u32>(mine, s_warps, &s_total);
#pragma unroll
        for (u32 q = 0; q < PER; q++) {
            const u32 j = threadIdx.x * PER + q;
            const u32 first = s_val[j];
            if (first != GP_NONE) {
                rep_pos[b + id] = first;
                s_val[j] = id++;
            }
        }
        if (threadIdx.x == 0) {
            u32 total = s_total;
            if (s_val[GP_SLOTS] != GP_NONE) {
                rep_pos[b + total] = s_val[GP_SLOTS];
                s_val[GP_SLOTS] = total++;
            }
            counts[p] = total;
        }
        __syncthreads();
        for (u32 pos = b + threadIdx.x; pos < e; pos += blockDim.x) local[pos] = s_val[gp_slot<K>(s_keys, keys[pos], false)];
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(GP_THREADS) gp_ids_k32(const u32* keys, const u32* offsets, u32 parts, u32* local, u32* rep_pos,
                                                                    u32* counts, u32* overflow) {
    gp_ids<u32>(keys, offsets, parts, local, rep_pos, counts, overflow);
}
extern "C" __global__ void __launch_bounds__(GP_THREADS) gp_ids_k64(const u64* keys, const u32* offsets, u32 parts, u32* local, u32* rep_pos,
                                                                    u32* counts, u32* overflow) {
    gp_ids<unsigned long long>((const unsigned long long*)keys, offsets, parts, local, rep_pos, counts, overflow);
}

// Partition p's rows: gid[pos] = goff[p] + local[pos] (in place), and its groups'
// representatives rep[goff[p] + l] = perm[offsets[p] + rep_pos[offsets[p] + l]] (original rows).
extern "C" __global__ void gp_finish(const u32* __restrict__ offsets, u32 parts, const u32* __restrict__ goff, const u32* __restrict__ counts,
                                     const u32* __restrict__ rep_pos, const u32* __restrict__ perm, u32* __restrict__ gid, u32* __restrict__ rep) {
    for (u32 p = blockIdx.x; p < parts; p += gridDim.x) {
        const u32 b = offsets[p], e = offsets[p + 1], g0 = goff[p], c = counts[p];
        for (u32 pos = b + threadIdx.x; pos < e; pos += blockDim.x) gid[pos] += g0;
        for (u32 l = threadIdx.x; l < c; l += blockDim.x) rep[g0 + l] = perm[b + rep_pos[b + l]];
    }
}

// *largest = the most rows of any partition.
extern "C" __global__ void gp_largest(const u32* __restrict__ offsets, u64 parts, u32* __restrict__ largest) {
    u32 m = 0;
    for (u64 p = global_thread_id(); p < parts; p += grid_stride()) {
        const u32 r = offsets[p + 1] - offsets[p];
        m = r > m ? r : m;
    }
    if (m) atomicMax(largest, m);
}

// ---------------------------------------------------------------------------------------------
// Accumulators.

// Element types of an input column.
#define SRC_I8 0
#define SRC_I16 1
#define SRC_I32 2
#define SRC_I64 3
#define SRC_U8 4
#define SRC_U16 5
#define SRC_U32 6
#define SRC_U64 7
#define SRC_F32 8
#define SRC_F64 9
#define SRC_I128 10

__device__ __forceinline__ i64 load_i64(const void* v, u32 src, u64 i) {
    switch (src) {
        case SRC_I8: return ((const signed char*)v)[i];
        case SRC_I16: return ((const short*)v)[i];
        case SRC_I32: return ((const int*)v)[i];
        case SRC_U8: return ((const u8*)v)[i];
        case SRC_U16: return ((const unsigned short*)v)[i];
        case SRC_U32: return ((const u32*)v)[i];
        case SRC_U64: return (i64)((const u64*)v)[i];
        default: return ((const i64*)v)[i];
    }
}

__device__ __forceinline__ u64 load_u64(const void* v, u32 src, u64 i) {
    switch (src) {
        case SRC_U8: return ((const u8*)v)[i];
        case SRC_U16: return ((const unsigned short*)v)[i];
        case SRC_U32: return ((const u32*)v)[i];
        default: return ((const u64*)v)[i];
    }
}

__device__ __forceinline__ double load_f64(const void* v, u32 src, u64 i) {
    switch (src) {
        case SRC_F32: return (double)((const float*)v)[i];
        case SRC_F64: return ((const double*)v)[i];
        case SRC_U8:
        case SRC_U16:
        case SRC_U32:
        case SRC_U64: return (double)load_u64(v, src, i);
        default: return (double)load_i64(v, src, i);
    }
}

// Operations; the accumulator of a group is one 8-byte word, or two (16 bytes) for the i128 ones.
#define OP_COUNT 0
#define OP_SUM_I64 1
#define OP_SUM_U64 2
#define OP_SUM_F64 3
#define OP_SUM_I128 4
#define OP_MIN_I64 5
#define OP_MAX_I64 6
#define OP_MIN_U64 7
#define OP_MAX_U64 8
// 128-bit MIN/MAX in two passes: the signed high words first, then the unsigned low words of
// the rows whose high word won.
#define OP_MIN_I128_HI 9
#define OP_MIN_I128_LO 10
#define OP_MAX_I128_HI 11
#define OP_MAX_I128_LO 12

template <int OP>
struct Acc {
    static constexpr int WORDS = (OP == OP_SUM_I128 || OP >= OP_MIN_I128_HI) ? 2 : 1;
};

// The identity of an operation, word w of it.
template <int OP>
__device__ __forceinline__ u64 identity_word(int w) {
    switch (OP) {
        case OP_MIN_I64: return 0x7fffffffffffffffull;
        case OP_MAX_I64: return 0x8000000000000000ull;
        case OP_MIN_U64: return ~0ull;
        case OP_MAX_U64: return 0ull;
        case OP_MIN_I128_HI:
        case OP_MIN_I128_LO: return w == 1 ? 0x7fffffffffffffffull : ~0ull;
        case OP_MAX_I128_HI:
        case OP_MAX_I128_LO: return w == 1 ? 0x8000000000000000ull : 0ull;
        default: return 0ull;
    }
}

// Folds `v` (the operation's value, as raw words) into the accumulator at `a` (words a[0], a[1]).
// `hi_won`: for the 128-bit low pass, whether this row's high word equals the group's result.
__device__ __forceinline__ void add_i128(unsigned long long* a, u64 lo, u64 hi) {
    const u64 old = atomicAdd(&a[0], lo);
    if (old + lo < old) hi += 1;
    if (hi) atomicAdd(&a[1], hi);
}

template <int OP>
__device__ __forceinline__ void fold(unsigned long long* a, const void* values, u32 src, u64 i, const unsigned long long* final_hi) {
    switch (OP) {
        case OP_SUM_I64: atomicAdd(a, (unsigned long long)load_i64(values, src, i)); break;
        case OP_SUM_U64: atomicAdd(a, (unsigned long long)load_u64(values, src, i)); break;
        case OP_SUM_F64: atomicAdd((double*)a, load_f64(values, src, i)); break;
        case OP_SUM_I128: {
            const u64* w = (const u64*)values;
            add_i128(a, w[2 * i], w[2 * i + 1]);
            break;
        }
        case OP_MIN_I64: atomicMin((long long*)a, (long long)load_i64(values, src, i)); break;
        case OP_MAX_I64: atomicMax((long long*)a, (long long)load_i64(values, src, i)); break;
        case OP_MIN_U64: atomicMin(a, (unsigned long long)load_u64(values, src, i)); break;
        case OP_MAX_U64: atomicMax(a, (unsigned long long)load_u64(values, src, i)); break;
        case OP_MIN_I128_HI: atomicMin((long long*)&a[1], (long long)((const u64*)values)[2 * i + 1]); break;
        case OP_MAX_I128_HI: atomicMax((long long*)&a[1], (long long)((const u64*)values)[2 * i + 1]); break;
        case OP_MIN_I128_LO:
        case OP_MAX_I128_LO: {
            const u64* w = (const u64*)values;
            if (w[2 * i + 1] == *final_hi) {
                if (OP == OP_MIN_I128_LO) atomicMin(&a[0], (unsigned long long)w[2 * i]);
                else atomicMax(&a[0], (unsigned long long)w[2 * i]);
            }
            break;
        }
        default: break;
    }
}

// Merges a block's shared accumulator word(s) into the global one.
template <int OP>
__device__ __forceinline__ void flush(unsigned long long* g, const unsigned long long* s) {
    switch (OP) {
        case OP_SUM_I64:
        case OP_SUM_U64:
            if (s[0]) atomicAdd(g, s[0]);
            break;
        case OP_SUM_F64:
            if (s[0]) atomicAdd((double*)g, __longlong_as_double((long long)s[0]));
            break;
        case OP_SUM_I128: add_i128(g, s[0], s[1]); break;
        case OP_MIN_I64: atomicMin((long long*)g, (long long)s[0]); break;
        case OP_MAX_I64: atomicMax((long long*)g, (long long)s[0]); break;
        case OP_MIN_U64: atomicMin(g, s[0]); break;
        case OP_MAX_U64: atomicMax(g, s[0]); break;
        case OP_MIN_I128_HI: atomicMin((long long*)&g[1], (long long)s[1]); break;
        case OP_MAX_I128_HI: atomicMax((long long*)&g[1], (long long)s[1]); break;
        case OP_MIN_I128_LO: atomicMin(&g[0], s[0]); break;
        case OP_MAX_I128_LO: atomicMax(&g[0], s[0]); break;
        default: break;
    }
}

__device__ __forceinline__ bool takes_part(const u8* __restrict__ validity, const u8* __restrict__ fvalues, const u8* __restrict__ fvalidity,
                                           u64 i) {
    if (validity && !bit_is_set(validity, i)) return false;
    if (fvalues) {
        if (!bit_is_set(fvalues, i)) return false;
        if (fvalidity && !bit_is_set(fvalidity, i)) return false;
    }
    return true;
}

// How a pass keeps its accumulators.
#define MODE_GLOBAL 0  // global atomics
#define MODE_SHARED 1  // every group's accumulator in the block's shared memory, flushed once
#define MODE_RANGED 2  // per chunk of rows: the chunk's range of group ids in shared memory
#define MODE_ONE 3     // one group (no group ids): a shared-memory accumulator per thread, reduced per block

// Rows per thread of a ranged chunk.
#define RANGED_ITEMS 4

// One pass of operation OP over n rows. `values` may be null for OP_COUNT (COUNT(*)); `gid`
// null means one group. `acc` has groups * WORDS words (unused for OP_COUNT); `counts` (may be
// null) has groups words.
// - MODE_SHARED: the block keeps `groups` accumulators (and counts) in dynamic shared memory.
// - MODE_RANGED, for group ids clustered by position (rows in partitioned or sorted order):
//   each chunk of blockDim * RANGED_ITEMS rows finds its smallest and largest group id; when
//   the range fits `groups` (then the shared-memory capacity in groups) the chunk accumulates
//   in shared memory and flushes the range, else it uses global atomics.
// - MODE_ONE, with `gid` null: each thread folds its rows into its own accumulator (and count) in
//   dynamic shared memory, without contention; the block then merges them, lanes into their
//   warp's first, warps into the block's first, and flushes that once to the global one. With
//   global atomics every row of the grid would queue on the same address.
template <int OP>
__device__ __forceinline__ void agg_pass(const void* __restrict__ values, u32 src, const u8* __restrict__ validity,
                                         const u8* __restrict__ fvalues, const u8* __restrict__ fvalidity, const u32* __restrict__ gid, u64 n,
                                         u32 groups, u32 mode, unsigned long long* __restrict__ acc,
                                         unsigned long long* __restrict__ counts) {
    constexpr int W = Acc<OP>::WORDS;
    extern __shared__ unsigned long long smem[];
    const bool has_acc = OP != OP_COUNT;
    if (mode == MODE_RANGED) {
        __shared__ u32 s_lo, s_hi;
        const u64 chunk = (u64)blockDim.x * RANGED_ITEMS;
        const u32 cap = groups;
        unsigned long long* s_acc = smem;
        unsigned long long* s_cnt = smem + (has_acc ? (u64)cap * W : 0);
        for (u64 c0 = (u64)blockIdx.x * chunk; c0 < n; c0 += (u64)gridDim.x * chunk) {
            const u64 c1 = c0 + chunk < n ? c0 + chunk : n;
            if (threadIdx.x == 0) {
                s_lo = 0xffffffffu;
                s_hi = 0;
            }
            __syncthreads();
            u32 lo = 0xffffffffu, hi = 0;
            for (u64 i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
                const u32 g = gid[i];
                lo = g < lo ? g : lo;
                hi = g > hi ? g : hi;
            }
            atomicMin(&s_lo, lo);
            atomicMax(&s_hi, hi);
            __syncthreads();
            const u32 base = s_lo;
            const u32 range = s_hi - s_lo + 1;
            const bool shared = range <= cap;
            if (shared) {
                for (u32 j = threadIdx.x; j < range; j += blockDim.x) {
                    if (has_acc) {
#pragma unroll
                        for (int w = 0; w < W; w++) s_acc[(u64)j * W + w] = identity_word<OP>(w);
                    }
                    if (counts) s_cnt[j] = 0;
                }
                __syncthreads();
            }
            for (u64 i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
                if (!takes_part(validity, fvalues, fvalidity, i)) continue;
                const u32 g = gid[i];
                if (has_acc) fold<OP>(shared ? s_acc + (u64)(g - base) * W : acc + (u64)g * W, values, src, i, acc + (u64)g * W + 1);
                if (counts) atomicAdd(shared ? &s_cnt[g - base] : &counts[g], 1ull);
            }
            __syncthreads();
            if (shared) {
                for (u32 j = threadIdx.x; j < range; j += blockDim.x) {
                    if (has_acc) flush<OP>(acc + (u64)(base + j) * W, s_acc + (u64)j * W);
                    if (counts && s_cnt[j]) atomicAdd(&counts[base + j], s_cnt[j]);
                }
                __syncthreads();
            }
        }
        return;
    }
    if (mode == MODE_ONE) {
        const u32 t = threadIdx.x;
        unsigned long long* s_acc = smem;
        unsigned long long* s_cnt = smem + (has_acc ? (u64)blockDim.x * W : 0);
        unsigned long long* mine = s_acc + (u64)t * W;
        if (has_acc) {
#pragma unroll
            for (int w = 0; w < W; w++) mine[w] = identity_word<OP>(w);
        }
        if (counts) s_cnt[t] = 0;
        u64 taking = 0;
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
            if (!takes_part(validity, fvalues, fvalidity, i)) continue;
            if (has_acc) fold<OP>(mine, values, src, i, acc + 1);
            taking++;
        }
        if (counts) s_cnt[t] = taking;
        __syncthreads();
        const u32 lead = t & ~31u;
        if (t != lead) {
            if (has_acc) flush<OP>(s_acc + (u64)lead * W, mine);
            if (counts && s_cnt[t]) atomicAdd(&s_cnt[lead], s_cnt[t]);
        }
        __syncthreads();
        if (t != 0 && t == lead) {
            if (has_acc) flush<OP>(s_acc, mine);
            if (counts && s_cnt[t]) atomicAdd(&s_cnt[0], s_cnt[t]);
        }
        __syncthreads();
        if (t == 0) {
            if (has_acc) flush<OP>(acc, s_acc);
            if (counts && s_cnt[0]) atomicAdd(&counts[0], s_cnt[0]);
        }
        return;
    }
    const bool use_smem = mode == MODE_SHARED;
    unsigned long long* s_acc = smem;
    unsigned long long* s_cnt = smem + (has_acc ? (u64)groups * W : 0);
    if (use_smem) {
        for (u32 j = threadIdx.x; j < groups; j += blockDim.x) {
            if (has_acc) {
#pragma unroll
                for (int w = 0; w < W; w++) s_acc[(u64)j * W + w] = identity_word<OP>(w);
            }
            if (counts) s_cnt[j] = 0;
        }
        __syncthreads();
    }
    unsigned long long* a_base = use_smem ? s_acc : acc;
    unsigned long long* c_base = use_smem ? s_cnt : counts;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        if (!takes_part(validity, fvalues, fvalidity, i)) continue;
        const u32 g = gid ? gid[i] : 0u;
        if (has_acc) fold<OP>(a_base + (u64)g * W, values, src, i, acc + (u64)g * W + 1);
        if (counts) atomicAdd(&c_base[g], 1ull);
    }
    if (use_smem) {
        __syncthreads();
        for (u32 j = threadIdx.x; j < groups; j += blockDim.x) {
            if (has_acc) flush<OP>(acc + (u64)j * W, s_acc + (u64)j * W);
            if (counts && s_cnt[j]) atomicAdd(&counts[j], s_cnt[j]);
        }
    }
}

#define AGG_KERNEL(NAME, INIT, OP)                                                                                              \
    extern "C" __global__ void NAME(const void* values, u32 src, const u8* validity, const u8* fvalues, const u8* fvalidity,   \
                                    const u32* gid, u64 n, u32 groups, u32 mode, unsigned long long* acc,                      \
                                    unsigned long long* counts) {                                                              \
        agg_pass<OP>(values, src, validity, fvalues, fvalidity, gid, n, groups, mode, acc, counts);                            \
    }                                                                                                                          \
    extern "C" __global__ void INIT(unsigned long long* acc, u64 groups) {                                                     \
        constexpr int W = Acc<OP>::WORDS;                                                                                      \
        for (u64 j = global_thread_id(); j < groups * W; j += grid_stride()) acc[j] = identity_word<OP>((int)(j % W));         \
    }
AGG_KERNEL(agg_count, agg_count_init, OP_COUNT)
AGG_KERNEL(agg_sum_i64, agg_sum_i64_init, OP_SUM_I64)
AGG_KERNEL(agg_sum_u64, agg_sum_u64_init, OP_SUM_U64)
AGG_KERNEL(agg_sum_f64, agg_sum_f64_init, OP_SUM_F64)
AGG_KERNEL(agg_sum_i128, agg_sum_i128_init, OP_SUM_I128)
AGG_KERNEL(agg_min_i64, agg_min_i64_init, OP_MIN_I64)
AGG_KERNEL(agg_max_i64, agg_max_i64_init, OP_MAX_I64)
AGG_KERNEL(agg_min_u64, agg_min_u64_init, OP_MIN_U64)
AGG_KERNEL(agg_max_u64, agg_max_u64_init, OP_MAX_U64)
AGG_KERNEL(agg_min_i128_hi, agg_min_i128_hi_init, OP_MIN_I128_HI)
AGG_KERNEL(agg_min_i128_lo, agg_min_i128_lo_init, OP_MIN_I128_LO)
AGG_KERNEL(agg_max_i128_hi, agg_max_i128_hi_init, OP_MAX_I128_HI)
AGG_KERNEL(agg_max_i128_lo, agg_max_i128_lo_init, OP_MAX_I128_LO)

// out[j] = the low `width` bytes of acc[j] (MIN/MAX results back in their column's width).
extern "C" __global__ void agg_narrow(const u64* __restrict__ acc, u64 n, u32 width, u8* __restrict__ out) {
    for (u64 j = global_thread_id(); j < n; j += grid_stride()) {
        const u64 v = acc[j];
        switch (width) {
            case 1: out[j] = (u8)v; break;
            case 2: ((unsigned short*)out)[j] = (unsigned short)v; break;
            case 4: ((u32*)out)[j] = (u32)v; break;
            default: ((u64*)out)[j] = v; break;
        }
    }
}

// Validity of a result: bit j = counts[j] > 0, written a 32-bit word per thread; *nulls counts
// the zero bits.
extern "C" __global__ void agg_validity(const u64* __restrict__ counts, u64 n, u32* __restrict__ bits, unsigned long long* __restrict__ nulls) {
    const u64 words = (n + 31) / 32;
    for (u64 w = global_thread_id(); w < words; w += grid_stride()) {
        u32 b = 0, zeros = 0;
        for (u32 k = 0; k < 32; k++) {
            const u64 j = w * 32 + k;
            if (j >= n) break;
            if (counts[j]) b |= 1u << k;
            else zeros++;
        }
        bits[w] = b;
        if (zeros) atomicAdd(nulls, (unsigned long long)zeros);
    }
}

// ---- COUNT(DISTINCT x): DataFusion keeps each group's distinct values as a List; these build it.

// rows[j] = the list holding value j of a List column of `lists` lists whose i32 offsets start at
// 0 (binary search, so a long list does not serialise onto one thread); NULL_ROW for a value of a
// NULL list.
extern "C" __global__ void dc_list_rows(const int* __restrict__ offsets, const u8* __restrict__ validity, u64 lists, u64 values,
                                        u32* __restrict__ rows) {
    for (u64 j = global_thread_id(); j < values; j += grid_stride()) {
        // The last list l with offsets[l] <= j: offsets[0] = 0 <= j < offsets[lists] = values.
        u64 lo = 0, hi = lists;
        while (hi - lo > 1) {
            const u64 mid = (lo + hi) / 2;
            if ((u64)offsets[mid] <= j) lo = mid;
            else hi = mid;
        }
        rows[j] = (validity && !bit_is_set(validity, lo)) ? NULL_ROW : (u32)lo;
    }
}

// keep[i] = 1 when value i counts: not NULL, in a list that is not NULL (`rows`, when the values
// come from lists), and its FILTER (if any) true.
extern "C" __global__ void dc_keep(const u8* __restrict__ validity, const u32* __restrict__ rows, const u8* __restrict__ fvalues,
                                   const u8* __restrict__ fvalidity, u64 n, u8* __restrict__ keep) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        keep[i] = takes_part(validity, fvalues, fvalidity, i) && (!rows || rows[i] != NULL_ROW);
    }
}

// One atomic per group present in a warp: `peers` are the lanes with this lane's group, `rank`
// its place among them; the group's leader adds their number to counter[g] and every peer gets
// the counter's old value.
__device__ __forceinline__ u32 dc_warp_add(u32* counter, u32 g, bool active, u32* rank) {
    const u32 peers = __match_any_sync(0xffffffffu, active ? g : NULL_ROW);
    const u32 lane = threadIdx.x & 31;
    const u32 leader = __ffs(peers) - 1;
    *rank = __popc(peers & lanemask_lt());
    u32 base = 0;
    if (active && lane == leader) base = atomicAdd(&counter[g], (u32)__popc(peers));
    return __shfl_sync(0xffffffffu, base, leader);
}

// counts[gid[p]] += 1 for each of the n distinct (group, value) pairs (group 0 without gid).
extern "C" __global__ void dc_count(const u32* __restrict__ gid, u64 n, u32* __restrict__ counts) {
    const u64 lane = threadIdx.x & 31;
    for (u64 w = global_thread_id() - lane; w < n; w += grid_stride()) {
        const u64 p = w + lane;
        const bool active = p < n;
        const u32 g = active && gid ? gid[p] : 0u;
        u32 rank;
        dc_warp_add(counts, g, active, &rank);
    }
}

// out[offsets[g] + k] = reps[p] for the k-th pair p of group g (in no particular order): the
// rows whose values fill each group's list.
extern "C" __global__ void dc_scatter(const u32* __restrict__ gid, const u32* __restrict__ reps, u64 n, const int* __restrict__ offsets,
                                      u32* __restrict__ cursor, u32* __restrict__ out) {
    const u64 lane = threadIdx.x & 31;
    for (u64 w = global_thread_id() - lane; w < n; w += grid_stride()) {
        const u64 p = w + lane;
        const bool active = p < n;
        const u32 g = active && gid ? gid[p] : 0u;
        u32 rank;
        const u32 base = dc_warp_add(cursor, g, active, &rank);
        if (active) out[(u64)offsets[g] + base + rank] = reps[p];
    }
}
