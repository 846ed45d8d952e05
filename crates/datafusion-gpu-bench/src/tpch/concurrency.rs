//! `datafusion-gpu bench concurrency`: several query streams at once on one GPU, each in a
//! DataFusion session of its own with its own `gpu.` settings, every answer checked against
//! DataFusion's on the CPU. Each stream runs the suite's queries once, starting at a different
//! query (stream `s` at query `s`, in order after it), so that different queries overlap.

use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::{SessionConfig, SessionContext};

use super::Suite;
use super::compare::compare;
use super::data::{self, Progresses};
use super::queries::{self, Query};
use super::runner::apply_settings;
use datafusion_gpu::config::GpuConfig;
use datafusion_gpu::session::gpu_session_context;

/// Options of `bench concurrency`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConcurrencyOptions {
    /// The suite the streams run.
    #[arg(long, value_enum, default_value_t = SuiteName::Tpch)]
    pub suite: SuiteName,
    /// Scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Query streams running at once, each in its own GPU session.
    #[arg(long, default_value_t = 8)]
    pub streams: usize,
    /// Queries each stream runs (all when omitted), e.g. `1,3,18`.
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<String>,
    /// `gpu.memory.limit` of each stream's session, dealt round-robin (e.g. `auto,1G,256M`): the
    /// sessions' limits are their own.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub memory_limits: Vec<String>,
    /// Partitions of each in-memory table and each session's target partitions (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub partitions: usize,
    /// A setting of every GPU session, as `KEY=VALUE` (repeatable).
    #[arg(long = "gpu-set", value_name = "KEY=VALUE")]
    pub gpu_set: Vec<String>,
    /// Seed of the SSB generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// A suite on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SuiteName {
    Tpch,
    Ssb,
}

impl From<SuiteName> for Suite {
    fn from(s: SuiteName) -> Suite {
        match s {
            SuiteName::Tpch => Suite::Tpch,
            SuiteName::Ssb => Suite::Ssb,
        }
    }
}

/// One query of one stream.
#[derive(Debug, Clone)]
pub struct StreamQuery {
    pub query: &'static str,
    pub ms: f64,
    /// Empty when the answer matched DataFusion's on the CPU; else what differed, or the error.
    pub problem: String,
}

/// One stream's run.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub stream: usize,
    pub memory_limit: String,
    pub seconds: f64,
    pub queries: Vec<StreamQuery>,
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct ConcurrencyReport {
    pub suite: Suite,
    pub sf: f64,
    /// DataFusion on the CPU, one query after another (the expected answers).
    pub cpu_seconds: f64,
    /// From the first stream's start to the last one's end.
    pub wall_seconds: f64,
    pub streams: Vec<StreamReport>,
}

impl ConcurrencyReport {
    /// Queries whose answer differed or that failed.
    pub fn problems(&self) -> usize {
        self.streams.iter().flat_map(|s| &s.queries).filter(|q| !q.problem.is_empty()).count()
    }

    /// A table of the streams, then every problem.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} SF {}: {} streams at once on one GPU; DataFusion on the CPU, one query after another: {:.2} s\n\n",
            self.suite.title(),
            self.sf,
            self.streams.len(),
            self.cpu_seconds
        );
        out.push_str("| stream | gpu.memory.limit | queries | answers checked | seconds |\n|---|---|---|---|---|\n");
        for s in &self.streams {
            let ok = s.queries.iter().filter(|q| q.problem.is_empty()).count();
            out.push_str(&format!(
                "| {} | {} | {} | {} ok | {:.2} |\n",
                s.stream,
                s.memory_limit,
                s.queries.len(),
                ok,
                s.seconds
            ));
        }
        let total: usize = self.streams.iter().map(|s| s.queries.len()).sum();
        out.push_str(&format!(
            "\nall streams: {total} queries in {:.2} s, {} with a problem\n",
            self.wall_seconds,
            self.problems()
        ));
        for s in &self.streams {
            for q in s.queries.iter().filter(|q| !q.problem.is_empty()) {
                out.push_str(&format!("stream {} {}: {}\n", s.stream, q.query, q.problem));
            }
        }
        out
    }
}

