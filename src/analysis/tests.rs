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
    // A run starts RUN_MARGIN_BITS below the top, said first: its gradients grow.
    assert_eq!(r.grad_scaler.init_scale, Some(8.0));
    assert_eq!(r.grad_scaler.settles_log2_scale, 6);
    assert_eq!(r.grad_scaler.run_margin_bits, 3);
    assert!(
        a.explanation.starts_with(
            "For a training run in fp16, start the loss scale at 2^3 \
             (torch.amp.GradScaler(init_scale=2.0**3)), 3 binades below what this step allows"
        ),
        "{}",
        a.explanation
    );
    assert!(!a.explanation.contains("settles"), "{}", a.explanation);
    assert!(
        a.explanation.contains("skip at least 10 steps backing off"),
        "{}",
        a.explanation
    );
    // At the window's top by construction: said as the static scale's lack of headroom, not
    // as a warning about these gradients (issue 29, case 6).
    assert!(
        a.explanation
            .contains("As a static scale, 2^6 (the window's top) has no headroom"),
        "{}",
        a.explanation
    );
    assert!(!a.explanation.contains("Warning"), "{}", a.explanation);
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
    // bias's 1e-13 lie below 2^-26, the noise floor of amax 7: rounding residue, left out
    // (in fp16 every value lost at the window's top lies 2^39 below amax; see the fp8 test
    // below for a tensor excluded by values above the floor).
    assert!(r.excluded_tensors.is_empty(), "{:?}", r.excluded_tensors);
    let names: Vec<&str> = a.windows.iter().map(|w| w.name.as_str()).collect();
    // small's amax 1e-8 lies below the floor too (2^-29.4 of amax): noise, though no value of
    // it underflows at 2^13.
    assert_eq!(names, ["big", "bias", "small"]);
    assert_eq!(a.windows[1].underflow_share, 0.32);
    assert!(a.windows[1].excludes_recommended && a.windows[1].noise && a.windows[2].noise);
    assert!(
        a.explanation
            .contains("bias (the 32.0% of its values that underflow at 2^13)"),
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
        a.explanation.starts_with(
            "This dump comes from a step whose gradients overflowed: 2 of the 4 values (50.0%) \
             are inf or NaN."
        ),
        "{}",
        a.explanation
    );
    let a = run(&[("w", &[1e-3, 0.5])], &AnalysisOptions::default());
    assert!(!a.explanation.contains("inf or NaN"), "{}", a.explanation);
}

/// Issue 29, case 1: a dump from a step that overflowed (most values inf or NaN, one tensor all
/// NaN) is said to be one; the scale is a back-off a halving below the largest the survivors
/// allow (the scale that overflowed was at most that one), never that scale; the all-NaN
/// tensor's amax is null, not 0.
#[test]
fn a_dump_of_an_overflowed_step_backs_off_and_says_why() {
    let mut w: Vec<f32> = (0..100).map(|i| 1e-4 * (1.0 + i as f32 / 100.0)).collect();
    w.extend([f32::INFINITY; 800]);
    w.extend([f32::NAN; 100]);
    let b = [f32::NAN; 10];
    let a = run(&[("w", &w), ("b", &b)], &AnalysisOptions::default());
    assert!(a.dump.overflowed);
    assert_eq!(a.dump.no_finite_tensors, ["b"]);
    assert!((a.dump.nonfinite_share - 910.0 / 1010.0).abs() < 1e-12);
    let r = a.recommendation.as_ref().unwrap();
    // amax 1.98e-4 = 1.6 * 2^-13: x 2^28 = 53000 is finite in fp16, x 2^29 is not.
    assert_eq!((r.overflow_log2_scale, r.max_log2_scale), (29, Some(28)));
    assert_eq!(r.log2_scale, Some(27));
    assert_eq!(r.grad_scaler.log2_init_scale, Some(25)); // 3 binades below 2^28
    assert!(
        a.explanation
            .starts_with("This dump comes from a step whose gradients overflowed: 910 of the 1010 values (90.1%) are inf or NaN; 1 of the 2 tensors holds no finite value at all (b)."),
        "{}",
        a.explanation
    );
    assert!(
        a.explanation.contains("was at most 2^28"),
        "{}",
        a.explanation
    );
    assert!(
        !a.explanation.contains("Use a loss scale"),
        "{}",
        a.explanation
    );
    assert_eq!(a.tensors[1].values.amax, None);
    assert_eq!(a.total.values.amax, Some(f64::from(w[99])));
    let json = serde_json::to_value(&a).unwrap();
    assert!(
        json["tensors"][1]["amax"].is_null(),
        "{}",
        json["tensors"][1]
    );
    assert_eq!(json["dump"]["overflowed"], true);
    // All NaN: nothing to scale, and the step said to have overflowed.
    let a = run(&[("b", &b)], &AnalysisOptions::default());
    assert!(a.recommendation.is_none() && a.total.values.amax.is_none());
    assert!(
        a.explanation
            .contains("comes from a step whose gradients overflowed"),
        "{}",
        a.explanation
    );
    // A tensor of zeros has a finite amax: 0.
    let a = run(&[("z", &[0.0; 4])], &AnalysisOptions::default());
    assert_eq!(a.tensors[0].values.amax, Some(0.0));
    assert!(!a.dump.overflowed);
}

