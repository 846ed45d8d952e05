//! Physical expressions as CUDA C++: one straight-line block per row, with SQL's three-valued
//! logic and DataFusion's (arrow's) semantics for every construct it accepts. The join filter
//! ([`crate::join::filter`]) and the GPU projection ([`super::project`]) generate their kernels
//! with it; how a column is read is theirs to say (a join filter reads a candidate pair's build
//! and probe rows, a projection its own row).
//!
//! What it handles: columns and literals of integer, date, time, timestamp, duration,
//! Decimal128, Float64, Boolean and string types (floats compare as DataFusion compares them: arrow's
//! total order, where NaN equals NaN and is the largest value, after -0 is made +0; `CASE x WHEN`
//! keeps -0 < +0); `= <> < <= > >=`, `IS [NOT] DISTINCT FROM`, `AND`, `OR`,
//! `NOT`, `IS [NOT] NULL`, `[NOT] IN (literals)`, `CASE`; wrapping integer `+ - *` (DataFusion's
//! default; an expression built to fail on overflow is refused); Decimal128 `+ - *` with arrow's
//! scales and its error on 128-bit overflow (reported through the kernel's error flag);
//! Float64 `+ - *` (IEEE, as on the CPU); widening integer casts, integer to decimal casts that
//! cannot overflow, decimal casts to an equal or larger scale (with arrow's error, or NULL for a
//! safe cast, where the value exceeds the target precision), integer and decimal to Float64 casts (arrow's
//! conversion: a decimal divided by its power of ten), Float64 to decimal casts of scale 0 to 22 (arrow's:
//! the value times the power of ten, rounded half away from zero, with its error or NULL past the
//! precision); `[NOT] LIKE` with a literal pattern whose
//! only wildcard is `%` (arrow's matching, byte for byte: a pattern of literal runs between `%`s
//! matches where the runs appear in order, the first at the start and the last at the end unless
//! a `%` stands there; patterns with `_` or `\` escapes, and ILIKE, stay on the CPU);
//! `date_part` (EXTRACT) of the year, month or day of a Date32 (chrono's proleptic Gregorian
//! calendar, NULL outside chrono's range, as arrow gives); `substr` (SUBSTRING) with literal
//! start and length, counted in characters as DataFusion counts them (a view into the string's
//! bytes, no copy); the value of a scalar subquery, read from the kernel's literals once
//! `ScalarSubqueryExec` has computed it ([`DeferredLiteral`]). Anything else is refused with the
//! reason.

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::array::temporal_conversions::date32_to_datetime;
use datafusion::arrow::compute::kernels::cast_utils::IntervalUnit;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, LikeExpr, Literal, NotExpr,
};
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_plan::PhysicalExpr;

pub type R<T> = crate::error::Result<T>;

/// Device value types of the generated code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    I128,
    F64,
    Bool,
    Str32,
    Str64,
}

impl Ty {
    pub fn of(dt: &DataType) -> Option<Ty> {
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
            Float64 => Ty::F64,
            Boolean => Ty::Bool,
            Utf8 => Ty::Str32,
            LargeUtf8 | Utf8View => Ty::Str64,
            _ => return None,
        })
    }

    pub fn c(self) -> &'static str {
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
            Ty::F64 => "double",
            Ty::Bool => "bool",
            Ty::Str32 | Ty::Str64 => "const u8*",
        }
    }

    /// Bytes of a fixed-width value (None for Boolean and strings).
    pub fn width(self) -> Option<usize> {
        Some(match self {
            Ty::I8 | Ty::U8 => 1,
            Ty::I16 | Ty::U16 => 2,
            Ty::I32 | Ty::U32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
            Ty::I128 => 16,
            Ty::Bool | Ty::Str32 | Ty::Str64 => return None,
        })
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

    pub fn is_str(self) -> bool {
        matches!(self, Ty::Str32 | Ty::Str64)
    }
}

fn is_integer(dt: &DataType) -> bool {
    use DataType::*;
    matches!(dt, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64)
}

/// Decimal digits every value of an integer type fits in.
fn integer_digits(dt: &DataType) -> Option<u8> {
    use DataType::*;
    Some(match dt {
        Int8 | UInt8 => 3,
        Int16 | UInt16 => 5,
        Int32 | UInt32 => 10,
        Int64 => 19,
        UInt64 => 20,
        _ => return None,
    })
}

/// A generated value: its expression, validity, (strings) length, and whether computing it
/// failed (arrow returns an error there, e.g. decimal overflow).
///
/// `err` is a C expression of type `u32`, a row's error severity: 0 none, [`MAY_FAIL`] where
/// DataFusion evaluates the failing part on that row only in some batches (the right side of an
/// `AND` or `OR` whose left side decides the row), [`FAILS`] where DataFusion always evaluates it
/// and fails. `"false"` stands for an expression that never fails.
#[derive(Debug, Clone)]
pub struct Val {
    pub v: String,
    pub ok: String,
    pub len: String,
    pub err: String,
    pub ty: Ty,
    pub dt: DataType,
}

/// A row's error severity ([`Val::err`]): DataFusion may fail on it, depending on its batches.
pub const MAY_FAIL: u32 = 1;
/// A row's error severity ([`Val::err`]): DataFusion fails on it.
pub const FAILS: u32 = 2;

/// `err` ([`Val::err`]) as a C `u32` expression.
pub fn severity(err: &str) -> &str {
    if err == "false" { "0u" } else { err }
}

/// The larger of two severities ([`Val::err`]).
pub fn worse(a: &str, b: &str) -> String {
    match (a, b) {
        ("false", "false") => "false".into(),
        ("false", e) | (e, "false") => e.to_string(),
        (x, y) => format!("sev_max({x}, {y})"),
    }
}

/// A C condition under which DataFusion fails, as a severity ([`Val::err`]).
fn fails_if(cond: &str) -> String {
    format!("(({cond}) ? 2u : 0u)")
}

/// How a generator reads a column of the expression's schema: the slot of the kernel's `cols`
/// argument (three addresses per slot: values or string offsets, string bytes or 0, validity or
/// 0) and the C expression of the row to read.
pub struct ColumnRead {
    pub slot: usize,
    pub row: String,
}

/// C helpers every generated kernel includes: string comparison and checked 128-bit arithmetic.
pub const HELPERS: &str = include_str!("../../kernels/expression_helpers.cuh");

/// The code generator: statements appended to `body` (one row's work), constants to `globals`,
/// and the values of literals to `literals`: the kernel reads them from its `lits` parameter
/// (64-bit words), so expressions that differ only in their literals share one compiled kernel.
pub struct Gen<'a> {
    schema: &'a Schema,
    read: &'a mut dyn FnMut(&Column) -> R<ColumnRead>,
    pub body: String,
    pub globals: String,
    pub literals: Vec<u64>,
    /// Literals known only at run time (scalar subqueries), at their places in `literals`.
    pub deferred: Vec<DeferredLiteral>,
    loaded: HashMap<usize, Val>,
    tmp: usize,
}

/// A value a kernel reads from its literals that is known only when the query runs: a scalar
/// subquery's result, computed by `ScalarSubqueryExec` before its input runs. The words at `at`
/// hold its validity (0 or 1), then its value as [`literal_words`] encodes it.
#[derive(Debug, Clone)]
pub struct DeferredLiteral {
    pub at: usize,
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
}

