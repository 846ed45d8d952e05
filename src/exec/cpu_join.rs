//! DataFusion's own hash join, finishing work a GPU join could not do on the device (device
//! memory ran out: see [`crate::error::recoverable_on_cpu`]).
//!
//! It joins what the GPU join kept on the host: its build rows (the columns it uploads for the
//! build) and its probe rows (the columns it uploads for the probe), handed over partition by
//! partition. The join is DataFusion's `HashJoinExec` in `CollectLeft` mode with the GPU join's
//! keys, filter, type, null handling and output, its column references moved to those columns,
//! so its output is the GPU join's. In `CollectLeft` mode one such join serves every probe
//! partition (it shares its build and, for join types that emit build rows at the end, its
//! record of matched build rows, as the GPU join would); a partition that falls back alone gets
//! one of its own.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{JoinSide, internal_datafusion_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::utils::{ColumnIndex, JoinFilter, build_join_schema};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};

use super::replay::HandedStream;

/// The columns a GPU join uploads from each side, by their index in the side's schema (sorted),
/// and their schemas.
pub struct Sides<'a> {
    pub build_cols: &'a [usize],
    pub build_schema: &'a SchemaRef,
    pub probe_cols: &'a [usize],
    pub probe_schema: &'a SchemaRef,
}

/// DataFusion's join of kept build rows with probe partitions handed over later.
pub struct CpuJoin {
    plan: Arc<dyn ExecutionPlan>,
    probes: Vec<Arc<HandedStream>>,
}

impl std::fmt::Debug for CpuJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuJoin").field("probes", &self.probes.len()).finish_non_exhaustive()
    }
}

fn at(cols: &[usize], c: usize) -> Result<usize> {
    cols.binary_search(&c).map_err(|_| internal_datafusion_err!("a GPU join's column {c} was not kept for the CPU"))
}

/// `expr`, a plain column of one side, as the same column among that side's kept ones.
fn moved(expr: &Arc<dyn PhysicalExpr>, cols: &[usize], schema: &SchemaRef) -> Result<Arc<dyn PhysicalExpr>> {
    let c = expr
        .downcast_ref::<Column>()
        .ok_or_else(|| internal_datafusion_err!("a GPU join key `{expr}` is not a plain column"))?;
    let i = at(cols, c.index())?;
    Ok(Arc::new(Column::new(schema.field(i).name(), i)))
}

impl CpuJoin {
    /// The join `hj` over `build` (host batches of the build columns) and `probes` probe
    /// partitions of the probe columns.
    pub fn new(hj: &HashJoinExec, sides: &Sides<'_>, build: Vec<RecordBatch>, probes: usize) -> Result<CpuJoin> {
        let (bc, pc) = (sides.build_cols, sides.probe_cols);
        let on = hj
            .on()
            .iter()
            .map(|(l, r)| Ok((moved(l, bc, sides.build_schema)?, moved(r, pc, sides.probe_schema)?)))
            .collect::<Result<Vec<_>>>()?;
        let side_at = |side: JoinSide, index: usize| -> Result<usize> {
            match side {
                JoinSide::Left => at(bc, index),
                JoinSide::Right => at(pc, index),
                JoinSide::None => Ok(index),
            }
        };
        let filter = match hj.filter() {
            Some(f) => {
                let indices = f
                    .column_indices()
                    .iter()
                    .map(|ci| Ok(ColumnIndex { index: side_at(ci.side, ci.index)?, side: ci.side }))
                    .collect::<Result<Vec<_>>>()?;
                Some(JoinFilter::new(Arc::clone(f.expression()), indices, Arc::clone(f.schema())))
            }
            None => None,
        };
        let join_type = *hj.join_type();
        // The output columns, found again among the kept columns' join schema.
        let (_, old) = build_join_schema(&hj.left().schema(), &hj.right().schema(), &join_type);
        let (_, new) = build_join_schema(sides.build_schema, sides.probe_schema, &join_type);
        let chosen: Vec<usize> = match &hj.projection {
            Some(p) => p.iter().copied().collect(),
            None => (0..old.len()).collect(),
        };
        let projection = chosen
            .iter()
            .map(|&k| {
                let ci = old.get(k).ok_or_else(|| internal_datafusion_err!("a join output {k} out of range"))?;
                let index = side_at(ci.side, ci.index)?;
                new.iter()
                    .position(|n| n.side == ci.side && n.index == index)
                    .ok_or_else(|| internal_datafusion_err!("a GPU join's output {k} is not among its kept columns"))
            })
            .collect::<Result<Vec<_>>>()?;
        let left = MemorySourceConfig::try_new_exec(&[build], Arc::clone(sides.build_schema), None)?;
        let slots: Vec<Arc<HandedStream>> =
            (0..probes.max(1)).map(|_| Arc::new(HandedStream::slot(Arc::clone(sides.probe_schema)))).collect();
        let partitions = slots.iter().map(|s| Arc::clone(s) as Arc<dyn PartitionStream>).collect();
        let right = Arc::new(StreamingTableExec::try_new(
            Arc::clone(sides.probe_schema),
            partitions,
            None,
            Vec::new(),
            false,
            None,
        )?);
        let plan = HashJoinExec::try_new(
            left,
            right,
            on,
            filter,
            &join_type,
            Some(projection),
            PartitionMode::CollectLeft,
            hj.null_equality(),
            hj.null_aware,
        )?;
        Ok(CpuJoin { plan: Arc::new(plan), probes: slots })
    }

    /// The output of probe partition `partition` over `probe` (rows of the probe columns).
    pub fn execute(
        &self,
        partition: usize,
        probe: SendableRecordBatchStream,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let slot = self
            .probes
            .get(partition)
            .ok_or_else(|| internal_datafusion_err!("a CPU join has no probe partition {partition}"))?;
        slot.hand(probe);
        self.plan.execute(partition, context)
    }
}
