//! `datafusion-gpu bench join`: the join workload of Wu et al. 2025 on device-resident data.
//!
//! R holds 2^log_r unique keys, shuffled; S holds 2^log_s foreign keys, each in R with
//! probability `match_ratio` (else outside R); each side has `payloads` Int32 columns. The join
//! outputs T(key, r1.., s1..). Every algorithm runs on the same device batches (uploaded once),
//! its phases timed with a synchronisation at each phase's end; DataFusion's `HashJoinExec` runs
//! on the same data in host memory on every core. The floor is each input read once and the
//! output written once at the device-copy bandwidth `doctor` measures in the same process.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{JoinType, NullEquality};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, PhysicalExpr, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::{host_partitions, median};
use datafusion_gpu::columns::DeviceBatch;
use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::error::{CudaResultExt, Result, gpu_error};
use datafusion_gpu::join::{JoinAlgorithm, JoinBuild, JoinSpec, OutputColumn, PhaseTimes};
use datafusion_gpu::primitives::keys::KeyPlan;

/// The benchmark's options, also its command-line arguments (`datafusion-gpu bench join`).
#[derive(Debug, Clone, clap::Args)]
pub struct JoinBenchOptions {
    /// log2 of |R| (unique keys, shuffled).
    #[arg(long, default_value_t = 27)]
    pub log_r: u32,
    /// log2 of |S| (foreign keys into R).
    #[arg(long, default_value_t = 28)]
    pub log_s: u32,
    /// Key widths in bytes (4: Int32, 8: Int64).
    #[arg(long, value_delimiter = ',', default_value = "4,8")]
    pub key_bytes: Vec<usize>,
    /// Int32 payload columns per side.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub payloads: Vec<usize>,
    /// Match ratios; the first applies to every configuration, the others sweep the first key width and payload count.
    #[arg(long, value_delimiter = ',', default_value = "1.0,0.5,0.1")]
    pub match_ratios: Vec<f64>,
    /// Algorithms (npj, phj_gfur, phj_gftr, smj_gfur, smj_gftr).
    #[arg(long, value_delimiter = ',', default_value = "npj,phj_gfur,phj_gftr,smj_gfur,smj_gftr")]
    pub algorithms: Vec<JoinAlgorithm>,
    #[command(flatten)]
    pub runs: super::BenchRuns,
}

/// One configuration's data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub key_bytes: usize,
    pub payloads: usize,
    pub match_ratio: f64,
    /// Zipf exponent of the foreign keys over R (0: uniform).
    pub skew: f64,
}

