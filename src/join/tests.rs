//! Differential tests of the GPU join against DataFusion's `HashJoinExec` on the CPU: the same
//! plan, the same random data (seed printed; replay with DFG_TEST_SEED), every join type, both
//! null equalities, key types from one byte to strings and decimals, single and multi-column
//! keys, unique, duplicate, Zipf-skewed and all-NULL keys, empty sides, both partition modes,
//! every algorithm, and output windows small enough to split results.

use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float64Array, Int8Array, Int32Array,
    Int64Array, LargeStringArray, RecordBatch, StringArray, StringViewArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::JoinSide;
use datafusion::common::{JoinType, NullEquality};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::expressions::{binary, cast, col, is_not_null};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, PhysicalExpr, collect};
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::{DevicesSetting, GpuConfig};
use crate::cost::PlacementSetting;
use crate::exec::GpuHashJoinExec;
use crate::join::{JoinAlgorithm, JoinAlgorithmSetting};
use crate::rule::GpuOptimizerRule;
use crate::session::gpu_session_context;
use crate::testing::{Zipf, fresh_seed, gpu_lock, gpu_or_skip};

const JOIN_TYPES: [JoinType; 10] = [
    JoinType::Inner,
    JoinType::Left,
    JoinType::Right,
    JoinType::Full,
    JoinType::LeftSemi,
    JoinType::RightSemi,
    JoinType::LeftAnti,
    JoinType::RightAnti,
    JoinType::LeftMark,
    JoinType::RightMark,
];

/// How key ids are drawn.
#[derive(Debug, Clone, Copy)]
enum Dist {
    /// Build ids a permutation of 0..rows; probe ids uniform over twice that (match ratio 1/2).
    Unique,
    /// Ids uniform over rows / 8 values.
    Duplicates,
    /// Zipf over `rows` values with this exponent.
    Zipf(f64),
    /// Every key NULL.
    AllNull,
}

fn key_ids(rng: &mut StdRng, dist: Dist, rows: usize, domain: usize, build: bool) -> Vec<u64> {
    match dist {
        Dist::Unique if build => {
            let mut ids: Vec<u64> = (0..rows as u64).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.random_range(0..=i));
            }
            ids
        }
        Dist::Unique => (0..rows).map(|_| rng.random_range(0..(2 * domain.max(1)) as u64)).collect(),
        Dist::Duplicates => (0..rows).map(|_| rng.random_range(0..(domain / 8).max(1) as u64)).collect(),
        Dist::Zipf(s) => {
            let z = Zipf::new(domain.max(1), s);
            (0..rows).map(|_| z.sample(rng)).collect()
        }
        Dist::AllNull => vec![0; rows],
    }
}

/// Key column `j` of a key of type `dt` for key ids `ids`: distinct ids give distinct keys (with
/// the other key columns); NULLs drawn independently.
fn key_column(rng: &mut StdRng, dt: &DataType, j: usize, ncols: usize, ids: &[u64], nulls: f64) -> ArrayRef {
    // Split the id across the key columns so that only the whole key identifies it.
    let part = |id: u64| -> u64 {
        if ncols == 1 {
            id
        } else if j == 0 {
            id / 3
        } else {
            id % 3
        }
    };
    let null = |rng: &mut StdRng| nulls > 0.0 && rng.random_bool(nulls);
    let vals: Vec<Option<u64>> = ids.iter().map(|id| if null(rng) { None } else { Some(part(*id)) }).collect();
    match dt {
        DataType::Int8 => Arc::new(Int8Array::from_iter(vals.iter().map(|v| v.map(|x| (x % 256) as u8 as i8)))),
        DataType::Int32 => {
            Arc::new(Int32Array::from_iter(vals.iter().map(|v| v.map(|x| (x as i32).wrapping_mul(7919) - 5))))
        }
        DataType::Int64 => Arc::new(Int64Array::from_iter(
            vals.iter().map(|v| v.map(|x| (x as i64).wrapping_mul(0x9e37_79b9_7f4a) - 77)),
        )),
        DataType::Boolean => Arc::new(BooleanArray::from_iter(vals.iter().map(|v| v.map(|x| x % 2 == 1)))),
        DataType::Date32 => Arc::new(Date32Array::from_iter(vals.iter().map(|v| v.map(|x| x as i32 - 20_000)))),
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            Arc::new(TimestampMicrosecondArray::from_iter(vals.iter().map(|v| v.map(|x| x as i64 * 1_000_003))))
        }
        DataType::Decimal128(p, s) => Arc::new(
            Decimal128Array::from_iter(vals.iter().map(|v| v.map(|x| x as i128 * 1_000_000_007 - 3)))
                .with_precision_and_scale(*p, *s)
                .expect("valid decimal"),
        ),
        DataType::Utf8 => Arc::new(StringArray::from_iter(vals.iter().map(|v| v.map(string_key)))),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from_iter(vals.iter().map(|v| v.map(string_key)))),
        DataType::Utf8View => Arc::new(StringViewArray::from_iter(vals.iter().map(|v| v.map(string_key)))),
        DataType::Dictionary(_, _) => {
            let strings: Vec<Option<String>> = vals.iter().map(|v| v.map(string_key)).collect();
            let dict: DictionaryArray<Int32Type> = strings.iter().map(|s| s.as_deref()).collect();
            Arc::new(dict)
        }
        other => unimplemented!("key type {other} in join tests"),
    }
}

/// Strings of varied lengths (empty, long, multi-byte) that differ for different ids.
fn string_key(x: u64) -> String {
    match x % 4 {
        0 if x == 0 => String::new(),
        0 => format!("{x}"),
        1 => format!("key-{x:x}-é"),
        2 => format!("{}{x}", "long prefix shared by many keys ".repeat(2)),
        _ => format!("k{x}"),
    }
}

fn table(
    rng: &mut StdRng,
    key_types: &[DataType],
    dist: Dist,
    rows: usize,
    domain: usize,
    build: bool,
    side: &str,
) -> RecordBatch {
    let ids = key_ids(rng, dist, rows, domain, build);
    let nulls = match dist {
        Dist::AllNull => 1.0,
        _ => 0.08,
    };
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (j, dt) in key_types.iter().enumerate() {
        fields.push(Field::new(format!("{side}k{j}"), dt.clone(), true));
        cols.push(key_column(rng, dt, j, key_types.len(), &ids, nulls));
    }
    // Payloads: a unique row id (GFTR-eligible), a nullable string, a decimal, a nullable
    // Boolean, a non-null Int32 and Float64 (GFTR-eligible).
    fields.push(Field::new(format!("{side}_row"), DataType::Int64, false));
    cols.push(Arc::new(Int64Array::from_iter_values(0..rows as i64)));
    fields.push(Field::new(format!("{side}_s"), DataType::Utf8, true));
    cols.push(Arc::new(StringArray::from_iter(
        (0..rows).map(|i| if rng.random_bool(0.1) { None } else { Some(format!("{side}{}", i * 31 % 97)) }),
    )));
    fields.push(Field::new(format!("{side}_d"), DataType::Decimal128(20, 3), true));
    cols.push(Arc::new(
        Decimal128Array::from_iter((0..rows).map(|i| if i % 11 == 3 { None } else { Some(i as i128 * 1001 - 500) }))
            .with_precision_and_scale(20, 3)
            .expect("valid decimal"),
    ));
    fields.push(Field::new(format!("{side}_b"), DataType::Boolean, true));
    cols.push(Arc::new(BooleanArray::from_iter((0..rows).map(|i| if i % 7 == 0 { None } else { Some(i % 3 == 0) }))));
    fields.push(Field::new(format!("{side}_i"), DataType::Int32, false));
    cols.push(Arc::new(Int32Array::from_iter_values((0..rows).map(|_| rng.random::<i32>()))));
    fields.push(Field::new(format!("{side}_f"), DataType::Float64, false));
    cols.push(Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 * 0.5))));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("valid table")
}

/// `batch` cut into `parts` partitions of batches of up to 1000 rows.
fn partitions(batch: &RecordBatch, parts: usize) -> Vec<Vec<RecordBatch>> {
    let mut out = vec![Vec::new(); parts];
    let mut i = 0;
    let mut k = 0;
    while i < batch.num_rows() {
        let len = 1000.min(batch.num_rows() - i);
        out[k % parts].push(batch.slice(i, len));
        i += len;
        k += 1;
    }
    out
}

