//! `GpuCachedScanExec`: the scan of an in-memory table or of Parquet files through the device's
//! table cache (`gpu.table_cache`). The rule puts it in place of DataFusion's scan of in-memory
//! batches (`DataSourceExec` over a `MemorySourceConfig`) or of Parquet files whose rows are all
//! their files' rows ([`super::cached_files`]). A GPU parent reads each partition's columns
//! from the cache ([`crate::columns::cache`]); the columns the cache lacks are uploaded once,
//! kept there for later queries, and handed on. A CPU parent reads the host batches, or the
//! files, as from DataFusion's scan: nothing is downloaded.
//!
//! A scan of files hands its GPU parent every file's rows in partition 0 (in device batches of
//! up to `gpu.table_cache.batch_rows` rows); its other partitions read nothing.
//!
//! A GPU parent reads the table in device batches of up to `gpu.table_cache.batch_rows` rows,
//! each made of consecutive partitions of the table ([`ScanLayouts`]): its partition `i` reads
//! the `i`-th group and the partitions past the last group read nothing, so an SF10 table runs
//! through one chain of kernels rather than one per partition.
//!
//! Each column of each device partition is cached on its own, so a query touching other columns of a
//! table uploads only those, and the cache holds only the columns queries read. The cost model
//! prices the scan as read on the device, like a resident table's: after the first query that
//! is what it costs. EXPLAIN ANALYZE counts the columns each scan read from the cache and uploaded.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Statistics, internal_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::{DataSource, DataSourceExec};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PhysicalExpr, PlanProperties,
};
use futures::StreamExt;

use super::cached_files::{FileLoad, ScanFiles};
use super::cached_layouts::{CacheTerms, Loaded, LoadedBatch, ScanLayouts, load_partition, ready_batch};
use super::{DeviceBatchStream, GpuExec, blocking, host_partition_stream};
use crate::columns::cache::{ColumnKey, TableCache};
use crate::columns::is_supported;
use crate::columns::packed::{likely_row_bytes, scalar_i64};
use crate::config::{GpuConfig, human_bytes};
use crate::device::Gpu;

/// The name the exec reports (`ExecutionPlan::name`).
pub const CACHED_SCAN_NAME: &str = "GpuCachedScanExec";

/// A scan of in-memory batches or Parquet files through the table cache (see the module's text).
#[derive(Debug)]
pub struct GpuCachedScanExec {
    /// DataFusion's scan this one replaced (the rule's, with `gpu.table_cache`): a CPU parent
    /// reads it, and the rule's strip puts it back. `None` for a [`super::GpuCachedTable`]'s scan.
    source: Option<Arc<dyn ExecutionPlan>>,
    /// The rows it reads.
    rows: ScanRows,
    /// The scanned columns: indices into the batches' (or the files' table's) columns, in output
    /// order.
    columns: Vec<usize>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    /// Device ordinal the cache was looked at on.
    ordinal: usize,
    /// The scan's statistics, by partition (`None`: all), as first computed (DataFusion's scan
    /// computes them from every batch each time, and the planners ask many times) or as the
    /// table gave them.
    statistics: Mutex<HashMap<Option<usize>, Arc<Statistics>>>,
    /// Whether the scan hands out the whole table as its one partition (see
    /// [`GpuCachedScanExec::in_one_partition`]).
    one_partition: bool,
    metrics: ExecutionPlanMetricsSet,
}

/// The rows a cached scan reads.
#[derive(Debug)]
enum ScanRows {
    Memory {
        /// Every column of the table's batches, per partition.
        partitions: Arc<Vec<Vec<RecordBatch>>>,
        /// How each partition is cut into device batches (of the rows a batch the cache is
        /// keyed by), and its columns' cache keys: shared by every scan of a
        /// [`super::GpuCachedTable`], so computed once for the table.
        layouts: Arc<ScanLayouts>,
    },
    Files(Arc<ScanFiles>),
}

