//! [`GpuCachedTable`]: a `TableProvider` over host batches whose columns go to the device's table
//! cache ([`crate::columns::cache`]) when a GPU operator first reads them, and stay there for
//! later queries while the cache keeps them. It is the lazy counterpart of
//! [`super::ResidentTable`], which uploads every column when it is made and holds it: only the
//! columns queries read take device memory, and the cache may evict them (they are uploaded again
//! when next read).
//!
//! `gpu.table_cache` does the same for every in-memory table, but at the end of planning:
//! DataFusion has by then planned over the table's own scan, whose statistics it computes from
//! every batch each time a planner asks for them (about 30 ms a query over SF10's 8,192-row
//! batches). This table computes them once, when it is made, and its scan is the cached scan from
//! the start.
//!
//! A cached table has a source: the provider it replaced (`gpu_cache('t')`), or an in-memory
//! table of the batches it was made from. The source's constraints and column defaults are the
//! table's, and writes (`INSERT`, `DELETE`, `UPDATE`, `TRUNCATE`, `MERGE`) go to it: once a write
//! has run ([`CachedTableWriteExec`]), the table reads its rows from the source again and the
//! device copies of the old rows leave the cache.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Constraints, DFSchemaRef, Statistics, internal_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{MemTable, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::dml::{InsertOp, MergeIntoClause};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr, PlanProperties,
    collect_partitioned,
};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use super::cached_layouts::ScanLayouts;
use super::cached_scan::GpuCachedScanExec;
use super::{HostTable, conformed_batches, registered_rows};
use crate::columns::cache::TableCache;
use crate::columns::is_supported;
use crate::config::GpuConfig;
use crate::device::{Gpu, PinnedPool};

/// A table of host batches read through the device's table cache (see the module's text).
#[derive(Debug, Clone)]
pub struct GpuCachedTable {
    schema: SchemaRef,
    /// The rows as last read, replaced whole after a write.
    rows: Arc<RwLock<Arc<Rows>>>,
    /// Where the rows come from and writes go.
    source: Arc<dyn TableProvider>,
    /// Whether `source` is a provider this table replaced (`gpu_cache('t')`), which
    /// `gpu_uncache('t')` registers again.
    replaced: bool,
    /// The host image made for the rows, made again for the rows after a write.
    image: Arc<Mutex<Option<ImageRequest>>>,
    /// Writes to the source so far, and which of them `rows` has read (see [`Generations`]).
    generations: Arc<Generations>,
}

/// A cached table's writes and reloads, so that its rows are never older than its source's
/// after a write: each write to the source counts one up when it is planned (an in-memory
/// table's DELETE and UPDATE change the rows then) and when it has run; a reload reads the
/// count first and, once its rows are in, marks that many as read, unless a later reload
/// marked more. A scan that finds writes unread reloads first. Reloads run one at a time.
#[derive(Debug, Default)]
struct Generations {
    written: std::sync::atomic::AtomicU64,
    read: std::sync::atomic::AtomicU64,
    reloading: tokio::sync::Mutex<()>,
}

impl Generations {
    fn wrote(&self) {
        self.written.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn unread(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.read.load(SeqCst) < self.written.load(SeqCst)
    }
}

/// A [`GpuCachedTable`]'s host image: its batch rows, and whether it is page-locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ImageRequest {
    batch_rows: usize,
    pinned: bool,
}

/// A cached table's rows at one time, with what is computed from them once.
#[derive(Debug)]
struct Rows {
    partitions: Arc<Vec<Vec<RecordBatch>>>,
    /// Exact row counts, byte sizes and null counts per partition and overall, as DataFusion's
    /// in-memory table computes them.
    partition_statistics: Vec<Statistics>,
    statistics: Statistics,
    /// How its partitions are grouped and cut into device batches and their columns keyed in the
    /// cache, for the `gpu.table_cache.batch_rows` of the last scan: shared by its scans (see
    /// [`ScanLayouts`]).
    layouts: Mutex<Option<Arc<ScanLayouts>>>,
}

