//! The differential fuzzer (`datafusion-gpu fuzz`): random tables and random queries and writes,
//! each run by DataFusion alone and with the GPU rule forcing every eligible operator onto the
//! GPU (`gpu.cost.min_rows = 0`, `gpu.placement = always`) under a rotating `gpu.memory.limit`.
//! A query whose answers differ (in order where its ORDER BY fixes one), that fails, panics or
//! hangs only with the rule, or that the rule answers where DataFusion fails, is reported with a
//! self-contained repro: the settings, `CREATE TABLE` statements that rebuild the data, the
//! writes run since, and the query.
//!
//! Each set of tables is read by the rule's session in one of three ways: as in-memory tables,
//! through the device's table cache (`gpu.table_cache`, its batch size drawn, in one-partition
//! regions or not), or replaced by `gpu_cache('t')`; some sets run over two logical devices of
//! GPU 0, some hold a table of over a million rows (queried alone, some queries handing out more
//! rows than the rule's root holds back). Between queries, writes (`INSERT ... SELECT`, `DELETE`,
//! `UPDATE`) and `DROP TABLE` with the table made again change the tables on both sides; some
//! queries run in two sessions of the rule at once.
//!
//! Without a GPU the rule leaves every operator on the CPU, and the run checks only that
//! planning with the rule keeps DataFusion's answers.

pub mod queries;
pub mod tables;

use std::collections::BTreeMap;
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

use crate::tpch::compare::{compare, compare_in_order};
use datafusion_gpu::device::probe;
use datafusion_gpu::exec::metric_total;
use datafusion_gpu::exec::task_stream::panic_message;
use datafusion_gpu::session::{gpu_session_context, with_gpu_options};

/// What `fuzz` runs: the command's options, whose defaults are also [`Default`]'s.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "fuzz")]
pub struct FuzzOptions {
    /// Queries to run (writes between them not counted).
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
    /// Rows of the large table some sets of tables hold (0: none).
    #[arg(long, default_value_t = 1_200_000)]
    pub large_rows: usize,
    /// Share of the sets of tables that hold the large table.
    #[arg(long, default_value_t = 0.05)]
    pub large_share: f64,
    /// Queries over each set of tables before new tables are drawn.
    #[arg(long, default_value_t = 25)]
    pub queries_per_tables: usize,
    /// Seconds a query may run with the GPU rule before it counts as a hang (or four times
    /// DataFusion's own time for it, where that is longer).
    #[arg(long = "timeout", default_value_t = 120)]
    pub timeout_s: u64,
    /// Write each failure's repro to FOLDER/fuzz-<seed>-<query>.sql instead of printing it.
    #[arg(long)]
    pub repro_dir: Option<PathBuf>,
    /// Stop after this many failures (0: run every query).
    #[arg(long, default_value_t = 0)]
    pub max_failures: usize,
    /// Run only query N of this seed's run (its tables, writes and query are drawn and the
    /// writes run as in the whole run), printing its repro first: replays a failure a longer run
    /// reported.
    #[arg(long)]
    pub only: Option<usize>,
    /// A further setting of the session with the rule, KEY=VALUE (repeatable), set after the
    /// fuzzer's own: e.g. gpu.devices=0,0 and gpu.devices_spread_partitions=true spread every
    /// query's GPU partitions over two logical devices of GPU 0.
    #[arg(long = "gpu-set", value_name = "KEY=VALUE")]
    pub gpu_set: Vec<String>,
    /// Stop drawing queries after this many seconds (0: none); the report counts those run.
    #[arg(long, default_value_t = 0)]
    pub time_limit: u64,
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
    /// DataFusion failed; the run with the rule answered.
    GpuAnswer,
    /// DataFusion answered; the run with the rule returned an error.
    GpuError,
    /// The run with the rule panicked.
    GpuPanic,
    /// The run with the rule did not finish within the timeout (or four times DataFusion's time).
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
    /// Settings, tables, writes and query, runnable in `datafusion-gpu -f`.
    pub repro: String,
}

