//! Test helpers: random Arrow arrays of every type the device layer holds, small plans for the
//! rule's tests, and the GPU gate.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, BooleanArray, DictionaryArray, LargeStringArray, StringArray, StringViewArray,
    make_array,
};
use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::buffer::{MutableBuffer, NullBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Int8Type, Int32Type, Schema, SchemaRef, TimeUnit, UInt16Type};
use datafusion::common::{JoinType, NullEquality};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use rand::rngs::StdRng;
use rand::{Rng, RngCore};

use crate::device::{Gpu, probe};

/// Every type the round-trip tests cover.
pub fn all_types() -> Vec<DataType> {
    use DataType::*;
    let tz: Option<Arc<str>> = Some("+05:30".into());
    vec![
        Int8,
        Int16,
        Int32,
        Int64,
        UInt8,
        UInt16,
        UInt32,
        UInt64,
        Float32,
        Float64,
        Boolean,
        Date32,
        Date64,
        Timestamp(TimeUnit::Second, None),
        Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        Timestamp(TimeUnit::Microsecond, tz.clone()),
        Timestamp(TimeUnit::Nanosecond, None),
        Decimal128(38, 10),
        Decimal128(12, 2),
        Utf8,
        LargeUtf8,
        Utf8View,
        Dictionary(Box::new(Int32), Box::new(Utf8)),
        Dictionary(Box::new(Int8), Box::new(LargeUtf8)),
        Dictionary(Box::new(UInt16), Box::new(Utf8View)),
    ]
}

fn validity(rng: &mut StdRng, len: usize, null_fraction: f64) -> Option<NullBuffer> {
    if null_fraction <= 0.0 {
        return None;
    }
    Some(NullBuffer::from((0..len).map(|_| !rng.random_bool(null_fraction)).collect::<Vec<_>>()))
}

fn strings(rng: &mut StdRng, len: usize, null_fraction: f64) -> Vec<Option<String>> {
    (0..len)
        .map(|_| {
            if null_fraction > 0.0 && rng.random_bool(null_fraction) {
                None
            } else {
                let n = rng.random_range(0..24);
                // Mostly ASCII, sometimes multi-byte, sometimes empty.
                Some((0..n).map(|_| if rng.random_bool(0.1) { 'é' } else { rng.random_range('a'..='z') }).collect())
            }
        })
        .collect()
}

/// A random array of `dt` with `len` rows, about `null_fraction` of them null.
pub fn random_array(rng: &mut StdRng, dt: &DataType, len: usize, null_fraction: f64) -> ArrayRef {
    use DataType::*;
    match dt {
        Boolean => {
            let values: Vec<Option<bool>> = (0..len)
                .map(|_| if null_fraction > 0.0 && rng.random_bool(null_fraction) { None } else { Some(rng.random()) })
                .collect();
            Arc::new(BooleanArray::from(values))
        }
        Utf8 => Arc::new(StringArray::from(strings(rng, len, null_fraction))),
        LargeUtf8 => Arc::new(LargeStringArray::from(strings(rng, len, null_fraction))),
        Utf8View => Arc::new(StringViewArray::from(strings(rng, len, null_fraction))),
        Dictionary(k, v) => {
            let n_values = rng.random_range(1..8);
            let values = random_array(rng, v, n_values, null_fraction / 2.0);
            let keys: Vec<Option<i64>> = (0..len)
                .map(|_| {
                    if null_fraction > 0.0 && rng.random_bool(null_fraction) {
                        None
                    } else {
                        Some(rng.random_range(0..n_values as i64))
                    }
                })
                .collect();
            match **k {
                Int32 => Arc::new(
                    DictionaryArray::<Int32Type>::try_new(keys.iter().map(|k| k.map(|x| x as i32)).collect(), values)
                        .expect("valid dictionary"),
                ),
                Int8 => Arc::new(
                    DictionaryArray::<Int8Type>::try_new(keys.iter().map(|k| k.map(|x| x as i8)).collect(), values)
                        .expect("valid dictionary"),
                ),
                UInt16 => Arc::new(
                    DictionaryArray::<UInt16Type>::try_new(keys.iter().map(|k| k.map(|x| x as u16)).collect(), values)
                        .expect("valid dictionary"),
                ),
                _ => unimplemented!("dictionary key type {k} in tests"),
            }
        }
        other => {
            let width = other.primitive_width().expect("fixed-width type");
            // Arrow requires buffers aligned to the value type: MutableBuffer allocates 64-byte aligned.
            let mut buffer = MutableBuffer::from_len_zeroed(len * width);
            let bytes = buffer.as_slice_mut();
            match other {
                Float32 => bytes
                    .chunks_exact_mut(4)
                    .for_each(|c| c.copy_from_slice(&(rng.random::<f32>() * 1e6 - 5e5).to_le_bytes())),
                Float64 => bytes
                    .chunks_exact_mut(8)
                    .for_each(|c| c.copy_from_slice(&(rng.random::<f64>() * 1e12 - 5e11).to_le_bytes())),
                Decimal128(p, _) => {
                    let bound = 10i128.pow((*p).min(18) as u32);
                    bytes
                        .chunks_exact_mut(16)
                        .for_each(|c| c.copy_from_slice(&rng.random_range(-bound + 1..bound).to_le_bytes()))
                }
                _ => rng.fill_bytes(bytes),
            }
            let data = ArrayData::builder(other.clone())
                .len(len)
                .add_buffer(buffer.into())
                .nulls(validity(rng, len, null_fraction))
                .build()
                .expect("valid random array");
            make_array(data)
        }
    }
}

