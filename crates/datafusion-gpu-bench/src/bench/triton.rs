//! The out-of-core join benchmark (`datafusion-gpu bench triton`): Lutz et al.'s setting on PCIe.
//! R (unique keys, shuffled) and S (foreign keys into R), one Int32 payload each, in host memory;
//! DataFusion's `HashJoinExec` (CollectLeft, as `bench join`'s CPU baseline) placed by the GPU rule
//! with `gpu.memory.limit` lowered so that the build state is 2x, 4x and 8x the limit, so the join
//! runs out of core ([`datafusion_gpu::join::triton`]); also the same join in memory (default limit) and on
//! the CPU. The output (key, r payload, s payload) is streamed to the host and counted.
//!
//! The link bound: the bytes the out-of-core join moves over the link (inputs up, both sides'
//! partitions down and up again, the output down; the spilled bytes from the exec's
//! `spill_bytes` metric) over the pinned bandwidths `doctor` measures in the same process.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;

use super::join::{Config, collect_left_plan, relations};
use super::median;
use datafusion_gpu::config::{ByteSize, DevicesSetting, GpuConfig};
use datafusion_gpu::cost::PlacementSetting;
use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::error::{Result, gpu_error};
use datafusion_gpu::exec::metric_total;
use datafusion_gpu::join::JoinAlgorithmSetting;
use datafusion_gpu::join::triton::STATE_FACTOR;
use datafusion_gpu::rule::GpuOptimizerRule;
use datafusion_gpu::session::gpu_session_context;

/// The benchmark's options, also its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TritonBenchOptions {
    /// log2 of |R| (unique Int32 keys, shuffled).
    #[arg(long, default_value_t = 26)]
    pub log_r: u32,
    /// log2 of |S| (foreign keys into R).
    #[arg(long, default_value_t = 27)]
    pub log_s: u32,
    /// Build state over the memory limit, for each run out of core.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    pub factors: Vec<u64>,
    /// The join algorithm setting (as gpu.join.algorithm).
    #[arg(long, default_value = "auto")]
    pub algorithm: JoinAlgorithmSetting,
    /// Partitions of the probe side (and DataFusion's target partitions).
    #[arg(long, default_value_t = 16)]
    pub partitions: usize,
    /// The session's device set (as gpu.devices: '0,1', 'all'); the out-of-core partitions are
    /// joined on its devices in turn. Default: the one device.
    #[arg(long, default_value = "")]
    pub devices: String,
    #[command(flatten)]
    pub runs: super::BenchRuns,
}