impl GpuCachedScanExec {
    /// The cached scan of `plan` when it is DataFusion's scan of in-memory batches with no row
    /// limit, whose columns all have a device layout, or a scan of Parquet files that
    /// [`ScanFiles::over`] takes; `None` otherwise.
    pub fn over(plan: &Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> Option<GpuCachedScanExec> {
        let source = plan.downcast_ref::<DataSourceExec>()?;
        let Some(memory) = source.data_source().downcast_ref::<MemorySourceConfig>() else {
            let (files, columns) = ScanFiles::over(plan)?;
            return Some(GpuCachedScanExec {
                source: Some(Arc::clone(plan)),
                rows: ScanRows::Files(Arc::new(files)),
                columns,
                schema: plan.schema(),
                properties: Arc::clone(plan.properties()),
                ordinal: cfg.home_device(),
                statistics: Mutex::new(HashMap::new()),
                one_partition: false,
                metrics: ExecutionPlanMetricsSet::new(),
            });
        };
        if memory.fetch().is_some() {
            return None;
        }
        let table = memory.original_schema();
        let columns = memory.projection().clone().unwrap_or_else(|| (0..table.fields().len()).collect());
        if columns.iter().any(|&c| table.fields().get(c).is_none_or(|f| !is_supported(f.data_type()))) {
            return None;
        }
        Some(GpuCachedScanExec {
            source: Some(Arc::clone(plan)),
            schema: plan.schema(),
            properties: Arc::clone(plan.properties()),
            rows: ScanRows::Memory {
                partitions: Arc::new(memory.partitions().to_vec()),
                // Sorted partitions stay apart (see ScanLayouts).
                layouts: Arc::new(ScanLayouts::with_merge(
                    memory.partitions().len(),
                    cfg.table_cache_batch_rows,
                    plan.output_ordering().is_none(),
                )),
            },
            columns,
            ordinal: cfg.home_device(),
            statistics: Mutex::new(HashMap::new()),
            one_partition: false,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The scan of a table's `partitions` (host batches of every column) reading `columns`, as
    /// `schema`, with the table's `statistics` of those columns by partition (`None`: all) and
    /// the table's `layouts` (for `cfg.table_cache_batch_rows`).
    pub(crate) fn of_table(
        partitions: Arc<Vec<Vec<RecordBatch>>>,
        layouts: Arc<ScanLayouts>,
        columns: Vec<usize>,
        schema: SchemaRef,
        statistics: HashMap<Option<usize>, Arc<Statistics>>,
        cfg: &GpuConfig,
    ) -> GpuCachedScanExec {
        let properties = table_scan_properties(&schema, partitions.len().max(1));
        GpuCachedScanExec {
            source: None,
            rows: ScanRows::Memory { partitions, layouts },
            columns,
            schema,
            properties,
            ordinal: cfg.home_device(),
            statistics: Mutex::new(statistics),
            one_partition: false,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// This scan as one partition holding the whole table, when a GPU parent reads all of it in
    /// one device partition anyway (its partitions merge into one group of
    /// `gpu.table_cache.batch_rows` rows or fewer, and have no sort order): `None` otherwise. Its
    /// GPU parents can then run as one partition too, one chain of work instead of one working
    /// partition beside many empty ones. A CPU reader gets every host partition's batches in
    /// turn. A scan of files hands its GPU parent every row in one partition already: it is
    /// read as one whenever it has several.
    pub fn in_one_partition(&self) -> Option<GpuCachedScanExec> {
        if self.one_partition || self.properties.output_partitioning().partition_count() <= 1 {
            return None;
        }
        if let ScanRows::Memory { partitions, layouts } = &self.rows {
            // (A scan with a sort order does not merge its partitions.)
            if !layouts.merge || layouts.groups(partitions).len() != 1 {
                return None;
            }
        }
        let properties = table_scan_properties(&self.schema, 1);
        // The whole table's statistics are its one partition's.
        let whole = self.statistics.lock().unwrap_or_else(|e| e.into_inner()).get(&None).cloned();
        let statistics = whole.into_iter().flat_map(|s| [(None, Arc::clone(&s)), (Some(0), s)]).collect();
        let rows = match &self.rows {
            ScanRows::Memory { partitions, layouts } => {
                ScanRows::Memory { partitions: Arc::clone(partitions), layouts: Arc::clone(layouts) }
            }
            ScanRows::Files(files) => ScanRows::Files(Arc::clone(files)),
        };
        Some(GpuCachedScanExec {
            source: self.source.clone(),
            rows,
            columns: self.columns.clone(),
            schema: Arc::clone(&self.schema),
            properties,
            ordinal: self.ordinal,
            statistics: Mutex::new(statistics),
            one_partition: true,
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// The device bytes its columns likely take: their host arrays' for in-memory batches, the
    /// rows the files' statistics give times the columns' widths for files (unknown rows: none);
    /// with `packed` (`gpu.table_cache.compress`), an integer, date or decimal column whose least
    /// and greatest values the statistics give at the width its packing takes.
    pub fn likely_device_bytes(&self, packed: bool) -> u64 {
        match &self.rows {
            ScanRows::Memory { partitions, .. } => partitions
                .iter()
                .flatten()
                .map(|b| self.columns.iter().map(|&c| b.column(c).get_array_memory_size() as u64).sum::<u64>())
                .sum(),
            ScanRows::Files(_) => {
                let Some(stats) = self
                    .source
                    .as_ref()
                    .and_then(|s| s.statistics_from_inputs(&[], &StatisticsArgs::new().with_partition(None)).ok())
                else {
                    return 0;
                };
                let rows = stats.num_rows.get_value().copied().unwrap_or(0) as u64;
                let width: u64 = self
                    .schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let range = stats.column_statistics.get(i).filter(|_| packed).and_then(|c| {
                            Some((scalar_i64(c.min_value.get_value()?)?, scalar_i64(c.max_value.get_value()?)?))
                        });
                        likely_row_bytes(f.data_type(), range)
                    })
                    .sum();
                rows.saturating_mul(width)
            }
        }
    }

    /// Whether this scan hands out the whole table as one partition.
    pub fn is_one_partition(&self) -> bool {
        self.one_partition
    }

    /// DataFusion's scan this one replaced (with `gpu.table_cache`), if it replaced one.
    pub fn source(&self) -> Option<&Arc<dyn ExecutionPlan>> {
        self.source.as_ref()
    }
}

/// The properties of a table's cached scan of `partitions` partitions, with no order. Cooperative
/// (its host stream yields as DataFusion's memory scan does), so that DataFusion's
/// EnsureCooperative does not wrap it: a GPU parent must see the scan itself to read its columns
/// on the device.
fn table_scan_properties(schema: &SchemaRef, partitions: usize) -> Arc<PlanProperties> {
    Arc::new(
        PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(schema)),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        .with_scheduling_type(SchedulingType::Cooperative),
    )
}

/// The most bytes the table cache may hold for a session: `gpu.table_cache.limit`, or half the
/// session's device memory limit.
pub fn cache_limit(cfg: &GpuConfig, gpu: &Gpu) -> u64 {
    cfg.table_cache_limit.bytes().unwrap_or(gpu.memory().limit() / 2)
}

/// `plan` with every scan of in-memory batches or Parquet files that [`GpuCachedScanExec::over`] takes replaced
/// by it, but those whose columns would take more than `limit` bytes of device memory (the cache's limit, see
/// [`cache_limit`]): the cache could not keep them, and DataFusion's scan, uploaded in chunks by the GPU operator
/// above, streams them within the memory limit.
pub fn cache_table_scans(plan: Arc<dyn ExecutionPlan>, cfg: &GpuConfig, limit: u64) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(
            match GpuCachedScanExec::over(&node, cfg)
                .filter(|s| s.likely_device_bytes(cfg.table_cache_compress) <= limit)
            {
                Some(scan) => Transformed::yes(Arc::new(scan) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            },
        )
    })
    .map(|t| t.data)
}

impl DisplayAs for GpuCachedScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "table_cache=GPU {}", self.ordinal),
            _ => {
                let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
                let (partitions, layouts) = match &self.rows {
                    ScanRows::Memory { partitions, layouts } => (partitions, layouts),
                    ScanRows::Files(files) => {
                        let planned = self.source.as_ref().map_or(1, |s| s.output_partitioning().partition_count());
                        let partitions = match self.one_partition {
                            true => format!("{planned} read as one"),
                            false => planned.to_string(),
                        };
                        return write!(
                            f,
                            "{CACHED_SCAN_NAME}: Parquet files through the table cache of GPU {}, files={}, partitions={partitions}, projection=[{}] (a GPU parent reads the cached columns of every file in one partition and loads the rest from the files once; a CPU parent reads the files)",
                            self.ordinal,
                            files.files().len(),
                            names.join(", "),
                        );
                    }
                };
                let bytes: usize = partitions
                    .iter()
                    .flatten()
                    .map(|b| self.columns.iter().map(|&c| b.column(c).get_array_memory_size()).sum::<usize>())
                    .sum();
                let groups = layouts.groups(partitions).len();
                let partitions_shown = match self.one_partition {
                    true => format!("{} read as one", partitions.len()),
                    false => partitions.len().to_string(),
                };
                write!(
                    f,
                    "{CACHED_SCAN_NAME}: in-memory batches through the table cache of GPU {}, partitions={}, projection=[{}], {} on the host (a GPU parent reads the cached columns in {} of the partitions, device batches of up to {} rows, and uploads the rest once; a CPU parent reads the host batches)",
                    self.ordinal,
                    partitions_shown,
                    names.join(", "),
                    human_bytes(bytes as u64),
                    groups,
                    layouts.batch_rows(),
                )
            }
        }
    }
}

