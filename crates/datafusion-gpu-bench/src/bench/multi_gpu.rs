//! The multi-GPU join benchmark (`datafusion-gpu bench multi-gpu`): Maltenberger et al.'s
//! workload B, R and S of 2^k rows each (8-byte keys and 8-byte payloads; R's keys unique and
//! shuffled, S's drawn uniformly from R's, so every S row has one match), joined by
//! `smj_multi_gpu` over the first g devices of `--ordinals` for each g of `--gpus` (g = 1 is
//! the single-GPU `smj_gftr`). Each device starts with its 1/g of both relations, uploaded
//! from host memory; the join's phases are timed on the devices (synchronised per phase): the
//! build's split and all-to-all exchange, its sort, the probe's exchange, sort, match and
//! materialisation of both payloads on the devices (counted there, not copied to the host).
//! The copy bandwidth between every pair of devices is measured first.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::JoinType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use datafusion_gpu::columns::DeviceBatch;
use datafusion_gpu::config::{DevicesSetting, GpuConfig};
use datafusion_gpu::device::{Gpu, peer};
use datafusion_gpu::error::{Result, gpu_error};
use datafusion_gpu::join::keys::KeyPlan;
use datafusion_gpu::join::multi_gpu::SpreadBuild;
use datafusion_gpu::join::{JoinAlgorithm, JoinBuild, JoinSpec, OutputColumn, PhaseTimes};

/// The benchmark's options, also its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct MultiGpuBenchOptions {
    /// log2 of |R| = |S|, one or more.
    #[arg(long, value_delimiter = ',', default_value = "26,28,30")]
    pub log_rows: Vec<u32>,
    /// Device counts to join on (the first g of --ordinals).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub gpus: Vec<usize>,
    /// The devices, in order ('0,0,0,0' for logical devices of one GPU); empty: every GPU.
    #[arg(long, default_value = "")]
    pub ordinals: String,
    /// Rows per output batch of each device.
    #[arg(long, default_value_t = 1 << 26)]
    pub window_rows: u64,
    /// Timed runs after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// One measured (size, device count).
#[derive(Debug, Clone, serde::Serialize)]
pub struct MultiGpuRow {
    pub log_rows: u32,
    pub devices: usize,
    /// Seconds (medians of the runs): the upload of each device's 1/g of R and S (devices side by
    /// side), the build (split and exchange, then the sort), the probe (exchange, sort, match,
    /// materialisation), and the join (build + probe).
    pub upload: f64,
    pub build_exchange: f64,
    pub build_sort: f64,
    pub probe_exchange: f64,
    pub probe_sort: f64,
    pub probe_match: f64,
    pub probe_materialize: f64,
    pub join: f64,
    /// Build rows on each device after the exchange.
    pub build_rows: Vec<u64>,
    pub output_rows: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MultiGpuReport {
    pub device: String,
    pub labels: Vec<String>,
    /// Copy bandwidth between the devices (row: from, column: to), bytes/s, 256 MiB copies.
    pub peer_bandwidth: Vec<Vec<f64>>,
    pub runs: usize,
    pub rows: Vec<MultiGpuRow>,
}

/// A bijection of u64 (splitmix64's finaliser): distinct row numbers give distinct keys spread
/// over the whole key range.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn schema(side: &str) -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(format!("{side}_key"), DataType::Int64, false),
        Field::new(format!("{side}_payload"), DataType::Int64, false),
    ]))
}

/// R's rows `range` (key mix(i), payload i) and S's (key mix(uniform row of R), payload i),
/// generated in parallel.
fn relation(n: u64, range: std::ops::Range<u64>, probe: bool, seed: u64) -> Result<RecordBatch> {
    const CHUNK: u64 = 1 << 20;
    let chunks: Vec<Vec<i64>> = (range.start..range.end)
        .step_by(CHUNK as usize)
        .collect::<Vec<u64>>()
        .into_par_iter()
        .map(|first| {
            let mut rng = StdRng::seed_from_u64(seed ^ first);
            (first..(first + CHUNK).min(range.end))
                .map(|i| if probe { mix(rng.random_range(0..n)) as i64 } else { mix(i) as i64 })
                .collect()
        })
        .collect();
    let keys: Vec<i64> = chunks.concat();
    let payload: Vec<i64> = range.into_par_iter().map(|i| i as i64).collect();
    RecordBatch::try_new(
        schema(if probe { "s" } else { "r" }),
        vec![Arc::new(Int64Array::from(keys)), Arc::new(Int64Array::from(payload))],
    )
    .map_err(|e| gpu_error(format!("building a relation: {e}")))
}

fn spec(window_rows: u64, algorithm: JoinAlgorithm) -> Result<Arc<JoinSpec>> {
    let out = Arc::new(Schema::new(vec![
        Field::new("r_payload", DataType::Int64, false),
        Field::new("s_payload", DataType::Int64, false),
    ]));
    Ok(Arc::new(JoinSpec {
        join_type: JoinType::Inner,
        keys: KeyPlan::new(&[DataType::Int64], false)?,
        build_keys: vec![0],
        probe_keys: vec![0],
        output: vec![OutputColumn::Build(1), OutputColumn::Probe(1)],
        schema: out,
        algorithm,
        ordered: false,
        null_aware: false,
        filter: None,
        batch_rows: window_rows,
    }))
}

