//! `datafusion-gpu doctor`: what the device is, and what it measures: device-memory bandwidth
//! (a large copy kernel, bytes read plus written), and host<->device bandwidth from pinned and
//! from pageable memory. Timed with CUDA events, median of several runs after warm-up.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaEvent, CudaStream, sys};

use super::Gpu;
use super::probe::DeviceInfo;
use crate::config::human_bytes;
use crate::error::{CudaResultExt, Result};

/// Sizes and repetitions of the measurements.
#[derive(Debug, Clone, Copy)]
pub struct DoctorOptions {
    /// Bytes per device-copy run (each run reads and writes this many).
    pub device_bytes: usize,
    /// Bytes per host<->device transfer run.
    pub transfer_bytes: usize,
    pub warmup: usize,
    pub runs: usize,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions { device_bytes: 1 << 30, transfer_bytes: 256 << 20, warmup: 2, runs: 10 }
    }
}

/// Everything `doctor` reports. Bandwidths in bytes per second.
#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub info: DeviceInfo,
    pub memory_limit: u64,
    pub kernel_cache_dir: Option<String>,
    /// How the `copy` module was obtained and how long it took.
    pub kernel_source: &'static str,
    pub kernel_load_seconds: f64,
    pub device_copy: f64,
    pub h2d_pinned: f64,
    pub h2d_pageable: f64,
    pub d2h_pinned: f64,
    pub d2h_pageable: f64,
    /// With a device set (`gpu.devices`), each device's label and its copy bandwidth to every
    /// device of the set (row: from, column: to; the diagonal a copy within one device).
    pub peers: Vec<(String, Vec<f64>)>,
    /// Whether each pair of the set has direct peer access (else copies go through host memory).
    pub peer_access: Vec<Vec<bool>>,
    pub options: DoctorOptions,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Times `op` (which enqueues work on `stream`) with events: median seconds over `runs` after `warmup`.
fn time_events(stream: &Arc<CudaStream>, opts: &DoctorOptions, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    let ctx = stream.context();
    // cudarc's default event flags disable timing.
    let new_event = || -> Result<CudaEvent> {
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).gpu("creating a timing event")
    };
    for _ in 0..opts.warmup {
        op()?;
    }
    stream.synchronize().gpu("synchronising")?;
    let mut secs = Vec::with_capacity(opts.runs);
    for _ in 0..opts.runs.max(1) {
        let (start, end) = (new_event()?, new_event()?);
        start.record(stream).gpu("recording an event")?;
        op()?;
        end.record(stream).gpu("recording an event")?;
        end.synchronize().gpu("waiting for a timed run")?;
        secs.push(start.elapsed_ms(&end).gpu("reading an event timer")? as f64 / 1e3);
    }
    Ok(median(secs))
}

