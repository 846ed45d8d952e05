//! The GPU group-by (Wu et al. 2025, section on grouped aggregation): group ids ([`groups`]), then
//! per-group reductions ([`reduce`]); [`layout`] maps DataFusion's `AggregateExec` (every mode)
//! onto them.
//!
//! One call aggregates one device batch. The exec ([`crate::exec::GpuAggregateExec`]) feeds a
//! partition's input in chunks of `gpu.batch_rows` rows and merges the chunks' partial states
//! with the same code over the state columns.

pub mod dictionary;
pub mod distinct;
pub mod groups;
pub mod layout;
pub mod partition;
pub mod reduce;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;

pub use distinct::{DistinctSpec, distinct_lists};
pub use groups::{CollisionTest, GroupIdMethod, GroupIds, group_ids};
pub use reduce::{AccOp, Accumulation, Reduction, reduce};

use crate::columns::DeviceColumn;
pub use crate::config::AggregateAlgorithmSetting;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{CudaResultExt, Result};
use crate::primitives::materialize::{GatherSpec, gather_columns};

impl AggregateAlgorithmSetting {
    /// The group-id method of this setting.
    pub fn method(self) -> GroupIdMethod {
        match self {
            AggregateAlgorithmSetting::Sort => GroupIdMethod::Sort,
            AggregateAlgorithmSetting::Partition => GroupIdMethod::Partition,
            AggregateAlgorithmSetting::Auto | AggregateAlgorithmSetting::Hash => GroupIdMethod::Hash,
        }
    }
}

/// How one group-by runs.
#[derive(Debug, Clone, Copy)]
pub struct GroupByOptions {
    pub method: GroupIdMethod,
    /// Accumulate in shared memory when a block's groups fit (false: global atomics only).
    pub shared_memory: bool,
    pub test: CollisionTest,
}

impl Default for GroupByOptions {
    fn default() -> Self {
        GroupByOptions { method: GroupIdMethod::Hash, shared_memory: true, test: CollisionTest::default() }
    }
}

/// Device time of each phase (the stream is synchronised at each boundary).
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupByTimes {
    /// Key words, group ids and representatives.
    pub group_ids: Duration,
    /// Reductions.
    pub aggregate: Duration,
    /// Output key columns.
    pub materialize: Duration,
}

/// A group-by's result: one row per group.
#[derive(Debug)]
pub struct GroupByOutput {
    pub keys: Vec<DeviceColumn>,
    pub values: Vec<DeviceColumn>,
    /// The List state of each COUNT(DISTINCT), in the order asked for.
    pub distinct: Vec<DeviceColumn>,
    pub groups: u64,
    pub rounds: u32,
    /// The method that numbered the groups (the partition group-by hands a batch it cannot
    /// number to the hash path).
    pub method: GroupIdMethod,
}

/// Groups `rows` rows by `keys` and computes `reductions` and the COUNT(DISTINCT) lists of
/// `distinct` over `columns`.
#[allow(clippy::too_many_arguments)]
pub fn group_by(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &[Arc<DeviceColumn>],
    columns: &[Arc<DeviceColumn>],
    reductions: &[Reduction],
    distinct: &[DistinctSpec],
    rows: u64,
    opts: &GroupByOptions,
    times: &mut GroupByTimes,
) -> Result<GroupByOutput> {
    let sync = || stream.synchronize().gpu("waiting for the GPU group-by");
    let mut method = opts.method;
    // The partition group-by numbers groups in its own row order; COUNT(DISTINCT) needs each
    // input row's group, which the hash path gives.
    if method == GroupIdMethod::Partition {
        if distinct.is_empty()
            && !keys.is_empty()
            && rows > 0
            && let Some(out) = partition::group_by(gpu, stream, keys, columns, reductions, rows, opts, times)?
        {
            return Ok(out);
        }
        method = GroupIdMethod::Hash;
    }
    let t = Instant::now();
    let ids = group_ids(gpu, stream, keys, rows, method, opts.test)?;
    sync()?;
    times.group_ids += t.elapsed();
    let accumulation = if opts.shared_memory { Accumulation::Shared } else { Accumulation::Global };
    let (keys, values) = aggregate_groups(
        gpu,
        stream,
        (keys, ids.reps.as_ref()),
        (columns, reductions, accumulation),
        ids.group_of_row.as_ref(),
        rows,
        ids.groups,
        times,
    )?;
    let t = Instant::now();
    let distinct = distinct
        .iter()
        .map(|d| distinct_lists(gpu, stream, columns, d, ids.group_of_row.as_ref(), rows, ids.groups, opts.test))
        .collect::<Result<Vec<_>>>()?;
    sync()?;
    times.aggregate += t.elapsed();
    Ok(GroupByOutput { keys, values, distinct, groups: ids.groups, rounds: ids.rounds, method })
}

/// The common end of every group-by method: each reduction over `columns` (in the order `gid`
/// refers to), then the output keys gathered from each group's representative row (`reps`; none
/// without key columns), each phase timed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn aggregate_groups(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (keys, reps): (&[Arc<DeviceColumn>], Option<&DeviceBuffer>),
    (columns, reductions, accumulation): (&[Arc<DeviceColumn>], &[Reduction], Accumulation),
    gid: Option<&DeviceBuffer>,
    rows: u64,
    groups: u64,
    times: &mut GroupByTimes,
) -> Result<(Vec<DeviceColumn>, Vec<DeviceColumn>)> {
    let sync = || stream.synchronize().gpu("waiting for the GPU group-by");
    let t = Instant::now();
    let values = reductions
        .iter()
        .map(|r| reduce(gpu, stream, columns, r, gid, rows, groups, accumulation))
        .collect::<Result<Vec<_>>>()?;
    sync()?;
    times.aggregate += t.elapsed();
    let t = Instant::now();
    let keys = match reps {
        Some(reps) => {
            let specs =
                keys.iter().map(|c| GatherSpec::Rows { col: c.as_ref(), rows: reps, may_be_null: false }).collect();
            gather_columns(gpu, stream, specs, groups)?
        }
        None => Vec::new(),
    };
    sync()?;
    times.materialize += t.elapsed();
    Ok((keys, values))
}
