//! The differential fuzzer (`datafusion-gpu fuzz`): random tables and random join, aggregate,
//! filter and subquery queries, each run by DataFusion alone and with the GPU rule forcing every
//! eligible operator onto the GPU (`gpu.cost.min_rows = 0`, `gpu.placement = always`) under a
//! rotating `gpu.memory.limit`. A query whose answers differ, or that fails, panics or hangs only
//! with the rule, is reported with a self-contained repro: the settings, `CREATE TABLE`
//! statements that rebuild the data, and the query.
//!
//! Without a GPU the rule leaves every operator on the CPU, and the run checks only that
//! planning with the rule keeps DataFusion's answers.

pub mod queries;
pub mod tables;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::tpch::compare::compare;
use datafusion_gpu::device::probe;
use datafusion_gpu::exec::metric_total;
use datafusion_gpu::exec::task_stream::panic_message;
use datafusion_gpu::session::{gpu_session_context, with_gpu_options};

/// What `fuzz` runs: the command's options, whose defaults are also [`Default`]'s.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "fuzz")]
pub struct FuzzOptions {
    /// Queries to run.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Seed of the tables and queries (the same seed replays the same run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// gpu.memory.limit values to rotate through, comma-separated.
    #[arg(long, default_value = "auto,1G,64M,8M", value_delimiter = ',')]
    pub memory_limits: Vec<String>,
    /// Rows of the larger tables.
    #[arg(long, default_value_t = 1500)]
    pub max_rows: usize,
    /// Queries over each set of tables before new tables are drawn.
    #[arg(long, default_value_t = 25)]
    pub queries_per_tables: usize,
    /// Seconds a query may run with the GPU rule before it counts as a hang.
    #[arg(long = "timeout", default_value_t = 120)]
    pub timeout_s: u64,
    /// Write each failure's repro to FOLDER/fuzz-<seed>-<query>.sql instead of printing it.
    #[arg(long)]
    pub repro_dir: Option<PathBuf>,
    /// Stop after this many failures (0: run every query).
    #[arg(long, default_value_t = 0)]
    pub max_failures: usize,
    /// Run only query N of this seed's run (its tables and query are drawn as in the whole run),
    /// printing its repro first: replays a failure a longer run reported.
    #[arg(long)]
    pub only: Option<usize>,
    /// A further setting of the session with the rule, KEY=VALUE (repeatable), set after the
    /// fuzzer's own: e.g. gpu.devices=0,0 and gpu.devices_spread_partitions=true spread every
    /// query's GPU partitions over two logical devices of GPU 0.
    #[arg(long = "gpu-set", value_name = "KEY=VALUE")]
    pub gpu_set: Vec<String>,
    /// Show a progress bar (set by the CLI when stderr is a terminal).
    #[arg(skip)]
    pub progress: bool,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        <FuzzOptions as clap::Parser>::parse_from(["fuzz"])
    }
}

/// How a query failed the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Both answered, with different rows.
    Mismatch,
    /// DataFusion answered; the run with the rule returned an error.
    GpuError,
    /// The run with the rule panicked.
    GpuPanic,
    /// The run with the rule did not finish within the timeout.
    GpuHang,
}

/// One failed query, with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub kind: FailureKind,
    /// Index of the query in the run.
    pub index: usize,
    pub sql: String,
    pub memory_limit: String,
    pub detail: String,
    /// Settings, tables and query, runnable in `datafusion-gpu -f`.
    pub repro: String,
}

/// The outcome of a fuzz run.
#[derive(Debug, Clone, Default)]
pub struct FuzzReport {
    pub queries: usize,
    /// Queries both sides answered and whose answers were compared.
    pub compared: usize,
    /// Queries DataFusion itself rejected or failed (not compared; the rule may answer or fail).
    pub cpu_errors: usize,
    /// Queries whose plan with the rule had at least one GPU operator.
    pub on_gpu: usize,
    /// Queries answered by DataFusion's plan after the GPU plan ran out of device memory.
    pub cpu_reruns: usize,
    /// Queries where some operator's work went to DataFusion's operator for want of device memory.
    pub cpu_fallbacks: usize,
    pub failures: Vec<Failure>,
    /// Why no GPU was used, when none was.
    pub no_gpu: Option<String>,
    pub seconds: f64,
}

