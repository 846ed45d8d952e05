//! Join costs: each GPU algorithm's phases priced with Wu et al.'s byte counts, the CPU's
//! `HashJoinExec`, and the choice among them.
//!
//! Every GPU model has four features, in seconds at the profile's bandwidths: the number of
//! launch groups (one per build and per probe chunk), the transformation, the match and the
//! materialisation. PHJ has a fifth, the partitions it handles in all (every build and every
//! probe chunk is partitioned on the build's bits, and each partition's offsets and work units
//! are made for it). Its time is the dot product with the calibrated coefficients: a
//! coefficient of 1 on a bandwidth term means that phase runs at its floor.

use super::dot;
use super::paper::{memory_level_bandwidth, radix_passes};
use super::profile::Profile;
use crate::join::JoinAlgorithm;

/// The sizes a join's cost depends on. Byte widths per row are of the uploaded columns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JoinShape {
    /// Build (left) rows per GPU build, and probe rows in all.
    pub build_rows: f64,
    pub probe_rows: f64,
    /// Output rows (matched pairs for inner joins).
    pub output_rows: f64,
    /// Bytes of the key word the GPU hashes, partitions or sorts (4 or 8).
    pub key_bytes: f64,
    /// Bytes per row of the build and probe columns the output takes.
    pub build_payload_bytes: f64,
    pub probe_payload_bytes: f64,
    /// Output columns in all (for the CPU's materialisation).
    pub output_columns: f64,
    /// Builds (one per partition of a partitioned join) and probe chunks.
    pub builds: f64,
    pub probe_chunks: f64,
}

impl JoinShape {
    /// The same join with `rows` build rows per build (what a build knows when it starts).
    pub fn with_build_rows(&self, rows: f64) -> JoinShape {
        JoinShape { build_rows: rows.max(1.0), ..*self }
    }
}

/// What the model said of one join at plan time.
pub type JoinEstimate = super::Estimate<JoinShape, JoinAlgorithm>;

impl JoinEstimate {
    /// The algorithm for a build found to hold `rows` rows at run time: the model's choice among
    /// `candidates` for the planned shape with that build, under the plan's profile.
    pub fn choose_for_build(&self, rows: usize, candidates: &[JoinAlgorithm]) -> JoinAlgorithm {
        choose(&self.shape.with_build_rows(rows as f64), candidates, &self.profile).best
    }
}
/// The join algorithms' estimates and the cheapest.
pub type JoinChoice = super::Choice<JoinAlgorithm>;

