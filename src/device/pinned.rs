//! Page-locked (pinned) host memory: a pool of blocks reused across transfers, because
//! `cuMemHostAlloc` is slow and copies from pageable memory run at a fraction of the link's speed
//! (8 GB/s against 55 GB/s pinned, measured on an H200).
//!
//! Blocks serve two purposes: the double-buffered staging slots of uploads, and the final Arrow
//! buffers of downloads (the device writes straight into them, so a download costs one DMA and no
//! host copy). A block returns to the pool when its last Arrow buffer is dropped.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, result, sys};
use datafusion::arrow::buffer::Buffer;

use crate::config::human_bytes;
use crate::error::{Result, gpu_error};

/// A refusal for want of pinned memory under `gpu.memory.pinned_limit`: a `ResourcesExhausted`
/// error, which transfers answer by going through ordinary memory.
fn pinned_memory_error(why: String) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::ResourcesExhausted(format!(
        "{why}; raise it with SET gpu.memory.pinned_limit = '<size>'"
    ))
}

/// `gpu.memory.pinned_limit = auto`: a quarter of the host's physical memory.
pub fn default_pinned_limit() -> u64 {
    // SAFETY: sysconf reads system constants.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    if pages <= 0 || page <= 0 {
        return 16 << 30;
    }
    (pages as u64).saturating_mul(page as u64) / 4
}

/// Smallest block handed out.
const MIN_BLOCK: usize = 4 << 10;
/// Blocks up to this size round up to a power of two; larger ones to a multiple of it.
const LARGE_GRANULE: usize = 2 << 20;

/// Rounds a request up to the block size the pool allocates for it.
fn block_size(len: usize) -> usize {
    if len <= LARGE_GRANULE {
        len.max(MIN_BLOCK).next_power_of_two()
    } else {
        len.div_ceil(LARGE_GRANULE) * LARGE_GRANULE
    }
}

/// Blocks up to this size are carved out of larger chunks, so that downloads of many small
/// buffers do not each pay a `cuMemHostAlloc`.
const SMALL_BLOCK: usize = 1 << 20;
/// Size of a chunk that small blocks are carved from.
const CHUNK: usize = 8 << 20;

/// How a chunk's memory was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// `cuMemHostAlloc`.
    Driver,
    /// An anonymous mapping the driver page-locked in place (`cuMemHostRegister`).
    Registered,
}

/// One page-locked allocation; freed when its last block is gone.
#[derive(Debug)]
struct Chunk {
    addr: usize,
    size: usize,
    backing: Backing,
    /// Held for one long-lived owner (a pinned table's column, see [`PinnedPool::alloc_held`]):
    /// never cached for reuse, and freed only after the context's work has finished, so copies
    /// may read it without being waited for.
    held: bool,
    pool: Arc<PoolShared>,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // Errors here cannot be reported to anyone; the context records them.
        let t = std::time::Instant::now();
        if self.pool.ctx.bind_to_thread().is_ok() {
            if self.held {
                // Uploads do not wait for copies out of held memory: wait for them here.
                let _ = self.pool.ctx.synchronize();
            }
            match self.backing {
                Backing::Driver => {
                    let _ = unsafe { result::free_host(self.addr as *mut std::ffi::c_void) };
                }
                Backing::Registered => {
                    let _ = unsafe { sys::cuMemHostUnregister(self.addr as *mut _) };
                    // SAFETY: the mapping `new_registered_chunk` made, of this size, used by no one now.
                    let _ = unsafe { libc::munmap(self.addr as *mut _, self.size) };
                }
            }
        }
        crate::timeline::mark("pinned pool", || {
            format!("freed {} in {:.2} ms", human_bytes(self.size as u64), t.elapsed().as_secs_f64() * 1e3)
        });
        self.pool.allocated.fetch_sub(self.size as u64, Ordering::SeqCst);
        if let Ok(mut live) = self.pool.live.lock() {
            live.remove(&self.addr);
        }
    }
}

/// The pool's chunks at one moment ([`PinnedPool::chunks`]): start, size and whether it is
/// held, by start. Memory a caller holds a buffer of stays in the pool while it holds it, so a
/// look-up of such a buffer stays right for as long as the buffer is held.
#[derive(Debug, Default)]
pub struct PinnedChunks(Vec<(usize, usize, bool)>);

