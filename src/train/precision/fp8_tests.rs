//! Delayed fp8 scaling against Transformer Engine's update rule (`delayed_scaling.cu`), one
//! history per tensor, and what the TE recipe casts in each layer type.

use crate::scaling::delayed::AmaxComputeAlgo;
use ndarray::Array2;

use super::*;
use crate::format::{FP8_E4M3, FP8_E5M2, RoundOptions, Rounder};
use crate::recipe::Recipe;
use crate::scaling::delayed::Fp8Scaling;
use crate::train::Rng;
use crate::train::layer::{Conv2d, Embedding, ImageShape, Layer, LayerNorm, Linear, Lstm, Param};

fn every_store(scaling: Fp8Scaling) -> Precision {
    let mut recipe = Recipe::preset("fp8-every-store").unwrap();
    recipe.fp8_scaling = Some(scaling);
    Precision::new(&recipe, 0)
}

/// Stores one activation tensor of amax `amax` (and a zero) per step, and returns the scale
/// each step used.
fn scales_used(p: &mut Precision, amaxes: &[f32]) -> Vec<f32> {
    let l = p.register("l");
    let key = SiteKey::new(l, Class::Activation, "");
    amaxes
        .iter()
        .map(|&a| {
            p.begin_step();
            let used = p.fp8_scale(key, "").map_or(1.0, |(s, _)| s);
            p.enter(l);
            p.store(Class::Activation, &mut [a, 0.0, -a / 2.0]);
            used
        })
        .collect()
}

/// A spike, a zero step and an inf, with a history of 3 steps; the values are worked out by hand
/// from TE's rule (E4M3's max is 448):
/// step 1 uses 1 (no history) and leaves [2] -> 224; step 2 is all zeros: no change; the spike 8
/// gives [2, 8] -> 56, kept while 8 is in the window ([2, 8, 1], [8, 1, 1]); [1, 1, 1] -> 448;
/// 4 -> 112; inf -> [1, 4, inf]: the previous scale stays (112) until the inf leaves the window,
/// then [2, 2, 2] -> 224.
#[test]
fn te_update_rule_on_a_scripted_sequence() {
    let mut p = every_store(Fp8Scaling {
        amax_history_len: 3,
        ..Fp8Scaling::default()
    });
    let inf = f32::INFINITY;
    let amaxes = [2.0, 0.0, 8.0, 1.0, 1.0, 1.0, 4.0, inf, 2.0, 2.0, 2.0, 1.0];
    let want = [
        1.0, 224.0, 224.0, 56.0, 56.0, 56.0, 448.0, 112.0, 112.0, 112.0, 112.0, 224.0,
    ];
    assert_eq!(scales_used(&mut p, &amaxes), want);
    // most_recent: the last step's amax alone; inf and 0 keep the previous scale.
    let mut p = every_store(Fp8Scaling {
        amax_compute_algo: AmaxComputeAlgo::MostRecent,
        ..Fp8Scaling::default()
    });
    let amaxes = [2.0, 8.0, 1.0, inf, 0.0, 4.0, 4.0];
    let want = [1.0, 224.0, 56.0, 448.0, 448.0, 448.0, 112.0];
    assert_eq!(scales_used(&mut p, &amaxes), want);
}