/// The words of a non-null fixed-width value as kernels read them from their literals
/// ([`literal_read`]), or `None` for other values.
pub fn literal_words(s: &ScalarValue) -> Option<Vec<u64>> {
    Some(match s {
        ScalarValue::Boolean(Some(b)) => vec![*b as u64],
        ScalarValue::Int8(Some(v)) => vec![*v as u8 as u64],
        ScalarValue::Int16(Some(v)) => vec![*v as u16 as u64],
        ScalarValue::Int32(Some(v)) | ScalarValue::Date32(Some(v)) => vec![*v as u32 as u64],
        ScalarValue::Int64(Some(v))
        | ScalarValue::Date64(Some(v))
        | ScalarValue::TimestampSecond(Some(v), _)
        | ScalarValue::TimestampMillisecond(Some(v), _)
        | ScalarValue::TimestampMicrosecond(Some(v), _)
        | ScalarValue::TimestampNanosecond(Some(v), _) => vec![*v as u64],
        ScalarValue::UInt8(Some(v)) => vec![*v as u64],
        ScalarValue::UInt16(Some(v)) => vec![*v as u64],
        ScalarValue::UInt32(Some(v)) => vec![*v as u64],
        ScalarValue::UInt64(Some(v)) => vec![*v],
        ScalarValue::Decimal128(Some(v), _, _) => {
            let u = *v as u128;
            vec![u as u64, (u >> 64) as u64]
        }
        ScalarValue::Float64(Some(x)) => vec![x.to_bits()],
        _ => return None,
    })
}

/// How many literal words a fixed-width value of `ty` takes.
fn literal_width(ty: Ty) -> Option<usize> {
    match ty {
        Ty::I128 => Some(2),
        Ty::Str32 | Ty::Str64 => None,
        _ => Some(1),
    }
}

/// The C expression of a fixed-width value of `ty` read from the kernel's literals at `at`.
fn literal_read(ty: Ty, at: usize) -> String {
    match ty {
        Ty::Bool => format!("(lits[{at}] != 0)"),
        Ty::F64 => format!("__longlong_as_double((long long)lits[{at}])"),
        Ty::I128 => format!("((__int128)(((u128)lits[{}] << 64) | (u128)lits[{at}]))", at + 1),
        _ => format!("(({})lits[{at}])", ty.c()),
    }
}

/// `literals` with the deferred ones filled in from their expressions' values now: what a kernel
/// gets as its `lits` when it runs.
pub fn resolve_literals(literals: &[u64], deferred: &[DeferredLiteral]) -> crate::error::Result<Vec<u64>> {
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::logical_expr::ColumnarValue;
    let mut words = literals.to_vec();
    if deferred.is_empty() {
        return Ok(words);
    }
    let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
    for d in deferred {
        let value = match d.expr.evaluate(&batch)? {
            ColumnarValue::Scalar(v) => v,
            ColumnarValue::Array(_) => {
                return Err(datafusion::error::DataFusionError::Internal(format!(
                    "`{}` gave an array where the GPU expects one value",
                    d.expr
                )));
            }
        };
        if value.data_type() != d.data_type {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "`{}` gave a {} value where the GPU expects {}",
                d.expr,
                value.data_type(),
                d.data_type
            )));
        }
        let width = Ty::of(&d.data_type).and_then(literal_width).unwrap_or(0);
        let slot = words.get_mut(d.at..d.at + 1 + width).ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!("deferred literal at {} is out of range", d.at))
        })?;
        slot.fill(0);
        if let Some(w) = literal_words(&value) {
            if w.len() != width {
                return Err(datafusion::error::DataFusionError::Internal(format!(
                    "`{}` takes {} literal words, not {width}",
                    d.expr,
                    w.len()
                )));
            }
            slot[0] = 1;
            slot[1..].copy_from_slice(&w);
        } else if !value.is_null() {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "`{}` gave {value}, which the GPU cannot read",
                d.expr
            )));
        }
    }
    Ok(words)
}

impl<'a> Gen<'a> {
    /// A generator for expressions over `schema`, reading columns as `read` says.
    pub fn new(schema: &'a Schema, read: &'a mut dyn FnMut(&Column) -> R<ColumnRead>) -> Self {
        Gen {
            schema,
            read,
            body: String::new(),
            globals: String::new(),
            literals: Vec::new(),
            deferred: Vec::new(),
            loaded: HashMap::new(),
            tmp: 0,
        }
    }

    fn fresh(&mut self) -> usize {
        self.tmp += 1;
        self.tmp
    }

    /// Binds `v`, `ok` and `err` to new variables, so that later uses do not repeat work.
    fn bind(&mut self, ty: Ty, dt: DataType, v: String, ok: String, len: String, err: String) -> Val {
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
        let err = if err == "false" {
            err
        } else {
            let _ = writeln!(self.body, "        const u32 err{t} = {err};");
            format!("err{t}")
        };
        Val { v: format!("v{t}"), ok: format!("ok{t}"), len, err, ty, dt }
    }

    fn plain(&mut self, ty: Ty, dt: DataType, v: String, ok: String, err: String) -> Val {
        self.bind(ty, dt, v, ok, String::new(), err)
    }

    fn column(&mut self, c: &Column) -> R<Val> {
        let i = c.index();
        if let Some(v) = self.loaded.get(&i) {
            return Ok(v.clone());
        }
        if i >= self.schema.fields().len() {
            return not_impl_err!("column {c} is out of range");
        }
        let dt = self.schema.field(i).data_type().clone();
        let ty = Ty::of(&dt).ok_or_else(|| not_impl_datafusion_err!("column {c} has type {dt}"))?;
        let ColumnRead { slot: j, row } = (self.read)(c)?;
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
        let val = self.bind(ty, dt, v, ok, len, "false".into());
        self.loaded.insert(i, val.clone());
        Ok(val)
    }

    fn i128_const(v: i128) -> String {
        let u = v as u128;
        format!("((__int128)(((u128)0x{:x}ull << 64) | (u128)0x{:x}ull))", (u >> 64) as u64, u as u64)
    }

    /// A double with exactly these bits.
    fn f64_const(x: f64) -> String {
        format!("__longlong_as_double(0x{:x}ll)", x.to_bits() as i64)
    }

