//! Benchmarks run by `datafusion-gpu bench ...`; results are recorded under `benches/results/`.

pub mod aggregate;
pub mod chunksets;
pub mod join;
pub mod multi_gpu;
pub mod primitives;
pub mod sweep;
pub mod transfer;
pub mod triton;

use datafusion::arrow::record_batch::RecordBatch;

/// Repetition and seed options shared by the benchmarks.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchRuns {
    /// Timed GPU runs after one warm-up.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Timed CPU runs after one warm-up (0: no CPU baseline).
    #[arg(long, default_value_t = 2)]
    pub cpu_runs: usize,
    /// The CPU baseline for every configuration (by default only for some; each benchmark says which).
    #[arg(long)]
    pub cpu_all: bool,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// The run of median time among `(seconds, details)` runs.
pub(crate) fn median<T: Clone>(mut v: Vec<(f64, T)>) -> (f64, T) {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v[v.len() / 2].clone()
}

/// `batch` split into `n` partitions of consecutive rows, in batches of DataFusion's default
/// size (8192 rows), as a scan would give them.
pub(crate) fn host_partitions(batch: &RecordBatch, n: usize) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let per = batch.num_rows().div_ceil(n).max(1);
    let mut out = vec![Vec::new(); n];
    let mut i = 0;
    while i < batch.num_rows() {
        let len = 8192.min(batch.num_rows() - i).min(per - i % per);
        out[i / per].push(batch.slice(i, len));
        i += len;
    }
    out
}
