//! `datafusion-gpu bench tpch|ssb`: every query of a suite on the CPU (DataFusion alone) and with
//! the GPU rule, in one process on the same in-memory tables; results compared, medians timed,
//! and a table, a JSON record and a PNG chart written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{SessionConfig, SessionContext};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Suite;
use super::chart::{self, Bars};
use super::compare::{check_sorted, compare};
use super::data::{self, Progresses, Table};
use super::peer::{self, DuckDb, Peer, PeerQuery};
use super::queries::{self, Query};
use datafusion::execution::SessionStateBuilder;
use datafusion_distributed::DistributedExt;
use datafusion_gpu::columns::cache::{CachedColumnInfo, TableCache};
use datafusion_gpu::columns::pin_partitions;
use datafusion_gpu::config::{GpuConfig, human_bytes};
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::device::{Gpu, probe};
use datafusion_gpu::distributed::{Link, LinkedChannels, LocalWorkers, WorkerUrls, distributed_session};
use datafusion_gpu::exec::metric_total;
use datafusion_gpu::exec::placement::{Placement, placements, summary};
use datafusion_gpu::session::gpu_session_context;

/// Options of `bench tpch` and `bench ssb`.
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteBenchOptions {
    /// Scale factor (TPC-H: SF 1 is about 1 GB of text data; SSB: about 6 million lineorder rows).
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Queries to run, e.g. `1,3,18` (TPC-H) or `1.1,4.3` (SSB); all when omitted.
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<String>,
    /// Timed runs of each query on each side, after one untimed run on each that also checks the
    /// results; the CPU's and the GPU's timed runs alternate, each going first every other
    /// time (0: check only). Medians of an even count are the mean of the middle two.
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Timed runs of each query on the CPU, when fewer than `--iterations` (the CPU's runs then
    /// alternate with the GPU's first ones): DataFusion's CPU column costs most of a suite's time
    /// at SF 10 (SSB q4.1 takes about 20 s a run), while its answer is checked by the untimed run.
    #[arg(long)]
    pub cpu_iterations: Option<usize>,
    /// Folder of Parquet data: `DIR/<suite>-sf<SF>/<table>.parquet` is read when present,
    /// otherwise generated and written there first. Without it, data is generated in memory.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// How both sessions see the tables: `memory` reads them into in-memory tables (`MemTable`s,
    /// one partition per core) that both share; `parquet` registers the Parquet files under
    /// `--data` as Parquet tables in each session, as a user would (`CREATE EXTERNAL TABLE ...
    /// STORED AS PARQUET`), with no copy in memory, and times the defaults over them.
    #[arg(long, value_enum, default_value_t = Source::Memory)]
    pub source: Source,
    /// Partitions of each in-memory table and DataFusion's target partitions (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub partitions: usize,
    /// `gpu.cost.min_rows` of the GPU session (default: the option's default); 0 puts every eligible
    /// operator on the GPU whatever its size.
    #[arg(long)]
    pub gpu_min_rows: Option<usize>,
    /// A setting of the GPU session only, as `KEY=VALUE` (repeatable), e.g.
    /// `gpu.join.algorithm=phj` or `datafusion.optimizer.hash_join_single_partition_threshold_rows=1000000`.
    #[arg(long = "gpu-set", value_name = "KEY=VALUE")]
    pub gpu_set: Vec<String>,
    /// Seed of the SSB generator (TPC-H data is dbgen's, fixed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the JSON record and the PNG chart are written.
    #[arg(long, default_value = "benches/results")]
    pub out: PathBuf,
    /// Write no files.
    #[arg(long)]
    pub no_save: bool,
    /// Appended to the names of the files written (`...-sf10-<LABEL>.json`), to keep runs with
    /// different settings apart.
    #[arg(long)]
    pub label: Option<String>,
    /// Print each query's physical plan with the GPU rule and the metrics of its last run
    /// (EXPLAIN ANALYZE), with where each operator ran.
    #[arg(long)]
    pub explain: bool,
    /// Where the tables' batches live, for both sessions alike: `pageable` keeps the allocator's
    /// memory (the normal DataFusion case); `pinned` copies them once, after loading, into
    /// page-locked host memory (still host memory, read by the CPU as before; GPU scans then
    /// upload without a host copy; see `benches/results/2026-11-25-h100-held-pinned-tables-ab/README.md`).
    /// `gpu` makes the GPU session's tables resident in device memory (`ResidentTable`: uploaded
    /// once, before the queries; the CPU session keeps them pageable). `cached` registers the GPU
    /// session's tables as `GpuCachedTable`s over the same host batches: each column goes to the
    /// device's table cache when a GPU operator first reads it (in the checked run), and later
    /// runs read it there. Without a GPU the tables stay pageable.
    #[arg(long, alias = "host-memory", value_enum, default_value_t = HostMemory::Pageable)]
    pub residency: HostMemory,
    /// After each query's timed runs, run it `--profile-runs` more times with the GPU rule under a
    /// sampling profiler of the process's threads and write `DIR/<suite>-<query>.{folded,svg,top.txt}`
    /// (stacks, flame graph, top functions; see `tpch/profile.rs`). The binary must be built with
    /// the `profile` feature.
    #[arg(long, value_name = "DIR")]
    pub profile: Option<PathBuf>,
    /// Runs of each query under `--profile`.
    #[arg(long, default_value_t = 10)]
    pub profile_runs: usize,
    /// Another engine beside DataFusion, in this process, on the same Parquet (`--data`) and
    /// query texts, with as many threads as DataFusion has partitions: one untimed run that is
    /// checked against DataFusion's rows, then `--iterations` timed runs. Its column goes into
    /// the table, the JSON record and the chart. The binary must be built with the `duckdb`
    /// feature (see `tpch/peer.rs`).
    #[arg(long, value_enum)]
    pub peer: Option<Peer>,
    /// Empty the device's table cache before each timed GPU run (untimed), so that every timed
    /// run uploads every column it reads, with `--residency cached` or `--gpu-set
    /// gpu.table_cache=true`. This is not a cold start: the process stays warm (kernels compiled,
    /// pinned staging memory allocated, cached tables' host images made); only the cached
    /// device columns are gone.
    #[arg(long)]
    pub empty_cache_each_run: bool,
    /// Run both sessions through these `datafusion-gpu worker`s (`URL,..` or `host:port,..`):
    /// DataFusion Distributed with the GPU rule (it places each stage's operators; each worker
    /// builds them for its own device) against the same workers with the rule off. The tables
    /// are the Parquet files under `--data`, which each worker reads itself.
    #[arg(long, value_name = "URL,..", conflicts_with = "local_workers")]
    pub workers: Option<String>,
    /// Start this many workers in this process (localhost ports, one device) and run as with
    /// `--workers` through them: a one-command try of distributed execution.
    #[arg(long, value_name = "N")]
    pub local_workers: Option<usize>,
    /// The network between the workers, in Gb/s: each local worker, and this process as the
    /// coordinator, receives the streams it reads from workers at most this fast, through one
    /// link of its own (`datafusion_gpu::distributed::link`), as a host with a network card of
    /// that rate would. Without it, local workers exchange their shuffles over the loopback.
    #[arg(long, value_name = "GBPS")]
    pub link_gbps: Option<f64>,
}

/// How the sessions see the benchmark tables (see [`SuiteBenchOptions::source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Memory,
    Parquet,
}

/// Where benchmark tables live (see [`SuiteBenchOptions::residency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    Pinned,
    Pageable,
    /// In device memory, for the GPU session.
    Gpu,
    /// The GPU session's tables read through the device's table cache (`GpuCachedTable`).
    Cached,
}

impl SuiteBenchOptions {
    /// Options for a quick check of every query: no timing, no files.
    pub fn check_only(sf: f64) -> SuiteBenchOptions {
        SuiteBenchOptions {
            sf,
            queries: Vec::new(),
            iterations: 0,
            cpu_iterations: None,
            data: None,
            source: Source::Memory,
            partitions: 0,
            gpu_min_rows: None,
            gpu_set: Vec::new(),
            seed: 1,
            out: PathBuf::from("benches/results"),
            no_save: true,
            label: None,
            explain: false,
            residency: HostMemory::Pageable,
            profile: None,
            profile_runs: 10,
            peer: None,
            empty_cache_each_run: false,
            workers: None,
            local_workers: None,
            link_gbps: None,
        }
    }

    /// Whether the sessions run through workers (`--workers`, `--local-workers`).
    pub fn distributed(&self) -> bool {
        self.workers.is_some() || self.local_workers.is_some()
    }
}

/// The workers a distributed run goes through: started here (`--local-workers`) or named.
enum RunWorkers {
    Local(LocalWorkers),
    Named(WorkerUrls),
}

