//! NumericRange (Part 4 §7.27): parsing, and reading / writing a sub-range of a value.
//!
//! Status codes follow the spec: a syntax error is `BadIndexRangeInvalid`; a valid range
//! that selects nothing (lower bound past the end, a range on a scalar that is no
//! String/ByteString, more dimensions than the value has) is `BadIndexRangeNoData`. Upper
//! bounds past the end are clamped on read. On write the range must lie inside the current
//! value (`BadIndexRangeNoData` otherwise) and the written value must have exactly the
//! selected number of elements (`BadIndexRangeInvalid` otherwise, as open62541 answers).
//! Strings are indexed by character (Unicode scalar value), ByteStrings by byte.

use crate::types::{Array, BuiltinType, ByteString, StatusCode, UaString, Variant};

/// Most dimensions a range may name.
pub const MAX_DIMENSIONS: usize = 32;

/// A parsed NumericRange: one inclusive `(low, high)` per dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumericRange {
    pub dims: Vec<(u32, u32)>,
}

/// One dimension of a range: `a` or `a:b` with a < b.
fn parse_dim(part: &str) -> Result<(u32, u32), StatusCode> {
    match part.split_once(':') {
        None => {
            let a = parse_u32(part).ok_or(StatusCode::BadIndexRangeInvalid)?;
            Ok((a, a))
        }
        Some((a, b)) => {
            let a = parse_u32(a).ok_or(StatusCode::BadIndexRangeInvalid)?;
            let b = parse_u32(b).ok_or(StatusCode::BadIndexRangeInvalid)?;
            if a >= b {
                return Err(StatusCode::BadIndexRangeInvalid);
            }
            Ok((a, b))
        }
    }
}

