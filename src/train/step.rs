//! One training step under a recipe ([`Trainer`]; the GAN's: [`GanTrainer`]), and evaluation.

use ndarray::{Array2, Axis};

use super::layer::grads_finite;
use super::loss::{Loss, Targets};
use super::model::Sequential;
use super::optim::{Optimizer, OptimizerConfig, UpdateStats};
use super::precision::Precision;
use crate::recipe::Class;
use crate::run::schema::StepRecord;
use crate::scaling::scaler::{LossScaler, LossScaling};

pub use gan::GanTrainer;

/// A model with its optimizer, loss scaler and storage points: everything one step needs.
pub struct Trainer {
    /// The model.
    pub model: Sequential<f32>,
    /// The storage points (recipe, counts).
    pub precision: Precision,
    optimizer: Box<dyn Optimizer<f32>>,
    scaler: LossScaler,
    loss: Loss,
    input_site: usize,
    loss_site: usize,
    loss_multiplier: f64,
    step: u64,
}

impl Trainer {
    /// A trainer for `model`, whose sites are registered in `precision` after `input_site` (the
    /// site that stores the network's input, registered first), with the loss-scaling policy
    /// `loss_scaling` (the config's recipe's). Registers the `"loss"` site and rounds the initial
    /// weights into the recipe's formats.
    #[must_use]
    pub fn new(
        mut model: Sequential<f32>,
        mut precision: Precision,
        input_site: usize,
        optimizer: &OptimizerConfig,
        loss: Loss,
        loss_scaling: LossScaling,
    ) -> Self {
        let loss_site = precision.register("loss");
        for param in model.params_mut() {
            param.sync(&mut precision);
        }
        Trainer {
            model,
            precision,
            optimizer: optimizer.build(),
            scaler: LossScaler::new(loss_scaling),
            loss,
            input_site,
            loss_site,
            loss_multiplier: 1.0,
            step: 0,
        }
    }

    /// Multiplies the loss by `c` before backward (as normalising over a large effective batch
    /// does); the recorded loss stays the unmultiplied one.
    pub fn set_loss_multiplier(&mut self, c: f64) {
        self.loss_multiplier = c;
    }

    /// The loss scale the next step will use.
    #[must_use]
    pub fn loss_scale(&self) -> f32 {
        self.scaler.scale()
    }

    /// One step on batch `x` with `targets`: forward, loss, scaled backward, overflow check,
    /// unscale and update (or skip).
    ///
    /// # Errors
    /// [`crate::Error::InvalidValue`] when the targets do not fit the loss.
    pub fn step(
        &mut self,
        x: &Array2<f32>,
        targets: Targets<'_, f32>,
    ) -> crate::Result<StepRecord> {
        on_worker(|| self.step_here(x, targets))
    }

    fn step_here(
        &mut self,
        x: &Array2<f32>,
        targets: Targets<'_, f32>,
    ) -> crate::Result<StepRecord> {
        self.step += 1;
        let scale = self.scaler.scale();
        let loss = self.forward_backward(x, targets, scale)?;
        let p = &mut self.precision;
        let mut params = self.model.params_mut();
        let overflow = !grads_finite(&params, p);
        let skipped = self.scaler.update(overflow)?;
        let stats = if skipped {
            UpdateStats::default()
        } else {
            self.optimizer.step(&mut params, 1.0 / scale, p)
        };
        Ok(record(
            p,
            Ended {
                step: self.step,
                loss,
                generator_loss: None,
                scale,
                overflow,
                skipped,
                updates_lost: stats.lost_share(),
            },
        ))
    }

    /// Begins a step and runs forward, loss and the backward pass scaled by `scale` (and the
    /// loss multiplier), which sets every parameter's gradient; returns the loss.
    fn forward_backward(
        &mut self,
        x: &Array2<f32>,
        targets: Targets<'_, f32>,
        scale: f32,
    ) -> crate::Result<f64> {
        let p = &mut self.precision;
        p.begin_step();
        p.enter(self.input_site);
        let mut x = x.clone();
        p.store_array(Class::Activation, &mut x);
        let z = self.model.forward(x, p);
        p.enter(self.loss_site);
        let (loss, mut dz) = self.loss.evaluate(&z, targets, p)?;
        let factor = (f64::from(scale) * self.loss_multiplier) as f32;
        dz.mapv_inplace(|g| g * factor);
        p.store_array(Class::ActivationGrad, &mut dz);
        self.model.backward_params(dz, p);
        Ok(loss)
    }

    /// The FP32 shadow of the next step of `run` (a trainer of the same model under the `fp32`
    /// recipe): takes `run`'s master weights as its weights, and computes the loss and gradients
    /// of batch `x` with loss scale 1, keeping the gradients ([`Precision::take_taps`]). Changes
    /// nothing in `run`.
    ///
    /// # Errors
    /// As [`Trainer::step`].
    pub fn shadow_of(
        &mut self,
        run: &Trainer,
        x: &Array2<f32>,
        targets: Targets<'_, f32>,
    ) -> crate::Result<f64> {
        for (mine, theirs) in self.model.params_mut().into_iter().zip(run.model.params()) {
            mine.master.assign(&theirs.master);
            mine.weight.assign(&theirs.master);
        }
        self.loss_multiplier = run.loss_multiplier;
        self.precision.set_taps(true);
        on_worker(|| self.forward_backward(x, targets, 1.0))
    }