impl Rows {
    fn new(schema: &SchemaRef, partitions: Vec<Vec<RecordBatch>>) -> Result<Rows> {
        let partitions = conformed_batches(schema, partitions, "cached table")?;
        let HostTable { partition_statistics, statistics } = HostTable::check(schema, &partitions, "cached table")?;
        Ok(Rows { partitions: Arc::new(partitions), partition_statistics, statistics, layouts: Mutex::new(None) })
    }

    /// The layouts of its partitions read in device batches of `batch_rows` rows: the ones its
    /// earlier scans computed, unless those were for another `gpu.table_cache.batch_rows`.
    fn layouts(&self, batch_rows: usize) -> Arc<ScanLayouts> {
        let mut kept = self.layouts.lock().unwrap_or_else(|e| e.into_inner());
        match kept.as_ref() {
            Some(l) if l.cuts_by(batch_rows) => Arc::clone(l),
            _ => {
                let l = Arc::new(ScanLayouts::new(self.partitions.len(), batch_rows));
                *kept = Some(Arc::clone(&l));
                l
            }
        }
    }

    fn make_images(&self, schema: &SchemaRef, batch_rows: usize, pin: Option<(&Arc<PinnedPool>, u64)>) -> Result<()> {
        let columns: Vec<usize> =
            (0..schema.fields().len()).filter(|&c| is_supported(schema.field(c).data_type())).collect();
        self.layouts(batch_rows).make_images(&self.partitions, &columns, pin)
    }

    fn image_bytes(&self) -> (usize, usize) {
        self.layouts.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map_or((0, 0), |l| l.image_bytes())
    }
}

impl GpuCachedTable {
    /// The table of `partitions` (host batches of `schema`); nothing is uploaded yet. Its source
    /// is an in-memory table of the same batches, which takes its writes.
    pub fn try_new(schema: SchemaRef, partitions: Vec<Vec<RecordBatch>>) -> Result<Self> {
        let rows = Rows::new(&schema, partitions)?;
        // (An in-memory table has at least one partition.)
        let batches = match rows.partitions.is_empty() {
            true => vec![Vec::new()],
            false => rows.partitions.as_ref().clone(),
        };
        let source: Arc<dyn TableProvider> = Arc::new(MemTable::try_new(Arc::clone(&schema), batches)?);
        Ok(GpuCachedTable {
            schema,
            rows: Arc::new(RwLock::new(Arc::new(rows))),
            source,
            replaced: false,
            image: Arc::new(Mutex::new(None)),
            generations: Arc::new(Generations::default()),
        })
    }

    /// The rows of table `name` registered in `ctx`, read with DataFusion (in as many
    /// partitions as its scan has) and held on the host; register the result under any name.
    pub async fn from_registered(ctx: &SessionContext, name: &str) -> Result<Self> {
        let (schema, partitions) = registered_rows(ctx, name).await?;
        GpuCachedTable::try_new(schema, partitions)
    }

    /// This table as the replacement of `provider`, whose rows it holds: writes go to
    /// `provider`, and `gpu_uncache` registers it again.
    pub fn replacing(self, provider: Arc<dyn TableProvider>) -> Self {
        GpuCachedTable { source: provider, replaced: true, ..self }
    }

    /// The provider this table replaced, if it replaced one.
    pub fn replaced(&self) -> Option<&Arc<dyn TableProvider>> {
        self.replaced.then_some(&self.source)
    }

