//! The scaler against traces and against transcriptions of the frameworks' update functions.

use super::*;
use crate::train::Rng;

fn run(scaling: LossScaling, overflows: &[u32], steps: u32) -> (Vec<f32>, Vec<u32>) {
    let mut s = LossScaler::new(scaling);
    let mut scales = Vec::new();
    let mut skipped = Vec::new();
    for step in 1..=steps {
        if s.update(overflows.contains(&step)).unwrap() {
            skipped.push(step);
        }
        scales.push(s.scale());
    }
    (scales, skipped)
}

/// The issue's trace, measured with PyTorch 2.15's GradScaler.
#[test]
fn gradscaler_trace() {
    let scaling = LossScaling::Dynamic(DynamicScaling {
        growth_interval: 5,
        ..DynamicScaling::default()
    });
    let (scales, skipped) = run(scaling, &[3, 4, 17], 30);
    let mut expected = vec![65536.0, 65536.0, 32768.0];
    for (scale, n) in [
        (16384.0, 5),
        (32768.0, 5),
        (65536.0, 3),
        (32768.0, 5),
        (65536.0, 5),
    ] {
        expected.extend(std::iter::repeat_n(scale, n));
    }
    expected.extend(std::iter::repeat_n(131072.0, 4));
    assert_eq!(scales, expected);
    assert_eq!(skipped, vec![3, 4, 17]);
}

#[test]
fn hysteresis_backs_off_only_after_that_many_overflows() {
    let scaling = LossScaling::Dynamic(DynamicScaling {
        hysteresis: 2,
        growth_interval: 100,
        ..DynamicScaling::default()
    });
    // Megatron semantics: the budget is not restored by clean steps, only by growth.
    let (scales, skipped) = run(scaling, &[2, 5, 6], 6);
    assert_eq!(
        scales,
        vec![65536.0, 65536.0, 65536.0, 65536.0, 32768.0, 16384.0]
    );
    assert_eq!(skipped, vec![2, 5, 6]);
    let consecutive = LossScaling::Dynamic(DynamicScaling {
        hysteresis: 2,
        consecutive_hysteresis: true,
        growth_interval: 100,
        ..DynamicScaling::default()
    });
    let (scales, _) = run(consecutive, &[2, 5, 6], 6);
    assert_eq!(
        scales,
        vec![65536.0, 65536.0, 65536.0, 65536.0, 65536.0, 32768.0]
    );
}

/// Growth restores the hysteresis budget (Megatron-LM's `DynamicGradScaler.update`, in
/// `megatron/core/optimizer/grad_scaler.py`: `_hysteresis_tracker = hysteresis` when it grows):
/// with hysteresis 2 and growth every 3 clean steps, an overflow, 3 clean steps (growth), then
/// another overflow does not back off. Without the restore the second overflow would spend the
/// budget's last unit and halve the scale.
#[test]
fn growth_restores_the_hysteresis_budget() {
    let scaling = LossScaling::Dynamic(DynamicScaling {
        hysteresis: 2,
        growth_interval: 3,
        ..DynamicScaling::default()
    });
    let (scales, skipped) = run(scaling, &[1, 5], 6);
    assert_eq!(
        scales,
        vec![65536.0, 65536.0, 65536.0, 131072.0, 131072.0, 131072.0]
    );
    assert_eq!(skipped, vec![1, 5]);
}

#[test]
fn min_and_max_scale_clamp() {
    let scaling = LossScaling::Dynamic(DynamicScaling {
        init_scale: 4.0,
        growth_interval: 1,
        min_scale: 2.0,
        max_scale: Some(16.0),
        ..DynamicScaling::default()
    });
    let (scales, _) = run(scaling, &[1, 2, 3], 8);
    assert_eq!(scales, vec![2.0, 2.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0]);
}

