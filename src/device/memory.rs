//! Device memory: stream-ordered allocations (`cuMemAllocAsync` from the device's pool) under
//! byte budgets, with accounting of the bytes in use and their peak.
//!
//! Budgets nest: a device has one (its `auto` limit, a share of the memory free when it was
//! opened) and each session a child of it (`gpu.memory.limit`), so a reservation counts against
//! both, and two sessions with different limits do not change each other's. Memory is a budget
//! to wait for: a request that fits under the limits, but not next to what others hold now,
//! waits for their releases. It fails (a `ResourcesExhausted` error, which the execs answer by
//! going out of core or finishing on the CPU) only when it can never fit, or when nothing has
//! been released for [`STALL`] while it waited (every holder is itself waiting), or after
//! [`MOST_WAIT`]. Before it waits, what holds memory it can give back ([`Reclaim`]: the table
//! cache's columns no query reads) is asked to free room.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, sys};

use crate::config::human_bytes;
use crate::error::{CudaResultExt, Result, device_memory_error};

/// How long a reservation waits with no memory released anywhere under its device before it
/// gives up: the holders are then waiting too (or hold their memory for a long while).
pub const STALL: Duration = Duration::from_millis(500);
/// The longest a reservation waits in all.
pub const MOST_WAIT: Duration = Duration::from_secs(30);

/// Where the reservations waiting under one device's budgets sleep, woken by every release.
#[derive(Debug, Default)]
struct Room {
    /// Releases so far (under the lock, so that a waiter cannot miss one).
    releases: Mutex<u64>,
    freed: Condvar,
    /// Reservations waiting now: a release takes the lock only when there is one.
    waiting: AtomicUsize,
}

impl Room {
    fn released(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let mut n = self.releases.lock().unwrap_or_else(|e| e.into_inner());
            *n += 1;
            self.freed.notify_all();
        }
    }
}

/// Something holding device memory it can give back when a reservation would not fit otherwise
/// (the table cache's columns no query reads).
pub trait Reclaim: Send + Sync + std::fmt::Debug {
    /// Frees about `bytes` of device memory if it can; returns the bytes freed.
    fn reclaim(&self, bytes: u64) -> u64;
}

/// A byte budget: a device's, or a session's under its device's. Every [`DeviceBuffer`] holds a
/// [`Reservation`] against one.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicU64,
    default_limit: u64,
    used: AtomicU64,
    peak: AtomicU64,
    /// The device's budget, for a session's: a reservation counts against both.
    parent: Option<Arc<MemoryBudget>>,
    room: Arc<Room>,
    /// Fault injection ([`MemoryBudget::fail_after`]): requests whose purpose contains the text
    /// are refused once this many of them were granted.
    faults: std::sync::Mutex<Option<(String, usize)>>,
    /// Whether `faults` is set: requests take its lock only then.
    faulty: std::sync::atomic::AtomicBool,
    /// What gives memory back under this budget when a reservation would not fit (a device's
    /// budget only; a session's asks its device's).
    reclaims: Mutex<Vec<std::sync::Weak<dyn Reclaim>>>,
}

impl MemoryBudget {
    /// A device's budget, whose `auto` limit is `default_limit` bytes.
    pub fn new(default_limit: u64) -> Self {
        MemoryBudget {
            limit: AtomicU64::new(default_limit),
            default_limit,
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            parent: None,
            room: Arc::new(Room::default()),
            faults: std::sync::Mutex::new(None),
            faulty: std::sync::atomic::AtomicBool::new(false),
            reclaims: Mutex::new(Vec::new()),
        }
    }

    /// A budget of `limit` bytes (`None`: the parent's) under `parent`.
    pub fn child(parent: &Arc<MemoryBudget>, limit: Option<u64>) -> Self {
        let default_limit = parent.limit();
        MemoryBudget {
            limit: AtomicU64::new(limit.unwrap_or(default_limit)),
            default_limit,
            used: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            parent: Some(Arc::clone(parent)),
            room: Arc::clone(&parent.room),
            faults: std::sync::Mutex::new(None),
            faulty: std::sync::atomic::AtomicBool::new(false),
            reclaims: Mutex::new(Vec::new()),
        }
    }

    /// Sets the limit (`None` restores the default). Bytes already reserved stay reserved.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.limit.store(limit.unwrap_or(self.default_limit), Ordering::SeqCst);
        // Waiters may fit under a raised limit.
        self.room.released();
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