fn source(batch: &RecordBatch, parts: usize) -> Arc<dyn ExecutionPlan> {
    MemorySourceConfig::try_new_exec(&partitions(batch, parts), batch.schema(), None).expect("memory source")
}

fn key_exprs(schema: &SchemaRef, nkeys: usize) -> Vec<Arc<dyn PhysicalExpr>> {
    (0..nkeys).map(|j| Arc::new(Column::new(schema.field(j).name(), j)) as Arc<dyn PhysicalExpr>).collect()
}

struct JoinCase<'a> {
    left: &'a RecordBatch,
    right: &'a RecordBatch,
    nkeys: usize,
    join_type: JoinType,
    nulls: NullEquality,
    mode: PartitionMode,
    projection: Option<Vec<usize>>,
    null_aware: bool,
    filter: Option<JoinFilter>,
    /// Partitioned mode: keep the hash repartitions below the GPU join (`gpu.join.repartition`).
    keep_repartitions: bool,
    /// CollectLeft mode: the probe side hash-partitioned on its keys (three partitions), so the
    /// join's output is partitioned like it (inner and right joins).
    hash_probe: bool,
}

impl<'a> JoinCase<'a> {
    /// A CollectLeft join of `left` and `right` on their first `nkeys` columns, unprojected,
    /// without a filter; other cases change fields with struct update syntax.
    fn new(
        left: &'a RecordBatch,
        right: &'a RecordBatch,
        nkeys: usize,
        join_type: JoinType,
        nulls: NullEquality,
    ) -> Self {
        JoinCase {
            left,
            right,
            nkeys,
            join_type,
            nulls,
            mode: PartitionMode::CollectLeft,
            projection: None,
            null_aware: false,
            filter: None,
            keep_repartitions: false,
            hash_probe: false,
        }
    }
}

fn plan(c: &JoinCase<'_>) -> Arc<dyn ExecutionPlan> {
    let (lk, rk) = (key_exprs(&c.left.schema(), c.nkeys), key_exprs(&c.right.schema(), c.nkeys));
    let (left, right) = match c.mode {
        PartitionMode::CollectLeft if c.hash_probe => (
            source(c.left, 1),
            Arc::new(
                RepartitionExec::try_new(source(c.right, 2), Partitioning::Hash(rk.clone(), 3)).expect("repartition"),
            ) as Arc<dyn ExecutionPlan>,
        ),
        PartitionMode::CollectLeft => (source(c.left, 1), source(c.right, 2)),
        _ => (
            Arc::new(
                RepartitionExec::try_new(source(c.left, 2), Partitioning::Hash(lk.clone(), 3)).expect("repartition"),
            ) as Arc<dyn ExecutionPlan>,
            // As many probe partitions as the join's: without its repartitions the GPU join
            // reads these three.
            Arc::new(
                RepartitionExec::try_new(source(c.right, 3), Partitioning::Hash(rk.clone(), 3)).expect("repartition"),
            ) as Arc<dyn ExecutionPlan>,
        ),
    };
    let on = lk.into_iter().zip(rk).collect();
    Arc::new(
        HashJoinExec::try_new(
            left,
            right,
            on,
            c.filter.clone(),
            &c.join_type,
            c.projection.clone(),
            c.mode,
            c.nulls,
            c.null_aware,
        )
        .expect("hash join"),
    )
}

/// Rows in Arrow's row format, sorted: an order-free comparison of two results.
fn rows(batches: &[RecordBatch], schema: &SchemaRef) -> Vec<Vec<u8>> {
    let fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let converter = RowConverter::new(fields).expect("row converter");
    let mut out = Vec::new();
    for b in batches {
        let rows = converter.convert_columns(b.columns()).expect("rows");
        out.extend(rows.iter().map(|r| r.data().to_vec()));
    }
    out.sort_unstable();
    out
}

/// Up to three rows of `a` not in `b` (both sorted), formatted.
fn only_in(a: &[Vec<u8>], b: &[Vec<u8>], batches: &[RecordBatch], schema: &SchemaRef) -> Vec<String> {
    let mut found = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && found.len() < 3 {
        if j < b.len() && b[j] < a[i] {
            j += 1;
        } else if j < b.len() && b[j] == a[i] {
            i += 1;
            j += 1;
        } else {
            found.push(a[i].clone());
            i += 1;
        }
    }
    // Format the rows found by locating them in the batches.
    let fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let converter = RowConverter::new(fields).expect("row converter");
    let options = FormatOptions::default().with_null("NULL");
    let mut text = Vec::new();
    for batch in batches {
        let rows = converter.convert_columns(batch.columns()).expect("rows");
        let f: Vec<_> =
            batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter")).collect();
        for r in 0..batch.num_rows() {
            if found.iter().any(|x| x.as_slice() == rows.row(r).data()) && text.len() < 3 {
                text.push(f.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|"));
            }
        }
    }
    text
}

fn gpu_ctx(algorithm: JoinAlgorithm, batch_rows: usize, keep_repartitions: bool) -> SessionContext {
    gpu_ctx_on(algorithm, batch_rows, keep_repartitions, &DevicesSetting::One)
}

/// [`gpu_ctx`] over the device set `devices`.
fn gpu_ctx_on(
    algorithm: JoinAlgorithm,
    batch_rows: usize,
    keep_repartitions: bool,
    devices: &DevicesSetting,
) -> SessionContext {
    let cfg = GpuConfig {
        devices: devices.clone(),
        join_repartition: keep_repartitions,
        min_rows: 0,
        placement: PlacementSetting::Always,
        join_algorithm: JoinAlgorithmSetting::Fixed(algorithm),
        batch_rows,
        // Output windows as small as the chunks: several per chunk.
        join_window_rows: batch_rows,
        // The GPU's own answer or error: no rerun on the CPU to hide it.
        cpu_fallback: false,
        // The operators over DataFusion's scans (the table cache has tests of its own).
        table_cache: false,
        ..Default::default()
    };
    gpu_session_context(SessionConfig::new().with_target_partitions(3).with_option_extension(cfg))
}

/// The case's join on the CPU: its schema, batches and sorted rows.
async fn cpu_answer(
    c: &JoinCase<'_>,
    what: &str,
) -> std::result::Result<(SchemaRef, Vec<RecordBatch>, Vec<Vec<u8>>), String> {
    let cpu_ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(3));
    let join = plan(c);
    let schema = join.schema();
    let cpu = collect(join, cpu_ctx.task_ctx()).await.map_err(|e| format!("{what}: the CPU join failed: {e}"))?;
    let want = rows(&cpu, &schema);
    Ok((schema, cpu, want))
}

/// Runs the case on the CPU and with each algorithm on the GPU (concurrently); returns failures,
/// also printed as they are found.
async fn check(c: &JoinCase<'_>, what: &str, algorithms: &[JoinAlgorithm], batch_rows: usize) -> Vec<String> {
    check_on(c, what, algorithms, batch_rows, &DevicesSetting::One).await
}

/// [`check`] over the device set `devices`; a multi-GPU join over several devices must also
/// have exchanged its inputs between them.
async fn check_on(
    c: &JoinCase<'_>,
    what: &str,
    algorithms: &[JoinAlgorithm],
    batch_rows: usize,
    devices: &DevicesSetting,
) -> Vec<String> {
    // Every run gets a plan of its own: DataFusion's RepartitionExec runs only once.
    let (schema, cpu, want) = match cpu_answer(c, what).await {
        Ok(x) => x,
        Err(e) => return vec![e],
    };
    let runs = algorithms.iter().map(|&a| {
        let join = plan(c);
        async move {
            let ctx = gpu_ctx_on(a, batch_rows, c.keep_repartitions, devices);
            let gpu_plan = GpuOptimizerRule::new()
                .optimize(join, ctx.state().config_options())
                .map_err(|e| format!("{what} {a}: the rule failed: {e}"))?;
            let text = datafusion::physical_plan::displayable(gpu_plan.as_ref()).one_line().to_string();
            if gpu_plan.downcast_ref::<GpuHashJoinExec>().is_none() {
                return Err(format!("{what} {a}: the join stayed on the CPU: {text}"));
            }
            let removed = text.contains("repartitions removed") && text.contains("mode=CollectLeft");
            if c.mode == PartitionMode::Partitioned && removed == c.keep_repartitions {
                return Err(format!("{what} {a}: repartitions removed: {removed}, expected {}: {text}", !removed));
            }
            let out = collect(Arc::clone(&gpu_plan), ctx.task_ctx())
                .await
                .map_err(|e| format!("{what} {a}: the GPU join failed: {e}"))?;
            let spread = a.multi_gpu() && !c.null_aware && matches!(devices, DevicesSetting::List(l) if l.len() > 1);
            if spread && crate::exec::metric_total(&gpu_plan, None, "exchange_time") == 0 {
                return Err(format!("{what} {a}: no exchange between the devices {devices}"));
            }
            Ok(out)
        }
    });
    let mut failures = Vec::new();
    for (a, result) in algorithms.iter().zip(futures::future::join_all(runs).await) {
        failures.extend(mismatch(result, &format!("{what} {a}"), &want, &cpu, &schema));
    }
    failures
}

