//! `GpuQueryExec`: the root of a plan with GPU operators (or of a write's input), which runs the
//! query again on DataFusion's own plan when the GPU plan fails for want of device memory (see
//! [`crate::error::recoverable_on_cpu`]) where no operator could finish its work on the CPU
//! itself, so that such a query is answered as DataFusion answers it rather than failed; and when
//! a GPU expression failed on some rows ([`crate::error::ExpressionFailure`]), so that the answer
//! or the error is DataFusion's own.
//!
//! A rerun must not repeat or lose rows, so the output is held back until the GPU plan has
//! finished (the usual case: most queries end in an aggregate, a sort or a limit) or until it
//! holds [`HOLD_BACK_BYTES`] (or DataFusion's memory pool refuses more): from then on the rows
//! stream to the consumer and an error stands. The GPU plan's partitions are read together
//! (as `CoalescePartitionsExec` reads them); DataFusion's plan, its operators' state reset, is
//! read the same way.

use std::fmt;
use std::sync::Arc;

use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, internal_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr, PlanProperties, execute_stream,
};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

use super::single_child;
use super::task_stream::TaskStream;
use crate::config::human_bytes;
use crate::error::{cpu_evaluation_error, expression_failure_of, recoverable_on_cpu};

/// Most output bytes held back while the GPU plan may still fail.
pub const HOLD_BACK_BYTES: usize = 64 << 20;

pub const QUERY_EXEC_NAME: &str = "GpuQueryExec";

#[derive(Debug)]
pub struct GpuQueryExec {
    /// The GPU plan, its partitions merged into one.
    input: Arc<dyn ExecutionPlan>,
    /// DataFusion's plan, as the rule found it.
    cpu: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuQueryExec {
    /// The GPU plan `gpu` (merged into one partition when it has several), with DataFusion's
    /// plan `cpu` to run instead when it fails for want of device memory.
    pub fn new(gpu: Arc<dyn ExecutionPlan>, cpu: Arc<dyn ExecutionPlan>) -> Self {
        let input: Arc<dyn ExecutionPlan> = match gpu.output_partitioning().partition_count() {
            1 => gpu,
            _ => Arc::new(CoalescePartitionsExec::new(gpu)),
        };
        GpuQueryExec { input, cpu, metrics: ExecutionPlanMetricsSet::new() }
    }

    /// DataFusion's plan this query falls back to.
    pub fn cpu_plan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.cpu
    }

    /// This node over `input` (merged already), with the same CPU plan and fresh metrics.
    fn over(&self, input: Arc<dyn ExecutionPlan>) -> GpuQueryExec {
        GpuQueryExec { input, cpu: Arc::clone(&self.cpu), metrics: ExecutionPlanMetricsSet::new() }
    }

    /// The GPU plan below the merge of its partitions.
    fn gpu_plan(&self) -> &Arc<dyn ExecutionPlan> {
        match self.input.downcast_ref::<CoalescePartitionsExec>() {
            Some(c) => c.input(),
            None => &self.input,
        }
    }
}

impl DisplayAs for GpuQueryExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "cpu_rerun=on device memory and expression errors"),
            _ => write!(
                f,
                "{QUERY_EXEC_NAME}: reruns on DataFusion's plan if device memory runs out or a GPU expression fails (output held back up to {})",
                human_bytes(HOLD_BACK_BYTES as u64)
            ),
        }
    }
}

impl ExecutionPlan for GpuQueryExec {
    fn name(&self) -> &str {
        QUERY_EXEC_NAME
    }

    /// Downcasts see the GPU plan, as without this root.
    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.gpu_plan().as_ref())
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
        Ok(Arc::new(self.over(single_child(children, QUERY_EXEC_NAME)?)))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.over(Arc::clone(&self.input))))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("{QUERY_EXEC_NAME} has one partition, not {partition}");
        }
        let gpu = self.input.execute(0, Arc::clone(&context))?;
        let metrics = Counters {
            reruns: MetricBuilder::new(&self.metrics).counter("cpu_reruns", 0),
            held_rows: MetricBuilder::new(&self.metrics).counter("held_back_rows", 0),
        };
        let cpu = Arc::clone(&self.cpu);
        let (mut tx, rx) = mpsc::channel::<Result<datafusion::arrow::record_batch::RecordBatch>>(2);
        let task = SpawnedTask::spawn(async move {
            if let Err(e) = drive(gpu, cpu, context, &mut tx, metrics).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), TaskStream::new(rx, task, "a GPU query"))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match input_stats {
            [one] => Ok(Arc::clone(one)),
            _ => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }
}

struct Counters {
    /// Queries run again on DataFusion's plan.
    reruns: Count,
    /// Rows held back until the GPU plan finished or the hold-back filled.
    held_rows: Count,
}

