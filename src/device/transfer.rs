//! Host <-> device copies, always through pinned memory.
//!
//! Upload: host bytes are copied by several threads into one of two pinned staging slots while
//! the DMA engine drains the other (double buffering); small pieces share a slot. Download: the
//! device writes straight into pooled pinned blocks that become the Arrow buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};
use datafusion::arrow::buffer::{Buffer, MutableBuffer};

use super::memory::DeviceBuffer;
use super::pinned::{PinnedBlock, PinnedPool};
use super::registered::HostRegistry;
use crate::error::{CudaResultExt, Result, gpu_error};

/// Copies are cut into tasks of at most this many bytes, spread over the copy pool's threads.
const COPY_TASK_BYTES: usize = 2 << 20;

/// How host copies write their destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stores {
    /// Ordinary stores: each destination cache line is first read into the cache, then written
    /// back. For a destination the CPU reads next.
    Plain,
    /// Streaming (non-temporal) stores: whole lines go to memory without being read first, which
    /// spares a third of the memory traffic of a copy. For staging slots, which only the DMA
    /// engine reads. Plain on processors without them.
    Streaming,
}

/// Copies each `(src, dst)` pair on `pool`'s threads (on the caller's thread when small).
///
/// # Safety
/// Every `dst` must be valid for `src.len()` bytes of writes and not overlap another `dst` or
/// any `src`.
pub unsafe fn parallel_copy(pool: &rayon::ThreadPool, pieces: &[(&[u8], *mut u8)], stores: Stores) {
    let staged: Vec<StageCopy> = pieces.iter().map(|&(src, dst)| StageCopy { src, dst, narrow: None }).collect();
    unsafe { parallel_stage(pool, &staged, stores) };
}

/// How a piece's integers cross the link: each little-endian integer of [`Narrowing::from_bytes`]
/// bytes as its low [`Narrowing::to_bytes`] bytes, checked while it is copied into the staging
/// slot, and sign-extended back on the device by [`Narrowing::widen_kernel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Narrowing {
    /// Decimal128 values of at most 18 digits as 8-byte integers.
    I128ToI64,
    /// Decimal128 values as 4-byte integers (TPC-H's prices and quantities all fit).
    I128ToI32,
    /// Int64 values as 4-byte integers (keys below 2^31).
    I64ToI32,
    /// Integers of `from` bytes (4: Int32 and Date32, 8: Int64, 16: Decimal128 of at most 18
    /// digits) as their distance above `base` in `to` bytes (1 or 2; 3 in host images, which are
    /// laid out ahead and never narrowed while staged), unsigned: a frame of reference for
    /// columns whose values lie in a narrow range (quantities, discounts, dates, keys, prices).
    /// Made by [`Narrowing::offset`].
    Offset { from: u8, to: u8, base: i64 },
}

impl Narrowing {
    /// The frame-of-reference narrowing of `from`-byte integers (4, 8 or 16) into `to` bytes (1,
    /// 2 or 3) above `base`; `None` for other widths. A staged upload narrows into 1 or 2 bytes
    /// only (its pieces are cut on whole values of both widths, see [`Narrowing::shrink`]); 3
    /// bytes are for host images ([`narrow_into`]).
    pub fn offset(from: usize, to: usize, base: i64) -> Option<Narrowing> {
        (matches!(from, 4 | 8 | 16) && matches!(to, 1..=3)).then_some(Narrowing::Offset {
            from: from as u8,
            to: to as u8,
            base,
        })
    }

    /// Bytes of a value on the host and on the device.
    pub fn from_bytes(self) -> usize {
        match self {
            Narrowing::I128ToI64 | Narrowing::I128ToI32 => 16,
            Narrowing::I64ToI32 => 8,
            Narrowing::Offset { from, .. } => from as usize,
        }
    }

    /// Bytes of a value in the staging slot and on the link.
    pub fn to_bytes(self) -> usize {
        match self {
            Narrowing::I128ToI64 => 8,
            Narrowing::I128ToI32 | Narrowing::I64ToI32 => 4,
            Narrowing::Offset { to, .. } => to as usize,
        }
    }

    /// The value the widening adds back (frame of reference), if any.
    pub fn base(self) -> Option<i64> {
        match self {
            Narrowing::Offset { base, .. } => Some(base),
            _ => None,
        }
    }

    /// How many times fewer bytes cross the link, for the narrowings a staged upload makes
    /// (the widths divide: 16, 8 or 4 bytes into 8, 4, 2 or 1). A 3-byte frame of reference is
    /// never staged: [`Narrowing::narrowed_len`] gives its lengths.
    pub fn shrink(self) -> usize {
        self.from_bytes() / self.to_bytes()
    }

    /// Bytes that `bytes` bytes of whole values take narrowed.
    pub fn narrowed_len(self, bytes: usize) -> usize {
        bytes / self.from_bytes() * self.to_bytes()
    }

    /// The kernel that sign-extends `n` narrowed values into their width,
    /// `(const void* src, void* dst, u64 n)`, or for [`Narrowing::Offset`] adds its base to each,
    /// `(const void* src, void* dst, u64 n, i64 base)`.
    pub fn widen_kernel(self) -> super::kernel::Kernel {
        use super::kernel::*;
        match self {
            Narrowing::I128ToI64 => WIDEN_I64_TO_I128,
            Narrowing::I128ToI32 => WIDEN_I32_TO_I128,
            Narrowing::I64ToI32 => WIDEN_I32_TO_I64,
            Narrowing::Offset { from: 4, to: 1, .. } => WIDEN_U8_TO_I32,
            Narrowing::Offset { from: 4, to: 2, .. } => WIDEN_U16_TO_I32,
            Narrowing::Offset { from: 4, .. } => WIDEN_U24_TO_I32,
            Narrowing::Offset { from: 8, to: 1, .. } => WIDEN_U8_TO_I64,
            Narrowing::Offset { from: 8, to: 2, .. } => WIDEN_U16_TO_I64,
            Narrowing::Offset { from: 8, .. } => WIDEN_U24_TO_I64,
            Narrowing::Offset { to: 1, .. } => WIDEN_U8_TO_I128,
            Narrowing::Offset { to: 2, .. } => WIDEN_U16_TO_I128,
            Narrowing::Offset { .. } => WIDEN_U24_TO_I128,
        }
    }
}

/// Narrows the 16-byte integers of each `(src, dst)` pair into `dst` (see [`narrow_copy`]) on
/// `pool`'s threads; whether every value fitted in 8 bytes. For measuring the staging step.
///
/// # Safety
/// Every `dst` must be valid for `src.len() / 2` bytes of writes and not overlap another `dst` or
/// any `src`; every `src.len()` must be a multiple of 16.
pub unsafe fn parallel_narrow(pool: &rayon::ThreadPool, pieces: &[(&[u8], *mut u8)], stores: Stores) -> bool {
    let fits = AtomicBool::new(true);
    let staged: Vec<StageCopy> =
        pieces.iter().map(|&(src, dst)| StageCopy { src, dst, narrow: Some((&fits, Narrowing::I128ToI64)) }).collect();
    unsafe { parallel_stage(pool, &staged, stores) };
    fits.load(Ordering::Relaxed)
}

