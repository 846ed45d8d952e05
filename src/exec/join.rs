//! `GpuHashJoinExec`: DataFusion's `HashJoinExec` run by the GPU join of [`crate::join`].
//!
//! It keeps the original join for its children, properties and display, so the plan around it
//! is unchanged. Its statistics are unknown, as those of a join the rule leaves on the CPU
//! reach the operators above (see `exec::fallback`): the cost model prices the joins above it
//! from the plan's bound wherever it runs. Execution: the build side (all left partitions for
//! `CollectLeft`, shared by every probe partition; the matching left partition for
//! `Partitioned`) is collected, reduced to the columns the join needs, uploaded and prepared
//! once; probe batches are coalesced on the host into chunks of about `gpu.batch_rows` rows,
//! uploaded and joined; the build rows decided at the end (outer, semi, anti, mark joins on the
//! left) come from the last probe partition to finish, as in DataFusion.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{JoinSide, NullEquality, Statistics};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::joins::utils::build_join_schema;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PhysicalExpr, PlanProperties,
};
use futures::channel::mpsc;
use futures::{FutureExt, SinkExt, Stream, StreamExt};

use super::cpu_join::{CpuJoin, Sides};
use super::once::OnceShared;
use super::task_stream::TaskStream;
use super::upload::{ChunkUploader, batch_bytes};
use super::{DeviceBatchStream, GpuExec, as_gpu_exec, blocking, download_for_cpu, rows_within_limit, timeline};
use crate::columns::DeviceBatch;
use crate::columns::concat::can_concat;
use crate::columns::row_width;
use crate::config::GpuConfig;
use crate::cost::join::JoinEstimate;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{CudaResultExt, recoverable_on_cpu};
use crate::join::filter::generate as generate_filter;
use crate::join::triton::{Arrival, DriverGuard, Group, Meeting, Outcome, SpillSizes, SpilledSide, fits_in_memory};
use crate::join::{
    FilterSpec, JoinAlgorithm, JoinAlgorithmSetting, JoinBuild, JoinSpec, OutputColumn, PhaseTimes, window_bound,
};
use crate::primitives::keys::KeyPlan;

/// The join's device-side description, fixed when the rule places the exec.
#[derive(Debug, Clone)]
struct Layout {
    /// Left input columns uploaded for the build (keys and outputs), and their schema.
    build_cols: Vec<usize>,
    build_schema: SchemaRef,
    /// Right input columns uploaded for the probe.
    probe_cols: Vec<usize>,
    probe_schema: SchemaRef,
    spec: Arc<JoinSpec>,
    /// Why this algorithm.
    choice: String,
    /// The algorithms the setting allows the cost model to choose among.
    candidates: Vec<JoinAlgorithm>,
    /// Why this join cannot run out of core (`None`: it can, when its build side would not fit
    /// under the memory limit).
    no_spill: Option<String>,
}

impl Layout {
    /// The uploaded columns of each side, for DataFusion's join over them.
    fn sides(&self) -> Sides<'_> {
        Sides {
            build_cols: &self.build_cols,
            build_schema: &self.build_schema,
            probe_cols: &self.probe_cols,
            probe_schema: &self.probe_schema,
        }
    }
}

/// A prepared build side: on the device, partitioned in pinned host memory, or, when device
/// memory ran out preparing it, DataFusion's join over its rows for every probe partition.
#[derive(Debug, Clone)]
enum Built {
    /// On the device, with its host rows when they were kept for a partition's CPU fallback.
    Memory(Arc<JoinBuild>, Option<Arc<KeptBuild>>),
    Spilled(Arc<OutOfCore>),
    OnCpu(Arc<CpuJoin>),
}

/// A build side's host rows (its uploaded columns), kept while the join runs so that a probe
/// partition can finish on the CPU; reserved from DataFusion's memory pool.
#[derive(Debug)]
struct KeptBuild {
    batches: Vec<RecordBatch>,
    _reservation: MemoryReservation,
}

impl KeptBuild {
    /// `batches` kept within `pool`, or `None` when the pool cannot hold them.
    fn keep(batches: &[RecordBatch], pool: &Arc<dyn MemoryPool>) -> Option<Arc<KeptBuild>> {
        let reservation = MemoryConsumer::new("GpuHashJoinExec build kept for the CPU").register(pool);
        let bytes: u64 = batches.iter().map(batch_bytes).sum();
        reservation.try_grow(bytes as usize).ok()?;
        Some(Arc::new(KeptBuild { batches: batches.to_vec(), _reservation: reservation }))
    }
}

/// What a GPU join's partition hands its consumer: device batches, or host batches once DataFusion's
/// join finishes the partition.
enum JoinOutput {
    Device(DeviceBatch),
    Host(RecordBatch),
}

impl JoinOutput {
    fn num_rows(&self) -> usize {
        match self {
            JoinOutput::Device(b) => b.num_rows(),
            JoinOutput::Host(b) => b.num_rows(),
        }
    }
}

/// The build side of an out-of-core join ([`crate::join::triton`]).
#[derive(Debug)]
struct OutOfCore {
    build: SpilledSide,
    sizes: SpillSizes,
    /// The steps of the join, in order.
    steps: Vec<Step>,
    /// Where the probe streams hand over their partitioned input.
    meeting: Arc<Meeting<Handover>>,
}

/// What a probe stream hands to the out-of-core join's driver: its probe rows in host
/// partitions, the sender of its output stream, and its metrics.
struct Handover {
    side: SpilledSide,
    tx: mpsc::Sender<Result<JoinOutput>>,
    metrics: Metrics,
}

/// One step of an out-of-core join: a chunk of one partition's build pieces (a partition too
/// large for one build state is built in several chunks, each probed by the whole partition).
#[derive(Debug, Clone)]
struct Step {
    part: usize,
    pieces: std::ops::Range<usize>,
    first: bool,
    last: bool,
}

impl OutOfCore {
    fn new(build: SpilledSide, sizes: SpillSizes, consumers: usize) -> Self {
        let mut steps = Vec::new();
        for part in 0..build.partitions() {
            let mut groups: Vec<_> =
                build.groups(part, sizes.build_bytes, false).into_iter().map(|g| g.pieces).collect();
            if groups.is_empty() {
                groups.push(0..0);
            }
            let n = groups.len();
            steps.extend(groups.into_iter().enumerate().map(|(i, pieces)| Step {
                part,
                pieces,
                first: i == 0,
                last: i + 1 == n,
            }));
        }
        OutOfCore { build, sizes, steps, meeting: Meeting::new(consumers) }
    }
}

/// The build side shared by the probe partitions of a `CollectLeft` join.
#[derive(Debug, Default)]
struct Shared {
    build: OnceShared<Built>,
    /// Probe partitions still running; the last one emits the build rows decided at the end.
    remaining: AtomicUsize,
}

impl Shared {
    /// Counts a probe partition out; true for the last. No partition needs the shared build
    /// then: its device memory goes when the last handle to it is dropped, not with the plan.
    fn probe_done(&self) -> bool {
        let last = self.remaining.fetch_sub(1, Ordering::SeqCst) == 1;
        if last {
            self.build.clear();
        }
        last
    }
}

#[derive(Debug)]
pub struct GpuHashJoinExec {
    /// The `HashJoinExec` this replaces.
    join: Arc<dyn ExecutionPlan>,
    layout: Arc<Layout>,
    /// The cost model's plan-time estimate, when it was consulted.
    estimate: Option<Arc<JoinEstimate>>,
    /// Why the plan expects this join to run out of core (its build over the memory limit).
    out_of_core: Option<String>,
    /// The hash repartitions this join reads around (see [`GpuHashJoinExec::without_repartitions`]).
    removed: Option<String>,
    /// On the GPU for its GPU parent, though the CPU would win alone (see
    /// `rule::Placer::place_with_children`).
    for_gpu_parent: bool,
    shared: Arc<Shared>,
    metrics: ExecutionPlanMetricsSet,
}

/// What EXPLAIN adds to the algorithm's reason when the sizes were bounded, not estimated.
const BOUNDED_NOTE: &str = "; input sizes bounded from the plan's shape";

fn hash_join(plan: &Arc<dyn ExecutionPlan>) -> Result<&HashJoinExec> {
    plan.downcast_ref::<HashJoinExec>()
        .ok_or_else(|| DataFusionError::Internal("GpuHashJoinExec wraps a plan that is not a HashJoinExec".into()))
}

/// Positions of `cols` (sorted, unique) in the uploaded batch.
fn position(cols: &[usize], c: usize) -> Result<usize> {
    cols.binary_search(&c).map_err(|_| DataFusionError::Internal(format!("column {c} was not uploaded")))
}

fn key_index(expr: &Arc<dyn PhysicalExpr>) -> std::result::Result<usize, String> {
    expr.downcast_ref::<Column>().map(|c| c.index()).ok_or_else(|| format!("join key `{expr}` is not a plain column"))
}