impl RunWorkers {
    async fn start(o: &SuiteBenchOptions) -> Result<Option<RunWorkers>> {
        Ok(match (&o.workers, o.local_workers) {
            (Some(list), _) => Some(RunWorkers::Named(WorkerUrls::parse(list)?)),
            (None, Some(n)) => Some(RunWorkers::Local(LocalWorkers::start(n, None, o.link_gbps).await?)),
            (None, None) => None,
        })
    }

    fn urls(&self) -> Result<WorkerUrls> {
        match self {
            RunWorkers::Local(w) => w.resolver(),
            RunWorkers::Named(u) => Ok(u.clone()),
        }
    }

    fn describe(&self) -> String {
        match self {
            RunWorkers::Local(w) => {
                format!("{} local workers (this process, one device)", w.urls().map_or(0, |u| u.len()))
            }
            RunWorkers::Named(u) => {
                format!(
                    "workers {}",
                    u.0.iter().map(|u| u.as_str().trim_end_matches('/')).collect::<Vec<_>>().join(", ")
                )
            }
        }
    }

    async fn stop(self) -> Result<()> {
        match self {
            RunWorkers::Local(w) => w.stop().await,
            RunWorkers::Named(_) => Ok(()),
        }
    }
}

/// One query's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QueryReport {
    pub query: String,
    /// Median over the timed runs; absent when not timed (or when the query failed).
    pub cpu_ms: Option<f64>,
    pub gpu_ms: Option<f64>,
    pub cpu_runs_ms: Vec<f64>,
    pub gpu_runs_ms: Vec<f64>,
    /// Each side's first run of the query in this process (the untimed run whose answer is
    /// checked), planning included, in ms: with nothing of this query prepared before it, but
    /// after the suite's earlier queries.
    pub cpu_first_ms: Option<f64>,
    pub gpu_first_ms: Option<f64>,
    pub speedup: Option<f64>,
    pub rows: usize,
    /// Bytes of the device columns the GPU session's table scans handed out in its last timed
    /// run (tables on the device: `--residency gpu` or `cached`); absent when nothing was read
    /// on the device.
    pub scanned_bytes: Option<u64>,
    /// Those bytes, read once, at the device-copy bandwidth the run measured: no plan reading
    /// them can take less time.
    pub floor_ms: Option<f64>,
    /// Every join and aggregate of the GPU session's plan and where it ran.
    pub operators: Vec<Placement>,
    pub placement: String,
    /// True when the GPU session's rows equal the CPU's.
    pub ok: bool,
    /// `ok`, or what differed, or the error.
    pub check: String,
    /// The same query on `--peer`, when one ran.
    pub peer: Option<PeerQuery>,
    /// Through workers: the bytes the last timed GPU run's network boundaries received over the
    /// wire (the shuffles, broadcasts and coalesces between its stages, Arrow IPC, compressed);
    /// absent when the workers' metrics did not all come back within 10 s.
    pub network_bytes: Option<u64>,
    /// Through workers: each GPU join of the last timed GPU run, with its inputs' and its own
    /// times (empty when the workers' metrics did not come back).
    pub joins: Vec<JoinOverlap>,
    /// Through workers: each stage of the last timed GPU run and its time, from its start to its
    /// output's end, the longest over its tasks' partitions (`StageClockExec`), in ms.
    pub stages: Vec<(usize, f64)>,
    #[serde(skip)]
    pub plan: String,
}

/// One GPU join of a distributed run, from its metrics in every task (`gpu.join.*` metrics,
/// see `docs/explain.md`): when its inputs were in and when it was done, the latest over its
/// partitions, since they started; and its waits, summed over them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JoinOverlap {
    /// Its keys, as EXPLAIN shows them.
    pub on: String,
    /// Whether an input is a network boundary (a shuffle, broadcast or coalesce).
    pub over_network: bool,
    /// The last input batch received: what receiving the inputs alone takes.
    pub inputs_ms: f64,
    /// The last output batch sent.
    pub done_ms: f64,
    /// Time its readers waited for input batches (the join waiting on its inputs).
    pub input_wait_ms: f64,
    /// Time received batches waited for the join (the inputs waiting on the join).
    pub input_stall_ms: f64,
}

/// A whole run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SuiteReport {
    pub suite: Suite,
    pub sf: f64,
    pub date: String,
    pub command: String,
    /// The GPU, or `None` with the reason in `no_gpu`.
    pub device: Option<String>,
    pub no_gpu: Option<String>,
    /// The device-copy bandwidth (bytes read plus written per second) measured by `doctor` in
    /// the same process before the queries: the rate of the queries' floors.
    pub device_copy_gbps: Option<f64>,
    pub host_cores: usize,
    /// The host's processor, as /proc/cpuinfo names it (`None` where it does not): CPU timings
    /// from different hosts are not comparable.
    pub host_cpu: Option<String>,
    pub partitions: usize,
    pub iterations: usize,
    pub gpu_min_rows: usize,
    /// Settings of the GPU session only (`--gpu-set`).
    pub gpu_settings: Vec<String>,
    pub data: String,
    pub load_seconds: f64,
    /// The process's resident host memory before the tables were loaded, in bytes (`None` off
    /// Linux).
    pub host_rss_start_bytes: Option<u64>,
    /// Its peak resident host memory once the tables were loaded and placed, and at the end of
    /// the run (the kernel's high-water mark, `VmHWM`).
    pub host_rss_peak_after_load_bytes: Option<u64>,
    pub host_rss_peak_bytes: Option<u64>,
    /// Where the tables' batches lived during the run: `pinned` or `pageable` (with the reason
    /// when pinning was asked for but not done).
    pub host_memory: String,
    /// The workers both sessions ran through (`--workers`, `--local-workers`), if any: the CPU
    /// column is then DataFusion Distributed with the GPU rule off, the GPU column with it on.
    pub workers: Option<String>,
    /// Seconds spent placing the tables: copying them into pinned memory or device memory, or
    /// making the cached tables' host images (0 when none of these ran).
    pub pin_seconds: f64,
    /// Whether the table cache was emptied before each timed GPU run (`--empty-cache-each-run`).
    pub empty_cache_each_run: bool,
    /// How the sessions saw the tables (`--source`).
    pub source: Source,
    /// Each table's name, rows and bytes: in memory, or of its Parquet file with `--source parquet`.
    pub tables: Vec<(String, usize, usize)>,
    pub queries: Vec<QueryReport>,
    /// Geometric mean of the speedups of the queries timed on both sides.
    pub geomean_speedup: Option<f64>,
    pub slower_than_0_9: Vec<String>,
    pub all_ok: bool,
    pub label: Option<String>,
    /// What each table's columns took in the device's table cache at the end of the run (tables
    /// of files by their file's name, in-memory tables together as `memory`).
    pub device_columns: Vec<DeviceColumns>,
    /// `--peer`'s engine and version, with its threads, when one ran.
    pub peer: Option<String>,
    /// Seconds the peer took to load the Parquet into its own tables.
    pub peer_load_seconds: Option<f64>,
    /// Geometric mean over the queries timed on both of the peer's time over the GPU session's
    /// (above 1: the GPU session is faster).
    pub geomean_vs_peer: Option<f64>,
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// One table's columns in the device's table cache.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceColumns {
    pub table: String,
    pub columns: usize,
    /// Device bytes they hold (packed batches, full-width copies beside them, plain batches).
    pub bytes: u64,
    /// Of `bytes`, those of packed batches.
    pub packed_bytes: u64,
    /// What the columns take at their Arrow widths.
    pub full_width_bytes: u64,
}

/// `columns` (every device's cached columns) summed by table: a file's stem, or `memory`.
fn device_columns_by_table(columns: &[CachedColumnInfo]) -> Vec<DeviceColumns> {
    let mut by: std::collections::BTreeMap<String, DeviceColumns> = Default::default();
    for c in columns {
        let file = c.source.split(" and ").next().unwrap_or(&c.source);
        let name = Path::new(file).file_stem().map_or(file.to_string(), |s| s.to_string_lossy().into_owned());
        let t = by.entry(name.clone()).or_insert(DeviceColumns {
            table: name,
            columns: 0,
            bytes: 0,
            packed_bytes: 0,
            full_width_bytes: 0,
        });
        t.columns += 1;
        t.bytes += c.bytes;
        t.packed_bytes += c.packed_bytes;
        t.full_width_bytes += c.full_width_bytes;
    }
    by.into_values().collect()
}

/// The median of `v` (the mean of the two middle runs for an even count), or `None` when
/// nothing was timed.
fn median(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(s[n / 2]),
        _ => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// The geometric mean of `v`, or `None` when it is empty.
fn geomean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// Today's date (UTC) as `yyyy-mm-dd`.
fn today() -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() / 86_400).unwrap_or(0)
            as i32;
    datafusion::arrow::temporal_conversions::date32_to_datetime(days)
        .map(|d| d.date().to_string())
        .unwrap_or_else(|| "unknown-date".into())
}