    /// One forward and backward pass on batch `x` from the master weights `weights` (one array
    /// per parameter, in the model's order; the weight copies rounded from them as in
    /// training), with no update: the loss and every weight gradient, divided by the loss
    /// scale, in the model's order. The sensitivity measurements of [`super::plan`].
    ///
    /// # Errors
    /// As [`Trainer::step`].
    pub fn probe(
        &mut self,
        weights: &[Array2<f32>],
        x: &Array2<f32>,
        targets: Targets<'_, f32>,
    ) -> crate::Result<(f64, Vec<f64>)> {
        for (param, w) in self.model.params_mut().into_iter().zip(weights) {
            param.master.assign(w);
            param.sync(&mut self.precision);
        }
        let scale = self.scaler.scale();
        let loss = on_worker(|| self.forward_backward(x, targets, scale))?;
        let inv = 1.0 / f64::from(scale);
        let grads = self
            .model
            .params()
            .iter()
            .flat_map(|q| q.grad.iter().map(|&g| f64::from(g) * inv))
            .collect();
        Ok((loss, grads))
    }

    /// The model's outputs for `x` (rounded as in training, not counted), in chunks of 1,024 rows.
    pub fn predict(&mut self, x: &Array2<f32>) -> Array2<f32> {
        let p = &mut self.precision;
        p.set_recording(false);
        let mut outputs = Vec::new();
        for chunk in x.axis_chunks_iter(Axis(0), 1024) {
            p.enter(self.input_site);
            let mut xb = chunk.to_owned();
            p.store_array(Class::Activation, &mut xb);
            outputs.push(self.model.forward(xb, p));
        }
        p.set_recording(true);
        let views: Vec<_> = outputs.iter().map(|o| o.view()).collect();
        ndarray::concatenate(Axis(0), &views).unwrap_or_else(|_| Array2::zeros((0, 0)))
    }

    /// Share of rows of `x` whose largest output is at the label's index (NaN outputs count as
    /// wrong).
    pub fn accuracy(&mut self, x: &Array2<f32>, labels: &[usize]) -> f64 {
        let z = self.predict(x);
        let correct = z
            .axis_iter(Axis(0))
            .zip(labels)
            .filter(|(row, label)| {
                let best = row.iter().enumerate().fold(
                    (usize::MAX, f32::NEG_INFINITY),
                    |(bi, bv), (i, &v)| {
                        if v > bv { (i, v) } else { (bi, bv) }
                    },
                );
                best.0 == **label
            })
            .count();
        correct as f64 / labels.len().max(1) as f64
    }
}

/// Runs `f` on one of rayon's worker threads (in place when already on one): the parallel GEMMs
/// and histograms inside a step then share work by stealing, instead of each being handed over
/// to the pool, and waited for, from a thread outside it. Results do not depend on where `f`
/// runs.
pub fn on_worker<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| f())
}

/// What a training step decided, for its record.
pub(crate) struct Ended {
    /// The step (from 1).
    pub step: u64,
    /// Its loss (the discriminator's for the GAN).
    pub loss: f64,
    /// The GAN generator's loss.
    pub generator_loss: Option<f64>,
    /// The loss scale its backward pass used.
    pub scale: f32,
    /// Whether a gradient held an inf or NaN.
    pub overflow: bool,
    /// Whether its update was skipped.
    pub skipped: bool,
    /// The share of nonzero updates that changed no master weight.
    pub updates_lost: f64,
}

/// The record of a step that ended: what it decided, and what the storage points of `p`
/// counted during it (the one place every trainer, the plain step and the GAN's, makes its
/// [`StepRecord`]).
pub(crate) fn record(p: &Precision, e: Ended) -> StepRecord {
    StepRecord {
        step: e.step,
        loss: e.loss,
        loss_scale: f64::from(e.scale),
        overflow: e.overflow,
        skipped: e.skipped,
        first_nonfinite: p.first_nonfinite(),
        updates_lost: e.updates_lost,
        generator_loss: e.generator_loss,
        grad_amax: p.grad_amax_unscaled(e.scale),
        // A non-finite loss overflows at every scale (exact); an inf or NaN formed in the
        // backward pass leaves only a bound.
        grad_amax_bounded: p.grad_nonfinite()
            && e.loss.is_finite()
            && e.generator_loss.is_none_or(f64::is_finite),
        // Only the PyTorch recorder looks inside a node's formula.
        intermediate_overflow: Vec::new(),
        counts: p.class_counts(),
        eval: None,
    }
}

mod gan;

#[cfg(test)]
mod tests;
