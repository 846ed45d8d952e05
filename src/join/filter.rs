//! Join filters (residual predicates such as TPC-H q21's `l_suppkey <> l_suppkey`) on the GPU.
//!
//! A filter's physical expression is translated into one CUDA kernel (`join_filter`), compiled by
//! NVRTC once per distinct expression and cached like the built-in kernels. The kernel reads the
//! columns it needs at each candidate pair's build and probe rows and keeps the pair when the
//! predicate is TRUE, with SQL's three-valued logic. What it handles, with DataFusion's
//! semantics: columns and literals of integer, date, time, timestamp, duration, Decimal128,
//! Boolean and string types; `= <> < <= > >=`, `IS [NOT] DISTINCT FROM`, `AND`, `OR`, `NOT`,
//! `IS [NOT] NULL`; wrapping integer `+ - *` (DataFusion's default: an expression built to fail
//! on overflow stays on the CPU); widening integer casts. Anything else keeps the join on the
//! CPU, with the reason.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::{JoinSide, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CastExpr, Column, IsNotNullExpr, IsNullExpr, Literal, NotExpr,
};
use datafusion::physical_plan::PhysicalExpr;
use datafusion::physical_plan::joins::utils::ColumnIndex;

/// A column a filter reads: which side, and its index in that side's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterColumn {
    pub build: bool,
    pub index: usize,
    pub data_type: DataType,
}

/// A filter as CUDA source, and the columns its kernel reads (in the order of its `cols`
/// argument: three addresses each, see [`FilterCode::source`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterCode {
    /// `join_filter(const u32* rb, const u32* rp, u64 n, const u64* cols, u8* keep)`: `cols`
    /// holds, per column, its values (or string offsets), its string bytes (or 0) and its
    /// validity (or 0).
    pub source: String,
    pub columns: Vec<FilterColumn>,
}

/// Device value types of the generated code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    I128,
    Bool,
    Str32,
    Str64,
}

impl Ty {
    fn of(dt: &DataType) -> Option<Ty> {
        use DataType::*;
        Some(match dt {
            Int8 => Ty::I8,
            Int16 => Ty::I16,
            Int32 | Date32 | Time32(_) => Ty::I32,
            Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => Ty::I64,
            UInt8 => Ty::U8,
            UInt16 => Ty::U16,
            UInt32 => Ty::U32,
            UInt64 => Ty::U64,
            Decimal128(_, _) => Ty::I128,
            Boolean => Ty::Bool,
            Utf8 => Ty::Str32,
            LargeUtf8 | Utf8View => Ty::Str64,
            _ => return None,
        })
    }

    fn c(self) -> &'static str {
        match self {
            Ty::I8 => "signed char",
            Ty::I16 => "short",
            Ty::I32 => "int",
            Ty::I64 => "long long",
            Ty::U8 => "unsigned char",
            Ty::U16 => "unsigned short",
            Ty::U32 => "unsigned int",
            Ty::U64 => "unsigned long long",
            Ty::I128 => "__int128",
            Ty::Bool => "bool",
            Ty::Str32 | Ty::Str64 => "const u8*",
        }
    }

    /// (bits, signed) of an integer type.
    fn int(self) -> Option<(u32, bool)> {
        Some(match self {
            Ty::I8 => (8, true),
            Ty::I16 => (16, true),
            Ty::I32 => (32, true),
            Ty::I64 => (64, true),
            Ty::U8 => (8, false),
            Ty::U16 => (16, false),
            Ty::U32 => (32, false),
            Ty::U64 => (64, false),
            _ => return None,
        })
    }

    fn is_str(self) -> bool {
        matches!(self, Ty::Str32 | Ty::Str64)
    }
}

fn is_integer(dt: &DataType) -> bool {
    use DataType::*;
    matches!(dt, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64)
}

/// A generated value: its expression, validity, and (strings) length.
#[derive(Debug, Clone)]
struct Val {
    v: String,
    ok: String,
    len: String,
    ty: Ty,
    dt: DataType,
}

