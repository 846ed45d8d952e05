//! Partition group-by with GFTR (Wu et al. 2025, §4.2): the rows' mixed key words are radix
//! partitioned (the join's stable radix passes, [`radix_sort_multi`]) so that every key's rows
//! share one partition of a few hundred rows, and the aggregated columns travel through the same
//! passes (GFTR); one thread block per partition numbers the partition's keys in a shared-memory
//! table (kernels/groupby.cu, `gp_ids`). Partition `p`'s groups take the ids after those of the
//! partitions before it, so the rows' group ids are clustered by position and every reduction
//! accumulates a chunk's range of groups in shared memory ([`Accumulation::Clustered`]), with no
//! global hash table and no random global atomics.
//!
//! A partition whose keys fill its table (only when one batch holds more than
//! `2^MAX_BITS * TARGET_ROWS` rows), wide keys whose hashes collide, or a GPU without the shared
//! memory for the tables return `None`, and the caller groups the batch with the hash path.
//!
//! One block numbers a whole partition, so few distinct keys over many rows (a few huge
//! partitions) would leave most of the GPU idle: a batch whose largest partition holds more than
//! [`LARGEST_ROWS`] rows goes to the hash path after the partitioning (and the cost model keeps
//! few groups on the hash path to begin with).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaStream, LaunchConfig};

use super::groups::key_words;
use super::reduce::Accumulation;
use super::{GroupByOptions, GroupByOutput, GroupByTimes, GroupIdMethod, Reduction, aggregate_groups};
use crate::columns::DeviceColumn;
use crate::device::kernel;
use crate::device::{Gpu, KArg, ptr};
use crate::error::{CudaResultExt, Result, gpu_error};
use crate::primitives::keys::{KeyEncoding, verify_pairs};
use crate::primitives::materialize::{GatherSpec, gather_columns};
use crate::primitives::radix::boundaries;
use crate::primitives::radix::{KeyWidth, SortValues, ValueWidth, radix_sort_multi};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::select_where;

/// Slots of a partition's shared-memory table (`GP_SLOTS`).
const SLOTS: u64 = 8192;
/// Rows a partition is sized for: a quarter of its table's slots, so that even all-distinct
/// keys fill it no more than half (2^27 rows: 16 bits, two radix passes).
pub const TARGET_ROWS: u64 = SLOTS / 4;
/// Most partition bits (three radix passes).
pub const MAX_BITS: u32 = 20;
/// A partition of more rows than this (a few keys over many rows) would leave the GPU to a few
/// blocks: such a batch goes to the hash path.
pub const LARGEST_ROWS: u64 = 64 * TARGET_ROWS;
/// Threads of the numbering kernel (`GP_THREADS`).
const THREADS: u32 = 512;

/// Partition bits for `rows` rows: partitions of about [`TARGET_ROWS`] rows.
pub fn partition_bits(rows: u64) -> u32 {
    if rows <= TARGET_ROWS {
        return 0;
    }
    let parts = rows.div_ceil(TARGET_ROWS);
    (64 - (parts - 1).leading_zeros()).min(MAX_BITS)
}

/// Dynamic shared memory of the numbering kernel: the table's keys and values, and one more value.
fn table_bytes(width: KeyWidth) -> u64 {
    SLOTS * (width.bytes() as u64 + 4) + 4
}

/// Whether column `col` can travel through the radix passes (4- or 8-byte values, no nulls).
fn carried_width(col: &DeviceColumn) -> Option<ValueWidth> {
    if col.validity.is_some() || col.buffers.is_empty() {
        return None;
    }
    match col.data_type.primitive_width() {
        Some(4) => Some(ValueWidth::U32),
        Some(8) => Some(ValueWidth::U64),
        _ => None,
    }
}

