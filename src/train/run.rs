//! A whole training run written to a run directory.
//!
//! # The run directory (an interface contract)
//! - `config.json`: the full resolved [`TrainConfig`] (the recipe as an object).
//! - `metrics.jsonl`: one [`StepRecord`] per line, in step order: `step`, `loss` (the batch's mean
//!   loss, unscaled; `null` when not finite), `loss_scale` (the scale this step's backward used),
//!   `overflow`, `skipped`, `updates_lost` (share of nonzero updates that changed no master
//!   weight) and, when some stored value was inf or NaN, `first_nonfinite`
//!   (`{"layer": "4.linear", "tensor": "activation_grad"}`). With `eval_every` N > 0, the lines of
//!   steps N, 2N, ... end with `eval`, the test metric after that step's update, named as in the
//!   summary: `"eval": {"name": "test_accuracy", "value": 0.93}`. Evaluation changes nothing in
//!   training (it rounds as training does but counts nothing, and leaves the stochastic-rounding
//!   stream and the GAN's noise where they were): the other keys are the same with and without
//!   it, byte for byte.
//! - `captures.jsonl`: one [`CaptureRecord`] per capture step (every `capture_every` steps, and
//!   the first): `{"step", "sites": [...], "update_ratios": [...]}`. Each site is a storage point,
//!   `{"layer", "tensor", "values", "rounding"}`: `values` is the log2 histogram
//!   ([`crate::stats::Histogram`], one bin per power of two) of the FP32 values before rounding,
//!   `rounding` the [`crate::format::RoundCounts`] of rounding them. Tensor classes: `weight`,
//!   `activation`, `activation_grad`, `weight_grad`, `optimizer_state` (one entry per part, named
//!   by the site's `part` key: `momentum`, or Adam's `adam_m`, `adam_v`, `adam_eps` and
//!   `adam_denominator`), `update`, `master` (only when the master format rounds,
//!   as in `fp16-pure`: FP32 master weights are exactly the values the `weight` entry shows
//!   before rounding, so they are not captured twice). Layers: `input`, `"{i}.{kind}"`,
//!   `loss`. Each `update_ratios` entry is `{"layer", "ratios"}`, the histogram of
//!   `|w| / |update|` over that layer's nonzero updates.
//! - `summary.json`: [`Summary`].
//! - `INCOMPLETE`: present while the run is going; a run directory with this file (or without
//!   `summary.json`) is a run that was killed. Every other file is written to a temporary name and
//!   renamed when complete, so no file is ever half-written.
//!
//! Runs are deterministic: the same config gives bit-identical `metrics.jsonl`, `captures.jsonl`
//! and `summary.json` (except its `wall_seconds`) whatever the number of threads.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ndarray::Axis;
use serde::{Deserialize, Serialize};

use super::capture::{Observer, StepRecord};
use super::config::{ModelKind, TrainConfig};
use super::data::{Batches, Dataset};
use super::loss::{Loss, Targets};
use super::model::{GanTrainer, Sequential, vocabulary};
use super::precision::{Class, Precision};
use super::rng::Rng;
use super::step::Trainer;
use crate::error::Error;
use crate::format::RoundCounts;
use crate::io::write_atomic;
use crate::stats::Histogram;

/// One storage point on a capture step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteCapture {
    /// Layer name.
    pub layer: String,
    /// Tensor class.
    pub tensor: Class,
    /// Which tensor of the class, when the layer stores several (the optimizer's state:
    /// `momentum`; Adam's `adam_m`, `adam_v`, `adam_eps`, `adam_denominator`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub part: Option<String>,
    /// Log2 histogram of the FP32 values before rounding (with zeros, NaN, infinities, amax,
    /// smallest nonzero magnitude, sums): `mixprec::stats::Histogram`'s serde form.
    pub values: Histogram,
    /// What rounding did to them.
    pub rounding: RoundCounts,
}

/// The update-to-weight ratios of one layer on a capture step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateRatios {
    /// Layer name.
    pub layer: String,
    /// Histogram of `|w| / |update|` over the layer's nonzero updates (`w` the master weight
    /// before the update). In fp16 an update is lost when the ratio exceeds about 2^11.
    pub ratios: Histogram,
}

/// One line of `captures.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptureRecord {
    /// The step captured.
    pub step: u64,
    /// Every storage point written that step, in layer order then class order.
    pub sites: Vec<SiteCapture>,
    /// Per layer with parameters that were updated (none on a skipped step).
    pub update_ratios: Vec<UpdateRatios>,
}