/// Narrows the little-endian integers of `src` into `dst` on the caller's thread, as a staged
/// copy does ([`Narrowing`]); whether every value fitted (`dst` then holds them all). `None` when
/// the lengths do not make whole values of `how` or `dst` is not `src`'s narrowed length, or on a
/// big-endian host ([`NARROWING`]). For narrowed host images of columns, made ahead of uploads.
pub fn narrow_into(how: Narrowing, src: &[u8], dst: &mut [u8]) -> Option<bool> {
    if !NARROWING || src.len() % how.from_bytes() != 0 || dst.len() != how.narrowed_len(src.len()) {
        return None;
    }
    let fits = AtomicBool::new(true);
    // SAFETY: `dst` is an exclusive borrow of exactly the narrowed length, apart from `src`.
    unsafe { stage_one(src, dst.as_mut_ptr(), Some((&fits, how)), Stores::Plain) };
    Some(fits.load(Ordering::Relaxed))
}

/// A narrowed copy's flag, cleared when one of its values does not fit, and its narrowing.
type NarrowFlag<'a> = Option<(&'a AtomicBool, Narrowing)>;

/// One host copy into a staging slot: `src` as it is, or (`narrow`) its integers narrowed,
/// clearing the flag when one of them does not fit.
struct StageCopy<'a> {
    src: &'a [u8],
    dst: *mut u8,
    narrow: NarrowFlag<'a>,
}

/// Runs the copies on `pool`'s threads (on the caller's thread when small).
///
/// # Safety
/// Every `dst` must be valid for writes of the bytes its copy produces (`src.len()`, divided by
/// the narrowing's shrink when narrowed) and not overlap another `dst` or any `src`.
unsafe fn parallel_stage(pool: &rayon::ThreadPool, copies: &[StageCopy<'_>], stores: Stores) {
    let total: usize = copies.iter().map(|c| c.src.len()).sum();
    if total <= COPY_TASK_BYTES || pool.current_num_threads() <= 1 {
        for c in copies {
            unsafe { stage_one(c.src, c.dst, c.narrow, stores) };
        }
        return;
    }
    // Destinations travel as addresses: raw pointers are not Send. A task's source is a
    // multiple of 16 bytes, so narrowed tasks start on a value.
    let tasks: Vec<(&[u8], usize, NarrowFlag<'_>)> = copies
        .iter()
        .flat_map(|c| {
            let narrowed = move |bytes: usize| c.narrow.map_or(bytes, |(_, how)| how.narrowed_len(bytes));
            c.src
                .chunks(COPY_TASK_BYTES)
                .enumerate()
                .map(move |(i, part)| (part, c.dst as usize + narrowed(i * COPY_TASK_BYTES), c.narrow))
        })
        .collect();
    use rayon::prelude::*;
    pool.install(|| {
        tasks.par_iter().for_each(|&(src, dst, narrow)| unsafe { stage_one(src, dst as *mut u8, narrow, stores) })
    });
}

/// # Safety
/// As [`parallel_stage`], for one copy.
unsafe fn stage_one(src: &[u8], dst: *mut u8, narrow: NarrowFlag<'_>, stores: Stores) {
    match (narrow, stores) {
        (None, Stores::Plain) => unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) },
        (None, Stores::Streaming) => unsafe { streaming::copy(src, dst) },
        (Some((fits, how)), _) => {
            let ok = match (how, stores) {
                (Narrowing::I128ToI64, Stores::Plain) => unsafe { wide::narrow_copy(src, dst) },
                (Narrowing::I128ToI64, Stores::Streaming) => unsafe { streaming::narrow_copy(src, dst) },
                // A 4-byte narrowing is a first try that a failure sends again at a greater width:
                // once a value has not fitted, the copies of the piece stop.
                _ if !fits.load(Ordering::Relaxed) => false,
                (Narrowing::I128ToI32, _) => unsafe { wide::narrow_copy_to_i32::<16>(src, dst, fits) },
                (Narrowing::I64ToI32, _) => unsafe { wide::narrow_copy_to_i32::<8>(src, dst, fits) },
                (Narrowing::Offset { from, to, base }, _) => unsafe {
                    match (from, to) {
                        (4, 1) => wide::offset_copy::<4, 1>(src, dst, base, fits),
                        (4, 2) => wide::offset_copy::<4, 2>(src, dst, base, fits),
                        (4, _) => wide::offset_copy::<4, 3>(src, dst, base, fits),
                        (8, 1) => wide::offset_copy::<8, 1>(src, dst, base, fits),
                        (8, 2) => wide::offset_copy::<8, 2>(src, dst, base, fits),
                        (8, _) => wide::offset_copy::<8, 3>(src, dst, base, fits),
                        (_, 1) => wide::offset_copy::<16, 1>(src, dst, base, fits),
                        (_, 2) => wide::offset_copy::<16, 2>(src, dst, base, fits),
                        _ => wide::offset_copy::<16, 3>(src, dst, base, fits),
                    }
                },
            };
            if !ok {
                fits.store(false, Ordering::Relaxed);
            }
        }
    }
}

/// Values a 4-byte narrowing copies between checks of its flag.
const NARROW_CHECK_VALUES: usize = 2048;

/// Writes the low 4 bytes of each `W`-byte (16 or 8) little-endian integer of `src` to `dst`;
/// whether every value fits in 4 bytes. Stops early, leaving `dst` partly written, once a value
/// has not fitted or `fits` has been cleared by another copy of the same piece: the piece is then
/// staged again at a greater width.
///
/// # Safety
/// `dst` must be valid for `src.len() / W * 4` bytes of writes and not overlap `src`.
#[inline(always)]
unsafe fn narrow_copy_to_i32<const W: usize>(src: &[u8], dst: *mut u8, fits: &AtomicBool) -> bool {
    let values = src.len() / W;
    let to = dst as *mut u32;
    let mut at = 0;
    while at < values {
        let end = (at + NARROW_CHECK_VALUES).min(values);
        let mut off_range = 0u64;
        for i in at..end {
            // SAFETY: `i < values` keeps both the read and the write in bounds; neither needs
            // alignment.
            let (lo, hi) = unsafe {
                let p = src.as_ptr().add(i * W);
                let lo = (p as *const u64).read_unaligned();
                (lo, if W == 16 { (p.add(8) as *const u64).read_unaligned() } else { ((lo as i64) >> 63) as u64 })
            };
            off_range |= past_64_bits(lo, hi) | past_32_bits(lo);
            unsafe { to.add(i).write_unaligned(lo as u32) };
        }
        if off_range != 0 || !fits.load(Ordering::Relaxed) {
            return false;
        }
        at = end;
    }
    true
}

