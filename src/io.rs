//! Reading user tensors from `.safetensors`, `.npy` and `.npz` files, and writing files atomically.
//!
//! # What is read
//! - `.safetensors` (header parsed and validated by the `safetensors` crate): tensors of dtype `F64`,
//!   `F32`, `F16` and `BF16` are read; every other dtype (integers, `BOOL`, fp8, ...) is listed in
//!   [`Scan::skipped`]. A tensor is named by its key in the header. A dtype name that the
//!   `safetensors` crate does not know at all (none in use today) makes the header invalid: an
//!   error, not a skip.
//! - `.npy` (format versions 1.0, 2.0 and 3.0): `descr` `<f8`, `<f4`, `<f2`, their big-endian
//!   (`>`) and native (`=`) forms; other dtypes (integers, bool, complex, structured, object) are
//!   skipped. The tensor is named by the file stem (`grad.npy` holds `grad`).
//! - `.npz` (a zip of `.npy` entries, stored as by `np.savez` or deflated as by
//!   `np.savez_compressed`): each entry as a `.npy`, named by the entry name without `.npy`.
//!
//! The format is chosen by the file extension, in any case. Values are visited in storage order:
//! for a Fortran-order `.npy` that is column-major, which does not matter for statistics (the
//! visitor sees the same multiset of values).
//!
//! `F16` and `BF16` values are widened to `f32`, which is exact; `F64` stays `f64`; big-endian
//! data is byte-swapped, also exactly. So the visitor sees [`Values::F32`] or [`Values::F64`].
//!
//! [`read_npy`] reads one whole `.npy` array into memory instead, integers (`i1`..`i8`,
//! `u1`..`u8`, `b1`) as well as floats, with its shape and order: what a data set of features and
//! class labels needs.
//!
//! # Memory
//! Files are never loaded whole (except by [`read_npy`], whose caller wants the array). The
//! header is read, then each chunk of at most [`CHUNK`] values is read with plain reads into one
//! reusable, aligned buffer and either viewed in place (little-endian `f32`/`f64`) or converted
//! into a second one, so the resident memory stays near one chunk whatever the file size. `.npz`
//! entries are streamed through the decompressor one chunk at a time.
//!
//! Files are not memory-mapped: a map faults (`SIGBUS`, the process dies without a word) when
//! another process truncates the file while it is read, which a training loop saving its
//! gradients in place does. A plain read of a file that shrank ends early instead, and every
//! reader compares the file's length and modification time before and after reading: a file that
//! changed while it was read is an error ("the file changed while it was read"), never a silent
//! mix of old and new data.
//!
//! # Untrusted input
//! Every length in a file is checked against the file's size before it is used, so the work and
//! memory of reading a file are bounded by its size: an `.npz` whose directory entries overlap
//! (a "zip bomb" that makes a small file stand for terabytes) or repeat a name is refused before
//! any entry is decompressed. Every file the tools read (tensor files, run directories, grids,
//! configs) is opened through one guarded open ([`read_document`] and the crate's `open_regular`
//! and `open_log`): a pipe, a device or a socket, or a symbolic link to one, is refused before
//! it is opened, so reading never waits for a writer nor reads without end; a JSON document is
//! refused beyond [`MAX_DOCUMENT`] bytes and a line of a log beyond [`MAX_RECORD`].
//!
//! # Errors
//! A file that cannot be opened gives [`Error::Io`]; a file whose content is wrong gives
//! [`Error::BadFile`] with a one-line `problem` that names what is wrong (empty file, truncated
//! header, header that is not valid JSON or not a dict, data shorter or longer than the header
//! says, offsets out of range or overlapping, a shape that does not match the data, an `.npz` that
//! is not a zip, a corrupt or non-`.npy` entry). No input makes the readers panic. An error found in
//! the middle of a stream (a corrupt `.npz` entry) can come after the visitor has seen earlier
//! chunks: discard what it accumulated when [`scan`] returns an error.
//!
//! # Writing
//! [`write_atomic`] writes through a temporary file in the same directory and renames it over the
//! target, so a reader sees either the old file or the complete new one. [`write_safetensors`] and
//! [`write_npy`] use it; [`npy_header`] is `write_npy`'s header, for a `.npy` written in pieces.
//! [`tensorboard`] encodes TensorBoard's event files (the record format, scalars and histograms).

mod atomic;
mod decode;
mod json;
mod npy;
pub(crate) mod npz;
mod open;
mod safetensors;
pub mod tensorboard;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub use atomic::{write_atomic, write_dir_atomic};
pub(crate) use json::{
    duplicate_key, from_value as json_from_value, parse as parse_json, tracked as json_tracked,
};
pub(crate) use npy::read_npy_bytes;
pub use npy::{NpyArray, NpyValues, npy_header, read_npy, write_npy};
pub use open::{MAX_DOCUMENT, MAX_RECORD, read_document};
pub(crate) use open::{open_log, open_regular, read_line};