/// Groups `rows` rows (at least one, with key columns) by partitioning; `None` when the batch
/// must be grouped another way (see the module's note).
#[allow(clippy::too_many_arguments)]
pub fn group_by(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &[Arc<DeviceColumn>],
    columns: &[Arc<DeviceColumn>],
    reductions: &[Reduction],
    rows: u64,
    opts: &GroupByOptions,
    times: &mut GroupByTimes,
) -> Result<Option<GroupByOutput>> {
    let sync = || stream.synchronize().gpu("waiting for the GPU partition group-by");
    let t = Instant::now();
    let (plan, side) = key_words(gpu, stream, keys, rows, opts.test)?;
    if side.items != rows || side.item_rows.is_some() {
        return Err(gpu_error("group-by key words must cover every row"));
    }
    let width = plan.encoding.width();
    let smem = table_bytes(width);
    if (gpu.info().shared_memory_per_block_optin.max(0) as u64) < smem + 1024 {
        // A GPU without the shared memory for the tables: the hash path groups the batch.
        return Ok(None);
    }
    let bits = partition_bits(rows);
    let parts = 1u64 << bits;

    // Transform: keys, row ids and the carried columns through the same stable radix passes.
    let used: Vec<usize> = {
        let mut u: Vec<usize> = reductions.iter().flat_map(|r| r.input.into_iter().chain(r.filter)).collect();
        u.sort_unstable();
        u.dedup();
        u
    };
    let col = |i: usize| columns.get(i).ok_or_else(|| gpu_error(format!("column {i} of {}", columns.len())));
    let mut carried = Vec::new();
    let mut values = vec![SortValues::RowIds];
    for &i in &used {
        let c = col(i)?;
        if let Some(w) = carried_width(c) {
            values.push(SortValues::Array(&c.buffers[0], w));
            carried.push(i);
        }
    }
    let (pkeys, mut moved) = radix_sort_multi(gpu, stream, &side.keys, &values, rows, width, 0, bits)?;
    let perm = moved.remove(0);
    let offsets = boundaries(gpu, stream, &pkeys, rows, bits, width)?;
    let largest = gpu.alloc_filled(stream, 4, 0, "largest partition")?;
    // gp_largest(offsets, parts, largest)
    gpu.launch_n(stream, kernel::GP_LARGEST, parts, &[ptr(&offsets, stream), KArg::U64(parts), ptr(&largest, stream)])?;
    if gpu.read::<u32>(stream, &largest, 0, 1)?[0] as u64 > LARGEST_ROWS {
        return Ok(None);
    }

    // Number each partition's keys, then offset them by the partitions before.
    let gid = gpu.alloc(stream, rows as usize * 4, "group ids")?;
    let rep_pos = gpu.alloc(stream, rows as usize * 4, "group representatives")?;
    let counts = gpu.alloc(stream, parts as usize * 4, "partition group counts")?;
    let overflow = gpu.alloc_filled(stream, 4, 0, "partition overflow flag")?;
    let sms = gpu.info().sm_count.max(1) as u64;
    let cfg = LaunchConfig {
        grid_dim: (parts.min(sms * 4) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    // gp_ids_kX(keys, offsets, parts, local, rep_pos, counts, overflow)
    gpu.launch(
        stream,
        width.kernel(kernel::GP_IDS),
        cfg,
        &[
            ptr(&pkeys, stream),
            ptr(&offsets, stream),
            KArg::U32(parts as u32),
            ptr(&gid, stream),
            ptr(&rep_pos, stream),
            ptr(&counts, stream),
            ptr(&overflow, stream),
        ],
    )?;
    if gpu.read::<u32>(stream, &overflow, 0, 1)?[0] != 0 {
        return Ok(None);
    }
    drop(pkeys);
    let (goff, total) = exclusive_scan(gpu, stream, &counts, parts, ScanKind::U32, true)?;
    let total = total.ok_or_else(|| gpu_error("scan returned no total"))?;
    let groups = gpu.read::<u32>(stream, &total, 0, 1)?[0] as u64;
    let reps = gpu.alloc(stream, groups as usize * 4, "group representatives")?;
    let cfg =
        LaunchConfig { grid_dim: (parts.min(sms * 16) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    // gp_finish(offsets, parts, goff, counts, rep_pos, perm, gid, rep)
    gpu.launch(
        stream,
        kernel::GP_FINISH,
        cfg,
        &[
            ptr(&offsets, stream),
            KArg::U32(parts as u32),
            ptr(&goff, stream),
            ptr(&counts, stream),
            ptr(&rep_pos, stream),
            ptr(&perm, stream),
            ptr(&gid, stream),
            ptr(&reps, stream),
        ],
    )?;
    drop((rep_pos, counts, goff, offsets));
    if plan.encoding == KeyEncoding::Wide {
        // Hash words: every row must have its representative's key.
        let rep_of = crate::primitives::gather(gpu, stream, &reps, &gid, rows, 4)?;
        let eq = verify_pairs(gpu, stream, &plan, &side, &side, &rep_of, &perm, rows)?;
        let (_, differ) = select_where(gpu, stream, &eq, rows, 0)?;
        if differ != 0 {
            return Ok(None);
        }
    }
    sync()?;
    times.group_ids += t.elapsed();

    // Reductions over the columns in partitioned order: carried ones as moved, the others
    // (nullable, 1-, 2- or 16-byte, FILTER flags) gathered through the permutation, timed with
    // the aggregation.
    let t = Instant::now();
    let mut ordered: Vec<Arc<DeviceColumn>> = columns.to_vec();
    for (i, buf) in carried.iter().zip(moved) {
        let c = col(*i)?;
        ordered[*i] = Arc::new(DeviceColumn {
            data_type: c.data_type.clone(),
            len: rows as usize,
            null_count: 0,
            validity: None,
            buffers: vec![buf],
            children: vec![],
        });
    }
    let gathered: Vec<usize> = used.iter().copied().filter(|i| !carried.contains(i)).collect();
    if !gathered.is_empty() {
        let specs = gathered
            .iter()
            .map(|&i| Ok(GatherSpec::Rows { col: col(i)?.as_ref(), rows: &perm, may_be_null: false }))
            .collect::<Result<Vec<_>>>()?;
        for (i, c) in gathered.iter().zip(gather_columns(gpu, stream, specs, rows)?) {
            ordered[*i] = Arc::new(c);
        }
    }
    sync()?;
    times.aggregate += t.elapsed();
    let accumulation = if opts.shared_memory { Accumulation::Clustered } else { Accumulation::Global };
    let (keys, values) = aggregate_groups(
        gpu,
        stream,
        (keys, Some(&reps)),
        (&ordered, reductions, accumulation),
        Some(&gid),
        rows,
        groups,
        times,
    )?;
    Ok(Some(GroupByOutput { keys, values, distinct: Vec::new(), groups, rounds: 1, method: GroupIdMethod::Partition }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_hold_about_target_rows() {
        assert_eq!(partition_bits(0), 0);
        assert_eq!(partition_bits(TARGET_ROWS), 0);
        assert_eq!(partition_bits(TARGET_ROWS + 1), 1);
        assert_eq!(partition_bits(1 << 20), 9);
        assert_eq!(partition_bits(1 << 27), 16);
        assert_eq!(partition_bits(1 << 32), MAX_BITS);
    }
}
