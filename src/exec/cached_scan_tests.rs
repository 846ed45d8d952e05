//! GPU tests of the table cache: queries over in-memory tables with `gpu.table_cache`, and over
//! `GpuCachedTable`s, give DataFusion's answers whether their columns are uploaded or read from
//! the cache, a second run uploads nothing, rows inserted into an in-memory table are seen, and a
//! cache too small for a column refuses it and still answers.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::physical_plan::displayable;
use datafusion::prelude::{SessionConfig, SessionContext};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::cached_scan::CACHED_SCAN_NAME;
use super::cached_table::GpuCachedTable;
use super::resident_tests::{QUERIES, partitions, rows, schema};
use crate::columns::cache::TableCache;
use crate::config::{ByteSize, GpuConfig};
use crate::cost::PlacementSetting;
use crate::exec::metric_total;
use crate::session::gpu_session_context;
use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};

const INSERT: &str =
    "INSERT INTO a VALUES (7, 3, 'inserted', 12.50, DATE '1995-01-02'), (NULL, 0, NULL, NULL, DATE '1994-12-31')";

#[test]
fn gpu_cached_tables_give_datafusions_answers() {
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip("gpu_cached_tables_give_datafusions_answers") else { return };
    let seed = fresh_seed("gpu_cached_tables_give_datafusions_answers");
    let mut rng = StdRng::seed_from_u64(seed);
    let a = partitions(&mut rng, 3000, 4, 500);
    let b = partitions(&mut rng, 9000, 5, 700);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = SessionConfig::new().with_target_partitions(4);
    let cache = TableCache::of_device(gpu.info().ordinal);
    // In-memory tables with gpu.table_cache under both placements, then GpuCachedTables.
    for (placement, cached_tables) in
        [(PlacementSetting::Always, false), (PlacementSetting::Cost, false), (PlacementSetting::Always, true)]
    {
        cache.clear();
        // Device batches of 1000 rows: a's partitions (750 rows) one each, b's (1800) cut in two.
        let cfg = GpuConfig {
            min_rows: 0,
            placement,
            batch_rows: 1000,
            join_window_rows: 1000,
            table_cache: !cached_tables,
            table_cache_batch_rows: 1000,
            ..GpuConfig::default()
        };
        let ctx = gpu_session_context(config.clone().with_option_extension(cfg.clone()));
        let cpu = SessionContext::new_with_config(config.clone());
        for (name, parts) in [("a", &a), ("b", &b)] {
            // The same host batches in both sessions' tables (as the benchmarks register them).
            cpu.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
            match cached_tables {
                true => ctx.register_table(name, Arc::new(GpuCachedTable::try_new(schema(), parts.clone()).unwrap())),
                false => ctx.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())),
            }
            .unwrap();
        }
        // (A GpuCachedTable's INSERT goes to the in-memory table of its batches, and it reads them again.)
        let runs: &[&str] = &["cold", "warm", "after an insert"];
        rt.block_on(async {
            let mut uploaded = 0;
            for &run in runs {
                if run == "after an insert" {
                    for c in [&cpu, &ctx] {
                        c.sql(INSERT).await.unwrap().collect().await.unwrap();
                    }
                }
                let before = cache.stats();
                let mut run_uploads = 0;
                for sql in QUERIES {
                    let (want, _) = rows(&cpu, sql).await;
                    let (got, plan) = rows(&ctx, sql).await;
                    let shown = displayable(plan.as_ref()).indent(true).to_string();
                    assert_eq!(
                        got, want,
                        "{placement:?}, cached tables {cached_tables}, {run}, seed {seed}: {sql}\n{shown}"
                    );
                    if !shown.contains("PlaceholderRowExec") {
                        assert!(shown.contains(CACHED_SCAN_NAME), "{sql}\n{shown}");
                    }
                    let uploads = metric_total(&plan, Some(CACHED_SCAN_NAME), "uploaded_columns");
                    let cached = metric_total(&plan, Some(CACHED_SCAN_NAME), "cached_columns");
                    eprintln!("{placement:?}, {run}: {uploads} columns uploaded, {cached} cached: {sql}");
                    if run == "warm" {
                        assert_eq!(uploads, 0, "{sql}: a warm cache uploaded\n{shown}");
                    }
                    run_uploads += uploads;
                }
                let after = cache.stats();
                eprintln!("{placement:?}, {run}: {before:?} -> {after:?}");
                match run {
                    "cold" => {
                        assert!(run_uploads > 0 && after.entries > 0, "{placement:?}: nothing was cached");
                        uploaded = run_uploads;
                    }
                    "warm" => assert!(after.hits > before.hits),
                    // The inserted rows make a's partitions other arrays: they are uploaded again (a
                    // GpuCachedTable's old columns leave the cache when it reads its rows again).
                    _ => assert!(run_uploads > 0 && run_uploads <= uploaded, "{run_uploads} of {uploaded}"),
                }
            }
            if cached_tables {
                // The same tables in sessions reading device batches of other sizes: the tables'
                // scans lay their partitions out again for each, and still answer. 700 rows cut
                // every partition; 2500 merge three of a's partitions into one device batch (the
                // GPU operators' fourth partition reads nothing); the default reads each table
                // as one device batch.
                for batch in [700, 2500, GpuConfig::default().table_cache_batch_rows] {
                    let other = GpuConfig { table_cache_batch_rows: batch, ..cfg.clone() };
                    let ctx2 = gpu_session_context(config.clone().with_option_extension(other));
                    for name in ["a", "b"] {
                        ctx2.register_table(name, ctx.table_provider(name).await.unwrap()).unwrap();
                    }
                    for sql in QUERIES {
                        let (got, plan) = rows(&ctx2, sql).await;
                        let shown = displayable(plan.as_ref()).indent(true).to_string();
                        assert_eq!(
                            got,
                            rows(&cpu, sql).await.0,
                            "device batches of {batch} rows, seed {seed}: {sql}\n{shown}"
                        );
                        // Back to the first session's size: its layouts are made again too.
                        assert_eq!(rows(&ctx, sql).await.0, rows(&cpu, sql).await.0, "1000 rows, seed {seed}: {sql}");
                    }
                }
            }
        });
    }
    // A cache smaller than any column leaves the scans to DataFusion (streamed by the GPU operators
    // above), keeps nothing and still answers; the function shows it.
    cache.clear();
    let cfg = GpuConfig {
        min_rows: 0,
        placement: PlacementSetting::Always,
        table_cache: true,
        table_cache_limit: ByteSize::Bytes(16),
        ..GpuConfig::default()
    };
    let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
    let cpu = SessionContext::new_with_config(config);
    for c in [&ctx, &cpu] {
        c.register_table("a", Arc::new(MemTable::try_new(schema(), a.clone()).unwrap())).unwrap();
        c.register_table("b", Arc::new(MemTable::try_new(schema(), b.clone()).unwrap())).unwrap();
    }
    rt.block_on(async {
        let sql = "SELECT b.g, count(*), sum(a.d) FROM a JOIN b ON a.k = b.k GROUP BY b.g";
        let (got, plan) = rows(&ctx, sql).await;
        assert_eq!(got, rows(&cpu, sql).await.0, "seed {seed}");
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert!(!shown.contains(CACHED_SCAN_NAME) && shown.contains("GpuHashJoinExec"), "{shown}");
        let s = cache.stats();
        assert!(s.entries == 0 && s.bytes == 0, "{s:?}");
        let shown = ctx.sql("SELECT * FROM gpu_table_cache()").await.unwrap().collect().await.unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&shown).unwrap().to_string();
        eprintln!("{text}");
        assert_eq!(shown.iter().map(|b| b.num_rows()).sum::<usize>(), TableCache::all().len(), "{text}");
    });
    cache.clear();
}

