//! The transformation phase of the sort-merge and partitioned joins: a side's (key, row) pairs
//! moved through stable LSD radix passes on the low `end_bit` bits of the key (all bits: a
//! sort; the partition bits: a radix partition). With GFTR, each payload column that can be is
//! moved through the same passes, so that materialisation reads it in order (Wu et al. 2025, §4.1.4);
//! all of them travel together, ranked once per tile and pass.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::keys::KeySide;
use crate::columns::DeviceColumn;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, SortValues, ValueWidth, radix_sort_multi};

/// A side in transformed order.
#[derive(Debug)]
pub struct Transformed {
    /// Key words in transformed order.
    pub keys: DeviceBuffer,
    /// Row at each transformed position; `None` when the join needs no row ids of this side
    /// (every output column of it moved with the keys, and no filter, flag or key check reads
    /// its rows): Wu et al.'s GFTR without the row-id column.
    pub perm: Option<DeviceBuffer>,
    pub items: u64,
    /// GFTR payloads: (column index in the side's batch, its values in transformed order).
    pub columns: Vec<(usize, DeviceBuffer)>,
}

impl Transformed {
    /// The transformed values of column `index`, if it was transformed.
    pub fn column(&self, index: usize) -> Option<&DeviceBuffer> {
        self.columns.iter().find(|(i, _)| *i == index).map(|(_, b)| b)
    }

    /// The indices of the columns that moved with the keys.
    pub fn column_indices(&self) -> Vec<usize> {
        self.columns.iter().map(|(i, _)| *i).collect()
    }
}

/// Sorts `side`'s items stably by key bits `[0, end_bit)`. Each column of `gftr` (non-null, 4
/// or 8 bytes wide) moves through the same radix passes (GFTR), all in one pass over every
/// array per digit; the rows move with them when `keep_rows`. The side's buffers are only read.
pub fn transform_with_payloads(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    side: &KeySide,
    width: KeyWidth,
    end_bit: u32,
    gftr: &[(usize, &DeviceColumn)],
    keep_rows: bool,
) -> Result<Transformed> {
    let n = side.items;
    let mut widths = Vec::with_capacity(gftr.len());
    for (_, col) in gftr {
        let vw = match col.data_type.primitive_width() {
            Some(4) => ValueWidth::U32,
            Some(8) => ValueWidth::U64,
            _ => return Err(gpu_error(format!("a {} column cannot be moved by the radix passes", col.data_type))),
        };
        if col.validity.is_some() {
            return Err(gpu_error("a nullable column cannot take the GFTR path"));
        }
        let v = col.buffers.first().ok_or_else(|| gpu_error("a column without values"))?;
        widths.push((v, vw));
    }
    // Items that are a subset of the rows: the payloads are gathered to item order first.
    let gathered = match &side.item_rows {
        Some(r) => widths
            .iter()
            .map(|(v, vw)| crate::primitives::gather(gpu, stream, v, r, n, vw.bytes()))
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let mut values = Vec::with_capacity(gftr.len() + 1);
    if keep_rows {
        values.push(match &side.item_rows {
            Some(r) => SortValues::Array(r, ValueWidth::U32),
            None => SortValues::RowIds,
        });
    }
    for (j, (v, vw)) in widths.iter().enumerate() {
        values.push(SortValues::Array(gathered.get(j).unwrap_or(v), *vw));
    }
    let (keys, mut moved) = radix_sort_multi(gpu, stream, &side.keys, &values, n, width, 0, end_bit)?;
    let perm = if keep_rows { Some(moved.remove(0)) } else { None };
    let columns = gftr.iter().map(|(i, _)| *i).zip(moved).collect();
    Ok(Transformed { keys, perm, items: n, columns })
}
