//! Per-group accumulators (Wu et al. 2025, Algorithm 1's second step): one pass per reduction over
//! the rows and their group ids, by atomics in shared memory when a block's accumulators for
//! every group fit there (flushed once per block), in global memory otherwise
//! (kernels/groupby.cu, `agg_*`).

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use datafusion::arrow::datatypes::DataType;

use crate::columns::DeviceColumn;
use crate::device::kernel::{self, Kernel};
use crate::device::{DeviceBuffer, Gpu, KArg, grid_for, opt_ptr, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::select::bitmap_bytes;

/// What a reduction computes per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccOp {
    /// Rows taking part (COUNT): u64, stored as Int64 or UInt64.
    Count,
    /// Wrapping sums, as DataFusion's SUM: of signed integers into i64, unsigned into u64,
    /// numbers into f64, Decimal128 into i128.
    SumI64,
    SumU64,
    SumF64,
    SumI128,
    /// MIN/MAX of signed integers (dates, times, timestamps, durations), unsigned integers and
    /// Decimal128.
    MinI64,
    MaxI64,
    MinU64,
    MaxU64,
    MinI128,
    MaxI128,
}

impl AccOp {
    /// 8-byte words per group.
    fn words(self) -> usize {
        match self {
            AccOp::SumI128 | AccOp::MinI128 | AccOp::MaxI128 => 2,
            _ => 1,
        }
    }

    /// The accumulating kernels, one pass each (128-bit MIN/MAX: the high words, then the low
    /// words of the rows whose high word won).
    fn kernels(self) -> &'static [Kernel] {
        match self {
            AccOp::Count => &[kernel::AGG_COUNT],
            AccOp::SumI64 => &[kernel::AGG_SUM_I64],
            AccOp::SumU64 => &[kernel::AGG_SUM_U64],
            AccOp::SumF64 => &[kernel::AGG_SUM_F64],
            AccOp::SumI128 => &[kernel::AGG_SUM_I128],
            AccOp::MinI64 => &[kernel::AGG_MIN_I64],
            AccOp::MaxI64 => &[kernel::AGG_MAX_I64],
            AccOp::MinU64 => &[kernel::AGG_MIN_U64],
            AccOp::MaxU64 => &[kernel::AGG_MAX_U64],
            AccOp::MinI128 => &[kernel::AGG_MIN_I128_HI, kernel::AGG_MIN_I128_LO],
            AccOp::MaxI128 => &[kernel::AGG_MAX_I128_HI, kernel::AGG_MAX_I128_LO],
        }
    }

    /// The kernel that sets the accumulators to the operation's identity.
    fn init_kernel(self) -> Kernel {
        match self {
            AccOp::Count => kernel::AGG_COUNT_INIT,
            AccOp::SumI64 => kernel::AGG_SUM_I64_INIT,
            AccOp::SumU64 => kernel::AGG_SUM_U64_INIT,
            AccOp::SumF64 => kernel::AGG_SUM_F64_INIT,
            AccOp::SumI128 => kernel::AGG_SUM_I128_INIT,
            AccOp::MinI64 => kernel::AGG_MIN_I64_INIT,
            AccOp::MaxI64 => kernel::AGG_MAX_I64_INIT,
            AccOp::MinU64 => kernel::AGG_MIN_U64_INIT,
            AccOp::MaxU64 => kernel::AGG_MAX_U64_INIT,
            AccOp::MinI128 => kernel::AGG_MIN_I128_HI_INIT,
            AccOp::MaxI128 => kernel::AGG_MAX_I128_HI_INIT,
        }
    }
}

/// Element type codes of kernels/groupby.cu (`SRC_*`).
pub fn source_code(dt: &DataType) -> Option<u32> {
    use DataType::*;
    Some(match dt {
        Int8 => 0,
        Int16 => 1,
        Int32 | Date32 | Time32(_) => 2,
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => 3,
        UInt8 => 4,
        UInt16 => 5,
        UInt32 => 6,
        UInt64 => 7,
        Float32 => 8,
        Float64 => 9,
        Decimal128(_, _) => 10,
        _ => return None,
    })
}

/// One per-group result over the rows of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduction {
    pub op: AccOp,
    /// Input column (position in the batch); `None` counts every row (COUNT(*)).
    pub input: Option<usize>,
    /// Boolean column of a FILTER clause: rows where it is not true do not take part.
    pub filter: Option<usize>,
    /// Type of the result column.
    pub out_type: DataType,
    /// The result is NULL for a group where no row took part (SUM, MIN, MAX, AVG's count).
    pub nullable: bool,
}

