// Join and group-by keys: every key column of a row is folded into one 64-bit word per row.
//
// Narrow keys (the key columns' bits, plus one null bit per column when NULL equals NULL, fit in
// 64): the columns' bits are packed side by side (`key_pack_*`), and `key_finish_*` applies a
// bijective mixer, so equal words mean equal keys and no comparison of the columns is needed.
// Wide keys (strings, Decimal128, or too many bits): the columns are hashed (`key_hash_*`); equal
// hashes are only candidates, confirmed afterwards column by column (`verify_*` in verify.cu).
//
// `ok[i]` says whether row i takes part: with NULL equals nothing, a row with a NULL key column
// never matches and is left out of the join's matching (outer joins still emit it unmatched).
#include "common.cuh"

#define HASH_SEED 0x243f6a8885a308d3ull
#define NULL_MARKER 0x9ddfea08eb382d69ull

__device__ __forceinline__ u64 hash_combine(u64 h, u64 v) {
    return mix64(h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)));
}

// Reads the previous state of row i (or the initial state for the first key column), applies
// the column's null rule, and returns whether the value is valid.
__device__ __forceinline__ bool start_row(const u8* __restrict__ validity, u64 i, u32 null_mode, u32 first, u64* __restrict__ acc,
                                          u8* __restrict__ ok, u64& a, u8& o, bool narrow) {
    a = first ? (narrow ? 0ull : HASH_SEED) : acc[i];
    o = first ? 1 : ok[i];
    const bool valid = validity == nullptr || bit_is_set(validity, i);
    if (!valid) {
        if (null_mode == NULLS_DROP) o = 0;
    }
    if (null_mode == NULLS_VALUE && narrow) a = (a << 1) | (valid ? 0ull : 1ull);
    return valid;
}

// Narrow packing of one fixed-width column of `bits` bits (values zero-extended; NULL packs as 0
// with its null bit set).
template <typename U>
__device__ __forceinline__ void key_pack(const U* __restrict__ values, const u8* __restrict__ validity, u64 n, u32 bits, u32 null_mode,
                                         u32 first, u64* __restrict__ acc, u8* __restrict__ ok) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        u64 a;
        u8 o;
        const bool valid = start_row(validity, i, null_mode, first, acc, ok, a, o, true);
        const u64 v = valid ? (u64)values[i] : 0ull;
        a = bits >= 64 ? v : ((a << bits) | v);
        acc[i] = a;
        ok[i] = o;
    }
}

#define KEY_PACK(NAME, U)                                                                                                \
    extern "C" __global__ void NAME(const U* values, const u8* validity, u64 n, u32 bits, u32 null_mode, u32 first, u64* acc, \
                                    u8* ok) {                                                                            \
        key_pack<U>(values, validity, n, bits, null_mode, first, acc, ok);                                               \
    }
KEY_PACK(key_pack_w1, u8)
KEY_PACK(key_pack_w2, unsigned short)
KEY_PACK(key_pack_w4, u32)
KEY_PACK(key_pack_w8, u64)

// One narrow column whose rows all take part, straight to its final word: the word `key_pack`
// then `key_finish_*` would give (the null bit above the value's bits with NULLS_VALUE), without
// the intermediate accumulator and flags.
template <typename U>
__device__ __forceinline__ void key_single(const U* __restrict__ values, const u8* __restrict__ validity, u64 n, u32 null_mode, u32 width32,
                                           void* __restrict__ keys) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        const u64 w = single_word<U>(values, validity, i, null_mode, width32);
        if (width32) ((u32*)keys)[i] = (u32)w;
        else ((u64*)keys)[i] = w;
    }
}

#define KEY_SINGLE(NAME, U)                                                                                   \
    extern "C" __global__ void NAME(const U* values, const u8* validity, u64 n, u32 null_mode, u32 width32, void* keys) { \
        key_single<U>(values, validity, n, null_mode, width32, keys);                                        \
    }
KEY_SINGLE(key_single_w1, u8)
KEY_SINGLE(key_single_w2, unsigned short)
KEY_SINGLE(key_single_w4, u32)
KEY_SINGLE(key_single_w8, u64)

