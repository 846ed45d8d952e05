//! `datafusion-gpu`: the DataFusion CLI with the GPU rule registered, plus `doctor`, `demo` and
//! `bench`. Built on the library's public API and the `datafusion-cli` crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::demo::DemoOptions;
use clap::{Args, Parser, Subcommand};
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{GreedyMemoryPool, MemoryPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::ExplainFormat;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_cli::catalog::DynamicObjectStoreCatalog;
use datafusion_cli::exec;
use datafusion_cli::functions::ParquetMetadataFunc;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};
use datafusion_gpu::config::ByteSize;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::device::{Gpu, probe};
use datafusion_gpu::distributed::{LocalWorkers, WorkerServer, WorkerUrls, distributed_session};
use datafusion_gpu::{GpuConfig, SessionStateBuilderGpuExt, with_gpu_options};
use datafusion_gpu_bench::bench::aggregate::{self, AggregateBenchOptions};
use datafusion_gpu_bench::bench::chunksets::{self, ChunksetBenchOptions};
use datafusion_gpu_bench::bench::join::{self, JoinBenchOptions};
use datafusion_gpu_bench::bench::multi_gpu::{self, MultiGpuBenchOptions};
use datafusion_gpu_bench::bench::primitives;
use datafusion_gpu_bench::bench::sweep::{self, SweepOptions};
use datafusion_gpu_bench::bench::transfer::{self, TransferBenchOptions};
use datafusion_gpu_bench::bench::triton::{self, TritonBenchOptions};
use datafusion_gpu_bench::fuzz::{self, FuzzOptions};
use datafusion_gpu_bench::tpch::concurrency::{self, ConcurrencyOptions};
use datafusion_gpu_bench::tpch::runner::{self, SuiteBenchOptions};
use datafusion_gpu_bench::tpch::{Suite, data};
use mimalloc::MiMalloc;

mod demo;

