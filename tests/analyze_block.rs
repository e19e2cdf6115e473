//! The block-scaled analysis (`mixprec analyze --format mxfp8-e4m3`, `--compare-blocks`), run as
//! the real binary on files written for each test and through the library: hand-computed small
//! tensors, the JSON contract, bad inputs, and the streamed counts against the block rounder
//! run on each whole tensor at once.

use std::path::PathBuf;

use mixprec::analysis::block::{BlockFormat, BlockOptions, BlockRounder, analyze_block_files};
use mixprec::format::{FP8_E4M3, Overflow, RoundCounts, RoundOptions, Rounder};
use mixprec::io::{TensorData, write_safetensors};
use serde_json::Value;

mod common;
use common::{
    analyze_json, analyze_text, assert_bad, assert_contains, file_names, keys, log_uniform,
    mixprec, mixprec_env, stderr, strs,
};

/// Writes `tensors` (name, shape, values) into a file `name` in a new temporary directory;
/// returns both.
fn write(name: &str, tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let refs: Vec<(&str, &[usize], TensorData<'_>)> = tensors
        .iter()
        .map(|(n, s, v)| (*n, s.as_slice(), TensorData::F32(v)))
        .collect();
    write_safetensors(&path, &refs).expect("written");
    (dir, path)
}

/// Three MX blocks of 32 (one per row of a 3 x 32 tensor), computed by hand for mxfp8-e4m3:
/// - row 0: amax 1000 = 1.95 x 2^9, so the scale is 2^(9 - 8) = 2. 1000 / 2 = 500 is above
///   E4M3's 448: saturated. 0.001 / 2 = 5e-4 is below half E4M3's smallest subnormal
///   (2^-9 / 2 = 9.8e-4): underflow. 0.02 / 2 = 0.01 is below E4M3's smallest normal 2^-6:
///   subnormal. The other 29 values are 1.0 (1 / 2 = 2^-1, normal).
/// - row 1: all zeros (amax 0: the smallest scale, values stay zero, nothing counted).
/// - row 2: a NaN and 31 values 2.0: the block gets the NaN scale, all 32 become NaN.
fn hand_tensor() -> Vec<f32> {
    let mut row0 = vec![1.0f32; 32];
    row0[0] = 1000.0;
    row0[5] = 0.001;
    row0[9] = -0.02;
    let mut row2 = vec![2.0f32; 32];
    row2[17] = f32::NAN;
    let mut xs = row0;
    xs.extend([0.0f32; 32]);
    xs.extend(row2);
    xs
}

/// `h.safetensors` in a new temporary directory, holding [`hand_tensor`] as `w` (3 x 32).
fn hand_file() -> (tempfile::TempDir, PathBuf) {
    write("h.safetensors", &[("w", vec![3, 32], hand_tensor())])
}

/// A scheme's `log2_amax_ratio` histogram, as (binade, count) pairs.
fn bins(s: &Value) -> Vec<(i64, u64)> {
    s["log2_amax_ratio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["binade"].as_i64().unwrap(), b["count"].as_u64().unwrap()))
        .collect()
}

#[test]
fn hand_computed_mx_block() {
    let (_dir, p) = hand_file();
    let v = analyze_json(&p, &["--format", "mxfp8-e4m3"]);
    let s = &v["tensors"][0]["schemes"][0];
    let get = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert_eq!(get("values"), 96);
    assert_eq!(get("zeros"), 32);
    assert_eq!(get("nonfinite"), 1);
    assert_eq!(get("finite_nonzero"), 63);
    assert_eq!(get("blocks"), 3);
    assert_eq!(get("underflow"), 1);
    assert_eq!(get("subnormal"), 1);
    assert_eq!(get("saturated"), 1);
    assert_eq!(get("nan"), 32);
    // The squared norm of the finite values (those of the NaN block included): only 0.001 is
    // lost.
    let sq = |x: f32| f64::from(x) * f64::from(x);
    let total = sq(1000.0) + sq(0.001) + sq(0.02) + 29.0 + 31.0 * 4.0;
    let e = s["energy_lost"].as_f64().unwrap();
    assert!((e - sq(0.001) / total).abs() <= 1e-15 * e, "{e}");
    assert!((s["lost_share"].as_f64().unwrap() - 1.0 / 63.0).abs() < 1e-15);
    // The error, over the values whose result is finite (rows 0 and 1): 1000 -> 448 x 2 (the
    // saturated one) dominates; 0.001 -> 0, 0.02 -> 0.01953125 (5 x 2^-8 is the nearest
    // multiple of E4M3's subnormal step times the scale, 2^-9 x 2 = 2^-8); the ones are exact.
    let err = sq(1000.0 - 896.0) + sq(0.001) + (0.02f64 - 5.0 / 256.0).powi(2);
    let kept = sq(1000.0) + sq(0.001) + sq(0.02) + 29.0;
    let rel = s["relative_error"].as_f64().unwrap();
    assert!((rel - (err / kept).sqrt()).abs() < 1e-12, "{rel}");
    // r = log2(amax / |x|): 1000 in binade 0; the ones log2(1000) = 9.97: binade 9; 0.02:
    // log2(50000) = 15.6: binade 15; 0.001: log2(1e6) = 19.9: binade 19. Row 1 has no nonzero
    // value and row 2 is left out (NaN).
    assert_eq!(bins(s), [(0, 1), (9, 29), (15, 1), (19, 1)]);

    // The tables say the same, in percent.
    let text = analyze_text(&p, &["--format", "mxfp8-e4m3"]);
    // 1 of 63 values (1.59%) underflows, 1 is subnormal, 1 saturates; 32 of 96 are NaN.
    let row = text.lines().filter(|l| l.starts_with("w ")).nth(1).unwrap();
    assert!(row.contains("1.6") && row.contains("33.3"), "{row}");
    assert!(text.contains("19..20") && text.contains("lost"), "{text}");
    assert!(text.contains("mxfp8-e4m3 (fp8-e4m3 elements, 1x32 blocks, e8m0 scales)"));
}

/// Blocks run along the last axis, each row on its own: a row of 40 has blocks [0, 32) and
/// [32, 40), and the short block does not borrow from the next row.
#[test]
fn blocks_run_along_rows() {
    // Row 0: ones, and 1e-3 in its short last block (amax 1: scale 2^-8, 1e-3 / 2^-8 = 0.256,
    // normal). Row 1 starts with 1000: a block crossing rows (or columns) would put 1e-3 with
    // 1000 (scale 2, 1e-3 / 2 underflows).
    let mut xs = vec![1.0f32; 80];
    xs[39] = 1e-3;
    xs[40] = 1000.0;
    // Column blocks would put 1e-3 (column 39) with 1000 only through a column; row 1's
    // column 39 holds another 1000 to catch that too.
    xs[79] = 1000.0;
    let (_dir, p) = write("r.safetensors", &[("w", vec![2, 40], xs)]);
    let v = analyze_json(&p, &["--format", "mxfp8-e4m3"]);
    let s = &v["tensors"][0]["schemes"][0];
    assert_eq!(s["underflow"], 0, "{s}");
    assert_eq!(s["blocks"], 4, "{s}");
    assert_eq!(v["tensors"][0]["rows"], 2);
    assert_eq!(v["tensors"][0]["cols"], 40);
}

/// Per-tensor scaling by hand: amax 896 = 2 x 448, so the FP32 scale is 2; 1e-6 / 2 is far
/// below E4M3's subnormals (lost), 0.02 / 2 = 0.01 is subnormal, 896 / 2 = 448 exactly.
/// MX gives the first 32 values (one block) the same scale, 2^(9 - 8) for amax 1.75 x 2^9, but
/// the second block its own.
#[test]
fn compare_blocks_by_hand() {
    let mut xs = vec![1.0f32; 64];
    xs[0] = 896.0;
    xs[1] = 1e-6;
    xs[2] = 0.02;
    // The second block (values 32..64) has amax 1e-2: MX scales it by 2^(-7 - 8), where all
    // its values are normal, but the tensor's scale 2 leaves them subnormal (1e-2 / 2 < 2^-6).
    for x in &mut xs[32..] {
        *x = 1e-2;
    }
    let (_dir, p) = write("c.safetensors", &[("t", vec![64], xs)]);
    let v = analyze_json(&p, &["--compare-blocks"]);
    let names = strs(&v["schemes"], "name");
    assert_eq!(names[..2], ["fp8-e4m3@tensor", "mxfp8-e4m3"]);
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique, names, "each scheme once");
    let t = &v["tensors"][0]["schemes"];
    let (tensor, mx) = (&t[0], &t[1]);
    assert_eq!(tensor["scheme"], "fp8-e4m3@tensor");
    assert_eq!(tensor["underflow"], 1, "{tensor}");
    assert_eq!(tensor["subnormal"], 1 + 32, "{tensor}");
    assert_eq!(tensor["saturated"], 0);
    assert_eq!(tensor["blocks"], 1);
    assert_eq!(mx["scheme"], "mxfp8-e4m3");
    assert_eq!(mx["underflow"], 1, "{mx}");
    assert_eq!(mx["subnormal"], 1, "{mx}");
    assert_eq!(mx["blocks"], 2);
    // Per tensor, the r histogram is against the tensor's amax: 1e-2 is log2(89600) = 16.45
    // binades below 896; MX puts it at 0 in its own block.
    assert_eq!(bins(tensor), [(0, 1), (9, 29), (15, 1), (16, 32), (29, 1)]);
    assert_eq!(bins(mx), [(0, 33), (9, 29), (15, 1), (29, 1)]);
    // The total of one tensor is the tensor.
    assert_eq!(v["total"][1]["subnormal"], mx["subnormal"]);
}

#[test]
fn json_keys() {
    let (_dir, p) = hand_file();
    let v = analyze_json(&p, &["--compare-blocks"]);
    assert_eq!(
        keys(&v),
        ["schemes", "tensors", "total", "skipped", "options"]
    );
    for s in v["schemes"].as_array().unwrap() {
        assert_eq!(
            keys(s),
            [
                "name",
                "kind",
                "element",
                "block_shape",
                "scale",
                "subnormal_from",
                "lost_from"
            ]
        );
    }
    assert_eq!(v["schemes"][0]["kind"], "per-tensor");
    assert_eq!(v["schemes"][0]["block_shape"], Value::Null);
    assert_eq!(v["schemes"][1]["kind"], "mx");
    assert_eq!(v["schemes"][1]["block_shape"], serde_json::json!([1, 32]));
    assert_eq!(v["schemes"][1]["scale"], "e8m0");
    // E4M3 in MX blocks: subnormal from r = 14..15, lost from 18..19; per tensor 14.81, 18.81.
    assert_eq!(
        v["schemes"][1]["lost_from"],
        serde_json::json!([18.0, 19.0])
    );
    let lost = v["schemes"][0]["lost_from"][0].as_f64().unwrap();
    assert!((lost - (448f64.log2() + 10.0)).abs() < 1e-12);
    let t = &v["tensors"][0];
    assert_eq!(
        keys(t),
        [
            "name", "file", "dtype", "shape", "rows", "cols", "amax", "schemes"
        ]
    );
    let stats_keys = [
        "scheme",
        "values",
        "zeros",
        "finite_nonzero",
        "nonfinite",
        "blocks",
        "underflow",
        "subnormal",
        "saturated",
        "nan",
        "lost_share",
        "energy_lost",
        "relative_error",
        "log2_amax_ratio",
    ];
    for s in t["schemes"].as_array().unwrap() {
        assert_eq!(keys(s), stats_keys);
    }
    for s in v["total"].as_array().unwrap() {
        assert_eq!(keys(s), stats_keys);
    }
    assert_eq!(keys(&v["options"]), ["schemes", "tensors"]);
    assert_eq!(t["amax"], 1000.0);
}

/// The reference: the block rounder on the whole tensor at once (all of it in memory), and the
/// sums taken value by value.
fn reference(format: BlockFormat, xs: &[f32], cols: usize) -> (RoundCounts, f64, f64) {
    let r = BlockRounder::new(format, RoundOptions::default());
    let mut q = xs.to_vec();
    let counts = r.par_round_matrix_at(&mut q, cols, 0);
    let (mut total, mut lost) = (0.0f64, 0.0f64);
    for (&x, &y) in xs.iter().zip(&q) {
        if x.is_finite() {
            total += f64::from(x) * f64::from(x);
            if x != 0.0 && y == 0.0 {
                lost += f64::from(x) * f64::from(x);
            }
        }
    }
    (counts, lost, total)
}

/// Tensors larger than a read chunk (2^20 values), rows that straddle chunks and are not a
/// multiple of 32, a 1-D tensor longer than a segment: the streamed counts equal those of the
/// block rounder on each whole tensor, and the result does not depend on the thread count.
#[test]
fn streamed_counts_equal_the_block_rounder() {
    let mut a = log_uniform(7, 1000 * 1500, -30.0, 12.0, 53);
    a[123_456] = f32::NAN;
    a[1_048_580] = f32::INFINITY;
    let b = log_uniform(8, 300_001, -20.0, 0.0, 53);
    let c = log_uniform(9, 37 * 3 * 29, -8.0, 8.0, 53);
    let tensors = [
        ("a", vec![1000, 1500], a),
        ("b", vec![300_001], b),
        ("c", vec![37, 3, 29], c),
    ];
    let (_dir, p) = write("s.safetensors", &tensors);
    let p = p.to_str().unwrap();
    let schemes = [
        "mxfp8-e4m3",
        "mxfp4",
        "mxfp6-e3m2",
        "nvfp4",
        "fp8-e4m3@1x128",
        "fp8-e4m3@128x128",
        "fp8-e5m2@5x7",
    ];
    for name in schemes {
        let format: BlockFormat = name.parse().unwrap();
        let args = ["analyze", p, "--format", name, "--json"];
        let many = mixprec(&args);
        assert_eq!(many.status.code(), Some(0), "{}", stderr(&many));
        let v: Value = serde_json::from_slice(&many.stdout).unwrap();
        for (i, (_, shape, xs)) in tensors.iter().enumerate() {
            let cols = *shape.last().unwrap();
            let (counts, lost, total) = reference(format, xs, cols);
            let s = &v["tensors"][i]["schemes"][0];
            assert_eq!(s["underflow"], counts.underflow, "{name} {i}");
            assert_eq!(s["subnormal"], counts.subnormal, "{name} {i}");
            assert_eq!(s["saturated"], counts.overflow, "{name} {i}");
            assert_eq!(s["nan"], counts.nan, "{name} {i}");
            let e = s["energy_lost"].as_f64().unwrap();
            assert!(
                (e - lost / total).abs() <= 1e-12 * (lost / total),
                "{name} {i}: {e}"
            );
            let (br, bc) = format.block_shape();
            let rows = shape.iter().product::<usize>() / cols;
            let blocks = rows.div_ceil(br) * cols.div_ceil(bc);
            assert_eq!(s["blocks"], blocks as u64, "{name} {i}");
        }
        for threads in ["1", "3"] {
            let other = mixprec_env(&args, &[("RAYON_NUM_THREADS", threads)]);
            assert_eq!(other.stdout, many.stdout, "{name} on {threads} threads");
        }
    }
}

/// The library gives what the binary prints.
#[test]
fn library_matches_binary() {
    let (_dir, p) = hand_file();
    let options = BlockOptions::compare(FP8_E4M3, Vec::new()).unwrap();
    let a = analyze_block_files(std::slice::from_ref(&p), &options).unwrap();
    let v = analyze_json(&p, &["--compare-blocks"]);
    assert_eq!(serde_json::to_value(&a).unwrap(), v);
    // Per-tensor scaling by the plain rounder: scale amax / 448 in f32, values divided,
    // rounded saturating, multiplied back.
    let xs = hand_tensor();
    let scale = (1000.0f64 / 448.0) as f32;
    let r = Rounder::new(
        FP8_E4M3,
        RoundOptions {
            overflow: Overflow::Saturate,
            ..RoundOptions::default()
        },
    );
    let mut q: Vec<f32> = xs.iter().map(|x| x / scale).collect();
    let counts = r.round_f32_slice(&mut q);
    let s = &a.tensors[0].schemes[0];
    assert_eq!(
        (s.underflow, s.subnormal, s.saturated, s.nan),
        (
            counts.underflow,
            counts.subnormal,
            counts.overflow,
            counts.nan
        )
    );
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let (dir, p) = hand_file();
    let out = dir.path().join("out");
    let (p, o) = (p.to_str().unwrap(), out.to_str().unwrap());
    assert_bad(
        &["analyze", p, "--format", "mxfp9"],
        "unknown block format 'mxfp9'",
    );
    assert_bad(&["analyze", p, "--format", "fp12"], "unknown format 'fp12'");
    // analyze takes block formats too: an unknown name's message lists them.
    assert_bad(
        &["analyze", p, "--format", "fp12"],
        "or a block format (mxfp8-e4m3, mxfp8-e5m2",
    );
    assert_bad(
        &["analyze", p, "--format", "mxfp8-e4m3", "--scales", "0..8"],
        "--scales",
    );
    assert_bad(
        &["analyze", p, "--format", "mxfp4", "--margin", "2"],
        "--margin",
    );
    assert_bad(
        &["analyze", p, "--format", "mxfp4", "--max-underflow", "0.1"],
        "--max-underflow",
    );
    assert_bad(
        &["analyze", p, "--format", "mxfp4", "--report", o],
        "--report",
    );
    assert_bad(&["analyze", p, "--compare-blocks=fp16"], "--compare-blocks");
    assert_bad(&["analyze", p, "--compare-blocks=fp99"], "--compare-blocks");
    assert_bad(
        &["analyze", p, "--compare-blocks", "--format", "fp16"],
        "--format",
    );
    assert_bad(
        &["analyze", p, "--compare-blocks", "--report", o],
        "--report",
    );
    assert_bad(
        &["analyze", p, "--format", "mxfp4", "--tensor", "nope"],
        "--tensor 'nope'",
    );
    let garbage = dir.path().join("g.safetensors");
    std::fs::write(&garbage, b"not a safetensors file").unwrap();
    assert_bad(
        &["analyze", garbage.to_str().unwrap(), "--compare-blocks"],
        "g.safetensors",
    );
    assert_bad(
        &["analyze", "/nonexistent/x.npy", "--format", "mxfp4"],
        "x.npy",
    );
    assert_bad(&["analyze", p, p, "--format", "mxfp4"], "same file");
    // Nothing was written for any of them.
    assert!(!out.exists());
    // A file of a plot's name that mixprec did not write is left alone, before any work.
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("block-compare.png"), b"mine").unwrap();
    assert_bad(
        &["analyze", p, "--compare-blocks", "--plots", o],
        "block-compare.png",
    );
    assert_eq!(
        std::fs::read(out.join("block-compare.png")).unwrap(),
        b"mine"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn plots_are_written_and_replace_only_their_own() {
    let (dir, p) = hand_file();
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    // The comparison, run second, replaces the histogram (the directory describes one
    // analysis).
    for (flags, stem, labels) in [
        (
            &["--format", "mxfp8-e4m3"][..],
            "block-ratios",
            &[
                "log2(|x| / block amax)",
                "lost: underflows to zero",
                "subnormal in fp8-e4m3",
            ][..],
        ),
        (
            &["--compare-blocks"],
            "block-compare",
            &[
                "fp8-e4m3@tensor",
                "mxfp8-e4m3",
                "values lost",
                "% (log scale)",
            ],
        ),
    ] {
        analyze_text(&p, &[flags, &["--plots", o]].concat());
        assert_eq!(
            file_names(&out),
            [format!("{stem}.png"), format!("{stem}.svg")]
        );
        let svg = std::fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
        assert_contains(&svg, labels);
    }
}

/// Per-tensor scaling of a tensor whose amax is near f32's max: 1e-44 / (3e38 / 448) is below
/// f32's range, and still counts as a nonzero value lost, not as a zero.
#[test]
fn per_tensor_counts_values_divided_below_f32() {
    let (_dir, p) = write("f.safetensors", &[("t", vec![3], vec![3e38, 1e-44, 1.0])]);
    let v = analyze_json(&p, &["--compare-blocks"]);
    let s = &v["tensors"][0]["schemes"][0];
    assert_eq!(s["scheme"], "fp8-e4m3@tensor");
    assert_eq!(s["underflow"], 2, "{s}");
    assert_eq!(s["finite_nonzero"], 3);
}

/// NVFP4 by hand: the tensor's amax 6000 sets its encode scale 2688 / 6000 = 0.448; a block of
/// 1e-3 gets the block scale e4m3(1e-3 x 0.448 / 6) = e4m3(7.5e-5), below half E4M3's smallest
/// subnormal (2^-10), so zero: the whole block underflows although its values are equal. The
/// block of 6000 gets scale 448 and 6000 is exact.
#[test]
fn nvfp4_block_scale_underflow_by_hand() {
    let mut xs = vec![6000.0f32; 16];
    xs.extend([1e-3f32; 16]);
    // A third block, 1.0: scale e4m3(0.448 / 6 = 0.0747) = 0.078125 (5 x 2^-6), so elements
    // 1 x 0.448 / 0.078125 = 5.73 round to 6 (e2m1's 4, 6 neighbours): exact would be 1, the
    // dequantised value 6 x 0.078125 / 0.448 = 1.046.
    xs.extend([1.0f32; 16]);
    let (_dir, p) = write("n.safetensors", &[("t", vec![48], xs)]);
    let v = analyze_json(&p, &["--format", "nvfp4"]);
    let s = &v["tensors"][0]["schemes"][0];
    assert_eq!(s["underflow"], 16, "{s}");
    assert_eq!(s["subnormal"], 0, "{s}");
    assert_eq!(s["saturated"], 0, "{s}");
    assert_eq!(s["blocks"], 3);
    let total = 16.0 * 6000f64.powi(2) + 16.0 * f64::from(1e-3f32).powi(2) + 16.0;
    let lost = 16.0 * f64::from(1e-3f32).powi(2);
    let e = s["energy_lost"].as_f64().unwrap();
    assert!((e - lost / total).abs() < 1e-12 * e, "{e}");
    assert_eq!(v["schemes"][0]["kind"], "nvfp4");
}

/// Tiles of 2 x 2 over a 3 x 3 matrix: the edge tiles are smaller, and a tile spans two rows:
/// 0.001 shares its tile with 1000 (scale 1000 / 448; 0.001 x 448 / 1000 = 4.5e-4 < 2^-10:
/// lost) only if tiles cover rows 0-1, and columns 0-1.
#[test]
fn tiles_span_rows() {
    #[rustfmt::skip]
    let xs = vec![
        1.0f32, 1.0, 1.0,
        1000.0, 0.001, 1.0,
        0.001, 1.0, 1000.0,
    ];
    let (_dir, p) = write("t.safetensors", &[("t", vec![3, 3], xs)]);
    let v = analyze_json(&p, &["--format", "fp8-e4m3@2x2"]);
    let s = &v["tensors"][0]["schemes"][0];
    // Tiles: rows 0-1 x cols 0-1 (1000 and 0.001: lost), rows 0-1 x col 2 (ones), row 2 x
    // cols 0-1 (0.001 with 1.0: 0.001 x 448 = 0.448, normal), row 2 x col 2.
    assert_eq!(s["underflow"], 1, "{s}");
    assert_eq!(s["blocks"], 4);
    assert_eq!(v["schemes"][0]["block_shape"], serde_json::json!([2, 2]));
}

/// A tensor with no finite value has no amax (`null`, `-` in the table), as in the element
/// analysis; a tensor of zeros has amax 0.
#[test]
fn a_tensor_without_a_finite_value_has_no_amax() {
    let (_dir, p) = write(
        "n.safetensors",
        &[
            ("nan", vec![2, 32], vec![f32::NAN; 64]),
            ("inf", vec![1, 32], vec![f32::INFINITY; 32]),
            ("zeros", vec![1, 32], vec![0.0; 32]),
            ("w", vec![1, 32], vec![0.5; 32]),
        ],
    );
    for flags in [&["--format", "mxfp8-e4m3"][..], &["--compare-blocks"]] {
        let v = analyze_json(&p, flags);
        let amax: Vec<&Value> = v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["amax"])
            .collect();
        assert_eq!(
            amax,
            [
                &Value::Null,
                &Value::Null,
                &Value::from(0.0),
                &Value::from(0.5)
            ],
            "{flags:?}"
        );
    }
    let text = analyze_text(&p, &["--format", "mxfp8-e4m3"]);
    let row = text
        .lines()
        .find(|l| l.starts_with("nan "))
        .expect("a row for nan");
    assert!(row.trim_end().ends_with(" -"), "{row}");
}
