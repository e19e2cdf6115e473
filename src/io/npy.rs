//! `.npy` files: reading through a memory map (chunks of floats for [`super::scan`], or a whole
//! array of floats or integers with [`read_npy`]), and writing.
//!
//! Layout: the magic `\x93NUMPY`, a version byte pair, the dict length (2 bytes in 1.0, 4 in 2.0
//! and 3.0), the dict (see [`header`]), then the raw data, which must be exactly as long as the
//! shape and dtype say.

pub(crate) mod header;
mod read;

use std::io::{Seek, SeekFrom};
use std::path::Path;

use super::decode::{Decoder, visit_stream};
use super::{
    Scan, Stamp, TensorData, TensorInfo, Visit, bad_file, check_shape, read_at, read_failed,
    write_atomic, write_le,
};
use crate::{Error, Result};

pub(crate) use read::read_npy_bytes;
pub use read::{NpyArray, NpyValues, read_npy};

/// numpy pads the header so that the data starts at a multiple of this.
const ALIGN: usize = 64;

/// See [`super::scan`]. The tensor is named by the file stem.
pub(super) fn scan(path: &Path, want: &dyn Fn(&str) -> bool, visit: Visit<'_>) -> Result<Scan> {
    let (mut file, before) = Stamp::open(path)?;
    let len = before.len();
    // The longest header there can be, or the whole file if it is shorter.
    let mut prefix = vec![0; len.min((12 + header::MAX_DICT) as u64) as usize];
    read_at(&mut file, 0, &mut prefix).map_err(|e| read_failed(path, &file, &before, e))?;
    let (head, data_start) = split_header(&prefix).map_err(|e| bad_file(path, e))?;
    drop(prefix);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut found = Scan::default();
    if !want(&name) {
        return Ok(found);
    }
    let info = TensorInfo {
        name,
        dtype: head.dtype.clone(),
        shape: head.shape.clone(),
        path: path.to_path_buf(),
    };
    let (Some(elem), Some(need)) = (head.elem, head.data_bytes) else {
        found.skipped.push(info);
        return Ok(found);
    };
    let have = len - data_start as u64;
    if have != need as u64 {
        let relation = if have < need as u64 {
            "shorter"
        } else {
            "longer"
        };
        return Err(bad_file(
            path,
            format!(
                "data {relation} than the header says: {have} bytes after the header, shape {:?} of {} needs {need}",
                head.shape, head.dtype
            ),
        ));
    }
    file.seek(SeekFrom::Start(data_start as u64))
        .and_then(|_| {
            visit_stream(
                &mut file,
                &info,
                elem,
                &mut Decoder::default(),
                &mut Vec::new(),
                visit,
            )
        })
        .map_err(|e| read_failed(path, &file, &before, e))?;
    before.check(path, &file)?;
    found.read.push(info);
    Ok(found)
}

/// The parsed header of a whole `.npy` file in `bytes`, and where its data starts.
pub(crate) fn split_header(bytes: &[u8]) -> std::result::Result<(header::Header, usize), String> {
    let prelude = header::prelude_len(bytes)?;
    let dict_len = bytes
        .get(..prelude)
        .ok_or_else(|| "truncated .npy header: incomplete header length".to_string())
        .and_then(header::dict_len)?;
    let data_start = prelude + dict_len;
    let dict = bytes.get(prelude..data_start).ok_or_else(|| {
        format!(
            "truncated .npy header: it says {dict_len} bytes, the file ends {} bytes in",
            bytes.len() - prelude
        )
    })?;
    Ok((header::parse(dict)?, data_start))
}