impl ExecutionPlan for GpuCachedScanExec {
    fn name(&self) -> &str {
        CACHED_SCAN_NAME
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
            return internal_err!("{CACHED_SCAN_NAME} has no children");
        }
        Ok(self)
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if self.one_partition {
            if partition != 0 {
                return internal_err!("{CACHED_SCAN_NAME} read as one partition has no partition {partition}");
            }
            // Every host partition's batches, or every partition of the files' scan, in turn
            // (no download).
            let streams = match (&self.rows, &self.source) {
                (ScanRows::Memory { partitions, .. }, _) => (0..partitions.len())
                    .map(|p| host_partition_stream(partitions, p, &self.schema, &self.columns, CACHED_SCAN_NAME))
                    .collect::<Result<Vec<_>>>()?,
                (ScanRows::Files(_), Some(source)) => (0..source.output_partitioning().partition_count())
                    .map(|p| source.execute(p, Arc::clone(&context)))
                    .collect::<Result<Vec<_>>>()?,
                (ScanRows::Files(_), None) => return internal_err!("{CACHED_SCAN_NAME} of files has no file scan"),
            };
            let all = futures::stream::iter(streams).flatten();
            return Ok(Box::pin(RecordBatchStreamAdapter::new(Arc::clone(&self.schema), all)));
        }
        // The host batches, or the files, as DataFusion's scan hands them out: no download.
        match (&self.source, &self.rows) {
            (Some(source), _) => source.execute(partition, context),
            (None, ScanRows::Memory { partitions, .. }) => {
                host_partition_stream(partitions, partition, &self.schema, &self.columns, CACHED_SCAN_NAME)
            }
            (None, ScanRows::Files(_)) => internal_err!("{CACHED_SCAN_NAME} of files has no file scan"),
        }
    }

    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        if self.one_partition && args.partition().is_some() {
            // Its one partition is the whole table.
            let whole = StatisticsArgs::new().with_partition(None);
            return self.statistics_from_inputs(input_stats, &whole);
        }
        let mut known = self.statistics.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = known.get(&args.partition()) {
            return Ok(Arc::clone(s));
        }
        // (A table's scan was given each partition's statistics and the whole table's.)
        let s = match &self.source {
            Some(source) => source.statistics_from_inputs(input_stats, args)?,
            None => Arc::new(Statistics::new_unknown(&self.schema)),
        };
        known.insert(args.partition(), Arc::clone(&s));
        Ok(s)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

