//! Replay on hand-made runs, where every step's outcome can be worked out.

use super::*;
use crate::format::FP16;

const FP16_BY_MAGNITUDE: OverflowModel = OverflowModel {
    format: FP16,
    by_magnitude: true,
};

fn policies(names: &[&str]) -> Vec<(String, LossScaling)> {
    names
        .iter()
        .map(|n| ((*n).to_string(), n.parse().unwrap()))
        .collect()
}

/// A run at static scale 2^10 whose grad_amax is 1 except on step 3 (100: 2^10 * 100 > 65504
/// overflows there, 2^9 * 100 = 51200 does not) and step 5 (NaN from elsewhere: grad_amax 1 does
/// not explain it).
fn recorded() -> Vec<RecordedStep> {
    run_steps(
        6,
        1024.0,
        &[3, 5],
        |step| if step == 3 { 100.0 } else { 1.0 },
        &[],
    )
}

/// Steps 1..=n at the static scale `loss_scale`: those in `overflowed` overflowed and were
/// skipped; grad_amax is `amax(step)`, a lower bound only at the steps in `bounded`.
fn run_steps(
    n: u64,
    loss_scale: f64,
    overflowed: &[u64],
    amax: impl Fn(u64) -> f64,
    bounded: &[u64],
) -> Vec<RecordedStep> {
    (1..=n)
        .map(|step| RecordedStep {
            step,
            loss_scale,
            overflow: overflowed.contains(&step),
            skipped: overflowed.contains(&step),
            grad_amax: Some(amax(step)),
            grad_amax_bounded: bounded.contains(&step),
        })
        .collect()
}

fn replay(names: &[&str], steps: &[RecordedStep], captures: &[(u64, Histogram)]) -> Replay {
    let mut r = Replayer::new(&policies(names), FP16_BY_MAGNITUDE, FP16_BY_MAGNITUDE);
    for s in steps {
        for (step, h) in captures {
            if *step == s.step {
                r.capture(*step, s.loss_scale, h.clone());
            }
        }
        r.step(s);
    }
    r.finish()
}

#[test]
fn each_policy_worked_out() {
    let r = replay(
        &[
            "static:1024",
            "static:512",
            "gradscaler:init_scale=2^10,growth_interval=2",
            "none",
        ],
        &recorded(),
        &[],
    );
    assert_eq!((r.steps, r.unexplained_overflows), (6, 1));
    let [same, lower, dynamic, none] = &r.policies[..] else {
        panic!()
    };
    // The run's own policy: its scales and skips exactly.
    assert!(same.matches_run);
    assert_eq!(same.scale_changes, vec![(1, 1024.0)]);
    assert_eq!(same.skipped.steps, vec![3, 5]);
    assert_eq!(same.above_window.steps, vec![3]);
    // Half the scale: step 3 fits; step 5's NaN overflows at any scale.
    assert!(!lower.matches_run);
    assert_eq!(lower.skipped.steps, vec![5]);
    assert!(lower.above_window.steps.is_empty());
    // Dynamic, interval 2: 1024 (1, 2 clean: grow) 2048 (3 overflows: 100 * 2048) 1024 (4 clean)
    // 1024 (5 NaN: back off) 512 (6 clean).
    assert_eq!(
        dynamic.scale_changes,
        vec![(1, 1024.0), (3, 2048.0), (4, 1024.0), (6, 512.0)]
    );
    assert_eq!(dynamic.skipped.steps, vec![3, 5]);
    assert_eq!(dynamic.scale_at(5), Some(1024.0));
    assert_eq!(dynamic.scale_at(6), Some(512.0));
    // No scaling: overflows are counted, nothing is skipped.
    assert_eq!(none.overflow.steps, vec![5]);
    assert_eq!(none.skipped.count, 0);
    assert_eq!(none.scale_changes, vec![(1, 1.0)]);
}