/// Why one GPU run's result differs from the CPU's rows `want` (of batches `cpu`), if it does;
/// also written to stderr.
fn mismatch(
    result: std::result::Result<Vec<RecordBatch>, String>,
    what: &str,
    want: &[Vec<u8>],
    cpu: &[RecordBatch],
    schema: &SchemaRef,
) -> Option<String> {
    let failure = match result {
        Err(e) => Some(e),
        Ok(b) => {
            let got = rows(&b, schema);
            (got != want).then(|| {
                format!(
                    "{what}: {} rows, expected {}; missing e.g. {:?}; unexpected e.g. {:?}",
                    got.len(),
                    want.len(),
                    only_in(want, &got, cpu, schema),
                    only_in(&got, want, &b, schema)
                )
            })
        }
    };
    if let Some(f) = &failure {
        let _ = writeln!(std::io::stderr(), "JOIN MISMATCH {f}");
    }
    failure
}

/// The differential suites' distributions with their build and probe rows; sizes keep each
/// result near 10^5 rows at most (a skewed key multiplies its counts).
const DISTRIBUTIONS: [(Dist, usize, usize); 7] = [
    (Dist::Unique, 3000, 5000),
    (Dist::Duplicates, 2500, 4000),
    (Dist::Zipf(1.0), 1000, 1200),
    (Dist::Zipf(1.5), 500, 600),
    (Dist::AllNull, 200, 300),
    (Dist::Unique, 0, 1500),     // empty build
    (Dist::Duplicates, 1200, 0), // empty probe
];

fn key_type_cases() -> Vec<(&'static str, Vec<DataType>)> {
    vec![
        ("int32", vec![DataType::Int32]),
        ("int64", vec![DataType::Int64]),
        ("int8+bool", vec![DataType::Int8, DataType::Boolean]),
        ("int64+int32 (wide)", vec![DataType::Int64, DataType::Int32]),
        ("date32+timestamp", vec![DataType::Date32, DataType::Timestamp(TimeUnit::Microsecond, None)]),
        ("decimal128", vec![DataType::Decimal128(22, 4)]),
        ("utf8", vec![DataType::Utf8]),
        ("large_utf8", vec![DataType::LargeUtf8]),
        ("utf8view+int32", vec![DataType::Utf8View, DataType::Int32]),
        ("dictionary", vec![DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))]),
    ]
}

/// Every join type x null equality x key type x distribution, CollectLeft, every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_matches_cpu_for_every_type_key_and_distribution() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_matches_cpu_for_every_type_key_and_distribution") else { return };
    let seed = fresh_seed("gpu_join_matches_cpu_for_every_type_key_and_distribution");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut joins = 0;
    let started = std::time::Instant::now();
    for (kname, types) in key_type_cases() {
        for (dist, nb, np) in DISTRIBUTIONS {
            let left = table(&mut rng, &types, dist, nb, nb.max(np), true, "l");
            let right = table(&mut rng, &types, dist, np, nb.max(np), false, "r");
            for jt in JOIN_TYPES {
                for nulls in [NullEquality::NullEqualsNothing, NullEquality::NullEqualsNull] {
                    let c = JoinCase::new(&left, &right, types.len(), jt, nulls);
                    let what = format!("[{kname} {dist:?} {nb}x{np} {jt} {nulls:?}]");
                    failures.extend(check(&c, &what, &JoinAlgorithm::ALL, 1500).await);
                    joins += JoinAlgorithm::ALL.len();
                }
            }
        }
        let _ = writeln!(
            std::io::stderr(),
            "gpu join differential: {kname} done, {joins} joins, {} failures, {:.1} s",
            failures.len(),
            started.elapsed().as_secs_f64()
        );
    }
    assert!(failures.is_empty(), "seed {seed}: {} of {joins} joins differ:\n{}", failures.len(), failures.join("\n"));
    let _ = writeln!(std::io::stderr(), "gpu join differential: {joins} GPU joins matched the CPU (seed {seed})");
}

/// Partitioned mode, projections, null-aware anti joins, larger sizes (many PHJ partitions,
/// oversized skewed partitions) and large output windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_matches_cpu_partitioned_projected_and_large() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_matches_cpu_partitioned_projected_and_large") else { return };
    let seed = fresh_seed("gpu_join_matches_cpu_partitioned_projected_and_large");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for (kname, types) in [("int32", vec![DataType::Int32]), ("utf8", vec![DataType::Utf8])] {
        // 8% NULL keys: with NULL equals NULL they alone give 400 x 640 pairs.
        let left = table(&mut rng, &types, Dist::Duplicates, 5_000, 5_000, true, "l");
        let right = table(&mut rng, &types, Dist::Duplicates, 8_000, 5_000, false, "r");
        for jt in JOIN_TYPES {
            for nulls in [NullEquality::NullEqualsNothing, NullEquality::NullEqualsNull] {
                // With the repartitions (one join per partition) and without (one CollectLeft
                // build from every partition).
                for keep_repartitions in [true, false] {
                    let c = JoinCase {
                        mode: PartitionMode::Partitioned,
                        keep_repartitions,
                        ..JoinCase::new(&left, &right, 1, jt, nulls)
                    };
                    let what = format!("[partitioned {kname} {jt} {nulls:?} keep_repartitions={keep_repartitions}]");
                    failures.extend(check(&c, &what, &JoinAlgorithm::ALL, 1 << 22).await);
                }
            }
        }
    }
    // Large and skewed: PHJ with 2^7 partitions, and a hot key (about 38% of Zipf 1.5's rows)
    // with more build rows than a PHJ unit holds.
    let types = vec![DataType::Int64];
    for (dist, nb, np) in [(Dist::Unique, 200_000, 300_000), (Dist::Zipf(1.5), 12_000, 400)] {
        let left = table(&mut rng, &types, dist, nb, nb, true, "l");
        let right = table(&mut rng, &types, dist, np, nb, false, "r");
        for jt in [JoinType::Inner, JoinType::Full, JoinType::LeftSemi, JoinType::RightAnti] {
            let c = JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing);
            for batch_rows in [100_000, 1 << 22] {
                failures.extend(
                    check(&c, &format!("[large {dist:?} {jt} windows {batch_rows}]"), &JoinAlgorithm::ALL, batch_rows)
                        .await,
                );
            }
        }
    }
    // Projections (including a mark column and repeated columns), and NOT IN.
    let types = vec![DataType::Int32];
    let left = table(&mut rng, &types, Dist::Duplicates, 3000, 3000, true, "l");
    let right = table(&mut rng, &types, Dist::Duplicates, 3000, 3000, false, "r");
    for (jt, proj) in [
        (JoinType::Inner, vec![8, 1, 3, 1]),
        (JoinType::Full, vec![9, 2]),
        (JoinType::LeftMark, vec![7, 2]),
        (JoinType::RightMark, vec![7, 0]),
        (JoinType::LeftSemi, vec![3]),
    ] {
        let c = JoinCase {
            projection: Some(proj.clone()),
            ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing)
        };
        failures.extend(check(&c, &format!("[projection {proj:?} {jt}]"), &JoinAlgorithm::ALL, 1 << 22).await);
    }
    for (name, right) in [
        ("probe with NULL keys", right.clone()),
        ("probe without NULL keys", table(&mut rng, &types, Dist::Duplicates, 0, 3000, false, "r")),
        ("probe without NULL keys", {
            let mut r = StdRng::seed_from_u64(seed ^ 1);
            let t = table(&mut r, &types, Dist::Duplicates, 2000, 3000, false, "r");
            let keep = datafusion::arrow::compute::is_not_null(t.column(0)).expect("is_not_null");
            datafusion::arrow::compute::filter_record_batch(&t, &keep).expect("filter")
        }),
    ] {
        let c = JoinCase {
            null_aware: true,
            ..JoinCase::new(&left, &right, 1, JoinType::LeftAnti, NullEquality::NullEqualsNothing)
        };
        failures.extend(
            check(
                &c,
                &format!("[null-aware anti, {name}, {} probe rows]", right.num_rows()),
                &JoinAlgorithm::ALL,
                1 << 22,
            )
            .await,
        );
    }
    assert!(failures.is_empty(), "seed {seed}: {} joins differ:\n{}", failures.len(), failures.join("\n"));
}

