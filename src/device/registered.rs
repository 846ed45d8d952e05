//! Page-locking host buffers in place (`cuMemHostRegister`) so the DMA engine reads them
//! directly, at the link's full speed, without a copy into staging.
//!
//! Staging costs a host copy per upload, and on the H200 machine used here 16 threads copy only
//! 37-43 GB/s into pinned memory (the link moves 55 GB/s): fresh batches are bound by that copy.
//! Registration costs more than one copy, so it pays only for buffers uploaded again and again,
//! such as in-memory tables scanned by every query. A buffer is therefore registered the second
//! time it is uploaded, and stays registered (least recently used first out) within a byte limit.
//! The registry holds a clone of each registered Arrow `Buffer`: the memory cannot be freed or
//! reused while registered, and, being shared, cannot be mutated in place either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, sys};
use datafusion::arrow::buffer::Buffer;

/// Buffers smaller than this are always staged: registration costs a system call and page walk.
pub const MIN_REGISTER_BYTES: usize = 1 << 20;
/// Most first-seen buffers remembered before the memory of them is reset.
const MAX_SEEN: usize = 1 << 16;

#[derive(Debug)]
struct Entry {
    _buffer: Buffer,
    len: usize,
    last_use: u64,
}

#[derive(Debug, Default)]
struct State {
    registered: HashMap<(usize, usize), Entry>,
    /// Ranges uploaded once (not held), or that failed to register (`u64::MAX`).
    seen: HashMap<(usize, usize), u64>,
    clock: u64,
    bytes: u64,
}

/// Registered host buffers of one context. Each upload brings its session's byte limit
/// (`gpu.memory.host_register_limit`): a buffer is registered only within it, evicting others first.
#[derive(Debug)]
pub struct HostRegistry {
    ctx: Arc<CudaContext>,
    state: Mutex<State>,
}

impl HostRegistry {
    pub fn new(ctx: Arc<CudaContext>) -> Self {
        HostRegistry { ctx, state: Mutex::new(State::default()) }
    }

    /// Unregisters least recently used buffers until at most `limit` bytes stay registered.
    pub fn shrink_to(&self, limit: u64) {
        if let Ok(mut s) = self.state.lock() {
            self.evict_to(&mut s, limit);
        }
    }

    /// Bytes registered now.
    pub fn registered_bytes(&self) -> u64 {
        self.state.lock().map(|s| s.bytes).unwrap_or(0)
    }

    /// Whether the DMA engine may read `buf` directly: true if it is registered, registering it
    /// now if this is its second upload and it fits `limit`.
    pub fn prepare(&self, buf: &Buffer, limit: u64) -> bool {
        let len = buf.len();
        if len < MIN_REGISTER_BYTES || len as u64 > limit {
            return false;
        }
        let key = (buf.as_ptr() as usize, len);
        let Ok(mut s) = self.state.lock() else { return false };
        s.clock += 1;
        let now = s.clock;
        if let Some(e) = s.registered.get_mut(&key) {
            e.last_use = now;
            return true;
        }
        match s.seen.get(&key) {
            None => {
                if s.seen.len() >= MAX_SEEN {
                    s.seen.clear();
                }
                s.seen.insert(key, now);
                return false;
            }
            Some(&u64::MAX) => return false,
            Some(_) => {}
        }
        self.evict_to(&mut s, limit - len as u64);
        let ok = self.ctx.bind_to_thread().is_ok()
            && unsafe { sys::cuMemHostRegister_v2(buf.as_ptr() as *mut _, len, 0) } == sys::CUresult::CUDA_SUCCESS;
        if !ok {
            // For instance a page shared with a range registered already: stage this one.
            s.seen.insert(key, u64::MAX);
            return false;
        }
        s.seen.remove(&key);
        s.registered.insert(key, Entry { _buffer: buf.clone(), len, last_use: now });
        s.bytes += len as u64;
        true
    }

    /// Unregisters least recently used buffers until at most `target` bytes stay registered.
    fn evict_to(&self, s: &mut State, target: u64) {
        if s.bytes <= target {
            return;
        }
        // A DMA may still read an evicted buffer: let every stream finish first.
        if self.ctx.synchronize().is_err() {
            log::warn!("could not synchronise before unregistering host memory");
            return;
        }
        let mut order: Vec<((usize, usize), u64)> = s.registered.iter().map(|(k, e)| (*k, e.last_use)).collect();
        order.sort_by_key(|(_, t)| *t);
        for (key, _) in order {
            if s.bytes <= target {
                break;
            }
            if let Some(e) = s.registered.remove(&key) {
                unsafe { sys::cuMemHostUnregister(key.0 as *mut _) };
                s.bytes -= e.len as u64;
            }
        }
    }
}

impl Drop for HostRegistry {
    fn drop(&mut self) {
        let limit = 0;
        if let Ok(mut s) = self.state.lock() {
            self.evict_to(&mut s, limit);
        }
    }
}

/// A host vector page-locked in place for every context of the process
/// (`CU_MEMHOSTREGISTER_PORTABLE`), so that each device of a set copies to and from it at the
/// link's pinned speed (the chunkset join's relations, `join::chunksets`). It is unregistered
/// before its memory is freed, and cannot grow (it hands out slices only). When the host refuses
/// to lock it, it stays pageable, and copies run at the pageable rate ([`PinnedVec::is_pinned`]).
pub struct PinnedVec<T: Copy> {
    data: Vec<T>,
    pinned: bool,
}

impl<T: Copy> PinnedVec<T> {
    /// Page-locks `data` for every context (`ctx` is bound for the call).
    pub fn new(ctx: &CudaContext, data: Vec<T>) -> PinnedVec<T> {
        let bytes = std::mem::size_of_val(data.as_slice());
        let pinned = bytes > 0
            && ctx.bind_to_thread().is_ok()
            // SAFETY: the range is the vector's own initialised memory, which lives (unmoved: the
            // vector never grows) until `drop` unregisters it.
            && unsafe {
                sys::cuMemHostRegister_v2(data.as_ptr() as *mut _, bytes, sys::CU_MEMHOSTREGISTER_PORTABLE)
            } == sys::CUresult::CUDA_SUCCESS;
        PinnedVec { data, pinned }
    }

    /// Whether the memory is page-locked.
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }
}

impl<T: Copy> std::ops::Deref for PinnedVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T: Copy> std::ops::DerefMut for PinnedVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T: Copy> std::fmt::Debug for PinnedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedVec({} items, pinned: {})", self.data.len(), self.pinned)
    }
}

impl<T: Copy> Drop for PinnedVec<T> {
    fn drop(&mut self) {
        if self.pinned {
            // SAFETY: registered in `new` at this address; no copy uses it any more (its users
            // synchronise their streams before they let go of the borrow).
            unsafe { sys::cuMemHostUnregister(self.data.as_mut_ptr() as *mut _) };
        }
    }
}
