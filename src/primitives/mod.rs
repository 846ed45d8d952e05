//! Safe wrappers of the kernel families that the join and group-by algorithms are written in:
//! exclusive scan, stable radix passes (sort and partition), selection, gather, key words
//! (`keys`) and column materialisation (`materialize`). Each is a function over device buffers on
//! one stream, tested against a CPU reference.

pub mod gather;
pub mod keys;
pub mod materialize;
pub mod radix;
pub mod scan;
pub mod select;

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::datatypes::ArrowNativeType;

use crate::device::transfer::UploadPiece;
use crate::device::{DeviceBuffer, Gpu};
use crate::error::{Result, gpu_error};

pub use gather::gather;
pub use radix::{KeyWidth, ValueWidth, radix_sort_pairs};
pub use scan::{ScanKind, exclusive_scan, exclusive_scan_u32};

/// One block per tile of `tile` items.
pub(crate) fn tiles(n: u64, tile: u64, threads: u32) -> Result<LaunchConfig> {
    let blocks = n.div_ceil(tile);
    if blocks > i32::MAX as u64 {
        return Err(gpu_error(format!("{n} items exceed one kernel launch")));
    }
    Ok(LaunchConfig { grid_dim: (blocks.max(1) as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 })
}

/// Copies a host slice into a new device buffer (through the runtime's pinned path).
pub fn upload_slice<T: ArrowNativeType>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    values: &[T],
    what: &str,
) -> Result<DeviceBuffer> {
    let host = Buffer::from_slice_ref(values);
    let dev = gpu.alloc(stream, host.len(), what)?;
    gpu.upload(stream, &[UploadPiece::new(&host, &dev, 0)])?;
    Ok(dev)
}

