//! The out-of-core multi-GPU join benchmark (`datafusion-gpu bench chunksets`): Maltenberger et
//! al.'s workload B in host memory (R's keys unique, S's drawn uniformly from R's, 8-byte keys
//! and payloads), joined by the chunkset join (`datafusion_gpu::join::chunksets`) on the first g
//! devices of `--ordinals` for each g of `--gpus`: the sort phase (chunksets up, sorted across
//! the devices, back down), the CPU merge when a relation needed several chunksets, merge-path
//! partitioning and the devices' matching. The inputs are page-locked first (`pin`, not part of
//! the join: the paper allocates its pinned memory before it starts). The matches are counted
//! (every S row must have one), not materialised, as in the paper's workload B.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use datafusion_gpu::device::Gpu;
use datafusion_gpu::error::{Result, gpu_error};
use datafusion_gpu::join::chunksets::{self, ChunksetTimes, HostRelation};

use super::multi_gpu::{med, mix, open_set, speedup, write_bandwidths};

/// The benchmark's options, also its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ChunksetBenchOptions {
    /// log2 of |R| = |S|, one or more.
    #[arg(long, value_delimiter = ',', default_value = "28,30")]
    pub log_rows: Vec<u32>,
    /// Device counts to join on (the first g of --ordinals).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub gpus: Vec<usize>,
    /// The devices, in order ('0,0' for logical devices of one GPU); empty: every GPU.
    #[arg(long, default_value = "")]
    pub ordinals: String,
    /// Rows of a chunk on each device (a chunkset holds g chunks); 0: as many as the devices'
    /// free memory allows. Smaller chunks force several chunksets and the CPU merge.
    #[arg(long, default_value_t = 0)]
    pub chunk_rows: u64,
    /// Timed runs of each size after one warm-up join of 2^20 rows per device count.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// One measured (size, device count): medians of the runs, seconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChunksetRow {
    pub log_rows: u32,
    pub devices: usize,
    pub chunk_rows: u64,
    pub chunksets: (usize, usize),
    /// Page-locking R and S in place (before the join).
    pub pin: f64,
    pub sort: f64,
    /// Of `sort`, the all-to-all exchanges.
    pub exchange: f64,
    pub merge: f64,
    pub partition: f64,
    pub join: f64,
    /// sort + merge + partition + join.
    pub total: f64,
    pub matches: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChunksetReport {
    pub device: String,
    pub labels: Vec<String>,
    /// Copy bandwidth between the devices (row: from, column: to), bytes/s, 256 MiB copies.
    pub peer_bandwidth: Vec<Vec<f64>>,
    pub host_threads: usize,
    pub runs: usize,
    pub rows: Vec<ChunksetRow>,
}

/// Workload B's R and S of `n` rows each, page-locked; the seconds the locking took.
fn relations(gpu: &Gpu, n: u64, seed: u64) -> Result<(HostRelation, HostRelation, f64)> {
    const CHUNK: u64 = 1 << 20;
    let rk: Vec<u64> = (0..n).into_par_iter().map(mix).collect();
    let sk: Vec<u64> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .flat_map_iter(|c| {
            let mut rng = StdRng::seed_from_u64(seed ^ c);
            (c * CHUNK..((c + 1) * CHUNK).min(n)).map(move |_| mix(rng.random_range(0..n)))
        })
        .collect();
    let rv: Vec<u64> = (0..n).into_par_iter().collect();
    let sv: Vec<u64> = (0..n).into_par_iter().collect();
    let t = Instant::now();
    let r = HostRelation::new(gpu, rk, rv)?;
    let s = HostRelation::new(gpu, sk, sv)?;
    if !(r.keys.is_pinned() && s.keys.is_pinned()) {
        eprintln!("warning: the host refused to page-lock the relations: copies run at the pageable rate");
    }
    Ok((r, s, t.elapsed().as_secs_f64()))
}

/// One join of workload B's 2^k rows on `set`; the pinning time, phase times, matches and the
/// chunk rows the join used.
fn join_once(set: &[Arc<Gpu>], k: u32, chunk_rows: Option<u64>, seed: u64) -> Result<(f64, ChunksetTimes, u64, u64)> {
    let n = 1u64 << k;
    let (r, s, pin) = relations(&set[0], n, seed)?;
    let out = chunksets::join(set, r, s, chunk_rows)?;
    let matches = out.matches.rows();
    if matches != n {
        return Err(gpu_error(format!("2^{k} on {} devices: {matches} matches, expected {n}", set.len())));
    }
    Ok((pin, out.times, matches, out.chunk_rows))
}

