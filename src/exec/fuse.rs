//! Filters and projections taken into a GPU exec: the `ProjectionExec`s and `FilterExec`s
//! directly below it (projections above filters, as DataFusion plans them) become one
//! [`DeviceProjection`] over the rows of the node below them, so the exec uploads raw columns and
//! the device computes what DataFusion would have computed on the host.
//!
//! A fused filter still runs on the host first where that pays: [`HostPrefilter`] measures the
//! fraction of rows the bottom filter keeps at run time and, when it is small, drops the other
//! rows before the upload (the device applies the filter again; it keeps every row left).

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::Field;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Statistics;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::Count;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, ExecutionPlan, ExecutionPlanProperties, PhysicalExpr, displayable,
};
use futures::{Stream, StreamExt};

use super::timeline;
use crate::config::GpuConfig;
use crate::device::Gpu;
use crate::expr::project::DeviceProjection;

/// The filters and projections between a GPU exec and `input`, compiled for the device.
#[derive(Debug)]
pub struct FusedInput {
    /// The node whose rows are uploaded.
    pub input: Arc<dyn ExecutionPlan>,
    /// The nodes taken in, nearest the exec first.
    pub chain: Vec<Arc<dyn ExecutionPlan>>,
    pub projection: DeviceProjection,
    /// The predicate of the filter directly on `input` (over `input`'s schema), which the host
    /// may apply before the upload (see [`HostPrefilter`]); `None` when the chain's bottom node
    /// is not a filter or its predicate is volatile.
    pub host_filter: Option<Arc<dyn PhysicalExpr>>,
    /// With `host_filter`: the kernels without that filter, for partitions whose host filters
    /// every row first (the device then neither uploads the filter's own columns nor filters
    /// again); `None` when they are the same kernels or do not compile.
    pub after_host_filter: Option<DeviceProjection>,
    /// Nanoseconds one input row costs to upload, priced by the rule at plan time
    /// ([`FusedInput::priced`]) for the host pre-filter's choice; `None` without a price (the
    /// choice then follows `gpu.fuse.host_filter_below`).
    pub upload_ns_per_row: Option<f64>,
}