/// Writes each `W`-byte (4, 8 or 16) little-endian integer of `src` to `dst` as its distance
/// above `base` in `T` bytes (1 or 2); whether every value lies in `base..base + 256^T`. Stops
/// early, as [`narrow_copy_to_i32`] does, once a value has not fitted or `fits` has been cleared.
///
/// # Safety
/// `dst` must be valid for `src.len() / W * T` bytes of writes and not overlap `src`.
#[inline(always)]
unsafe fn offset_copy<const W: usize, const T: usize>(src: &[u8], dst: *mut u8, base: i64, fits: &AtomicBool) -> bool {
    let values = src.len() / W;
    let mut at = 0;
    while at < values {
        let end = (at + NARROW_CHECK_VALUES).min(values);
        let mut off_range = 0u64;
        for i in at..end {
            // SAFETY: `i < values` keeps the reads in `src` and the writes in `dst`; neither needs
            // alignment.
            let (v, high) = unsafe {
                let p = src.as_ptr().add(i * W);
                match W {
                    4 => ((p as *const i32).read_unaligned() as i64, 0),
                    8 => ((p as *const i64).read_unaligned(), 0),
                    _ => {
                        let lo = (p as *const u64).read_unaligned();
                        (lo as i64, past_64_bits(lo, (p.add(8) as *const u64).read_unaligned()))
                    }
                }
            };
            let d = v.wrapping_sub(base) as u64;
            // Past the frame: a distance of T bytes or more, a negative one (wrapped), or a
            // difference that overflowed (`v` and `base` of opposite signs far apart).
            off_range |= high | (d >> (8 * T)) | ((v < base) != ((d as i64) < 0)) as u64;
            unsafe {
                match T {
                    1 => dst.add(i).write(d as u8),
                    2 => (dst.add(i * 2) as *mut u16).write_unaligned(d as u16),
                    _ => std::ptr::copy_nonoverlapping((d as u32).to_le_bytes().as_ptr(), dst.add(i * 3), 3),
                }
            }
        }
        if off_range != 0 || !fits.load(Ordering::Relaxed) {
            return false;
        }
        at = end;
    }
    true
}

/// Zero when the 8-byte integer `v` fits in 4 bytes (its high half is the sign extension of its
/// low half); otherwise the bits where it does not.
#[inline(always)]
fn past_32_bits(v: u64) -> u64 {
    v ^ (v as i32 as i64 as u64)
}

/// Writes the low 8 bytes of each 16-byte little-endian integer of `src` to `dst`; whether every
/// value fits in 8 bytes (its high half is the sign extension of its low half). The values are
/// written either way.
///
/// # Safety
/// `dst` must be valid for `src.len() / 2` bytes of writes and not overlap `src`.
#[inline(always)]
unsafe fn narrow_copy(src: &[u8], dst: *mut u8) -> bool {
    let values = src.len() / 16;
    let from = src.as_ptr() as *const [u64; 2];
    let to = dst as *mut u64;
    let mut off_range = 0u64;
    for i in 0..values {
        // SAFETY: `i < values` keeps both the read and the write in bounds; neither needs alignment.
        let [lo, hi] = unsafe { from.add(i).read_unaligned() };
        off_range |= past_64_bits(lo, hi);
        unsafe { to.add(i).write_unaligned(lo) };
    }
    off_range == 0
}

/// Zero when the 16-byte integer of halves `lo`, `hi` fits in 8 bytes (its high half is the
/// sign extension of its low half); otherwise the bits where it does not.
#[inline(always)]
fn past_64_bits(lo: u64, hi: u64) -> u64 {
    hi ^ (((lo as i64) >> 63) as u64)
}

/// The narrowing copies, built twice on x86-64: for the baseline the binary targets (SSE2) and
/// for AVX2, the build a copy runs chosen by what the host has (detected once, then a load per
/// copy task). The loops are the same; the compiler vectorises them 256 bits wide for AVX2,
/// which narrows about twice as many values a second per thread (8 to 4 bytes: 18.5 against
/// 39 GB/s of source on an EPYC core, in cache), so that 16 copy threads wait on memory rather
/// than compute.
mod wide {
    use std::sync::atomic::AtomicBool;

    #[cfg(target_arch = "x86_64")]
    fn avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    /// [`super::narrow_copy_to_i32`], vectorised where the host allows.
    ///
    /// # Safety
    /// As [`super::narrow_copy_to_i32`].
    pub(super) unsafe fn narrow_copy_to_i32<const W: usize>(src: &[u8], dst: *mut u8, fits: &AtomicBool) -> bool {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            return unsafe { x86::narrow_copy_to_i32::<W>(src, dst, fits) };
        }
        unsafe { super::narrow_copy_to_i32::<W>(src, dst, fits) }
    }

    /// [`super::offset_copy`], vectorised where the host allows.
    ///
    /// # Safety
    /// As [`super::offset_copy`].
    pub(super) unsafe fn offset_copy<const W: usize, const T: usize>(
        src: &[u8],
        dst: *mut u8,
        base: i64,
        fits: &AtomicBool,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            return unsafe { x86::offset_copy::<W, T>(src, dst, base, fits) };
        }
        unsafe { super::offset_copy::<W, T>(src, dst, base, fits) }
    }

    /// [`super::narrow_copy`], vectorised where the host allows.
    ///
    /// # Safety
    /// As [`super::narrow_copy`].
    pub(super) unsafe fn narrow_copy(src: &[u8], dst: *mut u8) -> bool {
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            return unsafe { x86::narrow_copy(src, dst) };
        }
        unsafe { super::narrow_copy(src, dst) }
    }

    /// The AVX2 builds. Calling one on a host without AVX2 is undefined: only the functions
    /// above call them, after checking.
    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::sync::atomic::AtomicBool;

        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn narrow_copy_to_i32<const W: usize>(src: &[u8], dst: *mut u8, fits: &AtomicBool) -> bool {
            unsafe { super::super::narrow_copy_to_i32::<W>(src, dst, fits) }
        }

        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn offset_copy<const W: usize, const T: usize>(
            src: &[u8],
            dst: *mut u8,
            base: i64,
            fits: &AtomicBool,
        ) -> bool {
            unsafe { super::super::offset_copy::<W, T>(src, dst, base, fits) }
        }

        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn narrow_copy(src: &[u8], dst: *mut u8) -> bool {
            unsafe { super::super::narrow_copy(src, dst) }
        }
    }
}