/// A filter over columns (side, index) of the join's inputs, built by `f` over the
/// intermediate schema whose fields are named as the input columns.
fn join_filter(
    left: &RecordBatch,
    right: &RecordBatch,
    cols: &[(JoinSide, usize)],
    f: impl Fn(&Schema) -> Arc<dyn PhysicalExpr>,
) -> JoinFilter {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(side, i)| match side {
            JoinSide::Left => left.schema().field(*i).clone(),
            _ => right.schema().field(*i).clone(),
        })
        .collect();
    let schema = Schema::new(fields);
    let indices = cols.iter().map(|(side, i)| ColumnIndex { index: *i, side: *side }).collect();
    JoinFilter::new(f(&schema), indices, Arc::new(schema))
}

/// Joins with residual filters (integer arithmetic, strings, Booleans, decimals, NULL logic),
/// every join type, both null equalities, narrow and wide keys, every algorithm.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_filters_match_cpu() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_filters_match_cpu") else { return };
    let seed = fresh_seed("gpu_join_filters_match_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let (l, r) = (JoinSide::Left, JoinSide::Right);
    for (kname, types) in [("int32", vec![DataType::Int32]), ("utf8", vec![DataType::Utf8])] {
        let left = table(&mut rng, &types, Dist::Duplicates, 2000, 2000, true, "l");
        let right = table(&mut rng, &types, Dist::Duplicates, 3000, 2000, false, "r");
        // Columns after the key: 1 row id (Int64), 2 string, 3 decimal, 4 Boolean, 5 Int32.
        let filters: Vec<(&str, JoinFilter)> = vec![
            (
                "l_row + r_row > 2500",
                join_filter(&left, &right, &[(l, 1), (r, 1)], |s| {
                    let sum = binary(col("l_row", s).unwrap(), Operator::Plus, col("r_row", s).unwrap(), s).unwrap();
                    binary(sum, Operator::Gt, datafusion::physical_expr::expressions::lit(2500i64), s).unwrap()
                }),
            ),
            (
                "l_s < r_s OR l_b",
                join_filter(&left, &right, &[(l, 2), (r, 2), (l, 4)], |s| {
                    let lt = binary(col("l_s", s).unwrap(), Operator::Lt, col("r_s", s).unwrap(), s).unwrap();
                    binary(lt, Operator::Or, col("l_b", s).unwrap(), s).unwrap()
                }),
            ),
            (
                "l_d >= r_d AND r_b IS NOT NULL",
                join_filter(&left, &right, &[(l, 3), (r, 3), (r, 4)], |s| {
                    let ge = binary(col("l_d", s).unwrap(), Operator::GtEq, col("r_d", s).unwrap(), s).unwrap();
                    binary(ge, Operator::And, is_not_null(col("r_b", s).unwrap()).unwrap(), s).unwrap()
                }),
            ),
            (
                "CAST(l_i AS BIGINT) * 3 <> r_row AND l_b IS DISTINCT FROM r_b",
                join_filter(&left, &right, &[(l, 5), (r, 1), (l, 4), (r, 4)], |s| {
                    let wide = cast(col("l_i", s).unwrap(), s, DataType::Int64).unwrap();
                    let times =
                        binary(wide, Operator::Multiply, datafusion::physical_expr::expressions::lit(3i64), s).unwrap();
                    let ne = binary(times, Operator::NotEq, col("r_row", s).unwrap(), s).unwrap();
                    let distinct =
                        binary(col("l_b", s).unwrap(), Operator::IsDistinctFrom, col("r_b", s).unwrap(), s).unwrap();
                    binary(ne, Operator::And, distinct, s).unwrap()
                }),
            ),
        ];
        for (fname, filter) in &filters {
            for jt in JOIN_TYPES {
                for nulls in [NullEquality::NullEqualsNothing, NullEquality::NullEqualsNull] {
                    let c = JoinCase { filter: Some(filter.clone()), ..JoinCase::new(&left, &right, 1, jt, nulls) };
                    let what = format!("[filter {fname} {kname} {jt} {nulls:?}]");
                    failures.extend(check(&c, &what, &JoinAlgorithm::ALL, 1500).await);
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} joins differ:\n{}", failures.len(), failures.join("\n"));
}

/// Runs the case on the CPU, then on the GPU with each algorithm in turn under a memory limit of
/// `1 / fraction` of the join's build state (its uploaded build columns, times the state factor),
/// so that it runs out of core; checks the answer, that the out-of-core path ran, and that the
/// device memory in use never exceeded the limit. With `sequential`, the output partitions are
/// executed and drained one after another (as a consumer reading one partition at a time does),
/// each within a minute.
async fn check_out_of_core(
    c: &JoinCase<'_>,
    what: &str,
    algorithms: &[JoinAlgorithm],
    fraction: u64,
    sequential: bool,
    devices: &DevicesSetting,
) -> Vec<String> {
    let (schema, cpu, want) = match cpu_answer(c, what).await {
        Ok(x) => x,
        Err(e) => return vec![e],
    };
    let mut failures = Vec::new();
    for &a in algorithms {
        let result = async {
            // The build columns the GPU join uploads, from an unconstrained placement.
            let probe_plan = GpuOptimizerRule::new()
                .optimize(plan(c), gpu_ctx(a, 1 << 22, true).state().config_options())
                .map_err(|e| format!("the rule failed: {e}"))?;
            let exec = probe_plan.downcast_ref::<GpuHashJoinExec>().ok_or("the join stayed on the CPU")?;
            let names: Vec<usize> = exec
                .build_schema()
                .fields()
                .iter()
                .map(|f| c.left.schema().index_of(f.name()).map_err(|e| e.to_string()))
                .collect::<std::result::Result<_, _>>()?;
            let build = c.left.project(&names).map_err(|e| e.to_string())?;
            let state = build.get_array_memory_size() as u64 * crate::join::triton::STATE_FACTOR;
            // At least 1 MiB: below that single pieces and windows outgrow their shares.
            let limit = (state / fraction).max(1 << 20);
            let cfg = GpuConfig {
                min_rows: 0,
                placement: PlacementSetting::Always,
                join_algorithm: JoinAlgorithmSetting::Fixed(a),
                memory_limit: crate::config::ByteSize::Bytes(limit),
                // Partitioned cases keep one join per partition, each under its share of the limit.
                join_repartition: true,
                cpu_fallback: false,
                devices: devices.clone(),
                // The joins over DataFusion's scans (the table cache has tests of its own).
                table_cache: false,
                ..Default::default()
            };
            let ctx = gpu_session_context(SessionConfig::new().with_target_partitions(3).with_option_extension(cfg));
            let gpu_plan = GpuOptimizerRule::new()
                .optimize(plan(c), ctx.state().config_options())
                .map_err(|e| format!("the rule failed: {e}"))?;
            if gpu_plan.downcast_ref::<GpuHashJoinExec>().is_none() {
                return Err("the join stayed on the CPU".to_string());
            }
            let gpu = crate::device::Gpu::for_session(
                &GpuConfig::from_options(ctx.state().config_options()),
                &ctx.session_id(),
            )
            .map_err(|e| e.to_string())?;
            gpu.memory().reset_peak();
            let parts = match sequential {
                false => datafusion::physical_plan::collect_partitioned(Arc::clone(&gpu_plan), ctx.task_ctx())
                    .await
                    .map_err(|e| format!("failed: {e}"))?,
                true => {
                    let mut parts = Vec::new();
                    for p in 0..gpu_plan.properties().output_partitioning().partition_count() {
                        let stream = gpu_plan.execute(p, ctx.task_ctx()).map_err(|e| format!("failed: {e}"))?;
                        let drained = datafusion::physical_plan::common::collect(stream);
                        let batches = tokio::time::timeout(std::time::Duration::from_secs(60), drained)
                            .await
                            .map_err(|_| format!("partition {p}, read alone, gave no end within a minute"))?
                            .map_err(|e| format!("failed: {e}"))?;
                        parts.push(batches);
                    }
                    parts
                }
            };
            let peak = gpu.memory().peak();
            // With several devices, a device other than the home one joined some partitions.
            if let [_, others @ ..] = gpu.device_set().as_slice()
                && !others.is_empty()
                && others.iter().all(|g| g.memory().peak() == 0)
            {
                return Err("no partition was joined on a device other than the home one".into());
            }
            if let Partitioning::Hash(exprs, _) = gpu_plan.properties().output_partitioning() {
                hash_partitioned(&parts, exprs)?;
            }
            let batches: Vec<RecordBatch> = parts.into_iter().flatten().collect();
            if peak > limit {
                return Err(format!("device memory peaked at {peak} bytes, over the limit of {limit}"));
            }
            if crate::exec::metric_total(&gpu_plan, None, "spill_partitions") == 0 {
                return Err(format!("the join did not run out of core under a limit of {limit} bytes"));
            }
            Ok(batches)
        }
        .await;
        let result = result.map_err(|e| format!("{what} {a}: {e}"));
        failures.extend(mismatch(result, &format!("{what} {a}"), &want, &cpu, &schema));
    }
    failures
}

/// Checks that no value of `exprs` appears in two of `parts` (an output said to be hash-partitioned
/// on them keeps each value in one partition).
fn hash_partitioned(parts: &[Vec<RecordBatch>], exprs: &[Arc<dyn PhysicalExpr>]) -> Result<(), String> {
    let mut seen: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    for (p, batches) in parts.iter().enumerate() {
        for b in batches {
            let cols = exprs
                .iter()
                .map(|e| e.evaluate(b).and_then(|v| v.into_array(b.num_rows())))
                .collect::<datafusion::error::Result<Vec<_>>>()
                .map_err(|e| e.to_string())?;
            let fields = cols.iter().map(|c| SortField::new(c.data_type().clone())).collect();
            let rows = RowConverter::new(fields).and_then(|c| c.convert_columns(&cols)).map_err(|e| e.to_string())?;
            for r in rows.iter() {
                if let Some(q) = seen.insert(r.data().to_vec(), p)
                    && q != p
                {
                    return Err(format!("a key is in output partitions {q} and {p} of a hash-partitioned output"));
                }
            }
        }
    }
    Ok(())
}

/// Out-of-core joins (issue: Triton join): the memory limit at a tenth (CollectLeft) and a quarter
/// (Partitioned) of the build state, every join type, uniform and skewed keys (Zipf 1.0 and 1.5,
/// whose hot key alone outgrows one build), narrow and wide keys, with a filter. NULL keys match
/// nothing here: with NULL = NULL the tables' 8% of NULL keys on each side would multiply into
/// one probe group's output of far more than these limits, which fails with a memory-limit error
/// (a group's output is materialized at once; see `join::triton`).
/// The out-of-core join with its partitions dealt over two or three logical devices of one GPU
/// (each device joining its own partitions side by side): every join type, CollectLeft and
/// Partitioned, unique and skewed builds, against DataFusion; some partitions must have been
/// joined on a device other than the home one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_out_of_core_over_logical_devices_matches_cpu() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_out_of_core_over_logical_devices_matches_cpu") else { return };
    let seed = fresh_seed("gpu_join_out_of_core_over_logical_devices_matches_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut joins = 0;
    let types = vec![DataType::Int64];
    for (ldist, rdist) in [(Dist::Unique, Dist::Unique), (Dist::Zipf(1.5), Dist::Unique)] {
        let left = table(&mut rng, &types, ldist, 100_000, 100_000, true, "l");
        let right = table(&mut rng, &types, rdist, 130_000, 100_000, false, "r");
        for jt in JOIN_TYPES {
            for (fraction, mode) in [(10, PartitionMode::CollectLeft), (4, PartitionMode::Partitioned)] {
                // Two and three devices in turn, to keep the test within a minute.
                let devices = DevicesSetting::List(vec![0; 2 + joins % 2]);
                let c = JoinCase { mode, ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing) };
                let what = format!("[out of core on {devices} 1/{fraction} {ldist:?}/{rdist:?} {jt} {mode:?}]");
                failures
                    .extend(check_out_of_core(&c, &what, &[JoinAlgorithm::PhjGftr], fraction, false, &devices).await);
                joins += 1;
            }
        }
    }
    let _ = writeln!(std::io::stderr(), "out-of-core joins over logical devices: {joins}, seed {seed}");
    assert!(failures.is_empty(), "seed {seed}: {} of {joins} failed:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_out_of_core_matches_cpu() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_out_of_core_matches_cpu") else { return };
    let seed = fresh_seed("gpu_join_out_of_core_matches_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    let started = std::time::Instant::now();
    let mut failures = Vec::new();
    let mut joins = 0;
    // One algorithm per case (the out-of-core driver is the same for all; the in-memory suite
    // covers the algorithms), alternating, to keep the test within minutes.
    let algorithms = [JoinAlgorithm::PhjGftr];
    // Builds large enough that a tenth of their state is over 1 MiB. Skew on one side at a
    // time: a hot build key (Zipf 1.5: over a third of the build rows) outgrows one build and is
    // built in chunks; a hot probe key fills one partition's probe groups. Skew on both sides
    // would multiply into billions of output rows.
    let cases = [
        (
            "int64",
            vec![DataType::Int64],
            vec![(Dist::Unique, Dist::Unique), (Dist::Zipf(1.5), Dist::Unique), (Dist::Unique, Dist::Zipf(1.5))],
        ),
        ("utf8+int32", vec![DataType::Utf8, DataType::Int32], vec![(Dist::Zipf(1.0), Dist::Unique)]),
    ];
    for (kname, types, dists) in cases {
        for (ldist, rdist) in dists {
            let left = table(&mut rng, &types, ldist, 100_000, 100_000, true, "l");
            let right = table(&mut rng, &types, rdist, 130_000, 100_000, false, "r");
            for jt in JOIN_TYPES {
                for (fraction, mode) in [(10, PartitionMode::CollectLeft), (4, PartitionMode::Partitioned)] {
                    let nulls = NullEquality::NullEqualsNothing;
                    let c = JoinCase { mode, ..JoinCase::new(&left, &right, types.len(), jt, nulls) };
                    let what = format!("[out of core 1/{fraction} {kname} {ldist:?}/{rdist:?} {jt} {mode:?}]");
                    let t = std::time::Instant::now();
                    failures
                        .extend(check_out_of_core(&c, &what, &algorithms, fraction, false, &DevicesSetting::One).await);
                    let _ = writeln!(std::io::stderr(), "{what}: {:.1} s", t.elapsed().as_secs_f64());
                    joins += algorithms.len();
                }
            }
        }
        let _ = writeln!(
            std::io::stderr(),
            "out-of-core joins: {kname} keys done ({joins} so far, {:.0} s)",
            started.elapsed().as_secs_f64()
        );
    }
    // A residual filter, out of core.
    let types = vec![DataType::Int64];
    let left = table(&mut rng, &types, Dist::Unique, 100_000, 100_000, true, "l");
    let right = table(&mut rng, &types, Dist::Duplicates, 130_000, 100_000, false, "r");
    for jt in [JoinType::Inner, JoinType::Full, JoinType::LeftAnti, JoinType::RightSemi] {
        let sides = [(JoinSide::Left, 1), (JoinSide::Right, 1)];
        let filter = join_filter(&left, &right, &sides, |s| {
            let sum = binary(col("l_row", s).unwrap(), Operator::Plus, col("r_row", s).unwrap(), s).unwrap();
            binary(sum, Operator::Gt, datafusion::physical_expr::expressions::lit(100_000i64), s).unwrap()
        });
        let c =
            JoinCase { filter: Some(filter), ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing) };
        failures.extend(
            check_out_of_core(&c, &format!("[out of core filter {jt}]"), &algorithms, 4, false, &DevicesSetting::One)
                .await,
        );
        joins += algorithms.len();
    }
    // A probe side hash-partitioned on its keys: inner and right joins keep that partitioning, so
    // each output row must come out of the stream its probe row came from.
    for jt in [JoinType::Inner, JoinType::Right, JoinType::RightSemi, JoinType::Full] {
        let c = JoinCase { hash_probe: true, ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing) };
        let hashed = matches!(plan(&c).properties().output_partitioning(), Partitioning::Hash(..));
        assert_eq!(hashed, jt != JoinType::Full, "{jt}: the output partitioning checked is the probe side's");
        failures.extend(
            check_out_of_core(
                &c,
                &format!("[out of core hash-partitioned probe {jt}]"),
                &algorithms,
                10,
                false,
                &DevicesSetting::One,
            )
            .await,
        );
        joins += algorithms.len();
    }
    // A consumer that executes and drains the shared build's output partitions one after
    // another: no stream waits for one not started, and the build rows decided at the end
    // (left, full, left semi and anti) come once, decided by every probe row.
    for jt in [JoinType::Inner, JoinType::Left, JoinType::Full, JoinType::LeftSemi, JoinType::LeftAnti, JoinType::Right]
    {
        for hash_probe in [false, true] {
            let c = JoinCase { hash_probe, ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing) };
            let what = format!("[out of core, partitions read one after another, hashed probe {hash_probe} {jt}]");
            failures.extend(check_out_of_core(&c, &what, &algorithms, 10, true, &DevicesSetting::One).await);
            joins += algorithms.len();
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} of {joins} joins differ:\n{}", failures.len(), failures.join("\n"));
    let _ = writeln!(std::io::stderr(), "out-of-core joins: {joins} GPU joins matched the CPU (seed {seed})");
}

/// A table of `rows` rows in four partitions: `k` (Int64 keys over `domain` values, 5% NULL),
/// `v` (Int64), `s` (a nullable string of seven values).
fn sql_table(rng: &mut StdRng, rows: usize, domain: i64, prefix: &str) -> Arc<datafusion::datasource::MemTable> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int64Array::from_iter(
                (0..rows).map(|_| if rng.random_bool(0.05) { None } else { Some(rng.random_range(0..domain)) }),
            )),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| rng.random_range(-1000..1000)))),
            Arc::new(StringArray::from_iter(
                (0..rows).map(|i| if i % 13 == 0 { None } else { Some(format!("{prefix}{}", i % 7)) }),
            )),
        ],
    )
    .expect("valid table");
    Arc::new(datafusion::datasource::MemTable::try_new(schema, partitions(&batch, 4)).expect("mem table"))
}