#[test]
fn static_and_none() {
    let (scales, skipped) = run(LossScaling::Static { scale: 128.0 }, &[2], 3);
    assert_eq!(scales, vec![128.0; 3]);
    assert_eq!(skipped, vec![2]);
    let (scales, skipped) = run(LossScaling::None, &[2], 3);
    assert_eq!(scales, vec![1.0; 3]);
    assert!(skipped.is_empty());
}

#[test]
fn validation_names_the_bad_parameter() {
    assert!(LossScaling::Static { scale: 0.0 }.validate().is_err());
    let bad = LossScaling::Dynamic(DynamicScaling {
        backoff_factor: 2.0,
        ..DynamicScaling::default()
    });
    let msg = bad.validate().unwrap_err().to_string();
    assert!(msg.contains("backoff_factor"), "{msg}");
    assert!(
        LossScaling::Dynamic(DynamicScaling::default())
            .validate()
            .is_ok()
    );
    let json = serde_json::to_string(&LossScaling::Dynamic(DynamicScaling::default())).unwrap();
    assert!(json.contains("\"kind\":\"dynamic\""), "{json}");
    let back: LossScaling = serde_json::from_str(&json).unwrap();
    assert_eq!(back, LossScaling::Dynamic(DynamicScaling::default()));
    let partial: LossScaling =
        serde_json::from_str(r#"{"kind":"dynamic","growth_interval":5}"#).unwrap();
    assert!(matches!(partial, LossScaling::Dynamic(d) if d.growth_interval == 5));
}

/// Growth never makes the scale infinite: PyTorch keeps the last finite scale
/// (`AmpGradScalerKernels.cpp`: "Do not grow the scale past fp32 bounds to inf").
#[test]
fn growth_stops_at_the_largest_finite_scale() {
    let mut s = LossScaler::new(LossScaling::Dynamic(DynamicScaling {
        growth_interval: 1,
        ..DynamicScaling::default()
    }));
    for _ in 0..200 {
        assert!(!s.update(false).unwrap());
    }
    assert_eq!(s.scale(), 2f32.powi(127));
    // An overflow still backs off from there.
    assert!(s.update(true).unwrap());
    assert_eq!(s.scale(), 2f32.powi(126));
}

/// DeepSpeed's `DynamicLossScaler` raises when it must back off a scale already at
/// `min_loss_scale`; with the option off the run keeps going at the minimum.
#[test]
fn deepspeed_stops_at_the_minimum_scale_unless_told_not_to() {
    let at_floor = DynamicScaling {
        init_scale: 4.0,
        min_scale: 1.0,
        ..DynamicScaling::deepspeed()
    };
    let mut s = LossScaler::new(LossScaling::Dynamic(at_floor));
    // Hysteresis 2: overflows 1 and 2 reach the back-off (4 -> 2), 3 backs off to 1, 4 stops.
    for want in [4.0, 2.0, 1.0] {
        assert!(s.update(true).unwrap());
        assert_eq!(s.scale(), want);
    }
    let e = s.update(true).unwrap_err().to_string();
    assert!(
        e.contains("minimum (1)") && e.contains("stop_at_min_scale"),
        "{e}"
    );
    let mut going = LossScaler::new(LossScaling::Dynamic(DynamicScaling {
        stop_at_min_scale: false,
        ..at_floor
    }));
    for _ in 0..6 {
        assert!(going.update(true).unwrap());
    }
    assert_eq!(going.scale(), 1.0);
}

#[test]
fn presets_are_the_frameworks_defaults() {
    let m = DynamicScaling::megatron();
    assert_eq!(
        (m.init_scale, m.min_scale, m.growth_interval, m.hysteresis),
        (2f32.powi(32), 1.0, 1000, 2)
    );
    assert!(!m.stop_at_min_scale && m.growth_rule == GrowthRule::Tracker);
    let d = DynamicScaling::deepspeed();
    assert_eq!(
        (d.init_scale, d.min_scale, d.growth_interval, d.hysteresis),
        (65536.0, 1.0, 1000, 2)
    );
    assert!(d.stop_at_min_scale && d.growth_rule == GrowthRule::SinceOverflow);
    assert_eq!(DynamicScaling::grad_scaler(), DynamicScaling::default());
    for preset in [m, d] {
        let json = serde_json::to_string(&LossScaling::Dynamic(preset)).unwrap();
        let back: LossScaling = serde_json::from_str(&json).unwrap();
        assert_eq!(back, LossScaling::Dynamic(preset), "{json}");
    }
}

/// What one framework's scaler did on one step: the scale for the next step, or a stop.
type Outcome = Result<f64, ()>;

/// PyTorch's `_amp_update_scale_cpu_kernel` (`aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp`),
/// transcribed: the scale is an f32 tensor, the factors doubles.
struct TorchGradScaler {
    scale: f32,
    growth_tracker: i32,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i32,
}

impl TorchGradScaler {
    fn update(&mut self, found_inf: bool) -> Outcome {
        if found_inf {
            self.scale = (f64::from(self.scale) * self.backoff_factor) as f32;
            self.growth_tracker = 0;
        } else {
            let successful = self.growth_tracker + 1;
            if successful == self.growth_interval {
                let new_scale = (f64::from(self.scale) * self.growth_factor) as f32;
                if new_scale.is_finite() {
                    self.scale = new_scale;
                }
                self.growth_tracker = 0;
            } else {
                self.growth_tracker = successful;
            }
        }
        Ok(f64::from(self.scale))
    }
}

/// Megatron-LM's `DynamicGradScaler.update` (`megatron/core/optimizer/grad_scaler.py`),
/// transcribed: no finite check on growth, a hysteresis tracker that may go negative.
struct MegatronScaler {
    scale: f64,
    min_scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
    hysteresis: i64,
    growth_tracker: i64,
    hysteresis_tracker: i64,
}

impl MegatronScaler {
    fn update(&mut self, found_inf: bool) -> Outcome {
        if found_inf {
            self.growth_tracker = 0;
            self.hysteresis_tracker -= 1;
            if self.hysteresis_tracker <= 0 {
                self.scale = (self.scale * self.backoff_factor).max(self.min_scale);
            }
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.growth_tracker = 0;
                self.hysteresis_tracker = self.hysteresis;
                self.scale *= self.growth_factor;
            }
        }
        Ok(self.scale)
    }
}