struct Gen<'a> {
    schema: &'a Schema,
    indices: &'a [ColumnIndex],
    body: String,
    globals: String,
    columns: Vec<FilterColumn>,
    loaded: HashMap<usize, Val>,
    tmp: usize,
}

type R<T> = std::result::Result<T, String>;

impl Gen<'_> {
    fn fresh(&mut self) -> usize {
        self.tmp += 1;
        self.tmp
    }

    /// Binds `v` and `ok` to new variables, so that later uses do not repeat work.
    fn bind(&mut self, ty: Ty, dt: DataType, v: String, ok: String, len: String) -> Val {
        let t = self.fresh();
        let decl = if ty.is_str() { "const u8* const".to_string() } else { format!("const {}", ty.c()) };
        let _ = writeln!(self.body, "        {decl} v{t} = {v};");
        let _ = writeln!(self.body, "        const bool ok{t} = {ok};");
        let len = if ty.is_str() {
            let _ = writeln!(self.body, "        const u64 len{t} = {len};");
            format!("len{t}")
        } else {
            String::new()
        };
        Val { v: format!("v{t}"), ok: format!("ok{t}"), len, ty, dt }
    }

    fn column(&mut self, c: &Column) -> R<Val> {
        let i = c.index();
        if let Some(v) = self.loaded.get(&i) {
            return Ok(v.clone());
        }
        let ci = self.indices.get(i).ok_or_else(|| format!("filter column {c} is out of range"))?;
        let build = match ci.side {
            JoinSide::Left => true,
            JoinSide::Right => false,
            JoinSide::None => return Err(format!("filter column {c} belongs to neither side")),
        };
        let dt = self.schema.field(i).data_type().clone();
        let ty = Ty::of(&dt).ok_or_else(|| format!("column {c} has type {dt}"))?;
        let j = self.columns.len();
        self.columns.push(FilterColumn { build, index: ci.index, data_type: dt.clone() });
        let row = if build { "rb[k]" } else { "rp[k]" };
        let t = self.fresh();
        let _ = writeln!(self.body, "        const u64 r{t} = {row};");
        let ok = format!("(cols[{}] == 0 || bit_is_set((const u8*)cols[{}], r{t}))", 3 * j + 2, 3 * j + 2);
        let (v, len) = match ty {
            Ty::Bool => (format!("bit_is_set((const u8*)cols[{}], r{t})", 3 * j), String::new()),
            Ty::Str32 | Ty::Str64 => {
                let o = if ty == Ty::Str32 { "i32" } else { "i64" };
                let off = format!("((const {o}*)cols[{}])", 3 * j);
                (
                    format!("(const u8*)cols[{}] + (u64){off}[r{t}]", 3 * j + 1),
                    format!("(u64)({off}[r{t} + 1] - {off}[r{t}])"),
                )
            }
            _ => (format!("((const {}*)cols[{}])[r{t}]", ty.c(), 3 * j), String::new()),
        };
        let val = self.bind(ty, dt, v, ok, len);
        self.loaded.insert(i, val.clone());
        Ok(val)
    }

    fn literal(&mut self, s: &ScalarValue) -> R<Val> {
        let dt = s.data_type();
        let ty = Ty::of(&dt).ok_or_else(|| format!("literal {s} has type {dt}"))?;
        if s.is_null() {
            let zero = match ty {
                Ty::Str32 | Ty::Str64 => "(const u8*)0".to_string(),
                Ty::Bool => "false".into(),
                _ => format!("({})0", ty.c()),
            };
            return Ok(self.bind(ty, dt, zero, "false".into(), "0".into()));
        }
        let bits = |v: u64| format!("(({})0x{v:x}ull)", ty.c());
        let v = match s {
            ScalarValue::Boolean(Some(b)) => b.to_string(),
            ScalarValue::Int8(Some(v)) => bits(*v as u8 as u64),
            ScalarValue::Int16(Some(v)) => bits(*v as u16 as u64),
            ScalarValue::Int32(Some(v)) | ScalarValue::Date32(Some(v)) => bits(*v as u32 as u64),
            ScalarValue::Int64(Some(v))
            | ScalarValue::Date64(Some(v))
            | ScalarValue::TimestampSecond(Some(v), _)
            | ScalarValue::TimestampMillisecond(Some(v), _)
            | ScalarValue::TimestampMicrosecond(Some(v), _)
            | ScalarValue::TimestampNanosecond(Some(v), _) => bits(*v as u64),
            ScalarValue::UInt8(Some(v)) => bits(*v as u64),
            ScalarValue::UInt16(Some(v)) => bits(*v as u64),
            ScalarValue::UInt32(Some(v)) => bits(*v as u64),
            ScalarValue::UInt64(Some(v)) => bits(*v),
            ScalarValue::Decimal128(Some(v), _, _) => {
                let u = *v as u128;
                format!(
                    "((__int128)(((unsigned __int128)0x{:x}ull << 64) | (unsigned __int128)0x{:x}ull))",
                    (u >> 64) as u64,
                    u as u64
                )
            }
            ScalarValue::Utf8(Some(text)) | ScalarValue::LargeUtf8(Some(text)) | ScalarValue::Utf8View(Some(text)) => {
                let t = self.fresh();
                let bytes = text.as_bytes();
                let list = if bytes.is_empty() {
                    "0".to_string()
                } else {
                    bytes.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(",")
                };
                let _ = writeln!(self.globals, "__device__ const u8 lit{t}[] = {{{list}}};");
                return Ok(self.bind(ty, dt, format!("lit{t}"), "true".into(), bytes.len().to_string()));
            }
            other => return Err(format!("literal {other} of type {dt}")),
        };
        Ok(self.bind(ty, dt, v, "true".into(), String::new()))
    }

    fn expr(&mut self, e: &Arc<dyn PhysicalExpr>) -> R<Val> {
        if let Some(c) = e.downcast_ref::<Column>() {
            return self.column(c);
        }
        if let Some(l) = e.downcast_ref::<Literal>() {
            return self.literal(l.value());
        }
        if let Some(n) = e.downcast_ref::<NotExpr>() {
            let a = self.expr(n.arg())?;
            if a.ty != Ty::Bool {
                return Err(format!("NOT of a {} value", a.dt));
            }
            return Ok(self.bind(Ty::Bool, DataType::Boolean, format!("!{}", a.v), a.ok, String::new()));
        }
        if let Some(n) = e.downcast_ref::<IsNullExpr>() {
            let a = self.expr(n.arg())?;
            return Ok(self.bind(Ty::Bool, DataType::Boolean, format!("!{}", a.ok), "true".into(), String::new()));
        }
        if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
            let a = self.expr(n.arg())?;
            return Ok(self.bind(Ty::Bool, DataType::Boolean, a.ok.clone(), "true".into(), String::new()));
        }
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            let a = self.expr(c.expr())?;
            let to = c.cast_type();
            if &a.dt == to {
                return Ok(a);
            }
            let target = Ty::of(to).ok_or_else(|| format!("a cast to {to}"))?;
            let widening = match (a.ty.int(), target.int()) {
                (Some((fb, fs)), Some((tb, ts))) => (fs == ts && tb >= fb) || (!fs && ts && tb > fb),
                _ => false,
            };
            if !widening || !is_integer(to) {
                return Err(format!("a cast from {} to {to}", a.dt));
            }
            return Ok(self.bind(target, to.clone(), format!("({}){}", target.c(), a.v), a.ok, String::new()));
        }
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            return self.binary(b);
        }
        Err(format!("expression `{e}` is not supported on the GPU"))
    }

    /// `a == b` as C, for two values of one type.
    fn equal(a: &Val, b: &Val) -> String {
        if a.ty.is_str() {
            format!("(str_cmp({}, {}, {}, {}) == 0)", a.v, a.len, b.v, b.len)
        } else {
            format!("({} == {})", a.v, b.v)
        }
    }

    fn binary(&mut self, b: &BinaryExpr) -> R<Val> {
        let op = *b.op();
        let l = self.expr(b.left())?;
        let r = self.expr(b.right())?;
        let same = l.dt == r.dt || (l.ty.is_str() && r.ty.is_str());
        let both = format!("({} && {})", l.ok, r.ok);
        let cmp = |sym: &str| -> R<String> {
            if !same {
                return Err(format!("a comparison of {} with {}", l.dt, r.dt));
            }
            Ok(if l.ty.is_str() {
                format!("(str_cmp({}, {}, {}, {}) {sym} 0)", l.v, l.len, r.v, r.len)
            } else if l.ty == Ty::Bool {
                format!("((int){} {sym} (int){})", l.v, r.v)
            } else {
                format!("({} {sym} {})", l.v, r.v)
            })
        };
        let (v, ok) = match op {
            Operator::Eq => (cmp("==")?, both),
            Operator::NotEq => (cmp("!=")?, both),
            Operator::Lt => (cmp("<")?, both),
            Operator::LtEq => (cmp("<=")?, both),
            Operator::Gt => (cmp(">")?, both),
            Operator::GtEq => (cmp(">=")?, both),
            Operator::IsDistinctFrom | Operator::IsNotDistinctFrom => {
                if !same {
                    return Err(format!("a comparison of {} with {}", l.dt, r.dt));
                }
                let eq = Self::equal(&l, &r);
                let distinct = format!("(({} != {}) || ({} && !{eq}))", l.ok, r.ok, both);
                let v = if op == Operator::IsDistinctFrom { distinct } else { format!("!{distinct}") };
                (v, "true".to_string())
            }
            Operator::And | Operator::Or => {
                if l.ty != Ty::Bool || r.ty != Ty::Bool {
                    return Err(format!("{op} of {} and {}", l.dt, r.dt));
                }
                // Kleene logic: a definite FALSE (AND) or TRUE (OR) on either side decides.
                let (lv, rv) = (format!("({} && {})", l.ok, l.v), format!("({} && {})", r.ok, r.v));
                let (lf, rf) = (format!("({} && !{})", l.ok, l.v), format!("({} && !{})", r.ok, r.v));
                if op == Operator::And {
                    (format!("({lv} && {rv})"), format!("({lf} || {rf} || {both})"))
                } else {
                    (format!("({lv} || {rv})"), format!("({lv} || {rv} || {both})"))
                }
            }
            Operator::Plus | Operator::Minus | Operator::Multiply => {
                let Some((bits, _)) = l.ty.int() else {
                    return Err(format!("{op} of {} values", l.dt));
                };
                if l.dt != r.dt || !is_integer(&l.dt) {
                    return Err(format!("{op} of {} and {}", l.dt, r.dt));
                }
                // DataFusion wraps on overflow unless the expression was built to fail.
                let plain = BinaryExpr::new(Arc::clone(b.left()), op, Arc::clone(b.right()));
                if plain != *b {
                    return Err(format!("{op} that fails on overflow"));
                }
                let sym = match op {
                    Operator::Plus => "+",
                    Operator::Minus => "-",
                    _ => "*",
                };
                // Unsigned arithmetic wraps without undefined behaviour; the cast back truncates.
                let wide = if bits == 64 { "unsigned long long" } else { "unsigned int" };
                let v = format!("({})(({wide}){} {sym} ({wide}){})", l.ty.c(), l.v, r.v);
                return Ok(self.bind(l.ty, l.dt.clone(), v, both, String::new()));
            }
            other => return Err(format!("operator {other}")),
        };
        Ok(self.bind(Ty::Bool, DataType::Boolean, v, ok, String::new()))
    }
}