impl JoinShape {
    /// The features of `algorithm` on this shape, on `profile`'s device.
    pub fn gpu_features(&self, algorithm: JoinAlgorithm, profile: &Profile) -> Vec<f64> {
        let b_g = profile.b_g;
        let levels = profile.memory_levels();
        let random = |bytes: f64, footprint: f64| {
            bytes * profile.random_penalty / memory_level_bandwidth(footprint, b_g, &levels)
        };
        let seq = |bytes: f64| bytes / b_g;
        let (nr, ns, m, k) = (self.build_rows, self.probe_rows, self.output_rows, self.key_bytes);
        let (wr, ws) = (self.build_payload_bytes, self.probe_payload_bytes);
        let launches = self.builds + self.probe_chunks;
        // Payload gathers at row ids: random on the build side; the probe side, sequential for
        // the order-keeping NPJ, random after partitioning or sorting.
        let gather_random = |w: f64, rows: f64| if w > 0.0 { random(m * w.max(4.0), rows * w) } else { 0.0 };
        let writes = seq(m * (wr + ws));
        match algorithm {
            JoinAlgorithm::Npj => {
                // A table of 2 slots per build row, (key, row id, count) entries.
                let entry = k + 8.0;
                let table = 2.0 * nr * entry;
                let build = seq(nr * k) + random(nr * entry, table);
                let probe = seq(ns * k) + random(ns * entry, table) + seq(m * 8.0);
                let mat = gather_random(wr, nr) + seq(m * ws) + writes;
                vec![launches, build, probe, mat]
            }
            JoinAlgorithm::PhjGfur | JoinAlgorithm::PhjGftr => {
                // Two 8-bit partitioning passes (one when the build side is small), each reading
                // and writing the tuples, after a histogram read.
                let passes = if nr < 65_536.0 { 1.0 } else { 2.0 };
                let tuple = k + 4.0;
                let (tr, ts) =
                    if algorithm == JoinAlgorithm::PhjGftr { (tuple + wr, tuple + ws) } else { (tuple, tuple) };
                let transform = seq((nr * tr + ns * ts) * (2.0 * passes + 1.0));
                let matching = seq((nr + ns) * tuple) + seq(m * 8.0);
                let mat = if algorithm == JoinAlgorithm::PhjGftr {
                    seq(3.0 * m * (wr + ws))
                } else {
                    gather_random(wr, nr) + gather_random(ws, ns) + writes
                };
                // A 2^27-row build takes 2^16 partitions in each of 64 probe chunks of 2^22
                // rows: PHJ ran 2x its bandwidth terms there (H100 sweep, seed 41), not at 2^24.
                let partitions = launches * 2f64.powi(crate::join::phj::partition_bits(nr as u64) as i32);
                vec![launches, transform, matching, mat, partitions]
            }
            JoinAlgorithm::SmjMultiGpu => {
                // Each device joins its share of both sides and of the output with smj_gftr, side
                // by side; the exchange splits both sides on the home device (an 8-bit radix
                // pass over (digit, row) pairs, a gather of the rows) and sends all but the home
                // device's share out over its peer link, whose output comes back the same way.
                let g = (profile.devices.max(1)) as f64;
                let share = JoinShape { build_rows: nr / g, probe_rows: ns / g, output_rows: m / g, ..*self };
                let mut f = share.gpu_features(JoinAlgorithm::SmjGftr, profile);
                let (row_r, row_s) = (k + wr, k + ws);
                let split = seq((nr + ns) * 8.0 * 3.0 + 2.0 * (nr * row_r + ns * row_s));
                let away = (g - 1.0) / g;
                let link = away * (nr * row_r + ns * row_s + m * (wr + ws)) / profile.peer_copy_bandwidth();
                f.push(if g > 1.0 { split + link } else { 0.0 });
                f
            }
            JoinAlgorithm::SmjGfur | JoinAlgorithm::SmjGftr => {
                // An LSD radix sort over every bit of the key word, then a merge path.
                let passes = radix_passes(2f64.powf(8.0 * k));
                let tuple = k + 4.0;
                let (tr, ts) =
                    if algorithm == JoinAlgorithm::SmjGftr { (tuple + wr, tuple + ws) } else { (tuple, tuple) };
                let transform = seq((nr * tr + ns * ts) * (2.0 * passes + 1.0));
                let matching = seq(2.0 * (nr + ns) * tuple) + seq(m * 8.0);
                let mat = if algorithm == JoinAlgorithm::SmjGftr {
                    seq(3.0 * m * (wr + ws))
                } else {
                    gather_random(wr, nr) + gather_random(ws, ns) + writes
                };
                vec![launches, transform, matching, mat]
            }
        }
    }

    /// The CPU join's features: calls, build rows, probe rows, probe rows that miss the cache
    /// (in proportion to how much of the build's table exceeds a 32 MiB last-level cache), and
    /// output values.
    pub fn cpu_features(&self) -> [f64; 5] {
        let table = self.build_rows * self.builds * (self.key_bytes + 16.0);
        let miss = (table / (32.0 * 1024.0 * 1024.0)).min(1.0);
        [
            1.0,
            self.build_rows * self.builds,
            self.probe_rows,
            self.probe_rows * miss,
            self.output_rows * self.output_columns,
        ]
    }
}

/// The model's name of a GPU join algorithm's coefficients.
pub fn model_name(a: JoinAlgorithm) -> String {
    format!("join.{}", a.name())
}

