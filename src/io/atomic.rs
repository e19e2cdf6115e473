//! Writing a file so that no reader ever sees it half-written.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::io_error;
use crate::Result;

/// Distinguishes the temporary files of concurrent writers in one process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Writes `path` through a temporary file in the same directory, then renames it over `path`.
///
/// A reader (or a crash) sees either the previous file or the complete new one, never a part: the
/// data is flushed and synced before the rename, which is atomic within one file system (hence the
/// same directory). If `write` or any step fails, the temporary file is removed and `path` is left
/// as it was. `write` gets a buffered writer. The new file gets the default permissions for new
/// files (the umask applies). If `path` is a symbolic link, the link itself is replaced.
///
/// # Errors
/// [`crate::Error::Io`] naming `path`, with what `write` or the operating system returned.
///
/// # Examples
/// ```
/// use std::io::Write;
/// let path = std::env::temp_dir().join(format!("mixprec-doc-atomic-{}.txt", std::process::id()));
/// mixprec::io::write_atomic(&path, |out| writeln!(out, "step,loss"))?;
/// assert_eq!(std::fs::read_to_string(&path)?, "step,loss\n");
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let (temp, file) = create_temp(path).map_err(|e| io_error(path, e))?;
    let mut out = BufWriter::new(file);
    let written = write(&mut out).and_then(|()| {
        let file = out
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()
    });
    written
        .and_then(|()| std::fs::rename(&temp.0, path))
        .map_err(|e| io_error(path, e))?;
    // Renamed: nothing left to clean up.
    std::mem::forget(temp);
    Ok(())
}

/// A temporary file, removed when dropped.
struct Temp(PathBuf);

impl Drop for Temp {
    fn drop(&mut self) {
        // Best effort: the error that brought us here matters more than this one.
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Creates `.<name>.<pid>-<n>.tmp` beside `path`, never reusing an existing file.
fn create_temp(path: &Path) -> std::io::Result<(Temp, File)> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}-{n}.tmp", std::process::id()));
        let temp = dir.join(temp_name);
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((Temp(temp), file)),
            // Left over by a crashed process that had the same id: pick another name.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_dir_names as entries;

    /// A directory holding `out.txt`, which holds "old".
    fn old_file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "old").unwrap();
        (dir, path)
    }

    /// What `out.txt` holds, once checked to be the only file left (no temporary).
    fn only_file(dir: &tempfile::TempDir, path: &Path) -> String {
        assert_eq!(entries(dir.path()), ["out.txt"]);
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let (dir, path) = old_file();
        write_atomic(&path, |out| out.write_all(b"new contents")).unwrap();
        assert_eq!(only_file(&dir, &path), "new contents");
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let (dir, path) = old_file();
        let err = write_atomic(&path, |out| {
            out.write_all(b"half")?;
            Err(std::io::Error::other("disk on fire"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk on fire"), "{err}");
        assert!(err.to_string().contains("out.txt"), "{err}");
        assert_eq!(only_file(&dir, &path), "old");
    }

    #[test]
    fn a_missing_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/out.txt");
        let err = write_atomic(&path, |out| out.write_all(b"x")).unwrap_err();
        assert!(matches!(err, crate::Error::Io { .. }), "{err:?}");
    }

    #[test]
    fn a_directory_in_the_way_is_an_error_and_cleaned_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("keep"), "x").unwrap();
        assert!(write_atomic(&path, |out| out.write_all(b"x")).is_err());
        assert_eq!(entries(dir.path()), ["sub"]);
    }
}