/// The kernel of a join filter `expr` over its intermediate `schema`, whose columns come from the
/// join's inputs as `indices` say; or why it cannot run on the GPU.
pub fn generate(expr: &Arc<dyn PhysicalExpr>, schema: &Schema, indices: &[ColumnIndex]) -> R<FilterCode> {
    let mut g = Gen {
        schema,
        indices,
        body: String::new(),
        globals: String::new(),
        columns: Vec::new(),
        loaded: HashMap::new(),
        tmp: 0,
    };
    let top = g.expr(expr)?;
    if top.ty != Ty::Bool {
        return Err(format!("the filter has type {}", top.dt));
    }
    let source = format!(
        r#"// A join filter, generated from `{expr}` (src/join/filter.rs).
#include "common.cuh"

__device__ __forceinline__ int str_cmp(const u8* a, u64 al, const u8* b, u64 bl) {{
    const u64 m = al < bl ? al : bl;
    for (u64 i = 0; i < m; i++) {{
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    }}
    return al < bl ? -1 : (al > bl ? 1 : 0);
}}

{globals}
extern "C" __global__ void join_filter(const u32* __restrict__ rb, const u32* __restrict__ rp, u64 n, const u64* __restrict__ cols,
                                       u8* __restrict__ keep) {{
    for (u64 k = global_thread_id(); k < n; k += grid_stride()) {{
{body}        keep[k] = {ok} && {v};
    }}
}}
"#,
        expr = expr.to_string().replace('\n', " ").replace("*/", "* /"),
        globals = g.globals,
        body = g.body,
        ok = top.ok,
        v = top.v,
    );
    Ok(FilterCode { source, columns: g.columns })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::{binary, col, is_null, lit, not};

    use super::*;

    fn schema() -> (Schema, Vec<ColumnIndex>) {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
            Field::new("d", DataType::Decimal128(12, 2), true),
        ]);
        let idx = vec![
            ColumnIndex { index: 3, side: JoinSide::Left },
            ColumnIndex { index: 1, side: JoinSide::Right },
            ColumnIndex { index: 0, side: JoinSide::Left },
            ColumnIndex { index: 2, side: JoinSide::Right },
            ColumnIndex { index: 5, side: JoinSide::Right },
        ];
        (schema, idx)
    }

    #[test]
    fn supported_filters_generate_a_kernel_reading_their_columns() {
        let (s, idx) = schema();
        let e = binary(
            binary(col("a", &s).unwrap(), Operator::NotEq, col("b", &s).unwrap(), &s).unwrap(),
            Operator::And,
            not(is_null(col("s", &s).unwrap()).unwrap()).unwrap(),
            &s,
        )
        .unwrap();
        let code = generate(&e, &s, &idx).unwrap();
        assert!(code.source.contains("extern \"C\" __global__ void join_filter"), "{}", code.source);
        assert_eq!(
            code.columns,
            vec![
                FilterColumn { build: true, index: 3, data_type: DataType::Int32 },
                FilterColumn { build: false, index: 1, data_type: DataType::Int32 },
                FilterColumn { build: true, index: 0, data_type: DataType::Utf8 },
            ]
        );
        // A decimal comparison with a literal and a string literal compile to constants.
        let e =
            binary(col("d", &s).unwrap(), Operator::Gt, lit(ScalarValue::Decimal128(Some(-12345), 12, 2)), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap().source.contains("__int128"));
        let e = binary(col("s", &s).unwrap(), Operator::Lt, lit("é"), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap().source.contains("lit"));
    }

    #[test]
    fn unsupported_filters_say_why() {
        let (s, idx) = schema();
        let float = binary(col("f", &s).unwrap(), Operator::Gt, lit(1.5f64), &s).unwrap();
        assert!(generate(&float, &s, &idx).unwrap_err().contains("Float64"));
        let div = binary(
            binary(col("a", &s).unwrap(), Operator::Divide, col("b", &s).unwrap(), &s).unwrap(),
            Operator::Gt,
            lit(1i32),
            &s,
        )
        .unwrap();
        assert!(generate(&div, &s, &idx).unwrap_err().contains("operator /"));
        let checked = Arc::new(
            BinaryExpr::new(col("a", &s).unwrap(), Operator::Plus, col("b", &s).unwrap()).with_fail_on_overflow(true),
        ) as Arc<dyn PhysicalExpr>;
        let e = binary(checked, Operator::Gt, lit(1i32), &s).unwrap();
        assert!(generate(&e, &s, &idx).unwrap_err().contains("fails on overflow"));
    }
}