/// Estimated seconds of `algorithm` on device-resident data.
pub fn gpu_seconds(shape: &JoinShape, algorithm: JoinAlgorithm, profile: &Profile) -> f64 {
    dot(&shape.gpu_features(algorithm, profile), &profile.coefficients(&model_name(algorithm)))
}

/// Estimated seconds of DataFusion's hash join on this host's cores.
pub fn cpu_seconds(shape: &JoinShape, profile: &Profile) -> f64 {
    dot(&shape.cpu_features(), &profile.coefficients("join.cpu"))
}

/// Estimated seconds of DataFusion's hash repartition of `rows` rows of `row_bytes` bytes over
/// this host's cores: thread time per row plus per byte, spread over the profile's
/// `cpu_threads`.
pub fn repartition_seconds(rows: f64, row_bytes: f64, profile: &Profile) -> f64 {
    let c = profile.coefficients("repartition.cpu");
    let per_row = c.first().copied().unwrap_or(0.0) + c.get(1).copied().unwrap_or(0.0) * row_bytes;
    rows * per_row / profile.cpu_threads.max(1) as f64
}

/// The cheapest of `candidates` by the model; the multi-GPU join only when the profile's set
/// holds several devices or nothing else is a candidate (`gpu.join.algorithm = smj_multi_gpu`,
/// which is `smj_gftr` on one device).
pub fn choose(shape: &JoinShape, candidates: &[JoinAlgorithm], profile: &Profile) -> JoinChoice {
    let usable = |a: &&JoinAlgorithm| !a.multi_gpu() || profile.devices > 1;
    let only_multi = !candidates.iter().any(|a| usable(&a));
    let estimates =
        candidates.iter().filter(|a| only_multi || usable(a)).map(|&a| (a, gpu_seconds(shape, a, profile))).collect();
    JoinChoice::cheapest(estimates, JoinAlgorithm::Npj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multi-GPU join is a candidate of `auto` only with several devices, and stays the
    /// choice when it is the only one.
    #[test]
    fn the_multi_gpu_join_is_chosen_only_with_several_devices_or_alone() {
        let s = shape(1e8, 1e8, 1.0, 8.0);
        let one = Profile::h200();
        assert!(!choose(&s, &JoinAlgorithm::EVERY, &one).estimates.iter().any(|(a, _)| a.multi_gpu()));
        assert_eq!(choose(&s, &[JoinAlgorithm::SmjMultiGpu], &one).best, JoinAlgorithm::SmjMultiGpu);
        let two = Profile::h200().for_devices(2);
        assert!(choose(&s, &JoinAlgorithm::EVERY, &two).estimates.iter().any(|(a, _)| a.multi_gpu()));
        // On two devices its estimate is below smj_gftr's on one: each device sorts half.
        let multi = gpu_seconds(&s, JoinAlgorithm::SmjMultiGpu, &Profile { peer_bandwidth: 390e9, ..two });
        assert!(multi < gpu_seconds(&s, JoinAlgorithm::SmjGftr, &one), "{multi}");
    }

    fn shape(nr: f64, ns: f64, mr: f64, payload_bytes: f64) -> JoinShape {
        JoinShape {
            build_rows: nr,
            probe_rows: ns,
            output_rows: mr * ns,
            key_bytes: 4.0,
            build_payload_bytes: payload_bytes,
            probe_payload_bytes: payload_bytes,
            output_columns: 1.0 + 2.0 * payload_bytes / 4.0,
            builds: 1.0,
            probe_chunks: 1.0,
        }
    }

    /// With every coefficient at 1 (each phase at its floor), the features reproduce Wu et al.'s
    /// byte counts: GFTR's transformation moves the payloads with the keys, GFUR's
    /// materialisation gathers them at random.
    #[test]
    fn features_follow_the_byte_counts() {
        let p = Profile::h100();
        let s = shape(1e8, 2e8, 1.0, 16.0);
        let ur = s.gpu_features(JoinAlgorithm::PhjGfur, &p);
        let tr = s.gpu_features(JoinAlgorithm::PhjGftr, &p);
        // Transformation: (n_r + n_s) (k + 4) 5 bytes against (n_r + n_s)(k + 4 + 16) 5 bytes.
        assert!((ur[1] * p.b_g - 3e8 * 8.0 * 5.0).abs() < 1.0);
        assert!((tr[1] * p.b_g - 3e8 * 24.0 * 5.0).abs() < 1.0);
        assert!(tr[3] < ur[3] / 5.0, "clustered gathers are far cheaper: {tr:?} {ur:?}");
        assert_eq!(ur[0], 2.0);
    }

    /// PHJ's fifth feature counts the partitions of every build and probe chunk: a 2^27-row
    /// build takes 16 bits, so one build and 64 probe chunks make 65 x 2^16; NPJ has no such term.
    #[test]
    fn phj_counts_the_partitions_of_every_chunk() {
        let p = Profile::h100();
        let s = JoinShape { probe_chunks: 64.0, ..shape(2f64.powi(27), 2f64.powi(28), 1.0, 4.0) };
        assert_eq!(s.gpu_features(JoinAlgorithm::PhjGfur, &p)[4], 65.0 * 65536.0);
        assert_eq!(s.gpu_features(JoinAlgorithm::Npj, &p).len(), 4);
        let small = shape(2048.0, 1e6, 1.0, 4.0);
        assert_eq!(small.gpu_features(JoinAlgorithm::PhjGftr, &p)[4], 2.0);
    }

    /// The exec's run-time choice goes through the plan's estimate: the model's choice for the
    /// planned shape with the build's real rows, under the profile the plan was priced with.
    #[test]
    fn the_estimate_chooses_again_for_the_real_build() {
        let p = Profile::h100();
        let planned = shape(1e8, 2e8, 1.0, 16.0);
        let choice = choose(&planned, &JoinAlgorithm::ALL, &p);
        let verdict = super::super::Verdict {
            gpu_compute: 0.0,
            upload: 0.0,
            download: 0.0,
            cpu: 0.0,
            cpu_download: 0.0,
            cpu_exchange: 0.0,
            min_speedup: 1.0,
        };
        let e = JoinEstimate {
            shape: planned,
            choice,
            verdict,
            bounded: false,
            notes: Vec::new(),
            profile: std::sync::Arc::new(p.clone()),
        };
        for rows in [1_000usize, 1 << 20, 100_000_000] {
            let want = choose(&planned.with_build_rows(rows as f64), &JoinAlgorithm::ALL, &p).best;
            assert_eq!(e.choose_for_build(rows, &JoinAlgorithm::ALL), want, "{rows} build rows");
        }
        let only = [JoinAlgorithm::PhjGfur];
        assert_eq!(e.choose_for_build(1_000, &only), JoinAlgorithm::PhjGfur, "only the candidates are chosen from");
    }

    /// With equal coefficients the model takes GFTR for many payload bytes at a high match ratio
    /// and GFUR at a low one, as Wu et al.'s §4.1.4 does.
    #[test]
    fn gftr_or_gfur_by_match_ratio() {
        let mut p = Profile::h100();
        for a in JoinAlgorithm::ALL {
            p.coefficients.insert(model_name(a), vec![0.0, 1.0, 1.0, 1.0]);
        }
        let both = [JoinAlgorithm::PhjGfur, JoinAlgorithm::PhjGftr];
        assert_eq!(choose(&shape(1e8, 1e8, 1.0, 16.0), &both, &p).best, JoinAlgorithm::PhjGftr);
        assert_eq!(choose(&shape(1e8, 1e8, 0.02, 16.0), &both, &p).best, JoinAlgorithm::PhjGfur);
        let c = choose(&shape(1e8, 1e8, 1.0, 16.0), &JoinAlgorithm::ALL, &p);
        assert_eq!(c.estimates.len(), 5);
        assert!(c.describe().starts_with("npj "), "{}", c.describe());
    }
}
