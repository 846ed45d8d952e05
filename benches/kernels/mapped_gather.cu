// Uploading many small host buffers (in-memory tables' Arrow buffers, 64-128 KiB each) two ways:
//   staged: host threads copy them into pinned staging, then the DMA engine moves the staging,
//   mapped: the buffers' pages are page-locked once (page ranges merged, so buffers sharing a page
//           are covered by one registration) and one kernel per chunk reads them over the link
//           through their mapped addresses and writes them packed into device memory.
// Prints the registration cost, each method's bandwidth and checks that both give equal bytes.
// Build and run: nvcc -O3 -std=c++17 -arch=sm_90 -Xcompiler -fopenmp mapped_gather.cu -o /tmp/mg && /tmp/mg
#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Part {
    const uint8_t* src;  // device-usable (mapped) address
    uint64_t dst;        // byte offset in the packed output
    uint64_t len;
};

// One block per part slice of at most `slice` bytes; 16-byte words where both ends allow.
__global__ void gather(const Part* parts, uint8_t* out, uint64_t slice) {
    Part d = parts[blockIdx.x];
    uint64_t lo = (uint64_t)blockIdx.y * slice;
    if (lo >= d.len) return;
    uint64_t hi = min(d.len, lo + slice);
    const uint8_t* s = d.src + lo;
    uint8_t* o = out + d.dst + lo;
    uint64_t n = hi - lo;
    if ((((uintptr_t)s | (uintptr_t)o) & 15) == 0) {
        uint64_t words = n / 16;
        const uint4* s4 = (const uint4*)s;
        uint4* o4 = (uint4*)o;
        for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) o4[i] = s4[i];
        for (uint64_t i = words * 16 + threadIdx.x; i < n; i += blockDim.x) o[i] = s[i];
    } else {
        for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = s[i];
    }
}

