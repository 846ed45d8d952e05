// C helpers every generated expression kernel includes after common.cuh (`HELPERS` in
// src/expr/codegen.rs): string comparison and search, UTF-8 character ranges, dates, error
// severities, float keys and checked 128-bit arithmetic.
__device__ __forceinline__ int str_cmp(const u8* a, u64 al, const u8* b, u64 bl) {
    const u64 m = al < bl ? al : bl;
    for (u64 i = 0; i < m; i++) {
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    }
    return al < bl ? -1 : (al > bl ? 1 : 0);
}

// Whether the n bytes at a and b are equal.
__device__ __forceinline__ bool bytes_eq(const u8* a, const u8* b, u64 n) {
    for (u64 i = 0; i < n; i++) {
        if (a[i] != b[i]) return false;
    }
    return true;
}

// The first position of the needle (nl > 0 bytes) in the hl bytes of the haystack, or hl when it
// does not occur.
__device__ __forceinline__ u64 bytes_find(const u8* h, u64 hl, const u8* n, u64 nl) {
    if (nl > hl) return hl;
    for (u64 i = 0; i + nl <= hl; i++) {
        if (h[i] == n[0] && bytes_eq(h + i, n, nl)) return i;
    }
    return hl;
}

// The bytes [*from, *to) of the characters [s, e) (0 <= s <= e) of the n bytes of UTF-8 at p; a
// position past the last character is the end of the string.
__device__ __forceinline__ void utf8_char_range(const u8* p, u64 n, long long s, long long e, u64* from, u64* to) {
    *from = n;
    *to = n;
    long long c = 0;
    for (u64 i = 0; i < n; i++) {
        if ((p[i] & 0xC0) == 0x80) continue;
        if (c == s) *from = i;
        if (c == e) { *to = i; return; }
        c++;
    }
}

// Year, month (1-12) and day (1-31) of a count of days since 1970-01-01 in the proleptic
// Gregorian calendar (H. Hinnant's civil_from_days).
__device__ __forceinline__ void civil_from_days(long long z, long long* y, unsigned* m, unsigned* d) {
    z += 719468;
    const long long era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (long long)yoe + era * 400 + (*m <= 2 ? 1 : 0);
}

__device__ __forceinline__ int date32_part(int days, int part) {
    long long y; unsigned m, d;
    civil_from_days((long long)days, &y, &m, &d);
    return part == 0 ? (int)y : (part == 1 ? (int)m : (int)d);
}

typedef unsigned __int128 u128;

// Error severities of a row (see codegen.rs, Val::err): 0 none, 1 DataFusion may fail on it
// (depending on how its batches fall), 2 DataFusion fails on it.
__device__ __forceinline__ u32 sev_max(u32 a, u32 b) { return a > b ? a : b; }

// Checked 128-bit arithmetic: the (wrapped) result, and whether it overflowed.
__device__ __forceinline__ __int128 i128_add(__int128 a, __int128 b, bool* ovf) {
    const __int128 r = (__int128)((u128)a + (u128)b);
    if ((a >= 0) == (b >= 0) && (r >= 0) != (a >= 0)) *ovf = true;
    return r;
}

__device__ __forceinline__ __int128 i128_sub(__int128 a, __int128 b, bool* ovf) {
    const __int128 r = (__int128)((u128)a - (u128)b);
    if ((a >= 0) != (b >= 0) && (r >= 0) != (a >= 0)) *ovf = true;
    return r;
}

// Arrow's total order of doubles as a signed integer key (Rust's f64::total_cmp).
// DataFusion's comparisons (= <> < <= > >=, IS [NOT] DISTINCT FROM, IN) order doubles in that
// total order after turning -0 into +0 (SQL: -0 = +0); CASE x WHEN compares them unchanged.
__device__ __forceinline__ long long f64_sql_key(double x);
__device__ __forceinline__ long long f64_key(double x) {
    long long b = __double_as_longlong(x);
    return b ^ (long long)(((unsigned long long)(b >> 63)) >> 1);
}

__device__ __forceinline__ long long f64_sql_key(double x) {
    return f64_key(x == 0.0 ? 0.0 : x);
}

// A double that holds an integer, as an i128: 0 unless it is finite and of magnitude below 2^127.
__device__ __forceinline__ __int128 f64_to_i128(double r) {
    const double a = fabs(r);
    if (!(a < 1.7014118346046923e38)) return 0;
    if (a < 9.2233720368547758e18) return (__int128)(long long)r;
    int e;
    const double f = frexp(a, &e);
    const u128 v = (u128)(u64)ldexp(f, 53) << (e - 53);
    return r < 0 ? (__int128)((u128)0 - v) : (__int128)v;
}

__device__ __forceinline__ __int128 i128_mul(__int128 a, __int128 b, bool* ovf) {
    const bool neg = (a < 0) != (b < 0);
    const u128 ua = a < 0 ? (u128)0 - (u128)a : (u128)a;
    const u128 ub = b < 0 ? (u128)0 - (u128)b : (u128)b;
    const u64 a0 = (u64)ua, a1 = (u64)(ua >> 64), b0 = (u64)ub, b1 = (u64)(ub >> 64);
    if (a1 != 0 && b1 != 0) { *ovf = true; return 0; }
    const u128 lo = (u128)a0 * b0;
    const u128 mid = (u128)a1 * b0 + (u128)a0 * b1;
    if ((mid >> 64) != 0) { *ovf = true; return 0; }
    const u128 p = lo + (mid << 64);
    if (p < lo) { *ovf = true; return 0; }
    const u128 limit = ((u128)1 << 127) - (neg ? 0 : 1);
    if (p > limit) { *ovf = true; return 0; }
    return neg ? (__int128)((u128)0 - p) : (__int128)p;
}