/// A join in one partition over cached tables builds on its probe side when that side is far
/// smaller at run time (SSB q2's shape: a join's output, 300 K rows or so, on the build side, a
/// filtered table of about 30 rows probing), and gives DataFusion's answer with and without the
/// swap.
#[test]
fn one_partition_joins_build_on_the_smaller_side_at_run_time() {
    const NAME: &str = "one_partition_joins_build_on_the_smaller_side_at_run_time";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let a = partitions(&mut rng, 400_000, 4, 2000);
    // One partition, as SSB's small tables: the filter reads the scan directly, is fused and
    // probes on the device (a round-robin repartition between them would keep it on the CPU).
    let b: Vec<Vec<_>> = partitions(&mut rng, 2000, 2, 2000).into_iter().take(1).collect();
    // The cached columns count against the device's memory budget: none are left to the other
    // tests, even when an assertion fails.
    struct Cleared(Arc<TableCache>);
    impl Drop for Cleared {
        fn drop(&mut self) {
            self.0.clear();
        }
    }
    let _cleared = Cleared(TableCache::of_device(gpu.info().ordinal));
    let sql = "SELECT c.s, count(*), sum(a.d), min(b.t) FROM a JOIN b ON a.k = b.k \
               JOIN (SELECT k, s FROM b WHERE g = 3) c ON b.k = c.k GROUP BY c.s";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = SessionConfig::new().with_target_partitions(4).with_round_robin_repartition(false);
    let cpu = SessionContext::new_with_config(config.clone());
    for (name, parts) in [("a", &a), ("b", &b)] {
        cpu.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
    }
    let want = rt.block_on(rows(&cpu, sql)).0;
    for swap in [true, false] {
        let cfg = GpuConfig {
            min_rows: 0,
            placement: PlacementSetting::Always,
            // DataFusion's sides, as over SSB's joins: the plan has no size to swap them by.
            join_swap_lopsided: false,
            join_swap_at_run_time: swap,
            ..GpuConfig::default()
        };
        let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
        for (name, parts) in [("a", &a), ("b", &b)] {
            ctx.register_table(name, Arc::new(GpuCachedTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
        }
        let (got, plan) = rt.block_on(rows(&ctx, sql));
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert_eq!(got, want, "swap at run time {swap}, seed {seed}\n{shown}");
        let swaps = metric_total(&plan, Some("GpuHashJoinExec"), "swapped_at_run_time");
        eprintln!("swap at run time {swap}: {swaps} joins swapped\n{shown}");
        match swap {
            true => assert!(swaps >= 1, "no join swapped its sides, seed {seed}\n{shown}"),
            false => assert_eq!(swaps, 0, "a join swapped with the option off\n{shown}"),
        }
    }
}

/// `GpuCachedTable`s with host images ([`GpuCachedTable::with_host_image`]) give DataFusion's
/// answers on a cold cache and a warm one, in one device batch and cut into several: integer,
/// date and decimal columns narrowed to 1, 2, 3 and 4 bytes, columns left without an image
/// (nulls, a range too wide), and strings as lengths and bytes, nulls among them; the images in
/// ordinary memory and in page-locked memory ([`GpuCachedTable::with_pinned_host_image`]), from
/// which uploads send them without staging.
#[test]
fn gpu_cached_tables_with_host_images_give_datafusions_answers() {
    use datafusion::arrow::array::{ArrayRef, Date32Array, Decimal128Array, Int32Array, Int64Array, StringViewArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;
    use rand::Rng;
    const NAME: &str = "gpu_cached_tables_with_host_images_give_datafusions_answers";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let schema = Arc::new(Schema::new(vec![
        // 1 byte above 1; 2 bytes of dates; 3 bytes of 8; 3 of 4; none (a range past 24 bits);
        // 4 bytes of 8.
        Field::new("q", DataType::Int32, false),
        Field::new("dt", DataType::Date32, false),
        Field::new("k", DataType::Int64, false),
        Field::new("w", DataType::Int32, false),
        Field::new("h", DataType::Int32, false),
        Field::new("o", DataType::Int64, false),
        // Nulls: no image.
        Field::new("n", DataType::Int64, true),
        // 3 bytes of 16; 1 byte of 16 above a negative base; 1 byte of 8 above 2^40.
        Field::new("p", DataType::Decimal128(15, 2), false),
        Field::new("c", DataType::Decimal128(12, 2), false),
        Field::new("big", DataType::Int64, false),
        Field::new("s", DataType::Utf8View, true),
    ]));
    let words = ["AIR", "MAIL", "a string of more than twelve bytes", "", "R", "TRUCK"];
    let batch = |rows: usize, rng: &mut StdRng| {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values((0..rows).map(|_| rng.random_range(1..=50)))),
            Arc::new(Date32Array::from_iter_values((0..rows).map(|_| rng.random_range(8_035..10_591)))),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| rng.random_range(0..200_000)))),
            Arc::new(Int32Array::from_iter_values((0..rows).map(|_| rng.random_range(-1_000_000..1_000_000)))),
            Arc::new(Int32Array::from_iter_values((0..rows).map(|_| rng.random_range(-(1 << 30)..1 << 30)))),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| rng.random_range(-(1 << 30)..1 << 30)))),
            Arc::new(Int64Array::from_iter((0..rows).map(|_| rng.random_bool(0.8).then(|| rng.random_range(0..1000))))),
            Arc::new(
                Decimal128Array::from_iter_values((0..rows).map(|_| rng.random_range(90_000..10_000_000)))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Arc::new(
                Decimal128Array::from_iter_values((0..rows).map(|_| rng.random_range(-100..100)))
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|_| (1 << 40) + rng.random_range(0..200)))),
            Arc::new(StringViewArray::from_iter(
                (0..rows).map(|_| rng.random_bool(0.9).then(|| words[rng.random_range(0..words.len())])),
            )),
        ];
        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
    };
    // Four partitions of batches of 700 to 1,300 rows (one partition empty).
    let parts: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| match p {
            2 => Vec::new(),
            _ => (0..rng.random_range(3..8)).map(|_| batch(rng.random_range(700..1300), &mut rng)).collect(),
        })
        .collect();
    let queries = [
        "SELECT q, count(*), sum(p), min(dt), max(k), sum(w), sum(h), sum(o), sum(n), sum(c), min(big), max(big) FROM t GROUP BY q",
        "SELECT s, count(*), sum(q), max(p) FROM t WHERE dt >= DATE '1995-01-01' AND c > 0 GROUP BY s",
        "SELECT a.q, count(*), sum(b.p), max(b.s) FROM t a JOIN t b ON a.k = b.k WHERE a.q < 10 GROUP BY a.q",
        "SELECT k, dt, s, p FROM t WHERE big < 1099511627876 AND q = 7",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = SessionConfig::new().with_target_partitions(4);
    let cpu = SessionContext::new_with_config(config.clone());
    cpu.register_table("t", Arc::new(MemTable::try_new(Arc::clone(&schema), parts.clone()).unwrap())).unwrap();
    let cache = TableCache::of_device(gpu.info().ordinal);
    // Device batches of 1,500 rows (partitions cut in several), then the default (one batch).
    let one_batch = GpuConfig::default().table_cache_batch_rows;
    for (batch_rows, pinned) in [(1500, false), (1500, true), (one_batch, false), (one_batch, true)] {
        cache.clear();
        let cfg = GpuConfig {
            min_rows: 0,
            placement: PlacementSetting::Always,
            table_cache_batch_rows: batch_rows,
            ..GpuConfig::default()
        };
        let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
        let table = GpuCachedTable::try_new(Arc::clone(&schema), parts.clone()).unwrap();
        let table = match pinned {
            true => table.with_pinned_host_image(batch_rows, &gpu).unwrap(),
            false => table.with_host_image(batch_rows).unwrap(),
        };
        let (image, host) = (table.image_bytes(), table.host_bytes());
        eprintln!("device batches of {batch_rows} rows, pinned {pinned}: images {image} bytes, batches {host}");
        assert!(image > 0 && image < host, "images {image} bytes beside batches of {host}");
        assert_eq!(table.pinned_image_bytes(), if pinned { image } else { 0 }, "pinned {pinned}");
        ctx.register_table("t", Arc::new(table)).unwrap();
        rt.block_on(async {
            for run in ["cold", "warm"] {
                for sql in queries {
                    let (want, _) = rows(&cpu, sql).await;
                    let (got, plan) = rows(&ctx, sql).await;
                    let shown = displayable(plan.as_ref()).indent(true).to_string();
                    assert_eq!(
                        got, want,
                        "{batch_rows} rows a device batch, pinned {pinned}, {run}, seed {seed}: {sql}\n{shown}"
                    );
                    assert!(!want.is_empty(), "{sql}: no rows, seed {seed}");
                    let uploads = metric_total(&plan, Some(CACHED_SCAN_NAME), "uploaded_columns");
                    if run == "warm" {
                        assert_eq!(uploads, 0, "{sql}: a warm cache uploaded\n{shown}");
                    }
                }
            }
        });
    }
    cache.clear();
}

