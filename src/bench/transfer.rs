//! `datafusion-gpu bench transfer`: uploads then downloads Int64 and Float64 columns through the
//! runtime (packing, pinned staging, device buffers, pinned download into Arrow buffers) and
//! compares the rates with the raw pinned copy bandwidth measured in the same process.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use crate::columns::DeviceBatch;
use crate::config::human_bytes;
use crate::device::Gpu;
use crate::device::doctor::{self, DoctorOptions};
use crate::error::{CudaResultExt, Result, gpu_error};

#[derive(Debug, Clone, Copy)]
pub struct TransferBenchOptions {
    /// Total bytes of column data (half Int64, half Float64).
    pub bytes: usize,
    pub warmup: usize,
    pub runs: usize,
    pub seed: u64,
}

impl Default for TransferBenchOptions {
    fn default() -> Self {
        TransferBenchOptions { bytes: 1 << 30, warmup: 2, runs: 10, seed: 42 }
    }
}

#[derive(Debug, Clone)]
pub struct TransferBenchReport {
    pub device: String,
    pub options: TransferBenchOptions,
    pub threads: usize,
    pub staging_bytes: usize,
    /// Raw pinned copy bandwidths (doctor's measurement), bytes/s.
    pub pinned_h2d: f64,
    pub pinned_d2h: f64,
    /// Median seconds of a whole-batch upload and download through the runtime.
    pub upload_seconds: f64,
    pub download_seconds: f64,
    /// First (cold) download, which allocates the pinned blocks.
    pub first_download_seconds: f64,
}

impl TransferBenchReport {
    pub fn upload_rate(&self) -> f64 {
        self.options.bytes as f64 / self.upload_seconds
    }

    pub fn download_rate(&self) -> f64 {
        self.options.bytes as f64 / self.download_seconds
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A batch of two non-null columns, Int64 and Float64, `bytes` in all, from a seeded generator.
pub fn make_batch(bytes: usize, seed: u64) -> Result<RecordBatch> {
    let rows = bytes / 16;
    // SplitMix64: fast, seeded, and every value distinct enough to catch misplaced bytes.
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let ints: Int64Array = (0..rows).map(|_| next() as i64).collect::<Vec<_>>().into();
    let floats: Float64Array = (0..rows).map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64).collect::<Vec<_>>().into();
    let schema = Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, false),
        Field::new("f", DataType::Float64, false),
    ]));
    Ok(RecordBatch::try_new(schema, vec![Arc::new(ints) as ArrayRef, Arc::new(floats)])?)
}

pub fn run(gpu: &Arc<Gpu>, opts: TransferBenchOptions) -> Result<TransferBenchReport> {
    let doc = doctor::run(gpu, DoctorOptions { device_bytes: 256 << 20, ..DoctorOptions::default() })?;
    let batch = make_batch(opts.bytes, opts.seed)?;
    let stream = gpu.stream();
    let mut ups = Vec::new();
    let mut downs = Vec::new();
    let mut first_download = 0.0;
    for i in 0..opts.warmup + opts.runs.max(1) {
        let t = Instant::now();
        let dev = DeviceBatch::upload(gpu, &stream, &batch)?;
        stream.synchronize().gpu("waiting for the upload")?;
        let up = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let back = dev.download()?;
        let down = t.elapsed().as_secs_f64();
        if i == 0 {
            first_download = down;
        }
        if i == 0 || i + 1 == opts.warmup + opts.runs.max(1) {
            if back != batch {
                return Err(gpu_error("the downloaded batch differs from the uploaded one"));
            }
        }
        if i >= opts.warmup {
            ups.push(up);
            downs.push(down);
        }
    }
    let s = gpu.transfer_settings();
    Ok(TransferBenchReport {
        device: gpu.info().name.clone(),
        options: opts,
        threads: s.threads,
        staging_bytes: s.staging_bytes,
        pinned_h2d: doc.h2d_pinned,
        pinned_d2h: doc.d2h_pinned,
        upload_seconds: median(ups),
        download_seconds: median(downs),
        first_download_seconds: first_download,
    })
}

impl fmt::Display for TransferBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "device {}: {} of Int64 + Float64 columns, {} staging slots, {} copy threads, median of {} runs after {} warm-up",
            self.device,
            human_bytes(o.bytes as u64),
            human_bytes(self.staging_bytes as u64),
            self.threads,
            o.runs,
            o.warmup
        )?;
        writeln!(f, "{:<10} {:>10} {:>12} {:>16} {:>10}", "direction", "ms", "GB/s", "pinned GB/s", "of pinned")?;
        for (name, secs, rate, pinned) in [
            ("upload", self.upload_seconds, self.upload_rate(), self.pinned_h2d),
            ("download", self.download_seconds, self.download_rate(), self.pinned_d2h),
        ] {
            writeln!(
                f,
                "{name:<10} {:>10.2} {:>12.1} {:>16.1} {:>9.0}%",
                secs * 1e3,
                rate / 1e9,
                pinned / 1e9,
                100.0 * rate / pinned
            )?;
        }
        write!(
            f,
            "(first, cold download: {:.2} ms, including pinned allocation; results checked equal)",
            self.first_download_seconds * 1e3
        )
    }
}
