// Open addressing with linear probing: the one table scheme of the join's build (kernels/join.cu)
// and the group-by's group ids (kernels/groupby.cu), in global or shared memory.
//
// A table is `mask + 1` key slots (a power of two) of type K, u32 or unsigned long long. The
// all-ones key marks an empty slot, so a key equal to it cannot take a slot: it lives in an extra
// entry at index `mask + 1`, which each caller handles before probing (`ht_is_empty`). A slot
// changes once, from empty to its key: a plain read that sees a key is final, and a stale read of
// an empty slot only costs the compare-and-swap, which then returns the key that took it.
#pragma once
#include "common.cuh"

// No slot: the key is absent (a lookup), or the probe limit was reached (an insert).
#define HT_NONE 0xffffffffffffffffull

template <typename K>
__device__ __forceinline__ K ht_empty_key() {
    return (K)~(K)0;
}

template <typename K>
__device__ __forceinline__ bool ht_is_empty(K k) {
    return k == ht_empty_key<K>();
}

// The slot of key k (not the empty key), probing from slot `home` over at most `limit` slots, and
// inserting k into the first empty slot met (then *inserted = true: this thread placed the key).
// HT_NONE when `limit` slots hold other keys.
template <typename K>
__device__ __forceinline__ u64 ht_insert(K* keys, u64 mask, u64 home, K k, u64 limit, bool* inserted) {
    u64 s = home & mask;
    for (u64 probe = 0; probe < limit; probe++) {
        const K cur = keys[s];
        if (cur == k) return s;
        if (ht_is_empty<K>(cur)) {
            const K prev = atomicCAS(&keys[s], ht_empty_key<K>(), k);
            if (ht_is_empty<K>(prev)) {
                *inserted = true;
                return s;
            }
            if (prev == k) return s;
        }
        s = (s + 1) & mask;
    }
    return HT_NONE;
}

// The slot of key k (not the empty key) from slot `home`, or HT_NONE when an empty slot or
// `limit` probes come first.
template <typename K>
__device__ __forceinline__ u64 ht_find(const K* keys, u64 mask, u64 home, K k, u64 limit) {
    u64 s = home & mask;
    for (u64 probe = 0; probe < limit; probe++) {
        const K cur = keys[s];
        if (cur == k) return s;
        if (ht_is_empty<K>(cur)) return HT_NONE;
        s = (s + 1) & mask;
    }
    return HT_NONE;
}
