//! `.safetensors`: reading through the reference header parser, and writing.
//!
//! The file is 8 bytes of little-endian header length `n`, `n` bytes of JSON header (tensor name ->
//! dtype, shape, `data_offsets` into the data that follows; an optional `__metadata__`), then the
//! data. The `safetensors` crate checks the header: valid UTF-8 JSON, offsets contiguous from 0
//! (so neither overlapping nor out of range), each tensor's byte length equal to its shape times
//! its dtype size, and the data ending exactly at the end of the file.

use std::io::{Seek, SeekFrom};
use std::path::Path;

use ::safetensors::tensor::{Dtype as StDtype, Metadata};
use ::safetensors::{SafeTensorError, SafeTensors};

use super::decode::{Decoder, Elem, Kind, visit_stream};
use super::{
    Dtype, Scan, Stamp, TensorData, TensorInfo, Visit, bad_file, check_shape, duplicate_key,
    read_at, read_failed, write_atomic, write_le,
};
use crate::{Error, Result};

/// Bytes of the little-endian header length that starts the file.
const N_LEN: usize = 8;

/// See [`super::scan`].
pub(super) fn scan(path: &Path, want: &dyn Fn(&str) -> bool, visit: Visit<'_>) -> Result<Scan> {
    let (mut file, before) = Stamp::open(path)?;
    let standin = header_standin(&mut file, before.len())
        .map_err(|e| read_failed(path, &file, &before, e))?;
    if let Some(name) = duplicate_key(header_text(&standin)) {
        return Err(bad_file(
            path,
            format!(
                "invalid safetensors header: the key '{}' appears more than once",
                name.escape_debug()
            ),
        ));
    }
    let (header_len, metadata) =
        SafeTensors::read_metadata(&standin).map_err(|e| explain(path, &standin, &e))?;
    drop(standin);
    let data_start = N_LEN + header_len;
    let mut found = Scan::default();
    let mut decoder = Decoder::default();
    let mut buffer = Vec::new();
    // `offset_keys` lists the tensors by increasing data offset: the order they lie in the file.
    for name in metadata.offset_keys() {
        if !want(&name) {
            continue;
        }
        let Some(st) = metadata.info(&name) else {
            continue;
        };
        let (dtype, elem) = match st.dtype {
            StDtype::F64 => (Dtype::F64, Some(Elem::le(Kind::F64))),
            StDtype::F32 => (Dtype::F32, Some(Elem::le(Kind::F32))),
            StDtype::F16 => (Dtype::F16, Some(Elem::le(Kind::F16))),
            StDtype::BF16 => (Dtype::BF16, Some(Elem::le(Kind::BF16))),
            other => (Dtype::Other(other.to_string()), None),
        };
        let info = TensorInfo {
            name,
            dtype,
            shape: st.shape.clone(),
            path: path.to_path_buf(),
        };
        match elem {
            Some(elem) => {
                // read_metadata checked that the offsets tile the data, match shape * size and
                // end at the end of the file.
                let start = (data_start + st.data_offsets.0) as u64;
                file.seek(SeekFrom::Start(start))
                    .and_then(|_| {
                        visit_stream(&mut file, &info, elem, &mut decoder, &mut buffer, visit)
                    })
                    .map_err(|e| read_failed(path, &file, &before, e))?;
                found.read.push(info);
            }
            None => found.skipped.push(info),
        }
    }
    before.check(path, &file)?;
    Ok(found)
}

/// The largest header the reference parser accepts (`safetensors`' `MAX_HEADER_SIZE`).
const MAX_HEADER: u64 = 100_000_000;

