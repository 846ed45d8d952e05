//! `datafusion-gpu bench transfer`: uploads then downloads Int64 and Float64 columns through the
//! runtime (packing, pinned staging, device buffers, pinned download into Arrow buffers) and
//! compares the rates with the raw pinned copy bandwidth measured in the same process.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;

use datafusion_gpu::columns::{DeviceBatch, HostUpload};
use datafusion_gpu::config::human_bytes;
use datafusion_gpu::config::{ByteSize, GpuConfig};
use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::device::transfer::Stores;
use datafusion_gpu::error::{CudaResultExt, Result, gpu_error};
use datafusion_gpu::exec::upload::{ChunkUploader, batch_bytes};

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
    /// Host memcpy from pageable Arrow buffers into pinned memory on the copy threads, bytes/s:
    /// the ceiling of the upload's staging step.
    pub host_copy: HostCopyRates,
    /// The same bytes narrowed as 16-byte integers (Decimal128 staging), source bytes/s.
    pub host_narrow: HostCopyRates,
    /// Median seconds of a staged upload with streaming stores.
    pub staged_streaming_upload_seconds: f64,
    /// Median seconds of an upload of buffers uploaded for the first time (staged, plain
    /// stores).
    pub staged_upload_seconds: f64,
    /// Aggregate rates, bytes/s, of (threads, rate) staged uploads of 8192-row batches in
    /// groups, as scans upload them.
    pub concurrent: Vec<(usize, f64)>,
    /// The upload that page-locks the buffers (their second), seconds.
    pub registering_upload_seconds: f64,
    /// Median seconds of a whole-batch upload (of buffers registered by then) and download.
    pub upload_seconds: f64,
    pub download_seconds: f64,
    /// First (cold) download, which allocates the pinned blocks.
    pub first_download_seconds: f64,
}

impl TransferBenchReport {
    pub fn staged_upload_rate(&self) -> f64 {
        self.options.bytes as f64 / self.staged_upload_seconds
    }

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
    let floats: Float64Array =
        (0..rows).map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64).collect::<Vec<_>>().into();
    let schema =
        Arc::new(Schema::new(vec![Field::new("i", DataType::Int64, false), Field::new("f", DataType::Float64, false)]));
    Ok(RecordBatch::try_new(schema, vec![Arc::new(ints) as ArrayRef, Arc::new(floats)])?)
}

/// Times of repeated upload + download round trips of one batch.
struct RoundTrips {
    /// After warm-up.
    ups: Vec<f64>,
    downs: Vec<f64>,
    /// Every upload, warm-up included, in order.
    all_ups: Vec<f64>,
    /// The very first download (cold pinned pool on a fresh process).
    first_download: f64,
}

fn round_trips(gpu: &Arc<Gpu>, batch: &RecordBatch, opts: &TransferBenchOptions) -> Result<RoundTrips> {
    let stream = gpu.stream();
    let mut r = RoundTrips { ups: vec![], downs: vec![], all_ups: vec![], first_download: 0.0 };
    let n = opts.warmup.max(2) + opts.runs.max(1);
    for i in 0..n {
        let t = Instant::now();
        let dev = DeviceBatch::upload(gpu, &stream, batch)?;
        stream.synchronize().gpu("waiting for the upload")?;
        let up = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let back = dev.download()?;
        let down = t.elapsed().as_secs_f64();
        if i == 0 {
            r.first_download = down;
        }
        if (i < 2 || i + 1 == n) && &back != batch {
            return Err(gpu_error("the downloaded batch differs from the uploaded one"));
        }
        r.all_ups.push(up);
        if i >= opts.warmup.max(2) {
            r.ups.push(up);
            r.downs.push(down);
        }
    }
    Ok(r)
}

