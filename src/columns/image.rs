//! Host images of a table's columns: a column laid out once, ahead of its queries, in the form an
//! upload sends it ([`AssembledColumn`]), so that a first query over a cold device cache reads
//! and sends fewer bytes than the Arrow buffers hold.
//!
//! - Int32, Date32, Int64 and Decimal128 columns without nulls: their values narrowed to the
//!   fewest bytes the column's own range needs, found exactly over every value (not sampled, as a
//!   staged upload's first try is): the distance above the column's minimum in 1, 2 or 3 bytes, or
//!   4 or 8 bytes of sign-extended integer ([`Narrowing`]), or 3 bytes above the minimum, which
//!   staged uploads do not make. The upload widens them on the device. SSB's `lo_discount` and
//!   `lo_quantity` take 1 byte a row, its dates and supplier keys 2, its customer and part keys,
//!   prices and revenues 3.
//! - `Utf8View` and `BinaryView` columns: each row's bytes once, and its length in 1 or 4 bytes
//!   ([`AssembledColumn::from_views`]): the 16-byte views are not read again at upload time.
//!
//! Other columns (nulls in an integer column, ranges too wide to narrow, other types) have no
//! image: their uploads read the arrays as they are.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion::arrow::buffer::Buffer;
use datafusion::arrow::compute::{max, min};
use datafusion::arrow::datatypes::{ArrowPrimitiveType, DataType, Date32Type, Decimal128Type, Int32Type, Int64Type};
use datafusion::error::Result;
use rayon::prelude::*;

use super::host::{AssembledBuffer, AssembledColumn, NarrowedValues};
use crate::device::transfer::{Narrowing, narrow_into};

/// The host image of a column of `data_type` held as `arrays` (its batches' arrays, in order),
/// or `None` where an image would send no fewer bytes (see the module's text).
pub fn column_image(data_type: &DataType, arrays: &[ArrayRef]) -> Result<Option<AssembledColumn>> {
    if arrays.is_empty() || arrays.iter().any(|a| a.data_type() != data_type) {
        return Ok(None);
    }
    Ok(match data_type {
        DataType::Utf8View | DataType::BinaryView => {
            let arrays: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
            Some(AssembledColumn::from_views(&arrays)?)
        }
        DataType::Int32 => narrowed::<Int32Type>(data_type, arrays),
        DataType::Date32 => narrowed::<Date32Type>(data_type, arrays),
        DataType::Int64 => narrowed::<Int64Type>(data_type, arrays),
        DataType::Decimal128(..) => narrowed::<Decimal128Type>(data_type, arrays),
        _ => None,
    })
}

/// `arrays` (of type `T`, no nulls) narrowed as [`narrowing_for`] their range picks, on several
/// threads; `None` when an array has nulls or the range allows no narrowing.
fn narrowed<T: ArrowPrimitiveType>(data_type: &DataType, arrays: &[ArrayRef]) -> Option<AssembledColumn>
where
    T::Native: Into<i128>,
{
    let width = std::mem::size_of::<T::Native>();
    let typed: Vec<&PrimitiveArray<T>> = arrays.iter().map(|a| a.as_primitive_opt::<T>()).collect::<Option<_>>()?;
    if typed.iter().any(|a| a.null_count() > 0) {
        return None;
    }
    let (lo, hi) = typed
        .par_iter()
        .filter_map(|a| Some((min(*a)?.into(), max(*a)?.into())))
        .reduce_with(|(lo, hi): (i128, i128), (l, h)| (lo.min(l), hi.max(h)))?;
    let how = narrowing_for(width, lo, hi)?;
    let len: usize = typed.iter().map(|a| a.len()).sum();
    let to = how.to_bytes();
    let mut values = vec![0u8; len * to];
    // Each array's place in the narrowed values.
    let mut places = Vec::with_capacity(typed.len());
    let mut rest = values.as_mut_slice();
    for a in &typed {
        let (place, after) = rest.split_at_mut(a.len() * to);
        places.push(place);
        rest = after;
    }
    let fitted = typed
        .par_iter()
        .zip(places)
        .all(|(a, place)| narrow_into(how, a.values().inner().as_slice(), place) == Some(true));
    fitted.then(|| AssembledColumn {
        data_type: data_type.clone(),
        len,
        null_count: 0,
        validity: None,
        buffers: vec![AssembledBuffer { len: len * width, parts: Vec::new() }],
        lengths: None,
        narrowed: Some(NarrowedValues { how, values: Buffer::from_vec(values) }),
    })
}