impl PinnedChunks {
    /// As [`PinnedPool::allocation_of`].
    pub fn allocation_of(&self, bytes: &[u8]) -> Option<PinnedAllocation> {
        let after = self.0.partition_point(|&(start, _, _)| start <= bytes.as_ptr() as usize);
        let &(start, size, held) = self.0.get(after.checked_sub(1)?)?;
        holding(start, size, held, bytes)
    }
}

/// Chunk (`start`, `size`, `held`) as the allocation of `bytes`, if it holds all of them.
fn holding(start: usize, size: usize, held: bool, bytes: &[u8]) -> Option<PinnedAllocation> {
    (start <= bytes.as_ptr() as usize && bytes.as_ptr() as usize + bytes.len() <= start + size)
        .then_some(PinnedAllocation { start, held })
}

/// A free block: an address inside a chunk.
#[derive(Debug)]
struct FreeBlock {
    addr: usize,
    chunk: Arc<Chunk>,
}

#[derive(Debug)]
struct PoolShared {
    ctx: Arc<CudaContext>,
    /// Bytes allocated from the driver and not yet released.
    allocated: AtomicU64,
    /// Address, size and whether it is held (see [`Chunk::held`]) of every chunk allocated and
    /// not yet released.
    live: Mutex<BTreeMap<usize, (usize, bool)>>,
}

/// A pool of pinned host blocks of one context.
#[derive(Debug)]
pub struct PinnedPool {
    shared: Arc<PoolShared>,
    /// Free blocks by size.
    free: Mutex<BTreeMap<usize, Vec<FreeBlock>>>,
    /// Bytes held in `free`.
    cached: AtomicU64,
    /// Most bytes `free` may hold; beyond it returned blocks are dropped (and their chunk freed
    /// once none of its blocks is left).
    cache_limit: u64,
}

impl PinnedPool {
    pub fn new(ctx: Arc<CudaContext>, cache_limit: u64) -> Arc<Self> {
        Arc::new(PinnedPool {
            shared: Arc::new(PoolShared { ctx, allocated: AtomicU64::new(0), live: Mutex::new(BTreeMap::new()) }),
            free: Mutex::new(BTreeMap::new()),
            cached: AtomicU64::new(0),
            cache_limit,
        })
    }

