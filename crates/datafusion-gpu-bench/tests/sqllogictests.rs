//! Runs every `sql-tests/*.slt` file without the GPU rule, with it, and with it over two logical
//! devices of one GPU (partitions spread over both), against the same expected output (the
//! sqllogictest crate's format, as DataFusion's own suite uses).
//!
//! `DFG_SLT_COMPLETE=1 cargo test --release sql_tests` rewrites the expected results from the
//! CPU run; review the diff before committing it.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use datafusion::prelude::{SessionConfig, SessionContext};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

use datafusion_gpu::GpuConfig;
use datafusion_gpu::config::{DevicesSetting, PlacementSetting};
use datafusion_gpu::gpu_session_context;

/// The two sessions every file runs in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Cpu,
    Gpu,
    /// The GPU rule over two logical devices of GPU 0 (`gpu.devices = '0,0'`), each GPU operator's
    /// partitions spread over both.
    GpuOnTwoDevices,
}

fn session(mode: Mode) -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(4).with_batch_size(64);
    match mode {
        Mode::Cpu => SessionContext::new_with_config(config),
        Mode::Gpu | Mode::GpuOnTwoDevices => {
            let gpu = GpuConfig {
                devices: match mode {
                    Mode::GpuOnTwoDevices => DevicesSetting::List(vec![0, 0]),
                    _ => DevicesSetting::One,
                },
                devices_spread_partitions: mode == Mode::GpuOnTwoDevices,
                min_rows: 0, // small test tables must not stay on the CPU for their size
                placement: PlacementSetting::Always, // nor for the cost model's estimate
                fuse_filters: true, // filters below aggregates run on the GPU as well
                cpu_fallback: false, // the GPU's own answers, no rerun on the CPU
                ..Default::default()
            };
            gpu_session_context(config.with_option_extension(gpu))
        }
    }
}

struct Db {
    ctx: SessionContext,
}

fn format_rows(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()?;
        for r in 0..batch.num_rows() {
            rows.push(
                formatters
                    .iter()
                    .map(|f| {
                        let v = f.value(r).to_string();
                        // As in DataFusion's suite: an empty string must not vanish between spaces.
                        if v.is_empty() { "(empty)".to_string() } else { v }
                    })
                    .collect(),
            );
        }
    }
    Ok(rows)
}

#[async_trait]
impl AsyncDB for Db {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let head = sql.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
        let batches = self.ctx.sql(sql).await?.collect().await?;
        if matches!(head.as_str(), "select" | "with" | "values" | "explain" | "show" | "(") {
            let rows = format_rows(&batches)?;
            let width = batches.first().map_or(0, |b| b.num_columns());
            Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; width], rows })
        } else {
            Ok(DBOutput::StatementComplete(0))
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "datafusion-gpu"
    }
}

fn slt_dir() -> PathBuf {
    // The files are the repository's (`sql-tests/` at the workspace root).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql-tests");
    // Where the test binary runs away from its source tree (the GPU machines), use the working
    // folder's copy.
    if manifest.is_dir() { manifest } else { PathBuf::from("sql-tests") }
}

fn slt_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(slt_dir())
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "slt")).collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

async fn run_file(path: &Path, mode: Mode) -> Result<(), String> {
    let mut runner = sqllogictest::Runner::new(move || async move { Ok(Db { ctx: session(mode) }) });
    runner.run_file_async(path).await.map_err(|e| format!("{} ({mode:?} session):\n{e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_tests_same_answers_with_and_without_the_gpu_rule() {
    let _g = datafusion_gpu::testing::gpu_lock();
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files found in {}", slt_dir().display());
    if std::env::var_os("DFG_SLT_COMPLETE").is_some() {
        for f in &files {
            let mut runner = sqllogictest::Runner::new(|| async { Ok(Db { ctx: session(Mode::Cpu) }) });
            runner
                .update_test_file(
                    f,
                    " ",
                    sqllogictest::default_validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::default_column_validator,
                )
                .await
                .unwrap_or_else(|e| panic!("completing {}: {e}", f.display()));
        }
    }
    let mut failures = Vec::new();
    for f in &files {
        for mode in [Mode::Cpu, Mode::Gpu, Mode::GpuOnTwoDevices] {
            if let Err(e) = run_file(f, mode).await {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n\n"));
    eprintln!("sql-tests: {} files, each passed with the GPU rule off, on, and on two logical devices", files.len());
}
