//! `.npz` archives: a zip of `.npy` entries, each streamed through the decompressor.
//!
//! `np.savez` stores the entries, `np.savez_compressed` deflates them; both are read. Entries are
//! visited in the order of the archive's central directory, which is the order they were written.
//! The zip reader checks each entry's CRC-32 when its end is reached, so every entry that is read
//! is read to its end: a corrupt entry is an error even if its header and length look right.
//!
//! The central directory is checked first ([`directory`]): entries that overlap or repeat a name
//! are refused before anything is decompressed, and no entry is read past the length its `.npy`
//! header gives (plus one byte, to tell that it is longer), so the work is bounded by the file's
//! size.

pub(crate) mod directory;

use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use super::decode::{Decoder, visit_stream};
use super::npy::header;
use super::{Scan, Stamp, TensorInfo, Visit, bad_file};
use crate::{Error, Result};

/// See [`super::scan`]. Each entry is named by its name in the archive without `.npy`.
pub(super) fn scan(path: &Path, want: &dyn Fn(&str) -> bool, visit: Visit<'_>) -> Result<Scan> {
    let mut archive = open_archive(path)?;
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
        let (head, head_len) = read_header(&mut entry).map_err(|e| match e {
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
        // One byte more: none is the end, where the zip reader checks the CRC.
        let declared = entry.size();
        let mut more = [0u8; 1];
        let extra = entry
            .read(&mut more)
            .map_err(|e| fail(e, "unexpected end of the entry"))?;
        if extra > 0 {
            return Err(bad_file(
                path,
                format!(
                    "entry '{entry_name}': data longer than the header says ({} bytes after the {need} it describes)",
                    declared.saturating_sub((head_len + need) as u64).max(1)
                ),
            ));
        }
        found.read.push(info);
    }
    Ok(found)
}

/// Opens the `.npz` at `path` once its central directory has passed [`directory::read`]'s checks.
///
/// # Errors
/// [`Error::Io`] when it cannot be opened; [`Error::BadFile`] when it is not a zip archive, or
/// its directory is refused (overlapping entries, a name given twice).
pub(crate) fn open_archive(path: &Path) -> Result<zip::ZipArchive<BufReader<std::fs::File>>> {
    let (file, stamp) = Stamp::open(path)?;
    let len = stamp.len();
    let mut reader = BufReader::new(file);
    directory::read(&mut reader, len)
        .map_err(|problem| bad_file(path, format!("not a valid .npz (zip) archive: {problem}")))?;
    zip::ZipArchive::new(reader).map_err(|e| {
        bad_file(
            path,
            format!("not a valid .npz (zip) archive: {}", one_line(&e)),
        )
    })
}

enum HeaderError {
    Io(std::io::Error),
    Bad(String),
}

/// Reads and parses the `.npy` header at the start of an entry; also returns its length in bytes.
fn read_header(entry: &mut dyn Read) -> std::result::Result<(header::Header, usize), HeaderError> {
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
    Ok((
        header::parse(&dict).map_err(HeaderError::Bad)?,
        len + dict_len,
    ))
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
