//! Group-by costs: hash and sort group-by priced with Wu et al.'s terms, DataFusion's CPU
//! `AggregateExec`, and the choice among them.
//!
//! GPU features, in seconds at the profile's bandwidths: launch groups (one per input chunk),
//! group ids, and the aggregation. Hash group ids are Wu et al.'s dictionary encoding `D(N, g)`
//! priced with the tables our kernels use ([`hash_ids`]); sort group ids are an LSD radix sort
//! of (key word, row id) over every bit of the word. The aggregation reads the values once and
//! updates accumulators in shared memory when a block's groups fit (48 KiB), else at random in
//! the level that holds `g` accumulators. The partition group-by's ids are its radix passes
//! (keys, row ids and the aggregated values moved together: GFTR) and a shared-memory numbering
//! pass; its aggregation updates shared memory at every group count.

use super::dot;
use super::paper::{memory_level_bandwidth, radix_passes};
use super::profile::Profile;
use crate::aggregate::GroupIdMethod;
use crate::aggregate::groups::hash_table_attempts;
use crate::aggregate::partition::{LARGEST_ROWS, partition_bits};

/// Shared memory the hash group-by gives a block's accumulators.
const SHARED_ACCUMULATORS: f64 = 48.0 * 1024.0;

/// The sizes a group-by's cost depends on.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AggregateShape {
    pub rows: f64,
    /// Distinct groups (1 for a global aggregate).
    pub groups: f64,
    /// Bytes of the key word (4 or 8; 8 for hashed wide keys).
    pub key_bytes: f64,
    /// Bytes per row of the aggregated values, and accumulators per group.
    pub value_bytes: f64,
    pub accumulators: f64,
    /// Input chunks the GPU processes.
    pub chunks: f64,
}

impl AggregateShape {
    pub fn gpu_features(&self, method: GroupIdMethod, profile: &Profile) -> [f64; 3] {
        if method == GroupIdMethod::Partition && self.rows / self.groups.max(1.0) > LARGEST_ROWS as f64 {
            // Partitions this large go to the hash path after the partitioning.
            let p = self.method_features(GroupIdMethod::Partition, profile);
            let h = self.method_features(GroupIdMethod::Hash, profile);
            return [p[0], p[1] + h[1], h[2]];
        }
        self.method_features(method, profile)
    }

    fn method_features(&self, method: GroupIdMethod, profile: &Profile) -> [f64; 3] {
        let b_g = profile.b_g;
        let levels = profile.memory_levels();
        let (n, g, k) = (self.rows, self.groups.max(1.0), self.key_bytes);
        let ids = match method {
            GroupIdMethod::Hash => hash_ids(n, g, k, profile),
            GroupIdMethod::Sort => {
                let passes = radix_passes(2f64.powf(8.0 * k));
                (n * (k + 4.0) * (2.0 * passes + 1.0) + n * 4.0) / b_g
            }
            GroupIdMethod::Partition => {
                // Each pass reads the keys for its histogram, then reads and writes keys, row ids
                // and values; numbering reads the keys twice and writes ids and representatives.
                let passes = (partition_bits(n as u64) as f64 / 8.0).ceil();
                (n * passes * (k + 2.0 * (k + 4.0 + self.value_bytes)) + n * (2.0 * k + 16.0)) / b_g
            }
        };
        let acc_bytes = g * self.accumulators * 8.0;
        let reads = (n * self.value_bytes + g * (k + self.accumulators * 8.0)) / b_g;
        let updates = if method == GroupIdMethod::Partition || acc_bytes <= SHARED_ACCUMULATORS {
            0.0
        } else {
            n * self.accumulators * 8.0 * profile.random_penalty / memory_level_bandwidth(acc_bytes, b_g, &levels)
        };
        [self.chunks, ids, reads + updates]
    }

    /// The CPU aggregate's features: calls, rows, rows whose group misses the cache (in
    /// proportion to how much of the groups' table exceeds a 32 MiB cache), and groups.
    pub fn cpu_features(&self) -> [f64; 4] {
        let table = self.groups * (self.key_bytes + 16.0 + 8.0 * self.accumulators);
        let miss = (table / (32.0 * 1024.0 * 1024.0)).min(1.0);
        [1.0, self.rows, self.rows * miss, self.groups]
    }
}

/// Hash group ids as [`crate::aggregate::groups`] makes them: the one-pass kernel reads the keys
/// and writes the ids when it holds the groups; otherwise, after its failed attempt, every table
/// tried ([`hash_table_attempts`]) reads the keys, inserts each row at random in the memory
/// level that holds the table, and writes the ids. Wu et al.'s `D(N, g)` prices one table of `g`
/// keys; ours of twice the rows misses the L2 at any group count past the bounded tables'
/// (H100, 2026-11-23: 2^27 rows took 7 ms at 2^16 groups, 20 ms at 2^22).
fn hash_ids(n: f64, g: f64, k: f64, profile: &Profile) -> f64 {
    let pass = n * (k + 4.0) / profile.b_g;
    let attempts = hash_table_attempts(n as u64, g as u64);
    if attempts.is_empty() {
        return pass;
    }
    let levels = profile.memory_levels();
    let insert = |slots: u64| {
        pass + n * (k + 4.0) * profile.random_penalty
            / memory_level_bandwidth(slots as f64 * (k + 4.0), profile.b_g, &levels)
    };
    pass + attempts.into_iter().map(insert).sum::<f64>()
}

pub fn model_name(method: GroupIdMethod) -> &'static str {
    match method {
        GroupIdMethod::Hash => "aggregate.hash",
        GroupIdMethod::Sort => "aggregate.sort",
        GroupIdMethod::Partition => "aggregate.partition",
    }
}