/// A fresh seed, printed so that a failure can be replayed with `DFG_TEST_SEED`.
pub fn fresh_seed(test: &str) -> u64 {
    let seed = std::env::var("DFG_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| rand::rng().random());
    let _ = writeln!(std::io::stderr(), "{test}: seed {seed} (replay with DFG_TEST_SEED={seed})");
    seed
}

/// Serialises GPU tests: they share one device and its budget (tests measure peaks and what is
/// left in use). Sessions' settings are their own; a test that changes the device's own budget
/// limit finds it restored here for the next.
pub fn gpu_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if probe::device_count().is_ok()
        && let Ok(gpu) = Gpu::get(0)
    {
        gpu.device_memory().set_limit(None);
    }
    guard
}

/// Environment variable that makes every GPU test fail, rather than skip, when no GPU can be used
/// (a device run whose driver or NVRTC did not load must not pass).
pub const REQUIRE_GPU_ENV: &str = "DFG_REQUIRE_GPU";

/// Whether [`REQUIRE_GPU_ENV`] is set to something other than empty or `0`.
pub fn gpu_required() -> bool {
    std::env::var_os(REQUIRE_GPU_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The GPU for a test, or `None` after printing why the test is skipped. A machine that has a
/// device but fails to open it fails the test instead, and so does any machine where
/// `DFG_REQUIRE_GPU=1` is set.
pub fn gpu_or_skip(test: &str) -> Option<Arc<Gpu>> {
    match probe::device_count() {
        Err(e) => {
            assert!(!gpu_required(), "{test}: {REQUIRE_GPU_ENV} is set, but {e}");
            // Written to the real stderr, past the test harness's capture, so that CI shows it.
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
            None
        }
        Ok(_) => Some(Gpu::get(0).expect("a GPU is present but could not be opened")),
    }
}

/// `a` with a dictionary's NULL values moved to its keys (the device's layout for them: a row
/// whose key points at a NULL value is a NULL row), other arrays as they are.
pub fn with_logical_nulls(a: &dyn Array) -> ArrayRef {
    let data = a.to_data();
    if !matches!(a.data_type(), DataType::Dictionary(..)) || a.logical_null_count() == a.null_count() {
        return make_array(data);
    }
    make_array(data.into_builder().nulls(a.logical_nulls()).build().expect("the same dictionary, keys nulled"))
}

/// Asserts that `b` equals `a`, with type and (logical) null count, and a readable message.
pub fn assert_same_array(a: &dyn Array, b: &dyn Array, ctx: &str) {
    let (a, b) = (with_logical_nulls(a), with_logical_nulls(b));
    assert_eq!(a.data_type(), b.data_type(), "{ctx}: data type");
    assert_eq!(a.len(), b.len(), "{ctx}: length");
    assert_eq!(a.null_count(), b.null_count(), "{ctx}: null count");
    assert!(a.to_data() == b.to_data(), "{ctx}: values differ\n left: {a:?}\nright: {b:?}");
}

/// Draws from a Zipf distribution over 0..n by inverse CDF.
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for i in 1..=n {
            acc += 1.0 / (i as f64).powf(s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, rng: &mut StdRng) -> u64 {
        let u: f64 = rng.random();
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1) as u64
    }
}

/// A memory source of `rows` rows of non-null Int64 columns (k, v), both `0..rows`, split into
/// `parts` partitions of consecutive rows (the last takes what does not divide).
pub fn memory_kv(rows: i64, parts: i64) -> Arc<dyn ExecutionPlan> {
    let (schema, partitions) = kv_partitions(rows, parts);
    MemorySourceConfig::try_new_exec(&partitions, schema, None).expect("memory source")
}

/// The rows of [`memory_kv`] as a table to register with a `SessionContext`.
pub fn memory_kv_table(rows: i64, parts: i64) -> Arc<datafusion::datasource::MemTable> {
    let (schema, partitions) = kv_partitions(rows, parts);
    Arc::new(datafusion::datasource::MemTable::try_new(schema, partitions).expect("memory table"))
}

fn kv_partitions(rows: i64, parts: i64) -> (SchemaRef, Vec<Vec<RecordBatch>>) {
    let schema =
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Int64, false)]));
    let parts = parts.max(1);
    let per = rows / parts;
    let partitions = (0..parts)
        .map(|p| {
            let end = if p + 1 == parts { rows } else { (p + 1) * per };
            let k = Int64Array::from_iter_values(p * per..end);
            vec![RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(k.clone()), Arc::new(k)]).expect("k, v")]
        })
        .collect();
    (schema, partitions)
}