/// The outcome of a fuzz run.
#[derive(Debug, Clone, Default)]
pub struct FuzzReport {
    pub queries: usize,
    /// Queries both sides answered and whose answers were compared.
    pub compared: usize,
    /// Queries DataFusion itself rejected or failed, and the rule did too.
    pub cpu_errors: usize,
    /// Queries DataFusion failed over the reference's tables but answered over the rule
    /// session's own (with the rule off): whether it fails depends on how its tables are laid
    /// out. The rule's answer is compared with that answer.
    pub layout_dependent: usize,
    /// Writes run on both sides between queries (each compared as a query is).
    pub writes: usize,
    /// Queries whose plan with the rule had at least one GPU operator.
    pub on_gpu: usize,
    /// Queries answered by DataFusion's plan after the GPU plan ran out of device memory or a
    /// GPU expression failed.
    pub cpu_reruns: usize,
    /// Queries where some operator's work went to DataFusion's operator for want of device memory.
    pub cpu_fallbacks: usize,
    /// Queries (writes included) per feature they exercise, for the record.
    pub features: BTreeMap<&'static str, usize>,
    pub failures: Vec<Failure>,
    /// Why no GPU was used, when none was.
    pub no_gpu: Option<String>,
    pub seconds: f64,
}

impl FuzzReport {
    pub fn count(&self, kind: FailureKind) -> usize {
        self.failures.iter().filter(|f| f.kind == kind).count()
    }

    /// The run in a few lines: seed, counts of each outcome, time, and the features covered.
    pub fn summary(&self, seed: u64) -> String {
        let features: Vec<String> = self.features.iter().map(|(f, n)| format!("{f} {n}")).collect();
        format!(
            "seed {seed}: {} queries and {} writes, {} compared, {} with GPU operators ({} with an operator's work \
             finished on the CPU, {} run again on the CPU), {} mismatches, {} answered where DataFusion fails, {} \
             GPU-only errors, {} panics, {} hangs, {} rejected by DataFusion and the rule alike, {} failed by DataFusion \
             only over the reference's table layout; {:.1} s{}\n\
             features: {}",
            self.queries,
            self.writes,
            self.compared,
            self.on_gpu,
            self.cpu_fallbacks,
            self.cpu_reruns,
            self.count(FailureKind::Mismatch),
            self.count(FailureKind::GpuAnswer),
            self.count(FailureKind::GpuError),
            self.count(FailureKind::GpuPanic),
            self.count(FailureKind::GpuHang),
            self.cpu_errors,
            self.layout_dependent,
            self.seconds,
            match &self.no_gpu {
                Some(why) => format!("; no GPU: {why}"),
                None => String::new(),
            },
            features.join(", ")
        )
    }

    /// The closing line, as test runners count: `fuzz: N passed, N failed`.
    pub fn closing_line(&self) -> String {
        // A query run by two sessions at once may fail in both: it counts once.
        let failed = self.failures.iter().map(|f| (f.index, &f.sql)).collect::<std::collections::BTreeSet<_>>().len();
        format!("fuzz: {} passed, {failed} failed", (self.queries + self.writes).saturating_sub(failed))
    }

    fn saw(&mut self, feature: &'static str) {
        *self.features.entry(feature).or_default() += 1;
    }
}