/// `e` with each column replaced by `columns(index)`.
fn substitute(
    e: &Arc<dyn PhysicalExpr>,
    columns: &dyn Fn(usize) -> Option<Arc<dyn PhysicalExpr>>,
) -> crate::error::Result<Arc<dyn PhysicalExpr>> {
    Arc::clone(e)
        .transform_up(|node| match node.downcast_ref::<Column>() {
            Some(c) => match columns(c.index()) {
                Some(x) => Ok(Transformed::yes(x)),
                None => Err(datafusion::error::DataFusionError::Internal(format!("column {c} is out of range"))),
            },
            None => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
}

impl FusedInput {
    /// The projections and filters below an exec whose input is `top`, computing `outputs`
    /// (expressions over `top`'s schema, with the fields they must give). Filters are taken in
    /// only with `filters` (a selective filter is cheaper on the CPU, before the upload, than the
    /// upload of every row). `Ok(None)`
    /// when there is nothing to take in; `Err` says why the chain stays on the CPU.
    pub fn try_new(
        top: &Arc<dyn ExecutionPlan>,
        outputs: &[(Arc<dyn PhysicalExpr>, Field)],
        filters: bool,
    ) -> crate::error::Result<Option<FusedInput>> {
        let mut exprs: Vec<Arc<dyn PhysicalExpr>> = outputs.iter().map(|(e, _)| Arc::clone(e)).collect();
        let mut predicates: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
        let mut chain = Vec::new();
        let mut node = Arc::clone(top);
        let mut below_filter = false;
        loop {
            if let Some(p) = node.downcast_ref::<ProjectionExec>() {
                // A projection below a filter computes for rows the filter drops (it may fail
                // there, as on the CPU); keep those shapes on the CPU.
                if below_filter {
                    break;
                }
                let list = p.expr();
                let columns = |i: usize| list.get(i).map(|pe| Arc::clone(&pe.expr));
                exprs = exprs.iter().map(|e| substitute(e, &columns)).collect::<Result<_, _>>()?;
                let next = Arc::clone(p.input());
                chain.push(node);
                node = next;
                continue;
            }
            if let Some(f) = node.downcast_ref::<FilterExec>() {
                if f.fetch().is_some() || !filters {
                    break;
                }
                let input_schema = f.input().schema();
                if let Some(proj) = f.projection() {
                    let columns = |i: usize| {
                        proj.get(i)
                            .map(|&j| Arc::new(Column::new(input_schema.field(j).name(), j)) as Arc<dyn PhysicalExpr>)
                    };
                    exprs = exprs.iter().map(|e| substitute(e, &columns)).collect::<Result<_, _>>()?;
                    predicates = predicates.iter().map(|e| substitute(e, &columns)).collect::<Result<_, _>>()?;
                }
                predicates.push(Arc::clone(f.predicate()));
                below_filter = true;
                let next = Arc::clone(f.input());
                chain.push(node);
                node = next;
                continue;
            }
            break;
        }
        if chain.is_empty() && exprs.iter().all(|e| e.downcast_ref::<Column>().is_some()) {
            return Ok(None);
        }
        let fields: Vec<(Arc<dyn PhysicalExpr>, Field)> =
            exprs.into_iter().zip(outputs).map(|(e, (_, f))| (e, f.clone())).collect();
        let projection = DeviceProjection::try_new(&node.schema(), &predicates, &fields)?;
        let host_filter = chain
            .last()
            .and_then(|n| n.downcast_ref::<FilterExec>())
            .map(|f| Arc::clone(f.predicate()))
            .filter(|p| !is_volatile(p));
        // The bottom filter's predicate was pushed last (and over `node`'s schema).
        let after_host_filter = match (&host_filter, predicates.split_last()) {
            (Some(_), Some((_, rest))) => DeviceProjection::try_new(&node.schema(), rest, &fields).ok(),
            _ => None,
        };
        Ok(Some(FusedInput { input: node, chain, projection, host_filter, after_host_filter, upload_ns_per_row: None }))
    }

    /// The nodes taken in, one line each, as EXPLAIN shows them.
    pub fn describe(&self) -> String {
        if self.chain.is_empty() {
            return "its argument expressions".into();
        }
        self.chain
            .iter()
            .map(|n| displayable(n.as_ref()).one_line().to_string().trim().to_string())
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The statistics of the chain's output from those of its input.
    pub fn statistics(&self, input: &Arc<Statistics>, args: &StatisticsArgs) -> Result<Arc<Statistics>> {
        let mut stats = Arc::clone(input);
        for node in self.chain.iter().rev() {
            stats = node.statistics_from_inputs(&[stats], args)?;
        }
        Ok(stats)
    }

    /// This fusion over a new input node, its chain's nodes rebuilt over it so that their
    /// properties (partitioning, equivalences) follow the new input's; see [`Self::with_input`]
    /// for a copy that keeps the chain as it was.
    pub fn over(&self, input: Arc<dyn ExecutionPlan>) -> Result<FusedInput> {
        let recompute = || ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let mut node = Arc::clone(&input);
        let mut chain = Vec::with_capacity(self.chain.len());
        // The chain lists the nodes nearest the exec first.
        for c in self.chain.iter().rev() {
            node = Arc::clone(c).replace_children(vec![node], recompute())?;
            chain.push(Arc::clone(&node));
        }
        chain.reverse();
        Ok(FusedInput { chain, ..self.with_input(input) })
    }

    /// This fusion over a new input node.
    pub fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> FusedInput {
        FusedInput {
            input,
            chain: self.chain.clone(),
            projection: self.projection.clone(),
            host_filter: self.host_filter.clone(),
            after_host_filter: self.after_host_filter.clone(),
            upload_ns_per_row: self.upload_ns_per_row,
        }
    }

    /// This fusion with its upload priced ([`upload_ns_per_row`]) under `profile`, the device
    /// `gpu` and the session's `cfg`: done by the rule, so that `execute` does not price.
    pub fn priced(&self, cfg: &GpuConfig, gpu: &Gpu, profile: &crate::cost::Profile) -> FusedInput {
        FusedInput {
            upload_ns_per_row: upload_ns_per_row(self, cfg, gpu, profile),
            ..self.with_input(Arc::clone(&self.input))
        }
    }

    /// This fusion for a partition whose rows the host has filtered by `host_filter`: the
    /// kernels without that filter when they compiled, `None` otherwise (keep this one).
    pub fn filtered_on_host(&self) -> Option<FusedInput> {
        let projection = self.after_host_filter.clone()?;
        Some(FusedInput {
            input: Arc::clone(&self.input),
            chain: self.chain.clone(),
            projection,
            host_filter: None,
            after_host_filter: None,
            upload_ns_per_row: self.upload_ns_per_row,
        })
    }
}

/// With `gpu.fuse.host_filter_priced` and a host pre-filter: nanoseconds one row of `f`'s input
/// costs to upload, for one of the input's partitions sharing the link (the profile's transfer
/// cost per byte, or the link's own for a scan of pinned memory, which goes up without a host
/// copy, times the uploaded columns' bytes times the partitions).
pub fn upload_ns_per_row(f: &FusedInput, cfg: &GpuConfig, gpu: &Gpu, profile: &crate::cost::Profile) -> Option<f64> {
    if f.host_filter.is_none() || !cfg.host_filter_priced {
        return None;
    }
    let schema = &f.projection.upload_schema;
    let per_row = if crate::columns::pinned::scans_pinned_memory(&f.input, gpu) && profile.h2d > 0.0 {
        crate::cost::row_bytes(schema) / profile.h2d
    } else {
        crate::cost::upload_seconds(crate::cost::staged_row_bytes(schema, cfg.narrow_decimals), 0.0, profile)
    };
    let partitions = f.input.output_partitioning().partition_count().max(1) as f64;
    Some(per_row * partitions * 1e9)
}

/// The host pre-filter of a partition of `f`'s input, when `f` has a filter the host can apply:
/// filtering below `keep_below` (`gpu.fuse.host_filter_below`), or priced against
/// `upload_ns_per_row` when given ([`upload_ns_per_row`]).
pub fn host_prefilter(f: &FusedInput, keep_below: f64, upload_ns_per_row: Option<f64>) -> Option<HostPrefilter> {
    let pre = HostPrefilter::new(Arc::clone(f.host_filter.as_ref()?), keep_below);
    Some(match upload_ns_per_row {
        Some(u) => pre.priced(u),
        None => pre,
    })
}

/// Where a pre-filtered input counts its rows: those read, those the host filter dropped, and
/// (once) whether the partition filters on the host.
#[derive(Clone)]
pub struct PrefilterCounters {
    pub rows: Count,
    pub dropped: Count,
    pub filtering: Count,
}

/// `input`'s batches projected to the columns the fused kernels read. With a host filter
/// (`pre`), the batches of the sample are held until the partition has chosen: when the host
/// filters every batch, the kernels without that filter ([`FusedInput::filtered_on_host`]) are
/// set in `chosen` before any batch is released, and the batches are projected to their (fewer)
/// columns. Whoever evaluates the kernels takes `chosen`'s when it is set, `fused` otherwise.
pub fn prefiltered(
    input: SendableRecordBatchStream,
    fused: Arc<FusedInput>,
    chosen: Arc<OnceLock<Arc<FusedInput>>>,
    pre: Option<HostPrefilter>,
    counters: PrefilterCounters,
    who: String,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    struct State {
        input: SendableRecordBatchStream,
        fused: Arc<FusedInput>,
        chosen: Arc<OnceLock<Arc<FusedInput>>>,
        pre: Option<HostPrefilter>,
        held: Vec<RecordBatch>,
        ready: VecDeque<RecordBatch>,
        ended: bool,
        counters: PrefilterCounters,
        who: String,
    }
    impl State {
        /// After the decision: the held batches are released, and the kernels chosen.
        fn decided(&mut self) {
            let Some(p) = &self.pre else { return };
            let mode = p.mode();
            if mode == PrefilterMode::Filter {
                self.counters.filtering.add(1);
                if let Some(f) = self.fused.filtered_on_host() {
                    let _ = self.chosen.set(Arc::new(f));
                }
            }
            let (kept, filter_ns, upload_ns) = (p.kept_fraction(), p.filter_ns_per_row(), p.upload_ns_per_row());
            timeline::mark(&self.who, || match upload_ns {
                Some(u) => format!(
                    "fused filter keeps {:.1}% of the sample, {filter_ns:.1} ns/row on the host against {u:.1} ns/row to upload: {mode:?}",
                    100.0 * kept
                ),
                None => format!("fused filter keeps {:.1}% of the sample: {mode:?}", 100.0 * kept),
            });
            self.ready.extend(self.held.drain(..));
        }
        fn project(&self, b: RecordBatch) -> Result<RecordBatch> {
            let f = self.chosen.get().unwrap_or(&self.fused);
            Ok(b.project(&f.projection.inputs)?)
        }
    }
    let state =
        State { input, fused, chosen, pre, held: Vec::new(), ready: VecDeque::new(), ended: false, counters, who };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(b) = st.ready.pop_front() {
                let out = st.project(b);
                return Some((out, st));
            }
            if st.ended {
                return None;
            }
            match st.input.next().await {
                None => {
                    st.ended = true;
                    // Batches are held only while sampling: deciding releases them.
                    if st.pre.as_mut().is_some_and(|p| p.decide_now()) {
                        st.decided();
                    }
                }
                Some(Err(e)) => {
                    st.ended = true;
                    return Some((Err(e), st));
                }
                Some(Ok(b)) => {
                    st.counters.rows.add(b.num_rows());
                    let Some(p) = st.pre.as_mut() else {
                        st.ready.push_back(b);
                        continue;
                    };
                    let sampling = p.mode() == PrefilterMode::Sampling;
                    let before = b.num_rows();
                    let (b, decided) = match p.apply(b) {
                        Ok(x) => x,
                        Err(e) => {
                            st.ended = true;
                            return Some((Err(e), st));
                        }
                    };
                    st.counters.dropped.add(before - b.num_rows());
                    match sampling {
                        true => st.held.push(b),
                        false => st.ready.push_back(b),
                    }
                    if decided {
                        st.decided();
                    }
                }
            }
        }
    })
}

