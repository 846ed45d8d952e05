//! `datafusion-gpu bench sweep`: the cost model's benchmark (issue 5). For each point of a sweep
//! of joins (sizes, match ratios, payload columns, skew) and group-bys (sizes, group counts,
//! aggregate columns), it times every GPU algorithm, DataFusion's CPU operator, and the cost
//! model's `auto` choice, and reports whether `auto` chose the fastest option.
//!
//! The data starts in host memory, as in a DataFusion plan whose GPU operator has CPU neighbours:
//! a GPU option's time is the upload of its inputs (in `gpu.batch_rows` chunks, each a first
//! upload of fresh data: host registration is off while the sweep runs), the algorithm on the
//! device (median of the timed runs), and the download of its output (median of as many
//! downloads). The CPU's time is DataFusion's operator on every core (median). `auto` is what the
//! model chooses from the sizes: it runs that option's code, so its time is that option's.
//!
//! With `--calibrate`, the model's coefficients are first fitted to this sweep's measurements
//! (with `doctor`'s bandwidths and a gather pair for the random penalty) and saved as the
//! device's profile; the `auto` column then uses them. A second sweep with another seed, without
//! `--calibrate`, checks the fitted model on data it was not fitted to.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::physical_plan::joins::PartitionMode;
use serde::{Deserialize, Serialize};

use super::aggregate::{self as agg_bench, cpu_group_by, gpu_group_by};
use super::join::{self as join_bench, cpu_join_in, spec};
use super::median;
use datafusion_gpu::aggregate::{GroupByOptions, GroupIdMethod};
use datafusion_gpu::columns::DeviceBatch;
use datafusion_gpu::columns::device::download_columns;
use datafusion_gpu::config::{ByteSize, GpuConfig};
use datafusion_gpu::cost::aggregate::{self as agg_cost, AggregateShape};
use datafusion_gpu::cost::fit::{fit_relative, median_relative_error};
use datafusion_gpu::cost::join::{self as join_cost, JoinShape};
use datafusion_gpu::cost::{Profile, download_seconds, profile, upload_seconds};
use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::error::{CudaResultExt, Result, gpu_error};
use datafusion_gpu::join::JoinAlgorithm;

/// The sweep's options, also its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SweepOptions {
    /// log2 of |S| for the joins.
    #[arg(long, value_delimiter = ',', default_value = "16,19,22,25,28")]
    pub join_sizes: Vec<u32>,
    /// log2 of |S| / |R|: 1 is Wu et al.'s |R| = |S| / 2; larger values give the small builds
    /// and long probes of star and snowflake joins (a dimension table against a fact table),
    /// without which the CPU's build and probe terms cannot be told apart.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub build_shifts: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_value = "1.0,0.5,0.1")]
    pub match_ratios: Vec<f64>,
    /// Int32 payload columns per side.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub payloads: Vec<usize>,
    /// Zipf exponents of the foreign keys (0: uniform; other values: Zipf 1.0).
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    pub skews: Vec<f64>,
    /// log2 of the group-by rows.
    #[arg(long, value_delimiter = ',', default_value = "16,20,24,27")]
    pub agg_sizes: Vec<u32>,
    /// log2 of the group cardinalities (capped at the rows).
    #[arg(long, value_delimiter = ',', default_value = "1,4,10,16,22")]
    pub agg_groups: Vec<u32>,
    /// Int32 columns summed per group.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub agg_columns: Vec<usize>,
    /// Also time DataFusion's partitioned hash join (both sides hash-repartitioned, as it plans
    /// joins of large builds) at every join point, fitted as `join.cpu_partitioned`. Placement
    /// does not use that model: priced with it (and the CPU model refitted with these points),
    /// TPC-H SF10 fell from 1.29x to 1.14x and SSB from 1.44x to 1.26x on an H100
    /// (benches/results/archive/2026-11-24-h100-cpu-join-models/README.md).
    #[arg(long)]
    pub cpu_partitioned: bool,
    /// Fit the model to this sweep and save the device profile before choosing.
    #[arg(long)]
    pub calibrate: bool,
    /// Folder of the device profile ('' for the user cache folder).
    #[arg(long, default_value = "")]
    pub profile_dir: String,
    /// Rows per uploaded chunk (gpu.batch_rows).
    #[arg(long, default_value_t = 1 << 22)]
    pub batch_rows: usize,
    /// Write the points as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Measure nothing: take the points of an earlier sweep's JSON (to fit the model to one
    /// sweep and check it on another, or to re-check a sweep with a new profile).
    #[arg(long)]
    pub from_json: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub runs: super::BenchRuns,
}