/// A stand-in for the whole file that [`SafeTensors::read_metadata`] can check: as long as the
/// file, holding its 8-byte length and (when that length is plausible) its header, and elsewhere
/// zeros that are never touched. It is anonymous memory, reserved but never written past the
/// header, so it costs the header's size whatever the file's, and unlike a map of the file it
/// cannot fault when the file is truncated.
fn header_standin(file: &mut std::fs::File, len: u64) -> std::io::Result<memmap2::MmapMut> {
    let size = usize::try_from(len).map_err(std::io::Error::other)?;
    let mut standin = memmap2::MmapOptions::new()
        .len(size)
        .no_reserve_swap()
        .map_anon()?;
    let first = size.min(N_LEN);
    read_at(file, 0, &mut standin[..first])?;
    if let Ok(bytes) = <[u8; N_LEN]>::try_from(&standin[..first]) {
        let n = u64::from_le_bytes(bytes);
        if n <= MAX_HEADER && n <= len - N_LEN as u64 {
            let end = N_LEN + n as usize;
            read_at(file, N_LEN as u64, &mut standin[N_LEN..end])?;
        }
    }
    Ok(standin)
}

/// The header's JSON text in `standin`, when its length is plausible.
fn header_text(standin: &[u8]) -> &[u8] {
    let n = standin
        .get(..N_LEN)
        .and_then(|b| <[u8; N_LEN]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    usize::try_from(n)
        .ok()
        .and_then(|n| standin.get(N_LEN..N_LEN.checked_add(n)?))
        .unwrap_or(&[])
}

/// A one-line [`Error::BadFile`] for a header the `safetensors` crate refused.
fn explain(path: &Path, bytes: &[u8], err: &SafeTensorError) -> Error {
    let size = bytes.len();
    let declared = bytes
        .get(..N_LEN)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes);
    let problem = match (err, declared) {
        (SafeTensorError::HeaderTooSmall, _) => {
            format!("truncated safetensors header: the file has {size} bytes, fewer than the 8-byte header length")
        }
        (SafeTensorError::InvalidHeaderLength, Some(n)) => format!(
            "truncated or not a safetensors file: the header length {n} runs past the end of the file ({size} bytes)"
        ),
        (SafeTensorError::HeaderTooLarge, Some(n)) => format!(
            "not a safetensors file: header length {n} exceeds the 100 MB limit"
        ),
        (SafeTensorError::MetadataIncompleteBuffer, Some(n)) => {
            // The header itself is valid here: say how long the data should be.
            let have = size.saturating_sub(N_LEN).saturating_sub(n as usize);
            let expected = usize::try_from(n)
                .ok()
                .and_then(|n| bytes.get(N_LEN..N_LEN + n))
                .and_then(|h| serde_json::from_slice::<Metadata>(h).ok())
                .map(|m| m.data_len());
            match expected {
                Some(want) if have < want => format!(
                    "data shorter than the header says: {have} bytes of tensor data, the header describes {want} (truncated file?)"
                ),
                Some(want) => format!(
                    "data longer than the header says: {have} bytes of tensor data, the header describes {want}"
                ),
                None => format!("invalid safetensors file: {err}"),
            }
        }
        (SafeTensorError::InvalidOffset(name), _) => format!(
            "invalid safetensors header: data_offsets of tensor '{}' overlap, leave a gap or are out of order",
            name.escape_debug()
        ),
        (SafeTensorError::TensorInvalidInfo, _) => {
            "invalid safetensors header: a tensor's data_offsets do not span its shape times its dtype size".to_string()
        }
        _ => format!("invalid safetensors header: {err}"),
    };
    bad_file(path, problem.replace('\n', " "))
}