/// Issue 29, case 2: a share of exact zeros above every FP32 dump measured is reported, with
/// what autocast may have done; one at the MLP's FP32 level (19%) is not.
#[test]
fn zeros_far_above_an_fp32_dump_are_reported() {
    let values = |zeros: usize| {
        let mut xs: Vec<f32> = (0..100 - zeros).map(|i| 1e-3 + i as f32 * 1e-5).collect();
        xs.extend(vec![0.0; zeros]);
        xs
    };
    let a = run(&[("w", &values(30))], &AnalysisOptions::default());
    assert!(a.dump.many_zeros && (a.dump.zero_share - 0.3).abs() < 1e-12);
    assert!(
        a.explanation.contains(
            "Note: 30 of the 100 values (30.0%) are exactly zero, more than the 20% of any FP32 dump measured"
        ),
        "{}",
        a.explanation
    );
    assert!(a.explanation.contains("autocast"), "{}", a.explanation);
    let a = run(&[("w", &values(19))], &AnalysisOptions::default());
    assert!(!a.dump.many_zeros);
    assert!(!a.explanation.contains("exactly zero"), "{}", a.explanation);
}

#[test]
fn a_window_narrower_than_the_runs_margin_is_said_so() {
    // amax 1000: the top is 2^6 and a run starts at 2^3; 1.2e-9 underflows fp16 below 2^5.
    let a = run(&[("w", &[1000.0, 1.2e-9])], &AnalysisOptions::default());
    let r = a.recommendation.unwrap();
    assert_eq!((r.min_log2_scale, r.log2_scale), (Some(5), Some(6)));
    assert_eq!(r.grad_scaler.log2_init_scale, Some(3));
    assert!(
        a.explanation
            .contains("though below the window's low edge 2^5 more than 0.1% of this step's"),
        "{}",
        a.explanation
    );
}

/// FP32 rounding residue of a zero gradient (values below `2^-NOISE_LOG2` of the pooled amax) is
/// named as noise and leaves the tensors the pooled window hides: a whole tensor of it (an
/// attention key bias) and the residue third of a real tensor (GPT-2's fused `c_attn.bias`).
#[test]
fn rounding_residue_is_named_as_noise_and_left_out() {
    let p = |k: i32| pow2(k) as f32;
    let w = vec![1.0f32; 100_000];
    let key = [p(-30), p(-33), p(-45)];
    let mut qkv = vec![1e-3f32; 20];
    qkv.extend([p(-45); 10]);
    let a = run(
        &[("w", &w), ("key.bias", &key), ("c_attn.bias", &qkv)],
        &AnalysisOptions::default(),
    );
    let r = a.recommendation.as_ref().unwrap();
    // amax 1 overflows fp16 from 2^16; 2^-45 * 2^15 underflows: both tensors' windows exclude it.
    assert_eq!(r.log2_scale, Some(15));
    assert!(a.windows.iter().skip(1).all(|w| w.excludes_recommended));
    assert!(r.excluded_tensors.is_empty(), "{:?}", r.excluded_tensors);
    let names: Vec<(&str, bool)> = a
        .windows
        .iter()
        .map(|w| (w.name.as_str(), w.noise))
        .collect();
    assert_eq!(
        names,
        [("w", false), ("key.bias", true), ("c_attn.bias", true)]
    );
    assert!(!a.explanation.contains("hides"), "{}", a.explanation);
    assert!(
        a.explanation
            .contains("Left out as noise (values below 3.725e-9, 2^-28")
            && a.explanation
                .contains("key.bias (all its values: amax 9.313e-10)")
            && a.explanation
                .contains("c_attn.bias (the 33.3% of its values that underflow at 2^15)"),
        "{}",
        a.explanation
    );
    let mut out = Vec::new();
    text::write_tables(&mut out, &a).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with("key.bias") && l.ends_with("noise")),
        "{out}"
    );
}

/// In fp8 the window's top lets values above the noise floor underflow: a tensor that loses
/// them is excluded as before, and only the one that loses values below the floor is noise.
#[test]
fn underflow_above_the_noise_floor_is_not_noise() {
    let o = AnalysisOptions {
        format: crate::format::FP8_E4M3,
        ..AnalysisOptions::default()
    };
    let p = |k: i32| pow2(k) as f32;
    let w = vec![1.0f32; 100_000];
    let a = run(
        &[
            ("w", &w),
            ("resid", &[p(-10), p(-30)]),
            ("small", &[p(-10), p(-20)]),
        ],
        &o,
    );
    let r = a.recommendation.as_ref().unwrap();
    // 448 is e4m3's largest: amax 1 keeps 2^8; 2^-20 * 2^8 is below half its 2^-9 subnormal.
    assert_eq!(r.log2_scale, Some(8));
    assert_eq!(r.excluded_tensors, ["small"]);
    let names: Vec<(&str, bool)> = a
        .windows
        .iter()
        .map(|w| (w.name.as_str(), w.noise))
        .collect();
    assert_eq!(names, [("small", false), ("w", false), ("resid", true)]);
    assert!(
        a.explanation
            .contains("hides 1 tensor whose own window excludes 2^8: small"),
        "{}",
        a.explanation
    );
}
