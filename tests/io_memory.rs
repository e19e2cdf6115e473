//! Scanning a file much larger than one chunk keeps the resident memory near one chunk: the
//! memory map's pages are handed back as they are visited. In its own test binary (so its own
//! process) because it measures the process's resident set; Linux only (it reads /proc).

#![cfg(target_os = "linux")]

use mixprec::io::{CHUNK, TensorData, Values, scan, write_npy, write_safetensors};

/// The resident set size of this process, in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Scans `path` and returns the largest growth of the resident set seen while visiting, and the
/// number of values seen.
fn peak_growth(path: &std::path::Path) -> (usize, usize) {
    let before = rss();
    let mut peak = 0;
    let mut n = 0;
    let mut sum = 0.0f64;
    scan(path, &|_| true, &mut |_, values| {
        if let Values::F32(xs) = values {
            n += xs.len();
            sum += xs.iter().map(|&x| f64::from(x)).sum::<f64>();
        }
        peak = peak.max(rss().saturating_sub(before));
    })
    .unwrap();
    assert!(sum > 0.0);
    (peak, n)
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "writes and scans 2 x 256 MiB: run with --release"
)]
fn resident_memory_stays_near_one_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let n = 64 * CHUNK; // 256 MiB of f32
    let st = dir.path().join("big.safetensors");
    let npy = dir.path().join("big.npy");
    {
        let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
        write_safetensors(&st, &[("g", &[n], TensorData::F32(&values))]).unwrap();
        write_npy(&npy, &[n], TensorData::F32(&values)).unwrap();
    }
    for path in [&st, &npy] {
        let (peak, seen) = peak_growth(path);
        assert_eq!(seen, n);
        // One chunk is 4 MiB; allow a generous 32 MiB for read-ahead and allocator slack, against
        // the 256 MiB that a map kept resident would cost.
        assert!(
            peak < 32 << 20,
            "{}: resident set grew by {} MiB",
            path.display(),
            peak >> 20
        );
        eprintln!(
            "{}: peak growth {:.1} MiB for a 256 MiB file",
            path.display(),
            peak as f64 / (1 << 20) as f64
        );
    }
}
