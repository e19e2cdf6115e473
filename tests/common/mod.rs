//! Helpers shared by the tests that run the `mixprec` binary (`mod common;` in each).
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mixprec"))
}

/// An empty temporary path for `name`, unique to this test file and process.
pub fn fresh(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "mixprec-{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// [`fresh`]'s path for `name`, made (empty).
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = fresh(name);
    std::fs::create_dir_all(&d).expect("a temporary directory");
    d
}

/// The standard output of a command that must succeed (its output shown when it does not).
pub fn ok(out: Output) -> String {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout.into_owned()
}

/// The one-line error of a command that must fail on bad input (exit code 2).
pub fn fails(out: Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// Runs the binary with `args` (and `env`, added to this process's environment).
pub fn mixprec_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = bin();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

/// Runs `mixprec COMMAND --config CONFIG FLAGS.. --out OUT` on `threads` threads.
pub fn with_config(
    command: &str,
    config: &Path,
    flags: &[&str],
    out: &Path,
    threads: &str,
) -> Output {
    bin()
        .args([command, "--config"])
        .arg(config)
        .args(flags)
        .arg("--out")
        .arg(out)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .expect("the binary runs")
}

/// Runs the binary with `args`.
pub fn mixprec(args: &[&str]) -> Output {
    mixprec_env(args, &[])
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The JSON value a successful `mixprec ARGS` prints.
pub fn json_out(args: &[&str]) -> serde_json::Value {
    let o = mixprec(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON value")
}

/// The report a successful `mixprec analyze FILE --json FLAGS..` prints.
pub fn analyze_json(file: &Path, flags: &[&str]) -> serde_json::Value {
    json_out(&[&["analyze", file.to_str().unwrap(), "--json"], flags].concat())
}

/// The table a successful `mixprec analyze FILE FLAGS..` prints.
pub fn analyze_text(file: &Path, flags: &[&str]) -> String {
    ok(mixprec(
        &[&["analyze", file.to_str().unwrap()], flags].concat(),
    ))
}

/// `mixprec args` fails on bad input as promised: exit code 2, one line on standard error that
/// starts with `mixprec: ` (or clap's `error: ` for a bad flag) and mentions `needle`, and
/// nothing on standard output.
pub fn assert_bad(args: &[&str], needle: &str) {
    let o = mixprec(args);
    assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    let err = fails(o);
    assert!(
        err.starts_with("mixprec: ") || err.starts_with("error: "),
        "{err}"
    );
    assert!(err.contains(needle), "{args:?}: '{needle}' in {err}");
}

/// Asserts that `text` contains each of `parts`.
pub fn assert_contains(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "'{part}' missing from\n{text}");
    }
}

/// The keys of a JSON object, in order.
pub fn keys(v: &serde_json::Value) -> Vec<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

/// The string under `key` in each object of the JSON array `v`.
pub fn strs<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|o| o[key].as_str().expect("a string"))
        .collect()
}

/// The names of the entries of directory `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("a directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A JSON Lines file, one value a line.
pub fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Stochastic rounding with `seed`, the other options at their defaults.
pub fn stochastic(seed: u64) -> mixprec::format::RoundOptions {
    mixprec::format::RoundOptions {
        rounding: mixprec::format::Rounding::Stochastic,
        seed,
        ..mixprec::format::RoundOptions::default()
    }
}

/// Deterministic values with magnitudes log-uniform between 2^lo and 2^hi, random signs, and
/// an exact zero every `zero_every` values.
pub fn log_uniform(seed: u64, n: usize, lo: f64, hi: f64, zero_every: usize) -> Vec<f32> {
    let mut rng = mixprec::train::Rng::new(seed);
    (0..n)
        .map(|i| {
            let r = rng.next_u64();
            if i % zero_every == 0 {
                return 0.0;
            }
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let m = 2f64.powf(lo + (hi - lo) * u) as f32;
            if r & 1 == 1 { -m } else { m }
        })
        .collect()
}

/// Tensor files in a temporary directory.
pub struct Files {
    pub dir: tempfile::TempDir,
}

impl Files {
    pub fn new() -> Self {
        Files {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// A new directory holding [`Files::grads`]'s file, and that file's path.
    pub fn with_grads() -> (Self, PathBuf) {
        let files = Files::new();
        let (path, _) = files.grads();
        (files, path)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Two tensors of different scales, and one integer-free but NaN/inf-holding tensor.
    pub fn grads(&self) -> (PathBuf, Vec<(&'static str, Vec<f32>)>) {
        let mut small = log_uniform(1, 5000, -40.0, -10.0, 97);
        small.extend([f32::NAN, f32::INFINITY]);
        let tensors = vec![
            ("small.grad", small),
            ("large.grad", log_uniform(2, 3000, -12.0, 3.0, 97)),
            ("tiny", vec![1e-3, -2e-3, 0.0]),
        ];
        let path = self.path("grads.safetensors");
        write_vectors(&path, &tensors);
        (path, tensors)
    }
}

/// Writes 1-D f32 tensors (name, values) into the safetensors file `path`.
pub fn write_vectors<S: AsRef<str>>(path: &Path, tensors: &[(S, Vec<f32>)]) {
    let shapes: Vec<[usize; 1]> = tensors.iter().map(|(_, v)| [v.len()]).collect();
    let refs: Vec<(&str, &[usize], mixprec::io::TensorData<'_>)> = tensors
        .iter()
        .zip(&shapes)
        .map(|((n, v), s)| (n.as_ref(), &s[..], mixprec::io::TensorData::F32(v)))
        .collect();
    mixprec::io::write_safetensors(path, &refs).expect("written");
}

/// `zip` with `copies` more central-directory records that repeat its first entry's record under
/// new names (`c0.npy`, `c1.npy`, ...), all pointing at the same compressed data; or, with
/// `same_name`, one more record with the first entry's own name.
pub fn repeat_entry(zip: &[u8], copies: usize, same_name: bool) -> Vec<u8> {
    let u16_at = |b: &[u8], i: usize| usize::from(u16::from_le_bytes([b[i], b[i + 1]]));
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let eocd = zip.len() - 22;
    assert_eq!(u32_at(zip, eocd), 0x0605_4b50);
    let cd = u32_at(zip, eocd + 16) as usize;
    let rec_len = 46 + u16_at(zip, cd + 28) + u16_at(zip, cd + 30) + u16_at(zip, cd + 32);
    let record = &zip[cd..cd + rec_len];
    let name_len = u16_at(record, 28);
    let mut out = zip[..eocd].to_vec();
    let count = if same_name { 1 } else { copies };
    for i in 0..count {
        let name = if same_name {
            record[46..46 + name_len].to_vec()
        } else {
            format!("c{i}.npy").into_bytes()
        };
        let mut r = record[..46].to_vec();
        r[28..30].copy_from_slice(&(name.len() as u16).to_le_bytes());
        r[30..34].fill(0); // no extra field, no comment
        r.extend_from_slice(&name);
        out.extend_from_slice(&r);
    }
    let entries = (u16_at(zip, eocd + 10) + count) as u16;
    let cd_size = (out.len() - cd) as u32;
    let mut end = zip[eocd..].to_vec();
    end[8..10].copy_from_slice(&entries.to_le_bytes());
    end[10..12].copy_from_slice(&entries.to_le_bytes());
    end[12..16].copy_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&end);
    out
}
