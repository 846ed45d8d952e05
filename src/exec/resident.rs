//! Tables resident in device memory. [`ResidentTable`] is a `TableProvider` whose columns were
//! uploaded once, when it was made, and stay on the GPU for every later query; its scan,
//! [`GpuTableScanExec`], hands the GPU operators above it device batches without a copy (a join,
//! an aggregate or a fused filter reads them as it reads a GPU child's), and downloads them for a
//! CPU parent. The cost model prices such an input as read on the device: no upload.
//!
//! A table keeps the host batches it was made from (their buffers shared, not copied) unless
//! [`ResidentTable::without_host_copy`] drops them: a CPU operator over its scan (a filter
//! DataFusion evaluates, a repartition) then reads those instead of a download of the device
//! columns. Without them every such scan downloads its columns again (TPC-H q22's CPU filters
//! over `customer`, q7's, q8's and q20's over a dimension).
//!
//! The table's batches are immutable once loaded (the uploads are synchronised before the table
//! is handed out), so every scan may give them to consumers on a stream of its own.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, internal_err};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PhysicalExpr, PlanProperties,
};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::{DeviceBatchStream, GpuExec, HostTable, download_stream, host_partition_stream, registered_rows};
use crate::columns::DeviceBatch;
use crate::config::{GpuConfig, human_bytes};
use crate::device::Gpu;
use crate::error::gpu_error;

/// The device data of a resident table, shared by the provider and its scans.
#[derive(Debug, Clone)]
struct Resident {
    schema: SchemaRef,
    gpu: Arc<Gpu>,
    /// Each partition's rows, in device batches of at most the loading session's
    /// `gpu.batch_rows` rows.
    partitions: Vec<Vec<DeviceBatch>>,
    /// The host batches the table was made from, per partition, while it keeps them.
    host: Option<Vec<Vec<RecordBatch>>>,
    /// Exact row counts and byte sizes, and the columns' null counts and min/max, per partition
    /// (as DataFusion's in-memory table computes them).
    partition_statistics: Vec<Statistics>,
    statistics: Statistics,
    device_bytes: usize,
}

/// A table whose columns live in device memory (see the module's text).
#[derive(Debug, Clone)]
pub struct ResidentTable {
    data: Arc<Resident>,
}

impl ResidentTable {
    /// Uploads `partitions` (host batches of `schema`) to `gpu`: each partition's batches become
    /// device batches of at most `batch_rows` rows. Partitions upload in parallel, each on a
    /// stream of its own, and every copy has finished when this returns.
    pub fn try_new(
        gpu: Arc<Gpu>,
        schema: SchemaRef,
        partitions: &[Vec<RecordBatch>],
        batch_rows: usize,
    ) -> Result<Self> {
        use rayon::prelude::*;
        let HostTable { partition_statistics, statistics } = HostTable::check(&schema, partitions, "resident table")?;
        let device: Vec<Vec<DeviceBatch>> = partitions
            .par_iter()
            .map(|batches| {
                let stream = gpu.stream();
                let out = device_batch_groups(batches, batch_rows)
                    .iter()
                    .map(|group| DeviceBatch::upload_concat(&gpu, &stream, group))
                    .collect::<Result<Vec<_>>>()?;
                stream.synchronize().map_err(|e| gpu_error(format!("waiting for a resident table's upload: {e}")))?;
                Ok(out)
            })
            .collect::<Result<_>>()?;
        let device_bytes = device.iter().flatten().map(DeviceBatch::byte_size).sum();
        Ok(ResidentTable {
            data: Arc::new(Resident {
                schema,
                gpu,
                partitions: device,
                host: Some(partitions.to_vec()),
                partition_statistics,
                statistics,
                device_bytes,
            }),
        })
    }

    /// The rows of table `name` registered in `ctx`, read with DataFusion and made resident on
    /// the session's GPU (`gpu.device`), in as many partitions as DataFusion's scan of it has,
    /// and device batches of the session's `gpu.batch_rows` rows.
    pub async fn from_registered(ctx: &SessionContext, name: &str) -> Result<Self> {
        let (schema, partitions) = registered_rows(ctx, name).await?;
        let state = ctx.state();
        let cfg = GpuConfig::from_options(state.config().options());
        let gpu = Gpu::for_session(&cfg, &ctx.session_id())?;
        let batch_rows = cfg.batch_rows;
        // The uploads wait for the device: off the async runtime's threads.
        tokio::task::spawn_blocking(move || ResidentTable::try_new(gpu, schema, &partitions, batch_rows))
            .await
            .map_err(|e| DataFusionError::Execution(format!("uploading a resident table: {e}")))?
    }