/// A CPU session and a GPU session (`gpu_cfg` over `config()`) with the same tables registered.
fn cpu_and_gpu_sessions(
    config: impl Fn() -> SessionConfig,
    gpu_cfg: GpuConfig,
    tables: &[(&str, Arc<datafusion::datasource::MemTable>)],
) -> (SessionContext, SessionContext) {
    let cpu = SessionContext::new_with_config(config());
    let gpu = gpu_session_context(config().with_option_extension(gpu_cfg));
    for (name, t) in tables {
        cpu.register_table(*name, Arc::clone(t) as _).expect("register");
        gpu.register_table(*name, Arc::clone(t) as _).expect("register");
    }
    (cpu, gpu)
}

/// A CPU and a GPU session over `tables` that plan Partitioned joins at any size, over four
/// partitions, with every eligible operator on the GPU.
fn partitioned_sessions(tables: &[(&str, Arc<datafusion::datasource::MemTable>)]) -> (SessionContext, SessionContext) {
    let config = || {
        let mut c = SessionConfig::new().with_target_partitions(4);
        let o = c.options_mut();
        o.optimizer.hash_join_single_partition_threshold = 0;
        o.optimizer.hash_join_single_partition_threshold_rows = 0;
        c
    };
    // (Over DataFusion's scans: the table cache has tests of its own.)
    let gpu_cfg =
        GpuConfig { min_rows: 0, placement: PlacementSetting::Always, table_cache: false, ..GpuConfig::default() };
    cpu_and_gpu_sessions(config, gpu_cfg, tables)
}