/// The features a statement exercises, read off its text (for the record's coverage).
fn features_of(sql: &str) -> Vec<&'static str> {
    let s = sql.to_ascii_uppercase();
    let checks: [(&'static str, bool); 22] = [
        ("join", s.contains(" JOIN ")),
        ("group by", s.contains("GROUP BY")),
        ("having", s.contains("HAVING")),
        ("order by", s.contains("ORDER BY") && !s.contains(" OVER (")),
        ("limit", s.contains(" LIMIT ")),
        ("offset", s.contains(" OFFSET ")),
        ("distinct", s.contains("SELECT DISTINCT")),
        ("count distinct", s.contains("COUNT(DISTINCT")),
        ("union", s.contains(" UNION ")),
        ("window", s.contains(" OVER (")),
        ("cte", s.starts_with("WITH ")),
        ("subquery", s.contains("(SELECT ")),
        ("case with a base", s.match_indices("CASE ").any(|(i, _)| !s[i + 5..].starts_with("WHEN"))),
        ("case", s.contains("CASE WHEN")),
        ("cast", s.contains("CAST(")),
        ("try_cast", s.contains("TRY_CAST(")),
        ("substr", s.contains("SUBSTR")),
        ("date_part", s.contains("DATE_PART(") || s.contains("EXTRACT(")),
        ("like with _", (s.contains(" LIKE '") || s.contains(" ILIKE '")) && s.contains('_')),
        ("ilike", s.contains(" ILIKE ")),
        ("insert", s.starts_with("INSERT ")),
        ("delete or update", s.starts_with("DELETE ") || s.starts_with("UPDATE ")),
    ];
    checks.into_iter().filter(|(_, on)| *on).map(|(f, _)| f).collect()
}

/// How the rule's session holds a set of tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// In-memory tables, read by DataFusion's scans.
    Memory,
    /// In-memory tables through the device's table cache (`gpu.table_cache = true`).
    TableCache,
    /// The tables written as Parquet files (one a partition), read by both sessions as external
    /// tables, the rule's through the table cache.
    Parquet,
    /// Each table replaced by `gpu_cache('t')`.
    GpuCache,
}

/// Session settings both sides share, and how the rule's session holds the tables, drawn per
/// table set.
#[derive(Debug, Clone)]
struct Shape {
    partitions: usize,
    batch_size: usize,
    gpu_batch_rows: usize,
    storage: Storage,
    /// Settings of the rule's session for this set, as `SET` statements.
    settings: Vec<String>,
}

impl Shape {
    fn draw(rng: &mut StdRng) -> Shape {
        let storage = match rng.random_range(0..10) {
            0..=2 => Storage::Memory,
            3..=4 => Storage::TableCache,
            5..=6 => Storage::Parquet,
            _ => Storage::GpuCache,
        };
        // (The table cache is on by default: the Memory arm turns it off.)
        let cached = matches!(storage, Storage::TableCache | Storage::Parquet);
        let mut settings = vec![format!("SET gpu.table_cache = {cached}")];
        if storage != Storage::Memory {
            let rows = [100usize, 1000, 1 << 26][rng.random_range(0..3)];
            settings.push(format!("SET gpu.table_cache.batch_rows = {rows}"));
            settings.push(format!("SET gpu.table_cache.one_partition = {}", rng.random_bool(0.7)));
        }
        if rng.random_bool(0.1) {
            settings.push("SET gpu.devices = '0,0'".to_string());
            settings.push(format!("SET gpu.devices_spread_partitions = {}", rng.random_bool(0.5)));
        }
        Shape {
            partitions: rng.random_range(1..=4),
            batch_size: [7usize, 64, 1000, 8192][rng.random_range(0..4)],
            gpu_batch_rows: [100usize, 1000, 1 << 20][rng.random_range(0..3)],
            storage,
            settings,
        }
    }