/// A short name for file names: `h100`, `h200`, ... from the GPU's name, or `cpu`.
fn device_slug(device: Option<&str>) -> String {
    let Some(name) = device else { return "cpu".into() };
    name.split_whitespace()
        .find(|w| w.chars().any(|c| c.is_ascii_digit()) && w.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
        .map(|w| w.to_ascii_lowercase())
        .unwrap_or_else(|| "gpu".into())
}

async fn run_once(ctx: &SessionContext, sql: &str) -> Result<(Vec<RecordBatch>, Option<LexOrdering>)> {
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    let ordering = plan.properties().output_ordering().cloned();
    Ok((collect(plan, ctx.task_ctx()).await?, ordering))
}

/// The expected answer of a query: DataFusion's rows, and the order its plan gives them in (the
/// query's ORDER BY; `None` when its rows come in no fixed order).
struct Expected {
    rows: Vec<RecordBatch>,
    ordering: Option<LexOrdering>,
}

impl Expected {
    /// `Ok` when `actual` holds the same rows, in the order the query fixes.
    fn check(&self, actual: &[RecordBatch]) -> std::result::Result<(), String> {
        compare(&self.rows, actual)?;
        match &self.ordering {
            Some(ordering) => check_sorted(actual, ordering),
            None => Ok(()),
        }
    }
}

/// The process's resident host memory now and at its peak, from `/proc/self/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostRss {
    resident: u64,
    peak: u64,
}

fn host_rss() -> Option<HostRss> {
    parse_host_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// `VmRSS` and `VmHWM` of a `/proc/<pid>/status` text, in bytes.
fn parse_host_rss(status: &str) -> Option<HostRss> {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
    };
    Some(HostRss { resident: kib("VmRSS:")?, peak: kib("VmHWM:")? })
}

/// Drops every column of every device's table cache and waits until their memory is free, so
/// that the next run uploads what it reads (`--empty-cache-each-run`).
fn empty_table_caches() {
    for (ordinal, cache) in TableCache::all() {
        cache.clear();
        if let Ok(gpu) = Gpu::get(ordinal) {
            // The frees are ordered on the device's streams: let them finish outside the timing.
            let _ = gpu.context().synchronize();
        }
    }
}

/// One timed run (planning included), its physical plan, whose metrics are that run's, and its
/// answer (checked after the timer).
async fn timed(ctx: &SessionContext, sql: &str) -> Result<(f64, Arc<dyn ExecutionPlan>, Vec<RecordBatch>)> {
    let t = Instant::now();
    datafusion_gpu::timeline::mark("bench", || "timed run starts".into());
    let plan = ctx.sql(sql).await?.create_physical_plan().await?;
    datafusion_gpu::timeline::mark("bench", || "planned".into());
    let batches = collect(Arc::clone(&plan), ctx.task_ctx()).await?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    datafusion_gpu::timeline::mark("bench", || format!("timed run ends ({ms:.1} ms)"));
    Ok((ms, plan, batches))
}

/// A distributed plan after its run: its staged drawing with every task's metrics, and the
/// bytes its network boundaries received (`None` for a plan not cut into stages, or whose
/// workers' metrics did not come back).
/// What the workers' metrics of a distributed run say.
struct Staged {
    /// The staged plan with every task's metrics.
    text: String,
    /// The bytes its network boundaries received.
    bytes: u64,
    joins: Vec<JoinOverlap>,
    /// Each stage and its time, in ms.
    stages: Vec<(usize, f64)>,
}

/// Each stage of `plan` (a staged plan with its metrics) and the longest `stage_time` of its
/// `StageClockExec`, in ms, in the order the stages are met from the top.
fn stage_times(plan: &Arc<dyn ExecutionPlan>) -> Vec<(usize, f64)> {
    use datafusion::physical_plan::metrics::MetricValue;
    use datafusion_distributed::NetworkBoundaryExt;
    fn walk(plan: &Arc<dyn ExecutionPlan>, stage: Option<usize>, out: &mut Vec<(usize, f64)>) {
        let stage = match plan.as_ref().as_network_boundary() {
            Some(b) => Some(b.input_stage().num()),
            None => stage,
        };
        if plan.name() == "StageClockExec"
            && let (Some(stage), Some(m)) = (stage, plan.metrics())
        {
            let ms = m
                .iter()
                .filter_map(|metric| match metric.value() {
                    MetricValue::Time { name, time } if name == "stage_time" => Some(time.value() as f64 / 1e6),
                    _ => None,
                })
                .fold(0.0, f64::max);
            match out.iter_mut().find(|(s, _)| *s == stage) {
                Some(seen) => seen.1 = seen.1.max(ms),
                None => out.push((stage, ms)),
            }
        }
        for c in plan.children() {
            walk(c, stage, out);
        }
    }
    let mut out = Vec::new();
    walk(plan, None, &mut out);
    out
}

async fn staged_metrics(plan: &Arc<dyn ExecutionPlan>) -> Option<Staged> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::physical_plan::metrics::MetricValue;
    use datafusion_distributed::{
        DistributedExec, DistributedMetricsFormat, NetworkBoundaryExt, display_plan_ascii,
        rewrite_distributed_plan_with_metrics,
    };
    plan.downcast_ref::<DistributedExec>()?;
    // (The workers send their metrics after their streams end; a few seconds bound the wait.)
    let rewrite = rewrite_distributed_plan_with_metrics(Arc::clone(plan), DistributedMetricsFormat::PerTask);
    let with_metrics = match tokio::time::timeout(std::time::Duration::from_secs(10), rewrite).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            eprintln!("the staged plan's metrics: {e}");
            return None;
        }
        Err(_) => {
            eprintln!("the staged plan's metrics: not all back within 10 s");
            return None;
        }
    };
    let mut bytes = 0u64;
    let mut joins = Vec::new();
    with_metrics
        .apply(|n| {
            if n.as_ref().is_network_boundary()
                && let Some(m) = n.metrics()
            {
                // (A custom metric of datafusion-distributed's, which `sum_by_name` skips.)
                for metric in m.iter() {
                    if let MetricValue::Custom { name, value } = metric.value()
                        && name == "bytes_transferred"
                    {
                        bytes += value.as_usize() as u64;
                    }
                }
            }
            if n.name() == "GpuHashJoinExec"
                && let Some(m) = n.metrics()
            {
                let (mut latest, mut sum) = (std::collections::HashMap::new(), std::collections::HashMap::new());
                for metric in m.iter() {
                    if let MetricValue::Time { name, time } = metric.value() {
                        let ms = time.value() as f64 / 1e6;
                        let l: &mut f64 = latest.entry(name.to_string()).or_default();
                        *l = l.max(ms);
                        *sum.entry(name.to_string()).or_default() += ms;
                    }
                }
                let get = |map: &std::collections::HashMap<String, f64>, k: &str| map.get(k).copied().unwrap_or(0.0);
                let text = DisplayableExecutionPlan::new(n.as_ref()).one_line().to_string();
                let on = text.split("on=[").nth(1).and_then(|t| t.split(']').next()).unwrap_or("").to_string();
                joins.push(JoinOverlap {
                    on,
                    over_network: n
                        .children()
                        .iter()
                        .any(|c| c.as_ref().is_network_boundary() || c.name().starts_with("Network")),
                    inputs_ms: get(&latest, "build_input_at").max(get(&latest, "probe_input_at")),
                    done_ms: get(&latest, "done_at"),
                    input_wait_ms: get(&sum, "input_wait_time"),
                    input_stall_ms: get(&sum, "input_stall_time"),
                });
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .ok()?;
    let stages = stage_times(&with_metrics);
    Some(Staged { text: display_plan_ascii(with_metrics.as_ref(), true), bytes, joins, stages })
}

fn analyzed(plan: &Arc<dyn ExecutionPlan>) -> String {
    DisplayableExecutionPlan::with_metrics(plan.as_ref()).indent(false).to_string()
}

/// The tables of the run, from Parquet under `--data` or generated in memory.
async fn load(suite: Suite, o: &SuiteBenchOptions, partitions: usize, bars: bool) -> Result<(Vec<Table>, String)> {
    let progress = Progresses::new(bars);
    match (&o.data, o.source) {
        (Some(root), Source::Parquet) => {
            let dir = data::data_dir(root, suite, o.sf);
            if data::has_parquet(&dir, suite) {
                return Ok((Vec::new(), format!("Parquet in {}, registered as Parquet tables", dir.display())));
            }
            eprintln!("generating {} SF {} into {}", suite.title(), o.sf, dir.display());
            data::generate_parquet(&dir, suite, o.sf, o.seed, partitions, &progress)?;
            Ok((Vec::new(), format!("generated into {}, registered as Parquet tables", dir.display())))
        }
        (Some(root), Source::Memory) => {
            let dir = data::data_dir(root, suite, o.sf);
            if let Some(tables) = data::read_parquet(&dir, suite, partitions).await? {
                return Ok((tables, format!("Parquet in {}, read into memory", dir.display())));
            }
            eprintln!("generating {} SF {} into {}", suite.title(), o.sf, dir.display());
            let tables = data::generate(suite, o.sf, o.seed, partitions, &progress)?;
            data::write_parquet(&dir, &tables)?;
            Ok((tables, format!("generated, written to {} and kept in memory", dir.display())))
        }
        (None, Source::Parquet) => Err(DataFusionError::Configuration(
            "--source parquet reads the Parquet files under --data DIR: give --data".into(),
        )),
        (None, Source::Memory) => {
            eprintln!("generating {} SF {} in memory", suite.title(), o.sf);
            Ok((data::generate(suite, o.sf, o.seed, partitions, &progress)?, "generated in memory".into()))
        }
    }
}

/// Sets each `KEY=VALUE` of `settings` (the runners' `--gpu-set`) on `config`.
pub fn apply_settings(config: &mut SessionConfig, settings: &[String]) -> Result<()> {
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| DataFusionError::Configuration(format!("--gpu-set takes KEY=VALUE, not '{setting}'")))?;
        config.options_mut().set(key.trim(), value.trim())?;
    }
    Ok(())
}

