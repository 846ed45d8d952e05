//! Unit tests of the GPU join exec's plan-time pieces and stream plumbing (no device needed).

use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::JoinType;
use datafusion::datasource::memory::MemorySourceConfig;

use std::pin::Pin;

use datafusion::common::NullEquality;
use datafusion::physical_expr::expressions::Column;
use futures::Stream;

use super::build::{chunk_groups, per_row};
use super::layout::choose_algorithm;
use super::stream::{Input, read_ahead, received_whole};
use super::*;
use crate::join::{JoinAlgorithmSetting, OutputColumn};
use crate::primitives::keys::KeyEncoding;

/// The probe's read-ahead pulls `ahead` items of its input before anything reads them, then
/// waits; it hands every item over in order, and stops reading at the first error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_runs_ahead_of_its_reader_and_stops_at_an_error() {
    type Items = Pin<Box<dyn Stream<Item = Result<i32>> + Send>>;
    let counted = |items: Vec<Result<i32>>, pulled: &Arc<AtomicUsize>| -> Items {
        let pulled = Arc::clone(pulled);
        Box::pin(futures::stream::iter(items).inspect(move |_| {
            pulled.fetch_add(1, Ordering::SeqCst);
        }))
    };
    // Waits (up to 5 s) for `pulled` to reach `n`, then a little longer to see it stay.
    async fn settles_at(pulled: &AtomicUsize, n: usize) -> usize {
        let start = std::time::Instant::now();
        while pulled.load(Ordering::SeqCst) < n && start.elapsed().as_secs() < 5 {
            tokio::task::yield_now().await;
        }
        let seen = std::time::Instant::now();
        while seen.elapsed().as_millis() < 50 {
            tokio::task::yield_now().await;
        }
        pulled.load(Ordering::SeqCst)
    }
    for ahead in [1, 3] {
        let pulled = Arc::new(AtomicUsize::new(0));
        let mut s = read_ahead(counted((0..10).map(Ok).collect(), &pulled), ahead, None);
        assert_eq!(settles_at(&pulled, ahead).await, ahead, "ahead {ahead}");
        let mut got = Vec::new();
        while let Some(v) = s.next().await {
            got.push(v.unwrap());
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(pulled.load(Ordering::SeqCst), 10);
    }
    let pulled = Arc::new(AtomicUsize::new(0));
    let failing = vec![Ok(1), Err(DataFusionError::Execution("boom".into())), Ok(3), Ok(4)];
    let mut s = read_ahead(counted(failing, &pulled), 4, None);
    assert_eq!(settles_at(&pulled, 2).await, 2, "nothing is read after the error");
    assert_eq!(s.next().await.unwrap().unwrap(), 1);
    assert!(s.next().await.unwrap().is_err());
    assert!(s.next().await.is_none());
}

fn source(names: [&str; 3]) -> Arc<dyn ExecutionPlan> {
    let schema = Arc::new(Schema::new(vec![
        Field::new(names[0], DataType::Int32, true),
        Field::new(names[1], DataType::Utf8, true),
        Field::new(names[2], DataType::Int32, true),
    ]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(Int32Array::from(vec![3, 4])),
        ],
    )
    .unwrap();
    MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap()
}

fn join(jt: JoinType, projection: Option<Vec<usize>>, keys: &[(usize, usize)]) -> Arc<dyn ExecutionPlan> {
    let (l, r) = (source(["a", "b", "c"]), source(["x", "y", "z"]));
    let on = keys
        .iter()
        .map(|(li, ri)| {
            (
                Arc::new(Column::new(l.schema().field(*li).name(), *li)) as Arc<dyn PhysicalExpr>,
                Arc::new(Column::new(r.schema().field(*ri).name(), *ri)) as Arc<dyn PhysicalExpr>,
            )
        })
        .collect();
    Arc::new(
        HashJoinExec::try_new(
            l,
            r,
            on,
            None,
            &jt,
            projection,
            PartitionMode::CollectLeft,
            NullEquality::NullEqualsNothing,
            false,
        )
        .unwrap(),
    )
}

