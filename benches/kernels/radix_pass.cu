// One radix-partitioning pass of GFTR's transformation, timed alone on the device, with the
// production kernels of kernels/radix.cu beside variants of them and CUB's one-digit sort as a
// reference. A development harness for issue 3 (device only: it needs nvcc, which the device
// image has and this project's build does not): `bash benches/kernels/run.sh`.
//
// Workload: n = 2^27 unique 32-bit hashed keys, row ids made by the pass, and P 4-byte payload
// columns (the build side of seed 002's join with 4 payloads: keys, ids and 5 arrays when
// P = 4 counts the key column as a payload), one 8-bit digit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cub/cub.cuh>

#include "radix.cu"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Variants. MODE 0: __match_any_sync (as production); 1: the digit's peers from 9 ballots.

__device__ __forceinline__ u32 peers_of(u32 d, int mode) {
    if (mode == 0) return __match_any_sync(0xffffffffu, d);
    u32 peers = 0xffffffffu;
#pragma unroll
    for (int b = 0; b < 9; b++) {
        const bool on = (d >> b) & 1;
        const u32 v = __ballot_sync(0xffffffffu, on);
        peers &= on ? v : ~v;
    }
    return peers;
}

template <typename K, int ITEMS, int MODE>
__device__ __forceinline__ void rank_tile_v(const K* __restrict__ keys_in, u64 n, u32 shift, u32 mask, const u32* __restrict__ offsets,
                                            TileRank& s, u64 base, u64 tile_n, K (&k)[ITEMS], u32 (&digit)[ITEMS], u32 (&pos)[ITEMS]) {
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 count = 0;
    const u32 d0 = threadIdx.x;
    if (d0 <= mask) {
        const u64 at = (u64)d0 * gridDim.x + blockIdx.x;
        s.global_start[d0] = offsets[at];
        const u64 total_entries = (u64)(mask + 1) * gridDim.x;
        const u32 next = at + 1 < total_entries ? offsets[at + 1] : (u32)n;
        count = next - offsets[at];
    }
    for (u32 w = 0; w < RADIX_WARPS; w++) s.warp_hist[w][d0] = 0;
    const u32 start = block_exclusive_scan<RADIX_WARPS>(count, s.scan_scratch, &s.scan_total);
    s.tile_start[d0] = start;
    __syncthreads();
    // All loads first, so that ITEMS loads per thread are in flight together.
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 t = warp * 32 * ITEMS + r * 32 + lane;
        k[r] = t < tile_n ? keys_in[base + t] : 0;
    }
    u32 rank[ITEMS];
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 t = warp * 32 * ITEMS + r * 32 + lane;
        const bool valid = t < tile_n;
        digit[r] = valid ? ((u32)(k[r] >> shift) & mask) : RADIX_BINS;
        const u32 peers = peers_of(digit[r], MODE);
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

// scatter_multi (4-byte values only) with the ranking of MODE.
template <typename K, int ITEMS, int MODE>
__device__ __forceinline__ void scatter_multi_v(const K* __restrict__ keys_in, K* __restrict__ keys_out, u64 n, u32 shift, u32 mask,
                                                const u32* __restrict__ offsets, const u64* __restrict__ vals_in,
                                                const u64* __restrict__ vals_out, u32 nv) {
    constexpr int TILE = RADIX_THREADS * ITEMS;
    __shared__ TileRank rs;
    __shared__ u32 s_words[TILE];
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u64 base = (u64)blockIdx.x * TILE;
    const u64 tile_n = n - base < (u64)TILE ? n - base : (u64)TILE;
    K k[ITEMS];
    u32 digit[ITEMS];
    u32 pos[ITEMS];
    rank_tile_v<K, ITEMS, MODE>(keys_in, n, shift, mask, offsets, rs, base, tile_n, k, digit, pos);
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        if (digit[r] < RADIX_BINS) s_words[pos[r]] = k[r];
    }
    __syncthreads();
    u32 out[ITEMS];