    fn literal(&mut self, s: &ScalarValue) -> R<Val> {
        let dt = s.data_type();
        let ty = Ty::of(&dt).ok_or_else(|| not_impl_datafusion_err!("literal {s} has type {dt}"))?;
        if s.is_null() {
            let zero = match ty {
                Ty::Str32 | Ty::Str64 => "(const u8*)0".to_string(),
                Ty::Bool => "false".into(),
                _ => format!("({})0", ty.c()),
            };
            return Ok(self.bind(ty, dt, zero, "false".into(), "0".into(), "false".into()));
        }
        // Each value goes to `literals`; the code reads it back from the kernel's `lits`.
        let at = self.literals.len();
        let v = match s {
            ScalarValue::Boolean(Some(b)) => b.to_string(),
            ScalarValue::Utf8(Some(text)) | ScalarValue::LargeUtf8(Some(text)) | ScalarValue::Utf8View(Some(text)) => {
                // The length, then the bytes packed into words (little-endian, as the device reads them).
                let bytes = text.as_bytes();
                self.literals.push(bytes.len() as u64);
                self.literals.extend(bytes.chunks(8).map(|w| {
                    let mut word = [0u8; 8];
                    word[..w.len()].copy_from_slice(w);
                    u64::from_le_bytes(word)
                }));
                return Ok(self.bind(
                    ty,
                    dt,
                    format!("(const u8*)(lits + {})", at + 1),
                    "true".into(),
                    format!("lits[{at}]"),
                    "false".into(),
                ));
            }
            other => match literal_words(other) {
                Some(words) => {
                    self.literals.extend(words);
                    literal_read(ty, at)
                }
                None => return not_impl_err!("literal {other} of type {dt}"),
            },
        };
        Ok(self.plain(ty, dt, v, "true".into(), "false".into()))
    }

