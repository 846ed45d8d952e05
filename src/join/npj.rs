//! NPJ: the non-partitioned hash join (Wu et al.'s cuDF-style baseline). One global
//! open-addressing table of the distinct build keys; each entry holds the run of its build rows
//! in a CSR array (or, when every build key is unique, the row itself). The probe side keeps its
//! order, so its gathers are clustered; the build side's are random.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::keys::KeySide;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, ValueWidth, radix_sort_pairs};
use crate::primitives::scan::{ScanKind, exclusive_scan};

/// Bytes of one packed table entry (kernels/join.cu, `npj_pack`).
const ENTRY_BYTES: usize = 16;

/// The built table.
#[derive(Debug)]
pub struct NpjBuild {
    /// `slots + 1` packed entries: key, start, count.
    table: DeviceBuffer,
    mask: u64,
    /// Build row at each CSR position; `None` when the entries hold rows directly (unique keys).
    pub csr_rows: Option<DeviceBuffer>,
    width: KeyWidth,
}

impl NpjBuild {
    /// Builds the table over the build items. With `ordered`, each key's rows keep their build
    /// order (the probe-ordered output of DataFusion's hash join lists a probe row's matches in
    /// build order).
    pub fn build(gpu: &Gpu, stream: &Arc<CudaStream>, keys: &KeySide, width: KeyWidth, ordered: bool) -> Result<Self> {
        let n = keys.items;
        if n >= (1 << 31) {
            return Err(gpu_error(format!("a GPU hash table over {n} build rows: at most 2^31 - 1")));
        }
        let slots = (n + n / 2).max(1024).next_power_of_two();
        let mask = slots - 1;
        let kw = width.bytes();
        let slot_keys = gpu.alloc_filled(stream, slots as usize * kw, 0xff, "the join's hash table")?;
        let counts = gpu.alloc_filled(stream, (slots as usize + 1) * 4, 0, "the join's hash table")?;
        let item_slot = gpu.alloc(stream, n as usize * 4, "the join's hash table")?;
        let slot_row = gpu.alloc(stream, (slots as usize + 1) * 4, "the join's hash table")?;
        let distinct = gpu.alloc_filled(stream, 4, 0, "the join's hash table")?;
        // npj_insert_kX(keys, item_rows, n, slot_keys, counts, mask, item_slot, slot_row, distinct)
        gpu.launch_n(
            stream,
            width.kernel(kernel::NPJ_INSERT),
            n,
            &[
                ptr(&keys.keys, stream),
                opt_ptr(keys.item_rows.as_ref(), stream),
                KArg::U64(n),
                ptr(&slot_keys, stream),
                ptr(&counts, stream),
                KArg::U64(mask),
                ptr(&item_slot, stream),
                ptr(&slot_row, stream),
                ptr(&distinct, stream),
            ],
        )?;
        let distinct = gpu.read::<u32>(stream, &distinct, 0, 1)?[0] as u64;
        // Every key unique: each entry holds its row, and no CSR runs are needed.
        let direct = distinct == n;
        let (starts, csr_rows) = if direct {
            (slot_row, None)
        } else {
            drop(slot_row);
            let (starts, _) = exclusive_scan(gpu, stream, &counts, slots + 1, ScanKind::U32, false)?;
            let csr = if ordered {
                // A stable sort of (slot, row) by slot puts each key's rows in build order.
                let rows = keys.owned_item_rows(gpu, stream)?;
                let bits = 64 - slots.leading_zeros(); // slot ids go up to `slots` inclusive
                radix_sort_pairs(gpu, stream, item_slot, rows, n, KeyWidth::U32, ValueWidth::U32, 0, bits)?.1
            } else {
                let cursor = gpu.alloc_filled(stream, (slots as usize + 1) * 4, 0, "the join's hash table")?;
                let csr = gpu.alloc(stream, n as usize * 4, "the join's hash table")?;
                // npj_fill(item_slot, item_rows or null, n, starts, cursor, csr_rows)
                gpu.launch_n(
                    stream,
                    kernel::NPJ_FILL,
                    n,
                    &[
                        ptr(&item_slot, stream),
                        opt_ptr(keys.item_rows.as_ref(), stream),
                        KArg::U64(n),
                        ptr(&starts, stream),
                        ptr(&cursor, stream),
                        ptr(&csr, stream),
                    ],
                )?;
                csr
            };
            (starts, Some(csr))
        };
        let table = gpu.alloc(stream, (slots as usize + 1) * ENTRY_BYTES, "the join's hash table")?;
        // npj_pack_kX(slot_keys, counts, starts (rows when direct), slots + 1, table)
        gpu.launch_n(
            stream,
            width.kernel(kernel::NPJ_PACK),
            slots + 1,
            &[
                ptr(&slot_keys, stream),
                ptr(&counts, stream),
                ptr(&starts, stream),
                KArg::U64(slots + 1),
                ptr(&table, stream),
            ],
        )?;
        Ok(NpjBuild { table, mask, csr_rows, width })
    }

    /// Per probe item, the start of its matches' run and their count.
    pub fn probe(&self, gpu: &Gpu, stream: &Arc<CudaStream>, probe: &KeySide) -> Result<(DeviceBuffer, DeviceBuffer)> {
        let n = probe.items;
        let start = gpu.alloc(stream, n as usize * 4, "join match runs")?;
        let count = gpu.alloc(stream, n as usize * 4, "join match counts")?;
        // npj_probe_kX(keys, n, table, mask, start, count)
        gpu.launch_n(
            stream,
            self.width.kernel(kernel::NPJ_PROBE),
            n,
            &[
                ptr(&probe.keys, stream),
                KArg::U64(n),
                ptr(&self.table, stream),
                KArg::U64(self.mask),
                ptr(&start, stream),
                ptr(&count, stream),
            ],
        )?;
        Ok((start, count))
    }
}