impl GpuHashJoinExec {
    /// The GPU form of `join` (a `HashJoinExec`), or why it cannot have one. Eligibility
    /// (types, filter, mode) is checked by the rule first; this settles the layout and the
    /// algorithm.
    pub fn try_new(join: Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> std::result::Result<Self, String> {
        let layout = {
            let hj = hash_join(&join).map_err(|e| e.to_string())?;
            Arc::new(Self::layout(hj, cfg)?)
        };
        Ok(GpuHashJoinExec {
            join,
            layout,
            estimate: None,
            out_of_core: None,
            removed: None,
            for_gpu_parent: false,
            shared: Arc::new(Shared::default()),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// This exec with the cost model's estimate. When the setting leaves a choice, the plan
    /// shows (and a build with no better size runs) the model's choice; each build chooses
    /// again on its real row count.
    pub fn with_estimate(mut self, estimate: JoinEstimate) -> Self {
        if estimate.bounded {
            // Sizes bounded from the plan's shape place the join but do not choose its algorithm.
            if !self.layout.choice.ends_with(BOUNDED_NOTE) {
                let mut layout = (*self.layout).clone();
                layout.choice = format!("{}{BOUNDED_NOTE}", layout.choice);
                self.layout = Arc::new(layout);
            }
        } else if self.layout.candidates.len() > 1 {
            let mut layout = (*self.layout).clone();
            let mut spec = (*layout.spec).clone();
            spec.algorithm = estimate.choice.best;
            layout.spec = Arc::new(spec);
            layout.choice = format!("cost model: {}", estimate.choice.describe());
            self.layout = Arc::new(layout);
        }
        self.estimate = Some(Arc::new(estimate));
        self
    }

    /// This exec, expected to run out of core for `why` (the plan-time memory check's words).
    /// The choice is made again at run time on the real build size.
    pub fn with_out_of_core(mut self, why: String) -> Self {
        self.out_of_core = Some(why);
        self
    }

    /// This join in `CollectLeft` mode reading the inputs of the hash `RepartitionExec`s below a
    /// `Partitioned` join, or `None` when there are none to remove (or the join is planned out
    /// of core). The build is collected from every partition of the left input (one hash table
    /// on the device instead of one per partition) and each input partition of the right side
    /// is probed as it comes: the CPU no longer hashes and redistributes both inputs, and a GPU
    /// input's rows stay on the device. The output is partitioned like the right input, not by
    /// the join keys; the rule restores the keys' partitioning above it where a parent needs it.
    pub fn without_repartitions(&self) -> Result<Option<GpuHashJoinExec>> {
        let hj = self.hash_join()?;
        if *hj.partition_mode() != PartitionMode::Partitioned || self.out_of_core.is_some() {
            return Ok(None);
        }
        let input = |side: &Arc<dyn ExecutionPlan>| {
            removable_repartition(side).map(|r| (Arc::clone(r.input()), r.partitioning().to_string()))
        };
        let (left, right) = (input(hj.left()), input(hj.right()));
        if left.is_none() && right.is_none() {
            return Ok(None);
        }
        let mut removed = Vec::new();
        let mut side = |s: Option<(Arc<dyn ExecutionPlan>, String)>, old: &Arc<dyn ExecutionPlan>, name: &str| match s {
            Some((input, partitioning)) => {
                removed.push(format!("{name} {partitioning}"));
                input
            }
            None => Arc::clone(old),
        };
        let (left, right) = (side(left, hj.left(), "build"), side(right, hj.right(), "probe"));
        // The output has as many partitions as the probe input: keep the plan's parallelism.
        if right.output_partitioning().partition_count() < hj.right().output_partitioning().partition_count() {
            return Ok(None);
        }
        let join = hj.builder().with_partition_mode(PartitionMode::CollectLeft).with_new_children(vec![left, right])?;
        Ok(Some(GpuHashJoinExec {
            join: join.reset_state().build_exec()?,
            layout: Arc::clone(&self.layout),
            estimate: self.estimate.clone(),
            out_of_core: None,
            removed: Some(removed.join(", ")),
            for_gpu_parent: self.for_gpu_parent,
            shared: Arc::new(Shared::default()),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    /// This join read around its repartitions with `why` it stays on the GPU added to EXPLAIN's
    /// note on them (a join whose own estimate loses to the CPU, kept because the Partitioned GPU
    /// join it replaces costs more).
    pub fn with_removal_note(mut self, why: &str) -> Self {
        if let Some(removed) = &mut self.removed {
            removed.push_str("; ");
            removed.push_str(why);
        }
        self
    }

    /// This exec, placed on the GPU with its GPU parent although the model prices the CPU
    /// faster for the join alone (EXPLAIN says so).
    pub fn for_gpu_parent(mut self) -> Self {
        self.for_gpu_parent = true;
        self
    }

    /// Whether this join was placed on the GPU with its GPU parent ([`Self::for_gpu_parent`]),
    /// which reads its output on the device.
    pub fn placed_for_gpu_parent(&self) -> bool {
        self.for_gpu_parent
    }

    /// Why the plan expects this join to run out of core, if it does.
    pub fn out_of_core(&self) -> Option<&str> {
        self.out_of_core.as_deref()
    }

    /// The `HashJoinExec` this replaces.
    pub fn original(&self) -> &Arc<dyn ExecutionPlan> {
        &self.join
    }

    /// The cost model's estimate, when it was consulted.
    pub fn estimate(&self) -> Option<&JoinEstimate> {
        self.estimate.as_deref()
    }

    /// The algorithms the model may choose among (one when the setting or the plan fixes it).
    pub fn candidates(&self) -> &[JoinAlgorithm] {
        &self.layout.candidates
    }

    /// Why this join cannot run out of core, or `None` when it can.
    pub fn no_spill_reason(&self) -> Option<&str> {
        self.layout.no_spill.as_deref()
    }

    /// Schemas of the build and probe columns the GPU uploads.
    pub fn build_schema(&self) -> &SchemaRef {
        &self.layout.build_schema
    }

    pub fn probe_schema(&self) -> &SchemaRef {
        &self.layout.probe_schema
    }

    /// The device-side join description.
    pub fn spec(&self) -> &Arc<JoinSpec> {
        &self.layout.spec
    }

    fn layout(hj: &HashJoinExec, cfg: &GpuConfig) -> std::result::Result<Layout, String> {
        let (ls, rs) = (hj.left().schema(), hj.right().schema());
        let join_type = *hj.join_type();
        let mut lkeys = Vec::new();
        let mut rkeys = Vec::new();
        let mut types = Vec::new();
        for (l, r) in hj.on() {
            let (li, ri) = (key_index(l)?, key_index(r)?);
            let (lt, rt) = (ls.field(li).data_type(), rs.field(ri).data_type());
            if lt != rt {
                return Err(format!("join keys `{l}` and `{r}` have different types {lt} and {rt}"));
            }
            lkeys.push(li);
            rkeys.push(ri);
            types.push(lt.clone());
        }
        let nulls_equal = hj.null_equality() == NullEquality::NullEqualsNull;
        let keys = KeyPlan::new(&types, nulls_equal)?;

        // Output columns of the (projected) join schema.
        let (_, column_indices) = build_join_schema(&ls, &rs, &join_type);
        let chosen: Vec<usize> = match &hj.projection {
            Some(p) => p.iter().copied().collect(),
            None => (0..column_indices.len()).collect(),
        };
        let filter = match hj.filter() {
            Some(f) => Some(generate_filter(f.expression(), f.schema(), f.column_indices())?),
            None => None,
        };
        let mut build_cols = lkeys.clone();
        let mut probe_cols = rkeys.clone();
        for c in filter.iter().flat_map(|f| &f.columns) {
            if c.build {
                build_cols.push(c.index);
            } else {
                probe_cols.push(c.index);
            }
        }
        for &k in &chosen {
            let ci = column_indices.get(k).ok_or("the join's projection is out of range")?;
            match ci.side {
                JoinSide::Left => build_cols.push(ci.index),
                JoinSide::Right => probe_cols.push(ci.index),
                JoinSide::None => {}
            }
        }
        build_cols.sort_unstable();
        build_cols.dedup();
        probe_cols.sort_unstable();
        probe_cols.dedup();
        let pos = |cols: &[usize], c| position(cols, c).map_err(|e| e.to_string());
        let mut output = Vec::with_capacity(chosen.len());
        for &k in &chosen {
            let ci = &column_indices[k];
            output.push(match ci.side {
                JoinSide::Left => OutputColumn::Build(pos(&build_cols, ci.index)?),
                JoinSide::Right => OutputColumn::Probe(pos(&probe_cols, ci.index)?),
                JoinSide::None => OutputColumn::Mark,
            });
        }
        let build_schema = Arc::new(ls.project(&build_cols).map_err(|e| e.to_string())?);
        let probe_schema = Arc::new(rs.project(&probe_cols).map_err(|e| e.to_string())?);
        let build_keys = lkeys.iter().map(|c| pos(&build_cols, *c)).collect::<std::result::Result<Vec<_>, _>>()?;
        let probe_keys = rkeys.iter().map(|c| pos(&probe_cols, *c)).collect::<std::result::Result<Vec<_>, _>>()?;

        let filter = match filter {
            Some(code) => Some(FilterSpec {
                columns: code
                    .columns
                    .iter()
                    .map(|c| {
                        Ok(if c.build {
                            OutputColumn::Build(pos(&build_cols, c.index)?)
                        } else {
                            OutputColumn::Probe(pos(&probe_cols, c.index)?)
                        })
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?,
                may_fail: code.may_fail,
                source: code.source,
                literals: code.literals,
            }),
            None => None,
        };
        let ordered = hj.properties().output_ordering().is_some();
        let (algorithm, choice) = choose_algorithm(cfg.join_algorithm, ordered);
        let candidates = candidates(cfg.join_algorithm, ordered);
        let no_spill = if ordered {
            Some("the plan relies on the probe order, which partitioning does not keep".to_string())
        } else if hj.null_aware {
            Some("NOT IN (a null-aware anti join) is decided over the whole probe side".to_string())
        } else {
            build_schema.fields().iter().chain(probe_schema.fields().iter()).find(|f| !can_concat(f.data_type())).map(
                |f| format!("column {} of type {} cannot be partitioned through host memory", f.name(), f.data_type()),
            )
        };
        Ok(Layout {
            no_spill,
            candidates,
            build_cols,
            build_schema,
            probe_cols,
            probe_schema,
            spec: Arc::new(JoinSpec {
                join_type,
                keys,
                build_keys,
                probe_keys,
                output,
                schema: hj.schema(),
                algorithm,
                ordered,
                null_aware: hj.null_aware,
                filter,
                batch_rows: window_bound(cfg.batch_rows),
            }),
            choice,
        })
    }

    /// The algorithm this join runs.
    pub fn algorithm(&self) -> JoinAlgorithm {
        self.layout.spec.algorithm
    }

    fn hash_join(&self) -> Result<&HashJoinExec> {
        hash_join(&self.join)
    }

    fn mode(&self) -> Result<PartitionMode> {
        Ok(*self.hash_join()?.partition_mode())
    }
}

/// The algorithm for a setting, and the words EXPLAIN gives for the choice. `auto` takes NPJ
/// until the cost model chooses among the algorithms; `phj` and `smj` take GFTR, which seed
/// 002 recommends for wide joins with a match ratio of 25% or more.
fn choose_algorithm(setting: JoinAlgorithmSetting, ordered: bool) -> (JoinAlgorithm, String) {
    if ordered {
        return (JoinAlgorithm::Npj, "npj keeps the probe order the plan relies on".into());
    }
    match setting {
        JoinAlgorithmSetting::Auto => (JoinAlgorithm::Npj, "gpu.join_algorithm=auto".into()),
        JoinAlgorithmSetting::Phj => (JoinAlgorithm::PhjGftr, "gpu.join_algorithm=phj".into()),
        JoinAlgorithmSetting::Smj => (JoinAlgorithm::SmjGftr, "gpu.join_algorithm=smj".into()),
        JoinAlgorithmSetting::Fixed(a) => (a, format!("gpu.join_algorithm={a}")),
    }
}

/// The algorithms a setting leaves to the cost model.
fn candidates(setting: JoinAlgorithmSetting, ordered: bool) -> Vec<JoinAlgorithm> {
    if ordered {
        return vec![JoinAlgorithm::Npj];
    }
    match setting {
        JoinAlgorithmSetting::Auto => JoinAlgorithm::ALL.to_vec(),
        JoinAlgorithmSetting::Phj => vec![JoinAlgorithm::PhjGfur, JoinAlgorithm::PhjGftr],
        JoinAlgorithmSetting::Smj => vec![JoinAlgorithm::SmjGfur, JoinAlgorithm::SmjGftr],
        JoinAlgorithmSetting::Fixed(a) => vec![a],
    }
}

impl DisplayAs for GpuHashJoinExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let Ok(hj) = self.hash_join() else { return write!(f, "GpuHashJoinExec") };
        let on = hj.on().iter().map(|(l, r)| format!("({l}, {r})")).collect::<Vec<_>>().join(", ");
        let spec = &self.layout.spec;
        match t {
            DisplayFormatType::TreeRender => {
                writeln!(f, "join_type={}", hj.join_type())?;
                writeln!(f, "on={on}")?;
                write!(f, "algorithm={}", spec.algorithm)
            }
            _ => {
                write!(f, "GpuHashJoinExec: mode={:?}, join_type={}, on=[{on}]", hj.partition_mode(), hj.join_type())?;
                if let Some(filter) = hj.filter() {
                    write!(f, ", filter={}", filter.expression())?;
                }
                write!(f, ", algorithm={} ({}), key={:?}", spec.algorithm, self.layout.choice, spec.keys.encoding)?;
                if let Some(why) = &self.out_of_core {
                    write!(f, ", out_of_core=[{why}: partitioned through pinned host memory]")?;
                }
                if let Some(removed) = &self.removed {
                    write!(f, ", one build from every partition (repartitions removed: {removed})")?;
                }
                if let Some(e) = &self.estimate {
                    write!(f, ", {}", e.verdict.describe())?;
                    for note in &e.notes {
                        write!(f, " ({note})")?;
                    }
                }
                if self.for_gpu_parent {
                    write!(f, ", on the GPU with its parent (which reads its output on the device: no download)")?;
                }
                Ok(())
            }
        }
    }
}

impl ExecutionPlan for GpuHashJoinExec {
    fn name(&self) -> &str {
        "GpuHashJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.join.children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.join.apply_expressions(f)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        // Only the order-preserving NPJ keeps the probe order; the other algorithms reorder.
        if self.layout.spec.ordered { self.join.maintains_input_order() } else { vec![false, false] }
    }

    fn input_distribution_requirements(&self) -> InputDistributionRequirements {
        // In CollectLeft mode the build reads every left partition itself (DataFusion's join
        // needs one partition there).
        match self.mode() {
            Ok(PartitionMode::CollectLeft) => InputDistributionRequirements::new(vec![
                Distribution::UnspecifiedDistribution,
                Distribution::UnspecifiedDistribution,
            ]),
            _ => self.join.input_distribution_requirements(),
        }
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let join = Arc::clone(&self.join).replace_children(children, recompute)?;
        let layout = Arc::clone(&self.layout);
        Ok(Arc::new(GpuHashJoinExec {
            join,
            layout,
            estimate: self.estimate.clone(),
            out_of_core: self.out_of_core.clone(),
            removed: self.removed.clone(),
            for_gpu_parent: self.for_gpu_parent,
            shared: Arc::new(Shared::default()),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuHashJoinExec {
            join: Arc::clone(&self.join),
            layout: Arc::clone(&self.layout),
            estimate: self.estimate.clone(),
            out_of_core: self.out_of_core.clone(),
            removed: self.removed.clone(),
            for_gpu_parent: self.for_gpu_parent,
            shared: Arc::new(Shared::default()),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let out = self.execute_output(partition, context)?;
        let batches = out.then(|o| async move {
            match o? {
                JoinOutput::Device(b) => download_for_cpu(b).await,
                JoinOutput::Host(b) => Ok(b),
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), batches)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// None: the estimate below ignores the inputs' statistics, so they are not computed.
    fn child_stats_requests(&self, _partition: Option<usize>) -> Vec<ChildStats> {
        self.children().iter().map(|_| ChildStats::Skip).collect()
    }

    /// Unknown, as a join the rule leaves on the CPU gives (see `exec::fallback`): the joins above
    /// are priced from the plan's bound whichever side of the link this one runs on. Passing
    /// DataFusion's estimate up instead (small for joins of in-memory tables, which have no
    /// column statistics) moved joins above GPU joins to the CPU: TPC-H q5 and q21,
    /// benches/results/2026-11-26-h100-cpu-repartition-pricing.md.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(Arc::new(Statistics::new_unknown(&self.schema())))
    }
}

/// Per-partition metrics.
#[derive(Clone)]
struct Metrics {
    build_time: Time,
    upload_time: Time,
    /// The part of upload_time spent packing and assembling columns on the host.
    pack_time: Time,
    keys_time: Time,
    transform_time: Time,
    match_time: Time,
    materialize_time: Time,
    output_rows: datafusion::physical_plan::metrics::Count,
    output_batches: datafusion::physical_plan::metrics::Count,
    probe_rows: datafusion::physical_plan::metrics::Count,
    /// Out-of-core joins: partitions, and bytes moved to pinned host memory (both sides).
    spill_partitions: datafusion::physical_plan::metrics::Count,
    spill_bytes: datafusion::physical_plan::metrics::Count,
    /// Out-of-core joins: partitioning the probe side into host memory, and waiting, once
    /// handed over, for the join that one stream drives for all of them.
    spill_time: Time,
    handover_wait_time: Time,
    /// Builds run by each algorithm (EXPLAIN ANALYZE shows the one actually run).
    ran: Vec<(JoinAlgorithm, datafusion::physical_plan::metrics::Count)>,
    /// Builds, or probe partitions, finished by DataFusion's join when device memory ran out.
    cpu_fallbacks: datafusion::physical_plan::metrics::Count,
}

impl Metrics {
    fn new(set: &ExecutionPlanMetricsSet, partition: usize) -> Self {
        let b = || MetricBuilder::new(set);
        Metrics {
            build_time: b().subset_time("build_time", partition),
            upload_time: b().subset_time("upload_time", partition),
            pack_time: b().subset_time("pack_time", partition),
            keys_time: b().subset_time("keys_time", partition),
            transform_time: b().subset_time("transform_time", partition),
            match_time: b().subset_time("match_time", partition),
            materialize_time: b().subset_time("materialize_time", partition),
            output_rows: b().output_rows(partition),
            output_batches: b().counter("output_batches", partition),
            probe_rows: b().counter("probe_rows", partition),
            spill_partitions: b().counter("spill_partitions", partition),
            spill_bytes: b().counter("spill_bytes", partition),
            spill_time: b().subset_time("spill_time", partition),
            handover_wait_time: b().subset_time("handover_wait_time", partition),
            ran: JoinAlgorithm::ALL.iter().map(|&a| (a, b().counter(format!("builds_{a}"), partition))).collect(),
            cpu_fallbacks: b().counter("cpu_fallbacks", partition),
        }
    }

    /// Counts an output batch of `rows` rows handed to the consumer.
    fn sent(&self, rows: usize) {
        self.output_rows.add(rows);
        self.output_batches.add(1);
    }

    fn ran(&self, algorithm: JoinAlgorithm) {
        if let Some((_, c)) = self.ran.iter().find(|(a, _)| *a == algorithm) {
            c.add(1);
        }
    }

    fn add_phases(&self, t: &PhaseTimes) {
        self.keys_time.add_duration(t.keys);
        self.transform_time.add_duration(t.transform);
        self.match_time.add_duration(t.matching);
        self.materialize_time.add_duration(t.materialize);
    }
}

/// `side` when it is a hash `RepartitionExec` that does not preserve order: the kind a
/// `Partitioned` GPU join reads around once it is on the GPU (see
/// [`GpuHashJoinExec::without_repartitions`]).
pub fn removable_repartition(side: &Arc<dyn ExecutionPlan>) -> Option<&RepartitionExec> {
    side.downcast_ref::<RepartitionExec>()
        .filter(|r| matches!(r.partitioning(), Partitioning::Hash(..)) && !r.preserve_order())
}

/// What `side` gathers when it is a `CoalescePartitionsExec` without a limit, as a `CollectLeft`
/// join's build side is: a GPU join collects every partition of it itself.
pub fn gathered_input(side: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    side.downcast_ref::<CoalescePartitionsExec>().filter(|c| c.fetch().is_none()).map(|c| c.input())
}

/// What `side` gathers ([`gathered_input`]) when that is a GPU exec: a build side reads its
/// partitions on the device instead.
pub fn coalesced_input(side: &Arc<dyn ExecutionPlan>) -> Option<&Arc<dyn ExecutionPlan>> {
    gathered_input(side).filter(|input| as_gpu_exec(input).is_some())
}

/// A join's build input, its build columns: host batches from a CPU child (as they came, not
/// concatenated), or device batches from a GPU child (nothing crosses PCIe).
enum BuildInput {
    Host(Vec<RecordBatch>),
    Device(Vec<DeviceBatch>),
}

impl BuildInput {
    /// The rows on the host (device batches downloaded), for the CPU.
    async fn into_host(self) -> Result<Vec<RecordBatch>> {
        match self {
            BuildInput::Host(h) => Ok(h),
            BuildInput::Device(parts) => blocking(move || parts.iter().map(DeviceBatch::download).collect()).await,
        }
    }
}

/// Reads every listed partition of `plan` at once (each on its own task, so CPU children run in
/// parallel), keeping the build columns, in partition order: device batches from a GPU child,
/// else the host batches.
async fn collect(
    plan: &Arc<dyn ExecutionPlan>,
    partitions: std::ops::Range<usize>,
    layout: &Arc<Layout>,
    context: &Arc<TaskContext>,
) -> Result<BuildInput> {
    let failed = |e| DataFusionError::Execution(format!("GPU join: reading the build side failed: {e}"));
    // The one partition of a CoalescePartitionsExec over a GPU exec is every partition of that
    // exec: read on the device, not downloaded to be merged and uploaded again.
    let (plan, partitions) = match coalesced_input(plan) {
        Some(input) if partitions == (0..1) => (input, 0..input.output_partitioning().partition_count()),
        _ => (plan, partitions),
    };
    if let Some(child) = as_gpu_exec(plan) {
        let mut tasks = Vec::new();
        for p in partitions {
            let mut s = child.execute_device(p, Arc::clone(context))?;
            let layout = Arc::clone(layout);
            tasks.push(SpawnedTask::spawn(async move {
                let mut parts = Vec::new();
                while let Some(b) = s.next().await.transpose()? {
                    if b.num_rows() > 0 {
                        parts.push(b.select(&layout.build_cols, &layout.build_schema)?);
                    }
                }
                Ok::<_, DataFusionError>(parts)
            }));
        }
        let mut parts = Vec::new();
        for t in tasks {
            parts.extend(t.await.map_err(failed)??);
        }
        if parts.is_empty() {
            return Ok(BuildInput::Host(Vec::new()));
        }
        return Ok(BuildInput::Device(parts));
    }
    let mut tasks = Vec::new();
    for p in partitions {
        let mut s = plan.execute(p, Arc::clone(context))?;
        let cols = layout.build_cols.clone();
        tasks.push(SpawnedTask::spawn(async move {
            let mut batches = Vec::new();
            while let Some(b) = s.next().await {
                let b = b?;
                if b.num_rows() > 0 {
                    batches.push(b.project(&cols)?);
                }
            }
            Ok::<_, DataFusionError>(batches)
        }));
    }
    let mut batches = Vec::new();
    for t in tasks {
        batches.extend(t.await.map_err(failed)??);
    }
    Ok(BuildInput::Host(batches))
}

/// The algorithm a build runs: the model's choice on the real build rows when the setting and
/// plan leave a choice and the model was consulted, else the plan's.
fn runtime_spec(
    layout: &Layout,
    estimate: Option<&JoinEstimate>,
    build_rows: usize,
    gpu: &Gpu,
    cfg: &GpuConfig,
) -> Arc<JoinSpec> {
    let Some(e) = estimate.filter(|e| layout.candidates.len() > 1 && !e.bounded) else {
        return Arc::clone(&layout.spec);
    };
    let profile = crate::cost::profile::load(gpu.info(), &cfg.profile_dir);
    let shape = e.shape.with_build_rows(build_rows as f64);
    let choice = crate::cost::join::choose(&shape, &layout.candidates, &profile);
    if choice.best == layout.spec.algorithm {
        return Arc::clone(&layout.spec);
    }
    let mut spec = (*layout.spec).clone();
    spec.algorithm = choice.best;
    Arc::new(spec)
}

/// A spec for one build: the run-time algorithm choice, and its output windows when the memory
/// limit (or an out-of-core plan) asks for windows smaller than `gpu.batch_rows`.
fn build_spec(
    layout: &Layout,
    estimate: Option<&JoinEstimate>,
    build_rows: usize,
    gpu: &Gpu,
    cfg: &GpuConfig,
    window_rows: Option<u64>,
) -> Arc<JoinSpec> {
    let spec = runtime_spec(layout, estimate, build_rows, gpu, cfg);
    match window_rows {
        Some(w) if w < spec.batch_rows => {
            let mut s = (*spec).clone();
            s.batch_rows = w;
            Arc::new(s)
        }
        _ => spec,
    }
}

/// `batches` in groups of `rows` rows (the last one shorter), a batch crossing a group's end cut
/// in two (slices share the batch's buffers).
fn chunk_groups(batches: &[RecordBatch], rows: usize) -> Vec<Vec<RecordBatch>> {
    let rows = rows.max(1);
    let (mut groups, mut group, mut in_group) = (Vec::new(), Vec::new(), 0usize);
    for b in batches {
        let mut at = 0;
        while at < b.num_rows() {
            let n = (rows - in_group).min(b.num_rows() - at);
            group.push(b.slice(at, n));
            (at, in_group) = (at + n, in_group + n);
            if in_group == rows {
                groups.push(std::mem::take(&mut group));
                in_group = 0;
            }
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// `bytes` over `rows`, rounded up (at least 1): chunks cut at `budget / per_row` rows hold at
/// most `budget` (rounded down, rows of 1.9 bytes would make chunks of 1.9 chunks).
fn per_row(bytes: u64, rows: usize) -> u64 {
    bytes.div_ceil(rows.max(1) as u64).max(1)
}

/// Everything a join partition's build needs.
struct BuildJob {
    gpu: Arc<Gpu>,
    /// The `HashJoinExec` the GPU join replaces (for DataFusion's join when it falls back).
    join: Arc<dyn ExecutionPlan>,
    layout: Arc<Layout>,
    estimate: Option<Arc<JoinEstimate>>,
    cfg: GpuConfig,
    context: Arc<TaskContext>,
    metrics: Metrics,
    /// Output streams that may hold windows at once.
    consumers: usize,
    /// Whether the probe streams share this build (`CollectLeft` mode).
    consumers_share_build: bool,
    route: bool,
    planned_out_of_core: bool,
    who: String,
}

impl BuildJob {
    /// Collects the build side (partitions `partitions` of `left`) and prepares it: on the device
    /// when its state fits under the memory limit, else partitioned into pinned host memory for
    /// an out-of-core join whose output goes to `consumers` streams at once. In `Partitioned`
    /// mode each partition's join gets a share of the limit, and when the plan expects the join
    /// to run out of core (`planned_out_of_core`) every partition does, so that all their device
    /// work takes turns for the device's out-of-core work slots (a partition joined in memory
    /// would not). When device memory runs out on the way (and `gpu.cpu_fallback` is on), the
    /// build goes to DataFusion's join instead, which then serves every probe partition.
    async fn run(self, left: Arc<dyn ExecutionPlan>, partitions: std::ops::Range<usize>) -> Result<Built> {
        let input = collect(&left, partitions, &self.layout, &self.context).await?;
        let (rows, bytes): (usize, u64) = match &input {
            BuildInput::Host(h) => (h.iter().map(RecordBatch::num_rows).sum(), h.iter().map(batch_bytes).sum()),
            BuildInput::Device(d) => {
                (d.iter().map(DeviceBatch::num_rows).sum(), d.iter().map(|b| b.byte_size() as u64).sum())
            }
        };
        timeline::mark(&self.who, || format!("build input of {rows} rows collected"));
        // Partitioned mode runs one join per partition at the same time: each gets its share. Of
        // the limit, only what other operators do not hold now is there for this build.
        let available = self.gpu.memory().available();
        let (limit, streams) = match self.consumers_share_build {
            true => (available, self.consumers),
            false => (available / self.consumers.max(1) as u64, 1),
        };
        let spill = !fits_in_memory(bytes, limit) || (self.planned_out_of_core && !self.consumers_share_build);
        let (result, for_cpu) = if self.layout.no_spill.is_none() && spill {
            // Partitioned into host memory: device input comes back to the host first.
            let host = input.into_host().await?;
            let keep = host.clone();
            (self.spill(host, rows, bytes, limit, streams).await, BuildInput::Host(keep))
        } else {
            self.in_memory(input, rows).await
        };
        match result {
            Ok(built) => Ok(built),
            Err(e) if self.cfg.cpu_fallback && recoverable_on_cpu(&e) => {
                let host = for_cpu.into_host().await?;
                self.on_cpu(host, &e)
            }
            Err(e) => Err(e),
        }
    }

    /// DataFusion's join over the build rows `host`, for every probe partition of a shared build
    /// (or this partition's), after the GPU's `failed`.
    fn on_cpu(&self, host: Vec<RecordBatch>, failed: &DataFusionError) -> Result<Built> {
        timeline::mark(&self.who, || format!("the build goes to the CPU after: {failed}"));
        log::debug!("a GPU join's build goes to DataFusion's join: {failed}");
        self.metrics.cpu_fallbacks.add(1);
        let probes = if self.consumers_share_build { self.consumers } else { 1 };
        let cpu = CpuJoin::new(hash_join(&self.join)?, &self.layout.sides(), host, probes)?;
        Ok(Built::OnCpu(Arc::new(cpu)))
    }

    /// Partitions the build rows `host` into pinned host memory for an out-of-core join.
    async fn spill(
        &self,
        host: Vec<RecordBatch>,
        rows: usize,
        bytes: u64,
        limit: u64,
        streams: usize,
    ) -> Result<Built> {
        let (gpu, layout, metrics) = (&self.gpu, &self.layout, &self.metrics);
        let out_row = row_width(&layout.spec.schema).max(1);
        let sizes = SpillSizes::new(bytes, limit, streams, self.route, out_row, window_bound(self.cfg.batch_rows));
        metrics.spill_partitions.add(sizes.partitions());
        // The chunks are dealt to as many partitioning passes as may run at once, so that one
        // chunk's upload overlaps another's download; their partitions are merged after.
        let chunks = chunk_groups(&host, sizes.split_rows(per_row(bytes, rows)));
        let workers = crate::device::SPLIT_WORKERS.min(chunks.len()).max(1);
        let mut dealt: Vec<Vec<Vec<RecordBatch>>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, chunk) in chunks.into_iter().enumerate() {
            dealt[i % workers].push(chunk);
        }
        let mut passes = Vec::with_capacity(workers);
        for mine in dealt {
            let (gpu, layout, metrics) = (Arc::clone(gpu), Arc::clone(layout), metrics.clone());
            let slot = gpu.split_slot().await?;
            passes.push(blocking(move || -> Result<SpilledSide> {
                let _t = metrics.build_time.timer();
                let _slot = slot;
                let stream = gpu.stream();
                let mut side = SpilledSide::new(Arc::clone(&layout.build_schema), sizes.bits);
                for chunk in mine {
                    // Each chunk assembled from its batches as it is copied (no host concatenation).
                    let dev = {
                        let _u = metrics.upload_time.timer();
                        DeviceBatch::upload_concat(&gpu, &stream, &chunk)?
                    };
                    side.add(&gpu, &dev, &layout.spec.keys, &layout.spec.build_keys)?;
                }
                Ok(side)
            }));
        }
        let mut build = SpilledSide::new(Arc::clone(&layout.build_schema), sizes.bits);
        for pass in passes {
            build.absorb(pass.await?, 0)?;
        }
        metrics.spill_bytes.add(build.bytes as usize);
        timeline::mark(&self.who, || format!("build partitioned into pinned memory ({} bytes)", build.bytes));
        let participants = if self.consumers_share_build { self.consumers } else { 1 };
        Ok(Built::Spilled(Arc::new(OutOfCore::new(build, sizes, participants))))
    }

    /// Uploads (or concatenates) the build input and builds it on the device; also returns what
    /// DataFusion's join would need if that fails (the host rows, or the device rows to download).
    async fn in_memory(&self, input: BuildInput, rows: usize) -> (Result<Built>, BuildInput) {
        let (gpu, layout, metrics) = (&self.gpu, &self.layout, &self.metrics);
        // The output windows every probe stream may hold at once (a few each, see `probe_chunk`)
        // take at most a quarter of the memory limit: under a small limit, windows shrink.
        // A window holds its output rows and a pair of positions (16 bytes) per row.
        let in_flight = self.consumers.max(1) as u64 * crate::join::triton::WINDOWS_PER_STREAM;
        let window_rows = rows_within_limit(gpu, in_flight, row_width(&layout.spec.schema) + 16);
        let spec = build_spec(layout, self.estimate.as_deref(), rows, gpu, &self.cfg, Some(window_rows));
        metrics.ran(spec.algorithm);
        let build_time = metrics.build_time.clone();
        let _t = build_time.timer();
        let (kept, dev, for_cpu) = match input {
            // The batches go up in groups, each assembled in the pinned staging buffers as it is
            // copied, and are concatenated on the device: no host-side concatenation of the whole
            // build (single-threaded, about 0.2 s per GiB) before the upload.
            BuildInput::Host(batches) => {
                // Kept only where a probe partition could use them (see `PartitionRun::probe`):
                // not for a shared build whose build rows are decided at the end.
                let usable = !(self.consumers_share_build && layout.spec.emits_build_rows());
                let kept = match self.cfg.cpu_fallback && usable {
                    true => KeptBuild::keep(&batches, self.context.memory_pool()),
                    false => None,
                };
                let for_cpu = BuildInput::Host(batches.clone());
                (kept, self.upload(batches).await, for_cpu)
            }
            BuildInput::Device(parts) => {
                let (gpu, schema) = (Arc::clone(gpu), Arc::clone(&layout.build_schema));
                let concat = blocking(move || {
                    let stream = gpu.stream();
                    let dev = DeviceBatch::concat(&gpu, &stream, schema, &parts).and_then(|dev| {
                        // The build runs on its own stream: the concatenation (or the one part) must be done.
                        dev.stream().synchronize().gpu("waiting for the build input")?;
                        Ok(dev)
                    });
                    Ok((dev, parts))
                })
                .await;
                match concat {
                    // The concatenated rows are the build's: a copy for the CPU costs nothing.
                    Ok((Ok(dev), _parts)) => (None, Ok(dev.clone()), BuildInput::Device(vec![dev])),
                    Ok((Err(e), parts)) => (None, Err(e), BuildInput::Device(parts)),
                    Err(e) => return (Err(e), BuildInput::Host(Vec::new())),
                }
            }
        };
        let dev = match dev {
            Ok(dev) => dev,
            Err(e) => return (Err(e), for_cpu),
        };
        let (gpu, metrics, who) = (Arc::clone(gpu), metrics.clone(), self.who.clone());
        let built = blocking(move || {
            // The build continues on the stream its input was made on.
            let stream = Arc::clone(dev.stream());
            timeline::mark(&who, || format!("build input uploaded; building with {}", spec.algorithm));
            let build = JoinBuild::new(Arc::clone(&gpu), &stream, spec, dev)?;
            metrics.add_phases(&build.times);
            Ok(Built::Memory(Arc::new(build), kept))
        })
        .await;
        (built, for_cpu)
    }

    /// The host build rows on the device, uploaded in groups (see [`ChunkUploader`]).
    async fn upload(&self, batches: Vec<RecordBatch>) -> Result<DeviceBatch> {
        let gpu = &self.gpu;
        let mut uploader = ChunkUploader::new(
            Arc::clone(gpu),
            usize::MAX,
            self.metrics.upload_time.clone(),
            self.metrics.pack_time.clone(),
        );
        for b in batches {
            if uploader.push(b).await?.is_some() {
                return Err(DataFusionError::Internal("a build upload split into chunks".into()));
            }
        }
        match uploader.finish().await? {
            Some(dev) => Ok(dev),
            None => {
                let (gpu, schema) = (Arc::clone(gpu), Arc::clone(&self.layout.build_schema));
                blocking(move || DeviceBatch::upload(&gpu, &gpu.stream(), &RecordBatch::new_empty(schema))).await
            }
        }
    }
}

/// The columns of a GPU child's batch that the probe uses (shared, not copied).
fn probe_columns(layout: &Layout, dev: &DeviceBatch) -> Result<DeviceBatch> {
    dev.select(&layout.probe_cols, &layout.probe_schema)
}

/// Everything one probe stream of an out-of-core join needs.
struct OutOfCoreProbe {
    ooc: Arc<OutOfCore>,
    gpu: Arc<Gpu>,
    layout: Arc<Layout>,
    estimate: Option<Arc<JoinEstimate>>,
    cfg: GpuConfig,
    metrics: Metrics,
    /// Whether each output row must go to the stream its probe row came from (the join's
    /// output partitioning is the probe side's); otherwise any stream still reading takes it.
    route: bool,
}

impl OutOfCoreProbe {
    /// Partitions one probe batch into `side` (device work in a partitioning slot).
    async fn split(&self, side: SpilledSide, batch: ProbeBatch) -> Result<SpilledSide> {
        let (gpu, layout, m) = (Arc::clone(&self.gpu), Arc::clone(&self.layout), self.metrics.clone());
        let _t = m.spill_time.timer();
        let slot = self.gpu.split_slot().await?;
        blocking(move || {
            let _slot = slot;
            let stream = gpu.stream();
            let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
            let mut side = side;
            let dev = match batch {
                ProbeBatch::Device(d) => d,
                ProbeBatch::Host(h) => {
                    let _u = m.upload_time.timer();
                    DeviceBatch::upload_concat(&gpu, &stream, &h)?
                }
            };
            trace.step("upload");
            trace.print("split");
            m.probe_rows.add(dev.num_rows());
            let before = side.bytes;
            side.add(&gpu, &dev, &layout.spec.keys, &layout.spec.probe_keys)?;
            m.spill_bytes.add((side.bytes - before) as usize);
            Ok(side)
        })
        .await
    }

    /// This stream's probe input, partitioned into host memory.
    async fn read_probe(&self, probe: Probe) -> Result<SpilledSide> {
        let sizes = self.ooc.sizes;
        let mut side = SpilledSide::new(Arc::clone(&self.layout.probe_schema), sizes.bits);
        match probe {
            Probe::Device(mut stream) => {
                while let Some(dev) = stream.next().await.transpose()? {
                    if dev.num_rows() > 0 {
                        let batch = probe_columns(&self.layout, &dev)?;
                        side = self.split(side, ProbeBatch::Device(batch)).await?;
                    }
                }
            }
            Probe::Host(mut stream) => {
                let mut pending: Vec<RecordBatch> = Vec::new();
                let (mut bytes, mut rows) = (0u64, 0usize);
                loop {
                    let next = stream.next().await.transpose()?;
                    let done = next.is_none();
                    if let Some(b) = next {
                        let b = b.project(&self.layout.probe_cols)?;
                        bytes += batch_bytes(&b);
                        rows += b.num_rows();
                        pending.push(b);
                    }
                    let chunk_rows = sizes.split_rows(per_row(bytes, rows));
                    if !pending.is_empty() && (rows >= chunk_rows || done) {
                        // Whole chunks by the rows' size, each assembled from its batches as
                        // it is copied up; a short last one waits for more rows unless done.
                        let mut chunks = chunk_groups(&pending, chunk_rows);
                        pending.clear();
                        (bytes, rows) = (0, 0);
                        let short = chunks
                            .last()
                            .is_some_and(|c| c.iter().map(RecordBatch::num_rows).sum::<usize>() < chunk_rows);
                        if short && !done {
                            pending = chunks.pop().unwrap_or_default();
                            bytes = pending.iter().map(batch_bytes).sum();
                            rows = pending.iter().map(RecordBatch::num_rows).sum();
                        }
                        for chunk in chunks {
                            side = self.split(side, ProbeBatch::Host(chunk)).await?;
                        }
                    }
                    if done {
                        break;
                    }
                }
            }
        }
        Ok(side)
    }

    /// Reads the whole probe input into host partitions and hands them over; the last stream
    /// to do so starts the driver ([`OutOfCoreProbe::drive`]), which sends this stream's output
    /// to `tx`. Returns when the join has ended.
    async fn run(self, probe: Probe, tx: &mpsc::Sender<Result<JoinOutput>>, arrival: Arrival<Handover>) -> Result<()> {
        let side = match self.read_probe(probe).await {
            Ok(side) => side,
            Err(e) => {
                // Every stream stops with this error (its kind kept: a device memory error stays one).
                self.ooc.meeting.fail_with(&e);
                return Err(e);
            }
        };
        timeline::mark("out-of-core", || format!("a probe stream handed over {} rows", side.rows));
        let meeting = Arc::clone(&self.ooc.meeting);
        let wait = self.metrics.handover_wait_time.clone();
        let entry = Handover { side, tx: tx.clone(), metrics: self.metrics.clone() };
        if let Some(entries) = arrival.arrive(entry)? {
            let guard = DriverGuard(Arc::clone(&meeting));
            let task = SpawnedTask::spawn(async move {
                let outcome = match self.drive(entries).await {
                    Ok(()) => Outcome::Finished,
                    Err(e) => Outcome::Failed { why: e.to_string(), memory: recoverable_on_cpu(&e) },
                };
                guard.0.end(outcome);
            });
            meeting.set_driver(task);
        }
        let _w = wait.timer();
        meeting.wait().await
    }

    /// Joins every stream's probe rows partition by partition: each build chunk of a partition
    /// is prepared once, and its probe pieces, whatever stream they came from, are joined in
    /// groups of at most `group_bytes` (by stream when `route`); output goes to the streams through
    /// [`Outputs`]. Every build chunk and probe group is copied up from pinned memory while the
    /// one before it is joined ([`Prefetch`]). Stops early when no stream reads any more.
    async fn drive(self, entries: Vec<Handover>) -> Result<()> {
        let sizes = self.ooc.sizes;
        let mut side = SpilledSide::new(Arc::clone(&self.layout.probe_schema), sizes.bits);
        let mut outputs = Outputs { targets: Vec::with_capacity(entries.len()), next: 0, fed: sizes.outputs };
        for (origin, e) in entries.into_iter().enumerate() {
            side.absorb(e.side, origin)?;
            outputs.targets.push(Some((e.tx, e.metrics)));
        }
        let side = Arc::new(side);
        let spec = Arc::clone(&self.layout.spec);
        // Each step's probe groups (those of its partition), and what is copied up, in order.
        let mut plan: Vec<(Step, Arc<Vec<Group>>)> = Vec::new();
        let mut groups = Arc::new(Vec::new());
        for step in &self.ooc.steps {
            if step.first {
                groups = Arc::new(side.groups(step.part, sizes.group_bytes, self.route));
            }
            // A build is needed to probe, or to emit the build rows decided at the end.
            if !groups.is_empty() || spec.emits_build_rows() {
                plan.push((step.clone(), Arc::clone(&groups)));
            }
        }
        let mut loads = Vec::new();
        for (step, groups) in &plan {
            loads.push((Load::Build, step.part, step.pieces.clone()));
            loads.extend(groups.iter().map(|g| (Load::Probe, step.part, g.pieces.clone())));
        }
        timeline::mark("out-of-core", || format!("driving {} steps, {} uploads", plan.len(), loads.len()));
        let mut prefetch =
            Prefetch::new(Arc::clone(&self.gpu), Arc::clone(&self.ooc), Arc::clone(&side), self.metrics.clone(), loads);
        // Probe flags of the current partition's groups, kept across its build chunks.
        let mut flags: Vec<Arc<DeviceBuffer>> = Vec::new();
        for (step, groups) in plan {
            let chunked = !(step.first && step.last);
            if step.first && chunked && spec.needs_probe_flags() {
                let (gpu, side, groups) = (Arc::clone(&self.gpu), Arc::clone(&side), Arc::clone(&groups));
                let part = step.part;
                flags = blocking(move || {
                    let stream = gpu.stream();
                    let out = groups
                        .iter()
                        .map(|g| {
                            let rows = side.group_rows(part, g.pieces.clone()) as usize;
                            gpu.alloc_filled(&stream, rows, 0, "probe flags across build chunks").map(Arc::new)
                        })
                        .collect::<crate::error::Result<Vec<_>>>()?;
                    stream.synchronize().gpu("waiting for the probe flags")?;
                    Ok(out)
                })
                .await?;
            }
            let build = {
                let dev = prefetch.next(Load::Build).await?;
                let (gpu, layout, m) = (Arc::clone(&self.gpu), Arc::clone(&self.layout), self.metrics.clone());
                let (estimate, cfg, part) = (self.estimate.clone(), self.cfg.clone(), step.part);
                let slot = gpu.spill_slot().await?;
                blocking(move || {
                    let _t = m.build_time.timer();
                    let _slot = slot;
                    let window = Some(sizes.window_rows);
                    let spec = build_spec(&layout, estimate.as_deref(), dev.num_rows(), &gpu, &cfg, window);
                    m.ran(spec.algorithm);
                    // The build runs on the stream its rows were copied up on.
                    let stream = Arc::clone(dev.stream());
                    let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
                    let rows = dev.num_rows();
                    let build = JoinBuild::new(Arc::clone(&gpu), &stream, spec, dev)?;
                    m.add_phases(&build.times);
                    trace.step("build");
                    trace.print(&format!("build part {part} of {rows} rows"));
                    Ok(Arc::new(build))
                })
                .await?
            };
            timeline::mark("out-of-core", || format!("partition {} built", step.part));
            for (h, group) in groups.iter().enumerate() {
                let dev = prefetch.next(Load::Probe).await?;
                let (gpu, build, m) = (Arc::clone(&self.gpu), Arc::clone(&build), self.metrics.clone());
                let last = step.last;
                let f = if chunked { flags.get(h).cloned() } else { None };
                let slot = self.gpu.spill_slot().await?;
                let out = blocking(move || {
                    let _slot = slot;
                    let stream = Arc::clone(dev.stream());
                    let mut trace = crate::join::triton::Trace::new(&gpu, &stream);
                    let mut times = PhaseTimes::default();
                    let out = build.probe_part(&stream, &dev, &mut times, f.as_deref(), last)?;
                    m.add_phases(&times);
                    // Done before the slot goes to the next step: memory this step freed is
                    // reused at once (stream-ordered frees on other streams are not).
                    stream.synchronize().gpu("waiting for an out-of-core probe")?;
                    trace.step("probe");
                    for (name, d) in [
                        ("keys", times.keys),
                        ("transform", times.transform),
                        ("match", times.matching),
                        ("materialize", times.materialize),
                    ] {
                        trace.note(name, d);
                    }
                    trace.print(&format!("probe {} rows, {} out", dev.num_rows(), out.len()));
                    Ok(out)
                })
                .await?;
                timeline::mark("out-of-core", || format!("partition {} group {h} probed", step.part));
                if !outputs.send(self.route.then_some(group.origin), out).await {
                    return Ok(());
                }
                timeline::mark("out-of-core", || format!("partition {} group {h} sent", step.part));
            }
            if step.last {
                flags.clear();
            }
            if spec.emits_build_rows() {
                let (gpu, m) = (Arc::clone(&self.gpu), self.metrics.clone());
                let slot = self.gpu.spill_slot().await?;
                let out = blocking(move || {
                    let _slot = slot;
                    let mut times = PhaseTimes::default();
                    let stream = gpu.stream();
                    // `finish` waits for its last phase.
                    let out = build.finish(&stream, &mut times)?;
                    m.add_phases(&times);
                    Ok(out)
                })
                .await?;
                if !outputs.send(None, out).await {
                    return Ok(());
                }
            }
        }
        timeline::mark("out-of-core", || "driven to the end".into());
        Ok(())
    }
}

/// What the out-of-core driver copies up next: a step's build pieces, or a group of probe
/// pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Build,
    Probe,
}

/// The out-of-core driver's uploads, one ahead: once a build chunk or probe group is on the
/// device, the next one is copied up from pinned host memory (a DMA copy on its own stream, on
/// its own blocking thread) while this one is joined, so the link's upload overlaps the
/// kernels. One extra chunk is on the device at a time.
struct Prefetch {
    gpu: Arc<Gpu>,
    ooc: Arc<OutOfCore>,
    probe: Arc<SpilledSide>,
    metrics: Metrics,
    /// Every upload in order: which side, its partition and its pieces.
    loads: Vec<(Load, usize, std::ops::Range<usize>)>,
    at: usize,
    pending: Option<futures::future::BoxFuture<'static, Result<DeviceBatch>>>,
}

impl Prefetch {
    fn new(
        gpu: Arc<Gpu>,
        ooc: Arc<OutOfCore>,
        probe: Arc<SpilledSide>,
        metrics: Metrics,
        loads: Vec<(Load, usize, std::ops::Range<usize>)>,
    ) -> Self {
        Prefetch { gpu, ooc, probe, metrics, loads, at: 0, pending: None }
    }

    /// Starts copying up upload `i`, if there is one.
    fn start(&self, i: usize) -> Option<futures::future::BoxFuture<'static, Result<DeviceBatch>>> {
        let (load, part, pieces) = self.loads.get(i).cloned()?;
        let (gpu, ooc, probe, m) =
            (Arc::clone(&self.gpu), Arc::clone(&self.ooc), Arc::clone(&self.probe), self.metrics.clone());
        Some(
            blocking(move || {
                let _u = m.upload_time.timer();
                let stream = gpu.stream();
                let side = match load {
                    Load::Build => &ooc.build,
                    Load::Probe => probe.as_ref(),
                };
                side.restore(&gpu, &stream, part, pieces)
            })
            .boxed(),
        )
    }

    /// The next upload, which must be of `load`'s side; the one after it starts.
    async fn next(&mut self, load: Load) -> Result<DeviceBatch> {
        match self.loads.get(self.at) {
            Some((l, _, _)) if *l == load => {}
            other => {
                return Err(DataFusionError::Internal(format!(
                    "the out-of-core driver expected a {load:?} upload, its plan has {other:?}"
                )));
            }
        }
        let handle = match self.pending.take() {
            Some(h) => h,
            None => self.start(self.at).ok_or_else(|| DataFusionError::Internal("no upload to start".into()))?,
        };
        let dev = handle.await?;
        timeline::mark("out-of-core", || {
            format!("upload {} of {} ready ({} rows)", self.at, self.loads.len(), dev.num_rows())
        });
        self.at += 1;
        self.pending = self.start(self.at);
        Ok(dev)
    }
}

/// The output streams of an out-of-core join, as its driver sees them: each probe stream's
/// sender and metrics, `None` once its consumer has gone.
struct Outputs {
    targets: Vec<Option<(mpsc::Sender<Result<JoinOutput>>, Metrics)>>,
    /// Where the next unrouted batch is offered first, among the fed streams.
    next: usize,
    /// Streams that unrouted batches go to: the first this many still reading
    /// ([`SpillSizes::outputs`], which sized the windows for that many).
    fed: usize,
}

impl Outputs {
    /// Sends `batches` to stream `to` (dropped if its consumer has gone), or, for `None`, each to
    /// the first fed stream with room from the one after the last used (waiting for one when all
    /// are full). False when no stream reads any more.
    async fn send(&mut self, to: Option<usize>, batches: Vec<DeviceBatch>) -> bool {
        for batch in batches {
            let mut batch = Some(batch);
            let order: Vec<usize> = match to {
                Some(i) => vec![i],
                None => {
                    let fed: Vec<usize> =
                        (0..self.targets.len()).filter(|i| self.targets[*i].is_some()).take(self.fed.max(1)).collect();
                    (0..fed.len()).map(|k| fed[(self.next + k) % fed.len()]).collect()
                }
            };
            // First a pass without waiting (unrouted only), then wait on each in turn.
            for wait in [false, true] {
                if to.is_some() && !wait {
                    continue;
                }
                for (k, &i) in order.iter().enumerate() {
                    let Some(Some((tx, m))) = self.targets.get_mut(i) else { continue };
                    let Some(b) = batch.take() else { break };
                    let rows = b.num_rows();
                    let ready = match wait {
                        true => futures::future::poll_fn(|cx| tx.poll_ready(cx)).await,
                        false => match tx.poll_ready(&mut Context::from_waker(futures::task::noop_waker_ref())) {
                            Poll::Ready(r) => r,
                            Poll::Pending => {
                                batch = Some(b);
                                continue;
                            }
                        },
                    };
                    match ready.and_then(|()| tx.start_send(Ok(JoinOutput::Device(b)))) {
                        Ok(()) => {
                            m.sent(rows);
                            self.next = self.next.wrapping_add(k + 1);
                        }
                        Err(_) => self.targets[i] = None,
                    }
                }
                if batch.is_none() {
                    break;
                }
            }
            if self.targets.iter().all(Option::is_none) {
                return false;
            }
        }
        true
    }
}

/// One batch of probe input for the out-of-core split.
enum ProbeBatch {
    Device(DeviceBatch),
    /// Host batches joined into one chunk as they are uploaded.
    Host(Vec<RecordBatch>),
}

/// The probe input: device batches from a GPU child, or host batches from any other.
enum Probe {
    Device(DeviceBatchStream),
    Host(SendableRecordBatchStream),
}

/// Probes one device chunk of probe rows on `stream`, recording its rows and phase times, and
/// sends each output window to `tx` as it is made, waiting while the channel is full: the
/// join's output in device memory is then the windows in flight, not the chunk's whole fan-out.
/// Also returns how many windows it sent: a chunk that failed before its first can be joined
/// again elsewhere. Runs on a blocking thread.
fn probe_chunk(
    build: &JoinBuild,
    metrics: &Metrics,
    stream: &Arc<CudaStream>,
    chunk: &DeviceBatch,
    tx: &mut mpsc::Sender<Result<JoinOutput>>,
) -> (Result<()>, usize) {
    metrics.probe_rows.add(chunk.num_rows());
    let mut times = PhaseTimes::default();
    let mut sent = 0;
    let out = build.probe_into(stream, chunk, &mut times, &mut |b| {
        metrics.sent(b.num_rows());
        sent += 1;
        futures::executor::block_on(tx.send(Ok(JoinOutput::Device(b))))
            .map_err(|_| DataFusionError::Execution("GPU join output dropped".into()))
    });
    metrics.add_phases(&times);
    (out, sent)
}

/// Passes output batches to the stream, counting them.
async fn send(tx: &mut mpsc::Sender<Result<JoinOutput>>, metrics: &Metrics, outputs: Vec<JoinOutput>) -> Result<()> {
    for o in outputs {
        metrics.sent(o.num_rows());
        tx.send(Ok(o)).await.map_err(|_| DataFusionError::Execution("GPU join output dropped".into()))?;
    }
    Ok(())
}

/// Passes the output of DataFusion's join to the stream, counting it.
async fn forward(
    tx: &mut mpsc::Sender<Result<JoinOutput>>,
    metrics: &Metrics,
    mut out: SendableRecordBatchStream,
) -> Result<()> {
    while let Some(b) = out.next().await.transpose()? {
        send(tx, metrics, vec![JoinOutput::Host(b)]).await?;
    }
    Ok(())
}

/// `input` read by a task of its own from now on, up to `ahead` (at least 1) items ahead of its
/// reader, and to its end or first error: a join's probe input then runs while the join builds,
/// not after (`gpu.probe_read_ahead`).
fn read_ahead<T: Send + 'static>(
    mut input: Pin<Box<dyn Stream<Item = Result<T>> + Send>>,
    ahead: usize,
) -> Pin<Box<dyn Stream<Item = Result<T>> + Send>> {
    // A futures channel holds its buffer plus one item for each sender.
    let (mut tx, rx) = mpsc::channel::<Result<T>>(ahead.saturating_sub(1));
    let task = SpawnedTask::spawn(async move {
        while let Some(item) = input.next().await {
            let failed = item.is_err();
            // A closed channel: the join stopped reading (an error, a limit above it).
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    Box::pin(TaskStream::new(rx, task, "a GPU join's probe read-ahead"))
}

/// Probe rows a partition had not joined when its device work failed: host batches, or the
/// device chunk that failed.
enum Unjoined {
    Host(Vec<RecordBatch>),
    Device(DeviceBatch),
}

/// The probe side of one partition, after its build.
struct PartitionRun {
    gpu: Arc<Gpu>,
    /// The `HashJoinExec` the GPU join replaces.
    join: Arc<dyn ExecutionPlan>,
    layout: Arc<Layout>,
    cfg: GpuConfig,
    context: Arc<TaskContext>,
    metrics: Metrics,
    mode: PartitionMode,
    shared: Arc<Shared>,
    partition: usize,
    /// Rows per probe chunk of host input.
    chunk_rows: usize,
    who: String,
}

impl PartitionRun {
    /// The probe rows of `probe` after `head`, on the host in the probe columns' layout (device
    /// batches downloaded), for DataFusion's join.
    fn host_probe(&self, head: Vec<RecordBatch>, probe: Probe) -> SendableRecordBatchStream {
        let schema = Arc::clone(&self.layout.probe_schema);
        let rest: Pin<Box<dyn Stream<Item = Result<RecordBatch>> + Send>> = match probe {
            Probe::Host(stream) => {
                let cols = self.layout.probe_cols.clone();
                Box::pin(stream.map(move |b| Ok(b?.project(&cols)?)))
            }
            Probe::Device(stream) => {
                let layout = Arc::clone(&self.layout);
                Box::pin(stream.then(move |d| {
                    let layout = Arc::clone(&layout);
                    async move {
                        let d = probe_columns(&layout, &d?)?;
                        blocking(move || d.download()).await
                    }
                }))
            }
        };
        let rows = futures::stream::iter(head.into_iter().map(Ok)).chain(rest);
        Box::pin(RecordBatchStreamAdapter::new(schema, rows))
    }

    /// This partition on DataFusion's join `cpu` (probe partition `at` of it), after its build
    /// went there.
    async fn on_cpu(
        self,
        cpu: &CpuJoin,
        at: usize,
        probe: Probe,
        tx: &mut mpsc::Sender<Result<JoinOutput>>,
    ) -> Result<()> {
        timeline::mark(&self.who, || "probed by DataFusion's join".into());
        let out = cpu.execute(at, self.host_probe(Vec::new(), probe), Arc::clone(&self.context))?;
        forward(tx, &self.metrics, out).await
    }

    /// Probes the device build `build` with `probe`'s rows, chunk by chunk. When a chunk fails
    /// for want of device memory before any of its output was sent, and the rows already joined
    /// do not decide build rows (or there are none), the partition's remaining rows go to
    /// DataFusion's join over the kept build rows (`kept`).
    async fn probe(
        self,
        build: Arc<JoinBuild>,
        kept: Option<Arc<KeptBuild>>,
        probe: Probe,
        tx: &mut mpsc::Sender<Result<JoinOutput>>,
    ) -> Result<()> {
        let who = &self.who;
        if build.probe_is_moot() {
            // Nothing to output: the probe input is dropped unread, as DataFusion's join
            // drops it (its operators' errors must not surface here when they do not there).
            timeline::mark(who, || "empty build: the probe side is not read".into());
            if self.mode == PartitionMode::CollectLeft {
                self.shared.probe_done();
            }
            return Ok(());
        }
        let kept = kept.filter(|_| self.cfg.cpu_fallback);
        let mut joined_any = false;
        let stopped = match probe {
            Probe::Device(mut stream) => {
                let mut stop = None;
                while let Some(dev) = stream.next().await.transpose()? {
                    if dev.num_rows() == 0 {
                        continue;
                    }
                    timeline::mark(who, || format!("probe device batch of {} rows arrived", dev.num_rows()));
                    let chunk = probe_columns(&self.layout, &dev)?;
                    let (build, m, mut out, c) = (Arc::clone(&build), self.metrics.clone(), tx.clone(), chunk.clone());
                    // On the stream that produced the batch, so the probe follows it.
                    let (joined, sent) =
                        blocking(move || Ok(probe_chunk(&build, &m, c.stream(), &c, &mut out))).await?;
                    match joined {
                        Ok(()) => joined_any = true,
                        Err(e) => {
                            stop = Some((e, sent, Unjoined::Device(chunk)));
                            break;
                        }
                    }
                }
                stop.map(|(e, sent, unjoined)| (e, sent, unjoined, Probe::Device(stream)))
            }
            Probe::Host(mut stream) => {
                // Probe rows go to the device as they arrive; each full chunk is probed.
                let mut uploader = ChunkUploader::new(
                    Arc::clone(&self.gpu),
                    self.chunk_rows,
                    self.metrics.upload_time.clone(),
                    self.metrics.pack_time.clone(),
                );
                // The batches of the chunk being gathered, while the CPU may need them.
                let mut unjoined: Vec<RecordBatch> = Vec::new();
                let (mut first, mut stop) = (true, None);
                loop {
                    let next = stream.next().await.transpose()?;
                    let done = next.is_none();
                    let chunk = match next {
                        Some(b) => {
                            if std::mem::take(&mut first) {
                                timeline::mark(who, || format!("first probe batch of {} rows arrived", b.num_rows()));
                            }
                            let b = b.project(&self.layout.probe_cols)?;
                            if kept.is_some() {
                                unjoined.push(b.clone());
                            }
                            uploader.push(b).await
                        }
                        None => uploader.finish().await,
                    };
                    let chunk = match chunk {
                        Ok(Some(chunk)) => chunk,
                        Ok(None) if done => break,
                        Ok(None) => continue,
                        Err(e) => {
                            stop = Some((e, 0));
                            break;
                        }
                    };
                    timeline::mark(who, || format!("probe chunk of {} rows on the device", chunk.num_rows()));
                    let (build, m, w, mut out) = (Arc::clone(&build), self.metrics.clone(), who.clone(), tx.clone());
                    let (joined, sent) = blocking(move || {
                        let joined = probe_chunk(&build, &m, chunk.stream(), &chunk, &mut out);
                        timeline::mark(&w, || "probe chunk joined".into());
                        Ok(joined)
                    })
                    .await?;
                    match joined {
                        Ok(()) => {
                            joined_any = true;
                            unjoined.clear();
                        }
                        Err(e) => {
                            stop = Some((e, sent));
                            break;
                        }
                    }
                    if done {
                        break;
                    }
                }
                stop.map(|(e, sent)| (e, sent, Unjoined::Host(unjoined), Probe::Host(stream)))
            }
        };
        let emits = build.spec().emits_build_rows();
        if let Some((failed, sent, unjoined, rest)) = stopped {
            // DataFusion's join can take the rest of the partition when nothing of the failed
            // chunk was sent and the build rows decided at the end depend on no rows joined here
            // (or on none of any other partition's, in Partitioned mode before the first chunk).
            let takes_over = !emits || (self.mode == PartitionMode::Partitioned && !joined_any);
            let kept = match &kept {
                Some(k) if sent == 0 && takes_over && recoverable_on_cpu(&failed) => Arc::clone(k),
                _ => return Err(failed),
            };
            drop(build);
            timeline::mark(who, || format!("the rest of the probe goes to the CPU after: {failed}"));
            log::debug!("GPU join partition {} finishes on DataFusion's join: {failed}", self.partition);
            self.metrics.cpu_fallbacks.add(1);
            let head = match unjoined {
                Unjoined::Host(batches) => batches,
                Unjoined::Device(chunk) => vec![blocking(move || chunk.download()).await?],
            };
            let cpu = CpuJoin::new(hash_join(&self.join)?, &self.layout.sides(), kept.batches.clone(), 1)?;
            let out = cpu.execute(0, self.host_probe(head, rest), Arc::clone(&self.context))?;
            forward(tx, &self.metrics, out).await?;
            if self.mode == PartitionMode::CollectLeft {
                // No build rows to emit (see `takes_over`): only the count of partitions.
                self.shared.probe_done();
            }
            return Ok(());
        }
        timeline::mark(who, || "probe input ended".into());
        let last = match self.mode {
            PartitionMode::CollectLeft => self.shared.probe_done(),
            _ => true,
        };
        if last && emits {
            let (gpu, m) = (Arc::clone(&self.gpu), self.metrics.clone());
            let outputs = blocking(move || {
                let mut times = PhaseTimes::default();
                let out = build.finish(&gpu.stream(), &mut times)?;
                m.add_phases(&times);
                Ok(out)
            })
            .await?;
            send(tx, &self.metrics, outputs.into_iter().map(JoinOutput::Device).collect()).await?;
        }
        Ok(())
    }
}

impl GpuHashJoinExec {
    /// The output of partition `partition`: device batches, and host ones where DataFusion's
    /// join finished the work.
    fn execute_output(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<Pin<Box<dyn Stream<Item = Result<JoinOutput>> + Send>>> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = Gpu::for_session(&cfg, &context.session_id())?;
        let hj = self.hash_join()?;
        let mode = self.mode()?;
        let (left, right) = (Arc::clone(hj.left()), Arc::clone(hj.right()));
        let probe_partitions = right.output_partitioning().partition_count();
        let build_partitions = match mode {
            PartitionMode::CollectLeft => 0..left.output_partitioning().partition_count(),
            PartitionMode::Partitioned => partition..partition + 1,
            PartitionMode::Auto => {
                return Err(DataFusionError::Internal(
                    "a GPU hash join in mode Auto: the mode must be resolved".into(),
                ));
            }
        };
        let metrics = Metrics::new(&self.metrics, partition);
        let who = match timeline::enabled() {
            true => {
                let on: Vec<String> = hj.on().iter().map(|(l, r)| format!("{l}={r}")).collect();
                format!("join [{}] p{partition}", on.join(", "))
            }
            false => String::new(),
        };
        timeline::mark(&who, || format!("start ({:?})", mode));
        let layout = Arc::clone(&self.layout);
        let estimate = self.estimate.clone();
        let shared = Arc::clone(&self.shared);
        let planned_out_of_core = self.out_of_core.is_some();
        // An out-of-core join sends each output row to the stream its probe row came from only
        // when the output is partitioned like the probe side; otherwise any stream takes it.
        let route = !matches!(
            self.properties().output_partitioning(),
            Partitioning::UnknownPartitioning(_) | Partitioning::RoundRobinBatch(_)
        );
        // Probe chunks of every partition take at most a quarter of the memory limit between them.
        let memory_rows = rows_within_limit(&gpu, probe_partitions as u64, row_width(&self.layout.probe_schema));
        let chunk_rows = cfg.batch_rows.max(1).min(memory_rows as usize);
        // A GPU child hands over its device batches directly (no download and upload between
        // two GPU operators); any other child is read as host batches and uploaded in chunks.
        let probe = match as_gpu_exec(&right) {
            Some(gpu_child) => Probe::Device(gpu_child.execute_device(partition, Arc::clone(&context))?),
            None => Probe::Host(right.execute(partition, Arc::clone(&context))?),
        };
        let probe = match probe {
            Probe::Device(stream) if cfg.probe_read_ahead > 0 && !planned_out_of_core => {
                Probe::Device(read_ahead(stream, cfg.probe_read_ahead))
            }
            other => other,
        };
        let job = BuildJob {
            gpu: Arc::clone(&gpu),
            join: Arc::clone(&self.join),
            layout: Arc::clone(&layout),
            estimate: estimate.clone(),
            cfg: cfg.clone(),
            context: Arc::clone(&context),
            metrics: metrics.clone(),
            // Output streams that may hold windows at once: every probe partition (in
            // Partitioned mode each runs a join of its own, at the same time).
            consumers: probe_partitions,
            consumers_share_build: mode == PartitionMode::CollectLeft,
            route,
            planned_out_of_core,
            who: who.clone(),
        };
        let run = PartitionRun {
            gpu: Arc::clone(&gpu),
            join: Arc::clone(&self.join),
            layout: Arc::clone(&layout),
            cfg: cfg.clone(),
            context,
            metrics: metrics.clone(),
            mode,
            shared: Arc::clone(&shared),
            partition,
            chunk_rows,
            who: who.clone(),
        };
        let (mut tx, rx) = mpsc::channel::<Result<JoinOutput>>(2);
        let task = SpawnedTask::spawn(async move {
            let result = async {
                let built = if mode == PartitionMode::CollectLeft {
                    let init = || {
                        shared.remaining.store(probe_partitions, Ordering::SeqCst);
                        job.run(left, build_partitions)
                    };
                    shared.build.get_or_start(init).await?
                } else {
                    job.run(left, build_partitions).await?
                };
                timeline::mark(&who, || "build ready".into());
                match built {
                    Built::Memory(build, kept) => run.probe(build, kept, probe, &mut tx).await,
                    Built::OnCpu(cpu) => {
                        let at = if mode == PartitionMode::CollectLeft { partition } else { 0 };
                        run.on_cpu(&cpu, at, probe, &mut tx).await
                    }
                    Built::Spilled(ooc) => {
                        let arrival = Arrival::new(&ooc.meeting);
                        let job = OutOfCoreProbe { ooc, gpu, layout, estimate, cfg, metrics, route };
                        job.run(probe, &tx, arrival).await
                    }
                }
            }
            .await;
            if let Err(e) = result {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(Box::pin(TaskStream::new(rx, task, "a GPU hash join")))
    }
}

impl GpuExec for GpuHashJoinExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = Gpu::for_session(&cfg, &context.session_id())?;
        let out = self.execute_output(partition, context)?;
        // Rows DataFusion's join made on the host go up to the GPU parent, batch by batch.
        Ok(Box::pin(out.then(move |o| {
            let gpu = Arc::clone(&gpu);
            async move {
                match o? {
                    JoinOutput::Device(b) => Ok(b),
                    JoinOutput::Host(b) => blocking(move || DeviceBatch::upload(&gpu, &gpu.stream(), &b)).await,
                }
            }
        })))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::JoinType;
    use datafusion::datasource::memory::MemorySourceConfig;

    use super::*;
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
            let mut s = read_ahead(counted((0..10).map(Ok).collect(), &pulled), ahead);
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
        let mut s = read_ahead(counted(failing, &pulled), 4);
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

    /// EXPLAIN says when a join is on the GPU for its parent, and keeps saying it through a
    /// rebuild of the plan.
    #[test]
    fn explain_names_a_join_placed_for_its_gpu_parent() {
        let cfg = GpuConfig::default();
        let show =
            |p: &Arc<dyn ExecutionPlan>| datafusion::physical_plan::displayable(p.as_ref()).one_line().to_string();
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
}