#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "datafusion-gpu",
    version,
    about = "DataFusion SQL with joins and aggregations on NVIDIA GPUs",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    sql: SqlArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the GPU, its driver and NVRTC, and measure its bandwidths; exits non-zero without a GPU.
    Doctor {
        /// CUDA ordinal of the device.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Bytes per host<->device transfer measurement.
        #[arg(long, default_value = "256M")]
        transfer_bytes: ByteSize,
        /// A device set (as gpu.devices: '0,1', 'all', '0,0' for logical devices) whose copy
        /// bandwidth between every pair is measured and printed as a matrix.
        #[arg(long, default_value = "")]
        devices: String,
    },
    /// Generate data in memory, run a join + aggregate with the GPU rule on and off, and compare.
    Demo {
        #[arg(long, default_value_t = 2_000_000)]
        orders: usize,
        #[arg(long, default_value_t = 100_000)]
        customers: usize,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Generate TPC-H or SSB data to Parquet: `OUT/<suite>-sf<SF>/<table>.parquet`.
    Gen {
        #[arg(value_enum)]
        suite: SuiteArg,
        #[arg(long, default_value_t = 1.0)]
        sf: f64,
        #[arg(long, default_value = "data")]
        out: std::path::PathBuf,
        /// Seed of the SSB generator (TPC-H data is dbgen's, fixed).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Differential fuzzing: random tables (in memory, through the table cache, or gpu_cache'd)
    /// and random queries and writes, each run by DataFusion alone and with every eligible
    /// operator forced onto the GPU under a rotating gpu.memory.limit; prints every mismatch,
    /// answer where DataFusion fails, GPU-only error, panic or hang with a self-contained repro,
    /// and exits non-zero when there is one.
    Fuzz(FuzzOptions),
    /// Serve as a worker of distributed queries (DataFusion Distributed over Arrow Flight): a
    /// coordinator started with `--workers` (or `bench ... --workers`) sends it stage plans,
    /// whose GPU operators it runs on its device under the coordinator's gpu. settings.
    Worker {
        /// TCP port to listen on.
        #[arg(long, default_value_t = 50051)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        host: std::net::IpAddr,
        /// CUDA ordinal of the device this worker's GPU operators use (default: the
        /// coordinator's gpu.device).
        #[arg(long)]
        device: Option<usize>,
        /// Read other workers' streams at most this many Gb/s (a rate limit standing for a
        /// network card of that rate; see `bench tpch --link-gbps`).
        #[arg(long, value_name = "GBPS")]
        link_gbps: Option<f64>,
    },
    /// Benchmarks (results belong in benches/results/).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Upload then download Int64 and Float64 columns through the runtime, against raw pinned bandwidth.
    Transfer {
        #[arg(long, default_value = "1G")]
        bytes: ByteSize,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        /// Host threads filling the staging buffers (0: one per core, at most 16).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Staging slot size.
        #[arg(long, default_value = "32M")]
        staging: ByteSize,
    },
    /// The join workload of Wu et al. 2025 on device-resident data: every GPU join algorithm with its
    /// phases, the bandwidth floor, and DataFusion's CPU hash join on the same data.
    Join(JoinBenchOptions),
    /// Out-of-core joins (Lutz et al. 2022, Triton join): a join whose build state is 2x, 4x and 8x the
    /// lowered memory limit, from host memory, against the PCIe bound, the in-memory GPU join
    /// and DataFusion's CPU join.
    Triton(TritonBenchOptions),
    /// The multi-GPU sort-merge join (Maltenberger et al. 2025) over 1, 2 and 4 devices: the copy
    /// bandwidth between them, each phase's time and the speedup per device count.
    MultiGpu(MultiGpuBenchOptions),
    /// The out-of-core multi-GPU sort-merge join (Maltenberger et al. 2025, chunksets): relations in
    /// host memory sorted chunkset by chunkset across 1, 2 and 4 devices, merged on the CPU and
    /// matched pair by pair; each phase's time and the speedup per device count.
    Chunksets(ChunksetBenchOptions),
    /// The group-by workload of Wu et al. 2025 on device-resident data: every GPU group-by algorithm
    /// with its phases over a sweep of group counts, the bandwidth floor, and DataFusion's CPU
    /// aggregate on the same data.
    Aggregate(AggregateBenchOptions),
    /// The cost model's sweep: joins and group-bys over sizes, match ratios, payloads, skew and
    /// group counts; every GPU algorithm, the CPU and the model's `auto` choice at each point
    /// (`--calibrate` first fits the model to the sweep and saves the device profile).
    Sweep(SweepOptions),
    /// The 22 TPC-H queries on the CPU and with the GPU rule, side by side: results checked,
    /// medians timed, a table printed and JSON + PNG written to benches/results/.
    Tpch(SuiteBenchOptions),
    /// The 13 SSB queries, as `bench tpch` runs TPC-H.
    Ssb(SuiteBenchOptions),
    /// Several TPC-H (or SSB) query streams at once on one GPU, each in its own session with its
    /// own `gpu.` settings (`--memory-limits`), every answer checked against DataFusion's.
    Concurrency(ConcurrencyOptions),
    /// Draws the PNG chart of `bench tpch|ssb` JSON records again, each next to its record.
    Chart {
        /// The JSON records.
        #[arg(required = true)]
        records: Vec<std::path::PathBuf>,
    },
    /// Scan, radix sort/partition and gather on device-resident data, against the bandwidth floor.
    Primitives {
        /// log2 of the number of rows.
        #[arg(long, default_value_t = 27)]
        log2_rows: u32,
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum SuiteArg {
    Tpch,
    Ssb,
}

impl From<SuiteArg> for Suite {
    fn from(s: SuiteArg) -> Suite {
        match s {
            SuiteArg::Tpch => Suite::Tpch,
            SuiteArg::Ssb => Suite::Ssb,
        }
    }
}

#[derive(Args, Debug)]
struct SqlArgs {
    /// Execute the given SQL command(s), then exit.
    #[arg(short = 'c', long, num_args = 0..)]
    command: Vec<String>,
    /// Execute commands from file(s), then exit.
    #[arg(short, long, num_args = 0..)]
    file: Vec<String>,
    /// Run the provided files on startup instead of ~/.datafusionrc.
    #[arg(short = 'r', long, num_args = 0.., conflicts_with = "file")]
    rc: Option<Vec<String>>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PrintFormat::Automatic)]
    format: PrintFormat,
    /// Reduce printing other than the results.
    #[arg(short, long)]
    quiet: bool,
    /// Most rows to display for the table format (a number, or 'inf').
    #[arg(long, default_value = "40")]
    maxrows: MaxRows,
    /// Console syntax highlighting.
    #[arg(long)]
    color: bool,
    /// Path to your data (the working folder).
    #[arg(short = 'p', long)]
    data_path: Option<PathBuf>,
    /// Batch size of each query.
    #[arg(short = 'b', long)]
    batch_size: Option<usize>,
    /// Host memory pool limit for DataFusion (e.g. '10G'); unlimited if not given.
    #[arg(short = 'm', long)]
    memory_limit: Option<ByteSize>,
    /// Run everything on the CPU (same as SET gpu.enable = false).
    #[arg(long)]
    no_gpu: bool,
    /// Run queries through these workers (`datafusion-gpu worker`; `URL,..` or `host:port,..`):
    /// DataFusion Distributed cuts each plan into stages, the GPU rule places their operators,
    /// and each worker runs its stages on its own device. Tables must be files the workers can
    /// read at the same paths.
    #[arg(long, value_name = "URL,..", conflicts_with = "local_workers")]
    workers: Option<String>,
    /// Start this many workers in this process (localhost ports) and run queries through them,
    /// as with --workers.
    #[arg(long, value_name = "N")]
    local_workers: Option<usize>,
}

fn session_config(args: &SqlArgs) -> Result<SessionConfig> {
    let mut options = ConfigOptions::from_env()?;
    if let Some(b) = args.batch_size {
        options.execution.batch_size = datafusion::common::config::ConfigNonZeroUsize::try_new(b)?;
    }
    if std::env::var_os("DATAFUSION_EXPLAIN_FORMAT").is_none() {
        options.explain.format = ExplainFormat::Tree;
    }
    if std::env::var_os("DATAFUSION_FORMAT_NULL").is_none() {
        options.format.null = "NULL".to_string();
    }
    let mut config = with_gpu_options(SessionConfig::from(options).with_information_schema(true));
    if args.no_gpu
        && let Some(g) = config.options_mut().extensions.get_mut::<GpuConfig>()
    {
        g.enable = false;
    }
    Ok(config)
}

async fn run_sql(args: SqlArgs) -> Result<()> {
    if let Some(p) = &args.data_path {
        std::env::set_current_dir(p)
            .map_err(|e| DataFusionError::Execution(format!("cannot use data path {}: {e}", p.display())))?;
    }
    let config = session_config(&args)?;
    let mut rt = RuntimeEnvBuilder::new();
    if let Some(limit) = args.memory_limit.and_then(|m| m.bytes()) {
        rt = rt.with_memory_pool(Arc::new(GreedyMemoryPool::new(limit as usize)) as Arc<dyn MemoryPool>);
    }
    let registry = Arc::new(InstrumentedObjectStoreRegistry::new());
    rt = rt.with_object_store_registry(Arc::clone(&registry) as _);
    let builder =
        SessionStateBuilder::new().with_config(config).with_runtime_env(rt.build_arc()?).with_default_features();
    let (state, local) = match (&args.workers, args.local_workers) {
        (None, None) => (builder.with_gpu().build(), None),
        (Some(list), _) => (distributed_session(builder, WorkerUrls::parse(list)?)?, None),
        (None, Some(n)) => {
            let local = LocalWorkers::start(n, None, None).await?;
            (distributed_session(builder, local.resolver()?)?, Some(local))
        }
    };
    let result = run_in(state, args, registry).await;
    if let Some(local) = local {
        local.stop().await?;
    }
    result
}

/// Runs the REPL, files or commands of `args` in a session of `state`.
async fn run_in(state: SessionState, args: SqlArgs, registry: Arc<InstrumentedObjectStoreRegistry>) -> Result<()> {
    let ctx = SessionContext::new_with_state(state).enable_url_table();
    ctx.refresh_catalogs().await?;
    ctx.register_catalog_list(Arc::new(DynamicObjectStoreCatalog::new(
        ctx.state().catalog_list().clone(),
        ctx.state_weak_ref(),
    )));
    ctx.register_udtf("parquet_metadata", Arc::new(ParquetMetadataFunc {}));

    let mut print = PrintOptions {
        format: args.format,
        quiet: args.quiet,
        maxrows: args.maxrows,
        color: args.color,
        instrumented_registry: registry,
    };
    if args.command.is_empty() && args.file.is_empty() {
        if !args.quiet {
            let gpu = match probe::device_count() {
                Ok(n) => format!("{n} GPU(s) found"),
                Err(e) => format!("{e}; queries run on the CPU"),
            };
            println!("datafusion-gpu v{} (DataFusion 55): {gpu}", env!("CARGO_PKG_VERSION"));
        }
        let rc = match args.rc {
            Some(files) => files,
            None => dirs::home_dir()
                .map(|h| h.join(".datafusionrc"))
                .filter(|p| p.exists())
                .map(|p| vec![p.to_string_lossy().into_owned()])
                .unwrap_or_default(),
        };
        if !rc.is_empty() {
            exec::exec_from_files(&ctx, rc, &print).await?;
        }
        return exec::exec_from_repl(&ctx, &mut print).await.map_err(|e| DataFusionError::External(Box::new(e)));
    }
    for f in &args.file {
        if !std::path::Path::new(f).is_file() {
            return Err(DataFusionError::Execution(format!("cannot read SQL file {f}")));
        }
    }
    if !args.file.is_empty() {
        exec::exec_from_files(&ctx, args.file, &print).await?;
    }
    if !args.command.is_empty() {
        exec::exec_from_commands(&ctx, args.command, &print).await?;
    }
    Ok(())
}

/// The device, or a message saying why there is none.
fn gpu_for(device: usize, cfg: GpuConfig) -> std::result::Result<Arc<Gpu>, String> {
    let mut cfg = cfg;
    cfg.device = device;
    probe::check_ordinal(device).map_err(|e| e.to_string())?;
    Gpu::for_config(&cfg).map_err(|e| e.to_string())
}

async fn run(cli: Cli) -> std::result::Result<(), String> {
    match cli.command {
        None => run_sql(cli.sql).await.map_err(|e| e.to_string()),
        Some(Command::Doctor { device, transfer_bytes, devices }) => {
            let devices = devices.parse().map_err(|e: datafusion::error::DataFusionError| e.to_string())?;
            let gpu = gpu_for(device, GpuConfig { devices, ..GpuConfig::default() })?;
            let opts = DoctorOptions {
                transfer_bytes: transfer_bytes.bytes().unwrap_or(256 << 20) as usize,
                ..DoctorOptions::default()
            };
            let report = doctor::run(&gpu, opts).map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Demo { orders, customers, runs, seed }) => {
            let o = DemoOptions { orders, customers, runs, seed };
            eprintln!("generating {orders} orders and {customers} customers in memory (seed {seed})...");
            let report = demo::run(&o, SessionConfig::new()).await.map_err(|e| e.to_string())?;
            println!("{report}");
            if report.results_match { Ok(()) } else { Err("the GPU session's answer differs from the CPU's".into()) }
        }
        Some(Command::Bench { which: BenchCommand::Transfer { bytes, runs, warmup, threads, staging } }) => {
            let cfg = GpuConfig { transfer_threads: threads, staging_buffer_size: staging, ..Default::default() };
            let gpu = gpu_for(0, cfg)?;
            let opts = TransferBenchOptions {
                bytes: bytes.bytes().unwrap_or(1 << 30) as usize,
                runs,
                warmup,
                ..TransferBenchOptions::default()
            };
            let report = transfer::run(&gpu, opts).map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Join(opts) }) => {
            let gpu = gpu_for(0, GpuConfig::default())?;
            let report = join::run(&gpu, &opts).await.map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::MultiGpu(opts) }) => {
            let report = multi_gpu::run(&opts).map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Chunksets(opts) }) => {
            let report = chunksets::run(&opts).map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Triton(opts) }) => {
            let gpu = gpu_for(0, GpuConfig::default())?;
            let report = triton::run(&gpu, &opts).await.map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Sweep(opts) }) => {
            let report = match &opts.from_json {
                Some(path) => sweep::rerun(&opts, path).map_err(|e| e.to_string())?,
                None => {
                    let gpu = gpu_for(0, GpuConfig::default())?;
                    sweep::run(&gpu, &opts).await.map_err(|e| e.to_string())?
                }
            };
            println!("{report}");
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Aggregate(opts) }) => {
            let gpu = gpu_for(0, GpuConfig::default())?;
            let report = aggregate::run(&gpu, &opts).await.map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Worker { port, host, device, link_gbps }) => {
            let addr = std::net::SocketAddr::new(host, port);
            let worker = WorkerServer::start(addr, device, link_gbps).await.map_err(|e| e.to_string())?;
            let gpu = match probe::device_count() {
                Ok(n) => format!(
                    "{n} GPU(s) found; GPU operators on device {}",
                    device.map_or("gpu.device".into(), |d| d.to_string())
                ),
                Err(e) => format!("{e}; its stages run on the CPU"),
            };
            eprintln!("datafusion-gpu worker listening on {} ({gpu}); Ctrl-C stops it", worker.addr());
            tokio::select! {
                served = worker.wait() => served.map_err(|e| e.to_string()),
                _ = tokio::signal::ctrl_c() => Ok(()),
            }
        }
        Some(Command::Gen { suite, sf, out, seed }) => {
            let suite = Suite::from(suite);
            let partitions = std::thread::available_parallelism().map_or(1, |n| n.get());
            let bars = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let dir = data::data_dir(&out, suite, sf);
            let tables = data::generate_parquet(&dir, suite, sf, seed, partitions, &data::Progresses::new(bars))
                .map_err(|e| e.to_string())?;
            for (name, rows) in &tables {
                println!("{name:<10} {rows:>12} rows");
            }
            println!("wrote {}", dir.display());
            Ok(())
        }
        Some(Command::Fuzz(mut opts)) => {
            opts.progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let report = fuzz::run(&opts).await.map_err(|e| e.to_string())?;
            println!("{}", report.summary(opts.seed));
            println!("{}", report.closing_line());
            match report.failures.is_empty() {
                true => Ok(()),
                false => Err(format!("{} of {} fuzz queries failed", report.failures.len(), report.queries)),
            }
        }
        Some(Command::Bench { which: BenchCommand::Tpch(opts) }) => suite_bench(Suite::Tpch, &opts).await,
        Some(Command::Bench { which: BenchCommand::Ssb(opts) }) => suite_bench(Suite::Ssb, &opts).await,
        Some(Command::Bench { which: BenchCommand::Concurrency(opts) }) => {
            let report = concurrency::run(&opts).await.map_err(|e| e.to_string())?;
            println!("{}", report.render());
            match report.problems() {
                0 => Ok(()),
                n => Err(format!("{n} queries failed or differ from DataFusion's answers (see above)")),
            }
        }
        Some(Command::Bench { which: BenchCommand::Chart { records } }) => {
            for r in &records {
                let png = runner::redraw_chart(r).map_err(|e| e.to_string())?;
                println!("wrote {}", png.display());
            }
            Ok(())
        }
        Some(Command::Bench { which: BenchCommand::Primitives { log2_rows, runs, seed } }) => {
            let gpu = gpu_for(0, GpuConfig::default())?;
            let report = primitives::run(&gpu, log2_rows, runs, seed).map_err(|e| e.to_string())?;
            println!("{report}");
            Ok(())
        }
    }
}

async fn suite_bench(suite: Suite, opts: &SuiteBenchOptions) -> Result<(), String> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = runner::run(suite, opts, &command).await.map_err(|e| e.to_string())?;
    if opts.explain {
        for q in &report.queries {
            println!("{} with the GPU rule:\n{}", q.query, q.plan);
            for p in &q.operators {
                println!("  {p}");
            }
        }
    }
    println!("{report}");
    if report.all_ok { Ok(()) } else { Err("some queries failed or differ from the CPU (see above)".into()) }
}

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("datafusion-gpu: {e}");
            ExitCode::FAILURE
        }
    }
}