/// The high edge follows grad_amax; the low edge comes from the last capture.
#[test]
fn window_edges_and_underflow_at_capture_steps() {
    // Captured at step 1 at scale 2^10: values stored 2^-16 (unscaled 2^-26) and 1024 (1).
    let mut h = Histogram::new(0);
    h.add_f32(&[2f32.powi(-16), 1024.0]);
    let r = replay(&["static:1024", "static:2"], &recorded(), &[(1, h)]);
    // Unscaled 2^-26 underflows at 2^0 and not at 2^1 (2^-25 is the tie, and its bin counts as
    // the values above it).
    assert_eq!(r.captures.len(), 1);
    assert_eq!(r.captures[0].min_log2_scale, Some(1));
    // grad_amax 1: 2^15 * 1 is finite in fp16, 2^16 is not.
    assert_eq!(r.captures[0].max_log2_scale, Some(15));
    assert_eq!(r.window[2], (3, Some(1), Some(9)));
    let [big, small] = &r.policies[..] else {
        panic!()
    };
    assert!(big.below_window.steps.is_empty());
    assert!(small.below_window.steps.is_empty());
    assert_eq!(
        big.underflow,
        vec![Underflow {
            step: 1,
            scale: 1024.0,
            share: 0.0
        }]
    );
    let r = replay(
        &["static:1"],
        &recorded(),
        &[(1, {
            let mut h = Histogram::new(0);
            h.add_f32(&[2f32.powi(-16), 1024.0]);
            h
        })],
    );
    let p = &r.policies[0];
    assert_eq!(p.below_window.steps, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        p.underflow,
        vec![Underflow {
            step: 1,
            scale: 1.0,
            share: 0.5
        }]
    );
}

/// DeepSpeed stops at the minimum scale; the replay says where, and goes no further.
#[test]
fn a_policy_that_stops() {
    let steps = run_steps(5, 1.0, &[1, 2, 3, 4, 5], |_| 1e6, &[]);
    let r = replay(&["deepspeed:init_scale=2"], &steps, &[]);
    let p = &r.policies[0];
    // 2 (absorbed), 2 -> 1, 1: stop.
    assert_eq!(p.stopped_at, Some(3));
    assert_eq!(p.skipped.steps, vec![1, 2]);
    assert_eq!(p.scale_at(4), None);
    assert!(!p.matches_run);
}

/// Saturating stores never overflow by magnitude: only recorded non-finite values count.
#[test]
fn saturating_formats_do_not_overflow_by_magnitude() {
    let sat = OverflowModel {
        format: FP16,
        by_magnitude: false,
    };
    let mut r = Replayer::new(&policies(&["static:1024"]), sat, sat);
    for s in recorded() {
        r.step(&s);
    }
    let r = r.finish();
    // Step 3's amax would overflow, but stores saturate: step 3's recorded overflow is
    // unexplained by magnitude, as is step 5's.
    assert_eq!(r.unexplained_overflows, 2);
    assert!(r.policies[0].above_window.steps.is_empty());
    assert_eq!(r.window[2].2, None);
}

/// A bounded step (grad_amax only a lower bound) overflows at its recorded scale and above and
/// wherever the bound overflows; below that it is undecided, counted, and stepped as if it fit.
#[test]
fn bounded_steps_are_bounds() {
    // Step 2 overflowed at 2^10 with known values up to 1 (unscaled); step 4 is bounded too but
    // did not overflow at 2^10 (an inf masked before the weight gradients); step 5's bound,
    // 100, overflows from 2^10 on (100 * 2^10 > 65504; 100 * 2^9 = 51200 does not).
    let amax = |step| if step == 5 { 100.0 } else { 1.0 };
    let steps = run_steps(5, 1024.0, &[2, 5], amax, &[2, 4, 5]);
    let r = replay(
        &[
            "static:1024",
            "static:2048",
            "static:512",
            "gradscaler:init_scale=2^10",
        ],
        &steps,
        &[],
    );
    assert_eq!((r.bounded_steps, r.unexplained_overflows), (3, 0));
    let [same, above, below, dynamic] = &r.policies[..] else {
        panic!()
    };
    assert!(same.matches_run);
    assert_eq!(same.skipped.steps, vec![2, 5]);
    assert_eq!(same.undecided.count, 0);
    // At 2^11: step 2 overflows (above its scale), step 4 is undecided (it fit at 2^10 only).
    assert_eq!(above.skipped.steps, vec![2, 5]);
    assert_eq!(above.undecided.steps, vec![4]);
    // At 2^9 no bound decides: 100 * 2^9 fits, and a bound never says a step fits.
    assert_eq!(below.skipped.count, 0);
    assert_eq!(below.undecided.steps, vec![2, 4, 5]);
    // GradScaler from 2^10: step 2 overflows (at the recorded scale), backs off to 2^9; step 4
    // undecided (stepped as if it fit); step 5 undecided at 2^9.
    assert_eq!(dynamic.skipped.steps, vec![2]);
    assert_eq!(dynamic.undecided.steps, vec![4, 5]);
    // The window's high edge of a bounded step that overflowed lies below its scale.
    assert_eq!(r.window[1], (2, None, Some(9)));
    assert_eq!(r.window[3], (4, None, Some(15)));
}

