//! Join keys on the device: the key columns of each row folded into one key word
//! (kernels/keys.cu), and the confirmation of candidate pairs when the word is a hash.
//!
//! - Narrow keys: the key columns' bits (with a null bit per column when NULL equals NULL) fit
//!   in 32 or 64 bits; they are packed and mixed bijectively, so equal words are equal keys.
//! - Wide keys (strings, Decimal128, more than 64 bits): the word is a 64-bit hash, and every
//!   candidate pair is confirmed column by column ([`verify_pairs`]).
//!
//! With NULL equals nothing, rows with a NULL in any key column take no part in matching: the
//! [`KeySide`] lists only the rows that do.

use datafusion::common::{not_impl_datafusion_err, not_impl_err};
use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::DataType;

use super::materialize::decode_dictionary;
use crate::columns::DeviceColumn;
use crate::device::kernel::{self, Kernel};
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::KeyWidth;
use crate::primitives::select::{iota, select_where};

/// How a key column's values are read on the device (after decoding dictionaries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyColumnKind {
    /// Fixed-width values of 1, 2, 4, 8 or 16 bytes.
    Fixed(usize),
    Bool,
    /// Strings or binary with i32 offsets.
    Str32,
    /// Strings or binary with i64 offsets (LargeUtf8, and Utf8View as stored on the device).
    Str64,
}

impl KeyColumnKind {
    /// The kind of a key column of type `dt`, or why it cannot be a key.
    pub fn of(dt: &DataType) -> crate::error::Result<KeyColumnKind> {
        use DataType::*;
        Ok(match dt {
            Boolean => KeyColumnKind::Bool,
            Utf8 | Binary => KeyColumnKind::Str32,
            LargeUtf8 | LargeBinary | Utf8View | BinaryView => KeyColumnKind::Str64,
            Dictionary(_, v) => KeyColumnKind::of(v)?,
            Int8
            | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Date32
            | Date64
            | Timestamp(_, _)
            | Decimal128(_, _)
            | Time32(_)
            | Time64(_)
            | Duration(_) => KeyColumnKind::Fixed(
                dt.primitive_width().ok_or_else(|| not_impl_datafusion_err!("{dt} has no fixed width"))?,
            ),
            other => return not_impl_err!("{other} is not a GPU key type"),
        })
    }

    /// Bits of a narrow packing, or `None` if the column makes the key wide.
    fn narrow_bits(self) -> Option<u32> {
        match self {
            KeyColumnKind::Fixed(w) if w <= 8 => Some(8 * w as u32),
            KeyColumnKind::Bool => Some(1),
            _ => None,
        }
    }
}

/// The key word of a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEncoding {
    /// Packed into 32 bits, mixed bijectively: equal words are equal keys.
    Narrow32,
    /// Packed into 64 bits, mixed bijectively.
    Narrow64,
    /// A 64-bit hash; candidates are confirmed against the key columns.
    Wide,
}

impl KeyEncoding {
    pub fn width(self) -> KeyWidth {
        match self {
            KeyEncoding::Narrow32 => KeyWidth::U32,
            _ => KeyWidth::U64,
        }
    }
}

/// How a join's keys are folded into words: the same for both sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPlan {
    pub columns: Vec<KeyColumnKind>,
    pub nulls_equal: bool,
    /// Per column: known to hold no NULL, so a narrow word needs no null bit for it (a group-by
    /// plans each batch by itself; a join's two sides share `new`'s plan, all false).
    pub null_free: Vec<bool>,
    pub encoding: KeyEncoding,
}

impl KeyPlan {
    /// The plan for key columns of types `types` (both sides must have these types).
    pub fn new(types: &[DataType], nulls_equal: bool) -> crate::error::Result<KeyPlan> {
        Self::with_null_free(types, nulls_equal, &vec![false; types.len()])
    }

    /// The plan for one group-by batch (NULL equal to NULL): columns without NULLs in this batch
    /// take no null bit, so a 4-byte key column without NULLs packs into a 32-bit word.
    pub fn for_group_by(cols: &[Arc<DeviceColumn>]) -> crate::error::Result<KeyPlan> {
        let types: Vec<DataType> = cols.iter().map(|c| c.data_type.clone()).collect();
        let null_free: Vec<bool> = cols.iter().map(|c| c.null_count == 0).collect();
        Self::with_null_free(&types, true, &null_free)
    }

