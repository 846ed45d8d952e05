//! Which GPU aggregates hand a GPU parent their merged state whole, in one partition, rather
//! than split by the hash partitioning the plan declares for their output (see
//! [`GpuAggregateExec::with_hash_split`]): each group is one row of that state, so any split
//! keeps a group in one partition, and only an operator that pairs partition `i` of this output
//! with partition `i` of another input (a partitioned join, an interleave) needs the hash.

use std::sync::Arc;

use datafusion::error::Result;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan};

use crate::exec::{GpuAggregateExec, GpuHashJoinExec, as_gpu_exec};

/// `plan` with each GPU aggregate's device exchange told whether its output must follow the
/// declared hash partitioning on the device: it need not where a GPU parent reads it there and
/// no operator above pairs it.
pub fn mark_hash_splits(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    visit(plan, false, Reader::Host)
}

/// What reads a node's output.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// A CPU operator (or nothing): host batches, in the declared partitions.
    Host,
    /// A GPU exec, on the device.
    Device,
    /// A GPU join, on the device, also around a `CoalescePartitionsExec` (a build side).
    DeviceJoin,
}

/// `node` and the nodes below it marked; `paired`: an operator above pairs the partitions of
/// `node`'s output with another input's, through operators that keep them as they are.
fn visit(node: Arc<dyn ExecutionPlan>, paired: bool, reader: Reader) -> Result<Arc<dyn ExecutionPlan>> {
    let flags = children_paired(&node, paired);
    let below = if node.downcast_ref::<GpuHashJoinExec>().is_some() {
        Reader::DeviceJoin
    } else if as_gpu_exec(&node).is_some() {
        Reader::Device
    } else if node.downcast_ref::<CoalescePartitionsExec>().is_some() && reader == Reader::DeviceJoin {
        Reader::DeviceJoin
    } else {
        Reader::Host
    };
    let children: Vec<Arc<dyn ExecutionPlan>> = node.children().into_iter().cloned().collect();
    let mut changed = false;
    let mut marked = Vec::with_capacity(children.len());
    for (child, paired) in children.iter().zip(flags) {
        let new = visit(Arc::clone(child), paired, below)?;
        changed |= !Arc::ptr_eq(&new, child);
        marked.push(new);
    }
    let node = match changed {
        true => node.replace_children(marked, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))?,
        false => node,
    };
    let hash_split = paired || reader == Reader::Host;
    if let Some(g) = node.downcast_ref::<GpuAggregateExec>()
        && g.splits_by_hash()
        && g.hash_split() != hash_split
    {
        return Ok(Arc::new(g.with_hash_split(hash_split)));
    }
    Ok(node)
}

/// For each child of `node` (whose own output is paired or not, `paired`): whether an operator
/// at or above `node` pairs that child's partitions with another input's.
fn children_paired(node: &Arc<dyn ExecutionPlan>, paired: bool) -> Vec<bool> {
    let n = node.children().len();
    // Operators that gather or split their input anew: what is above them pairs their output.
    let regathers = node.downcast_ref::<RepartitionExec>().is_some()
        || node.downcast_ref::<CoalescePartitionsExec>().is_some()
        || node.downcast_ref::<SortPreservingMergeExec>().is_some()
        || node.downcast_ref::<GpuAggregateExec>().is_some_and(|g| g.partial_stage().is_some());
    if regathers {
        return vec![false; n];
    }
    // A join that collects its left input whole: the right one's partitions are its output's.
    let collects_left = match (node.downcast_ref::<HashJoinExec>(), node.downcast_ref::<GpuHashJoinExec>()) {
        (Some(hj), _) => *hj.partition_mode() == PartitionMode::CollectLeft,
        (_, Some(g)) => g.mode().is_ok_and(|m| m == PartitionMode::CollectLeft),
        _ => node.downcast_ref::<CrossJoinExec>().is_some() || node.downcast_ref::<NestedLoopJoinExec>().is_some(),
    };
    match n {
        0 => Vec::new(),
        1 => vec![paired],
        2 if collects_left => vec![false, paired],
        _ if node.downcast_ref::<UnionExec>().is_some() => vec![paired; n],
        // A partitioned join, an interleave, a sort-merge join, anything else with several
        // inputs: partition `i` of each goes with partition `i` of the others.
        _ => vec![true; n],
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::common::{JoinType, NullEquality};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::Column;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
    use datafusion::physical_plan::repartition::RepartitionExec;
    use datafusion::physical_plan::union::UnionExec;
    use datafusion::physical_plan::{ExecutionPlan, Partitioning, PhysicalExpr};

    use super::children_paired;

    fn source() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        MemorySourceConfig::try_new_exec(&[vec![batch.clone()], vec![batch]], schema, None).unwrap()
    }

    fn k() -> Arc<dyn PhysicalExpr> {
        Arc::new(Column::new("k", 0))
    }

    fn hashed(input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        Arc::new(RepartitionExec::try_new(input, Partitioning::Hash(vec![k()], 4)).unwrap())
    }

    fn join(
        left: Arc<dyn ExecutionPlan>,
        right: Arc<dyn ExecutionPlan>,
        mode: PartitionMode,
    ) -> Arc<dyn ExecutionPlan> {
        let on = vec![(k(), k())];
        let j = HashJoinExec::try_new(
            left,
            right,
            on,
            None,
            &JoinType::Inner,
            None,
            mode,
            NullEquality::NullEqualsNothing,
            false,
        );
        Arc::new(j.unwrap())
    }

    /// Which children an operator pairs partition by partition with another input: both sides of
    /// a partitioned join; neither side of a CollectLeft join, except through to its probe side
    /// what its own parent pairs; nothing below a repartition or a coalesce; a union's and a
    /// filter's inputs as their output.
    #[test]
    fn operators_that_pair_partitions_of_their_inputs() {
        let partitioned = join(hashed(source()), hashed(source()), PartitionMode::Partitioned);
        assert_eq!(children_paired(&partitioned, false), vec![true, true]);
        let collect = join(Arc::new(CoalescePartitionsExec::new(source())), source(), PartitionMode::CollectLeft);
        assert_eq!(children_paired(&collect, false), vec![false, false]);
        assert_eq!(children_paired(&collect, true), vec![false, true]);
        for regather in [hashed(source()), Arc::new(CoalescePartitionsExec::new(source())) as Arc<dyn ExecutionPlan>] {
            assert_eq!(children_paired(&regather, true), vec![false]);
        }
        let union = UnionExec::try_new(vec![source(), source()]).unwrap();
        assert_eq!(children_paired(&union, false), vec![false, false]);
        assert_eq!(children_paired(&union, true), vec![true, true]);
        let filter: Arc<dyn ExecutionPlan> = Arc::new(
            FilterExec::try_new(Arc::new(datafusion::physical_expr::expressions::IsNotNullExpr::new(k())), source())
                .unwrap(),
        );
        assert_eq!(children_paired(&filter, true), vec![true]);
        assert_eq!(children_paired(&filter, false), vec![false]);
        assert_eq!(children_paired(&source(), true), Vec::<bool>::new());
    }
}
