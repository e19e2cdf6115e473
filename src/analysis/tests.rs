//! The pipeline on small in-memory tensors, against hand-worked numbers.

use super::*;
use crate::io::Dtype;

fn input(name: &str, file: &str, xs: &[f32], format: FloatFormat) -> TensorInput {
    let mut t = TensorInput::new(
        TensorInfo {
            name: name.into(),
            dtype: Dtype::F32,
            shape: vec![xs.len()],
            path: file.into(),
        },
        format,
    );
    t.add(Values::F32(xs));
    t
}

fn run(tensors: &[(&str, &[f32])], options: &AnalysisOptions) -> Analysis {
    let inputs = tensors
        .iter()
        .map(|(n, xs)| input(n, "g.safetensors", xs, options.format))
        .collect();
    analyze(inputs, Vec::new(), options)
}

#[test]
fn overflow_bounds_the_window_and_grad_scaler_settles_below_it() {
    // amax 1000 = 1.95 * 2^9: 1000 * 2^6 = 64000 is finite in fp16, 2^7 overflows.
    let a = run(&[("w", &[1000.0, 0.5])], &AnalysisOptions::default());
    let r = a.recommendation.unwrap();
    assert_eq!((r.log2_scale, r.overflow_log2_scale), (Some(6), 7));
    assert_eq!(r.limited_by, Limit::Overflow);
    assert!(r.near_overflow && r.works);
    // 2^0 keeps both values: scaling is not needed, though 2^6 is the largest safe scale.
    assert!(!r.scaling_needed);
    assert_eq!(r.grad_scaler.init_scale, Some(64.0));
    assert_eq!(r.grad_scaler.settles_log2_scale, 6);
    assert!(
        a.explanation.contains("init_scale=2.0**6"),
        "{}",
        a.explanation
    );
    assert!(
        a.explanation.contains("skip 10 steps backing off"),
        "{}",
        a.explanation
    );
    assert!(
        a.explanation
            .contains("Warning: 2^6 is within 2x of overflow")
    );
    // With a margin of one bit the scale halves and the warning goes.
    let o = AnalysisOptions {
        margin: 1,
        ..AnalysisOptions::default()
    };
    let r = run(&[("w", &[1000.0, 0.5])], &o).recommendation.unwrap();
    assert_eq!((r.log2_scale, r.near_overflow), (Some(5), false));
    assert_eq!(r.grad_scaler.settles_log2_scale, 6);
}

#[test]
fn the_range_alone_bounding_the_window_means_any_scale_works() {
    // 1e-9 needs 2^5 in fp16; amax 1e-3 overflows only from 2^26.
    let o = AnalysisOptions {
        hi: 20,
        ..AnalysisOptions::default()
    };
    let a = run(&[("w", &[1e-9, 1e-3])], &o);
    let r = a.recommendation.as_ref().unwrap();
    assert_eq!(r.limited_by, Limit::Scales);
    assert!(r.scaling_needed);
    assert_eq!((r.min_log2_scale, r.log2_scale), (Some(5), Some(20)));
    assert!(
        a.explanation
            .starts_with("Any loss scale from 2^5 to 2^20 works for fp16"),
        "{}",
        a.explanation
    );
    assert_eq!(r.overflow_log2_scale, 26);
    // bf16: nothing underflows at 2^0.
    let o = AnalysisOptions {
        format: BF16,
        ..AnalysisOptions::default()
    };
    let a = run(&[("w", &[1e-9, 1e-3])], &o);
    let r = a.recommendation.as_ref().unwrap();
    assert_eq!((r.log2_scale, r.scaling_needed), (Some(0), false));
    assert!(
        a.explanation
            .starts_with("Loss scaling is unnecessary for bf16")
    );
    assert!(!r.near_overflow);
}