    fn with_null_free(types: &[DataType], nulls_equal: bool, null_free: &[bool]) -> crate::error::Result<KeyPlan> {
        if types.is_empty() {
            return not_impl_err!("a join needs at least one key column");
        }
        let columns = types.iter().map(KeyColumnKind::of).collect::<std::result::Result<Vec<_>, _>>()?;
        let mut bits = 0u32;
        let mut narrow = true;
        for (c, free) in columns.iter().zip(null_free) {
            match c.narrow_bits() {
                Some(b) => bits += b + u32::from(nulls_equal && !free),
                None => narrow = false,
            }
        }
        let encoding = match (narrow, bits) {
            (true, b) if b <= 32 => KeyEncoding::Narrow32,
            (true, b) if b <= 64 => KeyEncoding::Narrow64,
            _ => KeyEncoding::Wide,
        };
        Ok(KeyPlan { columns, nulls_equal, null_free: null_free.to_vec(), encoding })
    }

    /// How column `i`'s NULLs are folded (kernels/keys.cu `NULLS_*`).
    fn null_mode(&self, i: usize) -> u32 {
        if self.null_free.get(i).copied().unwrap_or(false) {
            NULLS_ABSENT
        } else if self.nulls_equal {
            NULLS_VALUE
        } else {
            NULLS_DROP
        }
    }
}

/// One side's keys, ready for matching.
#[derive(Debug)]
pub struct KeySide {
    /// One key word per item (u32 or u64 by the plan's encoding).
    pub keys: DeviceBuffer,
    /// Items: the rows that take part in matching.
    pub items: u64,
    /// Rows of the side (taking part or not).
    pub rows: u64,
    /// Row of each item; `None` when every row takes part (item i is row i).
    pub item_rows: Option<DeviceBuffer>,
    /// Per row, 1 if it takes part; `None` when all do.
    pub takes_part: Option<DeviceBuffer>,
    /// The key columns as compared by [`verify_pairs`] (dictionaries decoded).
    pub columns: Vec<Arc<DeviceColumn>>,
}

impl KeySide {
    /// The row of each item in a buffer of its own (for a sort to permute).
    pub fn owned_item_rows(&self, gpu: &Gpu, stream: &Arc<CudaStream>) -> Result<DeviceBuffer> {
        match &self.item_rows {
            Some(r) => gpu.clone_buffer(stream, r, "join row ids"),
            None => iota(gpu, stream, self.items),
        }
    }
}

const NULLS_ABSENT: u32 = 0;
const NULLS_DROP: u32 = 1;
const NULLS_VALUE: u32 = 2;

fn narrow_kernel(kind: KeyColumnKind) -> Result<Kernel> {
    Ok(match kind {
        KeyColumnKind::Fixed(1) => kernel::KEY_PACK_W1,
        KeyColumnKind::Fixed(2) => kernel::KEY_PACK_W2,
        KeyColumnKind::Fixed(4) => kernel::KEY_PACK_W4,
        KeyColumnKind::Fixed(8) => kernel::KEY_PACK_W8,
        KeyColumnKind::Bool => kernel::KEY_PACK_BOOL,
        other => return Err(gpu_error(format!("no narrow packing for key kind {other:?}"))),
    })
}

/// A single narrow key column whose words can be computed in one step (`single_word` in
/// kernels/common.cuh): its value width in bytes (1, 2, 4 or 8) and its null mode. Every row
/// must take part, and a dictionary must have been decoded.
pub(crate) fn single_narrow(plan: &KeyPlan, cols: &[Arc<DeviceColumn>]) -> Option<(usize, u32)> {
    let ([kind], [col], KeyEncoding::Narrow32 | KeyEncoding::Narrow64) = (plan.columns.as_slice(), cols, plan.encoding)
    else {
        return None;
    };
    let bytes = match kind {
        KeyColumnKind::Fixed(b @ (1 | 2 | 4 | 8)) => *b,
        _ => return None,
    };
    let all_take_part = plan.null_mode(0) != NULLS_DROP || col.null_count == 0;
    (all_take_part && !matches!(col.data_type, DataType::Dictionary(..))).then_some((bytes, plan.null_mode(0)))
}

fn hash_kernel(kind: KeyColumnKind) -> Result<Kernel> {
    Ok(match kind {
        KeyColumnKind::Fixed(1) => kernel::KEY_HASH_W1,
        KeyColumnKind::Fixed(2) => kernel::KEY_HASH_W2,
        KeyColumnKind::Fixed(4) => kernel::KEY_HASH_W4,
        KeyColumnKind::Fixed(8) => kernel::KEY_HASH_W8,
        KeyColumnKind::Fixed(16) => kernel::KEY_HASH_W16,
        KeyColumnKind::Bool => kernel::KEY_HASH_BOOL,
        KeyColumnKind::Str32 => kernel::KEY_HASH_STR32,
        KeyColumnKind::Str64 => kernel::KEY_HASH_STR64,
        other => return Err(gpu_error(format!("no hash for key kind {other:?}"))),
    })
}

