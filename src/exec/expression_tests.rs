//! GPU tests of expressions that fail on some rows (128-bit decimal overflow, a cast past its
//! precision): forced onto the GPU and with the defaults, every query gives DataFusion's answer
//! or DataFusion's error. Where DataFusion's own outcome depends on its batches (the right side
//! of an `AND` or `OR` on rows the left side decides), both outcomes are forced through the
//! batches' contents, and the GPU plan answers by running the query again on DataFusion's plan
//! (`cpu_reruns`).

use std::sync::Arc;

use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::config::GpuConfig;
use crate::cost::PlacementSetting;
use crate::session::gpu_session_context;
use crate::testing::{gpu_lock, gpu_or_skip, sorted_rows};

/// What a query gave: its sorted rows, or its error's text.
type Outcome = Result<Vec<String>, String>;

async fn outcome(ctx: &SessionContext, sql: &str) -> (Outcome, Option<Arc<dyn ExecutionPlan>>) {
    let plan = match ctx.sql(sql).await {
        Ok(df) => match df.create_physical_plan().await {
            Ok(p) => p,
            Err(e) => return (Err(e.to_string()), None),
        },
        Err(e) => return (Err(e.to_string()), None),
    };
    let got = collect(Arc::clone(&plan), ctx.task_ctx()).await;
    (got.map(|b| sorted_rows(&b)).map_err(|e| e.to_string()), Some(plan))
}

/// Every eligible operator on the GPU, and every filter below a GPU aggregate evaluated there
/// (no host pre-filter).
fn forced() -> GpuConfig {
    GpuConfig {
        min_rows: 0,
        placement: PlacementSetting::Always,
        host_filter_priced: false,
        host_filter_below: 0.0,
        ..GpuConfig::default()
    }
}

/// `setup` run in a CPU session and in GPU sessions (forced, with the defaults, forced over the
/// table cache, and with `with_no_rerun` forced without DataFusion's plan to run again), then
/// each of `queries` in all of them: the GPU sessions must give the CPU's rows, or fail where it
/// fails (without a rerun, a failure whose outcome DataFusion's batches decide may stand, saying
/// so). Returns, per query, the CPU's outcome and the reruns of the forced GPU session.
async fn same_as_datafusion(setup: &[&str], queries: &[&str], with_no_rerun: bool) -> Vec<(Outcome, usize)> {
    let config = SessionConfig::new().with_target_partitions(1);
    let cpu = SessionContext::new_with_config(config.clone());
    let no_rerun = GpuConfig { cpu_fallback: false, ..forced() };
    let mut sessions: Vec<(&str, SessionContext)> = vec![
        ("forced", gpu_session_context(config.clone().with_option_extension(forced()))),
        ("defaults", gpu_session_context(config.clone())),
        ("forced, cached", {
            let cfg = GpuConfig { table_cache: true, ..forced() };
            gpu_session_context(config.clone().with_option_extension(cfg))
        }),
    ];
    if with_no_rerun {
        sessions.push(("forced, no rerun", gpu_session_context(config.clone().with_option_extension(no_rerun))));
    }
    for sql in setup {
        cpu.sql(sql).await.unwrap().collect().await.unwrap();
        for (_, s) in &sessions {
            s.sql(sql).await.unwrap().collect().await.unwrap();
        }
    }
    let mut out = Vec::new();
    for sql in queries {
        let (want, _) = outcome(&cpu, sql).await;
        let mut reruns = 0;
        for (name, s) in &sessions {
            let (got, plan) = outcome(s, sql).await;
            let shown =
                plan.as_ref().map(|p| datafusion::physical_plan::displayable(p.as_ref()).indent(true).to_string());
            match (&want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(g, w, "{name}: {sql}\n{}", shown.unwrap_or_default()),
                (Err(_), Err(_)) => {}
                // Without a rerun, a failure that DataFusion's batches decide may stand: it says so.
                (Ok(_), Err(e)) if *name == "forced, no rerun" && e.contains("SET gpu.enable = false") => {}
                _ => panic!("{name}: {sql}: DataFusion {want:?}, GPU {got:?}\n{}", shown.unwrap_or_default()),
            }
            if *name == "forced" {
                reruns = plan.map_or(0, |p| super::metric_total(&p, Some("GpuQueryExec"), "cpu_reruns"));
            }
        }
        out.push((want, reruns));
    }
    out
}