/// One option at one point: its name, end-to-end seconds, and its model's features and
/// measured time (the device time for a GPU algorithm).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OptionTiming {
    pub name: String,
    pub seconds: f64,
    pub model: String,
    pub features: Vec<f64>,
    pub model_seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub kind: String,
    pub label: String,
    /// Upload of the inputs and download of the output, measured, with their features.
    pub upload: f64,
    pub upload_features: Vec<f64>,
    pub download: f64,
    pub download_bytes: f64,
    pub options: Vec<OptionTiming>,
    /// The model's choice and estimate of every option (filled by [`choose`]).
    pub auto: String,
    pub estimates: Vec<(String, f64)>,
}

impl Point {
    /// The fastest of the options the model chooses among (all of them before it has chosen).
    fn fastest(&self) -> Option<&OptionTiming> {
        let candidate = |o: &&OptionTiming| self.estimates.is_empty() || self.estimates.iter().any(|e| e.0 == o.name);
        self.options.iter().filter(candidate).min_by(|a, b| a.seconds.total_cmp(&b.seconds))
    }

    fn auto_seconds(&self) -> f64 {
        self.options.iter().find(|o| o.name == self.auto).map(|o| o.seconds).unwrap_or(f64::INFINITY)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    pub device: String,
    pub profile_source: String,
    pub cpu_threads: usize,
    pub runs: usize,
    pub cpu_runs: usize,
    pub seed: u64,
    pub points: Vec<Point>,
    /// Fitted models with their median relative error, when calibrating.
    pub fits: Vec<(String, Vec<f64>, f64)>,
}

/// Uploads `batch` in chunks of `batch_rows` rows: (device chunks, seconds).
fn upload_chunks(gpu: &Arc<Gpu>, batch: &RecordBatch, batch_rows: usize) -> Result<(Vec<DeviceBatch>, f64)> {
    let stream = gpu.stream();
    let t = Instant::now();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let len = batch_rows.max(1).min(batch.num_rows() - i);
        out.push(DeviceBatch::upload(gpu, &stream, &batch.slice(i, len))?);
        i += len;
        if i >= batch.num_rows() {
            break;
        }
    }
    stream.synchronize().gpu("synchronising")?;
    Ok((out, t.elapsed().as_secs_f64()))
}

/// [`upload_chunks`] `runs` times (at least once): the last upload's chunks and the median time
/// (one upload is too noisy a sample next to options timed as medians).
fn upload_median(
    gpu: &Arc<Gpu>,
    batch: &RecordBatch,
    batch_rows: usize,
    runs: usize,
) -> Result<(Vec<DeviceBatch>, f64)> {
    let mut times = Vec::new();
    let mut last = Vec::new();
    for _ in 0..runs.max(1) {
        // The previous upload's chunks go before the next upload, not after: one copy on the
        // device at a time.
        drop(std::mem::take(&mut last));
        let (chunks, seconds) = upload_chunks(gpu, batch, batch_rows)?;
        times.push((seconds, ()));
        last = chunks;
    }
    Ok((last, median(times).0))
}

fn batch_bytes(b: &RecordBatch) -> f64 {
    b.columns().iter().map(|c| c.get_buffer_memory_size() as f64).sum()
}