    /// The value of `e`, or why it cannot be computed on the GPU.
    pub fn expr(&mut self, e: &Arc<dyn PhysicalExpr>) -> R<Val> {
        if let Some(c) = e.downcast_ref::<Column>() {
            return self.column(c);
        }
        if let Some(l) = e.downcast_ref::<Literal>() {
            return self.literal(l.value());
        }
        if let Some(n) = e.downcast_ref::<NotExpr>() {
            let a = self.expr(n.arg())?;
            if a.ty != Ty::Bool {
                return not_impl_err!("NOT of a {} value", a.dt);
            }
            return Ok(self.plain(Ty::Bool, DataType::Boolean, format!("!{}", a.v), a.ok, a.err));
        }
        if let Some(n) = e.downcast_ref::<IsNullExpr>() {
            let a = self.expr(n.arg())?;
            return Ok(self.plain(Ty::Bool, DataType::Boolean, format!("!{}", a.ok), "true".into(), a.err));
        }
        if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
            let a = self.expr(n.arg())?;
            return Ok(self.plain(Ty::Bool, DataType::Boolean, a.ok.clone(), "true".into(), a.err));
        }
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            let a = self.expr(c.expr())?;
            return self.cast(a, c.cast_type(), c.cast_options().safe);
        }
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            return self.binary(b);
        }
        if let Some(c) = e.downcast_ref::<CaseExpr>() {
            return self.case(c, e);
        }
        if let Some(l) = e.downcast_ref::<InListExpr>() {
            return self.in_list(l);
        }
        if let Some(l) = e.downcast_ref::<LikeExpr>() {
            return self.like(l);
        }
        if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
            match f.name() {
                "date_part" => return self.date_part(f),
                "substr" => return self.substr(f),
                _ => {}
            }
        }
        if e.downcast_ref::<ScalarSubqueryExpr>().is_some() {
            return self.deferred_literal(e);
        }
        not_impl_err!("expression `{e}` is not supported on the GPU")
    }

    /// `a` cast to `to`; `safe`: a value the target cannot hold becomes NULL, as arrow's safe
    /// cast gives it (false: an error).
    fn cast(&mut self, a: Val, to: &DataType, safe: bool) -> R<Val> {
        if &a.dt == to {
            return Ok(a);
        }
        let target = Ty::of(to).ok_or_else(|| not_impl_datafusion_err!("a cast to {to}"))?;
        if let (Some((fb, fs)), Some((tb, ts))) = (a.ty.int(), target.int()) {
            let widening = (fs == ts && tb >= fb) || (!fs && ts && tb > fb);
            if widening && is_integer(to) && is_integer(&a.dt) {
                return Ok(self.plain(target, to.clone(), format!("({}){}", target.c(), a.v), a.ok, a.err));
            }
        }
        if target == Ty::F64 {
            if let DataType::Decimal128(_, s1) = a.dt {
                let v = format!("((double){} / {})", a.v, Self::f64_const(10f64.powi(s1 as i32)));
                return Ok(self.plain(Ty::F64, to.clone(), v, a.ok, a.err));
            }
            if is_integer(&a.dt) {
                return Ok(self.plain(Ty::F64, to.clone(), format!("(double){}", a.v), a.ok, a.err));
            }
        }
        // Exact decimal casts that cannot exceed the target precision (arrow would fail there).
        // (A scale past the precision is no decimal type arrow makes: such casts stay on the CPU.)
        if let DataType::Decimal128(p2, s2) = *to
            && s2 >= 0
            && s2 as u8 <= p2
        {
            let scale_up = |from_scale: i8| -> R<String> {
                let d = (s2 - from_scale) as u32;
                let m = 10i128.checked_pow(d).ok_or_else(|| not_impl_datafusion_err!("a cast to {to}"))?;
                Ok(Self::i128_const(m))
            };
            match a.dt {
                DataType::Decimal128(p1, s1)
                    if s1 >= 0 && s2 >= s1 && (p2 as i16 - s2 as i16) >= (p1 as i16 - s1 as i16) =>
                {
                    let v = format!("({} * {})", a.v, scale_up(s1)?);
                    return Ok(self.plain(Ty::I128, to.clone(), v, a.ok, a.err));
                }
                // A larger scale that may exceed the target precision: arrow's cast fails (or,
                // safe, gives NULL) where |value| * 10^d > 10^p2 - 1, that is |value| >= 10^(p2 -
                // d); below that bound the product fits in an i128.
                DataType::Decimal128(_, s1) if s1 >= 0 && s2 >= s1 && p2 as i16 >= (s2 - s1) as i16 => {
                    let bound = Self::i128_const(10i128.pow((p2 as i16 - (s2 - s1) as i16) as u32));
                    let t = self.fresh();
                    let _ =
                        writeln!(self.body, "        const bool fits{t} = {} < {bound} && {} > -{bound};", a.v, a.v);
                    let v = format!("(fits{t} ? {} * {} : (__int128)0)", a.v, scale_up(s1)?);
                    let (ok, err) = match safe {
                        true => (format!("({} && fits{t})", a.ok), a.err),
                        false => {
                            let over = fails_if(&format!("{} && !fits{t}", a.ok));
                            let err = worse(&a.err, &over);
                            (a.ok, err)
                        }
                    };
                    return Ok(self.plain(Ty::I128, to.clone(), v, ok, err));
                }
                ref dt if is_integer(dt) => {
                    let digits = integer_digits(dt).unwrap_or(u8::MAX);
                    if (p2 as i16 - s2 as i16) >= digits as i16 {
                        let v = format!("((__int128){} * {})", a.v, scale_up(0)?);
                        return Ok(self.plain(Ty::I128, to.clone(), v, a.ok, a.err));
                    }
                }
                _ => {}
            }
        }
        // Float64 to a decimal as arrow casts it: `(10^s * x).round()` in doubles (half away from
        // zero), an i128 where that is finite and below 2^127 in magnitude, then the target
        // precision's check; past either, arrow's error (NULL for a safe cast). Scales of at most
        // 22, whose powers of ten a double holds exactly, so the factor is arrow's.
        if let (Ty::F64, DataType::Decimal128(p2, s2)) = (a.ty, to)
            && (0..=22).contains(s2)
            && (1..=38).contains(p2)
            && *s2 as u8 <= *p2
        {
            let mul = Self::f64_const(10f64.powi(*s2 as i32));
            let bound = Self::i128_const(10i128.pow(*p2 as u32));
            let t = self.fresh();
            let _ = writeln!(self.body, "        const double r{t} = round(__dmul_rn({mul}, {}));", a.v);
            let _ = writeln!(self.body, "        const __int128 d{t} = f64_to_i128(r{t});");
            let _ = writeln!(
                self.body,
                "        const bool fits{t} = fabs(r{t}) < 1.7014118346046923e38 && d{t} < {bound} && d{t} > -{bound};"
            );
            let v = format!("(fits{t} ? d{t} : (__int128)0)");
            let (ok, err) = match safe {
                true => (format!("({} && fits{t})", a.ok), a.err),
                false => (a.ok.clone(), worse(&a.err, &fails_if(&format!("{} && !fits{t}", a.ok)))),
            };
            return Ok(self.plain(Ty::I128, to.clone(), v, ok, err));
        }
        not_impl_err!("a cast from {} to {to}", a.dt)
    }

    /// `a == b` as C, for two values of one type.
    /// `a == b` as DataFusion's comparisons see it (doubles with -0 equal to +0).
    fn equal(a: &Val, b: &Val) -> String {
        Self::equal_as(a, b, "f64_sql_key")
    }

    /// `a == b` as `CASE a WHEN b` sees it: doubles in the total order, -0 and +0 apart.
    fn equal_exactly(a: &Val, b: &Val) -> String {
        Self::equal_as(a, b, "f64_key")
    }

    fn equal_as(a: &Val, b: &Val, f64_key: &str) -> String {
        if a.ty.is_str() {
            format!("(str_cmp({}, {}, {}, {}) == 0)", a.v, a.len, b.v, b.len)
        } else if a.ty == Ty::F64 {
            format!("({f64_key}({}) == {f64_key}({}))", a.v, b.v)
        } else {
            format!("({} == {})", a.v, b.v)
        }
    }

    fn either_err(a: &Val, b: &Val) -> String {
        worse(&a.err, &b.err)
    }

    fn binary(&mut self, b: &BinaryExpr) -> R<Val> {
        let op = *b.op();
        let l = self.expr(b.left())?;
        let r = self.expr(b.right())?;
        let same = l.dt == r.dt || (l.ty.is_str() && r.ty.is_str());
        let both = format!("({} && {})", l.ok, r.ok);
        let err = Self::either_err(&l, &r);
        let cmp = |sym: &str| -> R<String> {
            if !same {
                return not_impl_err!("a comparison of {} with {}", l.dt, r.dt);
            }
            Ok(if l.ty.is_str() {
                format!("(str_cmp({}, {}, {}, {}) {sym} 0)", l.v, l.len, r.v, r.len)
            } else if l.ty == Ty::Bool {
                format!("((int){} {sym} (int){})", l.v, r.v)
            } else if l.ty == Ty::F64 {
                format!("(f64_sql_key({}) {sym} f64_sql_key({}))", l.v, r.v)
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
                    return not_impl_err!("a comparison of {} with {}", l.dt, r.dt);
                }
                let eq = Self::equal(&l, &r);
                let distinct = format!("(({} != {}) || ({} && !{eq}))", l.ok, r.ok, both);
                let v = if op == Operator::IsDistinctFrom { distinct } else { format!("!{distinct}") };
                (v, "true".to_string())
            }
            Operator::And | Operator::Or => {
                if l.ty != Ty::Bool || r.ty != Ty::Bool {
                    return not_impl_err!("{op} of {} and {}", l.dt, r.dt);
                }
                // Kleene logic: a definite FALSE (AND) or TRUE (OR) on either side decides.
                let (lv, rv) = (format!("({} && {})", l.ok, l.v), format!("({} && {})", r.ok, r.v));
                let (lf, rf) = (format!("({} && !{})", l.ok, l.v), format!("({} && !{})", r.ok, r.v));
                // DataFusion evaluates the left side on every row, and the right side on every
                // row the left does not decide; on the rows it decides, whether the right side
                // runs depends on the whole batch (arrow's short-circuits: skipped when the left
                // decides every row; for AND, run only on the left's TRUE rows when they are few
                // and it has no NULLs). A right side's failure on such a row may or may not be
                // DataFusion's.
                let decided = if op == Operator::And { &lf } else { &lv };
                let err = match r.err.as_str() {
                    "false" => l.err.clone(),
                    re => worse(&l.err, &format!("({decided} ? ({re} != 0u ? 1u : 0u) : {re})")),
                };
                let (v, ok) = if op == Operator::And {
                    (format!("({lv} && {rv})"), format!("({lf} || {rf} || {both})"))
                } else {
                    (format!("({lv} || {rv})"), format!("({lv} || {rv} || {both})"))
                };
                return Ok(self.plain(Ty::Bool, DataType::Boolean, v, ok, err));
            }
            Operator::Plus | Operator::Minus | Operator::Multiply => {
                if let (DataType::Decimal128(..), DataType::Decimal128(..)) = (&l.dt, &r.dt) {
                    return self.decimal_arithmetic(b, op, l, r);
                }
                if l.ty == Ty::F64 && r.ty == Ty::F64 {
                    // One IEEE operation, rounded as on the CPU (no fused multiply-add).
                    let v = match op {
                        Operator::Plus => format!("__dadd_rn({}, {})", l.v, r.v),
                        Operator::Minus => format!("__dadd_rn({}, -{})", l.v, r.v),
                        _ => format!("__dmul_rn({}, {})", l.v, r.v),
                    };
                    return Ok(self.plain(Ty::F64, l.dt.clone(), v, both, err));
                }
                let Some((bits, _)) = l.ty.int() else {
                    return not_impl_err!("{op} of {} values", l.dt);
                };
                if l.dt != r.dt || !is_integer(&l.dt) {
                    return not_impl_err!("{op} of {} and {}", l.dt, r.dt);
                }
                // DataFusion wraps on overflow unless the expression was built to fail.
                let plain = BinaryExpr::new(Arc::clone(b.left()), op, Arc::clone(b.right()));
                if plain != *b {
                    return not_impl_err!("{op} that fails on overflow");
                }
                let sym = match op {
                    Operator::Plus => "+",
                    Operator::Minus => "-",
                    _ => "*",
                };
                // Unsigned arithmetic wraps without undefined behaviour; the cast back truncates.
                let wide = if bits == 64 { "unsigned long long" } else { "unsigned int" };
                let v = format!("({})(({wide}){} {sym} ({wide}){})", l.ty.c(), l.v, r.v);
                return Ok(self.plain(l.ty, l.dt.clone(), v, both, err));
            }
            other => return not_impl_err!("operator {other}"),
        };
        Ok(self.plain(Ty::Bool, DataType::Boolean, v, ok, err))
    }

    /// Decimal `+ - *` as arrow computes it: sums at the larger scale (operands rescaled with
    /// checked multiplication), products at the sum of the scales, an error on 128-bit overflow
    /// of a row whose operands are both valid.
    fn decimal_arithmetic(&mut self, b: &BinaryExpr, op: Operator, l: Val, r: Val) -> R<Val> {
        let (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) = (l.dt.clone(), r.dt.clone()) else {
            return not_impl_err!("{op} of {} and {}", l.dt, r.dt);
        };
        let out = b.data_type(self.schema).map_err(|e| not_impl_datafusion_err!("`{b}`: {e}"))?;
        let DataType::Decimal128(_, so) = out else {
            return not_impl_err!("{op} of {} and {} gives {out}", l.dt, r.dt);
        };
        let want_scale = if op == Operator::Multiply { s1 as i16 + s2 as i16 } else { s1.max(s2) as i16 };
        if so as i16 != want_scale || s1 < 0 || s2 < 0 {
            return not_impl_err!("{op} of {} and {} at scale {so}", l.dt, r.dt);
        }
        let t = self.fresh();
        let both = format!("({} && {})", l.ok, r.ok);
        let _ = writeln!(self.body, "        bool ovf{t} = false;");
        let v = if op == Operator::Multiply {
            format!("i128_mul({}, {}, &ovf{t})", l.v, r.v)
        } else {
            // Scales are 0..=38 here, so a rescaling factor fits in an i128.
            let scaled = |val: &Val, s: i8| -> String {
                let d = (so - s) as u32;
                if d == 0 {
                    val.v.clone()
                } else {
                    format!("i128_mul({}, {}, &ovf{t})", val.v, Gen::i128_const(10i128.pow(d)))
                }
            };
            let (lv, rv) = (scaled(&l, s1), scaled(&r, s2));
            let f = if op == Operator::Plus { "i128_add" } else { "i128_sub" };
            format!("{f}({lv}, {rv}, &ovf{t})")
        };
        // The arithmetic runs only where both operands are valid, as arrow's.
        let _ = writeln!(self.body, "        const __int128 dv{t} = {both} ? {v} : (__int128)0;");
        let err = worse(&Self::either_err(&l, &r), &fails_if(&format!("ovf{t}")));
        Ok(self.plain(Ty::I128, out, format!("dv{t}"), both, err))
    }

    fn case(&mut self, c: &CaseExpr, e: &Arc<dyn PhysicalExpr>) -> R<Val> {
        let out = e.data_type(self.schema).map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?;
        let ty = Ty::of(&out).ok_or_else(|| not_impl_datafusion_err!("CASE of type {out}"))?;
        if ty.is_str() {
            return not_impl_err!("CASE with string results");
        }
        let base = c.expr().map(|b| self.expr(b)).transpose()?;
        // (condition, its WHEN's error, THEN value) of each arm, in order.
        let mut arms = Vec::new();
        for (when, then) in c.when_then_expr() {
            let w = self.expr(when)?;
            let cond = match &base {
                Some(b) => {
                    if b.dt != w.dt && !(b.ty.is_str() && w.ty.is_str()) {
                        return not_impl_err!("CASE comparing {} with {}", b.dt, w.dt);
                    }
                    format!("({} && {} && {})", b.ok, w.ok, Self::equal_exactly(b, &w))
                }
                None => {
                    if w.ty != Ty::Bool {
                        return not_impl_err!("CASE WHEN of type {}", w.dt);
                    }
                    format!("({} && {})", w.ok, w.v)
                }
            };
            let t = self.expr(then)?;
            if t.dt != out {
                return not_impl_err!("CASE branch of type {} in a CASE of {out}", t.dt);
            }
            arms.push((cond, w.err.clone(), t));
        }
        let otherwise = match c.else_expr() {
            Some(x) => {
                let v = self.expr(x)?;
                if v.dt != out {
                    return not_impl_err!("CASE ELSE of type {} in a CASE of {out}", v.dt);
                }
                v
            }
            None => self.literal(&ScalarValue::try_from(&out)?)?,
        };
        // DataFusion evaluates a WHEN only on the rows no earlier WHEN matched, a THEN only on
        // the rows its WHEN matched and the ELSE on the rest: an error counts only there.
        let (mut v, mut ok, mut err) = (otherwise.v.clone(), otherwise.ok.clone(), otherwise.err.clone());
        for (cond, when_err, t) in arms.iter().rev() {
            v = format!("({cond} ? {} : {v})", t.v);
            ok = format!("({cond} ? {} : {ok})", t.ok);
            err = match (t.err.as_str(), err.as_str()) {
                ("false", "false") => "false".to_string(),
                (te, rest) => format!("({cond} ? {} : {})", severity(te), severity(rest)),
            };
            err = worse(when_err, &err);
        }
        // The base expression (`CASE <base> WHEN ...`) is evaluated on every row; where it is
        // NULL no WHEN is, and the row goes to the ELSE.
        if let Some(b) = &base {
            if err != otherwise.err {
                err = format!("({} ? {} : {})", b.ok, severity(&err), severity(&otherwise.err));
            }
            err = worse(&b.err, &err);
        }
        Ok(self.plain(ty, out, v, ok, err))
    }

    fn in_list(&mut self, l: &InListExpr) -> R<Val> {
        let a = self.expr(l.expr())?;
        let mut any = Vec::new();
        let mut null_item = false;
        for item in l.list() {
            let Some(lit) = item.downcast_ref::<Literal>() else {
                return not_impl_err!("IN list item `{item}` is not a literal");
            };
            if lit.value().is_null() {
                null_item = true;
                continue;
            }
            let x = self.literal(lit.value())?;
            if x.dt != a.dt && !(x.ty.is_str() && a.ty.is_str()) {
                return not_impl_err!("IN list of {} for a {} value", x.dt, a.dt);
            }
            any.push(Self::equal(&a, &x));
        }
        let found = if any.is_empty() { "false".to_string() } else { format!("({})", any.join(" || ")) };
        // SQL: NULL when the value is NULL, or when nothing matched and the list holds a NULL.
        let ok = if null_item { format!("({} && {found})", a.ok) } else { a.ok.clone() };
        let v = if l.negated() { format!("!{found}") } else { found };
        Ok(self.plain(Ty::Bool, DataType::Boolean, v, ok, a.err))
    }
    /// `[NOT] LIKE` with a literal pattern of literal runs between `%` wildcards, matched byte
    /// for byte: the first run at the start, the last at the end (where no `%` stands before or
    /// after them), the runs between found leftmost in order. Leftmost matching is exact for
    /// such patterns, and bytes match as characters do in valid UTF-8.
    fn like(&mut self, l: &LikeExpr) -> R<Val> {
        if l.case_insensitive() {
            return not_impl_err!("ILIKE");
        }
        let a = self.expr(l.expr())?;
        if !a.ty.is_str() {
            return not_impl_err!("LIKE of a {} value", a.dt);
        }
        let Some(p) = l.pattern().downcast_ref::<Literal>() else {
            return not_impl_err!("LIKE with the pattern `{}`, which is not a literal", l.pattern());
        };
        let pattern = match p.value() {
            ScalarValue::Utf8(x) | ScalarValue::LargeUtf8(x) | ScalarValue::Utf8View(x) => x.clone(),
            other => return not_impl_err!("LIKE with a {} pattern", other.data_type()),
        };
        let Some(pattern) = pattern else {
            // A NULL pattern gives NULL.
            return Ok(self.plain(Ty::Bool, DataType::Boolean, "false".into(), "false".into(), a.err));
        };
        if pattern.contains(['_', '\\']) {
            return not_impl_err!("LIKE '{pattern}' (of the wildcards only % runs on the GPU)");
        }
        let runs: Vec<&str> = pattern.split('%').collect();
        let t = self.fresh();
        let lit = |g: &mut Self, text: &str| -> R<Val> { g.literal(&ScalarValue::Utf8(Some(text.to_string()))) };
        let m = format!("like{t}");
        if let [only] = runs.as_slice() {
            let x = lit(self, only)?;
            let _ = writeln!(
                self.body,
                "        const bool {m} = {} == {} && bytes_eq({}, {}, {});",
                a.len, x.len, a.v, x.v, x.len
            );
        } else {
            let (first, last) = (lit(self, runs[0])?, lit(self, runs[runs.len() - 1])?);
            // The string holds the first run at its start and the last at its end, not
            // overlapping; the middle runs are looked for in order between them.
            let _ = writeln!(
                self.body,
                "        bool {m} = {len} >= {fl} + {ll} && bytes_eq({s}, {f}, {fl}) && bytes_eq({s} + {len} - {ll}, {l}, {ll});",
                len = a.len,
                s = a.v,
                f = first.v,
                fl = first.len,
                l = last.v,
                ll = last.len
            );
            let middle: Vec<&str> = runs[1..runs.len() - 1].iter().copied().filter(|r| !r.is_empty()).collect();
            if !middle.is_empty() {
                let _ = writeln!(self.body, "        u64 at{t} = {};", first.len);
            }
            for run in middle {
                let x = lit(self, run)?;
                let _ = writeln!(
                    self.body,
                    "        if ({m}) {{ const u64 end = {len} - {ll}; const u64 i = bytes_find({s} + at{t}, end - at{t}, {x}, {xl}); \
                     if (i == end - at{t}) {m} = false; else at{t} += i + {xl}; }}",
                    len = a.len,
                    ll = last.len,
                    s = a.v,
                    x = x.v,
                    xl = x.len
                );
            }
        }
        let v = if l.negated() { format!("!{m}") } else { m };
        Ok(self.plain(Ty::Bool, DataType::Boolean, v, a.ok, a.err))
    }

    /// A value known only at run time, read from the kernel's literals: its validity word, then
    /// its value's words (see [`resolve_literals`]).
    fn deferred_literal(&mut self, e: &Arc<dyn PhysicalExpr>) -> R<Val> {
        let dt = e
            .return_field(&Schema::empty())
            .map_err(|err| not_impl_datafusion_err!("`{e}`: {err}"))?
            .data_type()
            .clone();
        let ty = Ty::of(&dt).ok_or_else(|| not_impl_datafusion_err!("`{e}` has type {dt}"))?;
        let Some(width) = literal_width(ty) else {
            return not_impl_err!("`{e}` is a {dt} value known only when the query runs");
        };
        let at = self.literals.len();
        self.literals.extend(std::iter::repeat_n(0, 1 + width));
        self.deferred.push(DeferredLiteral { at, expr: Arc::clone(e), data_type: dt.clone() });
        Ok(self.plain(ty, dt, literal_read(ty, at + 1), format!("(lits[{at}] != 0)"), "false".into()))
    }

    /// `substr(s, start [, count])` (SUBSTRING) with literal `start` and `count`: the characters
    /// from position `start` (1-based; positions before the first count towards `count`), at most
    /// `count` of them, as DataFusion's `get_true_start_end` gives. The result points into the
    /// string's bytes. A literal count below zero, or the smallest Int64 start, fail on the CPU:
    /// those stay there.
    fn substr(&mut self, f: &ScalarFunctionExpr) -> R<Val> {
        let (s, start, count) = match f.args() {
            [s, start] => (s, start, None),
            [s, start, count] => (s, start, Some(count)),
            args => return not_impl_err!("substr with {} arguments", args.len()),
        };
        let int = |e: &Arc<dyn PhysicalExpr>| -> R<Option<i64>> {
            match e.downcast_ref::<Literal>().map(|l| l.value()) {
                Some(ScalarValue::Int64(v)) => Ok(*v),
                _ => not_impl_err!("substr with the argument `{e}`, which is not an Int64 literal"),
            }
        };
        let from = int(start)?;
        let length = count.map(int).transpose()?;
        if from == Some(i64::MIN) || length.flatten().is_some_and(|c| c < 0) {
            return not_impl_err!("substr with a start or length that DataFusion refuses");
        }
        let a = self.expr(s)?;
        if !a.ty.is_str() || f.return_type() != &a.dt {
            return not_impl_err!("substr of a {} value giving {}", a.dt, f.return_type());
        }
        let (Some(from), Some(length)) = (from, length.unwrap_or(Some(0))) else {
            // A NULL start or length gives NULL.
            return Ok(self.bind(a.ty, a.dt, "(const u8*)0".into(), "false".into(), "0".into(), a.err));
        };
        // Character positions, 0-based: [first, end), end saturating as DataFusion's does.
        let first = from - 1;
        let end = if count.is_some() { first.saturating_add(length) } else { i64::MAX };
        let (fw, ew) = (
            self.literal(&ScalarValue::Int64(Some(first.max(0))))?,
            self.literal(&ScalarValue::Int64(Some(end.max(0))))?,
        );
        let t = self.fresh();
        let _ = writeln!(
            self.body,
            "        u64 from{t} = 0, to{t} = 0;\n        if ({ok}) utf8_char_range({p}, {n}, {f}, {e}, &from{t}, &to{t});",
            ok = a.ok,
            p = a.v,
            n = a.len,
            f = fw.v,
            e = ew.v
        );
        Ok(self.bind(a.ty, a.dt.clone(), format!("{} + from{t}", a.v), a.ok.clone(), format!("to{t} - from{t}"), a.err))
    }

    /// `date_part(part, d)` (EXTRACT) of a Date32: the year, month or day, an Int32 as arrow
    /// gives, NULL where arrow's conversion of the day count to a date fails (outside chrono's
    /// years).
    fn date_part(&mut self, f: &ScalarFunctionExpr) -> R<Val> {
        let [part, value] = f.args() else {
            return not_impl_err!("date_part with {} arguments", f.args().len());
        };
        let part = match part.downcast_ref::<Literal>().map(|l| l.value()) {
            Some(ScalarValue::Utf8(Some(p)) | ScalarValue::Utf8View(Some(p)) | ScalarValue::LargeUtf8(Some(p))) => {
                p.clone()
            }
            _ => return not_impl_err!("date_part of the part `{part}`"),
        };
        // As DataFusion reads the part: quotes around it dropped, then arrow's interval units.
        let trimmed = part.strip_prefix(['\'', '"']).and_then(|s| s.strip_suffix(['\'', '"'])).unwrap_or(&part);
        let code = match trimmed.parse::<IntervalUnit>() {
            Ok(IntervalUnit::Year) => 0,
            Ok(IntervalUnit::Month) => 1,
            Ok(IntervalUnit::Day) => 2,
            _ => return not_impl_err!("date_part('{part}', ...)"),
        };
        if f.return_type() != &DataType::Int32 {
            return not_impl_err!("date_part('{part}', ...) of type {}", f.return_type());
        }
        let a = self.expr(value)?;
        if a.dt != DataType::Date32 {
            return not_impl_err!("date_part('{part}', ...) of a {} value", a.dt);
        }
        let (lo, hi) = date32_range();
        let ok = format!("({} && {} >= {lo} && {} <= {hi})", a.ok, a.v, a.v);
        Ok(self.plain(Ty::I32, DataType::Int32, format!("date32_part({}, {code})", a.v), ok, a.err))
    }
}

