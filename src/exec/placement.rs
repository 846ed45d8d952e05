//! Where each join and aggregate of a physical plan runs: on the GPU (with which algorithm) or on
//! the CPU (with the reasons the rule gave). Benchmarks and tests report it next to their timings.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;

use super::{CpuFallbackExec, GpuAggregateExec, GpuHashJoinExec};

/// The kind of operator a [`Placement`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatorKind {
    Join,
    Aggregate,
}

/// One join or aggregate of a plan and where it runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    pub kind: OperatorKind,
    /// DataFusion's name of the operator (`HashJoinExec`, `AggregateExec`, `SortMergeJoinExec`, ...).
    pub operator: String,
    pub on_gpu: bool,
    /// On the GPU: the algorithm. On the CPU: the reasons the rule left it there.
    pub detail: String,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = if self.on_gpu { "GPU" } else { "CPU" };
        write!(f, "{} on the {side}: {}", self.operator, self.detail)
    }
}

fn kind_of(name: &str) -> Option<OperatorKind> {
    if name.ends_with("JoinExec") {
        Some(OperatorKind::Join)
    } else if name == "AggregateExec" {
        Some(OperatorKind::Aggregate)
    } else {
        None
    }
}

/// Every join and aggregate of `plan`, in pre-order.
pub fn placements(plan: &Arc<dyn ExecutionPlan>) -> Vec<Placement> {
    let mut out = Vec::new();
    walk(plan, &mut out);
    out
}

fn walk(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Placement>) {
    // `downcast_ref` sees through a CpuFallbackExec to its child, so ask `Any` directly.
    let any = plan.as_ref() as &dyn Any;
    if let Some(fallback) = any.downcast_ref::<CpuFallbackExec>() {
        let inner = &fallback.children()[0];
        if let Some(kind) = kind_of(inner.name()) {
            let detail = fallback.reasons().iter().map(|r| r.to_string()).collect::<Vec<_>>().join("; ");
            out.push(Placement { kind, operator: inner.name().to_string(), on_gpu: false, detail });
        }
        // The child's own children: the wrapped operator is accounted for above.
        for child in inner.children() {
            walk(child, out);
        }
        return;
    }
    if let Some(join) = any.downcast_ref::<GpuHashJoinExec>() {
        let mut detail = join.algorithm().to_string();
        let sides = super::filter_project::device_computed_sides(plan);
        if !sides.is_empty() {
            detail.push_str(&format!(" ({} input filtered and projected on the GPU)", sides.join(" and ")));
        }
        out.push(Placement { kind: OperatorKind::Join, operator: "HashJoinExec".into(), on_gpu: true, detail });
    } else if let Some(agg) = any.downcast_ref::<GpuAggregateExec>() {
        out.push(Placement {
            kind: OperatorKind::Aggregate,
            operator: "AggregateExec".into(),
            on_gpu: true,
            detail: format!("{} group-by", agg.method_name()),
        });
        // A Final aggregate that merges its partial stage on the device holds both.
        if let Some(partial) = agg.partial_stage() {
            out.push(Placement {
                kind: OperatorKind::Aggregate,
                operator: "AggregateExec".into(),
                on_gpu: true,
                detail: format!("{} group-by, states kept on the device", partial.method_name()),
            });
        }
    } else if let Some(kind) = kind_of(plan.name()) {
        out.push(Placement {
            kind,
            operator: plan.name().to_string(),
            on_gpu: false,
            detail: "not replaced by the GPU rule".into(),
        });
    }
    for child in plan.children() {
        walk(child, out);
    }
}

/// A short summary such as `joins 3/4 GPU (npj×3), aggregates 1/2 GPU (hash×1)`.
pub fn summary(placements: &[Placement]) -> String {
    let part = |kind: OperatorKind, what: &str| {
        let all: Vec<&Placement> = placements.iter().filter(|p| p.kind == kind).collect();
        if all.is_empty() {
            return None;
        }
        let gpu: Vec<&Placement> = all.iter().copied().filter(|p| p.on_gpu).collect();
        let mut algos: Vec<(String, usize)> = Vec::new();
        for p in &gpu {
            let name = p.detail.split_whitespace().next().unwrap_or("").to_string();
            match algos.iter_mut().find(|(a, _)| *a == name) {
                Some((_, n)) => *n += 1,
                None => algos.push((name, 1)),
            }
        }
        let algos = algos.iter().map(|(a, n)| format!("{a}×{n}")).collect::<Vec<_>>().join(" ");
        Some(if gpu.is_empty() {
            format!("{what} 0/{} GPU", all.len())
        } else {
            format!("{what} {}/{} GPU ({algos})", gpu.len(), all.len())
        })
    };
    let parts: Vec<String> =
        [part(OperatorKind::Join, "joins"), part(OperatorKind::Aggregate, "aggs")].into_iter().flatten().collect();
    if parts.is_empty() { "no joins or aggregates".into() } else { parts.join(", ") }
}
