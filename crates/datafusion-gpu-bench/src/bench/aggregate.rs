//! `datafusion-gpu bench aggregate`: the group-by workload of Wu et al. 2025 on device-resident data.
//!
//! 2^log_rows rows of a key column (Int32 or Int64, uniform over `2^c` values for each swept
//! cardinality c) and `aggs` Int32 value columns; the query is `SELECT k, SUM(v0), .. GROUP BY
//! k`. Each GPU algorithm runs on the same device batch (uploaded once), its phases timed with a
//! synchronisation at each phase's end; DataFusion's `AggregateExec` runs the same query on the
//! same data in host memory on every core. The floor is the input read once and the output
//! written once at the device-copy bandwidth `doctor` measures in the same process.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::{host_partitions, median};
use datafusion_gpu::aggregate::{
    AccOp, GroupByOptions, GroupByOutput, GroupByTimes, GroupIdMethod, Reduction, group_by,
};
use datafusion_gpu::columns::DeviceBatch;
use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::error::{CudaResultExt, Result, gpu_error};

/// The benchmark's options, also its command-line arguments (`datafusion-gpu bench aggregate`).
#[derive(Debug, Clone, clap::Args)]
pub struct AggregateBenchOptions {
    /// log2 of the number of rows.
    #[arg(long, default_value_t = 27)]
    pub log_rows: u32,
    /// Key widths in bytes (4: Int32, 8: Int64).
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub key_bytes: Vec<usize>,
    /// Int32 value columns summed per group.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub aggs: Vec<usize>,
    /// log2 of the group cardinalities swept.
    #[arg(long, value_delimiter = ',', default_value = "1,4,7,10,13,16,19,22,26")]
    pub log_groups: Vec<u32>,
    #[command(flatten)]
    pub runs: super::BenchRuns,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub key_bytes: usize,
    pub aggs: usize,
    pub log_groups: u32,
}