/// A `.npy` file (version 1.0) written by hand for tests: header `descr`, `shape` (Python tuple
/// text, e.g. `"(2, 3)"`), order, then `data` as given (which may disagree with the header).
#[cfg(test)]
pub(crate) fn test_npy(descr: &str, shape: &str, fortran: bool, data: &[u8]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    while (10 + dict.len() + 1) % 64 != 0 {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}
pub use safetensors::write_safetensors;

/// The names of the entries of `dir`, sorted: what a test checks a write left behind.
#[cfg(test)]
pub(crate) fn test_dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The most values passed to the visitor of [`scan`] in one call (2^20: 4 MiB of `f32`).
pub const CHUNK: usize = 1 << 20;

/// The element type of a tensor in a file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of a binary32).
    BF16,
    /// Anything else, as the file spells it (`I64`, `BOOL`, `F8_E4M3`, `<i4`, `|b1`, ...).
    Other(String),
}

impl Dtype {
    /// Whether [`scan`] reads tensors of this dtype (the four float types) rather than skip them.
    #[must_use]
    pub fn is_supported(&self) -> bool {
        !matches!(self, Dtype::Other(_))
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::F64 => "F64",
            Dtype::F32 => "F32",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::Other(text) => text,
        })
    }
}

/// One tensor found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name: the safetensors key, the `.npy` file stem, or the `.npz` entry without `.npy`.
    pub name: String,
    /// Its element type in the file.
    pub dtype: Dtype,
    /// Its shape (empty for a scalar).
    pub shape: Vec<usize>,
    /// The file it is in.
    pub path: PathBuf,
}

