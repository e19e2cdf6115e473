//! Losses, each returning the mean loss and its gradient with respect to the network's output.
//!
//! They run in FP32 unless the recipe's [`crate::recipe::Fp32Ops`] says otherwise; the caller
//! multiplies the gradient by the loss scale and stores it as an activation gradient.

use ndarray::{Array2, Axis, Zip};
use serde::{Deserialize, Serialize};

use super::precision::Precision;
use super::real::Real;
use crate::error::Error;
use crate::recipe::Class;

/// A loss function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Loss {
    /// Softmax cross-entropy fused with log-softmax, on integer labels:
    /// ```text
    /// L = 1/N Σ_i (logsumexp(z_i) - z_i[y_i])        dL/dz_i = (softmax(z_i) - onehot(y_i)) / N
    /// ```
    #[default]
    CrossEntropy,
    /// Mean squared error over all N·D outputs: `L = mean (z - t)²`, `dL/dz = 2 (z - t) / (N D)`.
    Mse,
    /// Binary cross-entropy on logits, over all N·D outputs:
    /// ```text
    /// L = mean (max(z, 0) - z t + ln(1 + e^-|z|))     dL/dz = (σ(z) - t) / (N D)
    /// ```
    BceWithLogits,
}

/// What the network's output is compared with.
#[derive(Clone, Copy, Debug)]
pub enum Targets<'a, T> {
    /// One class index per row (cross-entropy).
    Labels(&'a [usize]),
    /// A matrix of the output's shape (MSE, BCE).
    Values(&'a Array2<T>),
}

impl Loss {
    /// The mean loss of `z` against `targets` and its gradient with respect to `z`.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] when the targets do not fit the loss (labels for MSE, a label out
    /// of range, a shape mismatch).
    pub fn evaluate<T: Real>(
        self,
        z: &Array2<T>,
        targets: Targets<'_, T>,
        p: &mut Precision,
    ) -> crate::Result<(f64, Array2<T>)> {
        let bad = |value: String, expected: &'static str| Error::InvalidValue {
            what: "targets",
            value,
            expected,
        };
        let (loss, grad) = match (self, targets) {
            (Loss::CrossEntropy, Targets::Labels(labels)) => {
                if labels.len() != z.nrows() {
                    return Err(bad(
                        format!("{} labels for {} rows", labels.len(), z.nrows()),
                        "one label per row",
                    ));
                }
                if let Some(&l) = labels.iter().find(|&&l| l >= z.ncols()) {
                    return Err(bad(
                        format!("label {l}"),
                        "a class index below the output width",
                    ));
                }
                cross_entropy(z, labels, p)
            }
            (Loss::Mse | Loss::BceWithLogits, Targets::Values(t)) => {
                if t.dim() != z.dim() {
                    return Err(bad(
                        format!("shape {:?} for output {:?}", t.dim(), z.dim()),
                        "the output's shape",
                    ));
                }
                let scale = T::one() / T::of(z.len().max(1) as f64);
                let mut grad = Array2::zeros(z.dim());
                let mut total = 0.0f64;
                Zip::from(&mut grad).and(z).and(t).for_each(|g, &zi, &ti| {
                    if self == Loss::Mse {
                        let d = zi - ti;
                        total += (d * d).to_f64();
                        *g = T::of(2.0) * d * scale;
                    } else {
                        let softplus = (T::one() + (-zi.abs()).libm_exp()).libm_ln();
                        total += (zi.max(T::zero()) - zi * ti + softplus).to_f64();
                        *g = (T::one() / (T::one() + (-zi).libm_exp()) - ti) * scale;
                    }
                });
                (total / z.len().max(1) as f64, grad)
            }
            (Loss::CrossEntropy, Targets::Values(_)) => {
                return Err(bad(
                    "a value matrix".into(),
                    "integer labels for cross-entropy",
                ));
            }
            (_, Targets::Labels(_)) => {
                return Err(bad(
                    "integer labels".into(),
                    "a value matrix for mse and bce",
                ));
            }
        };
        let loss = if p.recipe().fp32_ops.loss {
            loss
        } else {
            p.store_scalar(Class::Activation, T::of(loss)).to_f64()
        };
        Ok((loss, grad))
    }
}