/// Reads the GPU plan's output into `tx`, held back as the module says; runs DataFusion's plan
/// instead when the GPU plan fails for want of device memory before anything was sent.
async fn drive(
    mut gpu: SendableRecordBatchStream,
    cpu: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    tx: &mut mpsc::Sender<Result<datafusion::arrow::record_batch::RecordBatch>>,
    metrics: Counters,
) -> Result<()> {
    let gone = || DataFusionError::Execution("a GPU query's output was dropped".into());
    let reservation = MemoryConsumer::new("GpuQueryExec output held back").register(context.memory_pool());
    let (mut held, mut held_bytes, mut sending) = (Vec::new(), 0usize, false);
    loop {
        match gpu.next().await {
            Some(Ok(b)) if sending => tx.send(Ok(b)).await.map_err(|_| gone())?,
            Some(Ok(b)) => {
                let bytes = b.get_array_memory_size();
                if held_bytes + bytes <= HOLD_BACK_BYTES && reservation.try_grow(bytes).is_ok() {
                    metrics.held_rows.add(b.num_rows());
                    held_bytes += bytes;
                    held.push(b);
                    continue;
                }
                // Too much to hold: from here on an error stands.
                sending = true;
                for h in std::mem::take(&mut held) {
                    tx.send(Ok(h)).await.map_err(|_| gone())?;
                }
                reservation.free();
                tx.send(Ok(b)).await.map_err(|_| gone())?;
            }
            Some(Err(e))
                if !sending
                    && (recoverable_on_cpu(&e) || expression_failure_of(&e).is_some() || cpu_evaluation_error(&e)) =>
            {
                // Dropping the GPU plan's stream stops its work and frees its device memory.
                drop(gpu);
                drop(held);
                reservation.free();
                metrics.reruns.add(1);
                match expression_failure_of(&e) {
                    // DataFusion's plan gives its own answer or error for the failed rows.
                    Some(_) => log::info!("a GPU expression failed; the query runs again on DataFusion's plan: {e}"),
                    None if cpu_evaluation_error(&e) => {
                        log::info!(
                            "an expression failed over the GPU plan's batches; the query runs again on DataFusion's plan: {e}"
                        )
                    }
                    None => log::warn!(
                        "a query ran out of device memory on the GPU and runs again on DataFusion's plan: {e}"
                    ),
                }
                let plan = reset_plan_states(cpu)?;
                let mut out = execute_stream(plan, context)?;
                while let Some(b) = out.next().await {
                    tx.send(Ok(b?)).await.map_err(|_| gone())?;
                }
                return Ok(());
            }
            Some(Err(e)) => return Err(e),
            None => {
                for h in held {
                    tx.send(Ok(h)).await.map_err(|_| gone())?;
                }
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::collect;
    use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::error::device_memory_error;
    use crate::exec::replay::HandedStream;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    fn batch(values: &[i64]) -> RecordBatch {
        RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    /// A plan of `partitions` partitions, each yielding `items` once.
    fn source(partitions: Vec<Vec<Result<RecordBatch>>>) -> Arc<dyn ExecutionPlan> {
        let streams = partitions
            .into_iter()
            .map(|items| {
                let s = RecordBatchStreamAdapter::new(schema(), futures::stream::iter(items));
                Arc::new(HandedStream::new(schema(), Box::pin(s))) as Arc<dyn PartitionStream>
            })
            .collect();
        Arc::new(StreamingTableExec::try_new(schema(), streams, None, Vec::new(), false, None).unwrap())
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        let mut v: Vec<i64> = batches
            .iter()
            .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
            .collect();
        v.sort();
        v
    }

    fn reruns(plan: &GpuQueryExec) -> usize {
        plan.metrics().and_then(|m| m.sum_by_name("cpu_reruns")).map_or(0, |v| v.as_usize())
    }

    /// A GPU plan that runs out of device memory after some output (held back) is answered by
    /// DataFusion's plan alone, whatever its partition counts; one that ends well keeps its own
    /// answer; any other error stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_out_of_device_memory_runs_again_on_datafusions_plan() {
        let ctx = SessionContext::new();
        let cpu =
            || MemorySourceConfig::try_new_exec(&[vec![batch(&[1, 2])], vec![batch(&[3])]], schema(), None).unwrap();
        let failing = source(vec![
            vec![Ok(batch(&[10, 20]))],
            vec![Ok(batch(&[30])), Err(device_memory_error("a joined column needs 1MiB"))],
        ]);
        let q = Arc::new(GpuQueryExec::new(failing, cpu()));
        assert_eq!(q.properties().output_partitioning().partition_count(), 1);
        let got = collect(Arc::clone(&q) as Arc<dyn ExecutionPlan>, ctx.task_ctx()).await.unwrap();
        assert_eq!(values(&got), vec![1, 2, 3], "DataFusion's rows only, none of the GPU's held back");
        assert_eq!(reruns(&q), 1);

        let fine = source(vec![vec![Ok(batch(&[10, 20]))], vec![Ok(batch(&[30]))]]);
        let q = Arc::new(GpuQueryExec::new(fine, cpu()));
        let got = collect(Arc::clone(&q) as Arc<dyn ExecutionPlan>, ctx.task_ctx()).await.unwrap();
        assert_eq!((values(&got), reruns(&q)), (vec![10, 20, 30], 0));

        let broken = source(vec![vec![Err(crate::error::gpu_error("a kernel failed"))]]);
        let q = Arc::new(GpuQueryExec::new(broken, cpu()));
        let err = collect(Arc::clone(&q) as Arc<dyn ExecutionPlan>, ctx.task_ctx()).await.unwrap_err();
        assert!(err.to_string().contains("a kernel failed"), "{err}");
        assert_eq!(reruns(&q), 0);
    }

    /// Output past the hold-back is sent: a later device memory error then stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_error_after_output_was_sent_stands() {
        let ctx = SessionContext::new();
        let big: Vec<i64> = (0..(HOLD_BACK_BYTES as i64 / 8 + 1024)).collect();
        let failing = source(vec![vec![Ok(batch(&big)), Err(device_memory_error("a joined column needs 1MiB"))]]);
        let cpu = MemorySourceConfig::try_new_exec(&[vec![batch(&[1])]], schema(), None).unwrap();
        let q = Arc::new(GpuQueryExec::new(failing, cpu));
        let err = collect(Arc::clone(&q) as Arc<dyn ExecutionPlan>, ctx.task_ctx()).await.unwrap_err();
        assert!(err.to_string().contains("a joined column"), "{err}");
        assert_eq!(reruns(&q), 0);
    }
}