    /// This table without the host batches it was made from: scans under CPU operators then
    /// download the device columns, and the host memory goes when nothing else holds it.
    pub fn without_host_copy(self) -> Self {
        let data = Resident { host: None, ..(*self.data).clone() };
        ResidentTable { data: Arc::new(data) }
    }

    /// Whether CPU operators over this table's scans read its host batches (see the module's text).
    pub fn has_host_copy(&self) -> bool {
        self.data.host.is_some()
    }

    /// Device bytes the table's columns hold.
    pub fn device_bytes(&self) -> usize {
        self.data.device_bytes
    }

    pub fn num_rows(&self) -> usize {
        self.data.partitions.iter().flatten().map(DeviceBatch::num_rows).sum()
    }

    /// The device the table lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.data.gpu
    }
}

/// `batches` (in order, empty ones left out) grouped into device batches of `batch_rows` rows, the
/// last one with the rest: a batch that crosses a group's end is cut into slices.
pub fn device_batch_groups<T: Rows>(batches: &[T], batch_rows: usize) -> Vec<Vec<T>> {
    let batch_rows = batch_rows.max(1);
    let mut groups = Vec::new();
    let (mut group, mut rows) = (Vec::new(), 0);
    for b in batches.iter().filter(|b| b.rows() > 0) {
        let mut offset = 0;
        while offset < b.rows() {
            let take = (batch_rows - rows).min(b.rows() - offset);
            // A whole batch is shared as it is: a slice makes new arrays, thousands a table.
            group.push(if offset == 0 && take == b.rows() { b.clone() } else { b.slice_rows(offset, take) });
            offset += take;
            rows += take;
            if rows == batch_rows {
                groups.push(std::mem::take(&mut group));
                rows = 0;
            }
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// Host batches or one column's arrays, as [`device_batch_groups`] cuts them.
pub trait Rows: Clone {
    fn rows(&self) -> usize;
    fn slice_rows(&self, offset: usize, len: usize) -> Self;
}

impl Rows for RecordBatch {
    fn rows(&self) -> usize {
        self.num_rows()
    }
    fn slice_rows(&self, offset: usize, len: usize) -> Self {
        self.slice(offset, len)
    }
}

impl Rows for ArrayRef {
    fn rows(&self) -> usize {
        self.len()
    }
    fn slice_rows(&self, offset: usize, len: usize) -> Self {
        self.slice(offset, len)
    }
}

#[async_trait]
impl TableProvider for ResidentTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.data.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuTableScanExec::try_new(Arc::clone(&self.data), projection.cloned())?))
    }

    fn statistics(&self) -> Option<Statistics> {
        Some(self.data.statistics.clone())
    }
}

/// The scan of a [`ResidentTable`]: its partitions' device batches, of the projected columns.
#[derive(Debug)]
pub struct GpuTableScanExec {
    data: Arc<Resident>,
    /// Columns of the table, in output order.
    projection: Vec<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuTableScanExec {
    fn try_new(data: Arc<Resident>, projection: Option<Vec<usize>>) -> Result<Self> {
        let projection = projection.unwrap_or_else(|| (0..data.schema.fields().len()).collect());
        let schema = Arc::new(data.schema.project(&projection)?);
        // Cooperative (both its host streams yield as DataFusion's memory scan does), so that
        // DataFusion's EnsureCooperative does not wrap it: a GPU parent must see the scan itself
        // to read its columns on the device.
        let properties = Arc::new(
            PlanProperties::new(
                EquivalenceProperties::new(Arc::clone(&schema)),
                Partitioning::UnknownPartitioning(data.partitions.len().max(1)),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )
            .with_scheduling_type(SchedulingType::Cooperative),
        );
        Ok(GpuTableScanExec { data, projection, schema, properties, metrics: ExecutionPlanMetricsSet::new() })
    }

    /// Device bytes of the projected columns.
    fn projected_bytes(&self) -> usize {
        let per_column = |b: &DeviceBatch| self.projection.iter().map(|&c| b.columns()[c].byte_size()).sum::<usize>();
        self.data.partitions.iter().flatten().map(per_column).sum()
    }
}

impl DisplayAs for GpuTableScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        match t {
            DisplayFormatType::TreeRender => write!(f, "resident={}", human_bytes(self.projected_bytes() as u64)),
            _ => write!(
                f,
                "GpuTableScanExec: resident on GPU {}, partitions={}, projection=[{}], {} on the device{}",
                self.data.gpu.info().ordinal,
                self.data.partitions.len(),
                names.join(", "),
                human_bytes(self.projected_bytes() as u64),
                if self.data.host.is_some() { ", its host batches for CPU parents" } else { "" }
            ),
        }
    }
}

