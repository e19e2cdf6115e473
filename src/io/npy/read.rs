//! A whole `.npy` array read into memory, integers included: what data sets need (features and
//! class labels), where [`crate::io::scan`] visits float values in chunks for statistics and
//! skips every other dtype.

use std::io::Read;
use std::path::Path;

use ndarray::{ArrayD, IxDyn, ShapeBuilder};

use super::super::decode::{Decoder, Elem};
use super::super::{CHUNK, Dtype, Stamp, Values, bad_file, read_failed};
use super::split_header;
use crate::Result;

/// A whole `.npy` array, as [`read_npy`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The shape, empty for a scalar.
    pub shape: Vec<usize>,
    /// Whether `values` are in column-major (Fortran) order rather than row-major (C) order; see
    /// [`NpyArray::into_c_order`].
    pub fortran_order: bool,
    /// The values, in storage order.
    pub values: NpyValues,
}

/// The values of an [`NpyArray`], widened exactly to one type per kind.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyValues {
    /// From `f2` (widened, exactly) and `f4`.
    F32(Vec<f32>),
    /// From `f8`.
    F64(Vec<f64>),
    /// From the signed integers `i1`, `i2`, `i4`, `i8`.
    I64(Vec<i64>),
    /// From the unsigned integers `u1`, `u2`, `u4`, `u8`, and booleans (`b1`: 0 or 1).
    U64(Vec<u64>),
}

impl NpyValues {
    /// The number of values.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            NpyValues::F32(v) => v.len(),
            NpyValues::F64(v) => v.len(),
            NpyValues::I64(v) => v.len(),
            NpyValues::U64(v) => v.len(),
        }
    }

    /// Whether there are no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the values are floats (`f2`, `f4`, `f8`) rather than integers.
    #[must_use]
    pub fn is_float(&self) -> bool {
        matches!(self, NpyValues::F32(_) | NpyValues::F64(_))
    }
}

impl NpyArray {
    /// The same array with its values in row-major (C) order, which is what `shape` means to
    /// ndarray and to most code: a Fortran-order array is transposed in memory, a C-order one is
    /// returned as it is.
    #[must_use]
    pub fn into_c_order(self) -> NpyArray {
        if !self.fortran_order {
            return self;
        }
        fn reorder<T: Clone>(shape: &[usize], v: Vec<T>) -> Vec<T> {
            match ArrayD::from_shape_vec(IxDyn(shape).f(), v) {
                Ok(a) => a.as_standard_layout().iter().cloned().collect(),
                // The reader checked that the shape holds exactly this many values.
                Err(e) => unreachable!("shape checked by the reader: {e}"),
            }
        }
        let shape = self.shape;
        let values = match self.values {
            NpyValues::F32(v) => NpyValues::F32(reorder(&shape, v)),
            NpyValues::F64(v) => NpyValues::F64(reorder(&shape, v)),
            NpyValues::I64(v) => NpyValues::I64(reorder(&shape, v)),
            NpyValues::U64(v) => NpyValues::U64(reorder(&shape, v)),
        };
        NpyArray {
            shape,
            fortran_order: false,
            values,
        }
    }
}

/// Reads the whole `.npy` file at `path` (format versions 1.0 to 3.0, either byte order, C or
/// Fortran order) of dtype `f2`, `f4`, `f8`, `i1`..`i8`, `u1`..`u8` or `b1`.
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be opened; [`crate::Error::BadFile`] with a one-line
/// problem for a file that is not a valid `.npy`, data longer or shorter than the header says, or
/// another dtype (complex, strings, objects, structured).
///
/// # Examples
/// ```
/// use mixprec::io::{read_npy, write_npy, NpyValues, TensorData};
///
/// let dir = std::env::temp_dir().join(format!("mixprec-doc-read-npy-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("x.npy");
/// write_npy(&path, &[2, 2], TensorData::F64(&[1.0, 2.0, 3.0, 4.0]))?;
/// let x = read_npy(&path)?;
/// assert_eq!((x.shape, x.values), (vec![2, 2], NpyValues::F64(vec![1.0, 2.0, 3.0, 4.0])));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_npy(path: &Path) -> Result<NpyArray> {
    let (mut file, before) = Stamp::open(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(before.len()).unwrap_or(0));
    file.read_to_end(&mut bytes)
        .map_err(|e| read_failed(path, &file, &before, e))?;
    before.check(path, &file)?;
    read_npy_bytes(&bytes).map_err(|e| bad_file(path, e))
}

