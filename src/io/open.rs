//! The one guarded open behind every file the tools read: only regular files, and bounded reads.
//!
//! A FIFO blocks `open` until a writer appears, and a device such as `/dev/zero` never ends:
//! either would hang a reader or grow its memory without bound. So the kind of file is checked
//! before opening (following symbolic links, so a link to a FIFO or a device is refused too), and
//! again on what was opened, without blocking, in case the path was replaced in between. What is
//! read is bounded: a document by its length (checked against a cap before reading, and never
//! read past the length it had when opened), a log by a cap per line.

use std::fs::File;
use std::io::{BufRead, Read};
use std::path::Path;

use super::bad_file;
use crate::Result;

/// The longest JSON document read whole (`config.json`, `summary.json`, `grid.json`, a config
/// given to `train --config`): 64 MiB, a thousand times the largest a run writes.
pub const MAX_DOCUMENT: u64 = 64 << 20;

/// The longest line of a run's log read (`metrics.jsonl`, `captures.jsonl`, `shadow.jsonl`):
/// 256 MiB. A capture line grows with the model's tensors (7 MiB at depth 3,000); `train`'s
/// budget refuses runs whose captures would pass 1 GiB in all.
pub const MAX_RECORD: usize = 256 << 20;

/// Opens `path` for reading, refusing a directory, a device, a pipe, a socket or an empty file
/// with a clear message (rather than the operating system's puzzling one when seeking fails, or
/// a hang): what the tensor readers open.
pub(crate) fn open_regular(path: &Path) -> Result<File> {
    let (file, len) = open_checked(path)?;
    if len == 0 {
        return Err(bad_file(path, "the file is empty"));
    }
    Ok(file)
}

/// Opens `path` for reading as [`open_regular`] does, an empty file included: a run's log, which
/// is empty until its first line is written.
pub(crate) fn open_log(path: &Path) -> Result<File> {
    open_checked(path).map(|(file, _)| file)
}

/// Reads the whole of `path`, a regular file of at most `limit` bytes.
///
/// # Errors
/// [`crate::Error::BadFile`] for anything but a regular file (a FIFO, a device, a socket, a
/// directory, a symbolic link to one of them) or a file longer than `limit`;
/// [`crate::Error::Io`] when it cannot be opened or read.
pub fn read_document(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let (file, len) = open_checked(path)?;
    if len > limit {
        return Err(bad_file(
            path,
            format!(
                "{len} bytes, more than the {limit} read as one document: not a file mixprec wrote?"
            ),
        ));
    }
    // Never past the length it had when opened, should it grow while it is read.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(crate::Error::io_at(path))?;
    Ok(bytes)
}

/// Appends the next line of `input` (with its newline) to `buf`, reading at most one byte past
/// `limit`: the bytes read (0 at the end of the input), and whether the line is longer than
/// `limit` (then `buf` holds its first `limit + 1` bytes and the rest is unread).
///
/// # Errors
/// What `input` returns.
pub(crate) fn read_line<R: BufRead + ?Sized>(
    input: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<(usize, bool)> {
    let n = input.take(limit as u64 + 1).read_until(b'\n', buf)?;
    Ok((n, n > limit && buf.last() != Some(&b'\n')))
}

/// Opens a regular file (see the [module docs](self)), with its length.
fn open_checked(path: &Path) -> Result<(File, u64)> {
    let meta = std::fs::metadata(path).map_err(crate::Error::io_at(path))?;
    check_regular(path, &meta)?;
    let file = open_nonblocking(path).map_err(crate::Error::io_at(path))?;
    let meta = file.metadata().map_err(crate::Error::io_at(path))?;
    check_regular(path, &meta)?;
    Ok((file, meta.len()))
}

fn check_regular(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_dir() {
        return Err(bad_file(path, "is a directory, not a file"));
    }
    if !meta.is_file() {
        return Err(bad_file(
            path,
            format!(
                "not a regular file ({}): it cannot be read",
                kind_of(meta.file_type())
            ),
        ));
    }
    Ok(())
}

/// What a file that is not regular is, in words.
#[cfg(unix)]
fn kind_of(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a pipe"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn kind_of(_: std::fs::FileType) -> &'static str {
    "a pipe or a device"
}

/// Opens for reading without waiting for a writer, should the path be a FIFO after all (on a
/// regular file, `O_NONBLOCK` changes nothing).
#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_one_byte_past_the_limit() {
        let text = b"12345\n123456\n";
        let mut input = std::io::BufReader::new(&text[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut input, &mut buf, 5).unwrap(), (6, false));
        buf.clear();
        assert_eq!(read_line(&mut input, &mut buf, 5).unwrap(), (6, true));
        assert_eq!(buf, b"123456");
    }

    #[cfg(unix)]
    #[test]
    fn a_document_longer_than_its_limit_or_a_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, b"{\"a\": 1}").unwrap();
        assert_eq!(read_document(&path, 8).unwrap(), b"{\"a\": 1}");
        let err = read_document(&path, 7).unwrap_err().to_string();
        assert!(err.contains("8 bytes, more than the 7"), "{err}");
        let link = dir.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_document(&link, MAX_DOCUMENT).unwrap_err().to_string();
        assert!(err.contains("not a regular file (a device)"), "{err}");
    }
}