#[derive(Debug, Clone)]
pub struct JoinTiming {
    pub config: Config,
    /// An algorithm's name, or "cpu".
    pub name: String,
    pub seconds: f64,
    /// Phases of the median run (GPU only).
    pub phases: Option<PhaseTimes>,
    pub output_rows: u64,
    pub floor_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct JoinReport {
    pub device: String,
    pub copy_bandwidth: f64,
    pub r_rows: u64,
    pub s_rows: u64,
    pub runs: usize,
    pub cpu_runs: usize,
    pub cpu_threads: usize,
    pub rows: Vec<JoinTiming>,
}

/// A rank in `0..n` drawn with probability about `1 / (rank + 1)` (Zipf 1.0, by the inverse of
/// the continuous approximation of its CDF), from a uniform `u` in [0, 1).
fn zipf1_rank(u: f64, n: u64) -> u64 {
    (((n as f64 + 1.0).powf(u) - 1.0).floor() as u64).min(n - 1)
}

/// The two relations of a configuration, and the number of S rows that match. `r_rows` must be
/// a power of two when the configuration is skewed (hot ranks are scattered over R's keys by an
/// odd multiplier).
pub(crate) fn relations(c: Config, r_rows: u64, s_rows: u64, seed: u64) -> Result<(RecordBatch, RecordBatch, u64)> {
    let key_type = if c.key_bytes == 8 { DataType::Int64 } else { DataType::Int32 };
    let r_keys: Vec<i64> = {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut k: Vec<i64> = (0..r_rows as i64).collect();
        for i in (1..k.len()).rev() {
            k.swap(i, rng.random_range(0..=i));
        }
        k
    };
    // S: in R with probability match_ratio; generated in parallel chunks, seeded per chunk.
    let chunk = 1 << 20;
    let s_keys: Vec<i64> = (0..s_rows.div_ceil(chunk))
        .into_par_iter()
        .flat_map_iter(|ci| {
            let mut rng = StdRng::seed_from_u64(seed ^ (ci + 1).wrapping_mul(0x9e37_79b9));
            let n = chunk.min(s_rows - ci * chunk);
            (0..n)
                .map(|_| {
                    if rng.random::<f64>() < c.match_ratio {
                        if c.skew > 0.0 {
                            let rank = zipf1_rank(rng.random::<f64>(), r_rows);
                            (rank.wrapping_mul(0x9e37_79b1) & (r_rows - 1)) as i64
                        } else {
                            rng.random_range(0..r_rows as i64)
                        }
                    } else {
                        r_rows as i64 + rng.random_range(0..r_rows as i64)
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let matches = s_keys.par_iter().filter(|k| **k < r_rows as i64).count() as u64;
    let keys = |v: &[i64]| -> ArrayRef {
        if c.key_bytes == 8 {
            Arc::new(Int64Array::from(v.to_vec()))
        } else {
            Arc::new(Int32Array::from_iter_values(v.iter().map(|k| *k as i32)))
        }
    };
    let payload = |rows: u64, salt: u64| -> ArrayRef {
        let v: Vec<i32> = (0..rows as usize)
            .into_par_iter()
            .map(|i| ((i as u64 ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33) as i32)
            .collect();
        Arc::new(Int32Array::from(v))
    };
    let side = |name: &str, k: &[i64], rows: u64, salt: u64| -> Result<RecordBatch> {
        let mut fields = vec![Field::new(format!("{name}_key"), key_type.clone(), false)];
        let mut cols = vec![keys(k)];
        for p in 0..c.payloads {
            fields.push(Field::new(format!("{name}_p{p}"), DataType::Int32, false));
            cols.push(payload(rows, salt + p as u64));
        }
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
    };
    Ok((side("r", &r_keys, r_rows, 1)?, side("s", &s_keys, s_rows, 101)?, matches))
}

pub(crate) fn spec(c: Config, r: &RecordBatch, s: &RecordBatch, algorithm: JoinAlgorithm) -> Result<JoinSpec> {
    let key_type = r.schema().field(0).data_type().clone();
    let keys = KeyPlan::new(&[key_type], false)?;
    let mut output = vec![OutputColumn::Build(0)];
    let mut fields = vec![r.schema().field(0).clone()];
    for p in 1..=c.payloads {
        output.push(OutputColumn::Build(p));
        fields.push(r.schema().field(p).clone());
    }
    for p in 1..=c.payloads {
        output.push(OutputColumn::Probe(p));
        fields.push(s.schema().field(p).clone());
    }
    Ok(JoinSpec {
        join_type: JoinType::Inner,
        keys,
        build_keys: vec![0],
        probe_keys: vec![0],
        output,
        schema: Arc::new(Schema::new(fields)),
        algorithm,
        ordered: false,
        null_aware: false,
        filter: None,
        batch_rows: u64::MAX,
    })
}

/// One GPU join of device-resident R and the probe chunks of S: seconds, phases, output rows,
/// and the output batches when `keep` (else they are freed after the timing). With `phases` the
/// probe waits for the device after every phase, so that the phase times are the device's;
/// without, it runs as the execs run it (one wait per probe chunk), for total times.
pub(crate) fn gpu_join(
    gpu: &Arc<Gpu>,
    spec: &Arc<JoinSpec>,
    r: &DeviceBatch,
    s: &[DeviceBatch],
    keep: bool,
    phases: bool,
) -> Result<(f64, PhaseTimes, u64, Vec<DeviceBatch>)> {
    let stream = gpu.stream();
    let t = Instant::now();
    let build = JoinBuild::new(Arc::clone(gpu), &stream, Arc::clone(spec), r.clone())?;
    let mut times = PhaseTimes { synchronized: phases, ..build.times };
    let mut out = Vec::new();
    for chunk in s {
        out.extend(build.probe(&stream, chunk, &mut times)?);
    }
    stream.synchronize().gpu("synchronising")?;
    let seconds = t.elapsed().as_secs_f64();
    let rows = out.iter().map(|b| b.num_rows() as u64).sum();
    if !keep {
        out.clear();
    }
    drop(build);
    stream.synchronize().gpu("synchronising")?;
    Ok((seconds, times, rows, out))
}

/// DataFusion's CollectLeft hash join of host R (one partition) and S (`partitions`) on their
/// first columns, projected to R's columns and S's payloads.
pub(crate) fn collect_left_plan(r: &RecordBatch, s: &RecordBatch, partitions: usize) -> Result<Arc<dyn ExecutionPlan>> {
    cpu_plan(r, s, partitions, PartitionMode::CollectLeft)
}

/// DataFusion's hash join of R and S in `mode`: `CollectLeft` builds one table from R (one
/// partition) for `partitions` probe partitions of S; `Partitioned` hash-repartitions both
/// sides into `partitions` and joins each pair, as DataFusion plans joins of large builds.
pub(crate) fn cpu_plan(
    r: &RecordBatch,
    s: &RecordBatch,
    partitions: usize,
    mode: PartitionMode,
) -> Result<Arc<dyn ExecutionPlan>> {
    let key = |b: &RecordBatch| Arc::new(Column::new(b.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>;
    let partitioned = mode == PartitionMode::Partitioned;
    let build_partitions = if partitioned { partitions } else { 1 };
    let mut left: Arc<dyn ExecutionPlan> =
        MemorySourceConfig::try_new_exec(&host_partitions(r, build_partitions), r.schema(), None)?;
    let mut right: Arc<dyn ExecutionPlan> =
        MemorySourceConfig::try_new_exec(&host_partitions(s, partitions), s.schema(), None)?;
    if partitioned {
        left = Arc::new(RepartitionExec::try_new(left, Partitioning::Hash(vec![key(r)], partitions))?);
        right = Arc::new(RepartitionExec::try_new(right, Partitioning::Hash(vec![key(s)], partitions))?);
    }
    let on = vec![(key(r), key(s))];
    let ncols = r.num_columns();
    let projection: Vec<usize> = (0..ncols).chain(ncols + 1..ncols + s.num_columns()).collect();
    Ok(Arc::new(HashJoinExec::try_new(
        left,
        right,
        on,
        None,
        &JoinType::Inner,
        Some(projection),
        mode,
        NullEquality::NullEqualsNothing,
        false,
    )?))
}

/// DataFusion's hash join of host R and S on every core: seconds and output rows.
pub(crate) async fn cpu_join(r: &RecordBatch, s: &RecordBatch, threads: usize) -> Result<(f64, u64)> {
    cpu_join_in(r, s, threads, PartitionMode::CollectLeft).await
}

/// [`cpu_join`] in `mode` (see [`cpu_plan`]).
pub(crate) async fn cpu_join_in(
    r: &RecordBatch,
    s: &RecordBatch,
    threads: usize,
    mode: PartitionMode,
) -> Result<(f64, u64)> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(threads));
    let join = cpu_plan(r, s, threads, mode)?;
    let t = Instant::now();
    let mut stream = execute_stream(join, ctx.task_ctx())?;
    let mut rows = 0u64;
    while let Some(b) = stream.next().await {
        rows += b?.num_rows() as u64;
    }
    Ok((t.elapsed().as_secs_f64(), rows))
}

pub async fn run(gpu: &Arc<Gpu>, o: &JoinBenchOptions) -> Result<JoinReport> {
    let doc = doctor::run(gpu, DoctorOptions { transfer_bytes: 16 << 20, ..DoctorOptions::default() })?;
    let (r_rows, s_rows) = (1u64 << o.log_r, 1u64 << o.log_s);
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut configs = Vec::new();
    for &k in &o.key_bytes {
        for &p in &o.payloads {
            configs.push(Config {
                key_bytes: k,
                payloads: p,
                match_ratio: o.match_ratios.first().copied().unwrap_or(1.0),
                skew: 0.0,
            });
        }
    }
    if let (Some(&k), Some(&p)) = (o.key_bytes.first(), o.payloads.first()) {
        for &m in o.match_ratios.iter().skip(1) {
            configs.push(Config { key_bytes: k, payloads: p, match_ratio: m, skew: 0.0 });
        }
    }
    let mut rows = Vec::new();
    for c in configs {
        eprintln!("bench join: generating R = 2^{} and S = 2^{} rows, {c:?}", o.log_r, o.log_s);
        let (r, s, matches) = relations(c, r_rows, s_rows, o.runs.seed)?;
        let in_bytes = (r_rows + s_rows) * (c.key_bytes as u64 + 4 * c.payloads as u64);
        let floor_bytes = in_bytes + matches * (c.key_bytes as u64 + 8 * c.payloads as u64);
        let stream = gpu.stream();
        let (dr, ds) = (DeviceBatch::upload(gpu, &stream, &r)?, DeviceBatch::upload(gpu, &stream, &s)?);
        stream.synchronize().gpu("synchronising")?;
        for &a in &o.algorithms {
            let spec = Arc::new(spec(c, &r, &s, a)?);
            let (_, _, out_rows, _) = gpu_join(gpu, &spec, &dr, std::slice::from_ref(&ds), false, true)?;
            if out_rows != matches {
                return Err(gpu_error(format!("{a} joined {out_rows} rows; the data has {matches} matches")));
            }
            let mut runs = Vec::new();
            for _ in 0..o.runs.runs.max(1) {
                let (secs, phases, _, _) = gpu_join(gpu, &spec, &dr, std::slice::from_ref(&ds), false, true)?;
                runs.push((secs, phases));
            }
            let (seconds, phases) = median(runs);
            eprintln!("bench join: {c:?} {a}: {:.2} ms", seconds * 1e3);
            rows.push(JoinTiming {
                config: c,
                name: a.name().into(),
                seconds,
                phases: Some(phases),
                output_rows: matches,
                floor_bytes,
            });
        }
        drop((dr, ds));
        if o.runs.cpu_runs > 0 && (o.runs.cpu_all || c.match_ratio == 1.0) {
            let (_, out_rows) = cpu_join(&r, &s, threads).await?;
            if out_rows != matches {
                return Err(gpu_error(format!("the CPU joined {out_rows} rows; the data has {matches} matches")));
            }
            let mut runs = Vec::new();
            for _ in 0..o.runs.cpu_runs {
                runs.push((cpu_join(&r, &s, threads).await?.0, ()));
            }
            let (seconds, _) = median(runs);
            eprintln!("bench join: {c:?} cpu: {:.2} ms", seconds * 1e3);
            rows.push(JoinTiming {
                config: c,
                name: "cpu".into(),
                seconds,
                phases: None,
                output_rows: matches,
                floor_bytes,
            });
        }
    }
    Ok(JoinReport {
        device: gpu.info().name.clone(),
        copy_bandwidth: doc.device_copy,
        r_rows,
        s_rows,
        runs: o.runs.runs,
        cpu_runs: o.runs.cpu_runs,
        cpu_threads: threads,
        rows,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for JoinReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device {}: device-copy bandwidth {:.0} GB/s (doctor, same process); |R| = {}, |S| = {}; GPU: median of {} runs \
             after 1 warm-up, data on the device; CPU: DataFusion HashJoinExec (CollectLeft, {} partitions), median of {} \
             runs after 1 warm-up, data in host memory",
            self.device,
            self.copy_bandwidth / 1e9,
            self.r_rows,
            self.s_rows,
            self.runs,
            self.cpu_threads,
            self.cpu_runs
        )?;
        writeln!(
            f,
            "{:>3} {:>3} {:>5} {:<9} {:>10} {:>8} {:>8} {:>9} {:>8} {:>10} {:>9} {:>8} {:>8}",
            "key",
            "pay",
            "match",
            "algorithm",
            "ms",
            "Gtup/s",
            "keys",
            "transform",
            "match",
            "materialize",
            "floor ms",
            "x floor",
            "vs cpu"
        )?;
        for r in &self.rows {
            let c = r.config;
            let floor = r.floor_bytes as f64 / self.copy_bandwidth;
            let cpu = self
                .rows
                .iter()
                .find(|x| x.name == "cpu" && x.config == c)
                .map(|x| format!("{:.1}x", x.seconds / r.seconds))
                .unwrap_or_else(|| "-".into());
            let (k, t, m, mat) = match &r.phases {
                Some(p) => (
                    format!("{:.2}", ms(p.keys)),
                    format!("{:.2}", ms(p.transform)),
                    format!("{:.2}", ms(p.matching)),
                    format!("{:.2}", ms(p.materialize)),
                ),
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            writeln!(
                f,
                "{:>3} {:>3} {:>5.2} {:<9} {:>10.2} {:>8.3} {:>8} {:>9} {:>8} {:>10} {:>9.2} {:>8.1} {:>8}",
                c.key_bytes,
                c.payloads,
                c.match_ratio,
                r.name,
                r.seconds * 1e3,
                (self.r_rows + self.s_rows) as f64 / r.seconds / 1e9,
                k,
                t,
                m,
                mat,
                floor * 1e3,
                r.seconds / floor,
                cpu
            )?;
        }
        write!(
            f,
            "(Gtup/s: (|R| + |S|) / time; phases in ms, each ended by a synchronisation; GFTR payloads move in the key's radix \
             passes, so their cost is in transform (Wu et al. 2025 counts it as materialisation); floor: inputs read once and the output written once at the device-copy \
             bandwidth; vs cpu: CPU time / this time)"
        )
    }
}