impl FuzzReport {
    pub fn count(&self, kind: FailureKind) -> usize {
        self.failures.iter().filter(|f| f.kind == kind).count()
    }

    /// The run in one line: seed, counts of each outcome, time.
    pub fn summary(&self, seed: u64) -> String {
        format!(
            "seed {seed}: {} queries, {} compared, {} with GPU operators ({} with an operator's work finished on \
             the CPU, {} run again on the CPU), {} mismatches, {} GPU-only errors, {} panics, {} hangs, {} rejected \
             by DataFusion itself; {:.1} s{}",
            self.queries,
            self.compared,
            self.on_gpu,
            self.cpu_fallbacks,
            self.cpu_reruns,
            self.count(FailureKind::Mismatch),
            self.count(FailureKind::GpuError),
            self.count(FailureKind::GpuPanic),
            self.count(FailureKind::GpuHang),
            self.cpu_errors,
            self.seconds,
            match &self.no_gpu {
                Some(why) => format!("; no GPU: {why}"),
                None => String::new(),
            }
        )
    }

    /// The closing line, as test runners count: `fuzz: N passed, N failed`.
    pub fn closing_line(&self) -> String {
        let failed = self.failures.len();
        format!("fuzz: {} passed, {failed} failed", self.queries - failed)
    }
}

/// Session settings both sides share, drawn per table set.
#[derive(Debug, Clone, Copy)]
struct Shape {
    partitions: usize,
    batch_size: usize,
    gpu_batch_rows: usize,
}

fn contexts(shape: Shape) -> (SessionContext, SessionContext) {
    let config = || {
        SessionConfig::new()
            .with_target_partitions(shape.partitions)
            .with_batch_size(shape.batch_size)
            .with_information_schema(false)
    };
    (SessionContext::new_with_config(config()), gpu_session_context(with_gpu_options(config())))
}

fn register(ctx: &SessionContext, t: &tables::Table, partitions: usize) -> Result<()> {
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions.max(1)];
    let n = parts.len();
    for (i, b) in t.batches.iter().enumerate() {
        parts[i % n].push(b.clone());
    }
    ctx.register_table(&t.name, Arc::new(MemTable::try_new(Arc::clone(&t.schema), parts)?))?;
    Ok(())
}

async fn set(ctx: &SessionContext, sql: &str) -> Result<()> {
    ctx.sql(sql).await?.collect().await.map(|_| ())
}

/// The GPU session's settings for one query, as SQL: the fuzzer's, then `extra` (`KEY=VALUE`).
fn gpu_settings(shape: Shape, memory_limit: &str, extra: &[String]) -> Vec<String> {
    let mut sql = vec![
        "SET gpu.cost.min_rows = 0".to_string(),
        "SET gpu.placement = 'always'".to_string(),
        format!("SET gpu.batch_rows = {}", shape.gpu_batch_rows),
        format!("SET gpu.join.window_rows = {}", shape.gpu_batch_rows),
        format!("SET gpu.memory.limit = '{memory_limit}'"),
    ];
    for s in extra {
        if let Some((key, value)) = s.split_once('=') {
            sql.push(format!("SET {} = '{}'", key.trim(), value.trim().replace('\'', "''")));
        }
    }
    sql
}

/// How a query ran with the rule: whether its plan had a GPU operator, whether DataFusion's
/// operators finished some of the work, whether DataFusion's plan ran it again.
#[derive(Debug, Clone, Copy, Default)]
struct Ran {
    on_gpu: bool,
    fallbacks: bool,
    rerun: bool,
}

