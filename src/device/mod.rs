//! The device runtime: discovery, one shared context per GPU ordinal, a pool of streams, device
//! memory under a budget, pinned staging, and NVRTC-compiled kernels.

pub mod doctor;
pub mod kernel;
pub mod kernels;
pub mod launch;
pub mod memory;
pub mod peer;
pub mod pinned;
pub mod probe;
pub mod registered;
pub mod transfer;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use cudarc::driver::{CudaContext, CudaStream, LaunchConfig};

pub use launch::{KArg, opt_ptr, ptr};
pub use memory::{DeviceBuffer, MemoryBudget, Reclaim};
pub use pinned::PinnedPool;
pub use probe::{DeviceInfo, NoDevice};
pub use transfer::StagingRing;

use crate::config::GpuConfig;
use crate::error::{CudaResultExt, Result, gpu_error};

/// Most streams `gpu.streams` may ask for.
pub const MAX_STREAMS: usize = 64;
/// Share of the free device memory that `gpu.memory.limit = auto` grants.
const AUTO_LIMIT_SHARE: f64 = 0.9;
/// Default of `gpu.memory.host_register_limit`.
pub const DEFAULT_REGISTER_LIMIT: u64 = 8 << 30;
/// Most free pinned bytes the pool keeps for reuse.
const PINNED_CACHE_LIMIT: u64 = 4 << 30;
/// Pieces of out-of-core device work that run at once (each sized to an eighth of the memory
/// limit, next to a build of up to a quarter; see [`crate::join::triton::SpillSizes`]). One for
/// now: more need smaller pieces (an H100 run with two, and builds of up to half the limit,
/// overran the limit).
pub const SPILL_WORKERS: usize = 1;
/// Out-of-core partitioning passes (a chunk up, sorted by partition, down to pinned memory) that
/// run at once: four, so that chunks' uploads overlap other chunks' downloads (the link's two
/// directions are separate copy engines) and the host copies into the staging buffers of one
/// pass overlap the device work of the others (an H100 run: 1/8 of the state 459-492 ms with
/// two passes, 399-418 ms with four). Their working memory shares three quarters of the limit
/// ([`crate::join::triton::SpillSizes::split_rows`]); none runs next to a shared build's join
/// steps, which start only once every probe stream has been partitioned.
pub const SPLIT_WORKERS: usize = 4;

/// Transfer settings, from the session's `gpu.` options.
#[derive(Debug, Clone, Copy)]
pub struct TransferSettings {
    pub staging_bytes: usize,
    pub threads: usize,
    /// `gpu.transfer.narrow_decimals`.
    pub narrow_decimals: bool,
    /// `gpu.transfer.narrow_integers`.
    pub narrow_integers: bool,
    /// `gpu.transfer.narrow_offsets`.
    pub narrow_offsets: bool,
    /// `gpu.experimental.streaming_stores`: how the staging slots are filled.
    pub stores: transfer::Stores,
}

impl TransferSettings {
    fn from_config(cfg: &GpuConfig) -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        TransferSettings {
            staging_bytes: cfg.staging_buffer_size.bytes().unwrap_or(32 << 20).clamp(1 << 16, 1 << 30) as usize,
            threads: if cfg.transfer_threads == 0 { cores.min(16) } else { cfg.transfer_threads },
            narrow_decimals: cfg.narrow_decimals,
            narrow_integers: cfg.narrow_integers,
            narrow_offsets: cfg.narrow_offsets,
            stores: if cfg.streaming_stores { transfer::Stores::Streaming } else { transfer::Stores::Plain },
        }
    }
}

