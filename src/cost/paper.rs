//! The cost formulas of the papers, written as code with the papers' names.
//!
//! Wu et al. 2025 ("Efficiently Processing Joins and Grouped Aggregations on GPUs", §4 and Table 1/2):
//! `B_G` is the sequential global-memory bandwidth, `B_R = B_G / 24` the bandwidth of random
//! 4-byte accesses, `B_M` the bandwidth of the memory level that holds a hash table's hot
//! entries; `N` input tuples, `g` groups, `M` matched tuples, `p` payload columns, `k` key bytes.
//! Every function returns seconds for bandwidths in bytes per second (or a decision).
//!
//! Lutz et al. 2022 (Triton join, §3) gives the transfer terms of a join whose state does not fit on the
//! device: the data a GPU-partitioned join moves over the interconnect, and the CPU
//! partitioning rate a CPU-partitioned one would need.
//!
//! The constants the papers measured on an A100 (the 24x random penalty, the L1 and L2 bandwidth
//! ratios) are the defaults here; [`crate::cost::profile`] replaces them with this machine's.

/// `B_G / B_R` measured on the A100 (Table 1: an unclustered gather 8.52x slower than a
/// clustered one, with the same instructions).
pub const RANDOM_PENALTY_A100: f64 = 24.0;
/// `B_L1 / B_G` and `B_L2 / B_G` as Wu et al. 2025 states them for the A100.
pub const L1_RATIO_A100: f64 = 12.0;
pub const L2_RATIO_A100: f64 = 4.5;
/// Capacities Wu et al. 2025 assigns to the A100's L1 (per SM) and L2 when placing a hash table.
pub const L1_BYTES_A100: f64 = 192.0 * 1024.0;
pub const L2_BYTES_A100: f64 = 40.0 * 1024.0 * 1024.0;
/// The A100's `B_G` the paper plugs in (theoretical maximum).
pub const B_G_A100: f64 = 1555e9;

/// `B_R`: random 4-byte accesses run `penalty` times slower than sequential ones.
pub fn random_bandwidth(b_g: f64, penalty: f64) -> f64 {
    b_g / penalty
}

/// The random penalty `B_G / B_R` implied by a measured ratio of unclustered to clustered gather
/// time. Both gathers read a map and write the output sequentially (8 bytes per item); they
/// differ in reading the 4-byte input, clustered at `B_G` or unclustered at `B_R`:
/// `ratio = (8 + 4 x) / 12`.
pub fn random_penalty_from_gathers(ratio: f64) -> f64 {
    (12.0 * ratio - 8.0) / 4.0
}

/// Table 1's model of a gather of `n` 4-byte items: map read and output written sequentially,
/// input read clustered (`B_G`) or unclustered (`B_R`).
pub fn gather_cost(n: f64, clustered: bool, b_g: f64, penalty: f64) -> f64 {
    let input = if clustered { 4.0 * n / b_g } else { 4.0 * n / random_bandwidth(b_g, penalty) };
    2.0 * 4.0 * n / b_g + input
}

/// §4.1.3 `C_S`: sorting one 4-byte payload column with its 4-byte keys (GFTR): a histogram scan
/// and four 8-bit passes, each reading and writing keys and values: `68 N / B_G`.
pub fn sgb_sort_cost(n: f64, b_g: f64) -> f64 {
    (1.0 + 4.0 * 4.0) * 4.0 * n / b_g
}

/// §4.1.3 `C_P`: gathering one 4-byte payload column in sorted order (GFUR). A warp's 32 ids touch
/// `min(32, g)` groups, so the effective bandwidth is `B_G / min(24, g)` (never below `B_R`):
/// `(4 min(24, g) + 8) N / B_G`.
pub fn sgb_permute_cost(n: f64, g: f64, b_g: f64) -> f64 {
    (4.0 * g.min(24.0) + 8.0) * n / b_g
}

/// §4.1.3: sorting the payloads with the keys (GFTR) beats permuting them after (GFUR) when
/// `C_S < C_P`, i.e. from 16 groups on.
pub fn sgb_gftr_pays(g: f64) -> bool {
    sgb_sort_cost(1.0, 1.0) < sgb_permute_cost(1.0, g, 1.0)
}

