//! A whole training run: [`train`] trains a config into a run directory ([`crate::run`] owns the
//! directory's schema, writer and reader).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use ndarray::{Array2, Axis};

use super::capture::Observer;
use super::config::{ModelKind, TrainConfig};
use super::data::{Batches, Dataset};
use super::loss::{Loss, Targets};
use super::model::{Sequential, vocabulary};
use super::precision::Precision;
use super::rng::Rng;
use super::step::{GanTrainer, Trainer};
use crate::error::Error;
use crate::recipe::{Class, Recipe};
use crate::run::{
    CaptureBuilder, CaptureRecord, EvalMetric, RunWriter, ShadowRecord, ShadowSite, StepRecord,
    Summary, UpdateRatios,
};
use crate::scaling::scaler::LossScaling;

/// What a run trains: a classifier, or the GAN.
pub enum Job {
    /// A classifier (MLP, CNN, LSTM) trained with cross-entropy; evaluated by test accuracy.
    Classifier(Trainer),
    /// The GAN; evaluated by the ring modes its samples cover.
    Gan(GanTrainer),
}

impl Job {
    /// The storage points.
    pub fn precision(&mut self) -> &mut Precision {
        match self {
            Job::Classifier(t) => &mut t.precision,
            Job::Gan(g) => &mut g.precision,
        }
    }

    /// One step on the batch `x` with labels `y` (ignored by the GAN).
    ///
    /// # Errors
    /// Targets that do not fit the loss.
    pub fn step(&mut self, x: &Array2<f32>, y: &[usize]) -> crate::Result<StepRecord> {
        match self {
            Job::Classifier(t) => t.step(x, Targets::Labels(y)),
            Job::Gan(g) => g.step(x),
        }
    }

    /// The evaluation of the trained model on `data`.
    pub fn evaluate(&mut self, data: &Dataset) -> EvalMetric {
        match self {
            Job::Classifier(t) => EvalMetric {
                name: "test_accuracy".into(),
                value: t.accuracy(&data.test_x, &data.test_y),
                chance: majority_share(&data.test_y),
            },
            Job::Gan(g) => EvalMetric {
                name: "modes_covered".into(),
                value: g.modes_covered(),
                chance: None,
            },
        }
    }

    fn models(&self) -> Vec<&Sequential<f32>> {
        match self {
            Job::Classifier(t) => vec![&t.model],
            Job::Gan(g) => vec![&g.generator, &g.discriminator],
        }
    }

    /// Trainable scalars.
    #[must_use]
    pub fn parameter_count(&self) -> usize {
        self.models().iter().map(|m| m.parameter_count()).sum()
    }

    /// Whether every master weight is finite.
    #[must_use]
    pub fn weights_finite(&self) -> bool {
        self.models().iter().all(|m| {
            m.params()
                .iter()
                .all(|q| q.master.iter().all(|v| v.is_finite()))
        })
    }
}

/// The share of `labels` held by the most common one: the accuracy of always predicting it
/// (chance); `None` for no labels.
fn majority_share(labels: &[usize]) -> Option<f64> {
    let mut counts = std::collections::BTreeMap::new();
    for &y in labels {
        *counts.entry(y).or_insert(0u64) += 1;
    }
    let most = counts.values().max()?;
    Some(*most as f64 / labels.len() as f64)
}

/// Builds the data and the job `config` describes.
///
/// # Errors
/// Invalid config values, an unreadable data set, a CNN on non-square inputs, an LSTM on
/// features that are not token ids.
pub fn build(config: &TrainConfig) -> crate::Result<(Dataset, Job)> {
    config.validate()?;
    let data = Dataset::load_with_labels(&config.dataset, config.labels.as_deref(), config.seed)?;
    super::budget::check(config, &data)?;
    let p = Precision::new(&config.recipe, config.seed);
    if config.model == ModelKind::Gan {
        if data.name != "ring" {
            return Err(Error::InvalidValue {
                what: "dataset for the gan",
                value: data.name,
                expected: "ring (the evaluation counts the ring's modes)",
            });
        }
        let gan = GanTrainer::new(
            &config.gan,
            data.features(),
            p,
            &config.optimizer,
            config.recipe.loss_scaling,
            config.seed,
        )?;
        gan.precision.check_keep()?;
        return Ok((data, Job::Gan(gan)));
    }
    let trainer = classifier(config, &data, p, config.recipe.loss_scaling)?;
    trainer.precision.check_keep()?;
    Ok((data, Job::Classifier(trainer)))
}