/// Dynamic shared memory a block may use for its accumulators: 48 KiB (the most a launch gets
/// without opting in) less what the `agg_*` kernels declare statically (the ranged mode's bounds).
const SMEM_LIMIT: usize = (48 << 10) - 256;

/// Rows per thread of a clustered pass's chunk (`RANGED_ITEMS` in kernels/groupby.cu).
const RANGED_ITEMS: u64 = 4;

/// Where a reduction keeps its accumulators (kernels/groupby.cu, `MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accumulation {
    /// Global atomics only (the ablation of Wu et al.'s shared-memory variant).
    Global,
    /// Every group's accumulator in each block's shared memory when they fit, else global.
    Shared,
    /// Group ids clustered by position (rows in partitioned or sorted order): each chunk of
    /// rows accumulates its range of group ids in shared memory.
    Clustered,
}

/// The Boolean column of a FILTER clause at position `filter` of `columns`, if any.
pub(crate) fn filter_column(columns: &[Arc<DeviceColumn>], filter: Option<usize>) -> Result<Option<&DeviceColumn>> {
    let Some(i) = filter else { return Ok(None) };
    let f = columns.get(i).ok_or_else(|| gpu_error(format!("FILTER column {i} of {}", columns.len())))?;
    if f.data_type != DataType::Boolean {
        return Err(gpu_error(format!("a FILTER column of type {}", f.data_type)));
    }
    Ok(Some(f))
}

/// Computes `red` per group. `gid` gives each row's group (`None`: one group).
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    columns: &[Arc<DeviceColumn>],
    red: &Reduction,
    gid: Option<&DeviceBuffer>,
    rows: u64,
    groups: u64,
    accumulation: Accumulation,
) -> Result<DeviceColumn> {
    let input = match red.input {
        Some(i) => {
            Some(columns.get(i).ok_or_else(|| gpu_error(format!("reduction over column {i} of {}", columns.len())))?)
        }
        None => None,
    };
    let filter = filter_column(columns, red.filter)?;
    let src = match (red.op, input) {
        (AccOp::Count, _) | (_, None) => 0,
        (_, Some(c)) => source_code(&c.data_type)
            .ok_or_else(|| gpu_error(format!("a GPU {:?} over a {} column", red.op, c.data_type)))?,
    };
    if red.op != AccOp::Count && input.is_none() {
        return Err(gpu_error(format!("a GPU {:?} needs an input column", red.op)));
    }
    if gid.is_none() && groups != 1 {
        return Err(gpu_error(format!("a GPU reduction without group ids over {groups} groups: it has one")));
    }
    if groups > u32::MAX as u64 {
        return Err(gpu_error(format!("{groups} groups in one GPU batch")));
    }
    let words = red.op.words();
    let has_acc = red.op != AccOp::Count;
    let counted = red.op == AccOp::Count || red.nullable;
    let acc = if has_acc {
        let acc = gpu.alloc(stream, groups as usize * words * 8, "aggregate accumulators")?;
        // agg_X_init(u64* acc, u64 groups)
        gpu.launch_n(stream, red.op.init_kernel(), groups * words as u64, &[ptr(&acc, stream), KArg::U64(groups)])?;
        Some(acc)
    } else {
        None
    };
    let counts =
        if counted { Some(gpu.alloc_filled(stream, groups as usize * 8, 0, "aggregate counts")?) } else { None };
    let group_bytes = 8 * (if has_acc { words } else { 0 } + usize::from(counted));
    let smem = groups as usize * group_bytes;
    let mut cfg: LaunchConfig = grid_for(rows, 256, gpu.info().sm_count);
    // kernels/groupby.cu: MODE_GLOBAL 0, MODE_SHARED 1, MODE_RANGED 2, MODE_ONE 3; `groups` is
    // the capacity in groups of a ranged chunk's shared memory.
    let (mode, groups_arg) = match accumulation {
        // One group: an accumulator per thread in shared memory, merged per block (a resident
        // grid: each block flushes once).
        _ if gid.is_none() => {
            cfg.grid_dim.0 = cfg.grid_dim.0.min(gpu.info().sm_count.max(1) as u32 * (2048 / cfg.block_dim.0));
            cfg.shared_mem_bytes = cfg.block_dim.0 * group_bytes as u32;
            (3u32, groups as u32)
        }
        Accumulation::Shared if smem <= SMEM_LIMIT => {
            // Each block flushes every group once: a resident grid, as many blocks per SM as
            // their shared memory lets in (at most the SM's 2048 threads).
            let per_sm = ((200usize << 10) / smem.max(1)).clamp(1, 8) as u32;
            cfg.grid_dim.0 = cfg.grid_dim.0.min(gpu.info().sm_count.max(1) as u32 * per_sm);
            cfg.shared_mem_bytes = smem as u32;
            (1, groups as u32)
        }
        Accumulation::Clustered => {
            // A chunk may span two partitions' groups: up to 96 KiB where the GPU allows it.
            let limit = (gpu.info().shared_memory_per_block_optin.max(0) as usize).saturating_sub(1024).min(96 << 10);
            let cap = limit.max(SMEM_LIMIT) / group_bytes;
            cfg.grid_dim.0 = rows.div_ceil(256 * RANGED_ITEMS).clamp(1, gpu.info().sm_count.max(1) as u64 * 8) as u32;
            cfg.shared_mem_bytes = (cap * group_bytes) as u32;
            (2, cap as u32)
        }
        _ => (0, groups as u32),
    };
    if rows > 0 {
        for (pass, kernel) in red.op.kernels().iter().enumerate() {
            let acc_arg = acc.as_ref().or(counts.as_ref());
            // Only the first pass of a 128-bit MIN/MAX counts the rows.
            let counts_arg = if pass == 0 { counts.as_ref() } else { None };
            // agg_X(values, src, validity, fvalues, fvalidity, gid, n, groups, mode, acc, counts)
            let args = [
                opt_ptr(input.and_then(|c| c.buffers.first()), stream),
                KArg::U32(src),
                opt_ptr(input.and_then(|c| c.validity.as_ref()), stream),
                opt_ptr(filter.and_then(|f| f.buffers.first()), stream),
                opt_ptr(filter.and_then(|f| f.validity.as_ref()), stream),
                opt_ptr(gid, stream),
                KArg::U64(rows),
                KArg::U32(groups_arg),
                KArg::U32(mode),
                opt_ptr(acc_arg, stream),
                opt_ptr(counts_arg, stream),
            ];
            gpu.launch(stream, *kernel, cfg, &args)?;
        }
    }
    let (validity, null_count) = match &counts {
        Some(c) if red.nullable => {
            let (bits, nulls) = validity_of(gpu, stream, c, groups)?;
            if nulls == 0 { (None, 0) } else { (Some(bits), nulls) }
        }
        _ => (None, 0),
    };
    let values = match (red.op, acc, counts) {
        (AccOp::Count, _, Some(c)) => c,
        (_, Some(acc), _) => narrow(gpu, stream, red, acc, groups)?,
        _ => return Err(gpu_error(format!("a GPU {:?} produced no result", red.op))),
    };
    Ok(DeviceColumn {
        data_type: red.out_type.clone(),
        len: groups as usize,
        null_count,
        validity,
        buffers: vec![values],
        children: vec![],
    })
}

