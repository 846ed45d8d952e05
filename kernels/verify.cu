// Confirming candidate pairs of a wide-key join, one key column at a time: eq[k] stays 1 only if
// build row rb[k] and probe row rp[k] hold equal values (both NULL counts as equal: with NULL
// equals nothing such rows never become candidates).
#include "common.cuh"

__device__ __forceinline__ bool null_rule(const u8* bv, const u8* pv, u32 b, u32 p, bool& decided) {
    const bool bn = bv != nullptr && !bit_is_set(bv, b);
    const bool pn = pv != nullptr && !bit_is_set(pv, p);
    decided = bn || pn;
    return bn && pn;
}

template <typename T>
__device__ __forceinline__ void verify_fixed(const T* __restrict__ bvals, const u8* __restrict__ bvalid, const T* __restrict__ pvals,
                                             const u8* __restrict__ pvalid, const u32* __restrict__ rb, const u32* __restrict__ rp, u64 n,
                                             u8* __restrict__ eq) {
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {
        if (!eq[k]) continue;
        const u32 b = rb[k], p = rp[k];
        bool decided;
        bool same = null_rule(bvalid, pvalid, b, p, decided);
        if (!decided) same = bvals[b] == pvals[p];
        if (!same) eq[k] = 0;
    }
}

#define VERIFY_FIXED(NAME, T)                                                                                             \
    extern "C" __global__ void NAME(const T* bvals, const u8* bvalid, const T* pvals, const u8* pvalid, const u32* rb, const u32* rp, \
                                    u64 n, u8* eq) {                                                                      \
        verify_fixed<T>(bvals, bvalid, pvals, pvalid, rb, rp, n, eq);                                                     \
    }
VERIFY_FIXED(verify_w1, u8)
VERIFY_FIXED(verify_w2, unsigned short)
VERIFY_FIXED(verify_w4, u32)
VERIFY_FIXED(verify_w8, u64)

// 16-byte values (Decimal128), compared as two 64-bit words.
extern "C" __global__ void verify_w16(const u64* bvals, const u8* bvalid, const u64* pvals, const u8* pvalid, const u32* rb,
                                      const u32* rp, u64 n, u8* eq) {
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {
        if (!eq[k]) continue;
        const u32 b = rb[k], p = rp[k];
        bool decided;
        bool same = null_rule(bvalid, pvalid, b, p, decided);
        if (!decided) same = bvals[2 * (u64)b] == pvals[2 * (u64)p] && bvals[2 * (u64)b + 1] == pvals[2 * (u64)p + 1];
        if (!same) eq[k] = 0;
    }
}

extern "C" __global__ void verify_bool(const u8* bvals, const u8* bvalid, const u8* pvals, const u8* pvalid, const u32* rb, const u32* rp,
                                       u64 n, u8* eq) {
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {
        if (!eq[k]) continue;
        const u32 b = rb[k], p = rp[k];
        bool decided;
        bool same = null_rule(bvalid, pvalid, b, p, decided);
        if (!decided) same = bit_is_set(bvals, b) == bit_is_set(pvals, p);
        if (!same) eq[k] = 0;
    }
}

template <typename O>
__device__ __forceinline__ void verify_str(const O* __restrict__ boff, const u8* __restrict__ bbytes, const u8* __restrict__ bvalid,
                                           const O* __restrict__ poff, const u8* __restrict__ pbytes, const u8* __restrict__ pvalid,
                                           const u32* __restrict__ rb, const u32* __restrict__ rp, u64 n, u8* __restrict__ eq) {
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {
        if (!eq[k]) continue;
        const u32 b = rb[k], p = rp[k];
        bool decided;
        bool same = null_rule(bvalid, pvalid, b, p, decided);
        if (!decided) {
            const u64 bs = (u64)boff[b], be = (u64)boff[b + 1], ps = (u64)poff[p], pe = (u64)poff[p + 1];
            same = be - bs == pe - ps;
            for (u64 i = 0; same && i < be - bs; i++) same = bbytes[bs + i] == pbytes[ps + i];
        }
        if (!same) eq[k] = 0;
    }
}

extern "C" __global__ void verify_str32(const i32* boff, const u8* bbytes, const u8* bvalid, const i32* poff, const u8* pbytes,
                                        const u8* pvalid, const u32* rb, const u32* rp, u64 n, u8* eq) {
    verify_str<i32>(boff, bbytes, bvalid, poff, pbytes, pvalid, rb, rp, n, eq);
}

extern "C" __global__ void verify_str64(const i64* boff, const u8* bbytes, const u8* bvalid, const i64* poff, const u8* pbytes,
                                        const u8* pvalid, const u32* rb, const u32* rp, u64 n, u8* eq) {
    verify_str<i64>(boff, bbytes, bvalid, poff, pbytes, pvalid, rb, rp, n, eq);
}