/// Measures `gpu`. Allocates `2 * device_bytes` of device memory and `transfer_bytes` of pinned
/// and of pageable host memory.
pub fn run(gpu: &Gpu, opts: DoctorOptions) -> Result<DoctorReport> {
    let stream = gpu.stream();
    let t0 = Instant::now();
    let before = gpu.kernels().stats.disk_hits.load(std::sync::atomic::Ordering::SeqCst);
    gpu.kernels().module(super::kernel::Module::Copy)?;
    let kernel_load_seconds = t0.elapsed().as_secs_f64();
    let hit = gpu.kernels().stats.disk_hits.load(std::sync::atomic::Ordering::SeqCst) > before;

    // Device memory: copy kernel over non-zero data.
    let n = opts.device_bytes;
    let src = gpu.alloc(&stream, n, "doctor's copy source")?;
    let mut dst = gpu.alloc(&stream, n, "doctor's copy target")?;
    // fill_u32(u32* dst, u32 value, u64 n) over n/4 words of `src`.
    let fill = [super::ptr(&src, &stream), super::KArg::U32(0x9e37_79b9), super::KArg::U64((n / 4) as u64)];
    gpu.launch_n(&stream, super::kernel::FILL_U32, (n / 4) as u64, &fill)?;
    let t = time_events(&stream, &opts, || gpu.copy_device(&stream, &src, &mut dst, n))?;
    let device_copy = 2.0 * n as f64 / t;
    drop((src, dst));

    // Host <-> device.
    let m = opts.transfer_bytes;
    let dev = gpu.alloc(&stream, m, "doctor's transfer buffer")?;
    let dptr = dev.raw_ptr(&stream);
    let mut pinned = gpu.pinned().alloc(m)?;
    let pinned_ptr = pinned.as_mut_ptr();
    unsafe { std::ptr::write_bytes(pinned_ptr, 0x5a, m) };
    let mut pageable = vec![0xa5u8; m];
    let cu = stream.cu_stream();
    let h2d = |p: *const u8| -> Result<()> {
        unsafe { sys::cuMemcpyHtoDAsync_v2(dptr, p as *const _, m, cu) }.result().gpu("host-to-device copy")
    };
    let h2d_pinned = m as f64 / time_events(&stream, &opts, || h2d(pinned_ptr))?;
    let h2d_pageable = m as f64 / time_events(&stream, &opts, || h2d(pageable.as_ptr()))?;
    let pageable_ptr = pageable.as_mut_ptr();
    let d2h = |p: *mut u8| -> Result<()> {
        unsafe { sys::cuMemcpyDtoHAsync_v2(p as *mut _, dptr, m, cu) }.result().gpu("device-to-host copy")
    };
    let d2h_pinned = m as f64 / time_events(&stream, &opts, || d2h(pinned_ptr))?;
    let d2h_pageable = m as f64 / time_events(&stream, &opts, || d2h(pageable_ptr))?;
    stream.synchronize().gpu("synchronising")?;
    drop(dev);

    // Between the devices of the set, when there are several.
    let set: Vec<&Gpu> = std::iter::once(gpu).chain(gpu.peers().iter().map(|p| p.as_ref())).collect();
    let (peers, peer_access) = if set.len() > 1 {
        let matrix = super::peer::bandwidth_matrix(&set, m, opts.runs.max(1))?;
        let access = set
            .iter()
            .map(|a| set.iter().map(|b| super::peer::can_access_peer(a, b)).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        (set.iter().map(|g| g.label()).zip(matrix).collect(), access)
    } else {
        (Vec::new(), Vec::new())
    };

    Ok(DoctorReport {
        info: gpu.info().clone(),
        memory_limit: gpu.memory().limit(),
        kernel_cache_dir: gpu.kernels().cache_dir().map(|p| p.display().to_string()),
        kernel_source: if hit { "disk cache" } else { "compiled by NVRTC" },
        kernel_load_seconds,
        device_copy,
        h2d_pinned,
        h2d_pageable,
        d2h_pinned,
        d2h_pageable,
        peers,
        peer_access,
        options: opts,
    })
}

fn gbps(b: f64) -> String {
    format!("{:.1} GB/s", b / 1e9)
}

impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.info;
        let rows: Vec<(&str, String)> = vec![
            ("device", format!("{} (ordinal {})", i.name, i.ordinal)),
            ("compute capability", format!("{}.{} ({})", i.compute_capability.0, i.compute_capability.1, i.arch())),
            (
                "memory",
                format!("{} total, {} free at start", human_bytes(i.total_memory), human_bytes(i.free_memory_at_start)),
            ),
            ("gpu.memory.limit", human_bytes(self.memory_limit)),
            ("multiprocessors", i.sm_count.to_string()),
            ("L2 cache", human_bytes(i.l2_cache_bytes as u64)),
            ("shared memory / block", format!("{} (opt-in)", human_bytes(i.shared_memory_per_block_optin as u64))),
            ("driver (CUDA)", format!("{}.{}", i.driver_version / 1000, (i.driver_version % 1000) / 10)),
            ("NVRTC", format!("{}.{}", i.nvrtc_version.0, i.nvrtc_version.1)),
            ("kernel cache", self.kernel_cache_dir.clone().unwrap_or_else(|| "off".into())),
            ("copy kernels", format!("{} in {:.3} s", self.kernel_source, self.kernel_load_seconds)),
            (
                "device memory",
                format!(
                    "{} (copy of {}, read+write; datasheet-style peak {})",
                    gbps(self.device_copy),
                    human_bytes(self.options.device_bytes as u64),
                    gbps(i.theoretical_bandwidth())
                ),
            ),
            ("host->device pinned", gbps(self.h2d_pinned)),
            ("host->device pageable", gbps(self.h2d_pageable)),
            ("device->host pinned", gbps(self.d2h_pinned)),
            ("device->host pageable", gbps(self.d2h_pageable)),
        ];
        let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(f, "{k:<w$}  {v}")?;
        }
        if !self.peers.is_empty() {
            writeln!(
                f,
                "copies between the devices of gpu.devices (GB/s, row: from, column: to; * = through host memory):"
            )?;
            let labels: Vec<&str> = self.peers.iter().map(|(l, _)| l.as_str()).collect();
            let cell = 10;
            write!(f, "{:>6}", "")?;
            for l in &labels {
                write!(f, "{l:>cell$}")?;
            }
            writeln!(f)?;
            for (i, (l, row)) in self.peers.iter().enumerate() {
                write!(f, "{l:>6}")?;
                for (j, b) in row.iter().enumerate() {
                    let direct = self.peer_access.get(i).and_then(|r| r.get(j)).copied().unwrap_or(true);
                    let text = format!("{:.1}{}", b / 1e9, if direct { "" } else { "*" });
                    write!(f, "{text:>cell$}")?;
                }
                writeln!(f)?;
            }
        }
        write!(
            f,
            "(transfers: {} each; medians of {} runs after {} warm-up runs, timed with CUDA events)",
            human_bytes(self.options.transfer_bytes as u64),
            self.options.runs,
            self.options.warmup
        )
    }
}