/// The copies of [`Stores::Streaming`]: SSE2 streaming stores of 16 bytes (every x86-64 has
/// them) into the 16-byte-aligned body of the destination, ordinary copies for the unaligned
/// ends, and a store fence, so that the bytes are in memory before the DMA that reads them is
/// issued. Elsewhere they are the plain copies.
mod streaming {
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128, _mm_unpacklo_epi64};

    /// Below this many bytes a copy is plain: its lines may well be in the cache anyway.
    #[cfg(target_arch = "x86_64")]
    const MIN_BYTES: usize = 4096;

    /// `src` to `dst`, as [`std::ptr::copy_nonoverlapping`].
    ///
    /// # Safety
    /// `dst` must be valid for `src.len()` bytes of writes and not overlap `src`.
    pub(super) unsafe fn copy(src: &[u8], dst: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        if src.len() >= MIN_BYTES {
            let n = src.len();
            let head = (dst as usize).wrapping_neg() & 15;
            let body = (n - head) & !63;
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
                let (from, to) = (src.as_ptr().add(head) as *const __m128i, dst.add(head) as *mut __m128i);
                let mut i = 0;
                while i < body / 16 {
                    // SAFETY: `i + 3 < body / 16` keeps the reads in `src` and the writes in
                    // `dst`; `to` is 16-byte aligned, the loads need no alignment.
                    let (a, b) = (_mm_loadu_si128(from.add(i)), _mm_loadu_si128(from.add(i + 1)));
                    let (c, d) = (_mm_loadu_si128(from.add(i + 2)), _mm_loadu_si128(from.add(i + 3)));
                    _mm_stream_si128(to.add(i), a);
                    _mm_stream_si128(to.add(i + 1), b);
                    _mm_stream_si128(to.add(i + 2), c);
                    _mm_stream_si128(to.add(i + 3), d);
                    i += 4;
                }
                let done = head + body;
                std::ptr::copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), n - done);
                _mm_sfence();
            }
            return;
        }
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }

    /// [`super::narrow_copy`] with streaming stores.
    ///
    /// # Safety
    /// As [`super::narrow_copy`].
    pub(super) unsafe fn narrow_copy(src: &[u8], dst: *mut u8) -> bool {
        #[cfg(target_arch = "x86_64")]
        if src.len() >= MIN_BYTES && (dst as usize).is_multiple_of(8) {
            // One value plainly if that aligns the destination to 16 bytes, then two values (32
            // source bytes) per streaming store, then the rest plainly.
            let head = if (dst as usize).is_multiple_of(16) { 0 } else { 16 };
            let pairs = (src.len() - head) / 32;
            let body = pairs * 32;
            unsafe {
                let mut fits = super::narrow_copy(&src[..head], dst);
                let from = src.as_ptr().add(head) as *const __m128i;
                let to = dst.add(head / 2) as *mut __m128i;
                let mut off_range = 0u64;
                for i in 0..pairs {
                    // SAFETY: `i < pairs` keeps the reads in `src` and the write in `dst`; `to`
                    // is 16-byte aligned.
                    let (a, b) = (_mm_loadu_si128(from.add(2 * i)), _mm_loadu_si128(from.add(2 * i + 1)));
                    let [alo, ahi]: [u64; 2] = std::mem::transmute(a);
                    let [blo, bhi]: [u64; 2] = std::mem::transmute(b);
                    off_range |= super::past_64_bits(alo, ahi) | super::past_64_bits(blo, bhi);
                    _mm_stream_si128(to.add(i), _mm_unpacklo_epi64(a, b));
                }
                fits &= off_range == 0;
                fits &= super::narrow_copy(&src[head + body..], dst.add((head + body) / 2));
                _mm_sfence();
                return fits;
            }
        }
        unsafe { super::narrow_copy(src, dst) }
    }
}

/// Two pinned staging slots and, per slot, an event marking the end of the DMA out of it.
#[derive(Debug)]
pub struct StagingRing {
    slots: [PinnedBlock; 2],
    done: [CudaEvent; 2],
    pending: [bool; 2],
    /// The slot the next upload fills first: the one not filled last, so that an upload of less
    /// than a slot (most are) fills it while the DMA out of the other one runs.
    next: usize,
}

impl StagingRing {
    pub fn new(pool: &Arc<PinnedPool>, ctx: &Arc<CudaContext>, slot_bytes: usize) -> Result<Self> {
        let event = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).gpu("creating a staging event");
        Ok(StagingRing {
            slots: [pool.alloc(slot_bytes)?, pool.alloc(slot_bytes)?],
            done: [event()?, event()?],
            pending: [false, false],
            next: 0,
        })
    }

    pub fn slot_bytes(&self) -> usize {
        self.slots[0].capacity().min(self.slots[1].capacity())
    }

    /// Waits until the DMA out of `slot` has finished.
    fn wait(&mut self, slot: usize) -> Result<()> {
        if std::mem::take(&mut self.pending[slot]) {
            self.done[slot].synchronize().gpu("waiting for a staging copy")?;
        }
        Ok(())
    }

    /// Waits until the DMA out of every slot has finished.
    pub fn drain(&mut self) -> Result<()> {
        self.wait(0)?;
        self.wait(1)
    }
}

/// One piece of an upload: a host buffer into a device buffer at a byte offset.
#[derive(Clone, Copy)]
pub struct UploadPiece<'a> {
    pub src: &'a Buffer,
    pub dst: &'a DeviceBuffer,
    pub dst_offset: usize,
    /// For integers that may cross the link narrowed (Decimal128 and Int64 values): if this
    /// piece goes through the staging buffers, its values are narrowed while they are staged and
    /// land in the narrowing's buffer at `dst_offset / shrink`, for the caller to widen into
    /// `dst` (see [`Landed`]). A piece copied straight from page-locked memory lands in `dst` as
    /// it is.
    pub narrow: Option<Narrow<'a>>,
}

/// Where and how a piece's values cross the link narrowed (see [`UploadPiece::narrow`]).
#[derive(Clone, Copy)]
pub struct Narrow<'a> {
    /// Holds the narrowed values of the whole device buffer: at least its size / shrink.
    pub into: &'a DeviceBuffer,
    pub how: Narrowing,
}

impl<'a> UploadPiece<'a> {
    /// `src` into `dst` at `dst_offset`, as it is.
    pub fn new(src: &'a Buffer, dst: &'a DeviceBuffer, dst_offset: usize) -> Self {
        UploadPiece { src, dst, dst_offset, narrow: None }
    }
}

/// Where an upload put a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// In `dst`, as it is.
    Wide,
    /// Narrowed, in the piece's `narrow` buffer: every value fitted.
    Narrow,
    /// Narrowed, but some value did not fit: the piece must be uploaded again, wider.
    Overflow,
}

/// Whether narrowed pieces are possible here: the narrowing reads integers as little-endian.
pub const NARROWING: bool = cfg!(target_endian = "little");

/// A copy gathered into a staging slot: host bytes, their place in the slot, the device address
/// they go to and the base of that device buffer; `narrow` for values narrowed on the way.
struct Staged<'a> {
    src: &'a [u8],
    slot_offset: usize,
    dptr: sys::CUdeviceptr,
    buffer: sys::CUdeviceptr,
    narrow: NarrowFlag<'a>,
}

impl Staged<'_> {
    /// Bytes this copy takes in the slot and on the link.
    fn staged_len(&self) -> usize {
        self.src.len() / self.narrow.map_or(1, |(_, how)| how.shrink())
    }
}