/// Runs `q` in both sessions: the GPU session's physical plan (indented), and what differs when
/// its answer is not the CPU's or its run fails (`label` names the setting in the message).
async fn compare_sql(cpu: &SessionContext, gpu: &SessionContext, q: &str, label: &str) -> (String, Option<String>) {
    let text =
        |b: &[RecordBatch]| datafusion::arrow::util::pretty::pretty_format_batches(b).expect("format").to_string();
    let want = text(&cpu.sql(q).await.expect("plan").collect().await.expect("cpu run"));
    let df = gpu.sql(q).await.expect("plan");
    let plan = df.clone().create_physical_plan().await.expect("physical plan");
    let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
    let failure = match df.collect().await {
        Ok(got) if text(&got) == want => None,
        Ok(got) => Some(format!("{q} ({label}): GPU\n{}\nCPU\n{want}\n{shown}", text(&got))),
        Err(e) => Some(format!("{q} ({label}): failed: {e}\n{shown}")),
    };
    (shown, failure)
}

/// Partitioned GPU joins read their inputs without DataFusion's hash repartitions, and nodes
/// above that rely on the join keys' partitioning (partitioned aggregates over the join, a
/// partitioned join over another) still get it: SQL answers equal DataFusion's on the CPU with
/// the repartitions removed and kept, for inner, outer, semi and chained joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_joins_without_repartitions_match_cpu() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_joins_without_repartitions_match_cpu") else { return };
    let seed = fresh_seed("gpu_joins_without_repartitions_match_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    let tables = [
        ("a", sql_table(&mut rng, 40_000, 5_000, "a")),
        ("b", sql_table(&mut rng, 60_000, 8_000, "b")),
        ("c", sql_table(&mut rng, 30_000, 3_000, "c")),
    ];
    let (cpu, gpu) = partitioned_sessions(&tables);
    let queries = [
        "SELECT a.k, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.k ORDER BY 1",
        "SELECT a.k, a.s, count(*), min(c.v) FROM a JOIN b ON a.k = b.k JOIN c ON b.k = c.k GROUP BY a.k, a.s ORDER BY 1, 2",
        "SELECT b.k, c.s, sum(b.v), count(c.v) FROM b JOIN c ON b.k = c.k WHERE b.v > 0 GROUP BY b.k, c.s HAVING count(*) > 1 ORDER BY 1, 2",
        "SELECT a.s, count(b.v), sum(a.v) FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.s ORDER BY 1",
        "SELECT a.k, b.k, count(*) FROM a FULL JOIN b ON a.k = b.k GROUP BY a.k, b.k ORDER BY 1, 2",
        "SELECT k, count(*) FROM b WHERE k IN (SELECT k FROM c) AND k NOT IN (SELECT k FROM a WHERE k IS NOT NULL AND k < 100) GROUP BY k ORDER BY 1",
        "SELECT c.k, count(*) FROM c WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.k = c.k) GROUP BY c.k ORDER BY 1",
        "SELECT count(*), sum(a.v * b.v) FROM a RIGHT JOIN b ON a.k = b.k",
        // As TPC-H q18: a join over a join and a grouped subquery, both already partitioned.
        "SELECT a.s, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k WHERE a.k IN (SELECT k FROM c GROUP BY k HAVING count(*) > 10) GROUP BY a.s ORDER BY 1",
    ];
    let mut failures = Vec::new();
    let mut removed = 0;
    let mut per_query = Vec::new();
    for keep in [false, true] {
        gpu.sql(&format!("SET gpu.join.repartition = {keep}")).await.expect("set").collect().await.expect("set");
        for q in queries {
            let (shown, failure) = compare_sql(&cpu, &gpu, q, &format!("keep {keep}")).await;
            failures.extend(failure);
            let n = shown.matches("repartitions removed").count();
            if keep && n > 0 {
                failures.push(format!("gpu.join.repartition = true removed repartitions:\n{shown}"));
            }
            removed += n;
            if !keep {
                per_query.push(n);
            }
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "joins without repartitions: {removed} GPU joins ran without them (per query {per_query:?}); seed {seed}"
    );
    // Every query has a Partitioned join over hash repartitions; a join whose output a node
    // above needs partitioned by its keys, where that node is not a GPU join rebuilt with it,
    // may keep them, so not every one goes.
    assert!(
        removed + 2 >= queries.len(),
        "too few joins ran without their repartitions ({removed}, per query {per_query:?})"
    );
    assert!(failures.is_empty(), "seed {seed}: {} queries differ:\n{}", failures.len(), failures.join("\n\n"));
}