fn parse_u32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl NumericRange {
    /// Parses a range; `Ok(None)` for the null or empty string (no range).
    pub fn parse(s: &str) -> Result<Option<NumericRange>, StatusCode> {
        if s.is_empty() {
            return Ok(None);
        }
        let mut dims = Vec::new();
        for part in s.split(',') {
            if dims.len() == MAX_DIMENSIONS {
                return Err(StatusCode::BadIndexRangeInvalid);
            }
            dims.push(parse_dim(part)?);
        }
        Ok(Some(NumericRange { dims }))
    }

    /// The bounds of a valid one-dimension range (`"3"`, `"2:5"`), without allocating;
    /// `None` for anything else (no range, several dimensions, an invalid one: `parse`
    /// says which).
    pub fn single(s: &str) -> Option<(u32, u32)> {
        if s.is_empty() || s.contains(',') {
            return None;
        }
        parse_dim(s).ok()
    }

    /// [`NumericRange::read`] of the one-dimension range `(lo, hi)` into `out`, reusing
    /// its memory when `v` is a one-dimensional array and `out` already holds one (a
    /// recycled response's slot). Other values go through [`NumericRange::read`].
    pub fn read_single_into(
        lo: u32,
        hi: u32,
        v: &Variant,
        out: &mut Variant,
    ) -> Result<(), StatusCode> {
        match v {
            Variant::Array(a) if a.dimensions.is_none() => {
                let len = a.values.len();
                let (lo, hi) = (lo as usize, hi as usize);
                if lo >= len {
                    return Err(StatusCode::BadIndexRangeNoData);
                }
                let hi = hi.min(len - 1) + 1;
                match out {
                    Variant::Array(o) => o.clone_range_from(a, lo, hi),
                    _ => {
                        let mut o = Array {
                            value_type: a.value_type,
                            values: Vec::new(),
                            dimensions: None,
                        };
                        o.clone_range_from(a, lo, hi);
                        *out = Variant::Array(Box::new(o));
                    }
                }
                Ok(())
            }
            _ => {
                *out = NumericRange {
                    dims: vec![(lo, hi)],
                }
                .read(v)?;
                Ok(())
            }
        }
    }

    /// The selected part of `v`.
    pub fn read(&self, v: &Variant) -> Result<Variant, StatusCode> {
        match v {
            Variant::Array(a) => {
                let shape = shape_of(a)?;
                if self.dims.len() == shape.len() {
                    let (idx, out_dims) = select(&self.dims, &shape, true)?;
                    let values = idx
                        .into_iter()
                        .map(|i| {
                            a.values
                                .get(i)
                                .cloned()
                                .ok_or(StatusCode::BadIndexRangeNoData)
                        })
                        .collect::<Result<Vec<Variant>, StatusCode>>()?;
                    return Ok(make_array(a.value_type, values, out_dims));
                }
                // One more range than the array has dimensions: the last applies to each
                // String/ByteString element.
                match self.dims.split_last() {
                    Some((&last, outer))
                        if outer.len() == shape.len()
                            && matches!(
                                a.value_type,
                                BuiltinType::String | BuiltinType::ByteString
                            ) =>
                    {
                        let (idx, out_dims) = select(outer, &shape, true)?;
                        let inner = NumericRange { dims: vec![last] };
                        let values = idx
                            .into_iter()
                            .map(|i| {
                                let v = a.values.get(i).ok_or(StatusCode::BadIndexRangeNoData)?;
                                Ok(inner.read(v).unwrap_or_else(|_| empty_like(v)))
                            })
                            .collect::<Result<Vec<Variant>, StatusCode>>()?;
                        Ok(make_array(a.value_type, values, out_dims))
                    }
                    _ => Err(StatusCode::BadIndexRangeNoData),
                }
            }
            Variant::String(s) if self.dims.len() == 1 => {
                let chars: Vec<char> = s.as_str().chars().collect();
                let (idx, _) = select(&self.dims, &[chars.len()], true)?;
                let selected = idx
                    .into_iter()
                    .map(|i| chars.get(i).copied())
                    .collect::<Option<String>>()
                    .ok_or(StatusCode::BadIndexRangeNoData)?;
                Ok(Variant::String(UaString::from(selected)))
            }
            Variant::ByteString(b) if self.dims.len() == 1 => {
                let bytes = b.as_bytes();
                let (idx, _) = select(&self.dims, &[bytes.len()], true)?;
                let selected = idx
                    .into_iter()
                    .map(|i| bytes.get(i).copied())
                    .collect::<Option<Vec<u8>>>()
                    .ok_or(StatusCode::BadIndexRangeNoData)?;
                Ok(Variant::ByteString(ByteString::from(selected)))
            }
            _ => Err(StatusCode::BadIndexRangeNoData),
        }
    }

    /// `current` with the selected part replaced by `new`.
    pub fn write(&self, current: &Variant, new: &Variant) -> Result<Variant, StatusCode> {
        match (current, new) {
            (Variant::Array(a), Variant::Array(n)) => {
                let shape = shape_of(a)?;
                if self.dims.len() != shape.len() {
                    return Err(StatusCode::BadIndexRangeNoData);
                }
                if n.value_type != a.value_type {
                    return Err(StatusCode::BadTypeMismatch);
                }
                let (idx, _) = select(&self.dims, &shape, false)?;
                if idx.len() != n.values.len() {
                    return Err(StatusCode::BadIndexRangeInvalid);
                }
                let mut out = Array::clone(a);
                for (i, v) in idx.into_iter().zip(n.values.iter()) {
                    *out.values
                        .get_mut(i)
                        .ok_or(StatusCode::BadIndexRangeNoData)? = v.clone();
                }
                Ok(Variant::Array(Box::new(out)))
            }
            (Variant::String(s), Variant::String(n)) if self.dims.len() == 1 => {
                let mut chars: Vec<char> = s.as_str().chars().collect();
                let nc: Vec<char> = n.as_str().chars().collect();
                let (idx, _) = select(&self.dims, &[chars.len()], false)?;
                if idx.len() != nc.len() {
                    return Err(StatusCode::BadIndexRangeInvalid);
                }
                for (i, c) in idx.into_iter().zip(nc) {
                    *chars.get_mut(i).ok_or(StatusCode::BadIndexRangeNoData)? = c;
                }
                Ok(Variant::String(UaString::from(
                    chars.into_iter().collect::<String>(),
                )))
            }
            (Variant::ByteString(b), Variant::ByteString(n)) if self.dims.len() == 1 => {
                let mut bytes = b.as_bytes().to_vec();
                let (idx, _) = select(&self.dims, &[bytes.len()], false)?;
                if idx.len() != n.as_bytes().len() {
                    return Err(StatusCode::BadIndexRangeInvalid);
                }
                for (i, c) in idx.into_iter().zip(n.as_bytes()) {
                    *bytes.get_mut(i).ok_or(StatusCode::BadIndexRangeNoData)? = *c;
                }
                Ok(Variant::ByteString(ByteString::from(bytes)))
            }
            (Variant::Array(_) | Variant::String(_) | Variant::ByteString(_), _) => {
                Err(StatusCode::BadTypeMismatch)
            }
            _ => Err(StatusCode::BadIndexRangeNoData),
        }
    }

    /// Number of elements the range selects when nothing is clamped.
    pub fn count(&self) -> u64 {
        self.dims.iter().map(|&(a, b)| (b - a) as u64 + 1).product()
    }
}