    /// Whether `bytes` lie in pinned memory of this pool (for instance buffers a download
    /// returned), so the DMA engine may read them directly.
    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.allocation_of(bytes).is_some()
    }

    /// The pinned allocation that holds all of `bytes`, if one does. (One DMA may read pieces
    /// end to end in one allocation, never across two.)
    pub fn allocation_of(&self, bytes: &[u8]) -> Option<PinnedAllocation> {
        let live = self.shared.live.lock().ok()?;
        let (&start, &(size, held)) = live.range(..=bytes.as_ptr() as usize).next_back()?;
        holding(start, size, held, bytes)
    }

    /// The chunks this pool has allocated now, to look many buffers up without taking the
    /// pool's lock for each (an upload of a table column of thousands of batches).
    pub fn chunks(&self) -> PinnedChunks {
        let live =
            self.shared.live.lock().map(|l| l.iter().map(|(&start, &(size, held))| (start, size, held)).collect());
        PinnedChunks(live.unwrap_or_default())
    }

    /// Pinned bytes held by this process (in use and cached).
    pub fn allocated_bytes(&self) -> u64 {
        self.shared.allocated.load(Ordering::SeqCst)
    }

    /// A block of at least `len` bytes, reused when one of a close size is free.
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<PinnedBlock> {
        self.alloc_within(len, u64::MAX)
    }

    /// Makes room for a new chunk of `size` bytes under `limit` (the process's pinned bytes,
    /// cached ones included): drops cached blocks if that is enough, refuses otherwise.
    fn room_for(&self, size: usize, limit: u64, free: &mut BTreeMap<usize, Vec<FreeBlock>>) -> Result<()> {
        let fits = |pool: &Self| pool.allocated_bytes().saturating_add(size as u64) <= limit;
        if fits(self) {
            return Ok(());
        }
        let cached = std::mem::take(free);
        self.cached.store(0, Ordering::SeqCst);
        // Chunks whose every block was cached go back to the driver here.
        drop(cached);
        if fits(self) {
            return Ok(());
        }
        Err(pinned_memory_error(format!(
            "{} of pinned host memory is over gpu.memory.pinned_limit ({}), with {} pinned by this process",
            human_bytes(size as u64),
            human_bytes(limit),
            human_bytes(self.allocated_bytes())
        )))
    }

    /// A block of at least `len` bytes, reused when one of a close size is free; a new one only
    /// when the process's pinned memory stays within `limit` (see [`PinnedPool::room_for`]).
    pub fn alloc_within(self: &Arc<Self>, len: usize, limit: u64) -> Result<PinnedBlock> {
        let size = block_size(len);
        let mut free = self.free.lock().map_err(|_| gpu_error("pinned pool lock poisoned"))?;
        // Accept a cached block up to 25% larger than needed.
        let found = free.range(size..=size + size / 4).find(|(_, v)| !v.is_empty()).map(|(k, _)| *k);
        if let Some(k) = found
            && let Some(b) = free.get_mut(&k).and_then(|v| v.pop())
        {
            self.cached.fetch_sub(k as u64, Ordering::SeqCst);
            return Ok(PinnedBlock { addr: b.addr, size: k, chunk: b.chunk, pool: Arc::clone(self) });
        }
        // Small blocks come several to a chunk; the others go to the free list.
        let per_chunk = if size <= SMALL_BLOCK { CHUNK / size } else { 1 };
        self.room_for(size * per_chunk, limit, &mut free)?;
        let chunk = self.new_chunk(size * per_chunk, false)?;
        for i in 1..per_chunk {
            free.entry(size).or_default().push(FreeBlock { addr: chunk.addr + i * size, chunk: Arc::clone(&chunk) });
            self.cached.fetch_add(size as u64, Ordering::SeqCst);
        }
        Ok(PinnedBlock { addr: chunk.addr, size, chunk, pool: Arc::clone(self) })
    }

    /// A block of at least `len` bytes in an allocation of its own, for an owner that keeps it
    /// for long (a pinned table's column). It is never cached for reuse: when the block is
    /// dropped its memory is freed, after the context's work has finished. So copies straight
    /// from it need not be waited for (see [`PinnedAllocation::held`]).
    ///
    /// The memory is an anonymous mapping advised to use transparent huge pages and page-locked
    /// in place (`cuMemHostRegister`), so the CPU reads the table through the same pages it would
    /// get from its allocator; if registering fails, `cuMemHostAlloc`.
    pub fn alloc_held(self: &Arc<Self>, len: usize, limit: u64) -> Result<PinnedBlock> {
        let size = len.max(1).div_ceil(LARGE_GRANULE) * LARGE_GRANULE;
        {
            let mut free = self.free.lock().map_err(|_| gpu_error("pinned pool lock poisoned"))?;
            self.room_for(size, limit, &mut free)?;
        }
        let chunk = match self.new_registered_chunk(size) {
            Some(chunk) => chunk,
            None => self.new_chunk(size, true)?,
        };
        Ok(PinnedBlock { addr: chunk.addr, size, chunk, pool: Arc::clone(self) })
    }

    /// A held chunk of `size` bytes (a multiple of 2 MiB) mapped and page-locked in place, or
    /// `None` when the host refuses either step.
    fn new_registered_chunk(&self, size: usize) -> Option<Arc<Chunk>> {
        self.shared.ctx.bind_to_thread().ok()?;
        let t = std::time::Instant::now();
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Advice only: under `transparent_hugepage=never` it changes nothing.
        let _ = unsafe { libc::madvise(ptr, size, libc::MADV_HUGEPAGE) };
        // Portable: pinned for every context, so that each device of a set copies it at the
        // link's pinned speed (an out-of-core join's partitions go to the set's devices).
        let portable = sys::CU_MEMHOSTREGISTER_PORTABLE;
        if unsafe { sys::cuMemHostRegister_v2(ptr, size, portable) } != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(ptr, size) };
            return None;
        }
        crate::timeline::mark("pinned pool", || {
            format!("mapped and registered {} in {:.2} ms", human_bytes(size as u64), t.elapsed().as_secs_f64() * 1e3)
        });
        Some(self.track(ptr as usize, size, Backing::Registered, true))
    }

    /// Counts a new chunk in the pool's totals and its index of live allocations.
    fn track(&self, addr: usize, size: usize, backing: Backing, held: bool) -> Arc<Chunk> {
        self.shared.allocated.fetch_add(size as u64, Ordering::SeqCst);
        if let Ok(mut live) = self.shared.live.lock() {
            live.insert(addr, (size, held));
        }
        Arc::new(Chunk { addr, size, backing, held, pool: Arc::clone(&self.shared) })
    }

    /// A `cuMemHostAlloc` chunk of `size` bytes, held or for the pool's reuse.
    fn new_chunk(&self, size: usize, held: bool) -> Result<Arc<Chunk>> {
        self.shared.ctx.bind_to_thread().map_err(|e| gpu_error(format!("binding the CUDA context: {e}")))?;
        // Plain page-locked memory: write-combined memory would make host reads of downloads slow.
        let t = std::time::Instant::now();
        // Portable, as registered chunks are (see `new_registered_chunk`).
        let ptr = unsafe { result::malloc_host(size, sys::CU_MEMHOSTALLOC_PORTABLE) }.map_err(|e| {
            gpu_error(format!(
                "allocating {} of pinned host memory failed ({e}); the host may be short of lockable memory",
                human_bytes(size as u64)
            ))
        })?;
        crate::timeline::mark("pinned pool", || {
            format!("allocated {} in {:.2} ms", human_bytes(size as u64), t.elapsed().as_secs_f64() * 1e3)
        });
        Ok(self.track(ptr as usize, size, Backing::Driver, held))
    }

    /// Caches a returned block. When the cache is full, cached blocks of other sizes go first,
    /// the largest first: the block just returned is the size the work asks for now. (Keeping
    /// old sizes instead made every repeated 1 GiB download allocate and free a block:
    /// `bench transfer` downloaded at 4 GB/s with a 2 GiB block no one asked for in the cache.)
    fn give_back(&self, addr: usize, size: usize, chunk: Arc<Chunk>) {
        let Ok(mut free) = self.free.lock() else { return };
        let fits = |cached: u64| cached + size as u64 <= self.cache_limit;
        let mut evicted = Vec::new();
        while !fits(self.cached.load(Ordering::SeqCst)) {
            let Some(k) = free.iter().rev().find(|(k, v)| **k != size && !v.is_empty()).map(|(k, _)| *k) else {
                break;
            };
            if let Some(v) = free.get_mut(&k)
                && let Some(b) = v.pop()
            {
                self.cached.fetch_sub(k as u64, Ordering::SeqCst);
                evicted.push(b);
                if v.is_empty() {
                    free.remove(&k);
                }
            }
        }
        if fits(self.cached.load(Ordering::SeqCst)) {
            free.entry(size).or_default().push(FreeBlock { addr, chunk });
            self.cached.fetch_add(size as u64, Ordering::SeqCst);
        }
        drop(free);
        // Evicted blocks (and `chunk`, when it did not fit) drop here, outside the lock; with a
        // chunk's last block its memory goes back to the driver.
        drop(evicted);
    }
}