/// Only key and output columns are uploaded, and outputs map to their uploaded positions.
#[test]
fn layout_uploads_only_needed_columns() {
    let cfg = GpuConfig::default();
    // Inner, projected to (z, a, a): build uploads a; probe uploads x (key) and z.
    let exec = GpuHashJoinExec::try_new(join(JoinType::Inner, Some(vec![5, 0, 0]), &[(0, 0)]), &cfg).unwrap();
    assert_eq!(exec.layout.build_cols, vec![0]);
    assert_eq!(exec.layout.probe_cols, vec![0, 2]);
    let spec = &exec.layout.spec;
    assert_eq!(spec.output, vec![OutputColumn::Probe(1), OutputColumn::Build(0), OutputColumn::Build(0)]);
    assert_eq!(spec.keys.encoding, KeyEncoding::Narrow32);
    assert_eq!(exec.algorithm(), JoinAlgorithm::Npj);
    // A mark join's mark column, and a two-column key with a string: wide.
    let exec = GpuHashJoinExec::try_new(join(JoinType::LeftMark, None, &[(0, 0), (1, 1)]), &cfg).unwrap();
    let spec = &exec.layout.spec;
    assert_eq!(spec.output.last(), Some(&OutputColumn::Mark));
    assert_eq!(spec.output.len(), 4);
    assert_eq!(spec.keys.encoding, KeyEncoding::Wide);
    assert!(exec.layout.probe_cols == vec![0, 1]);
}

/// An inner join's layout with the sides' roles exchanged reads the inputs as already reduced to
/// their uploaded columns: the probe side's columns become the build's (identity positions), the
/// keys change sides, and each output column comes from the other side at the same position, so
/// the output keeps its order. Only inner joins without a residual filter have one.
#[test]
fn swapped_layout_exchanges_the_sides_and_keeps_the_output_order() {
    let cfg = GpuConfig::default();
    // Inner on (b, y) and (a, x), projected to (z, a, y, c).
    let exec =
        GpuHashJoinExec::try_new(join(JoinType::Inner, Some(vec![5, 0, 4, 2]), &[(1, 1), (0, 0)]), &cfg).unwrap();
    let l = &exec.layout;
    assert_eq!((l.build_cols.clone(), l.probe_cols.clone()), (vec![0, 1, 2], vec![0, 1, 2]));
    let s = l.swapped().expect("an inner join without a filter swaps");
    assert_eq!(s.build_cols, (0..l.probe_cols.len()).collect::<Vec<_>>());
    assert_eq!(s.probe_cols, (0..l.build_cols.len()).collect::<Vec<_>>());
    assert_eq!(s.build_schema, l.probe_schema);
    assert_eq!(s.probe_schema, l.build_schema);
    assert_eq!(
        (s.spec.build_keys.clone(), s.spec.probe_keys.clone()),
        (l.spec.probe_keys.clone(), l.spec.build_keys.clone())
    );
    assert_eq!(
        s.spec.output,
        vec![OutputColumn::Build(2), OutputColumn::Probe(0), OutputColumn::Build(1), OutputColumn::Probe(2)]
    );
    assert_eq!(
        l.spec.output,
        vec![OutputColumn::Probe(2), OutputColumn::Build(0), OutputColumn::Probe(1), OutputColumn::Build(2)]
    );
    assert_eq!(s.spec.schema, l.spec.schema);
    assert_eq!(s.spec.keys.encoding, l.spec.keys.encoding);
    assert!(s.no_spill.is_some(), "a swapped build does not go out of core");
    // Outer, semi and anti joins decide rows by side: no swap.
    for jt in
        [JoinType::Left, JoinType::Right, JoinType::Full, JoinType::LeftSemi, JoinType::RightAnti, JoinType::LeftMark]
    {
        let exec = GpuHashJoinExec::try_new(join(jt, None, &[(0, 0)]), &cfg).unwrap();
        assert!(exec.layout.swapped().is_none(), "{jt}");
    }
}

