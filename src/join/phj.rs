//! PHJ: the radix-partitioned hash join of Wu et al. 2025 (§4.1.4). Both sides are partitioned by a
//! stable radix sort on the low `bits` bits of their key words (mixed, so the bits are
//! uniform); each partition pair is joined by thread blocks with a chained hash table of the
//! build rows in shared memory. A work unit is one build sub-partition of at most
//! [`CAPACITY`] rows and one slice of at most [`PROBE_UNIT`] probe rows of the same partition,
//! so an oversized (skewed) partition spreads over many blocks instead of one.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};

use super::transform::Transformed;
use crate::device::kernel;
use crate::device::{DeviceBuffer, Gpu, KArg, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::radix::{KeyWidth, boundaries};

/// Build rows per work unit: the shared-memory table's entries (`PHJ_CAPACITY`).
pub const CAPACITY: u64 = 4096;
/// Chain heads of the shared-memory table (`PHJ_HEADS`).
const HEADS: u64 = 4096;
/// Threads per block (`PHJ_THREADS`).
const THREADS: u32 = 512;
/// Probe rows per work unit.
pub const PROBE_UNIT: u64 = 4096;
/// Flag in a unit's build length: the unit holds its whole build partition (`PHJ_ONLY`).
const ONLY: u32 = 0x8000_0000;
/// Most partition bits (two radix passes).
pub const MAX_BITS: u32 = 16;

/// Partition bits for `build_items` build rows: partitions of about half a unit's capacity.
pub fn partition_bits(build_items: u64) -> u32 {
    let target = CAPACITY / 2;
    if build_items <= target {
        return 0;
    }
    let parts = build_items.div_ceil(target);
    (64 - (parts - 1).leading_zeros()).min(MAX_BITS)
}

/// Partition offsets of a side partitioned on `bits` bits: `2^bits + 1` values, read to the host.
pub fn offsets(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    side: &Transformed,
    bits: u32,
    width: KeyWidth,
) -> Result<Vec<u32>> {
    let out = boundaries(gpu, stream, &side.keys, side.items, bits, width)?;
    gpu.read::<u32>(stream, &out, 0, (1usize << bits) + 1)
}

/// The work units of a partition pair list: `[build begin, build length | ONLY, probe begin,
/// probe length]` for each build sub-partition and probe slice of each partition.
pub fn units(build: &[u32], probe: &[u32]) -> Result<Vec<u32>> {
    if build.len() != probe.len() || build.is_empty() {
        return Err(gpu_error("partition offsets of both sides must have the same length"));
    }
    let mut out = Vec::new();
    for p in 0..build.len() - 1 {
        let (bs, bl) = (build[p] as u64, (build[p + 1] - build[p]) as u64);
        let (ps, pl) = (probe[p] as u64, (probe[p + 1] - probe[p]) as u64);
        if bl == 0 || pl == 0 {
            continue;
        }
        let subs = bl.div_ceil(CAPACITY);
        let only = if subs == 1 { ONLY } else { 0 };
        for s in 0..subs {
            let b0 = bs + s * CAPACITY;
            let blen = CAPACITY.min(bl - s * CAPACITY) as u32 | only;
            let mut p0 = ps;
            while p0 < ps + pl {
                let plen = PROBE_UNIT.min(ps + pl - p0);
                out.extend_from_slice(&[b0 as u32, blen, p0 as u32, plen as u32]);
                p0 += plen;
            }
        }
    }
    Ok(out)
}

fn shared_bytes(width: KeyWidth) -> u32 {
    (width.bytes() as u64 * CAPACITY + 4 * HEADS + 2 * CAPACITY) as u32
}

fn unit_grid(gpu: &Gpu, nunits: u64, width: KeyWidth) -> LaunchConfig {
    let blocks = nunits.clamp(1, gpu.info().sm_count.max(1) as u64 * 16) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: shared_bytes(width) }
}

/// Match counts of the probe items, given the units (uploaded) of the partition pairs.
#[allow(clippy::too_many_arguments)]
pub fn count(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    build: &Transformed,
    probe: &Transformed,
    units: &DeviceBuffer,
    nunits: u64,
    bits: u32,
    width: KeyWidth,
) -> Result<DeviceBuffer> {
    let counts = gpu.alloc_filled(stream, probe.items as usize * 4, 0, "join match counts")?;
    if nunits == 0 {
        return Ok(counts);
    }
    // phj_count_kX(bkeys, pkeys, units, nunits, bits, counts)
    gpu.launch(
        stream,
        width.kernel(kernel::PHJ_COUNT),
        unit_grid(gpu, nunits, width),
        &[
            ptr(&build.keys, stream),
            ptr(&probe.keys, stream),
            ptr(units, stream),
            KArg::U64(nunits),
            KArg::U32(bits),
            ptr(&counts, stream),
        ],
    )?;
    Ok(counts)
}

/// Writes the `n` pairs of the probe items `[j0, j1)`, whose output starts at `o_base`.
#[allow(clippy::too_many_arguments)]
pub fn write(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    build: &Transformed,
    probe: &Transformed,
    units: &DeviceBuffer,
    nunits: u64,
    bits: u32,
    width: KeyWidth,
    offsets: &DeviceBuffer,
    cursor: &DeviceBuffer,
    window: (u64, u64, u64, u64),
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let (j0, j1, o_base, n) = window;
    let out_b = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    let out_p = gpu.alloc(stream, n as usize * 4, "join pairs")?;
    // phj_write_kX(bkeys, pkeys, units, nunits, bits, offsets, cursor, j0, j1, o_base, out_b, out_p)
    gpu.launch(
        stream,
        width.kernel(kernel::PHJ_WRITE),
        unit_grid(gpu, nunits, width),
        &[
            ptr(&build.keys, stream),
            ptr(&probe.keys, stream),
            ptr(units, stream),
            KArg::U64(nunits),
            KArg::U32(bits),
            ptr(offsets, stream),
            ptr(cursor, stream),
            KArg::U64(j0),
            KArg::U64(j1),
            KArg::U64(o_base),
            ptr(&out_b, stream),
            ptr(&out_p, stream),
        ],
    )?;
    Ok((out_b, out_p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_bits_keep_partitions_near_half_a_unit() {
        assert_eq!(partition_bits(0), 0);
        assert_eq!(partition_bits(2048), 0);
        assert_eq!(partition_bits(2049), 1);
        assert_eq!(partition_bits(1 << 20), 9);
        assert_eq!(partition_bits(1 << 27), 16);
        assert_eq!(partition_bits(1 << 30), MAX_BITS);
    }

    #[test]
    fn units_cover_every_partition_pair_once() {
        // Partition 0: 5000 build rows (two sub-partitions), 9000 probe rows (three slices);
        // partition 1: no build rows; partition 2: 10 and 1.
        let build = [0u32, 5000, 5000, 5010];
        let probe = [0u32, 9000, 9500, 9501];
        let u = units(&build, &probe).unwrap();
        let units: Vec<&[u32]> = u.chunks(4).collect();
        assert_eq!(units.len(), 2 * 3 + 1);
        assert_eq!(units[0], &[0, 4096, 0, 4096]);
        assert_eq!(units[2], &[0, 4096, 8192, 808]);
        assert_eq!(units[3], &[4096, 904, 0, 4096]);
        assert_eq!(units[6], &[5000, 10 | ONLY, 9500, 1]);
        // Every (build row, probe row) pair of a partition is covered exactly once.
        let mut covered = 0u64;
        for w in &units {
            covered += (w[1] & !ONLY) as u64 * w[3] as u64;
        }
        assert_eq!(covered, 5000 * 9000 + 10);
    }
}
