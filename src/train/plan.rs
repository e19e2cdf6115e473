//! A precision plan per layer for the built-in models (issue 43): what casting each layer that
//! forms matrix products does to one forward and backward pass against FP32 on the same weights
//! and batches ([`Probe::sensitivity`]), a greedy plan that casts the least harmful layers
//! first until a budget ([`Probe::plan`]), and the re-training that checks it ([`validate`]).
//! The files are those of [`crate::run::plan`].

use std::path::Path;

use ndarray::{Array2, Axis};

use super::config::{ModelKind, TrainConfig};
use super::data::{Batches, Dataset};
use super::grid::GridRun;
use super::loss::Targets;
use super::precision::Precision;
use super::rng::Rng;
use super::training::classifier;
use crate::error::Error;
use crate::recipe::Class;
use crate::recipe::{Keep, Recipe};
use crate::run::plan::{
    Budget, Harm, LayerHarm, Plan, PlanStep, Sensitivity, Validation, ValidationRun,
};

/// The operand classes whose casts the underflow and saturation shares count.
const OPERANDS: [Class; 3] = [Class::GemmInput, Class::GemmWeight, Class::GemmGradOutput];

/// The FP32 reference of a config's model: its initial weights, a fixed list of training
/// batches, and per batch the FP32 loss and weight gradients; every measurement runs the same
/// weights on the same batches under another recipe.
pub struct Probe {
    config: TrainConfig,
    data: Dataset,
    batches: Vec<(Array2<f32>, Vec<usize>)>,
    weights: Vec<Array2<f32>>,
    reference: Vec<(f64, Vec<f64>)>,
    /// The layers that form products: name and product FLOPs per step.
    layers: Vec<(String, u64)>,
}

