//! DataFusion `ExecutionPlan`s of the GPU path, and the plumbing between them.
//!
//! Every GPU exec implements [`GpuExec`]: `execute_device` yields [`DeviceBatch`]es, and its
//! ordinary `execute` downloads them, so a CPU parent consumes it like any other plan. A GPU
//! parent asks its child through [`execute_device_input`]: a GPU child hands over device batches
//! directly (no round trip through the host); a CPU child is uploaded on the way.

pub mod aggregate;
pub mod cache_functions;
pub mod cached_files;
pub(crate) mod cached_layouts;
pub mod cached_scan;
#[cfg(test)]
mod cached_scan_tests;
pub mod cached_table;
pub mod cpu_join;
#[cfg(test)]
mod expression_tests;
pub mod fallback;
pub mod filter_project;
pub mod fuse;
pub mod join;
pub mod once;
pub mod placement;
pub mod query;
#[cfg(test)]
mod recovery_tests;
pub mod replay;
pub mod resident;
#[cfg(test)]
mod resident_tests;
pub mod statistics;
pub mod task_stream;
pub use crate::timeline;
pub mod upload;

use std::pin::Pin;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{Stream, StreamExt};

pub use aggregate::GpuAggregateExec;
pub use cached_scan::GpuCachedScanExec;
pub use cached_table::GpuCachedTable;
pub use fallback::CpuFallbackExec;
pub use filter_project::GpuFilterProjectExec;
pub use join::GpuHashJoinExec;
pub use placement::{Placement, placements};
pub use resident::{GpuTableScanExec, ResidentTable};
pub use upload::GpuUploadExec;

use crate::columns::DeviceBatch;

/// A stream of device batches.
pub type DeviceBatchStream = Pin<Box<dyn Stream<Item = Result<DeviceBatch>> + Send>>;

/// An `ExecutionPlan` that produces device-resident batches.
pub trait GpuExec: ExecutionPlan {
    /// Executes partition `partition`, yielding batches that stay in device memory.
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream>;
}

/// `plan` as a [`GpuExec`], if it is one of this crate's GPU execs.
pub fn as_gpu_exec(plan: &Arc<dyn ExecutionPlan>) -> Option<&dyn GpuExec> {
    if let Some(p) = plan.downcast_ref::<GpuUploadExec>() {
        return Some(p);
    }
    if let Some(p) = plan.downcast_ref::<GpuHashJoinExec>() {
        return Some(p);
    }
    if let Some(p) = plan.downcast_ref::<GpuFilterProjectExec>() {
        return Some(p);
    }
    if let Some(p) = plan.downcast_ref::<GpuTableScanExec>() {
        return Some(p);
    }
    if let Some(p) = plan.downcast_ref::<GpuCachedScanExec>() {
        return Some(p);
    }
    if let Some(p) = plan.downcast_ref::<GpuAggregateExec>() {
        return Some(p);
    }
    None
}

/// Device batches of `child`'s partition: straight from a GPU child, uploaded from a CPU one.
pub fn execute_device_input(
    child: &Arc<dyn ExecutionPlan>,
    partition: usize,
    context: Arc<TaskContext>,
) -> Result<DeviceBatchStream> {
    match as_gpu_exec(child) {
        Some(gpu) => gpu.execute_device(partition, context),
        None => GpuUploadExec::new(Arc::clone(child)).execute_device(partition, context),
    }
}

/// The device partition `partition` of a GPU operator runs on: with a device set and
/// `gpu.devices_spread_partitions`, the set's devices in turn ([`Gpu::placed`]); otherwise the
/// session's (home) device.
pub(crate) fn partition_gpu(
    cfg: &crate::config::GpuConfig,
    context: &TaskContext,
    partition: usize,
) -> Result<Arc<crate::device::Gpu>> {
    let home = crate::device::Gpu::for_session(cfg, &context.session_id())?;
    Ok(match cfg.devices_spread_partitions {
        true => home.placed(partition),
        false => home,
    })
}