/// Plans and runs `sql`: its rows, and how it ran.
async fn answer(ctx: &SessionContext, sql: &str) -> Result<(Vec<RecordBatch>, Ran)> {
    let df = ctx.sql(sql).await?;
    let plan = df.create_physical_plan().await?;
    let on_gpu = displayable(plan.as_ref()).indent(false).to_string().contains("Gpu");
    let rows = collect(Arc::clone(&plan), ctx.task_ctx()).await?;
    let ran = Ran {
        on_gpu,
        fallbacks: metric_total(&plan, None, "cpu_fallbacks") > 0,
        rerun: metric_total(&plan, None, "cpu_reruns") > 0,
    };
    Ok((rows, ran))
}

enum GpuOutcome {
    Answer(Vec<RecordBatch>, Ran),
    Error(DataFusionError),
    Panic(String),
    Hang,
}

/// `sql` with the rule, in a task of its own (a panic is reported, not propagated), within `timeout`.
async fn gpu_answer(ctx: &SessionContext, sql: &str, timeout: Duration) -> GpuOutcome {
    let (ctx, sql) = (ctx.clone(), sql.to_string());
    let task = tokio::spawn(async move { answer(&ctx, &sql).await });
    let abort = task.abort_handle();
    match tokio::time::timeout(timeout, task).await {
        Err(_) => {
            abort.abort();
            GpuOutcome::Hang
        }
        Ok(Err(e)) if e.is_panic() => GpuOutcome::Panic(panic_message(e.into_panic().as_ref())),
        Ok(Err(e)) => GpuOutcome::Error(DataFusionError::Execution(format!("the query task ended: {e}"))),
        Ok(Ok(Err(e))) => GpuOutcome::Error(e),
        Ok(Ok(Ok((rows, ran)))) => GpuOutcome::Answer(rows, ran),
    }
}

fn repro(
    opts: &FuzzOptions,
    index: usize,
    shape: Shape,
    memory_limit: &str,
    tables: &[tables::Table],
    sql: &str,
) -> Result<String> {
    let mut r =
        format!("-- datafusion-gpu fuzz --seed {} : query {index} (replay: datafusion-gpu -f THIS_FILE)\n", opts.seed);
    let _ = writeln!(r, "SET datafusion.execution.target_partitions = {};", shape.partitions);
    let _ = writeln!(r, "SET datafusion.execution.batch_size = {};", shape.batch_size);
    for s in gpu_settings(shape, memory_limit, &opts.gpu_set) {
        let _ = writeln!(r, "{s};");
    }
    for t in tables {
        let _ = writeln!(r, "{}", t.create_sql()?);
    }
    let _ = writeln!(r, "{sql};");
    Ok(r)
}

