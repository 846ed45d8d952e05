//! Differential tests of the GPU group-by against DataFusion's `AggregateExec` on the CPU: the
//! same SQL over the same random data (seed printed; replay with DFG_TEST_SEED), group keys of
//! every supported kind (integers, strings, decimals, dates, Booleans, dictionaries, several
//! columns, none), group counts from 1 to all-distinct and Zipf skew, NULLs in keys and values,
//! empty input, COUNT/SUM/MIN/MAX/AVG and COUNT(DISTINCT) with FILTER, both algorithms, Partial/Final and Single
//! modes, chunked input whose states are merged, and plans that mix GPU and CPU stages.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, DictionaryArray, Float32Array, Float64Array,
    Int8Array, Int32Array, Int64Array, RecordBatch, StringArray, UInt16Array,
};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Int32Type};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::MemTable;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::columns::DeviceBatch;
use crate::config::GpuConfig;
use crate::cost::PlacementSetting;
use crate::exec::GpuAggregateExec;
use crate::session::gpu_session_context;
use crate::testing::{Zipf, fresh_seed, gpu_lock, gpu_or_skip, random_array};

/// How group ids are drawn.
#[derive(Debug, Clone, Copy)]
enum Dist {
    /// Uniform over this many groups.
    Groups(u64),
    /// Every row its own group.
    Distinct,
    /// Zipf over 100 000 values with this exponent.
    Zipf(f64),
}

fn ids(rng: &mut StdRng, dist: Dist, rows: usize) -> Vec<u64> {
    match dist {
        Dist::Groups(g) => (0..rows).map(|_| rng.random_range(0..g)).collect(),
        Dist::Distinct => {
            let mut v: Vec<u64> = (0..rows as u64).collect();
            for i in (1..v.len()).rev() {
                v.swap(i, rng.random_range(0..=i));
            }
            v
        }
        Dist::Zipf(s) => {
            let z = Zipf::new(100_000, s);
            (0..rows).map(|_| z.sample(rng)).collect()
        }
    }
}

fn maybe<T>(rng: &mut StdRng, null_fraction: f64, v: T) -> Option<T> {
    if null_fraction > 0.0 && rng.random_bool(null_fraction) { None } else { Some(v) }
}

/// Key columns derived from group ids (distinct ids give distinct keys; NULLs are extra groups),
/// and value columns of every aggregated type.
fn table(rng: &mut StdRng, dist: Dist, rows: usize) -> RecordBatch {
    let id = ids(rng, dist, rows);
    let kn = 0.02;
    let mut cols: Vec<(&str, ArrayRef)> = vec![
        ("k_i64", Arc::new(id.iter().map(|&x| maybe(rng, kn, x as i64 * 7919 - 1_000_000)).collect::<Int64Array>())),
        ("k_i32", Arc::new(id.iter().map(|&x| Some((x % 1_000_003) as i32 - 500_000)).collect::<Int32Array>())),
        ("k_i8", Arc::new(id.iter().map(|&x| maybe(rng, kn, (x / 1_000_003 % 100) as i8)).collect::<Int8Array>())),
        ("k_str", Arc::new(id.iter().map(|&x| maybe(rng, kn, format!("key-{x}"))).collect::<StringArray>())),
        (
            "k_dec",
            Arc::new(
                id.iter()
                    .map(|&x| maybe(rng, kn, x as i128 * 3 - 7))
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(12, 2)
                    .expect("decimal type"),
            ),
        ),
        ("k_bool", Arc::new(id.iter().map(|&x| maybe(rng, kn, x % 2 == 0)).collect::<BooleanArray>())),
        ("k_date", Arc::new(id.iter().map(|&x| Some((x % 30_000) as i32)).collect::<Date32Array>())),
        ("k_u16", Arc::new(id.iter().map(|&x| maybe(rng, kn, (x / 30_000 % 60_000) as u16)).collect::<UInt16Array>())),
        (
            "k_dict",
            Arc::new(
                id.iter()
                    .map(|&x| if x % 97 == 3 { None } else { Some(format!("d{}", x % 50)) })
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|o| o.as_deref())
                    .collect::<DictionaryArray<Int32Type>>(),
            ),
        ),
    ];
    let vn = 0.1;
    let mut random = |dt: DataType, nulls: f64| random_array(rng, &dt, rows, nulls);
    cols.extend([
        ("v_i8", random(DataType::Int8, vn)),
        ("v_i32", random(DataType::Int32, vn)),
        ("v_i64", random(DataType::Int64, 0.0)),
        ("v_u32", random(DataType::UInt32, vn)),
        ("v_u64", random(DataType::UInt64, 0.0)),
        ("v_dec", random(DataType::Decimal128(15, 2), vn)),
        ("v_dec38", random(DataType::Decimal128(38, 10), 0.0)),
        ("v_date", random(DataType::Date32, vn)),
        ("v_ts", random(DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None), 0.0)),
        ("v_str", random(DataType::Utf8, vn)),
        ("flag", random(DataType::Boolean, vn)),
    ]);
    // Floats positive, so sums in any order agree to rounding.
    let f64s: Float64Array = (0..rows)
        .map(|_| {
            let x = rng.random::<f64>() * 1000.0;
            maybe(rng, vn, x)
        })
        .collect();
    let f32s: Float32Array = (0..rows).map(|_| Some(rng.random::<f32>() * 1000.0)).collect();
    cols.push(("v_f64", Arc::new(f64s)));
    cols.push(("v_f32", Arc::new(f32s)));
    RecordBatch::try_from_iter(cols).expect("test table")
}

const AGGREGATES: &str = "count(*) c0, count(v_i32) c1, count(v_str) c2, \
    sum(v_i8) s0, sum(v_i32) s1, sum(v_i64) s2, sum(v_u32) s3, sum(v_u64) s4, sum(v_f64) s5, sum(v_f32) s6, \
    sum(v_dec) s7, sum(v_dec38) s8, \
    min(v_i8) m0, max(v_i32) m1, min(v_i64) m2, max(v_u32) m3, min(v_u64) m4, max(v_dec) m5, min(v_dec38) m6, \
    max(v_date) m7, min(v_ts) m8, max(v_dec38) m9, \
    avg(v_i32) a0, avg(v_f64) a1, avg(v_dec) a2, avg(v_u32) a3, \
    count(*) FILTER (WHERE flag) f0, sum(v_i64) FILTER (WHERE flag) f1, min(v_dec) FILTER (WHERE flag) f2";

fn query(keys: &[&str]) -> String {
    if keys.is_empty() {
        return format!("SELECT {AGGREGATES} FROM t");
    }
    let k = keys.join(", ");
    let order = keys.iter().map(|k| format!("{k} NULLS FIRST")).collect::<Vec<_>>().join(", ");
    format!("SELECT {k}, {AGGREGATES} FROM t GROUP BY {k} ORDER BY {order}")
}

const KEY_SETS: &[&[&str]] = &[
    &["k_i64"],
    &["k_i32", "k_i8"],
    &["k_str"],
    &["k_dec", "k_bool"],
    &["k_date", "k_u16"],
    &["k_dict"],
    &["k_str", "k_i64"],
    &[],
];

fn register(ctx: &SessionContext, batch: &RecordBatch, parts: usize) {
    let n = batch.num_rows();
    let chunk = n.div_ceil(parts.max(1)).max(1);
    let partitions: Vec<Vec<RecordBatch>> = if n == 0 {
        vec![vec![batch.clone()]]
    } else {
        (0..n).step_by(chunk).map(|o| vec![batch.slice(o, chunk.min(n - o))]).collect()
    };
    let table = MemTable::try_new(batch.schema(), partitions).expect("memtable");
    ctx.register_table("t", Arc::new(table)).expect("register");
}

fn gpu_ctx(algorithm: AggregateAlgorithmSetting, partitions: usize, batch_rows: usize) -> SessionContext {
    gpu_ctx_with(algorithm, partitions, batch_rows, true)
}