/// Runs `suite` as `o` says. Per-query failures are recorded in the report, not returned.
pub async fn run(suite: Suite, o: &SuiteBenchOptions, command: &str) -> Result<SuiteReport> {
    let selected: Vec<Query> = queries::select(suite, &o.queries, o.sf)?;
    if o.profile.is_some() {
        super::profile::available()?;
    }
    peer::available(o.peer)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let partitions = if o.partitions == 0 { cores } else { o.partitions };
    let bars = std::io::IsTerminal::is_terminal(&std::io::stderr());

    if o.source == Source::Parquet && o.residency != HostMemory::Pageable {
        return Err(DataFusionError::Configuration(
            "--source parquet registers the files as Parquet tables: use it with --residency pageable".into(),
        ));
    }
    let host_rss_start_bytes = host_rss().map(|m| m.resident);
    let t = Instant::now();
    let (tables, data_source) = load(suite, o, partitions, bars).await?;
    let load_seconds = t.elapsed().as_secs_f64();

    let device = probe::device_count()
        .map_err(|e| e.reason)
        .and_then(|_| Gpu::get(0).map(|g| g.info().name.clone()).map_err(|e| e.to_string()));
    let (device, no_gpu) = match device {
        Ok(d) => (Some(d), None),
        Err(reason) => (None, Some(reason)),
    };
    let (tables, host_memory, pin_seconds) = match (o.residency, &no_gpu) {
        (HostMemory::Pageable, _) => (tables, "pageable".to_string(), 0.0),
        (HostMemory::Cached, Some(reason)) => (tables, format!("pageable (no GPU to cache the tables on: {reason})"), 0.0),
        (HostMemory::Cached, None) => (
            tables,
            "pageable for the CPU; for the GPU session the same batches through the device's table cache (GpuCachedTable)".to_string(),
            0.0,
        ),
        (HostMemory::Gpu, Some(reason)) => (tables, format!("pageable (no GPU to hold the tables: {reason})"), 0.0),
        // Made resident once the GPU session exists, below.
        (HostMemory::Gpu, None) => (tables, String::new(), 0.0),
        (HostMemory::Pinned, Some(reason)) => (tables, format!("pageable (no GPU to pin with: {reason})"), 0.0),
        (HostMemory::Pinned, None) => {
            let t = Instant::now();
            let gpu = Gpu::get(0)?;
            let pinned = tables
                .into_iter()
                .map(|t| Ok(Table { partitions: pin_partitions(&gpu, &t.partitions)?, ..t }))
                .collect::<Result<Vec<_>>>()
                .map_err(|e| {
                    DataFusionError::Execution(format!(
                        "copying the tables into pinned host memory failed ({e}); run with --host-memory pageable"
                    ))
                })?;
            (pinned, "pinned".to_string(), t.elapsed().as_secs_f64())
        }
    };

    let config = SessionConfig::new().with_target_partitions(partitions);
    let mut gpu_cfg = GpuConfig::default();
    if let Some(m) = o.gpu_min_rows {
        gpu_cfg.min_rows = m;
    }
    let gpu_min_rows = gpu_cfg.min_rows;
    if o.distributed() && (o.residency != HostMemory::Pageable || o.data.is_none()) {
        return Err(DataFusionError::Configuration(
            "--workers and --local-workers read the Parquet under --data DIR, with --residency pageable".into(),
        ));
    }
    let workers = RunWorkers::start(o).await?;
    let mut gpu_config = config.clone().with_option_extension(gpu_cfg);
    apply_settings(&mut gpu_config, &o.gpu_set)?;
    let (cpu_ctx, gpu_ctx) = match &workers {
        None => (SessionContext::new_with_config(config.clone()), gpu_session_context(gpu_config)),
        Some(w) => {
            // The same workers, with the rule off for DataFusion Distributed on the CPU alone.
            let mut cpu_config = gpu_config.clone();
            cpu_config.options_mut().set("gpu.enable", "false")?;
            // The coordinator reads the last stages through a link of its own, shared by both.
            let link = o.link_gbps.map(Link::gbit_per_second).transpose()?;
            let session = |config: SessionConfig| -> Result<SessionContext> {
                let mut builder = SessionStateBuilder::new().with_config(config).with_default_features();
                if let Some(link) = &link {
                    builder = builder.with_distributed_channel_resolver(LinkedChannels::new(Arc::clone(link)));
                }
                Ok(SessionContext::from(distributed_session(builder, w.urls()?)?))
            };
            (session(cpu_config)?, session(gpu_config)?)
        }
    };
    // The rate of the floors: the device's copy bandwidth, measured here (1 GiB copies) before
    // any table takes device memory, when the GPU session's scans read device memory (resident
    // or cached tables, or the table cache over in-memory ones); only those report floors.
    let device_tables = matches!(o.residency, HostMemory::Gpu | HostMemory::Cached)
        || GpuConfig::from_options(gpu_ctx.state().config().options()).table_cache;
    let copy_bandwidth = match (&device, o.iterations, device_tables) {
        (Some(_), 1.., true) => {
            let gpu = Gpu::get(0)?;
            Some(doctor::run(&gpu, DoctorOptions { transfer_bytes: 16 << 20, ..DoctorOptions::default() })?.device_copy)
        }
        _ => None,
    };
    let (host_memory, pin_seconds) = match (&workers, &o.data) {
        // Through workers, or with `--source parquet`: both sessions read the files themselves.
        (workers, Some(root)) if workers.is_some() || o.source == Source::Parquet => {
            let dir = data::data_dir(root, suite, o.sf);
            data::register_parquet(&cpu_ctx, &dir, suite).await?;
            data::register_parquet(&gpu_ctx, &dir, suite).await?;
            match workers {
                Some(w) => {
                    (format!("{host_memory}; both sessions read the Parquet through {}", w.describe()), pin_seconds)
                }
                None => ("none: each session reads the Parquet files as its queries run".to_string(), 0.0),
            }
        }
        _ => {
            data::register(&cpu_ctx, &tables)?;
            place_tables(o.residency, &no_gpu, &gpu_ctx, &tables, host_memory, pin_seconds)?
        }
    };
    let workers_shown = workers.as_ref().map(RunWorkers::describe);
    // Before the peer loads its own tables into this process.
    let host_rss_peak_after_load_bytes = host_rss().map(|m| m.peak);

    let (duckdb, peer_load_seconds) = match o.peer {
        None => (None, None),
        Some(Peer::Duckdb) => {
            let root = o.data.as_ref().ok_or_else(|| {
                DataFusionError::Configuration("--peer duckdb reads the run's Parquet: give --data DIR".into())
            })?;
            let t = Instant::now();
            let db = DuckDb::open(&data::data_dir(root, suite, o.sf), suite.tables(), partitions)?;
            (Some(db), Some(t.elapsed().as_secs_f64()))
        }
    };
    let bar = if bars { ProgressBar::new(selected.len() as u64) } else { ProgressBar::hidden() };
    if bars {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} queries {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(suite.title());
    }
    let mut reports = Vec::new();
    let runs = Runs {
        gpu: o.iterations,
        cpu: o.cpu_iterations.map_or(o.iterations, |c| c.min(o.iterations)),
        empty_cache: o.empty_cache_each_run,
    };
    for q in &selected {
        bar.set_message(format!("{} on the CPU", q.name));
        let report =
            run_query(q, &cpu_ctx, &gpu_ctx, runs, device.is_some(), copy_bandwidth, duckdb.as_ref(), &bar).await;
        if let Some(dir) = &o.profile
            && report.ok
        {
            bar.set_message(format!("{} profiled", q.name));
            let stem = format!("{}-{}", suite.name(), q.name);
            let profiled = super::profile::profile(&gpu_ctx, &q.sql, o.profile_runs, dir, &stem).await?;
            let line = format!(
                "{}: {} samples over {} runs with the GPU rule, in {}",
                q.name,
                profiled.samples,
                o.profile_runs,
                dir.join(format!("{stem}.top.txt")).display()
            );
            if bar.is_hidden() { eprintln!("{line}") } else { bar.println(line) }
        }
        bar.inc(1);
        if bar.is_hidden() {
            // Without a terminal, a line a query: a long run cut short still says how far it got.
            eprintln!("{}", progress_line(&report));
        }
        reports.push(report);
    }
    bar.finish_and_clear();
    if let Some(w) = workers {
        w.stop().await?;
    }

    let speedups: Vec<f64> = reports.iter().filter_map(|r| r.speedup).collect();
    let geomean_speedup = geomean(&speedups);
    let slower_than_0_9 =
        reports.iter().filter(|r| r.speedup.is_some_and(|s| s < 0.9)).map(|r| r.query.clone()).collect();
    let geomean_vs_peer = geomean(&reports.iter().filter_map(vs_peer).collect::<Vec<_>>());
    let mut report = SuiteReport {
        suite,
        sf: o.sf,
        date: today(),
        command: command.to_string(),
        device,
        no_gpu,
        device_copy_gbps: copy_bandwidth.map(|b| b / 1e9),
        host_cores: cores,
        host_cpu: host_cpu(),
        partitions,
        iterations: o.iterations,
        gpu_min_rows,
        gpu_settings: o.gpu_set.clone(),
        data: data_source,
        load_seconds,
        host_rss_start_bytes,
        host_rss_peak_after_load_bytes,
        host_rss_peak_bytes: host_rss().map(|m| m.peak),
        host_memory,
        pin_seconds,
        empty_cache_each_run: o.empty_cache_each_run,
        tables: match (o.source, &o.data) {
            (Source::Parquet, Some(root)) => data::parquet_tables(&data::data_dir(root, suite, o.sf), suite)?,
            _ => tables.iter().map(|t| (t.name.to_string(), t.num_rows(), t.memory_size())).collect(),
        },
        source: o.source,
        device_columns: device_columns_by_table(
            &TableCache::all().into_iter().flat_map(|(_, c)| c.columns()).collect::<Vec<_>>(),
        ),
        all_ok: reports.iter().all(|r| r.ok),
        queries: reports,
        geomean_speedup,
        slower_than_0_9,
        label: o.label.clone(),
        peer: duckdb.as_ref().map(|d| format!("DuckDB {}, {partitions} threads", d.version)),
        peer_load_seconds,
        geomean_vs_peer,
        workers: workers_shown,
        files: Vec::new(),
    };
    if !o.no_save {
        report.files = save(&report, &o.out)?;
    }
    Ok(report)
}