/// Runs the fuzzer. Failures are printed as they are found (with their repro, or the path of
/// its file); the report holds them all.
pub async fn run(opts: &FuzzOptions) -> Result<FuzzReport> {
    let start = Instant::now();
    if let Some(bad) = opts.gpu_set.iter().find(|s| !s.contains('=')) {
        return Err(DataFusionError::Configuration(format!("--gpu-set takes KEY=VALUE, not '{bad}'")));
    }
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut report = FuzzReport { no_gpu: probe::device_count().err().map(|e| e.reason), ..Default::default() };
    if let Some(dir) = &opts.repro_dir {
        std::fs::create_dir_all(dir)?;
    }
    // With --only N, the run draws queries 0..=N and runs the last.
    let queries = opts.only.map_or(opts.queries, |n| n + 1);
    let bar = match opts.progress {
        true => indicatif::ProgressBar::new(queries as u64),
        false => indicatif::ProgressBar::hidden(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("fuzz {bar:40} {pos}/{len} queries, {msg} [{elapsed_precise}]")
            .map_err(|e| DataFusionError::Execution(e.to_string()))?,
    );
    let limits = match opts.memory_limits.is_empty() {
        true => vec!["auto".to_string()],
        false => opts.memory_limits.clone(),
    };
    let timeout = Duration::from_secs(opts.timeout_s.max(1));
    let mut index = 0usize;
    while index < queries {
        let shape = Shape {
            partitions: rng.random_range(1..=4),
            batch_size: [7usize, 64, 1000, 8192][rng.random_range(0..4)],
            gpu_batch_rows: [100usize, 1000, 1 << 20][rng.random_range(0..3)],
        };
        let key_domain = [4i64, 50, 1000][rng.random_range(0..3)];
        let tables = (0..3)
            .map(|i| tables::random_table(&mut rng, &format!("t{i}"), opts.max_rows, key_domain, shape.batch_size))
            .collect::<Result<Vec<_>>>()?;
        let (cpu, gpu) = contexts(shape);
        for t in &tables {
            register(&cpu, t, shape.partitions)?;
            register(&gpu, t, shape.partitions)?;
        }
        for _ in 0..opts.queries_per_tables.max(1) {
            if index >= queries {
                break;
            }
            let sql = queries::query(&mut rng, &tables);
            let memory_limit = &limits[index % limits.len()];
            index += 1;
            bar.inc(1);
            match opts.only {
                Some(n) if n != index - 1 => continue,
                Some(_) => println!("{}", repro(opts, index - 1, shape, memory_limit, &tables, &sql)?),
                None => {}
            }
            report.queries += 1;
            let expected = match answer(&cpu, &sql).await {
                Ok((rows, _)) => rows,
                Err(e) => {
                    log::debug!("DataFusion rejects fuzz query {}: {sql}: {e}", index - 1);
                    report.cpu_errors += 1;
                    continue;
                }
            };
            for s in gpu_settings(shape, memory_limit, &opts.gpu_set) {
                set(&gpu, &s).await?;
            }
            let (kind, detail) = match gpu_answer(&gpu, &sql, timeout).await {
                GpuOutcome::Answer(rows, ran) => {
                    report.compared += 1;
                    report.on_gpu += ran.on_gpu as usize;
                    report.cpu_fallbacks += ran.fallbacks as usize;
                    report.cpu_reruns += ran.rerun as usize;
                    match compare(&expected, &rows) {
                        Ok(()) => continue,
                        Err(diff) => (FailureKind::Mismatch, diff),
                    }
                }
                GpuOutcome::Error(e) => (FailureKind::GpuError, e.to_string()),
                GpuOutcome::Panic(m) => (FailureKind::GpuPanic, m),
                GpuOutcome::Hang => (FailureKind::GpuHang, format!("no answer within {} s", timeout.as_secs())),
            };
            let text = repro(opts, index - 1, shape, memory_limit, &tables, &sql)?;
            let failure = Failure {
                kind,
                index: index - 1,
                sql: sql.clone(),
                memory_limit: memory_limit.clone(),
                detail: detail.clone(),
                repro: text.clone(),
            };
            let where_ = match &opts.repro_dir {
                Some(dir) => {
                    let path = dir.join(format!("fuzz-{}-{}.sql", opts.seed, index - 1));
                    std::fs::write(&path, &text)?;
                    format!("repro: {}", path.display())
                }
                None => format!("repro:\n{text}"),
            };
            bar.suspend(|| {
                println!(
                    "FAILED query {} ({kind:?}, gpu.memory.limit = {memory_limit}): {sql}\n  {}\n  {where_}",
                    index - 1,
                    detail.lines().take(6).collect::<Vec<_>>().join("\n  ")
                )
            });
            report.failures.push(failure);
            bar.set_message(format!("{} failed", report.failures.len()));
            if opts.max_failures > 0 && report.failures.len() >= opts.max_failures {
                index = queries;
                break;
            }
        }
    }
    bar.finish_and_clear();
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short fuzz run (60 queries over small tables, `gpu_set` added to the rule's session)
    /// with fresh tables and queries, seeded for `test`: no query may differ from DataFusion or
    /// fail only with the rule.
    async fn short_run_matches_the_cpu(test: &str, gpu_set: &[&str]) {
        let _g = datafusion_gpu::testing::gpu_lock();
        let seed = datafusion_gpu::testing::fresh_seed(test);
        let gpu_set = gpu_set.iter().map(|s| s.to_string()).collect();
        let opts =
            FuzzOptions { queries: 60, seed, max_rows: 300, queries_per_tables: 20, gpu_set, ..Default::default() };
        let report = run(&opts).await.expect("the fuzzer runs");
        println!("{}\n{}", report.summary(seed), report.closing_line());
        if probe::device_count().is_ok() {
            assert!(report.on_gpu > 0, "no query ran a GPU operator: {}", report.summary(seed));
        }
        let failures: Vec<String> =
            report.failures.iter().map(|f| format!("{:?}: {}\n{}\n{}", f.kind, f.sql, f.detail, f.repro)).collect();
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
        assert!(report.compared > report.queries / 2, "{}", report.summary(seed));
    }

    /// On a GPU machine the operators run there; without one this checks the rule's planning.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fuzz_queries_match_the_cpu() {
        short_run_matches_the_cpu("fuzz_queries_match_the_cpu", &[]).await;
    }

    /// Over two logical devices of GPU 0 (`gpu.devices = '0,0'`) with
    /// `gpu.devices_spread_partitions` on: every GPU operator's partitions spread over both,
    /// batches copied between them where a consumer runs on the other (a CollectLeft join's
    /// probes, an aggregate exchange's states).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fuzz_queries_match_the_cpu_with_partitions_on_two_devices() {
        let settings = ["gpu.devices=0,0", "gpu.devices_spread_partitions=true"];
        short_run_matches_the_cpu("fuzz_queries_match_the_cpu_with_partitions_on_two_devices", &settings).await;
    }

    /// `--only N` draws the run's tables and queries up to N and runs query N alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_runs_one_query_of_the_run() {
        let _g = datafusion_gpu::testing::gpu_lock();
        let seed = datafusion_gpu::testing::fresh_seed("only_runs_one_query_of_the_run");
        let opts =
            FuzzOptions { queries: 3, seed, max_rows: 50, queries_per_tables: 4, only: Some(6), ..Default::default() };
        let report = run(&opts).await.expect("the fuzzer runs");
        assert_eq!(report.queries, 1, "{}", report.summary(seed));
        assert_eq!(report.compared + report.cpu_errors, 1, "{}", report.summary(seed));
        assert!(report.failures.is_empty(), "{:?}", report.failures);
    }

    /// A table's repro SQL rebuilds it in DataFusion with the same types and rows: NULLs, NaN,
    /// -0.0, quotes, dictionaries, decimals, dates and timestamps, and empty tables.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repro_sql_rebuilds_the_tables() {
        let seed = datafusion_gpu::testing::fresh_seed("repro_sql_rebuilds_the_tables");
        let mut rng = StdRng::seed_from_u64(seed);
        for i in 0..6 {
            let t = tables::random_table(&mut rng, &format!("t{i}"), 40, 10, 16).expect("a table");
            let ctx = SessionContext::new();
            ctx.sql(&t.create_sql().expect("sql")).await.expect("plans").collect().await.expect("creates");
            let got = ctx.sql(&format!("SELECT * FROM t{i}")).await.expect("plans").collect().await.expect("reads");
            let types: Vec<_> = t.schema.fields().iter().map(|f| f.data_type().clone()).collect();
            if let Some(b) = got.first() {
                let got_types: Vec<_> = b.schema().fields().iter().map(|f| f.data_type().clone()).collect();
                assert_eq!(types, got_types, "seed {seed}");
            }
            compare(&t.batches, &got).unwrap_or_else(|e| panic!("seed {seed}, table {i}: {e}"));
        }
    }
}
