//! Filters and projections taken into a GPU exec: the `ProjectionExec`s and `FilterExec`s
//! directly below it (projections above filters, as DataFusion plans them) become one
//! [`DeviceProjection`] over the rows of the node below them, so the exec uploads raw columns and
//! the device computes what DataFusion would have computed on the host.

use std::sync::Arc;

use datafusion::arrow::datatypes::Field;
use datafusion::common::Statistics;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr, displayable};

use crate::expr::project::DeviceProjection;

/// The filters and projections between a GPU exec and `input`, compiled for the device.
#[derive(Debug)]
pub struct FusedInput {
    /// The node whose rows are uploaded.
    pub input: Arc<dyn ExecutionPlan>,
    /// The nodes taken in, nearest the exec first.
    pub chain: Vec<Arc<dyn ExecutionPlan>>,
    pub projection: DeviceProjection,
}

/// `e` with each column replaced by `columns(index)`.
fn substitute(
    e: &Arc<dyn PhysicalExpr>,
    columns: &dyn Fn(usize) -> Option<Arc<dyn PhysicalExpr>>,
) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
    Arc::clone(e)
        .transform_up(|node| match node.downcast_ref::<Column>() {
            Some(c) => match columns(c.index()) {
                Some(x) => Ok(Transformed::yes(x)),
                None => Err(datafusion::error::DataFusionError::Internal(format!("column {c} is out of range"))),
            },
            None => Ok(Transformed::no(node)),
        })
        .map(|t| t.data)
        .map_err(|err| err.to_string())
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
    ) -> std::result::Result<Option<FusedInput>, String> {
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
        Ok(Some(FusedInput { input: node, chain, projection }))
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

    /// This fusion over a new input node.
    pub fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> FusedInput {
        FusedInput { input, chain: self.chain.clone(), projection: self.projection.clone() }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::physical_plan::aggregates::{AggregateExec, AggregateInputMode};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::config::GpuConfig;
    use crate::exec::GpuAggregateExec;
    use crate::tpch::{Suite, data, queries};

    use super::*;

    fn raw_aggregates(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Arc<dyn ExecutionPlan>>) {
        if let Some(a) = plan.downcast_ref::<AggregateExec>()
            && a.mode().input_mode() == AggregateInputMode::Raw
        {
            out.push(Arc::clone(plan));
        }
        for c in plan.children() {
            raw_aggregates(c, out);
        }
    }

    /// The filters and projections of TPC-H and SSB below their first-stage aggregates compile
    /// for the device (checked without a device: code generation only). Q1's and Q6's, the
    /// scans of lineitem with decimal arithmetic, must; the others are listed with the reason.
    #[tokio::test]
    async fn benchmark_aggregate_inputs_compile_for_the_device() {
        let cfg = GpuConfig::default();
        let mut fused = Vec::new();
        for suite in [Suite::Tpch, Suite::Ssb] {
            let tables = data::generate(suite, 0.01, 1, 2, &data::Progresses::new(false)).unwrap();
            let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
            data::register(&ctx, &tables).unwrap();
            for q in queries::select(suite, &[]).unwrap() {
                for sql in q.sql.split(';').filter(|s| !s.trim().is_empty()) {
                    let Ok(df) = ctx.sql(sql).await else { continue };
                    let Ok(plan) = df.create_physical_plan().await else { continue };
                    let mut aggs = Vec::new();
                    raw_aggregates(&plan, &mut aggs);
                    for a in aggs {
                        for filters in [false, true] {
                            let Ok(g) = GpuAggregateExec::try_new(Arc::clone(&a), &cfg) else { continue };
                            let g = g.with_fused_input(filters);
                            let line = displayable(&g as &dyn ExecutionPlan).one_line().to_string();
                            println!("{} {} (filters {filters}): {}", suite.name(), q.name, line.trim());
                            if let Some(f) = g.fused_input() {
                                fused.push((q.name, filters, f.describe()));
                            }
                        }
                    }
                }
            }
        }
        // By default filters stay on the CPU; Q1's decimal projection above its filter runs on
        // the GPU.
        let has = |q: &str, f: bool, what: &str| fused.iter().any(|(n, x, d)| *n == q && *x == f && d.contains(what));
        assert!(has("q1", false, "ProjectionExec") && !has("q1", false, "FilterExec"), "{fused:?}");
        for q in ["q1", "q6"] {
            assert!(has(q, true, "FilterExec"), "TPC-H {q}'s filter and projection did not compile: {fused:?}");
        }
    }
}
