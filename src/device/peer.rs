//! Copies between the devices of a session's set (`gpu.devices`): over the peer link
//! (`cuMemcpyPeerAsync`, peer access enabled once per pair of GPUs where the driver allows it;
//! through host memory, by the driver, where it does not), and a plain device copy between
//! logical devices of one GPU. No NVLink multicast object is created anywhere.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cudarc::driver::{CudaStream, sys};

use super::{DeviceBuffer, Gpu};
use crate::error::{CudaResultExt, Result, gpu_error};

/// Whether two devices are one GPU (logical devices share its context).
pub fn same_gpu(a: &Gpu, b: &Gpu) -> bool {
    a.context().cu_ctx() == b.context().cu_ctx()
}

/// Whether the driver lets GPU `a` read GPU `b`'s memory directly (over NVLink or PCIe).
pub fn can_access_peer(a: &Gpu, b: &Gpu) -> Result<bool> {
    if same_gpu(a, b) {
        return Ok(true);
    }
    let mut can = 0;
    // SAFETY: both handles are live devices of opened contexts; `can` outlives the call.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.context().cu_device(), b.context().cu_device()) }
        .result()
        .gpu(format!("asking whether GPU {} can access GPU {}", a.label(), b.label()))?;
    Ok(can != 0)
}

/// Enables peer access between `a`'s and `b`'s GPUs in both directions, once per process, where
/// the driver allows it (copies between GPUs without it go through host memory).
pub fn enable_peer_access(a: &Gpu, b: &Gpu) -> Result<()> {
    static ENABLED: OnceLock<Mutex<HashSet<(usize, usize)>>> = OnceLock::new();
    if same_gpu(a, b) {
        return Ok(());
    }
    let (oa, ob) = (a.info().ordinal, b.info().ordinal);
    let mut done = ENABLED.get_or_init(|| Mutex::new(HashSet::new())).lock().unwrap_or_else(|e| e.into_inner());
    if done.contains(&(oa.min(ob), oa.max(ob))) {
        return Ok(());
    }
    for (from, to) in [(a, b), (b, a)] {
        if !can_access_peer(from, to)? {
            continue;
        }
        from.context().bind_to_thread().gpu("binding a context")?;
        // SAFETY: `to`'s context is live; the flags must be 0.
        let r = unsafe { sys::cuCtxEnablePeerAccess(to.context().cu_ctx(), 0) };
        if r != sys::CUresult::CUDA_SUCCESS && r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            r.result().gpu(format!("enabling GPU {}'s access to GPU {}", from.label(), to.label()))?;
        }
        // Device buffers come from `to`'s stream-ordered memory pool, which context peer access
        // does not cover: without the pool's own grant, copies between the GPUs were staged
        // through host memory (38 GB/s between two NVLinked H200s).
        grant_pool_access(to, from)?;
    }
    done.insert((oa.min(ob), oa.max(ob)));
    Ok(())
}