fn cross_entropy<T: Real>(z: &Array2<T>, labels: &[usize], p: &mut Precision) -> (f64, Array2<T>) {
    let n = T::of(z.nrows().max(1) as f64);
    // log-softmax, stabilised by the row maximum.
    let mut logp = z.clone();
    for mut row in logp.axis_iter_mut(Axis(0)) {
        let m = row.fold(T::neg_infinity(), |a, &b| a.max(b));
        let lse = m + row.iter().map(|&v| (v - m).libm_exp()).sum::<T>().libm_ln();
        row.mapv_inplace(|v| v - lse);
    }
    let low_precision_softmax = !p.recipe().fp32_ops.softmax;
    if low_precision_softmax {
        p.store_array(Class::Activation, &mut logp);
    }
    let mut probs = logp.mapv(T::exp);
    if low_precision_softmax {
        p.store_array(Class::Activation, &mut probs);
    }
    let mut total = 0.0f64;
    for (i, &label) in labels.iter().enumerate() {
        total -= logp[[i, label]].to_f64();
        probs[[i, label]] -= T::one();
    }
    probs.mapv_inplace(|v| v / n);
    (total / labels.len().max(1) as f64, probs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::random;
    use crate::train::rng::Rng;

    fn check(loss: Loss, z: &Array2<f64>, targets: Targets<'_, f64>) {
        let mut p = Precision::exact();
        p.register("loss");
        let (_, grad) = loss.evaluate(z, targets, &mut p).unwrap();
        let h = 1e-6;
        for idx in 0..z.len() {
            let mut plus = z.clone();
            let mut minus = z.clone();
            plus.as_slice_mut().unwrap()[idx] += h;
            minus.as_slice_mut().unwrap()[idx] -= h;
            let lp = loss.evaluate(&plus, targets, &mut p).unwrap().0;
            let lm = loss.evaluate(&minus, targets, &mut p).unwrap().0;
            let numeric = (lp - lm) / (2.0 * h);
            let analytic = grad.as_slice().unwrap()[idx];
            assert!(
                (analytic - numeric).abs() < 1e-7 * (1.0 + numeric.abs()),
                "{loss:?}[{idx}]: {analytic} vs {numeric}"
            );
        }
    }

    #[test]
    fn gradient_checks() {
        let mut rng = Rng::new(8);
        let z = random((5, 4), &mut rng).mapv(|v| 4.0 * v);
        check(Loss::CrossEntropy, &z, Targets::Labels(&[0, 3, 1, 1, 2]));
        let t = random((5, 4), &mut rng);
        check(Loss::Mse, &z, Targets::Values(&t));
        let t01 = t.mapv(|v| (v + 1.0) / 2.0);
        check(Loss::BceWithLogits, &z, Targets::Values(&t01));
    }

    #[test]
    fn cross_entropy_values_and_stability() {
        let mut p = Precision::exact();
        p.register("loss");
        // Uniform logits: loss ln C. Huge logits must not overflow.
        let z = Array2::from_elem((2, 4), 1000.0f64);
        let (l, _) = Loss::CrossEntropy
            .evaluate(&z, Targets::Labels(&[0, 1]), &mut p)
            .unwrap();
        assert!((l - 4f64.ln()).abs() < 1e-12);
        let bce = Loss::BceWithLogits.evaluate(
            &Array2::from_elem((1, 1), -800.0f64),
            Targets::Values(&Array2::zeros((1, 1))),
            &mut p,
        );
        assert!(bce.unwrap().0.abs() < 1e-300);
    }

    #[test]
    fn fp32_ops_policy_decides_what_the_loss_rounds() {
        use crate::recipe::Recipe;
        let z = ndarray::arr2(&[[0.1f32, 0.2, 0.3], [1.0, -1.0, 0.5]]);
        let run = |softmax: bool, loss: bool| {
            let mut recipe = Recipe::preset("fp16-master").unwrap();
            recipe.fp32_ops.softmax = softmax;
            recipe.fp32_ops.loss = loss;
            let mut p = Precision::new(&recipe, 0);
            let site = p.register("loss");
            p.enter(site);
            let (l, g) = Loss::CrossEntropy
                .evaluate(&z, Targets::Labels(&[2, 0]), &mut p)
                .unwrap();
            (l, g, p)
        };
        let (l32, g32, _) = run(true, true);
        let (l16, g16, _) = run(false, false);
        let r = crate::format::Rounder::new(crate::format::FP16, Default::default());
        // By default neither the loss nor the softmax is rounded; with the policy off the loss is an
        // fp16 value and the gradient is built from fp16 probabilities.
        assert_ne!(r.round(l32), l32);
        assert_eq!(r.round(l16), l16);
        assert_ne!(g32, g16);
        assert!((l32 - l16).abs() < 1e-3);
    }

    #[test]
    fn mismatched_targets_are_errors() {
        let mut p = Precision::exact();
        let z = Array2::<f64>::zeros((2, 3));
        let values = Array2::zeros((3, 2));
        for (loss, targets) in [
            (Loss::CrossEntropy, Targets::Labels(&[0, 3])),
            (Loss::CrossEntropy, Targets::Labels(&[0])),
            (Loss::Mse, Targets::Labels(&[0, 1])),
            (Loss::Mse, Targets::Values(&values)),
        ] {
            assert!(loss.evaluate(&z, targets, &mut p).is_err(), "{loss:?}");
        }
    }
}