/// How a [`HostPrefilter`] treats the batches after its sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefilterMode {
    /// Still measuring: each batch is filtered on the host and counted.
    Sampling,
    /// The filter keeps few rows: every batch is filtered on the host before the upload.
    Filter,
    /// The filter keeps most rows: batches are uploaded whole and filtered on the device only.
    Raw,
}

/// A fused filter applied on the host before the upload while it keeps few rows.
///
/// Uploading a row costs a host copy into the pinned staging buffer and the DMA (about as long
/// again); filtering it on the host costs the predicate and, for kept rows, one copy. So the host
/// filter pays while it keeps less than about half of the rows, the predicate's own cost aside:
/// `gpu.fuse.host_filter_below` defaults to a half. Measured
/// on TPC-H SF10 (H100): Q1's filter keeps 98% of lineitem and runs 1.4x faster uploaded whole;
/// Q15's (4%) and Q20's (15%) ran 2x and 1.3x slower uploaded whole. DataFusion's statistics of
/// in-memory tables cannot tell these apart at plan time, so the fraction is measured on the first
/// [`HostPrefilter::SAMPLE_ROWS`] rows of each partition. Applying the filter twice is safe: the
/// predicate is deterministic (volatile ones are never applied here), and the device keeps every
/// row the host kept.
#[derive(Debug)]
pub struct HostPrefilter {
    predicate: Arc<dyn PhysicalExpr>,
    /// The host filters while the sample's kept fraction is below this (`gpu.fuse.host_filter_below`).
    keep_below: f64,
    /// With `gpu.fuse.host_filter_priced`: nanoseconds one row's upload costs this partition (its
    /// share of the link), against which the measured host filter time is priced.
    upload_ns_per_row: Option<f64>,
    /// Time spent filtering the sampled rows on the host.
    filter_nanos: u128,
    mode: PrefilterMode,
    sampled: usize,
    kept: usize,
}

