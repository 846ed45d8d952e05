//! Group ids: every input row gets the dense id of its group (`0..groups`), and every group a
//! representative row whose key columns become the group's output keys (kernels/groupby.cu).
//!
//! Keys are folded into key words as for joins ([`crate::join::keys`]), with NULL equal to NULL
//! (NULL forms its own group, as in SQL's GROUP BY). Narrow words are bijective, so equal words
//! are equal keys. Wide words are hashes: each row is confirmed against its group's
//! representative, and rows whose hash collided with another key take another round.
//!
//! - Hash: a global open-addressing table of key words (seed 002, Algorithm 1's first step).
//! - Sort: an LSD radix sort of (key word, row id); runs of equal words are groups. Wide keys
//!   whose hashes collide (found by comparing sorted neighbours) are regrouped by the hash path,
//!   which resolves collisions round by round.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::columns::DeviceColumn;
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::join::keys::{KeyEncoding, KeyPlan, KeySide, prepare_keys, verify_pairs};
use crate::primitives::radix::{ValueWidth, radix_sort_pairs};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::{iota, select_where};

/// How group ids are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupIdMethod {
    Hash,
    Sort,
    /// Radix partitions numbered in shared memory (seed 002's partition group-by, with GFTR).
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

/// Groups the first hash table is sized for.
const FIRST_TABLE_GROUPS: u64 = 1 << 15;

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
    let (plan, side) = key_words(gpu, stream, keys, rows, test)?;
    match method {
        // The partition group-by numbers groups inside its own pipeline (super::partition); on
        // its own, its group ids are the hash path's.
        GroupIdMethod::Hash | GroupIdMethod::Partition => hash_group_ids(gpu, stream, &plan, &side, rows),
        GroupIdMethod::Sort => {
            if let Some(ids) = sort_group_ids(gpu, stream, &plan, &side, rows)? {
                return Ok(ids);
            }
            // Colliding hashes: the hash path resolves them.
            hash_group_ids(gpu, stream, &plan, &side, rows)
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
    let mut plan = KeyPlan::for_group_by(keys).map_err(gpu_error)?;
    if test.hash_bits.is_some() {
        plan.encoding = KeyEncoding::Wide;
    }
    let side = prepare_keys(gpu, stream, &plan, keys, rows)?;
    if let Some(bits) = test.hash_bits {
        // gb_mask_k64(u64* keys, u64 n, u64 mask)
        let mask = (1u64 << bits.min(63)) - 1;
        gpu.launch_n(
            stream,
            "groupby",
            "gb_mask_k64",
            rows,
            &[ptr(&side.keys, stream), KArg::U64(rows), KArg::U64(mask)],
        )?;
    }
    Ok((plan, side))
}

pub(crate) fn hash_group_ids(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: &KeyPlan,
    side: &KeySide,
    rows: u64,
) -> Result<GroupIds> {
    let width = plan.encoding.width();
    let wide = plan.encoding == KeyEncoding::Wide;
    let group_of_row = gpu.alloc(stream, rows as usize * 4, "group ids")?;
    let row_slot = gpu.alloc(stream, rows as usize * 4, "group-by table slots")?;
    // Every round's representatives, in group order (at most one group per row).
    let reps = gpu.alloc(stream, rows as usize * 4, "group representatives")?;
    let all_rows = if wide { Some(iota(gpu, stream, rows)?) } else { None };
    let mut active: Option<DeviceBuffer> = None;
    let mut n = rows;
    let mut groups = 0u64;
    let mut rounds = 0u32;
    loop {
        rounds += 1;
        if rounds as u64 > rows + 1 {
            return Err(gpu_error("the GPU group-by's collision rounds did not converge"));
        }
        // A table for at most FIRST_TABLE_GROUPS groups first (a few MiB, cheap to clear); more
        // groups overflow it and the insert is redone with a table of twice the rows.
        let full = (2 * n).max(1024).next_power_of_two();
        let mut slots = full.min(2 * FIRST_TABLE_GROUPS);
        let (slot_keys, slot_row) = loop {
            let mask = slots - 1;
            let slot_keys =
                gpu.alloc_filled(stream, slots as usize * width.bytes(), 0xff, "the group-by hash table")?;
            let slot_row = gpu.alloc_filled(stream, (slots as usize + 1) * 4, 0xff, "the group-by hash table")?;
            let counters = gpu.alloc_filled(stream, 8, 0, "the group-by hash table")?;
            let max_fill = if slots < full { (slots / 2) as u32 } else { u32::MAX };
            // gb_insert_kX(keys, active, n, slot_keys, mask, slot_row, row_slot, filled, max_fill, overflow)
            gpu.launch_n(
                stream,
                "groupby",
                &format!("gb_insert_{}", width.tag()),
                n,
                &[
                    ptr(&side.keys, stream),
                    opt_ptr(active.as_ref(), stream),
                    KArg::U64(n),
                    ptr(&slot_keys, stream),
                    KArg::U64(mask),
                    ptr(&slot_row, stream),
                    ptr(&row_slot, stream),
                    ptr(&counters, stream),
                    KArg::U32(max_fill),
                    KArg::U64(counters.raw_ptr(stream) + 4),
                ],
            )?;
            let overflow = gpu.read::<u32>(stream, &counters, 1, 1)?[0] != 0;
            if !overflow {
                break (slot_keys, slot_row);
            }
            if slots >= full {
                return Err(gpu_error(format!("the group-by hash table of {slots} slots overflowed with {n} rows")));
            }
            slots = full;
        };
        drop(slot_keys);
        let flags = gpu.alloc(stream, slots as usize + 1, "the group-by hash table")?;
        // gb_occupied(const u32* slot_row, u64 n, u8* flags)
        gpu.launch_n(
            stream,
            "groupby",
            "gb_occupied",
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
            "groupby",
            "gb_dense",
            new_groups,
            &[
                ptr(&occupied, stream),
                KArg::U64(new_groups),
                ptr(&slot_row, stream),
                ptr(&dense, stream),
                KArg::U64(reps.raw_ptr(stream) + 4 * groups),
            ],
        )?;
        let rep_of = if wide { Some(gpu.alloc(stream, n as usize * 4, "group representatives")?) } else { None };
        // gb_assign(active, n, row_slot, dense, offset, rep_all, group_of_row, rep_of)
        gpu.launch_n(
            stream,
            "groupby",
            "gb_assign",
            n,
            &[
                opt_ptr(active.as_ref(), stream),
                KArg::U64(n),
                ptr(&row_slot, stream),
                ptr(&dense, stream),
                KArg::U32(groups as u32),
                ptr(&reps, stream),
                ptr(&group_of_row, stream),
                opt_ptr(rep_of.as_ref(), stream),
            ],
        )?;
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
        "groupby",
        &format!("gb_run_starts_{}", width.tag()),
        rows,
        &[ptr(&sorted, stream), KArg::U64(rows), ptr(&flags, stream)],
    )?;
    drop(sorted);
    if plan.encoding == KeyEncoding::Wide {
        let prev = gpu.alloc(stream, rows as usize * 4, "group-by neighbours")?;
        // gb_adjacent(const u32* rows, u64 n, u32* prev)
        gpu.launch_n(
            stream,
            "groupby",
            "gb_adjacent",
            rows,
            &[ptr(&sorted_rows, stream), KArg::U64(rows), ptr(&prev, stream)],
        )?;
        let eq = verify_pairs(gpu, stream, plan, side, side, &prev, &sorted_rows, rows)?;
        let collided = gpu.alloc_filled(stream, 4, 0, "group-by collision flag")?;
        // gb_collisions(const u32* flags, const u8* eq, u64 n, u32* collided)
        gpu.launch_n(
            stream,
            "groupby",
            "gb_collisions",
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
        "groupby",
        "gb_scatter_runs",
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
