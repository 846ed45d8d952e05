//! `GpuHashJoinExec`: DataFusion's `HashJoinExec` run by the GPU join of [`crate::join`].
//!
//! It keeps the original join for its children, properties and display, so the plan around it
//! is unchanged. Its statistics are unknown, as those of a join the rule leaves on the CPU
//! reach the operators above (see `exec::fallback`): the cost model prices the joins above it
//! from the plan's bound wherever it runs. Execution: the build side (all left partitions for
//! `CollectLeft`, shared by every probe partition; the matching left partition for
//! `Partitioned`) is collected, reduced to the columns the join needs, uploaded and prepared
//! once; probe batches are coalesced on the host into chunks of about `gpu.batch_rows` rows,
//! uploaded and joined, and the matches come out in batches of up to `gpu.join.window_rows`
//! rows; the build rows decided at the end (outer, semi, anti, mark joins on the
//! left) come from the last probe partition to finish, as in DataFusion.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::distribution_requirements::InputDistributionRequirements;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PhysicalExpr, PlanProperties,
};
use futures::StreamExt;

use super::cpu_join::CpuJoin;
use super::once::OnceShared;
use super::upload::batch_bytes;
use super::{DeviceBatchStream, GpuExec, as_gpu_exec, blocking, download_for_cpu};
use crate::columns::DeviceBatch;
use crate::config::GpuConfig;
use crate::cost::join::JoinEstimate;
use crate::join::{JoinAlgorithm, JoinBuild, JoinSpec, PhaseTimes};

mod build;
mod layout;
mod out_of_core;
mod stream;
#[cfg(test)]
mod tests;

use layout::Layout;
use out_of_core::OutOfCore;

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

/// The build side shared by the probe partitions of a `CollectLeft` join.
#[derive(Debug, Default)]
struct Shared {
    build: OnceShared<Built>,
    /// Probe partitions still running; the last one emits the build rows decided at the end.
    remaining: AtomicUsize,
    /// Probe partitions started (`execute` called) so far: an out-of-core join's streams do not
    /// wait for one not started (see [`crate::join::triton::Meeting`]).
    started: Arc<AtomicUsize>,
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
    /// Why the rule swapped this join's inputs (see `rule::join_sides`).
    swapped: Option<String>,
    /// On the GPU for its GPU parent, though the CPU would win alone (see
    /// `rule::Placer::place_with_children`).
    for_gpu_parent: bool,
    shared: Arc<Shared>,
    metrics: ExecutionPlanMetricsSet,
}

/// What the rule decided for a GPU join beyond its `HashJoinExec` ([`GpuHashJoinExec::decisions`]),
/// serializable for a plan sent to another process.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JoinDecisions {
    /// The cost model's estimate without its profile (the receiving process prices with its own).
    pub estimate: Option<EstimateParts>,
    pub out_of_core: Option<String>,
    pub removed: Option<String>,
    pub swapped: Option<String>,
    pub for_gpu_parent: bool,
}

/// A join's [`JoinEstimate`] without the profile it was priced with.
pub type EstimateParts = crate::cost::EstimateParts<crate::cost::join::JoinShape, JoinAlgorithm>;

/// What EXPLAIN adds to the algorithm's reason when the sizes were bounded, not estimated.
const BOUNDED_NOTE: &str = "; input sizes bounded from the plan's shape";

fn hash_join(plan: &Arc<dyn ExecutionPlan>) -> Result<&HashJoinExec> {
    plan.downcast_ref::<HashJoinExec>()
        .ok_or_else(|| DataFusionError::Internal("GpuHashJoinExec wraps a plan that is not a HashJoinExec".into()))
}