impl HostPrefilter {
    /// Rows of a partition the decision is made on.
    pub const SAMPLE_ROWS: usize = 1 << 16;
    /// A pre-filter that keeps filtering on the host when its sample's kept fraction is below
    /// `keep_below` (0: never, 1: always).
    pub fn new(predicate: Arc<dyn PhysicalExpr>, keep_below: f64) -> Self {
        HostPrefilter {
            predicate,
            keep_below,
            upload_ns_per_row: None,
            filter_nanos: 0,
            mode: PrefilterMode::Sampling,
            sampled: 0,
            kept: 0,
        }
    }

    /// Prices the choice instead (`gpu.fuse.host_filter_priced`): the host filters when its measured
    /// time per row is below the upload time of the rows it drops, a row costing
    /// `upload_ns_per_row` (see [`priced_mode`]).
    pub fn priced(mut self, upload_ns_per_row: f64) -> Self {
        self.upload_ns_per_row = Some(upload_ns_per_row);
        self
    }

    /// Host filter time per sampled row, in nanoseconds (0 before any row).
    pub fn filter_ns_per_row(&self) -> f64 {
        if self.sampled == 0 { 0.0 } else { self.filter_nanos as f64 / self.sampled as f64 }
    }

    /// With [`Self::priced`]: the upload cost of a row the choice was priced against.
    pub fn upload_ns_per_row(&self) -> Option<f64> {
        self.upload_ns_per_row
    }