/// DeepSpeed's `DynamicLossScaler.update_scale` (`deepspeed/runtime/fp16/loss_scaler.py`),
/// transcribed: `delayed_shift` is the hysteresis, the factor is 2, the scale a Python float.
struct DeepSpeedScaler {
    cur_scale: f64,
    cur_iter: i64,
    last_overflow_iter: i64,
    scale_window: i64,
    min_scale: f64,
    delayed_shift: i64,
    cur_hysteresis: i64,
    consecutive_hysteresis: bool,
    raise_error_at_min_scale: bool,
}

impl DeepSpeedScaler {
    fn update(&mut self, overflow: bool) -> Outcome {
        if overflow {
            if self.delayed_shift == 1 || self.cur_hysteresis == 1 {
                if self.cur_scale == self.min_scale && self.raise_error_at_min_scale {
                    return Err(());
                }
                self.cur_scale = (self.cur_scale / 2.0).max(self.min_scale);
            } else {
                self.cur_hysteresis -= 1;
            }
            self.last_overflow_iter = self.cur_iter;
        } else {
            if self.consecutive_hysteresis {
                self.cur_hysteresis = self.delayed_shift;
            }
            let stable_interval = (self.cur_iter - self.last_overflow_iter) - 1;
            if stable_interval > 0 && stable_interval % self.scale_window == 0 {
                if !self.consecutive_hysteresis {
                    self.cur_hysteresis = self.delayed_shift;
                }
                self.cur_scale *= 2.0;
            }
        }
        self.cur_iter += 1;
        Ok(self.cur_scale)
    }
}