pub(crate) fn buffer(col: &DeviceColumn, i: usize) -> Result<&DeviceBuffer> {
    col.buffers.get(i).ok_or_else(|| gpu_error(format!("a {} key column lacks buffer {i}", col.data_type)))
}

/// A key column's value buffers as kernel arguments: the values, or a string's offsets and bytes.
fn value_args(kind: KeyColumnKind, col: &DeviceColumn, stream: &Arc<CudaStream>) -> Result<Vec<KArg>> {
    let mut args = vec![ptr(buffer(col, 0)?, stream)];
    if matches!(kind, KeyColumnKind::Str32 | KeyColumnKind::Str64) {
        args.push(ptr(buffer(col, 1)?, stream));
    }
    Ok(args)
}

/// Folds the key columns `cols` (of `rows` rows each, in the plan's order) into key words.
pub fn prepare_keys(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: &KeyPlan,
    cols: &[Arc<DeviceColumn>],
    rows: u64,
) -> Result<KeySide> {
    if cols.len() != plan.columns.len() {
        return Err(gpu_error(format!("{} key columns for a key plan of {}", cols.len(), plan.columns.len())));
    }
    // Dictionaries become their values, so both sides compare values.
    let mut columns = Vec::with_capacity(cols.len());
    for c in cols {
        if c.len as u64 != rows {
            return Err(gpu_error(format!("a key column of {} rows in a batch of {rows}", c.len)));
        }
        columns.push(match c.data_type {
            DataType::Dictionary(..) => Arc::new(decode_dictionary(gpu, stream, c)?),
            _ => Arc::clone(c),
        });
    }
    for (i, c) in columns.iter().enumerate() {
        if plan.null_mode(i) == NULLS_ABSENT && c.null_count > 0 {
            return Err(gpu_error(format!("key column {i} was planned without NULLs but holds {}", c.null_count)));
        }
    }
    let width = plan.encoding.width();
    if let (Some((bytes, null_mode)), [col]) = (single_narrow(plan, &columns), columns.as_slice()) {
        // One narrow column whose rows all take part: its words in one pass (the same words as
        // the packing below).
        let keys = gpu.alloc(stream, rows as usize * width.bytes(), "join keys")?;
        // key_single_X(values, validity, n, null_mode, width32, keys)
        gpu.launch_n(
            stream,
            match bytes {
                1 => kernel::KEY_SINGLE_W1,
                2 => kernel::KEY_SINGLE_W2,
                4 => kernel::KEY_SINGLE_W4,
                _ => kernel::KEY_SINGLE_W8,
            },
            rows,
            &[
                ptr(buffer(col, 0)?, stream),
                opt_ptr(col.validity.as_ref(), stream),
                KArg::U64(rows),
                KArg::U32(null_mode),
                KArg::U32(u32::from(plan.encoding == KeyEncoding::Narrow32)),
                ptr(&keys, stream),
            ],
        )?;
        return Ok(KeySide { keys, items: rows, rows, item_rows: None, takes_part: None, columns });
    }
    let acc = gpu.alloc(stream, rows as usize * 8, "join key hashes")?;
    let ok = gpu.alloc(stream, rows as usize, "join key null flags")?;
    let mut some_dropped = false;
    for (i, (kind, col)) in plan.columns.iter().zip(&columns).enumerate() {
        let validity = opt_ptr(col.validity.as_ref(), stream);
        let null_mode = plan.null_mode(i);
        some_dropped |= null_mode == NULLS_DROP && col.null_count > 0;
        let first = KArg::U32(u32::from(i == 0));
        match plan.encoding {
            KeyEncoding::Narrow32 | KeyEncoding::Narrow64 => {
                let bits = kind.narrow_bits().ok_or_else(|| gpu_error("wide key column in a narrow plan"))?;
                // key_pack_X(values, validity, n, bits, null_mode, first, acc, ok)
                let args = [
                    ptr(buffer(col, 0)?, stream),
                    validity,
                    KArg::U64(rows),
                    KArg::U32(bits),
                    KArg::U32(null_mode),
                    first,
                    ptr(&acc, stream),
                    ptr(&ok, stream),
                ];
                gpu.launch_n(stream, narrow_kernel(*kind)?, rows, &args)?;
            }
            KeyEncoding::Wide => {
                // key_hash_X(values.., validity, n, null_mode, first, acc, ok)
                let mut args = value_args(*kind, col, stream)?;
                args.extend([
                    validity,
                    KArg::U64(rows),
                    KArg::U32(null_mode),
                    first,
                    ptr(&acc, stream),
                    ptr(&ok, stream),
                ]);
                gpu.launch_n(stream, hash_kernel(*kind)?, rows, &args)?;
            }
        }
    }
    let keys = gpu.alloc(stream, rows as usize * width.bytes(), "join keys")?;
    match plan.encoding {
        // key_finish_u32(const u64* acc, u64 n, u32* keys)
        KeyEncoding::Narrow32 => gpu.launch_n(
            stream,
            kernel::KEY_FINISH_U32,
            rows,
            &[ptr(&acc, stream), KArg::U64(rows), ptr(&keys, stream)],
        )?,
        // key_finish_u64(const u64* acc, u64 n, u32 mix, u64* keys)
        _ => gpu.launch_n(
            stream,
            kernel::KEY_FINISH_U64,
            rows,
            &[
                ptr(&acc, stream),
                KArg::U64(rows),
                KArg::U32(u32::from(plan.encoding != KeyEncoding::Wide)),
                ptr(&keys, stream),
            ],
        )?,
    }
    drop(acc);
    if !some_dropped {
        return Ok(KeySide { keys, items: rows, rows, item_rows: None, takes_part: None, columns });
    }
    let (item_rows, items) = select_where(gpu, stream, &ok, rows, 1)?;
    let item_keys = crate::primitives::gather(gpu, stream, &keys, &item_rows, items as u64, width.bytes())?;
    Ok(KeySide {
        keys: item_keys,
        items: items as u64,
        rows,
        item_rows: Some(item_rows),
        takes_part: Some(ok),
        columns,
    })
}