    fn current(&self) -> Arc<Rows> {
        Arc::clone(&self.rows.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn num_rows(&self) -> usize {
        self.current().partitions.iter().flatten().map(RecordBatch::num_rows).sum()
    }

    pub fn num_partitions(&self) -> usize {
        self.current().partitions.len()
    }

    /// Host bytes the table's batches hold.
    pub fn host_bytes(&self) -> usize {
        self.current().partitions.iter().flatten().map(RecordBatch::get_array_memory_size).sum()
    }

    /// This table with a host image of each of its columns that has one, for scans in device
    /// batches of `batch_rows` rows (`gpu.table_cache.batch_rows`): integer and decimal columns
    /// narrowed to their own range, string columns as row lengths and bytes
    /// ([`crate::columns::image`]). A scan that uploads a column sends its image: a first query
    /// over a cold device cache reads and sends fewer bytes. The images are made now, on several
    /// threads, and cost host memory ([`GpuCachedTable::image_bytes`]); a scan with another
    /// `batch_rows` reads the arrays. `gpu.table_cache.host_image` makes them for `gpu_cache()`
    /// and the benchmarks.
    pub fn with_host_image(self, batch_rows: usize) -> Result<Self> {
        self.current().make_images(&self.schema, batch_rows, None)?;
        *self.image.lock().unwrap_or_else(|e| e.into_inner()) = Some(ImageRequest { batch_rows, pinned: false });
        Ok(self)
    }

    /// [`GpuCachedTable::with_host_image`] in page-locked memory of `gpu`'s pool, within its
    /// `gpu.memory.pinned_limit`: an upload DMAs an image as it lies, without copying it into
    /// the staging buffers first, at the link's pinned speed. A column's image the pool has no
    /// room for stays in ordinary memory ([`GpuCachedTable::pinned_image_bytes`] tells).
    pub fn with_pinned_host_image(self, batch_rows: usize, gpu: &Gpu) -> Result<Self> {
        self.current().make_images(&self.schema, batch_rows, Some((gpu.pinned(), gpu.pinned_limit())))?;
        *self.image.lock().unwrap_or_else(|e| e.into_inner()) = Some(ImageRequest { batch_rows, pinned: true });
        Ok(self)
    }

    /// This table with its host image when `cfg` asks for one (`gpu.table_cache.host_image`),
    /// for its `gpu.table_cache.batch_rows`, pinned under `gpu.table_cache.host_image_pinned`
    /// when the session's device opens: as `gpu_cache()` and the benchmarks make it.
    pub fn with_configured_image(self, cfg: &GpuConfig) -> Result<Self> {
        if !cfg.table_cache_host_image {
            return Ok(self);
        }
        match cfg.table_cache_host_image_pinned.then(|| Gpu::for_config(cfg).ok()).flatten() {
            Some(gpu) => self.with_pinned_host_image(cfg.table_cache_batch_rows, &gpu),
            None => self.with_host_image(cfg.table_cache_batch_rows),
        }
    }

    /// Host bytes its columns' host images hold (0 without them, see
    /// [`GpuCachedTable::with_host_image`]).
    pub fn image_bytes(&self) -> usize {
        self.current().image_bytes().0
    }

    /// Of [`GpuCachedTable::image_bytes`], those in page-locked memory
    /// ([`GpuCachedTable::with_pinned_host_image`]).
    pub fn pinned_image_bytes(&self) -> usize {
        self.current().image_bytes().1
    }

    /// Reads the rows from the source again (after a write to it, in session `state`), with the
    /// host image the table had; the cache forgets the old rows' columns. Nothing to do when no
    /// write is unread.
    async fn reload(&self, state: &dyn Session, context: Arc<TaskContext>) -> Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let _one_at_a_time = self.generations.reloading.lock().await;
        let written = self.generations.written.load(SeqCst);
        if self.generations.read.load(SeqCst) >= written {
            return Ok(());
        }
        let input = scan_for_cache(&self.source, state).await?;
        let partitions = collect_for_cache(input, Arc::clone(&context)).await?;
        let schema = Arc::clone(&self.schema);
        let image = *self.image.lock().unwrap_or_else(|e| e.into_inner());
        let cfg = GpuConfig::from_options(context.session_config().options());
        // Statistics and images read every column: off the async runtime's threads.
        let rows = super::blocking(move || {
            let rows = Rows::new(&schema, partitions)?;
            if let Some(ImageRequest { batch_rows, pinned }) = image {
                match pinned.then(|| Gpu::for_config(&cfg).ok()).flatten() {
                    Some(gpu) => rows.make_images(&schema, batch_rows, Some((gpu.pinned(), gpu.pinned_limit())))?,
                    None => rows.make_images(&schema, batch_rows, None)?,
                }
            }
            Ok(rows)
        })
        .await?;
        let old = std::mem::replace(&mut *self.rows.write().unwrap_or_else(|e| e.into_inner()), Arc::new(rows));
        self.generations.read.fetch_max(written, SeqCst);
        let stale = old.layouts.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|l| l.keys());
        if let Some(keys) = stale {
            for (_, cache) in TableCache::all() {
                cache.forget(&keys);
            }
        }
        Ok(())
    }