/// `batches` on `gpu`: a batch another device of the set made is copied over (off the async
/// executor's threads); one already there passes as it is.
pub(crate) fn onto(batches: DeviceBatchStream, gpu: &Arc<crate::device::Gpu>) -> DeviceBatchStream {
    if gpu.device_count() == 1 {
        return batches;
    }
    let gpu = Arc::clone(gpu);
    Box::pin(batches.then(move |b| {
        let gpu = Arc::clone(&gpu);
        async move {
            let b = b?;
            match b.gpu().same_device(&gpu) {
                true => Ok(b),
                false => {
                    let rows = b.num_rows();
                    let moved = blocking(move || b.to_device(&gpu)).await;
                    timeline::mark("device move", || format!("{rows} rows copied from another device of the set"));
                    moved
                }
            }
        }
    }))
}

/// The one child of a unary exec's `with_new_children`, or an internal error naming `exec`.
pub(crate) fn single_child(mut children: Vec<Arc<dyn ExecutionPlan>>, exec: &str) -> Result<Arc<dyn ExecutionPlan>> {
    match children.pop() {
        Some(c) if children.is_empty() => Ok(c),
        _ => datafusion::common::internal_err!("{exec} takes exactly one child"),
    }
}

/// Runs blocking GPU work (copies, synchronisation) off the async executor's threads. The work
/// starts at once, not when the future is first polled, so a caller may start several and
/// await them later (two partitioning passes, an upload one step ahead).
pub(crate) fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> impl std::future::Future<Output = Result<T>> + Send + 'static {
    let task = tokio::task::spawn_blocking(f);
    async move { task.await.map_err(|e| DataFusionError::Execution(format!("GPU: a transfer task failed: {e}")))? }
}

/// Fewest rows a probe chunk, output window or aggregate chunk is cut to under a small memory
/// limit: below this, launches cost more than the rows.
const MIN_MEMORY_ROWS: u64 = 8192;

/// Rows of `row_bytes` each that `holders` buffers held at once may have within a quarter of
/// the session's memory limit (at least [`MIN_MEMORY_ROWS`]): the size probe chunks, output
/// windows and aggregate chunks are cut to, so that a small limit shrinks them rather than
/// fails them.
pub(crate) fn rows_within_limit(gpu: &crate::device::Gpu, holders: u64, row_bytes: u64) -> u64 {
    (gpu.memory().most() / 4 / holders.max(1) / row_bytes.max(1)).max(MIN_MEMORY_ROWS)
}

/// Downloads `batch` for a CPU consumer.
pub(crate) async fn download_for_cpu(batch: DeviceBatch) -> Result<datafusion::arrow::record_batch::RecordBatch> {
    let rows = batch.num_rows();
    let out = blocking(move || batch.download()).await;
    timeline::mark("download", || format!("{rows} rows downloaded for a CPU parent"));
    out
}

/// Downloads every batch of `parts` in order, on one blocking thread, for a CPU consumer.
pub(crate) async fn download_all(parts: Vec<DeviceBatch>) -> Result<Vec<datafusion::arrow::record_batch::RecordBatch>> {
    blocking(move || parts.iter().map(DeviceBatch::download).collect()).await
}

/// The exact statistics of a table made of host batches, per partition and overall, as
/// DataFusion's in-memory table computes them (a `ResidentTable`'s, a `GpuCachedTable`'s).
pub(crate) struct HostTable {
    pub partition_statistics: Vec<datafusion::common::Statistics>,
    pub statistics: datafusion::common::Statistics,
}

impl HostTable {
    /// The statistics of `partitions` (batches of every column of `schema`), or an error
    /// naming `what` when a batch's fields are not `schema`'s.
    pub(crate) fn check(
        schema: &datafusion::arrow::datatypes::SchemaRef,
        partitions: &[Vec<datafusion::arrow::record_batch::RecordBatch>],
        what: &str,
    ) -> Result<HostTable> {
        use datafusion::physical_plan::common::compute_record_batch_statistics;
        for b in partitions.iter().flatten() {
            if b.schema().fields() != schema.fields() {
                return datafusion::common::internal_err!(
                    "a batch of schema {} for a {what} of schema {schema}",
                    b.schema()
                );
            }
        }
        let partition_statistics =
            partitions.iter().map(|p| compute_record_batch_statistics(std::slice::from_ref(p), schema, None)).collect();
        let statistics = compute_record_batch_statistics(partitions, schema, None);
        Ok(HostTable { partition_statistics, statistics })
    }
}

