//! Dictionary encoding of string and binary columns for the table cache
//! (`gpu.table_cache.compress`): a column's distinct values are the groups of a group-by on it,
//! and each row's code is its group. Low-cardinality strings (flags, modes, segments, nations,
//! brands) then take 1 or 2 bytes a row instead of their offsets and bytes; the cache widens
//! them back as a scan reads them ([`crate::columns::packed`]).
//!
//! A column is tried on a sample of its first rows before the whole of it, so that a column of
//! mostly distinct values (comments, names) costs a small group-by, not a large one.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::groups::{CollisionTest, GroupIdMethod, group_ids};
use crate::columns::DeviceColumn;
use crate::columns::concat::offset_width;
use crate::columns::packed::{
    DICTIONARY_TILE_ROWS, DictionaryParts, PACK_MIN_BYTES, PackedColumn, dictionary_tile_bytes,
};
use crate::device::kernel;
use crate::device::{Gpu, KArg, ptr};
use crate::error::{Result, gpu_error};
use crate::primitives::materialize::{GatherSpec, gather_columns};
use crate::primitives::scan::{ScanKind, exclusive_scan};
use crate::primitives::select::iota;

/// Rows of the sample a column is tried on first.
const SAMPLE_ROWS: u64 = 1 << 16;

/// The most distinct values the sample may show for the whole column to be tried: a column
/// that repeats its values less than 16 times in the sample is unlikely to have at most
/// [`MOST_VALUES`] of them, or to gain much from codes.
const SAMPLE_MOST_VALUES: u64 = SAMPLE_ROWS / 16;

/// The most distinct values a dictionary holds: codes of at most 2 bytes.
pub const MOST_VALUES: u64 = 1 << 16;

/// Bytes a code takes for a dictionary of `values` distinct values, or `None` when there are too
/// many for 2-byte codes.
pub fn code_bytes(values: u64) -> Option<usize> {
    match values {
        0..=256 => Some(1),
        v if v <= MOST_VALUES => Some(2),
        _ => None,
    }
}

/// `col` dictionary-coded, or `None` when it is not a string or binary column of at least
/// [`PACK_MIN_BYTES`], when it has more than [`MOST_VALUES`] distinct values (or its sample
/// suggests so), or when the codes and values would not take fewer bytes than the column. When
/// it returns, the work of the coded column is done.
pub fn dictionary_encode(gpu: &Gpu, stream: &Arc<CudaStream>, col: &Arc<DeviceColumn>) -> Result<Option<PackedColumn>> {
    let n = col.len as u64;
    if offset_width(&col.data_type).is_none()
        || !col.children.is_empty()
        || col.buffers.len() != 2
        || n == 0
        || n >= u32::MAX as u64
        || col.byte_size() < PACK_MIN_BYTES
    {
        return Ok(None);
    }
    let hash = GroupIdMethod::Hash;
    if n > SAMPLE_ROWS {
        let rows = iota(gpu, stream, SAMPLE_ROWS)?;
        let spec = GatherSpec::Rows { col, rows: &rows, may_be_null: false };
        let sample = gather_columns(gpu, stream, vec![spec], SAMPLE_ROWS)?
            .pop()
            .ok_or_else(|| gpu_error("a column's sample was not gathered"))?;
        let ids = group_ids(gpu, stream, &[Arc::new(sample)], SAMPLE_ROWS, hash, CollisionTest::default())?;
        if ids.groups > SAMPLE_MOST_VALUES {
            return Ok(None);
        }
    }
    let ids = group_ids(gpu, stream, &[Arc::clone(col)], n, hash, CollisionTest::default())?;
    let Some(code_bytes) = code_bytes(ids.groups) else { return Ok(None) };
    let (Some(group_of_row), Some(reps)) = (&ids.group_of_row, &ids.reps) else {
        return Err(gpu_error("a group-by of a string column gave no group ids"));
    };
    let what = format!("the dictionary codes of a {} column of {n} rows", col.data_type);
    let codes = gpu.alloc(stream, col.len * code_bytes, &what)?;
    let pack = if code_bytes == 1 { kernel::PACK_I32_TO_U8 } else { kernel::PACK_I32_TO_U16 };
    // pack_i32_to_u*(const void* src, u* dst, u64 n, i64 base): group ids are below 2^16.
    gpu.launch_n(stream, pack, n, &[ptr(group_of_row, stream), ptr(&codes, stream), KArg::U64(n), KArg::U64(0)])?;
    let spec = GatherSpec::Rows { col, rows: reps, may_be_null: false };
    let values = gather_columns(gpu, stream, vec![spec], ids.groups)?
        .pop()
        .ok_or_else(|| gpu_error("a dictionary's values were not gathered"))?;
    let validity = col.validity.as_ref().map(|v| gpu.clone_buffer(stream, v, &what)).transpose()?;
    let sums = dictionary_tile_bytes(gpu, stream, &codes, code_bytes, validity.as_ref(), &values, col.len)?;
    let tiles = col.len.div_ceil(DICTIONARY_TILE_ROWS) as u64;
    let (tile_starts, total) = exclusive_scan(gpu, stream, &sums, tiles, ScanKind::U64, true)?;
    let total = total.ok_or_else(|| gpu_error("a scan of a dictionary's tile bytes gave no total"))?;
    // The read waits for every launch above.
    let decoded_bytes = gpu.read::<u64>(stream, &total, 0, 1)?.first().copied().unwrap_or(0) as usize;
    let packed = PackedColumn::dictionary(DictionaryParts {
        data_type: col.data_type.clone(),
        len: col.len,
        null_count: col.null_count,
        validity,
        codes,
        code_bytes,
        values,
        tile_starts,
        decoded_bytes,
    })?;
    Ok((packed.byte_size() < col.byte_size()).then_some(packed))
}