#pragma unroll
    for (int r = 0; r < ITEMS; r++) {
        const u32 j = r * RADIX_THREADS + threadIdx.x;
        out[r] = 0;
        if (j < tile_n) {
            const K key = s_words[j];
            const u32 d = (u32)(key >> shift) & mask;
            out[r] = rs.global_start[d] + (j - rs.tile_start[d]);
            if (keys_out) keys_out[out[r]] = key;
        }
    }
    for (u32 v = 0; v < nv; v++) {
        const u8* src = (const u8*)vals_in[v];
        u8* dst = (u8*)vals_out[v];
        u32 x[ITEMS];
#pragma unroll
        for (int r = 0; r < ITEMS; r++) {
            const u64 i = base + warp * 32 * ITEMS + r * 32 + lane;
            x[r] = digit[r] >= RADIX_BINS ? 0 : src ? __ldg((const u32*)src + i) : (u32)i;
        }
        __syncthreads();
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

#define VARIANT(NAME, ITEMS, MODE, MINB)                                                                               \
    extern "C" __global__ void __launch_bounds__(RADIX_THREADS, MINB)                                                 \
        NAME(const u32* keys_in, u32* keys_out, u64 n, u32 shift, u32 mask, const u32* offsets, const u64* vals_in,   \
             const u64* vals_out, u32 nv) {                                                                           \
        scatter_multi_v<u32, ITEMS, MODE>(keys_in, keys_out, n, shift, mask, offsets, vals_in, vals_out, nv);        \
    }
VARIANT(v_match_i16, 16, 0, 1)
VARIANT(v_ballot_i16, 16, 1, 1)
VARIANT(v_match_i16_b3, 16, 0, 3)
VARIANT(v_match_i16_b4, 16, 0, 4)
VARIANT(v_ballot_i16_b3, 16, 1, 3)
VARIANT(v_match_i8, 8, 0, 1)
VARIANT(v_match_i8_b4, 8, 0, 4)

// The production kernel's code held to 3 blocks per multiprocessor (at most 85 registers).
extern "C" __global__ void __launch_bounds__(RADIX_THREADS, 3)
    p_b3(const u32* keys_in, u32* keys_out, u64 n, u32 shift, u32 mask, const u32* offsets, const u64* vals_in,
         const u64* vals_out, u32 nv, u32 wide) {
    scatter_multi<u32, 16>(keys_in, keys_out, n, shift, mask, offsets, vals_in, vals_out, nv, wide);
}

// A plain copy of nv + 1 arrays of 4-byte words, for the bandwidth the pass could reach.
extern "C" __global__ void copy_arrays(const u64* in, const u64* out, u32 na, u64 n) {
    for (u32 a = 0; a < na; a++) {
        const uint4* s = (const uint4*)in[a];
        uint4* d = (uint4*)out[a];
        for (u64 i = global_thread_id(); i < n / 4; i += grid_stride()) d[i] = s[i];
    }
}

extern "C" __global__ void gen(u32* keys, const u64* pays, u32 np, u64 n, u32 seed) {
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) {
        keys[i] = mix32((u32)i ^ seed);
        for (u32 p = 0; p < np; p++) ((u32*)pays[p])[i] = (u32)i * 2654435761u + p;
    }
}

extern "C" __global__ void diff(const u32* a, const u32* b, u64 n, unsigned long long* bad) {
    unsigned long long c = 0;
    for (u64 i = global_thread_id(); i < n; i += grid_stride()) c += a[i] != b[i];
    if (c) atomicAdd(bad, c);
}

// ---------------------------------------------------------------------------------------------

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Timer {
    cudaEvent_t a, b;
    Timer() {
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
    }
    template <typename F>
    float time(F f, int reps) {
        std::vector<float> t;
        for (int i = 0; i < reps + 2; i++) {
            CK(cudaEventRecord(a));
            f();
            CK(cudaEventRecord(b));
            CK(cudaEventSynchronize(b));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, a, b));
            if (i >= 2) t.push_back(ms);
        }
        return median(t);
    }
};

