//! Stochastic gradient descent with momentum.

use ndarray::Array2;

use super::{Optimizer, UpdateStats, apply_update, apply_update_fn, unscaled};
use crate::recipe::Class;
use crate::train::layer::Param;
use crate::train::precision::Precision;
use crate::train::real::Real;

/// SGD with heavy-ball momentum (PyTorch's form):
/// ```text
/// v = μ v + g      (v stored in the optimizer-state format; v = g at the first step)
/// update = -lr v   (plain SGD when μ = 0: update = -lr g)
/// ```
#[derive(Clone, Debug)]
pub struct Sgd<T> {
    lr: f64,
    momentum: f64,
    velocity: Vec<Array2<T>>,
}

impl<T: Real> Sgd<T> {
    /// An optimizer with learning rate `lr` and momentum `momentum`.
    #[must_use]
    pub fn new(lr: f64, momentum: f64) -> Self {
        Sgd {
            lr,
            momentum,
            velocity: Vec::new(),
        }
    }
}

impl<T: Real> Optimizer<T> for Sgd<T> {
    fn step(
        &mut self,
        params: &mut [&mut Param<T>],
        inv_scale: T,
        p: &mut Precision,
    ) -> UpdateStats {
        let first = self.velocity.is_empty() && self.momentum != 0.0;
        let mut stats = UpdateStats::default();
        let (lr, mu) = (T::of(self.lr), T::of(self.momentum));
        for (i, param) in params.iter_mut().enumerate() {
            if self.momentum == 0.0 {
                // One pass: unscale (in FP32), then scale by the learning rate, as two passes would.
                stats += apply_update_fn(param, |g: T| -lr * (g * inv_scale), p);
                continue;
            }
            let g = unscaled(param, inv_scale);
            p.enter(param.site);
            let mut v = if first {
                g
            } else {
                &self.velocity[i] * mu + &g
            };
            p.set_part("momentum");
            p.store_array(Class::OptimizerState, &mut v);
            let update = v.mapv(|x| -lr * x);
            if first {
                self.velocity.push(v);
            } else {
                self.velocity[i] = v;
            }
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
    fn momentum_matches_the_recurrence() {
        let (mut p, _, mut w) = one_weight("exact", (1, 1), 1.0f64);
        let mut sgd = Sgd::new(0.1, 0.9);
        let mut want = 1.0;
        let mut v = 0.0;
        for (k, g) in [0.5, -0.25, 1.0].into_iter().enumerate() {
            w.grad.fill(g * 4.0);
            sgd.step(&mut [&mut w], 0.25, &mut p);
            v = if k == 0 { g } else { 0.9 * v + g };
            want -= 0.1 * v;
            assert!((w.master[[0, 0]] - want).abs() < 1e-15);
        }
    }

    /// fp16 weights are updated as PyTorch's `param.add_(grad, alpha=-lr)` on an fp16 tensor does:
    /// `w + lr g` is formed in FP32 and rounded once. Rounding the update to fp16 first would
    /// drop the 2^-22 (half its ulp: a tie, to even) that puts 1 + 2^-11 + 2^-22 (exact in f32)
    /// above the tie at 1 + 2^-11, and the weight would stay 1.
    #[test]
    fn fp16_weights_take_one_rounding_of_the_fused_update() {
        let (mut p, site, mut w) = one_weight("fp16-pure", (1, 1), 1.0f32);
        w.sync(&mut p);
        w.grad.fill(-1.0);
        let lr = 2f64.powi(-11) + 2f64.powi(-22);
        let stats = Sgd::new(lr, 0.0).step(&mut [&mut w], 1.0, &mut p);
        assert_eq!(w.master[[0, 0]], 1.0 + 2f32.powi(-10));
        assert_eq!(w.weight[[0, 0]], 1.0 + 2f32.powi(-10));
        assert_eq!(
            stats,
            UpdateStats {
                nonzero: 1,
                lost: 0
            }
        );
        assert_eq!(p.counts(site, Class::Update), Default::default());
    }

    /// A capture step records `|w| / |update|` (how many updates of this size the weight is
    /// worth; swamping starts near 2^11 in fp16), not its inverse: w = 4, update 2^-3 gives 32.
    /// The share of lost updates is lost / nonzero.
    #[test]
    fn capture_records_weight_over_update_and_the_lost_share() {
        let (mut p, site, mut w) = one_weight("fp32", (1, 1), 4.0f32);
        w.grad.fill(1.0);
        p.set_observer(Some(crate::train::capture::Observer::default()));
        Sgd::new(0.125, 0.0).step(&mut [&mut w], 1.0, &mut p);
        let ratios = &p.take_observer().unwrap().update_ratios[&site];
        assert_eq!((ratios.count(), ratios.amax()), (1, 32.0));
        let stats = UpdateStats {
            nonzero: 4,
            lost: 1,
        };
        assert_eq!(stats.lost_share(), 0.25);
        assert_eq!(UpdateStats::default().lost_share(), 0.0);
    }

    #[test]
    fn updates_below_half_an_ulp_are_lost_in_fp16_but_not_with_fp32_master() {
        for (recipe, lost) in [("fp16-pure", 1), ("fp16-master", 0)] {
            let (mut p, _, mut w) = one_weight(recipe, (1, 1), 1.0f32);
            w.sync(&mut p);
            w.grad.fill(1.0);
            // 1e-4 < 2^-11 (half an fp16 ulp at 1).
            let stats = Sgd::new(1e-4, 0.0).step(&mut [&mut w], 1.0, &mut p);
            assert_eq!(stats, UpdateStats { nonzero: 1, lost }, "{recipe}");
        }
    }

    /// FP32 master weights lose updates too: 1e-9 is under 2^-24, half an f32 ulp at 1, so
    /// `1 + 1e-9` is 1 in f32 and the update is lost, with fp16 and with FP32 master weights
    /// (the two count in different code paths). A weight of 2^-20 takes the same update.
    #[test]
    fn updates_below_half_an_f32_ulp_are_lost_with_fp32_master_too() {
        for recipe in ["fp16-pure", "fp16-master", "fp32"] {
            let (mut p, _, mut w) = one_weight(recipe, (1, 3), 1.0f32);
            w.master[[0, 2]] = 2f32.powi(-20);
            w.sync(&mut p);
            w.grad = Array2::from_shape_vec((1, 3), vec![1.0, 0.0, 1.0]).unwrap();
            let stats = Sgd::new(1e-9, 0.0).step(&mut [&mut w], 1.0, &mut p);
            assert_eq!(
                stats,
                UpdateStats {
                    nonzero: 2,
                    lost: if recipe == "fp16-pure" { 2 } else { 1 }
                },
                "{recipe}"
            );
            assert_eq!(w.master[[0, 0]], 1.0, "{recipe}");
        }
    }
}