pub fn run(o: &ChunksetBenchOptions) -> Result<ChunksetReport> {
    let (all, labels, peer_bandwidth) = open_set(&o.ordinals)?;
    let chunk_rows = (o.chunk_rows > 0).then_some(o.chunk_rows);
    let mut rows = Vec::new();
    for &g in &o.gpus {
        if g == 0 || g > all.len() {
            eprintln!("skipping {g} devices: the set has {}", all.len());
            continue;
        }
        let set = &all[..g];
        join_once(set, 20, chunk_rows.map(|c| c.min(1 << 18)), o.seed)?;
        for &k in &o.log_rows {
            let mut samples = Vec::new();
            for run in 0..o.runs.max(1) {
                let (pin, t, matches, chunk) = join_once(set, k, chunk_rows, o.seed ^ run as u64)?;
                eprintln!(
                    "2^{k} on {g} device(s), run {run}: pin {pin:.2} s; {} + {} chunksets; sort {:.3} s (exchange \
                     {:.3}), merge {:.3} s, partition {:.3} s, join {:.3} s; {matches} matches",
                    t.chunksets.0,
                    t.chunksets.1,
                    t.sort.as_secs_f64(),
                    t.exchange.as_secs_f64(),
                    t.merge.as_secs_f64(),
                    t.partition.as_secs_f64(),
                    t.join.as_secs_f64(),
                );
                samples.push((pin, t, matches, chunk));
            }
            let pick = |f: &dyn Fn(&(f64, ChunksetTimes, u64, u64)) -> f64| med(samples.iter().map(f).collect());
            let secs = |d: std::time::Duration| d.as_secs_f64();
            rows.push(ChunksetRow {
                log_rows: k,
                devices: g,
                chunk_rows: samples[0].3,
                chunksets: samples[0].1.chunksets,
                pin: pick(&|x| x.0),
                sort: pick(&|x| secs(x.1.sort)),
                exchange: pick(&|x| secs(x.1.exchange)),
                merge: pick(&|x| secs(x.1.merge)),
                partition: pick(&|x| secs(x.1.partition)),
                join: pick(&|x| secs(x.1.join)),
                total: pick(&|x| secs(x.1.sort) + secs(x.1.merge) + secs(x.1.partition) + secs(x.1.join)),
                matches: samples[0].2,
            });
        }
    }
    Ok(ChunksetReport {
        device: all[0].info().name.clone(),
        labels,
        peer_bandwidth,
        host_threads: rayon::current_num_threads(),
        runs: o.runs.max(1),
        rows,
    })
}

impl fmt::Display for ChunksetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "out-of-core multi-GPU sort-merge join (chunksets), workload B (8-byte keys and payloads in host memory, \
             |R| = |S|, FK), {}, {} host threads",
            self.device, self.host_threads
        )?;
        write_bandwidths(f, &self.labels, &self.peer_bandwidth)?;
        writeln!(
            f,
            "{:>5} {:>4} {:>11} {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>8}",
            "rows",
            "gpus",
            "chunk rows",
            "chunksets",
            "pin s",
            "sort s",
            "exch s",
            "merge s",
            "part s",
            "join s",
            "total s",
            "speedup"
        )?;
        for r in &self.rows {
            let base = self.rows.iter().find(|x| x.log_rows == r.log_rows && x.devices == 1).map(|x| x.total);
            let speedup = speedup(base, r.total);
            writeln!(
                f,
                "{:>5} {:>4} {:>11} {:>9} {:>6.2} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>8}",
                format!("2^{}", r.log_rows),
                r.devices,
                r.chunk_rows,
                format!("{}+{}", r.chunksets.0, r.chunksets.1),
                r.pin,
                r.sort,
                r.exchange,
                r.merge,
                r.partition,
                r.join,
                r.total,
                speedup
            )?;
        }
        write!(
            f,
            "(medians of {} run(s) after a warm-up; total = sort + merge + partition + join, from page-locked host \
             memory to every S row's matches in host memory; pin not included)",
            self.runs
        )
    }
}
