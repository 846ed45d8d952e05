//! Group ids: every input row gets the dense id of its group (`0..groups`), and every group a
//! representative row whose key columns become the group's output keys (kernels/groupby.cu).
//!
//! Keys are folded into key words as for joins ([`crate::primitives::keys`]), with NULL equal to NULL
//! (NULL forms its own group, as in SQL's GROUP BY). Narrow words are bijective, so equal words
//! are equal keys. Wide words are hashes: each row is confirmed against its group's
//! representative, and rows whose hash collided with another key take another round.
//!
//! - Hash: a global open-addressing table of key words (Wu et al. 2025, Algorithm 1's first step).
//!   With few groups (up to 4096) one pass gives every row its dense id,
//!   through a per-block shared-memory cache in front of the table; a single narrow key column
//!   is read directly, without its key words. More groups take the general rounds: insert,
//!   number the occupied slots, assign.
//! - Sort: an LSD radix sort of (key word, row id); runs of equal words are groups. Wide keys
//!   whose hashes collide (found by comparing sorted neighbours) are regrouped by the hash path,
//!   which resolves collisions round by round.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};

use crate::columns::DeviceColumn;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::keys::{KeyEncoding, KeyPlan, KeySide, prepare_keys, single_narrow, verify_pairs};
use crate::primitives::radix::{KeyWidth, ValueWidth, radix_sort_pairs};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::{iota, select_where};

/// How group ids are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GroupIdMethod {
    Hash,
    Sort,
    /// Radix partitions numbered in shared memory (Wu et al.'s partition group-by, with GFTR).
    Partition,
}

impl GroupIdMethod {
    /// The name EXPLAIN shows.
    pub fn name(self) -> &'static str {
        match self {
            GroupIdMethod::Hash => "hash",
            GroupIdMethod::Sort => "sort",
            GroupIdMethod::Partition => "partition",
        }
    }
}

impl std::fmt::Display for GroupIdMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Group ids of the rows of a batch.
#[derive(Debug)]
pub struct GroupIds {
    /// Group of each row (u32); `None` when there are no key columns (one group).
    pub group_of_row: Option<DeviceBuffer>,
    /// Representative row of each group (u32); `None` with no key columns.
    pub reps: Option<DeviceBuffer>,
    pub groups: u64,
    /// Rounds the hash path took (1 without hash collisions).
    pub rounds: u32,
}

/// Blocks per SM of the one-pass group-id kernel (1024 threads each: the SM's 2048 threads).
const ONE_PASS_BLOCKS_PER_SM: u64 = 2;

/// The most groups the one-pass group ids take (kernels/groupby.cu GB_CACHE_FILL: a block's
/// cache holds half of its 8192 slots); more go to the general rounds.
const ONE_PASS_GROUPS: u64 = 4096;

/// Groups the first hash table is sized for.
const FIRST_TABLE_GROUPS: u64 = 1 << 15;

/// Group counters of a bounded hash table (kernels/groupby.cu FILL_SHARDS).
const FILL_SHARDS: usize = 32;

/// Slots of the second, still bounded, hash table (2^19 groups; 4 or 8 MiB of key words).
const LARGER_TABLE_SLOTS: u64 = 1 << 20;

/// Slots of the first (bounded) hash table for `rows` rows, and of the table of twice the rows,
/// which cannot overflow.
fn table_slots(rows: u64) -> (u64, u64) {
    let full = (2 * rows).max(1024).next_power_of_two();
    (full.min(2 * FIRST_TABLE_GROUPS), full)
}

/// The table tried after one of `slots` slots overflowed: the larger bounded one, then `full`.
fn next_table_slots(slots: u64, full: u64) -> u64 {
    if slots < LARGER_TABLE_SLOTS { LARGER_TABLE_SLOTS.min(full) } else { full }
}

/// Groups a bounded table of `slots` slots holds before it reports an overflow.
fn bounded_capacity(slots: u64) -> u64 {
    slots * 5 / 8
}

/// The hash tables the general path inserts every row into when the input has `groups` groups
/// (slots of each attempt, in order): the steps of [`table_round`] until a table holds the
/// groups. Empty when the one-pass kernel takes the groups. The cost model prices each attempt.
pub(crate) fn hash_table_attempts(rows: u64, groups: u64) -> Vec<u64> {
    if groups <= ONE_PASS_GROUPS {
        return Vec::new();
    }
    let (mut slots, full) = table_slots(rows);
    let mut attempts = vec![slots];
    while slots < full && groups > bounded_capacity(slots) {
        slots = next_table_slots(slots, full);
        attempts.push(slots);
    }
    attempts
}