/// `CASE <base> WHEN ...` fails where its base fails on any row (an overflowed product, a cast
/// past its precision), as DataFusion does; without a failing row it answers.
#[test]
fn a_case_fails_where_its_base_fails() {
    let _l = gpu_lock();
    if gpu_or_skip("a_case_fails_where_its_base_fails").is_none() {
        return;
    }
    let setup = ["CREATE TABLE t AS SELECT CASE WHEN value = 3 THEN CAST('100000000000000000000' AS DECIMAL(38,0)) \
         ELSE CAST(value + 1 AS DECIMAL(38,0)) END AS d, CAST(value * 10000 AS DECIMAL(12, 2)) AS c FROM range(0, 4)"];
    let queries = [
        "SELECT sum(CASE d * d WHEN 0 THEN 100 ELSE 1 END) AS s FROM t",
        "SELECT sum(CASE d * d WHEN 0 THEN 100 ELSE 1 END) AS s FROM t WHERE d < 10",
        "SELECT sum(CASE CAST(c AS DECIMAL(6, 2)) WHEN 0 THEN 1 ELSE 2 END) FROM t",
        "SELECT sum(CASE CAST(c AS DECIMAL(6, 2)) WHEN 0 THEN 1 ELSE 2 END) FROM t WHERE c < 5000",
        "SELECT count(*) FROM t WHERE CASE d * d WHEN 4 THEN true ELSE false END",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(same_as_datafusion(&setup, &queries, true));
    let failed: Vec<bool> = results.iter().map(|(w, _)| w.is_err()).collect();
    assert_eq!(failed, vec![true, false, true, false, true], "{results:?}");
}

/// `a AND b` and `a OR b` with a `b` that fails on rows `a` decides: DataFusion skips `b` when
/// `a` decides every row of a batch (and, for AND, runs it on `a`'s few TRUE rows when `a` has
/// no NULL), and fails otherwise. Both outcomes, through the rows of the batch, give
/// DataFusion's answer or error on the GPU; where `b` fails on rows `a` leaves open, both fail.
#[test]
fn and_or_fail_where_datafusion_evaluates_their_right_side() {
    let _l = gpu_lock();
    if gpu_or_skip("and_or_fail_where_datafusion_evaluates_their_right_side").is_none() {
        return;
    }
    // `big` overflows when squared; `x` decides the rows. In `decided`, x = 0 on every row (AND
    // skips its right side), in `open` one row has x = NULL (AND evaluates it everywhere).
    let setup = [
        "CREATE TABLE decided AS SELECT CAST(0 AS BIGINT) AS x, \
         CAST('10000000000000000000000' AS DECIMAL(38,0)) AS big FROM range(0, 100)",
        "CREATE TABLE open AS SELECT CASE WHEN value = 7 THEN NULL ELSE CAST(0 AS BIGINT) END AS x, \
         CAST('10000000000000000000000' AS DECIMAL(38,0)) AS big FROM range(0, 100)",
        "CREATE TABLE fails AS SELECT CAST(value AS BIGINT) AS x, \
         CAST('10000000000000000000000' AS DECIMAL(38,0)) AS big FROM range(0, 100)",
    ];
    let queries = [
        "SELECT count(*) FROM decided WHERE x = 1 AND big * big > 0",
        "SELECT count(*) FROM open WHERE x = 1 AND big * big > 0",
        "SELECT count(*) FROM decided WHERE x = 0 OR big * big > 0",
        "SELECT count(*) FROM open WHERE x = 0 OR big * big > 0",
        "SELECT count(*) FROM fails WHERE x = 5 AND big * big > 0",
        "SELECT sum(CASE WHEN x = 1 AND big * big > 0 THEN 1 ELSE 0 END) FROM decided",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(same_as_datafusion(&setup, &queries, true));
    let failed: Vec<bool> = results.iter().map(|(w, _)| w.is_err()).collect();
    assert_eq!(failed, vec![false, true, false, true, true, false], "{results:?}");
    // Where DataFusion answers and the GPU evaluated the predicate, the GPU plan's flagged rows
    // sent it to DataFusion's plan; where the filter stayed on the CPU nothing was flagged.
    for (i, (want, reruns)) in results.iter().enumerate() {
        eprintln!("query {i}: DataFusion {want:?}, {reruns} reruns: {}", queries[i]);
    }
}

/// `a AND b` whose `a` is TRUE on few rows and never NULL: DataFusion evaluates `b` on those
/// rows alone, so `b`'s failure on another row is none; one on them is.
#[test]
fn an_and_fails_only_on_the_few_rows_its_left_side_selects() {
    let _l = gpu_lock();
    if gpu_or_skip("an_and_fails_only_on_the_few_rows_its_left_side_selects").is_none() {
        return;
    }
    let setup = ["CREATE TABLE t AS SELECT CAST(value AS BIGINT) AS x, \
                  CASE WHEN value = 3 THEN CAST('10000000000000000000000' AS DECIMAL(38,0)) \
                  ELSE CAST(value AS DECIMAL(38,0)) END AS d FROM range(0, 1000)"];
    let queries =
        ["SELECT count(*) FROM t WHERE x = 5 AND d * d > 4", "SELECT count(*) FROM t WHERE x = 3 AND d * d > 4"];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(same_as_datafusion(&setup, &queries, true));
    assert!(results[0].0.is_ok() && results[1].0.is_err(), "{results:?}");
}

/// `INSERT ... SELECT` whose GPU expressions fail on rows DataFusion never evaluates writes what
/// DataFusion writes: its input runs again on DataFusion's plan, the write once.
#[test]
fn a_write_runs_its_input_again_on_datafusions_plan() {
    let _l = gpu_lock();
    if gpu_or_skip("a_write_runs_its_input_again_on_datafusions_plan").is_none() {
        return;
    }
    let setup = [
        "CREATE TABLE src AS SELECT CAST(0 AS BIGINT) AS x, \
         CAST('10000000000000000000000' AS DECIMAL(38,0)) AS big FROM range(0, 100)",
        "CREATE TABLE dst (x BIGINT)",
    ];
    let queries = [
        "INSERT INTO dst SELECT x FROM src WHERE x = 0 OR big * big > 0 GROUP BY x",
        "SELECT count(*), sum(x) FROM dst",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(same_as_datafusion(&setup, &queries, false));
    assert!(results.iter().all(|(w, _)| w.is_ok()), "{results:?}");
    assert!(results[0].1 > 0, "the write's input did not run again: {results:?}");
}

/// Float64 casts to decimals give arrow's values (the value times the scale's power of ten,
/// rounded half away from zero) over random doubles and the edges (halves, -0, values past 2^63
/// and 2^127 once scaled), and fail where DataFusion fails: past the target precision, and on
/// NaN and infinities.
#[test]
fn float_to_decimal_casts_give_arrows_values() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    const NAME: &str = "float_to_decimal_casts_give_arrows_values";
    let _l = gpu_lock();
    if gpu_or_skip(NAME).is_none() {
        return;
    }
    let seed = crate::testing::fresh_seed(NAME);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut xs: Vec<String> = [
        "0.25",
        "-0.25",
        "0.35",
        "-0.35",
        "2.5",
        "-2.5",
        "0.125",
        "-0.0",
        "0.0",
        "1e-16",
        "4.4e-16",
        "123456.78905",
        "999999.99995",
        "-999999.99995",
        "0.000000000000005",
        "9.3e18",
        "-9.3e18",
        "1.2e25",
        "-3.4e27",
    ]
    .map(String::from)
    .to_vec();
    for _ in 0..3000 {
        let e = rng.random_range(-8..10);
        let x: f64 = (rng.random::<f64>() - 0.5) * 10f64.powi(e);
        xs.push(format!("{x:e}"));
    }
    let values = xs.iter().map(|x| format!("({x})")).collect::<Vec<_>>().join(", ");
    let setup = [
        format!("CREATE TABLE f AS SELECT CAST(column1 AS DOUBLE) AS x FROM (VALUES {values})"),
        "CREATE TABLE fits AS SELECT x FROM f WHERE abs(x) < 1e10".to_string(),
        "CREATE TABLE odd AS SELECT CAST(column1 AS DOUBLE) AS x FROM (VALUES (0.0 / 0.0), (1.0 / 0.0), (-1.0 / 0.0), (1.5))"
            .to_string(),
    ];
    let setup: Vec<&str> = setup.iter().map(String::as_str).collect();
    let queries = [
        // Every row's value: a sum of the casts differs if one of them does.
        "SELECT sum(CAST(x AS DECIMAL(30, 15))), count(*) FROM fits",
        "SELECT sum(CAST(x AS DECIMAL(38, 2))) AS a, sum(CAST(x AS DECIMAL(18, 0))) AS b FROM f WHERE abs(x) < 1e17",
        "SELECT CAST(x AS DECIMAL(20, 4)) AS d, count(*) FROM fits GROUP BY d",
        "SELECT count(*) FROM fits WHERE CAST(x AS DECIMAL(30, 15)) > 0.5",
        // Past 2^63 once scaled, within the precision.
        "SELECT sum(CAST(x AS DECIMAL(38, 10))) FROM f",
        // Past the precision (9.3e18 at scale 15), past 2^127 (-3.4e27 at scale 12), NaN and
        // the infinities: DataFusion's error.
        "SELECT sum(CAST(x AS DECIMAL(30, 15))) FROM f",
        "SELECT sum(CAST(x AS DECIMAL(38, 12))) FROM f",
        "SELECT sum(CAST(x AS DECIMAL(10, 2))) FROM odd",
        "SELECT sum(CAST(x AS DECIMAL(10, 2))) FROM odd WHERE x = 1.5",
    ];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt.block_on(same_as_datafusion(&setup, &queries, true));
    let failed: Vec<bool> = results.iter().map(|(w, _)| w.is_err()).collect();
    assert_eq!(failed, vec![false, false, false, false, false, true, true, true, false], "seed {seed}: {results:?}");
}
