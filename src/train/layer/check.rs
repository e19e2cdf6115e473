//! Finite-difference gradient checks in f64 (test support).
//!
//! For a layer `f` and a fixed random projection `r`, the scalar `L(x, θ) = Σ r ⊙ f(x; θ)` has
//! `dL/df = r`, so backward with `dy = r` must return `dL/dx` and set `dL/dθ`. Central differences
//! `(L(v + h) - L(v - h)) / 2h` with `h = 1e-6` have truncation error O(h²) and rounding error
//! O(ε/h) ≈ 1e-10, so a relative tolerance of 1e-6 separates a right gradient from a wrong one.

use ndarray::Array2;

use super::{Layer, Param};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::rng::Rng;

const H: f64 = 1e-6;
const TOL: f64 = 1e-6;

fn close(analytic: f64, numeric: f64) -> bool {
    (analytic - numeric).abs() <= TOL * (1.0 + analytic.abs().max(numeric.abs()))
}

/// A random matrix with entries in `[-1, 1]`.
pub fn random(shape: (usize, usize), rng: &mut Rng) -> Array2<f64> {
    Array2::from_shape_simple_fn(shape, || 2.0 * rng.uniform() - 1.0)
}

fn objective(layer: &mut dyn Layer<f64>, x: &Array2<f64>, r: &Array2<f64>) -> f64 {
    let mut p = Precision::exact();
    p.register("check");
    let y = layer.forward(x.clone(), &mut p);
    (&y * r).sum()
}

/// Checks `layer`'s input gradient and every parameter gradient at input `x`, and that
/// [`Layer::backward_params`] sets the same parameter gradients.
///
/// # Panics
/// When an analytic derivative and its central difference disagree.
pub fn check_layer(layer: &mut dyn Layer<f64>, x: &Array2<f64>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut p = Precision::exact();
    p.register("check");
    let y = layer.forward(x.clone(), &mut p);
    let r = random(y.dim(), &mut rng);
    let dx = layer.backward(r.clone(), &mut p);
    assert_eq!(dx.dim(), x.dim(), "{}: input gradient shape", layer.kind());
    for idx in 0..x.len() {
        let mut plus = x.clone();
        let mut minus = x.clone();
        plus.as_slice_mut().unwrap()[idx] += H;
        minus.as_slice_mut().unwrap()[idx] -= H;
        let numeric = (objective(layer, &plus, &r) - objective(layer, &minus, &r)) / (2.0 * H);
        let analytic = dx.as_slice().unwrap()[idx];
        assert!(
            close(analytic, numeric),
            "{}: dx[{idx}] analytic {analytic} numeric {numeric}",
            layer.kind()
        );
    }
    let grads: Vec<Array2<f64>> = layer.params().iter().map(|q| q.grad.clone()).collect();
    // A NaN in dy reaches the parameter gradients, and their WeightGrad store flags it (the loss
    // scaler's overflow check reads that flag instead of scanning the gradients again).
    if !layer.params().is_empty() {
        let mut nan = r.clone();
        nan[[0, 0]] = f64::NAN;
        layer.forward(x.clone(), &mut p);
        p.begin_step();
        layer.backward(nan, &mut p);
        let params = layer.params();
        for q in &params {
            let bad = |o: &&&Param<f64>| o.grad.iter().any(|v| !v.is_finite());
            let at_site = params.iter().filter(|o| o.site == q.site).any(|o| bad(&o));
            assert_eq!(
                p.stored_nonfinite(q.site, Class::WeightGrad),
                at_site,
                "{}: non-finite flag of {}",
                layer.kind(),
                q.name
            );
            assert!(at_site, "{}: NaN did not reach {}", layer.kind(), q.name);
        }
        layer.forward(x.clone(), &mut p);
        layer.backward(r.clone(), &mut p);
    }
    // The first-layer backward (no input gradient) sets the same parameter gradients.
    layer.forward(x.clone(), &mut p);
    layer.backward_params(r.clone(), &mut p);
    for (k, grad) in grads.iter().enumerate() {
        assert_eq!(
            &layer.params()[k].grad,
            grad,
            "{}: backward_params, param {k}",
            layer.kind()
        );
    }
    for (k, grad) in grads.iter().enumerate() {
        for idx in 0..grad.len() {
            let bump = |layer: &mut dyn Layer<f64>, d: f64| {
                let mut params = layer.params_mut();
                params[k].weight.as_slice_mut().unwrap()[idx] += d;
                params[k].master.as_slice_mut().unwrap()[idx] += d;
            };
            bump(layer, H);
            let lp = objective(layer, x, &r);
            bump(layer, -2.0 * H);
            let lm = objective(layer, x, &r);
            bump(layer, H);
            let numeric = (lp - lm) / (2.0 * H);
            let analytic = grad.as_slice().unwrap()[idx];
            assert!(
                close(analytic, numeric),
                "{}: param {k}[{idx}] analytic {analytic} numeric {numeric}",
                layer.kind()
            );
        }
    }
}