/// Registers the GPU session's tables as `residency` says (resident, cached or as they are),
/// with the host memory line of the report and the seconds placing them took.
fn place_tables(
    residency: HostMemory,
    no_gpu: &Option<String>,
    gpu_ctx: &SessionContext,
    tables: &[Table],
    host_memory: String,
    pin_seconds: f64,
) -> Result<(String, f64)> {
    Ok(match (residency, no_gpu) {
        (HostMemory::Gpu, None) => {
            let t = Instant::now();
            let bytes = data::register_resident(gpu_ctx, tables).map_err(|e| {
                DataFusionError::Execution(format!(
                    "making the tables resident in device memory failed ({e}); run with --residency pageable"
                ))
            })?;
            let seconds = t.elapsed().as_secs_f64();
            (
                format!(
                    "pageable for the CPU, GPU-resident for the GPU session ({} on the device)",
                    human_bytes(bytes as u64)
                ),
                seconds,
            )
        }
        (HostMemory::Cached, None) => {
            let t = Instant::now();
            let (image_bytes, pinned_bytes) = data::register_cached(gpu_ctx, tables)?;
            match image_bytes {
                0 => (host_memory, pin_seconds),
                bytes => (
                    format!(
                        "{host_memory}, with host images of its columns ({}, gpu.table_cache.host_image; {} of them pinned, gpu.table_cache.host_image_pinned)",
                        human_bytes(bytes as u64),
                        human_bytes(pinned_bytes as u64)
                    ),
                    t.elapsed().as_secs_f64(),
                ),
            }
        }
        _ => {
            data::register(gpu_ctx, tables)?;
            (host_memory, pin_seconds)
        }
    })
}

/// The peer's time over the GPU session's for `r`, when both were timed.
fn vs_peer(r: &QueryReport) -> Option<f64> {
    match (r.peer.as_ref().and_then(|p| p.ms), r.gpu_ms) {
        (Some(p), Some(g)) if g > 0.0 => Some(p / g),
        _ => None,
    }
}

/// `q` on the peer: one run checked against DataFusion's `expected` rows, then `iterations`
/// timed ones (medians).
fn run_peer(q: &Query, db: &DuckDb, expected: &[RecordBatch], iterations: usize) -> PeerQuery {
    let mut p = PeerQuery { ms: None, runs_ms: Vec::new(), ok: false, check: String::new() };
    let checked = peer::cells_of(expected).and_then(|want| Ok((want, db.rows(&q.sql)?)));
    match checked {
        Err(e) => {
            p.check = format!("error: {e}");
            return p;
        }
        Ok((want, got)) => match peer::compare_cells(&want, &got) {
            Ok(()) => {
                p.ok = true;
                p.check = "ok".into();
            }
            Err(diff) => {
                p.check = format!("MISMATCH: {diff}");
                return p;
            }
        },
    }
    for _ in 0..iterations {
        let t = Instant::now();
        if let Err(e) = db.rows(&q.sql) {
            p.ok = false;
            p.check = format!("error (timed run): {e}");
            return p;
        }
        p.runs_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    p.ms = median(&p.runs_ms);
    p
}

/// Timed runs of a query with the GPU rule (and the peer's), and on the CPU.
#[derive(Debug, Clone, Copy)]
struct Runs {
    gpu: usize,
    cpu: usize,
    /// Empty the table cache before each timed GPU run (`--empty-cache-each-run`).
    empty_cache: bool,
}

#[allow(clippy::too_many_arguments)]
/// One query's outcome in a line: its check, and its first and median times on each side.
fn progress_line(r: &QueryReport) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"));
    format!(
        "{}: {} ({} rows); with the GPU rule first {}, median {}; CPU first {}, median {}",
        r.query,
        r.check,
        r.rows,
        ms(r.gpu_first_ms),
        ms(r.gpu_ms),
        ms(r.cpu_first_ms),
        ms(r.cpu_ms)
    )
}

