//! A GPU join's layout: the columns each side uploads, the device join's description and the
//! algorithm the setting (or the cost model) leaves it.

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{JoinSide, JoinType, NullEquality};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::joins::utils::build_join_schema;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};

use crate::columns::concat::can_concat;
use crate::config::GpuConfig;
use crate::exec::cpu_join::Sides;
use crate::join::filter::generate as generate_filter;
use crate::join::{FilterSpec, JoinAlgorithm, JoinAlgorithmSetting, JoinSpec, OutputColumn, window_bound};
use crate::primitives::keys::KeyPlan;

/// The join's device-side description, fixed when the rule places the exec.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    /// Left input columns uploaded for the build (keys and outputs), and their schema.
    pub(super) build_cols: Vec<usize>,
    pub(super) build_schema: SchemaRef,
    /// Right input columns uploaded for the probe.
    pub(super) probe_cols: Vec<usize>,
    pub(super) probe_schema: SchemaRef,
    pub(super) spec: Arc<JoinSpec>,
    /// Why this algorithm.
    pub(super) choice: String,
    /// The algorithms the setting allows the cost model to choose among.
    pub(super) candidates: Vec<JoinAlgorithm>,
    /// Why this join cannot run out of core (`None`: it can, when its build side would not fit
    /// under the memory limit).
    pub(super) no_spill: Option<String>,
}

impl Layout {
    /// The uploaded columns of each side, for DataFusion's join over them.
    pub(super) fn sides(&self) -> Sides<'_> {
        Sides {
            build_cols: &self.build_cols,
            build_schema: &self.build_schema,
            probe_cols: &self.probe_cols,
            probe_schema: &self.probe_schema,
        }
    }
}

impl Layout {
    /// This join with its sides' roles exchanged, over inputs already reduced to their uploaded
    /// columns (the build side's device batches as collected, the probe side's after
    /// `probe_columns`): the probe input is built and the build input probed, and the output
    /// columns keep their order. Only for an inner join without a residual filter, whose pairs
    /// do not depend on which side is built; `None` for any other.
    pub(super) fn swapped(&self) -> Option<Layout> {
        let spec = &self.spec;
        if spec.join_type != JoinType::Inner || spec.filter.is_some() || spec.ordered || spec.null_aware {
            return None;
        }
        let output = spec
            .output
            .iter()
            .map(|c| match *c {
                OutputColumn::Build(i) => OutputColumn::Probe(i),
                OutputColumn::Probe(i) => OutputColumn::Build(i),
                OutputColumn::Mark => OutputColumn::Mark,
            })
            .collect();
        let swapped = JoinSpec {
            build_keys: spec.probe_keys.clone(),
            probe_keys: spec.build_keys.clone(),
            output,
            ..(**spec).clone()
        };
        Some(Layout {
            build_cols: (0..self.probe_cols.len()).collect(),
            build_schema: Arc::clone(&self.probe_schema),
            probe_cols: (0..self.build_cols.len()).collect(),
            probe_schema: Arc::clone(&self.build_schema),
            spec: Arc::new(swapped),
            choice: self.choice.clone(),
            candidates: self.candidates.clone(),
            no_spill: Some("its inputs were swapped at run time".into()),
        })
    }
}

/// Positions of `cols` (sorted, unique) in the uploaded batch.
pub(super) fn position(cols: &[usize], c: usize) -> Result<usize> {
    cols.binary_search(&c).map_err(|_| DataFusionError::Internal(format!("column {c} was not uploaded")))
}

pub(super) fn key_index(expr: &Arc<dyn PhysicalExpr>) -> crate::error::Result<usize> {
    expr.downcast_ref::<Column>()
        .map(|c| c.index())
        .ok_or_else(|| not_impl_datafusion_err!("join key `{expr}` is not a plain column"))
}