    fn config(&self) -> SessionConfig {
        SessionConfig::new()
            .with_target_partitions(self.partitions)
            .with_batch_size(self.batch_size)
            .with_information_schema(false)
    }
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

/// `t` registered in the rule's session as `shape` holds it.
async fn register_gpu(ctx: &SessionContext, t: &tables::Table, shape: &Shape) -> Result<()> {
    register(ctx, t, shape.partitions)?;
    if shape.storage == Storage::GpuCache {
        set(ctx, &gpu_cache_sql(&t.name)).await?;
    }
    Ok(())
}

/// The Parquet files of a table set (`Storage::Parquet`), removed when dropped.
struct ParquetFiles {
    dir: std::path::PathBuf,
}

impl Drop for ParquetFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl ParquetFiles {
    /// Writes each of `tables` as `partitions` Parquet files (its batches dealt round), under a
    /// fresh directory named for `seed` and the set's first query `index`.
    fn write(tables: &[tables::Table], partitions: usize, seed: u64, index: usize) -> Result<ParquetFiles> {
        use datafusion::parquet::arrow::ArrowWriter;
        let dir = std::env::temp_dir().join(format!("dfg-fuzz-{}-{seed}-{index}", std::process::id()));
        let files = ParquetFiles { dir };
        let io = |e: std::io::Error| DataFusionError::Execution(format!("writing the fuzzer's Parquet files: {e}"));
        for t in tables {
            let table_dir = files.dir.join(&t.name);
            std::fs::create_dir_all(&table_dir).map_err(io)?;
            let n = partitions.max(1);
            for p in 0..n {
                let file = std::fs::File::create(table_dir.join(format!("part-{p}.parquet"))).map_err(io)?;
                let mut w = ArrowWriter::try_new(file, Arc::clone(&t.schema), None)?;
                for b in t.batches.iter().skip(p).step_by(n) {
                    w.write(b)?;
                }
                w.close()?;
            }
        }
        Ok(files)
    }