/// One GPU's state, shared by every session and query of the process: its context, stream pool,
/// device-wide memory budget, pinned memory, staging rings, transfer threads, host registry,
/// kernels and out-of-core work slots.
#[derive(Debug)]
struct Device {
    info: DeviceInfo,
    /// 0 for the GPU itself; k > 0 for its k-th further logical device (`gpu.devices = '0,0'`),
    /// which has a stream pool and budget of its own on the GPU's context.
    slot: usize,
    ctx: Arc<CudaContext>,
    /// The stream pool: grown to the largest `gpu.streams` any session asked for; a session's
    /// work takes the first `gpu.streams` round-robin.
    streams: RwLock<Vec<Arc<CudaStream>>>,
    next_stream: AtomicUsize,
    /// The device's budget (`auto`: a share of the memory free when it was opened); every
    /// session's budget is a child of it.
    memory: Arc<MemoryBudget>,
    /// Each session's budget while one of its queries holds it, by session id.
    sessions: Mutex<HashMap<String, Weak<MemoryBudget>>>,
    pinned: Arc<PinnedPool>,
    rings: Mutex<std::collections::VecDeque<StagingRing>>,
    /// Threads that fill the staging slots, one pool per thread count a session asked for.
    copy_pools: Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>,
    /// Host memory page-locked for this GPU (shared by its logical devices).
    registry: Arc<registered::HostRegistry>,
    kernels: kernels::KernelCache,
    /// Taken by an out-of-core join for each piece of device work, so that at most
    /// [`SPILL_WORKERS`] pieces sized to the memory limit run at once.
    spill_slots: Arc<tokio::sync::Semaphore>,
    /// Taken by an out-of-core join for each partitioning pass ([`SPLIT_WORKERS`] at once).
    split_slots: Arc<tokio::sync::Semaphore>,
}

impl Device {
    /// A further logical device on `base`'s GPU: its context, pinned memory and host
    /// registrations (one per GPU), streams, kernels and work slots of its own, and a budget
    /// drawn from `base`'s.
    fn logical(base: &Device, slot: usize, cache_dir: Option<std::path::PathBuf>) -> Result<Device> {
        let ctx = Arc::clone(&base.ctx);
        let default_streams = GpuConfig::default().streams.clamp(1, MAX_STREAMS);
        let streams =
            (0..default_streams).map(|_| ctx.new_stream().gpu("creating a stream")).collect::<Result<Vec<_>>>()?;
        Ok(Device {
            info: base.info.clone(),
            slot,
            kernels: kernels::KernelCache::new(Arc::clone(&ctx), &base.info, cache_dir),
            spill_slots: Arc::new(tokio::sync::Semaphore::new(SPILL_WORKERS)),
            split_slots: Arc::new(tokio::sync::Semaphore::new(SPLIT_WORKERS)),
            pinned: Arc::clone(&base.pinned),
            registry: Arc::clone(&base.registry),
            memory: Arc::new(MemoryBudget::child(&base.memory, None)),
            sessions: Mutex::new(HashMap::new()),
            copy_pools: Mutex::new(HashMap::new()),
            rings: Mutex::new(std::collections::VecDeque::new()),
            next_stream: AtomicUsize::new(0),
            streams: RwLock::new(streams),
            ctx,
        })
    }

    fn copy_pool(&self, threads: usize) -> Result<Arc<rayon::ThreadPool>> {
        let mut pools = self.copy_pools.lock().map_err(|_| gpu_error("transfer thread pools lock poisoned"))?;
        if let Some(p) = pools.get(&threads) {
            return Ok(Arc::clone(p));
        }
        let pool = copy_pool(threads)?;
        pools.insert(threads, Arc::clone(&pool));
        Ok(pool)
    }

    /// Makes the pool hold at least `n` streams.
    fn grow_streams(&self, n: usize) -> Result<()> {
        let have = self.streams.read().map(|s| s.len()).unwrap_or(0);
        if have < n {
            let mut streams = self.streams.write().map_err(|_| gpu_error("stream pool lock poisoned"))?;
            while streams.len() < n {
                streams.push(self.ctx.new_stream().gpu("creating a stream")?);
            }
        }
        Ok(())
    }

    /// The budget of session `id` with `limit` (`None`: the device's), shared by its queries
    /// while any of them holds it.
    fn session_budget(self: &Arc<Self>, id: &str, limit: Option<u64>) -> Arc<MemoryBudget> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = sessions.get(id).and_then(Weak::upgrade) {
            b.set_limit(limit);
            return b;
        }
        sessions.retain(|_, b| b.strong_count() > 0);
        let b = Arc::new(MemoryBudget::child(&self.memory, limit));
        sessions.insert(id.to_string(), Arc::downgrade(&b));
        b
    }
}