/// Runs the streams as `o` says.
pub async fn run(o: &ConcurrencyOptions) -> Result<ConcurrencyReport> {
    let suite: Suite = o.suite.into();
    let selected: Vec<Query> = queries::select(suite, &o.queries, o.sf)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let partitions = if o.partitions == 0 { cores } else { o.partitions };
    let bars = std::io::IsTerminal::is_terminal(&std::io::stderr());
    eprintln!("generating {} SF {} in memory", suite.title(), o.sf);
    let tables = data::generate(suite, o.sf, o.seed, partitions, &Progresses::new(bars))?;
    let config = SessionConfig::new().with_target_partitions(partitions);

    // The expected answers, from DataFusion alone.
    let cpu = SessionContext::new_with_config(config.clone());
    data::register(&cpu, &tables)?;
    let t = Instant::now();
    let mut expected: Vec<Arc<Vec<RecordBatch>>> = Vec::with_capacity(selected.len());
    for q in &selected {
        let batches = cpu.sql(&q.sql).await?.collect().await.map_err(|e| {
            DataFusionError::Execution(format!("{} failed on the CPU, so nothing can be checked: {e}", q.name))
        })?;
        expected.push(Arc::new(batches));
    }
    let cpu_seconds = t.elapsed().as_secs_f64();

    let limits = if o.memory_limits.is_empty() { vec!["auto".to_string()] } else { o.memory_limits.clone() };
    let mut sessions = Vec::with_capacity(o.streams);
    for s in 0..o.streams.max(1) {
        let limit = limits[s % limits.len()].clone();
        let mut gpu_config = config.clone().with_option_extension(GpuConfig::default());
        gpu_config.options_mut().set("gpu.memory.limit", &limit)?;
        apply_settings(&mut gpu_config, &o.gpu_set)?;
        let ctx = gpu_session_context(gpu_config);
        data::register(&ctx, &tables)?;
        sessions.push((s, limit, ctx));
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(sessions.len());
    for (s, limit, ctx) in sessions {
        let order: Vec<(Query, Arc<Vec<RecordBatch>>)> = (0..selected.len())
            .map(|i| {
                let k = (s + i) % selected.len();
                (selected[k].clone(), Arc::clone(&expected[k]))
            })
            .collect();
        tasks.push(datafusion::common::runtime::SpawnedTask::spawn(async move {
            let t = Instant::now();
            let mut queries = Vec::with_capacity(order.len());
            for (q, want) in order {
                let tq = Instant::now();
                let problem = match ctx.sql(&q.sql).await {
                    Ok(df) => match df.collect().await {
                        Ok(got) => compare(&want, &got).err().unwrap_or_default(),
                        Err(e) => format!("failed: {e}"),
                    },
                    Err(e) => format!("failed to plan: {e}"),
                };
                queries.push(StreamQuery { query: q.name, ms: tq.elapsed().as_secs_f64() * 1e3, problem });
            }
            StreamReport { stream: s, memory_limit: limit, seconds: t.elapsed().as_secs_f64(), queries }
        }));
    }
    let mut streams = Vec::with_capacity(tasks.len());
    for t in tasks {
        streams.push(t.await.map_err(|e| DataFusionError::Execution(format!("a query stream failed: {e}")))?);
    }
    Ok(ConcurrencyReport { suite, sf: o.sf, cpu_seconds, wall_seconds: start.elapsed().as_secs_f64(), streams })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two streams at SF 0.01 with different memory limits give DataFusion's answers (on the CPU
    /// here when there is no GPU; on the device, every eligible operator forced there).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_streams_give_datafusions_answers() {
        let _l = datafusion_gpu::testing::gpu_lock();
        let o = ConcurrencyOptions {
            suite: SuiteName::Tpch,
            sf: 0.01,
            streams: 3,
            queries: vec!["1".into(), "3".into(), "5".into(), "18".into()],
            memory_limits: vec!["auto".into(), "64M".into(), "8M".into()],
            partitions: 4,
            gpu_set: vec!["gpu.cost.min_rows=0".into(), "gpu.placement=always".into()],
            seed: 1,
        };
        let report = run(&o).await.unwrap();
        assert_eq!(report.streams.len(), 3);
        assert!(report.streams.iter().all(|s| s.queries.len() == 4));
        assert_eq!(report.problems(), 0, "{}", report.render());
    }
}