/// Test hook: cut wide hash words to this many bits, so that collisions happen.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollisionTest {
    pub hash_bits: Option<u32>,
}

/// Group ids of `rows` rows keyed by `keys` (no columns: one group, even over no rows).
pub fn group_ids(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &[Arc<DeviceColumn>],
    rows: u64,
    method: GroupIdMethod,
    test: CollisionTest,
) -> Result<GroupIds> {
    if keys.is_empty() {
        return Ok(GroupIds { group_of_row: None, reps: None, groups: 1, rounds: 0 });
    }
    if rows >= u32::MAX as u64 {
        return Err(gpu_error(format!("a GPU group-by over {rows} rows in one batch: at most 2^32 - 2")));
    }
    if rows == 0 {
        let empty = || gpu.alloc(stream, 0, "group ids");
        return Ok(GroupIds { group_of_row: Some(empty()?), reps: Some(empty()?), groups: 0, rounds: 0 });
    }
    // One narrow key column and few groups: group ids straight from the column, without its
    // key words. When that finds too many groups, the hash path below does not try again.
    let mut one_pass = true;
    if matches!(method, GroupIdMethod::Hash | GroupIdMethod::Partition) && test.hash_bits.is_none() {
        let plan = KeyPlan::for_group_by(keys)?;
        if let (Some((bytes, null_mode)), [col]) = (single_narrow(&plan, keys), keys) {
            let group_of_row = gpu.alloc(stream, rows as usize * 4, "group ids")?;
            let reps = gpu.alloc(stream, rows as usize * 4, "group representatives")?;
            let out = GroupIdsOut { group_of_row: &group_of_row, reps: &reps, offset: 0 };
            let source = WordSource::Column { col, bytes, null_mode };
            if let Some((groups, _)) =
                one_pass_group_ids(gpu, stream, source, plan.encoding.width(), false, rows, &out)?
            {
                return Ok(GroupIds { group_of_row: Some(group_of_row), reps: Some(reps), groups, rounds: 1 });
            }
            one_pass = false;
        }
    }
    let (plan, side) = key_words(gpu, stream, keys, rows, test)?;
    match method {
        // The partition group-by numbers groups inside its own pipeline (super::partition); on
        // its own, its group ids are the hash path's.
        GroupIdMethod::Hash | GroupIdMethod::Partition => hash_group_ids(gpu, stream, &plan, &side, rows, one_pass),
        GroupIdMethod::Sort => {
            if let Some(ids) = sort_group_ids(gpu, stream, &plan, &side, rows)? {
                return Ok(ids);
            }
            // Colliding hashes: the hash path resolves them.
            hash_group_ids(gpu, stream, &plan, &side, rows, true)
        }
    }
}

/// The key words of `rows` rows (NULL equal to NULL), wide words cut by the collision test hook.
pub(crate) fn key_words(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &[Arc<DeviceColumn>],
    rows: u64,
    test: CollisionTest,
) -> Result<(KeyPlan, KeySide)> {
    let mut plan = KeyPlan::for_group_by(keys)?;
    if test.hash_bits.is_some() {
        plan.encoding = KeyEncoding::Wide;
    }
    let side = prepare_keys(gpu, stream, &plan, keys, rows)?;
    if let Some(bits) = test.hash_bits {
        // gb_mask_k64(u64* keys, u64 n, u64 mask)
        let mask = (1u64 << bits.min(63)) - 1;
        gpu.launch_n(stream, kernel::GB_MASK_K64, rows, &[ptr(&side.keys, stream), KArg::U64(rows), KArg::U64(mask)])?;
    }
    Ok((plan, side))
}

