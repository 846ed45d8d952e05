//! GPU discovery that never panics: a missing driver, a missing NVRTC, a failing `cuInit` or a
//! machine without devices all become a [`NoDevice`] with the reason, and queries stay on the CPU.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use cudarc::driver::{CudaContext, sys};

/// Why no GPU can be used. Shown in EXPLAIN and by `datafusion-gpu doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoDevice {
    pub reason: String,
}

impl fmt::Display for NoDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no usable GPU: {}", self.reason)
    }
}

impl std::error::Error for NoDevice {}

fn no_device(reason: impl Into<String>) -> NoDevice {
    NoDevice { reason: reason.into() }
}

/// Environment variable that hides every GPU from this process (for CPU-only runs and tests).
pub const DISABLE_ENV: &str = "DATAFUSION_GPU_DISABLE";

/// Number of CUDA devices, probed once per process.
pub fn device_count() -> Result<usize, NoDevice> {
    static PROBE: OnceLock<Result<usize, NoDevice>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

/// Checks that device `ordinal` exists.
pub fn check_ordinal(ordinal: usize) -> Result<(), NoDevice> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(no_device(format!(
            "GPU {ordinal} (gpu.device or gpu.devices) does not exist: the driver reports {n} device(s) (ordinals 0..{n})"
        )));
    }
    Ok(())
}

fn probe_uncached() -> Result<usize, NoDevice> {
    if std::env::var_os(DISABLE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Err(no_device(format!("{DISABLE_ENV} is set")));
    }
    // cudarc panics on first use when a library cannot be loaded: look before touching it.
    let driver = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !driver {
        return Err(no_device(
            "the NVIDIA driver library (libcuda.so) could not be loaded: no NVIDIA driver on this machine",
        ));
    }
    let nvrtc = catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false);
    if !nvrtc {
        return Err(no_device(
            "NVRTC (libnvrtc.so.13) could not be loaded: install the CUDA runtime compiler library \
             or add its folder to LD_LIBRARY_PATH",
        ));
    }
    let count = catch_unwind(AssertUnwindSafe(|| {
        cudarc::driver::result::init()?;
        CudaContext::device_count()
    }));
    match count {
        Ok(Ok(n)) if n > 0 => Ok(n as usize),
        Ok(Ok(_)) => Err(no_device("the NVIDIA driver reports no CUDA device")),
        Ok(Err(e)) => Err(no_device(format!("the CUDA driver failed to initialise: {e}"))),
        Err(_) => Err(no_device("the CUDA driver panicked while initialising")),
    }
}

/// Static facts about one device, read when its runtime is created.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: u64,
    /// Free device memory when this process first opened the device.
    pub free_memory_at_start: u64,
    pub sm_count: i32,
    pub l2_cache_bytes: i32,
    pub shared_memory_per_block_optin: i32,
    pub memory_bus_width_bits: i32,
    pub memory_clock_khz: i32,
    /// e.g. 13000 for CUDA 13.0.
    pub driver_version: i32,
    pub nvrtc_version: (i32, i32),
}

impl DeviceInfo {
    /// NVRTC target, e.g. `sm_90` for an H100 or H200.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }

    /// Peak memory bandwidth from the memory clock and bus width (double data rate), bytes/s;
    /// 0 when the driver does not report them.
    pub fn theoretical_bandwidth(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * self.memory_bus_width_bits as f64 / 8.0
    }

    pub(crate) fn read(ctx: &CudaContext) -> Result<DeviceInfo, cudarc::driver::DriverError> {
        use sys::CUdevice_attribute as A;
        let (free, total) = ctx.mem_get_info()?;
        let mut driver_version = 0;
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result()?;
        let (mut major, mut minor) = (0, 0);
        let nvrtc_ok = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS;
        let attr = |a| ctx.attribute(a).unwrap_or(0);
        Ok(DeviceInfo {
            ordinal: ctx.ordinal(),
            name: ctx.name()?,
            compute_capability: ctx.compute_capability()?,
            total_memory: total as u64,
            free_memory_at_start: free as u64,
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            l2_cache_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            shared_memory_per_block_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            memory_bus_width_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
            memory_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
            driver_version,
            nvrtc_version: if nvrtc_ok { (major, minor) } else { (0, 0) },
        })
    }
}