/// The evaluation of the trained model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalMetric {
    /// What is measured: `test_accuracy` for classifiers, `modes_covered` (0 to 8) for the GAN.
    pub name: String,
    /// Its value.
    pub value: f64,
}

/// A line of `metrics.jsonl` on an evaluation step: the step's record, then `eval`.
#[derive(Serialize)]
struct EvalLine<'a> {
    #[serde(flatten)]
    record: &'a StepRecord,
    eval: &'a EvalMetric,
}

/// `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The recipe's name.
    pub recipe: String,
    /// Steps run.
    pub steps: u64,
    /// Steps whose update was skipped (overflow under loss scaling).
    pub skipped_steps: u64,
    /// Steps whose gradients held an inf or NaN.
    pub overflow_steps: u64,
    /// True when the final loss or a weight is not finite, or the last `min(20, steps)` steps were
    /// all skipped (the loss scale can no longer make gradients finite).
    pub diverged: bool,
    /// The last step's batch loss (the discriminator's for the GAN; `null` when not finite).
    pub final_loss: f64,
    /// The test-set metric.
    pub eval_metric: EvalMetric,
    /// Trainable scalars.
    pub parameters: usize,
    /// Wall-clock time of the run (the one field that differs between identical runs).
    pub wall_seconds: f64,
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}

fn json_line<T: Serialize>(w: &mut impl Write, value: &T, path: &Path) -> crate::Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    serde_json::to_writer(&mut *w, value).map_err(|e| io(e.into()))?;
    w.write_all(b"\n").map_err(io)
}

/// A JSONL file written under a temporary name and renamed by [`Stream::finish`].
struct Stream {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
}

impl Stream {
    fn create(path: PathBuf) -> crate::Result<Stream> {
        let tmp = temp_name(&path);
        let file = File::create(&tmp).map_err(|source| Error::Io {
            path: tmp.clone(),
            source,
        })?;
        Ok(Stream {
            path,
            tmp,
            out: BufWriter::new(file),
        })
    }

    fn write<T: Serialize>(&mut self, value: &T) -> crate::Result<()> {
        json_line(&mut self.out, value, &self.tmp)
    }