    pub fn mode(&self) -> PrefilterMode {
        self.mode
    }

    /// The fraction of the sampled rows the filter kept (1 before any row).
    pub fn kept_fraction(&self) -> f64 {
        if self.sampled == 0 { 1.0 } else { self.kept as f64 / self.sampled as f64 }
    }

    /// Decides on the rows sampled so far (the input ended before a full sample); returns
    /// whether this made the decision.
    pub fn decide_now(&mut self) -> bool {
        if self.mode != PrefilterMode::Sampling {
            return false;
        }
        self.mode = match self.upload_ns_per_row {
            Some(u) if self.sampled > 0 => priced_mode(self.filter_ns_per_row(), self.kept_fraction(), u),
            _ if self.kept_fraction() < self.keep_below || self.keep_below >= 1.0 => PrefilterMode::Filter,
            _ => PrefilterMode::Raw,
        };
        true
    }

    /// `batch` with the rows the filter drops removed, or whole once the filter is known to keep
    /// most rows. Returns whether the sample was completed by this batch (the mode was chosen).
    pub fn apply(&mut self, batch: RecordBatch) -> Result<(RecordBatch, bool)> {
        if self.mode == PrefilterMode::Raw || batch.num_rows() == 0 {
            return Ok((batch, false));
        }
        let started = std::time::Instant::now();
        let mask = self.predicate.evaluate(&batch)?.into_array(batch.num_rows())?;
        let mask = mask.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
            DataFusionError::Internal(format!("a filter predicate gave {} instead of booleans", mask.data_type()))
        })?;
        let filtered = filter_record_batch(&batch, mask)?;
        let mut decided = false;
        if self.mode == PrefilterMode::Sampling {
            self.filter_nanos += started.elapsed().as_nanos();
            self.sampled += batch.num_rows();
            self.kept += filtered.num_rows();
            if self.sampled >= Self::SAMPLE_ROWS {
                decided = self.decide_now();
            }
        }
        Ok((filtered, decided))
    }
}