/// One GPU as one session sees it: the shared device with the session's settings (its memory
/// budget under `gpu.memory.limit`, streams, staging size, transfer threads, host registration
/// limit). Sessions with different `gpu.` settings in one process do not change each other's.
#[derive(Debug, Clone)]
pub struct Gpu {
    device: Arc<Device>,
    memory: Arc<MemoryBudget>,
    settings: TransferSettings,
    /// `gpu.streams`: work takes the first this many streams of the pool.
    streams: usize,
    copy_threads: Arc<rayon::ThreadPool>,
    /// `gpu.memory.host_register_limit`.
    register_limit: u64,
    /// `gpu.memory.pinned_limit`.
    pinned_limit: u64,
    /// The other devices of the session's set (`gpu.devices`), in order; empty for one device.
    peers: Vec<Arc<Gpu>>,
}

/// A permit of `slots`, held until dropped.
async fn take_slot(slots: &Arc<tokio::sync::Semaphore>, closed: &str) -> Result<tokio::sync::OwnedSemaphorePermit> {
    Arc::clone(slots).acquire_owned().await.map_err(|_| gpu_error(closed))
}

fn copy_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("gpu-copy-{i}"))
        .build()
        .map(Arc::new)
        .map_err(|e| gpu_error(format!("starting {threads} transfer threads: {e}")))
}

