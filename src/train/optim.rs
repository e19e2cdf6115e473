//! Optimizers. Each reads the unscaled gradient (the stored gradient divided by the loss scale
//! in FP32), keeps its state in the recipe's optimizer-state format and hands an update to
//! [`apply_update`], which adds it to the master weights in their format and refreshes the weight
//! copy.

mod adam;
mod add;
mod sgd;

use ndarray::{Array2, Zip};
use serde::{Deserialize, Serialize};

pub use adam::Adam;
pub use sgd::Sgd;

use super::layer::Param;
use super::precision::Precision;
use super::real::Real;
use crate::error::Error;
use crate::recipe::Class;
use add::add_updates;

/// An optimizer and its hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", deny_unknown_fields)]
pub enum OptimizerConfig {
    /// Stochastic gradient descent with (heavy-ball) momentum.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum coefficient (0: plain SGD).
        #[serde(default)]
        momentum: f64,
    },
    /// Adam (Kingma and Ba), with PyTorch's bias correction and epsilon outside the square root.
    Adam {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        #[serde(default = "default_beta1")]
        beta1: f64,
        /// Second-moment decay.
        #[serde(default = "default_beta2")]
        beta2: f64,
        /// Added to the denominator (1e-8: below fp16's smallest subnormal, so it becomes 0 there).
        #[serde(default = "default_eps")]
        eps: f64,
    },
}

fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_eps() -> f64 {
    1e-8
}

impl OptimizerConfig {
    /// The learning rate.
    #[must_use]
    pub fn lr(&self) -> f64 {
        match *self {
            OptimizerConfig::Sgd { lr, .. } | OptimizerConfig::Adam { lr, .. } => lr,
        }
    }

    /// The same optimizer with learning rate `lr`.
    #[must_use]
    pub fn with_lr(self, lr: f64) -> Self {
        match self {
            OptimizerConfig::Sgd { momentum, .. } => OptimizerConfig::Sgd { lr, momentum },
            OptimizerConfig::Adam {
                beta1, beta2, eps, ..
            } => OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
            },
        }
    }

    /// Checks the hyperparameters.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming the first one out of range.
    pub fn validate(&self) -> crate::Result<()> {
        let check = |ok: bool, what: &'static str, value: f64, expected: &'static str| {
            if ok {
                Ok(())
            } else {
                Err(Error::InvalidValue {
                    what,
                    value: value.to_string(),
                    expected,
                })
            }
        };
        let lr = self.lr();
        crate::error::positive_finite("learning rate", lr)?;
        match *self {
            OptimizerConfig::Sgd { momentum, .. } => check(
                (0.0..1.0).contains(&momentum),
                "momentum",
                momentum,
                "a number in [0, 1)",
            ),
            OptimizerConfig::Adam {
                beta1, beta2, eps, ..
            } => {
                check(
                    (0.0..1.0).contains(&beta1),
                    "beta1",
                    beta1,
                    "a number in [0, 1)",
                )?;
                check(
                    (0.0..1.0).contains(&beta2),
                    "beta2",
                    beta2,
                    "a number in [0, 1)",
                )?;
                check(
                    eps.is_finite() && eps >= 0.0,
                    "eps",
                    eps,
                    "a finite number >= 0",
                )
            }
        }
    }

    /// A fresh optimizer.
    #[must_use]
    pub fn build<T: Real>(&self) -> Box<dyn Optimizer<T>> {
        match *self {
            OptimizerConfig::Sgd { lr, momentum } => Box::new(Sgd::new(lr, momentum)),
            OptimizerConfig::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => Box::new(Adam::new(lr, beta1, beta2, eps)),
        }
    }
}

/// What one optimizer step did to the master weights.
///
/// Only the updates of weights whose gradient is nonzero count: a weight with an exactly zero
/// gradient (an input pixel that is blank, a dead unit) still moves under Adam or momentum as
/// its state decays, and such an update that rounds away is not a gradient lost to the master
/// weights' precision (swamping), whatever its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateStats {
    /// Nonzero updates of weights with a nonzero gradient.
    pub nonzero: u64,
    /// Of those, the ones that left their master weight unchanged (swamping).
    pub lost: u64,
}

impl UpdateStats {
    /// Lost updates over nonzero updates (0 when there were none): `updates_lost`.
    #[must_use]
    pub fn lost_share(&self) -> f64 {
        if self.nonzero == 0 {
            0.0
        } else {
            self.lost as f64 / self.nonzero as f64
        }
    }
}

impl std::ops::AddAssign for UpdateStats {
    fn add_assign(&mut self, o: UpdateStats) {
        self.nonzero += o.nonzero;
        self.lost += o.lost;
    }
}

/// An optimizer over a fixed list of parameters (state is kept by position in that list).
pub trait Optimizer<T: Real>: Send {
    /// Updates every parameter from its gradient divided by the loss scale (`inv_scale = 1/S`).
    fn step(
        &mut self,
        params: &mut [&mut Param<T>],
        inv_scale: T,
        p: &mut Precision,
    ) -> UpdateStats;
}