/// 100 rounds of `CREATE TABLE`, a query, `INSERT`, a query and `DROP TABLE`, over a table
/// replaced by `gpu_cache` (even rounds) or read through `gpu.table_cache` (odd rounds): each
/// query gives DataFusion's answer, after each query the cache holds only the columns of the
/// table as it is now, and after the last round nothing: the device memory in use is back where
/// it started.
#[test]
fn rounds_of_writes_leave_only_live_columns_in_the_cache() {
    const NAME: &str = "rounds_of_writes_leave_only_live_columns_in_the_cache";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let cache = TableCache::of_device(gpu.info().ordinal);
    cache.clear();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let config = SessionConfig::new().with_target_partitions(4);
    let cfg = GpuConfig { min_rows: 0, placement: PlacementSetting::Always, ..GpuConfig::default() };
    let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
    let cpu = SessionContext::new_with_config(config);
    let session =
        crate::device::Gpu::for_session(&GpuConfig::from_options(ctx.state().config_options()), &ctx.session_id())
            .expect("the session's device");
    let (start, start_device) = (session.memory().used(), gpu.device_memory().used());
    let sql = "SELECT g, count(*), sum(d), min(k) FROM t WHERE k > 5 GROUP BY g";
    rt.block_on(async {
        for round in 0..100u64 {
            let n = 20_000 + (seed % 1000) + round * 37;
            let create = format!(
                "CREATE TABLE t AS SELECT value AS k, value % 7 AS g, CAST(value AS DECIMAL(12, 2)) AS d, \
                 CAST(value % 13 AS VARCHAR) AS s FROM range(0, {n})"
            );
            // (The table's columns are NOT NULL, as `range` makes them.)
            let insert = format!("INSERT INTO t VALUES ({n}, 3, 1.25, 'é'), ({}, 4, -2.50, '')", n + 1);
            let via_gpu_cache = round % 2 == 0;
            for c in [&cpu, &ctx] {
                c.sql(&create).await.unwrap().collect().await.unwrap();
            }
            ctx.sql(&format!("SET gpu.table_cache = {}", !via_gpu_cache)).await.unwrap().collect().await.unwrap();
            if via_gpu_cache {
                ctx.sql("SELECT * FROM gpu_cache('t')").await.unwrap().collect().await.unwrap();
            }
            for step in ["created", "inserted"] {
                if step == "inserted" {
                    for c in [&cpu, &ctx] {
                        c.sql(&insert).await.unwrap().collect().await.unwrap();
                    }
                }
                let (got, plan) = rows(&ctx, sql).await;
                assert_eq!(got, rows(&cpu, sql).await.0, "round {round}, {step}, seed {seed}");
                let read = metric_total(&plan, Some(CACHED_SCAN_NAME), "uploaded_columns")
                    + metric_total(&plan, Some(CACHED_SCAN_NAME), "cached_columns");
                let s = cache.stats();
                assert!(read > 0, "round {round}, {step}: the scan read no cached column");
                assert_eq!(s.entries, read, "round {round}, {step}: the cache holds other columns than t's: {s:?}");
            }
            for c in [&cpu, &ctx] {
                c.sql("DROP TABLE t").await.unwrap().collect().await.unwrap();
            }
        }
    });
    let s = cache.stats();
    eprintln!("after 100 rounds: {s:?}");
    assert_eq!((s.entries, s.bytes), (0, 0), "{s:?}");
    assert!(s.invalidated >= 200, "{s:?}");
    assert_eq!(session.memory().used(), start, "the session's device memory in use");
    assert_eq!(gpu.device_memory().used(), start_device, "the device's memory in use");
}

