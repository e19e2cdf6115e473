//! `mixprec analyze` run as a real binary on files written for each test.

use std::path::PathBuf;
use std::process::{Command, Output};

use mixprec::format::{Event, FP16, FloatFormat, RoundOptions, Rounder};
use mixprec::io::{TensorData, write_npy, write_safetensors};
use mixprec::train::Rng;
use serde_json::Value;

fn mixprec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mixprec"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Deterministic values with magnitudes between 2^lo and 2^hi, random signs, some exact zeros
/// and specials.
fn values(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let mut next = move || rng.next_u64();
    (0..n)
        .map(|i| {
            let r = next();
            if i % 97 == 0 {
                return 0.0;
            }
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let m = 2f64.powf(lo + (hi - lo) * u) as f32;
            if r & 1 == 1 { -m } else { m }
        })
        .collect()
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Files {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Two tensors of different scales, and one integer-free but NaN/inf-holding tensor.
    fn grads(&self) -> (PathBuf, Vec<(&'static str, Vec<f32>)>) {
        let mut small = values(1, 5000, -40.0, -10.0);
        small.extend([f32::NAN, f32::INFINITY]);
        let tensors = vec![
            ("small.grad", small),
            ("large.grad", values(2, 3000, -12.0, 3.0)),
            ("tiny", vec![1e-3, -2e-3, 0.0]),
        ];
        let path = self.path("grads.safetensors");
        let data: Vec<(&str, Vec<usize>, TensorData<'_>)> = tensors
            .iter()
            .map(|(n, v)| (*n, vec![v.len()], TensorData::F32(v)))
            .collect();
        let refs: Vec<(&str, &[usize], TensorData<'_>)> = data
            .iter()
            .map(|(n, s, d)| (*n, s.as_slice(), *d))
            .collect();
        write_safetensors(&path, &refs).expect("written");
        (path, tensors)
    }
}

/// The slow reference: class counts at scale 2^k, rounding every value.
fn reference_counts(format: FloatFormat, xs: &[f32], k: i32) -> [u64; 4] {
    let r = Rounder::new(format, RoundOptions::default());
    let mut n = [0u64; 4];
    for &x in xs.iter().filter(|x| x.is_finite() && **x != 0.0) {
        let i = match r.round_at(f64::from(x) * 2f64.powi(k), 0).1 {
            Event::Underflow => 0,
            Event::Subnormal => 1,
            Event::Normal => 2,
            _ => 3,
        };
        n[i] += 1;
    }
    n
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn check_sweep(obj: &Value, lo: i64, hi: i64) {
    let count = obj["count"].as_u64().unwrap();
    let zeros = obj["zeros"].as_u64().unwrap();
    let nonfinite = obj["nonfinite"].as_u64().unwrap();
    let sweep = obj["sweep"].as_array().unwrap();
    assert_eq!(sweep.len() as i64, hi - lo + 1);
    for (i, row) in sweep.iter().enumerate() {
        assert_eq!(
            keys(row),
            [
                "log2_scale",
                "underflow",
                "subnormal",
                "normal",
                "overflow",
                "energy_lost",
                "relative_error"
            ]
        );
        assert_eq!(row["log2_scale"].as_i64().unwrap(), lo + i as i64);
        let sum: u64 = ["underflow", "subnormal", "normal", "overflow"]
            .iter()
            .map(|k| row[k].as_u64().unwrap())
            .sum();
        assert_eq!(sum, count - zeros - nonfinite);
        let e = row["energy_lost"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&e));
        // relative_error is null exactly when something overflows.
        assert_eq!(
            row["relative_error"].is_null(),
            row["overflow"].as_u64().unwrap() > 0
        );
    }
}

#[test]
fn json_meets_the_contract_and_counts_are_exact() {
    let files = Files::new();
    let (path, tensors) = files.grads();
    let o = mixprec(&["analyze", path.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.trim().lines().count(), 1, "one JSON object on one line");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(keys(&v), ["format", "tensors", "total", "recommendation"]);
    assert_eq!(v["format"], "fp16");
    assert_eq!(
        keys(&v["recommendation"]),
        ["log2_scale", "min_log2_scale", "max_log2_scale"]
    );
    assert_eq!(
        keys(&v["total"]),
        ["count", "zeros", "nonfinite", "amax", "sweep"]
    );
    check_sweep(&v["total"], 0, 32);
    let ts = v["tensors"].as_array().unwrap();
    assert_eq!(ts.len(), 3);
    for (t, (name, xs)) in ts.iter().zip(&tensors) {
        assert_eq!(
            keys(t),
            ["name", "count", "zeros", "nonfinite", "amax", "sweep"]
        );
        assert_eq!(t["name"], *name);
        assert_eq!(t["count"].as_u64().unwrap(), xs.len() as u64);
        check_sweep(t, 0, 32);
        for row in t["sweep"].as_array().unwrap() {
            let k = row["log2_scale"].as_i64().unwrap() as i32;
            let got =
                ["underflow", "subnormal", "normal", "overflow"].map(|c| row[c].as_u64().unwrap());
            assert_eq!(got, reference_counts(FP16, xs, k), "{name} at 2^{k}");
        }
        let amax = xs
            .iter()
            .filter(|x| x.is_finite())
            .fold(0f32, |m, x| m.max(x.abs()));
        // serde_json's parser (without float_roundtrip) may be one f64 ulp off; the f32 is exact.
        assert_eq!(t["amax"].as_f64().unwrap() as f32, amax);
    }
    assert_eq!(v["total"]["count"].as_u64().unwrap(), 5002 + 3000 + 3);
    assert_eq!(v["total"]["nonfinite"].as_u64().unwrap(), 2);
    // amax about 2^3: 8 * 2^12 = 32768 is finite, 2^13 overflows when amax >= 8.
    let rec = &v["recommendation"];
    assert_eq!(rec["log2_scale"], rec["max_log2_scale"]);
    let kmax = rec["max_log2_scale"].as_i64().unwrap() as i32;
    let amax = v["total"]["amax"].as_f64().unwrap();
    let r = Rounder::new(FP16, RoundOptions::default());
    assert!(r.round(amax * 2f64.powi(kmax)).is_finite());
    assert!(!r.round(amax * 2f64.powi(kmax + 1)).is_finite());
}

#[test]
fn table_output_is_readable() {
    let files = Files::new();
    let (path, _) = files.grads();
    let o = mixprec(&["analyze", path.to_str().unwrap(), "--format", "bf16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "small.grad",
        "large.grad",
        "tiny",
        "(all)",
        "log2 scale",
        "<- recommended",
        "bf16",
    ] {
        assert!(out.contains(needle), "{needle} in\n{out}");
    }
    assert!(out.contains("Use a loss scale of 2^"), "{out}");
}

#[test]
fn no_single_scale_is_explained() {
    let files = Files::new();
    let path = files.path("wide.safetensors");
    let big = [60000f32, -1.0];
    let small = [1e-12f32, 3e-13];
    write_safetensors(
        &path,
        &[
            ("big", &[2], TensorData::F32(&big)),
            ("small", &[2], TensorData::F32(&small)),
        ],
    )
    .unwrap();
    let o = mixprec(&["analyze", path.to_str().unwrap(), "--max-underflow", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("No single loss scale in 2^0..2^32 works for fp16"),
        "{out}"
    );
    assert!(out.contains("Per-tensor scaling would work"), "{out}");
    assert!(out.contains("bf16 has the window"), "{out}");
    let o = mixprec(&[
        "analyze",
        path.to_str().unwrap(),
        "--max-underflow",
        "0",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["recommendation"]["max_log2_scale"], 0);
    let lo = v["recommendation"]["min_log2_scale"].as_i64().unwrap();
    assert!(lo > 0, "{lo}");
}

#[test]
fn tensor_filter_and_scales() {
    let files = Files::new();
    let (path, _) = files.grads();
    let p = path.to_str().unwrap();
    let o = mixprec(&[
        "analyze",
        p,
        "--json",
        "--tensor",
        "tiny",
        "--tensor",
        "large.grad",
        "--scales=-8..40",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["large.grad", "tiny"]);
    check_sweep(&v["total"], -8, 40);
    assert_eq!(v["total"]["count"].as_u64().unwrap(), 3003);
    // The space-separated form of a negative range, and a margin.
    let o = mixprec(&[
        "analyze", p, "--json", "--scales", "-3..3", "--margin", "2", "--tensor", "tiny",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    check_sweep(&v["total"], -3, 3);
    // amax 2e-3 stays finite far beyond 2^3: the largest scale of the range.
    assert_eq!(v["recommendation"]["log2_scale"], 3);
}

#[test]
fn npy_input_is_read() {
    let files = Files::new();
    let path = files.path("g.npy");
    let xs: Vec<f64> = vec![1e-9, 2e-3, -0.5, 0.0];
    write_npy(&path, &[4], TensorData::F64(&xs)).unwrap();
    let o = mixprec(&[
        "analyze",
        path.to_str().unwrap(),
        "--json",
        "--scales",
        "0..0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tensors"][0]["name"], "g");
    let row = &v["tensors"][0]["sweep"][0];
    // 1e-9 underflows fp16 at scale 1 (below 2^-25).
    assert_eq!(
        (row["underflow"].as_u64(), row["normal"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn plots_are_written() {
    let files = Files::new();
    let (path, _) = files.grads();
    let dir = files.path("plots");
    let o = mixprec(&[
        "analyze",
        path.to_str().unwrap(),
        "--plots",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["histogram", "sweep", "heatmap"] {
        let png = std::fs::read(dir.join(format!("{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("log2"), "{name}");
    }
    // No temporary files left behind.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 6, "{left:?}");
}

fn assert_bad(args: &[&str], needle: &str) {
    let o = mixprec(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line, got {err}"
    );
    assert!(err.starts_with("mixprec: "), "{err}");
    assert!(err.contains(needle), "{args:?}: '{needle}' in {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let files = Files::new();
    let (path, _) = files.grads();
    let p = path.to_str().unwrap();
    let missing = files.path("missing.safetensors");
    assert_bad(
        &["analyze", missing.to_str().unwrap()],
        "missing.safetensors",
    );
    let corrupt = files.path("corrupt.safetensors");
    std::fs::write(
        &corrupt,
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all",
    )
    .unwrap();
    assert_bad(
        &["analyze", corrupt.to_str().unwrap()],
        "corrupt.safetensors",
    );
    let truncated = files.path("truncated.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    assert_bad(
        &["analyze", truncated.to_str().unwrap()],
        "truncated.safetensors",
    );
    let text = files.path("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    assert_bad(&["analyze", text.to_str().unwrap()], "notes.txt");
    for scales in ["5..2", "a..b", "0-32", "0..", "..4", "0..99999", "1.5..3"] {
        assert_bad(&["analyze", p, &format!("--scales={scales}")], "--scales");
    }
    assert_bad(&["analyze", p, "--format", "fp12"], "unknown format 'fp12'");
    assert_bad(&["analyze", p, "--tensor", "nope"], "--tensor 'nope'");
    assert_bad(&["analyze", p, "--margin", "-1"], "--margin");
    assert_bad(&["analyze", p, "--margin", "two"], "--margin");
    assert_bad(&["analyze", p, "--max-underflow", "1.5"], "--max-underflow");
    assert_bad(&["analyze", p, "--max-underflow", "NaN"], "--max-underflow");
    // A file with only non-float tensors.
    let ints = files.path("ints.npy");
    let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let pad = 64 - (10 + header.len() + 1) % 64;
    let full = format!("{header}{}\n", " ".repeat(pad));
    npy.extend((full.len() as u16).to_le_bytes());
    npy.extend(full.as_bytes());
    npy.extend([1, 0, 0, 0, 2, 0, 0, 0]);
    std::fs::write(&ints, npy).unwrap();
    assert_bad(&["analyze", ints.to_str().unwrap()], "no float tensors");
}

#[test]
fn several_files_at_once() {
    let files = Files::new();
    let (path, _) = files.grads();
    let npy = files.path("extra.npy");
    write_npy(&npy, &[2], TensorData::F32(&[1.0, 2.0])).unwrap();
    let o = mixprec(&[
        "analyze",
        path.to_str().unwrap(),
        npy.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tensors"].as_array().unwrap().len(), 4);
    assert_eq!(v["tensors"][3]["name"], "extra");
    assert_eq!(v["total"]["count"].as_u64().unwrap(), 5002 + 3000 + 3 + 2);
}