async fn join_point(
    gpu: &Arc<Gpu>,
    profile: &Profile,
    o: &SweepOptions,
    log_s: u32,
    shift: u32,
    c: join_bench::Config,
    threads: usize,
) -> Result<Point> {
    let log_r = log_s.saturating_sub(shift.max(1)).max(4);
    let (r_rows, s_rows) = (1u64 << log_r, 1u64 << log_s);
    // Wu et al.'s shape keeps the seeds (and data) of earlier sweeps.
    let half = log_r + 1 == log_s;
    let seed = o.runs.seed ^ log_s as u64 ^ if half { 0 } else { (log_r as u64) << 8 };
    let (r, s, matches) = join_bench::relations(c, r_rows, s_rows, seed)?;
    let builds = if half { String::new() } else { format!(" |R|=2^{log_r}") };
    let label = format!(
        "join |S|=2^{log_s}{builds} mr={} pay={} {}",
        c.match_ratio,
        c.payloads,
        if c.skew > 0.0 { "zipf1" } else { "uniform" }
    );
    eprintln!("bench sweep: {label}");
    // Upload: R whole (a build is one batch), S in chunks, as the exec does.
    let (r_dev, up_r) = upload_median(gpu, &r, usize::MAX, o.runs.runs)?;
    let (s_dev, up_s) = upload_median(gpu, &s, o.batch_rows, o.runs.runs)?;
    let r_dev = r_dev.into_iter().next().ok_or_else(|| gpu_error("no build batch"))?;
    let upload = up_r + up_s;
    let up_bytes = batch_bytes(&r) + batch_bytes(&s);
    let up_batches = 1.0 + s_dev.len() as f64;
    let shape = JoinShape {
        build_rows: r_rows as f64,
        probe_rows: s_rows as f64,
        output_rows: matches as f64,
        key_bytes: c.key_bytes as f64,
        build_payload_bytes: (c.key_bytes + 4 * c.payloads) as f64,
        probe_payload_bytes: (4 * c.payloads) as f64,
        output_columns: (1 + 2 * c.payloads) as f64,
        builds: 1.0,
        probe_chunks: s_dev.len() as f64,
    };
    let out_bytes = matches as f64 * (c.key_bytes + 8 * c.payloads) as f64;
    let mut options = Vec::new();
    let mut download = None;
    for a in JoinAlgorithm::ALL {
        let spec = Arc::new(spec(c, &r, &s, a)?);
        let (_, _, rows, kept) = join_bench::gpu_join(gpu, &spec, &r_dev, &s_dev, download.is_none(), false)?;
        if rows != matches {
            return Err(gpu_error(format!("{a} joined {rows} rows; the data has {matches} matches")));
        }
        if download.is_none() {
            // The median of several downloads of the output (the first one of a process also
            // grows the pinned staging pool).
            let mut runs = Vec::new();
            for _ in 0..o.runs.runs.max(1) + 1 {
                let t = Instant::now();
                for b in &kept {
                    b.download()?;
                }
                runs.push((t.elapsed().as_secs_f64(), ()));
            }
            download = Some(median(runs).0);
        }
        drop(kept);
        let mut runs = Vec::new();
        for _ in 0..o.runs.runs.max(1) {
            runs.push((join_bench::gpu_join(gpu, &spec, &r_dev, &s_dev, false, false)?.0, ()));
        }
        let compute = median(runs).0;
        options.push(OptionTiming {
            name: a.name().into(),
            seconds: compute,
            model: join_cost::model_name(a),
            features: shape.gpu_features(a, profile),
            model_seconds: compute,
        });
    }
    let download = download.unwrap_or(0.0);
    for opt in &mut options {
        opt.seconds += upload + download;
    }
    drop((r_dev, s_dev));
    // DataFusion's CollectLeft join, and with `--cpu-partitioned` its partitioned one.
    let modes = [
        (PartitionMode::CollectLeft, "cpu", "join.cpu"),
        (PartitionMode::Partitioned, "cpu_partitioned", "join.cpu_partitioned"),
    ];
    let cpu_modes = if o.runs.cpu_runs == 0 {
        0
    } else if o.cpu_partitioned {
        2
    } else {
        1
    };
    for &(mode, name, model) in &modes[..cpu_modes] {
        let (_, rows) = cpu_join_in(&r, &s, threads, mode).await?;
        if rows != matches {
            return Err(gpu_error(format!("the CPU ({mode:?}) joined {rows} rows; the data has {matches} matches")));
        }
        let mut runs = Vec::new();
        for _ in 0..o.runs.cpu_runs {
            runs.push((cpu_join_in(&r, &s, threads, mode).await?.0, ()));
        }
        let seconds = median(runs).0;
        options.push(OptionTiming {
            name: name.into(),
            seconds,
            model: model.into(),
            features: shape.cpu_features().to_vec(),
            model_seconds: seconds,
        });
    }
    Ok(Point {
        kind: "join".into(),
        label,
        upload,
        upload_features: vec![up_bytes, up_batches],
        download,
        download_bytes: out_bytes,
        options,
        auto: String::new(),
        estimates: Vec::new(),
    })
}