impl Layout {
    /// The layout of `hj` under `cfg`, or why it has none.
    pub(super) fn new(hj: &HashJoinExec, cfg: &GpuConfig) -> crate::error::Result<Layout> {
        let (ls, rs) = (hj.left().schema(), hj.right().schema());
        let join_type = *hj.join_type();
        let mut lkeys = Vec::new();
        let mut rkeys = Vec::new();
        let mut types = Vec::new();
        for (l, r) in hj.on() {
            let (li, ri) = (key_index(l)?, key_index(r)?);
            let (lt, rt) = (ls.field(li).data_type(), rs.field(ri).data_type());
            if lt != rt {
                return not_impl_err!("join keys `{l}` and `{r}` have different types {lt} and {rt}");
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
            let ci = column_indices
                .get(k)
                .ok_or_else(|| DataFusionError::Internal("the join's projection is out of range".into()))?;
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
        let pos = |cols: &[usize], c| position(cols, c);
        let mut output = Vec::with_capacity(chosen.len());
        for &k in &chosen {
            let ci = &column_indices[k];
            output.push(match ci.side {
                JoinSide::Left => OutputColumn::Build(pos(&build_cols, ci.index)?),
                JoinSide::Right => OutputColumn::Probe(pos(&probe_cols, ci.index)?),
                JoinSide::None => OutputColumn::Mark,
            });
        }
        let build_schema = Arc::new(ls.project(&build_cols)?);
        let probe_schema = Arc::new(rs.project(&probe_cols)?);
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
                    .collect::<crate::error::Result<Vec<_>>>()?,
                may_fail: code.may_fail,
                source: code.source,
                literals: code.literals,
            }),
            None => None,
        };
        let ordered = hj.properties().output_ordering().is_some();
        let (mut algorithm, mut choice) = choose_algorithm(cfg.join_algorithm, ordered);
        let mut candidates = candidates(cfg.join_algorithm, ordered);
        if hj.null_aware {
            // NOT IN is decided over the whole probe side: one device decides it.
            candidates.retain(|a| !a.multi_gpu());
            if algorithm.multi_gpu() {
                algorithm = JoinAlgorithm::SmjGftr;
                choice = format!("{choice}; NOT IN runs on one device (smj_gftr)");
            }
            if candidates.is_empty() {
                candidates.push(algorithm);
            }
        }
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
                batch_rows: window_bound(cfg.join_window_rows),
            }),
            choice,
        })
    }
}

/// The algorithm for a setting, and the words EXPLAIN gives for the choice. `auto` takes NPJ
/// until the cost model chooses among the algorithms; `phj` and `smj` take GFTR, which seed
/// 002 recommends for wide joins with a match ratio of 25% or more.
pub(super) fn choose_algorithm(setting: JoinAlgorithmSetting, ordered: bool) -> (JoinAlgorithm, String) {
    if ordered {
        return (JoinAlgorithm::Npj, "npj keeps the probe order the plan relies on".into());
    }
    match setting {
        JoinAlgorithmSetting::Auto => (JoinAlgorithm::Npj, "gpu.join.algorithm=auto".into()),
        JoinAlgorithmSetting::Phj => (JoinAlgorithm::PhjGftr, "gpu.join.algorithm=phj".into()),
        JoinAlgorithmSetting::Smj => (JoinAlgorithm::SmjGftr, "gpu.join.algorithm=smj".into()),
        JoinAlgorithmSetting::Fixed(a) => (a, format!("gpu.join.algorithm={a}")),
    }
}

/// The algorithms a setting leaves to the cost model.
pub(super) fn candidates(setting: JoinAlgorithmSetting, ordered: bool) -> Vec<JoinAlgorithm> {
    if ordered {
        return vec![JoinAlgorithm::Npj];
    }
    match setting {
        JoinAlgorithmSetting::Auto => JoinAlgorithm::EVERY.to_vec(),
        JoinAlgorithmSetting::Phj => vec![JoinAlgorithm::PhjGfur, JoinAlgorithm::PhjGftr],
        JoinAlgorithmSetting::Smj => vec![JoinAlgorithm::SmjGfur, JoinAlgorithm::SmjGftr],
        JoinAlgorithmSetting::Fixed(a) => vec![a],
    }
}