/// A SinglePartitioned aggregate over a GPU join read around its repartitions (TPC-H q13's shape:
/// the rule hashes the join's output again for it) runs as a GPU Partial over the join's device
/// output and a GPU Final with the exchange on the device (`gpu.aggregate.split_device_input`),
/// or over the restored repartition with the option off: SQL answers equal DataFusion's on the
/// CPU either way, for inner and outer joins, nested aggregates and DISTINCT.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_single_partitioned_aggregates_over_gpu_joins_split_on_the_device() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_single_partitioned_aggregates_over_gpu_joins_split_on_the_device") else {
        return;
    };
    let seed = fresh_seed("gpu_single_partitioned_aggregates_over_gpu_joins_split_on_the_device");
    let mut rng = StdRng::seed_from_u64(seed);
    let tables = [("a", sql_table(&mut rng, 20_000, 30_000, "a")), ("b", sql_table(&mut rng, 150_000, 30_000, "b"))];
    let (cpu, gpu) = partitioned_sessions(&tables);
    let queries = [
        "SELECT a.k, count(b.v) c, sum(b.v) s FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k ORDER BY 1 NULLS FIRST",
        "SELECT c, count(*) n FROM (SELECT a.k, count(b.v) c FROM a LEFT JOIN b ON a.k = b.k GROUP BY a.k) GROUP BY c ORDER BY 1",
        "SELECT b.k, min(a.v) m, max(b.v) x, count(*) n FROM a JOIN b ON a.k = b.k GROUP BY b.k ORDER BY 1",
        "SELECT b.k, count(DISTINCT a.s) d FROM a JOIN b ON a.k = b.k GROUP BY b.k ORDER BY 1",
    ];
    let mut failures = Vec::new();
    let mut split_per_query = Vec::new();
    for split in [true, false] {
        let set = format!("SET gpu.aggregate.split_device_input = {split}");
        gpu.sql(&set).await.expect("set").collect().await.expect("set");
        for q in queries {
            let (shown, failure) = compare_sql(&cpu, &gpu, q, &format!("split {split}")).await;
            failures.extend(failure);
            // The split aggregate's Final reads its Partial's states on the device; the join's
            // output is not hashed on the host. (EXPLAIN names the removed exchange on the
            // Final's own line, which the join's line follows.)
            let restored = shown.lines().zip(shown.lines().skip(1)).any(|(a, b)| {
                a.trim_start().starts_with("RepartitionExec: partitioning=Hash") && b.contains("GpuHashJoinExec")
            });
            if split {
                split_per_query.push(!restored && shown.contains("merges on the device the states of"));
            } else if !restored {
                failures.push(format!("{q}: with the split off the join's output is not repartitioned:\n{shown}"));
            }
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "aggregates over GPU joins split on the device (per query {split_per_query:?}); seed {seed}"
    );
    assert!(failures.is_empty(), "seed {seed}: {} queries differ:\n{}", failures.len(), failures.join("\n\n"));
    // DISTINCT keeps its own plan; the other three split.
    assert!(split_per_query[..3].iter().all(|&s| s), "seed {seed}: not split: {split_per_query:?}");
}

/// A GPU aggregate directly over a GPU join reads the join's output batches on the device (no
/// download and upload between them), with its projections fused or not, grouped and global,
/// through its exchange, and over empty, outer (null-extended) and semi join outputs: SQL answers
/// equal DataFusion's on the CPU, and EXPLAIN says which aggregates read device batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregates_read_gpu_join_output_on_the_device() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregates_read_gpu_join_output_on_the_device") else { return };
    let seed = fresh_seed("gpu_aggregates_read_gpu_join_output_on_the_device");
    let mut rng = StdRng::seed_from_u64(seed);
    let tables = [
        ("a", sql_table(&mut rng, 3_000, 4_000, "a")),
        ("b", sql_table(&mut rng, 80_000, 4_000, "b")),
        ("c", sql_table(&mut rng, 2_000, 4_000, "c")),
    ];
    let config = || SessionConfig::new().with_target_partitions(4);
    // (Over DataFusion's scans: the table cache has tests of its own.)
    let gpu_cfg =
        GpuConfig { min_rows: 0, placement: PlacementSetting::Always, table_cache: false, ..GpuConfig::default() };
    let (cpu, gpu) = cpu_and_gpu_sessions(config, gpu_cfg, &tables);
    let queries = [
        "SELECT a.s, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.s ORDER BY 1",
        "SELECT b.k - 7, sum(a.v * b.v), min(b.v), count(a.s) FROM a JOIN b ON a.k = b.k GROUP BY 1 ORDER BY 1",
        "SELECT count(*), sum(b.v), count(a.s) FROM a JOIN b ON a.k = b.k",
        "SELECT a.s, count(*) FROM a JOIN b ON a.k = b.k WHERE a.k < -5 GROUP BY a.s ORDER BY 1",
        "SELECT count(*), sum(b.v) FROM a JOIN b ON a.k = b.k WHERE a.k < -5",
        "SELECT b.s, count(a.v), sum(a.v) FROM a RIGHT JOIN b ON a.k = b.k GROUP BY b.s ORDER BY 1",
        "SELECT k, count(*), sum(v) FROM b WHERE k IN (SELECT k FROM c) GROUP BY k ORDER BY 1",
        "SELECT a.s, count(DISTINCT b.v) FROM a JOIN b ON a.k = b.k GROUP BY a.s ORDER BY 1",
        // `%` does not compile for the device: DataFusion computes it, and the aggregate reads
        // host batches (the last query, left out of the check below).
        "SELECT b.k % 7, sum(b.v), count(a.s) FROM a JOIN b ON a.k = b.k GROUP BY 1 ORDER BY 1",
    ];
    let mut failures = Vec::new();
    let mut on_device = Vec::new();
    for fuse in [true, false] {
        gpu.sql(&format!("SET gpu.fuse.expressions = {fuse}")).await.expect("set").collect().await.expect("set");
        for q in queries {
            let (shown, failure) = compare_sql(&cpu, &gpu, q, &format!("fuse {fuse}")).await;
            failures.extend(failure);
            on_device.push(shown.matches("reads GpuHashJoinExec's batches on the device").count());
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "aggregates over GPU joins: {} read device batches (per query {on_device:?}); seed {seed}",
        on_device.iter().sum::<usize>()
    );
    assert!(failures.is_empty(), "seed {seed}: {} queries differ:\n{}", failures.len(), failures.join("\n\n"));
    // With fused expressions every query has an aggregate right over a GPU join. (Without, the
    // projections computed on the host stand between them in some.)
    assert!(
        on_device[..queries.len() - 1].iter().all(|&n| n > 0),
        "seed {seed}: an aggregate over a GPU join read host batches (per query {on_device:?})"
    );
}

