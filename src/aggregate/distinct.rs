//! COUNT(DISTINCT x) on the GPU, in DataFusion's state form: each group's distinct non-NULL
//! values as a `List` (the state `count(DISTINCT x)` keeps between its Partial and Final stages,
//! so either stage can run on the CPU). The count is the list's length.
//!
//! Over one batch whose rows already have their group ids (`gid`, from the group-by of the
//! aggregate's keys):
//! 1. the values that count: not NULL, FILTER true (raw rows), or every value of each row's list
//!    (merging states: values are mapped to their row by a binary search of the list offsets);
//! 2. the distinct (group id, value) pairs, by the hash group ids over those two columns;
//! 3. each group's list: pairs counted per group (one atomic per group in a warp), offsets by an
//!    exclusive scan, each pair's value scattered into its group's range and gathered.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use datafusion::arrow::datatypes::DataType;

use super::groups::{CollisionTest, GroupIdMethod, group_ids};
use super::reduce::filter_column;
use crate::columns::DeviceColumn;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::materialize::{GatherSpec, decode_dictionary, gather_columns};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::{compose, select_where};

/// One COUNT(DISTINCT x) of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistinctSpec {
    /// The batch column of x (raw rows), or of its List state (merging states).
    pub input: usize,
    /// Boolean column of a FILTER clause (raw rows only).
    pub filter: Option<usize>,
    /// The state's type: `List` of x's values (a dictionary's value type).
    pub list_type: DataType,
}

