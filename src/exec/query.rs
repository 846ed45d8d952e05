//! `GpuQueryExec`: the root of a plan with GPU operators, which runs the query again on
//! DataFusion's own plan when the GPU plan fails for want of device memory (see
//! [`crate::error::recoverable_on_cpu`]) where no operator could finish its work on the CPU
//! itself, so that such a query is answered as DataFusion answers it rather than failed.
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
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr, PlanProperties,
    execute_stream,
};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

use super::single_child;
use super::task_stream::TaskStream;
use crate::config::human_bytes;
use crate::error::recoverable_on_cpu;

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
            DisplayFormatType::TreeRender => write!(f, "cpu_rerun=on device memory errors"),
            _ => write!(
                f,
                "{QUERY_EXEC_NAME}: reruns on DataFusion's plan if device memory runs out (output held back up to {})",
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
        let input = single_child(children, QUERY_EXEC_NAME)?;
        Ok(Arc::new(GpuQueryExec { input, cpu: Arc::clone(&self.cpu), metrics: ExecutionPlanMetricsSet::new() }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuQueryExec {
            input: Arc::clone(&self.input),
            cpu: Arc::clone(&self.cpu),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
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
            Some(Err(e)) if !sending && recoverable_on_cpu(&e) => {
                // Dropping the GPU plan's stream stops its work and frees its device memory.
                drop(gpu);
                drop(held);
                reservation.free();
                metrics.reruns.add(1);
                log::warn!("a query ran out of device memory on the GPU and runs again on DataFusion's plan: {e}");
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
