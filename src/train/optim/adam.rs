//! Adam.

use ndarray::{Array2, Zip};

use super::{Optimizer, UpdateStats, apply_update, unscaled};
use crate::recipe::Class;
use crate::train::layer::Param;
use crate::train::precision::Precision;
use crate::train::real::Real;

/// Adam with PyTorch's bias correction; every intermediate the optimizer keeps is stored in the
/// optimizer-state format, epsilon included (so in fp16 an epsilon of 1e-8 is stored as 0 and
/// counted as an underflow at the layer's optimizer-state storage point):
/// ```text
/// m = β₁ m + (1 - β₁) g          v = β₂ v + (1 - β₂) g²          (both stored)
/// m̂ = m / (1 - β₁ᵗ)              v̂ = v / (1 - β₂ᵗ)
/// denom = √v̂ + round(eps)        (stored)
/// update = -lr m̂ / denom
/// ```
#[derive(Clone, Debug)]
pub struct Adam<T> {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    t: i32,
    moments: Vec<(Array2<T>, Array2<T>)>,
}

impl<T: Real> Adam<T> {
    /// An optimizer with the given hyperparameters.
    #[must_use]
    pub fn new(lr: f64, beta1: f64, beta2: f64, eps: f64) -> Self {
        Adam {
            lr,
            beta1,
            beta2,
            eps,
            t: 0,
            moments: Vec::new(),
        }
    }
}

impl<T: Real> Optimizer<T> for Adam<T> {
    fn step(
        &mut self,
        params: &mut [&mut Param<T>],
        inv_scale: T,
        p: &mut Precision,
    ) -> UpdateStats {
        self.t = self.t.saturating_add(1);
        let (b1, b2) = (T::of(self.beta1), T::of(self.beta2));
        let c1 = T::of(1.0 - self.beta1.powi(self.t));
        let c2 = T::of(1.0 - self.beta2.powi(self.t));
        let lr = T::of(self.lr);
        let mut stats = UpdateStats::default();
        for (i, param) in params.iter_mut().enumerate() {
            if self.moments.len() <= i {
                self.moments.push((
                    Array2::zeros(param.grad.dim()),
                    Array2::zeros(param.grad.dim()),
                ));
            }
            let g = unscaled(param, inv_scale);
            p.enter(param.site);
            let (m, v) = &mut self.moments[i];
            Zip::from(&mut *m)
                .and(&mut *v)
                .and(&g)
                .for_each(|m, v, &g| {
                    *m = b1 * *m + (T::one() - b1) * g;
                    *v = b2 * *v + (T::one() - b2) * g * g;
                });
            p.set_part("adam_m");
            p.store_array(Class::OptimizerState, m);
            p.set_part("adam_v");
            p.store_array(Class::OptimizerState, v);
            p.set_part("adam_eps");
            let eps = p.store_scalar(Class::OptimizerState, T::of(self.eps));
            let mut denom = v.mapv(|v| (v / c2).sqrt() + eps);
            p.set_part("adam_denominator");
            p.store_array(Class::OptimizerState, &mut denom);
            let mut update = m.clone();
            Zip::from(&mut update)
                .and(&denom)
                .for_each(|u, &d| *u = -lr * (*u / c1) / d);
            stats += apply_update(param, update, p);
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::one_weight;
    use super::*;

    #[test]
    fn first_steps_match_the_formula() {
        let (mut p, _, mut w) = one_weight("exact", (1, 2), 0.0f64);
        let mut adam = Adam::new(0.01, 0.9, 0.999, 1e-8);
        let (mut m, mut v, mut x) = ([0.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
        for (t, g) in [[1.0, -2.0], [0.5, 3.0], [-1.0, 0.0]]
            .into_iter()
            .enumerate()
        {
            w.grad = Array2::from_shape_vec((1, 2), g.to_vec()).unwrap();
            adam.step(&mut [&mut w], 1.0, &mut p);
            for k in 0..2 {
                m[k] = 0.9 * m[k] + 0.1 * g[k];
                v[k] = 0.999 * v[k] + 0.001 * g[k] * g[k];
                let mh = m[k] / (1.0 - 0.9f64.powi(t as i32 + 1));
                let vh = v[k] / (1.0 - 0.999f64.powi(t as i32 + 1));
                x[k] -= 0.01 * mh / (vh.sqrt() + 1e-8);
                assert!((w.master[[0, k]] - x[k]).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn epsilon_underflows_in_fp16_state_and_a_zero_gradient_gives_nan() {
        let (mut p, site, mut w) = one_weight("fp16-pure", (1, 1), 1.0f32);
        w.sync(&mut p);
        p.begin_step();
        // g = 0: m = v = 0 and eps = 0 in fp16, so the update is 0/0.
        Adam::new(1e-3, 0.9, 0.999, 1e-8).step(&mut [&mut w], 1.0, &mut p);
        assert_eq!(p.counts(site, Class::OptimizerState).underflow, 1);
        assert!(w.master[[0, 0]].is_nan());
        // With FP32 state the same step leaves the weight alone.
        let (mut p, _, mut w) = one_weight("fp16-master", (1, 1), 1.0f32);
        Adam::new(1e-3, 0.9, 0.999, 1e-8).step(&mut [&mut w], 1.0, &mut p);
        assert_eq!(w.master[[0, 0]], 1.0);
    }

    /// Issue 29, case 5: Adam moves a weight whose gradient is exactly zero (its moments
    /// decay), and that update rounds away on a large weight; it is not swamping, and only the
    /// weights with a gradient count, in both code paths (rounded master weights: fp16-pure, 1000
    /// whose half ulp is 0.25; FP32 ones: 2^20, whose half ulp is 2^-4; the updates are about
    /// 10^-3).
    #[test]
    fn only_weights_with_a_gradient_count_as_swamped() {
        for (recipe, weight) in [("fp16-pure", 1000.0f32), ("fp32", 1_048_576.0)] {
            let (mut p, _, mut w) = one_weight(recipe, (1, 2), weight);
            w.sync(&mut p);
            let mut adam = Adam::new(1e-3, 0.9, 0.999, 1e-8);
            let mut step = |grad: [f32; 2]| {
                w.grad = Array2::from_shape_vec((1, 2), grad.to_vec()).unwrap();
                let s = adam.step(&mut [&mut w], 1.0, &mut p);
                (s.nonzero, s.lost)
            };
            assert_eq!(step([1.0, 1.0]), (2, 2), "{recipe}");
            // The second weight's gradient is zero; its update (about -6.7e-4) is not.
            assert_eq!(step([1.0, 0.0]), (1, 1), "{recipe}");
            assert_eq!(w.master[[0, 1]], weight, "{recipe}");
        }
    }
}