async fn aggregate_point(
    gpu: &Arc<Gpu>,
    profile: &Profile,
    o: &SweepOptions,
    log_rows: u32,
    c: agg_bench::Config,
    threads: usize,
) -> Result<Point> {
    let rows = 1u64 << log_rows;
    let (host, groups) = agg_bench::table(c, rows, o.runs.seed ^ (log_rows as u64) << 8)?;
    let label = format!("group-by rows=2^{log_rows} groups=2^{} aggs={}", c.log_groups, c.aggs);
    eprintln!("bench sweep: {label}");
    let (chunks_dev, upload) = upload_median(gpu, &host, o.batch_rows, o.runs.runs)?;
    let up_bytes = batch_bytes(&host);
    let shape = AggregateShape {
        rows: rows as f64,
        groups: groups as f64,
        key_bytes: c.key_bytes as f64,
        value_bytes: 4.0 * c.aggs as f64,
        accumulators: c.aggs as f64,
        chunks: chunks_dev.len() as f64,
    };
    // The group-by runs over one device batch of all rows (the exec merges chunk states; the
    // sweep measures the algorithm once over the whole input).
    let dev = if chunks_dev.len() == 1 {
        chunks_dev.into_iter().next().ok_or_else(|| gpu_error("no chunk"))?
    } else {
        drop(chunks_dev);
        DeviceBatch::upload(gpu, &gpu.stream(), &host)?
    };
    let mut options = Vec::new();
    let mut download = 0.0;
    for method in [GroupIdMethod::Hash, GroupIdMethod::Sort, GroupIdMethod::Partition] {
        let opts = GroupByOptions { method, ..GroupByOptions::default() };
        let keep = method == GroupIdMethod::Hash;
        let (_, _, got, out) = gpu_group_by(gpu, &dev, c.aggs, &opts, keep)?;
        if got != groups {
            return Err(gpu_error(format!("{} found {got} groups; the data has {groups}", method.name())));
        }
        if let Some(out) = out {
            let stream = dev.stream();
            let all: Vec<&datafusion_gpu::columns::DeviceColumn> = out.keys.iter().chain(&out.values).collect();
            let mut runs = Vec::new();
            for _ in 0..o.runs.runs.max(1) + 1 {
                let t = Instant::now();
                download_columns(gpu, stream, &all)?;
                runs.push((t.elapsed().as_secs_f64(), ()));
            }
            download = median(runs).0;
        }
        let mut runs = Vec::new();
        for _ in 0..o.runs.runs.max(1) {
            runs.push((gpu_group_by(gpu, &dev, c.aggs, &opts, false)?.0, ()));
        }
        let compute = median(runs).0;
        options.push(OptionTiming {
            name: method.name().into(),
            seconds: compute,
            model: agg_cost::model_name(method).into(),
            features: shape.gpu_features(method, profile).to_vec(),
            model_seconds: compute,
        });
    }
    for opt in &mut options {
        opt.seconds += upload + download;
    }
    drop(dev);
    if o.runs.cpu_runs > 0 {
        let (_, got) = cpu_group_by(&host, c.aggs, threads).await?;
        if got != groups {
            return Err(gpu_error(format!("the CPU found {got} groups; the data has {groups}")));
        }
        let mut runs = Vec::new();
        for _ in 0..o.runs.cpu_runs {
            runs.push((cpu_group_by(&host, c.aggs, threads).await?.0, ()));
        }
        let seconds = median(runs).0;
        options.push(OptionTiming {
            name: "cpu".into(),
            seconds,
            model: "aggregate.cpu".into(),
            features: shape.cpu_features().to_vec(),
            model_seconds: seconds,
        });
    }
    Ok(Point {
        kind: "aggregate".into(),
        label,
        upload,
        upload_features: vec![up_bytes, shape.chunks],
        download,
        download_bytes: groups as f64 * (c.key_bytes + 8 * c.aggs) as f64,
        options,
        auto: String::new(),
        estimates: Vec::new(),
    })
}

