//! Tests of whole training steps: what each recipe rounds, loss scaling, learning.

use ndarray::{Array2, Axis};

use super::Trainer;
use crate::format::{BF16, FP32, FloatFormat, RoundOptions, Rounder};
use crate::recipe::Class;
use crate::recipe::{PRESET_NAMES, Recipe};
use crate::train::data::{Batches, Dataset, digits};
use crate::train::loss::{Loss, Targets};
use crate::train::model::MlpConfig;
use crate::train::optim::OptimizerConfig;
use crate::train::precision::Precision;
use crate::train::rng::Rng;

fn trainer(
    recipe: &Recipe,
    data: &Dataset,
    mlp: MlpConfig,
    optimizer: OptimizerConfig,
    seed: u64,
) -> Trainer {
    let mut p = Precision::new(recipe, seed);
    let input = p.register("input");
    let model = mlp.build(
        data.features(),
        data.classes,
        &mut p,
        &mut Rng::derive(seed, 1),
    );
    let loss_scaling = recipe.loss_scaling;
    Trainer::new(
        model,
        p,
        input,
        &optimizer,
        Loss::CrossEntropy,
        loss_scaling,
    )
}

/// The trainer scales the loss as the policy it is handed says, whatever the recipe its storage
/// points round under: the config's recipe, not `Precision`, sets the loss scaling.
#[test]
fn the_loss_scaling_handed_over_sets_the_scale() {
    let recipe = Recipe::preset("fp16-master").unwrap();
    let mut p = Precision::new(&recipe, 0);
    let input = p.register("input");
    let model = MlpConfig::default().build(4, 2, &mut p, &mut Rng::new(0));
    let sgd = OptimizerConfig::Sgd {
        lr: 0.1,
        momentum: 0.0,
    };
    let scaling = crate::scaling::scaler::LossScaling::Static { scale: 1024.0 };
    let t = Trainer::new(model, p, input, &sgd, Loss::CrossEntropy, scaling);
    assert_eq!(t.loss_scale(), 1024.0);
    assert_eq!(t.precision.recipe().loss_scaling, recipe.loss_scaling);
}

/// Trains for `steps` and returns the test accuracy and the trainer.
fn train(
    recipe: &Recipe,
    data: &Dataset,
    optimizer: OptimizerConfig,
    steps: usize,
    seed: u64,
) -> (f64, Trainer) {
    let mut t = trainer(recipe, data, MlpConfig::default(), optimizer, seed);
    let mut batches = Batches::new(data.train_y.len(), Rng::derive(seed, 2));
    for _ in 0..steps {
        let idx = batches.next_batch(128);
        let x = data.train_x.select(Axis(0), &idx);
        let y: Vec<usize> = idx.iter().map(|&i| data.train_y[i]).collect();
        t.step(&x, Targets::Labels(&y)).unwrap();
    }
    (t.accuracy(&data.test_x, &data.test_y), t)
}

fn representable(format: FloatFormat, xs: &Array2<f32>) -> bool {
    let r = Rounder::new(format, RoundOptions::default());
    xs.iter()
        .all(|&x| !x.is_finite() || r.round(f64::from(x)) == f64::from(x))
}

const ADAM: OptimizerConfig = OptimizerConfig::Adam {
    lr: 1e-3,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
};

#[test]
fn each_recipe_rounds_what_it_says() {
    let data = digits().unwrap();
    for name in PRESET_NAMES {
        let recipe = Recipe::preset(name).unwrap();
        let (_, mut t) = train(&recipe, &data, ADAM, 3, 0);
        let fp8 = recipe.fp8_scaling.is_some();
        for q in t.model.params() {
            // Per-tensor scaling stores x*scale in the format, so only unscaled recipes are
            // checked value by value here; `precision` tests the scaled path.
            if !fp8 {
                assert!(representable(recipe.weights, &q.weight), "{name}: weights");
                assert!(
                    representable(recipe.weight_grads, &q.grad),
                    "{name}: weight grads"
                );
            }
            assert!(
                representable(recipe.master_weights, &q.master),
                "{name}: master"
            );
            if recipe.master_weights != recipe.weights && q.name == "weight" {
                // A separate master copy holds values the storage format cannot.
                assert!(
                    !representable(recipe.weights, &q.master),
                    "{name}: master is not fp32"
                );
            }
        }
        let z = t.predict(&data.test_x);
        if !fp8 {
            assert!(representable(recipe.activations, &z), "{name}: activations");
        }
        // Nothing rounded what the recipe keeps in FP32: those values need more significant
        // bits than bf16's 8 (what is rounded to a format is checked against it above).
        let fine = |xs: &Array2<f32>| !representable(BF16, xs);
        let params = t.model.params();
        if recipe.weights == FP32 {
            assert!(params.iter().any(|q| fine(&q.weight)), "{name}: weights");
        }
        if recipe.weight_grads == FP32 {
            assert!(params.iter().any(|q| fine(&q.grad)), "{name}: weight grads");
        }
        if recipe.master_weights == FP32 {
            assert!(params.iter().any(|q| fine(&q.master)), "{name}: master");
        }
        if recipe.activations == FP32 {
            assert!(fine(&z), "{name}: activations");
        }
    }
}