/// Every device opened, by (ordinal, logical slot).
fn registry() -> &'static Mutex<HashMap<(usize, usize), Arc<Device>>> {
    static GPUS: OnceLock<Mutex<HashMap<(usize, usize), Arc<Device>>>> = OnceLock::new();
    GPUS.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Gpu {
    /// Device `ordinal` with the default settings and the device's own budget, opened on first
    /// use (kernel cache in the default folder).
    pub fn get(ordinal: usize) -> Result<Arc<Gpu>> {
        let device = Gpu::open_device(ordinal, 0)?;
        let memory = Arc::clone(&device.memory);
        Gpu::view(device, memory, &GpuConfig::default()).map(Arc::new)
    }

    /// The session's device with `cfg`'s settings, and a budget of its own under
    /// `gpu.memory.limit` (planning, tools). The kernel cache folder is the process's
    /// ([`kernels::default_cache_dir`]): not a session setting, since the cache holds code the
    /// device runs.
    pub fn for_config(cfg: &GpuConfig) -> Result<Arc<Gpu>> {
        Gpu::open_set(cfg, |device| Arc::new(MemoryBudget::child(&device.memory, cfg.memory_limit.bytes())))
    }

    /// The device as session `session` sees it with `cfg`: every query of the session draws on
    /// one budget under its `gpu.memory.limit` on each device of its set (`gpu.devices`).
    pub fn for_session(cfg: &GpuConfig, session: &str) -> Result<Arc<Gpu>> {
        Gpu::open_set(cfg, |device| device.session_budget(session, cfg.memory_limit.bytes()))
    }

    /// The home device of `cfg`'s set with the others as its peers, each with the budget
    /// `budget` gives it. A logical device (an ordinal listed again) takes the next slot of its
    /// GPU.
    fn open_set(cfg: &GpuConfig, budget: impl Fn(&Arc<Device>) -> Arc<MemoryBudget>) -> Result<Arc<Gpu>> {
        let count = match cfg.devices {
            crate::config::DevicesSetting::All => probe::device_count().map_err(|e| gpu_error(e.to_string()))?,
            _ => 1,
        };
        let ordinals = cfg.devices.ordinals(cfg.device, count);
        if ordinals.is_empty() {
            return Err(gpu_error("gpu.devices lists no device"));
        }
        let mut views = Vec::with_capacity(ordinals.len());
        for (i, &ordinal) in ordinals.iter().enumerate() {
            let slot = ordinals[..i].iter().filter(|o| **o == ordinal).count();
            let device = Gpu::open_device(ordinal, slot)?;
            let memory = budget(&device);
            views.push(Gpu::view(device, memory, cfg)?);
        }
        let mut views = views.into_iter();
        let mut home = views.next().ok_or_else(|| gpu_error("gpu.devices lists no device"))?;
        let peers: Vec<Arc<Gpu>> = views.map(Arc::new).collect();
        // Every pair: the multi-GPU join's exchange copies between any two devices of the set.
        let all: Vec<&Gpu> = std::iter::once(&home).chain(peers.iter().map(|p| p.as_ref())).collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                peer::enable_peer_access(a, b)?;
            }
        }
        home.peers = peers;
        Ok(Arc::new(home))
    }

    /// The session's device set: this device, then its peers (`gpu.devices`).
    pub fn device_set(self: &Arc<Self>) -> Vec<Arc<Gpu>> {
        std::iter::once(Arc::clone(self)).chain(self.peers.iter().cloned()).collect()
    }

    /// The device of the set that partition `partition` of a GPU operator runs on: the set's
    /// devices in turn (`partition` mod their count), as a view whose peers are the set's other
    /// devices in order after it, so that work started there (a multi-GPU join) still sees the
    /// whole set. This device itself for one device or `partition` 0.
    pub fn placed(self: &Arc<Self>, partition: usize) -> Arc<Gpu> {
        let n = self.device_count();
        let at = partition % n;
        if at == 0 {
            return Arc::clone(self);
        }
        let set = self.device_set();
        let peers = (1..n).map(|k| Arc::clone(&set[(at + k) % n])).collect();
        Arc::new(Gpu { peers, ..Gpu::clone(&set[at]) })
    }

    /// The other devices of the session's set, in order.
    pub fn peers(&self) -> &[Arc<Gpu>] {
        &self.peers
    }

    /// Devices in the session's set (1 without `gpu.devices`).
    pub fn device_count(&self) -> usize {
        1 + self.peers.len()
    }

    /// Whether `other` is a view of the same device (and logical slot).
    pub fn same_device(&self, other: &Gpu) -> bool {
        Arc::ptr_eq(&self.device, &other.device)
    }

    /// The device's name in messages: its ordinal, and `:slot` for a further logical device.
    pub fn label(&self) -> String {
        match self.device.slot {
            0 => self.device.info.ordinal.to_string(),
            s => format!("{}:{s}", self.device.info.ordinal),
        }
    }

    /// This device with `cfg`'s transfer and stream settings, on the same budget (benchmarks
    /// that compare settings).
    pub fn with_config(&self, cfg: &GpuConfig) -> Result<Arc<Gpu>> {
        let view = Gpu::view(Arc::clone(&self.device), Arc::clone(&self.memory), cfg)?;
        Ok(Arc::new(Gpu { peers: self.peers.clone(), ..view }))
    }

    fn view(device: Arc<Device>, memory: Arc<MemoryBudget>, cfg: &GpuConfig) -> Result<Gpu> {
        let settings = TransferSettings::from_config(cfg);
        let streams = cfg.streams.clamp(1, MAX_STREAMS);
        device.grow_streams(streams)?;
        let copy_threads = device.copy_pool(settings.threads)?;
        Ok(Gpu {
            memory,
            settings,
            streams,
            copy_threads,
            register_limit: cfg.host_register_limit.bytes().unwrap_or(DEFAULT_REGISTER_LIMIT),
            pinned_limit: cfg.pinned_memory_limit.bytes().unwrap_or_else(pinned::default_pinned_limit),
            device,
            peers: Vec::new(),
        })
    }

    /// Device `ordinal`'s logical slot `slot` (0: the GPU itself), opened on first use. A
    /// further slot shares the GPU's context and draws its budget from the GPU's.
    fn open_device(ordinal: usize, slot: usize) -> Result<Arc<Device>> {
        probe::check_ordinal(ordinal).map_err(|e| gpu_error(e.to_string()))?;
        let base = match slot {
            0 => None,
            _ => Some(Gpu::open_device(ordinal, 0)?),
        };
        let mut gpus = registry().lock().map_err(|_| gpu_error("device registry lock poisoned"))?;
        if let Some(g) = gpus.get(&(ordinal, slot)) {
            return Ok(Arc::clone(g));
        }
        let cache_dir = kernels::default_cache_dir();
        let device = match base {
            None => catch_unwind(AssertUnwindSafe(|| Gpu::open(ordinal, cache_dir)))
                .map_err(|_| gpu_error(format!("the CUDA driver panicked while opening device {ordinal}")))??,
            Some(base) => Device::logical(&base, slot, cache_dir)?,
        };
        let device = Arc::new(device);
        gpus.insert((ordinal, slot), Arc::clone(&device));
        Ok(device)
    }

    fn open(ordinal: usize, cache_dir: Option<std::path::PathBuf>) -> Result<Device> {
        let ctx = CudaContext::new(ordinal).gpu(format!("creating a context on device {ordinal}"))?;
        let info = DeviceInfo::read(&ctx).gpu("reading device properties")?;
        // Every cross-stream use of device memory here is ordered explicitly (work follows a
        // batch onto its stream, or waits for it), and a buffer's free waits for the other
        // streams it was used on (`DeviceBuffer`), so cudarc's own tracking only costs: two
        // CUDA events per allocation, a wait and a record each time an address is taken, which
        // 16 partitions' threads then queue for on the driver's lock.
        // SAFETY: no allocation exists yet; every later one is ordered by the code using it.
        unsafe { ctx.disable_event_tracking() };
        let default_streams = GpuConfig::default().streams.clamp(1, MAX_STREAMS);
        let streams =
            (0..default_streams).map(|_| ctx.new_stream().gpu("creating a stream")).collect::<Result<Vec<_>>>()?;
        let default_limit = (info.free_memory_at_start as f64 * AUTO_LIMIT_SHARE) as u64;
        if ctx.has_async_alloc() {
            // Freed memory stays in the device's pool for reuse up to the budget, and goes back
            // to the driver beyond it: the process's footprint stays near gpu.memory.limit.
            memory::release_pool_memory_above(&ctx, default_limit)?;
        }
        Ok(Device {
            slot: 0,
            kernels: kernels::KernelCache::new(Arc::clone(&ctx), &info, cache_dir),
            spill_slots: Arc::new(tokio::sync::Semaphore::new(SPILL_WORKERS)),
            split_slots: Arc::new(tokio::sync::Semaphore::new(SPLIT_WORKERS)),
            pinned: PinnedPool::new(Arc::clone(&ctx), PINNED_CACHE_LIMIT),
            registry: Arc::new(registered::HostRegistry::new(Arc::clone(&ctx))),
            memory: Arc::new(MemoryBudget::new(default_limit)),
            sessions: Mutex::new(HashMap::new()),
            copy_pools: Mutex::new(HashMap::new()),
            rings: Mutex::new(std::collections::VecDeque::new()),
            next_stream: AtomicUsize::new(0),
            streams: RwLock::new(streams),
            info,
            ctx,
        })
    }

    /// A slot for one piece of an out-of-core join's device work (see [`crate::join::triton`]),
    /// held until the permit is dropped.
    pub async fn spill_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        take_slot(&self.device.spill_slots, "the out-of-core work slots are closed").await
    }

    /// A slot for one out-of-core partitioning pass, held until the permit is dropped.
    pub async fn split_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        take_slot(&self.device.split_slots, "the out-of-core partitioning slots are closed").await
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.device.info
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.device.ctx
    }

    /// This session's budget (a child of the device's).
    pub fn memory(&self) -> &Arc<MemoryBudget> {
        &self.memory
    }

    /// The device's budget, which every session's draws on.
    pub fn device_memory(&self) -> &Arc<MemoryBudget> {
        &self.device.memory
    }

    pub fn pinned(&self) -> &Arc<PinnedPool> {
        &self.device.pinned
    }

    pub fn host_registry(&self) -> &registered::HostRegistry {
        &self.device.registry
    }

    /// `gpu.memory.host_register_limit` of this session.
    pub fn register_limit(&self) -> u64 {
        self.register_limit
    }

    /// `gpu.memory.pinned_limit` of this session.
    pub fn pinned_limit(&self) -> u64 {
        self.pinned_limit
    }

    pub fn kernels(&self) -> &kernels::KernelCache {
        &self.device.kernels
    }

    pub fn transfer_settings(&self) -> TransferSettings {
        self.settings
    }

    /// The pool of host threads that fill staging buffers.
    pub fn copy_threads(&self) -> Arc<rayon::ThreadPool> {
        Arc::clone(&self.copy_threads)
    }

    /// Streams work is spread over (`gpu.streams`).
    pub fn active_streams(&self) -> usize {
        self.streams
    }

    /// A stream from the pool (round-robin over this session's first `gpu.streams`).
    pub fn stream(&self) -> Arc<CudaStream> {
        let streams = match self.device.streams.read() {
            Ok(s) => s,
            Err(e) => e.into_inner(),
        };
        let active = self.streams.clamp(1, streams.len());
        let i = self.device.next_stream.fetch_add(1, Ordering::Relaxed) % active;
        Arc::clone(&streams[i])
    }

    /// Allocates `len` bytes on `stream` within the memory budget.
    pub fn alloc(&self, stream: &Arc<CudaStream>, len: usize, what: &str) -> Result<DeviceBuffer> {
        DeviceBuffer::alloc(stream, &self.memory, len, what)
    }

    /// Takes a staging ring (creating one if none is free); give it back with [`Gpu::return_ring`].
    pub fn take_ring(&self) -> Result<StagingRing> {
        let want = self.transfer_settings().staging_bytes;
        let mut rings = self.device.rings.lock().map_err(|_| gpu_error("staging lock poisoned"))?;
        // The ring returned longest ago first: its copies are the likeliest to have finished,
        // where the one just returned would make this upload wait for the DMA it started.
        while let Some(r) = rings.pop_front() {
            if r.slot_bytes() >= want {
                return Ok(r);
            }
        }
        drop(rings);
        StagingRing::new(&self.device.pinned, &self.device.ctx, want)
    }

    pub fn return_ring(&self, ring: StagingRing) {
        if let Ok(mut rings) = self.device.rings.lock() {
            rings.push_back(ring);
        }
    }

    /// Uploads host byte slices into device buffers on `stream`; a large buffer uploaded a second
    /// time is page-locked in place (see [`registered`]). Returns where each piece landed (see
    /// [`transfer::UploadPiece::narrow`]).
    pub fn upload(
        &self,
        stream: &Arc<CudaStream>,
        pieces: &[transfer::UploadPiece<'_>],
    ) -> Result<Vec<transfer::Landed>> {
        self.upload_with(stream, pieces, true)
    }

    /// Uploads host byte slices that are uploaded once and then freed (concatenated batches):
    /// always through the staging buffers, since a later buffer at the same address and length
    /// would look like a second upload of this one and be page-locked for nothing.
    pub fn upload_transient(
        &self,
        stream: &Arc<CudaStream>,
        pieces: &[transfer::UploadPiece<'_>],
    ) -> Result<Vec<transfer::Landed>> {
        self.upload_with(stream, pieces, false)
    }

    /// [`Gpu::upload`] when `register`, else [`Gpu::upload_transient`].
    pub(crate) fn upload_with(
        &self,
        stream: &Arc<CudaStream>,
        pieces: &[transfer::UploadPiece<'_>],
        register: bool,
    ) -> Result<Vec<transfer::Landed>> {
        let mut ring = self.take_ring()?;
        let registry = register.then_some((&*self.device.registry, self.register_limit));
        let stores = self.settings.stores;
        let result =
            transfer::upload(stream, &mut ring, registry, &self.device.pinned, pieces, &self.copy_threads, stores);
        self.return_ring(ring);
        result
    }

    /// Downloads device buffers into Arrow buffers after `stream` has finished.
    pub fn download(
        &self,
        stream: &Arc<CudaStream>,
        buffers: &[&DeviceBuffer],
    ) -> Result<Vec<datafusion::arrow::buffer::Buffer>> {
        let mut ring = self.take_ring()?;
        let pinned = (&self.device.pinned, self.pinned_limit);
        let result = transfer::download(stream, pinned, &mut ring, buffers, &self.copy_threads);
        self.return_ring(ring);
        result
    }

    /// A new buffer holding a copy of `src` (stream-ordered).
    pub fn clone_buffer(&self, stream: &Arc<CudaStream>, src: &DeviceBuffer, what: &str) -> Result<DeviceBuffer> {
        let mut out = self.alloc(stream, src.len(), what)?;
        self.copy_device(stream, src, &mut out, src.len())?;
        Ok(out)
    }

    /// Copies the first `len` bytes of `src` into `dst` at byte `at` (a stream-ordered DMA copy).
    pub fn copy_device_at(
        &self,
        stream: &Arc<CudaStream>,
        src: &DeviceBuffer,
        dst: &mut DeviceBuffer,
        at: usize,
        len: usize,
    ) -> Result<()> {
        if len > src.len() || at + len > dst.len() {
            return Err(gpu_error(format!(
                "device copy of {len} bytes to byte {at} overruns buffers of {} and {} bytes",
                src.len(),
                dst.len()
            )));
        }
        if len == 0 {
            return Ok(());
        }
        let (Some(s), Some(d)) = (src.slice(stream), dst.slice_mut(stream)) else { return Ok(()) };
        let (from, mut to) = (s.slice(0..len), d.slice_mut(at..at + len));
        stream.memcpy_dtod(&from, &mut to).gpu(format!("copying {len} bytes on the device"))
    }

    /// Copies `len` bytes between device buffers with the `copy` kernels (16-byte vectors, then a
    /// byte tail), checking the launches.
    pub fn copy_device(
        &self,
        stream: &Arc<CudaStream>,
        src: &DeviceBuffer,
        dst: &mut DeviceBuffer,
        len: usize,
    ) -> Result<()> {
        if len > src.len() || len > dst.len() {
            return Err(gpu_error(format!("device copy of {len} bytes overruns its buffers")));
        }
        let (s, d) = (src.raw_ptr(stream), dst.raw_ptr(stream));
        if s == 0 || d == 0 {
            return Ok(());
        }
        let words = (len / 16) as u64;
        if words > 0 {
            // copy_u128(const uint4* src, uint4* dst, u64 n) over `words` 16-byte words.
            let args = [KArg::U64(s), KArg::U64(d), KArg::U64(words)];
            self.launch(stream, kernel::COPY_U128, grid_for(words, 256, self.info().sm_count), &args)?;
        }
        let tail = (len % 16) as u64;
        if tail > 0 {
            let off = (len as u64) - tail;
            // copy_u8(const u8* src, u8* dst, u64 n) over the last `tail` bytes.
            let args = [KArg::U64(s + off), KArg::U64(d + off), KArg::U64(tail)];
            self.launch(stream, kernel::COPY_U8, grid_for(tail, 256, self.info().sm_count), &args)?;
        }
        Ok(())
    }
}

/// A grid-stride launch shape for `n` items: enough blocks to fill every SM several times.
pub fn grid_for(n: u64, block: u32, sm_count: i32) -> LaunchConfig {
    let max_blocks = (sm_count.max(1) as u64) * 32;
    let blocks = n.div_ceil(block as u64).clamp(1, max_blocks) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

/// Checks a kernel launch: the launch's own status and any error the context recorded.
pub fn check_launch<T>(
    stream: &Arc<CudaStream>,
    launched: std::result::Result<T, cudarc::driver::DriverError>,
    kernel: &str,
) -> Result<()> {
    launched.gpu(format!("launching kernel {kernel}"))?;
    stream.context().check_err().gpu(format!("after launching kernel {kernel}"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::config::GpuConfig;
    use crate::testing::{gpu_lock, gpu_or_skip};

    /// `gpu.streams` spreads a session's work over that many streams (clamped), growing the
    /// pool; cudarc's event tracking is off (our runtime orders cross-stream work itself).
    #[test]
    fn gpu_streams_option_and_no_event_tracking() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_streams_option_and_no_event_tracking") else { return };
        assert!(!gpu.context().is_event_tracking(), "cudarc's event tracking must be off");
        let distinct = |g: &super::Gpu, n: usize| {
            (0..4 * n).map(|_| g.stream().cu_stream() as usize).collect::<HashSet<_>>().len()
        };
        let with = |streams: usize| gpu.with_config(&GpuConfig { streams, ..GpuConfig::default() }).unwrap();
        let three = with(3);
        assert_eq!(three.active_streams(), 3);
        assert_eq!(distinct(&three, 3), 3);
        let forty = with(40);
        assert_eq!(distinct(&forty, 40), 40);
        // A session's setting leaves the others' alone.
        assert_eq!(distinct(&three, 3), 3);
        let one = with(0);
        assert_eq!((one.active_streams(), distinct(&one, 1)), (1, 1));
        assert_eq!(with(10_000).active_streams(), super::MAX_STREAMS);
        assert_eq!(gpu.active_streams(), GpuConfig::default().streams);
    }

    /// A buffer used on a stream other than its own is freed only after the work queued there:
    /// its memory is not handed to a new allocation while copies on the other stream still
    /// write it (as on an error path that drops a buffer another stream's kernels use).
    #[test]
    fn gpu_a_buffer_used_on_another_stream_is_freed_after_that_work() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_a_buffer_used_on_another_stream_is_freed_after_that_work") else { return };
        let gpu = gpu.with_config(&GpuConfig { streams: 2, ..GpuConfig::default() }).unwrap();
        let (a, b) = (gpu.stream(), gpu.stream());
        assert_ne!(a.cu_stream(), b.cu_stream(), "two streams");
        let n = 256 << 20;
        let src = gpu.alloc_filled(&b, n, 0x11, "test source").unwrap();
        b.synchronize().unwrap();
        for round in 0..4 {
            let mut dst = gpu.alloc(&a, n, "test target").unwrap();
            a.synchronize().unwrap();
            // Copies on b that run for milliseconds, then the buffer is freed on a.
            for _ in 0..8 {
                gpu.copy_device(&b, &src, &mut dst, n).unwrap();
            }
            drop(dst);
            let fresh = gpu.alloc_filled(&a, n, 0x22, "test fresh").unwrap();
            let bytes = gpu.read::<u8>(&a, &fresh, 0, n).unwrap();
            let overwritten = bytes.iter().filter(|x| **x != 0x22).count();
            assert_eq!(overwritten, 0, "round {round}: b's copies wrote into memory freed and reused on a");
        }
        b.synchronize().unwrap();
    }

    /// Two sessions' budgets: each under its own gpu.memory.limit, both under the device's, and
    /// one session's later queries share its budget.
    #[test]
    fn sessions_have_budgets_of_their_own() {
        let _l = gpu_lock();
        let Some(_) = gpu_or_skip("sessions_have_budgets_of_their_own") else { return };
        let cfg = |limit: &str| GpuConfig { memory_limit: limit.parse().unwrap(), ..GpuConfig::default() };
        let a = super::Gpu::for_session(&cfg("8M"), "test-session-a").unwrap();
        let b = super::Gpu::for_session(&cfg("auto"), "test-session-b").unwrap();
        assert_eq!(a.memory().limit(), 8 << 20);
        assert_eq!(b.memory().limit(), b.device_memory().limit());
        let held = a.alloc(&a.stream(), 6 << 20, "test").unwrap();
        let again = super::Gpu::for_session(&cfg("8M"), "test-session-a").unwrap();
        assert_eq!(again.memory().used(), 6 << 20, "one budget for the session's queries");
        assert_eq!(b.memory().used(), 0);
        assert!(b.alloc(&b.stream(), 16 << 20, "test").is_ok(), "session b is not held to a's limit");
        drop(held);
    }

    /// Partitions are placed on a set's devices in turn, each placement seeing the whole set from
    /// its own device (the others in order after it) and drawing on that device's budget.
    #[test]
    fn gpu_partitions_are_placed_on_the_set_in_turn() {
        let _l = gpu_lock();
        let Some(_) = gpu_or_skip("gpu_partitions_are_placed_on_the_set_in_turn") else { return };
        let cfg =
            GpuConfig { devices: "0,0,0".parse().unwrap(), memory_limit: "64M".parse().unwrap(), ..Default::default() };
        let home = super::Gpu::for_session(&cfg, "test-session-placed").unwrap();
        let labels = |g: &std::sync::Arc<super::Gpu>| g.device_set().iter().map(|d| d.label()).collect::<Vec<_>>();
        assert_eq!(labels(&home), ["0", "0:1", "0:2"]);
        assert_eq!(labels(&home.placed(1)), ["0:1", "0:2", "0"]);
        assert_eq!(labels(&home.placed(5)), ["0:2", "0", "0:1"]);
        assert_eq!(labels(&home.placed(3)), labels(&home));
        let two = home.placed(2);
        let held = two.alloc(&two.stream(), 4 << 20, "test").unwrap();
        assert_eq!(two.memory().used(), 4 << 20);
        assert_eq!(home.memory().used(), 0, "each device of the set has its own budget");
        assert_eq!(home.placed(2).memory().used(), 4 << 20);
        drop(held);
        let one = super::Gpu::for_session(&GpuConfig::default(), "test-session-placed-one").unwrap();
        assert!(std::sync::Arc::ptr_eq(&one.placed(7), &one), "one device: every partition at home");
    }
}