/// Fits every model to the points' measurements: (model, coefficients, median relative error).
pub fn fit(points: &[Point]) -> Vec<(String, Vec<f64>, f64)> {
    let mut by_model: std::collections::BTreeMap<String, Vec<(Vec<f64>, f64)>> = Default::default();
    for p in points {
        for o in &p.options {
            by_model.entry(o.model.clone()).or_default().push((o.features.clone(), o.model_seconds));
        }
        let transfer = by_model.entry("transfer".into()).or_default();
        transfer.push((vec![p.upload_features[0], p.upload_features[1], 0.0], p.upload));
        if p.download > 0.0 {
            transfer.push((vec![0.0, 0.0, p.download_bytes], p.download));
        }
    }
    by_model
        .into_iter()
        .map(|(model, rows)| {
            let x = fit_relative(&rows);
            let err = median_relative_error(&rows, &x);
            (model, x, err)
        })
        .collect()
}

/// The model's choice at each point: every option's estimate (GPU ones with the transfers) and
/// the cheapest.
pub fn choose(points: &mut [Point], profile: &Profile) {
    for p in points.iter_mut() {
        let up = upload_seconds(p.upload_features[0], p.upload_features[1], profile);
        let down = download_seconds(p.download_bytes, profile);
        // An option whose model the profile has no coefficients for (the partitioned CPU join,
        // which placement does not use) is measured but not a candidate.
        p.estimates = p
            .options
            .iter()
            .filter(|o| !profile.coefficients(&o.model).is_empty())
            .map(|o| {
                let compute = datafusion_gpu::cost::dot(&o.features, &profile.coefficients(&o.model));
                let transfers = if o.name == "cpu" { 0.0 } else { up + down };
                (o.name.clone(), compute + transfers)
            })
            .collect();
        p.auto = p.estimates.iter().min_by(|a, b| a.1.total_cmp(&b.1)).map(|e| e.0.clone()).unwrap_or_default();
    }
}

/// Re-evaluates the points of an earlier sweep (`--from-json`): fits and saves a profile for the
/// sweep's device when calibrating, then chooses with the profile. Needs no GPU.
pub fn rerun(o: &SweepOptions, path: &std::path::Path) -> Result<SweepReport> {
    let text = std::fs::read_to_string(path).map_err(|e| gpu_error(format!("reading {}: {e}", path.display())))?;
    let mut report: SweepReport =
        serde_json::from_str(&text).map_err(|e| gpu_error(format!("parsing {}: {e}", path.display())))?;
    let mut profile = profile::load_named(&report.device, &o.profile_dir);
    report.fits.clear();
    if o.calibrate {
        report.fits = fit(&report.points);
        for (model, x, _) in &report.fits {
            profile.coefficients.insert(model.clone(), x.clone());
        }
        profile.source = format!(
            "fitted by `datafusion-gpu bench sweep --calibrate --from-json` to {} points (seed {})",
            report.points.len(),
            report.seed
        );
        let saved = profile::save(&profile, &o.profile_dir)?;
        eprintln!("bench sweep: saved the device profile to {}", saved.display());
    }
    choose(&mut report.points, &profile);
    report.profile_source = profile.source.clone();
    Ok(report)
}

