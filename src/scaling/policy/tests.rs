//! Each named policy against a hand-worked trace of its source's update rule, and the names
//! against their parser.

use super::*;
use crate::scaling::scaler::LossScaler;

/// A segment of a trace: `n` steps that all overflow (or none does), and the scale after the
/// last of them.
type Segment = (u32, bool, f32);

/// `n` steps that overflow, then the scale `scale`.
const fn over(n: u32, scale: f32) -> Segment {
    (n, true, scale)
}

/// `n` clean steps, then the scale `scale`.
const fn clean(n: u32, scale: f32) -> Segment {
    (n, false, scale)
}

/// Steps `name`'s scaler through `trace`: each step is skipped exactly when it overflows (and
/// there is loss scaling), and each segment ends at its scale. A clean segment changes the
/// scale at most on its last step (growth comes after a count of clean steps), so the scale
/// before it is checked on each of its other steps.
fn check(name: &str, trace: &[Segment]) {
    let policy: LossScaling = name.parse().unwrap();
    let mut s = LossScaler::new(policy);
    let mut step = 0;
    for &(n, inf, want) in trace {
        let before = s.scale();
        for i in 0..n {
            step += 1;
            let skipped = s.update(inf).unwrap();
            assert_eq!(
                skipped,
                inf && policy != LossScaling::None,
                "{name} step {step}"
            );
            if !inf && i + 1 < n {
                assert_eq!(s.scale(), before, "{name} step {step}: grew early");
            }
        }
        assert_eq!(s.scale(), want, "{name} after step {step}");
    }
}

const P: fn(i32) -> f32 = |k| 2f32.powi(k);

/// PyTorch `GradScaler` (`torch/amp/grad_scaler.py` defaults; update rule
/// `_amp_update_scale_cpu_kernel` in `aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp`): every
/// overflow halves and resets the tracker; the 2000th clean step in a row doubles.
#[test]
fn gradscaler_trace() {
    #[rustfmt::skip]
    check("gradscaler", &[
        over(1, P(15)), clean(1999, P(15)), clean(1, P(16)), clean(1500, P(16)), over(1, P(15)),
        clean(2000, P(16)), over(2, P(14)), clean(2000, P(15)),
    ]);
}

/// Megatron-LM (`DynamicGradScaler.update`, `megatron/core/optimizer/grad_scaler.py`, with
/// `OptimizerConfig`'s defaults): the first overflow is absorbed by the hysteresis of 2, the
/// second backs off; clean steps do not restore the budget, growth does (after 1000).
#[test]
fn megatron_trace() {
    #[rustfmt::skip]
    check("megatron", &[
        over(1, P(32)), over(1, P(31)), over(1, P(30)), clean(5, P(30)), over(1, P(29)),
        clean(999, P(29)), clean(1, P(30)), over(1, P(30)), over(1, P(29)),
        // Down to the floor of 1, and no lower.
        over(29, 1.0), over(3, 1.0),
    ]);
}

/// DeepSpeed (`DynamicLossScaler.update_scale`, `deepspeed/runtime/fp16/loss_scaler.py`, with
/// `deepspeed/runtime/constants.py`'s defaults): hysteresis 2; growth when the clean steps since
/// the last overflow before this one are a positive multiple of 1000, i.e. at clean step 1001,
/// 2001, ...; the budget comes back at growth.
#[test]
fn deepspeed_trace() {
    #[rustfmt::skip]
    check("deepspeed", &[
        over(1, P(16)), over(1, P(15)), over(1, P(14)), clean(1000, P(14)), clean(1, P(15)),
        clean(999, P(15)), clean(1, P(16)), over(1, P(16)), over(1, P(15)),
    ]);
    // From the start (`last_overflow_iter = -1`): the first growth is at clean step 1001 too.
    #[rustfmt::skip]
    check("deepspeed", &[clean(1000, P(16)), clean(1, P(17))]);
    // `consecutive_hysteresis`: a clean step restores the budget, so isolated overflows never
    // back off; two in a row do.
    #[rustfmt::skip]
    check("deepspeed:consecutive_hysteresis=true", &[
        over(1, P(16)), clean(1, P(16)), over(1, P(16)), clean(1, P(16)), over(1, P(16)),
        over(1, P(15)),
    ]);
    // Without it, the same sequence backs off on the second isolated overflow.
    #[rustfmt::skip]
    check("deepspeed", &[over(1, P(16)), clean(1, P(16)), over(1, P(15))]);
    // At the minimum, an overflow stops the run (`raise_error_at_min_scale`).
    let mut s = LossScaler::new("deepspeed:init_scale=2".parse().unwrap());
    for want in [2.0, 1.0] {
        assert!(s.update(true).unwrap());
        assert_eq!(s.scale(), want);
    }
    assert!(s.update(true).is_err());
}