/// Each device's 1/g of both relations (R's and S's rows of its range), uploaded side by side.
fn upload(set: &[Arc<Gpu>], r: &RecordBatch, s: &RecordBatch) -> Result<(Vec<DeviceBatch>, Vec<DeviceBatch>, f64)> {
    let (g, n) = (set.len(), r.num_rows());
    let hosts: Vec<(RecordBatch, RecordBatch)> = (0..g)
        .map(|d| {
            let (at, len) = (d * n / g, (d + 1) * n / g - d * n / g);
            (r.slice(at, len), s.slice(at, len))
        })
        .collect();
    let t = Instant::now();
    let up: Vec<(DeviceBatch, DeviceBatch)> = std::thread::scope(|scope| {
        let handles: Vec<_> = set
            .iter()
            .zip(&hosts)
            .map(|(gpu, (r, s))| {
                scope.spawn(move || -> Result<(DeviceBatch, DeviceBatch)> {
                    let stream = gpu.stream();
                    let r = DeviceBatch::upload_transient(gpu, &stream, r)?;
                    let s = DeviceBatch::upload_transient(gpu, &stream, s)?;
                    stream.synchronize().map_err(|e| gpu_error(format!("uploading: {e}")))?;
                    Ok((r, s))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(gpu_error("an upload thread panicked"))))
            .collect::<Result<Vec<_>>>()
    })?;
    let secs = t.elapsed().as_secs_f64();
    let (r, s) = up.into_iter().unzip();
    Ok((r, s, secs))
}

/// One join of the uploaded relations on `set`; the phase times and the output rows.
fn join_once(
    set: &[Arc<Gpu>],
    r: Vec<DeviceBatch>,
    s: Vec<DeviceBatch>,
    window_rows: u64,
) -> Result<(PhaseTimes, PhaseTimes, f64, Vec<u64>, u64)> {
    let out = AtomicU64::new(0);
    let t = Instant::now();
    if set.len() == 1 {
        let (r, s) = (r.into_iter().next(), s.into_iter().next());
        let (Some(r), Some(s)) = (r, s) else { return Err(gpu_error("no input")) };
        let stream = Arc::clone(r.stream());
        let build = JoinBuild::new(Arc::clone(&set[0]), &stream, spec(window_rows, JoinAlgorithm::SmjGftr)?, r)?;
        let mut probe = PhaseTimes { synchronized: true, ..PhaseTimes::default() };
        build.probe_into(&stream, &s, &mut probe, &mut |b| {
            out.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
            Ok(())
        })?;
        stream.synchronize().map_err(|e| gpu_error(format!("joining: {e}")))?;
        let rows = build.device_rows();
        return Ok((build.times, probe, t.elapsed().as_secs_f64(), rows, out.into_inner()));
    }
    let build = SpreadBuild::new(set, spec(window_rows, JoinAlgorithm::SmjGftr)?, r)?;
    let mut build_times = build.times();
    build_times.exchange += build.exchange;
    let mut probe = PhaseTimes { synchronized: true, ..PhaseTimes::default() };
    build.probe_each(s, &mut probe, &|_, b| {
        out.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
        Ok(())
    })?;
    for g in set {
        g.stream().synchronize().map_err(|e| gpu_error(format!("joining: {e}")))?;
    }
    Ok((build_times, probe, t.elapsed().as_secs_f64(), build.rows.clone(), out.into_inner()))
}

pub(crate) fn med(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The devices of `--ordinals` (empty: every GPU), their labels and the copy bandwidth between
/// every pair (row: from, column to; 256 MiB copies, median of 5), printed to stderr.
pub(crate) fn open_set(ordinals: &str) -> Result<(Vec<Arc<Gpu>>, Vec<String>, Vec<Vec<f64>>)> {
    let ordinals: DevicesSetting = if ordinals.trim().is_empty() {
        DevicesSetting::All
    } else {
        ordinals.parse().map_err(|e| gpu_error(format!("--ordinals: {e}")))?
    };
    let all = Gpu::for_config(&GpuConfig { devices: ordinals, ..GpuConfig::default() })?.device_set();
    let refs: Vec<&Gpu> = all.iter().map(|g| g.as_ref()).collect();
    let peer_bandwidth = peer::bandwidth_matrix(&refs, 256 << 20, 5)?;
    let labels: Vec<String> = all.iter().map(|g| g.label()).collect();
    eprintln!("devices {labels:?}; copy bandwidth GB/s (row from, column to):");
    for (l, row) in labels.iter().zip(&peer_bandwidth) {
        eprintln!("  {l:>4}: {}", row.iter().map(|b| format!("{:7.1}", b / 1e9)).collect::<Vec<_>>().join(" "));
    }
    Ok((all, labels, peer_bandwidth))
}

/// Writes the devices and the copy bandwidth between them, GB/s.
pub(crate) fn write_bandwidths(f: &mut fmt::Formatter<'_>, labels: &[String], matrix: &[Vec<f64>]) -> fmt::Result {
    writeln!(f, "devices {labels:?}; copy bandwidth between them, GB/s (row from, column to):")?;
    for (l, row) in labels.iter().zip(matrix) {
        writeln!(f, "  {l:>4}: {}", row.iter().map(|b| format!("{:7.1}", b / 1e9)).collect::<Vec<_>>().join(" "))?;
    }
    Ok(())
}

/// `secs` against the one-device time `base` of the same size ("-" without one).
pub(crate) fn speedup(base: Option<f64>, secs: f64) -> String {
    base.map_or("-".to_string(), |b| format!("{:.2}x", b / secs.max(1e-9)))
}

pub fn run(o: &MultiGpuBenchOptions) -> Result<MultiGpuReport> {
    let (all, labels, peer_bandwidth) = open_set(&o.ordinals)?;
    let mut rows = Vec::new();
    for &k in &o.log_rows {
        let n = 1u64 << k;
        let t = Instant::now();
        let (r_all, s_all) = (relation(n, 0..n, false, o.seed)?, relation(n, 0..n, true, o.seed ^ 0x5eed)?);
        eprintln!("generated R and S of 2^{k} rows in {:.1} s", t.elapsed().as_secs_f64());
        for &g in &o.gpus {
            if g == 0 || g > all.len() {
                eprintln!("skipping {g} devices: the set has {}", all.len());
                continue;
            }
            let set = &all[..g];
            let mut samples = Vec::new();
            for run in 0..=o.runs {
                let (r, s, up) = upload(set, &r_all, &s_all)?;
                let (b, p, join, build_rows, output) = join_once(set, r, s, o.window_rows)?;
                if output != n {
                    return Err(gpu_error(format!("2^{k} on {g} devices: {output} output rows, expected {n}")));
                }
                eprintln!(
                    "2^{k} x 2^{k} on {g} device(s), run {run}: upload {up:.3} s, join {join:.3} s (build exchange \
                     {:.3} sort {:.3}; probe exchange {:.3} sort {:.3} match {:.3} materialize {:.3}), build rows {build_rows:?}",
                    b.exchange.as_secs_f64(),
                    b.transform.as_secs_f64() + b.keys.as_secs_f64(),
                    p.exchange.as_secs_f64(),
                    p.transform.as_secs_f64() + p.keys.as_secs_f64(),
                    p.matching.as_secs_f64(),
                    p.materialize.as_secs_f64(),
                );
                if run > 0 {
                    samples.push((up, b, p, join, build_rows, output));
                }
            }
            let pick = |f: &dyn Fn(&(f64, PhaseTimes, PhaseTimes, f64, Vec<u64>, u64)) -> f64| {
                med(samples.iter().map(f).collect())
            };
            rows.push(MultiGpuRow {
                log_rows: k,
                devices: g,
                upload: pick(&|x| x.0),
                build_exchange: pick(&|x| x.1.exchange.as_secs_f64()),
                build_sort: pick(&|x| x.1.transform.as_secs_f64() + x.1.keys.as_secs_f64()),
                probe_exchange: pick(&|x| x.2.exchange.as_secs_f64()),
                probe_sort: pick(&|x| x.2.transform.as_secs_f64() + x.2.keys.as_secs_f64()),
                probe_match: pick(&|x| x.2.matching.as_secs_f64()),
                probe_materialize: pick(&|x| x.2.materialize.as_secs_f64()),
                join: pick(&|x| x.3),
                build_rows: samples.last().map(|x| x.4.clone()).unwrap_or_default(),
                output_rows: n,
            });
        }
    }
    Ok(MultiGpuReport { device: all[0].info().name.clone(), labels, peer_bandwidth, runs: o.runs, rows })
}

impl fmt::Display for MultiGpuReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "multi-GPU sort-merge join, workload B (8-byte keys and payloads, |R| = |S|, FK), {}",
            self.device
        )?;
        write_bandwidths(f, &self.labels, &self.peer_bandwidth)?;
        writeln!(
            f,
            "{:>5} {:>4} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "rows",
            "gpus",
            "upload s",
            "b.exch s",
            "b.sort s",
            "p.exch s",
            "p.sort s",
            "match s",
            "mater. s",
            "join s",
            "speedup"
        )?;
        for r in &self.rows {
            let base = self.rows.iter().find(|x| x.log_rows == r.log_rows && x.devices == 1).map(|x| x.join);
            let speedup = speedup(base, r.join);
            writeln!(
                f,
                "{:>5} {:>4} {:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                format!("2^{}", r.log_rows),
                r.devices,
                r.upload,
                r.build_exchange,
                r.build_sort,
                r.probe_exchange,
                r.probe_sort,
                r.probe_match,
                r.probe_materialize,
                r.join,
                speedup
            )?;
        }
        write!(
            f,
            "(medians of {} runs after one warm-up; join = build + probe, inputs already on the devices)",
            self.runs
        )
    }
}