/// The narrowing that sends `width`-byte integers lying in `lo..=hi` in the fewest bytes without
/// loss: their distance above `lo` in 1, 2 or 3 bytes when the range spans fewer than 2^8, 2^16
/// or 2^24 values, else 4-byte integers (8- and 16-byte values within 32 bits) or 8-byte ones
/// (16-byte values within 64 bits); `None` when none is narrower than `width`.
fn narrowing_for(width: usize, lo: i128, hi: i128) -> Option<Narrowing> {
    let span = hi.checked_sub(lo)?;
    if let Ok(base) = i64::try_from(lo) {
        for to in 1..=3 {
            if span < 1 << (8 * to) {
                return Narrowing::offset(width, to, base);
            }
        }
    }
    let within = |bits: u32| lo >= -(1i128 << (bits - 1)) && hi < (1i128 << (bits - 1));
    match width {
        8 if within(32) => Some(Narrowing::I64ToI32),
        16 if within(32) => Some(Narrowing::I128ToI32),
        16 if within(64) => Some(Narrowing::I128ToI64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Date32Array, Decimal128Array, Int32Array, Int64Array, StringViewArray};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// The values an upload of `image` puts on the device, widened on the host as the kernels do.
    fn widened(image: &AssembledColumn) -> Vec<i128> {
        let n = image.narrowed.as_ref().expect("a narrowed image");
        let to = n.how.to_bytes();
        n.values
            .as_slice()
            .chunks_exact(to)
            .map(|v| {
                let mut raw = [0u8; 8];
                raw[..to].copy_from_slice(v);
                let raw = u64::from_le_bytes(raw);
                match n.how {
                    // Unsigned distances above the base.
                    Narrowing::Offset { base, .. } => base as i128 + raw as i128,
                    // Sign-extended low bytes.
                    _ => ((raw << (64 - 8 * to)) as i64 >> (64 - 8 * to)) as i128,
                }
            })
            .collect()
    }

    fn image(arrays: Vec<ArrayRef>) -> Option<AssembledColumn> {
        let dt = arrays[0].data_type().clone();
        column_image(&dt, &arrays).unwrap()
    }

    #[test]
    fn images_narrow_to_the_columns_own_range_and_widen_back() {
        let seed: u64 = rand::rng().random();
        println!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        // (lowest value, span, width, bytes a value the image should take)
        let cases: [(i128, i128, usize, usize); 11] = [
            (1, 49, 4, 1),
            (19_920_101, 61_129, 4, 2),
            (-5, 255, 4, 1),
            (1, 799_999, 4, 3),
            (-8_000_000, (1 << 24) - 1, 4, 3),
            (1 << 40, 200, 8, 1),
            (-3_000_000, 6_000_000, 8, 3),
            (-30_000_000, 60_000_000, 8, 4),
            (90_100, 10_000_000, 16, 3),
            (-(1 << 30), 1 << 31, 16, 4),
            (-(1 << 50), 1 << 51, 16, 8),
        ];
        for (lo, span, width, bytes) in cases {
            // Several arrays of random lengths (one empty); the range's ends are in it.
            let lens = [rng.random_range(1..5000), 0, rng.random_range(1..5000), rng.random_range(1..5000)];
            let mut values: Vec<Vec<i128>> =
                lens.iter().map(|&n| (0..n).map(|_| lo + rng.random_range(0..=span)).collect()).collect();
            values[0][0] = lo;
            values[2][0] = lo + span;
            let arrays: Vec<ArrayRef> = values
                .iter()
                .map(|v| -> ArrayRef {
                    match width {
                        4 => Arc::new(Int32Array::from_iter_values(v.iter().map(|&x| x as i32))),
                        8 => Arc::new(Int64Array::from_iter_values(v.iter().map(|&x| x as i64))),
                        _ => Arc::new(
                            Decimal128Array::from_iter_values(v.iter().copied())
                                .with_precision_and_scale(20, 2)
                                .unwrap(),
                        ),
                    }
                })
                .collect();
            let got = image(arrays.clone()).unwrap_or_else(|| panic!("no image of {lo} + {span} in {width} bytes"));
            let n = got.narrowed.as_ref().unwrap();
            assert_eq!(n.how.to_bytes(), bytes, "{lo} + {span} in {width} bytes: {:?}", n.how);
            assert_eq!(n.how.from_bytes(), width);
            assert_eq!((got.len, got.buffers[0].len), (values.iter().map(Vec::len).sum(), got.len * width));
            assert!(got.buffers[0].parts.is_empty() && got.validity.is_none());
            assert_eq!(widened(&got), values.concat(), "{lo} + {span} in {width} bytes");
        }
    }

    #[test]
    fn columns_that_would_not_shrink_have_no_image() {
        // Nulls, a 4-byte range past 24 bits, a 64-bit range, a float.
        let nulls: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(3)]));
        let wide: ArrayRef = Arc::new(Int32Array::from(vec![0, 1 << 24]));
        let huge: ArrayRef = Arc::new(Int64Array::from(vec![i64::MIN, i64::MAX]));
        let float: ArrayRef = Arc::new(datafusion::arrow::array::Float64Array::from(vec![1.0]));
        for a in [nulls, wide, huge, float] {
            assert!(image(vec![a.clone()]).is_none(), "{a:?}");
        }
        // Dates take the frame of reference too; an empty column has no image.
        let dates: ArrayRef = Arc::new(Date32Array::from(vec![8_000, 10_555]));
        assert_eq!(image(vec![dates]).unwrap().narrowed.unwrap().how, Narrowing::offset(4, 2, 8_000).unwrap());
        assert!(column_image(&DataType::Int32, &[]).unwrap().is_none());
        // Arrays of another type than the column's are not imaged.
        let mixed: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(vec![1])), Arc::new(Int64Array::from(vec![1]))];
        assert!(column_image(&DataType::Int32, &mixed).unwrap().is_none());
    }

    #[test]
    fn string_images_are_the_views_laid_out() {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(StringViewArray::from(vec![Some("a"), None, Some("a string longer than twelve bytes")])),
            Arc::new(StringViewArray::from(vec!["R", "NONE"])),
        ];
        let got = image(arrays.clone()).unwrap();
        let views: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        let want = AssembledColumn::from_views(&views).unwrap();
        assert_eq!((got.len, got.null_count), (5, 1));
        let bytes = |c: &AssembledColumn| {
            c.buffers[1].parts.iter().map(|(p, at)| (p.as_slice().to_vec(), *at)).collect::<Vec<_>>()
        };
        assert_eq!(bytes(&got), bytes(&want));
        assert!(got.host_bytes() > 0);
        assert_eq!(got.lengths.unwrap().lengths.as_slice(), want.lengths.unwrap().lengths.as_slice());
    }
}