/// TE's defaults: a history of 1024 steps, `max`, margin 0.
#[test]
fn defaults_are_te_defaults_and_each_setting_matters() {
    let d = Fp8Scaling::default();
    assert_eq!(
        (d.amax_history_len, d.margin, d.amax_compute_algo),
        (1024, 0, AmaxComputeAlgo::Max)
    );
    let r = Recipe::preset("fp8-hybrid").unwrap();
    assert_eq!(r.fp8_scaling, Some(d));
    // A spike 8 then 1000 steps of 1: the default window still holds the spike.
    let mut amaxes = vec![8.0];
    amaxes.extend(std::iter::repeat_n(1.0, 1000));
    let used = scales_used(&mut every_store(d), &amaxes);
    assert_eq!(used[1000], 56.0);
    // The window's length is used: 1,000 steps later a history of 16 forgot the spike.
    let short = Fp8Scaling {
        amax_history_len: 16,
        ..d
    };
    assert_eq!(scales_used(&mut every_store(short), &amaxes)[1000], 448.0);
    // A history of one step still scales (from the last step alone).
    let one = Fp8Scaling {
        amax_history_len: 1,
        ..d
    };
    assert_eq!(
        scales_used(&mut every_store(one), &[8.0, 1.0, 1.0]),
        [1.0, 56.0, 448.0]
    );
    // The margin halves the scale per unit.
    let margin = Fp8Scaling { margin: 1, ..d };
    assert_eq!(
        scales_used(&mut every_store(margin), &[2.0, 2.0]),
        [1.0, 112.0]
    );
    // The history's names in a recipe file: TE's, and the old one.
    let j: Fp8Scaling =
        serde_json::from_str(r#"{"history": 5, "amax_compute_algo": "most_recent"}"#).unwrap();
    assert_eq!(j.amax_history_len, 5);
    assert_eq!(j.amax_compute_algo, AmaxComputeAlgo::MostRecent);
}

/// An amax so small that fp8_max / amax overflows f32 gives f32::MAX (TE), not inf: zeros stay
/// zeros (0 * inf would be NaN) and the tiny values survive.
#[test]
fn a_tiny_amax_clamps_the_scale_to_f32_max() {
    let mut p = every_store(Fp8Scaling::default());
    let l = p.register("l");
    p.enter(l);
    p.store(Class::Activation, &mut [1e-38f32, 0.0]);
    p.begin_step();
    assert_eq!(
        p.fp8_scale(SiteKey::new(l, Class::Activation, ""), ""),
        Some((f32::MAX, vec![1e-38]))
    );
    p.enter(l);
    let mut xs = [1e-38f32, 0.0, -5e-39];
    p.store(Class::Activation, &mut xs);
    assert_eq!(xs[1], 0.0);
    assert!((xs[0] / 1e-38 - 1.0).abs() < 0.07, "{xs:?}");
    assert!((xs[2] / -5e-39 - 1.0).abs() < 0.07, "{xs:?}");
}

/// The stored value is round(x * scale) / scale with the scale from earlier steps.
#[test]
fn a_store_rounds_with_the_tensor_scale() {
    let mut p = every_store(Fp8Scaling::default());
    let l = p.register("l");
    p.enter(l);
    // First step: scale 1; E4M3's smallest subnormal is 2^-9, so 1e-4 underflows.
    let mut first = [1e-4f32, 1e-3];
    p.store(Class::Activation, &mut first);
    assert_eq!(first[0], 0.0);
    p.begin_step();
    p.enter(l);
    let mut second = [1e-4f32, 1e-3];
    p.store(Class::Activation, &mut second);
    let scale = 448.0f32 / 1e-3;
    let r = Rounder::new(FP8_E4M3, RoundOptions::default());
    for (got, x) in second.iter().zip([1e-4f32, 1e-3]) {
        let want = r.round(f64::from(x * scale)) as f32 * (1.0 / scale);
        assert_eq!(*got, want);
    }
}

/// One history per tensor (a Linear's weight and bias apart), one entry per step (several stores
/// in a step merged by max), as TE's one amax_history row per tensor.
#[test]
fn one_history_per_tensor_and_one_entry_per_step() {
    let mut p = every_store(Fp8Scaling::default());
    let l = p.register("l");
    let mut weight = Param::new("weight", l, Array2::from_elem((1, 2), 100.0f32));
    let mut bias = Param::new("bias", l, Array2::from_elem((1, 1), 0.01f32));
    for _ in 0..2 {
        p.begin_step();
        for (param, value) in [(&mut weight, 100.0), (&mut bias, 0.01)] {
            param.master.fill(value);
            param.sync(&mut p);
        }
    }
    // Sharing the weight's scale 4.48 the bias would be stored as 0.00959.
    assert!(
        (bias.weight[[0, 0]] / 0.01 - 1.0).abs() < 0.01,
        "{}",
        bias.weight
    );
    let key = SiteKey::new(l, Class::Weight, "");
    assert_eq!(p.fp8_scale(key, "weight").unwrap().0, 4.48);
    assert_eq!(p.fp8_scale(key, "bias").unwrap().0, 448.0 / 0.01);
    // Three stores in one step: one history entry, their max.
    p.begin_step();
    p.enter(l);
    for a in [1.0f32, 3.0, 2.0] {
        p.store(Class::Activation, &mut [a]);
    }
    p.begin_step();
    assert_eq!(
        p.fp8_scale(SiteKey::new(l, Class::Activation, ""), ""),
        Some((448.0 / 3.0, vec![3.0]))
    );
}

/// Evaluation passes use the scales and leave the histories alone.
#[test]
fn stores_not_recorded_leave_the_history() {
    let mut p = every_store(Fp8Scaling::default());
    let l = p.register("l");
    p.enter(l);
    p.store(Class::Activation, &mut [2.0f32]);
    p.set_recording(false);
    p.store(Class::Activation, &mut [100.0f32]);
    p.set_recording(true);
    p.begin_step();
    assert_eq!(
        p.fp8_scale(SiteKey::new(l, Class::Activation, ""), ""),
        Some((224.0, vec![2.0]))
    );
}

/// A tensor an fp8 recipe casts: its class and name.
type Cast = (Class, &'static str);

/// A layer, its input width and the tensors the TE recipe casts in it.
type LayerCase = (Box<dyn Layer<f32>>, usize, &'static [Cast]);

/// Which tensors each layer type casts to which format under the TE recipe (`fp8-hybrid`),
/// against the table from TE's Linear (`linear.py`, `_get_quantizers`: input and weight with the
/// forward (E4M3) quantizers, the output gradient with the backward (E5M2) one; no quantizer for
/// the output, the weight gradient, the bias), and what `fp8-every-store` casts instead.
#[test]
fn what_the_te_recipe_casts_in_each_layer() {
    let te = Recipe::preset("fp8-hybrid").unwrap();
    let mut rng = Rng::new(5);
    const GEMM: [Cast; 3] = [
        (Class::GemmInput, "input"),
        (Class::GemmWeight, "weight"),
        (Class::GemmGradOutput, "grad_output"),
    ];
    const LSTM: [Cast; 5] = [
        (Class::GemmInput, "hidden"),
        (Class::GemmInput, "input"),
        (Class::GemmWeight, "weight_hh"),
        (Class::GemmWeight, "weight_ih"),
        (Class::GemmGradOutput, "grad_output"),
    ];
    let mut layers: Vec<LayerCase> = vec![
        (Box::new(Linear::new(3, 4, 1.0, 0, &mut rng)), 3, &GEMM),
        (
            Box::new(Conv2d::new(
                ImageShape {
                    channels: 1,
                    height: 4,
                    width: 4,
                },
                2,
                3,
                1,
                1.0,
                0,
                &mut rng,
            )),
            16,
            &GEMM,
        ),
        (Box::new(Lstm::new(2, 3, 1.0, 0, &mut rng)), 4, &LSTM),
        (Box::new(Embedding::new(5, 2, 1.0, 0, &mut rng)), 2, &[]),
        (Box::new(LayerNorm::new(3, 0)), 3, &[]),
    ];
    for (layer, inputs, want) in &mut layers {
        let mut p = Precision::new(&te, 0);
        let site = p.register(layer.kind());
        for param in layer.params_mut() {
            param.sync(&mut p);
        }
        p.enter(site);
        let x = Array2::from_shape_fn((2, *inputs), |(i, j)| ((i + j) % 4) as f32 * 0.5);
        let y = layer.forward(x, &mut p);
        p.enter(site);
        let _ = layer.backward(Array2::ones(y.dim()), &mut p);
        let got: Vec<(Class, &str)> = p.fp8_tensors().map(|(k, t)| (k.class, t)).collect();
        assert_eq!(got, want.to_vec(), "{}", layer.kind());
        for (class, _) in got {
            let format = te.format(class);
            let hybrid = if class == Class::GemmGradOutput {
                FP8_E5M2
            } else {
                FP8_E4M3
            };
            assert_eq!(format, hybrid, "{class:?}");
        }
        for class in Class::ALL {
            let operand = [Class::GemmInput, Class::GemmWeight, Class::GemmGradOutput];
            assert_eq!(p.rounds(class), operand.contains(&class), "{class:?}");
        }
    }
    // The old recipe: every stored tensor of a Linear, weight and bias apart.
    let mut p = Precision::new(&Recipe::preset("fp8-every-store").unwrap(), 0);
    let site = p.register("linear");
    let mut linear = Linear::<f32>::new(3, 4, 1.0, site, &mut rng);
    for param in linear.params_mut() {
        param.sync(&mut p);
    }
    p.enter(site);
    let y = linear.forward(Array2::ones((2, 3)), &mut p);
    let _ = linear.backward(Array2::ones(y.dim()), &mut p);
    let got: Vec<(Class, &str)> = p.fp8_tensors().map(|(k, t)| (k.class, t)).collect();
    assert_eq!(
        got,
        [
            (Class::Weight, "bias"),
            (Class::Weight, "weight"),
            (Class::Activation, ""),
            (Class::ActivationGrad, ""),
            (Class::WeightGrad, "bias"),
            (Class::WeightGrad, "weight"),
        ]
    );
}