impl TensorInfo {
    /// The number of elements: the product of the shape, 1 for a scalar, 0 if any dimension is 0.
    #[must_use]
    pub fn len(&self) -> usize {
        // The readers reject shapes whose product overflows, so this cannot wrap.
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (some dimension is 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A chunk of a tensor's values, as passed to the visitor of [`scan`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Values<'a> {
    /// From `F32`, `F16` or `BF16` tensors (the latter two widened exactly).
    F32(&'a [f32]),
    /// From `F64` tensors.
    F64(&'a [f64]),
}

impl Values<'_> {
    /// The number of values in the chunk.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Values::F32(xs) => xs.len(),
            Values::F64(xs) => xs.len(),
        }
    }

    /// Whether the chunk is empty (only for a tensor with no elements).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What [`scan`] found in a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The tensors whose values were visited, in file order.
    pub read: Vec<TensorInfo>,
    /// The tensors that passed the name filter but have an unsupported dtype (integers, bool,
    /// fp8, complex, ...), in file order. They are listed, not errors.
    pub skipped: Vec<TensorInfo>,
}

/// Values to write with [`write_safetensors`] or [`write_npy`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TensorData<'a> {
    /// Written as `F32` / `<f4`.
    F32(&'a [f32]),
    /// Written as `F64` / `<f8`.
    F64(&'a [f64]),
    /// Written as `F16` / `<f2`.
    F16(&'a [half::f16]),
    /// Written as `BF16` (safetensors only: `.npy` has no bfloat16 type).
    BF16(&'a [half::bf16]),
}

impl TensorData<'_> {
    /// The number of values.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(xs) => xs.len(),
            TensorData::F64(xs) => xs.len(),
            TensorData::F16(xs) => xs.len(),
            TensorData::BF16(xs) => xs.len(),
        }
    }

    /// Whether there are no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dtype the values are written as.
    #[must_use]
    pub fn dtype(&self) -> Dtype {
        match self {
            TensorData::F32(_) => Dtype::F32,
            TensorData::F64(_) => Dtype::F64,
            TensorData::F16(_) => Dtype::F16,
            TensorData::BF16(_) => Dtype::BF16,
        }
    }
}

/// What [`scan`] does with each chunk of a tensor's values (the readers of each format get it).
pub(crate) type Visit<'a> = &'a mut dyn FnMut(&TensorInfo, Values<'_>);

/// Visits the values of every supported tensor in `path` whose name passes `want`.
///
/// The format is chosen by the extension (`.safetensors`, `.npy`, `.npz`, any case). `visit` is
/// called in file order, in consecutive chunks of at most [`CHUNK`] values; all chunks of one
/// tensor come before the next tensor's. A tensor with no elements gets exactly one call with an
/// empty chunk, so every tensor in [`Scan::read`] is seen by `visit`. Tensors that fail `want` are
/// neither visited nor listed; those that pass it but have an unsupported dtype are listed in
/// [`Scan::skipped`].
///
/// # Errors
/// [`Error::Io`] if the file cannot be opened or read; [`Error::BadFile`] for an unknown extension
/// or content that is not a valid file of its format (see the [module docs](self)).
///
/// # Examples
/// ```
/// use mixprec::io::{scan, write_safetensors, TensorData, Values};
///
/// let dir = std::env::temp_dir().join(format!("mixprec-doc-scan-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("grads.safetensors");
/// let w = [0.5f32, -2.0, 1e-8];
/// let b = [1.0f64, 3.0];
/// write_safetensors(&path, &[("w", &[3], TensorData::F32(&w)), ("b", &[2], TensorData::F64(&b))])?;
///
/// let mut amax = 0.0f64;
/// let found = scan(&path, &|name| name == "w", &mut |info, values| {
///     assert_eq!(info.name, "w");
///     if let Values::F32(xs) = values {
///         amax = xs.iter().fold(amax, |m, x| m.max(f64::from(x.abs())));
///     }
/// })?;
/// assert_eq!(amax, 2.0);
/// assert_eq!(found.read.len(), 1);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scan(
    path: &Path,
    want: &dyn Fn(&str) -> bool,
    visit: &mut dyn FnMut(&TensorInfo, Values<'_>),
) -> Result<Scan> {
    if path.is_dir() {
        return Err(bad_file(
            path,
            "is a directory, not a tensor file: expected a .safetensors, .npy or .npz file",
        ));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("safetensors") => safetensors::scan(path, want, visit),
        Some("npy") => npy::scan(path, want, visit),
        Some("npz") => npz::scan(path, want, visit),
        _ => Err(bad_file(
            path,
            "unknown tensor file type: expected a .safetensors, .npy or .npz extension",
        )),
    }
}

/// An [`Error::BadFile`] for `path`.
fn bad_file(path: &Path, problem: impl Into<String>) -> Error {
    Error::BadFile {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// What tells, without reading it, that a file changed: its length and modification time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl Stamp {
    /// Opens `path` for reading (see [`open_regular`]), with its stamp.
    pub(crate) fn open(path: &Path) -> Result<(std::fs::File, Stamp)> {
        let file = open_regular(path)?;
        let stamp = Stamp::of(path, &file)?;
        Ok((file, stamp))
    }

    /// The stamp of the open `file`.
    pub(crate) fn of(path: &Path, file: &std::fs::File) -> Result<Stamp> {
        let meta = file.metadata().map_err(Error::io_at(path))?;
        Ok(Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// An error if `file` no longer has this stamp: another process rewrote it while it was read
    /// (a training loop saving in place), so what was read may mix old and new data.
    pub(crate) fn check(&self, path: &Path, file: &std::fs::File) -> Result<()> {
        let now = Stamp::of(path, file)?;
        if now == *self {
            Ok(())
        } else {
            Err(changed(path, self, &now))
        }
    }
}

/// The error for a file that changed between `before` and `now`.
fn changed(path: &Path, before: &Stamp, now: &Stamp) -> Error {
    let how = if now.len == before.len {
        format!("modified, {} bytes", now.len)
    } else {
        format!("{} bytes, then {}", before.len, now.len)
    };
    bad_file(
        path,
        format!(
            "the file changed while it was read ({how}; rewritten in place?): read it again once it is complete"
        ),
    )
}

/// The error for a read of `file` that failed midway: a file that ended early (it shrank since
/// it was opened: the readers check lengths first) is named as a changed file.
pub(crate) fn read_failed(
    path: &Path,
    file: &std::fs::File,
    before: &Stamp,
    err: std::io::Error,
) -> Error {
    if err.kind() == std::io::ErrorKind::UnexpectedEof {
        match Stamp::of(path, file) {
            Ok(now) => changed(path, before, &now),
            Err(e) => e,
        }
    } else {
        Error::io(path, err)
    }
}

/// Reads `buf.len()` bytes of `file` from `offset`.
pub(crate) fn read_at(
    file: &mut std::fs::File,
    offset: u64,
    buf: &mut [u8],
) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

/// Checks that `shape` holds exactly `n` values (for the writers).
fn check_shape(name: &str, shape: &[usize], n: usize) -> Result<()> {
    let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if len == Some(n) {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "tensor shape",
            value: format!("{name}: shape {shape:?} for {n} values"),
            expected: "a shape whose product is the number of values",
        })
    }
}

/// Writes `data` little-endian, converting a bounded block at a time.
fn write_le(out: &mut dyn std::io::Write, data: TensorData<'_>) -> std::io::Result<()> {
    fn blocks<T: Copy, const N: usize>(
        out: &mut dyn std::io::Write,
        xs: &[T],
        le: fn(T) -> [u8; N],
    ) -> std::io::Result<()> {
        const BLOCK: usize = 1 << 14;
        let mut buf = Vec::with_capacity(BLOCK * N);
        for block in xs.chunks(BLOCK) {
            buf.extend(block.iter().flat_map(|&x| le(x)));
            out.write_all(&buf)?;
            buf.clear();
        }
        Ok(())
    }
    match data {
        TensorData::F64(xs) => blocks(out, xs, f64::to_le_bytes),
        TensorData::F32(xs) => blocks(out, xs, f32::to_le_bytes),
        TensorData::F16(xs) => blocks(out, xs, half::f16::to_le_bytes),
        TensorData::BF16(xs) => blocks(out, xs, half::bf16::to_le_bytes),
    }
}