/// Copies every piece to the device on `stream`: straight from host memory for buffers in
/// `pool`'s pinned memory or that the `registry` (when given, with the session's limit) has page-locked, through `ring` otherwise,
/// `threads` filling the staging slots. Returns when the host bytes are no longer needed (they
/// are all in pinned memory that stays allocated, or already on the device); the device copies
/// may still be in flight on `stream`. Returns where each piece landed: pieces with a `narrow`
/// buffer that went through the staging slots crossed the link narrowed.
pub fn upload(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    registry: Option<(&HostRegistry, u64)>,
    pool: &PinnedPool,
    pieces: &[UploadPiece<'_>],
    threads: &rayon::ThreadPool,
    stores: Stores,
) -> Result<Vec<Landed>> {
    let slot_bytes = ring.slot_bytes();
    let ctx = stream.context();
    ctx.bind_to_thread().gpu("binding the CUDA context")?;
    let fits: Vec<AtomicBool> = pieces.iter().map(|_| AtomicBool::new(true)).collect();
    let mut landed = vec![Landed::Wide; pieces.len()];
    // Many pieces are looked up in one copy of the pool's chunk list, not under its lock each
    // (a cold cache fill of SSB's lineorder: 29,300 pieces, milliseconds of look-ups).
    let chunks = (pieces.len() > 8).then(|| pool.chunks());
    // The copies gathered in the current slot.
    let mut batch: Vec<Staged<'_>> = Vec::new();
    let mut fill = 0usize;
    let mut slot = ring.next;
    // Pool blocks go back to the pool when their buffer is dropped, which the caller may do as
    // soon as this returns: copies straight from them are waited for. Held blocks (pinned
    // tables) are freed only after the context's work has finished, so copies from them are not.
    let mut direct_from_pool = false;
    let started = std::time::Instant::now();
    let mut times = StageTimes::default();
    // Direct copies from one pinned allocation that lie end to end on both sides (the batches of
    // a pinned table's column) go in one DMA: (host address, device address, length, the device
    // buffer's base, the host allocation).
    let mut direct: Option<(usize, sys::CUdeviceptr, usize, sys::CUdeviceptr, usize)> = None;
    // A copy straight from page-locked host memory (the pool's or registered).
    let copy_direct = |src: usize, dst: sys::CUdeviceptr, len: usize| {
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src as *const _, len, stream.cu_stream()) }
            .result()
            .gpu("host-to-device copy from page-locked memory")
    };
    for (index, piece) in pieces.iter().enumerate() {
        if piece.dst_offset + piece.src.len() > piece.dst.len() {
            return Err(gpu_error(format!(
                "upload of {} bytes at offset {} overruns a device buffer of {} bytes",
                piece.src.len(),
                piece.dst_offset,
                piece.dst.len()
            )));
        }
        if let Some(Narrow { into, how }) = piece.narrow
            && (piece.src.len() % how.from_bytes() != 0
                || how.from_bytes() % how.to_bytes() != 0
                || piece.dst_offset % how.from_bytes() != 0
                || (piece.dst_offset + piece.src.len()) / how.shrink() > into.len())
        {
            return Err(gpu_error(format!(
                "narrowed upload ({how:?}) of {} bytes at offset {} does not fit its values into a buffer of {} bytes",
                piece.src.len(),
                piece.dst_offset,
                into.len()
            )));
        }
        let buffer = piece.dst.raw_ptr(stream);
        let base = buffer + piece.dst_offset as u64;
        if piece.src.is_empty() {
            continue;
        }
        let allocation = match &chunks {
            Some(chunks) => chunks.allocation_of(piece.src),
            None => pool.allocation_of(piece.src),
        };
        direct_from_pool |= allocation.is_some_and(|a| !a.held);
        if let Some(allocation) = allocation.map(|a| a.start) {
            let src = piece.src.as_ptr() as usize;
            let len = piece.src.len();
            direct = match direct {
                Some((s, d, n, b, a)) if a == allocation && b == buffer && s + n == src && d + n as u64 == base => {
                    Some((s, d, n + len, b, a))
                }
                Some((s, d, n, _, _)) => {
                    copy_direct(s, d, n)?;
                    Some((src, base, len, buffer, allocation))
                }
                None => Some((src, base, len, buffer, allocation)),
            };
            continue;
        }
        if registry.is_some_and(|(r, limit)| r.prepare(piece.src, limit)) {
            copy_direct(piece.src.as_ptr() as usize, base, piece.src.len())?;
            continue;
        }
        // Staged: as it is, or narrowed into the narrowing's buffer.
        let (shrink, target, target_buffer, flag) = match piece.narrow.filter(|_| NARROWING) {
            Some(Narrow { into, how }) => {
                landed[index] = Landed::Narrow;
                let into_base = into.raw_ptr(stream);
                (
                    how.shrink(),
                    into_base + (piece.dst_offset / how.shrink()) as u64,
                    into_base,
                    Some((&fits[index], how)),
                )
            }
            None => (1, base, buffer, None),
        };
        // A narrowed copy moves whole values.
        let unit = flag.map_or(1, |(_, how)| how.to_bytes());
        let staged_len = piece.src.len() / shrink;
        let mut off = 0usize;
        while off < staged_len {
            if slot_bytes - fill < unit {
                flush(stream, ring, &mut slot, &mut batch, threads, stores, &mut times)?;
                fill = 0;
            }
            let mut n = (staged_len - off).min(slot_bytes - fill);
            n -= n % unit;
            batch.push(Staged {
                src: &piece.src[off * shrink..(off + n) * shrink],
                slot_offset: fill,
                dptr: target + off as u64,
                buffer: target_buffer,
                narrow: flag,
            });
            fill += n;
            off += n;
            if fill == slot_bytes {
                flush(stream, ring, &mut slot, &mut batch, threads, stores, &mut times)?;
                fill = 0;
            }
        }
    }
    if let Some((s, d, n, _, _)) = direct {
        copy_direct(s, d, n)?;
    }
    if !batch.is_empty() {
        flush(stream, ring, &mut slot, &mut batch, threads, stores, &mut times)?;
    }
    ring.next = slot;
    if times.slots > 0 {
        crate::timeline::mark("upload", || {
            format!(
                "{} pieces, {} staged in {} slots in {:.2} ms: {:.2} ms filling the slots, {:.2} ms waiting for their DMA",
                pieces.len(),
                crate::config::human_bytes(times.staged as u64),
                times.slots,
                started.elapsed().as_secs_f64() * 1e3,
                times.fill.as_secs_f64() * 1e3,
                times.wait.as_secs_f64() * 1e3,
            )
        });
    }
    if direct_from_pool {
        stream.synchronize().gpu("waiting for copies from pinned host memory")?;
    }
    // Every host copy has run: the flags are final.
    for (l, f) in landed.iter_mut().zip(&fits) {
        if *l == Landed::Narrow && !f.load(Ordering::Relaxed) {
            *l = Landed::Overflow;
        }
    }
    Ok(landed)
}

/// Where an upload's staging time went (for the timeline).
#[derive(Debug, Default)]
struct StageTimes {
    /// Slots filled, and the bytes put in them.
    slots: usize,
    staged: usize,
    /// Time the host threads spent filling slots.
    fill: std::time::Duration,
    /// Time spent waiting for a slot's previous DMA to finish.
    wait: std::time::Duration,
}