impl Probe {
    /// The reference of `config`'s model (its seed's initial weights) on the first `batches`
    /// training batches its run would draw.
    ///
    /// # Errors
    /// A bad config or data set, the GAN, no batches.
    pub fn new(config: &TrainConfig, batches: u64) -> crate::Result<Probe> {
        if config.model == ModelKind::Gan {
            return Err(Error::InvalidValue {
                what: "model",
                value: "gan".into(),
                expected: "a classifier (mlp, cnn or lstm)",
            });
        }
        if batches == 0 {
            return Err(Error::InvalidValue {
                what: "--batches",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        let fp32 = TrainConfig {
            recipe: Recipe::fp32(),
            ..config.clone()
        };
        let (data, job) = super::training::build(&fp32)?;
        let super::training::Job::Classifier(mut reference) = job else {
            unreachable!("a classifier config builds a classifier")
        };
        let weights = reference
            .model
            .params()
            .iter()
            .map(|q| q.master.clone())
            .collect();
        let mut sampler = Batches::new(data.train_y.len(), Rng::derive(config.seed, 2));
        let batches: Vec<(Array2<f32>, Vec<usize>)> = (0..batches)
            .map(|_| {
                let idx = sampler.next_batch(config.batch);
                let y = idx.iter().map(|&i| data.train_y[i]).collect();
                (data.train_x.select(Axis(0), &idx), y)
            })
            .collect();
        let mut probe = Probe {
            config: config.clone(),
            data,
            batches,
            weights,
            reference: Vec::new(),
            layers: Vec::new(),
        };
        for (x, y) in &probe.batches {
            let r = reference.probe(&probe.weights, x, Targets::Labels(y))?;
            probe.reference.push(r);
        }
        let p = &reference.precision;
        probe.layers = p
            .product_flops()
            .iter()
            .map(|(&layer, &flops)| (p.layers()[layer].clone(), flops))
            .collect();
        Ok(probe)
    }

    /// The layers that form products, with their product FLOPs per step, in model order.
    #[must_use]
    pub fn layers(&self) -> &[(String, u64)] {
        &self.layers
    }

    /// What `recipe` does against the reference, averaged over the batches, with the underflow
    /// and saturation of the operand casts of the layers `cast`.
    ///
    /// # Errors
    /// A keep pattern that matches no layer; a batch that does not fit the model.
    pub fn harm(&self, recipe: &Recipe, cast: &[&str]) -> crate::Result<Harm> {
        let p = Precision::new(recipe, self.config.seed);
        let mut t = classifier(&self.config, &self.data, p, recipe.loss_scaling)?;
        t.precision.check_keep()?;
        let mut sum = Harm::default();
        let (mut zeroed, mut nonzero, mut clamped, mut values) = (0u64, 0u64, 0u64, 0u64);
        for ((x, y), (loss_ref, g_ref)) in self.batches.iter().zip(&self.reference) {
            t.precision
                .set_observer(Some(super::capture::Observer::default()));
            let (loss, g) = t.probe(&self.weights, x, Targets::Labels(y))?;
            let seen = t.precision.take_observer().unwrap_or_default();
            let (mut diff2, mut norm2, mut own2, mut dot) = (0.0, 0.0, 0.0, 0.0);
            for (&a, &b) in g.iter().zip(g_ref) {
                diff2 += (a - b) * (a - b);
                norm2 += b * b;
                own2 += a * a;
                dot += a * b;
            }
            sum.grad_rel_err += (diff2 / norm2).sqrt();
            sum.grad_cosine += dot / (norm2 * own2).sqrt();
            sum.loss_change += ((loss - loss_ref) / loss_ref).abs();
            let layers = t.precision.layers();
            for (key, h) in &seen.values {
                if OPERANDS.contains(&key.class) && cast.contains(&layers[key.layer].as_str()) {
                    nonzero += h.count() - h.zeros();
                    values += h.count();
                }
            }
            for (layer, name) in layers.iter().enumerate() {
                if cast.contains(&name.as_str()) {
                    for class in OPERANDS {
                        let c = t.precision.counts(layer, class);
                        zeroed += c.underflow;
                        clamped += c.overflow + c.infinite;
                    }
                }
            }
        }
        let n = self.batches.len() as f64;
        let share = |part: u64, whole: u64| {
            if whole > 0 {
                part as f64 / whole as f64
            } else {
                0.0
            }
        };
        Ok(Harm {
            grad_rel_err: sum.grad_rel_err / n,
            grad_cosine: sum.grad_cosine / n,
            loss_change: sum.loss_change / n,
            underflow: share(zeroed, nonzero),
            saturate: share(clamped, values),
        })
    }

    /// Each product-forming layer cast alone under `cast` (every other layer in FP32: a keep
    /// of the layer to `cast`, then of `"*"` to `fp32`), and every layer cast at once; layers
    /// sorted by gradient error, largest first.
    ///
    /// # Errors
    /// As [`Probe::harm`].
    pub fn sensitivity(&self, cast: &Recipe) -> crate::Result<Sensitivity> {
        let base = without_keep(cast);
        let mut layers = Vec::new();
        for (layer, flops) in &self.layers {
            let alone = Recipe {
                keep: Keep(vec![
                    (literal(layer), base.clone()),
                    ("*".into(), Recipe::fp32()),
                ]),
                ..base.clone()
            };
            layers.push(LayerHarm {
                layer: layer.clone(),
                flops: *flops,
                harm: self.harm(&alone, &[layer])?,
            });
        }
        layers.sort_by(|a, b| b.harm.grad_rel_err.total_cmp(&a.harm.grad_rel_err));
        let names: Vec<&str> = self.layers.iter().map(|(l, _)| l.as_str()).collect();
        Ok(Sensitivity {
            schema: "mixprec-sensitivity/1".into(),
            model: format!("{}-{}", self.config.model, self.data.name),
            recipe: cast.name.clone(),
            reference: "fp32".into(),
            batches: self.batches.len() as u64,
            seed: self.config.seed,
            layers,
            all: self.harm(&base, &names)?,
        })
    }

    /// The greedy plan: the layers of `sensitivity` from least to most harmful, each added to
    /// the cast ones and the joint gradient error measured, until `budget` (stopping before the
    /// error exceeds it, or once the FLOPs share reaches it); the other layers keep `high`.
    /// Returns the plan and its recipe.
    ///
    /// # Errors
    /// As [`Probe::harm`].
    pub fn plan(
        &self,
        sensitivity: &Sensitivity,
        cast: &Recipe,
        high: &Recipe,
        budget: Budget,
    ) -> crate::Result<(Plan, Recipe)> {
        let total: u64 = self.layers.iter().map(|(_, f)| f).sum();
        let flops = |layers: &[&str]| {
            let cast: u64 = self
                .layers
                .iter()
                .filter(|(l, _)| layers.contains(&l.as_str()))
                .map(|(_, f)| f)
                .sum();
            cast as f64 / total.max(1) as f64
        };
        let mut order: Vec<&LayerHarm> = sensitivity.layers.iter().collect();
        order.reverse();
        let (mut chosen, mut steps, mut err) = (Vec::<&str>::new(), Vec::new(), 0.0);
        for candidate in order {
            if let Budget::FlopsShare(target) = budget
                && flops(&chosen) >= target
            {
                break;
            }
            let mut trial = chosen.clone();
            trial.push(&candidate.layer);
            let joint = self.harm(&self.recipe_of(cast, high, &trial), &trial)?;
            steps.push(PlanStep {
                layer: candidate.layer.clone(),
                flops_share: flops(&trial),
                grad_rel_err: joint.grad_rel_err,
            });
            if let Budget::MaxGradError(max) = budget
                && joint.grad_rel_err > max
            {
                break;
            }
            chosen = trial;
            err = joint.grad_rel_err;
        }
        let recipe = self.recipe_of(cast, high, &chosen);
        let plan = Plan {
            schema: "mixprec-plan/1".into(),
            recipe: cast.name.clone(),
            high: high.name.clone(),
            budget,
            cast: chosen.iter().map(ToString::to_string).collect(),
            keep: self
                .layers
                .iter()
                .filter(|(l, _)| !chosen.contains(&l.as_str()))
                .map(|(l, _)| l.clone())
                .collect(),
            flops_share: flops(&chosen),
            grad_rel_err: err,
            steps,
        };
        Ok((plan, recipe))
    }

    /// `cast` with the product-forming layers not in `chosen` kept in `high`, named
    /// `"{cast}-plan"` when it keeps any.
    fn recipe_of(&self, cast: &Recipe, high: &Recipe, chosen: &[&str]) -> Recipe {
        let keep: Vec<(String, Recipe)> = self
            .layers
            .iter()
            .filter(|(l, _)| !chosen.contains(&l.as_str()))
            .map(|(l, _)| (literal(l), without_keep(high)))
            .collect();
        let base = without_keep(cast);
        Recipe {
            name: if keep.is_empty() {
                base.name.clone()
            } else {
                format!("{}-plan", base.name)
            },
            keep: Keep(keep),
            ..base
        }
    }
}

/// `recipe` without its `keep`.
fn without_keep(recipe: &Recipe) -> Recipe {
    Recipe {
        keep: Keep::default(),
        ..recipe.clone()
    }
}

/// A glob pattern that matches exactly `name` (its `*`, `?` and `[` in classes).
#[must_use]
pub fn literal(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '*' | '?' | '[' => format!("[{c}]"),
            c => c.to_string(),
        })
        .collect()
}

/// The runs of a validation: `fp32`, `all` (the cast recipe) and `plan` (its recipe) of
/// `config`, `seeds` seeds from the config's, each an ordinary run directory
/// `runs/<arm>-seed<k>` (as a grid's runs).
#[must_use]
pub fn validation_runs(
    config: &TrainConfig,
    cast: &Recipe,
    plan: &Recipe,
    seeds: u64,
) -> Vec<GridRun> {
    let arms = [
        ("fp32", Recipe::fp32()),
        ("all", without_keep(cast)),
        ("plan", plan.clone()),
    ];
    let mut runs = Vec::new();
    for (arm, recipe) in arms {
        for k in 0..seeds {
            let seed = config.seed + k;
            let run = TrainConfig {
                recipe: recipe.clone(),
                seed,
                ..config.clone()
            };
            let values = vec![("arm".to_string(), arm.to_string())];
            runs.push(GridRun::new(
                runs.len(),
                format!("{arm}-seed{seed}"),
                values,
                seed,
                run,
            ));
        }
    }
    runs
}

/// Trains `runs` ([`validation_runs`]) into the plan directory `dir` on `threads` threads, as
/// a grid trains its runs, and returns `validation.json`'s contents (the metric: the mean loss
/// over each run's last `last_steps` steps).
///
/// # Errors
/// A run that fails (named, with its error).
pub fn validate(
    dir: &Path,
    runs: &[GridRun],
    threads: usize,
    last_steps: u64,
    progress: &(dyn Fn(super::grid::Event<'_>) + Sync),
) -> crate::Result<Validation> {
    super::grid::check_data(runs)?;
    let refs: Vec<&GridRun> = runs.iter().collect();
    let failed = super::grid::execute(dir, &refs, threads, progress);
    if let Some((name, e)) = failed.into_iter().next() {
        return Err(Error::Grid {
            what: format!("runs/{name}"),
            problem: e.to_string(),
        });
    }
    Ok(Validation {
        schema: "mixprec-validation/1".into(),
        metric: "loss".into(),
        last_steps,
        runs: runs
            .iter()
            .map(|r| ValidationRun {
                arm: r.planned.values[0].1.clone(),
                seed: r.planned.seed,
                run: format!("runs/{}", r.planned.name),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests;