    /// `write` (the source's plan of a write) followed by this table's reload. The callers count
    /// the write before they ask the source for its plan: an in-memory source changes its rows
    /// while planning a DELETE or an UPDATE, some of them even when the planning then fails.
    fn after_write(&self, state: &dyn Session, write: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(state) = state.as_any().downcast_ref::<SessionState>() else {
            return internal_err!("a write to a GpuCachedTable needs a DataFusion SessionState");
        };
        Ok(Arc::new(CachedTableWriteExec { write, table: self.clone(), state: Arc::new(state.clone()) }))
    }

    /// Counts a write to the source: one being planned, or one that has run.
    fn wrote(&self) {
        self.generations.wrote();
    }
}

/// The scan `gpu_cache` and a cached table's reload read `provider` with: as many partitions as
/// the session's target, in byte ranges of its files as DataFusion's planner splits a file scan
/// (a single Parquet file is otherwise one partition).
pub(crate) async fn scan_for_cache(
    provider: &Arc<dyn TableProvider>,
    state: &dyn Session,
) -> Result<Arc<dyn ExecutionPlan>> {
    let input = provider.scan(state, None, &[], None).await?;
    let config = state.config_options();
    let target = config.execution.target_partitions;
    Ok(match input.output_partitioning().partition_count() < target {
        true => input.repartitioned(target, config)?.unwrap_or(input),
        false => input,
    })
}