/// The model's estimate; infinite for a method the profile has no coefficients for (never chosen).
pub fn gpu_seconds(shape: &AggregateShape, method: GroupIdMethod, profile: &Profile) -> f64 {
    let c = profile.coefficients(model_name(method));
    if c.is_empty() {
        return f64::INFINITY;
    }
    dot(&shape.gpu_features(method, profile), &c)
}

pub fn cpu_seconds(shape: &AggregateShape, profile: &Profile) -> f64 {
    dot(&shape.cpu_features(), &profile.coefficients("aggregate.cpu"))
}

/// The group-by methods' estimates and the cheaper.
pub type AggregateChoice = super::Choice<GroupIdMethod>;
/// What the model said of one aggregate at plan time.
pub type AggregateEstimate = super::Estimate<AggregateShape, GroupIdMethod>;

impl AggregateEstimate {
    /// The group-id method for the next chunks, from a chunk of `rows` rows found to hold
    /// `groups` groups: the model's choice for that shape under the plan's profile.
    pub fn choose_for_observed(&self, rows: u64, groups: u64) -> GroupIdMethod {
        let observed = AggregateShape { rows: rows as f64, groups: groups.max(1) as f64, chunks: 1.0, ..self.shape };
        choose(&observed, &self.profile).best
    }
}

pub fn choose(shape: &AggregateShape, profile: &Profile) -> AggregateChoice {
    let estimates = [GroupIdMethod::Hash, GroupIdMethod::Sort, GroupIdMethod::Partition]
        .iter()
        .map(|&m| (m, gpu_seconds(shape, m, profile)))
        .collect();
    AggregateChoice::cheapest(estimates, GroupIdMethod::Hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(rows: f64, groups: f64) -> AggregateShape {
        AggregateShape { rows, groups, key_bytes: 4.0, value_bytes: 4.0, accumulators: 1.0, chunks: 1.0 }
    }

    /// Few groups aggregate in shared memory (no update term); many groups pay random updates,
    /// and group ids cost more once the table leaves the L1 share and then the L2.
    #[test]
    fn hash_terms_grow_with_the_groups() {
        let p = Profile::h100();
        let f = |g: f64| shape(1e8, g).gpu_features(GroupIdMethod::Hash, &p);
        let (few, mid, many) = (f(16.0), f(1e5), f(1e8));
        assert!((few[2] - (4e8 + 16.0 * 12.0) / p.b_g).abs() < 1e-12, "{few:?}");
        assert!(mid[2] > few[2] && many[2] > mid[2]);
        assert!(few[1] < mid[1] && mid[1] < many[1], "{few:?} {mid:?} {many:?}");
        // Sort ids do not depend on the groups.
        let s = |g: f64| shape(1e8, g).gpu_features(GroupIdMethod::Sort, &p)[1];
        assert_eq!(s(16.0), s(1e8));
    }

    /// Hash ids by hand at 2^27 rows of 4-byte keys: up to 4096 groups one pass (read the keys,
    /// write the ids); 2^22 groups overflow the 2^16- and 2^20-slot tables (both in the L2) and
    /// go to one of 2^28 slots (2 GiB: device memory), after the one-pass kernel's failed try.
    #[test]
    fn hash_ids_price_every_table_tried() {
        let p = Profile::h100();
        let n = (1u64 << 27) as f64;
        let ids = |g: f64| AggregateShape { key_bytes: 4.0, ..shape(n, g) }.gpu_features(GroupIdMethod::Hash, &p)[1];
        let pass = n * 8.0 / p.b_g;
        assert!((ids(4096.0) - pass).abs() < 1e-15);
        let insert = n * 8.0 * p.random_penalty;
        let expected = 4.0 * pass + insert / (3.0 * p.b_g) + insert / (3.0 * p.b_g) + insert / p.b_g;
        assert!((ids((1u64 << 22) as f64) - expected).abs() < 1e-12, "{} {expected}", ids((1u64 << 22) as f64));
        // 40960 groups fit the first table (5/8 of 2^16 slots); one more needs the second.
        assert!(ids(40_960.0) < ids(40_961.0));
    }

    /// Partition ids by hand: 2^20 rows take 9 partition bits (two passes); 4-byte keys and
    /// values move 4 + 2 * 12 bytes a row per pass, numbering 24 bytes a row; the aggregation
    /// never pays random updates.
    #[test]
    fn partition_terms_count_the_passes() {
        let p = Profile::h100();
        let n = (1u64 << 20) as f64;
        let f = shape(n, 1e6).gpu_features(GroupIdMethod::Partition, &p);
        assert!((f[1] - n * (2.0 * 28.0 + 24.0) / p.b_g).abs() < 1e-15, "{f:?}");
        assert!((f[2] - (n * 4.0 + 1e6 * 12.0) / p.b_g).abs() < 1e-15, "{f:?}");
        let hash = shape(n, 1e6).gpu_features(GroupIdMethod::Hash, &p);
        assert!(hash[2] > f[2], "hash pays random updates at 10^6 groups: {hash:?}");
    }

    #[test]
    fn the_cheaper_method_is_chosen() {
        let mut p = Profile::h100();
        p.coefficients.insert("aggregate.hash".into(), vec![0.0, 1.0, 1.0]);
        p.coefficients.insert("aggregate.sort".into(), vec![0.0, 1.0, 1.0]);
        let c = choose(&shape(1e8, 16.0), &p);
        assert_eq!(c.best, GroupIdMethod::Hash);
        assert!(c.describe().contains("sort"), "{}", c.describe());
    }
}