async fn run_query(
    q: &Query,
    cpu: &SessionContext,
    gpu: &SessionContext,
    runs: Runs,
    have_gpu: bool,
    copy_bandwidth: Option<f64>,
    duckdb: Option<&DuckDb>,
    bar: &ProgressBar,
) -> QueryReport {
    let mut r = QueryReport {
        query: q.name.to_string(),
        cpu_ms: None,
        gpu_ms: None,
        cpu_runs_ms: Vec::new(),
        gpu_runs_ms: Vec::new(),
        cpu_first_ms: None,
        gpu_first_ms: None,
        speedup: None,
        rows: 0,
        scanned_bytes: None,
        floor_ms: None,
        operators: Vec::new(),
        placement: String::new(),
        ok: false,
        check: String::new(),
        peer: None,
        plan: String::new(),
        network_bytes: None,
        joins: Vec::new(),
        stages: Vec::new(),
    };
    // CPU: one run for the expected rows (and the CPU's warm-up).
    let first = Instant::now();
    let expected = match run_once(cpu, &q.sql).await {
        Ok((rows, ordering)) => {
            r.cpu_first_ms = Some(first.elapsed().as_secs_f64() * 1e3);
            Expected { rows, ordering }
        }
        Err(e) => {
            r.check = format!("error on the CPU: {e}");
            return r;
        }
    };
    r.rows = expected.rows.iter().map(|b| b.num_rows()).sum();
    if let Some(db) = duckdb {
        bar.set_message(format!("{} on the peer", q.name));
        r.peer = Some(run_peer(q, db, &expected.rows, runs.gpu));
    }

    // With the GPU rule: plan (for the placements), run and check (the GPU's warm-up).
    bar.set_message(format!("{} with the GPU rule", q.name));
    let checked: Result<Vec<RecordBatch>> = async {
        let first = Instant::now();
        let df = gpu.sql(&q.sql).await?;
        let plan = df.create_physical_plan().await?;
        let batches = collect(Arc::clone(&plan), gpu.task_ctx()).await?;
        r.gpu_first_ms = Some(first.elapsed().as_secs_f64() * 1e3);
        r.operators = placements(&plan);
        r.placement = summary(&r.operators);
        r.plan = analyzed(&plan);
        Ok(batches)
    }
    .await;
    match checked {
        Err(e) => {
            r.check = format!("error with the GPU rule: {e}");
            return r;
        }
        Ok(actual) => match expected.check(&actual) {
            Ok(()) => {
                r.ok = true;
                r.check = match expected.ordering {
                    Some(_) => "ok, in order".into(),
                    None => "ok".into(),
                };
            }
            Err(diff) => {
                r.check = format!("MISMATCH: {diff}");
                return r;
            }
        },
    }
    // The timed runs alternate CPU and GPU, so that the host's drift over the runs (other work,
    // clocks, memory) falls on both columns alike, and which of the two goes first alternates
    // too, so that whatever a run pays for the one before it (memory and tasks still being
    // released) falls on both alike. With both sessions on the CPU (`--gpu-set
    // gpu.enable=false`) single queries still differ by 0.86-1.09x at SF 10 on 16 cores: the
    // noise of one comparison (benches/results/2026-11-24-h100-view-assembly-and-run-order/README.md,
    // whose runs took the upper of the two middle runs for even counts).
    bar.set_message(format!("{} timed, CPU and GPU in turn", q.name));
    let mut last_gpu_plan = None;
    for i in 0..runs.gpu {
        let gpu_first = have_gpu && i % 2 == 1;
        for on_gpu in [gpu_first, !gpu_first] {
            if (on_gpu && !have_gpu) || (!on_gpu && i >= runs.cpu) {
                continue;
            }
            let ctx = if on_gpu { gpu } else { cpu };
            if on_gpu && runs.empty_cache {
                empty_table_caches();
            }
            match timed(ctx, &q.sql).await {
                Ok((ms, plan, answer)) if on_gpu => {
                    if let Err(diff) = expected.check(&answer) {
                        r.ok = false;
                        r.check = format!("MISMATCH in timed run {}: {diff}", r.gpu_runs_ms.len() + 1);
                        return r;
                    }
                    r.gpu_runs_ms.push(ms);
                    last_gpu_plan = Some(plan);
                }
                Ok((ms, _, _)) => r.cpu_runs_ms.push(ms),
                Err(e) => {
                    r.ok = false;
                    let side = if on_gpu { "with the GPU rule" } else { "on the CPU" };
                    r.check = format!("error {side} (timed run): {e}");
                    return r;
                }
            }
        }
    }
    if let Some(plan) = last_gpu_plan {
        r.plan = analyzed(&plan);
        // Through workers: the staged plan with every task's metrics (each stage's tasks'
        // start and end, each boundary's bytes), as EXPLAIN ANALYZE draws it.
        if let Some(staged) = staged_metrics(&plan).await {
            r.plan = staged.text;
            r.network_bytes = Some(staged.bytes);
            r.joins = staged.joins;
            r.stages = staged.stages;
        }
        let scanned = metric_total(&plan, None, "scanned_bytes") as u64;
        if scanned > 0 {
            r.scanned_bytes = Some(scanned);
            r.floor_ms = copy_bandwidth.filter(|b| *b > 0.0).map(|b| scanned as f64 / b * 1e3);
        }
    }
    r.cpu_ms = median(&r.cpu_runs_ms);
    r.gpu_ms = median(&r.gpu_runs_ms);
    if let (Some(c), Some(g)) = (r.cpu_ms, r.gpu_ms)
        && g > 0.0
    {
        r.speedup = Some(c / g);
    }
    r
}

fn file_stem(report: &SuiteReport) -> String {
    let stem =
        format!("{}-{}-{}-sf{}", report.date, device_slug(report.device.as_deref()), report.suite.name(), report.sf);
    match &report.label {
        Some(label) => {
            let label: String = label
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
                .collect();
            format!("{stem}-{label}")
        }
        None => stem,
    }
}

/// Writes `<date>-<device>-<suite>-sf<SF>.json` and `.png` under `out`.
fn save(report: &SuiteReport, out: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)
        .map_err(|e| DataFusionError::Execution(format!("cannot create {}: {e}", out.display())))?;
    let stem = file_stem(report);
    let json = out.join(format!("{stem}.json"));
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| DataFusionError::Execution(format!("cannot encode the report: {e}")))?;
    std::fs::write(&json, text + "\n")
        .map_err(|e| DataFusionError::Execution(format!("cannot write {}: {e}", json.display())))?;
    let mut files = vec![json];
    let png = out.join(format!("{stem}.png"));
    let bars: Vec<Bars> = report
        .queries
        .iter()
        .map(|q| Bars {
            name: &q.query,
            cpu_ms: q.cpu_ms,
            gpu_ms: q.gpu_ms,
            peer_ms: q.peer.as_ref().and_then(|p| p.ms),
        })
        .collect();
    let title = chart_title(
        report.suite.title(),
        report.sf,
        report.host_cores,
        report.device.as_deref(),
        report.iterations,
        report.peer.as_deref(),
    );
    if bars.iter().any(|b| b.cpu_ms.is_some() || b.gpu_ms.is_some()) {
        chart::draw(&png, &title, &bars).map_err(DataFusionError::Execution)?;
        files.push(png);
    }
    Ok(files)
}

fn chart_title(
    suite: &str,
    sf: f64,
    cores: usize,
    device: Option<&str>,
    iterations: usize,
    peer: Option<&str>,
) -> String {
    let beside = peer.map(|p| format!(" and {}", p.split(',').next().unwrap_or(p))).unwrap_or_default();
    format!(
        "{suite} SF {sf}: DataFusion on {cores} cores vs with the GPU rule ({}){beside}, median of {iterations}",
        device.unwrap_or("no GPU")
    )
}