    /// Bytes a reservation could take now: the room under this budget's limit and its parent's.
    pub fn available(&self) -> u64 {
        let mine = self.limit().saturating_sub(self.used());
        match &self.parent {
            Some(p) => mine.min(p.available()),
            None => mine,
        }
    }

    /// Bytes a reservation of `bytes` could take now, after asking what holds memory it can give
    /// back ([`Self::add_reclaim`]) to free the difference when [`Self::available`] falls short:
    /// for choices made before reserving (whether a join's build fits in memory), which would
    /// otherwise count the table cache's idle columns as taken.
    pub fn room_for(&self, bytes: u64) -> u64 {
        let available = self.available();
        if available >= bytes || bytes > self.most() {
            return available;
        }
        self.reclaim_for(bytes - available);
        self.available()
    }

    /// [`Self::room_for`], waiting while other operators hold the room: returns once `bytes` are
    /// available, or when nothing was released for [`STALL`] (the holders wait too), or after
    /// `most`, with the bytes available then. For a choice that would take a slower path at once
    /// (a join's build partitioned into host memory) because another operator of the query holds
    /// its memory for a moment. It blocks: call it off the async runtime's threads.
    pub fn wait_for_room(&self, bytes: u64, most: Duration) -> u64 {
        let available = self.room_for(bytes);
        if available >= bytes || bytes > self.most() || most.is_zero() {
            return available;
        }
        let start = Instant::now();
        self.room.waiting.fetch_add(1, Ordering::SeqCst);
        let mut releases = self.room.releases.lock().unwrap_or_else(|e| e.into_inner());
        let waited_for = loop {
            // Checked under the lock, after counting this waiter: a release cannot slip by.
            let available = self.available();
            let waited = start.elapsed();
            if available >= bytes || waited >= most {
                break available;
            }
            let seen = *releases;
            let (guard, timeout) =
                self.room.freed.wait_timeout(releases, STALL.min(most - waited)).unwrap_or_else(|e| e.into_inner());
            releases = guard;
            if timeout.timed_out() && *releases == seen {
                break self.available();
            }
        };
        drop(releases);
        self.room.waiting.fetch_sub(1, Ordering::SeqCst);
        match waited_for >= bytes {
            true => waited_for,
            // Columns a query read when the wait began may be idle now.
            false => self.room_for(bytes),
        }
    }

    /// The most a single reservation can ever take: the smallest limit up the chain.
    pub fn most(&self) -> u64 {
        match &self.parent {
            Some(p) => self.limit().min(p.most()),
            None => self.limit(),
        }
    }