/// Stages the copies of `batch` into `slot` (once its previous DMA has finished) and starts
/// their DMA; then empties `batch` and moves `slot` to the other slot.
fn flush(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    slot: &mut usize,
    batch: &mut Vec<Staged<'_>>,
    threads: &rayon::ThreadPool,
    stores: Stores,
    times: &mut StageTimes,
) -> Result<()> {
    let t = std::time::Instant::now();
    ring.wait(*slot)?;
    times.wait += t.elapsed();
    let t = std::time::Instant::now();
    let base = ring.slots[*slot].as_mut_ptr();
    let copies: Vec<StageCopy<'_>> = batch
        .iter()
        .map(|c| StageCopy { src: c.src, dst: unsafe { base.add(c.slot_offset) }, narrow: c.narrow })
        .collect();
    // SAFETY: offsets were assigned without overlap inside the slot's capacity, each copy taking
    // its staged length.
    unsafe { parallel_stage(threads, &copies, stores) };
    times.fill += t.elapsed();
    times.slots += 1;
    times.staged += batch.iter().map(Staged::staged_len).sum::<usize>();
    // Pieces that lie end to end both in the slot and in one device buffer (the parts of an
    // assembled buffer) go in one DMA: a copy call costs microseconds, as long as copying a small
    // piece. A copy must not span two allocations, even adjacent ones.
    // A run: (slot offset, device address, length, its buffer's base).
    let mut run: Option<(usize, sys::CUdeviceptr, usize, sys::CUdeviceptr)> = None;
    let dma = |(off, dptr, len, _): (usize, sys::CUdeviceptr, usize, sys::CUdeviceptr)| {
        unsafe { sys::cuMemcpyHtoDAsync_v2(dptr, base.add(off) as *const _, len, stream.cu_stream()) }
            .result()
            .gpu("host-to-device copy")
    };
    // Copies whose values did not all fit go again at a greater width: their bytes are not sent.
    for c in batch.iter().filter(|c| c.narrow.is_none_or(|(fits, _)| fits.load(Ordering::Relaxed))) {
        let len = c.staged_len();
        run = match run {
            Some((o, d, n, b)) if b == c.buffer && o + n == c.slot_offset && d + n as u64 == c.dptr => {
                Some((o, d, n + len, b))
            }
            Some(prev) => {
                dma(prev)?;
                Some((c.slot_offset, c.dptr, len, c.buffer))
            }
            None => Some((c.slot_offset, c.dptr, len, c.buffer)),
        };
    }
    if let Some(last) = run {
        dma(last)?;
    }
    ring.done[*slot].record(stream).gpu("recording a staging event")?;
    ring.pending[*slot] = true;
    batch.clear();
    *slot ^= 1;
    Ok(())
}

/// Copies each device buffer into a new pinned block of `pool` and returns them as Arrow
/// buffers, after `stream` has finished. Falls back to ordinary host memory through the staging
/// ring when pinned memory runs out or the process's pinned bytes would pass the limit.
pub fn download(
    stream: &Arc<CudaStream>,
    (pool, limit): (&Arc<PinnedPool>, u64),
    ring: &mut StagingRing,
    buffers: &[&DeviceBuffer],
    threads: &rayon::ThreadPool,
) -> Result<Vec<Buffer>> {
    stream.context().bind_to_thread().gpu("binding the CUDA context")?;
    let mut blocks: Vec<Option<PinnedBlock>> = Vec::with_capacity(buffers.len());
    for buf in buffers {
        if buf.is_empty() {
            blocks.push(None);
            continue;
        }
        match pool.alloc_within(buf.len(), limit) {
            Ok(mut block) => {
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        block.as_mut_ptr() as *mut _,
                        buf.raw_ptr(stream),
                        buf.len(),
                        stream.cu_stream(),
                    )
                }
                .result()
                .gpu("device-to-host copy")?;
                blocks.push(Some(block));
            }
            Err(e) => {
                log::debug!("{e}; downloading through the staging buffers instead");
                blocks.push(None);
            }
        }
    }
    stream.synchronize().gpu("waiting for device-to-host copies")?;
    let mut out = Vec::with_capacity(buffers.len());
    for (buf, block) in buffers.iter().zip(blocks) {
        out.push(match block {
            Some(b) => b.into_buffer(buf.len())?,
            None if buf.is_empty() => Buffer::from(MutableBuffer::new(0)),
            None => download_staged(stream, ring, buf, threads)?,
        });
    }
    Ok(out)
}

