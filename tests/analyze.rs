//! `mixprec analyze` run as a real binary on files written for each test.

use std::path::PathBuf;

use mixprec::format::{Event, FP16, FloatFormat, RoundOptions, Rounder};
use mixprec::io::{TensorData, write_npy, write_safetensors};
use serde_json::Value;

mod common;
use common::{
    Files, analyze_json, analyze_text, assert_bad, assert_contains, json_out, keys, log_uniform,
    mixprec, stderr, stdout, strs,
};

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
    // The keys of the first version come first, in their order; later ones are added after.
    assert_eq!(
        keys(&v),
        [
            "format",
            "tensors",
            "total",
            "recommendation",
            "windows",
            "explanation",
            "skipped",
            "options",
            "dump"
        ]
    );
    assert_eq!(
        keys(&v["dump"]),
        [
            "nonfinite_share",
            "overflowed",
            "no_finite_tensors",
            "zero_share",
            "many_zeros"
        ]
    );
    assert_eq!(v["format"], "fp16");
    assert_eq!(
        keys(&v["recommendation"]),
        [
            "log2_scale",
            "min_log2_scale",
            "max_log2_scale",
            "works",
            "limited_by",
            "overflow_log2_scale",
            "scaling_needed",
            "near_overflow",
            "grad_scaler",
            "excluded_tensors",
            "predicted_min_log2_scale",
            "predicted_min_log2_scale_sgd"
        ]
    );
    // The predicted edges, recomputed from the pooled sweep: the first scale losing at most
    // 0.5% of the squared norm and (Adam) 40% of the values.
    let sweep = v["total"]["sweep"].as_array().unwrap();
    let nonzero = v["total"]["count"].as_u64().unwrap()
        - v["total"]["zeros"].as_u64().unwrap()
        - v["total"]["nonfinite"].as_u64().unwrap();
    let first = |count_too: bool| {
        sweep
            .iter()
            .find(|r| {
                r["energy_lost"].as_f64().unwrap() <= 0.005
                    && (!count_too
                        || r["underflow"].as_u64().unwrap() as f64 <= 0.4 * nonzero as f64)
            })
            .map(|r| r["log2_scale"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(v["recommendation"]["predicted_min_log2_scale"], first(true));
    assert_eq!(
        v["recommendation"]["predicted_min_log2_scale_sgd"],
        first(false)
    );
    assert_eq!(
        keys(&v["total"]),
        [
            "count",
            "zeros",
            "nonfinite",
            "amax",
            "sweep",
            "min_nonzero"
        ]
    );
    check_sweep(&v["total"], 0, 32);
    let ts = v["tensors"].as_array().unwrap();
    assert_eq!(ts.len(), 3);
    for (t, (name, xs)) in ts.iter().zip(&tensors) {
        assert_eq!(
            keys(t),
            [
                "name",
                "count",
                "zeros",
                "nonfinite",
                "amax",
                "sweep",
                "file",
                "dtype",
                "shape",
                "min_nonzero",
                "window"
            ]
        );
        assert_eq!(t["file"], path.to_str().unwrap());
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
    let kmax = rec["max_log2_scale"].as_i64().unwrap() as i32;
    // Two values are inf or NaN: the dump is of a step that overflowed, and the scale backs
    // off a halving below the largest its finite values allow (issue 29).
    assert_eq!(v["dump"]["overflowed"], true);
    assert_eq!(v["dump"]["no_finite_tensors"].as_array().unwrap().len(), 0);
    assert_eq!(rec["log2_scale"].as_i64().unwrap() as i32, kmax - 1);
    let amax = v["total"]["amax"].as_f64().unwrap();
    let r = Rounder::new(FP16, RoundOptions::default());
    assert!(r.round(amax * 2f64.powi(kmax)).is_finite());
    assert!(!r.round(amax * 2f64.powi(kmax + 1)).is_finite());
    assert_eq!(
        rec["overflow_log2_scale"].as_i64().unwrap() as i32,
        kmax + 1
    );
    assert_eq!(rec["limited_by"], "overflow");
    // GradScaler: a run starts run_margin_bits below the largest scale keeping amax finite
    // (its gradients grow past one step's), and never above the recommended one.
    let gs = &rec["grad_scaler"];
    assert_eq!(gs["run_margin_bits"], 3);
    assert_eq!(gs["init_scale"].as_f64().unwrap(), 2f64.powi(kmax - 3));
    assert_eq!(gs["settles_log2_scale"].as_i64().unwrap() as i32, kmax);
    assert_eq!(rec["near_overflow"], false);
}

#[test]
fn table_output_is_readable() {
    let (_files, path) = Files::with_grads();
    let out = analyze_text(&path, &["--format", "bf16"]);
    assert_contains(
        &out,
        &[
            "small.grad",
            "large.grad",
            "tiny",
            "(all)",
            "log2 scale",
            "<- back off to at most",
            "bf16",
            "worst first",
            "This dump comes from a step whose gradients overflowed: 2 of the 8005 values",
        ],
    );
    // Without small.grad's inf and NaN, the step is healthy.
    let out = analyze_text(
        &path,
        &[
            "--format",
            "bf16",
            "--tensor",
            "large.grad",
            "--tensor",
            "tiny",
        ],
    );
    assert!(out.contains("<- recommended"), "{out}");
    // bf16's range makes scaling unnecessary: say so rather than "use 2^32".
    assert!(
        out.contains("Loss scaling is unnecessary for bf16") && out.contains("2^0 to 2^32 works"),
        "{out}"
    );
    assert!(!out.contains("Use a loss scale of 2^32"), "{out}");
    assert!(out.contains("log2_scale: 0 "), "{out}");
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
    let out = analyze_text(&path, &["--max-underflow", "0"]);
    assert!(
        out.contains("No single loss scale in 2^0..2^32 works for fp16"),
        "{out}"
    );
    assert!(out.contains("Per-tensor scaling would work"), "{out}");
    assert!(out.contains("bf16 has the window"), "{out}");
    let v = analyze_json(&path, &["--max-underflow", "0"]);
    assert_eq!(v["recommendation"]["max_log2_scale"], 0);
    let lo = v["recommendation"]["min_log2_scale"].as_i64().unwrap();
    assert!(lo > 0, "{lo}");
}

#[test]
fn tensor_filter_and_scales() {
    let (_files, path) = Files::with_grads();
    let v = analyze_json(
        &path,
        &[
            "--tensor",
            "tiny",
            "--tensor",
            "large.grad",
            "--scales=-8..40",
        ],
    );
    let names = strs(&v["tensors"], "name");
    assert_eq!(names, ["large.grad", "tiny"]);
    check_sweep(&v["total"], -8, 40);
    assert_eq!(v["total"]["count"].as_u64().unwrap(), 3003);
    // The space-separated form of a negative range, and a margin.
    let v = analyze_json(
        &path,
        &["--scales", "-3..3", "--margin", "2", "--tensor", "tiny"],
    );
    check_sweep(&v["total"], -3, 3);
    // amax 2e-3 stays finite far beyond 2^3: only the range bounds the window, and 2^0 keeps
    // every value, so no scaling is needed.
    let rec = &v["recommendation"];
    assert_eq!(rec["max_log2_scale"], 3);
    assert_eq!(rec["limited_by"], "scales");
    assert_eq!(rec["scaling_needed"], false);
    assert_eq!(rec["log2_scale"], 0);
}

#[test]
fn npy_input_is_read() {
    let files = Files::new();
    let path = files.path("g.npy");
    let xs: Vec<f64> = vec![1e-9, 2e-3, -0.5, 0.0];
    write_npy(&path, &[4], TensorData::F64(&xs)).unwrap();
    let v = analyze_json(&path, &["--scales", "0..0"]);
    assert_eq!(v["tensors"][0]["name"], "g");
    let row = &v["tensors"][0]["sweep"][0];
    // 1e-9 underflows fp16 at scale 1 (below 2^-25).
    assert_eq!(
        (row["underflow"].as_u64(), row["normal"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let (files, path) = Files::with_grads();
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
    let (files, path) = Files::with_grads();
    let npy = files.path("extra.npy");
    write_npy(&npy, &[2], TensorData::F32(&[1.0, 2.0])).unwrap();
    let v = json_out(&[
        "analyze",
        path.to_str().unwrap(),
        npy.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["tensors"].as_array().unwrap().len(), 4);
    assert_eq!(v["tensors"][3]["name"], "extra");
    assert_eq!(v["total"]["count"].as_u64().unwrap(), 5002 + 3000 + 3 + 2);
}

/// A .npy of `xs` (f32 or f64) at `name` in `files`.
fn npy_f32(files: &Files, name: &str, xs: &[f32]) -> PathBuf {
    let path = files.path(name);
    write_npy(&path, &[xs.len()], TensorData::F32(xs)).unwrap();
    path
}

fn npy_f64(files: &Files, name: &str, xs: &[f64]) -> PathBuf {
    let path = files.path(name);
    write_npy(&path, &[xs.len()], TensorData::F64(xs)).unwrap();
    path
}

/// The window's top agrees with the sweep printed beside it, and with rounding amax itself:
/// nothing overflows up to max_log2_scale, amax overflows one scale later (or the range ends).
fn check_window_against_sweep(v: &Value, format: FloatFormat, amax: f64) {
    let rec = &v["recommendation"];
    let sweep = v["total"]["sweep"].as_array().unwrap();
    let hi = sweep.last().unwrap()["log2_scale"].as_i64().unwrap();
    let r = Rounder::new(format, RoundOptions::default());
    // amax * 2^k, exactly when finite in binary64, else certainly overflowing.
    let overflows = |k: i64| {
        let e = amax.log2().floor() as i64 + k;
        if e > 1000 {
            return true;
        }
        if e < -1000 {
            return false;
        }
        // Two exact steps: 2^k alone may not be a finite f64 (5e-324 * 2^1124).
        let half = (k / 2) as i32;
        !r.round(amax * 2f64.powi(half) * 2f64.powi(k as i32 - half))
            .is_finite()
    };
    match rec["max_log2_scale"].as_i64() {
        Some(max) => {
            for row in sweep {
                let k = row["log2_scale"].as_i64().unwrap();
                if k <= max {
                    assert_eq!(
                        row["overflow"], 0,
                        "overflow at 2^{k} <= max 2^{max}: {rec}"
                    );
                }
            }
            assert!(!overflows(max), "{rec}");
            assert!(max == hi || overflows(max + 1), "{rec}");
        }
        None => assert!(
            sweep
                .iter()
                .all(|row| row["overflow"].as_u64().unwrap() > 0)
        ),
    }
    let k_over = rec["overflow_log2_scale"].as_i64().unwrap();
    assert!(overflows(k_over) && !overflows(k_over - 1), "{rec}");
    if let (Some(lo), Some(max)) = (
        rec["min_log2_scale"].as_i64(),
        rec["max_log2_scale"].as_i64(),
    ) {
        assert_eq!(rec["works"], lo <= max, "{rec}");
    }
}

#[test]
fn recommendation_never_overflows_beyond_binary64() {
    // Issue 10, failure 1: amax * 2^k overflowed binary64 and passed the "finite" check.
    let files = Files::new();
    let a = npy_f32(&files, "a.npy", &[1e10, 1e-3]);
    let v = analyze_json(&a, &["--scales=-2000..2000"]);
    // 1e10 = 1.16 * 2^33: 2^33 * 2^-18 = 32768 is finite in fp16, 2^33 * 2^-17 = 65536 is not.
    assert_eq!(v["recommendation"]["max_log2_scale"], -18);
    assert_eq!(v["recommendation"]["overflow_log2_scale"], -17);
    check_window_against_sweep(&v, FP16, 1e10);
    let b = npy_f64(&files, "b.npy", &[1e300, 1.0]);
    let v = analyze_json(&b, &[]);
    assert!(v["recommendation"]["log2_scale"].is_null(), "{v}");
    assert!(v["recommendation"]["max_log2_scale"].is_null(), "{v}");
    assert_eq!(v["recommendation"]["works"], false);
    check_window_against_sweep(&v, FP16, 1e300);
    let o = mixprec(&["analyze", b.to_str().unwrap()]);
    assert!(
        stdout(&o).contains("amax 1.000e300 overflows at every scale of the range"),
        "{}",
        stdout(&o)
    );
    // Extremes of binary64, in every format, over the widest range.
    for (i, x) in [1.7e308, 1e-300, 5e-324, 65504.0, 65520.0, 448.0, 464.0]
        .into_iter()
        .enumerate()
    {
        let p = npy_f64(&files, &format!("x{i}.npy"), &[x]);
        for f in ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "fp32", "e2m1"] {
            let v = analyze_json(&p, &["--format", f, "--scales=-2000..2000"]);
            check_window_against_sweep(&v, f.parse().unwrap(), x);
        }
    }
}

#[test]
fn nothing_to_scale_is_said() {
    let files = Files::new();
    let empty = npy_f32(&files, "empty.npy", &[]);
    let nans = npy_f32(&files, "nans.npy", &[f32::NAN, f32::INFINITY, 0.0, -0.0]);
    for (p, needle) in [
        (&empty, "Nothing to scale: the tensors hold no values"),
        (
            &nans,
            "none of the 4 values is finite and nonzero (2 zero, 2 NaN or infinite)",
        ),
    ] {
        let out = analyze_text(p, &[]);
        assert!(out.contains(needle), "{out}");
        assert!(!out.contains("Use a loss scale"), "{out}");
        let v = analyze_json(p, &[]);
        assert!(v["recommendation"].is_null(), "{v}");
        assert!(v["tensors"][0]["window"].is_null(), "{v}");
        assert_eq!(v["windows"].as_array().unwrap().len(), 0);
    }
}

#[test]
fn per_tensor_windows_name_rounding_residue_as_noise() {
    // A large weight gradient and a small bias gradient, 32% of whose values are so small that
    // they underflow at the pooled recommendation: pooled, they are 0.03% of the values. At
    // 1e-13 they lie 2^-46.5 below amax 10, below the noise floor 2^-25 (2^-28 of amax's power
    // of two): FP32 rounding residue, as an attention key bias's gradient is, so the bias is
    // named as noise, listed last and not among the tensors the pooled window hides.
    let files = Files::new();
    let path = files.path("model.safetensors");
    let mut weight = log_uniform(7, 100_000, -10.0, 2.9, 97);
    // amax 10: 10 * 2^12 = 40960 is finite in fp16, 10 * 2^13 is not.
    weight[1] = 10.0;
    let mut bias = vec![1e-2f32; 100];
    for b in bias.iter_mut().take(32) {
        *b = 1e-13;
    }
    write_safetensors(
        &path,
        &[
            ("weight", &[weight.len()], TensorData::F32(&weight)),
            ("bias", &[bias.len()], TensorData::F32(&bias)),
        ],
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let v = json_out(&["analyze", p, "--json"]);
    let rec = &v["recommendation"];
    assert_eq!(rec["log2_scale"], 12);
    assert_eq!(rec["works"], true);
    assert_eq!(rec["excluded_tensors"], serde_json::json!([]));
    let w = &v["windows"];
    assert_eq!(w[0]["name"], "weight", "noise last: {w}");
    assert_eq!(w[0]["noise"], false);
    assert_eq!(w[1]["name"], "bias");
    assert_eq!(w[1]["noise"], true);
    assert_eq!(w[1]["excludes_recommended"], true);
    assert_eq!(w[1]["underflow_share"].as_f64(), Some(0.32));
    // 1e-13 * 2^19 = 5.2e-14 * 1e6 is above half fp16's min subnormal (2^-25); 2^18 is not.
    // 1e-2 * 2^22 = 41943 is finite, 2^23 overflows.
    assert_eq!(
        (
            w[1]["min_log2_scale"].as_i64(),
            w[1]["max_log2_scale"].as_i64()
        ),
        (Some(19), Some(22))
    );
    assert_eq!(v["tensors"][1]["window"]["min_log2_scale"], 19);
    let out = stdout(&mixprec(&["analyze", p]));
    assert!(!out.contains("hides"), "{out}");
    assert!(
        out.contains(
            "Left out as noise (values below 2.980e-8, 2^-28 of the pooled amax's power of two, \
             where FP32 rounding residue of a truly zero gradient lies, such as an attention key \
             bias's: softmax is shift-invariant; no loss scale matters to them): bias (the 32.0% \
             of its values that underflow at 2^12)."
        ),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("bias ") && l.ends_with("noise")),
        "{out}"
    );
}

#[test]
fn shares_in_tables_are_percent_with_their_digits() {
    let files = Files::new();
    // One value in 4 million underflows at 2^0: 2.50e-5 %, not 0.
    let mut xs = vec![1.0f32; 3_999_999];
    xs.push(1e-12);
    let p = npy_f32(&files, "g.npy", &xs);
    let out = stdout(&mixprec(&[
        "analyze",
        p.to_str().unwrap(),
        "--scales",
        "0..1",
    ]));
    let row0 = out
        .lines()
        .skip_while(|l| !l.starts_with("Sweep"))
        .find(|l| l.starts_with("0 "))
        .unwrap();
    let cells: Vec<&str> = row0.split_whitespace().collect();
    // underflow, subnormal, normal, overflow, energy lost ((1e-12)^2 / 4e6 of the squared norm:
    // 2.5e-29 %), rel. error.
    assert_eq!(cells[1], "2.50e-5", "{row0}");
    assert!(cells[3].starts_with("99.9999"), "{row0}");
    assert_eq!(cells[4], "0", "{row0}");
    assert_eq!(cells[5], "2.50e-29", "{row0}");
    // No cell carries its own unit: the table's caption gives it.
    assert!(cells.iter().all(|c| !c.ends_with('%')), "{row0}");
}

#[test]
fn several_files_get_a_file_column_and_one_file_twice_is_an_error() {
    let files = Files::new();
    let a = npy_f32(&files, "a.npy", &[1.0, 2.0]);
    let b = npy_f32(&files, "b.npy", &[3.0]);
    let (pa, pb) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = stdout(&mixprec(&["analyze", pa, pb]));
    let header = out.lines().nth(2).unwrap();
    assert!(
        header.starts_with("tensor ") && header.contains(" file  dtype"),
        "{out}"
    );
    assert!(out.contains(pa) && out.contains(pb), "{out}");
    let one = stdout(&mixprec(&["analyze", pa]));
    assert!(!one.contains("  file  "), "{one}");
    let v = json_out(&["analyze", pa, pb, "--json"]);
    assert_eq!(v["tensors"][1]["file"], pb);
    // The same file twice, by the same path, another spelling, or a link.
    let other = format!("{}/./a.npy", files.dir.path().display());
    let link = files.path("link.npy");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    for second in [pa, other.as_str(), link.to_str().unwrap()] {
        assert_bad(&["analyze", pa, pb, second], "is the same file as");
    }
}

#[test]
fn loss_scales_are_read_as_powers_of_two() {
    let v = |args: &[&str]| -> Value {
        let mut all = vec!["train", "--print-config", "--recipe", "fp16-dynamic"];
        all.extend_from_slice(args);
        json_out(&all)
    };
    for (text, want) in [("2^10", 1024.0), ("2**-2", 0.25), ("65536", 65536.0)] {
        let c = v(&["--loss-scale", text]);
        assert_eq!(
            c["recipe"]["loss_scaling"]["init_scale"].as_f64(),
            Some(want),
            "{text}"
        );
    }
    for (text, needle) in [
        ("0", "a loss scale must be positive"),
        ("-1", "a loss scale must be positive"),
        ("1e308", "out of f32's range"),
        ("2^128", "out of f32's range"),
        ("2^0.5", "whole number"),
    ] {
        assert_bad(
            &["train", "--print-config", &format!("--loss-scale={text}")],
            needle,
        );
    }
    // The same forms in a config file.
    let files = Files::new();
    let config = files.path("c.json");
    let mut c = v(&[]);
    c["recipe"]["loss_scaling"]["init_scale"] = Value::from("2^12");
    std::fs::write(&config, c.to_string()).unwrap();
    let got = json_out(&[
        "train",
        "--print-config",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(
        got["recipe"]["loss_scaling"]["init_scale"].as_f64(),
        Some(4096.0)
    );
    // And in --scales.
    let (path, _) = files.grads();
    let v = analyze_json(&path, &["--scales", "2^-2..2^3"]);
    check_sweep(&v["total"], -2, 3);
}

/// A tensor name holding an escape sequence or a newline (a safetensors key can) is printed
/// escaped: no table row is broken and nothing reaches the terminal as a control character.
#[test]
fn control_characters_in_names_are_escaped() {
    let files = Files::new();
    let path = files.path("hostile.safetensors");
    let xs = [1e-3f32, 2e-3, 0.5];
    write_safetensors(
        &path,
        &[
            ("red\u{1b}[31m", &[3][..], TensorData::F32(&xs)),
            ("two\nlines", &[3][..], TensorData::F32(&xs)),
        ],
    )
    .unwrap();
    let out = analyze_text(&path, &[]);
    assert!(!out.contains('\u{1b}'), "{out}");
    assert!(
        out.contains("red\\u{1b}[31m") && out.contains("two\\nlines"),
        "{out}"
    );
    assert!(!out.lines().any(|l| l.starts_with("lines")), "{out}");
}

/// A tensor's own window cut by the range of --scales is marked as such, not shown as the
/// tensor's need.
#[test]
fn windows_cut_by_the_range_are_marked() {
    let (_files, path) = Files::with_grads();
    let p = path.to_str().unwrap();
    let out = stdout(&mixprec(&["analyze", p, "--scales", "14..15"]));
    let large = window_row(&out, "large.grad ").unwrap_or_default();
    assert!(large.split_whitespace().nth(1) == Some("<=14"), "{out}");
    assert!(
        out.contains("<=k, >=k: the edge of --scales 14..15"),
        "{out}"
    );
    // The full default range: small.grad's window is its own at the bottom (2^-40 needs a
    // scale), large.grad's is cut at 2^0.
    let out = stdout(&mixprec(&["analyze", p]));
    let small = window_row(&out, "small.grad ").unwrap_or_default();
    assert!(!small.contains("<="), "{out}");
    let large = window_row(&out, "large.grad ").unwrap_or_default();
    assert!(large.contains("<=0"), "{out}");
}

/// The row of `name` in the table of each tensor's own window.
fn window_row(out: &str, name: &str) -> Option<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("Each tensor's own window"))
        .find(|l| l.starts_with(name))
        .map(str::to_string)
}