/// Cached columns no query reads make room for a query that needs the memory: the query runs on
/// the GPU (nothing falls back, nothing runs again), and the cache counts what it gave back.
#[test]
fn cached_columns_make_room_for_a_query_that_needs_the_memory() {
    const NAME: &str = "cached_columns_make_room_for_a_query_that_needs_the_memory";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let cache = TableCache::of_device(gpu.info().ordinal);
    cache.clear();
    // Two tables of 2M rows: a's columns stay in the cache, b's need the room they hold.
    let a = partitions(&mut rng, 2_000_000, 4, 1_000_000);
    let b = partitions(&mut rng, 2_000_000, 4, 1_000_000);
    let cfg = GpuConfig {
        min_rows: 0,
        placement: PlacementSetting::Always,
        memory_limit: ByteSize::Bytes(4 << 30),
        table_cache: true,
        table_cache_limit: ByteSize::Bytes(4 << 30),
        ..GpuConfig::default()
    };
    let config = SessionConfig::new().with_target_partitions(4);
    let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
    let cpu = SessionContext::new_with_config(config);
    for (name, parts) in [("a", &a), ("b", &b)] {
        for c in [&cpu, &ctx] {
            c.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let first = "SELECT g, count(*), sum(d), min(k), max(t) FROM a GROUP BY g";
        let (got, _) = rows(&ctx, first).await;
        assert_eq!(got, rows(&cpu, first).await.0, "seed {seed}");
        let held = cache.stats();
        assert!(held.bytes > 0, "a's columns were not cached: {held:?}");
        // Room for a's cached columns and a third of them more: b's query needs the rest.
        let limit = held.bytes + held.bytes / 3;
        for setting in ["gpu.memory.limit", "gpu.table_cache.limit"] {
            ctx.sql(&format!("SET {setting} = '{limit}'")).await.unwrap().collect().await.unwrap();
        }
        let second = "SELECT g, count(*), sum(d), min(k), max(t) FROM b GROUP BY g";
        let (got, plan) = rows(&ctx, second).await;
        assert_eq!(got, rows(&cpu, second).await.0, "seed {seed}");
        let s = cache.stats();
        eprintln!("cache after a: {held:?}; after b: {s:?}");
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert_eq!(metric_total(&plan, None, "cpu_fallbacks"), 0, "{shown}");
        assert_eq!(metric_total(&plan, None, "cpu_reruns"), 0, "{shown}");
        assert!(s.reclaimed_bytes > 0, "nothing was given back: {s:?}\n{shown}");
    });
    cache.clear();
}