/// The accumulators as values of the result type (MIN/MAX of narrow columns back to their width).
fn narrow(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    red: &Reduction,
    acc: DeviceBuffer,
    groups: u64,
) -> Result<DeviceBuffer> {
    let width = red
        .out_type
        .primitive_width()
        .ok_or_else(|| gpu_error(format!("a GPU aggregate result of type {}", red.out_type)))?;
    if width == 8 * red.op.words() {
        return Ok(acc);
    }
    if red.op.words() != 1 || !matches!(width, 1 | 2 | 4) {
        return Err(gpu_error(format!("a GPU {:?} cannot give a {} result", red.op, red.out_type)));
    }
    let out = gpu.alloc(stream, groups as usize * width, "aggregate results")?;
    // agg_narrow(const u64* acc, u64 n, u32 width, u8* out)
    gpu.launch_n(
        stream,
        kernel::AGG_NARROW,
        groups,
        &[ptr(&acc, stream), KArg::U64(groups), KArg::U32(width as u32), ptr(&out, stream)],
    )?;
    Ok(out)
}

/// Validity bitmap (set where `counts` > 0) and the number of NULLs.
fn validity_of(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    counts: &DeviceBuffer,
    groups: u64,
) -> Result<(DeviceBuffer, usize)> {
    let bits = gpu.alloc(stream, bitmap_bytes(groups), "aggregate validity")?;
    let nulls = gpu.alloc_filled(stream, 8, 0, "aggregate null count")?;
    // agg_validity(const u64* counts, u64 n, u32* bits, u64* nulls)
    gpu.launch_n(
        stream,
        kernel::AGG_VALIDITY,
        groups.div_ceil(32),
        &[ptr(counts, stream), KArg::U64(groups), ptr(&bits, stream), ptr(&nulls, stream)],
    )?;
    let nulls = gpu.read::<u64>(stream, &nulls, 0, 1)?[0] as usize;
    Ok((bits, nulls))
}