/// [`read_npy`] of the bytes of a whole `.npy` file; the error is the problem, without the path.
pub(crate) fn read_npy_bytes(bytes: &[u8]) -> std::result::Result<NpyArray, String> {
    let (head, data_start) = split_header(bytes)?;
    let count = head
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {:?} has too many elements", head.shape))?;
    let (elem, int) = match (head.elem, &head.dtype) {
        (Some(elem), _) => (Some(elem), None),
        (None, Dtype::Other(descr)) => (None, Some(int_dtype(descr)?)),
        (None, dtype) => return Err(format!("unsupported dtype '{dtype}'")),
    };
    let size = elem.map_or_else(|| int.map_or(1, |i| i.size), Elem::size);
    let need = count
        .checked_mul(size)
        .ok_or_else(|| format!("shape {:?} has too many elements", head.shape))?;
    let data = &bytes[data_start..];
    if data.len() != need {
        let relation = if data.len() < need {
            "shorter"
        } else {
            "longer"
        };
        return Err(format!(
            "data {relation} than the header says: {} bytes after the header, shape {:?} of {} needs {need}",
            data.len(),
            head.shape,
            head.dtype
        ));
    }
    let values = match (elem, int) {
        (Some(elem), _) => floats(elem, data),
        (None, Some(int)) => int.decode(data),
        (None, None) => unreachable!("one of the two was set above"),
    };
    Ok(NpyArray {
        shape: head.shape,
        fortran_order: head.fortran_order,
        values,
    })
}

/// Float data decoded chunk by chunk with the readers' own [`Decoder`].
fn floats(elem: Elem, data: &[u8]) -> NpyValues {
    let mut decoder = Decoder::default();
    let (mut f32s, mut f64s) = (Vec::new(), Vec::new());
    for chunk in data.chunks(CHUNK * elem.size()) {
        match decoder.decode(elem, chunk) {
            Values::F32(xs) => f32s.extend_from_slice(xs),
            Values::F64(xs) => f64s.extend_from_slice(xs),
        }
    }
    match elem.empty() {
        Values::F64(_) => NpyValues::F64(f64s),
        Values::F32(_) => NpyValues::F32(f32s),
    }
}

/// An integer (or boolean) element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IntDtype {
    signed: bool,
    size: usize,
    big_endian: bool,
}

/// Parses `descr` as `<i4`, `>u2`, `|u1`, `|b1`, `=i8` and so on.
fn int_dtype(descr: &str) -> std::result::Result<IntDtype, String> {
    let unsupported = || {
        format!(
            "unsupported dtype '{descr}' (floats f2/f4/f8, integers i1..i8/u1..u8 and b1 are read)"
        )
    };
    let b = descr.as_bytes();
    let (&order, &kind, size) = match b {
        [o, k, rest @ ..] => (o, k, std::str::from_utf8(rest).ok()),
        _ => return Err(unsupported()),
    };
    let size = match size {
        Some("1") => 1,
        Some("2") => 2,
        Some("4") => 4,
        Some("8") => 8,
        _ => return Err(unsupported()),
    };
    let big_endian = match order {
        b'<' => false,
        b'>' => true,
        b'=' => cfg!(target_endian = "big"),
        // numpy writes "not applicable" for one-byte types only.
        b'|' if size == 1 => false,
        _ => return Err(unsupported()),
    };
    let signed = match kind {
        b'i' => true,
        b'u' => false,
        b'b' if size == 1 => false,
        _ => return Err(unsupported()),
    };
    Ok(IntDtype {
        signed,
        size,
        big_endian,
    })
}