#[test]
fn fp32_mlp_learns_digits_quickly() {
    // A short run in debug builds: well above chance (10%).
    let data = digits().unwrap();
    let (acc, _) = train(&Recipe::fp32(), &data, ADAM, 60, 0);
    assert!(acc > 0.85, "accuracy {acc}");
}

/// Acceptance 1: the fp32 MLP reaches at least 95% test accuracy on digits.
#[test]
#[cfg_attr(debug_assertions, ignore)]
fn acceptance_fp32_mlp_on_digits() {
    let data = digits().unwrap();
    let (acc, _) = train(&Recipe::fp32(), &data, ADAM, 800, 0);
    assert!(acc >= 0.95, "accuracy {acc}");
}

#[test]
fn loss_scaling_skips_overflowing_steps_and_records_where() {
    let data = digits().unwrap();
    let mut recipe = Recipe::preset("fp16-dynamic").unwrap();
    // A scale so large that the scaled loss gradient itself overflows fp16.
    if let crate::scaling::scaler::LossScaling::Dynamic(d) = &mut recipe.loss_scaling {
        d.init_scale = 2f32.powi(40);
    }
    let mut t = trainer(&recipe, &data, MlpConfig::default(), ADAM, 0);
    let x = data.train_x.slice(ndarray::s![..32, ..]).to_owned();
    let y = &data.train_y[..32];
    let before = t.model.params()[0].master.clone();
    let r = t.step(&x, Targets::Labels(y)).unwrap();
    assert!(r.overflow && r.skipped);
    assert_eq!(r.loss_scale, 2f64.powi(40));
    let site = r.first_nonfinite.unwrap();
    assert_eq!(
        (site.layer.as_str(), site.tensor),
        ("loss", Class::ActivationGrad)
    );
    assert_eq!(
        t.model.params()[0].master,
        before,
        "a skipped step changes nothing"
    );
    assert_eq!(t.loss_scale(), 2f32.powi(39));
    // Backing off until the gradients fit, then updating.
    let mut steps = 1;
    while t.step(&x, Targets::Labels(y)).unwrap().skipped {
        steps += 1;
        assert!(steps < 40);
    }
    assert_ne!(t.model.params()[0].master, before);
}