/// As [`gpu_ctx`], with the device exchange between GPU aggregate stages on or off.
fn gpu_ctx_with(
    algorithm: AggregateAlgorithmSetting,
    partitions: usize,
    batch_rows: usize,
    exchange: bool,
) -> SessionContext {
    let cfg = GpuConfig {
        aggregate_exchange: exchange,
        min_rows: 0,
        placement: PlacementSetting::Always,
        aggregate_algorithm: algorithm,
        batch_rows,
        // Every filter below an aggregate runs on the GPU (the host may filter first, see
        // HostPrefilter).
        fuse_filters: true,
        // The GPU's own answer or error: no rerun on the CPU to hide it.
        cpu_fallback: false,
        // The aggregates over DataFusion's scans (the table cache has tests of its own).
        table_cache: false,
        ..Default::default()
    };
    gpu_session_context(SessionConfig::new().with_target_partitions(partitions).with_option_extension(cfg))
}

fn count_nodes(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let text = displayable(plan.as_ref()).indent(true).to_string();
    text.lines().filter(|l| l.trim_start().starts_with(name)).count()
}

/// Compares two results column by column; Float64 within a relative 1e-9.
fn compare(want: &[RecordBatch], got: &[RecordBatch], what: &str) -> Option<String> {
    let (Some(w0), Some(g0)) = (want.first(), got.first()) else {
        return (want.iter().map(|b| b.num_rows()).sum::<usize>() != got.iter().map(|b| b.num_rows()).sum::<usize>())
            .then(|| format!("{what}: one side has no batches"));
    };
    let w = concat_batches(&w0.schema(), want).ok()?;
    let g = concat_batches(&g0.schema(), got).ok()?;
    if w.num_rows() != g.num_rows() {
        return Some(format!("{what}: {} rows, expected {}", g.num_rows(), w.num_rows()));
    }
    for (i, f) in w.schema().fields().iter().enumerate() {
        let (a, b) = (w.column(i), g.column(i));
        if a.data_type() != b.data_type() {
            return Some(format!("{what}: column {} is {}, expected {}", f.name(), b.data_type(), a.data_type()));
        }
        if let (Some(x), Some(y)) =
            (a.as_any().downcast_ref::<Float64Array>(), b.as_any().downcast_ref::<Float64Array>())
        {
            for r in 0..x.len() {
                let ok = match (x.is_null(r), y.is_null(r)) {
                    (true, true) => true,
                    (false, false) => {
                        let (p, q) = (x.value(r), y.value(r));
                        (p - q).abs() <= 1e-9 * p.abs().max(q.abs()).max(1e-300)
                    }
                    _ => false,
                };
                if !ok {
                    return Some(format!(
                        "{what}: column {} row {r}: {:?} vs expected {:?}",
                        f.name(),
                        y.slice(r, 1),
                        x.slice(r, 1)
                    ));
                }
            }
        } else if a.as_ref() != b.as_ref() {
            let first = (0..a.len()).find(|&r| a.slice(r, 1).as_ref() != b.slice(r, 1).as_ref()).unwrap_or(0);
            return Some(format!(
                "{what}: column {} differs first at row {first}: {:?} vs expected {:?}",
                f.name(),
                b.slice(first, 1),
                a.slice(first, 1)
            ));
        }
    }
    None
}

/// Runs `sql` on the CPU and on the GPU with each setting; returns the failures.
async fn check(
    batch: &RecordBatch,
    sql: &str,
    what: &str,
    configs: &[(AggregateAlgorithmSetting, usize, usize)],
) -> Vec<String> {
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, batch, 4);
    let want = match async { cpu.sql(sql).await?.collect().await }.await {
        Ok(b) => b,
        Err(e) => return vec![format!("{what}: the CPU query failed: {e}")],
    };
    let mut failures = Vec::new();
    for &(algorithm, partitions, batch_rows) in configs {
        let label = format!("{what} [{algorithm}, {partitions} partitions, batch_rows {batch_rows}]");
        let ctx = gpu_ctx(algorithm, partitions, batch_rows);
        register(&ctx, batch, 4);
        let result = async {
            let plan = ctx.sql(sql).await?.create_physical_plan().await?;
            let (gpu, cpu) = (count_nodes(&plan, "GpuAggregateExec"), count_nodes(&plan, "AggregateExec"));
            if gpu == 0 || cpu > 0 {
                let text = displayable(plan.as_ref()).indent(true).to_string();
                return Ok(Err(format!("{label}: {cpu} aggregates stayed on the CPU:\n{text}")));
            }
            Ok::<_, datafusion::error::DataFusionError>(Ok(collect(plan, ctx.task_ctx()).await?))
        }
        .await;
        let failure = match result {
            Err(e) => Some(format!("{label}: the GPU query failed: {e}")),
            Ok(Err(e)) => Some(e),
            Ok(Ok(got)) => compare(&want, &got, &label),
        };
        if let Some(f) = failure {
            let _ = writeln!(std::io::stderr(), "AGGREGATE MISMATCH {f}");
            failures.push(f);
        }
    }
    failures
}

/// Each algorithm with Partial + FinalPartitioned over 4 partitions, and Single over 1 partition
/// in chunks small enough that chunk states are merged: (algorithm, partitions, batch_rows).
/// Algorithm x partitions x `gpu.batch_rows`: 4 partitions run Partial and FinalPartitioned,
/// whose states meet on the device (in 7000-row chunks too: the partial chunks' states merge, and
/// the Final takes the partitions' states in several chunks); 1 partition runs Single in chunks.
const EVERY_MODE: [(AggregateAlgorithmSetting, usize, usize); 7] = [
    (AggregateAlgorithmSetting::Hash, 4, 1 << 22),
    (AggregateAlgorithmSetting::Hash, 4, 7_000),
    (AggregateAlgorithmSetting::Sort, 4, 1 << 22),
    (AggregateAlgorithmSetting::Partition, 4, 1 << 22),
    (AggregateAlgorithmSetting::Hash, 1, 7_000),
    (AggregateAlgorithmSetting::Sort, 1, 7_000),
    (AggregateAlgorithmSetting::Partition, 1, 7_000),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_matches_cpu_for_every_key_type_and_distribution() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_matches_cpu_for_every_key_type_and_distribution") else { return };
    let seed = fresh_seed("gpu_aggregate_matches_cpu_for_every_key_type_and_distribution");
    let mut rng = StdRng::seed_from_u64(seed);
    let configs = EVERY_MODE;
    let dists = [
        Dist::Groups(1),
        Dist::Groups(16),
        Dist::Groups(1024),
        Dist::Groups(65_536),
        Dist::Distinct,
        Dist::Zipf(1.0),
        Dist::Zipf(1.5),
    ];
    let mut failures = Vec::new();
    let mut runs = 0;
    for dist in dists {
        let rows = rng.random_range(40_000..60_000);
        let batch = table(&mut rng, dist, rows);
        for keys in KEY_SETS {
            failures.extend(check(&batch, &query(keys), &format!("{dist:?} keys {keys:?}"), &configs).await);
            runs += configs.len();
        }
    }
    // Empty input: no groups, and one row for the global aggregate.
    let empty = table(&mut rng, Dist::Groups(4), 0);
    for keys in [&["k_i64"][..], &[]] {
        failures.extend(check(&empty, &query(keys), &format!("empty input, keys {keys:?}"), &configs).await);
        runs += configs.len();
    }
    let _ = writeln!(std::io::stderr(), "{runs} GPU aggregations compared, {} failed", failures.len());
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
}