    fn finish(mut self) -> crate::Result<()> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        self.out.flush().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)
    }
}

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

    /// One step on the training examples `idx` of `data`.
    ///
    /// # Errors
    /// Targets that do not fit the loss.
    pub fn step(&mut self, data: &Dataset, idx: &[usize]) -> crate::Result<StepRecord> {
        let x = data.train_x.select(Axis(0), idx);
        match self {
            Job::Classifier(t) => {
                let y: Vec<usize> = idx.iter().map(|&i| data.train_y[i]).collect();
                t.step(&x, Targets::Labels(&y))
            }
            Job::Gan(g) => g.step(&x),
        }
    }

    /// The evaluation of the trained model on `data`.
    pub fn evaluate(&mut self, data: &Dataset) -> EvalMetric {
        match self {
            Job::Classifier(t) => EvalMetric {
                name: "test_accuracy".into(),
                value: t.accuracy(&data.test_x, &data.test_y),
            },
            Job::Gan(g) => EvalMetric {
                name: "modes_covered".into(),
                value: g.modes_covered(),
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

/// Builds the data and the job `config` describes.
///
/// # Errors
/// Invalid config values, an unreadable data set, a CNN on non-square inputs, an LSTM on
/// features that are not token ids.
pub fn build(config: &TrainConfig) -> crate::Result<(Dataset, Job)> {
    config.validate()?;
    let data = Dataset::load_with_labels(&config.dataset, config.labels.as_deref(), config.seed)?;
    super::budget::check(config, &data)?;
    let mut p = Precision::new(&config.recipe, config.seed);
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
            config.seed,
        )?;
        return Ok((data, Job::Gan(gan)));
    }
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
    let mut trainer = Trainer::new(model, p, input, &config.optimizer, Loss::CrossEntropy);
    trainer.set_loss_multiplier(config.loss_multiplier);
    Ok((data, Job::Classifier(trainer)))
}

/// Runs `config` and writes the run directory `dir` (which must not exist or be empty).
/// `progress` is called after every step.
///
/// ```
/// use mixprec::train::{Recipe, TrainConfig, run::run};
///
/// let config = TrainConfig {
///     recipe: Recipe::preset("fp16-dynamic")?,
///     steps: 3,
///     batch: 16,
///     ..TrainConfig::default()
/// };
/// let dir = std::env::temp_dir().join(format!("mixprec-doc-run-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let summary = run(&config, &dir, &mut |record| assert!(record.loss.is_finite()))?;
/// assert_eq!((summary.steps, summary.eval_metric.name.as_str()), (3, "test_accuracy"));
/// assert!(dir.join("metrics.jsonl").exists() && !dir.join("INCOMPLETE").exists());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// A bad config or data set (before anything is written), a non-empty `dir`, or a failed write.
pub fn run(
    config: &TrainConfig,
    dir: &Path,
    progress: &mut dyn FnMut(&StepRecord),
) -> crate::Result<Summary> {
    let (data, mut job) = build(config)?;
    prepare_dir(dir)?;
    let marker = dir.join("INCOMPLETE");
    write_atomic(&marker, |w| {
        w.write_all(b"this run has not finished (or was killed)\n")
    })?;
    let config_json = serde_json::to_vec_pretty(config).map_err(|e| Error::BadFile {
        path: dir.join("config.json"),
        problem: e.to_string(),
    })?;
    write_atomic(&dir.join("config.json"), |w| w.write_all(&config_json))?;
    let mut metrics = Stream::create(dir.join("metrics.jsonl"))?;
    let mut captures = Stream::create(dir.join("captures.jsonl"))?;

    let start = Instant::now();
    let mut batches = Batches::new(data.train_y.len(), Rng::derive(config.seed, 2));
    let (mut skipped, mut overflows, mut trailing_skips) = (0u64, 0u64, 0u64);
    let (mut last, mut last_eval) = (None, None);
    for step in 1..=config.steps {
        let capture = config.capture_every > 0 && (step == 1 || step % config.capture_every == 0);
        if capture {
            job.precision().set_observer(Some(Observer::default()));
        }
        let idx = batches.next_batch(config.batch);
        let record = job.step(&data, &idx)?;
        if let Some(observer) = job.precision().take_observer() {
            captures.write(&capture_record(step, &observer, job.precision()))?;
        }
        skipped += u64::from(record.skipped);
        overflows += u64::from(record.overflow);
        trailing_skips = if record.skipped {
            trailing_skips + 1
        } else {
            0
        };
        if config.eval_every > 0 && step % config.eval_every == 0 {
            let eval = job.evaluate(&data);
            metrics.write(&EvalLine {
                record: &record,
                eval: &eval,
            })?;
            last_eval = Some(eval);
        } else {
            last_eval = None;
            metrics.write(&record)?;
        }
        progress(&record);
        last = Some(record);
    }
    let final_loss = last.map_or(f64::NAN, |r| r.loss);
    // An evaluation after the last step is the final one: the same model, the same rounding.
    let eval_metric = match last_eval {
        Some(eval) => eval,
        None => job.evaluate(&data),
    };
    let weights_finite = job.weights_finite();
    let summary = Summary {
        recipe: config.recipe.name.clone(),
        steps: config.steps,
        skipped_steps: skipped,
        overflow_steps: overflows,
        diverged: !final_loss.is_finite()
            || !weights_finite
            || trailing_skips >= config.steps.min(20),
        final_loss,
        eval_metric,
        parameters: job.parameter_count(),
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    metrics.finish()?;
    captures.finish()?;
    let summary_json = serde_json::to_vec_pretty(&summary).map_err(|e| Error::BadFile {
        path: dir.join("summary.json"),
        problem: e.to_string(),
    })?;
    write_atomic(&dir.join("summary.json"), |w| w.write_all(&summary_json))?;
    std::fs::remove_file(&marker).map_err(|source| Error::Io {
        path: marker,
        source,
    })?;
    Ok(summary)
}

fn prepare_dir(dir: &Path) -> crate::Result<()> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(io)?;
        if entries.next().is_some() {
            return Err(Error::BadFile {
                path: dir.to_path_buf(),
                problem: "the output directory exists and is not empty (choose a new one)".into(),
            });
        }
        Ok(())
    } else {
        std::fs::create_dir_all(dir).map_err(io)
    }
}

fn capture_record(step: u64, observer: &Observer, p: &Precision) -> CaptureRecord {
    let name = |layer: usize| p.layers().get(layer).cloned().unwrap_or_default();
    let sites = observer
        .values
        .iter()
        .map(|(&(layer, tensor, part), values)| SiteCapture {
            layer: name(layer),
            tensor,
            part: (!part.is_empty()).then(|| part.to_string()),
            values: values.clone(),
            rounding: p.part_counts((layer, tensor, part)),
        })
        .collect();
    let update_ratios = observer
        .update_ratios
        .iter()
        .map(|(&layer, ratios)| UpdateRatios {
            layer: name(layer),
            ratios: ratios.clone(),
        })
        .collect();
    CaptureRecord {
        step,
        sites,
        update_ratios,
    }
}

#[cfg(test)]
mod tests;