    /// Most bytes ever reserved at once (since the last [`Self::reset_peak`]).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Starts measuring the peak again from the bytes reserved now.
    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::SeqCst);
    }

    /// Registers `r` to give memory back when a reservation under this budget's device would
    /// not fit (held weakly: it goes when its owner does).
    pub fn add_reclaim(&self, r: std::sync::Weak<dyn Reclaim>) {
        match &self.parent {
            Some(p) => p.add_reclaim(r),
            None => self.reclaims.lock().unwrap_or_else(|e| e.into_inner()).push(r),
        }
    }

    /// Asks what was registered with [`Self::add_reclaim`] to free memory for `bytes` more here;
    /// returns whether anything was freed.
    fn reclaim_for(&self, bytes: u64) -> bool {
        if let Some(p) = &self.parent {
            return p.reclaim_for(bytes);
        }
        let live: Vec<Arc<dyn Reclaim>> = {
            let mut all = self.reclaims.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.iter().filter_map(std::sync::Weak::upgrade).collect()
        };
        let mut freed = 0u64;
        for r in live {
            if freed >= bytes {
                break;
            }
            freed += r.reclaim(bytes - freed);
        }
        freed > 0
    }

    /// Takes `bytes` here and up the chain if they fit everywhere now; nothing otherwise.
    fn try_take(&self, bytes: u64) -> bool {
        let limit = self.limit();
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            let Some(new) = used.checked_add(bytes).filter(|n| *n <= limit) else { return false };
            match self.used.compare_exchange_weak(used, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    if let Some(p) = &self.parent
                        && !p.try_take(bytes)
                    {
                        self.used.fetch_sub(bytes, Ordering::SeqCst);
                        return false;
                    }
                    self.peak.fetch_max(new, Ordering::SeqCst);
                    return true;
                }
                Err(actual) => used = actual,
            }
        }
    }

    /// Gives `bytes` back here and up the chain, and wakes the waiters.
    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::SeqCst);
        match &self.parent {
            Some(p) => p.give_back(bytes),
            None => self.room.released(),
        }
    }

    fn refusal(&self, bytes: u64, what: &str, waited: Option<Duration>) -> datafusion::error::DataFusionError {
        let (limit, used) = (self.limit(), self.used());
        let device = match &self.parent {
            Some(p) if p.limit() < bytes.saturating_add(p.used()) && limit >= bytes.saturating_add(used) => format!(
                " (the device's share for every session, {}, has {} in use)",
                human_bytes(p.limit()),
                human_bytes(p.used())
            ),
            _ => String::new(),
        };
        let waited = match waited {
            Some(d) => format!(" after waiting {:.1} s for other operators to release memory", d.as_secs_f64()),
            None => String::new(),
        };
        device_memory_error(format!(
            "{what} needs {} of device memory, but gpu.memory.limit is {} and {} is in use{device}{waited}; \
             raise it with SET gpu.memory.limit = '<size>' or run the query on the CPU with SET gpu.enable = false",
            human_bytes(bytes),
            human_bytes(limit),
            human_bytes(used)
        ))
    }

    /// Reserves `bytes` for `what`, waiting while others hold the room (see the module's text),
    /// or explains why it cannot.
    pub fn reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation> {
        self.reserve_within(bytes, what, MOST_WAIT)
    }

    /// Reserves `bytes` for `what` only if they fit now.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation> {
        self.reserve_within(bytes, what, Duration::ZERO)
    }

    /// Fault injection, for tests of what the execs do when device memory runs out: from now on
    /// requests whose purpose (`what`) contains `text` are refused, as if the limit had been
    /// reached, once `after` of them were granted (`None` stops it).
    pub fn fail_after(&self, fault: Option<(&str, usize)>) {
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        *faults = fault.map(|(t, n)| (t.to_string(), n));
        self.faulty.store(faults.is_some(), Ordering::SeqCst);
    }

    fn injected(&self, bytes: u64, what: &str) -> Option<datafusion::error::DataFusionError> {
        if !self.faulty.load(Ordering::Relaxed) {
            return None;
        }
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let (text, left) = faults.as_mut()?;
        if !what.contains(text.as_str()) {
            return None;
        }
        if *left > 0 {
            *left -= 1;
            return None;
        }
        Some(device_memory_error(format!(
            "{what} needs {} of device memory, refused by fault injection",
            human_bytes(bytes)
        )))
    }

    fn reserve_within(self: &Arc<Self>, bytes: u64, what: &str, most: Duration) -> Result<Reservation> {
        if let Some(e) = self.injected(bytes, what) {
            return Err(e);
        }
        if self.try_take(bytes) {
            return Ok(Reservation { budget: Arc::clone(self), bytes });
        }
        // Cached columns no query reads make room before anyone waits or fails.
        if bytes <= self.most() && self.reclaim_for(bytes.saturating_sub(self.available())) && self.try_take(bytes) {
            return Ok(Reservation { budget: Arc::clone(self), bytes });
        }
        if bytes > self.most() || most.is_zero() {
            return Err(self.refusal(bytes, what, None));
        }
        let start = Instant::now();
        self.room.waiting.fetch_add(1, Ordering::SeqCst);
        let result = (|| {
            let mut releases = self.room.releases.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                // Checked under the lock, after counting this waiter: a release cannot slip by.
                if self.try_take(bytes) {
                    return Ok(Reservation { budget: Arc::clone(self), bytes });
                }
                let waited = start.elapsed();
                if waited >= most {
                    return Err(self.refusal(bytes, what, Some(waited)));
                }
                let seen = *releases;
                let (guard, timeout) =
                    self.room.freed.wait_timeout(releases, STALL.min(most - waited)).unwrap_or_else(|e| e.into_inner());
                releases = guard;
                if timeout.timed_out() && *releases == seen {
                    // Columns a query read when this one first asked may be idle now. The lock
                    // goes first: what the cache frees is released under it.
                    drop(releases);
                    if self.try_take(bytes)
                        || (self.reclaim_for(bytes.saturating_sub(self.available())) && self.try_take(bytes))
                    {
                        return Ok(Reservation { budget: Arc::clone(self), bytes });
                    }
                    return Err(self.refusal(bytes, what, Some(start.elapsed())));
                }
            }
        })();
        self.room.waiting.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

/// Bytes held against a [`MemoryBudget`] (and its parents); released on drop.
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
        self.budget.give_back(self.bytes);
    }
}

