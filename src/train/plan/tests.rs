use super::*;

fn config() -> TrainConfig {
    TrainConfig {
        steps: 4,
        batch: 32,
        mlp: crate::train::model::MlpConfig {
            width: 32,
            ..Default::default()
        },
        ..TrainConfig::default()
    }
}

/// The same seed gives the same numbers; each layer's FLOPs are its products' `2 m n k`.
#[test]
fn sensitivity_is_reproducible_and_counts_the_products() {
    let nvfp4 = Recipe::preset("nvfp4").unwrap();
    let a = Probe::new(&config(), 2)
        .unwrap()
        .sensitivity(&nvfp4)
        .unwrap();
    let b = Probe::new(&config(), 2)
        .unwrap()
        .sensitivity(&nvfp4)
        .unwrap();
    assert_eq!(a, b);
    let flops = |layer: &str| a.layers.iter().find(|l| l.layer == layer).unwrap().flops;
    // digits: 64 features, 10 classes; batch 32, width 32. The first layer forms no input
    // gradient (two products), the others three.
    assert_eq!(flops("0.linear"), 2 * 2 * 32 * 64 * 32);
    assert_eq!(flops("2.linear"), 3 * 2 * 32 * 32 * 32);
    assert_eq!(flops("4.linear"), 3 * 2 * 32 * 32 * 10);
    assert!(
        a.layers
            .windows(2)
            .all(|w| w[0].harm.grad_rel_err >= w[1].harm.grad_rel_err)
    );
    assert!(a.all.grad_rel_err > 0.0 && a.all.grad_cosine < 1.0);
    // Another seed, other weights and batches: other numbers.
    let c = Probe::new(
        &TrainConfig {
            seed: 1,
            ..config()
        },
        2,
    )
    .unwrap()
    .sensitivity(&nvfp4)
    .unwrap();
    assert_ne!(a.all, c.all);
}

/// A layer's entry is what casting that layer, and only it, does: the same numbers as a recipe
/// that keeps every other product layer (and nothing else) in FP32, and not those of another
/// layer.
#[test]
fn each_layer_is_measured_cast_alone() {
    let nvfp4 = Recipe::preset("nvfp4").unwrap();
    let probe = Probe::new(&config(), 2).unwrap();
    let s = probe.sensitivity(&nvfp4).unwrap();
    for layer in ["0.linear", "2.linear", "4.linear"] {
        let others: Vec<(String, Recipe)> = ["0.linear", "2.linear", "4.linear"]
            .into_iter()
            .filter(|l| *l != layer)
            .map(|l| (l.to_string(), Recipe::fp32()))
            .collect();
        let alone = Recipe {
            keep: Keep(others),
            ..nvfp4.clone()
        };
        let want = probe.harm(&alone, &[layer]).unwrap();
        let got = s.layers.iter().find(|l| l.layer == layer).unwrap();
        assert_eq!(got.harm, want, "{layer}");
        assert!(want.grad_rel_err > 0.0, "{layer}");
    }
    let errs: Vec<f64> = s.layers.iter().map(|l| l.harm.grad_rel_err).collect();
    assert!(errs.windows(2).all(|w| w[0] != w[1]), "{errs:?}");
}

/// The budget decides: a FLOPs share of 1 casts every layer (the plan's recipe is the cast
/// recipe), an error budget of 0 casts none (every layer kept), and the path is measured.
#[test]
fn the_budget_decides_how_far_the_plan_casts() {
    let nvfp4 = Recipe::preset("nvfp4").unwrap();
    let probe = Probe::new(&config(), 2).unwrap();
    let s = probe.sensitivity(&nvfp4).unwrap();
    let fp32 = Recipe::fp32();
    let (all, recipe) = probe
        .plan(&s, &nvfp4, &fp32, Budget::FlopsShare(1.0))
        .unwrap();
    assert_eq!(
        (all.cast.len(), all.keep.len(), all.flops_share),
        (3, 0, 1.0)
    );
    assert_eq!(recipe, nvfp4);
    // Least harmful first.
    let least = s.layers.last().unwrap().layer.clone();
    assert_eq!(all.cast[0], least);
    assert_eq!(all.grad_rel_err, s.all.grad_rel_err);
    let (none, recipe) = probe
        .plan(&s, &nvfp4, &fp32, Budget::MaxGradError(0.0))
        .unwrap();
    assert!(none.cast.is_empty() && none.flops_share == 0.0);
    assert_eq!(none.steps.len(), 1);
    assert_eq!(recipe.keep.0.len(), 3);
    assert_eq!(recipe.name, "nvfp4-plan");
}