/// Draws the PNG chart of a JSON record written by `bench tpch|ssb` again, next to it (same
/// name, `.png`): for records whose chart was not kept.
pub fn redraw_chart(json: &Path) -> Result<PathBuf> {
    let fail = |why: String| DataFusionError::Execution(format!("{}: {why}", json.display()));
    let text = std::fs::read_to_string(json).map_err(|e| fail(format!("cannot read it: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| fail(format!("not JSON: {e}")))?;
    let suite = match v["suite"].as_str() {
        Some("tpch") => Suite::Tpch,
        Some("ssb") => Suite::Ssb,
        other => return Err(fail(format!("not a bench tpch|ssb record (suite {other:?})"))),
    };
    let field = |name: &str| v[name].as_f64().ok_or_else(|| fail(format!("no number `{name}`")));
    let queries = v["queries"].as_array().ok_or_else(|| fail("no `queries` list".into()))?;
    let names: Vec<String> = queries.iter().map(|q| q["query"].as_str().unwrap_or("?").to_string()).collect();
    let bars: Vec<Bars> = queries
        .iter()
        .zip(&names)
        .map(|(q, name)| Bars {
            name,
            cpu_ms: q["cpu_ms"].as_f64(),
            gpu_ms: q["gpu_ms"].as_f64(),
            peer_ms: q["peer"]["ms"].as_f64(),
        })
        .collect();
    let title = chart_title(
        suite.title(),
        field("sf")?,
        field("host_cores")? as usize,
        v["device"].as_str(),
        field("iterations")? as usize,
        v["peer"].as_str(),
    );
    let png = json.with_extension("png");
    chart::draw(&png, &title, &bars).map_err(DataFusionError::Execution)?;
    Ok(png)
}

impl std::fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} SF {} ({}; loaded in {:.1} s; host memory {}{})",
            self.suite.title(),
            self.sf,
            self.data,
            self.load_seconds,
            self.host_memory,
            if self.pin_seconds > 0.0 { format!(", placed in {:.1} s", self.pin_seconds) } else { String::new() }
        )?;
        if let (Some(start), Some(loaded), Some(peak)) =
            (self.host_rss_start_bytes, self.host_rss_peak_after_load_bytes, self.host_rss_peak_bytes)
        {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            writeln!(
                f,
                "host memory (RSS): {:.2} GiB at the start, peak {:.2} GiB once loaded, {:.2} GiB over the run{}",
                gib(start),
                gib(loaded),
                gib(peak),
                if self.peer.is_some() { " (the peer's tables in this process included)" } else { "" }
            )?;
        }
        for (name, rows, bytes) in &self.tables {
            let of = if self.source == Source::Parquet { " of Parquet" } else { "" };
            writeln!(f, "  {name:<10} {rows:>12} rows {:>10.1} MiB{of}", *bytes as f64 / (1 << 20) as f64)?;
        }
        if !self.device_columns.is_empty() {
            writeln!(f, "device table cache at the end (gpu_table_cache_columns()):")?;
        }
        for t in &self.device_columns {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            writeln!(
                f,
                "  {:<10} {:>3} columns {:>10.1} MiB, {:.1} MiB of it packed, {:.1} MiB at Arrow widths ({:.0}%)",
                t.table,
                t.columns,
                mib(t.bytes),
                mib(t.packed_bytes),
                mib(t.full_width_bytes),
                100.0 * t.bytes as f64 / t.full_width_bytes.max(1) as f64
            )?;
        }
        match (&self.device, &self.no_gpu) {
            (Some(d), _) => {
                writeln!(f, "GPU: {d}; gpu.cost.min_rows = {}", self.gpu_min_rows)?;
                if !self.gpu_settings.is_empty() {
                    writeln!(f, "GPU session settings: {}", self.gpu_settings.join(", "))?;
                }
            }
            (None, Some(why)) => writeln!(
                f,
                "GPU: none, so the GPU column is empty ({why}); every query still runs with the GPU rule once and is checked"
            )?,
            _ => {}
        }
        // Fewer CPU runs than GPU runs with `--cpu-iterations` (the record keeps each run).
        let cpu_runs = self.queries.iter().map(|q| q.cpu_runs_ms.len()).max().unwrap_or(0);
        let runs = match cpu_runs < self.iterations {
            true => format!("medians of {} timed runs with the GPU rule and {cpu_runs} on the CPU", self.iterations),
            false => format!("medians of {} timed runs", self.iterations),
        };
        if let Some(w) = &self.workers {
            writeln!(
                f,
                "Both sessions distributed (DataFusion Distributed) through {w}; the CPU one with gpu.enable = false"
            )?;
        }
        writeln!(
            f,
            "CPU: DataFusion, {} partitions on {} cores{}; {runs} after one checked run\n",
            self.partitions,
            self.host_cores,
            self.host_cpu.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(),
        )?;
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let floors = self.queries.iter().any(|q| q.floor_ms.is_some());
        if floors && let Some(b) = self.device_copy_gbps {
            writeln!(
                f,
                "floor: the bytes the GPU plan's scans read from device memory, once, at the {b:.0} GB/s device copy measured here; x floor = GPU ms / floor ms\n"
            )?;
        }
        let floor_head = if floors { format!(" {:>9} {:>8}", "floor ms", "x floor") } else { String::new() };
        let network = self.queries.iter().any(|q| q.network_bytes.is_some());
        let floor_head = match network {
            true => format!("{floor_head} {:>9}", "net MiB"),
            false => floor_head,
        };
        if network {
            writeln!(
                f,
                "net MiB: what the GPU run's network boundaries (shuffles, broadcasts, coalesces) received over the wire (Arrow IPC, compressed); - where the workers' metrics did not come back\n"
            )?;
        }
        let peer = self.peer.is_some();
        let peer_head =
            if peer { format!(" {:>10} {:>9} {:<11}", "DuckDB ms", "vs DuckDB", "DuckDB rows") } else { String::new() };
        if let Some(p) = &self.peer {
            writeln!(
                f,
                "peer: {p}, the same Parquet loaded into its own tables in {:.1} s; vs DuckDB = DuckDB ms / GPU ms\n",
                self.peer_load_seconds.unwrap_or(0.0)
            )?;
        }
        writeln!(
            f,
            "{:<6} {:>10} {:>10} {:>8}{floor_head}{peer_head}  {:<6} where the joins and aggregates ran",
            "query", "CPU ms", "GPU ms", "speedup", "check"
        )?;
        for q in &self.queries {
            let check = if q.ok { "ok" } else { "FAIL" };
            let floor = match (floors, q.floor_ms, q.gpu_ms) {
                (false, _, _) => String::new(),
                (true, Some(fl), Some(g)) if fl > 0.0 => format!(" {fl:>9.3} {:>7.0}x", g / fl),
                (true, fl, _) => format!(" {:>9} {:>8}", ms(fl), "-"),
            };
            let floor = match (network, q.network_bytes) {
                (false, _) => floor,
                (true, Some(b)) => format!("{floor} {:>9.1}", b as f64 / (1 << 20) as f64),
                (true, None) => format!("{floor} {:>9}", "-"),
            };
            let peer_cols = match (peer, &q.peer) {
                (false, _) => String::new(),
                (true, None) => format!(" {:>10} {:>9} {:<11}", "-", "-", "-"),
                (true, Some(p)) => format!(
                    " {:>10} {:>9} {:<11}",
                    ms(p.ms),
                    vs_peer(q).map_or("-".into(), |v| format!("{v:.2}x")),
                    if p.ok { "ok" } else { "FAIL" }
                ),
            };
            writeln!(
                f,
                "{:<6} {:>10} {:>10} {:>8}{floor}{peer_cols}  {:<6} {}",
                q.query,
                ms(q.cpu_ms),
                ms(q.gpu_ms),
                q.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
                check,
                q.placement
            )?;
        }
        if self.queries.iter().any(|q| !q.joins.is_empty()) {
            writeln!(
                f,
                "\nGPU joins of the last GPU run (since the query's stages started; latest over partitions): inputs = the last input batch in, done = the last output batch out, wait = the readers' time waiting for input, stall = received batches' time waiting for the join (summed over partitions)"
            )?;
            writeln!(
                f,
                "{:<6} {:<40} {:>4} {:>10} {:>10} {:>8} {:>10} {:>10}",
                "query", "join on", "net", "inputs ms", "done ms", "done/in", "wait ms", "stall ms"
            )?;
            for q in &self.queries {
                for j in &q.joins {
                    let on: String = j.on.chars().take(40).collect();
                    let ratio = if j.inputs_ms > 0.0 { format!("{:.2}x", j.done_ms / j.inputs_ms) } else { "-".into() };
                    writeln!(
                        f,
                        "{:<6} {:<40} {:>4} {:>10.1} {:>10.1} {:>8} {:>10.1} {:>10.1}",
                        q.query,
                        on,
                        if j.over_network { "yes" } else { "no" },
                        j.inputs_ms,
                        j.done_ms,
                        ratio,
                        j.input_wait_ms,
                        j.input_stall_ms
                    )?;
                }
            }
        }
        if self.queries.iter().any(|q| !q.stages.is_empty()) {
            writeln!(
                f,
                "\nStages of the last GPU run: each stage's time from its start to its output's end (the slowest partition of its tasks), ms, from the top"
            )?;
            for q in self.queries.iter().filter(|q| !q.stages.is_empty()) {
                let stages: Vec<String> = q.stages.iter().map(|(s, ms)| format!("S{s} {ms:.0}")).collect();
                writeln!(f, "{:<6} {}", q.query, stages.join(", "))?;
            }
        }
        for q in self.queries.iter().filter(|q| !q.ok) {
            writeln!(f, "{}: {}", q.query, q.check)?;
        }
        for q in &self.queries {
            if let Some(p) = q.peer.as_ref().filter(|p| !p.ok) {
                writeln!(f, "{} on DuckDB: {}", q.query, p.check)?;
            }
        }
        let total = |side: fn(&QueryReport) -> Option<f64>| -> Option<f64> { self.queries.iter().map(side).sum() };
        writeln!(f)?;
        if let (Some(c), Some(g)) = (total(|q| q.cpu_ms), total(|q| q.gpu_ms)) {
            writeln!(f, "total: CPU {c:.1} ms, GPU {g:.1} ms ({:.2}x)", c / g)?;
        }
        if let Some(g) = self.geomean_speedup {
            writeln!(f, "geometric-mean speedup: {g:.2}x")?;
            if self.slower_than_0_9.is_empty() {
                writeln!(f, "no query slower than 0.9x of the CPU")?;
            } else {
                writeln!(f, "slower than 0.9x of the CPU: {}", self.slower_than_0_9.join(", "))?;
            }
        }
        if let Some(g) = self.geomean_vs_peer {
            let peer_total: f64 = self.queries.iter().filter_map(|q| q.peer.as_ref().and_then(|p| p.ms)).sum();
            let slower: Vec<String> = self
                .queries
                .iter()
                .filter_map(|q| vs_peer(q).filter(|v| *v < 1.0).map(|v| format!("{} {v:.2}x", q.query)))
                .collect();
            writeln!(
                f,
                "vs DuckDB: geometric mean {g:.2}x, DuckDB total {peer_total:.1} ms; slower than DuckDB: {}",
                if slower.is_empty() { "none".to_string() } else { slower.join(", ") }
            )?;
        }
        let failed = self.queries.iter().filter(|q| !q.ok).count();
        writeln!(f, "results: {} of {} queries match the CPU", self.queries.len() - failed, self.queries.len())?;
        if peer {
            let matched = self.queries.iter().filter(|q| q.peer.as_ref().is_some_and(|p| p.ok)).count();
            writeln!(f, "DuckDB's rows match DataFusion's in {matched} of {} queries", self.queries.len())?;
        }
        for p in &self.files {
            writeln!(f, "wrote {}", p.display())?;
        }
        Ok(())
    }
}

