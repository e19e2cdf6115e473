//! `.npz` archives: a zip of `.npy` entries, each streamed through the decompressor.
//!
//! `np.savez` stores the entries, `np.savez_compressed` deflates them; both are read. Entries are
//! visited in the order of the archive's central directory, which is the order they were written.
//! The zip reader checks each entry's CRC-32 when its end is reached, so every entry that is read
//! is drained to its end: a corrupt entry is an error even if its header and length look right.

use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use super::decode::{Decoder, visit_stream};
use super::npy::header;
use super::{Scan, TensorInfo, Values, bad_file, open_regular};
use crate::{Error, Result};

/// See [`super::scan`]. Each entry is named by its name in the archive without `.npy`.
pub(super) fn scan(
    path: &Path,
    want: &dyn Fn(&str) -> bool,
    visit: &mut dyn FnMut(&TensorInfo, Values<'_>),
) -> Result<Scan> {
    let file = open_regular(path)?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(|e| {
        bad_file(
            path,
            format!("not a valid .npz (zip) archive: {}", one_line(&e)),
        )
    })?;
    let mut found = Scan::default();
    let mut decoder = Decoder::default();
    let mut buffer = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| {
            bad_file(
                path,
                format!("corrupt .npz entry #{index}: {}", one_line(&e)),
            )
        })?;
        // Escaped: a corrupt name could hold a newline, and messages are one line.
        let entry_name = entry.name().escape_debug().to_string();
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_string) else {
            return Err(bad_file(
                path,
                format!("entry '{entry_name}' is not a .npy file: an .npz holds only .npy entries"),
            ));
        };
        if !want(&name) {
            continue;
        }
        let fail = |e: std::io::Error, what: &str| entry_error(path, &entry_name, &e, what);
        let head = read_header(&mut entry).map_err(|e| match e {
            HeaderError::Io(e) => fail(e, "truncated .npy header"),
            HeaderError::Bad(problem) => bad_file(path, format!("entry '{entry_name}': {problem}")),
        })?;
        let info = TensorInfo {
            name,
            dtype: head.dtype.clone(),
            shape: head.shape.clone(),
            path: path.to_path_buf(),
        };
        let Some(elem) = head.elem else {
            found.skipped.push(info);
            continue;
        };
        let need = head.data_bytes.unwrap_or(0);
        visit_stream(&mut entry, &info, elem, &mut decoder, &mut buffer, visit).map_err(|e| {
            fail(
                e,
                &format!(
                    "data shorter than the header says (shape {:?} of {} needs {need} bytes)",
                    info.shape, info.dtype
                ),
            )
        })?;
        // Drain to the end: this is where the zip reader checks the CRC.
        let extra = std::io::copy(&mut entry, &mut std::io::sink())
            .map_err(|e| fail(e, "unexpected end of the entry"))?;
        if extra > 0 {
            return Err(bad_file(
                path,
                format!(
                    "entry '{entry_name}': data longer than the header says ({extra} bytes after the {need} it describes)"
                ),
            ));
        }
        found.read.push(info);
    }
    Ok(found)
}

enum HeaderError {
    Io(std::io::Error),
    Bad(String),
}

/// Reads and parses the `.npy` header at the start of an entry.
fn read_header(entry: &mut dyn Read) -> std::result::Result<header::Header, HeaderError> {
    let mut prelude = [0u8; 12];
    entry
        .read_exact(&mut prelude[..8])
        .map_err(HeaderError::Io)?;
    let len = header::prelude_len(&prelude[..8]).map_err(HeaderError::Bad)?;
    entry
        .read_exact(&mut prelude[8..len])
        .map_err(HeaderError::Io)?;
    let dict_len = header::dict_len(&prelude[..len]).map_err(HeaderError::Bad)?;
    let mut dict = vec![0u8; dict_len];
    entry.read_exact(&mut dict).map_err(HeaderError::Io)?;
    header::parse(&dict).map_err(HeaderError::Bad)
}

/// A one-line error for a failed read inside an entry: `what` when it ended early, otherwise what
/// the decompressor or the CRC check said.
fn entry_error(path: &Path, entry: &str, err: &std::io::Error, what: &str) -> Error {
    let problem = if err.kind() == ErrorKind::UnexpectedEof {
        format!("entry '{entry}': {what}")
    } else {
        format!("entry '{entry}' is corrupt: {}", one_line(err))
    };
    bad_file(path, problem)
}

/// An error's message on one line.
fn one_line(err: &dyn std::fmt::Display) -> String {
    err.to_string().replace('\n', " ")
}