    /// Where table `name`'s files lie, as a table location.
    fn location(&self, name: &str) -> String {
        format!("{}/", self.dir.join(name).display())
    }
}

/// Registers `name` in `ctx` as an external table over `location`'s Parquet files.
async fn register_parquet(ctx: &SessionContext, name: &str, location: &str) -> Result<()> {
    set(ctx, &format!("CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{location}'")).await
}

fn gpu_cache_sql(table: &str) -> String {
    format!("SELECT * FROM gpu_cache('{table}')")
}

async fn set(ctx: &SessionContext, sql: &str) -> Result<()> {
    ctx.sql(sql).await?.collect().await.map(|_| ())
}

/// The GPU session's settings for one query, as SQL: the fuzzer's, the table set's, then
/// `extra` (`KEY=VALUE`).
fn gpu_settings(shape: &Shape, memory_limit: &str, extra: &[String]) -> Vec<String> {
    let mut sql = vec![
        "SET gpu.cost.min_rows = 0".to_string(),
        "SET gpu.placement = 'always'".to_string(),
        format!("SET gpu.batch_rows = {}", shape.gpu_batch_rows),
        format!("SET gpu.join.window_rows = {}", shape.gpu_batch_rows),
        format!("SET gpu.memory.limit = '{memory_limit}'"),
    ];
    sql.extend(shape.settings.iter().cloned());
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

/// DataFusion's answer to `sql`, and how long the rule's run of it may take before it counts as
/// a hang: `timeout`, or four times DataFusion's own time where that is longer (a query that
/// is slow on the CPU too is no hang of the GPU's).
async fn timed_answer(ctx: &SessionContext, sql: &str, timeout: Duration) -> (Result<Vec<RecordBatch>>, Duration) {
    let start = Instant::now();
    let expected = answer(ctx, sql).await.map(|(rows, _)| rows);
    (expected, timeout.max(start.elapsed() * 4))
}

/// Where DataFusion failed `sql` over the reference's tables and the rule answered: DataFusion's
/// answer over the rule session's own tables, with the rule off. Which rows an expression is
/// evaluated on (a join's probe side behind an empty build side, a short circuit per batch)
/// depends on how the tables are partitioned and batched, and a `gpu_cache` table is laid out
/// otherwise than the reference's in-memory table.
async fn own_tables_answer(gpu: &SessionContext, sql: &str) -> Result<Option<Vec<RecordBatch>>> {
    set(gpu, "SET gpu.enable = false").await?;
    let own = answer(gpu, sql).await;
    set(gpu, "SET gpu.enable = true").await?;
    Ok(own.ok().map(|(rows, _)| rows))
}

/// The answer the rule's is judged against: DataFusion's over the reference's tables, or, where
/// that failed and the rule `answered`, DataFusion's over the rule session's own tables when it
/// answers there (counted as layout-dependent).
async fn reference_for(
    gpu: &SessionContext,
    sql: &str,
    expected: Result<Vec<RecordBatch>>,
    answered: bool,
    report: &mut FuzzReport,
) -> Result<Result<Vec<RecordBatch>>> {
    if expected.is_err()
        && answered
        && let Some(rows) = own_tables_answer(gpu, sql).await?
    {
        report.layout_dependent += 1;
        return Ok(Ok(rows));
    }
    Ok(expected)
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

/// Rows of a table past which its repro does not spell it out (`--only` replays it instead).
const REPRO_ROWS: usize = 20_000;

/// What a repro holds: the run's settings, the tables as first made, what was run since.
struct Script<'a> {
    opts: &'a FuzzOptions,
    shape: &'a Shape,
    tables: &'a [tables::Table],
    /// The writes and `DROP TABLE`s run on this set of tables so far, as SQL.
    history: &'a [String],
}

impl Script<'_> {
    fn repro(&self, index: usize, memory_limit: &str, sql: &str) -> Result<String> {
        let opts = self.opts;
        let mut r = format!(
            "-- datafusion-gpu fuzz --seed {} --only {index} (replay this file with datafusion-gpu -f THIS_FILE)\n",
            opts.seed
        );
        let _ = writeln!(r, "SET datafusion.execution.target_partitions = {};", self.shape.partitions);
        let _ = writeln!(r, "SET datafusion.execution.batch_size = {};", self.shape.batch_size);
        for s in gpu_settings(self.shape, memory_limit, &opts.gpu_set) {
            let _ = writeln!(r, "{s};");
        }
        for t in self.tables {
            let _ = writeln!(r, "{}", self.create(t)?);
        }
        for h in self.history {
            let _ = writeln!(r, "{h};");
        }
        let _ = writeln!(r, "{sql};");
        Ok(r)
    }

    /// The statements that make `t` as the rule's session has it.
    fn create(&self, t: &tables::Table) -> Result<String> {
        if t.rows() > REPRO_ROWS {
            return Ok(format!(
                "-- {}: {} rows, too many to spell out: `datafusion-gpu fuzz --seed {} --only N` replays the run",
                t.name,
                t.rows(),
                self.opts.seed
            ));
        }
        let mut sql = t.create_sql()?;
        if self.shape.storage == Storage::GpuCache {
            let _ = write!(sql, "\n{};", gpu_cache_sql(&t.name));
        }
        if self.shape.storage == Storage::Parquet {
            // The same rows through Parquet files, as the run read them.
            let dir = std::env::temp_dir().join(format!("dfg-fuzz-repro-{}-{}", self.opts.seed, t.name));
            let location = format!("{}/", dir.display());
            let _ = write!(
                sql,
                "\nCOPY {name} TO '{location}' STORED AS PARQUET;\nDROP TABLE {name};\nCREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{location}';",
                name = t.name
            );
        }
        Ok(sql)
    }
}

/// What one statement gave on each side, compared.
enum Verdict {
    /// The same answer; how the rule ran it.
    Same(Ran),
    /// Both failed.
    BothFailed,
    Fail(FailureKind, String),
}

/// Compares the rule's outcome with DataFusion's `expected` (rows, or its error).
fn judge(expected: &Result<Vec<RecordBatch>>, got: GpuOutcome, ordered: bool) -> Verdict {
    match (expected, got) {
        (Ok(want), GpuOutcome::Answer(rows, ran)) => {
            let same = match ordered {
                true => compare_in_order(want, &rows),
                false => compare(want, &rows),
            };
            match same {
                Ok(()) => Verdict::Same(ran),
                Err(diff) => Verdict::Fail(FailureKind::Mismatch, diff),
            }
        }
        (Err(e), GpuOutcome::Answer(rows, _)) => {
            let n: usize = rows.iter().map(RecordBatch::num_rows).sum();
            Verdict::Fail(FailureKind::GpuAnswer, format!("DataFusion fails ({e}); the rule answered {n} rows"))
        }
        (Err(_), GpuOutcome::Error(_)) => Verdict::BothFailed,
        (Ok(_), GpuOutcome::Error(e)) => Verdict::Fail(FailureKind::GpuError, e.to_string()),
        (_, GpuOutcome::Panic(m)) => Verdict::Fail(FailureKind::GpuPanic, m),
        (_, GpuOutcome::Hang) => Verdict::Fail(FailureKind::GpuHang, "no answer within the timeout".into()),
    }
}

impl FuzzReport {
    /// Counts a query's verdict in its session (the first, when it ran in two).
    fn count_query(&mut self, v: &Verdict) {
        match v {
            Verdict::Same(ran) => {
                self.compared += 1;
                self.on_gpu += ran.on_gpu as usize;
                self.cpu_fallbacks += ran.fallbacks as usize;
                self.cpu_reruns += ran.rerun as usize;
            }
            Verdict::BothFailed => self.cpu_errors += 1,
            Verdict::Fail(..) => {}
        }
    }
}

/// Records a failed statement: printed with its repro (or the repro's file), and in the report.
fn record_failure(
    opts: &FuzzOptions,
    script: &Script<'_>,
    report: &mut FuzzReport,
    bar: &indicatif::ProgressBar,
    (index, memory_limit, sql): (usize, &str, &str),
    (kind, detail): (FailureKind, String),
) -> Result<()> {
    let text = script.repro(index, memory_limit, sql)?;
    let where_ = match &opts.repro_dir {
        Some(dir) => {
            let path = dir.join(format!("fuzz-{}-{index}.sql", opts.seed));
            std::fs::write(&path, &text)?;
            format!("repro: {}", path.display())
        }
        None => format!("repro:\n{text}"),
    };
    bar.suspend(|| {
        println!(
            "FAILED query {index} ({kind:?}, gpu.memory.limit = {memory_limit}): {sql}\n  {}\n  {where_}",
            detail.lines().take(6).collect::<Vec<_>>().join("\n  ")
        )
    });
    report.failures.push(Failure {
        kind,
        index,
        sql: sql.to_string(),
        memory_limit: memory_limit.to_string(),
        detail,
        repro: text,
    });
    bar.set_message(format!("{} failed", report.failures.len()));
    Ok(())
}

/// The tables of one set: three small ones, and sometimes the large one (`t3`, its keys from a
/// wide domain, queried alone).
fn draw_tables(rng: &mut StdRng, opts: &FuzzOptions, shape: &mut Shape) -> Result<Vec<tables::Table>> {
    let key_domain = [4i64, 50, 1000][rng.random_range(0..3)];
    let mut out = (0..3)
        .map(|i| tables::random_table(rng, &format!("t{i}"), opts.max_rows, key_domain, shape.batch_size))
        .collect::<Result<Vec<_>>>()?;
    if opts.large_rows > 0 && rng.random_bool(opts.large_share.clamp(0.0, 1.0)) {
        let n = opts.large_rows;
        out.push(tables::table_of_rows(rng, "t3", n, (n as i64 / 2).max(1), shape.batch_size.max(1000))?);
        // Windows of a few hundred rows over a million rows are thousands of kernel chains a
        // query, and DataFusion's own operators take minutes over batches of 7 rows: the large
        // table's sets read device batches of at least 64 K rows and batches of at least 1000.
        shape.gpu_batch_rows = shape.gpu_batch_rows.max(1 << 16);
        shape.batch_size = shape.batch_size.max(1000);
    }
    Ok(out)
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
    // With --only N, the run draws queries 0..=N (running the writes between them) and runs the last.
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
        let mut shape = Shape::draw(&mut rng);
        let tables = draw_tables(&mut rng, opts, &mut shape)?;
        let cpu = SessionContext::new_with_config(shape.config());
        let gpu = gpu_session_context(with_gpu_options(shape.config()));
        // The first settings, so that gpu_cache() makes its tables under the set's.
        for s in gpu_settings(&shape, &limits[index % limits.len()], &opts.gpu_set) {
            set(&gpu, &s).await?;
        }
        // Parquet files both sessions read; in-memory tables where a type cannot be written.
        let mut parquet = None;
        if shape.storage == Storage::Parquet {
            match ParquetFiles::write(&tables, shape.partitions, opts.seed, index) {
                Ok(files) => parquet = Some(files),
                Err(e) => {
                    log::debug!("fuzz set at query {index} stays in memory: {e}");
                    shape.storage = Storage::TableCache;
                }
            }
        }
        if parquet.is_some() {
            // The reference reads every row: DataFusion's statistics pruning drops rows a
            // predicate matches by NaN (Parquet's min/max leave NaN out: apache/datafusion#24804),
            // and the table cache's load reads whole files.
            set(&cpu, "SET datafusion.execution.parquet.pruning = false").await?;
            set(&cpu, "SET datafusion.execution.parquet.enable_page_index = false").await?;
        }
        for t in &tables {
            match &parquet {
                Some(files) => {
                    register_parquet(&cpu, &t.name, &files.location(&t.name)).await?;
                    register_parquet(&gpu, &t.name, &files.location(&t.name)).await?;
                }
                None => {
                    register(&cpu, t, shape.partitions)?;
                    register_gpu(&gpu, t, &shape).await?;
                }
            }
        }
        let mut history: Vec<String> = Vec::new();
        for _ in 0..opts.queries_per_tables.max(1) {
            if index >= queries {
                break;
            }
            // Now and then a write, or a table dropped and made again, on both sides first (not
            // over Parquet files both sessions read).
            if rng.random_bool(0.15) && parquet.is_none() {
                let t = &tables[rng.random_range(0..tables.len().min(3))];
                let memory_limit = &limits[index % limits.len()];
                for s in gpu_settings(&shape, memory_limit, &opts.gpu_set) {
                    set(&gpu, &s).await?;
                }
                if rng.random_bool(0.2) {
                    // DROP TABLE, then the table made again from its first rows.
                    let drop = format!("DROP TABLE {}", t.name);
                    set(&cpu, &drop).await?;
                    set(&gpu, &drop).await?;
                    register(&cpu, t, shape.partitions)?;
                    register_gpu(&gpu, t, &shape).await?;
                    let script = Script { opts, shape: &shape, tables: &tables, history: &history };
                    let made = format!("{drop};\n{}", script.create(t)?.trim_end_matches(';'));
                    history.push(made);
                    report.saw("drop and create");
                } else {
                    let sql = queries::write(&mut rng, t);
                    report.writes += 1;
                    for f in features_of(&sql) {
                        report.saw(f);
                    }
                    report.saw(match shape.storage {
                        Storage::Memory => "write to an in-memory table",
                        Storage::TableCache => "write to a table cache table",
                        Storage::Parquet => "write to a Parquet table",
                        Storage::GpuCache => "write to a gpu_cache table",
                    });
                    let (expected, allowed) = timed_answer(&cpu, &sql, timeout).await;
                    let got = gpu_answer(&gpu, &sql, allowed).await;
                    if let Verdict::Fail(kind, detail) = judge(&expected, got, false) {
                        let script = Script { opts, shape: &shape, tables: &tables, history: &history };
                        record_failure(opts, &script, &mut report, &bar, (index, memory_limit, &sql), (kind, detail))?;
                        // The two sides' tables may differ now: new tables are drawn.
                        break;
                    }
                    history.push(sql);
                }
            }
            // The large table is queried alone (a join of it could be billions of rows).
            let small = &tables[..tables.len().min(3)];
            let query = match tables.iter().find(|t| t.rows() > opts.max_rows) {
                Some(big) => match rng.random_range(0..100) {
                    0..=3 => queries::large_output(&mut rng, big),
                    4..=39 => queries::single_table(&mut rng, big),
                    _ => queries::query(&mut rng, small),
                },
                None => queries::query(&mut rng, small),
            };
            let memory_limit = &limits[index % limits.len()];
            index += 1;
            bar.inc(1);
            let at = index - 1;
            let two_sessions = rng.random_bool(0.08);
            match opts.only {
                Some(n) if n != at => continue,
                Some(_) => {
                    let script = Script { opts, shape: &shape, tables: &tables, history: &history };
                    println!("{}", script.repro(at, memory_limit, &query.sql)?);
                }
                None => {}
            }
            report.queries += 1;
            for f in features_of(&query.sql) {
                report.saw(f);
            }
            report.saw(match shape.storage {
                Storage::Memory => "in-memory tables",
                Storage::TableCache => "table cache",
                Storage::Parquet => "Parquet tables through the table cache",
                Storage::GpuCache => "gpu_cache tables",
            });
            if shape.settings.iter().any(|s| s.contains("gpu.devices =")) {
                report.saw("two logical devices");
            }
            if tables.iter().any(|t| t.rows() > opts.max_rows && query.sql.contains(&format!("{} ", t.name))) {
                report.saw("a table of over a million rows");
            }
            let (expected, allowed) = timed_answer(&cpu, &query.sql, timeout).await;
            if let Err(e) = &expected {
                log::debug!("DataFusion rejects fuzz query {at}: {}: {e}", query.sql);
            }
            if let Ok(rows) = &expected
                && rows.iter().map(RecordBatch::get_array_memory_size).sum::<usize>()
                    > datafusion_gpu::exec::query::HOLD_BACK_BYTES
            {
                report.saw("output past the rule's hold-back");
            }
            for s in gpu_settings(&shape, memory_limit, &opts.gpu_set) {
                set(&gpu, &s).await?;
            }
            let verdicts = match two_sessions {
                false => {
                    let got = gpu_answer(&gpu, &query.sql, allowed).await;
                    let answered = matches!(got, GpuOutcome::Answer(..));
                    let expected = reference_for(&gpu, &query.sql, expected, answered, &mut report).await?;
                    vec![judge(&expected, got, query.ordered)]
                }
                true => {
                    // A second session of the rule over the same tables, the two queries at once.
                    report.saw("two sessions at once");
                    let other = gpu_session_context(with_gpu_options(shape.config()));
                    for s in gpu_settings(&shape, memory_limit, &opts.gpu_set) {
                        set(&other, &s).await?;
                    }
                    for t in &tables {
                        if let Ok(p) = gpu.table_provider(t.name.as_str()).await {
                            other.register_table(t.name.as_str(), p)?;
                        }
                    }
                    let (a, b) =
                        tokio::join!(gpu_answer(&gpu, &query.sql, allowed), gpu_answer(&other, &query.sql, allowed));
                    let answered = matches!(a, GpuOutcome::Answer(..)) || matches!(b, GpuOutcome::Answer(..));
                    let expected = reference_for(&gpu, &query.sql, expected, answered, &mut report).await?;
                    vec![judge(&expected, a, query.ordered), judge(&expected, b, query.ordered)]
                }
            };
            if let Some(first) = verdicts.first() {
                report.count_query(first);
            }
            for v in verdicts {
                if let Verdict::Fail(kind, detail) = v {
                    let script = Script { opts, shape: &shape, tables: &tables, history: &history };
                    record_failure(opts, &script, &mut report, &bar, (at, memory_limit, &query.sql), (kind, detail))?;
                }
            }
            let out_of_time = opts.time_limit > 0 && start.elapsed().as_secs() >= opts.time_limit;
            if out_of_time || (opts.max_failures > 0 && report.failures.len() >= opts.max_failures) {
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
        let opts = FuzzOptions {
            queries: 60,
            seed,
            max_rows: 300,
            large_rows: 0,
            queries_per_tables: 20,
            gpu_set,
            ..Default::default()
        };
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
        let opts = FuzzOptions {
            queries: 3,
            seed,
            max_rows: 50,
            large_rows: 0,
            queries_per_tables: 4,
            only: Some(6),
            ..Default::default()
        };
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