fn empty_like(v: &Variant) -> Variant {
    match v {
        Variant::ByteString(_) => Variant::ByteString(ByteString::from(Vec::new())),
        _ => Variant::String(UaString::from("")),
    }
}

/// The array's shape; `NoData` when its dimensions don't multiply to its length (the
/// decoder rejects such arrays, but `Array`'s fields are public).
fn shape_of(a: &Array) -> Result<Vec<usize>, StatusCode> {
    let shape: Vec<usize> = match &a.dimensions {
        Some(d) => d.iter().map(|&x| x.max(0) as usize).collect(),
        None => vec![a.values.len()],
    };
    let product = shape.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
    if shape.is_empty() || product != Some(a.values.len()) {
        return Err(StatusCode::BadIndexRangeNoData);
    }
    Ok(shape)
}

fn make_array(t: BuiltinType, values: Vec<Variant>, dims: Vec<usize>) -> Variant {
    let dimensions = (dims.len() > 1).then(|| dims.iter().map(|&d| d as i32).collect());
    Variant::Array(Box::new(Array {
        value_type: t,
        values,
        dimensions,
    }))
}

/// Row-major flat indices selected by `ranges` in an array of `shape`, and the selected
/// shape. With `clamp`, upper bounds past the end are cut; without, they are NoData.
fn select(
    ranges: &[(u32, u32)],
    shape: &[usize],
    clamp: bool,
) -> Result<(Vec<usize>, Vec<usize>), StatusCode> {
    let mut bounds = Vec::with_capacity(ranges.len());
    for (&(lo, hi), &len) in ranges.iter().zip(shape) {
        let (lo, hi) = (lo as usize, hi as usize);
        if lo >= len || (!clamp && hi >= len) {
            return Err(StatusCode::BadIndexRangeNoData);
        }
        bounds.push((lo, hi.min(len - 1)));
    }
    let out_dims: Vec<usize> = bounds.iter().map(|&(lo, hi)| hi - lo + 1).collect();
    let total: usize = out_dims.iter().product();
    // Strides of the source array (row-major: the last index varies fastest).
    let mut strides = vec![1usize; shape.len()];
    let mut stride = 1usize;
    for (s, &len) in strides.iter_mut().zip(shape).rev() {
        *s = stride;
        // At most the array's length (shape_of checked the product).
        stride = stride.saturating_mul(len);
    }
    let mut idx = Vec::with_capacity(total);
    let mut cur: Vec<usize> = bounds.iter().map(|&(lo, _)| lo).collect();
    for _ in 0..total {
        idx.push(cur.iter().zip(&strides).map(|(c, s)| c * s).sum());
        // Advance the odometer.
        for (c, &(lo, hi)) in cur.iter_mut().zip(&bounds).rev() {
            if *c < hi {
                *c += 1;
                break;
            }
            *c = lo;
        }
    }
    Ok((idx, out_dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i32]) -> Variant {
        Variant::array(
            BuiltinType::Int32,
            v.iter().map(|&x| Variant::Int32(x)).collect(),
        )
        .unwrap()
    }

    #[test]
    fn parse_cases() {
        assert_eq!(NumericRange::parse("").unwrap(), None);
        assert_eq!(
            NumericRange::parse("6").unwrap().unwrap().dims,
            vec![(6, 6)]
        );
        assert_eq!(
            NumericRange::parse("5:7").unwrap().unwrap().dims,
            vec![(5, 7)]
        );
        assert_eq!(
            NumericRange::parse("1:2,0:3").unwrap().unwrap().dims,
            vec![(1, 2), (0, 3)]
        );
        for bad in [
            "7:5",
            "5:5",
            "a",
            "1:",
            ":1",
            " 1",
            "1 ",
            "-1",
            "1:2:3",
            "1,",
            ",",
            "99999999999",
            "+1",
        ] {
            assert_eq!(
                NumericRange::parse(bad),
                Err(StatusCode::BadIndexRangeInvalid),
                "{bad}"
            );
        }
    }

    #[test]
    fn read_one_dimension() {
        let v = ints(&[0, 1, 2, 3, 4]);
        let r = |s: &str| NumericRange::parse(s).unwrap().unwrap().read(&v);
        assert_eq!(r("1:3").unwrap(), ints(&[1, 2, 3]));
        assert_eq!(r("4").unwrap(), ints(&[4]));
        assert_eq!(r("3:10").unwrap(), ints(&[3, 4]));
        assert_eq!(r("5"), Err(StatusCode::BadIndexRangeNoData));
        assert_eq!(r("0,0"), Err(StatusCode::BadIndexRangeNoData));
        assert_eq!(
            NumericRange::parse("0")
                .unwrap()
                .unwrap()
                .read(&Variant::Int32(1)),
            Err(StatusCode::BadIndexRangeNoData)
        );
    }

    #[test]
    fn read_two_dimensions() {
        // 3x4 matrix, value = 10*row + col.
        let values: Vec<Variant> = (0..3)
            .flat_map(|r| (0..4).map(move |c| Variant::Int32(10 * r + c)))
            .collect();
        let m = Variant::Array(Box::new(
            Array::with_dimensions(BuiltinType::Int32, values, vec![3, 4]).unwrap(),
        ));
        let got = NumericRange::parse("1:2,0:1")
            .unwrap()
            .unwrap()
            .read(&m)
            .unwrap();
        let a = got.as_array().unwrap();
        assert_eq!(a.dimensions, Some(vec![2, 2]));
        assert_eq!(
            a.values,
            vec![
                Variant::Int32(10),
                Variant::Int32(11),
                Variant::Int32(20),
                Variant::Int32(21)
            ]
        );
        let one = NumericRange::parse("2,3")
            .unwrap()
            .unwrap()
            .read(&m)
            .unwrap();
        assert_eq!(one.as_array().unwrap().values, vec![Variant::Int32(23)]);
    }

    #[test]
    fn strings_and_bytestrings() {
        let s = Variant::String("hello".into());
        assert_eq!(
            NumericRange::parse("1:3")
                .unwrap()
                .unwrap()
                .read(&s)
                .unwrap(),
            Variant::String("ell".into())
        );
        let b = Variant::ByteString(ByteString::from(vec![1, 2, 3]));
        assert_eq!(
            NumericRange::parse("2:9")
                .unwrap()
                .unwrap()
                .read(&b)
                .unwrap(),
            Variant::ByteString(ByteString::from(vec![3]))
        );
        let arr = Variant::array(
            BuiltinType::String,
            vec![
                Variant::String("abcd".into()),
                Variant::String("efgh".into()),
            ],
        )
        .unwrap();
        let got = NumericRange::parse("0:1,1:2")
            .unwrap()
            .unwrap()
            .read(&arr)
            .unwrap();
        assert_eq!(
            got.as_array().unwrap().values,
            vec![Variant::String("bc".into()), Variant::String("fg".into())]
        );
    }

    #[test]
    fn write_ranges() {
        let v = ints(&[0, 1, 2, 3, 4]);
        let r = NumericRange::parse("1:2").unwrap().unwrap();
        assert_eq!(r.write(&v, &ints(&[9, 8])).unwrap(), ints(&[0, 9, 8, 3, 4]));
        assert_eq!(
            r.write(&v, &ints(&[9])),
            Err(StatusCode::BadIndexRangeInvalid)
        );
        let past = NumericRange::parse("4:5").unwrap().unwrap();
        assert_eq!(
            past.write(&v, &ints(&[1, 2])),
            Err(StatusCode::BadIndexRangeNoData)
        );
        let s = NumericRange::parse("0:1").unwrap().unwrap();
        assert_eq!(
            s.write(
                &Variant::String("abc".into()),
                &Variant::String("xy".into())
            )
            .unwrap(),
            Variant::String("xyc".into())
        );
    }

    #[test]
    fn inconsistent_dimensions_select_nothing() {
        let a = Array {
            value_type: BuiltinType::Int32,
            values: vec![Variant::Int32(1); 3],
            dimensions: Some(vec![2, 2]),
        };
        let v = Variant::Array(Box::new(a));
        let r = NumericRange::parse("1,1").unwrap().unwrap();
        assert_eq!(r.read(&v), Err(StatusCode::BadIndexRangeNoData));
        assert_eq!(r.write(&v, &v), Err(StatusCode::BadIndexRangeNoData));
    }
}