/// A random overflow sequence: a rate per sequence (rare, frequent, most steps), with bursts.
fn overflows(rng: &mut Rng) -> Vec<bool> {
    let len = 1 + rng.below(300);
    let rate = [0.02, 0.1, 0.4, 0.8][rng.below(4)];
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let burst = if rng.uniform() < 0.1 {
            1 + rng.below(6)
        } else {
            1
        };
        let inf = rng.uniform() < rate;
        out.extend(std::iter::repeat_n(inf, burst));
    }
    out.truncate(len);
    out
}

/// Steps through `seq` with mixprec's scaler and a framework's, and returns the step where they
/// first differ, with both outcomes (until both stop, or the framework's scale leaves f32's
/// range). Every overflowing step, and only those, must be skipped.
fn first_difference(
    scaling: DynamicScaling,
    seq: &[bool],
    mut framework: impl FnMut(bool) -> Outcome,
) -> Option<(usize, Outcome, Outcome)> {
    let mut ours = LossScaler::new(LossScaling::Dynamic(scaling));
    for (i, &inf) in seq.iter().enumerate() {
        let theirs = framework(inf);
        let mine = ours.update(inf).map(|skipped| {
            assert_eq!(skipped, inf);
            f64::from(ours.scale())
        });
        if matches!(theirs, Ok(b) if b > f64::from(f32::MAX)) {
            // Megatron and DeepSpeed grow past f32 (there is no finite check); mixprec stops at
            // the last finite scale (PyTorch's rule), and the comparison ends there.
            assert!(matches!(mine, Ok(a) if a.is_finite()), "{mine:?}");
            return None;
        }
        let same = match (&mine, &theirs) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(())) => return None,
            _ => false,
        };
        if !same {
            return Some((i + 1, mine.map_err(|_| ()), theirs));
        }
    }
    None
}

const SEQUENCES: usize = 3000;

fn power_of_two(rng: &mut Rng, lo: i32, hi: i32) -> f32 {
    2f32.powi(lo + rng.below((hi - lo + 1) as usize) as i32)
}

/// On [`SEQUENCES`] random overflow sequences (from the generator seeded with `seed`), each
/// under a config that `config` draws before it, our scaler and the framework's transcription
/// (made from the config by `framework`, stepped by `update`) agree at every step.
fn agrees_on_random_sequences<F>(
    seed: u64,
    config: impl Fn(&mut Rng) -> DynamicScaling,
    framework: impl Fn(&DynamicScaling) -> F,
    update: fn(&mut F, bool) -> Outcome,
) {
    let mut rng = Rng::new(seed);
    for case in 0..SEQUENCES {
        let d = config(&mut rng);
        let seq = overflows(&mut rng);
        let mut theirs = framework(&d);
        let diff = first_difference(d, &seq, |inf| update(&mut theirs, inf));
        assert_eq!(diff, None, "case {case}: {d:?}");
    }
}

#[test]
fn matches_torch_gradscaler_on_random_overflow_sequences() {
    agrees_on_random_sequences(
        14,
        |rng| DynamicScaling {
            init_scale: power_of_two(rng, 0, 126),
            growth_interval: 1 + rng.below(6) as u32,
            ..DynamicScaling::grad_scaler()
        },
        |d| TorchGradScaler {
            scale: d.init_scale,
            growth_tracker: 0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: d.growth_interval as i32,
        },
        TorchGradScaler::update,
    );
}