impl IntDtype {
    /// The values in `data` (a whole number of elements), widened to 64 bits.
    fn decode(self, data: &[u8]) -> NpyValues {
        let word = |bytes: &[u8]| {
            let mut w = [0u8; 8];
            if self.big_endian {
                w[8 - self.size..].copy_from_slice(bytes);
                u64::from_be_bytes(w)
            } else {
                w[..self.size].copy_from_slice(bytes);
                u64::from_le_bytes(w)
            }
        };
        let words = data.chunks_exact(self.size).map(word);
        if self.signed {
            let shift = 64 - 8 * self.size as u32;
            // Sign-extend from `size` bytes: the sign bit to bit 63, then an arithmetic shift back.
            NpyValues::I64(words.map(|w| ((w << shift) as i64) >> shift).collect())
        } else {
            NpyValues::U64(words.collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_npy as npy;

    #[test]
    fn every_integer_width_and_order() {
        let v = [-3i64, 0, 5, i64::from(i8::MIN), i64::from(i8::MAX)];
        for (descr, bytes) in [
            ("|i1", v.iter().map(|&x| x as i8 as u8).collect::<Vec<_>>()),
            (
                "<i2",
                v.iter().flat_map(|&x| (x as i16).to_le_bytes()).collect(),
            ),
            (
                ">i2",
                v.iter().flat_map(|&x| (x as i16).to_be_bytes()).collect(),
            ),
            (
                "<i4",
                v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
            ),
            (">i8", v.iter().flat_map(|&x| x.to_be_bytes()).collect()),
        ] {
            let a = read_npy_bytes(&npy(descr, "(5,)", false, &bytes)).unwrap();
            assert_eq!(a.values, NpyValues::I64(v.to_vec()), "{descr}");
        }
        let u = [0u64, 1, 200, 255];
        for (descr, bytes) in [
            ("|u1", u.iter().map(|&x| x as u8).collect::<Vec<_>>()),
            (
                ">u2",
                u.iter().flat_map(|&x| (x as u16).to_be_bytes()).collect(),
            ),
            (
                "<u4",
                u.iter().flat_map(|&x| (x as u32).to_le_bytes()).collect(),
            ),
            ("<u8", u.iter().flat_map(|&x| x.to_le_bytes()).collect()),
            ("|b1", vec![0, 1, 1, 0]),
        ] {
            let a = read_npy_bytes(&npy(descr, "(4,)", false, &bytes)).unwrap();
            let want = if descr == "|b1" {
                vec![0, 1, 1, 0]
            } else {
                u.to_vec()
            };
            assert_eq!(a.values, NpyValues::U64(want), "{descr}");
        }
        let big = read_npy_bytes(&npy("<u8", "(1,)", false, &u64::MAX.to_le_bytes())).unwrap();
        assert_eq!(big.values, NpyValues::U64(vec![u64::MAX]));
    }

    #[test]
    fn floats_and_fortran_order() {
        // [[1, 2, 3], [4, 5, 6]] stored column-major as big-endian f8.
        let data: Vec<u8> = [1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        let a = read_npy_bytes(&npy(">f8", "(2, 3)", true, &data)).unwrap();
        assert!(a.fortran_order);
        let c = a.into_c_order();
        assert_eq!(
            (c.shape, c.values, c.fortran_order),
            (
                vec![2, 3],
                NpyValues::F64(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                false
            )
        );
        let h: Vec<u8> = [half::f16::from_f32(0.5), half::f16::MAX]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let a = read_npy_bytes(&npy("<f2", "(2,)", false, &h)).unwrap();
        assert_eq!(a.values, NpyValues::F32(vec![0.5, 65504.0]));
        assert!(a.values.is_float() && !NpyValues::U64(vec![]).is_float());
    }

    #[test]
    fn bad_files_name_the_problem() {
        for (bytes, needle) in [
            (npy("<i4", "(3,)", false, &[0; 8]), "data shorter"),
            (npy("<i2", "(1,)", false, &[0; 4]), "data longer"),
            (
                npy("<c8", "(1,)", false, &[0; 8]),
                "unsupported dtype '<c8'",
            ),
            (
                npy("|i2", "(1,)", false, &[0; 2]),
                "unsupported dtype '|i2'",
            ),
            (npy("<i3", "(1,)", false, &[0; 3]), "unsupported dtype"),
            // Found by tests/fuzz.rs: a descr holding a line break stays on one line.
            (
                npy(">f\r\n8", "(1,)", false, &[0; 8]),
                "unsupported dtype '>f\\r\\n8'",
            ),
            (b"PK\x03\x04 not npy".to_vec(), "not a .npy file"),
        ] {
            let e = read_npy_bytes(&bytes).unwrap_err();
            assert!(e.contains(needle) && !e.contains('\n'), "{needle}: {e}");
        }
    }
}