/// The gradient divided by the loss scale, in FP32 (not rounded: the unscaled gradient is never
/// stored in low precision).
#[must_use]
pub fn unscaled<T: Real>(param: &Param<T>, inv_scale: T) -> Array2<T> {
    param.grad.mapv(|g| g * inv_scale)
}

/// [`apply_update`] of the update `step(g)` of each gradient `g` (SGD without momentum): when
/// storing the update and the master weights would only check them
/// ([`Precision::check_only`]) and the weight copy is not rounded, the update is never formed as
/// an array: it is computed, added, counted and checked for inf/NaN in one pass with the weight
/// copy's refresh. The same values, counts and records as [`apply_update`] of `grad.mapv(step)`.
pub fn apply_update_fn<T: Real>(
    param: &mut Param<T>,
    step: impl Fn(T) -> T + Sync,
    p: &mut Precision,
) -> UpdateStats {
    // The parameter's layer decides whether its weight copy rounds (a kept layer's may not).
    p.enter(param.site);
    let fused =
        p.check_only(Class::Update) && p.check_only(Class::Master) && !p.rounds(Class::Weight);
    let n = param.grad.len();
    let fused = fused && param.master.len() == n && param.weight.len() == n;
    let (true, Some(master), Some(weight), Some(grad)) = (
        fused,
        param.master.as_slice_mut(),
        param.weight.as_slice_mut(),
        param.grad.as_slice(),
    ) else {
        let update = param.grad.mapv(step);
        return apply_update(param, update, p);
    };
    let counts = add_updates(master, weight, grad, grad, step);
    let (bad_updates, bad_masters) = (counts.bad_updates, counts.bad_masters);
    let stats = UpdateStats {
        nonzero: counts.nonzero,
        lost: counts.lost,
    };
    // In the order of apply_update's stores: the update, then the master weights.
    p.note_store(Class::Update, n, bad_updates);
    p.set_tensor(param.name);
    p.note_store(Class::Master, n, bad_masters);
    stats
}

/// Stores `update` (class [`Class::Update`]), adds it to the master weights, stores them (class
/// [`Class::Master`]) and refreshes the weight copy (class [`Class::Weight`]).
pub fn apply_update<T: Real>(
    param: &mut Param<T>,
    mut update: Array2<T>,
    p: &mut Precision,
) -> UpdateStats {
    p.enter(param.site);
    p.store_array(Class::Update, &mut update);
    if p.capturing()
        && let (Some(w), Some(u)) = (param.master.as_slice(), update.as_slice())
    {
        p.observe_updates(w, u);
    }
    let mut stats = UpdateStats::default();
    if p.rounds(Class::Master) {
        // Whether an update was lost shows only after rounding: keep the old values.
        let before = param.master.clone();
        param.master += &update;
        param.sync(p);
        Zip::from(&update)
            .and(&before)
            .and(&param.master)
            .and(&param.grad)
            .for_each(|&u, &b, &a, &g| {
                let moved = u != T::zero() && g != T::zero();
                stats.nonzero += u64::from(moved);
                stats.lost += u64::from(moved && a == b);
            });
    } else {
        // FP32 master weights: the sum is the stored value, so compare while adding, and write
        // the weight copy in the same pass, on slices with local counters (the loop vectorises).
        for a in [&mut param.master, &mut param.weight] {
            if !a.is_standard_layout() {
                *a = a.as_standard_layout().into_owned();
            }
        }
        let (update, grad) = (update.as_standard_layout(), param.grad.as_standard_layout());
        let (Some(master), Some(weight), Some(update), Some(grad)) = (
            param.master.as_slice_mut(),
            param.weight.as_slice_mut(),
            update.as_slice(),
            grad.as_slice(),
        ) else {
            unreachable!("standard-layout arrays are slices");
        };
        let counts = add_updates(master, weight, update, grad, |u| u);
        stats += UpdateStats {
            nonzero: counts.nonzero,
            lost: counts.lost,
        };
        param.store_master_and_weight(p, false);
    }
    stats
}

/// One weight matrix of `shape`, every element `value`, registered as site "w" with the
/// precision of `recipe` (a preset name, or "exact" for [`Precision::exact`]): the optimizers'
/// tests' setup.
#[cfg(test)]
fn one_weight<T: Real>(
    recipe: &str,
    shape: (usize, usize),
    value: T,
) -> (Precision, usize, Param<T>) {
    let mut p = if recipe == "exact" {
        Precision::exact()
    } else {
        let recipe = crate::recipe::Recipe::preset(recipe).expect("a preset");
        Precision::new(&recipe, 0)
    };
    let site = p.register("w");
    let w = Param::new("weight", site, Array2::from_elem(shape, value));
    (p, site, w)
}