/// §4.1.4 `C_1`: GFUR gathers `M` of `N` 4-byte items unclustered: `104 M / B_G`.
pub fn phj_gfur_column_cost(m: f64, b_g: f64) -> f64 {
    2.0 * 4.0 * m / b_g + 4.0 * m / random_bandwidth(b_g, RANDOM_PENALTY_A100)
}

/// §4.1.4 `C_2`: GFTR partitions the column with its keys on 16 bits (a histogram and two
/// passes) and gathers `M` items clustered: `(36 N + 12 M) / B_G`.
pub fn phj_gftr_column_cost(n: f64, m: f64, b_g: f64) -> f64 {
    (4.0 * n + 2.0 * 4.0 * 4.0 * n) / b_g + 3.0 * 4.0 * m / b_g
}

/// §4.1.4, refined for the first column (which GFTR partitions in place of the row ids GFUR
/// partitions anyway): the match ratio above which GFTR materialises `p` payload columns of a
/// relation faster, `mr* = 36 (p - 1) / (92 p)`. 0 for one column, tending to 0.39.
pub fn phj_match_ratio_threshold(p: f64) -> f64 {
    if p <= 0.0 { 0.0 } else { 36.0 * (p - 1.0) / (92.0 * p) }
}

/// §4.1.4: GFUR minus GFTR for one relation of `n` tuples, `m` of them matched, with `p` 4-byte
/// payload columns: `(92 p M - 36 (p - 1) N) / B_G`. Positive when GFTR is faster.
pub fn phj_gfur_minus_gftr(n: f64, m: f64, p: f64, b_g: f64) -> f64 {
    (92.0 * p * m - 36.0 * (p - 1.0) * n) / b_g
}

/// Radix passes of 8 bits for `g` distinct codes: `ceil(bitlen(g - 1) / 8)`, at least one (the
/// notes on Wu et al. 2025, §9.7: `bitlen(g-1)`, not `log2 g`).
pub fn radix_passes(g: f64) -> f64 {
    let g = g.max(1.0) as u64;
    let bits = 64 - g.saturating_sub(1).leading_zeros();
    (bits as f64 / 8.0).ceil().max(1.0)
}

/// The bandwidth `B_M` of the memory level that holds a hash table of `footprint` bytes.
pub fn memory_level_bandwidth(footprint: f64, b_g: f64, levels: &MemoryLevels) -> f64 {
    if footprint <= levels.l1_bytes {
        levels.l1_ratio * b_g
    } else if footprint <= levels.l2_bytes {
        levels.l2_ratio * b_g
    } else {
        b_g
    }
}

/// Capacities and bandwidth ratios of the levels a hash table can sit in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryLevels {
    pub l1_bytes: f64,
    pub l1_ratio: f64,
    pub l2_bytes: f64,
    pub l2_ratio: f64,
}

impl MemoryLevels {
    /// The A100 values Wu et al. 2025 uses.
    pub const A100: MemoryLevels = MemoryLevels {
        l1_bytes: L1_BYTES_A100,
        l1_ratio: L1_RATIO_A100,
        l2_bytes: L2_BYTES_A100,
        l2_ratio: L2_RATIO_A100,
    };
}

/// §4.4 `D(N, g)`: encoding `N` `k`-byte keys with a `g`-entry dictionary: build the table from
/// the `g` distinct keys, then probe it with all `N`; the hot entries sit in a level of bandwidth
/// `B_M` whose random throughput is `B_M / min(g, 24)`.
pub fn dictionary_encoding_cost(n: f64, g: f64, k: f64, b_g: f64, levels: &MemoryLevels) -> f64 {
    let b_m = memory_level_bandwidth(g * (k + 4.0), b_g, levels);
    let random = b_m / g.min(24.0);
    let build = k * g / b_g + (k + 4.0) * g / random;
    let probe = (k * n + 4.0 * n) / b_g + (k + 4.0) * n / random;
    build + probe
}

/// §4.4 `C_1`: sorting `p` 4-byte payload columns with `k`-byte keys in `k` 8-bit passes.
pub fn sort_cost_plain_keys(n: f64, k: f64, p: f64, b_g: f64) -> f64 {
    p * (k * n + k * n * 2.0 * (k + 4.0)) / b_g
}