/// Cached columns packed into fewer bytes (`gpu.table_cache.compress`) give DataFusion's answers
/// whether a query reads their full-width copies (the cache has room for them) or widens them
/// again (it has room for the packed columns only), and take at most half their full width.
#[test]
fn packed_cached_columns_give_datafusions_answers() {
    const NAME: &str = "packed_cached_columns_give_datafusions_answers";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let cache = TableCache::of_device(gpu.info().ordinal);
    cache.clear();
    let a = partitions(&mut rng, 1_500_000, 3, 2_000_000);
    let b = partitions(&mut rng, 600_000, 3, 1_000_000);
    let cfg = GpuConfig { min_rows: 0, placement: PlacementSetting::Always, table_cache: true, ..GpuConfig::default() };
    let config = SessionConfig::new().with_target_partitions(4);
    let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
    let cpu = SessionContext::new_with_config(config);
    for (name, parts) in [("a", &a), ("b", &b)] {
        for c in [&cpu, &ctx] {
            c.register_table(name, Arc::new(MemTable::try_new(schema(), parts.clone()).unwrap())).unwrap();
        }
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let check = |what: &'static str| {
            let (ctx, cpu) = (&ctx, &cpu);
            async move {
                for sql in QUERIES {
                    let (got, plan) = rows(ctx, sql).await;
                    assert_eq!(got, rows(cpu, sql).await.0, "{what}, seed {seed}: {sql}");
                    let shown = displayable(plan.as_ref()).indent(true).to_string();
                    assert_eq!(metric_total(&plan, None, "cpu_fallbacks"), 0, "{what}: {sql}\n{shown}");
                }
            }
        };
        check("cold").await;
        let roomy = cache.stats();
        eprintln!("with room: {roomy:?}");
        assert!(roomy.packed_bytes > 0, "nothing was packed: {roomy:?}");
        // The string column `s` (60 values and NULL) is kept as 1-byte codes.
        let strings: Vec<_> = cache
            .columns()
            .into_iter()
            .filter(|c| c.data_type == datafusion::arrow::datatypes::DataType::Utf8)
            .collect();
        assert!(!strings.is_empty() && strings.iter().all(|c| c.encoding == "dictionary, 1-byte codes"), "{strings:?}");
        assert!(roomy.packed_bytes * 2 <= roomy.packed_full_bytes, "packed to more than half: {roomy:?}");
        assert_eq!(roomy.wide_copy_bytes, roomy.packed_full_bytes, "the full-width copies were not kept: {roomy:?}");
        check("warm, full-width copies").await;
        // Room for the columns at rest only: every query widens the packed ones again, and the
        // full-width copies it makes are not kept.
        let at_rest = roomy.bytes - roomy.wide_copy_bytes;
        let limit = at_rest + roomy.packed_full_bytes / 4;
        ctx.sql(&format!("SET gpu.table_cache.limit = '{limit}'")).await.unwrap().collect().await.unwrap();
        check("full-width copies given up").await;
        let tight = cache.stats();
        eprintln!("at rest only: {tight:?}");
        assert!(tight.bytes <= limit, "{tight:?}");
        assert!(tight.wide_copy_bytes < roomy.wide_copy_bytes, "{tight:?}");
        assert_eq!(tight.packed_bytes, roomy.packed_bytes, "packed columns went for full-width copies: {tight:?}");
        assert_eq!(tight.evictions, roomy.evictions, "{tight:?}");
        check("widened each time").await;
        // Off: columns uploaded anew are kept at full width.
        cache.clear();
        ctx.sql("SET gpu.table_cache.compress = false").await.unwrap().collect().await.unwrap();
        check("compress off").await;
        let off = cache.stats();
        assert!(off.bytes > 0 && off.packed_bytes == 0 && off.wide_copy_bytes == 0, "{off:?}");
    });
    cache.clear();
}