#[cfg(test)]
mod tests {
    use super::{MOST_VALUES, code_bytes};

    /// One byte a code up to 256 values, two up to 65,536, none past that.
    #[test]
    fn codes_take_the_fewest_bytes_the_values_allow() {
        assert_eq!(code_bytes(1), Some(1));
        assert_eq!(code_bytes(256), Some(1));
        assert_eq!(code_bytes(257), Some(2));
        assert_eq!(code_bytes(MOST_VALUES), Some(2));
        assert_eq!(code_bytes(MOST_VALUES + 1), None);
    }
}

#[cfg(test)]
mod gpu_tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{
        Array, ArrayRef, BinaryArray, BinaryViewArray, LargeBinaryArray, LargeStringArray, StringArray, StringViewArray,
    };
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::dictionary_encode;
    use crate::columns::{download_columns, pack, unpack, upload_columns};
    use crate::testing::{fresh_seed, gpu_lock, gpu_or_skip};

    /// On a device: string and binary columns of few distinct values (multi-byte characters,
    /// empty strings, nulls; 1- and 2-byte codes; every offset width) come back from the
    /// dictionary and its decoding with the same values and nulls; columns of mostly distinct
    /// values, or too small, are left as they are.
    #[test]
    fn dictionary_coded_columns_decode_to_their_values() {
        const NAME: &str = "dictionary_coded_columns_decode_to_their_values";
        let _l = gpu_lock();
        let Some(gpu) = gpu_or_skip(NAME) else { return };
        let seed = fresh_seed(NAME);
        let mut rng = StdRng::seed_from_u64(seed);
        let n = 300_000 + rng.random_range(0..5000);
        let words = |count: usize, rng: &mut StdRng| -> Vec<String> {
            let mut w: Vec<String> =
                vec![String::new(), "DELIVER IN PERSON".into(), "ñandú".into(), "日本語テキスト".into()];
            while w.len() < count {
                let len = rng.random_range(1..20);
                w.push(
                    (0..len).map(|_| char::from(rng.random_range(b'A'..=b'z'))).collect::<String>()
                        + &w.len().to_string(),
                );
            }
            w.truncate(count);
            w
        };
        let column = |values: &[String], nulls: bool, rng: &mut StdRng| -> Vec<Option<String>> {
            (0..n)
                .map(|_| {
                    (!nulls || rng.random_range(0..9) > 0).then(|| values[rng.random_range(0..values.len())].clone())
                })
                .collect()
        };
        let few = words(7, &mut rng);
        let brands = words(1000, &mut rng);
        let many = words(10_000, &mut rng);
        let a = column(&few, true, &mut rng);
        let b = column(&brands, false, &mut rng);
        let c = column(&few, false, &mut rng);
        let d = column(&many, false, &mut rng);
        let distinct: Vec<Option<String>> =
            (0..n).map(|i| Some(format!("comment {i} {}", rng.random::<u32>()))).collect();
        let nulls: Vec<Option<&str>> = vec![None; n];
        // Fewer rows than the sample and over 1 MiB: coded without a sample.
        let short: Vec<Option<String>> =
            b[..60_000].iter().map(|s| s.as_ref().map(|s| format!("{s} and more words"))).collect();
        // (array, the bytes of its codes; 0: not coded)
        let cases: Vec<(ArrayRef, usize)> = vec![
            (Arc::new(a.iter().map(|s| s.as_deref()).collect::<StringViewArray>()), 1),
            (Arc::new(a.iter().map(|s| s.as_deref()).collect::<StringArray>()), 1),
            (Arc::new(b.iter().map(|s| s.as_deref()).collect::<LargeStringArray>()), 2),
            (Arc::new(b.iter().map(|s| s.as_deref()).collect::<StringViewArray>()), 2),
            (Arc::new(b.iter().map(|s| s.as_deref()).collect::<StringArray>()), 2),
            (Arc::new(c.iter().map(|s| s.as_deref().map(str::as_bytes)).collect::<BinaryArray>()), 1),
            (Arc::new(a.iter().map(|s| s.as_deref().map(str::as_bytes)).collect::<LargeBinaryArray>()), 1),
            (Arc::new(b.iter().map(|s| s.as_deref().map(str::as_bytes)).collect::<BinaryViewArray>()), 2),
            (Arc::new(nulls.iter().copied().collect::<LargeStringArray>()), 1),
            (Arc::new(short.iter().map(|s| s.as_deref()).collect::<LargeStringArray>()), 2),
            // 10,000 values: more than the sample allows.
            (Arc::new(d.iter().map(|s| s.as_deref()).collect::<StringViewArray>()), 0),
            (Arc::new(distinct.iter().map(|s| s.as_deref()).collect::<StringViewArray>()), 0),
            (Arc::new(a[..1000].iter().map(|s| s.as_deref()).collect::<StringArray>()), 0),
            // A slice: the column's offsets do not start at 0 on the host.
            (
                {
                    let whole: ArrayRef = Arc::new(c.iter().map(|s| s.as_deref()).collect::<StringArray>());
                    whole.slice(17, n - 40)
                },
                1,
            ),
        ];
        let stream = gpu.stream();
        let hosts = cases.iter().map(|(a, _)| pack(a.as_ref()).unwrap()).collect::<Vec<_>>();
        let devs = upload_columns(&gpu, &stream, &hosts).unwrap().into_iter().map(Arc::new).collect::<Vec<_>>();
        for ((array, bytes), dev) in cases.iter().zip(&devs) {
            let coded = dictionary_encode(&gpu, &stream, dev).unwrap();
            let what = format!("{} of {} rows, seed {seed}", array.data_type(), array.len());
            let Some(p) = coded else {
                assert_eq!(*bytes, 0, "{what} was not coded");
                continue;
            };
            let (code_bytes, values) = p.dictionary_codes().expect("a dictionary");
            assert_eq!(code_bytes, *bytes, "{what}: {values} values");
            assert!(
                p.byte_size() < dev.byte_size(),
                "{what}: {} bytes coded, {} plain",
                p.byte_size(),
                dev.byte_size()
            );
            let wide = p.widen(&gpu, &stream).unwrap();
            assert_eq!(wide.byte_size(), p.wide_byte_size(), "{what}");
            let back = unpack(download_columns(&gpu, &stream, &[&wide]).unwrap().pop().unwrap()).unwrap();
            assert_eq!(back.data_type(), array.data_type(), "{what}");
            assert_eq!(back.null_count(), array.null_count(), "{what}");
            assert!(back.as_ref() == array.as_ref(), "{what}: the decoded values differ");
        }
    }
}