/// Arguments, group keys and FILTERs that are expressions: DataFusion evaluates them on the host
/// batch, the GPU groups and reduces the results.
const EXPRESSION_QUERIES: &[&str] = &[
    "SELECT k_i32 % 7 AS g, count(*) c, sum(v_i64 * 2 + 1) s, sum(v_dec * 2) d, avg(v_f64 * 0.5) a, \
     min(v_i32 - 3) m, max(CAST(v_i8 AS INT) * 2) x, count(*) FILTER (WHERE v_i32 > 0) f, \
     sum(v_i64) FILTER (WHERE v_str LIKE 'a%') f2 FROM t GROUP BY k_i32 % 7 ORDER BY g NULLS FIRST",
    "SELECT upper(k_str) u, extract(year from k_date) y, sum(CAST(v_u32 AS BIGINT) + 1) s, count(v_str) c FROM t \
     GROUP BY upper(k_str), extract(year from k_date) ORDER BY u NULLS FIRST, y NULLS FIRST",
    "SELECT sum(v_i64 * CAST(v_i8 AS BIGINT)) s, avg(v_dec + v_dec) a, sum(CASE WHEN flag THEN 1 ELSE 0 END) c FROM t",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_evaluates_expressions_on_the_host() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_evaluates_expressions_on_the_host") else { return };
    let seed = fresh_seed("gpu_aggregate_evaluates_expressions_on_the_host");
    let mut rng = StdRng::seed_from_u64(seed);
    use AggregateAlgorithmSetting::{Hash, Partition, Sort};
    let configs = [(Hash, 4, 1 << 22), (Sort, 1, 7_000), (Partition, 4, 1 << 22)];
    let mut failures = Vec::new();
    for dist in [Dist::Groups(100), Dist::Zipf(1.2)] {
        let rows = rng.random_range(30_000..50_000);
        let batch = table(&mut rng, dist, rows);
        for sql in EXPRESSION_QUERIES {
            failures.extend(check(&batch, sql, &format!("{dist:?} {sql}"), &configs).await);
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
}

/// COUNT(DISTINCT) over integers, strings, decimals, dates, Booleans, dictionaries and a
/// computed value, with NULLs, FILTER, other aggregates beside it, grouped and global. Several
/// distinct columns keep DataFusion from rewriting them into two group-bys, so the List states
/// go between Partial and Final (and through chunk merges with small `batch_rows`).
const DISTINCT_QUERIES: &[&str] = &[
    "SELECT k_i8, count(DISTINCT k_i32) d0, count(DISTINCT k_str) d1, count(DISTINCT v_i8) d2, \
     count(DISTINCT k_dict) d3, sum(v_i64) s, avg(v_f64) a, count(*) c FROM t GROUP BY k_i8 ORDER BY k_i8 NULLS FIRST",
    "SELECT k_bool, count(DISTINCT k_dec) d0, count(DISTINCT v_date) FILTER (WHERE flag) d1, \
     count(DISTINCT k_u16) d2, count(DISTINCT v_i32 % 100) d3, max(v_i32) m FROM t GROUP BY k_bool \
     ORDER BY k_bool NULLS FIRST",
    "SELECT count(DISTINCT k_i64) d0, count(DISTINCT v_str) d1, count(DISTINCT k_date) d2, count(*) c FROM t",
    "SELECT k_str, k_i8, count(DISTINCT v_i8) d0, count(DISTINCT k_bool) d1 FROM t GROUP BY k_str, k_i8 \
     ORDER BY k_str NULLS FIRST, k_i8 NULLS FIRST",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_count_distinct_matches_cpu() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_count_distinct_matches_cpu") else { return };
    let seed = fresh_seed("gpu_count_distinct_matches_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    let configs = EVERY_MODE;
    let mut failures = Vec::new();
    let mut runs = 0;
    for dist in [Dist::Groups(1), Dist::Groups(16), Dist::Groups(1024), Dist::Distinct, Dist::Zipf(1.5)] {
        let rows = rng.random_range(40_000..60_000);
        let batch = table(&mut rng, dist, rows);
        for sql in DISTINCT_QUERIES {
            failures.extend(check(&batch, sql, &format!("{dist:?} {sql}"), &configs).await);
            runs += configs.len();
        }
    }
    let empty = table(&mut rng, Dist::Groups(4), 0);
    for sql in DISTINCT_QUERIES {
        failures.extend(check(&empty, sql, &format!("empty input {sql}"), &configs).await);
        runs += configs.len();
    }
    let _ = writeln!(std::io::stderr(), "{runs} GPU COUNT(DISTINCT) aggregations compared, {} failed", failures.len());
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_matches_cpu_with_millions_of_groups() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_matches_cpu_with_millions_of_groups") else { return };
    let seed = fresh_seed("gpu_aggregate_matches_cpu_with_millions_of_groups");
    let mut rng = StdRng::seed_from_u64(seed);
    let rows = 3 << 21;
    let groups = 1u64 << 22;
    let id: Vec<i64> = (0..rows).map(|_| rng.random_range(0..groups as i64)).collect();
    let v: Vec<Option<i64>> = (0..rows)
        .map(|_| {
            let x = rng.random_range(-1_000_000..1_000_000);
            maybe(&mut rng, 0.05, x)
        })
        .collect();
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(Int64Array::from(id)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(v)) as ArrayRef),
    ])
    .expect("batch");
    let sql = "SELECT k, count(*), sum(v), min(v), max(v), avg(v) FROM t GROUP BY k ORDER BY k";
    use AggregateAlgorithmSetting::{Auto, Hash, Partition, Sort};
    let failures = check(
        &batch,
        sql,
        "2^22 groups",
        &[(Hash, 4, 1 << 22), (Sort, 1, 1 << 21), (Partition, 4, 1 << 22), (Auto, 1, 1 << 20)],
    )
    .await;
    assert!(failures.is_empty(), "seed {seed}: {failures:?}");
}

/// Swaps the GPU aggregates of `modes` back to DataFusion's.
fn cpu_for(plan: Arc<dyn ExecutionPlan>, modes: &[AggregateMode]) -> Arc<dyn ExecutionPlan> {
    plan.transform_up(|node| {
        if let Some(g) = node.downcast_ref::<GpuAggregateExec>() {
            let inner = g.original();
            if let Some(a) = inner.downcast_ref::<AggregateExec>()
                && modes.contains(a.mode())
            {
                let children = node.children().into_iter().cloned().collect();
                let opts = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
                return Ok(Transformed::yes(Arc::clone(inner).replace_children(children, opts)?));
            }
        }
        Ok(Transformed::no(node))
    })
    .expect("plan rewrite")
    .data
}

/// With the device exchange, a GPU Final aggregate takes the place of the exchange and the GPU
/// Partial below it (EXPLAIN says so); its output keeps the exchange's hash partitioning, so a
/// partitioned join above it, whose other side DataFusion repartitions by the same hash, still
/// finds every match; and the host exchange (the option off) gives the same answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_stages_exchange_states_on_the_device() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_stages_exchange_states_on_the_device") else { return };
    let seed = fresh_seed("gpu_aggregate_stages_exchange_states_on_the_device");
    let mut rng = StdRng::seed_from_u64(seed);
    let batch = table(&mut rng, Dist::Zipf(1.0), 60_000);
    let grouped = "SELECT k_str, k_i64, count(*) AS c, sum(v_i32) AS s FROM t GROUP BY k_str, k_i64";
    let queries = [
        // FinalPartitioned whose hash partitions meet a repartitioned side in a partitioned join.
        format!(
            "SELECT a.k_str, a.k_i64, a.c, a.s, b.v_i32 FROM ({grouped}) a JOIN t b \
             ON a.k_str = b.k_str AND a.k_i64 = b.k_i64 ORDER BY 1, 2, 5 NULLS FIRST"
        ),
        // Final over a CoalescePartitionsExec (no group columns), with COUNT(DISTINCT).
        "SELECT count(*), count(DISTINCT k_str), sum(v_i32), avg(v_f64) FROM t".to_string(),
        query(&["k_dec", "k_bool"]),
    ];
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    for sql in &queries {
        let want = cpu.sql(sql).await.unwrap().collect().await.unwrap();
        // The last run's partial partitions all find fewer rows than gpu.cost.min_rows (set after
        // planning) and run on the CPU; the Final merges their states there too.
        for (exchange, batch_rows, all_cpu) in
            [(true, 1 << 22, false), (true, 5_000, false), (false, 1 << 22, false), (true, 1 << 22, true)]
        {
            let ctx = gpu_ctx_with(AggregateAlgorithmSetting::Hash, 4, batch_rows, exchange);
            // Keep the join partitioned, as it is between large tables.
            for opt in ["hash_join_single_partition_threshold", "hash_join_single_partition_threshold_rows"] {
                ctx.sql(&format!("SET datafusion.optimizer.{opt} = 0")).await.unwrap().collect().await.unwrap();
            }
            // ... and behind its repartitions: the exchange's partitions must meet the other
            // side's hash partitions (without them the GPU join builds from every partition).
            ctx.sql("SET gpu.join.repartition = true").await.unwrap().collect().await.unwrap();
            register(&ctx, &batch, 4);
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let text = displayable(plan.as_ref()).indent(true).to_string();
            let merged = text.matches("merges on the device the states of [GpuAggregateExec: mode=Partial").count();
            assert_eq!(merged, usize::from(exchange), "exchange {exchange}:\n{text}");
            assert_eq!(count_nodes(&plan, "AggregateExec"), 0, "{text}");
            if exchange && sql.contains("JOIN") {
                assert!(text.contains("mode=FinalPartitioned") && text.contains("mode=Partitioned"), "{text}");
                // The partitioned join pairs the exchange's partitions with the other side's.
                assert!(!text.contains("reads the merged state whole"), "{text}");
            }
            if all_cpu {
                ctx.sql("SET gpu.cost.min_rows = 1000000").await.unwrap().collect().await.unwrap();
            }
            let got = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
            let label = format!("exchange {exchange}, batch_rows {batch_rows}, partials on the CPU {all_cpu}");
            if let Some(f) = compare(&want, &got, &label) {
                panic!("seed {seed}: {sql}: {f}\n{text}");
            }
            if all_cpu && exchange {
                let analyzed = DisplayableExecutionPlan::with_metrics(plan.as_ref()).indent(true).to_string();
                assert!(
                    analyzed.contains("cpu_partitions=4"),
                    "{label}: the partials did not run on the CPU:\n{analyzed}"
                );
            }
        }
    }
}