/// One pinned block; returns to its pool on drop.
#[derive(Debug)]
pub struct PinnedBlock {
    addr: usize,
    size: usize,
    chunk: Arc<Chunk>,
    pool: Arc<PinnedPool>,
}

// The block is plain host memory owned by exactly one `PinnedBlock`.
impl std::panic::RefUnwindSafe for PinnedBlock {}

impl PinnedBlock {
    pub fn capacity(&self) -> usize {
        self.size
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// Turns the first `len` bytes into an Arrow buffer that owns the block.
    pub fn into_buffer(self, len: usize) -> Result<Buffer> {
        if len > self.size {
            return Err(gpu_error(format!("pinned block of {} bytes cannot hold {len}", self.size)));
        }
        let ptr = NonNull::new(self.addr as *mut u8).ok_or_else(|| gpu_error("null pinned block"))?;
        // SAFETY: the block stays allocated until the Arc (and with it the block) is dropped.
        Ok(unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(self)) })
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        // A held block's chunk is freed with the block (the last `Arc` goes with `self`).
        if !self.chunk.held {
            let chunk = Arc::clone(&self.chunk);
            self.pool.give_back(self.addr, self.size, chunk);
        }
    }
}

/// Where some bytes lie in a pool's pinned memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedAllocation {
    /// The allocation's start address.
    pub start: usize,
    /// Whether the allocation is held (see [`PinnedPool::alloc_held`]): it is not reused for
    /// anything else before the context's work has finished, so a copy out of it need not be
    /// waited for.
    pub held: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{gpu_lock, gpu_or_skip};

    /// A chunk list finds the chunk holding all of some bytes, by address: none before the
    /// first chunk, between chunks or across a chunk's end.
    #[test]
    fn chunk_lists_find_the_chunk_holding_bytes() {
        let chunks = PinnedChunks(vec![(0x1000, 0x100, false), (0x2000, 0x40, true), (0x3000, 0x10, false)]);
        let at = |addr: usize, len: usize| {
            // SAFETY: the slice is only looked up by address and length, never read.
            chunks.allocation_of(unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
        };
        assert_eq!(at(0x1000, 0x100), Some(PinnedAllocation { start: 0x1000, held: false }));
        assert_eq!(at(0x10f0, 0x10), Some(PinnedAllocation { start: 0x1000, held: false }));
        assert_eq!(at(0x2010, 0x8), Some(PinnedAllocation { start: 0x2000, held: true }));
        assert_eq!(at(0x300f, 0x1), Some(PinnedAllocation { start: 0x3000, held: false }));
        assert_eq!(at(0x0fff, 0x1), None, "before the first chunk");
        assert_eq!(at(0x10f0, 0x11), None, "across a chunk's end");
        assert_eq!(at(0x1800, 0x8), None, "between chunks");
        assert_eq!(at(0x4000, 0x8), None, "past the last chunk");
        assert_eq!(PinnedChunks::default().allocation_of(&[1, 2, 3]), None);
    }

    /// Small blocks share chunks without overlapping, and return to the pool for reuse.
    #[test]
    fn gpu_small_blocks_are_carved_from_chunks() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_small_blocks_are_carved_from_chunks") else { return };
        let pool = PinnedPool::new(Arc::clone(gpu.context()), 1 << 30);
        let mut blocks: Vec<PinnedBlock> = (0..300).map(|_| pool.alloc(30_000).unwrap()).collect();
        assert_eq!(
            pool.allocated_bytes(),
            (CHUNK * 2) as u64,
            "300 blocks of 32 KiB fit in two 8 MiB chunks (256 each)"
        );
        for (i, b) in blocks.iter_mut().enumerate() {
            unsafe { std::ptr::write_bytes(b.as_mut_ptr(), (i % 251) as u8, 30_000) };
        }
        for (i, b) in blocks.iter().enumerate() {
            let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), 30_000) };
            assert!(bytes.iter().all(|x| *x == (i % 251) as u8), "block {i} was overwritten by another");
        }
        let buf = blocks.pop().unwrap().into_buffer(100).unwrap();
        assert_eq!(buf.len(), 100);
        drop((blocks, buf));
        let again: Vec<PinnedBlock> = (0..300).map(|_| pool.alloc(30_000).unwrap()).collect();
        assert_eq!(pool.allocated_bytes(), (CHUNK * 2) as u64, "freed blocks are reused");
        drop(again);
        let big = pool.alloc(3 << 20).unwrap();
        assert_eq!(big.capacity(), 4 << 20);
    }

    /// A full cache makes room for a returned block by dropping cached blocks of other sizes,
    /// so the sizes in use are reused instead of allocated again.
    #[test]
    fn gpu_full_cache_evicts_other_sizes() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_full_cache_evicts_other_sizes") else { return };
        let mb = 1usize << 20;
        let pool = PinnedPool::new(Arc::clone(gpu.context()), (8 * mb) as u64);
        drop(pool.alloc(6 * mb).unwrap());
        assert_eq!(pool.allocated_bytes(), (6 * mb) as u64, "the 6 MiB block stays cached");
        let (a, b) = (pool.alloc(4 * mb).unwrap(), pool.alloc(4 * mb).unwrap());
        assert_eq!(pool.allocated_bytes(), (14 * mb) as u64);
        drop((a, b));
        assert_eq!(pool.allocated_bytes(), (8 * mb) as u64, "the 6 MiB block made room for both 4 MiB ones");
        let again = (pool.alloc(4 * mb).unwrap(), pool.alloc(4 * mb).unwrap());
        assert_eq!(pool.allocated_bytes(), (8 * mb) as u64, "both 4 MiB blocks are reused");
        drop(again);
    }

    /// Held blocks get an allocation of their own, are reported as held, and are freed (not
    /// cached) when dropped.
    #[test]
    fn gpu_held_blocks_are_freed_not_cached() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_held_blocks_are_freed_not_cached") else { return };
        let mb = 1usize << 20;
        let pool = PinnedPool::new(Arc::clone(gpu.context()), (64 * mb) as u64);
        let mut held = pool.alloc_held(3 * mb + 1, u64::MAX).unwrap();
        assert_eq!(held.capacity(), 4 * mb, "held blocks round up to a multiple of 2 MiB");
        unsafe { std::ptr::write_bytes(held.as_mut_ptr(), 7, held.capacity()) };
        let bytes = unsafe { std::slice::from_raw_parts(held.as_ptr().add(mb), 1000) };
        assert!(bytes.iter().all(|b| *b == 7));
        let at = pool.allocation_of(bytes).unwrap();
        assert_eq!((at.start, at.held), (held.as_ptr() as usize, true));
        let pooled = pool.alloc(4 * mb).unwrap();
        let at = pool.allocation_of(unsafe { std::slice::from_raw_parts(pooled.as_ptr(), 10) }).unwrap();
        assert!(!at.held, "pool blocks are not held");
        assert_eq!(pool.allocated_bytes(), (8 * mb) as u64);
        let addr = held.as_ptr() as usize;
        drop(held);
        assert_eq!(pool.allocated_bytes(), (4 * mb) as u64, "a dropped held block is freed, not cached");
        let probe = [0u8; 1];
        assert!(pool.allocation_of(&probe).is_none());
        assert!(pool.shared.live.lock().unwrap().get(&addr).is_none());
        drop(pooled);
    }

    /// Under a limit, cached blocks are dropped to make room, and a request that still does not
    /// fit is refused with the option named; held blocks count too.
    #[test]
    fn gpu_the_pinned_limit_drops_cached_blocks_then_refuses() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_the_pinned_limit_drops_cached_blocks_then_refuses") else { return };
        let mb = 1usize << 20;
        let pool = PinnedPool::new(Arc::clone(gpu.context()), (64 * mb) as u64);
        let limit = (16 * mb) as u64;
        drop(pool.alloc_within(8 * mb, limit).unwrap());
        assert_eq!(pool.allocated_bytes(), (8 * mb) as u64, "cached for reuse");
        let a = pool.alloc_within(12 * mb, limit).unwrap();
        assert_eq!(pool.allocated_bytes(), (12 * mb) as u64, "the cached 8 MiB block made room");
        let err = pool.alloc_within(6 * mb, limit).unwrap_err();
        assert!(matches!(err, datafusion::error::DataFusionError::ResourcesExhausted(_)), "{err}");
        assert!(err.to_string().contains("gpu.memory.pinned_limit"), "{err}");
        assert!(pool.alloc_held(6 * mb, limit).is_err(), "held blocks are under the limit too");
        drop(a);
        let held = pool.alloc_held(6 * mb, limit).unwrap();
        assert!(pool.allocated_bytes() <= limit);
        drop(held);
        assert!(default_pinned_limit() > 0);
    }

    #[test]
    fn block_sizes_round_up() {
        assert_eq!(block_size(0), 4096);
        assert_eq!(block_size(5000), 8192);
        assert_eq!(block_size(2 << 20), 2 << 20);
        assert_eq!(block_size((2 << 20) + 1), 4 << 20);
        assert_eq!(block_size((6 << 20) + 1), 8 << 20);
        assert_eq!(block_size(1 << 30), 1 << 30);
    }
}
