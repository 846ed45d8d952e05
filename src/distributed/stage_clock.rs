//! The time each stage of a distributed plan takes: a node at the top of each stage's own work
//! (below the repartition or broadcast that sends its output on) that passes its batches through
//! and times each partition from its start to its last batch. `datafusion-distributed` 4 stamps
//! every task's end at the end of the whole query (when the coordinator closes its channels), so
//! it does not say when a stage was done.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::execution_plan::{CardinalityEffect, ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PhysicalExpr, PlanProperties};
use datafusion_distributed::NetworkBoundaryExt;
use futures::Stream;

use crate::exec::single_child;

pub const STAGE_CLOCK_NAME: &str = "StageClockExec";

/// Passes its input's batches through; its metric `stage_time` is, for each partition, the time
/// from its start to its input's end.
#[derive(Debug)]
pub struct StageClockExec {
    input: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl StageClockExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        StageClockExec { input, metrics: ExecutionPlanMetricsSet::new() }
    }
}

impl DisplayAs for StageClockExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{STAGE_CLOCK_NAME}")
    }
}

impl ExecutionPlan for StageClockExec {
    fn name(&self) -> &str {
        STAGE_CLOCK_NAME
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(StageClockExec::new(single_child(children, STAGE_CLOCK_NAME)?)))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let time = MetricBuilder::new(&self.metrics).subset_time("stage_time", partition);
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let clocked = Clocked { input, time, started: Instant::now(), ended: false };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, clocked)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats.first() {
            Some(s) => Ok(Arc::clone(s)),
            None => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }

    fn cardinality_effect(&self) -> CardinalityEffect {
        CardinalityEffect::Equal
    }
}

/// A partition's batches, its end timed.
struct Clocked {
    input: SendableRecordBatchStream,
    time: Time,
    started: Instant,
    ended: bool,
}

impl Stream for Clocked {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<RecordBatch>>> {
        let next = self.input.as_mut().poll_next(cx);
        if let Poll::Ready(None) = &next
            && !std::mem::replace(&mut self.ended, true)
        {
            self.time.add_elapsed(self.started);
        }
        next
    }
}

/// `plan` with a [`StageClockExec`] over each stage's own work: the plan a network boundary
/// reads, below the repartition or broadcast at its top (which the worker puts back as the
/// boundary asks; a node above it would hide it).
pub fn with_stage_clocks(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if !node.as_ref().is_network_boundary() {
            return Ok(Transformed::no(node));
        }
        let Some(stage) = node.children().first().map(|c| Arc::clone(c)) else {
            return Ok(Transformed::no(node));
        };
        let head = matches!(stage.name(), "RepartitionExec" | "BroadcastExec");
        let clocked = match (head, stage.children().first()) {
            (true, Some(work)) => {
                let work = Arc::new(StageClockExec::new(Arc::clone(work))) as Arc<dyn ExecutionPlan>;
                Arc::clone(&stage).replace_children(vec![work], recompute())?
            }
            _ => Arc::new(StageClockExec::new(stage)),
        };
        Ok(Transformed::yes(node.replace_children(vec![clocked], recompute())?))
    })
    .map(|t| t.data)
}

/// New children recompute a node's properties.
fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

#[cfg(test)]
mod tests {
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    use super::*;

    /// A clock passes every row through and times each partition it ran.
    #[tokio::test]
    async fn a_stage_clock_passes_rows_through_and_times_each_partition() {
        let input = crate::testing::memory_kv(10_000, 3);
        let clock = Arc::new(StageClockExec::new(Arc::clone(&input)));
        let ctx = SessionContext::new();
        let want: usize = collect(input, ctx.task_ctx()).await.unwrap().iter().map(RecordBatch::num_rows).sum();
        let got = collect(Arc::clone(&clock) as Arc<dyn ExecutionPlan>, ctx.task_ctx()).await.unwrap();
        assert_eq!(got.iter().map(RecordBatch::num_rows).sum::<usize>(), want);
        let metrics = clock.metrics().unwrap();
        let timed = metrics.iter().filter(|m| m.value().name() == "stage_time").count();
        assert_eq!(timed, 3, "one stage_time per partition: {metrics}");
        assert!(metrics.sum_by_name("stage_time").unwrap().as_usize() > 0);
    }
}
