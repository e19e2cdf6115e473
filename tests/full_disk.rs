//! Issue 42, class 4 (and 5): a full disk under the commands that write several files. On a
//! small tmpfs, `report --out`, `replay --out`, `train --out` and `demo --out` must exit 2 with one line and
//! leave the previous output whole, or nothing (no half a page, no staging directory, no empty
//! run directory). Mounting needs root; where `mount -t tmpfs` fails the test says why and
//! passes without checking.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mixprec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(args)
        .output()
        .unwrap()
}

/// A tmpfs of `size` mounted at `dir/disk`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        let at = dir.join("disk");
        std::fs::create_dir(&at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if out.status.success() {
            Ok(Tmpfs(at))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Every file under `dir` (relative path -> bytes), and every directory.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                files.insert(rel, Vec::new());
                todo.push(path);
            } else {
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Fills the disk at `dir` with one file, to the last byte.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("fill")).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.write_all(&[0]);
}

/// One line on standard error, exit code 2, no panic.
fn refused(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
    assert!(
        err.starts_with("mixprec: ") && !err.contains("panicked"),
        "{what}: {err}"
    );
}

#[test]
fn a_full_disk_leaves_the_previous_output_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    let trained = mixprec(&[
        "train",
        "--steps",
        "20",
        "--capture-every",
        "10",
        "--out",
        run_s,
    ]);
    assert!(trained.status.success());
    let disk = match Tmpfs::mount(dir.path(), "16m") {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a tmpfs here ({why}); run as root to check");
            return;
        }
    };
    let page = disk.0.join("page");
    let page_s = page.to_str().unwrap();
    assert!(
        mixprec(&["report", run_s, "--out", page_s])
            .status
            .success()
    );
    let before = snapshot(&page);
    assert!(before.contains_key(Path::new("index.html")));
    fill(&disk.0);

    let again = mixprec(&["report", run_s, "--out", page_s]);
    refused(&again, "report over a report");
    assert!(String::from_utf8_lossy(&again.stderr).contains("No space left"));
    assert!(snapshot(&page) == before, "the earlier report changed");
    let replay = disk.0.join("replay");
    let replay_out = mixprec(&[
        "replay",
        run_s,
        "--out",
        replay.to_str().unwrap(),
        "--policy",
        "gradscaler",
    ]);
    refused(&replay_out, "replay --out");
    let err = String::from_utf8_lossy(&replay_out.stderr);
    assert!(err.contains("No space left"), "{err}");
    let new = disk.0.join("new-page");
    refused(
        &mixprec(&["report", run_s, "--out", new.to_str().unwrap()]),
        "report",
    );
    let train = disk.0.join("a").join("run");
    refused(
        &mixprec(&["train", "--steps", "5", "--out", train.to_str().unwrap()]),
        "train",
    );
    let demo = disk.0.join("demo");
    refused(&mixprec(&["demo", "--out", demo.to_str().unwrap()]), "demo");
    // Nothing else on the disk: no half page, no staging directory, no empty run directory.
    let mut left: Vec<String> = std::fs::read_dir(&disk.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["fill", "page"]);
}