/// GPU parents read a GPU aggregate's output on the device: a join over grouped sums, a HAVING
/// filter and a semi join over its groups, an aggregate of an aggregate. The device exchange's
/// merged state goes to them whole, unsplit by the exchange's hash, where nothing above pairs
/// its partitions with another input's; the answers are DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_parents_read_aggregate_output_on_the_device() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_parents_read_aggregate_output_on_the_device") else { return };
    let seed = fresh_seed("gpu_parents_read_aggregate_output_on_the_device");
    let mut rng = StdRng::seed_from_u64(seed);
    let batch = table(&mut rng, Dist::Zipf(1.0), 80_000);
    let queries = [
        "SELECT a.k_str, a.s, b.v_i32 FROM (SELECT k_str, sum(v_i32) AS s FROM t GROUP BY k_str) a \
         JOIN t b ON a.k_str = b.k_str ORDER BY 1 NULLS FIRST, 2 NULLS FIRST, 3 NULLS FIRST",
        "SELECT k_i64, v_i32 FROM t WHERE k_i64 IN \
         (SELECT k_i64 FROM t GROUP BY k_i64 HAVING sum(v_i32) > 0) ORDER BY 1, 2 NULLS FIRST",
        "SELECT c, count(*) AS n, min(k_dec) AS m FROM \
         (SELECT k_dec, count(*) AS c FROM t GROUP BY k_dec) GROUP BY c ORDER BY 1",
        // AVG's final value is computed on the host, then uploaded for the join.
        "SELECT a.k_i32, a.m, b.v_i32 FROM (SELECT k_i32, avg(v_i32) AS m FROM t GROUP BY k_i32) a \
         JOIN t b ON a.k_i32 = b.k_i32 ORDER BY 1, 2, 3 NULLS FIRST",
        // HAVING under a CPU sort: the filter reads the groups on the device, with a literal and
        // with a scalar subquery's value (TPC-H q11's shape).
        "SELECT k_i64, sum(v_i32) AS s FROM t GROUP BY k_i64 HAVING sum(v_i32) > 0 ORDER BY 1 NULLS FIRST",
        "SELECT k_dec, sum(v_dec38) AS s FROM t GROUP BY k_dec \
         HAVING sum(v_dec38) > (SELECT sum(v_dec38) * 0.0001 FROM t) ORDER BY 2 DESC, 1 NULLS FIRST",
    ];
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    let mut whole = 0;
    for sql in queries {
        let want = cpu.sql(sql).await.unwrap().collect().await.unwrap();
        for batch_rows in [1 << 22, 7_000] {
            let ctx = gpu_ctx(AggregateAlgorithmSetting::Hash, 4, batch_rows);
            register(&ctx, &batch, 4);
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let text = displayable(plan.as_ref()).indent(true).to_string();
            assert_eq!(count_nodes(&plan, "AggregateExec"), 0, "{text}");
            whole += text.matches("a GPU parent reads the merged state whole on the device").count();
            if sql.contains("HAVING") && sql.contains("ORDER BY") && !sql.contains(" IN ") {
                assert!(text.contains("GpuFilterProjectExec: on the GPU=[FilterExec"), "{sql}\n{text}");
            }
            let got = collect(Arc::clone(&plan), ctx.task_ctx()).await.unwrap();
            if let Some(f) = compare(&want, &got, &format!("batch_rows {batch_rows}")) {
                panic!("seed {seed}: {sql}: {f}\n{text}");
            }
        }
    }
    assert!(whole > 0, "no GPU aggregate handed its merged state over whole");
}

/// A GPU Partial aggregate feeds a CPU Final one and the reverse: the states are DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_and_cpu_aggregate_stages_exchange_states() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_and_cpu_aggregate_stages_exchange_states") else { return };
    let seed = fresh_seed("gpu_and_cpu_aggregate_stages_exchange_states");
    let mut rng = StdRng::seed_from_u64(seed);
    let batch = table(&mut rng, Dist::Groups(5000), 50_000);
    let finals = [AggregateMode::Final, AggregateMode::FinalPartitioned];
    // COUNT(DISTINCT)'s state is a List of values: the second query exchanges those.
    for sql in [query(&["k_str", "k_i64"]), DISTINCT_QUERIES[0].to_string()] {
        let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        register(&cpu, &batch, 4);
        let want = cpu.sql(&sql).await.unwrap().collect().await.unwrap();
        // The exchange stays DataFusion's, so that either stage can be swapped for the CPU's.
        let ctx = gpu_ctx_with(AggregateAlgorithmSetting::Hash, 4, 1 << 22, false);
        register(&ctx, &batch, 4);
        for (label, modes) in
            [("GPU partial, CPU final", &finals[..]), ("CPU partial, GPU final", &[AggregateMode::Partial][..])]
        {
            let plan = ctx.sql(&sql).await.unwrap().create_physical_plan().await.unwrap();
            let plan = cpu_for(plan, modes);
            let (g, c) = (count_nodes(&plan, "GpuAggregateExec"), count_nodes(&plan, "AggregateExec"));
            assert!(
                g == 1 && c == 1,
                "{label}: {g} GPU and {c} CPU aggregates:\n{}",
                displayable(plan.as_ref()).indent(true)
            );
            let got = collect(plan, ctx.task_ctx()).await.unwrap();
            if let Some(f) = compare(&want, &got, label) {
                panic!("seed {seed}: {sql}: {f}");
            }
        }
    }
}

/// Device-level: COUNT(*) and SUM(v) of `dev`'s columns (key, v) grouped by its key with `opts`,
/// downloaded as (k, c, s), with the run's output (keys and values moved out).
fn count_and_sum(
    gpu: &Arc<crate::device::Gpu>,
    stream: &Arc<cudarc::driver::CudaStream>,
    dev: &DeviceBatch,
    key_field: datafusion::arrow::datatypes::Field,
    opts: &GroupByOptions,
) -> (RecordBatch, GroupByOutput) {
    let reductions = [
        Reduction { op: AccOp::Count, input: None, filter: None, out_type: DataType::Int64, nullable: false },
        Reduction { op: AccOp::SumI64, input: Some(1), filter: None, out_type: DataType::Int64, nullable: true },
    ];
    let mut times = GroupByTimes::default();
    let cols = dev.columns();
    let rows = dev.num_rows() as u64;
    let mut out = group_by(gpu, stream, &cols[..1], cols, &reductions, &[], rows, opts, &mut times).unwrap();
    let columns =
        std::mem::take(&mut out.keys).into_iter().chain(std::mem::take(&mut out.values)).map(Arc::new).collect();
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
        key_field,
        datafusion::arrow::datatypes::Field::new("c", DataType::Int64, false),
        datafusion::arrow::datatypes::Field::new("s", DataType::Int64, true),
    ]));
    let host = DeviceBatch::try_new(schema, columns, out.groups as usize, Arc::clone(gpu), Arc::clone(stream))
        .unwrap()
        .download()
        .unwrap();
    (host, out)
}