/// Lets GPU `reader` read and write the memory `owner`'s default memory pool hands out.
fn grant_pool_access(owner: &Gpu, reader: &Gpu) -> Result<()> {
    if !owner.context().has_async_alloc() {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` outlives the call; the device handle is live.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, owner.context().cu_device()) }
        .result()
        .gpu(format!("reading GPU {}'s memory pool", owner.label()))?;
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: reader.info().ordinal as i32,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: one access descriptor, alive for the call.
    unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) }.result().gpu(format!(
        "granting GPU {} access to GPU {}'s memory pool",
        reader.label(),
        owner.label()
    ))
}

/// Copies `len` bytes from `src` at byte `src_at` into `dst` at byte `dst_at` on `stream` (a
/// stream of `dst`'s device), `src` lying on device `from` and `dst` on device `to`. The caller
/// orders the copy after the work that wrote `src` (e.g. by synchronising its stream).
#[allow(clippy::too_many_arguments)]
pub fn copy_between(
    from: &Gpu,
    src: &DeviceBuffer,
    src_at: usize,
    to: &Gpu,
    dst: &mut DeviceBuffer,
    dst_at: usize,
    len: usize,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    if src_at + len > src.len() || dst_at + len > dst.len() {
        return Err(gpu_error(format!(
            "a copy of {len} bytes from byte {src_at} of {} to byte {dst_at} of {} overruns its buffers",
            src.len(),
            dst.len()
        )));
    }
    if len == 0 {
        return Ok(());
    }
    let s = src.home_ptr() + src_at as u64;
    let d = dst.raw_ptr(stream) + dst_at as u64;
    to.context().bind_to_thread().gpu("binding a context")?;
    // SAFETY: both ranges lie inside live allocations (checked above); the caller ordered the
    // copy after the source's writers, and `dst` is freed on its own stream after this copy.
    let r = unsafe {
        if same_gpu(from, to) {
            cudarc::driver::result::memcpy_dtod_async(d, s, len, stream.cu_stream())
        } else {
            cudarc::driver::result::memcpy_peer_async(
                to.context().cu_ctx(),
                d,
                from.context().cu_ctx(),
                s,
                len,
                stream.cu_stream(),
            )
        }
    };
    r.gpu(format!("copying {len} bytes from GPU {} to GPU {}", from.label(), to.label()))
}

/// A copy of `src` (on device `from`, its writers finished) in a new buffer of device `to`, on
/// `stream`.
pub fn copy_buffer(
    from: &Gpu,
    src: &DeviceBuffer,
    to: &Gpu,
    stream: &Arc<CudaStream>,
    what: &str,
) -> Result<DeviceBuffer> {
    let mut out = to.alloc(stream, src.len(), what)?;
    copy_between(from, src, 0, to, &mut out, 0, src.len(), stream)?;
    Ok(out)
}

/// One device-to-device copy's bandwidth, bytes per second: `bytes` from `from` to `to`, the
/// median of `rounds` timed copies after one untimed.
pub fn measure_bandwidth(from: &Gpu, to: &Gpu, bytes: usize, rounds: usize) -> Result<f64> {
    let src_stream = from.stream();
    let src = from.alloc_filled(&src_stream, bytes, 0x5a, "peer bandwidth source")?;
    src_stream.synchronize().gpu("preparing a peer copy")?;
    let stream = to.stream();
    let mut dst = to.alloc(&stream, bytes, "peer bandwidth target")?;
    let mut times = Vec::with_capacity(rounds);
    for round in 0..=rounds {
        stream.synchronize().gpu("waiting for a peer copy")?;
        let t = Instant::now();
        copy_between(from, &src, 0, to, &mut dst, 0, bytes, &stream)?;
        stream.synchronize().gpu("waiting for a peer copy")?;
        if round > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::INFINITY);
    Ok(bytes as f64 / median.max(1e-9))
}

/// Every ordered pair's copy bandwidth over the devices `set` (row: from, column: to), bytes
/// per second; the diagonal is a copy within one device.
pub fn bandwidth_matrix(set: &[&Gpu], bytes: usize, rounds: usize) -> Result<Vec<Vec<f64>>> {
    set.iter().map(|from| set.iter().map(|to| measure_bandwidth(from, to, bytes, rounds)).collect()).collect()
}

/// The slowest copy bandwidth between two devices of `set`, bytes per second: 64 MiB copies
/// each way between every pair, the median of three, measured once per process for each set
/// (a few milliseconds). The cost model prices the multi-GPU join's exchanges at it. Logical
/// devices of one GPU copy within that GPU, and are measured so.
pub fn set_bandwidth(set: &[Arc<Gpu>]) -> Result<f64> {
    static MEASURED: OnceLock<Mutex<std::collections::HashMap<Vec<String>, f64>>> = OnceLock::new();
    let key: Vec<String> = set.iter().map(|g| g.label()).collect();
    let cache = MEASURED.get_or_init(|| Mutex::new(std::collections::HashMap::new()));
    if let Some(bw) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(*bw);
    }
    let mut slowest = f64::INFINITY;
    for (i, from) in set.iter().enumerate() {
        for (j, to) in set.iter().enumerate() {
            if i != j {
                slowest = slowest.min(measure_bandwidth(from, to, 64 << 20, 3)?);
            }
        }
    }
    if !slowest.is_finite() {
        return Err(gpu_error("measuring the copy bandwidth of a set of one device"));
    }
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, slowest);
    Ok(slowest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DevicesSetting, GpuConfig};
    use crate::testing::{gpu_lock, gpu_or_skip};

    /// Two logical devices of one GPU copy at the device's copy speed (far above any host
    /// link); the figure is measured once and then reused.
    #[test]
    fn gpu_set_bandwidth_is_measured_once_per_set() {
        let _l = gpu_lock();
        let Some(_gpu) = gpu_or_skip("gpu_set_bandwidth_is_measured_once_per_set") else { return };
        let cfg = GpuConfig { devices: DevicesSetting::List(vec![0, 0]), ..GpuConfig::default() };
        let set = Gpu::for_config(&cfg).expect("a device set").device_set();
        let first = set_bandwidth(&set).expect("a measurement");
        assert!(first > 100e9, "copies between logical devices at {:.1} GB/s", first / 1e9);
        assert_eq!(set_bandwidth(&set).expect("a measurement"), first);
        assert!(set_bandwidth(&set[..1]).is_err());
    }
}