/// EXPLAIN says when a join is on the GPU for its parent, and keeps saying it through a
/// rebuild of the plan.
#[test]
fn explain_names_a_join_placed_for_its_gpu_parent() {
    let cfg = GpuConfig::default();
    let show = |p: &Arc<dyn ExecutionPlan>| datafusion::physical_plan::displayable(p.as_ref()).one_line().to_string();
    let alone: Arc<dyn ExecutionPlan> =
        Arc::new(GpuHashJoinExec::try_new(join(JoinType::Inner, None, &[(0, 0)]), &cfg).unwrap());
    assert!(!show(&alone).contains("with its parent"), "{}", show(&alone));
    let exec = GpuHashJoinExec::try_new(join(JoinType::Inner, None, &[(0, 0)]), &cfg).unwrap().for_gpu_parent();
    let plan: Arc<dyn ExecutionPlan> = Arc::new(exec);
    assert!(show(&plan).contains("on the GPU with its parent"), "{}", show(&plan));
    let children = plan.children().into_iter().cloned().collect();
    let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    let rebuilt = Arc::clone(&plan).replace_children(children, recompute).unwrap();
    assert!(show(&rebuilt).contains("on the GPU with its parent"), "{}", show(&rebuilt));
}

#[test]
fn chunk_groups_cut_batches_at_chunk_ends() {
    let b = |n: i32| {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int32, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from_iter_values(0..n))]).unwrap()
    };
    let groups = chunk_groups(&[b(5), b(2), b(6)], 4);
    let sizes: Vec<Vec<usize>> = groups.iter().map(|g| g.iter().map(RecordBatch::num_rows).collect()).collect();
    assert_eq!(sizes, vec![vec![4], vec![1, 2, 1], vec![4], vec![1]]);
    // The rows stay in order.
    let values: Vec<i32> = groups
        .iter()
        .flatten()
        .flat_map(|x| x.column(0).as_any().downcast_ref::<Int32Array>().unwrap().values().to_vec())
        .collect();
    assert_eq!(values, [0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 5]);
    assert!(chunk_groups(&[], 4).is_empty());
    // One batch: its slices of `rows` rows, one per group.
    let one: Vec<usize> = chunk_groups(&[b(10)], 4).iter().map(|g| g.len()).collect();
    assert_eq!(one, vec![1, 1, 1]);
    let lens: Vec<usize> = chunk_groups(&[b(10)], 4).into_iter().flatten().map(|x| x.num_rows()).collect();
    assert_eq!(lens, vec![4, 4, 2]);
}

#[test]
fn per_row_rounds_up_so_chunks_stay_within_their_bytes() {
    assert_eq!(per_row(19, 10), 2);
    assert_eq!(per_row(20, 10), 2);
    assert_eq!(per_row(0, 0), 1);
    // Rows of 1.9 bytes: a chunk of 100 bytes takes 50 of them (95 bytes), not 100.
    let rows = 100 / per_row(190, 100);
    assert!(rows * 19 <= 100 * 10, "{rows} rows");
}

#[test]
fn algorithm_settings_parse_and_resolve() {
    for (text, want) in [
        ("auto", JoinAlgorithm::Npj),
        ("npj", JoinAlgorithm::Npj),
        ("phj", JoinAlgorithm::PhjGftr),
        ("smj", JoinAlgorithm::SmjGftr),
        ("phj_gfur", JoinAlgorithm::PhjGfur),
        ("PHJ_GFTR", JoinAlgorithm::PhjGftr),
        ("smj_gfur", JoinAlgorithm::SmjGfur),
        ("smj_gftr", JoinAlgorithm::SmjGftr),
    ] {
        let setting: JoinAlgorithmSetting = text.parse().unwrap();
        assert_eq!(choose_algorithm(setting, false).0, want, "{text}");
        assert_eq!(choose_algorithm(setting, true).0, JoinAlgorithm::Npj, "{text}: an ordered join keeps npj");
    }
    let err = "hash".parse::<JoinAlgorithmSetting>().unwrap_err().to_string();
    assert!(err.contains("npj, phj, smj"), "{err}");
}

/// A blocking input (`gpu.join.pipelined_inputs = false`) is read to its end before its first
/// item comes out, and then hands every item over in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_input_is_received_whole_before_its_first_item() {
    let pulled = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&pulled);
    let items: Input<i32> = Box::pin(futures::stream::iter((0..10).map(Ok)).inspect(move |_| {
        p.fetch_add(1, Ordering::SeqCst);
    }));
    let mut s = received_whole(items);
    assert_eq!(s.next().await.transpose().unwrap(), Some(0));
    assert_eq!(pulled.load(Ordering::SeqCst), 10);
    let rest: Vec<i32> = s.map(|r| r.unwrap()).collect().await;
    assert_eq!(rest, (1..10).collect::<Vec<_>>());
}