/// The rows of `input` (a [`scan_for_cache`]), in at least the session's target partitions
/// where they have enough batches.
pub(crate) async fn collect_for_cache(
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> Result<Vec<Vec<RecordBatch>>> {
    let target = context.session_config().target_partitions();
    Ok(spread(collect_partitioned(input, context).await?, target))
}

/// `partitions` in at least `target` partitions where they have enough batches: batches of the
/// fuller partitions dealt out in turn (a table's rows have no order a scan of it promises).
fn spread(partitions: Vec<Vec<RecordBatch>>, target: usize) -> Vec<Vec<RecordBatch>> {
    let batches: usize = partitions.iter().map(Vec::len).sum();
    if partitions.len() >= target || batches <= partitions.len() {
        return partitions;
    }
    let mut out: Vec<Vec<RecordBatch>> = vec![Vec::new(); target.min(batches)];
    let n = out.len();
    for (i, b) in partitions.into_iter().flatten().enumerate() {
        out[i % n].push(b);
    }
    out
}

#[async_trait]
impl TableProvider for GpuCachedTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn constraints(&self) -> Option<&Constraints> {
        self.source.constraints()
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.source.get_column_default(column)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // Writes to the source this table has not read yet (a reload that failed, a DELETE
        // planned but not run): read them first.
        if self.generations.unread() {
            self.reload(state, state.task_ctx()).await?;
        }
        let rows = self.current();
        let columns = projection.cloned().unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        // A column without a device layout is read by DataFusion's own scan.
        if columns.iter().any(|&c| self.schema.fields().get(c).is_none_or(|f| !is_supported(f.data_type()))) {
            return MemorySourceConfig::try_new_exec(&rows.partitions, Arc::clone(&self.schema), Some(columns))
                .map(|e| e as Arc<dyn ExecutionPlan>);
        }
        let schema = Arc::new(self.schema.project(&columns)?);
        let mut statistics: HashMap<Option<usize>, Arc<Statistics>> = rows
            .partition_statistics
            .iter()
            .enumerate()
            .map(|(p, s)| (Some(p), Arc::new(s.clone().project(Some(&columns)))))
            .collect();
        statistics.insert(None, Arc::new(rows.statistics.clone().project(Some(&columns))));
        let cfg = GpuConfig::from_options(state.config_options());
        let layouts = rows.layouts(cfg.table_cache_batch_rows);
        Ok(Arc::new(GpuCachedScanExec::of_table(
            Arc::clone(&rows.partitions),
            layouts,
            columns,
            schema,
            statistics,
            &cfg,
        )))
    }

    fn statistics(&self) -> Option<Statistics> {
        Some(self.current().statistics.clone())
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.wrote();
        let write = self.source.insert_into(state, input, insert_op).await?;
        self.after_write(state, write)
    }

    async fn delete_from(&self, state: &dyn Session, filters: Vec<Expr>) -> Result<Arc<dyn ExecutionPlan>> {
        self.wrote();
        let write = self.source.delete_from(state, filters).await?;
        self.after_write(state, write)
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.wrote();
        let write = self.source.update(state, assignments, filters).await?;
        self.after_write(state, write)
    }

    async fn truncate(&self, state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        self.wrote();
        let write = self.source.truncate(state).await?;
        self.after_write(state, write)
    }

    async fn merge_into(
        &self,
        state: &dyn Session,
        source: Arc<dyn ExecutionPlan>,
        merge_schema: DFSchemaRef,
        on: Expr,
        clauses: Vec<MergeIntoClause>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.wrote();
        let write = self.source.merge_into(state, source, merge_schema, on, clauses).await?;
        self.after_write(state, write)
    }
}

/// A write to a [`GpuCachedTable`]'s source (its child, the source's own plan of the write),
/// after which the table reads its rows from the source again. It hands on the write's answer
/// (the count of rows written) once the table has them.
#[derive(Debug)]
pub struct CachedTableWriteExec {
    write: Arc<dyn ExecutionPlan>,
    table: GpuCachedTable,
    /// The session that planned the write, whose settings the reload's scan of the source uses.
    state: Arc<SessionState>,
}

impl DisplayAs for CachedTableWriteExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match t {
            DisplayFormatType::TreeRender => write!(f, "reload=after the write"),
            _ => write!(f, "CachedTableWriteExec: the cached table reads its rows again after the write"),
        }
    }
}

