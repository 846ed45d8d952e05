//! A filter and projection evaluated on the device: the rows of an uploaded batch that pass every
//! predicate, and the output columns computed from them, as DataFusion's `FilterExec` and
//! `ProjectionExec` would give them.
//!
//! Two generated kernels (see [`super::codegen`]): `expr_filter` writes a flag per row (TRUE
//! predicates only, as `FilterExec` keeps), the selection primitive compacts the flags into row
//! ids, and `expr_project` evaluates every computed output at the selected rows, writing values,
//! validity (one warp ballot per 32 rows) and null counts. Computed strings take two launches of
//! `expr_project`: the first writes each row's length, a prefix sum makes them offsets, and the
//! second copies the bytes there. Outputs that are plain columns are gathered at the selected
//! rows (or passed through when nothing was filtered).

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::fmt::Write as _;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::PhysicalExpr;

use super::codegen::{ColumnRead, DeferredLiteral, Gen, HELPERS, R, Ty, resolve_literals, severity, worse};
use super::{expression_outcome, upload_column_addresses, upload_literals};
use crate::columns::{DeviceColumn, is_supported};
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::materialize::{GatherSpec, can_gather, gather_columns};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::{bitmap_bytes, select_where};
use crate::primitives::upload_slice;

/// How one output column is made.
#[derive(Debug, Clone)]
enum Output {
    /// The uploaded column at this position.
    Pass(usize),
    /// Output `i` of the projection kernel, of this value type.
    Computed { index: usize, ty: Ty, nullable: bool },
}

#[derive(Debug, Clone)]
struct Kernel {
    source: String,
    may_fail: bool,
    /// The values of its literals, read by the kernel from its `lits` parameter.
    literals: Vec<u64>,
    /// Those of its literals known only when the query runs.
    deferred: Vec<DeferredLiteral>,
}