/// Copies the first `n` values of a device buffer back to the host.
pub fn download_vec<T: ArrowNativeType>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    buf: &DeviceBuffer,
    n: usize,
) -> Result<Vec<T>> {
    let bytes = n * std::mem::size_of::<T>();
    if bytes > buf.len() {
        return Err(gpu_error(format!("reading {n} values from a buffer of {} bytes", buf.len())));
    }
    let host = gpu.download(stream, &[buf])?;
    Ok(host[0].typed_data::<T>()[..n].to_vec())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};

    #[test]
    fn gpu_exclusive_scan_matches_cpu() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_exclusive_scan_matches_cpu") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_exclusive_scan_matches_cpu"));
        let stream = gpu.stream();
        for n in [1usize, 7, 2047, 2048, 2049, 100_000, (1 << 22) + 3, 5_000_000] {
            let input: Vec<u32> = (0..n).map(|_| rng.random_range(0..1000)).collect();
            let dev = upload_slice(&gpu, &stream, &input, "test").unwrap();
            let out = exclusive_scan_u32(&gpu, &stream, &dev, n as u64).unwrap();
            let got: Vec<u32> = download_vec(&gpu, &stream, &out, n).unwrap();
            let mut acc = 0u32;
            for (i, (g, x)) in got.iter().zip(&input).enumerate() {
                assert_eq!(*g, acc, "n {n}: prefix at {i}");
                acc = acc.wrapping_add(*x);
            }
        }
    }

    fn check_sort<K: ArrowNativeType + Ord + Copy + Into<u64>>(
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        keys: Vec<K>,
        width: KeyWidth,
        begin: u32,
        end: u32,
        wide_values: bool,
        ctx: &str,
    ) {
        let n = keys.len();
        let rows: Vec<u32> = (0..n as u32).collect();
        let k = upload_slice(gpu, stream, &keys, "test").unwrap();
        let (got_k, got_v): (Vec<K>, Vec<u32>) = if wide_values {
            // 64-bit payloads: the row id in the low half, its complement in the high half.
            let wide: Vec<u64> = rows.iter().map(|r| ((!*r as u64) << 32) | *r as u64).collect();
            let v = upload_slice(gpu, stream, &wide, "test").unwrap();
            let (k, v) = radix_sort_pairs(gpu, stream, k, v, n as u64, width, ValueWidth::U64, begin, end).unwrap();
            let got: Vec<u64> = download_vec(gpu, stream, &v, n).unwrap();
            for w in &got {
                assert_eq!((w >> 32) as u32, !(*w as u32), "{ctx}: a 64-bit payload was torn");
            }
            (download_vec(gpu, stream, &k, n).unwrap(), got.iter().map(|w| *w as u32).collect())
        } else {
            let v = upload_slice(gpu, stream, &rows, "test").unwrap();
            let (k, v) = radix_sort_pairs(gpu, stream, k, v, n as u64, width, ValueWidth::U32, begin, end).unwrap();
            (download_vec(gpu, stream, &k, n).unwrap(), download_vec(gpu, stream, &v, n).unwrap())
        };
        // Reference: a stable sort on the bit range; row ids show stability.
        let bits = |x: K| -> u64 {
            let x: u64 = x.into();
            let span = end - begin;
            if span == 64 { x } else { (x >> begin) & ((1u64 << span) - 1) }
        };
        let mut want: Vec<(K, u32)> = keys.iter().copied().zip(rows).collect();
        want.sort_by_key(|(key, _)| bits(*key));
        for (i, ((wk, wv), (gk, gv))) in want.iter().zip(got_k.iter().zip(&got_v)).enumerate() {
            assert!(
                wk == gk && wv == gv,
                "{ctx}: position {i}: want ({}, {wv}), got ({}, {gv})",
                (*wk).into(),
                (*gk).into()
            );
        }
    }

    #[test]
    fn gpu_radix_sort_is_stable_and_matches_cpu() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_radix_sort_is_stable_and_matches_cpu") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_radix_sort_is_stable_and_matches_cpu"));
        let stream = gpu.stream();
        for n in [1usize, 2047, 2049, 4095, 4096, 4097, 300_001, 1 << 21] {
            let dists: [(&str, Box<dyn Fn(&mut StdRng) -> u64>); 4] = [
                ("uniform", Box::new(|r: &mut StdRng| r.random::<u64>())),
                ("few distinct", Box::new(|r: &mut StdRng| r.random_range(0..16u64) << 20)),
                ("all equal", Box::new(|_r: &mut StdRng| 0xdead_beef)),
                ("skewed", Box::new(|r: &mut StdRng| (r.random::<f64>().powi(4) * 1e6) as u64)),
            ];
            for (name, dist) in dists.iter() {
                let k64: Vec<u64> = (0..n).map(|_| dist(&mut rng)).collect();
                let k32: Vec<u32> = k64.iter().map(|x| *x as u32).collect();
                let wide = n % 2 == 1; // odd sizes also run the 64-bit payload kernels
                check_sort(&gpu, &stream, k32.clone(), KeyWidth::U32, 0, 32, false, &format!("u32 {name} n={n}"));
                check_sort(&gpu, &stream, k32, KeyWidth::U32, 3, 14, wide, &format!("u32 {name} bits 3..14 n={n}"));
                check_sort(&gpu, &stream, k64.clone(), KeyWidth::U64, 0, 64, wide, &format!("u64 {name} n={n}"));
                check_sort(&gpu, &stream, k64, KeyWidth::U64, 40, 52, false, &format!("u64 {name} bits 40..52 n={n}"));
            }
        }
    }

    /// Keys and three value arrays (4, 8 and 4 bytes) through one stable permutation, against a
    /// stable CPU sort on the same bits.
    #[test]
    fn gpu_radix_sort_multi_moves_every_array_with_the_keys() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_radix_sort_multi_moves_every_array_with_the_keys") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_radix_sort_multi"));
        let stream = gpu.stream();
        for n in [1usize, 2047, 2048, 2049, 4095, 4097, 100_003, 1 << 20] {
            for (width, begin, end) in [
                (KeyWidth::U32, 0, 32),
                (KeyWidth::U32, 0, 13),
                (KeyWidth::U32, 4, 4),
                (KeyWidth::U64, 0, 64),
                (KeyWidth::U64, 5, 21),
            ] {
                let skew = n % 2 == 1;
                let keys: Vec<u64> = (0..n)
                    .map(|_| if skew { (rng.random::<f64>().powi(6) * 1e6) as u64 } else { rng.random::<u64>() })
                    .map(|k| if width == KeyWidth::U32 { k as u32 as u64 } else { k })
                    .collect();
                let rows: Vec<u32> = (0..n as u32).collect();
                let wide: Vec<u64> = rows.iter().map(|r| ((!*r as u64) << 32) | *r as u64).collect();
                let other: Vec<u32> = rows.iter().map(|r| r.wrapping_mul(2654435761)).collect();
                let k = match width {
                    KeyWidth::U32 => {
                        upload_slice(&gpu, &stream, &keys.iter().map(|k| *k as u32).collect::<Vec<_>>(), "test")
                    }
                    KeyWidth::U64 => upload_slice(&gpu, &stream, &keys, "test"),
                }
                .unwrap();
                let d_wide = upload_slice(&gpu, &stream, &wide, "test").unwrap();
                let d_other = upload_slice(&gpu, &stream, &other, "test").unwrap();
                let values = [
                    radix::SortValues::RowIds,
                    radix::SortValues::Array(&d_wide, ValueWidth::U64),
                    radix::SortValues::Array(&d_other, ValueWidth::U32),
                ];
                let bits = |x: u64| if end - begin == 64 { x } else { (x >> begin) & ((1u64 << (end - begin)) - 1) };
                let mut want = rows.clone();
                want.sort_by_key(|r| bits(keys[*r as usize]));
                for items in [8, 16] {
                    let (sorted, out) =
                        radix::radix_sort_multi_tiles(&gpu, &stream, &k, &values, n as u64, width, begin, end, items)
                            .unwrap();
                    let got_rows: Vec<u32> = download_vec(&gpu, &stream, &out[0], n).unwrap();
                    let got_wide: Vec<u64> = download_vec(&gpu, &stream, &out[1], n).unwrap();
                    let got_other: Vec<u32> = download_vec(&gpu, &stream, &out[2], n).unwrap();
                    let ctx = format!("n {n} {width:?} bits {begin}..{end}, {items} items per thread");
                    assert_eq!(got_rows, want, "{ctx}: row ids");
                    for (i, r) in want.iter().enumerate() {
                        assert_eq!(got_wide[i], wide[*r as usize], "{ctx}: 8-byte values at {i}");
                        assert_eq!(got_other[i], other[*r as usize], "{ctx}: 4-byte values at {i}");
                    }
                    let got_keys: Vec<u64> = match width {
                        KeyWidth::U32 => {
                            download_vec::<u32>(&gpu, &stream, &sorted, n).unwrap().into_iter().map(u64::from).collect()
                        }
                        KeyWidth::U64 => download_vec(&gpu, &stream, &sorted, n).unwrap(),
                    };
                    let want_keys: Vec<u64> = want.iter().map(|r| keys[*r as usize]).collect();
                    assert_eq!(got_keys, want_keys, "{ctx}: keys");
                    // Keys alone (a join side whose rows and columns nothing reads).
                    let (alone, none) =
                        radix::radix_sort_multi_tiles(&gpu, &stream, &k, &[], n as u64, width, begin, end, items)
                            .unwrap();
                    assert!(none.is_empty(), "{ctx}: value arrays from none");
                    let alone: Vec<u8> = download_vec(&gpu, &stream, &alone, n * width.bytes()).unwrap();
                    let sorted: Vec<u8> = download_vec(&gpu, &stream, &sorted, n * width.bytes()).unwrap();
                    assert_eq!(alone, sorted, "{ctx}: keys sorted without values");
                }
                // The inputs are only read.
                assert_eq!(download_vec::<u64>(&gpu, &stream, &d_wide, n).unwrap(), wide, "n {n}: input changed");
            }
        }
    }

    #[test]
    fn gpu_gather_matches_cpu() {
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip("gpu_gather_matches_cpu") else { return };
        let mut rng = StdRng::seed_from_u64(fresh_seed("gpu_gather_matches_cpu"));
        let stream = gpu.stream();
        for n in [1usize, 1000, 1 << 20] {
            let src: Vec<u64> = (0..n).map(|_| rng.random()).collect();
            let src_bytes = Buffer::from_slice_ref(&src);
            let s = upload_slice(&gpu, &stream, &src, "test").unwrap();
            for width in [4usize, 8, 16] {
                if n * 8 < width {
                    continue; // the source holds no value of this width
                }
                let values = (n * 8 / width) as u32; // values of this width in the source
                let idx: Vec<u32> = (0..n + 5).map(|_| rng.random_range(0..values)).collect();
                let x = upload_slice(&gpu, &stream, &idx, "test").unwrap();
                let out = gather(&gpu, &stream, &s, &x, idx.len() as u64, width).unwrap();
                let got: Vec<u8> = download_vec(&gpu, &stream, &out, idx.len() * width).unwrap();
                for (j, i) in idx.iter().enumerate() {
                    let i = *i as usize;
                    assert_eq!(
                        &got[j * width..(j + 1) * width],
                        &src_bytes.as_slice()[i * width..(i + 1) * width],
                        "width {width} n {n} row {j}"
                    );
                }
            }
        }
    }
}