#[test]
fn same_seed_same_run() {
    let data = digits().unwrap();
    let recipe = Recipe::preset("fp16-dynamic").unwrap();
    let run = || {
        let mut t = trainer(&recipe, &data, MlpConfig::default(), ADAM, 7);
        let x = data.train_x.slice(ndarray::s![..64, ..]).to_owned();
        let y = data.train_y[..64].to_vec();
        (0..3)
            .map(|_| t.step(&x, Targets::Labels(&y)).unwrap().loss.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn inputs_are_stored_as_activations() {
    // fp16 input rounding is counted at the "input" site: 1/16 steps are exact, so nothing is
    // counted for digits; a tiny value underflows.
    let recipe = Recipe::preset("fp16-master").unwrap();
    let mut data = digits().unwrap();
    data.train_x[[0, 0]] = 1e-9;
    let mut t = trainer(&recipe, &data, MlpConfig::default(), ADAM, 0);
    let x = data.train_x.slice(ndarray::s![..2, ..]).to_owned();
    t.step(&x, Targets::Labels(&data.train_y[..2])).unwrap();
    assert_eq!(t.precision.counts(0, Class::Activation).underflow, 1);
}

#[test]
fn stochastic_rounding_is_seeded_and_differs_from_nearest() {
    let data = digits().unwrap();
    let x = data.train_x.slice(ndarray::s![..32, ..]).to_owned();
    let y = data.train_y[..32].to_vec();
    let losses = |rounding: crate::format::Rounding, seed: u64| {
        let mut recipe = Recipe::preset("bf16-master").unwrap();
        recipe.rounding = rounding;
        let mut t = trainer(
            &recipe,
            &data,
            MlpConfig {
                width: 32,
                ..MlpConfig::default()
            },
            ADAM,
            seed,
        );
        (0..3)
            .map(|_| t.step(&x, Targets::Labels(&y)).unwrap().loss.to_bits())
            .collect::<Vec<_>>()
    };
    use crate::format::Rounding::{NearestEven, Stochastic};
    assert_eq!(losses(Stochastic, 1), losses(Stochastic, 1));
    assert_ne!(losses(Stochastic, 1), losses(NearestEven, 1));
}

#[test]
fn storage_accumulation_trains_and_changes_the_result() {
    let data = digits().unwrap();
    let x = data.train_x.slice(ndarray::s![..16, ..]).to_owned();
    let y = data.train_y[..16].to_vec();
    let mlp = MlpConfig {
        width: 16,
        depth: 1,
        ..MlpConfig::default()
    };
    let run = |accumulation| {
        let mut recipe = Recipe::preset("fp16-master").unwrap();
        recipe.accumulation = accumulation;
        let mut t = trainer(&recipe, &data, mlp, ADAM, 0);
        t.step(&x, Targets::Labels(&y)).unwrap();
        t.step(&x, Targets::Labels(&y)).unwrap().loss
    };
    use crate::recipe::Accumulation;
    let (fast, slow) = (run(Accumulation::Fp32), run(Accumulation::Storage));
    assert!(
        slow.is_finite() && (fast - slow).abs() < 0.05,
        "{fast} {slow}"
    );
    assert_ne!(fast.to_bits(), slow.to_bits());
}

/// Loss scaling with SGD, which (unlike Adam) is not invariant to the gradient's scale: the
/// gradients must be divided by the scale before the update. With the scale 2^16 left in, the
/// first step alone moves the weights 65,536 times too far.
#[test]
fn loss_scaled_sgd_follows_fp32_sgd() {
    let data = digits().unwrap();
    let sgd = OptimizerConfig::Sgd {
        lr: 0.05,
        momentum: 0.9,
    };
    let (_, reference) = train(&Recipe::fp32(), &data, sgd, 5, 0);
    for name in [
        "fp16-static",
        "fp16-dynamic",
        "fp16-megatron",
        "fp16-deepspeed",
    ] {
        let mut recipe = Recipe::preset(name).unwrap();
        // Megatron starts at 2^32, which overflows fp16 for several steps; start where the
        // others do, so that all five steps update.
        if let crate::scaling::scaler::LossScaling::Dynamic(d) = &mut recipe.loss_scaling {
            d.init_scale = 65536.0;
        }
        let (_, t) = train(&recipe, &data, sgd, 5, 0);
        for (q, r) in t.model.params().iter().zip(reference.model.params()) {
            let worst = (&q.master - &r.master)
                .iter()
                .fold(0.0f32, |m, &d| m.max(d.abs()));
            // fp16 storage differs from fp32 by a few fp16 ulps of weights under 0.5 (2^-12);
            // an update 65,536 times too large moves them by far more.
            assert!(worst <= 1e-3, "{name} {}: {worst}", q.name);
        }
    }
}

/// GradScaler refuses to unscale FP16 gradients of FP16 weights; so does a recipe with loss
/// scaling and fp16 master weights, unless told to.
#[test]
fn loss_scaling_fp16_master_weights_needs_allow_fp16_unscale() {
    let mut recipe = Recipe::preset("fp16-pure").unwrap();
    assert!(recipe.validate().is_ok());
    recipe.loss_scaling = crate::scaling::scaler::LossScaling::Static { scale: 1024.0 };
    let e = recipe.validate().unwrap_err().to_string();
    assert!(e.contains("Attempting to unscale FP16 gradients"), "{e}");
    recipe.allow_fp16_unscale = true;
    assert!(recipe.validate().is_ok());
    assert!(Recipe::preset("fp16-static").unwrap().validate().is_ok());
}

/// `updates_lost` as a step reports it, with fp16 and with FP32 master weights: SGD with a
/// learning rate of 1e-15 makes every update smaller than half an f32 ulp of any weight above
/// about 1e-8 (the initial weights; biases start at 0, and any update moves a 0), so almost
/// every nonzero update is lost in either format. FP32 master weights count losses in their
/// own code path (`apply_update`), which no other step test reaches with a lost update.
#[test]
fn a_step_reports_updates_lost_with_fp32_and_fp16_master_weights() {
    let data = digits().unwrap();
    let sgd = OptimizerConfig::Sgd {
        lr: 1e-15,
        momentum: 0.0,
    };
    let x = data.train_x.slice(ndarray::s![..32, ..]).to_owned();
    let y = &data.train_y[..32];
    for name in ["fp32", "fp16-master", "fp16-pure"] {
        let mut t = trainer(
            &Recipe::preset(name).unwrap(),
            &data,
            MlpConfig::default(),
            sgd,
            0,
        );
        let r = t.step(&x, Targets::Labels(y)).unwrap();
        assert!(!r.skipped, "{name}");
        assert!(r.updates_lost > 0.8, "{name}: {}", r.updates_lost);
        // With a learning rate of 0.05 almost every update moves its weight.
        let mut t = trainer(
            &Recipe::preset(name).unwrap(),
            &data,
            MlpConfig::default(),
            OptimizerConfig::Sgd {
                lr: 0.05,
                momentum: 0.0,
            },
            0,
        );
        let r = t.step(&x, Targets::Labels(y)).unwrap();
        let most = if name == "fp16-pure" { 0.5 } else { 0.01 };
        assert!(r.updates_lost < most, "{name}: {}", r.updates_lost);
    }
}

/// Where a store would only check its values, the fp32 step checks them in the pass that writes
/// them (the bias add, ReLU, SGD's update and master weights) and ReLU keeps its input for
/// backward: the same weights, bit for bit, and the same record (but for the weight copy, which
/// only a capture stores) as the plain stores, which an observer (a capture on every step)
/// forces. Updates and inputs that overflow make every count
/// of non-finite values nonzero.
#[test]
fn fused_checks_record_what_the_stores_record() {
    let data = digits().unwrap();
    let recipe = Recipe::preset("fp32").unwrap();
    let x = data.train_x.slice(ndarray::s![..32, ..]).to_owned();
    let y = &data.train_y[..32];
    let mut inf = x.clone();
    inf[[3, 5]] = f32::INFINITY;
    for (lr, batches) in [(0.1, vec![&x, &x, &inf, &x]), (1e38, vec![&x, &x])] {
        let sgd = OptimizerConfig::Sgd { lr, momentum: 0.0 };
        let mut plain = trainer(&recipe, &data, MlpConfig::default(), sgd, 3);
        let mut fused = trainer(&recipe, &data, MlpConfig::default(), sgd, 3);
        for (i, &batch) in batches.iter().enumerate() {
            plain
                .precision
                .set_observer(Some(crate::train::capture::Observer::default()));
            let mut want = plain.step(batch, Targets::Labels(y)).unwrap();
            // A capture also stores (observes) the unrounded weight copy, which a step without
            // one leaves alone.
            want.counts.remove(&Class::Weight);
            let got = fused.step(batch, Targets::Labels(y)).unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "lr {lr}, step {i}");
            for (a, b) in fused.model.params().iter().zip(plain.model.params()) {
                let bits = |w: &Array2<f32>| w.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a.master), bits(&b.master), "lr {lr}, step {i}");
                assert_eq!(bits(&a.weight), bits(&b.weight), "lr {lr}, step {i}");
            }
        }
        let counts = fused.precision.class_counts();
        if lr > 1.0 {
            assert!(counts[&Class::Update].nonfinite > 0 && counts[&Class::Master].nonfinite > 0);
        }
    }
}