/// One measured setting.
#[derive(Debug, Clone)]
pub struct TritonRow {
    /// "cpu", "gpu in memory", or "gpu 1/N" (the limit a factor N below the state).
    pub name: String,
    pub limit: Option<u64>,
    pub seconds: f64,
    pub output_rows: u64,
    /// Bytes spilled to host memory (both sides), and the link bound, for out-of-core runs.
    pub spill_bytes: u64,
    pub link_seconds: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct TritonReport {
    pub device: String,
    pub h2d: f64,
    pub d2h: f64,
    pub r_rows: u64,
    pub s_rows: u64,
    pub state_bytes: u64,
    pub runs: usize,
    pub cpu_runs: usize,
    pub partitions: usize,
    pub rows: Vec<TritonRow>,
}

/// Runs `plan` (placed by the rule for `ctx` when `gpu`), streaming its output: seconds, output
/// rows, and the spilled bytes; with `explain`, prints the plan with its metrics to stderr.
async fn run_once(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &SessionContext,
    gpu: bool,
    explain: bool,
) -> Result<(f64, u64, u64)> {
    let t = Instant::now();
    let plan = if gpu { GpuOptimizerRule::new().optimize(plan, ctx.state().config_options())? } else { plan };
    let mut stream = execute_stream(Arc::clone(&plan), ctx.task_ctx())?;
    let mut rows = 0u64;
    while let Some(b) = stream.next().await {
        rows += b?.num_rows() as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    if explain {
        let shown = datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(plan.as_ref())
            .indent(true)
            .to_string();
        eprintln!("{shown}");
    }
    let spilled = metric_total(&plan, None, "spill_bytes") as u64;
    Ok((secs, rows, spilled))
}

fn gpu_context(o: &TritonBenchOptions, devices: &DevicesSetting, limit: Option<u64>) -> SessionContext {
    let cfg = GpuConfig {
        min_rows: 0,
        placement: PlacementSetting::Always,
        join_algorithm: o.algorithm,
        memory_limit: limit.map_or(ByteSize::Auto, ByteSize::Bytes),
        devices: devices.clone(),
        ..Default::default()
    };
    gpu_session_context(SessionConfig::new().with_target_partitions(o.partitions).with_option_extension(cfg))
}

pub async fn run(gpu: &Arc<Gpu>, o: &TritonBenchOptions) -> Result<TritonReport> {
    let doc = doctor::run(gpu, DoctorOptions::default())?;
    let (r_rows, s_rows) = (1u64 << o.log_r, 1u64 << o.log_s);
    let config = Config { key_bytes: 4, payloads: 1, match_ratio: 1.0, skew: 0.0 };
    let (r, s, _) = relations(config, r_rows, s_rows, o.runs.seed)?;
    // The build columns (key and payload) in device layout, times the state factor.
    let state_bytes = r_rows * 8 * STATE_FACTOR;
    let in_bytes = (r_rows + s_rows) * 8;
    let devices: DevicesSetting = match o.devices.trim() {
        "" => DevicesSetting::One,
        d => d.parse().map_err(|e| gpu_error(format!("--devices: {e}")))?,
    };
    let mut rows = Vec::new();
    let mut settings: Vec<(String, Option<u64>)> = vec![("gpu in memory".into(), None)];
    for &f in &o.factors {
        settings.push((format!("gpu 1/{f}"), Some(state_bytes / f.max(1))));
    }
    for (name, limit) in settings {
        let ctx = gpu_context(o, &devices, limit);
        let mut runs = Vec::new();
        for i in 0..=o.runs.runs.max(1) {
            let last = i == o.runs.runs.max(1);
            let (secs, out, spilled) = run_once(collect_left_plan(&r, &s, o.partitions)?, &ctx, true, last).await?;
            if i > 0 {
                runs.push((secs, (out, spilled)));
            }
        }
        let (seconds, (output_rows, spill_bytes)) = median(runs);
        let link_seconds = limit.map(|_| {
            let out_bytes = output_rows * 12;
            (in_bytes + spill_bytes) as f64 / doc.h2d_pinned + (spill_bytes + out_bytes) as f64 / doc.d2h_pinned
        });
        eprintln!("{name}: {:.1} ms", seconds * 1e3);
        rows.push(TritonRow { name, limit, seconds, output_rows, spill_bytes, link_seconds });
    }
    if o.runs.cpu_runs > 0 {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(o.partitions));
        let mut runs = Vec::new();
        for i in 0..=o.runs.cpu_runs {
            let (secs, out, _) = run_once(collect_left_plan(&r, &s, o.partitions)?, &ctx, false, false).await?;
            if i > 0 {
                runs.push((secs, out));
            }
        }
        let (seconds, output_rows) = median(runs);
        eprintln!("cpu: {:.1} ms", seconds * 1e3);
        rows.push(TritonRow {
            name: "cpu".into(),
            limit: None,
            seconds,
            output_rows,
            spill_bytes: 0,
            link_seconds: None,
        });
    }
    if let Some(bad) = rows.iter().find(|x| x.output_rows != rows[0].output_rows) {
        return Err(gpu_error(format!(
            "{} returned {} rows where {} returned {}",
            bad.name, bad.output_rows, rows[0].name, rows[0].output_rows
        )));
    }
    Ok(TritonReport {
        device: doc.info.name.clone(),
        h2d: doc.h2d_pinned,
        d2h: doc.d2h_pinned,
        r_rows,
        s_rows,
        state_bytes,
        runs: o.runs.runs,
        cpu_runs: o.runs.cpu_runs,
        partitions: o.partitions,
        rows,
    })
}

impl fmt::Display for TritonReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        writeln!(
            f,
            "device {}: pinned link {:.1} GB/s up, {:.1} GB/s down (doctor, same process); |R| = {}, |S| = {} \
             (Int32 key + Int32 payload each, host memory); build state {:.0} MiB; CollectLeft, {} probe \
             partitions; GPU: median of {} runs after 1 warm-up; CPU: DataFusion HashJoinExec, median of {} after 1",
            self.device,
            self.h2d / 1e9,
            self.d2h / 1e9,
            self.r_rows,
            self.s_rows,
            mib(self.state_bytes),
            self.partitions,
            self.runs,
            self.cpu_runs
        )?;
        let cpu = self.rows.iter().find(|r| r.name == "cpu").map(|r| r.seconds);
        writeln!(
            f,
            "{:<14} {:>10} {:>10} {:>8} {:>11} {:>9} {:>8} {:>8}",
            "run", "limit MiB", "ms", "Gtup/s", "spill MiB", "link ms", "x link", "vs cpu"
        )?;
        for r in &self.rows {
            let tput = (self.r_rows + self.s_rows) as f64 / r.seconds / 1e9;
            let limit = r.limit.map_or("-".to_string(), |l| format!("{:.0}", mib(l)));
            let (link, xlink) = match r.link_seconds {
                Some(l) => (format!("{:.1}", l * 1e3), format!("{:.2}", r.seconds / l)),
                None => ("-".into(), "-".into()),
            };
            let vs = cpu.map_or("-".to_string(), |c| format!("{:.1}x", c / r.seconds));
            writeln!(
                f,
                "{:<14} {:>10} {:>10.1} {:>8.3} {:>11.0} {:>9} {:>8} {:>8}",
                r.name,
                limit,
                r.seconds * 1e3,
                tput,
                mib(r.spill_bytes),
                link,
                xlink,
                vs
            )?;
        }
        write!(
            f,
            "(link bound: (inputs + spilled bytes) up and (spilled bytes + output) down at the pinned rates; \
             output rows {} each run; times include planning, transfers and streaming the output to the host)",
            self.rows.first().map_or(0, |r| r.output_rows)
        )
    }
}
