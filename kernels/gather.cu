// Gathers: out[i] = in[idx[i]] for 4-, 8- and 16-byte values (GFUR materialisation, dictionary
// decoding).
#include "common.cuh"

#define GATHER(NAME, T)                                                                                     \
    extern "C" __global__ void NAME(const T* __restrict__ in, const u32* __restrict__ idx, T* __restrict__ out, u64 n) { \
        for (u64 i = global_thread_id(); i < n; i += grid_stride()) out[i] = in[idx[i]];                      \
    }
GATHER(gather_u32, u32)
GATHER(gather_u64, u64)
GATHER(gather_u128, uint4)