/// A capture (an observer on every step) changes no step record and no weight, for every preset
/// recipe: on capture steps the stores take their gradients' largest magnitude and their
/// finiteness from the histograms they form ([`crate::train::capture::Seen`]) instead of a pass
/// of their own. Inputs with an infinity make the gradients non-finite on one step.
#[test]
fn a_capture_changes_no_record() {
    let data = digits().unwrap();
    let x = data.train_x.slice(ndarray::s![..32, ..]).to_owned();
    let y = &data.train_y[..32];
    let mut inf = x.clone();
    inf[[3, 5]] = f32::INFINITY;
    let mut half = x.clone();
    half.mapv_inplace(|v| v * 0.5);
    let batches = [&x, &inf, &half, &x];
    for name in ["fp32", "fp16-dynamic", "bf16-master", "fp8-hybrid"] {
        let recipe = Recipe::preset(name).unwrap();
        let sgd = OptimizerConfig::Sgd {
            lr: 0.1,
            momentum: 0.0,
        };
        let mut seen = trainer(&recipe, &data, MlpConfig::default(), sgd, 3);
        let mut plain = trainer(&recipe, &data, MlpConfig::default(), sgd, 3);
        for (i, &batch) in batches.iter().enumerate() {
            seen.precision
                .set_observer(Some(crate::train::capture::Observer::default()));
            let mut got = seen.step(batch, Targets::Labels(y)).unwrap();
            let observer = seen.precision.take_observer().unwrap();
            assert!(!observer.values.is_empty(), "{name}, step {i}");
            let mut want = plain.step(batch, Targets::Labels(y)).unwrap();
            // A capture stores (observes) an unrounded weight copy, which a plain step leaves.
            if !seen.precision.rounds(Class::Weight) {
                got.counts.remove(&Class::Weight);
                want.counts.remove(&Class::Weight);
            }
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{name}, step {i}");
            for (a, b) in seen.model.params().iter().zip(plain.model.params()) {
                let bits = |w: &Array2<f32>| w.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a.master), bits(&b.master), "{name}, step {i}");
            }
        }
    }
}