/// Parquet tables read through the table cache give DataFusion's answers over the same files:
/// cold (every column loaded from the files), warm (nothing loaded), in a session that cuts the
/// files into other ranges, after a file of one table is written anew (a new session lists it
/// anew: the cache loads it again and drops the stale columns), and with the cache off.
#[test]
fn parquet_tables_through_the_table_cache_give_datafusions_answers() {
    const NAME: &str = "parquet_tables_through_the_table_cache_give_datafusions_answers";
    let _l = gpu_lock();
    let Some(gpu) = gpu_or_skip(NAME) else { return };
    let seed = fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let dirs =
        [crate::testing::ParquetDir::new("cached-parquet-a"), crate::testing::ParquetDir::new("cached-parquet-b")];
    let write = |dir: &crate::testing::ParquetDir, parts: &[Vec<datafusion::arrow::record_batch::RecordBatch>]| {
        for (i, p) in parts.iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            dir.write(&format!("part-{i}.parquet"), p, 1500);
        }
    };
    let data = [partitions(&mut rng, 40_000, 4, 500), partitions(&mut rng, 60_000, 5, 700)];
    write(&dirs[0], &data[0]);
    write(&dirs[1], &data[1]);
    let file_rows: Vec<u64> = data.iter().map(|d| d.iter().flatten().map(|b| b.num_rows() as u64).sum()).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cache = TableCache::of_device(gpu.info().ordinal);
    cache.clear();
    let register = |ctx: &SessionContext| {
        rt.block_on(async {
            // Files cut into byte ranges, as DataFusion cuts large ones.
            ctx.sql("SET datafusion.optimizer.repartition_file_min_size = 1").await.unwrap();
            for (name, dir) in ["a", "b"].iter().zip(&dirs) {
                let sql = format!("CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{}'", dir.location());
                ctx.sql(&sql).await.unwrap().collect().await.unwrap();
            }
        })
    };
    let session = |partitions: usize, table_cache: bool, batch_rows: usize| {
        let cfg = GpuConfig {
            min_rows: 0,
            placement: PlacementSetting::Always,
            table_cache,
            table_cache_batch_rows: batch_rows,
            ..GpuConfig::default()
        };
        let config = SessionConfig::new().with_target_partitions(partitions);
        let ctx = gpu_session_context(config.clone().with_option_extension(cfg));
        let cpu = SessionContext::new_with_config(config);
        register(&ctx);
        register(&cpu);
        (ctx, cpu)
    };
    let check = |ctx: &SessionContext, cpu: &SessionContext, what: &str, warm: bool| {
        rt.block_on(async {
            for sql in QUERIES {
                let (got, plan) = rows(ctx, sql).await;
                assert_eq!(got, rows(cpu, sql).await.0, "{what}, seed {seed}: {sql}");
                let shown = displayable(plan.as_ref()).indent(true).to_string();
                let uploads = metric_total(&plan, Some(CACHED_SCAN_NAME), "uploaded_columns");
                let cached = metric_total(&plan, Some(CACHED_SCAN_NAME), "cached_columns");
                if warm && shown.contains("Parquet files through the table cache") {
                    assert_eq!(uploads, 0, "{what}: a warm run loaded columns again: {sql}\n{shown}");
                }
                if !warm && uploads + cached > 0 {
                    assert!(shown.contains("Parquet files through the table cache"), "{sql}\n{shown}");
                }
            }
        })
    };
    let (ctx, cpu) = session(4, true, 1 << 26);
    check(&ctx, &cpu, "cold", false);
    assert!(cache.stats().entries > 0, "no column was cached: {:?}", cache.stats());
    check(&ctx, &cpu, "warm", true);
    // gpu_table_cache_columns() lists each cached column under its table's files (as the object
    // store names them: `file:///tmp/...`), with every row of them, read by no query once the
    // queries are done.
    let listed = cache.columns();
    assert!(!listed.is_empty());
    for c in &listed {
        let table = dirs.iter().position(|d| c.source.contains(&d.location()));
        let table = table.unwrap_or_else(|| panic!("{c:?} is from neither table's files"));
        assert_eq!(c.rows, file_rows[table], "{c:?}");
        assert!(!c.read && c.bytes > 0 && c.packed_bytes <= c.bytes && !c.column.is_empty(), "{c:?}");
    }
    let shown = rt.block_on(async {
        let sql = "SELECT count(*) FROM gpu_table_cache_columns() WHERE bytes > 0";
        ctx.sql(sql).await.unwrap().collect().await.unwrap()
    });
    let counted =
        shown[0].column(0).as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().map(|a| a.value(0));
    assert_eq!(counted, Some(listed.len() as i64));
    // Another cut into ranges and device batches of 5,000 rows: the cached columns of another
    // cut are not mixed with newly loaded ones.
    let (other, other_cpu) = session(7, true, 5000);
    check(&other, &other_cpu, "other ranges", false);
    check(&other, &other_cpu, "other ranges, warm", true);
    // A file of `a` written anew: its columns are loaded again.
    let invalidated = cache.stats().invalidated;
    std::thread::sleep(std::time::Duration::from_millis(20));
    dirs[0].write("part-0.parquet", &partitions(&mut rng, 9_000, 2, 300)[0], 1000);
    // (New sessions: DataFusion's list of a table's files is cached by its session.)
    let (ctx, cpu) = session(4, true, 1 << 26);
    check(&ctx, &cpu, "after a file changed", false);
    assert!(cache.stats().invalidated > invalidated, "the stale columns stayed: {:?}", cache.stats());
    let (off, off_cpu) = session(4, false, 1 << 26);
    check(&off, &off_cpu, "table cache off", false);
    cache.clear();
}
