//! Benchmark tables: generated (TPC-H through `tpchgen-arrow`, SSB by [`super::ssb`]) in memory or
//! straight into Parquet files, written to and read back from Parquet, and registered with a
//! session as `MemTable`s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory, compute_leaves};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use super::Suite;
use datafusion_gpu::config::GpuConfig;
use datafusion_gpu::device::Gpu;
use datafusion_gpu::exec::resident::device_batch_groups;
use datafusion_gpu::{GpuCachedTable, ResidentTable};

/// One table: its schema and its batches, split into partitions.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: &'static str,
    pub schema: SchemaRef,
    pub partitions: Vec<Vec<RecordBatch>>,
}

impl Table {
    pub fn num_rows(&self) -> usize {
        self.partitions.iter().flatten().map(|b| b.num_rows()).sum()
    }

    pub fn memory_size(&self) -> usize {
        self.partitions.iter().flatten().map(|b| b.get_array_memory_size()).sum()
    }

    pub fn mem_table(&self) -> Result<Arc<MemTable>> {
        Ok(Arc::new(MemTable::try_new(Arc::clone(&self.schema), self.partitions.clone())?))
    }
}

/// Progress bars on standard error, one per table (hidden when standard error is not a terminal).
pub struct Progresses {
    multi: MultiProgress,
}

impl Progresses {
    pub fn new(visible: bool) -> Progresses {
        let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        Progresses { multi: MultiProgress::with_draw_target(target) }
    }

    /// A bar for `name`, of about `rows` rows.
    pub fn table(&self, name: &str, rows: u64) -> Progress {
        let bar = self.multi.add(ProgressBar::new(rows.max(1)));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {human_pos:>12}/{human_len:12} rows {elapsed:>4}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(name.to_string());
        Progress { bar }
    }
}

/// One table's progress bar; finished when dropped.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub fn inc(&self, rows: u64) {
        // Estimated lengths (lines per order) may be short: grow rather than overflow.
        if self.bar.position() + rows > self.bar.length().unwrap_or(0) {
            self.bar.set_length(self.bar.position() + rows);
        }
        self.bar.inc(rows);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.set_length(self.bar.position());
        self.bar.finish();
    }
}

/// Rows per generated part of a TPC-H table (each part is one `tpchgen` generator, run in parallel).
const TPCH_PART_ROWS: i64 = 500_000;

/// Batches of one generator part.
type PartBatches =
    Box<dyn Iterator<Item = std::result::Result<RecordBatch, datafusion::arrow::error::ArrowError>> + Send>;

/// How one TPC-H table is generated: `part_count` generator parts, `make(part, part_count)` giving
/// part `part`'s batches (parts count from 1), of about `rows` rows in all.
struct TpchTable {
    name: &'static str,
    schema: SchemaRef,
    rows: i64,
    part_count: i32,
    make: Box<dyn Fn(i32, i32) -> PartBatches + Sync + Send>,
}

impl TpchTable {
    fn new<I>(
        name: &'static str,
        schema: SchemaRef,
        rows: i64,
        make: impl Fn(i32, i32) -> I + Sync + Send + 'static,
    ) -> Self
    where
        I: Iterator<Item = std::result::Result<RecordBatch, datafusion::arrow::error::ArrowError>> + Send + 'static,
    {
        let part_count = (rows / TPCH_PART_ROWS).max(1) as i32;
        TpchTable { name, schema, rows, part_count, make: Box::new(move |i, n| Box::new(make(i, n)) as PartBatches) }
    }

    /// Part `part` (from 1) of its `part_count`.
    fn part(&self, part: i32) -> Result<Vec<RecordBatch>> {
        (self.make)(part, self.part_count).map(|b| b.map_err(Into::into)).collect()
    }

    /// Parts `parts` generated in parallel, each one's batches in order, counted on `bar`.
    fn parts(&self, parts: &[i32], bar: &Progress) -> Result<Vec<Vec<RecordBatch>>> {
        parts
            .par_iter()
            .map(|&part| {
                let batches = self.part(part)?;
                bar.inc(batches.iter().map(|b| b.num_rows() as u64).sum());
                Ok(batches)
            })
            .collect()
    }