impl GpuExec for GpuCachedScanExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = Gpu::for_session(&cfg, &context.session_id())?;
        let layouts = match &self.rows {
            ScanRows::Memory { layouts, .. } => Some(layouts),
            ScanRows::Files(_) => None,
        };
        if gpu.info().ordinal != self.ordinal || layouts.is_some_and(|l| !l.cuts_by(cfg.table_cache_batch_rows)) {
            return internal_err!(
                "{CACHED_SCAN_NAME} planned for GPU {} and {} rows a batch runs on GPU {} with {}",
                self.ordinal,
                layouts.map_or(cfg.table_cache_batch_rows, |l| l.batch_rows()),
                gpu.info().ordinal,
                cfg.table_cache_batch_rows
            );
        }
        let planned = self.properties.output_partitioning().partition_count();
        if partition >= planned.max(1) {
            return internal_err!("{CACHED_SCAN_NAME} has {planned} partitions, not {partition}");
        }
        let m = |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let metrics = ScanMetrics {
            hits: m("cached_columns"),
            misses: m("uploaded_columns"),
            bytes: m("bytes_uploaded"),
            // The device bytes of the columns handed out: what a reader of every column reads once.
            scanned: m("scanned_bytes"),
            rows: MetricBuilder::new(&self.metrics).output_rows(partition),
            time: MetricBuilder::new(&self.metrics).subset_time("upload_time", partition),
        };
        let cache = TableCache::of_device(self.ordinal);
        let terms = CacheTerms { limit: cache_limit(&cfg, &gpu), pack: cfg.table_cache_compress };
        let (columns, schema) = (self.columns.clone(), Arc::clone(&self.schema));
        let who = match crate::timeline::enabled() {
            true => {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                format!("cached scan [{}] p{partition}", names.join(", "))
            }
            false => String::new(),
        };
        let (read_gpu, read_cache) = (Arc::clone(&gpu), Arc::clone(&cache));
        let load: futures::future::BoxFuture<'static, Result<Loaded>> = match &self.rows {
            ScanRows::Memory { partitions, layouts } => {
                if partitions.is_empty() {
                    return Ok(Box::pin(futures::stream::empty()));
                }
                let (partitions, layouts) = (Arc::clone(partitions), Arc::clone(layouts));
                Box::pin(blocking(move || {
                    crate::timeline::mark(&who, || "loading".into());
                    let Some(layout) = layouts.device_partition(partition, &partitions)? else {
                        return Ok(Loaded {
                            batches: Vec::new(),
                            keys: Vec::new(),
                            hits: 0,
                            misses: 0,
                            uploaded_bytes: 0,
                        });
                    };
                    let loaded = load_partition(&gpu, &cache, terms, layout, &columns, &metrics.time)?;
                    crate::timeline::mark(&who, || {
                        format!("{} columns cached, {} uploaded", loaded.hits, loaded.misses)
                    });
                    metrics.count(&loaded);
                    Ok(loaded)
                }))
            }
            // Every file's rows are partition 0's.
            ScanRows::Files(_) if partition > 0 => return Ok(Box::pin(futures::stream::empty())),
            ScanRows::Files(files) => {
                let files = Arc::clone(files);
                let batch_rows = cfg.table_cache_batch_rows.max(1);
                Box::pin(async move {
                    crate::timeline::mark(&who, || "loading".into());
                    let load = FileLoad { files: &files, gpu: &gpu, cache: &cache, terms, batch_rows };
                    let loaded = load.columns(&columns, context, &metrics.time).await?;
                    crate::timeline::mark(&who, || {
                        format!("{} columns cached, {} uploaded", loaded.hits, loaded.misses)
                    });
                    metrics.count(&loaded);
                    Ok(loaded)
                })
            }
        };
        // The batches go out one at a time, each widened from the cache's packed form as it is
        // read: a table's full-width columns are never all on the device at once for the scan.
        let hand_out = move |loaded: Result<Loaded>| match loaded {
            Ok(Loaded { batches, keys, .. }) => {
                let keys: Arc<[ColumnKey]> = keys.into();
                let (gpu, cache, schema) = (Arc::clone(&read_gpu), Arc::clone(&read_cache), Arc::clone(&schema));
                futures::stream::iter(batches.into_iter().enumerate())
                    .then(move |(chunk, batch)| {
                        let (gpu, cache, schema, keys) =
                            (Arc::clone(&gpu), Arc::clone(&cache), Arc::clone(&schema), Arc::clone(&keys));
                        blocking(move || ready_batch(&gpu, &cache, terms.limit, &schema, &keys, chunk, batch))
                    })
                    .boxed()
            }
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        };
        Ok(Box::pin(futures::stream::once(load).map(hand_out).flatten()))
    }
}

