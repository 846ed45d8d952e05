//! Device memory: stream-ordered allocations (`cuMemAllocAsync` from the device's pool) under a
//! byte budget (`gpu.memory_limit`), with accounting of the bytes in use and their peak.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, sys};

use crate::config::human_bytes;
use crate::error::{CudaResultExt, Result, device_memory_error};

/// The byte budget of one device. Every [`DeviceBuffer`] holds a [`Reservation`] against it.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicU64,
    default_limit: u64,
    used: AtomicU64,
    peak: AtomicU64,
}

impl MemoryBudget {
    /// A budget whose `auto` limit is `default_limit` bytes.
    pub fn new(default_limit: u64) -> Self {
        MemoryBudget {
            limit: AtomicU64::new(default_limit),
            default_limit,
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }

    /// Sets the limit (`None` restores the default). Bytes already reserved stay reserved.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.limit.store(limit.unwrap_or(self.default_limit), Ordering::SeqCst);
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::SeqCst)
    }

    pub fn default_limit(&self) -> u64 {
        self.default_limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// Most bytes ever reserved at once (since the last [`Self::reset_peak`]).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Starts measuring the peak again from the bytes reserved now.
    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::SeqCst);
    }

    /// Reserves `bytes` for `what`, or explains why it does not fit.
    pub fn reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation> {
        let limit = self.limit();
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let new = used.checked_add(bytes).filter(|n| *n <= limit).ok_or_else(|| {
                device_memory_error(format!(
                    "{what} needs {} of device memory, but gpu.memory_limit is {} and {} is in use; \
                     raise it with SET gpu.memory_limit = '<size>' or run the query on the CPU \
                     with SET gpu.enable = false",
                    human_bytes(bytes),
                    human_bytes(limit),
                    human_bytes(used)
                ))
            })?;
            match self.used.compare_exchange_weak(used, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.peak.fetch_max(new, Ordering::SeqCst);
                    return Ok(Reservation { budget: Arc::clone(self), bytes });
                }
                Err(actual) => used = actual,
            }
        }
    }
}

/// Bytes held against a [`MemoryBudget`]; released on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// Untyped device memory owned by the runtime. Zero-length buffers hold no allocation.
#[derive(Debug)]
pub struct DeviceBuffer {
    slice: Option<CudaSlice<u8>>,
    len: usize,
    _reservation: Reservation,
}

impl DeviceBuffer {
    /// Allocates `len` bytes on `stream` (stream-ordered), within `budget`.
    pub fn alloc(stream: &Arc<CudaStream>, budget: &Arc<MemoryBudget>, len: usize, what: &str) -> Result<Self> {
        let reservation = budget.reserve(len as u64, what)?;
        let slice = if len == 0 {
            None
        } else {
            // SAFETY: the memory is uninitialised; every user writes before reading.
            Some(unsafe { stream.alloc::<u8>(len) }.map_err(|e| {
                device_memory_error(format!(
                    "allocating {} of device memory for {what} failed ({e}); the device may be \
                     shared with other processes: lower gpu.memory_limit",
                    human_bytes(len as u64)
                ))
            })?)
        };
        Ok(DeviceBuffer { slice, len, _reservation: reservation })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The allocation, for kernel arguments (`None` when empty).
    pub fn slice(&self) -> Option<&CudaSlice<u8>> {
        self.slice.as_ref()
    }

    pub fn slice_mut(&mut self) -> Option<&mut CudaSlice<u8>> {
        self.slice.as_mut()
    }

    /// Raw device address for driver calls issued on `stream`; 0 when empty. cudarc notes the
    /// access when this returns, before the caller enqueues its work, so issue that work on the
    /// stream that produced the buffer (as `DeviceBatch` does) rather than relying on cudarc's
    /// cross-stream events.
    pub(crate) fn raw_ptr(&self, stream: &CudaStream) -> sys::CUdeviceptr {
        match &self.slice {
            Some(s) => s.device_ptr(stream).0,
            None => 0,
        }
    }
}

/// Makes the device's default pool keep freed memory instead of returning it to the driver at
/// every synchronisation, so that repeated stream-ordered allocations are cheap.
pub(crate) fn retain_pool_memory(ctx: &cudarc::driver::CudaContext) -> Result<()> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }.result().gpu("cuDeviceGetDefaultMemPool")?;
    let mut threshold: u64 = u64::MAX;
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        )
    }
    .result()
    .gpu("setting the memory pool's release threshold")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_accounts_and_refuses_over_limit() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let a = budget.reserve(600, "a").unwrap();
        assert_eq!(budget.used(), 600);
        let err = budget.reserve(500, "the join's hash table").unwrap_err().to_string();
        assert!(err.contains("gpu.memory_limit"), "{err}");
        assert!(err.contains("the join's hash table"), "{err}");
        drop(a);
        assert_eq!(budget.used(), 0);
        assert_eq!(budget.peak(), 600);
        budget.set_limit(Some(10));
        assert!(budget.reserve(11, "x").is_err());
        budget.set_limit(None);
        assert!(budget.reserve(1000, "x").is_ok());
    }
}