// Narrow packing of a Boolean column (one bit).
extern "C" __global__ void key_pack_bool(const u8* values, const u8* validity, u64 n, u32 bits, u32 null_mode, u32 first, u64* acc,
                                         u8* ok) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        u64 a;
        u8 o;
        const bool valid = start_row(validity, i, null_mode, first, acc, ok, a, o, true);
        const u64 v = valid && bit_is_set(values, i) ? 1ull : 0ull;
        acc[i] = (a << 1) | v;
        ok[i] = o;
    }
}

// Wide hashing of one fixed-width column of 1, 2, 4, 8 or 16 bytes.
template <typename U, int WORDS>
__device__ __forceinline__ void key_hash(const U* __restrict__ values, const u8* __restrict__ validity, u64 n, u32 null_mode, u32 first,
                                         u64* __restrict__ acc, u8* __restrict__ ok) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        u64 a;
        u8 o;
        const bool valid = start_row(validity, i, null_mode, first, acc, ok, a, o, false);
        if (!valid) {
            a = hash_combine(a, NULL_MARKER);
        } else if (WORDS == 2) {
            const u64* w = (const u64*)values;
            a = hash_combine(hash_combine(a, w[2 * i]), w[2 * i + 1]);
        } else {
            a = hash_combine(a, (u64)values[i]);
        }
        acc[i] = a;
        ok[i] = o;
    }
}

#define KEY_HASH(NAME, U, WORDS)                                                                                          \
    extern "C" __global__ void NAME(const U* values, const u8* validity, u64 n, u32 null_mode, u32 first, u64* acc, u8* ok) { \
        key_hash<U, WORDS>(values, validity, n, null_mode, first, acc, ok);                                               \
    }
KEY_HASH(key_hash_w1, u8, 1)
KEY_HASH(key_hash_w2, unsigned short, 1)
KEY_HASH(key_hash_w4, u32, 1)
KEY_HASH(key_hash_w8, u64, 1)
KEY_HASH(key_hash_w16, u64, 2)

extern "C" __global__ void key_hash_bool(const u8* values, const u8* validity, u64 n, u32 null_mode, u32 first, u64* acc, u8* ok) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        u64 a;
        u8 o;
        const bool valid = start_row(validity, i, null_mode, first, acc, ok, a, o, false);
        a = hash_combine(a, valid ? (bit_is_set(values, i) ? 1ull : 2ull) : NULL_MARKER);
        acc[i] = a;
        ok[i] = o;
    }
}

// Wide hashing of a string column with i32 or i64 offsets: FNV-1a over the bytes, with the
// length, folded into the row's hash.
template <typename O>
__device__ __forceinline__ void key_hash_str(const O* __restrict__ offsets, const u8* __restrict__ bytes, const u8* __restrict__ validity,
                                             u64 n, u32 null_mode, u32 first, u64* __restrict__ acc, u8* __restrict__ ok) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        u64 a;
        u8 o;
        const bool valid = start_row(validity, i, null_mode, first, acc, ok, a, o, false);
        if (!valid) {
            a = hash_combine(a, NULL_MARKER);
        } else {
            const u64 s = (u64)offsets[i], e = (u64)offsets[i + 1];
            u64 h = 0xcbf29ce484222325ull;
            for (u64 b = s; b < e; b++) h = (h ^ bytes[b]) * 0x100000001b3ull;
            a = hash_combine(a, h ^ (e - s));
        }
        acc[i] = a;
        ok[i] = o;
    }
}

extern "C" __global__ void key_hash_str32(const i32* offsets, const u8* bytes, const u8* validity, u64 n, u32 null_mode, u32 first,
                                          u64* acc, u8* ok) {
    key_hash_str<i32>(offsets, bytes, validity, n, null_mode, first, acc, ok);
}

extern "C" __global__ void key_hash_str64(const i64* offsets, const u8* bytes, const u8* validity, u64 n, u32 null_mode, u32 first,
                                          u64* acc, u8* ok) {
    key_hash_str<i64>(offsets, bytes, validity, n, null_mode, first, acc, ok);
}

// Final key words. Narrow keys are mixed bijectively (to 32 bits when they fit: `mix32` of the
// low word); wide hashes are already mixed and are copied.
extern "C" __global__ void key_finish_u32(const u64* acc, u64 n, u32* keys) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) keys[i] = mix32((u32)acc[i]);
}

extern "C" __global__ void key_finish_u64(const u64* acc, u64 n, u32 mix, u64* keys) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) keys[i] = mix ? mix64(acc[i]) : acc[i];
}