/// Slot-by-slot download into ordinary host memory, for when pinned memory is exhausted.
fn download_staged(
    stream: &Arc<CudaStream>,
    ring: &mut StagingRing,
    buf: &DeviceBuffer,
    threads: &rayon::ThreadPool,
) -> Result<Buffer> {
    ring.drain()?;
    let slot_bytes = ring.slot_bytes();
    let mut host = MutableBuffer::from_len_zeroed(buf.len());
    let src = buf.raw_ptr(stream);
    let mut off = 0usize;
    while off < buf.len() {
        let n = (buf.len() - off).min(slot_bytes);
        let slot = ring.slots[0].as_mut_ptr();
        unsafe { sys::cuMemcpyDtoHAsync_v2(slot as *mut _, src + off as u64, n, stream.cu_stream()) }
            .result()
            .gpu("device-to-host copy")?;
        stream.synchronize().gpu("waiting for a device-to-host copy")?;
        let staged = unsafe { std::slice::from_raw_parts(slot as *const u8, n) };
        let dst = host.as_mut_ptr();
        unsafe { parallel_copy(threads, &[(staged, dst.add(off))], Stores::Plain) };
        off += n;
    }
    Ok(host.into())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::fresh_seed;

    /// Narrowed staging writes each 16-byte integer's low 8 bytes, over several copy tasks and a
    /// tail, with either kind of stores into destinations of any alignment, and clears the flag if
    /// and only if some value does not fit in 8 bytes.
    #[test]
    fn narrowed_staging_keeps_low_halves_and_flags_values_past_64_bits() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("narrowed_staging"));
        let n = COPY_TASK_BYTES / 16 * 3 + 5;
        let mut values: Vec<i128> = (0..n).map(|_| rng.random_range(-(1i128 << 63)..(1i128 << 63))).collect();
        values[..4].copy_from_slice(&[i64::MIN as i128, i64::MAX as i128, -1, 0]);
        for (threads, stores, shift) in [
            (1, Stores::Plain, 0),
            (4, Stores::Plain, 3),
            (1, Stores::Streaming, 0),
            (4, Stores::Streaming, 8),
            (4, Stores::Streaming, 5),
        ] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let stage = |values: &[i128]| {
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                // `shift` bytes past a 16-byte boundary.
                let mut out = vec![0u8; bytes.len() / 2 + 32];
                let start = (out.as_ptr() as usize).wrapping_neg() % 16 + shift;
                let fits = AtomicBool::new(true);
                let copy = StageCopy {
                    src: &bytes,
                    dst: out[start..].as_mut_ptr(),
                    narrow: Some((&fits, Narrowing::I128ToI64)),
                };
                unsafe { parallel_stage(&pool, &[copy], stores) };
                let low: Vec<i64> = out[start..start + bytes.len() / 2]
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                (fits.load(Ordering::Relaxed), low)
            };
            let what = format!("{threads} threads, {stores:?} stores, destination {shift} bytes past 16");
            let (fits, low) = stage(&values);
            assert!(fits, "every value fits in 64 bits ({what})");
            assert_eq!(low, values.iter().map(|&v| v as i64).collect::<Vec<_>>(), "{what}");
            let bads = [i64::MAX as i128 + 1, i64::MIN as i128 - 1, 1i128 << 64, i128::MAX, i128::MIN];
            for (k, bad) in bads.into_iter().enumerate() {
                let mut with_bad = values.clone();
                let at = match k {
                    0 => 0,
                    1 => n - 1,
                    _ => rng.random_range(0..n),
                };
                with_bad[at] = bad;
                let (fits, low) = stage(&with_bad);
                assert!(!fits, "{bad} at {at} of {n} does not fit ({what})");
                assert_eq!(low[at], bad as i64, "{what}");
            }
        }
    }

    /// A frame-of-reference narrowing writes each value's distance above the base in 1 or 2
    /// bytes, from 4-, 8- and 16-byte integers, over several copy tasks and a tail, into
    /// destinations of any alignment; it clears the flag if and only if some value lies outside
    /// the frame (below the base, at or past base + 256^to, a 16-byte value past 64 bits, or a
    /// difference that overflows), wherever that value is.
    #[test]
    fn offset_staging_keeps_distances_and_flags_values_outside_the_frame() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("offset_staging"));
        for (from, to) in [(4usize, 1usize), (4, 2), (4, 3), (8, 1), (8, 2), (8, 3), (16, 1), (16, 2), (16, 3)] {
            let room = 1i64 << (8 * to);
            let base = match from {
                4 => rng.random_range(i32::MIN as i64..i32::MAX as i64 - room),
                _ => rng.random_range(i64::MIN / 2..i64::MAX / 2),
            };
            let how = Narrowing::offset(from, to, base).unwrap();
            let n = COPY_TASK_BYTES / from * 2 + 7;
            let mut values: Vec<i128> = (0..n).map(|_| (base + rng.random_range(0..room)) as i128).collect();
            values[..2].copy_from_slice(&[base as i128, (base + room - 1) as i128]);
            let bytes_of = |values: &[i128]| -> Vec<u8> {
                values
                    .iter()
                    .flat_map(|&v| match from {
                        4 => (v as i32).to_le_bytes().to_vec(),
                        8 => (v as i64).to_le_bytes().to_vec(),
                        _ => v.to_le_bytes().to_vec(),
                    })
                    .collect()
            };
            for (threads, shift) in [(1, 0), (4, 3)] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let stage = |values: &[i128]| {
                    let bytes = bytes_of(values);
                    let mut out = vec![0u8; how.narrowed_len(bytes.len()) + 32];
                    let start = (out.as_ptr() as usize).wrapping_neg() % 16 + shift;
                    let fits = AtomicBool::new(true);
                    let copy = StageCopy { src: &bytes, dst: out[start..].as_mut_ptr(), narrow: Some((&fits, how)) };
                    unsafe { parallel_stage(&pool, &[copy], Stores::Plain) };
                    let got: Vec<i64> = out[start..start + how.narrowed_len(bytes.len())]
                        .chunks_exact(to)
                        .map(|c| c.iter().rev().fold(0i64, |v, &b| v << 8 | b as i64))
                        .collect();
                    (fits.load(Ordering::Relaxed), got)
                };
                let what = format!("{how:?}, {threads} threads, destination {shift} bytes past 16");
                let (fits, got) = stage(&values);
                assert!(fits, "every value lies in the frame ({what})");
                let want: Vec<i64> = values.iter().map(|&v| v as i64 - base).collect();
                assert_eq!(got, want, "{what}");
                let mut bads = vec![(base - 1) as i128, (base + room) as i128];
                if from == 4 {
                    bads.push(i32::MIN as i128);
                } else {
                    bads.extend([i64::MIN as i128, i64::MAX as i128]);
                }
                if from == 16 {
                    bads.extend([(base as i128) + (1i128 << 64), i128::MAX]);
                }
                for bad in bads {
                    // Values below the base's type range cannot be written at that width.
                    if from == 4 && (bad < i32::MIN as i128 || bad > i32::MAX as i128) {
                        continue;
                    }
                    let at = rng.random_range(0..n);
                    let mut with_bad = values.clone();
                    with_bad[at] = bad;
                    let (fits, _) = stage(&with_bad);
                    assert!(!fits, "{bad} at {at} of {n} is outside the frame ({what})");
                }
            }
        }
        // A difference that wraps around to a small distance is still outside the frame.
        let how = Narrowing::offset(8, 1, i64::MAX).unwrap();
        let bytes = i64::MIN.to_le_bytes();
        let (fits, mut out) = (AtomicBool::new(true), [0u8; 1]);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let copy = StageCopy { src: &bytes, dst: out.as_mut_ptr(), narrow: Some((&fits, how)) };
        unsafe { parallel_stage(&pool, &[copy], Stores::Plain) };
        assert!(!fits.load(Ordering::Relaxed), "i64::MIN is far below i64::MAX");
    }

    /// A 4-byte narrowing writes each value's low 4 bytes, from 16- and 8-byte integers, over
    /// several copy tasks and a tail, into destinations of any alignment; it clears the flag if and
    /// only if some value does not fit in 4 bytes, wherever that value is.
    #[test]
    fn narrowed_staging_to_4_bytes_keeps_low_words_and_flags_values_past_32_bits() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("narrowed_staging_to_4_bytes"));
        for how in [Narrowing::I128ToI32, Narrowing::I64ToI32] {
            let n = COPY_TASK_BYTES / how.from_bytes() * 2 + 7;
            let mut values: Vec<i64> = (0..n).map(|_| rng.random_range(i32::MIN as i64..=i32::MAX as i64)).collect();
            values[..4].copy_from_slice(&[i32::MIN as i64, i32::MAX as i64, -1, 0]);
            let bytes_of = |values: &[i128]| -> Vec<u8> {
                match how {
                    Narrowing::I64ToI32 => values.iter().flat_map(|&v| (v as i64).to_le_bytes()).collect(),
                    _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                }
            };
            for (threads, stores, shift) in [(1, Stores::Plain, 0), (4, Stores::Plain, 3), (4, Stores::Streaming, 2)] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let stage = |values: &[i128]| {
                    let bytes = bytes_of(values);
                    let mut out = vec![0u8; bytes.len() / how.shrink() + 32];
                    let start = (out.as_ptr() as usize).wrapping_neg() % 16 + shift;
                    let fits = AtomicBool::new(true);
                    let copy = StageCopy { src: &bytes, dst: out[start..].as_mut_ptr(), narrow: Some((&fits, how)) };
                    unsafe { parallel_stage(&pool, &[copy], stores) };
                    let low: Vec<i32> = out[start..start + bytes.len() / how.shrink()]
                        .chunks_exact(4)
                        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                        .collect();
                    (fits.load(Ordering::Relaxed), low)
                };
                let what = format!("{how:?}, {threads} threads, {stores:?} stores, destination {shift} bytes past 16");
                let wide: Vec<i128> = values.iter().map(|&v| v as i128).collect();
                let (fits, low) = stage(&wide);
                assert!(fits, "every value fits in 32 bits ({what})");
                assert_eq!(low, values.iter().map(|&v| v as i32).collect::<Vec<_>>(), "{what}");
                let mut bads = vec![i32::MAX as i128 + 1, i32::MIN as i128 - 1, i64::MAX as i128, i64::MIN as i128];
                if how == Narrowing::I128ToI32 {
                    // Low 8 bytes that fit, high ones that are not their sign extension.
                    bads.extend([1i128 << 64, (1i128 << 64) + 5, i128::MIN]);
                }
                for (k, bad) in bads.into_iter().enumerate() {
                    let mut with_bad = wide.clone();
                    let at = match k % 3 {
                        0 => 0,
                        1 => n - 1,
                        _ => rng.random_range(0..n),
                    };
                    with_bad[at] = bad;
                    let (fits, _) = stage(&with_bad);
                    assert!(!fits, "{bad} at {at} of {n} does not fit ({what})");
                }
            }
        }
    }

    /// The narrowing copies built for the host's vector width ([`wide`]) write what the baseline
    /// builds write and flag what they flag, for every narrowing, values in and out of range.
    #[test]
    fn vectorised_narrowing_copies_match_the_baseline() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("vectorised_narrowing"));
        let n = 3 * NARROW_CHECK_VALUES + 13;
        for round in 0..8 {
            // Round 0: every value in range; later rounds put one value out of range somewhere.
            let bad_at = (round > 0).then(|| rng.random_range(0..n));
            let base: i64 = rng.random_range(-1000..1000);
            let value = |rng: &mut StdRng, i: usize, room: i64, far: i128| -> i128 {
                if Some(i) == bad_at { far } else { (base + rng.random_range(0..room)) as i128 }
            };
            let check = |from: usize, to: usize, values: Vec<i128>| {
                let bytes: Vec<u8> = values
                    .iter()
                    .flat_map(|&v| match from {
                        4 => (v as i32).to_le_bytes().to_vec(),
                        8 => (v as i64).to_le_bytes().to_vec(),
                        _ => v.to_le_bytes().to_vec(),
                    })
                    .collect();
                let run = |vectorised: bool| {
                    let mut out = vec![0u8; n * if to == 0 { 8 } else { to }];
                    let fits = AtomicBool::new(true);
                    let ok = unsafe {
                        match (to, from, vectorised) {
                            (0, _, false) => narrow_copy(&bytes, out.as_mut_ptr()),
                            (0, _, true) => wide::narrow_copy(&bytes, out.as_mut_ptr()),
                            (4, 16, false) => narrow_copy_to_i32::<16>(&bytes, out.as_mut_ptr(), &fits),
                            (4, 16, true) => wide::narrow_copy_to_i32::<16>(&bytes, out.as_mut_ptr(), &fits),
                            (4, _, false) => narrow_copy_to_i32::<8>(&bytes, out.as_mut_ptr(), &fits),
                            (4, _, true) => wide::narrow_copy_to_i32::<8>(&bytes, out.as_mut_ptr(), &fits),
                            (1, 4, false) => offset_copy::<4, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (1, 4, true) => wide::offset_copy::<4, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (2, 4, false) => offset_copy::<4, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                            (2, 4, true) => wide::offset_copy::<4, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                            (1, 8, false) => offset_copy::<8, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (1, 8, true) => wide::offset_copy::<8, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (2, 8, false) => offset_copy::<8, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                            (2, 8, true) => wide::offset_copy::<8, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, 4, false) => offset_copy::<4, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, 4, true) => wide::offset_copy::<4, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, 8, false) => offset_copy::<8, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, 8, true) => wide::offset_copy::<8, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (1, _, false) => offset_copy::<16, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (1, _, true) => wide::offset_copy::<16, 1>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, _, false) => offset_copy::<16, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (3, _, true) => wide::offset_copy::<16, 3>(&bytes, out.as_mut_ptr(), base, &fits),
                            (_, _, false) => offset_copy::<16, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                            (_, _, true) => wide::offset_copy::<16, 2>(&bytes, out.as_mut_ptr(), base, &fits),
                        }
                    };
                    (ok, out)
                };
                let (plain, vector) = (run(false), run(true));
                let what = format!("{from} bytes to {to} (0: 8), base {base}, bad value at {bad_at:?}");
                assert_eq!(plain.0, vector.0, "{what}: fits");
                assert_eq!(plain.0, bad_at.is_none(), "{what}: flagged");
                if plain.0 {
                    assert_eq!(plain.1, vector.1, "{what}: bytes");
                }
            };
            for (from, to) in [(4usize, 1usize), (4, 2), (4, 3), (8, 1), (8, 2), (8, 3), (16, 1), (16, 2), (16, 3)] {
                let room = 1i64 << (8 * to);
                let far = if from == 4 { (base + room) as i128 } else { i64::MIN as i128 };
                check(from, to, (0..n).map(|i| value(&mut rng, i, room, far)).collect());
            }
            let far32 = i32::MAX as i128 + 1 + rng.random_range(0..1000) as i128;
            check(8, 4, (0..n).map(|i| value(&mut rng, i, 1 << 30, far32)).collect());
            check(16, 4, (0..n).map(|i| value(&mut rng, i, 1 << 30, 1i128 << 64)).collect());
            check(16, 0, (0..n).map(|i| value(&mut rng, i, i64::MAX / 4, 1i128 << 70)).collect());
        }
    }

    /// Either kind of stores copies every byte, into destinations of any alignment, for pieces
    /// shorter than a streamed copy, a few lines long and spread over several tasks.
    #[test]
    fn parallel_copy_copies_every_byte() {
        let mut rng = StdRng::seed_from_u64(fresh_seed("parallel_copy"));
        let sizes = [(5 << 20) + 17, 1000, 4096, 4096 + 63, 70_001];
        let pieces: Vec<Vec<u8>> = sizes.iter().map(|&n| (0..n).map(|_| rng.random()).collect()).collect();
        let total: usize = sizes.iter().sum();
        for (threads, stores, shift) in
            [(1, Stores::Plain, 0), (3, Stores::Plain, 5), (8, Stores::Streaming, 0), (3, Stores::Streaming, 7)]
        {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut out = vec![0u8; total + 32];
            let start = (out.as_ptr() as usize).wrapping_neg() % 16 + shift;
            let base = out[start..].as_mut_ptr();
            let mut off = 0;
            let copies: Vec<(&[u8], *mut u8)> = pieces
                .iter()
                .map(|p| {
                    let c = (p.as_slice(), unsafe { base.add(off) });
                    off += p.len();
                    c
                })
                .collect();
            unsafe { parallel_copy(&pool, &copies, stores) };
            assert_eq!(
                &out[start..start + total],
                &pieces.concat()[..],
                "{threads} threads, {stores:?}, shift {shift}"
            );
        }
    }
}