/// §4.4 `C_2`: encode the keys to 4 bytes first, then sort on `bitlen(g - 1)` bits.
pub fn sort_cost_encoded_keys(n: f64, g: f64, k: f64, p: f64, b_g: f64, levels: &MemoryLevels) -> f64 {
    dictionary_encoding_cost(n, g, k, b_g, levels) + p * (4.0 * n + radix_passes(g) * n * 2.0 * (4.0 + 4.0)) / b_g
}

/// §4.4, Table 2: the fewest payload columns for which dictionary encoding pays, or `None` when
/// no number of columns makes it pay (the encoded key needs as many passes as the plain one).
pub fn dictionary_min_payloads(n: f64, g: f64, k: f64, b_g: f64, levels: &MemoryLevels) -> Option<u32> {
    let saved_per_column = sort_cost_plain_keys(n, k, 1.0, b_g) - (4.0 * n + radix_passes(g) * n * 16.0) / b_g;
    if saved_per_column <= 0.0 {
        return None;
    }
    let d = dictionary_encoding_cost(n, g, k, b_g, levels);
    Some((d / saved_per_column).floor() as u32 + 1)
}

/// Lutz et al. 2022 §3: the bytes a GPU-partitioned out-of-core join moves over the interconnect when a
/// fraction `cached` of the partitioned state stays on the device: the first pass reads all `d`
/// bytes and spills the rest, the second pass reads the spilled part back.
pub fn triton_transfer_bytes(d: f64, cached: f64) -> (f64, f64) {
    let c = cached.clamp(0.0, 1.0);
    ((2.0 - c) * d, (1.0 - c) * d)
}

/// Lutz et al. 2022 §3: the CPU partitioning rate (bytes/s) a CPU-partitioned join needs to keep an
/// interconnect of `link` bytes/s busy when the working set is a fraction `alpha` of the data.
pub fn cpu_partitioning_rate_needed(alpha: f64, link: f64) -> f64 {
    link / alpha
}

