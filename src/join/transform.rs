//! The transformation phase of the sort-merge and partitioned joins: a side's (key, row) pairs
//! moved through stable LSD radix passes on the low `end_bit` bits of the key (all bits: a
//! sort; the partition bits: a radix partition). With GFTR, each payload column that can be is
//! moved through the same passes, so that materialisation reads it in order (seed 002, §4.1.4);
//! all of them travel together, ranked once per tile and pass.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::keys::KeySide;
use crate::columns::DeviceColumn;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, ValueWidth, radix_sort_multi, radix_sort_pairs};

/// A side in transformed order.
#[derive(Debug)]
pub struct Transformed {
    /// Key words in transformed order.
    pub keys: DeviceBuffer,
    /// Row at each transformed position.
    pub perm: DeviceBuffer,
    pub items: u64,
    /// GFTR payloads: (column index in the side's batch, its values in transformed order).
    pub columns: Vec<(usize, DeviceBuffer)>,
}

impl Transformed {
    /// The transformed values of column `index`, if it was transformed.
    pub fn column(&self, index: usize) -> Option<&DeviceBuffer> {
        self.columns.iter().find(|(i, _)| *i == index).map(|(_, b)| b)
    }
}

/// Sorts `side`'s items stably by key bits `[0, end_bit)`, carrying their rows.
pub fn transform(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    side: &KeySide,
    width: KeyWidth,
    end_bit: u32,
) -> Result<Transformed> {
    let n = side.items;
    let rows = side.owned_item_rows(gpu, stream)?;
    let keys = gpu.clone_buffer(stream, &side.keys, "join keys")?;
    let (keys, perm) = radix_sort_pairs(gpu, stream, keys, rows, n, width, ValueWidth::U32, 0, end_bit)?;
    Ok(Transformed { keys, perm, items: n, columns: Vec::new() })
}

/// [`transform`] with GFTR: each column of `gftr` (non-null, 4 or 8 bytes wide) moves through
/// the same radix passes as the keys and row ids, in one pass over all of them per digit.
pub fn transform_with_payloads(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    side: &KeySide,
    width: KeyWidth,
    end_bit: u32,
    gftr: &[(usize, &DeviceColumn)],
) -> Result<Transformed> {
    if gftr.is_empty() {
        return transform(gpu, stream, side, width, end_bit);
    }
    let n = side.items;
    let mut values = vec![(side.owned_item_rows(gpu, stream)?, ValueWidth::U32)];
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
        let v = match &side.item_rows {
            Some(r) => crate::primitives::gather(gpu, stream, v, r, n, vw.bytes())?,
            None => gpu.clone_buffer(stream, v, "a GFTR payload")?,
        };
        values.push((v, vw));
    }
    let keys = gpu.clone_buffer(stream, &side.keys, "join keys")?;
    let (keys, mut moved) = radix_sort_multi(gpu, stream, keys, values, n, width, 0, end_bit)?;
    let perm = moved.remove(0);
    let columns = gftr.iter().map(|(i, _)| *i).zip(moved).collect();
    Ok(Transformed { keys, perm, items: n, columns })
}