pub async fn run(gpu: &Arc<Gpu>, o: &SweepOptions) -> Result<SweepReport> {
    // Every upload sample is a first upload of fresh data, as the model prices uploads: with host
    // registration on, a buffer is page-locked on its second upload and later ones run at the
    // pinned rate, so a median of five uploads was a registered one (about twice as fast;
    // benches/results/2026-11-24-h100-pair-pricing/README.md).
    let gpu = &gpu.with_config(&GpuConfig { host_register_limit: ByteSize::Bytes(0), ..GpuConfig::default() })?;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut profile = profile::load(gpu.info(), &o.profile_dir);
    // The first upload of a process creates the pinned staging pool (tens of milliseconds, once
    // per process): pay it before the first point.
    upload_chunks(
        gpu,
        &join_bench::relations(
            join_bench::Config { key_bytes: 4, payloads: 1, match_ratio: 1.0, skew: 0.0 },
            1 << 16,
            1 << 16,
            o.runs.seed,
        )?
        .1,
        o.batch_rows,
    )?;
    if o.calibrate {
        // The device terms first: the features of every point are priced with them.
        let doc = doctor::run(gpu, DoctorOptions::default())?;
        profile.b_g = doc.device_copy;
        profile.h2d = doc.h2d_pinned;
        profile.d2h = doc.d2h_pinned;
        profile.random_penalty = super::primitives::random_penalty(gpu, 26, 5, o.runs.seed)?;
        profile.cpu_threads = threads;
        profile.sm_count = gpu.info().sm_count.max(1) as u32;
        profile.l2_bytes = gpu.info().l2_cache_bytes.max(0) as f64;
        profile.shared_memory_per_block = gpu.info().shared_memory_per_block_optin.max(0) as f64;
        eprintln!(
            "bench sweep: B_G {:.0} GB/s, B_G/B_R {:.1}, pinned h2d {:.1} GB/s",
            profile.b_g / 1e9,
            profile.random_penalty,
            profile.h2d / 1e9
        );
    }
    let mut points = Vec::new();
    for &log_s in &o.join_sizes {
        for &shift in &o.build_shifts {
            for &payloads in &o.payloads {
                for &match_ratio in &o.match_ratios {
                    for &skew in &o.skews {
                        let c = join_bench::Config { key_bytes: 4, payloads, match_ratio, skew };
                        points.push(join_point(gpu, &profile, o, log_s, shift, c, threads).await?);
                    }
                }
            }
        }
    }
    for &log_rows in &o.agg_sizes {
        for &aggs in &o.agg_columns {
            for &log_groups in &o.agg_groups {
                if log_groups > log_rows {
                    continue;
                }
                let c = agg_bench::Config { key_bytes: 4, aggs, log_groups };
                points.push(aggregate_point(gpu, &profile, o, log_rows, c, threads).await?);
            }
        }
    }
    let mut fits = Vec::new();
    if o.calibrate {
        fits = fit(&points);
        profile.source = format!(
            "measured by `datafusion-gpu bench sweep --calibrate` ({} points, seed {})",
            points.len(),
            o.runs.seed
        );
        for (model, x, _) in &fits {
            profile.coefficients.insert(model.clone(), x.clone());
        }
        let path = profile::save(&profile, &o.profile_dir)?;
        eprintln!("bench sweep: saved the device profile to {}", path.display());
    }
    choose(&mut points, &profile);
    let report = SweepReport {
        device: gpu.info().name.clone(),
        profile_source: profile.source.clone(),
        cpu_threads: threads,
        runs: o.runs.runs,
        cpu_runs: o.runs.cpu_runs,
        seed: o.runs.seed,
        points,
        fits,
    };
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| gpu_error(format!("encoding the sweep: {e}")))?;
        std::fs::write(path, text).map_err(|e| gpu_error(format!("writing {}: {e}", path.display())))?;
    }
    Ok(report)
}

impl SweepReport {
    /// (points, auto within 10% of the fastest, worst auto / fastest).
    pub fn summary(&self) -> (usize, usize, f64) {
        let mut within = 0;
        let mut worst: f64 = 1.0;
        for p in &self.points {
            let Some(best) = p.fastest() else { continue };
            let ratio = p.auto_seconds() / best.seconds;
            if ratio <= 1.1 {
                within += 1;
            }
            worst = worst.max(ratio);
        }
        (self.points.len(), within, worst)
    }
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device {}; profile: {}; CPU: DataFusion on {} threads (median of {}); GPU: upload + median of {} device runs + \
             download, data starting in host memory; seed {}",
            self.device, self.profile_source, self.cpu_threads, self.cpu_runs, self.runs, self.seed
        )?;
        for (model, x, err) in &self.fits {
            let xs = x.iter().map(|v| format!("{v:.3e}")).collect::<Vec<_>>().join(", ");
            writeln!(f, "fit {model:<16} [{xs}]  median error {:.1}%", err * 100.0)?;
        }
        for p in &self.points {
            let Some(best) = p.fastest() else { continue };
            let opts = p.options.iter().map(|o| format!("{} {}", o.name, ms(o.seconds))).collect::<Vec<_>>().join("  ");
            let ratio = p.auto_seconds() / best.seconds;
            writeln!(
                f,
                "{:<44} up {:>8} down {:>7} | {opts} | fastest {} auto {} {:.2}x{}",
                p.label,
                ms(p.upload),
                ms(p.download),
                best.name,
                p.auto,
                ratio,
                if ratio <= 1.1 { "" } else { "  <-- over 10%" }
            )?;
        }
        let (n, within, worst) = self.summary();
        write!(
            f,
            "auto within 10% of the fastest option at {within} of {n} points ({:.0}%); worst auto / fastest {worst:.2}x \
             (times in ms)",
            100.0 * within as f64 / n.max(1) as f64
        )
    }
}