/// The filters and projections below GPU joins run on the device (`GpuFilterProjectExec`), on
/// the probe and the build side, with the host pre-filter filtering every partition
/// (`gpu.fuse.host_filter_below = 1`), none (`0`) or as priced: SQL answers equal DataFusion's on the
/// CPU, including filters that keep nothing, filters on nullable and string columns, computed
/// join keys, LIKE, and outer, semi and anti joins; and with `gpu.fuse.expressions = false` the chains
/// stay on the CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_join_inputs_filtered_and_projected_on_the_device() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_join_inputs_filtered_and_projected_on_the_device") else { return };
    let seed = fresh_seed("gpu_join_inputs_filtered_and_projected_on_the_device");
    let mut rng = StdRng::seed_from_u64(seed);
    let tables = [
        ("a", sql_table(&mut rng, 5_000, 4_000, "a")),
        ("b", sql_table(&mut rng, 90_000, 4_000, "b")),
        ("c", sql_table(&mut rng, 3_000, 4_000, "c")),
    ];
    let config = || SessionConfig::new().with_target_partitions(4);
    // (Over DataFusion's scans: the table cache has tests of its own.)
    let gpu_cfg =
        GpuConfig { min_rows: 0, placement: PlacementSetting::Always, table_cache: false, ..GpuConfig::default() };
    let (cpu, gpu) = cpu_and_gpu_sessions(config, gpu_cfg, &tables);
    let queries = [
        "SELECT a.s, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k WHERE b.v > 100 AND a.v < 500 GROUP BY a.s ORDER BY 1",
        "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k WHERE b.s = 'b3' AND a.s IS NOT NULL ORDER BY 1, 2",
        "SELECT count(*), sum(b.v) FROM a JOIN b ON a.k = b.k WHERE b.v > 5000",
        "SELECT x.k2, count(*) FROM (SELECT k * 2 AS k2, v FROM b WHERE v BETWEEN -200 AND 300) x JOIN (SELECT k + k AS k2 FROM a WHERE v <> 0) y ON x.k2 = y.k2 GROUP BY x.k2 ORDER BY 1 LIMIT 20",
        "SELECT b.s, count(a.v), sum(b.v) FROM a RIGHT JOIN b ON a.k = b.k AND a.v > 0 WHERE b.v < 0 GROUP BY b.s ORDER BY 1",
        "SELECT a.s, count(b.v) FROM a LEFT JOIN b ON a.k = b.k WHERE a.v % 3 = 1 GROUP BY a.s ORDER BY 1",
        "SELECT k, count(*) FROM b WHERE v > -500 AND k IN (SELECT k FROM c WHERE v > 0) GROUP BY k ORDER BY 1 LIMIT 30",
        "SELECT count(*) FROM b WHERE v < 900 AND NOT EXISTS (SELECT 1 FROM a WHERE a.k = b.k AND a.v > 250)",
        "SELECT a.k, c.s, a.v + c.v FROM a JOIN c ON a.k = c.k JOIN b ON b.k = c.k WHERE b.v > 990 AND c.s <> 'c1' ORDER BY 1, 2, 3",
        "SELECT a.s, count(*), sum(b.v) FROM a JOIN b ON a.k = b.k WHERE b.s LIKE '%3%' AND a.s NOT LIKE 'a1%' GROUP BY a.s ORDER BY 1",
    ];
    let settings = [
        ("gpu.fuse.host_filter_priced = false", "gpu.fuse.host_filter_below = 1"),
        ("gpu.fuse.host_filter_priced = false", "gpu.fuse.host_filter_below = 0"),
        ("gpu.fuse.host_filter_priced = true", "gpu.fuse.host_filter_below = 0.5"),
    ];
    let mut failures = Vec::new();
    let mut fused = Vec::new();
    for (a, b) in settings {
        for s in [a, b] {
            gpu.sql(&format!("SET {s}")).await.expect("set").collect().await.expect("set");
        }
        for q in queries {
            let (shown, failure) = compare_sql(&cpu, &gpu, q, &format!("{a}, {b}")).await;
            failures.extend(failure);
            fused.push(shown.matches("GpuFilterProjectExec").count());
        }
    }
    gpu.sql("SET gpu.fuse.expressions = false").await.expect("set").collect().await.expect("set");
    for q in queries {
        let (shown, failure) = compare_sql(&cpu, &gpu, q, "fuse_expressions = false").await;
        failures.extend(failure);
        if shown.contains("GpuFilterProjectExec") {
            failures.push(format!("gpu.fuse.expressions = false fused a join input:\n{shown}"));
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "join inputs on the device: {} chains fused (per query and setting {fused:?}); seed {seed}",
        fused.iter().sum::<usize>()
    );
    assert!(failures.is_empty(), "seed {seed}: {} queries differ:\n{}", failures.len(), failures.join("\n\n"));
    // `%` does not compile for the device (query 6); every other query filters a join input.
    for (i, n) in fused.iter().enumerate() {
        assert!(i % queries.len() == 5 || *n > 0, "seed {seed}: query {} fused no join input", i % queries.len());
    }
}

/// The multi-GPU join on 2 and 4 logical devices of one GPU: every join type x null equality x
/// key type x distribution of the single-device suite (CollectLeft), then partitioned inputs
/// (with and without their repartitions), large and skewed sides, filters and NOT IN (which
/// runs on one device), each against DataFusion's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_multi_gpu_join_matches_cpu_on_logical_devices() {
    let _l = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_multi_gpu_join_matches_cpu_on_logical_devices") else { return };
    let seed = fresh_seed("gpu_multi_gpu_join_matches_cpu_on_logical_devices");
    let mut rng = StdRng::seed_from_u64(seed);
    let multi = [JoinAlgorithm::SmjMultiGpu];
    let sets = [DevicesSetting::List(vec![0, 0]), DevicesSetting::List(vec![0, 0, 0, 0])];
    let mut failures = Vec::new();
    let mut joins = 0;
    let started = std::time::Instant::now();
    for (kname, types) in key_type_cases() {
        for (dist, nb, np) in DISTRIBUTIONS {
            let left = table(&mut rng, &types, dist, nb, nb.max(np), true, "l");
            let right = table(&mut rng, &types, dist, np, nb.max(np), false, "r");
            for jt in JOIN_TYPES {
                for nulls in [NullEquality::NullEqualsNothing, NullEquality::NullEqualsNull] {
                    let c = JoinCase::new(&left, &right, types.len(), jt, nulls);
                    for set in &sets {
                        let what = format!("[devices {set} {kname} {dist:?} {nb}x{np} {jt} {nulls:?}]");
                        failures.extend(check_on(&c, &what, &multi, 1500, set).await);
                        joins += 1;
                    }
                }
            }
        }
        let _ = writeln!(
            std::io::stderr(),
            "multi-GPU join differential: {kname} done, {joins} joins, {} failures, {:.1} s",
            failures.len(),
            started.elapsed().as_secs_f64()
        );
    }
    // Partitioned inputs, with their repartitions kept and read around.
    for (kname, types) in [("int32", vec![DataType::Int32]), ("utf8", vec![DataType::Utf8])] {
        let left = table(&mut rng, &types, Dist::Duplicates, 5_000, 5_000, true, "l");
        let right = table(&mut rng, &types, Dist::Duplicates, 8_000, 5_000, false, "r");
        for jt in JOIN_TYPES {
            for keep_repartitions in [true, false] {
                let c = JoinCase {
                    mode: PartitionMode::Partitioned,
                    keep_repartitions,
                    ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing)
                };
                for set in &sets {
                    let what =
                        format!("[devices {set} partitioned {kname} {jt} keep_repartitions={keep_repartitions}]");
                    failures.extend(check_on(&c, &what, &multi, 1 << 22, set).await);
                    joins += 1;
                }
            }
        }
    }
    // Large and skewed sides (a hot key holds about 38% of Zipf 1.5's rows: one device takes it).
    let types = vec![DataType::Int64];
    for (dist, nb, np) in [(Dist::Unique, 200_000, 300_000), (Dist::Zipf(1.5), 12_000, 400)] {
        let left = table(&mut rng, &types, dist, nb, nb, true, "l");
        let right = table(&mut rng, &types, dist, np, nb, false, "r");
        for jt in [JoinType::Inner, JoinType::Full, JoinType::LeftSemi, JoinType::RightAnti] {
            let c = JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing);
            for set in &sets {
                let what = format!("[devices {set} large {dist:?} {jt}]");
                failures.extend(check_on(&c, &what, &multi, 100_000, set).await);
                joins += 1;
            }
        }
    }
    // A residual filter, and NOT IN.
    let types = vec![DataType::Int32];
    let left = table(&mut rng, &types, Dist::Duplicates, 3000, 3000, true, "l");
    let right = table(&mut rng, &types, Dist::Duplicates, 3000, 3000, false, "r");
    let filter = join_filter(&left, &right, &[(JoinSide::Left, 1), (JoinSide::Right, 1)], |s| {
        let sum = binary(col("l_row", s).unwrap(), Operator::Plus, col("r_row", s).unwrap(), s).unwrap();
        binary(sum, Operator::Gt, datafusion::physical_expr::expressions::lit(2500i64), s).unwrap()
    });
    for jt in JOIN_TYPES {
        let c = JoinCase {
            filter: Some(filter.clone()),
            ..JoinCase::new(&left, &right, 1, jt, NullEquality::NullEqualsNothing)
        };
        for set in &sets {
            failures.extend(check_on(&c, &format!("[devices {set} filter {jt}]"), &multi, 1500, set).await);
            joins += 1;
        }
    }
    let c = JoinCase {
        null_aware: true,
        ..JoinCase::new(&left, &right, 1, JoinType::LeftAnti, NullEquality::NullEqualsNothing)
    };
    for set in &sets {
        failures.extend(check_on(&c, &format!("[devices {set} null-aware anti]"), &multi, 1500, set).await);
        joins += 1;
    }
    assert!(failures.is_empty(), "seed {seed}: {} of {joins} joins differ:\n{}", failures.len(), failures.join("\n"));
    let _ = writeln!(std::io::stderr(), "multi-GPU join differential: {joins} joins matched the CPU (seed {seed})");
}
