//! Peak memory of the real binary on large inputs: `analyze` on a 1 GiB (sparse) `.npy` and
//! `quantize` on 50 million lines must each finish within [`LIMIT`] of resident memory, the
//! child's peak as the kernel reports it (`ru_maxrss` from `wait4`). Linux only.
//!
//! Release builds only (a debug build is too slow for 50 million lines); about 20 s on two cores.

#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::{Child, Command, Stdio};

/// The most resident memory either command may use: the promise is "about one chunk" (4 MiB of
/// values plus a buffer), whatever the input size.
const LIMIT: u64 = 64 << 20;

/// Waits for `child` and returns its exit code and peak resident set in bytes.
fn wait_peak(child: Child) -> (i32, u64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 writes only into the two out-parameters, which live across the call; the
    // child is ours and not waited for elsewhere (Child's drop does not wait).
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "killed: status {status}");
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64 * 1024)
}

#[test]
#[cfg_attr(debug_assertions, ignore = "run with --release")]
fn analyze_a_1_gib_file_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.npy");
    let n: u64 = 1 << 28; // 1 GiB of f32 zeros, as a sparse file: no disk space used
    let head = mixprec::io::npy_header("<f4", &[n as usize]);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(&head).unwrap();
    // One nonzero value at the very end, so the whole file is read.
    file.set_len(head.len() as u64 + 4 * n).unwrap();
    std::os::unix::fs::FileExt::write_at(
        &file,
        &1.0f32.to_le_bytes(),
        head.len() as u64 + 4 * (n - 1),
    )
    .unwrap();
    drop(file);
    let child = Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(["analyze", "--json"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (code, peak) = wait_peak(child);
    eprintln!(
        "analyze, 1 GiB .npy: peak {:.1} MiB",
        peak as f64 / (1 << 20) as f64
    );
    assert_eq!(code, 0);
    assert!(peak < LIMIT, "peak {} MiB", peak >> 20);
}

#[test]
#[cfg_attr(debug_assertions, ignore = "run with --release")]
fn quantize_50_million_lines_in_bounded_memory() {
    let lines = 50_000_000usize;
    let mut child = Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(["quantize", "--format", "bf16"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let block: Vec<u8> = (0..10_000)
            .flat_map(|i| format!("{}e-{}\n", i % 977, i % 40).into_bytes())
            .collect();
        for _ in 0..lines / 10_000 {
            input.write_all(&block).unwrap();
        }
    });
    let mut output = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut count = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = std::io::Read::read(&mut output, &mut buf).unwrap();
            if n == 0 {
                break count;
            }
            count += buf[..n].iter().filter(|&&b| b == b'\n').count();
        }
    });
    writer.join().unwrap();
    let (code, peak) = wait_peak(child);
    let printed = reader.join().unwrap();
    eprintln!(
        "quantize, 50M lines: peak {:.1} MiB",
        peak as f64 / (1 << 20) as f64
    );
    assert_eq!((code, printed), (0, lines));
    assert!(peak < LIMIT, "peak {} MiB", peak >> 20);
}