/// Streams other than its own that a buffer remembers having been used on; a buffer used on
/// more is waited for by synchronising the context when it is freed.
const FOREIGN_STREAMS: usize = 4;
/// [`DeviceBuffer::foreign`]'s mark for "used on more streams than it can name".
const MANY_STREAMS: usize = usize::MAX;

/// Untyped device memory owned by the runtime. Zero-length buffers hold no allocation.
///
/// The memory is freed on the stream it was allocated on (stream-ordered). Work the runtime
/// queues on other streams is ordered by the code that queues it, but an error can end that code
/// while such work still runs: so the buffer remembers the other streams it was used on
/// ([`DeviceBuffer::raw_ptr`], [`DeviceBuffer::slice`]) and its free waits for what was queued
/// on them (an event on each), as cudarc's own tracking would, without that tracking's cost on
/// every use (two events per allocation and a record at each use).
#[derive(Debug)]
pub struct DeviceBuffer {
    slice: Option<CudaSlice<u8>>,
    len: usize,
    _reservation: Reservation,
    /// The other streams (raw handles of the device's pool streams, which live as long as the
    /// process) it was used on; 0 for a free place, [`MANY_STREAMS`] when they did not fit.
    foreign: [AtomicUsize; FOREIGN_STREAMS],
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
                     shared with other processes: lower gpu.memory.limit",
                    human_bytes(len as u64)
                ))
            })?)
        };
        Ok(DeviceBuffer { slice, len, _reservation: reservation, foreign: Default::default() })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Notes that work on `stream` uses this buffer (see the type's text).
    fn used_on(&self, stream: &CudaStream) {
        let Some(s) = &self.slice else { return };
        let handle = stream.cu_stream() as usize;
        if handle == s.stream().cu_stream() as usize || handle == 0 {
            return;
        }
        for place in &self.foreign {
            match place.compare_exchange(0, handle, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return,
                Err(h) if h == handle || h == MANY_STREAMS => return,
                Err(_) => {}
            }
        }
        self.foreign[FOREIGN_STREAMS - 1].store(MANY_STREAMS, Ordering::SeqCst);
    }

    /// The allocation, for kernel arguments of work queued on `stream` (`None` when empty).
    pub fn slice(&self, stream: &CudaStream) -> Option<&CudaSlice<u8>> {
        self.used_on(stream);
        self.slice.as_ref()
    }

    /// The allocation, mutably, for work queued on `stream` (`None` when empty).
    pub fn slice_mut(&mut self, stream: &CudaStream) -> Option<&mut CudaSlice<u8>> {
        self.used_on(stream);
        self.slice.as_mut()
    }

    /// Raw device address for driver calls issued on `stream`; 0 when empty. Issue the work on
    /// the stream that produced the buffer (as `DeviceBatch` does), or after waiting for it: the
    /// buffer orders only its own free after the work (see the type's text).
    pub(crate) fn raw_ptr(&self, stream: &CudaStream) -> sys::CUdeviceptr {
        match &self.slice {
            Some(s) => {
                self.used_on(stream);
                s.device_ptr(stream).0
            }
            None => 0,
        }
    }
}