/// Each group's distinct values of `spec` as a List column of `groups` rows. `gid` gives each
/// of the batch's `rows` rows its group (`None`: one group).
#[allow(clippy::too_many_arguments)]
pub fn distinct_lists(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    columns: &[Arc<DeviceColumn>],
    spec: &DistinctSpec,
    gid: Option<&DeviceBuffer>,
    rows: u64,
    groups: u64,
    test: CollisionTest,
) -> Result<DeviceColumn> {
    let col = columns
        .get(spec.input)
        .ok_or_else(|| gpu_error(format!("COUNT(DISTINCT) over column {} of {}", spec.input, columns.len())))?;
    let DataType::List(item) = &spec.list_type else {
        return Err(gpu_error(format!("a COUNT(DISTINCT) state of type {}", spec.list_type)));
    };
    if groups >= i32::MAX as u64 || (gid.is_none() && groups != 1) {
        return Err(gpu_error(format!("COUNT(DISTINCT) lists for {groups} groups")));
    }
    // The values, and for lists the row (group) of each.
    let (values, row_of_value, n) = match &col.data_type {
        DataType::List(_) => {
            if spec.filter.is_some() {
                return Err(gpu_error("a FILTER on merged COUNT(DISTINCT) states"));
            }
            if col.len as u64 != rows {
                return Err(gpu_error(format!("{} lists in a batch of {rows} rows", col.len)));
            }
            let values = col.children.first().ok_or_else(|| gpu_error("a List column without values"))?;
            let offsets = col.buffers.first().ok_or_else(|| gpu_error("a List column without offsets"))?;
            let n = values.len as u64;
            let map = gpu.alloc(stream, n as usize * 4, "rows of list values")?;
            // dc_list_rows(const int* offsets, const u8* validity, u64 lists, u64 values, u32* rows)
            gpu.launch_n(
                stream,
                kernel::DC_LIST_ROWS,
                n,
                &[
                    ptr(offsets, stream),
                    opt_ptr(col.validity.as_ref(), stream),
                    KArg::U64(rows),
                    KArg::U64(n),
                    ptr(&map, stream),
                ],
            )?;
            (values, Some(map), n)
        }
        _ => (col.as_ref(), None, rows),
    };
    if n >= u32::MAX as u64 {
        return Err(gpu_error(format!("COUNT(DISTINCT) over {n} values in one batch: at most 2^32 - 2")));
    }
    // A dictionary's values stand for its keys (NULL where the key or its value is NULL).
    let decoded;
    let values = if matches!(values.data_type, DataType::Dictionary(..)) {
        decoded = decode_dictionary(gpu, stream, values)?;
        &decoded
    } else {
        values
    };
    if values.data_type != *item.data_type() {
        return Err(gpu_error(format!(
            "COUNT(DISTINCT) of {} values into a list of {}",
            values.data_type,
            item.data_type()
        )));
    }
    let filter = filter_column(columns, spec.filter)?;

    // 1. The values that count.
    let keep = gpu.alloc(stream, n as usize, "COUNT(DISTINCT) flags")?;
    // dc_keep(const u8* validity, const u32* rows, const u8* fvalues, const u8* fvalidity, u64 n, u8* keep)
    gpu.launch_n(
        stream,
        kernel::DC_KEEP,
        n,
        &[
            opt_ptr(values.validity.as_ref(), stream),
            opt_ptr(row_of_value.as_ref(), stream),
            opt_ptr(filter.and_then(|f| f.buffers.first()), stream),
            opt_ptr(filter.and_then(|f| f.validity.as_ref()), stream),
            KArg::U64(n),
            ptr(&keep, stream),
        ],
    )?;
    let (sel, m) = select_where(gpu, stream, &keep, n, 1)?;
    drop(keep);
    let m = m as u64;
    let x = gather_columns(gpu, stream, vec![GatherSpec::Rows { col: values, rows: &sel, may_be_null: false }], m)?
        .pop()
        .ok_or_else(|| gpu_error("COUNT(DISTINCT): the gather returned no column"))?;

    // 2. Distinct (group, value) pairs.
    let mut keys = Vec::with_capacity(2);
    if let Some(gid) = gid {
        let rows_sel = match &row_of_value {
            Some(map) => compose(gpu, stream, map, &sel, m)?,
            None => sel,
        };
        let gid_sel = compose(gpu, stream, gid, &rows_sel, m)?;
        keys.push(Arc::new(DeviceColumn {
            data_type: DataType::UInt32,
            len: m as usize,
            null_count: 0,
            validity: None,
            buffers: vec![gid_sel],
            children: vec![],
        }));
    }
    let x = Arc::new(x);
    keys.push(Arc::clone(&x));
    let pairs = group_ids(gpu, stream, &keys, m, GroupIdMethod::Hash, test)?;
    let p = pairs.groups;
    if p > i32::MAX as u64 {
        return Err(gpu_error(format!("{p} distinct values in one List state: at most 2^31 - 1")));
    }
    let reps = pairs.reps.ok_or_else(|| gpu_error("COUNT(DISTINCT): pairs without representatives"))?;
    let gid_pair = match (gid, keys.first()) {
        (Some(_), Some(g)) => {
            let g = g.buffers.first().ok_or_else(|| gpu_error("a group id column without values"))?;
            Some(compose(gpu, stream, g, &reps, p)?)
        }
        _ => None,
    };
    drop(keys);

    // 3. Each group's list: counts, offsets, and the pairs' values in group order.
    let counts = gpu.alloc_filled(stream, (groups as usize + 1) * 4, 0, "COUNT(DISTINCT) counts")?;
    // dc_count(const u32* gid, u64 n, u32* counts)
    gpu.launch_n(
        stream,
        kernel::DC_COUNT,
        p,
        &[opt_ptr(gid_pair.as_ref(), stream), KArg::U64(p), ptr(&counts, stream)],
    )?;
    // The last count is 0: its exclusive sum is the total, the lists' end offset.
    let offsets = exclusive_scan(gpu, stream, &counts, groups + 1, ScanKind::U32, false)?.0;
    drop(counts);
    let cursor = gpu.alloc_filled(stream, groups.max(1) as usize * 4, 0, "COUNT(DISTINCT) cursors")?;
    let order = gpu.alloc(stream, p as usize * 4, "COUNT(DISTINCT) list order")?;
    // dc_scatter(const u32* gid, const u32* reps, u64 n, const int* offsets, u32* cursor, u32* out)
    gpu.launch_n(
        stream,
        kernel::DC_SCATTER,
        p,
        &[
            opt_ptr(gid_pair.as_ref(), stream),
            ptr(&reps, stream),
            KArg::U64(p),
            ptr(&offsets, stream),
            ptr(&cursor, stream),
            ptr(&order, stream),
        ],
    )?;
    let listed =
        gather_columns(gpu, stream, vec![GatherSpec::Rows { col: x.as_ref(), rows: &order, may_be_null: false }], p)?
            .pop()
            .ok_or_else(|| gpu_error("COUNT(DISTINCT): the gather returned no column"))?;
    Ok(DeviceColumn {
        data_type: spec.list_type.clone(),
        len: groups as usize,
        null_count: 0,
        validity: None,
        buffers: vec![offsets],
        children: vec![listed],
    })
}