/// A scan partition's metrics.
struct ScanMetrics {
    hits: datafusion::physical_plan::metrics::Count,
    misses: datafusion::physical_plan::metrics::Count,
    bytes: datafusion::physical_plan::metrics::Count,
    scanned: datafusion::physical_plan::metrics::Count,
    rows: datafusion::physical_plan::metrics::Count,
    time: Time,
}

impl ScanMetrics {
    /// Counts what a partition's scan did.
    fn count(&self, loaded: &Loaded) {
        self.hits.add(loaded.hits);
        self.misses.add(loaded.misses);
        self.bytes.add(loaded.uploaded_bytes);
        self.rows.add(loaded.batches.iter().map(|b| b.rows).sum());
        self.scanned.add(loaded.batches.iter().map(LoadedBatch::wide_byte_size).sum());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_plan::{ExecutionPlan, displayable};

    use super::GpuCachedScanExec;
    use crate::config::GpuConfig;
    use crate::exec::cached_layouts::device_partitions;
    use crate::testing::memory_kv;

    /// A scan whose partitions are each sorted keeps them apart on the device (two sorted
    /// partitions run together are not sorted); an unsorted one merges them.
    #[test]
    fn sorted_partitions_are_not_merged_into_one_device_batch() {
        let cfg = GpuConfig::default();
        let unsorted = memory_kv(1000, 4);
        let source = unsorted.downcast_ref::<DataSourceExec>().unwrap();
        let memory = source.data_source().downcast_ref::<MemorySourceConfig>().unwrap();
        let schema = unsorted.schema();
        let key = PhysicalSortExpr::new_default(datafusion::physical_expr::expressions::col("k", &schema).unwrap());
        let sorted_memory = MemorySourceConfig::try_new(memory.partitions(), Arc::clone(&schema), None)
            .unwrap()
            .try_with_sort_information(vec![LexOrdering::new(vec![key]).unwrap()])
            .unwrap();
        let sorted: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(sorted_memory);
        let shown = |plan: &Arc<dyn ExecutionPlan>| {
            let exec: Arc<dyn ExecutionPlan> = Arc::new(GpuCachedScanExec::over(plan, &cfg).unwrap());
            displayable(exec.as_ref()).one_line().to_string()
        };
        assert!(shown(&unsorted).contains("in 1 of the partitions"), "{}", shown(&unsorted));
        assert!(shown(&sorted).contains("in 4 of the partitions"), "{}", shown(&sorted));
    }

    /// A scan whose partitions make one device batch hands the whole table out as one
    /// partition (every row, once, with the whole table's statistics); one whose partitions are
    /// sorted, cut into several device batches or already one stays as it is.
    #[tokio::test]
    async fn one_batch_scans_read_as_one_partition() {
        use datafusion::physical_plan::ExecutionPlanProperties;
        use datafusion::prelude::SessionContext;
        let cfg = GpuConfig::default();
        let plan = memory_kv(1000, 4);
        let scan = GpuCachedScanExec::over(&plan, &cfg).unwrap();
        let one: Arc<dyn ExecutionPlan> = Arc::new(scan.in_one_partition().unwrap());
        assert_eq!(one.output_partitioning().partition_count(), 1);
        assert!(displayable(one.as_ref()).one_line().to_string().contains("partitions=4 read as one"));
        let ctx = SessionContext::new();
        let all = datafusion::physical_plan::collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
        let read = datafusion::physical_plan::collect_partitioned(Arc::clone(&one), ctx.task_ctx()).await.unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(crate::testing::sorted_rows(&read[0]), crate::testing::sorted_rows(&all));
        let rows = |p: &Arc<dyn ExecutionPlan>, part| {
            let args = datafusion::physical_plan::statistics::StatisticsArgs::new().with_partition(part);
            datafusion::physical_plan::statistics::StatisticsContext::new().compute(p.as_ref(), &args).unwrap().num_rows
        };
        assert_eq!(rows(&one, Some(0)), rows(&plan, None));
        assert_eq!(rows(&one, None), rows(&plan, None));
        assert!(one.downcast_ref::<GpuCachedScanExec>().unwrap().in_one_partition().is_none(), "already one");
        let small = GpuConfig { table_cache_batch_rows: 300, ..cfg.clone() };
        assert!(GpuCachedScanExec::over(&plan, &small).unwrap().in_one_partition().is_none(), "several batches");
        assert!(GpuCachedScanExec::over(&memory_kv(1000, 1), &cfg).unwrap().in_one_partition().is_none(), "one");
    }

    /// Consecutive partitions share a device batch while their rows fit; a larger one stands
    /// alone (cut later); empty partitions join their neighbours; every partition is read once.
    #[test]
    fn device_partitions_group_consecutive_partitions_up_to_the_batch_rows() {
        assert_eq!(device_partitions(&[750, 750, 750, 750], 1000), vec![0..1, 1..2, 2..3, 3..4]);
        assert_eq!(device_partitions(&[750, 750, 750, 750], 2500), vec![0..3, 3..4]);
        assert_eq!(device_partitions(&[750, 750, 750, 750], 1 << 26), vec![0..4]);
        assert_eq!(device_partitions(&[0, 0, 1800, 0, 1800, 10], 1000), vec![0..4, 4..5, 5..6]);
        assert_eq!(device_partitions(&[0, 0], 1000), vec![0..2]);
        assert!(device_partitions(&[], 1000).is_empty());
        for (rows, batch) in [(vec![5, 1, 9, 3, 3, 3, 0, 7], 6), (vec![1; 40], 7), (vec![100, 1, 100], 50)] {
            let groups = device_partitions(&rows, batch);
            let covered: Vec<usize> = groups.iter().flat_map(|g| g.clone()).collect();
            assert_eq!(covered, (0..rows.len()).collect::<Vec<_>>(), "{rows:?}");
            for g in &groups {
                let sum: usize = rows[g.clone()].iter().sum();
                assert!(sum <= batch || g.len() == 1 || rows[g.clone()].iter().filter(|&&r| r > 0).count() == 1);
            }
        }
    }

    /// Over Parquet files, the scan's likely device bytes count packed widths from the files'
    /// statistics when the cache packs, full widths when it does not.
    #[tokio::test]
    async fn parquet_scans_are_sized_at_their_packed_widths() {
        use crate::testing::{ParquetDir, kvs_batch};
        use datafusion::prelude::SessionContext;
        let dir = ParquetDir::new("packed-size");
        dir.write("part-0.parquet", &[kvs_batch(0, 10_000)], 4_000);
        let ctx = SessionContext::new();
        let location = dir.location();
        ctx.sql(&format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{location}'")).await.unwrap();
        let mut plan = ctx.sql("SELECT k, v FROM t").await.unwrap().create_physical_plan().await.unwrap();
        while let Some(child) = plan.children().first().map(|c| Arc::clone(c)) {
            plan = child;
        }
        let scan = GpuCachedScanExec::over(&plan, &GpuConfig::default()).expect("a plain Parquet scan is cached");
        // k: 0..10,000 in 2 bytes; v: 0..96 in 1 byte.
        assert_eq!(scan.likely_device_bytes(true), 10_000 * 3);
        assert_eq!(scan.likely_device_bytes(false), 10_000 * 16);
    }
}
