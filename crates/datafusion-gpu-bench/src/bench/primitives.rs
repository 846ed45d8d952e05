//! `datafusion-gpu bench primitives`: scan, radix sort/partition and gather on device-resident
//! data, against the bandwidth floor (each input read once, each output written once, at the
//! device-copy bandwidth `doctor` measures in the same process).

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use datafusion_gpu::device::Gpu;
use datafusion_gpu::device::doctor::{self, DoctorOptions};
use datafusion_gpu::error::{CudaResultExt, Result};
use datafusion_gpu::primitives::radix::{SortValues, radix_sort_multi_tiles};
use datafusion_gpu::primitives::{KeyWidth, ValueWidth, exclusive_scan_u32, gather, radix_sort_pairs, upload_slice};

#[derive(Debug, Clone)]
pub struct PrimitiveTiming {
    pub name: String,
    pub rows: u64,
    pub seconds: f64,
    /// Bytes of the floor: inputs read once, outputs written once.
    pub floor_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct PrimitivesReport {
    pub device: String,
    pub copy_bandwidth: f64,
    pub runs: usize,
    pub rows: Vec<PrimitiveTiming>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `op` after one warm-up, synchronising the stream around each run.
pub(crate) fn time(gpu: &Gpu, runs: usize, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    let stream = gpu.stream();
    op()?;
    gpu.context().synchronize().gpu("synchronising")?;
    let mut t = Vec::new();
    for _ in 0..runs.max(1) {
        let s = Instant::now();
        op()?;
        gpu.context().synchronize().gpu("synchronising")?;
        t.push(s.elapsed().as_secs_f64());
    }
    drop(stream);
    Ok(median(t))
}

pub fn run(gpu: &Arc<Gpu>, log2_rows: u32, runs: usize, seed: u64) -> Result<PrimitivesReport> {
    let doc = doctor::run(gpu, DoctorOptions { transfer_bytes: 16 << 20, ..DoctorOptions::default() })?;
    let n = 1u64 << log2_rows;
    let mut rng = StdRng::seed_from_u64(seed);
    let stream = gpu.stream();
    let k32: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let k64: Vec<u64> = (0..n).map(|_| rng.random()).collect();
    let rows32: Vec<u32> = (0..n as u32).collect();
    let small: Vec<u32> = (0..n).map(|_| rng.random_range(0..4)).collect();
    let d_k32 = upload_slice(gpu, &stream, &k32, "bench keys")?;
    let d_k64 = upload_slice(gpu, &stream, &k64, "bench keys")?;
    let d_rows = upload_slice(gpu, &stream, &rows32, "bench rows")?;
    let d_small = upload_slice(gpu, &stream, &small, "bench counts")?;
    let perm: Vec<u32> = {
        let mut p = rows32.clone();
        for i in (1..p.len()).rev() {
            p.swap(i, rng.random_range(0..=i));
        }
        p
    };
    let d_perm = upload_slice(gpu, &stream, &perm, "bench positions")?;
    drop((k32, k64, rows32, small, perm));
    stream.synchronize().gpu("synchronising")?;

    let copy = |b: &datafusion_gpu::device::DeviceBuffer| gpu.clone_buffer(&stream, b, "bench copy");
    let mut rows = Vec::new();
    let mut push = |name: &str, seconds: f64, floor_bytes: u64| {
        rows.push(PrimitiveTiming { name: name.to_string(), rows: n, seconds, floor_bytes })
    };
    let s = time(gpu, runs, || exclusive_scan_u32(gpu, &stream, &d_small, n).map(drop))?;
    push("exclusive scan u32", s, 8 * n);
    // Sorts consume their inputs: each run sorts fresh copies; the copy time is measured apart.
    let c32 = time(gpu, runs, || {
        let _copies = (copy(&d_k32)?, copy(&d_rows)?);
        Ok(())
    })?;
    let c64 = time(gpu, runs, || {
        let _copies = (copy(&d_k64)?, copy(&d_rows)?);
        Ok(())
    })?;
    for (name, keys, width, begin, end, copy_s) in [
        ("radix sort k32+v32, 32 bits", &d_k32, KeyWidth::U32, 0, 32, c32),
        ("radix partition k32+v32, 12 bits", &d_k32, KeyWidth::U32, 0, 12, c32),
        ("radix sort k64+v32, 64 bits", &d_k64, KeyWidth::U64, 0, 64, c64),
    ] {
        let s = time(gpu, runs, || {
            let (k, v) = (copy(keys)?, copy(&d_rows)?);
            radix_sort_pairs(gpu, &stream, k, v, n, width, ValueWidth::U32, begin, end).map(drop)
        })?;
        push(name, (s - copy_s).max(0.0), 2 * n * (width.bytes() as u64 + 4));
    }
    // GFTR's transformation: 4-byte keys with row ids and five 4-byte payloads (the join
    // benchmark's build side) on 16 bits, with tiles of 8 and 16 items per thread.
    let payloads: Vec<_> = (0..5).map(|_| copy(&d_k32)).collect::<Result<Vec<_>>>()?;
    let mut values = vec![SortValues::RowIds];
    values.extend(payloads.iter().map(|b| SortValues::Array(b, ValueWidth::U32)));
    for items in [8u64, 16] {
        let s = time(gpu, runs, || {
            radix_sort_multi_tiles(gpu, &stream, &d_k32, &values, n, KeyWidth::U32, 0, 16, items).map(drop)
        })?;
        push(&format!("radix partition k32+6x32, 16 bits, i{items}"), s, n * (4 + 5 * 4 + 4 + 6 * 4));
    }
    drop(values);
    drop(payloads);
    for width in [4usize, 8] {
        let src = if width == 4 { &d_k32 } else { &d_k64 };
        let s = time(gpu, runs, || gather(gpu, &stream, src, &d_perm, n, width).map(drop))?;
        push(&format!("gather {}-byte values, random", width), s, n * (4 + 2 * width as u64));
    }
    Ok(PrimitivesReport { device: gpu.info().name.clone(), copy_bandwidth: doc.device_copy, runs, rows })
}

/// `B_G / B_R` on this device, by Wu et al.'s Table 1 experiment: a gather of `2^log2_rows` 4-byte
/// values at random positions against one at consecutive positions (same instructions).
pub fn random_penalty(gpu: &Arc<Gpu>, log2_rows: u32, runs: usize, seed: u64) -> Result<f64> {
    let n = 1u64 << log2_rows;
    let mut rng = StdRng::seed_from_u64(seed);
    let stream = gpu.stream();
    let values: Vec<u32> = (0..n).map(|_| rng.random()).collect();
    let mut perm: Vec<u32> = (0..n as u32).collect();
    let d_seq = upload_slice(gpu, &stream, &perm, "gather positions")?;
    for i in (1..perm.len()).rev() {
        perm.swap(i, rng.random_range(0..=i));
    }
    let d_values = upload_slice(gpu, &stream, &values, "gather values")?;
    let d_perm = upload_slice(gpu, &stream, &perm, "gather positions")?;
    stream.synchronize().gpu("synchronising")?;
    let clustered = time(gpu, runs, || gather(gpu, &stream, &d_values, &d_seq, n, 4).map(drop))?;
    let unclustered = time(gpu, runs, || gather(gpu, &stream, &d_values, &d_perm, n, 4).map(drop))?;
    Ok(datafusion_gpu::cost::paper::random_penalty_from_gathers(unclustered / clustered))
}

impl fmt::Display for PrimitivesReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "device {}: device-copy bandwidth {:.0} GB/s (doctor, same process); median of {} runs after 1 warm-up",
            self.device,
            self.copy_bandwidth / 1e9,
            self.runs
        )?;
        writeln!(
            f,
            "{:<36} {:>12} {:>10} {:>12} {:>10} {:>10}",
            "primitive", "rows", "ms", "Grows/s", "floor ms", "x floor"
        )?;
        for r in &self.rows {
            let floor = r.floor_bytes as f64 / self.copy_bandwidth;
            writeln!(
                f,
                "{:<36} {:>12} {:>10.3} {:>12.2} {:>10.3} {:>10.1}",
                r.name,
                r.rows,
                r.seconds * 1e3,
                r.rows as f64 / r.seconds / 1e9,
                floor * 1e3,
                r.seconds / floor
            )?;
        }
        write!(
            f,
            "(floor: inputs read once and outputs written once at the device-copy bandwidth; sort times exclude copying their inputs)"
        )
    }
}