/// Writes `data` with `shape` as a `.npy` file (C order, little-endian), atomically.
///
/// The header is format version 1.0 (2.0 only if the shape is too long for it) and padded so the
/// data starts at a multiple of 64 bytes, as numpy does; `np.load` reads the result.
///
/// # Errors
/// [`Error::InvalidValue`] if `shape` does not hold `data.len()` values or `data` is bfloat16 (the
/// `.npy` format has no such dtype: write it with [`super::write_safetensors`], or widen it to f32,
/// which is exact); [`Error::Io`] if the file cannot be written.
pub fn write_npy(path: &Path, shape: &[usize], data: TensorData<'_>) -> Result<()> {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    check_shape(&stem, shape, data.len())?;
    let descr = match data {
        TensorData::F64(_) => "<f8",
        TensorData::F32(_) => "<f4",
        TensorData::F16(_) => "<f2",
        TensorData::BF16(_) => {
            return Err(Error::InvalidValue {
                what: "npy dtype",
                value: "BF16".to_string(),
                expected: "F64, F32 or F16 (.npy has no bfloat16: write safetensors, or widen to f32, which is exact)",
            });
        }
    };
    let head = npy_header(descr, shape);
    write_atomic(path, |out| {
        out.write_all(&head)?;
        write_le(out, data)
    })
}

/// The header of a C-order `.npy` of `shape` whose values are numpy's `descr` (`<f4`, `<f8`,
/// ...): the magic, version, length and padded dict that [`write_npy`] writes before the values.
/// For a file written in pieces: this header, then the values as little-endian bytes.
#[must_use]
pub fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", parts.join(", "))
        }
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    let padded = |prelude: usize| (prelude + dict.len() + 1).next_multiple_of(ALIGN) - prelude;
    let (version, prelude) = if padded(10) <= usize::from(u16::MAX) {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    // Spaces, then a newline, up to the next multiple of ALIGN.
    let total = (prelude + dict.len() + 1).next_multiple_of(ALIGN);
    dict.extend(std::iter::repeat_n(' ', total - prelude - dict.len() - 1));
    dict.push('\n');
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(header::MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Values;

    #[test]
    fn header_is_aligned_and_parses_back() {
        for shape in [&[][..], &[7], &[2, 3, 0], &[1; 40]] {
            let h = npy_header("<f4", shape);
            assert_eq!(h.len() % ALIGN, 0);
            assert_eq!(h.last(), Some(&b'\n'));
            let prelude = header::prelude_len(&h).unwrap();
            let n = header::dict_len(&h[..prelude]).unwrap();
            assert_eq!(prelude + n, h.len());
            let parsed = header::parse(&h[prelude..]).unwrap();
            assert_eq!(parsed.shape, shape);
        }
        let long = vec![1usize; 30_000];
        let h = npy_header("<f8", &long);
        assert_eq!(h[6], 2, "a long header needs version 2.0");
        let n = header::dict_len(&h[..12]).unwrap();
        assert_eq!(header::parse(&h[12..12 + n]).unwrap().shape.len(), 30_000);
    }

    #[test]
    fn bf16_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.npy");
        let xs = [half::bf16::ONE];
        let err = write_npy(&path, &[1], TensorData::BF16(&xs)).unwrap_err();
        assert!(err.to_string().contains("bfloat16"), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn round_trip_and_length_checks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grad.npy");
        let xs = [1.0f32, -2.5, 1e-40, f32::INFINITY, 0.0, 7.0];
        write_npy(&path, &[2, 3], TensorData::F32(&xs)).unwrap();
        let mut got = Vec::new();
        let found = scan(&path, &|_| true, &mut |info, v| {
            assert_eq!(info.name, "grad");
            if let Values::F32(v) = v {
                got.extend_from_slice(v);
            }
        })
        .unwrap();
        assert_eq!(got, xs);
        assert_eq!(found.read[0].shape, [2, 3]);
        let skip = scan(&path, &|n| n != "grad", &mut |_, _| panic!("not wanted")).unwrap();
        assert_eq!(skip, Scan::default());

        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = scan(&path, &|_| true, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("data shorter than the header says: 23 bytes"),
            "{err}"
        );
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        let err = scan(&path, &|_| true, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("data longer than the header says"), "{err}");
        std::fs::write(&path, &bytes[..70]).unwrap();
        let err = scan(&path, &|_| true, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated .npy header"), "{err}");
    }
}