/// Lutz et al. 2022 §3: first-pass radix bits so that two partitions of both sides fit in half of the
/// device memory `c`: the smallest `b` with `2 (|R| + |S|) / 2^b < c / 2`.
pub fn triton_first_pass_bits(r_bytes: f64, s_bytes: f64, c: f64) -> u32 {
    let mut b = 0;
    while 2.0 * (r_bytes + s_bytes) / 2f64.powi(b as i32) >= c / 2.0 && b < 24 {
        b += 1;
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-12)
    }

    /// Table 1: 8.52x between unclustered and clustered gathers means B_G ~ 24 B_R, and the model
    /// then gives 8.98 ms and 1.04 ms for 2^27 items at 1555 GB/s.
    #[test]
    fn table_1_random_penalty() {
        let x = random_penalty_from_gathers(8.52);
        assert!(close(x, 23.56, 0.001), "{x}");
        let n = (1u64 << 27) as f64;
        assert!(close(gather_cost(n, false, B_G_A100, 24.0) * 1e3, 8.98, 0.005));
        assert!(close(gather_cost(n, true, B_G_A100, 24.0) * 1e3, 1.04, 0.01));
    }

    /// §4.1.3: GFTR sort group-by needs at least 16 groups; the whole-query difference with two
    /// payload columns saturates at 140 N / B_G = 24.2 ms for N = 2^28 on the A100; one 4-byte
    /// (key, value) radix sort of 2^28 rows costs 11.7 ms.
    #[test]
    fn sort_group_by_gftr_from_16_groups() {
        assert!(!sgb_gftr_pays(15.0));
        assert!(sgb_gftr_pays(16.0));
        assert!(sgb_gftr_pays(1e6));
        let n = (1u64 << 28) as f64;
        let diff = |g: f64| {
            sgb_sort_cost(n, B_G_A100) + 2.0 * sgb_permute_cost(n, g, B_G_A100) - 2.0 * sgb_sort_cost(n, B_G_A100)
        };
        assert!(close(diff(1e6) * 1e3, 24.17, 0.002), "{}", diff(1e6) * 1e3);
        assert!(diff(6.0) < 0.0 && diff(7.0) > 0.0, "turns positive at g = 7");
        assert!(close(sgb_sort_cost(n, B_G_A100) * 1e3, 11.74, 0.002));
    }

    /// §4.1.4: C_1 > C_2 from a match ratio of 0.39; with the first column free, mr* = 0, 0.196,
    /// 0.261, 0.293 for 1..4 columns, tending to 0.391; and the predictions of Figure 10 for
    /// |R| = |S| = 2^27 with two payload columns: +25.6, +9.7, +1.7, -2.2 ms.
    #[test]
    fn phj_gftr_match_ratio() {
        let n = 1e9;
        let cross = |mr: f64| phj_gfur_column_cost(mr * n, B_G_A100) > phj_gftr_column_cost(n, mr * n, B_G_A100);
        assert!(!cross(0.39) && cross(0.40));
        for (p, want) in [(1.0, 0.0), (2.0, 0.196), (3.0, 0.261), (4.0, 0.293), (5.0, 0.313), (6.0, 0.326)] {
            assert!((phj_match_ratio_threshold(p) - want).abs() < 0.0006, "p = {p}");
        }
        assert!((phj_match_ratio_threshold(1e9) - 0.391).abs() < 0.001);
        let r = (1u64 << 27) as f64;
        for (mr, want_ms) in [(1.0, 25.6), (0.5, 9.7), (0.25, 1.7), (0.125, -2.2)] {
            let got = 2.0 * phj_gfur_minus_gftr(r, mr * r, 2.0, B_G_A100) * 1e3;
            assert!((got - want_ms).abs() < 0.06, "mr {mr}: {got} ms");
        }
    }

    /// Table 2: the payload columns for which dictionary encoding pays, N = 2^28. (b), 8-byte
    /// keys, comes out exactly with the stated ratios; (a), 4-byte keys, needs B_L2 = 3 B_G (the
    /// notes' §9.4), and its 2^23 row gives 13 where the paper prints 14.
    #[test]
    fn table_2_dictionary_encoding() {
        let n = (1u64 << 28) as f64;
        let min_p = |log_g: i32, k: f64, levels: &MemoryLevels| {
            dictionary_min_payloads(n, 2f64.powi(log_g), k, B_G_A100, levels)
        };
        let a100 = MemoryLevels::A100;
        for (range, want) in [(0..=21, 1), (22..=26, 3), (27..=27, 4), (28..=28, 5)] {
            for e in range {
                assert_eq!(min_p(e, 8.0, &a100), Some(want), "k = 8, g = 2^{e}");
            }
        }
        let l2_3 = MemoryLevels { l2_ratio: 3.0, ..a100 };
        for (range, want) in [(0..=14, 1), (15..=16, 3), (17..=22, 5), (24..=24, 14)] {
            for e in range {
                assert_eq!(min_p(e, 4.0, &l2_3), Some(want), "k = 4, g = 2^{e}");
            }
        }
        assert_eq!(min_p(23, 4.0, &l2_3), Some(13));
        assert_eq!(min_p(25, 4.0, &l2_3), None, "an encoded 4-byte key of 2^25 groups still needs 4 passes");
        assert_eq!(radix_passes(256.0), 1.0);
        assert_eq!(radix_passes(257.0), 2.0);
        assert_eq!(radix_passes(1.0), 1.0);
    }

    /// Lutz et al. 2022 §3: 12 GiB/s at alpha = 1/4 needs 48 GiB/s of CPU partitioning; a join moving D
    /// bytes with half of its state cached reads 1.5 D and writes 0.5 D over the link.
    #[test]
    fn triton_terms() {
        let gib = (1u64 << 30) as f64;
        assert!(close(cpu_partitioning_rate_needed(0.25, 12.0 * gib), 48.0 * gib, 1e-12));
        assert_eq!(triton_transfer_bytes(100.0, 0.5), (150.0, 50.0));
        assert_eq!(triton_transfer_bytes(100.0, 1.0), (100.0, 0.0));
        // 8 GiB of R and 8 GiB of S on a 16 GiB device: 2 (16 GiB) / 2^b < 8 GiB from b = 3.
        assert_eq!(triton_first_pass_bits(8.0 * gib, 8.0 * gib, 16.0 * gib), 3);
    }
}