/// `l` and `r` hash-joined on their first columns in `mode`, projected to `projection`.
pub fn hash_join_on_first(
    l: Arc<dyn ExecutionPlan>,
    r: Arc<dyn ExecutionPlan>,
    join_type: JoinType,
    projection: Option<Vec<usize>>,
    mode: PartitionMode,
) -> Arc<dyn ExecutionPlan> {
    let first = |side: &Arc<dyn ExecutionPlan>| {
        Arc::new(Column::new(side.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>
    };
    let on = vec![(first(&l), first(&r))];
    Arc::new(
        HashJoinExec::try_new(l, r, on, None, &join_type, projection, mode, NullEquality::NullEqualsNothing, false)
            .expect("hash join"),
    )
}

/// The rows of `batches` as text, one line each with the cells joined by `|`, sorted: for
/// comparing results whose row order is not defined.
pub fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| {
            (0..b.num_rows()).map(move |r| {
                let cell = |c: &ArrayRef| {
                    datafusion::arrow::util::display::array_value_to_string(c, r).unwrap_or_else(|e| format!("<{e}>"))
                };
                b.columns().iter().map(cell).collect::<Vec<_>>().join("|")
            })
        })
        .collect();
    out.sort();
    out
}

/// A directory of Parquet files for a test, removed when dropped.
pub struct ParquetDir {
    pub path: std::path::PathBuf,
}

impl Drop for ParquetDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

impl ParquetDir {
    /// A fresh empty directory named for `test`.
    pub fn new(test: &str) -> ParquetDir {
        let path = std::env::temp_dir().join(format!("dfg-{test}-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&path).unwrap();
        ParquetDir { path }
    }

    /// Writes `batches` (one schema) as the Parquet file `name` in it, `row_group_rows` rows a
    /// row group, replacing any file of that name.
    pub fn write(&self, name: &str, batches: &[RecordBatch], row_group_rows: usize) {
        use datafusion::parquet::arrow::ArrowWriter;
        use datafusion::parquet::file::properties::WriterProperties;
        let props = WriterProperties::builder().set_max_row_group_row_count(Some(row_group_rows.max(1))).build();
        let file = std::fs::File::create(self.path.join(name)).unwrap();
        let mut w = ArrowWriter::try_new(file, batches[0].schema(), Some(props)).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }

    /// The directory as a table location (with a trailing slash).
    pub fn location(&self) -> String {
        format!("{}/", self.path.display())
    }
}

/// A batch of `rows` rows (k, v, s) whose keys start at `first`: `v` null every third row, `s`
/// multi-byte strings null every fifth.
pub fn kvs_batch(first: i64, rows: i64) -> RecordBatch {
    use datafusion::arrow::array::StringArray;
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(first..first + rows)),
            Arc::new(Int64Array::from_iter((first..first + rows).map(|i| (i % 3 != 0).then_some(i % 97)))),
            Arc::new(StringArray::from_iter(
                (first..first + rows).map(|i| (i % 5 != 0).then(|| format!("ü{}", i % 13))),
            )),
        ],
    )
    .unwrap()
}