/// Hash group ids; `one_pass`: try the one-pass kernel first (the caller has not already found
/// too many groups for it).
pub(crate) fn hash_group_ids(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: &KeyPlan,
    side: &KeySide,
    rows: u64,
    one_pass: bool,
) -> Result<GroupIds> {
    let width = plan.encoding.width();
    let wide = plan.encoding == KeyEncoding::Wide;
    let group_of_row = gpu.alloc(stream, rows as usize * 4, "group ids")?;
    // Every round's representatives, in group order (at most one group per row).
    let reps = gpu.alloc(stream, rows as usize * 4, "group representatives")?;
    let all_rows = if wide { Some(iota(gpu, stream, rows)?) } else { None };
    let mut row_slot = None;
    let mut active: Option<DeviceBuffer> = None;
    let mut n = rows;
    let mut groups = 0u64;
    let mut rounds = 0u32;
    loop {
        rounds += 1;
        if rounds as u64 > rows + 1 {
            return Err(gpu_error("the GPU group-by's collision rounds did not converge"));
        }
        let out = GroupIdsOut { group_of_row: &group_of_row, reps: &reps, offset: groups };
        let found = match active {
            None if one_pass => one_pass_group_ids(gpu, stream, WordSource::Words(&side.keys), width, wide, n, &out)?,
            _ => None,
        };
        let (new_groups, rep_of) = match found {
            Some(found) => found,
            None => {
                let row_slot = match &mut row_slot {
                    Some(b) => b,
                    slot => slot.insert(gpu.alloc(stream, rows as usize * 4, "group-by table slots")?),
                };
                table_round(gpu, stream, &side.keys, width, wide, active.as_ref(), n, row_slot, &out)?
            }
        };
        groups += new_groups;
        let (Some(rep_of), Some(all)) = (rep_of, all_rows.as_ref()) else { break };
        // Confirm each row against its representative; the rows that differ go round again.
        let these = active.as_ref().unwrap_or(all);
        let eq = verify_pairs(gpu, stream, plan, side, side, &rep_of, these, n)?;
        let (differ, m) = select_where(gpu, stream, &eq, n, 0)?;
        if m == 0 {
            break;
        }
        let next = crate::primitives::gather(gpu, stream, these, &differ, m as u64, 4)?;
        active = Some(next);
        n = m as u64;
    }
    Ok(GroupIds { group_of_row: Some(group_of_row), reps: Some(reps), groups, rounds })
}

/// Where a round's group ids and representatives go: group `g` of the round is
/// `offset + g` overall.
struct GroupIdsOut<'a> {
    group_of_row: &'a DeviceBuffer,
    reps: &'a DeviceBuffer,
    offset: u64,
}

/// Where the one-pass kernel reads a row's key word.
enum WordSource<'a> {
    Words(&'a DeviceBuffer),
    /// One narrow key column (see [`single_narrow`]), its words computed on the fly.
    Column {
        col: &'a DeviceColumn,
        /// Its values' width in bytes (1, 2, 4 or 8).
        bytes: usize,
        null_mode: u32,
    },
}

/// Group ids of all `n` rows in one pass when they have few groups (`gb_small_*`): the new
/// groups and, for wide keys, each row's representative (for the collision check); `None` when
/// the bounded table filled, and the general round must run.
fn one_pass_group_ids(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    source: WordSource<'_>,
    width: KeyWidth,
    wide: bool,
    n: u64,
    out: &GroupIdsOut<'_>,
) -> Result<Option<(u64, Option<DeviceBuffer>)>> {
    if out.offset != 0 {
        return Err(gpu_error("the one-pass group ids run only as the first round"));
    }
    // Each block's cache (kernels/groupby.cu GB_CACHE): 8192 entries of 8 bytes, or 12 for
    // 64-bit words.
    let smem = 8192 * if width == KeyWidth::U32 { 8 } else { 12 };
    if (gpu.info().shared_memory_per_block_optin.max(0) as usize) < smem + 1024 {
        return Ok(None);
    }
    let kernel = match source {
        WordSource::Words(_) => width.kernel(kernel::GB_SMALL),
        // A 64-bit column never packs into a 32-bit word.
        WordSource::Column { bytes: 8, .. } if width == KeyWidth::U32 => return Ok(None),
        WordSource::Column { bytes: 8, .. } => kernel::GB_SMALL_W8_K64,
        WordSource::Column { bytes: 1, .. } => width.kernel(kernel::GB_SMALL_W1),
        WordSource::Column { bytes: 2, .. } => width.kernel(kernel::GB_SMALL_W2),
        WordSource::Column { .. } => width.kernel(kernel::GB_SMALL_W4),
    };
    let slots = (2 * n).max(1024).next_power_of_two().min(4 * ONE_PASS_GROUPS);
    let slot_keys = gpu.alloc_filled(stream, slots as usize * width.bytes(), 0xff, "the group-by hash table")?;
    let slot_gid = gpu.alloc_filled(stream, (slots as usize + 1) * 4, 0xff, "the group-by hash table")?;
    let counters = gpu.alloc_filled(stream, 12, 0, "the group-by hash table")?;
    let rep_of = if wide { Some(gpu.alloc(stream, n as usize * 4, "group representatives")?) } else { None };
    let mut args = match source {
        WordSource::Words(keys) => vec![ptr(keys, stream)],
        WordSource::Column { col, null_mode, .. } => vec![
            ptr(crate::primitives::keys::buffer(col, 0)?, stream),
            opt_ptr(col.validity.as_ref(), stream),
            KArg::U32(null_mode),
        ],
    };
    // gb_small_*(<source>, n, slot_keys, mask, slot_gid, reps, group_of_row, rep_of, counters, max_fill)
    args.extend([
        KArg::U64(n),
        ptr(&slot_keys, stream),
        KArg::U64(slots - 1),
        ptr(&slot_gid, stream),
        KArg::U64(out.reps.raw_ptr(stream) + 4 * out.offset),
        ptr(out.group_of_row, stream),
        opt_ptr(rep_of.as_ref(), stream),
        ptr(&counters, stream),
        KArg::U32(ONE_PASS_GROUPS as u32),
    ]);
    // A resident grid (kernels/groupby.cu GB_THREADS): each block's cache warms once.
    let blocks = ((gpu.info().sm_count.max(1) as u64) * ONE_PASS_BLOCKS_PER_SM).min(n.div_ceil(1024)) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: smem as u32 };
    gpu.launch(stream, kernel, cfg, &args)?;
    let c = gpu.read::<u32>(stream, &counters, 0, 2)?;
    Ok((c[1] == 0).then_some((c[0] as u64, rep_of)))
}