/// The priced choice of a partition's host pre-filter. All partitions filter on their own cores
/// at once while their uploads share the link, so per row of a partition the host filter costs
/// `filter_ns` (measured) and saves the upload of the rows it drops, `(1 - kept) * upload_ns`
/// (`upload_ns`: the row's bytes at the link's measured cost, times the partitions sharing it).
/// The device filters either way.
pub fn priced_mode(filter_ns: f64, kept: f64, upload_ns: f64) -> PrefilterMode {
    if filter_ns < (1.0 - kept.clamp(0.0, 1.0)) * upload_ns { PrefilterMode::Filter } else { PrefilterMode::Raw }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of `rows` nullable Int32 values in 0..100 (about 10% null) and their row numbers.
    fn numbers(rng: &mut rand::rngs::StdRng, start: i64, rows: usize) -> RecordBatch {
        use datafusion::arrow::array::{Int32Array, Int64Array};
        use datafusion::arrow::datatypes::{DataType, Schema};
        use rand::Rng;
        let v: Int32Array =
            (0..rows).map(|_| (rng.random_range(0..10) > 0).then(|| rng.random_range(0..100))).collect();
        let id: Int64Array = (start..start + rows as i64).collect();
        let schema =
            Schema::new(vec![Field::new("v", DataType::Int32, true), Field::new("id", DataType::Int64, false)]);
        RecordBatch::try_new(Arc::new(schema), vec![Arc::new(v), Arc::new(id)]).unwrap()
    }

    /// The host pre-filter keeps exactly the rows the filter keeps while it filters, chooses to
    /// filter a selective predicate and to upload an unselective one whole, and never drops a row
    /// the filter keeps (nulls in the predicate drop rows, as in `FilterExec`).
    #[test]
    fn host_prefilter_filters_selective_predicates_and_passes_the_rest() {
        use datafusion::arrow::array::{Int32Array, Int64Array};
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{binary, lit};
        use rand::SeedableRng;
        let seed = crate::testing::fresh_seed("host_prefilter");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // (v < below keeps about 0.9 * below % of the rows, gpu.fuse.host_filter_below, the mode).
        for (below, keep_below, mode) in [
            (10, 0.5, PrefilterMode::Filter),
            (45, 0.5, PrefilterMode::Filter),
            (90, 0.5, PrefilterMode::Raw),
            (10, 0.05, PrefilterMode::Raw),
            (10, 0.0, PrefilterMode::Raw),
            (90, 0.95, PrefilterMode::Filter),
            (100, 1.0, PrefilterMode::Filter),
        ] {
            let schema = numbers(&mut rng, 0, 1).schema();
            let predicate = binary(Arc::new(Column::new("v", 0)), Operator::Lt, lit(below), &schema).unwrap();
            let mut pre = HostPrefilter::new(predicate, keep_below);
            let (mut start, mut decided_at) = (0i64, None);
            let mut kept_ids = Vec::new();
            let mut expected_ids = Vec::new();
            for i in 0..40 {
                let rows = [0, 1, 4000, 8192][i % 4];
                let batch = numbers(&mut rng, start, rows);
                start += rows as i64;
                let v = batch.column(0).as_any().downcast_ref::<Int32Array>().unwrap();
                let id = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
                let passing: Vec<i64> = (0..batch.num_rows())
                    .filter(|&r| v.is_valid(r) && v.value(r) < below)
                    .map(|r| id.value(r))
                    .collect();
                let mode_before = pre.mode();
                let (out, decided) = pre.apply(batch.clone()).unwrap();
                if decided {
                    assert!(decided_at.is_none(), "seed {seed}: decided twice");
                    decided_at = Some(i);
                }
                let out_ids: Vec<i64> =
                    out.column(1).as_any().downcast_ref::<Int64Array>().unwrap().iter().map(|x| x.unwrap()).collect();
                match mode_before {
                    PrefilterMode::Raw => {
                        assert_eq!(out.num_rows(), batch.num_rows(), "seed {seed}: a raw batch changed")
                    }
                    _ => assert_eq!(out_ids, passing, "seed {seed}: the host filter kept other rows"),
                }
                // Whatever the mode, every row the filter keeps reaches the device.
                assert!(passing.iter().all(|p| out_ids.contains(p)), "seed {seed}: a kept row was dropped");
                kept_ids.extend(out_ids);
                expected_ids.extend(passing);
            }
            assert!(decided_at.is_some(), "seed {seed}: no decision after {start} rows");
            assert_eq!(
                pre.mode(),
                mode,
                "seed {seed}: v < {below} kept {:.2} of the sample (threshold {keep_below})",
                pre.kept_fraction()
            );
            assert!(kept_ids.len() >= expected_ids.len());
        }
    }

    /// The priced choice, worked by hand: the host filters while its time per row is below the
    /// upload time of the rows it drops.
    #[test]
    fn priced_host_filter_choice() {
        // 5 ns to filter, 4% kept, 30 ns to upload: saves 28.8 ns a row.
        assert_eq!(priced_mode(5.0, 0.04, 30.0), PrefilterMode::Filter);
        // 40 ns to filter saves at most 29.4 ns.
        assert_eq!(priced_mode(40.0, 0.02, 30.0), PrefilterMode::Raw);
        // Keeping 98%: 1 ns against 0.6 ns saved.
        assert_eq!(priced_mode(1.0, 0.98, 30.0), PrefilterMode::Raw);
        // Keeping everything never pays; keeping nothing pays below the whole upload.
        assert_eq!(priced_mode(0.1, 1.0, 30.0), PrefilterMode::Raw);
        assert_eq!(priced_mode(29.0, 0.0, 30.0), PrefilterMode::Filter);
        assert_eq!(priced_mode(30.0, 0.0, 30.0), PrefilterMode::Raw);
        // Out-of-range fractions are clamped.
        assert_eq!(priced_mode(1.0, -0.5, 30.0), PrefilterMode::Filter);
    }

    /// A priced pre-filter decides on its measured time, not the kept fraction: an unselective
    /// predicate is filtered on the host when uploads are dear, a selective one is uploaded whole
    /// when they are free; the rows kept are the filter's either way.
    #[test]
    fn priced_host_prefilter_uses_the_measured_time() {
        use datafusion::logical_expr::Operator;
        use datafusion::physical_expr::expressions::{binary, lit};
        use rand::SeedableRng;
        let seed = crate::testing::fresh_seed("priced_host_prefilter");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for (below, upload_ns, mode) in [(90, 1e9, PrefilterMode::Filter), (10, 0.0, PrefilterMode::Raw)] {
            let schema = numbers(&mut rng, 0, 1).schema();
            let predicate = binary(Arc::new(Column::new("v", 0)), Operator::Lt, lit(below), &schema).unwrap();
            let mut pre = HostPrefilter::new(predicate, 0.5).priced(upload_ns);
            let mut start = 0;
            while pre.mode() == PrefilterMode::Sampling {
                let batch = numbers(&mut rng, start, 8192);
                start += 8192;
                let (out, _) = pre.apply(batch).unwrap();
                assert!(out.num_rows() <= 8192);
            }
            assert_eq!(pre.mode(), mode, "seed {seed}: v < {below}, upload {upload_ns} ns/row");
            assert!(pre.filter_ns_per_row() > 0.0, "seed {seed}: no filter time measured");
            assert_eq!(pre.upload_ns_per_row(), Some(upload_ns));
        }
    }
    /// TPC-H q22's shape compiles for the device from DataFusion's own plan: `substr` in the
    /// filter and as a computed string output, and a scalar subquery's value in the filter.
    #[tokio::test]
    async fn substr_string_outputs_and_scalar_subqueries_compile_for_the_device() {
        use datafusion::arrow::array::{Decimal128Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Schema};
        use datafusion::datasource::MemTable;
        use datafusion::physical_plan::ExecutionPlanProperties as _;
        use datafusion::prelude::SessionContext;
        let schema = Arc::new(Schema::new(vec![
            Field::new("phone", DataType::Utf8, true),
            Field::new("bal", DataType::Decimal128(15, 2), true),
        ]));
        let phone: StringArray = ["13-1", "31-2", "99-3", "é1-4"].into_iter().map(Some).collect();
        let bal = Decimal128Array::from(vec![100, 200, 300, 400]).with_precision_and_scale(15, 2).unwrap();
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(phone), Arc::new(bal)]).unwrap();
        let ctx = SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(1));
        ctx.register_table("c", Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap())).unwrap();
        let sql = "SELECT substr(phone, 1, 2) AS code, bal FROM c \
                   WHERE substr(phone, 1, 2) IN ('13', '31', 'é1') AND bal > (SELECT avg(bal) FROM c WHERE bal > 0)";
        let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
        let mut tops = Vec::new();
        plan.apply(|node| {
            if node.downcast_ref::<ProjectionExec>().is_some_and(|p| p.input().downcast_ref::<FilterExec>().is_some()) {
                tops.push(Arc::clone(node));
            }
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        })
        .unwrap();
        let [top] = tops.as_slice() else {
            panic!("one projection over a filter expected:\n{}", displayable(plan.as_ref()).indent(true))
        };
        let outputs: Vec<(Arc<dyn PhysicalExpr>, Field)> = top
            .schema()
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| (Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>, f.as_ref().clone()))
            .collect();
        let fused = FusedInput::try_new(top, &outputs, true).unwrap().expect("the chain is taken in");
        assert_eq!(fused.chain.len(), 2);
        assert_eq!(fused.projection.output_schema.field(0).data_type(), &DataType::Utf8);
        assert!(fused.describe().contains("scalar_subquery"), "{}", fused.describe());
        assert_eq!(top.output_partitioning().partition_count(), fused.input.output_partitioning().partition_count());
    }
}
