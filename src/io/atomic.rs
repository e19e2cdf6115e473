//! Writing a file so that no reader ever sees it half-written.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
    let (temp, file) = create_temp(path).map_err(crate::Error::io_at(path))?;
    let mut out = BufWriter::new(file);
    let written = write(&mut out).and_then(|()| {
        let file = out
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()
    });
    written
        .and_then(|()| std::fs::rename(&temp.0, path))
        .map_err(crate::Error::io_at(path))?;
    // Renamed: nothing left to clean up.
    std::mem::forget(temp);
    Ok(())
}

/// Writes a set of files into the directory `target` as one: `write` writes them into a new
/// staging directory beside `target` (same file system), and only once it has succeeded are they
/// moved into place. So a failure (a full disk, a chart that cannot be drawn) leaves the previous
/// output, or nothing, never half of the new one.
///
/// A `target` that does not exist is the staging directory renamed, in one step. One that exists
/// (an earlier report, with files of the user's beside it) gets each staged file renamed over its
/// own, subdirectories merged: no data is written then, so a full disk cannot stop it midway. The
/// staging directory (`.<name>.<pid>-<n>.tmp`) is removed in every case. Missing parents of
/// `target` are created.
///
/// # Errors
/// What `write` returns, or [`crate::Error::Io`] naming the directory that could not be made or
/// the file that could not be moved.
pub fn write_dir_atomic<T>(target: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let parent = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).map_err(crate::Error::io_at(parent))?;
    let staging = TempDir(create_temp_dir(target).map_err(crate::Error::io_at(target))?);
    let written = write(&staging.0).map_err(|e| at_target(e, &staging.0, target))?;
    if std::fs::symlink_metadata(target).is_err() {
        std::fs::rename(&staging.0, target).map_err(crate::Error::io_at(target))?;
        std::mem::forget(staging);
    } else {
        merge(&staging.0, target)?;
    }
    Ok(written)
}

/// `error` about a file under `staging` said of the file it stands for under `target`: the
/// staging directory is not a name the user gave.
fn at_target(error: crate::Error, staging: &Path, target: &Path) -> crate::Error {
    let moved = |path: PathBuf| match path.strip_prefix(staging) {
        Ok(rest) => target.join(rest),
        Err(_) => path,
    };
    match error {
        crate::Error::Io { path, source } => crate::Error::io(moved(path), source),
        crate::Error::BadFile { path, problem } => crate::Error::BadFile {
            path: moved(path),
            problem,
        },
        other => other,
    }
}

/// Renames every file under `from` to the same place under `to`, making the directories.
fn merge(from: &Path, to: &Path) -> Result<()> {
    let entries = std::fs::read_dir(from).map_err(crate::Error::io_at(from))?;
    for entry in entries {
        let entry = entry.map_err(crate::Error::io_at(from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry
            .file_type()
            .map_err(crate::Error::io_at(&src))?
            .is_dir()
        {
            match std::fs::create_dir(&dst) {
                Err(e) if e.kind() != ErrorKind::AlreadyExists => {
                    return Err(crate::Error::io(&dst, e));
                }
                _ => {}
            }
            merge(&src, &dst)?;
        } else {
            std::fs::rename(&src, &dst).map_err(crate::Error::io_at(&dst))?;
        }
    }
    Ok(())
}

/// A temporary directory, removed with what it holds when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort, as for `Temp`.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates the directory `.<name>.<pid>-<n>.tmp` beside `path`, never reusing one.
fn create_temp_dir(path: &Path) -> std::io::Result<PathBuf> {
    loop {
        let temp = temp_name(path)?;
        match std::fs::create_dir(&temp) {
            Ok(()) => return Ok(temp),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
}

/// A new name `.<name>.<pid>-<n>.tmp` beside `path`.
fn temp_name(path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidInput, "the path does not name a file")
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}-{n}.tmp", std::process::id()));
    Ok(dir.join(temp_name))
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
    loop {
        let temp = temp_name(path)?;
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
    fn a_failed_set_leaves_the_previous_output_and_no_staging() {
        let (dir, path) = old_file();
        let target = dir.path().join("page");
        // No earlier output: nothing is left.
        let err = write_dir_atomic(&target, |staging| {
            write_atomic(&staging.join("a.svg"), |out| out.write_all(b"half"))?;
            Err::<(), _>(crate::Error::io(
                staging.join("index.html"),
                std::io::Error::other("disk full"),
            ))
        });
        let err = err.unwrap_err().to_string();
        assert!(
            err.starts_with(&target.join("index.html").display().to_string()),
            "{err}"
        );
        assert_eq!(entries(dir.path()), ["out.txt"]);
        // A complete set, then a failed one over it: the first stays whole.
        write_dir_atomic(&target, |staging| {
            std::fs::create_dir(staging.join("figures")).unwrap();
            write_atomic(&staging.join("figures/a.svg"), |out| out.write_all(b"one"))?;
            write_atomic(&staging.join("index.html"), |out| out.write_all(b"one"))
        })
        .unwrap();
        std::fs::write(target.join("mine.txt"), "the user's").unwrap();
        let err = write_dir_atomic(&target, |staging| {
            std::fs::create_dir(staging.join("figures")).unwrap();
            write_atomic(&staging.join("figures/a.svg"), |out| out.write_all(b"two"))?;
            Err::<(), _>(crate::Error::io(
                staging.join("index.html"),
                std::io::Error::other("disk full"),
            ))
        });
        assert!(err.is_err());
        assert_eq!(entries(dir.path()), ["out.txt", "page"]);
        assert_eq!(
            std::fs::read_to_string(target.join("figures/a.svg")).unwrap(),
            "one"
        );
        // A complete set over it replaces its files and keeps the user's.
        write_dir_atomic(&target, |staging| {
            std::fs::create_dir(staging.join("figures")).unwrap();
            write_atomic(&staging.join("figures/a.svg"), |out| out.write_all(b"two"))?;
            write_atomic(&staging.join("index.html"), |out| out.write_all(b"two"))
        })
        .unwrap();
        assert_eq!(entries(&target), ["figures", "index.html", "mine.txt"]);
        assert_eq!(
            std::fs::read_to_string(target.join("figures/a.svg")).unwrap(),
            "two"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
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