    /// The table as [`write_generated`] writes it.
    fn as_parts(&self) -> GeneratedParts<'_> {
        GeneratedParts {
            name: self.name,
            schema: Arc::clone(&self.schema),
            rows: self.rows as u64,
            parts: self.part_count as usize,
            make: Box::new(move |i| self.part(i as i32 + 1)),
        }
    }

    /// The whole table in memory, its parts dealt to `partitions` partitions.
    fn generate(&self, partitions: usize, progress: &Progresses) -> Result<Table> {
        let bar = progress.table(self.name, self.rows as u64);
        let parts: Vec<i32> = (1..=self.part_count).collect();
        let parts = self.parts(&parts, &bar)?;
        Ok(Table { name: self.name, schema: Arc::clone(&self.schema), partitions: deal(parts, partitions) })
    }
}

/// Parts dealt to `partitions` partitions in order.
pub(super) fn deal(parts: Vec<Vec<RecordBatch>>, partitions: usize) -> Vec<Vec<RecordBatch>> {
    let mut out = vec![Vec::new(); partitions.max(1)];
    let n = out.len();
    for (i, part) in parts.into_iter().enumerate() {
        out[i % n].extend(part);
    }
    out
}

/// How the eight TPC-H tables at scale factor `sf` are generated by `tpchgen` (dbgen's data
/// exactly).
fn tpch_tables(sf: f64) -> Vec<TpchTable> {
    use tpchgen::generators::*;
    use tpchgen_arrow::*;
    let rows = |base: f64| ((base * sf) as i64).max(1);
    const BATCH: usize = 8192;
    let orders = rows(1_500_000.0);
    vec![
        TpchTable::new("nation", NationArrow::schema_ref(), 25, move |i, n| {
            NationArrow::new(NationGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("region", RegionArrow::schema_ref(), 5, move |i, n| {
            RegionArrow::new(RegionGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("supplier", SupplierArrow::schema_ref(), rows(10_000.0), move |i, n| {
            SupplierArrow::new(SupplierGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("customer", CustomerArrow::schema_ref(), rows(150_000.0), move |i, n| {
            CustomerArrow::new(CustomerGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("part", PartArrow::schema_ref(), rows(200_000.0), move |i, n| {
            PartArrow::new(PartGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("partsupp", PartSuppArrow::schema_ref(), rows(800_000.0), move |i, n| {
            PartSuppArrow::new(PartSuppGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        TpchTable::new("orders", OrderArrow::schema_ref(), orders, move |i, n| {
            OrderArrow::new(OrderGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
        // Lineitem is generated by orders (1 to 7 lines each, about 4): its bar and part count
        // follow the lines.
        TpchTable::new("lineitem", LineItemArrow::schema_ref(), orders * 4, move |i, n| {
            LineItemArrow::new(LineItemGenerator::new(sf, i, n)).with_batch_size(BATCH)
        }),
    ]
}

/// The eight TPC-H tables at scale factor `sf`, in memory.
fn generate_tpch(sf: f64, partitions: usize, progress: &Progresses) -> Result<Vec<Table>> {
    tpch_tables(sf).iter().map(|t| t.generate(partitions, progress)).collect()
}

/// The tables of `suite` at `sf`, generated in memory.
pub fn generate(suite: Suite, sf: f64, seed: u64, partitions: usize, progress: &Progresses) -> Result<Vec<Table>> {
    if !(sf > 0.0 && sf.is_finite()) {
        return Err(DataFusionError::Configuration(format!("the scale factor must be positive, not {sf}")));
    }
    match suite {
        Suite::Tpch => generate_tpch(sf, partitions, progress),
        Suite::Ssb => super::ssb::generate(sf, seed, partitions, progress),
    }
}

/// The folder of `suite`'s data at `sf` under `root`, e.g. `root/tpch-sf10`.
pub fn data_dir(root: &Path, suite: Suite, sf: f64) -> PathBuf {
    root.join(format!("{}-sf{sf}", suite.name()))
}

/// Rows of a row group of the written Parquet files.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// Writes each table to `dir/<table>.parquet` (ZSTD, one row group per 1M rows), the row groups
/// of a table encoded on several threads ([`write_table`]).
pub fn write_parquet(dir: &Path, tables: &[Table]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| DataFusionError::Execution(format!("cannot create the data folder {}: {e}", dir.display())))?;
    tables.par_iter().try_for_each(|t| {
        let path = dir.join(format!("{}.parquet", t.name));
        let tmp = dir.join(format!(".{}.parquet.tmp", t.name));
        let file = std::fs::File::create(&tmp)
            .map_err(|e| DataFusionError::Execution(format!("cannot write {}: {e}", tmp.display())))?;
        write_table(file, t, ROW_GROUP_ROWS)?;
        // Renamed into place last, so a half-written folder is never taken for data.
        std::fs::rename(&tmp, &path)
            .map_err(|e| DataFusionError::Execution(format!("cannot move {} into place: {e}", path.display())))
    })
}

/// Generates the tables of `suite` at `sf` into `dir/<table>.parquet` as [`write_parquet`]
/// writes them; returns each table's name and rows. TPC-H's tables and SSB's `lineorder` are
/// written as they are generated, a wave of parts (one a thread) at a time, so the host holds a
/// few parts, not the table: SF100 does not fit the memory of a 128 GiB host otherwise. SSB's
/// other tables (a few million rows at SF100) are generated in memory first.
pub fn generate_parquet(
    dir: &Path,
    suite: Suite,
    sf: f64,
    seed: u64,
    partitions: usize,
    progress: &Progresses,
) -> Result<Vec<(&'static str, usize)>> {
    if !(sf > 0.0 && sf.is_finite()) {
        return Err(DataFusionError::Configuration(format!("the scale factor must be positive, not {sf}")));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| DataFusionError::Execution(format!("cannot create the data folder {}: {e}", dir.display())))?;
    let wave = rayon::current_num_threads().max(1);
    let write = |parts: &GeneratedParts| -> Result<(&'static str, usize)> {
        let path = dir.join(format!("{}.parquet", parts.name));
        let tmp = dir.join(format!(".{}.parquet.tmp", parts.name));
        let file = std::fs::File::create(&tmp)
            .map_err(|e| DataFusionError::Execution(format!("cannot write {}: {e}", tmp.display())))?;
        let rows = write_generated(file, parts, ROW_GROUP_ROWS, wave, progress)?;
        // Renamed into place last, so a half-written folder is never taken for data.
        std::fs::rename(&tmp, &path)
            .map_err(|e| DataFusionError::Execution(format!("cannot move {} into place: {e}", path.display())))?;
        Ok((parts.name, rows))
    };
    match suite {
        Suite::Tpch => tpch_tables(sf).iter().map(|t| write(&t.as_parts())).collect(),
        Suite::Ssb => {
            let dimensions = super::ssb::generate_dimensions(sf, seed, partitions, progress)?;
            write_parquet(dir, &dimensions)?;
            let mut out: Vec<(&'static str, usize)> = dimensions.iter().map(|t| (t.name, t.num_rows())).collect();
            let sizes = super::ssb::SsbSizes::new(sf);
            let schema = super::ssb::lineorder_schema();
            let make = |c: usize| Ok(vec![super::ssb::lineorder_chunk(&sizes, seed, c, &schema)?]);
            out.push(write(&GeneratedParts {
                name: "lineorder",
                schema: Arc::clone(&schema),
                rows: super::ssb::lineorder_rows_estimate(&sizes) as u64,
                parts: super::ssb::lineorder_chunks(&sizes),
                make: Box::new(make),
            })?);
            Ok(out)
        }
    }
}

/// A table generated part by part: `make(i)` gives part `i` of `parts` (from 0), of about `rows`
/// rows in all.
struct GeneratedParts<'a> {
    name: &'static str,
    schema: SchemaRef,
    rows: u64,
    parts: usize,
    make: Box<dyn Fn(usize) -> Result<Vec<RecordBatch>> + Sync + 'a>,
}

/// Writes `table` to `file` as it is generated, `wave` parts at once, in part order, in row
/// groups of `group_rows` rows (the last of each wave shorter), encoded on several threads;
/// returns its rows.
fn write_generated(
    file: std::fs::File,
    table: &GeneratedParts,
    group_rows: usize,
    wave: usize,
    progress: &Progresses,
) -> Result<usize> {
    let (mut writer, factory) =
        ArrowWriter::try_new(file, Arc::clone(&table.schema), Some(parquet_properties(group_rows)?))?
            .into_serialized_writer()?;
    let bar = progress.table(table.name, table.rows);
    let parts: Vec<usize> = (0..table.parts).collect();
    let (mut next_group, mut rows) = (0usize, 0usize);
    for wave_parts in parts.chunks(wave.max(1)) {
        let made: Vec<Vec<RecordBatch>> = wave_parts
            .par_iter()
            .map(|&part| {
                let batches = (table.make)(part)?;
                bar.inc(batches.iter().map(|b| b.num_rows() as u64).sum());
                Ok(batches)
            })
            .collect::<Result<_>>()?;
        let batches: Vec<RecordBatch> = made.into_iter().flatten().collect();
        rows += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
        let groups = device_batch_groups(&batches, group_rows);
        drop(batches);
        let encoded: Vec<Vec<ArrowColumnChunk>> = groups
            .par_iter()
            .enumerate()
            .map(|(g, batches)| encode_row_group(&factory, &table.schema, table.name, next_group + g, batches))
            .collect::<Result<_>>()?;
        next_group += groups.len();
        drop(groups);
        for columns in encoded {
            let mut group = writer.next_row_group()?;
            for column in columns {
                column.append_to_row_group(&mut group)?;
            }
            group.close()?;
        }
    }
    writer.close()?;
    Ok(rows)
}

/// The written files' properties: ZSTD level 1, row groups of at most `group_rows` rows.
fn parquet_properties(group_rows: usize) -> Result<WriterProperties> {
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1)?))
        .set_max_row_group_row_count(Some(group_rows))
        .build())
}

/// Row group `index` of a file of `schema` (table `name`), holding `batches`, encoded.
fn encode_row_group(
    factory: &ArrowRowGroupWriterFactory,
    schema: &SchemaRef,
    name: &str,
    index: usize,
    batches: &[RecordBatch],
) -> Result<Vec<ArrowColumnChunk>> {
    let mut writers = factory.create_column_writers(index)?;
    for b in batches {
        // A batch's leaves, field by field, are the writers' columns in order (one each for
        // flat columns).
        let mut next = writers.iter_mut();
        for (field, column) in schema.fields().iter().zip(b.columns()) {
            for leaf in compute_leaves(field, column)? {
                let writer = next
                    .next()
                    .ok_or_else(|| DataFusionError::Internal(format!("{name}: more leaf columns than writers")))?;
                writer.write(&leaf)?;
            }
        }
    }
    writers.into_iter().map(|w| w.close()).collect::<std::result::Result<_, _>>().map_err(Into::into)
}

/// Writes `table` to `file` in row groups of `group_rows` rows (ZSTD level 1). The row groups are
/// encoded in waves of one per thread, all at once, and written in order as each wave ends: an
/// `ArrowWriter` encodes on its caller's thread alone, and SF30's `lineitem` took about three
/// minutes that way, the other tables long done.
fn write_table(file: std::fs::File, table: &Table, group_rows: usize) -> Result<()> {
    // The ArrowWriter stores the Arrow schema in the file, as it always does, and hands over
    // its lower-level writers.
    let (mut writer, factory) =
        ArrowWriter::try_new(file, Arc::clone(&table.schema), Some(parquet_properties(group_rows)?))?
            .into_serialized_writer()?;
    // (Cut as a cached table's device batches are: a batch that spans two groups is sliced.)
    let batches: Vec<RecordBatch> = table.partitions.iter().flatten().cloned().collect();
    let groups = device_batch_groups(&batches, group_rows);
    let encode = |(index, batches): (usize, &Vec<RecordBatch>)| {
        encode_row_group(&factory, &table.schema, table.name, index, batches)
    };
    let wave = rayon::current_num_threads().max(1);
    let groups: Vec<(usize, &Vec<RecordBatch>)> = groups.iter().enumerate().collect();
    for chunk in groups.chunks(wave) {
        let encoded: Vec<Vec<ArrowColumnChunk>> = chunk.par_iter().map(|&g| encode(g)).collect::<Result<_>>()?;
        for columns in encoded {
            let mut group = writer.next_row_group()?;
            for column in columns {
                column.append_to_row_group(&mut group)?;
            }
            group.close()?;
        }
    }
    writer.close()?;
    Ok(())
}

/// `dir/<table>.parquet`, as the text DataFusion's readers take.
fn parquet_path(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(format!("{name}.parquet"));
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| DataFusionError::Configuration(format!("the data path {} is not valid UTF-8", path.display())))
}

/// Registers `dir/<table>.parquet` of every table of `suite` in `ctx` as a Parquet table (read
/// where the query runs: a distributed session's workers read the files themselves).
pub async fn register_parquet(ctx: &SessionContext, dir: &Path, suite: Suite) -> Result<()> {
    for name in suite.tables() {
        ctx.register_parquet(*name, parquet_path(dir, name)?, ParquetReadOptions::default()).await?;
    }
    Ok(())
}

/// Each table of `suite` under `dir` as its Parquet footer gives it: name, rows and the file's
/// bytes on disk.
pub fn parquet_tables(dir: &Path, suite: Suite) -> Result<Vec<(String, usize, usize)>> {
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    suite
        .tables()
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.parquet"));
            let cannot = |e: &dyn std::fmt::Display| {
                DataFusionError::Execution(format!("cannot read the footer of {}: {e}", path.display()))
            };
            let file = std::fs::File::open(&path).map_err(|e| cannot(&e))?;
            let bytes = file.metadata().map_err(|e| cannot(&e))?.len() as usize;
            let reader = SerializedFileReader::new(file).map_err(|e| cannot(&e))?;
            Ok((name.to_string(), reader.metadata().file_metadata().num_rows() as usize, bytes))
        })
        .collect()
}

/// Whether `dir/<table>.parquet` exists for every table of `suite`.
pub fn has_parquet(dir: &Path, suite: Suite) -> bool {
    suite.tables().iter().all(|n| dir.join(format!("{n}.parquet")).is_file())
}

/// Reads `dir/<table>.parquet` for every table of `suite` into memory, or `None` if any is missing.
pub async fn read_parquet(dir: &Path, suite: Suite, partitions: usize) -> Result<Option<Vec<Table>>> {
    let names = suite.tables();
    if !has_parquet(dir, suite) {
        return Ok(None);
    }
    let ctx = SessionContext::new_with_config(
        datafusion::prelude::SessionConfig::new().with_target_partitions(partitions.max(1)),
    );
    let mut out = Vec::new();
    for name in names {
        let df = ctx.read_parquet(parquet_path(dir, name)?, ParquetReadOptions::default()).await?;
        let schema = Arc::clone(df.schema().inner());
        let partitions = df.collect_partitioned().await?;
        out.push(Table { name, schema, partitions });
    }
    Ok(Some(out))
}

/// Registers every table with `ctx` (the same in-memory batches, shared).
pub fn register(ctx: &SessionContext, tables: &[Table]) -> Result<()> {
    for t in tables {
        ctx.register_table(t.name, t.mem_table()?)?;
    }
    Ok(())
}

/// Registers `tables` in `ctx` as `GpuCachedTable`s over the same host batches: their columns go
/// to the device's table cache when GPU operators first read them. Under the session's
/// `gpu.table_cache.host_image` each is made with its host image, as `gpu_cache()` makes it; the
/// host bytes the images hold, and of them those in page-locked memory.
pub fn register_cached(ctx: &SessionContext, tables: &[Table]) -> Result<(usize, usize)> {
    let cfg = GpuConfig::from_options(ctx.state().config().options());
    let (mut image_bytes, mut pinned_bytes) = (0, 0);
    for t in tables {
        let table =
            GpuCachedTable::try_new(Arc::clone(&t.schema), t.partitions.clone())?.with_configured_image(&cfg)?;
        image_bytes += table.image_bytes();
        pinned_bytes += table.pinned_image_bytes();
        ctx.register_table(t.name, Arc::new(table))?;
    }
    Ok((image_bytes, pinned_bytes))
}

/// Registers `tables` in `ctx` as tables resident in device memory (`ResidentTable`) on the
/// session's GPU, in device batches of its `gpu.batch_rows` rows; the device bytes they hold.
pub fn register_resident(ctx: &SessionContext, tables: &[Table]) -> Result<usize> {
    let state = ctx.state();
    let cfg = GpuConfig::from_options(state.config().options());
    let gpu = Gpu::for_session(&cfg, &ctx.session_id())?;
    let mut bytes = 0;
    for t in tables {
        let resident = ResidentTable::try_new(Arc::clone(&gpu), Arc::clone(&t.schema), &t.partitions, cfg.batch_rows)?;
        bytes += resident.device_bytes();
        ctx.register_table(t.name, Arc::new(resident))?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::compute::concat_batches;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;

    /// Tables written in row groups encoded on several threads read back as they were: the same
    /// rows in order, the same Arrow schema (string views, decimals and dates included), and
    /// row groups of the size asked for.
    #[test]
    fn tables_written_in_parallel_row_groups_read_back_the_same() {
        let tables = generate(Suite::Tpch, 0.01, 1, 3, &Progresses::new(false)).unwrap();
        let dir = std::env::temp_dir().join(format!("dfg-parquet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for t in &tables {
            let path = dir.join(format!("{}.parquet", t.name));
            write_table(std::fs::File::create(&path).unwrap(), t, 7000).unwrap();
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
            let groups: Vec<i64> = reader.metadata().row_groups().iter().map(|g| g.num_rows()).collect();
            let rows = t.num_rows() as i64;
            assert_eq!(groups.len() as i64, (rows + 6999) / 7000, "{}: {groups:?}", t.name);
            assert!(groups.iter().rev().skip(1).all(|&r| r == 7000), "{}: {groups:?}", t.name);
            assert_eq!(reader.schema(), &t.schema, "{}", t.name);
            let read: Vec<RecordBatch> = reader.build().unwrap().collect::<std::result::Result<_, _>>().unwrap();
            let want: Vec<RecordBatch> = t.partitions.iter().flatten().cloned().collect();
            assert_eq!(
                concat_batches(&t.schema, &read).unwrap(),
                concat_batches(&t.schema, &want).unwrap(),
                "{}",
                t.name
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Tables generated straight into Parquet files, in waves of parts, hold the rows generated
    /// in memory, in part order, in row groups of the size asked for (the last of a wave shorter):
    /// at SF 0.35, `lineitem` has 4 parts, written in 2 waves.
    #[test]
    fn tables_generated_into_parquet_hold_the_generated_rows() {
        let dir = std::env::temp_dir().join(format!("dfg-generated-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let progress = Progresses::new(false);
        for t in tpch_tables(0.35) {
            let path = dir.join(format!("{}.parquet", t.name));
            let rows =
                write_generated(std::fs::File::create(&path).unwrap(), &t.as_parts(), 20_000, 2, &progress).unwrap();
            let want = t.generate(1, &progress).unwrap();
            assert_eq!(rows, want.num_rows(), "{}", t.name);
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
            assert!(reader.metadata().row_groups().iter().all(|g| g.num_rows() <= 20_000), "{}", t.name);
            assert_eq!(reader.schema(), &t.schema, "{}", t.name);
            let read: Vec<RecordBatch> = reader.build().unwrap().collect::<std::result::Result<_, _>>().unwrap();
            let want: Vec<RecordBatch> = want.partitions.iter().flatten().cloned().collect();
            assert_eq!(
                concat_batches(&t.schema, &read).unwrap(),
                concat_batches(&t.schema, &want).unwrap(),
                "{}",
                t.name
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// SSB's `lineorder` generated straight into Parquet, two chunks a wave, holds the rows the
    /// in-memory generator makes, in chunk order (SF 0.2: 5 chunks).
    #[test]
    fn ssb_lineorder_generated_into_parquet_holds_the_generated_rows() {
        let dir = std::env::temp_dir().join(format!("dfg-generated-ssb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let progress = Progresses::new(false);
        let sizes = super::super::ssb::SsbSizes::new(0.2);
        let schema = super::super::ssb::lineorder_schema();
        let parts = GeneratedParts {
            name: "lineorder",
            schema: Arc::clone(&schema),
            rows: sizes.orders as u64 * 4,
            parts: super::super::ssb::lineorder_chunks(&sizes),
            make: Box::new(|c| Ok(vec![super::super::ssb::lineorder_chunk(&sizes, 7, c, &schema)?])),
        };
        assert!(parts.parts >= 4, "{} chunks", parts.parts);
        let path = dir.join("lineorder.parquet");
        let rows = write_generated(std::fs::File::create(&path).unwrap(), &parts, 100_000, 2, &progress).unwrap();
        let tables = generate(Suite::Ssb, 0.2, 7, 1, &progress).unwrap();
        let want = tables.iter().find(|t| t.name == "lineorder").unwrap();
        assert_eq!(rows, want.num_rows());
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
        let read: Vec<RecordBatch> = reader.build().unwrap().collect::<std::result::Result<_, _>>().unwrap();
        let want: Vec<RecordBatch> = want.partitions.iter().flatten().cloned().collect();
        assert_eq!(concat_batches(&schema, &read).unwrap(), concat_batches(&schema, &want).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