impl ExecutionPlan for GpuTableScanExec {
    fn name(&self) -> &str {
        "GpuTableScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("GpuTableScanExec has no children");
        }
        Ok(self)
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let Some(host) = &self.data.host else {
            let downloads = download_stream(Arc::clone(&self.schema), self.execute_device(partition, context)?);
            return Ok(make_cooperative(downloads));
        };
        // The rows the table was made from, still on the host: no download.
        let stream = host_partition_stream(host, partition, &self.schema, &self.projection, self.name())?;
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        rows.add(host.get(partition).map_or(0, |b| b.iter().map(RecordBatch::num_rows).sum()));
        Ok(stream)
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let stats = match args.partition() {
            Some(p) => {
                self.data.partition_statistics.get(p).cloned().unwrap_or_else(|| Statistics::new_unknown(&self.schema))
            }
            None => self.data.statistics.clone(),
        };
        Ok(Arc::new(stats.project(Some(&self.projection))))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

impl GpuExec for GpuTableScanExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let ordinal = self.data.gpu.info().ordinal;
        if cfg.home_device() != ordinal {
            return Err(DataFusionError::Plan(format!(
                "a table resident on GPU {ordinal} is scanned by a session on GPU {} (gpu.device, or the first of gpu.devices): set gpu.device = {ordinal} and gpu.devices = '' (or list GPU {ordinal} first), or make the table resident on that device",
                cfg.home_device()
            )));
        }
        let Some(batches) = self.data.partitions.get(partition) else {
            if partition == 0 && self.data.partitions.is_empty() {
                return Ok(Box::pin(futures::stream::empty()));
            }
            return internal_err!("GpuTableScanExec has {} partitions, not {partition}", self.data.partitions.len());
        };
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        // The device bytes of the columns handed out: what a reader of every column reads once.
        let scanned = MetricBuilder::new(&self.metrics).counter("scanned_bytes", partition);
        let (projection, schema, gpu) = (self.projection.clone(), Arc::clone(&self.schema), Arc::clone(&self.data.gpu));
        let batches: Vec<DeviceBatch> = batches.to_vec();
        Ok(Box::pin(futures::stream::iter(batches).map(move |b| {
            rows.add(b.num_rows());
            // The batch's uploads finished when the table was made: its consumers may work on a
            // stream of their own.
            let b = b.select(&projection, &schema)?.on_stream(gpu.stream());
            scanned.add(b.byte_size());
            Ok(b)
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;

    use super::device_batch_groups;

    fn batch(from: i64, n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(from..from + n as i64))]).unwrap()
    }

    /// Device batches hold `batch_rows` rows each (the last the rest), every row once and in
    /// order, whatever the host batches' sizes; empty batches add nothing.
    #[test]
    fn host_batches_group_into_device_batches_of_the_set_rows() {
        let sizes = [0usize, 5, 1, 12, 0, 3, 7, 30, 2];
        let mut from = 0;
        let batches: Vec<RecordBatch> = sizes
            .iter()
            .map(|&n| {
                let b = batch(from, n);
                from += n as i64;
                b
            })
            .collect();
        let total: usize = sizes.iter().sum();
        for batch_rows in [1, 4, 7, 10, 60, 61, 1000] {
            let groups = device_batch_groups(&batches, batch_rows);
            let rows: Vec<usize> = groups.iter().map(|g| g.iter().map(RecordBatch::num_rows).sum()).collect();
            assert_eq!(rows.iter().sum::<usize>(), total, "{batch_rows}");
            let (last, full) = rows.split_last().unwrap();
            assert!(full.iter().all(|&r| r == batch_rows), "{batch_rows}: {rows:?}");
            assert!(*last > 0 && *last <= batch_rows, "{batch_rows}: {rows:?}");
            let values: Vec<i64> = groups
                .iter()
                .flatten()
                .flat_map(|b| {
                    let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    (0..a.len()).map(|i| a.value(i)).collect::<Vec<_>>()
                })
                .collect();
            assert_eq!(values, (0..total as i64).collect::<Vec<_>>(), "{batch_rows}");
            // The cached scan's layout cuts the same rows without slicing the batches.
            assert_eq!(crate::exec::cached_layouts::chunk_rows(total, batch_rows), rows, "{batch_rows}");
        }
        assert!(device_batch_groups(&[batch(0, 0)], 10).is_empty());
        assert!(crate::exec::cached_layouts::chunk_rows(0, 10).is_empty());
    }
}