/// Device-level: wide keys whose hashes are cut to a few bits collide constantly; both methods
/// still find the right groups, and shared-memory and global accumulators agree.
#[test]
fn group_ids_resolve_hash_collisions_and_accumulators_agree() {
    let _g = gpu_lock();
    let Some(gpu) = gpu_or_skip("group_ids_resolve_hash_collisions_and_accumulators_agree") else { return };
    let seed = fresh_seed("group_ids_resolve_hash_collisions_and_accumulators_agree");
    let mut rng = StdRng::seed_from_u64(seed);
    let rows = 20_000;
    let keys: Vec<Option<String>> = (0..rows)
        .map(|_| {
            let x = format!("s{}", rng.random_range(0..900));
            maybe(&mut rng, 0.01, x)
        })
        .collect();
    let vals: Vec<i64> = (0..rows).map(|_| rng.random_range(-1000..1000)).collect();
    let mut want: HashMap<Option<String>, (i64, i64)> = HashMap::new();
    for (k, v) in keys.iter().zip(&vals) {
        let e = want.entry(k.clone()).or_insert((0, 0));
        e.0 += 1;
        e.1 += v;
    }
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(StringArray::from(keys)) as ArrayRef),
        ("v", Arc::new(Int64Array::from(vals)) as ArrayRef),
    ])
    .unwrap();
    let stream = gpu.stream();
    let dev = DeviceBatch::upload(&gpu, &stream, &batch).unwrap();
    for method in [GroupIdMethod::Hash, GroupIdMethod::Sort, GroupIdMethod::Partition] {
        for (bits, shared_memory) in [(Some(4), true), (Some(9), false), (None, true)] {
            let opts = GroupByOptions { method, shared_memory, test: CollisionTest { hash_bits: bits } };
            let key = datafusion::arrow::datatypes::Field::new("k", DataType::Utf8, true);
            let (host, out) = count_and_sum(&gpu, &stream, &dev, key, &opts);
            let k = host.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let c = host.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            let s = host.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
            let mut got = HashMap::new();
            for r in 0..host.num_rows() {
                let key = (!k.is_null(r)).then(|| k.value(r).to_string());
                assert!(
                    got.insert(key.clone(), (c.value(r), s.value(r))).is_none(),
                    "{method:?} {bits:?}: {key:?} twice"
                );
            }
            assert_eq!(got, want, "seed {seed}: {method:?}, hash bits {bits:?}, shared memory {shared_memory}");
            if bits == Some(4) && method == GroupIdMethod::Hash {
                assert!(out.rounds > 1, "4-bit hashes over 900 keys must collide");
            }
            if method == GroupIdMethod::Partition {
                // Colliding hashes hand the batch to the hash path; whole hashes do not collide.
                let want = if bits.is_none() { GroupIdMethod::Partition } else { GroupIdMethod::Hash };
                assert_eq!(out.method, want, "hash bits {bits:?}");
            }
        }
    }
}

/// Device-level: the key whose word is all ones (the tables' empty marker, kept in a slot of its
/// own) groups like any other, through the one-pass ids (few groups) and the general rounds (more
/// than the one-pass path takes), for 32-bit words (a null-free Int32 key) and 64-bit ones (Int64).
#[test]
fn group_ids_handle_the_key_whose_word_is_all_ones() {
    let _g = gpu_lock();
    let Some(gpu) = gpu_or_skip("group_ids_handle_the_key_whose_word_is_all_ones") else { return };
    let seed = fresh_seed("group_ids_handle_the_key_whose_word_is_all_ones");
    let mut rng = StdRng::seed_from_u64(seed);
    // The preimages of all ones under kernels/common.cuh's mix32 and mix64.
    const ALL_ONES_I32: i64 = 857_579_651;
    const ALL_ONES_I64: i64 = -8_528_264_022_506_211_158;
    let rows = 60_000;
    let stream = gpu.stream();
    for (special, wide_type) in [(ALL_ONES_I32, false), (ALL_ONES_I64, true)] {
        for domain in [8i64, 20_000] {
            // A tenth of the rows have the special key; the rest are spread over `domain` keys.
            let keys: Vec<i64> =
                (0..rows).map(|_| if rng.random_bool(0.1) { special } else { rng.random_range(0..domain) }).collect();
            let vals: Vec<i64> = (0..rows).map(|_| rng.random_range(-1000..1000)).collect();
            let mut want: HashMap<i64, (i64, i64)> = HashMap::new();
            for (k, v) in keys.iter().zip(&vals) {
                let e = want.entry(*k).or_insert((0, 0));
                e.0 += 1;
                e.1 += v;
            }
            let key_array: ArrayRef = if wide_type {
                Arc::new(Int64Array::from(keys))
            } else {
                Arc::new(Int32Array::from(keys.iter().map(|&k| k as i32).collect::<Vec<_>>()))
            };
            let batch =
                RecordBatch::try_from_iter([("k", key_array), ("v", Arc::new(Int64Array::from(vals)) as ArrayRef)])
                    .unwrap();
            let dev = DeviceBatch::upload(&gpu, &stream, &batch).unwrap();
            for method in [GroupIdMethod::Hash, GroupIdMethod::Sort, GroupIdMethod::Partition] {
                let opts = GroupByOptions { method, shared_memory: true, test: CollisionTest::default() };
                let key = batch.schema().field(0).clone();
                let (host, _) = count_and_sum(&gpu, &stream, &dev, key, &opts);
                let k = datafusion::arrow::compute::cast(host.column(0), &DataType::Int64).unwrap();
                let k = k.as_any().downcast_ref::<Int64Array>().unwrap();
                let c = host.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                let s = host.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                let got: HashMap<i64, (i64, i64)> =
                    (0..host.num_rows()).map(|r| (k.value(r), (c.value(r), s.value(r)))).collect();
                assert_eq!(host.num_rows(), want.len(), "seed {seed}: {method:?}, key {special}, domain {domain}");
                assert_eq!(got, want, "seed {seed}: {method:?}, key {special}, domain {domain}");
            }
        }
    }
}

/// A group key that a filter makes constant (`WHERE k_str = 'key-3'`, as SSB q2.3's `p_brand1`)
/// counts as sorted, and DataFusion plans the aggregate over it in PartiallySorted mode.
const CONSTANT_KEY_QUERY: &str = "SELECT k_date, k_str, count(*) c, sum(v_i64) s, min(v_i32) m FROM t \
     WHERE k_str = 'key-3' GROUP BY k_date, k_str ORDER BY k_date";

/// The aggregates of `plan` (CPU operators) and their input order modes.
fn aggregate_modes(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<(Arc<dyn ExecutionPlan>, String)>) {
    if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        out.push((Arc::clone(plan), format!("{:?}", a.input_order_mode())));
    }
    for c in plan.children() {
        aggregate_modes(c, out);
    }
}

/// Without a device: an aggregate reading its group keys sorted only because a filter makes
/// them constant has a GPU layout (a hash group-by gives its groups, and any row order keeps
/// the order on a constant); one over input truly sorted on a key (a table declared sorted)
/// has none, with the reason.
#[tokio::test]
async fn sorted_group_keys_run_on_the_gpu_only_when_constant() {
    let mut rng = StdRng::seed_from_u64(fresh_seed("sorted_group_keys_run_on_the_gpu_only_when_constant"));
    let batch = table(&mut rng, Dist::Groups(16), 5_000);
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    register(&ctx, &batch, 2);
    let plan = ctx.sql(CONSTANT_KEY_QUERY).await.unwrap().create_physical_plan().await.unwrap();
    let mut aggs = Vec::new();
    aggregate_modes(&plan, &mut aggs);
    let shown = displayable(plan.as_ref()).indent(true).to_string();
    assert!(aggs.iter().any(|(_, m)| m.starts_with("PartiallySorted")), "{shown}");
    for (agg, mode) in &aggs {
        let a = agg.downcast_ref::<AggregateExec>().unwrap();
        assert!(super::layout::AggregateLayout::new(a).is_ok(), "{mode}: {shown}");
    }

    // The same table declared sorted on k_date: the aggregate streams its groups in that order.
    let sorted = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    let order = vec![vec![datafusion::prelude::col("k_date").sort(true, false)]];
    let table = MemTable::try_new(batch.schema(), vec![vec![batch.clone()]]).unwrap().with_sort_order(order);
    sorted.register_table("t", Arc::new(table)).unwrap();
    let sql = "SELECT k_date, count(*) c FROM t GROUP BY k_date";
    let plan = sorted.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    let mut aggs = Vec::new();
    aggregate_modes(&plan, &mut aggs);
    let shown = displayable(plan.as_ref()).indent(true).to_string();
    let (agg, _) = aggs.iter().find(|(_, m)| m == "Sorted").unwrap_or_else(|| panic!("no sorted aggregate: {shown}"));
    let why = super::layout::AggregateLayout::new(agg.downcast_ref::<AggregateExec>().unwrap()).err();
    assert!(why.is_some_and(|e| e.to_string().contains("sorted on its group keys")), "{shown}");
}