int main(int argc, char** argv) {
    size_t bufsize = argc > 1 ? strtoull(argv[1], 0, 0) : (128 << 10);
    size_t total = argc > 2 ? strtoull(argv[2], 0, 0) : (4ull << 30);
    int chunk_parts = argc > 3 ? atoi(argv[3]) : 256;  // parts per kernel launch (one upload chunk)
    int threads = omp_get_max_threads();
    size_t n = total / bufsize;
    printf("buffers %zu x %zu B = %.2f GB, %d host threads, %d parts a launch\n", n, bufsize, n * bufsize / 1e9,
           threads, chunk_parts);
    std::vector<uint8_t*> bufs(n);
    for (size_t i = 0; i < n; i++) {
        void* p = nullptr;
        if (posix_memalign(&p, 64, bufsize)) return 1;
        bufs[i] = (uint8_t*)p;
    }
#pragma omp parallel for
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < bufsize; j += 8) *(uint64_t*)(bufs[i] + j) = i * 1315423911ull + j;

    CK(cudaFree(0));
    uint8_t* dev;
    CK(cudaMalloc(&dev, n * bufsize));
    uint8_t* dev2;
    CK(cudaMalloc(&dev2, n * bufsize));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // --- staged: 32 MiB pinned slots, host threads fill a slot, then one DMA per slot (double buffered)
    size_t slot = 32 << 20;
    int nslots = 4;
    std::vector<uint8_t*> pinned(nslots);
    for (auto& p : pinned) CK(cudaMallocHost((void**)&p, slot));
    std::vector<cudaEvent_t> ev(nslots);
    for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    size_t per_slot = slot / bufsize;
    double best_staged = 1e9;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = now();
        size_t k = 0;
        for (size_t b = 0; b < n; b += per_slot, k++) {
            int s = k % nslots;
            CK(cudaEventSynchronize(ev[s]));
            size_t e = std::min(n, b + per_slot);
#pragma omp parallel for
            for (size_t i = b; i < e; i++) memcpy(pinned[s] + (i - b) * bufsize, bufs[i], bufsize);
            CK(cudaMemcpyAsync(dev + b * bufsize, pinned[s], (e - b) * bufsize, cudaMemcpyHostToDevice, st));
            CK(cudaEventRecord(ev[s], st));
        }
        CK(cudaStreamSynchronize(st));
        best_staged = std::min(best_staged, now() - t0);
    }
    printf("staged (1 thread fills a slot with %d threads, then DMA): %.1f ms, %.1f GB/s\n", threads,
           best_staged * 1e3, n * bufsize / best_staged / 1e9);

    // --- host copy alone, all threads, whole set (a ceiling for staging)
    {
        uint8_t* big;
        CK(cudaMallocHost((void**)&big, n * bufsize));
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
#pragma omp parallel for
            for (size_t i = 0; i < n; i++) memcpy(big + i * bufsize, bufs[i], bufsize);
            best = std::min(best, now() - t0);
        }
        printf("host copy into pinned alone: %.1f ms, %.1f GB/s\n", best * 1e3, n * bufsize / best / 1e9);
        double t0 = now();
        CK(cudaMemcpyAsync(dev2, big, n * bufsize, cudaMemcpyHostToDevice, st));
        CK(cudaStreamSynchronize(st));
        double t = now() - t0;
        printf("one DMA from pinned: %.1f ms, %.1f GB/s\n", t * 1e3, n * bufsize / t / 1e9);
        CK(cudaFreeHost(big));
    }

    // --- mapped: merge page ranges, register, gather
    const uintptr_t page = 4096;
    std::vector<std::pair<uintptr_t, uintptr_t>> r(n);
    for (size_t i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t)bufs[i];
        r[i] = {a & ~(page - 1), (a + bufsize + page - 1) & ~(page - 1)};
    }
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> m;
    for (auto& x : r) {
        if (!m.empty() && x.first <= m.back().second) m.back().second = std::max(m.back().second, x.second);
        else m.push_back(x);
    }
    size_t regbytes = 0;
    for (auto& x : m) regbytes += x.second - x.first;
    double t0 = now();
    for (auto& x : m) CK(cudaHostRegister((void*)x.first, x.second - x.first, cudaHostRegisterMapped));
    double treg = now() - t0;
    printf("registration: %zu merged ranges (%.2f GB) in %.1f ms: %.1f us a range, %.1f GB/s\n", m.size(),
           regbytes / 1e9, treg * 1e3, treg * 1e6 / m.size(), regbytes / treg / 1e9);

    std::vector<Part> parts(n);
    for (size_t i = 0; i < n; i++) {
        void* d = nullptr;
        CK(cudaHostGetDevicePointer(&d, bufs[i], 0));
        parts[i] = {(const uint8_t*)d, (uint64_t)(i * bufsize), (uint64_t)bufsize};
    }
    Part* dparts;
    CK(cudaMalloc(&dparts, n * sizeof(Part)));
    CK(cudaMemcpy(dparts, parts.data(), n * sizeof(Part), cudaMemcpyHostToDevice));
    uint64_t slices[] = {bufsize, 16 << 10, 32 << 10};
    for (uint64_t slice : slices) {
        for (int tpb : {256, 512, 1024}) {
            double best = 1e9;
            for (int rep = 0; rep < 4; rep++) {
                CK(cudaMemsetAsync(dev2, 0, n * bufsize, st));
                CK(cudaStreamSynchronize(st));
                double t1 = now();
                for (size_t b = 0; b < n; b += chunk_parts) {
                    int cnt = (int)std::min<size_t>(chunk_parts, n - b);
                    dim3 grid(cnt, (unsigned)((bufsize + slice - 1) / slice));
                    gather<<<grid, tpb, 0, st>>>(dparts + b, dev2, slice);
                    CK(cudaGetLastError());
                }
                CK(cudaStreamSynchronize(st));
                best = std::min(best, now() - t1);
            }
            printf("mapped gather slice %6lu B, %4d threads: %.1f ms, %.1f GB/s\n", (unsigned long)slice, tpb,
                   best * 1e3, n * bufsize / best / 1e9);
        }
    }
    // equal bytes?
    std::vector<uint8_t> h1(n * bufsize), h2(n * bufsize);
    CK(cudaMemcpy(h1.data(), dev, n * bufsize, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h2.data(), dev2, n * bufsize, cudaMemcpyDeviceToHost));
    printf("check: %s\n", memcmp(h1.data(), h2.data(), n * bufsize) == 0 ? "equal" : "DIFFERENT");
    t0 = now();
    for (auto& x : m) CK(cudaHostUnregister((void*)x.first));
    printf("unregistration: %.1f ms\n", (now() - t0) * 1e3);
    return 0;
}