#[derive(Debug, Clone)]
pub struct AggTiming {
    pub config: Config,
    /// "hash", "hash-global" (global atomics only), "sort", "partition", or "cpu".
    pub name: String,
    pub seconds: f64,
    pub phases: Option<GroupByTimes>,
    pub groups: u64,
    pub floor_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct AggregateReport {
    pub device: String,
    pub copy_bandwidth: f64,
    pub rows: u64,
    pub runs: usize,
    pub cpu_runs: usize,
    pub cpu_threads: usize,
    pub timings: Vec<AggTiming>,
}

/// The table of a configuration, and its number of distinct keys.
pub(crate) fn table(c: Config, rows: u64, seed: u64) -> Result<(RecordBatch, u64)> {
    let domain = 1u64 << c.log_groups;
    let chunk = 1u64 << 20;
    let keys: Vec<i64> = (0..rows.div_ceil(chunk))
        .into_par_iter()
        .flat_map_iter(|ci| {
            let mut rng =
                StdRng::seed_from_u64(seed ^ (ci + 1).wrapping_mul(0x9e37_79b9) ^ (c.log_groups as u64) << 40);
            let n = chunk.min(rows - ci * chunk);
            (0..n).map(|_| rng.random_range(0..domain as i64)).collect::<Vec<_>>()
        })
        .collect();
    let mut seen = vec![false; domain as usize];
    for k in &keys {
        seen[*k as usize] = true;
    }
    let groups = seen.iter().filter(|s| **s).count() as u64;
    let key: ArrayRef = if c.key_bytes == 8 {
        Arc::new(Int64Array::from(keys))
    } else {
        Arc::new(Int32Array::from_iter_values(keys.iter().map(|k| *k as i32)))
    };
    let mut fields = vec![Field::new("k", key.data_type().clone(), false)];
    let mut cols = vec![key];
    for a in 0..c.aggs {
        let v: Vec<i32> = (0..rows as usize)
            .into_par_iter()
            .map(|i| (((i as u64 ^ (a as u64 + 7)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as i32) - (1 << 23))
            .collect();
        fields.push(Field::new(format!("v{a}"), DataType::Int32, false));
        cols.push(Arc::new(Int32Array::from(v)));
    }
    Ok((RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?, groups))
}

pub(crate) fn reductions(aggs: usize) -> Vec<Reduction> {
    (0..aggs)
        .map(|a| Reduction {
            op: AccOp::SumI64,
            input: Some(a + 1),
            filter: None,
            out_type: DataType::Int64,
            nullable: false,
        })
        .collect()
}

/// One GPU group-by of the device batch: seconds, phases, groups, and the output when `keep`
/// (else it is freed after the timing).
pub(crate) fn gpu_group_by(
    gpu: &Arc<Gpu>,
    batch: &DeviceBatch,
    aggs: usize,
    opts: &GroupByOptions,
    keep: bool,
) -> Result<(f64, GroupByTimes, u64, Option<GroupByOutput>)> {
    let stream = batch.stream();
    let cols = batch.columns();
    let mut times = GroupByTimes::default();
    let t = Instant::now();
    let out =
        group_by(gpu, stream, &cols[..1], cols, &reductions(aggs), &[], batch.num_rows() as u64, opts, &mut times)?;
    stream.synchronize().gpu("synchronising")?;
    let seconds = t.elapsed().as_secs_f64();
    let groups = out.groups;
    if keep {
        return Ok((seconds, times, groups, Some(out)));
    }
    drop(out);
    stream.synchronize().gpu("synchronising")?;
    Ok((seconds, times, groups, None))
}

/// DataFusion's aggregate of the host table on every core: seconds and groups.
pub(crate) async fn cpu_group_by(batch: &RecordBatch, aggs: usize, threads: usize) -> Result<(f64, u64)> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(threads));
    let parts = host_partitions(batch, threads);
    ctx.register_table("t", Arc::new(MemTable::try_new(batch.schema(), parts)?))?;
    let sums = (0..aggs).map(|a| format!("sum(v{a})")).collect::<Vec<_>>().join(", ");
    let df = ctx.sql(&format!("SELECT k, {sums} FROM t GROUP BY k")).await?;
    let t = Instant::now();
    let mut stream = df.execute_stream().await?;
    let mut groups = 0u64;
    while let Some(b) = stream.next().await {
        groups += b?.num_rows() as u64;
    }
    Ok((t.elapsed().as_secs_f64(), groups))
}

pub async fn run(gpu: &Arc<Gpu>, o: &AggregateBenchOptions) -> Result<AggregateReport> {
    let doc = doctor::run(gpu, DoctorOptions { transfer_bytes: 16 << 20, ..DoctorOptions::default() })?;
    let rows = 1u64 << o.log_rows;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let algorithms: [(&str, GroupByOptions); 4] = [
        ("hash", GroupByOptions { method: GroupIdMethod::Hash, ..GroupByOptions::default() }),
        (
            "hash-global",
            GroupByOptions { method: GroupIdMethod::Hash, shared_memory: false, ..GroupByOptions::default() },
        ),
        ("sort", GroupByOptions { method: GroupIdMethod::Sort, ..GroupByOptions::default() }),
        ("partition", GroupByOptions { method: GroupIdMethod::Partition, ..GroupByOptions::default() }),
    ];
    let mut timings = Vec::new();
    for (ki, &key_bytes) in o.key_bytes.iter().enumerate() {
        for (ai, &aggs) in o.aggs.iter().enumerate() {
            for &log_groups in &o.log_groups {
                let c = Config { key_bytes, aggs, log_groups };
                eprintln!("bench aggregate: generating 2^{} rows, {c:?}", o.log_rows);
                let (host, groups) = table(c, rows, o.runs.seed)?;
                let floor_bytes =
                    rows * (key_bytes as u64 + 4 * aggs as u64) + groups * (key_bytes as u64 + 8 * aggs as u64);
                let stream = gpu.stream();
                let dev = DeviceBatch::upload(gpu, &stream, &host)?;
                stream.synchronize().gpu("synchronising")?;
                for (name, opts) in &algorithms {
                    let (_, _, got, _) = gpu_group_by(gpu, &dev, aggs, opts, false)?;
                    if got != groups {
                        return Err(gpu_error(format!("{name} found {got} groups; the data has {groups}")));
                    }
                    let mut runs = Vec::new();
                    for _ in 0..o.runs.runs.max(1) {
                        let (secs, phases, _, _) = gpu_group_by(gpu, &dev, aggs, opts, false)?;
                        runs.push((secs, phases));
                    }
                    let (seconds, phases) = median(runs);
                    eprintln!("bench aggregate: {c:?} {name}: {:.2} ms", seconds * 1e3);
                    timings.push(AggTiming {
                        config: c,
                        name: name.to_string(),
                        seconds,
                        phases: Some(phases),
                        groups,
                        floor_bytes,
                    });
                }
                drop(dev);
                if o.runs.cpu_runs > 0 && (o.runs.cpu_all || (ki == 0 && ai == 0)) {
                    let (_, got) = cpu_group_by(&host, aggs, threads).await?;
                    if got != groups {
                        return Err(gpu_error(format!("the CPU found {got} groups; the data has {groups}")));
                    }
                    let mut runs = Vec::new();
                    for _ in 0..o.runs.cpu_runs {
                        runs.push((cpu_group_by(&host, aggs, threads).await?.0, ()));
                    }
                    let (seconds, _) = median(runs);
                    eprintln!("bench aggregate: {c:?} cpu: {:.2} ms", seconds * 1e3);
                    timings.push(AggTiming {
                        config: c,
                        name: "cpu".into(),
                        seconds,
                        phases: None,
                        groups,
                        floor_bytes,
                    });
                }
            }
        }
    }
    Ok(AggregateReport {
        device: gpu.info().name.clone(),
        copy_bandwidth: doc.device_copy,
        rows,
        runs: o.runs.runs,
        cpu_runs: o.runs.cpu_runs,
        cpu_threads: threads,
        timings,
    })
}

impl fmt::Display for AggregateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device {}: device-copy bandwidth {:.0} GB/s (doctor, same process); {} rows; GPU: median of {} runs after 1 \
             warm-up, data on the device; CPU: DataFusion AggregateExec (Partial + FinalPartitioned, {} partitions), median \
             of {} runs after 1 warm-up, data in host memory",
            self.device,
            self.copy_bandwidth / 1e9,
            self.rows,
            self.runs,
            self.cpu_threads,
            self.cpu_runs
        )?;
        writeln!(
            f,
            "{:>3} {:>4} {:>6} {:<11} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}",
            "key",
            "aggs",
            "groups",
            "algorithm",
            "ms",
            "Grows/s",
            "group ids",
            "aggregate",
            "keys out",
            "floor ms",
            "x floor",
            "vs cpu"
        )?;
        for t in &self.timings {
            let c = t.config;
            let floor = t.floor_bytes as f64 / self.copy_bandwidth;
            let cpu = self
                .timings
                .iter()
                .find(|x| x.name == "cpu" && x.config == c)
                .map(|x| format!("{:.1}x", x.seconds / t.seconds))
                .unwrap_or_else(|| "-".into());
            let phase =
                |d: Option<std::time::Duration>| d.map_or("-".to_string(), |d| format!("{:.2}", d.as_secs_f64() * 1e3));
            writeln!(
                f,
                "{:>3} {:>4} {:>6} {:<11} {:>9.2} {:>8.2} {:>9} {:>9} {:>9} {:>8.2} {:>7.1} {:>8}",
                c.key_bytes,
                c.aggs,
                format!("2^{}", c.log_groups),
                t.name,
                t.seconds * 1e3,
                self.rows as f64 / t.seconds / 1e9,
                phase(t.phases.map(|p| p.group_ids)),
                phase(t.phases.map(|p| p.aggregate)),
                phase(t.phases.map(|p| p.materialize)),
                floor * 1e3,
                t.seconds / floor,
                cpu
            )?;
        }
        write!(
            f,
            "(Grows/s: rows / time; phases in ms, each ended by a synchronisation; hash-global: the hash group-by with global \
             atomics only; floor: the input read once and the output written once at the device-copy bandwidth; vs cpu: CPU \
             time / this time)"
        )
    }
}