#[test]
fn matches_megatron_on_random_overflow_sequences() {
    agrees_on_random_sequences(
        15,
        |rng| DynamicScaling {
            init_scale: power_of_two(rng, 4, 40),
            growth_interval: 1 + rng.below(6) as u32,
            hysteresis: 1 + rng.below(4) as u32,
            min_scale: power_of_two(rng, 0, 8),
            ..DynamicScaling::megatron()
        },
        |d| MegatronScaler {
            scale: f64::from(d.init_scale),
            min_scale: f64::from(d.min_scale),
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: i64::from(d.growth_interval),
            hysteresis: i64::from(d.hysteresis),
            growth_tracker: 0,
            hysteresis_tracker: i64::from(d.hysteresis),
        },
        MegatronScaler::update,
    );
}

#[test]
fn matches_deepspeed_on_random_overflow_sequences() {
    agrees_on_random_sequences(
        16,
        |rng| {
            let min_scale = power_of_two(rng, 0, 8);
            DynamicScaling {
                init_scale: min_scale * power_of_two(rng, 0, 12),
                growth_interval: 1 + rng.below(6) as u32,
                hysteresis: 1 + rng.below(4) as u32,
                consecutive_hysteresis: rng.uniform() < 0.5,
                min_scale,
                stop_at_min_scale: rng.uniform() < 0.5,
                ..DynamicScaling::deepspeed()
            }
        },
        |d| DeepSpeedScaler {
            cur_scale: f64::from(d.init_scale),
            cur_iter: 0,
            last_overflow_iter: -1,
            scale_window: i64::from(d.growth_interval),
            min_scale: f64::from(d.min_scale),
            delayed_shift: i64::from(d.hysteresis),
            cur_hysteresis: i64::from(d.hysteresis),
            consecutive_hysteresis: d.consecutive_hysteresis,
            raise_error_at_min_scale: d.stop_at_min_scale,
        },
        DeepSpeedScaler::update,
    );
}

/// The transcriptions tell the rules apart: a test that passed for any rule would prove nothing.
#[test]
fn the_three_rules_differ_where_the_frameworks_do() {
    // DeepSpeed grows at clean step W + 1, GradScaler at W.
    let seq = [false; 3];
    let d = DynamicScaling {
        growth_interval: 2,
        hysteresis: 1,
        min_scale: 1.0,
        ..DynamicScaling::deepspeed()
    };
    let mut torch = TorchGradScaler {
        scale: 65536.0,
        growth_tracker: 0,
        growth_factor: 2.0,
        backoff_factor: 0.5,
        growth_interval: 2,
    };
    assert_eq!(
        first_difference(d, &seq, |inf| torch.update(inf)),
        Some((2, Ok(65536.0), Ok(131072.0)))
    );
}

/// Keras's `LossScaleOptimizer` (`keras/src/optimizers/loss_scale_optimizer.py`,
/// `_stateful_handle_finite_grads` and `_stateful_handle_non_finite_grads`), transcribed: a
/// float32 scale, an int counter compared with `dynamic_growth_steps - 1` before it counts the
/// clean step, no floor and no finite check.
struct KerasScaler {
    dynamic_scale: f32,
    step_counter: i64,
    dynamic_growth_steps: i64,
}

impl KerasScaler {
    fn update(&mut self, non_finite: bool) -> Outcome {
        if non_finite {
            self.step_counter = 0;
            self.dynamic_scale *= 0.5;
        } else if self.step_counter == self.dynamic_growth_steps - 1 {
            self.step_counter = 0;
            self.dynamic_scale *= 2.0;
        } else {
            self.step_counter += 1;
        }
        Ok(f64::from(self.dynamic_scale))
    }
}

#[test]
fn matches_keras_on_random_overflow_sequences() {
    agrees_on_random_sequences(
        17,
        |rng| DynamicScaling {
            init_scale: power_of_two(rng, 0, 100),
            growth_interval: 1 + rng.below(6) as u32,
            ..DynamicScaling::keras()
        },
        |d| KerasScaler {
            dynamic_scale: d.init_scale,
            step_counter: 0,
            dynamic_growth_steps: i64::from(d.growth_interval),
        },
        KerasScaler::update,
    );
}