/// `partitions` as batches of `schema`: a batch whose fields differ from the table's only in
/// nullability or metadata (as DataFusion's in-memory table takes them from an `INSERT ...
/// SELECT`) is given the table's fields, its arrays shared; one of other names or types is an
/// error naming `what`.
pub(crate) fn conformed_batches(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    partitions: Vec<Vec<datafusion::arrow::record_batch::RecordBatch>>,
    what: &str,
) -> Result<Vec<Vec<datafusion::arrow::record_batch::RecordBatch>>> {
    use datafusion::arrow::record_batch::RecordBatch;
    partitions
        .into_iter()
        .map(|p| {
            p.into_iter()
                .map(|b| {
                    if b.schema().fields() == schema.fields() {
                        return Ok(b);
                    }
                    let same = b.schema().fields().len() == schema.fields().len()
                        && b.schema()
                            .fields()
                            .iter()
                            .zip(schema.fields())
                            .all(|(x, y)| x.name() == y.name() && x.data_type().equals_datatype(y.data_type()));
                    if !same {
                        return datafusion::common::plan_err!(
                            "a batch of schema {} for a {what} of schema {schema}: the columns' names or types differ",
                            b.schema()
                        );
                    }
                    RecordBatch::try_new(Arc::clone(schema), b.columns().to_vec()).map_err(|e| {
                        DataFusionError::Plan(format!(
                            "a batch for a {what} of schema {schema} does not fit its columns: {e}"
                        ))
                    })
                })
                .collect()
        })
        .collect()
}

/// The schema and rows of table `name` registered in `ctx`, read with DataFusion in as many
/// partitions as its scan has.
pub(crate) async fn registered_rows(
    ctx: &datafusion::prelude::SessionContext,
    name: &str,
) -> Result<(datafusion::arrow::datatypes::SchemaRef, Vec<Vec<datafusion::arrow::record_batch::RecordBatch>>)> {
    let df = ctx.table(name).await?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    Ok((schema, df.collect_partitioned().await?))
}

/// Partition `partition` of a table's host `partitions`, projected to `projection` (`schema`
/// is the projected schema), as DataFusion's memory scan streams it (yielding cooperatively).
/// `exec` names the scan in the error for a partition it does not have.
pub(crate) fn host_partition_stream(
    partitions: &[Vec<datafusion::arrow::record_batch::RecordBatch>],
    partition: usize,
    schema: &datafusion::arrow::datatypes::SchemaRef,
    projection: &[usize],
    exec: &str,
) -> Result<SendableRecordBatchStream> {
    let batches = match partitions.get(partition) {
        Some(batches) => batches.clone(),
        None if partition == 0 && partitions.is_empty() => Vec::new(),
        None => {
            return datafusion::common::internal_err!("{exec} has {} partitions, not {partition}", partitions.len());
        }
    };
    let stream = datafusion::physical_plan::memory::MemoryStream::try_new(
        batches,
        Arc::clone(schema),
        Some(projection.to_vec()),
    )?;
    Ok(Box::pin(datafusion::physical_plan::coop::cooperative(stream)))
}

/// Downloads every device batch of `stream`, for a CPU consumer.
pub fn download_stream(
    schema: datafusion::arrow::datatypes::SchemaRef,
    stream: DeviceBatchStream,
) -> SendableRecordBatchStream {
    let batches = stream.then(|b| async move { download_for_cpu(b?).await });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// The sum of metric `name` over the nodes of `plan` (only those named `exec`, when given).
pub fn metric_total(plan: &Arc<dyn ExecutionPlan>, exec: Option<&str>, name: &str) -> usize {
    let mine = match exec.is_none_or(|e| plan.name() == e) {
        true => plan.metrics().and_then(|m| m.sum_by_name(name)).map_or(0, |v| v.as_usize()),
        false => 0,
    };
    mine + plan.children().into_iter().map(|c| metric_total(c, exec, name)).sum::<usize>()
}