/// The first and last Date32 day counts that arrow converts to a date (chrono's range); the
/// conversion fails outside them.
pub fn date32_range() -> (i32, i32) {
    static RANGE: std::sync::OnceLock<(i32, i32)> = std::sync::OnceLock::new();
    *RANGE.get_or_init(|| {
        let valid = |d: i64| date32_to_datetime(d as i32).is_some();
        // The valid counts are one run around 0: bisect from 0 towards each end of the i32
        // range for the last valid count (the end itself when it is valid).
        let last_valid = |end: i64| {
            let (mut inside, mut out) = (0i64, end);
            if valid(out) {
                return out;
            }
            while (out - inside).abs() > 1 {
                let mid = (inside + out) / 2;
                if valid(mid) { inside = mid } else { out = mid }
            }
            inside
        };
        (last_valid(i32::MIN as i64) as i32, last_valid(i32::MAX as i64) as i32)
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;
    use datafusion::physical_expr::expressions::{col, like, lit};

    use super::*;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("v", DataType::Utf8View, true),
            Field::new("d", DataType::Date32, true),
            Field::new("i", DataType::Int32, true),
        ])
    }

    /// The statements `e` generates, or why it stays on the CPU.
    fn generate(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> R<String> {
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(schema, &mut read);
        let v = g.expr(e)?;
        Ok(format!("{}{}\nvalue {} valid {}", g.globals, g.body, v.v, v.ok))
    }

    /// The error severity (`Val::err`) of `e` over `schema`.
    fn severity_of(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> String {
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(schema, &mut read);
        g.expr(e).unwrap().err
    }

    /// A CASE's base expression fails on every row it is evaluated on; a WHEN only where the base
    /// is valid; AND and OR count their right side's failure as possible where their left side
    /// decides the row, and as certain elsewhere.
    #[test]
    fn failures_count_where_datafusion_evaluates_the_failing_part() {
        use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr};
        let s = Schema::new(vec![
            Field::new("x", DataType::Decimal128(38, 0), true),
            Field::new("b", DataType::Boolean, true),
        ]);
        let x = col("x", &s).unwrap();
        let square: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(Arc::clone(&x), Operator::Multiply, Arc::clone(&x)));
        let zero = lit(ScalarValue::Decimal128(Some(0), 38, 0));
        let case: Arc<dyn PhysicalExpr> =
            Arc::new(CaseExpr::try_new(Some(Arc::clone(&square)), vec![(zero, lit(1i64))], Some(lit(2i64))).unwrap());
        let base = severity_of(&square, &s);
        assert!(base.starts_with("err"), "{base}");
        let case_err = severity_of(&case, &s);
        assert_ne!(case_err, "false", "the base's failure was dropped");
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(&s, &mut read);
        let v = g.expr(&case).unwrap();
        assert!(g.body.contains("ovf") && g.body.contains("? 2u : 0u"), "{}\n{}", g.body, v.err);
        assert_ne!(v.err, "false", "{}", g.body);
        let gt = Arc::new(BinaryExpr::new(square, Operator::Gt, lit(ScalarValue::Decimal128(Some(0), 38, 0))));
        let and: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(col("b", &s).unwrap(), Operator::And, gt));
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(&s, &mut read);
        let v = g.expr(&and).unwrap();
        assert!(g.body.contains("? 1u : 0u)"), "the decided rows' failure is not a possible one:\n{}", g.body);
        assert_ne!(v.err, "false");
    }

    fn like_of(column: &str, pattern: &str, negated: bool, case_insensitive: bool) -> Arc<dyn PhysicalExpr> {
        let s = schema();
        let c = col(column, &s).unwrap();
        let p = if column == "v" { lit(ScalarValue::Utf8View(Some(pattern.into()))) } else { lit(pattern) };
        like(negated, case_insensitive, c, p, &s).unwrap()
    }

    #[test]
    fn like_with_percent_wildcards_runs_on_the_gpu_and_other_patterns_say_why() {
        let s = schema();
        // Anchored runs compare in place; each middle run is searched for, in order.
        let code = generate(&like_of("v", "%special%requests%", true, false), &s).unwrap();
        assert_eq!(code.matches("bytes_find(").count(), 2, "{code}");
        assert!(code.contains("= !like"), "{code}");
        let code = generate(&like_of("s", "PROMO%", false, false), &s).unwrap();
        assert_eq!(code.matches("bytes_find(").count(), 0, "{code}");
        assert!(code.contains("bytes_eq("), "{code}");
        // The runs are kernel parameters (length, then bytes), not text in the source.
        let code = generate(&like_of("s", "%é%", false, false), &s).unwrap();
        assert!(code.contains("(const u8*)(lits + 3)") && code.contains("= lits[2]"), "{code}");
        assert!(!code.contains("195"), "{code}");
        for (pattern, ci, why) in
            [("a_c", false, "only % runs"), ("100\\%", false, "only % runs"), ("a%", true, "ILIKE")]
        {
            let err = generate(&like_of("s", pattern, false, ci), &s).unwrap_err();
            assert!(err.to_string().contains(why), "{pattern}: {err}");
        }
    }

    #[test]
    fn date_part_of_a_date32_runs_on_the_gpu_within_arrows_range() {
        let s = schema();
        let udf = datafusion::functions::datetime::date_part();
        let config = Arc::new(ConfigOptions::default());
        let part = |p: &str, column: &str| -> Arc<dyn PhysicalExpr> {
            let args = vec![lit(p), col(column, &s).unwrap()];
            Arc::new(ScalarFunctionExpr::try_new(Arc::clone(&udf), args, &s, Arc::clone(&config)).unwrap())
        };
        let (lo, hi) = date32_range();
        for (p, code) in [("YEAR", 0), ("month", 1), ("'day'", 2)] {
            let text = generate(&part(p, "d"), &s).unwrap();
            assert!(text.contains(&format!("date32_part(v2, {code})")), "{p}: {text}");
            assert!(text.contains(&format!(">= {lo}")) && text.contains(&format!("<= {hi}")), "{p}: {text}");
        }
        assert!(generate(&part("week", "d"), &s).unwrap_err().to_string().contains("week"));
        // The range is where arrow's conversion to a date succeeds, and it ends there.
        for d in [lo, hi, 0, -719_528, 2_932_896] {
            assert!(date32_to_datetime(d).is_some(), "{d}");
        }
        assert!(lo == i32::MIN || date32_to_datetime(lo - 1).is_none());
        assert!(hi == i32::MAX || date32_to_datetime(hi + 1).is_none());
    }

    #[test]
    fn substr_with_literal_arguments_runs_on_the_gpu_and_other_calls_say_why() {
        let s = schema();
        let udf = datafusion::functions::unicode::substr();
        let config = Arc::new(ConfigOptions::default());
        let call = |args: Vec<Arc<dyn PhysicalExpr>>| -> Arc<dyn PhysicalExpr> {
            Arc::new(ScalarFunctionExpr::try_new(Arc::clone(&udf), args, &s, Arc::clone(&config)).unwrap())
        };
        // substr(s, 2, 3): characters 1..4 (0-based), positions as kernel literals.
        let code = generate(&call(vec![col("s", &s).unwrap(), lit(2i64), lit(3i64)]), &s).unwrap();
        assert!(code.contains("utf8_char_range(") && code.contains("lits[0]") && code.contains("lits[1]"), "{code}");
        // A start before the string counts towards the length; without a length, to the end.
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(&s, &mut read);
        g.expr(&call(vec![col("v", &s).unwrap(), lit(-3i64), lit(6i64)])).unwrap();
        assert_eq!(g.literals, vec![0, 2]);
        let mut g = Gen::new(&s, &mut read);
        g.expr(&call(vec![col("s", &s).unwrap(), lit(5i64)])).unwrap();
        assert_eq!(g.literals, vec![4, i64::MAX as u64]);
        // A NULL start gives NULL without a kernel loop.
        let code = generate(&call(vec![col("s", &s).unwrap(), lit(ScalarValue::Int64(None))]), &s).unwrap();
        assert!(!code.contains("utf8_char_range(") && code.contains("= false;"), "{code}");
        for (args, why) in [
            (vec![col("s", &s).unwrap(), col("i", &s).unwrap()], "not an Int64 literal"),
            (vec![col("s", &s).unwrap(), lit(1i64), lit(-1i64)], "refuses"),
            (vec![col("s", &s).unwrap(), lit(i64::MIN)], "refuses"),
        ] {
            let err = generate(&call(args), &s).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
    }

    /// A decimal cast to a larger scale that may exceed the target precision: arrow's error
    /// (NULL for a safe cast) at |value| >= 10^(precision - added digits), no 128-bit overflow;
    /// one that cannot exceed it needs no check, and one past any precision stays on the CPU.
    #[test]
    fn decimal_casts_to_a_larger_scale_check_the_target_precision() {
        use datafusion::arrow::compute::CastOptions;
        use datafusion::physical_expr::expressions::CastExpr;
        let s = Schema::new(vec![Field::new("x", DataType::Decimal128(36, 2), true)]);
        let cast = |to: DataType, safe: bool| -> Arc<dyn PhysicalExpr> {
            let options = CastOptions { safe, ..Default::default() };
            Arc::new(CastExpr::new(col("x", &s).unwrap(), to, Some(options)))
        };
        // (36, 2) to (38, 15): 13 more digits, so |x| < 10^25.
        let bound = Gen::i128_const(10i128.pow(25));
        let strict = generate(&cast(DataType::Decimal128(38, 15), false), &s).unwrap();
        assert!(strict.contains(&format!(" < {bound} && ")) && strict.contains(&format!(" > -{bound};")), "{strict}");
        assert!(strict.contains("const u32 err") && strict.contains(" && !fits"), "{strict}");
        let safe = generate(&cast(DataType::Decimal128(38, 15), true), &s).unwrap();
        assert!(safe.contains(" && fits") && !safe.contains("err"), "{safe}");
        let wide = generate(&cast(DataType::Decimal128(38, 4), false), &s).unwrap();
        assert!(!wide.contains("fits") && !wide.contains("err"), "{wide}");
        assert!(generate(&cast(DataType::Decimal128(10, 20), false), &s).is_err());
    }

    /// A Float64 cast to a decimal multiplies by the scale's power of ten as arrow does (its exact
    /// double), rounds, and checks the target precision: an error, or NULL for a safe cast.
    /// Scales past 22 and negative ones stay on the CPU.
    #[test]
    fn float_to_decimal_casts_round_and_check_the_precision() {
        use datafusion::arrow::compute::CastOptions;
        use datafusion::physical_expr::expressions::CastExpr;
        let s = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
        let cast = |to: DataType, safe: bool| -> Arc<dyn PhysicalExpr> {
            let options = CastOptions { safe, ..Default::default() };
            Arc::new(CastExpr::new(col("x", &s).unwrap(), to, Some(options)))
        };
        let strict = generate(&cast(DataType::Decimal128(30, 15), false), &s).unwrap();
        let mul = Gen::f64_const(1e15);
        let bound = Gen::i128_const(10i128.pow(30));
        assert!(strict.contains(&format!("round(__dmul_rn({mul}, ")), "{strict}");
        assert!(strict.contains(&format!(" < {bound} && ")) && strict.contains(&format!(" > -{bound};")), "{strict}");
        assert!(strict.contains("const u32 err") && strict.contains(" && !fits"), "{strict}");
        let safe = generate(&cast(DataType::Decimal128(30, 15), true), &s).unwrap();
        assert!(safe.contains(" && fits") && !safe.contains("const u32 err"), "{safe}");
        assert!(generate(&cast(DataType::Decimal128(38, 22), false), &s).is_ok());
        assert!(generate(&cast(DataType::Decimal128(38, 23), false), &s).is_err());
        assert!(generate(&cast(DataType::Decimal128(10, -2), false), &s).is_err());
        assert!(generate(&cast(DataType::Decimal128(10, 12), false), &s).is_err(), "a scale past the precision");
    }

    #[test]
    fn scalar_subquery_values_are_literals_filled_in_when_the_query_runs() {
        use datafusion::logical_expr::physical_planning_context::{ScalarSubqueryResults, SubqueryIndex};
        let s = schema();
        let results = ScalarSubqueryResults::new(2);
        let dec: Arc<dyn PhysicalExpr> = Arc::new(ScalarSubqueryExpr::new(
            DataType::Decimal128(19, 6),
            true,
            SubqueryIndex::new(0),
            results.clone(),
        ));
        let text: Arc<dyn PhysicalExpr> =
            Arc::new(ScalarSubqueryExpr::new(DataType::Utf8, true, SubqueryIndex::new(1), results.clone()));
        let mut read = |c: &Column| Ok(ColumnRead { slot: c.index(), row: "row".into() });
        let mut g = Gen::new(&s, &mut read);
        g.expr(&dec).unwrap();
        assert!(g.body.contains("= (lits[0] != 0);"), "{}", g.body);
        assert_eq!((g.literals.len(), g.deferred.len()), (3, 1));
        // Strings have no fixed number of words: they stay on the CPU.
        assert!(g.expr(&text).unwrap_err().to_string().contains("known only when the query runs"));
        // Before the subquery has run, the value cannot be read.
        assert!(resolve_literals(&g.literals, &g.deferred).is_err());
        results.set(SubqueryIndex::new(0), ScalarValue::Decimal128(Some(-5), 19, 6)).unwrap();
        let words = resolve_literals(&g.literals, &g.deferred).unwrap();
        assert_eq!(words, vec![1, (-5i128 as u128) as u64, ((-5i128 as u128) >> 64) as u64]);
        results.clear();
        results.set(SubqueryIndex::new(0), ScalarValue::Decimal128(None, 19, 6)).unwrap();
        assert_eq!(resolve_literals(&g.literals, &g.deferred).unwrap(), vec![0, 0, 0]);
    }
}