/// One round of the general path over the `n` rows `active` (all rows when `None`): insert into
/// a table (a bounded one first, grown when it overflows), number the occupied slots, and give
/// every row its group. Returns the round's new groups and, for wide keys, each row's
/// representative.
#[allow(clippy::too_many_arguments)]
fn table_round(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &DeviceBuffer,
    width: KeyWidth,
    wide: bool,
    active: Option<&DeviceBuffer>,
    n: u64,
    row_slot: &DeviceBuffer,
    out: &GroupIdsOut<'_>,
) -> Result<(u64, Option<DeviceBuffer>)> {
    // A table for at most FIRST_TABLE_GROUPS groups first (a few MiB, cheap to clear); more
    // groups overflow it and the insert is redone with a table of LARGER_TABLE_SLOTS (which stays
    // in L2; one of twice the rows is mostly empty and its probes miss the caches), then with one
    // of twice the rows, which cannot overflow. (Bounded tables of 2^24 slots cost more in failed
    // attempts at 2^26 groups than they saved at 2^22: H100, 2026-11-23.)
    let (mut slots, full) = table_slots(n);
    let slot_row = loop {
        let mask = slots - 1;
        let slot_keys = gpu.alloc_filled(stream, slots as usize * width.bytes(), 0xff, "the group-by hash table")?;
        let slot_row = gpu.alloc_filled(stream, (slots as usize + 1) * 4, 0xff, "the group-by hash table")?;
        // The overflow flag, then FILL_SHARDS group counters 128 bytes apart (kernels/groupby.cu),
        // each allowing its share of 5/8 of the slots (room for the shards' uneven counts when the
        // groups are half the slots).
        let counters = gpu.alloc_filled(stream, 128 * (FILL_SHARDS + 1), 0, "the group-by hash table")?;
        let max_fill = if slots < full { (bounded_capacity(slots) / FILL_SHARDS as u64) as u32 } else { u32::MAX };
        // gb_insert_kX(keys, active, n, slot_keys, mask, slot_row, row_slot, filled, max_fill, overflow)
        gpu.launch_n(
            stream,
            width.kernel(kernel::GB_INSERT),
            n,
            &[
                ptr(keys, stream),
                opt_ptr(active, stream),
                KArg::U64(n),
                ptr(&slot_keys, stream),
                KArg::U64(mask),
                ptr(&slot_row, stream),
                ptr(row_slot, stream),
                KArg::U64(counters.raw_ptr(stream) + 128),
                KArg::U32(max_fill),
                ptr(&counters, stream),
            ],
        )?;
        let overflow = gpu.read::<u32>(stream, &counters, 0, 1)?[0] != 0;
        if !overflow {
            break slot_row;
        }
        if slots >= full {
            return Err(gpu_error(format!("the group-by hash table of {slots} slots overflowed with {n} rows")));
        }
        slots = next_table_slots(slots, full);
    };
    let flags = gpu.alloc(stream, slots as usize + 1, "the group-by hash table")?;
    // gb_occupied(const u32* slot_row, u64 n, u8* flags)
    gpu.launch_n(
        stream,
        kernel::GB_OCCUPIED,
        slots + 1,
        &[ptr(&slot_row, stream), KArg::U64(slots + 1), ptr(&flags, stream)],
    )?;
    let (occupied, new_groups) = select_where(gpu, stream, &flags, slots + 1, 1)?;
    drop(flags);
    let new_groups = new_groups as u64;
    let dense = gpu.alloc(stream, (slots as usize + 1) * 4, "the group-by hash table")?;
    // gb_dense(const u32* slots, u64 groups, const u32* slot_row, u32* dense, u32* rep)
    gpu.launch_n(
        stream,
        kernel::GB_DENSE,
        new_groups,
        &[
            ptr(&occupied, stream),
            KArg::U64(new_groups),
            ptr(&slot_row, stream),
            ptr(&dense, stream),
            KArg::U64(out.reps.raw_ptr(stream) + 4 * out.offset),
        ],
    )?;
    let rep_of = if wide { Some(gpu.alloc(stream, n as usize * 4, "group representatives")?) } else { None };
    // gb_assign(active, n, row_slot, dense, offset, rep_all, group_of_row, rep_of)
    gpu.launch_n(
        stream,
        kernel::GB_ASSIGN,
        n,
        &[
            opt_ptr(active, stream),
            KArg::U64(n),
            ptr(row_slot, stream),
            ptr(&dense, stream),
            KArg::U32(out.offset as u32),
            ptr(out.reps, stream),
            ptr(out.group_of_row, stream),
            opt_ptr(rep_of.as_ref(), stream),
        ],
    )?;
    Ok((new_groups, rep_of))
}