/// Writes `tensors` (name, shape, values) as a `.safetensors` file, atomically, in the given order.
///
/// # Errors
/// [`Error::InvalidValue`] if a shape does not hold as many values as given, or a name repeats or
/// is `__metadata__`; [`Error::Io`] if the file cannot be written.
pub fn write_safetensors(path: &Path, tensors: &[(&str, &[usize], TensorData<'_>)]) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for &(name, shape, data) in tensors {
        check_shape(name, shape, data.len())?;
        if name == "__metadata__" || header.contains_key(name) {
            return Err(Error::InvalidValue {
                what: "tensor name",
                value: name.to_string(),
                expected: "a name used once, other than __metadata__",
            });
        }
        let bytes = data.len() * element_size(data);
        header.insert(
            name.to_string(),
            serde_json::json!({
                "dtype": data.dtype().to_string(),
                "shape": shape,
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut text = serde_json::Value::Object(header).to_string().into_bytes();
    // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
    text.resize(text.len().next_multiple_of(N_LEN), b' ');
    write_atomic(path, |out| {
        out.write_all(&(text.len() as u64).to_le_bytes())?;
        out.write_all(&text)?;
        for &(_, _, data) in tensors {
            write_le(out, data)?;
        }
        Ok(())
    })
}

/// Bytes per element of `data`.
pub(super) fn element_size(data: TensorData<'_>) -> usize {
    match data {
        TensorData::F64(_) => 8,
        TensorData::F32(_) => 4,
        TensorData::F16(_) | TensorData::BF16(_) => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Values;

    /// Each visited tensor's name and values, widened to f64.
    type Seen = Vec<(String, Vec<f64>)>;

    fn collect(path: &Path) -> Result<(Scan, Seen)> {
        let mut seen = Seen::new();
        let found = scan(path, &|_| true, &mut |info, values| {
            if seen.last().is_none_or(|(n, _)| *n != info.name) {
                seen.push((info.name.clone(), Vec::new()));
            }
            if let Some((_, xs)) = seen.last_mut() {
                match values {
                    Values::F32(v) => xs.extend(v.iter().map(|&x| f64::from(x))),
                    Values::F64(v) => xs.extend_from_slice(v),
                }
            }
        })?;
        Ok((found, seen))
    }

    #[test]
    fn round_trip_every_dtype_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let a = [1.5f64, -0.0, f64::MAX];
        let b = [0.1f32, 3.0];
        let c = [half::f16::from_f32(0.5), half::f16::MIN_POSITIVE_SUBNORMAL];
        let d = [half::bf16::from_f32(-1e30)];
        write_safetensors(
            &path,
            &[
                ("z_first", &[3], TensorData::F64(&a)),
                ("b", &[1, 2], TensorData::F32(&b)),
                ("c", &[2], TensorData::F16(&c)),
                ("d", &[], TensorData::BF16(&d)),
                ("empty", &[0, 4], TensorData::F32(&[])),
            ],
        )
        .unwrap();
        let (found, seen) = collect(&path).unwrap();
        let names: Vec<_> = found.read.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["z_first", "b", "c", "d", "empty"]);
        assert_eq!(found.read[1].shape, [1, 2]);
        assert_eq!(found.read[3].dtype, Dtype::BF16);
        assert_eq!(found.read[3].len(), 1);
        assert!(found.skipped.is_empty());
        assert_eq!(seen[0].1, a);
        assert_eq!(seen[1].1, [f64::from(0.1f32), 3.0]);
        assert_eq!(seen[2].1, [0.5, 2f64.powi(-24)]);
        assert_eq!(seen[3].1, [f64::from(d[0].to_f32())]);
        assert_eq!(seen[4], ("empty".to_string(), vec![]));
    }

    #[test]
    fn writer_refuses_a_shape_that_does_not_fit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let err = write_safetensors(&path, &[("x", &[2, 2], TensorData::F32(&[1.0; 3]))]);
        assert!(matches!(err, Err(Error::InvalidValue { .. })), "{err:?}");
        assert!(!path.exists());
    }

    #[test]
    fn truncated_data_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        write_safetensors(&path, &[("x", &[4], TensorData::F32(&[1.0; 4]))]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let err = collect(&path).unwrap_err().to_string();
        assert!(err.contains("data shorter than the header says"), "{err}");
        assert!(
            err.contains("13 bytes") && err.contains("describes 16"),
            "{err}"
        );
    }
}