impl ExecutionPlan for CachedTableWriteExec {
    fn name(&self) -> &str {
        "CachedTableWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.write.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.write]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let write = super::single_child(children, "CachedTableWriteExec")?;
        Ok(Arc::new(CachedTableWriteExec { write, table: self.table.clone(), state: Arc::clone(&self.state) }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition >= self.write.output_partitioning().partition_count().max(1) {
            return internal_err!("CachedTableWriteExec has no partition {partition}");
        }
        let written = self.write.execute(partition, Arc::clone(&context))?;
        let (table, state) = (self.table.clone(), Arc::clone(&self.state));
        let schema = self.write.schema();
        let answer = futures::stream::once(async move {
            let batches: Result<Vec<RecordBatch>> = written.collect::<Vec<_>>().await.into_iter().collect();
            // Counted whether the write succeeded or not: it may have changed some rows.
            table.wrote();
            let batches = batches?;
            table.reload(state.as_ref(), context).await?;
            Ok::<_, DataFusionError>(futures::stream::iter(batches.into_iter().map(Ok)))
        })
        .map(|s| match s {
            Ok(s) => s.boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, answer)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::session::gpu_session_context;

    async fn run(ctx: &SessionContext, sql: &str) -> Result<String> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(pretty_format_batches(&batches)?.to_string())
    }

    /// The rows of `sql` as lines, sorted.
    async fn lines(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let text = run(ctx, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut rows: Vec<String> = text.lines().filter(|l| l.starts_with("| ")).skip(1).map(str::to_string).collect();
        rows.sort();
        rows
    }

    /// A `gpu_cache('t')` table takes what its source takes: `INSERT` (also of nullable batches
    /// into a NOT NULL column), `DELETE`, `UPDATE`, and a `GROUP BY` resting on the source's
    /// primary key; after each write it answers as the source does, and `gpu_uncache` restores a
    /// source holding the writes. On a machine without a GPU this checks the table itself (its
    /// scans are read by DataFusion's operators).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gpu_cache_tables_take_their_sources_writes() {
        // On a GPU machine the table's columns go to the device's cache, which other tests count.
        let _l = crate::testing::gpu_lock();
        let ctx = gpu_session_context(SessionConfig::new().with_target_partitions(2));
        let plain = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let setup = [
            "CREATE TABLE t (k INT NOT NULL PRIMARY KEY, v VARCHAR, d DECIMAL(12, 2))",
            "INSERT INTO t VALUES (1, 'a', 1.50), (2, 'b', NULL), (3, NULL, 3.25)",
        ];
        for c in [&ctx, &plain] {
            for sql in setup {
                run(c, sql).await.unwrap();
            }
        }
        let status = run(&ctx, "SELECT status FROM gpu_cache('t')").await.unwrap();
        assert!(status.contains("cached"), "{status}");
        let provider = ctx.table_provider("t").await.unwrap();
        assert!(provider.downcast_ref::<GpuCachedTable>().is_some(), "t is not cached");
        assert!(provider.constraints().is_some_and(|c| !c.is_empty()), "the primary key was lost");
        let writes = [
            // Nullable batches (k + 10 may be NULL as DataFusion types it) into a NOT NULL column.
            "INSERT INTO t SELECT k + 10, v, d FROM t",
            "DELETE FROM t WHERE k = 2",
            "UPDATE t SET v = 'z', d = d + 1 WHERE k > 10",
            "INSERT INTO t VALUES (20, 'é', 0.01)",
        ];
        let check = [
            "SELECT * FROM t",
            "SELECT v, count(*), sum(d) FROM t GROUP BY v",
            // Plans only with the primary key's functional dependency (v from k).
            "SELECT k, v FROM t GROUP BY k",
        ];
        for w in writes {
            let (got, want) = (lines(&ctx, w).await, lines(&plain, w).await);
            assert_eq!(got, want, "{w}: the counts differ");
            let provider = ctx.table_provider("t").await.unwrap();
            assert!(provider.downcast_ref::<GpuCachedTable>().is_some(), "{w}: t is no longer cached");
            for q in check {
                assert_eq!(lines(&ctx, q).await, lines(&plain, q).await, "after {w}: {q}");
            }
        }
        // An in-memory source deletes while the DELETE is planned: planned and never run, it
        // still changed the rows, and the table reads them again at its next scan.
        for c in [&ctx, &plain] {
            c.sql("DELETE FROM t WHERE k = 3").await.unwrap().create_physical_plan().await.unwrap();
        }
        for q in check {
            assert_eq!(lines(&ctx, q).await, lines(&plain, q).await, "after a DELETE planned only: {q}");
        }
        // An in-memory source updates partition by partition while the UPDATE is planned: one
        // that fails in one partition (the cast of 'x') has changed the other, and the cached
        // table reads that.
        for c in [&ctx, &plain] {
            let make = "CREATE TABLE u AS SELECT value AS k, CASE WHEN value = 9999 THEN 'x' ELSE '1' END AS v, \
                        0 AS w FROM range(0, 10000)";
            run(c, make).await.unwrap();
        }
        run(&ctx, "SELECT * FROM gpu_cache('u')").await.unwrap();
        let failing = "UPDATE u SET w = CAST(v AS INT)";
        for c in [&ctx, &plain] {
            assert!(run(c, failing).await.is_err(), "{failing} did not fail");
        }
        let q = "SELECT sum(w), count(*) FROM u";
        assert_eq!(lines(&ctx, q).await, lines(&plain, q).await, "after a failed UPDATE: {q}");
        // An empty table caches too, and takes rows.
        run(&ctx, "CREATE TABLE e (x INT)").await.unwrap();
        run(&ctx, "SELECT * FROM gpu_cache('e')").await.unwrap();
        run(&ctx, "INSERT INTO e VALUES (4)").await.unwrap();
        assert_eq!(lines(&ctx, "SELECT x FROM e").await, lines(&plain, "SELECT 4 AS x").await);
        let back = run(&ctx, "SELECT status FROM gpu_uncache('t')").await.unwrap();
        assert!(back.contains("restored"), "{back}");
        for q in check {
            assert_eq!(lines(&ctx, q).await, lines(&plain, q).await, "after gpu_uncache: {q}");
        }
    }

    /// A session whose home device is the first of `gpu.devices`, not `gpu.device`, plans its
    /// cached scans for that device.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cached_scans_are_planned_for_the_home_device() {
        // On a GPU machine the table's columns go to the device's cache, which other tests count.
        let _l = crate::testing::gpu_lock();
        use datafusion::arrow::array::Int64Array;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::physical_plan::displayable;
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let cfg = GpuConfig { devices: "1,0".parse().unwrap(), ..GpuConfig::default() };
        assert_eq!(cfg.home_device(), 1);
        let ctx = gpu_session_context(SessionConfig::new().with_option_extension(cfg));
        ctx.register_table("t", Arc::new(GpuCachedTable::try_new(schema, vec![vec![batch]]).unwrap())).unwrap();
        let plan = ctx.sql("SELECT x FROM t").await.unwrap().create_physical_plan().await.unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert!(shown.contains("table cache of GPU 1"), "{shown}");
    }

    /// A table made from batches takes writes into an in-memory table of them; a batch whose
    /// types differ from the table's is refused with a plan error naming both schemas.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tables_of_batches_take_writes_and_refuse_other_types() {
        // On a GPU machine the table's columns go to the device's cache, which other tests count.
        let _l = crate::testing::gpu_lock();
        use datafusion::arrow::array::{Int32Array, Int64Array};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let nullable = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(Arc::clone(&nullable), vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap();
        let table = GpuCachedTable::try_new(Arc::clone(&schema), vec![vec![batch]]).expect("nullable batches fit");
        let ctx = gpu_session_context(SessionConfig::new());
        ctx.register_table("t", Arc::new(table)).unwrap();
        run(&ctx, "INSERT INTO t VALUES (3)").await.unwrap();
        let sum = ctx.sql("SELECT sum(x) FROM t").await.unwrap().collect().await.unwrap();
        let sum = datafusion::arrow::array::AsArray::as_primitive::<datafusion::arrow::datatypes::Int64Type>(
            sum[0].column(0).as_ref(),
        )
        .value(0);
        assert_eq!(sum, 6);
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)]));
        let wrong = RecordBatch::try_new(other, vec![Arc::new(Int32Array::from(vec![1]))]).unwrap();
        let err = GpuCachedTable::try_new(schema, vec![vec![wrong]]).unwrap_err();
        assert!(matches!(err, DataFusionError::Plan(_)) && err.to_string().contains("types differ"), "{err}");
    }
}