int main(int argc, char** argv) {
    const int log2n = argc > 1 ? atoi(argv[1]) : 27;
    const u32 np = argc > 2 ? atoi(argv[2]) : 5;  // payload arrays read (ids are made)
    const int reps = argc > 3 ? atoi(argv[3]) : 10;
    const u64 n = 1ull << log2n;
    const u32 nv = np + 1;
    const u32 items = 16, tile = RADIX_THREADS * items;
    const u32 tiles16 = (n + tile - 1) / tile;
    const u32 tiles8 = (n + RADIX_THREADS * 8 - 1) / (RADIX_THREADS * 8);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs; n = 2^%d, %u payload arrays + row ids, one 8-bit pass\n", prop.name, prop.multiProcessorCount,
           log2n, np);

    u32 *keys, *keys_out, *keys_ref;
    CK(cudaMalloc(&keys, n * 4));
    CK(cudaMalloc(&keys_out, n * 4));
    CK(cudaMalloc(&keys_ref, n * 4));
    std::vector<u64> in_addr(nv, 0), out_addr(nv), ref_addr(nv);
    for (u32 j = 1; j < nv; j++) CK(cudaMalloc((void**)&in_addr[j], n * 4));
    for (u32 j = 0; j < nv; j++) {
        CK(cudaMalloc((void**)&out_addr[j], n * 4));
        CK(cudaMalloc((void**)&ref_addr[j], n * 4));
    }
    u64 *d_in, *d_out, *d_ref, *d_pays;
    CK(cudaMalloc(&d_in, nv * 8));
    CK(cudaMalloc(&d_out, nv * 8));
    CK(cudaMalloc(&d_ref, nv * 8));
    CK(cudaMalloc(&d_pays, nv * 8));
    CK(cudaMemcpy(d_in, in_addr.data(), nv * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_out, out_addr.data(), nv * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ref, ref_addr.data(), nv * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pays, in_addr.data() + 1, np * 8, cudaMemcpyHostToDevice));
    gen<<<prop.multiProcessorCount * 8, 256>>>(keys, d_pays, np, n, 0x9e3779b9u);
    CK(cudaDeviceSynchronize());

    u32 *hist16, *off16, *hist8, *off8;
    const u64 bins = 256;
    CK(cudaMalloc(&hist16, bins * tiles16 * 4));
    CK(cudaMalloc(&off16, bins * tiles16 * 4));
    CK(cudaMalloc(&hist8, bins * tiles8 * 4));
    CK(cudaMalloc(&off8, bins * tiles8 * 4));
    void* scan_tmp = nullptr;
    size_t scan_bytes = 0;
    CK(cub::DeviceScan::ExclusiveSum(scan_tmp, scan_bytes, hist8, off8, (int)(bins * tiles8)));
    CK(cudaMalloc(&scan_tmp, scan_bytes));
    const u32 shift = 0, mask = 255;
    auto histo16 = [&] { radix_histogram_k32_i16<<<tiles16, RADIX_THREADS>>>(keys, n, shift, mask, hist16); };
    auto histo8 = [&] { radix_histogram_k32_i8<<<tiles8, RADIX_THREADS>>>(keys, n, shift, mask, hist8); };
    auto scan16 = [&] { CK(cub::DeviceScan::ExclusiveSum(scan_tmp, scan_bytes, hist16, off16, (int)(bins * tiles16))); };
    auto scan8 = [&] { CK(cub::DeviceScan::ExclusiveSum(scan_tmp, scan_bytes, hist8, off8, (int)(bins * tiles8))); };
    histo16();
    scan16();
    histo8();
    scan8();
    CK(cudaDeviceSynchronize());

    Timer T;
    const double word_bytes = 4.0 * n;
    // Bytes a pass moves: keys read and written, payloads read and written, ids written.
    const double pass_bytes = word_bytes * (2 + 2 * np + 1);
    auto report = [&](const char* what, float ms, double bytes) {
        printf("%-34s %8.3f ms  %7.0f GB/s\n", what, ms, bytes / (ms * 1e-3) / 1e9);
    };
    report("histogram (16 items)", T.time(histo16, reps), word_bytes);
    report("scan of the histogram", T.time(scan16, reps), 8.0 * bins * tiles16);

    auto prod = [&](u32 k) {
        radix_scatter_multi_k32_i16<<<tiles16, RADIX_THREADS>>>(keys, keys_ref, n, shift, mask, off16, d_in, d_ref, k, 0);
    };
    auto prod8 = [&](u32 k) {
        radix_scatter_multi_k32_i8<<<tiles8, RADIX_THREADS>>>(keys, keys_ref, n, shift, mask, off8, d_in, d_ref, k, 0);
    };
    for (u32 k : {0u, 1u, nv}) {
        char name[64];
        snprintf(name, sizeof name, "production i16, %u arrays", k);
        const double bytes = word_bytes * 2 + (k ? word_bytes * (1 + 2.0 * (k - 1)) : 0);
        report(name, T.time([&] { prod(k); }, reps), bytes);
    }
    report("production i8, all arrays", T.time([&] { prod8(nv); }, reps), pass_bytes);
    report("production i16 at 3 blocks/SM, all", T.time([&] {
               p_b3<<<tiles16, RADIX_THREADS>>>(keys, keys_out, n, shift, mask, off16, d_in, d_out, nv, 0);
           }, reps),
           pass_bytes);
    prod(nv);
    CK(cudaDeviceSynchronize());

    unsigned long long* bad;
    CK(cudaMalloc(&bad, 8));
    auto check = [&](const char* what) {
        unsigned long long total = 0, b = 0;
        CK(cudaMemset(bad, 0, 8));
        diff<<<264, 256>>>(keys_out, keys_ref, n, bad);
        for (u32 j = 0; j < nv; j++) diff<<<264, 256>>>((u32*)out_addr[j], (u32*)ref_addr[j], n, bad);
        CK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
        total += b;
        printf("  %s: %s (%llu words differ)\n", what, total ? "DIFFERENT" : "same output as production", total);
    };
    check("production i16 at 3 blocks/SM");
    struct V {
        const char* name;
        void (*f)(const u32*, u32*, u64, u32, u32, const u32*, const u64*, const u64*, u32);
        u32 items;
    } vs[] = {{"variant match, loads first, i16", v_match_i16, 16},
              {"variant ballot, loads first, i16", v_ballot_i16, 16},
              {"variant match, i16, 3 blocks/SM", v_match_i16_b3, 16},
              {"variant match, i16, 4 blocks/SM", v_match_i16_b4, 16},
              {"variant ballot, i16, 3 blocks/SM", v_ballot_i16_b3, 16},
              {"variant match, loads first, i8", v_match_i8, 8},
              {"variant match, i8, 4 blocks/SM", v_match_i8_b4, 16 / 2}};
    for (auto& v : vs) {
        const u32 t = v.items == 16 ? tiles16 : tiles8;
        const u32* off = v.items == 16 ? off16 : off8;
        for (u32 k : {0u, nv}) {
            char name[80];
            snprintf(name, sizeof name, "%s, %u arrays", v.name, k);
            const double bytes = word_bytes * 2 + (k ? word_bytes * (1 + 2.0 * (k - 1)) : 0);
            report(name, T.time([&] { v.f<<<t, RADIX_THREADS>>>(keys, keys_out, n, shift, mask, off, d_in, d_out, k); }, reps),
                   bytes);
        }
        check(v.name);
    }

    // The same bytes as a plain copy (keys + payloads read and written, ids written as a copy).
    std::vector<u64> cin(nv), cout_(nv);
    cin[0] = (u64)keys;
    cout_[0] = (u64)keys_out;
    for (u32 j = 1; j < nv; j++) {
        cin[j] = in_addr[j];
        cout_[j] = out_addr[j];
    }
    u64 *d_cin, *d_cout;
    CK(cudaMalloc(&d_cin, nv * 8));
    CK(cudaMalloc(&d_cout, nv * 8));
    CK(cudaMemcpy(d_cin, cin.data(), nv * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_cout, cout_.data(), nv * 8, cudaMemcpyHostToDevice));
    report("copy of keys + payloads", T.time([&] { copy_arrays<<<prop.multiProcessorCount * 8, 256>>>(d_cin, d_cout, nv, n); }, reps),
           word_bytes * 2 * nv);

    // CUB's one-digit (key, value) sort: a ceiling for one pass of one value array. Counted as
    // its scatter's bytes only (its histogram also reads the keys), so the rate is a lower bound.
    void* sort_tmp = nullptr;
    size_t sort_bytes = 0;
    CK(cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys, keys_out, (u32*)in_addr[1], (u32*)out_addr[1], (int)n, 0, 8));
    CK(cudaMalloc(&sort_tmp, sort_bytes));
    report("cub SortPairs, bits 0..8", T.time([&] {
               CK(cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys, keys_out, (u32*)in_addr[1], (u32*)out_addr[1],
                                                  (int)n, 0, 8));
           }, reps),
           word_bytes * 4);
    report("production i16 keys only (again)", T.time([&] { prod(0); }, reps), word_bytes * 2);
    return 0;
}