#[test]
fn values_left_subnormal_unscaled_need_a_scale() {
    // 1e-6 is subnormal in fp16 (below 2^-14) but does not underflow: scaling is still needed,
    // for the significant bits; at 2^11 it is normal.
    let o = AnalysisOptions {
        hi: 20,
        ..AnalysisOptions::default()
    };
    let a = run(&[("w", &[1e-6; 4])], &o);
    let r = a.recommendation.as_ref().unwrap();
    assert_eq!((r.min_log2_scale, r.log2_scale), (Some(0), Some(20)));
    assert!(r.scaling_needed && r.limited_by == Limit::Scales);
    assert!(
        a.explanation.starts_with(
            "Use a loss scale of 2^20 for fp16: no scale from 2^0 to 2^20 underflows more than \
             0.1% of the 4 finite nonzero values, but at 2^0 4 of them are subnormal"
        ),
        "{}",
        a.explanation
    );
    // One subnormal value in 1,001 is within the 0.1% allowed: no scaling needed.
    let mut xs = vec![1e-3f32; 1000];
    xs.push(1e-6);
    let r = run(&[("w", &xs)], &o).recommendation.unwrap();
    assert_eq!((r.log2_scale, r.scaling_needed), (Some(0), false));
    xs.push(1e-6);
    let r = run(&[("w", &xs)], &o).recommendation.unwrap();
    assert_eq!((r.log2_scale, r.scaling_needed), (Some(20), true));
}

#[test]
fn windows_are_sorted_worst_first_and_exclusions_named() {
    let big: Vec<f32> = (0..100_000).map(|i| 1.0 + (i % 7) as f32).collect();
    let mut bias = vec![1e-2f32; 100];
    bias[..32].fill(1e-13);
    // 1e-8 needs 2^2 (4e-8 is above half fp16's min subnormal, 3e-8): a higher low end than big's.
    let small = [1e-8f32; 10];
    let a = run(
        &[("big", &big), ("small", &small), ("bias", &bias)],
        &AnalysisOptions::default(),
    );
    let r = a.recommendation.as_ref().unwrap();
    // amax 7: 7 * 2^13 = 57344 is finite, 2^14 is not.
    assert_eq!(r.log2_scale, Some(13));
    assert_eq!(r.excluded_tensors, ["bias"]);
    let names: Vec<&str> = a.windows.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["bias", "small", "big"]);
    assert_eq!(a.windows[0].underflow_share, 0.32);
    assert!(
        a.explanation.contains("hides 1 tensor"),
        "{}",
        a.explanation
    );
}

#[test]
fn nothing_to_scale_has_no_recommendation() {
    let a = run(
        &[("z", &[0.0, f32::NAN]), ("e", &[])],
        &AnalysisOptions::default(),
    );
    assert!(a.recommendation.is_none());
    assert!(a.windows.is_empty());
    assert!(a.tensors.iter().all(|t| t.window.is_none()));
    let json = serde_json::to_value(&a).unwrap();
    assert!(json["recommendation"].is_null());
    assert!(a.explanation.starts_with("Nothing to scale"));
}

#[test]
fn scales_parse_as_exponents_or_powers_of_two() {
    assert_eq!(parse_log2_scales("-8..40").unwrap(), (-8, 40));
    assert_eq!(parse_log2_scales("2^-8..2**40").unwrap(), (-8, 40));
    for bad in ["5..2", "0..2001", "a..b", "0-3", "1.5..3", "0..65536"] {
        let e = parse_log2_scales(bad).unwrap_err().to_string();
        assert!(e.starts_with("invalid --scales"), "{bad}: {e}");
    }
}

#[test]
fn a_file_given_twice_is_refused() {
    let dir = std::env::temp_dir().join(format!("mixprec-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("g.npy");
    crate::io::write_npy(&p, &[1], crate::io::TensorData::F32(&[1.0])).unwrap();
    let again = dir.join(".").join("g.npy");
    let e = read_tensors(&[p.clone(), again], &AnalysisOptions::default()).unwrap_err();
    assert!(matches!(e, Error::SameFile { .. }), "{e}");
    assert!(read_tensors(&[p], &AnalysisOptions::default()).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn values_already_nonfinite_are_named_in_the_advice() {
    let a = run(
        &[("w", &[1e-3, f32::NAN, f32::INFINITY, 0.5])],
        &AnalysisOptions::default(),
    );
    assert!(
        a.explanation
            .contains("Note: 2 of the 4 values are already inf or NaN, before any scaling"),
        "{}",
        a.explanation
    );
    let a = run(&[("w", &[1e-3, 0.5])], &AnalysisOptions::default());
    assert!(!a.explanation.contains("inf or NaN"), "{}", a.explanation);
}