/// Keras `LossScaleOptimizer` (`keras/src/optimizers/loss_scale_optimizer.py`): 2^15; the scale
/// doubles when the counter equals `dynamic_growth_steps - 1` on a clean step (the 2000th in a
/// row) and halves, with no floor, on a non-finite one.
#[test]
fn keras_trace() {
    #[rustfmt::skip]
    check("keras", &[
        clean(1999, P(15)), clean(1, P(16)), over(1, P(15)), over(1, P(14)), clean(1999, P(14)),
        clean(1, P(15)), over(20, P(-5)),
    ]);
}

#[test]
fn static_and_none_traces() {
    #[rustfmt::skip]
    check("static:2^10", &[over(1, 1024.0), clean(5, 1024.0), over(2, 1024.0)]);
    #[rustfmt::skip]
    check("static:1000", &[over(1, 1000.0), clean(3000, 1000.0)]);
    #[rustfmt::skip]
    check("none", &[over(1, 1.0), clean(3000, 1.0)]);
}

/// The presets are the frameworks' defaults (a planted change of any number fails here or in
/// the traces).
#[test]
fn names_are_the_presets() {
    let d = |s: &str| match s.parse::<LossScaling>().unwrap() {
        LossScaling::Dynamic(d) => d,
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(d("gradscaler"), DynamicScaling::grad_scaler());
    assert_eq!(d("megatron"), DynamicScaling::megatron());
    assert_eq!(d("deepspeed"), DynamicScaling::deepspeed());
    assert_eq!(d("keras").init_scale, 32768.0);
    assert_eq!(
        d("keras"),
        DynamicScaling {
            init_scale: 32768.0,
            ..DynamicScaling::grad_scaler()
        }
    );
}

/// What is printed reads back, for presets, changed presets and static scales.
#[test]
fn names_round_trip() {
    for name in [
        "gradscaler",
        "megatron",
        "deepspeed",
        "keras",
        "none",
        "static:65536",
        "static:2^40",
        "static:1000",
        "deepspeed:consecutive_hysteresis=true",
        "gradscaler:growth_interval=50",
        "megatron:init_scale=2^20",
        "gradscaler:growth_rule=since-overflow,hysteresis=3",
        "gradscaler:max_scale=2^24",
    ] {
        let p: LossScaling = name.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        let shown = p.to_string();
        assert_eq!(
            shown.parse::<LossScaling>().unwrap(),
            p,
            "{name} -> {shown}"
        );
    }
    assert_eq!(
        " megatron:init_scale = 2^20 "
            .parse::<LossScaling>()
            .unwrap()
            .to_string(),
        "megatron:init_scale=1048576"
    );
    assert_eq!(
        "static:2^40".parse::<LossScaling>().unwrap().to_string(),
        "static:2^40"
    );
    // A custom object is named after its nearest preset.
    let custom = LossScaling::Dynamic(DynamicScaling {
        growth_interval: 7,
        ..DynamicScaling::keras()
    });
    assert_eq!(custom.to_string(), "keras:growth_interval=7");
}

#[test]
fn bad_names_say_what_is_accepted() {
    for (bad, says) in [
        (
            "gradscalar",
            "one of gradscaler, megatron, deepspeed, keras, static:S, none",
        ),
        ("static", "static needs its scale"),
        ("static:0", "must be positive"),
        ("static:2^200", "out of f32's range"),
        ("deepspeed:consecutive=true", "unknown field `consecutive`"),
        ("deepspeed:hysteresis", "not key=value"),
        ("gradscaler:growth_interval=0", "growth_interval"),
        ("gradscaler:backoff_factor=2", "backoff_factor"),
        ("none:x=1", "no parameters"),
        ("", "one of"),
    ] {
        let e = bad.parse::<LossScaling>().unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
        assert!(e.starts_with("invalid loss scaler"), "{bad}: {e}");
    }
}

/// A config's loss scaling: a name or the object written before names existed.
#[test]
fn configs_take_names_and_objects() {
    #[derive(serde::Deserialize)]
    struct C {
        #[serde(deserialize_with = "deserialize_policy")]
        s: LossScaling,
    }
    let c: C = serde_json::from_str(r#"{"s": "keras"}"#).unwrap();
    assert_eq!(c.s, LossScaling::Dynamic(DynamicScaling::keras()));
    let c: C = serde_json::from_str(r#"{"s": {"kind": "static", "scale": "2^8"}}"#).unwrap();
    assert_eq!(c.s, LossScaling::Static { scale: 256.0 });
    let e = serde_json::from_str::<C>(r#"{"s": "kerass"}"#)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid loss scaler 'kerass'"), "{e}");
}