impl Kernel {
    /// Its literals, uploaded, with the deferred ones' values as they are now.
    fn literals(&self, gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<Option<DeviceBuffer>> {
        upload_literals(gpu, stream, &resolve_literals(&self.literals, &self.deferred)?)
    }
}

/// A filter and projection compiled for the device.
#[derive(Debug, Clone)]
pub struct DeviceProjection {
    /// The input columns the kernels read, in upload order (indices into the input schema).
    pub inputs: Vec<usize>,
    /// The schema of the uploaded columns (the input schema projected to `inputs`).
    pub upload_schema: SchemaRef,
    /// The schema of the result.
    pub output_schema: SchemaRef,
    outputs: Vec<Output>,
    filter: Option<Kernel>,
    project: Option<Kernel>,
    computed: usize,
}

fn slot_of(inputs: &mut Vec<usize>, index: usize) -> usize {
    match inputs.iter().position(|&i| i == index) {
        Some(p) => p,
        None => {
            inputs.push(index);
            inputs.len() - 1
        }
    }
}

impl DeviceProjection {
    /// The rows of an `input`-shaped batch for which every predicate is TRUE, projected to
    /// `outputs` (each expression with the field it must produce); or why the GPU cannot.
    pub fn try_new(
        input: &Schema,
        predicates: &[Arc<dyn PhysicalExpr>],
        outputs: &[(Arc<dyn PhysicalExpr>, Field)],
    ) -> R<DeviceProjection> {
        let mut inputs: Vec<usize> = Vec::new();

        let filter = if predicates.is_empty() {
            None
        } else {
            let mut read = |c: &Column| -> R<ColumnRead> {
                Ok(ColumnRead { slot: slot_of(&mut inputs, c.index()), row: "k".into() })
            };
            let mut g = Gen::new(input, &mut read);
            let mut keep = Vec::new();
            let mut failed = "false".to_string();
            // The predicates are listed from the top filter down, and DataFusion evaluates each
            // one on the rows the filters below it kept: a predicate's failure counts there.
            for p in predicates.iter().rev() {
                let v = g.expr(p)?;
                if v.ty != Ty::Bool {
                    return not_impl_err!("the predicate `{p}` has type {}", v.dt);
                }
                if v.err != "false" {
                    let err = match keep.is_empty() {
                        true => v.err.clone(),
                        false => format!("(({}) ? {} : 0u)", keep.join(" && "), v.err),
                    };
                    failed = worse(&failed, &err);
                }
                keep.push(format!("({} && {})", v.ok, v.v));
            }
            let may_fail = failed != "false";
            let failed = severity(&failed).to_string();
            // The source holds no SQL text: no names, and literals only as numbers and byte values,
            // so that nothing a query says reaches the compiler or the kernel cache as code.
            let source = format!(
                r#"// A filter of {count} predicate(s), generated by src/expr/project.rs.
#include "common.cuh"
{HELPERS}
{globals}
extern "C" __global__ void expr_filter(u64 n, const u64* __restrict__ cols, const u64* __restrict__ lits, u8* __restrict__ keep,
                                       u32* __restrict__ err) {{
    u32 failed = 0;
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {{
{body}        keep[k] = {keep};
        failed = sev_max(failed, {failed});
    }}
    if (failed) atomicMax(err, failed);
}}
"#,
                count = predicates.len(),
                globals = g.globals,
                body = g.body,
                keep = keep.join(" && "),
            );
            Some(Kernel {
                source,
                may_fail,
                literals: std::mem::take(&mut g.literals),
                deferred: std::mem::take(&mut g.deferred),
            })
        };

        let mut plan = Vec::with_capacity(outputs.len());
        // The computed outputs (counted in the kernel's comment; their SQL text is not in the source).
        let mut computed: Vec<String> = Vec::new();
        let mut writes = String::new();
        let mut errs = Vec::new();
        let mut columns_read: Vec<usize> = inputs.clone();
        let mut read = |c: &Column| -> R<ColumnRead> {
            Ok(ColumnRead { slot: slot_of(&mut columns_read, c.index()), row: "row".into() })
        };
        let mut g = Gen::new(input, &mut read);
        let mut pass = Vec::new();
        for (e, field) in outputs {
            let dt = e.data_type(input).map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?;
            if &dt != field.data_type() {
                return not_impl_err!("`{e}` has type {dt}, not {}", field.data_type());
            }
            if let Some(c) = e.downcast_ref::<Column>() {
                if !can_gather(&dt) || !is_supported(&dt) {
                    return not_impl_err!("column `{c}` of type {dt} cannot be gathered on the GPU");
                }
                pass.push((plan.len(), c.index()));
                plan.push(None);
                continue;
            }
            let v = g.expr(e)?;
            let i = computed.len();
            let nullable = e.nullable(input).map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?;
            let _ = writeln!(writes, "        {{ const bool okv = in && {};", v.ok);
            if v.ty.is_str() {
                // outs[4i + 2] holds each row's length (launch 0), then its offset (launch 1).
                let o = if v.ty == Ty::Str32 { "int" } else { "long long" };
                let _ = writeln!(
                    writes,
                    "          const u64 len = okv ? (u64)({len}) : 0;\n          u64* const at = (u64*)outs[{a}];\n          if (phase == 0) {{ if (in) at[k] = len; }}\n          else if (in) {{ {o}* const offsets = ({o}*)outs[{off}]; offsets[k] = ({o})at[k]; if (k == n - 1) offsets[n] = ({o})at[n]; u8* const to = (u8*)outs[{b}] + at[k]; for (u64 j = 0; j < len; j++) to[j] = ({v})[j]; }}",
                    len = v.len,
                    a = 4 * i + 2,
                    off = 4 * i,
                    b = 4 * i + 3,
                    v = v.v,
                );
            } else if v.ty == Ty::Bool {
                let _ = writeln!(
                    writes,
                    "          const u32 bits = __ballot_sync(0xffffffffu, okv && {});\n          if (phase == 1 && lane == 0) ((u32*)outs[{}])[base >> 5] = bits;",
                    v.v,
                    4 * i
                );
            } else {
                let _ = writeln!(
                    writes,
                    "          if (phase == 1 && in) (({t}*)outs[{}])[k] = okv ? ({t}){} : ({t})0;",
                    4 * i,
                    v.v,
                    t = v.ty.c()
                );
            }
            if nullable {
                let _ = writeln!(
                    writes,
                    "          const u32 valid = __ballot_sync(0xffffffffu, okv);\n          if (phase == 1 && lane == 0) {{ ((u32*)outs[{o}])[base >> 5] = valid; const u32 lanes = n - base >= 32 ? 0xffffffffu : ((1u << (n - base)) - 1u); const u32 missing = __popc(lanes & ~valid); if (missing) atomicAdd(&nulls[{i}], (u64)missing); }}",
                    o = 4 * i + 1
                );
            }
            let _ = writeln!(writes, "        }}");
            if v.err != "false" {
                errs.push(format!("(in ? {} : 0u)", v.err));
            }
            computed.push(e.to_string());
            plan.push(Some(Output::Computed { index: i, ty: v.ty, nullable }));
        }
        let (globals, body, literals, deferred) = (
            std::mem::take(&mut g.globals),
            std::mem::take(&mut g.body),
            std::mem::take(&mut g.literals),
            std::mem::take(&mut g.deferred),
        );
        drop(g);
        for (p, index) in pass {
            plan[p] = Some(Output::Pass(slot_of(&mut columns_read, index)));
        }
        inputs = columns_read;
        let project = if computed.is_empty() {
            None
        } else {
            let source = format!(
                r#"// A projection of {count} computed column(s), generated by src/expr/project.rs.
#include "common.cuh"
{HELPERS}
{globals}
// Rows k < n of the output, read at row sel[k] of the input (k without a selection). Every lane
// of a warp runs each iteration so that the warp's ballots cover 32 consecutive rows. Four words
// of outs per output: values (string offsets), validity, string lengths then offsets as u64, and
// string bytes. Launch (phase) 0 writes the strings' lengths only; launch 1 writes the rest.
extern "C" __global__ void expr_project(u64 n, const u32* __restrict__ sel, const u64* __restrict__ cols,
                                        const u64* __restrict__ lits, const u64* __restrict__ outs,
                                        u64* __restrict__ nulls, u32* __restrict__ err, u32 phase) {{
    const u32 lane = threadIdx.x & 31;
    u32 failed = 0;
    for (u64 base = global_thread_id() - lane; base < n; base += grid_stride()) {{
        const u64 k = base + lane;
        const bool in = k < n;
        const u64 row = in ? (sel ? (u64)sel[k] : k) : (sel ? (u64)sel[0] : 0);
{body}{writes}        failed = sev_max(failed, {failed});
    }}
    if (failed) atomicMax(err, failed);
}}
"#,
                count = computed.len(),
                failed = severity(&errs.iter().fold("false".to_string(), |a, e| worse(&a, e))),
            );
            Some(Kernel { source, may_fail: !errs.is_empty(), literals, deferred })
        };
        let outputs_plan = plan
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| datafusion::error::DataFusionError::Internal("an output was not planned".into()))?;
        let fields: Vec<Field> = inputs.iter().map(|&i| input.field(i).clone()).collect();
        for f in &fields {
            if !is_supported(f.data_type()) {
                return not_impl_err!("input `{}` of type {} cannot be uploaded", f.name(), f.data_type());
            }
        }
        Ok(DeviceProjection {
            inputs,
            upload_schema: Arc::new(Schema::new(fields)),
            output_schema: Arc::new(Schema::new(outputs.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>())),
            outputs: outputs_plan,
            filter,
            project,
            computed: computed.len(),
        })
    }