/// Median rate, in source bytes a second, of copying the batch's column buffers into one pinned
/// block on the copy threads, as they are or (`narrow`) as 16-byte integers narrowed to 8 bytes.
fn measure_host_copy(
    gpu: &Arc<Gpu>,
    batch: &RecordBatch,
    opts: &TransferBenchOptions,
    stores: Stores,
    narrow: bool,
) -> Result<f64> {
    // The column data (no nulls: one values buffer each); `datas` keeps the slices alive.
    let datas: Vec<_> = batch.columns().iter().map(|c| c.to_data()).collect();
    let srcs: Vec<&[u8]> = datas
        .iter()
        .map(|d| {
            let s = d.buffers()[0].as_slice();
            if narrow { &s[..s.len() - s.len() % 16] } else { s }
        })
        .collect();
    let total: usize = srcs.iter().map(|s| s.len()).sum();
    let mut block = gpu.pinned().alloc(total)?;
    let base = block.as_mut_ptr();
    let pool = gpu.copy_threads();
    let mut times = Vec::new();
    for i in 0..opts.warmup + opts.runs.max(1) {
        let mut off = 0;
        let pieces: Vec<(&[u8], *mut u8)> = srcs
            .iter()
            .map(|s| {
                let p = (*s, unsafe { base.add(off) });
                off += if narrow { s.len() / 2 } else { s.len() };
                p
            })
            .collect();
        let t = Instant::now();
        // SAFETY: the pieces fill the block back to back, within its capacity; narrowed sources
        // are cut to whole 16-byte values.
        unsafe {
            if narrow {
                datafusion_gpu::device::transfer::parallel_narrow(&pool, &pieces, stores);
            } else {
                datafusion_gpu::device::transfer::parallel_copy(&pool, &pieces, stores);
            }
        }
        if i >= opts.warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    Ok(total as f64 / median(times))
}

/// Host copy rates, source bytes a second, with plain and with streaming stores.
#[derive(Debug, Clone, Copy)]
pub struct HostCopyRates {
    pub plain: f64,
    pub streaming: f64,
}

/// Rows of the batches of [`concurrent_uploads`]: DataFusion's default batch size, as the
/// in-memory tables of `bench tpch|ssb` hold.
const SCAN_BATCH_ROWS: usize = 8192;

/// Median aggregate rate, in bytes a second, of `streams` threads that each upload their share
/// of `batch`, cut into batches of [`SCAN_BATCH_ROWS`] rows dealt round-robin, in groups of
/// [`ChunkUploader::GROUP_BYTES`] assembled and staged as a GPU scan's uploads are (see
/// [`ChunkUploader`]), each thread on its own stream.
fn concurrent_uploads(gpu: &Arc<Gpu>, batch: &RecordBatch, streams: usize, opts: &TransferBenchOptions) -> Result<f64> {
    let streams = streams.max(1);
    let mut shares: Vec<Vec<RecordBatch>> = vec![Vec::new(); streams];
    let mut at = 0;
    while at < batch.num_rows() {
        let n = SCAN_BATCH_ROWS.min(batch.num_rows() - at);
        shares[(at / SCAN_BATCH_ROWS) % streams].push(batch.slice(at, n));
        at += n;
    }
    let group_bytes = ChunkUploader::GROUP_BYTES as usize;
    let one = |share: &[RecordBatch]| -> Result<()> {
        let stream = gpu.stream();
        let mut kept = Vec::new();
        let mut group: Vec<RecordBatch> = Vec::new();
        let mut bytes = 0;
        for (i, b) in share.iter().enumerate() {
            bytes += batch_bytes(b) as usize;
            group.push(b.clone());
            if bytes >= group_bytes || i + 1 == share.len() {
                let host = HostUpload::assemble(&std::mem::take(&mut group))?;
                kept.push(DeviceBatch::upload_prepared(gpu, &stream, host)?);
                bytes = 0;
            }
        }
        stream.synchronize().gpu("waiting for the uploads")
    };
    let mut times = Vec::new();
    for i in 0..opts.warmup + opts.runs.max(1) {
        let t = Instant::now();
        std::thread::scope(|scope| {
            let handles: Vec<_> = shares.iter().map(|share| scope.spawn(move || one(share))).collect();
            handles.into_iter().try_for_each(|h| h.join().map_err(|_| gpu_error("an upload thread panicked"))?)
        })?;
        if i >= opts.warmup {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    Ok(opts.bytes as f64 / median(times))
}

pub fn run(gpu: &Arc<Gpu>, opts: TransferBenchOptions) -> Result<TransferBenchReport> {
    let doc = doctor::run(gpu, DoctorOptions { device_bytes: 256 << 20, ..DoctorOptions::default() })?;
    let batch = make_batch(opts.bytes, opts.seed)?;
    let rates = |narrow: bool| -> Result<HostCopyRates> {
        Ok(HostCopyRates {
            plain: measure_host_copy(gpu, &batch, &opts, Stores::Plain, narrow)?,
            streaming: measure_host_copy(gpu, &batch, &opts, Stores::Streaming, narrow)?,
        })
    };
    let (host_copy, host_narrow) = (rates(false)?, rates(true)?);
    // Staged: registration off, so every upload copies through the staging slots, as for
    // batches uploaded once; with streaming stores, then with plain ones (the default), which
    // the measurements after these keep.
    let current = gpu.transfer_settings();
    let with_stores = |streaming: bool, register: u64| {
        gpu.with_config(&GpuConfig {
            streaming_stores: streaming,
            transfer_threads: current.threads,
            staging_buffer_size: ByteSize::Bytes(current.staging_bytes as u64),
            host_register_limit: ByteSize::Bytes(register),
            ..GpuConfig::default()
        })
    };
    let staged_streaming = round_trips(&with_stores(true, 0)?, &batch, &opts)?;
    let gpu = &with_stores(false, 0)?;
    let staged = round_trips(gpu, &batch, &opts)?;
    let concurrent = [1, 4, 16]
        .into_iter()
        .map(|n| Ok((n, concurrent_uploads(gpu, &batch, n, &opts)?)))
        .collect::<Result<Vec<_>>>()?;
    // Direct: the second upload registers the buffers, later ones read them in place.
    let gpu = &with_stores(false, datafusion_gpu::device::DEFAULT_REGISTER_LIMIT)?;
    let direct = round_trips(gpu, &batch, &opts)?;
    let registering_upload_seconds = direct.all_ups.get(1).copied().unwrap_or(f64::NAN);
    let (staged_upload_seconds, upload_seconds) = (median(staged.ups), median(direct.ups));
    let (download_seconds, first_download) = (median(direct.downs), staged.first_download);
    let s = gpu.transfer_settings();
    Ok(TransferBenchReport {
        device: gpu.info().name.clone(),
        options: opts,
        threads: s.threads,
        staging_bytes: s.staging_bytes,
        pinned_h2d: doc.h2d_pinned,
        pinned_d2h: doc.d2h_pinned,
        host_copy,
        host_narrow,
        staged_streaming_upload_seconds: median(staged_streaming.ups),
        staged_upload_seconds,
        concurrent,
        registering_upload_seconds,
        upload_seconds,
        download_seconds,
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
        for (what, r) in [("copy", self.host_copy), ("narrowing copy", self.host_narrow)] {
            writeln!(
                f,
                "host {what} into pinned memory on the copy threads, source GB/s: {:.1} plain stores, {:.1} streaming stores",
                r.plain / 1e9,
                r.streaming / 1e9
            )?;
        }
        writeln!(f, "{:<30} {:>10} {:>12} {:>16} {:>10}", "direction", "ms", "GB/s", "pinned GB/s", "of pinned")?;
        for (name, secs, rate, pinned) in [
            (
                "upload, staged, streaming stores",
                self.staged_streaming_upload_seconds,
                self.options.bytes as f64 / self.staged_streaming_upload_seconds,
                self.pinned_h2d,
            ),
            ("upload, staged (first sight)", self.staged_upload_seconds, self.staged_upload_rate(), self.pinned_h2d),
            ("upload, registered", self.upload_seconds, self.upload_rate(), self.pinned_h2d),
            ("download", self.download_seconds, self.download_rate(), self.pinned_d2h),
        ] {
            writeln!(
                f,
                "{name:<30} {:>10.2} {:>12.1} {:>16.1} {:>9.0}%",
                secs * 1e3,
                rate / 1e9,
                pinned / 1e9,
                100.0 * rate / pinned
            )?;
        }
        let rates: Vec<String> =
            self.concurrent.iter().map(|(n, r)| format!("{n} threads {:.1} GB/s", r / 1e9)).collect();
        writeln!(
            f,
            "staged uploads of {SCAN_BATCH_ROWS}-row batches in groups of {}, as scans upload them: {}",
            human_bytes(ChunkUploader::GROUP_BYTES),
            rates.join(", ")
        )?;
        write!(
            f,
            "(the registering upload took {:.2} ms; the first, cold download {:.2} ms, including pinned allocation; results checked equal)",
            self.registering_upload_seconds * 1e3,
            self.first_download_seconds * 1e3
        )
    }
}