/// The GPU aggregates of [`CONSTANT_KEY_QUERY`] (PartiallySorted on the constant key) give
/// DataFusion's answer, in every mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_groups_keys_made_constant_by_a_filter() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_groups_keys_made_constant_by_a_filter") else { return };
    let seed = fresh_seed("gpu_aggregate_groups_keys_made_constant_by_a_filter");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    for dist in [Dist::Groups(16), Dist::Zipf(1.0)] {
        let rows = rng.random_range(40_000..60_000);
        let batch = table(&mut rng, dist, rows);
        failures.extend(check(&batch, CONSTANT_KEY_QUERY, &format!("{dist:?} constant key"), &EVERY_MODE).await);
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
}

#[test]
fn algorithm_settings_parse() {
    for (text, want) in [
        ("auto", AggregateAlgorithmSetting::Auto),
        ("HASH", AggregateAlgorithmSetting::Hash),
        ("sort", AggregateAlgorithmSetting::Sort),
        ("Partition", AggregateAlgorithmSetting::Partition),
    ] {
        assert_eq!(text.parse::<AggregateAlgorithmSetting>().unwrap(), want);
        assert_eq!(want.to_string().parse::<AggregateAlgorithmSetting>().unwrap(), want);
    }
    let err = "radix".parse::<AggregateAlgorithmSetting>().unwrap_err().to_string();
    assert!(err.contains("auto, hash, sort, partition"), "{err}");
}

/// Filters and projections below the aggregate, and its own argument expressions, evaluated on
/// the GPU (`gpu.fuse.expressions`): decimal arithmetic at arrow's scales, comparisons of every
/// type (floats in arrow's total order), IN lists, CASE, Kleene AND/OR over NULLs, filters that
/// keep nothing, LIKE with `%` wildcards (strings with multi-byte characters), and the year,
/// month and day of dates (mostly outside chrono's years in `v_date`, which gives NULL), `substr`
/// (character positions over multi-byte strings, starts before the string and past its end) in
/// predicates and as computed string group keys, and scalar subqueries' values (decimal, integer,
/// NULL) in predicates.
const FUSED_QUERIES: &[&str] = &[
    "SELECT k_bool, k_i8, sum(k_dec) s1, sum(k_dec * (1 - k_dec)) s2, sum(k_dec * (1 - k_dec) * (1 + k_dec)) s3, \
     sum(v_dec * (1 - k_dec)) s4, avg(k_dec) a, count(*) c FROM t WHERE v_date <= DATE '2000-01-01' \
     GROUP BY k_bool, k_i8 ORDER BY k_bool NULLS FIRST, k_i8 NULLS FIRST",
    "SELECT sum(v_i64) s, count(*) c, sum(v_dec * 2) d, sum(v_dec * k_dec) p FROM t \
     WHERE v_dec >= 1.5 AND v_dec < 50000000 AND v_i32 < 24 AND NOT flag",
    "SELECT k_str, sum(CASE WHEN v_i32 > 0 THEN v_i64 WHEN v_i32 IS NULL THEN 1 ELSE 0 END) s, count(v_str) c, \
     max(v_dec) m, sum(CASE k_i8 WHEN 3 THEN k_dec WHEN 4 THEN k_dec + 1 END) x FROM t \
     WHERE (k_str IN ('key-1', 'key-2', 'key-3', 'key-40') OR v_i8 > 3 OR v_str IS NULL) AND k_i32 <> 5 \
     GROUP BY k_str ORDER BY k_str NULLS FIRST",
    "SELECT k_i8, sum(v_f64 * 2.0 + 1.0) s, count(*) c FROM t WHERE v_f64 > 10.5 AND CAST(v_dec AS DOUBLE) < 1e12 \
     AND k_str NOT IN ('key-7', 'key-9') GROUP BY k_i8 ORDER BY k_i8 NULLS FIRST",
    "SELECT k_date, min(v_ts) m, max(v_i64 - v_i64 * 3) x, count(*) FILTER (WHERE v_u32 > 100) f FROM t \
     WHERE v_date BETWEEN DATE '1990-01-01' AND DATE '2030-01-01' OR flag IS NULL \
     GROUP BY k_date ORDER BY k_date NULLS FIRST",
    "SELECT k_i64, count(*) c, sum(v_dec) s FROM t WHERE v_i64 > v_i64 GROUP BY k_i64",
    "SELECT count(*) c, sum(v_dec) s, min(k_i64) m FROM t WHERE v_i64 > v_i64 OR v_i32 IS NULL AND v_i32 > 0",
    "SELECT k_i8, count(*) c, sum(v_i64) s, sum(CASE WHEN k_str NOT LIKE '%7%' THEN v_i32 ELSE 0 END) n FROM t \
     WHERE v_str LIKE '%ab%' OR v_str LIKE 'q%' OR v_str LIKE '%é%z' OR k_str LIKE 'key-1%2' OR v_str LIKE '%c%d%e%' \
     GROUP BY k_i8 ORDER BY k_i8 NULLS FIRST",
    "SELECT y, m, count(*) c, sum(d) d, count(vy) n FROM (SELECT date_part('year', k_date) y, \
     extract(month FROM k_date) m, extract(day FROM v_date) d, extract(year FROM v_date) vy FROM t \
     WHERE v_str NOT LIKE '%a%' OR v_str LIKE '' OR k_str LIKE '%-3') GROUP BY y, m ORDER BY y, m",
    "SELECT substr(v_str, 2, 2) s2, count(*) c, sum(v_i64) s FROM t \
     WHERE substr(k_str, 1, 5) IN ('key-1', 'key-2') OR substr(v_str, -1, 3) = 'a' OR substring(v_str FROM 3) LIKE '%b%' \
     OR substr(v_str, 0, 1) = '' OR substr(v_str, 30) IS NOT NULL AND v_i8 > 5 OR substr(v_str, 2, 0) <> '' \
     GROUP BY s2 ORDER BY s2 NULLS FIRST",
    "SELECT substr(k_str, 5) k, substr(v_str, 3) v, count(*) c FROM t GROUP BY k, v ORDER BY k NULLS FIRST, v NULLS FIRST",
    "SELECT k_i8, count(*) c, sum(v_dec) s FROM t WHERE v_dec > (SELECT avg(v_dec) FROM t WHERE v_dec > 0) \
     OR v_i64 < (SELECT min(v_i64) FROM t WHERE k_i8 = 3) OR v_i32 = (SELECT max(v_i32) FROM t WHERE false) \
     GROUP BY k_i8 ORDER BY k_i8 NULLS FIRST",
];

fn fused(plan: &Arc<dyn ExecutionPlan>) -> bool {
    displayable(plan.as_ref()).indent(true).to_string().contains("fused on the GPU=")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_fuses_filters_and_projections() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_fuses_filters_and_projections") else { return };
    let seed = fresh_seed("gpu_aggregate_fuses_filters_and_projections");
    let mut rng = StdRng::seed_from_u64(seed);
    use AggregateAlgorithmSetting::{Hash, Partition, Sort};
    let configs = [(Hash, 4, 1 << 22), (Sort, 1, 7_000), (Partition, 4, 1 << 22)];
    let mut failures = Vec::new();
    for dist in [Dist::Groups(100), Dist::Zipf(1.2), Dist::Distinct] {
        let rows = rng.random_range(30_000..50_000);
        let batch = table(&mut rng, dist, rows);
        for sql in FUSED_QUERIES {
            // Every query's expressions run on the device.
            let ctx = gpu_ctx(Hash, 4, 1 << 22);
            register(&ctx, &batch, 4);
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let text = displayable(plan.as_ref()).indent(true).to_string();
            assert!(
                fused(&plan) && (!sql.contains("WHERE") || text.contains("FilterExec: ")),
                "not fused: {sql}\n{text}"
            );
            // The new expressions are in the fused chain of the aggregate itself.
            for (what, marker) in [("substr", "substr("), ("scalar_subquery", "> (SELECT")] {
                if sql.contains(marker) {
                    assert!(
                        text.lines().any(|l| l.contains("GpuAggregateExec")
                            && l.contains(what)
                            && l.contains("fused on the GPU=")),
                        "{what} is not fused: {sql}\n{text}"
                    );
                }
            }
            failures.extend(check(&batch, sql, &format!("{dist:?} {sql}"), &configs).await);
        }
    }
    let empty = table(&mut rng, Dist::Groups(4), 0);
    for sql in FUSED_QUERIES {
        failures.extend(check(&empty, sql, &format!("empty input: {sql}"), &configs).await);
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);

    // A decimal product that overflows 128 bits fails on the GPU as on the CPU; with
    // gpu.fuse.expressions off the plan keeps DataFusion's own evaluation.
    let batch = table(&mut rng, Dist::Groups(10), 20_000);
    let sql = "SELECT sum(v_dec * v_dec * v_dec) FROM t";
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    let cpu_err = cpu.sql(sql).await.unwrap().collect().await.expect_err("the CPU overflows");
    let ctx = gpu_ctx(Hash, 4, 1 << 22);
    register(&ctx, &batch, 4);
    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
    assert!(fused(&plan));
    let gpu_err = collect(plan, ctx.task_ctx()).await.expect_err("the GPU overflows");
    assert!(gpu_err.to_string().contains("Overflow"), "GPU: {gpu_err}; CPU: {cpu_err}");
    ctx.sql("SET gpu.fuse.expressions = false").await.unwrap().collect().await.unwrap();
    let plan = ctx.sql(FUSED_QUERIES[0]).await.unwrap().create_physical_plan().await.unwrap();
    assert!(!fused(&plan), "{}", displayable(plan.as_ref()).indent(true));
}