/// Sort group ids, or `None` when wide keys' hashes collide (sorted neighbours with equal words
/// and different keys).
fn sort_group_ids(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: &KeyPlan,
    side: &KeySide,
    rows: u64,
) -> Result<Option<GroupIds>> {
    let width = plan.encoding.width();
    let keys = gpu.clone_buffer(stream, &side.keys, "group-by sort keys")?;
    let ids = iota(gpu, stream, rows)?;
    let (sorted, sorted_rows) =
        radix_sort_pairs(gpu, stream, keys, ids, rows, width, ValueWidth::U32, 0, width.bits())?;
    let flags = gpu.alloc(stream, rows as usize * 4, "group-by run starts")?;
    // gb_run_starts_kX(const K* keys, u64 n, u32* flags)
    gpu.launch_n(
        stream,
        width.kernel(kernel::GB_RUN_STARTS),
        rows,
        &[ptr(&sorted, stream), KArg::U64(rows), ptr(&flags, stream)],
    )?;
    drop(sorted);
    if plan.encoding == KeyEncoding::Wide {
        let prev = gpu.alloc(stream, rows as usize * 4, "group-by neighbours")?;
        // gb_adjacent(const u32* rows, u64 n, u32* prev)
        gpu.launch_n(
            stream,
            kernel::GB_ADJACENT,
            rows,
            &[ptr(&sorted_rows, stream), KArg::U64(rows), ptr(&prev, stream)],
        )?;
        let eq = verify_pairs(gpu, stream, plan, side, side, &prev, &sorted_rows, rows)?;
        let collided = gpu.alloc_filled(stream, 4, 0, "group-by collision flag")?;
        // gb_collisions(const u32* flags, const u8* eq, u64 n, u32* collided)
        gpu.launch_n(
            stream,
            kernel::GB_COLLISIONS,
            rows,
            &[ptr(&flags, stream), ptr(&eq, stream), KArg::U64(rows), ptr(&collided, stream)],
        )?;
        if gpu.read::<u32>(stream, &collided, 0, 1)?[0] != 0 {
            return Ok(None);
        }
    }
    let (before, total) = exclusive_scan(gpu, stream, &flags, rows, ScanKind::U32, true)?;
    let total = total.ok_or_else(|| gpu_error("scan returned no total"))?;
    let groups = gpu.read::<u32>(stream, &total, 0, 1)?[0] as u64;
    let group_of_row = gpu.alloc(stream, rows as usize * 4, "group ids")?;
    let reps = gpu.alloc(stream, groups as usize * 4, "group representatives")?;
    // gb_scatter_runs(rows, starts_before, flags, n, group_of_row, rep)
    gpu.launch_n(
        stream,
        kernel::GB_SCATTER_RUNS,
        rows,
        &[
            ptr(&sorted_rows, stream),
            ptr(&before, stream),
            ptr(&flags, stream),
            KArg::U64(rows),
            ptr(&group_of_row, stream),
            ptr(&reps, stream),
        ],
    )?;
    Ok(Some(GroupIds { group_of_row: Some(group_of_row), reps: Some(reps), groups, rounds: 1 }))
}