impl DeviceBuffer {
    /// Raw device address for work ordered after this buffer's own stream's (a copy to another
    /// device issued once that stream was synchronised); 0 when empty. Not noted as a use on
    /// another stream: that stream may belong to another GPU's context.
    pub(crate) fn home_ptr(&self) -> sys::CUdeviceptr {
        match &self.slice {
            Some(s) => s.device_ptr(s.stream()).0,
            None => 0,
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Some(s) = &self.slice else { return };
        let home = s.stream();
        let ctx = home.context();
        if self.foreign[0].load(Ordering::SeqCst) == 0 {
            return;
        }
        ctx.record_err(ctx.bind_to_thread());
        let mut many = false;
        for place in &self.foreign {
            match place.load(Ordering::SeqCst) {
                0 => break,
                MANY_STREAMS => many = true,
                handle => {
                    // The free (queued on `home` when the slice drops, after this) waits for
                    // the work queued on `handle` so far. Errors cannot be reported from a drop:
                    // the context records them.
                    let waited = (|| {
                        let event = cudarc::driver::result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                        let recorded = unsafe {
                            cudarc::driver::result::event::record(event, handle as sys::CUstream).and_then(|()| {
                                cudarc::driver::result::stream::wait_event(
                                    home.cu_stream(),
                                    event,
                                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                                )
                            })
                        };
                        // Destroying a recorded event is safe: its resources go once it completes.
                        let destroyed = unsafe { cudarc::driver::result::event::destroy(event) };
                        recorded.and(destroyed)
                    })();
                    if waited.is_err() {
                        many = true;
                    }
                }
            }
        }
        if many {
            ctx.record_err(ctx.synchronize());
        }
    }
}

/// Sets how much freed memory the device's default pool keeps for reuse (stream-ordered
/// allocations are then cheap) before it returns the rest to the driver at a synchronisation:
/// up to the device's budget, so the process's footprint stays near it.
pub(crate) fn release_pool_memory_above(ctx: &cudarc::driver::CudaContext, bytes: u64) -> Result<()> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }.result().gpu("cuDeviceGetDefaultMemPool")?;
    let mut threshold: u64 = bytes;
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
        let err = budget.try_reserve(500, "the join's hash table").unwrap_err().to_string();
        assert!(err.contains("gpu.memory.limit"), "{err}");
        assert!(err.contains("the join's hash table"), "{err}");
        drop(a);
        assert_eq!(budget.used(), 0);
        assert_eq!(budget.peak(), 600);
        budget.set_limit(Some(10));
        // Never fits: refused at once, without waiting.
        let start = Instant::now();
        assert!(budget.reserve(11, "x").is_err());
        assert!(start.elapsed() < STALL);
        budget.set_limit(None);
        assert!(budget.reserve(1000, "x").is_ok());
    }

    /// A request that fits under the limit but not next to what is held waits for a release.
    #[test]
    fn a_reservation_waits_for_room() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let held = budget.reserve(800, "held").unwrap();
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || budget.reserve(500, "waiting").map(|r| r.bytes()))
        };
        std::thread::sleep(STALL / 5);
        assert_eq!(budget.used(), 800, "the waiter holds nothing yet");
        drop(held);
        assert_eq!(waiter.join().unwrap().unwrap(), 500);
        assert_eq!(budget.used(), 0);
    }

    /// When nothing is released while it waits (every holder waits too), a reservation gives up
    /// after the stall time with an error that says it waited; releases keep it waiting.
    #[test]
    fn a_stalled_wait_gives_up_and_a_moving_one_does_not() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let held = budget.reserve(900, "held").unwrap();
        let start = Instant::now();
        let err = budget.reserve(200, "stalled").unwrap_err();
        assert!(start.elapsed() >= STALL, "{:?}", start.elapsed());
        assert!(crate::error::recoverable_on_cpu(&err), "{err}");
        assert!(err.to_string().contains("after waiting"), "{err}");
        // Small reservations come and go for longer than the stall time, then the holder leaves.
        let churn = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                for _ in 0..12 {
                    std::thread::sleep(STALL / 8);
                    drop(budget.try_reserve(50, "churn"));
                }
                drop(held);
            })
        };
        assert_eq!(budget.reserve(200, "moving").unwrap().bytes(), 200);
        churn.join().unwrap();
    }

    /// Memory held as a cache holds its columns: each piece is given back on request unless a
    /// reader still holds its handle.
    #[derive(Debug, Default)]
    struct Idle {
        held: Mutex<Vec<(Reservation, Arc<()>)>>,
    }

    impl Reclaim for Idle {
        fn reclaim(&self, bytes: u64) -> u64 {
            let mut held = self.held.lock().unwrap();
            let mut freed = 0;
            held.retain(|(r, reader)| {
                if freed >= bytes || Arc::strong_count(reader) > 1 {
                    return true;
                }
                freed += r.bytes();
                false
            });
            freed
        }
    }

    fn idle_under(budget: &Arc<MemoryBudget>, bytes: u64) -> (Arc<Idle>, Arc<()>) {
        let idle = Arc::new(Idle::default());
        let reader = Arc::new(());
        idle.held.lock().unwrap().push((budget.reserve(bytes, "cached").unwrap(), Arc::clone(&reader)));
        let weak: std::sync::Weak<dyn Reclaim> = Arc::downgrade(&(Arc::clone(&idle) as Arc<dyn Reclaim>));
        budget.add_reclaim(weak);
        (idle, reader)
    }

    /// `room_for` counts what the cache can give back as room: it frees idle memory only when
    /// what is free now falls short, and never memory a reader holds.
    #[test]
    fn room_for_frees_idle_memory_only_when_short() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let (idle, reader) = idle_under(&budget, 600);
        assert_eq!(budget.room_for(300), 400);
        assert_eq!(budget.used(), 600, "enough was free: nothing given back");
        assert_eq!(budget.room_for(700), 400, "a reader holds the cached piece");
        drop(reader);
        assert_eq!(budget.room_for(700), 1000);
        assert_eq!(budget.used(), 0);
        assert!(idle.held.lock().unwrap().is_empty());
        assert_eq!(budget.room_for(2000), 1000, "more than the limit frees nothing");
    }

    /// `wait_for_room` returns as soon as a holder's release makes the room, at once when the
    /// cache can give it, and after the stall time, with what is free, when nothing moves.
    #[test]
    fn wait_for_room_waits_for_a_release_and_gives_up_on_a_stall() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let held = budget.reserve(600, "held").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(STALL / 5);
            drop(held);
        });
        let start = Instant::now();
        assert_eq!(budget.wait_for_room(700, MOST_WAIT), 1000);
        assert!(start.elapsed() < STALL, "{:?}", start.elapsed());
        release.join().unwrap();
        let _held = budget.reserve(600, "held").unwrap();
        let start = Instant::now();
        assert_eq!(budget.wait_for_room(700, MOST_WAIT), 400);
        assert!(start.elapsed() >= STALL, "{:?}", start.elapsed());
        assert_eq!(budget.wait_for_room(300, MOST_WAIT), 400, "enough is free: no wait");
        assert_eq!(budget.wait_for_room(2000, MOST_WAIT), 400, "more than the limit: no wait");
        let (_idle, reader) = idle_under(&budget, 300);
        drop(reader);
        let start = Instant::now();
        assert_eq!(budget.wait_for_room(300, MOST_WAIT), 400);
        assert!(start.elapsed() < STALL, "the cache's idle memory is room at once: {:?}", start.elapsed());
    }

    /// A reservation that waited while a reader held the cached memory asks the cache again
    /// once the wait stalls: the reader may be done by then, though nothing was released.
    #[test]
    fn a_stalled_reservation_asks_the_cache_again() {
        let budget = Arc::new(MemoryBudget::new(1000));
        let (_idle, reader) = idle_under(&budget, 600);
        let waiter = {
            let budget = Arc::clone(&budget);
            std::thread::spawn(move || {
                let start = Instant::now();
                (budget.reserve(700, "waiting").map(|r| r.bytes()), start.elapsed())
            })
        };
        std::thread::sleep(STALL / 5);
        drop(reader);
        let (got, waited) = waiter.join().unwrap();
        assert_eq!(got.unwrap(), 700);
        assert!(waited >= STALL, "{waited:?}");
        assert_eq!(budget.used(), 0);
    }

    /// Fault injection refuses the requests it names after the first few, and no others.
    #[test]
    fn injected_faults_refuse_the_requests_they_name() {
        let budget = Arc::new(MemoryBudget::new(1000));
        budget.fail_after(Some(("hash table", 1)));
        assert!(budget.reserve(10, "the join's hash table").is_ok());
        let err = budget.reserve(10, "the join's hash table").unwrap_err();
        assert!(crate::error::recoverable_on_cpu(&err) && err.to_string().contains("fault injection"), "{err}");
        assert!(budget.reserve(10, "join keys").is_ok());
        budget.fail_after(None);
        assert!(budget.reserve(10, "the join's hash table").is_ok());
    }

    /// A session's budget counts against its device's: each refuses what its own limit cannot
    /// hold, and the device's limit bounds the sessions together.
    #[test]
    fn session_budgets_nest_under_the_device() {
        let device = Arc::new(MemoryBudget::new(1000));
        let small = Arc::new(MemoryBudget::child(&device, Some(300)));
        let large = Arc::new(MemoryBudget::child(&device, None));
        assert_eq!((small.limit(), large.limit()), (300, 1000));
        let a = small.try_reserve(300, "a").unwrap();
        assert!(small.try_reserve(1, "b").is_err());
        assert_eq!(device.used(), 300);
        assert_eq!(large.available(), 700);
        let b = large.try_reserve(700, "c").unwrap();
        let err = large.try_reserve(1, "d").unwrap_err().to_string();
        assert!(err.contains("gpu.memory.limit"), "{err}");
        assert_eq!((small.used(), large.used(), device.used()), (300, 700, 1000));
        drop((a, b));
        assert_eq!((small.used(), large.used(), device.used()), (0, 0, 0));
        // More than a session's own limit never fits, whatever the device has free.
        let start = Instant::now();
        assert!(small.reserve(301, "e").is_err());
        assert!(start.elapsed() < STALL);
    }
}