/// The classifier `config` describes on `data`, with storage points `p` and the loss-scaling
/// policy `loss_scaling` (of the recipe `p` runs).
pub(crate) fn classifier(
    config: &TrainConfig,
    data: &Dataset,
    mut p: Precision,
    loss_scaling: LossScaling,
) -> crate::Result<Trainer> {
    let input = p.register("input");
    let mut rng = Rng::derive(config.seed, 1);
    let model = match config.model {
        ModelKind::Cnn => config
            .cnn
            .build(data.features(), data.classes, &mut p, &mut rng)?,
        ModelKind::Lstm => {
            let vocab = vocabulary(&data.train_x)?.max(vocabulary(&data.test_x)?);
            config.lstm.build(vocab, data.classes, &mut p, &mut rng)?
        }
        ModelKind::Mlp | ModelKind::Gan => {
            config
                .mlp
                .build(data.features(), data.classes, &mut p, &mut rng)
        }
    };
    let mut trainer = Trainer::new(
        model,
        p,
        input,
        &config.optimizer,
        Loss::CrossEntropy,
        loss_scaling,
    );
    trainer.set_loss_multiplier(config.loss_multiplier);
    Ok(trainer)
}

/// Where a classifier's run starts, for training the same model elsewhere from the same state
/// (the PyTorch cross-check): its data set, every parameter's initial master weights, and the
/// example indices of each step's batch, in the order `train` draws them.
#[derive(Debug)]
pub struct Start {
    /// The data set.
    pub data: Dataset,
    /// `(layer, "weight" | "bias", initial master weights)` in the model's order; a linear
    /// layer's weight is (outputs, inputs), its bias (1, outputs).
    pub params: Vec<(String, &'static str, Array2<f32>)>,
    /// The training examples of step 1, 2, ... (`config.steps` batches).
    pub batches: Vec<Vec<usize>>,
}

/// [`Start`] of the classifier `config` describes.
///
/// # Errors
/// A bad config or data set, or the GAN (which has two models and no labels).
pub fn start(config: &TrainConfig) -> crate::Result<Start> {
    let (data, job) = build(config)?;
    let Job::Classifier(trainer) = job else {
        return Err(Error::InvalidValue {
            what: "model",
            value: "gan".into(),
            expected: "a classifier (mlp, cnn or lstm)",
        });
    };
    let layers = trainer.precision.layers();
    let params = trainer
        .model
        .params()
        .into_iter()
        .map(|p| (layers[p.site].clone(), p.name, p.master.clone()))
        .collect();
    let mut batches = Batches::new(data.train_y.len(), Rng::derive(config.seed, 2));
    let batches = (0..config.steps)
        .map(|_| batches.next_batch(config.batch))
        .collect();
    Ok(Start {
        data,
        params,
        batches,
    })
}

/// Runs `config` and writes the run directory `dir` (which must not exist, or be empty).
/// `progress` is called after every step.
///
/// ```
/// use mixprec::recipe::Recipe;
/// use mixprec::train::{TrainConfig, training::train};
///
/// let config = TrainConfig {
///     recipe: Recipe::preset("fp16-dynamic")?,
///     steps: 3,
///     batch: 16,
///     ..TrainConfig::default()
/// };
/// let dir = std::env::temp_dir().join(format!("mixprec-doc-run-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let summary = train(&config, &dir, &mut |record| assert!(record.loss.is_finite()))?;
/// assert_eq!((summary.steps, summary.eval_metric.name.as_str()), (3, "test_accuracy"));
/// assert!(dir.join("metrics.jsonl").exists() && !dir.join("INCOMPLETE").exists());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// A bad config or data set (before anything is written), a directory that is not empty, or a
/// failed write (the directory then keeps its `INCOMPLETE` marker).
pub fn train(
    config: &TrainConfig,
    dir: &Path,
    progress: &mut dyn FnMut(&StepRecord),
) -> crate::Result<Summary> {
    let (data, mut job) = build(config)?;
    // The FP32 twin of a classifier, for the shadow steps (its own storage points and weights:
    // nothing of the run's state or random streams is touched).
    let mut shadow = match &job {
        Job::Classifier(_) if config.shadow_every > 0 => {
            let fp32 = Recipe::fp32();
            let p = Precision::new(&fp32, config.seed);
            Some(classifier(config, &data, p, fp32.loss_scaling)?)
        }
        _ => None,
    };
    let mut out = RunWriter::create(dir, config, shadow.is_some())?;

    let start = Instant::now();
    let mut batches = Batches::new(data.train_y.len(), Rng::derive(config.seed, 2));
    let mut last_eval = None;
    for step in 1..=config.steps {
        let capture = config.capture_every > 0 && (step == 1 || step % config.capture_every == 0);
        if capture {
            job.precision().set_observer(Some(Observer::default()));
        }
        let idx = batches.next_batch(config.batch);
        let x = data.train_x.select(Axis(0), &idx);
        let y: Vec<usize> = idx.iter().map(|&i| data.train_y[i]).collect();
        let shadow_now = config.shadow_every > 0 && (step == 1 || step % config.shadow_every == 0);
        let twin = match (&mut shadow, &mut job) {
            (Some(twin), Job::Classifier(t)) if shadow_now => {
                let loss = twin.shadow_of(t, &x, Targets::Labels(&y))?;
                t.precision.set_taps(true);
                Some((twin, loss))
            }
            _ => None,
        };
        let mut record = job.step(&x, &y)?;
        if let Some(observer) = job.precision().take_observer() {
            out.capture(&capture_record(&record, &observer, job.precision()))?;
        }
        if let Some((twin, loss)) = twin {
            let run_taps = job.precision().take_taps();
            job.precision().set_taps(false);
            let names = twin.precision.layers().to_vec();
            out.shadow(&shadow_record(
                &record,
                loss,
                &run_taps,
                &twin.precision.take_taps(),
                &names,
            ))?;
        }
        last_eval =
            (config.eval_every > 0 && step % config.eval_every == 0).then(|| job.evaluate(&data));
        record.eval.clone_from(&last_eval);
        out.step(&record)?;
        progress(&record);
    }
    // An evaluation after the last step is the final one: the same model, the same rounding.
    let eval_metric = match last_eval {
        Some(eval) => eval,
        None => job.evaluate(&data),
    };
    let summary = out.summary(
        &config.recipe.name,
        eval_metric,
        job.parameter_count(),
        job.weights_finite(),
        start.elapsed().as_secs_f64(),
    );
    out.finish(&summary)?;
    Ok(summary)
}

fn capture_record(record: &StepRecord, observer: &Observer, p: &Precision) -> CaptureRecord {
    let name = |layer: usize| p.layers().get(layer).cloned().unwrap_or_default();
    let mut sites = CaptureBuilder::new(p.layers().to_vec());
    for (&key, values) in &observer.values {
        let part = (!key.part.is_empty()).then_some(key.part);
        sites.add(
            &name(key.layer),
            key.class,
            part,
            values,
            p.part_counts(key),
        );
    }
    let sites = sites.sites();
    let update_ratios = observer
        .update_ratios
        .iter()
        .map(|(&layer, ratios)| UpdateRatios {
            layer: name(layer),
            ratios: ratios.clone(),
        })
        .collect();
    CaptureRecord {
        step: record.step,
        loss_scale: Some(record.loss_scale),
        sites,
        update_ratios,
    }
}

/// The run's gradients (`run`, scaled by the step's loss scale) against the FP32 shadow's
/// (`fp32`, loss scale 1), per layer (named by `names`) and gradient class.
fn shadow_record(
    record: &StepRecord,
    loss: f64,
    run: &BTreeMap<(usize, Class), Vec<f32>>,
    fp32: &BTreeMap<(usize, Class), Vec<f32>>,
    names: &[String],
) -> ShadowRecord {
    let inv = 1.0 / record.loss_scale;
    let sites = run
        .iter()
        .filter_map(|(key, g)| {
            let g32 = fp32.get(key).filter(|g32| g32.len() == g.len())?;
            Some(compare(names.get(key.0)?.clone(), key.1, g, g32, inv))
        })
        .collect();
    ShadowRecord {
        step: record.step,
        loss_scale: record.loss_scale,
        loss,
        sites,
    }
}

/// One gradient tensor `g * inv` against its FP32 twin `g32`, in f64.
fn compare(layer: String, tensor: Class, g: &[f32], g32: &[f32], inv: f64) -> ShadowSite {
    let (mut diff2, mut norm2, mut run2, mut dot, mut lost2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut nonzero, mut zeroed) = (0u64, 0u64);
    for (&a, &b) in g.iter().zip(g32) {
        let (a, b) = (f64::from(a) * inv, f64::from(b));
        diff2 += (a - b) * (a - b);
        norm2 += b * b;
        run2 += a * a;
        dot += a * b;
        if b != 0.0 {
            nonzero += 1;
            if a == 0.0 {
                zeroed += 1;
                lost2 += b * b;
            }
        }
    }
    let share = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    ShadowSite {
        layer,
        tensor,
        values: g.len() as u64,
        relative_error: if norm2 > 0.0 {
            (diff2 / norm2).sqrt()
        } else {
            f64::NAN
        },
        cosine: if norm2 > 0.0 && run2 > 0.0 {
            dot / (norm2 * run2).sqrt()
        } else {
            f64::NAN
        },
        zeroed: share(zeroed as f64, nonzero as f64),
        norm_lost: share(lost2, norm2),
    }
}

#[cfg(test)]
mod tests;