fn verify_kernel(kind: KeyColumnKind) -> Result<Kernel> {
    Ok(match kind {
        KeyColumnKind::Fixed(1) => kernel::VERIFY_W1,
        KeyColumnKind::Fixed(2) => kernel::VERIFY_W2,
        KeyColumnKind::Fixed(4) => kernel::VERIFY_W4,
        KeyColumnKind::Fixed(8) => kernel::VERIFY_W8,
        KeyColumnKind::Fixed(16) => kernel::VERIFY_W16,
        KeyColumnKind::Bool => kernel::VERIFY_BOOL,
        KeyColumnKind::Str32 => kernel::VERIFY_STR32,
        KeyColumnKind::Str64 => kernel::VERIFY_STR64,
        other => return Err(gpu_error(format!("no comparison for key kind {other:?}"))),
    })
}

/// Byte flags, 1 where build row `rows_b[k]` and probe row `rows_p[k]` have equal keys.
#[allow(clippy::too_many_arguments)]
pub fn verify_pairs(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: &KeyPlan,
    build: &KeySide,
    probe: &KeySide,
    rows_b: &DeviceBuffer,
    rows_p: &DeviceBuffer,
    n: u64,
) -> Result<DeviceBuffer> {
    let eq = gpu.alloc_filled(stream, n as usize, 1, "join key comparisons")?;
    for ((kind, b), p) in plan.columns.iter().zip(&build.columns).zip(&probe.columns) {
        let mut args = Vec::with_capacity(10);
        for col in [b, p] {
            args.extend(value_args(*kind, col, stream)?);
            args.push(opt_ptr(col.validity.as_ref(), stream));
        }
        args.extend([ptr(rows_b, stream), ptr(rows_p, stream), KArg::U64(n), ptr(&eq, stream)]);
        // verify_X(b values.., b validity, p values.., p validity, rb, rp, n, eq)
        gpu.launch_n(stream, verify_kernel(*kind)?, n, &args)?;
    }
    Ok(eq)
}

/// Per row of `keys`' side (`rows` rows), the top `bits` bits of its key word: a u32 per row,
/// 0 for a row without a key word (a NULL key that matches nothing). Key words are mixed or
/// hashed, so these MSB digits spread rows over `2^bits` ranges whatever the key type (the
/// out-of-core join's partitions, the multi-GPU join's ranges).
pub fn row_digits(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    keys: &KeySide,
    width: KeyWidth,
    bits: u32,
) -> Result<DeviceBuffer> {
    let digits = gpu.alloc_filled(stream, keys.rows as usize * 4, 0, "the key digit of each row")?;
    if bits == 0 {
        return Ok(digits);
    }
    // spill_part_kX(const K* keys, u64 items, const u32* item_rows, u32 shift, u32* part)
    gpu.launch_n(
        stream,
        width.kernel(kernel::SPILL_PART),
        keys.items,
        &[
            ptr(&keys.keys, stream),
            KArg::U64(keys.items),
            opt_ptr(keys.item_rows.as_ref(), stream),
            KArg::U32(width.bits() - bits),
            ptr(&digits, stream),
        ],
    )?;
    Ok(digits)
}