    /// The result over the uploaded columns `cols` (in [`Self::inputs`] order) of `n` rows: the
    /// output columns and their row count.
    pub fn evaluate(
        &self,
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        cols: &[Arc<DeviceColumn>],
        n: u64,
    ) -> Result<(Vec<Arc<DeviceColumn>>, u64)> {
        if cols.len() != self.inputs.len() {
            return Err(gpu_error(format!("a projection over {} columns got {}", self.inputs.len(), cols.len())));
        }
        let read: Vec<&DeviceColumn> = cols.iter().map(|c| c.as_ref()).collect();
        let addresses = upload_column_addresses(gpu, stream, &read, "projection columns")?;
        let err = gpu.alloc_filled(stream, 4, 0, "projection error flag")?;
        let grid = |n: u64| crate::device::grid_for(n, 256, gpu.info().sm_count);

        let (sel, m): (Option<DeviceBuffer>, u64) = match &self.filter {
            None => (None, n),
            Some(k) => {
                let keep = gpu.alloc(stream, n as usize, "filter flags")?;
                if n > 0 {
                    let f = gpu.kernels().generated_function("expr", &k.source, "expr_filter")?;
                    let lits = k.literals(gpu, stream)?;
                    // expr_filter(u64 n, const u64* cols, const u64* lits, u8* keep, u32* err)
                    gpu.launch_function(
                        stream,
                        &f,
                        "expr_filter",
                        grid(n),
                        &[
                            KArg::U64(n),
                            ptr(&addresses, stream),
                            opt_ptr(lits.as_ref(), stream),
                            ptr(&keep, stream),
                            ptr(&err, stream),
                        ],
                    )?;
                    if k.may_fail {
                        expression_outcome(gpu.read::<u32>(stream, &err, 0, 1)?[0])?;
                    }
                }
                let (sel, m) = select_where(gpu, stream, &keep, n, 1)?;
                (Some(sel), m as u64)
            }
        };

        let mut computed: Vec<Option<DeviceColumn>> = (0..self.computed).map(|_| None).collect();
        if let Some(k) = &self.project {
            let mut outs: Vec<u64> = Vec::with_capacity(4 * self.computed);
            // Per computed string: its index in `computed`, its offsets' width and its lengths.
            let mut strings: Vec<(usize, usize, DeviceBuffer)> = Vec::new();
            for (p, o) in self.outputs.iter().enumerate() {
                if let Output::Computed { index, ty, nullable } = *o {
                    let dt = self.output_schema.field(p).data_type().clone();
                    let values = match (ty.width(), ty) {
                        (Some(w), _) => gpu.alloc(stream, m as usize * w, "a computed column")?,
                        (None, Ty::Str32) => gpu.alloc_filled(stream, (m as usize + 1) * 4, 0, "computed strings")?,
                        (None, Ty::Str64) => gpu.alloc_filled(stream, (m as usize + 1) * 8, 0, "computed strings")?,
                        (None, _) => gpu.alloc(stream, bitmap_bytes(m), "a computed column")?,
                    };
                    let validity =
                        if nullable { Some(gpu.alloc(stream, bitmap_bytes(m), "a computed validity")?) } else { None };
                    outs.push(values.raw_ptr(stream));
                    outs.push(validity.as_ref().map_or(0, |v| v.raw_ptr(stream)));
                    if ty.is_str() {
                        // Each row's length, the last word 0 so that the prefix sum ends with the total.
                        let lengths = gpu.alloc_filled(stream, (m as usize + 1) * 8, 0, "computed string lengths")?;
                        outs.push(lengths.raw_ptr(stream));
                        outs.push(0);
                        strings.push((index, if ty == Ty::Str32 { 4 } else { 8 }, lengths));
                    } else {
                        outs.extend([0, 0]);
                    }
                    computed[index] = Some(DeviceColumn {
                        data_type: dt,
                        len: m as usize,
                        null_count: 0,
                        validity,
                        buffers: vec![values],
                        children: vec![],
                    });
                }
            }
            let nulls = gpu.alloc_filled(stream, self.computed * 8, 0, "projection null counts")?;
            if m > 0 {
                let f = gpu.kernels().generated_function("expr", &k.source, "expr_project")?;
                let lits = k.literals(gpu, stream)?;
                let sel_arg = match &sel {
                    Some(s) => ptr(s, stream),
                    None => KArg::U64(0),
                };
                let addresses = &addresses;
                // expr_project(u64 n, const u32* sel, const u64* cols, const u64* lits, const u64* outs,
                //              u64* nulls, u32* err, u32 phase)
                let launch = |outs: &DeviceBuffer, phase: u32| {
                    gpu.launch_function(
                        stream,
                        &f,
                        "expr_project",
                        grid(m),
                        &[
                            KArg::U64(m),
                            sel_arg,
                            ptr(addresses, stream),
                            opt_ptr(lits.as_ref(), stream),
                            ptr(outs, stream),
                            ptr(&nulls, stream),
                            ptr(&err, stream),
                            KArg::U32(phase),
                        ],
                    )
                };
                // What the launches read, kept until the null counts are read back (which waits for them).
                let mut kept: Vec<DeviceBuffer> = Vec::new();
                if !strings.is_empty() {
                    // Launch 0: the lengths; their prefix sums become the offsets, and the totals
                    // the sizes of the byte buffers.
                    let first = upload_slice(gpu, stream, &outs, "projection outputs")?;
                    launch(&first, 0)?;
                    kept.push(first);
                    for (index, width, lengths) in std::mem::take(&mut strings) {
                        let (at, total) = exclusive_scan(gpu, stream, &lengths, m + 1, ScanKind::U64, true)?;
                        let total = match total {
                            Some(t) => gpu.read::<u64>(stream, &t, 0, 1)?[0],
                            None => return Err(gpu_error("a prefix sum gave no total")),
                        };
                        if width == 4 && total > i32::MAX as u64 {
                            return Err(gpu_error(format!(
                                "a computed Utf8 column of {total} bytes passes the 2 GiB that 32-bit offsets address; cast it to LargeUtf8"
                            )));
                        }
                        let bytes = gpu.alloc(stream, total as usize, "computed string bytes")?;
                        // The outputs' words are in the order of their computed indices.
                        outs[4 * index + 2] = at.raw_ptr(stream);
                        outs[4 * index + 3] = bytes.raw_ptr(stream);
                        kept.extend([lengths, at]);
                        if let Some(col) = computed[index].as_mut() {
                            col.buffers.push(bytes);
                        }
                    }
                }
                let outs = upload_slice(gpu, stream, &outs, "projection outputs")?;
                launch(&outs, 1)?;
                let counts = gpu.read::<u64>(stream, &nulls, 0, self.computed)?;
                drop(kept);
                if k.may_fail {
                    expression_outcome(gpu.read::<u32>(stream, &err, 0, 1)?[0])?;
                }
                for (col, nulls) in computed.iter_mut().zip(counts) {
                    if let Some(col) = col {
                        col.null_count = nulls as usize;
                        if nulls == 0 {
                            col.validity = None;
                        }
                    }
                }
            } else {
                for col in computed.iter_mut().flatten() {
                    col.validity = None;
                    if Ty::of(&col.data_type).is_some_and(Ty::is_str) {
                        col.buffers.push(gpu.alloc(stream, 0, "computed string bytes")?);
                    }
                }
            }
        }

        // Plain columns: gathered at the selected rows, or the uploaded column itself.
        let mut passed: Vec<Option<Arc<DeviceColumn>>> = vec![None; self.outputs.len()];
        match &sel {
            None => {
                for (p, o) in self.outputs.iter().enumerate() {
                    if let Output::Pass(i) = *o {
                        passed[p] = Some(Arc::clone(&cols[i]));
                    }
                }
            }
            Some(rows) => {
                let which: Vec<(usize, usize)> = self
                    .outputs
                    .iter()
                    .enumerate()
                    .filter_map(|(p, o)| if let Output::Pass(i) = *o { Some((p, i)) } else { None })
                    .collect();
                let specs = which
                    .iter()
                    .map(|&(_, i)| GatherSpec::Rows { col: cols[i].as_ref(), rows, may_be_null: false })
                    .collect();
                let gathered = gather_columns(gpu, stream, specs, m)?;
                for ((p, _), col) in which.into_iter().zip(gathered) {
                    passed[p] = Some(Arc::new(col));
                }
            }
        }
        let mut out = Vec::with_capacity(self.outputs.len());
        for (p, o) in self.outputs.iter().enumerate() {
            out.push(
                match *o {
                    Output::Pass(_) => passed[p].take(),
                    Output::Computed { index, .. } => computed[index].take().map(Arc::new),
                }
                .ok_or_else(|| gpu_error("a projection output was not built"))?,
            );
        }
        Ok((out, m))
    }
}
