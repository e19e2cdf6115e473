//! Elementwise activation functions.

use ndarray::{Array2, Zip};
use serde::{Deserialize, Serialize};

use super::Layer;
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::{Real, zip_chunks};

/// An elementwise nonlinearity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// `max(x, 0)`; derivative 1 for `x > 0`, else 0.
    #[default]
    Relu,
    /// `tanh x`; derivative `1 - y²`.
    Tanh,
    /// `1 / (1 + e^-x)`; derivative `y (1 - y)`.
    Sigmoid,
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`):
    /// ```text
    /// y  = x/2 (1 + tanh u),   u = √(2/π) (x + 0.044715 x³)
    /// y' = (1 + tanh u)/2 + x/2 (1 - tanh² u) √(2/π) (1 + 3·0.044715 x²)
    /// ```
    Gelu,
}

impl Activation {
    /// The kind name used in storage-point names.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::Gelu => "gelu",
        }
    }
}

const GELU_C: f64 = 0.044_715;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// A layer applying an [`Activation`]. Keeps its output (ReLU, tanh, sigmoid: the derivative is a
/// function of it) or its input (GELU).
#[derive(Clone, Debug)]
pub struct ActivationLayer<T> {
    activation: Activation,
    kept: Option<Array2<T>>,
}

impl<T: Real> ActivationLayer<T> {
    /// A layer applying `activation`.
    #[must_use]
    pub fn new(activation: Activation) -> Self {
        ActivationLayer {
            activation,
            kept: None,
        }
    }
}

impl<T: Real> Layer<T> for ActivationLayer<T> {
    fn kind(&self) -> &'static str {
        self.activation.name()
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        if self.activation == Activation::Relu && !p.rounds(Class::Activation) {
            return self.relu_unrounded(x, p);
        }
        let (half, one) = (T::of(0.5), T::one());
        let mut y = match self.activation {
            Activation::Relu => x.mapv(|v| if v > T::zero() { v } else { T::zero() }),
            Activation::Tanh => x.mapv(T::libm_tanh),
            Activation::Sigmoid => x.mapv(|v| one / (one + (-v).libm_exp())),
            Activation::Gelu => x.mapv(|v| {
                let u = T::of(SQRT_2_OVER_PI) * (v + T::of(GELU_C) * v * v * v);
                half * v * (one + u.libm_tanh())
            }),
        };
        p.store_array(Class::Activation, &mut y);
        self.kept = Some(if self.activation == Activation::Gelu {
            x
        } else {
            y.clone()
        });
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let Some(kept) = self.kept.as_ref() else {
            return dy;
        };
        let (half, one) = (T::of(0.5), T::one());
        let mut dx = dy;
        // One loop per function (the match outside), so that each vectorises.
        match self.activation {
            // A select, as PyTorch's threshold_backward: an inf gradient does not become NaN
            // through an inactive unit.
            Activation::Relu => combine(
                &mut dx,
                kept,
                |d, k| if k > T::zero() { d } else { T::zero() },
            ),
            Activation::Tanh => combine(&mut dx, kept, |d, k| d * (one - k * k)),
            Activation::Sigmoid => combine(&mut dx, kept, |d, k| d * (k * (one - k))),
            Activation::Gelu => combine(&mut dx, kept, |d, k| {
                let u = T::of(SQRT_2_OVER_PI) * (k + T::of(GELU_C) * k * k * k);
                let t = u.libm_tanh();
                d * (half * (one + t)
                    + half
                        * k
                        * (one - t * t)
                        * T::of(SQRT_2_OVER_PI)
                        * (one + T::of(3.0 * GELU_C) * k * k))
            }),
        }
        p.store_array(Class::ActivationGrad, &mut dx);
        dx
    }
}

impl<T: Real> ActivationLayer<T> {
    /// ReLU's forward pass where activations are not rounded: the output is positive exactly
    /// where the input is (it is the input there), so backward's select reads the input, kept
    /// without a copy of the output; and where the store would only check the output, it is
    /// checked as it is written.
    fn relu_unrounded(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let relu = |v: T| if v > T::zero() { v } else { T::zero() };
        let y = match x.as_slice() {
            Some(xs) if p.check_only(Class::Activation) => {
                let mut y = Array2::zeros(x.raw_dim());
                let bad = zip_chunks(
                    y.as_slice_mut().unwrap_or_default(),
                    xs,
                    |ys, xs| {
                        let mut bad = 0u64;
                        for (y, &v) in ys.iter_mut().zip(xs) {
                            *y = relu(v);
                            bad += u64::from(!y.is_finite());
                        }
                        bad
                    },
                    |a, b| a + b,
                );
                p.note_store(Class::Activation, xs.len(), bad);
                y
            }
            _ => {
                let mut y = x.mapv(relu);
                p.store_array(Class::Activation, &mut y);
                y
            }
        };
        self.kept = Some(x);
        y
    }
}

/// `d = f(d, k)` elementwise over `dx` and `kept` (on rayon's threads when they are long).
fn combine<T: Real>(dx: &mut Array2<T>, kept: &Array2<T>, f: impl Fn(T, T) -> T + Sync) {
    if dx.dim() == kept.dim()
        && let (Some(d), Some(k)) = (dx.as_slice_mut(), kept.as_slice())
    {
        let each = |d: &mut [T], k: &[T]| d.iter_mut().zip(k).for_each(|(d, &k)| *d = f(*d, k));
        return zip_chunks(d, k, each, |(), ()| ());
    }
    Zip::from(dx).and(kept).for_each(|d, &k| *d = f(*d, k));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::{check_layer, random};
    use crate::train::rng::Rng;

    #[test]
    fn gradient_checks() {
        let mut rng = Rng::new(5);
        for activation in [
            Activation::Relu,
            Activation::Tanh,
            Activation::Sigmoid,
            Activation::Gelu,
        ] {
            let mut x = random((4, 6), &mut rng).mapv(|v| 3.0 * v);
            // Keep ReLU inputs away from its kink, where the central difference is meaningless.
            x.mapv_inplace(|v| if v.abs() < 1e-3 { 0.5 } else { v });
            check_layer(&mut ActivationLayer::new(activation), &x, 6);
        }
    }

    #[test]
    fn gelu_values() {
        // PyTorch gelu(approximate="tanh") at -1, 0.5, 2.
        let mut p = Precision::exact();
        p.register("g");
        let x = ndarray::arr2(&[[-1.0f64, 0.5, 2.0]]);
        let y = ActivationLayer::new(Activation::Gelu).forward(x, &mut p);
        for (got, want) in y.iter().zip([
            -0.158_808_009_391_723_24,
            0.345_714_009_825_143_94,
            1.954_597_694_087_775,
        ]) {
            assert!((got - want).abs() < 1e-14, "{got} vs {want}");
        }
    }
}