/// Sum of the metric `name` over the plan's GPU aggregates.
fn gpu_aggregate_metric(plan: &Arc<dyn ExecutionPlan>, name: &str) -> usize {
    let own = match plan.downcast_ref::<GpuAggregateExec>() {
        Some(a) => a.metrics().and_then(|m| m.sum_by_name(name)).map_or(0, |v| v.as_usize()),
        None => 0,
    };
    own + plan.children().into_iter().map(|c| gpu_aggregate_metric(c, name)).sum::<usize>()
}

/// Partial partitions split between the GPU and the CPU (one large partition, three under
/// `gpu.cost.min_rows`): when at least as many state rows are on the host as on the device, the
/// device states are downloaded and DataFusion merges them all (`cpu_merges`); when more are
/// on the device, the host states are uploaded and merged there. Both match the CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_exchange_merges_mixed_partials_where_most_states_are() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_exchange_merges_mixed_partials_where_most_states_are") else {
        return;
    };
    let seed = fresh_seed("gpu_aggregate_exchange_merges_mixed_partials_where_most_states_are");
    let mut rng = StdRng::seed_from_u64(seed);
    let queries = [
        query(&["k_i64"]),
        query(&["k_str", "k_i64"]),
        "SELECT k_i32, count(DISTINCT v_i64) d, sum(v_dec) s FROM t GROUP BY k_i32 ORDER BY k_i32".to_string(),
    ];
    let mut failures = Vec::new();
    // (groups, whether the host holds at least as many state rows): 100 groups give each
    // partition about 100 state rows, three on the host against one on the device; 40 000
    // groups give the large partition about 20 000 and each small one about 4 000.
    for (groups, host_merge) in [(100, true), (40_000, false)] {
        let (big, small) = (rng.random_range(28_000..32_000), rng.random_range(4_000..6_000));
        let batch = table(&mut rng, Dist::Groups(groups), big + 3 * small);
        let parts: Vec<Vec<RecordBatch>> = [(0, big), (big, small), (big + small, small), (big + 2 * small, small)]
            .iter()
            .map(|&(at, n)| vec![batch.slice(at, n)])
            .collect();
        let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
        cpu.register_table("t", Arc::new(MemTable::try_new(batch.schema(), parts.clone()).unwrap())).unwrap();
        let ctx = gpu_ctx_with(AggregateAlgorithmSetting::Hash, 4, 1 << 22, true);
        ctx.register_table("t", Arc::new(MemTable::try_new(batch.schema(), parts).unwrap())).unwrap();
        ctx.sql("SET gpu.cost.min_rows = 10000").await.unwrap().collect().await.unwrap();
        for sql in &queries {
            let label = format!("{groups} groups, partitions {big}/{small}x3: {sql}");
            let want = cpu.sql(sql).await.unwrap().collect().await.unwrap();
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let text = displayable(plan.as_ref()).indent(true).to_string();
            let distinct = sql.contains("DISTINCT");
            assert!(
                distinct || text.contains("merges on the device the states of"),
                "{label}: no device exchange\n{text}"
            );
            match collect(Arc::clone(&plan), ctx.task_ctx()).await {
                Err(e) => failures.push(format!("{label}: {e}")),
                Ok(got) => failures.extend(compare(&want, &got, &label)),
            }
            let (on_cpu, merged_on_cpu) =
                (gpu_aggregate_metric(&plan, "cpu_partitions"), gpu_aggregate_metric(&plan, "cpu_merges"));
            assert!(on_cpu >= 3, "{label}: {on_cpu} partial partitions on the CPU, expected the 3 small ones\n{text}");
            if !distinct {
                assert_eq!(merged_on_cpu, usize::from(host_merge), "{label}: cpu_merges\n{text}");
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
    println!("mixed GPU/CPU partial stages merged where most states were, matching the CPU (seed {seed})");
}

/// A GPU Partial over a CPU operator of unknown size (an unfused filter here) keeps DataFusion's
/// exchange below its Final, and EXPLAIN says why, unless `gpu.experimental.aggregate_exchange_host_input`
/// removes it; over a scan of known size the exchange goes either way. Every plan matches the
/// CPU with the partitions on the GPU (`gpu.cost.min_rows = 0`) and on the CPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_keeps_the_exchange_over_cpu_input_of_unknown_size() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_keeps_the_exchange_over_cpu_input_of_unknown_size") else { return };
    let seed = fresh_seed("gpu_aggregate_keeps_the_exchange_over_cpu_input_of_unknown_size");
    let mut rng = StdRng::seed_from_u64(seed);
    // About 11 000 rows in each of 4 partitions.
    let rows = rng.random_range(40_000..50_000);
    let batch = table(&mut rng, Dist::Groups(1000), rows);
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    let filtered = "SELECT k_i64, sum(v_i64) s, count(*) c, max(v_dec) m FROM t WHERE v_i32 < 24 \
                    GROUP BY k_i64 ORDER BY k_i64 NULLS FIRST";
    let scanned = query(&["k_i64"]);
    let mut failures = Vec::new();
    for host_input in [false, true] {
        for min_rows in [0, 20_000] {
            let ctx = gpu_ctx_with(AggregateAlgorithmSetting::Hash, 4, 1 << 22, true);
            register(&ctx, &batch, 4);
            for set in [
                format!("SET gpu.cost.min_rows = {min_rows}"),
                format!("SET gpu.experimental.aggregate_exchange_host_input = {host_input}"),
                "SET gpu.fuse.filters = false".to_string(),
                "SET datafusion.optimizer.default_filter_selectivity = 100".to_string(),
            ] {
                ctx.sql(&set).await.unwrap().collect().await.unwrap();
            }
            for (sql, unknown) in [(filtered, true), (scanned.as_str(), false)] {
                let label = format!("host_input {host_input}, gpu.cost.min_rows {min_rows}: {sql}");
                let want = cpu.sql(sql).await.unwrap().collect().await.unwrap();
                let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
                let text = displayable(plan.as_ref()).indent(true).to_string();
                // A Partial merged on the device is shown inside its Final.
                assert!(count_nodes(&plan, "GpuAggregateExec") >= 1, "{label}: no GPU aggregate\n{text}");
                let kept = unknown && !host_input;
                assert_eq!(text.contains("merges on the device the states of"), !kept, "{label}\n{text}");
                assert_eq!(
                    text.contains("exchange kept on the host: the partial reads a FilterExec on the CPU"),
                    kept,
                    "{label}\n{text}"
                );
                assert!(!kept || text.contains("RepartitionExec: partitioning=Hash"), "{label}\n{text}");
                match collect(Arc::clone(&plan), ctx.task_ctx()).await {
                    Err(e) => failures.push(format!("{label}: {e}")),
                    Ok(got) => failures.extend(compare(&want, &got, &label)),
                }
                let on_cpu = gpu_aggregate_metric(&plan, "cpu_partitions");
                assert_eq!(on_cpu > 0, min_rows > 0, "{label}: {on_cpu} partitions on the CPU\n{text}");
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
    println!("GPU aggregates over CPU inputs of unknown size matched the CPU, exchange kept or not (seed {seed})");
}

/// A partition whose whole input has fewer than `gpu.cost.min_rows` rows (the plan expected more) is
/// aggregated by DataFusion on the CPU, with the filters fused into the GPU exec, in every
/// stage: Single/Partial/Final run on their own, and a partial merged into its Final on the
/// device hands DataFusion's states over. `gpu.cost.min_rows = 0` never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_partitions_below_min_rows_run_on_the_cpu() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_partitions_below_min_rows_run_on_the_cpu") else { return };
    let seed = fresh_seed("gpu_aggregate_partitions_below_min_rows_run_on_the_cpu");
    let mut rng = StdRng::seed_from_u64(seed);
    // About 11 000 rows in each of 4 partitions: the plan sees 45 000.
    let rows = rng.random_range(40_000..50_000);
    let batch = table(&mut rng, Dist::Groups(100), rows);
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    let queries = [
        query(&["k_i64"]),
        query(&["k_str", "k_i64"]),
        query(&[]),
        FUSED_QUERIES[0].to_string(),
        FUSED_QUERIES[1].to_string(),
        "SELECT k_i32, count(DISTINCT v_i64) d, sum(v_dec) s FROM t GROUP BY k_i32 ORDER BY k_i32".to_string(),
    ];
    let mut failures = Vec::new();
    let (mut fused_on_cpu, mut checked) = (0, 0);
    for exchange in [true, false] {
        for min_rows in [20_000, 0] {
            let ctx = gpu_ctx_with(AggregateAlgorithmSetting::Hash, 4, 1 << 22, exchange);
            register(&ctx, &batch, 4);
            for set in [
                format!("SET gpu.cost.min_rows = {min_rows}"),
                // The plan must expect every row past the filters, or it keeps them on the CPU.
                "SET datafusion.optimizer.default_filter_selectivity = 100".to_string(),
            ] {
                ctx.sql(&set).await.unwrap().collect().await.unwrap();
            }
            for sql in &queries {
                let label = format!("exchange {exchange}, gpu.cost.min_rows {min_rows}: {sql}");
                let want = cpu.sql(sql).await.unwrap().collect().await.unwrap();
                let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
                let text = displayable(plan.as_ref()).indent(true).to_string();
                assert!(count_nodes(&plan, "GpuAggregateExec") > 0, "{label}: no GPU aggregate\n{text}");
                match collect(Arc::clone(&plan), ctx.task_ctx()).await {
                    Err(e) => failures.push(format!("{label}: {e}")),
                    Ok(got) => failures.extend(compare(&want, &got, &label)),
                }
                let on_cpu = gpu_aggregate_metric(&plan, "cpu_partitions");
                match min_rows {
                    0 => assert_eq!(on_cpu, 0, "{label}: gpu.cost.min_rows = 0 ran partitions on the CPU"),
                    _ => assert!(on_cpu > 0, "{label}: no partition ran on the CPU\n{text}"),
                }
                if on_cpu > 0 && fused(&plan) && sql.contains("WHERE") {
                    fused_on_cpu += 1;
                }
                checked += 1;
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
    assert!(fused_on_cpu > 0, "no query with fused filters ran on the CPU");
    println!("{checked} GPU aggregates with small partitions matched the CPU (seed {seed})");
}

/// A dictionary whose values hold a NULL: rows whose key points at it are NULL, for COUNT, as
/// a group key and under COUNT(DISTINCT), as DataFusion reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_aggregate_reads_null_dictionary_values_as_null() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_aggregate_reads_null_dictionary_values_as_null") else { return };
    let seed = fresh_seed("gpu_aggregate_reads_null_dictionary_values_as_null");
    let mut rng = StdRng::seed_from_u64(seed);
    let rows = 20_000;
    let values: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("b"), None, Some("c")]));
    let keys: Int32Array = (0..rows).map(|_| rng.random_bool(0.9).then(|| rng.random_range(0..5))).collect();
    let dict = DictionaryArray::<Int32Type>::try_new(keys, values).expect("a dictionary");
    let g: Int32Array = (0..rows).map(|_| Some(rng.random_range(0..7))).collect();
    let batch = RecordBatch::try_from_iter(vec![("g", Arc::new(g) as ArrayRef), ("c", Arc::new(dict) as ArrayRef)])
        .expect("a batch");
    let queries = [
        "SELECT g, count(c) n, count(*) m FROM t GROUP BY g ORDER BY g",
        "SELECT c, count(*) m FROM t GROUP BY c ORDER BY c NULLS FIRST",
        "SELECT g, count(DISTINCT c) d FROM t GROUP BY g ORDER BY g",
        "SELECT count(*) m FROM t WHERE c IS NULL",
    ];
    let mut failures = Vec::new();
    for sql in queries {
        failures.extend(check(&batch, sql, sql, &EVERY_MODE[..2]).await);
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures, first: {}", failures.len(), failures[0]);
}

/// An expression whose later WHEN or THEN of a CASE, or whose part a filter drops, overflows
/// only on rows DataFusion never evaluates it for: the GPU answers as the CPU does, rather than
/// raising the overflow. The right side of AND / OR overflowing on rows the left side decides
/// is a failure DataFusion's batches decide: the GPU plan alone answers as the CPU does or
/// fails saying so, and with DataFusion's plan to run again (`gpu.memory.cpu_fallback`) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gpu_expressions_raise_errors_only_where_datafusion_evaluates() {
    let _g = gpu_lock();
    let Some(_gpu) = gpu_or_skip("gpu_expressions_raise_errors_only_where_datafusion_evaluates") else { return };
    let rows = 200_000i64;
    let k = Int64Array::from_iter_values(0..rows);
    // d * d overflows 38 digits only where k >= 100000.
    let big = 10i128.pow(20);
    let d = Decimal128Array::from_iter_values((0..rows).map(|k| if k >= 100_000 { big } else { k as i128 }))
        .with_precision_and_scale(38, 0)
        .expect("decimal(38, 0)");
    let batch = RecordBatch::try_from_iter(vec![("k", Arc::new(k) as ArrayRef), ("d", Arc::new(d) as ArrayRef)])
        .expect("a batch");
    let decided_by_batches = [
        "SELECT count(*) n FROM t WHERE k < 1000 AND d * d > 0",
        "SELECT count(*) n FROM t WHERE k >= 1000 OR d * d > 0",
    ];
    let cpu = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(4));
    register(&cpu, &batch, 4);
    for sql in decided_by_batches {
        let want = cpu.sql(sql).await.unwrap().collect().await.expect("DataFusion answers");
        for rerun in [false, true] {
            let ctx = gpu_ctx(AggregateAlgorithmSetting::Hash, 4, 1 << 22);
            ctx.sql(&format!("SET gpu.memory.cpu_fallback = {rerun}")).await.unwrap().collect().await.unwrap();
            register(&ctx, &batch, 4);
            match (ctx.sql(sql).await.unwrap().collect().await, rerun) {
                (Ok(got), _) => {
                    if let Some(f) = compare(&want, &got, sql) {
                        panic!("rerun {rerun}: {f}");
                    }
                }
                (Err(e), false) => assert!(e.to_string().contains("SET gpu.enable = false"), "{sql}: {e}"),
                (Err(e), true) => panic!("{sql}: with a rerun the query failed: {e}"),
            }
        }
    }
    let queries = [
        "SELECT sum(CASE WHEN k < 1000 THEN d * d ELSE 0 END) s FROM t",
        "SELECT sum(CASE WHEN k >= 100000 THEN 0 WHEN d * d > 0 THEN 1 ELSE 2 END) s FROM t",
        "SELECT k % 3 g, sum(CASE WHEN k >= 100000 THEN d ELSE d * d END) s FROM t GROUP BY k % 3 ORDER BY g",
        // A cast to 19 decimal places fails for d = 10^20 (precision 38), which the filter drops.
        "SELECT sum(CAST(d AS DECIMAL(38, 19))) s FROM t WHERE k < 100000",
        "SELECT k % 3 g, max(CAST(d AS DECIMAL(38, 17))) m, count(*) FILTER (WHERE CAST(d AS DECIMAL(38, 17)) > 5) c \
         FROM t GROUP BY k % 3 ORDER BY g",
    ];
    let mut failures = Vec::new();
    for sql in queries {
        failures.extend(check(&batch, sql, sql, &EVERY_MODE[..2]).await);
    }
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}