impl GpuHashJoinExec {
    /// The GPU form of `join` (a `HashJoinExec`), or why it cannot have one. Eligibility
    /// (types, filter, mode) is checked by the rule first; this settles the layout and the
    /// algorithm.
    pub fn try_new(join: Arc<dyn ExecutionPlan>, cfg: &GpuConfig) -> crate::error::Result<Self> {
        let layout = {
            let hj = hash_join(&join)?;
            Arc::new(Layout::new(hj, cfg)?)
        };
        Ok(GpuHashJoinExec {
            join,
            layout,
            estimate: None,
            out_of_core: None,
            removed: None,
            for_gpu_parent: false,
            swapped: None,
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
        self.collect_left(None, true)
    }

    /// This `Partitioned` join in `CollectLeft` mode because the GPU join `below`, one of its
    /// children, now reads its own inputs around their repartitions ([`Self::without_repartitions`])
    /// and so no longer partitions its output by the keys: this join's two inputs are no longer
    /// partitioned alike, but one build from every partition of its left input does not need
    /// them to be. `below` is (the child as it was, the rebuilt one); a hash repartition on the
    /// other side is removed as well. `None` when this join is not `Partitioned` (or out of core)
    /// or `below` is not its child.
    pub fn with_rebuilt_child(
        &self,
        below: (&Arc<dyn ExecutionPlan>, &Arc<dyn ExecutionPlan>),
    ) -> Result<Option<GpuHashJoinExec>> {
        if !self.children().iter().any(|c| Arc::ptr_eq(c, below.0)) {
            return Ok(None);
        }
        self.collect_left(Some(below), false)
    }

    /// This join in `CollectLeft` mode over its inputs with their removable hash repartitions
    /// taken away and `replace` (old child, new child) swapped in; `None` when it is not a
    /// `Partitioned` join in memory, or, with `must_remove`, has no repartition to remove.
    fn collect_left(
        &self,
        replace: Option<(&Arc<dyn ExecutionPlan>, &Arc<dyn ExecutionPlan>)>,
        must_remove: bool,
    ) -> Result<Option<GpuHashJoinExec>> {
        let hj = self.hash_join()?;
        if *hj.partition_mode() != PartitionMode::Partitioned || self.out_of_core.is_some() {
            return Ok(None);
        }
        let input = |side: &Arc<dyn ExecutionPlan>| {
            removable_repartition(side).map(|r| (Arc::clone(r.input()), r.partitioning().to_string()))
        };
        let (left, right) = (input(hj.left()), input(hj.right()));
        if must_remove && left.is_none() && right.is_none() {
            return Ok(None);
        }
        let mut removed = Vec::new();
        let mut side = |s: Option<(Arc<dyn ExecutionPlan>, String)>, old: &Arc<dyn ExecutionPlan>, name: &str| match s {
            Some((input, partitioning)) => {
                removed.push(format!("{name} {partitioning}"));
                input
            }
            None => match replace {
                Some((was, now)) if Arc::ptr_eq(old, was) => {
                    removed.push(format!("{name}: none, its GPU join reads its own inputs around theirs"));
                    Arc::clone(now)
                }
                _ => Arc::clone(old),
            },
        };
        let (left, right) = (side(left, hj.left(), "build"), side(right, hj.right(), "probe"));
        // The output has as many partitions as the probe input: keep the plan's parallelism.
        if right.output_partitioning().partition_count() < hj.right().output_partitioning().partition_count() {
            return Ok(None);
        }
        let join = hj.builder().with_partition_mode(PartitionMode::CollectLeft).with_new_children(vec![left, right])?;
        let join = join.reset_state().build_exec()?;
        Ok(Some(GpuHashJoinExec { out_of_core: None, removed: Some(removed.join(", ")), ..self.over(join) }))
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

    /// A copy of this exec with EXPLAIN's note on why its inputs were swapped.
    pub fn with_swap_note(&self, why: String) -> GpuHashJoinExec {
        GpuHashJoinExec { swapped: Some(why), ..self.over(Arc::clone(&self.join)) }
    }

    /// This exec's layout, estimate and notes over `join` (this one's `HashJoinExec`, or it with
    /// other children), with fresh run-time state and metrics.
    fn over(&self, join: Arc<dyn ExecutionPlan>) -> GpuHashJoinExec {
        GpuHashJoinExec {
            join,
            layout: Arc::clone(&self.layout),
            estimate: self.estimate.clone(),
            out_of_core: self.out_of_core.clone(),
            removed: self.removed.clone(),
            swapped: self.swapped.clone(),
            for_gpu_parent: self.for_gpu_parent,
            shared: Arc::new(Shared::default()),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// What the rule decided for this join beyond its `HashJoinExec`, for a plan sent to
    /// another process ([`GpuHashJoinExec::with_decisions`] takes them back).
    pub fn decisions(&self) -> JoinDecisions {
        JoinDecisions {
            estimate: self.estimate.as_deref().map(JoinEstimate::parts),
            out_of_core: self.out_of_core.clone(),
            removed: self.removed.clone(),
            swapped: self.swapped.clone(),
            for_gpu_parent: self.for_gpu_parent,
        }
    }

    /// This exec with the decisions another process's rule made for it ([`Self::decisions`]),
    /// its estimate priced under `profile` (this process's device): the layout comes from this
    /// process's `HashJoinExec` and settings, the algorithm from the estimate as the rule would
    /// have chosen it here.
    pub fn with_decisions(self, d: JoinDecisions, profile: Arc<crate::cost::Profile>) -> Self {
        let mut this = match d.estimate {
            Some(e) => self.with_estimate(e.priced(profile)),
            None => self,
        };
        this.out_of_core = d.out_of_core;
        this.removed = d.removed;
        this.swapped = d.swapped;
        this.for_gpu_parent = d.for_gpu_parent;
        this
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

    /// The algorithm this join runs.
    pub fn algorithm(&self) -> JoinAlgorithm {
        self.layout.spec.algorithm
    }

    fn hash_join(&self) -> Result<&HashJoinExec> {
        hash_join(&self.join)
    }

    /// DataFusion's partition mode of the join this replaces (after the rule's changes).
    pub fn mode(&self) -> Result<PartitionMode> {
        Ok(*self.hash_join()?.partition_mode())
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
                if let Some(why) = &self.swapped {
                    write!(f, ", inputs swapped ({why})")?;
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
        Ok(Arc::new(self.over(join)))
    }

    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.over(Arc::clone(&self.join))))
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
    /// column statistics) moved joins above GPU joins to the CPU: TPC-H q5 and q21 on an H100
    /// (docs/option-notes.md).
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
    /// A multi-GPU join's splitting of its sides and copies between the devices.
    exchange_time: Time,
    /// Builds run by each algorithm (EXPLAIN ANALYZE shows the one actually run).
    ran: Vec<(JoinAlgorithm, datafusion::physical_plan::metrics::Count)>,
    /// Builds, or probe partitions, finished by DataFusion's join when device memory ran out.
    cpu_fallbacks: datafusion::physical_plan::metrics::Count,
    /// Joins that built on their probe side, the smaller at run time (`gpu.join.swap_at_run_time`).
    swapped_at_run_time: datafusion::physical_plan::metrics::Count,
    /// The overlap of the join with its inputs (a network shuffle's, a CPU child's): the time
    /// its readers waited for input batches (the join waits on its inputs), and the time a
    /// batch received waited for the join to take it (the probe's read-ahead queue full, the
    /// build's reader uploading: the inputs wait on the join).
    input_wait_time: Time,
    input_stall_time: Time,
    /// Since the partition started: when its build input was in (the partition that read a
    /// shared build), when its probe input ended, and when its output ended. Their largest over
    /// the partitions are the join's: with the largest input end, what the inputs alone need.
    build_input_at: Time,
    probe_input_at: Time,
    done_at: Time,
    started: std::time::Instant,
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
            exchange_time: b().subset_time("exchange_time", partition),
            ran: JoinAlgorithm::EVERY.iter().map(|&a| (a, b().counter(format!("builds_{a}"), partition))).collect(),
            cpu_fallbacks: b().counter("cpu_fallbacks", partition),
            swapped_at_run_time: b().counter("swapped_at_run_time", partition),
            input_wait_time: b().subset_time("input_wait_time", partition),
            input_stall_time: b().subset_time("input_stall_time", partition),
            build_input_at: b().subset_time("build_input_at", partition),
            probe_input_at: b().subset_time("probe_input_at", partition),
            done_at: b().subset_time("done_at", partition),
            started: std::time::Instant::now(),
        }
    }

    /// Records in `at` the time since the partition started.
    fn mark(&self, at: &Time) {
        at.add_duration(self.started.elapsed());
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
        self.exchange_time.add_duration(t.exchange);
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

/// The columns of a GPU child's batch that the probe uses (shared, not copied).
fn probe_columns(layout: &Layout, dev: &DeviceBatch) -> Result<DeviceBatch> {
    dev.select(&layout.probe_cols, &layout.probe_schema)
}

/// The probe input: device batches from a GPU child, or host batches from any other.
enum Probe {
    Device(DeviceBatchStream),
    Host(SendableRecordBatchStream),
}

impl GpuExec for GpuHashJoinExec {
    fn execute_device(&self, partition: usize, context: Arc<TaskContext>) -> Result<DeviceBatchStream> {
        let cfg = GpuConfig::from_options(context.session_config().options());
        let gpu = stream::join_gpu(&cfg, &context, self.mode()?, partition)?;
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