/// The host processor's model name from /proc/cpuinfo, where there is one.
fn host_cpu() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 100.0]), Some(3.5));
    }

    #[test]
    fn device_names_shorten_for_file_names() {
        assert_eq!(device_slug(Some("NVIDIA H100 80GB HBM3")), "h100");
        assert_eq!(device_slug(Some("NVIDIA H200")), "h200");
        assert_eq!(device_slug(None), "cpu");
        assert_eq!(today().len(), 10);
    }

    #[tokio::test]
    async fn files_carry_the_label_and_a_cpu_run_writes_json_and_png() {
        let _g = datafusion_gpu::testing::gpu_lock();
        let dir = std::env::temp_dir().join(format!("dfg-runner-{}", std::process::id()));
        let mut o = SuiteBenchOptions::check_only(0.01);
        o.queries = vec!["1.1".into(), "2.1".into()];
        o.iterations = 1;
        o.partitions = 2;
        o.no_save = false;
        o.out = dir.clone();
        o.label = Some("min rows/1M".into());
        // DataFusion's scans: no device tables, so no floors.
        o.gpu_set = vec!["gpu.table_cache=false".into()];
        let report = run(Suite::Ssb, &o, "test").await.unwrap();
        assert!(report.all_ok, "{report}");
        assert_eq!(report.files.len(), 2, "{report}");
        for f in &report.files {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            assert!(name.contains("-ssb-sf0.01-min-rows-1M."), "{name}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report.files[0]).unwrap()).unwrap();
        assert_eq!(json["queries"].as_array().unwrap().len(), 2);
        assert_eq!(json["label"], "min rows/1M");
        assert_eq!(json["host_cpu"].is_string(), host_cpu().is_some());
        // Floors: in the JSON always (null without device tables); in the table when a query has one.
        assert!(json.get("device_copy_gbps").is_some() && json["queries"][0].get("floor_ms").is_some());
        let mut floored = report.clone();
        floored.device_copy_gbps = Some(2800.0);
        floored.queries[0].gpu_ms = Some(10.0);
        floored.queries[0].floor_ms = Some(0.5);
        floored.queries[1].floor_ms = None;
        let text = floored.to_string();
        assert!(text.contains("floor ms") && text.contains("x floor") && text.contains("at the 2800 GB/s"), "{text}");
        let first = text.lines().find(|l| l.starts_with("q1.1")).unwrap_or_default();
        assert!(first.contains("0.500") && first.contains("20x"), "{first}");
        assert!(!report.to_string().contains("x floor"), "{report}");
        // `bench chart` draws a record's chart again from its JSON alone.
        let png = &report.files[1];
        std::fs::remove_file(png).unwrap();
        assert_eq!(&redraw_chart(&report.files[0]).unwrap(), png);
        assert!(std::fs::metadata(png).unwrap().len() > 1000);
        let other = dir.join("other.json");
        std::fs::write(&other, "{\"queries\": []}").unwrap();
        assert!(redraw_chart(&other).unwrap_err().to_string().contains("not a bench tpch|ssb record"));
        std::fs::remove_dir_all(dir).ok();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parquet_tables_are_registered_as_files_and_answers_checked_in_order() {
        let _g = datafusion_gpu::testing::gpu_lock();
        let dir = std::env::temp_dir().join(format!("dfg-runner-parquet-{}", std::process::id()));
        let mut o = SuiteBenchOptions::check_only(0.01);
        o.queries = vec!["1".into(), "3".into(), "11".into()];
        o.iterations = 2;
        o.partitions = 2;
        o.data = Some(dir.clone());
        o.source = Source::Parquet;
        // The files are generated first, then registered; a second run finds them.
        for _ in 0..2 {
            let report = run(Suite::Tpch, &o, "test").await.unwrap();
            assert!(report.all_ok, "{report}");
            assert_eq!(report.source, Source::Parquet);
            assert!(report.data.contains("registered as Parquet tables"), "{}", report.data);
            let lineitem = report.tables.iter().find(|t| t.0 == "lineitem").expect("lineitem");
            assert!(lineitem.1 > 50_000 && lineitem.2 > 0, "{lineitem:?}");
            for q in &report.queries {
                // Every TPC-H query here has an ORDER BY: its rows are checked in order.
                assert_eq!(q.check, "ok, in order", "{}", q.query);
                assert!(q.cpu_first_ms.is_some() && q.gpu_first_ms.is_some(), "{}", q.query);
                assert!(q.gpu_runs_ms.len() == 2 || report.device.is_none(), "{}", q.query);
            }
            if cfg!(target_os = "linux") {
                assert!(report.host_rss_peak_bytes >= report.host_rss_start_bytes, "{report}");
                assert!(report.to_string().contains("host memory (RSS)"), "{report}");
            }
        }
        o.residency = HostMemory::Cached;
        let err = run(Suite::Tpch, &o, "test").await.unwrap_err().to_string();
        assert!(err.contains("--residency pageable"), "{err}");
        o.residency = HostMemory::Pageable;
        o.data = None;
        let err = run(Suite::Tpch, &o, "test").await.unwrap_err().to_string();
        assert!(err.contains("give --data"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }

    /// Cached columns are summed by the stem of the file they came from (its first, for a
    /// table of several), in-memory tables' together as `memory`.
    #[test]
    fn device_columns_are_summed_by_table() {
        let column = |source: &str, bytes: u64, packed: u64, wide: u64| CachedColumnInfo {
            source: source.into(),
            column: "c".into(),
            data_type: datafusion::arrow::datatypes::DataType::Int64,
            rows: 10,
            bytes,
            packed_bytes: packed,
            full_width_bytes: wide,
            encoding: "plain".into(),
            read: false,
        };
        let got = device_columns_by_table(&[
            column("file:///d/tpch-sf1/lineitem.parquet", 10, 10, 40),
            column("/d/tpch-sf1/orders.parquet", 8, 0, 8),
            column("/d/tpch-sf1/lineitem.parquet", 5, 2, 9),
            column("/d/x/part-0.parquet and 3 more files", 1, 1, 2),
            column("memory", 7, 0, 7),
        ]);
        let want = |table: &str, columns, bytes, packed_bytes, full_width_bytes| DeviceColumns {
            table: table.into(),
            columns,
            bytes,
            packed_bytes,
            full_width_bytes,
        };
        assert_eq!(
            got,
            vec![
                want("lineitem", 2, 15, 12, 49),
                want("memory", 1, 7, 0, 7),
                want("orders", 1, 8, 0, 8),
                want("part-0", 1, 1, 1, 2),
            ]
        );
    }

    #[test]
    fn host_rss_reads_the_status_file() {
        let status = "Name:\tbench\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(parse_host_rss(status), Some(HostRss { resident: 1 << 20, peak: 2 << 20 }));
        assert_eq!(parse_host_rss("Name:\tbench\n"), None);
        if cfg!(target_os = "linux") {
            let now = host_rss().expect("/proc/self/status");
            assert!(now.resident > 0 && now.peak >= now.resident, "{now:?}");
        }
    }

    /// Every query of both suites at a small scale: the GPU session (every eligible operator on
    /// the GPU when there is one; all on the CPU otherwise) must return the CPU's rows.
    async fn suite_matches(suite: Suite, sf: f64) {
        let mut o = SuiteBenchOptions::check_only(sf);
        o.partitions = 4;
        o.gpu_min_rows = Some(0);
        o.gpu_set.push("gpu.placement=always".into());
        let report = run(suite, &o, "test").await.unwrap();
        println!("{report}");
        assert_eq!(report.queries.len(), queries::select(suite, &[], sf).unwrap().len());
        for q in &report.queries {
            assert!(q.ok, "{} {}: {}\n{}", suite.title(), q.query, q.check, q.plan);
        }
        let (gpu, all) =
            report.queries.iter().flat_map(|q| &q.operators).fold((0, 0), |(g, a), p| (g + p.on_gpu as usize, a + 1));
        if report.device.is_some() {
            println!("{gpu} of {all} joins and aggregates ran on the GPU");
            assert!(
                report
                    .queries
                    .iter()
                    .flat_map(|q| &q.operators)
                    .any(|p| p.on_gpu && p.kind == datafusion_gpu::exec::placement::OperatorKind::Join),
                "no join ran on the GPU"
            );
        } else {
            assert_eq!(gpu, 0);
            assert!(
                !datafusion_gpu::testing::gpu_required(),
                "{}: {} is set, but no GPU could be used: {}",
                suite.title(),
                datafusion_gpu::testing::REQUIRE_GPU_ENV,
                report.no_gpu.clone().unwrap_or_default()
            );
            eprintln!(
                "SKIPPED the GPU half of {}: no usable GPU: {}",
                suite.title(),
                report.no_gpu.unwrap_or_default()
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tpch_queries_match_the_cpu() {
        let _g = datafusion_gpu::testing::gpu_lock();
        suite_matches(Suite::Tpch, 0.01).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ssb_queries_match_the_cpu() {
        let _g = datafusion_gpu::testing::gpu_lock();
        suite_matches(Suite::Ssb, 0.01).await;
    }
}