/// The high edge: from the largest gradient, and below a scale that overflowed.
#[test]
fn high_edges() {
    // 1 * 2^15 is finite in fp16, 1 * 2^16 is not.
    assert_eq!(high_edge(FP16, Some(1.0), None), Some(15));
    assert_eq!(high_edge(FP16, Some(1.0), Some(1024.0)), Some(9));
    // Not a power of two: the largest power of two below it.
    assert_eq!(high_edge(FP16, Some(1.0), Some(1000.0)), Some(9));
    assert_eq!(high_edge(FP16, None, Some(1024.0)), Some(9));
    assert_eq!(high_edge(FP16, None, None), None);
}

/// A policy that has skipped every step still holds the initial weights: once the run has taken
/// its first update, it is judged by the run's steps at the initial weights, not by the trained
/// run's smaller gradients; one that went on past an undecided step may hold either, and is
/// undecided where the two verdicts differ.
#[test]
fn a_policy_that_never_stepped_holds_the_initial_weights() {
    // Step 1 overflowed at 2^20 with known values up to 0.01 (bounded); step 2, at 2^17, is
    // the run's first update (0.2: 2^17 * 0.2 = 26214 fits, 2^19 * 0.2 = 104858 does not);
    // from step 3 the trained run's gradients are smaller (0.05: 2^19 * 0.05 = 26214 fits).
    let steps: Vec<RecordedStep> = (1..=5)
        .map(|step| RecordedStep {
            step,
            loss_scale: if step == 1 {
                2f64.powi(20)
            } else {
                2f64.powi(17)
            },
            overflow: step == 1,
            skipped: step == 1,
            grad_amax: Some(match step {
                1 => 0.01,
                2 => 0.2,
                _ => 0.05,
            }),
            grad_amax_bounded: step == 1,
        })
        .collect();
    let r = replay(&["static:2^20", "static:2^19", "static:2^17"], &steps, &[]);
    let [high, unknown, low] = &r.policies[..] else {
        panic!()
    };
    // 2^20 overflows at steps 1 (its recorded scale) and 2 (0.2 * 2^20): it never steps, and
    // the initial weights' steps (1 and 2, both overflowing) decide the rest, where the trained
    // run's 0.05 * 2^20 = 52429 would fit.
    assert_eq!(high.skipped.steps, vec![1, 2, 3, 4, 5]);
    assert_eq!(high.undecided.count, 0);
    // 2^19: step 1 undecided (stepped as if it fit: the weights may have moved), step 2
    // overflows; from step 3 the initial weights say overflow, the trained run fits: undecided.
    assert_eq!(unknown.skipped.steps, vec![2]);
    assert_eq!(unknown.undecided.steps, vec![1, 3, 4, 5]);
    // 2^17: step 1 undecided, step 2 fits and steps: from there the run's own record.
    assert_eq!(low.skipped.count, 0);
    assert_eq!(low.undecided.steps, vec![1]);
}
