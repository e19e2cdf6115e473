//! What a run will cost, estimated from the config and the data's shape before anything is
//! allocated, and the limits it must fit in.
//!
//! A config is a few numbers, and a few numbers can ask for anything: an MLP of width 10^9 (the
//! allocator aborts the process), a depth of 100,000 (gigabytes of per-layer state and hundreds
//! of megabytes of captures in two steps), or one stray label of 999,999 that makes a
//! million-class output layer. So [`check`] runs between loading the data and building the model,
//! and refuses, in one line with the estimate, a run whose memory or capture file would exceed
//! its [`Limits`](super::config::Limits), a class count far above the labels actually present, and a batch larger than
//! the training set.
//!
//! The estimate is linear in four counts, with constants measured on this code (peak resident
//! set with `/usr/bin/time -f %M`, `captures.jsonl` sizes; `reports/reliability.md` has the
//! figures) and rounded up:
//! ```text
//! memory   = 16 MiB + 40 B x parameters + 32 KiB x storage sites + 8 B x data values
//!            + batch x (8 B x activations per example + 24 B x widest layer)
//! captures = 2.5 KiB x storage sites x captures,   captures = steps / capture_every + 1
//! ```
//! (measured: 32 B per parameter for the master weights, the rounded copy, the gradient, Adam's
//! two moments and the update; 4 to 7 B per activation kept for the backward pass, plus about
//! 20 B per unit of the widest layer for the products' temporaries; 31 KiB per storage site for
//! its statistics; 1.9 KiB per site per capture). It errs high, by up to 2x.

use super::config::{ModelKind, TrainConfig};
use super::data::Dataset;
use super::model::Cost;
use crate::error::Error;

/// What [`estimate`] finds: the counts and the bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Trainable parameters.
    pub parameters: f64,
    /// Layer outputs per example (the activations the backward pass keeps).
    pub activations: f64,
    /// Storage sites (points where values are rounded and counted: about two per layer).
    pub sites: f64,
    /// Units of the widest layer.
    pub widest: f64,
    /// Peak memory in bytes.
    pub memory: f64,
    /// Size of `captures.jsonl` in bytes.
    pub captures: f64,
}

const BASE: f64 = 16.0 * MIB;
const PER_PARAMETER: f64 = 40.0;
const PER_ACTIVATION: f64 = 8.0;
const PER_WIDEST: f64 = 24.0;
const PER_SITE: f64 = 32.0 * 1024.0;
const PER_DATA_VALUE: f64 = 8.0;
const CAPTURE_PER_SITE: f64 = 2.5 * 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

/// The class count refused without `sparse_labels`: more than this many times the number of
/// distinct labels, plus this many (a data set may lack a few classes, not most of them).
const SPARSE_FACTOR: usize = 4;
const SPARSE_SLACK: usize = 100;

/// The estimate of a run of `config` on data of `features` columns, `classes` classes (for the
/// LSTM, `features` is the sequence length and `vocab` the number of token ids) and `values`
/// feature values in all. Counts are `f64` so that no config can overflow them.
#[must_use]
pub fn estimate(
    config: &TrainConfig,
    features: usize,
    classes: usize,
    vocab: usize,
    values: usize,
) -> Estimate {
    let f = |n: usize| n as f64;
    let (features, classes) = (f(features), f(classes));
    let Cost {
        parameters,
        activations,
        sites,
        widest,
    } = match config.model {
        ModelKind::Mlp => config.mlp.cost(features, classes),
        ModelKind::Cnn => config.cnn.cost(features, classes),
        ModelKind::Lstm => config.lstm.cost(features, f(vocab), classes),
        ModelKind::Gan => config.gan.cost(features),
    };
    let batch = f(config.batch);
    let memory = BASE
        + PER_PARAMETER * parameters
        + batch * (PER_ACTIVATION * activations + PER_WIDEST * widest)
        + PER_SITE * sites
        + PER_DATA_VALUE * f(values);
    let captures = match config.capture_every {
        0 => 0.0,
        every => CAPTURE_PER_SITE * sites * (config.steps / every + 1) as f64,
    };
    Estimate {
        parameters,
        activations,
        sites,
        widest,
        memory,
        captures,
    }
}

/// Checks that a run of `config` on `data` fits: the batch in the training set, the class count
/// near the labels present, the estimated memory and captures within `config.limits`.
///
/// # Errors
/// [`Error::DoesNotFit`] naming the problem, the estimate and the flag or key that allows it.
pub fn check(config: &TrainConfig, data: &Dataset) -> crate::Result<()> {
    let rows = data.train_y.len();
    if config.batch > rows {
        return Err(Error::DoesNotFit {
            what: format!("batch {}", config.batch),
            problem: format!("larger than the {rows} training examples of {}", data.name),
            allow: "use at most the number of training examples (80% of a file's rows)",
        });
    }
    let limits = &config.limits;
    if config.model != ModelKind::Gan && !limits.sparse_labels {
        let mut seen = vec![false; data.classes];
        for &y in data.train_y.iter().chain(&data.test_y) {
            seen[y] = true;
        }
        let distinct = seen.iter().filter(|&&s| s).count();
        if data.classes > SPARSE_FACTOR * distinct + SPARSE_SLACK {
            return Err(Error::DoesNotFit {
                what: format!(
                    "labels of {}",
                    config.labels.as_deref().unwrap_or(&data.name)
                ),
                problem: format!(
                    "{} distinct values, but the largest, {}, makes {} classes (a stray label?)",
                    distinct,
                    data.classes - 1,
                    data.classes
                ),
                allow: "class indices should lie near 0..number of classes (--sparse-labels, or \"limits\": {\"sparse_labels\": true}, trains anyway)",
            });
        }
    }
    let vocab = if config.model == ModelKind::Lstm {
        let max = |x: &ndarray::Array2<f32>| x.iter().fold(0.0f32, |m, &v| m.max(v));
        (max(&data.train_x).max(max(&data.test_x)) as usize).saturating_add(1)
    } else {
        0
    };
    let values = data.train_x.len() + data.test_x.len();
    let e = estimate(config, data.features(), data.classes, vocab, values);
    let counts = format!(
        "{} parameters, {} storage sites, batch {} x {} activations",
        count(e.parameters),
        count(e.sites),
        config.batch,
        count(e.activations)
    );
    // Memory and captures fail alike: an estimate (of what, with its detail) over its limit.
    let within = |what: &str, estimate: f64, limit_mib: u64, of_detail: String, allow| {
        if estimate > limit_mib as f64 * MIB {
            return Err(Error::DoesNotFit {
                what: what.into(),
                problem: format!(
                    "about {} of {of_detail}, over the limit of {}",
                    bytes(estimate),
                    bytes(limit_mib as f64 * MIB)
                ),
                allow,
            });
        }
        Ok(())
    };
    within(
        "model size",
        e.memory,
        limits.memory_mib,
        format!("memory ({counts})"),
        "use a smaller model or batch, or a higher limit (--max-memory MIB, config key limits.memory_mib)",
    )?;
    within(
        "captures",
        e.captures,
        limits.captures_mib,
        format!(
            "captures.jsonl ({} storage sites, {} captures)",
            count(e.sites),
            config.steps / config.capture_every.max(1) + 1
        ),
        "use fewer layers or captures (--capture-every), or a higher limit (--max-captures MIB, config key limits.captures_mib)",
    )
}

/// A count for a message: `27.2M`, `3.5e18`, `950`.
fn count(n: f64) -> String {
    if n >= 1e15 {
        format!("{n:.1e}")
    } else if n >= 1e9 {
        format!("{:.1}G", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// Bytes for a message, in binary units: `6.4 GiB`, `370 MiB`, `1.2e19 B`.
fn bytes(b: f64) -> String {
    let gib = b / (MIB * 1024.0);
    if b >= 1e15 {
        format!("{b:.1e} B")
    } else if gib >= 1.0 {
        format!("{gib:.1} GiB")
    } else {
        format!("{:.0} MiB", b / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::model::MlpConfig;

    fn mlp(depth: usize, width: usize) -> TrainConfig {
        TrainConfig {
            mlp: MlpConfig {
                depth,
                width,
                ..MlpConfig::default()
            },
            ..TrainConfig::default()
        }
    }

    #[test]
    fn the_mlp_estimate_counts_parameters_exactly() {
        // 64 -> 256 -> 256 -> 10: the digits network.
        let e = estimate(&mlp(2, 256), 64, 10, 0, 0);
        assert_eq!(
            e.parameters,
            (64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) as f64
        );
        assert_eq!(e.sites, 6.0);
        assert!(e.memory < 64.0 * MIB, "{}", bytes(e.memory));
    }

    #[test]
    fn the_sizes_of_the_issue_are_refused_and_named() {
        let data = Dataset::load("digits", 0).unwrap();
        for (config, needle) in [
            (mlp(2, 1_000_000_000), "model size"),
            (mlp(100_000, 16), "GiB of memory"),
            (
                TrainConfig {
                    capture_every: 1,
                    steps: 2000,
                    ..mlp(3000, 16)
                },
                "of captures.jsonl",
            ),
            (
                TrainConfig {
                    batch: 5000,
                    ..TrainConfig::default()
                },
                "larger than the 1400 training examples",
            ),
        ] {
            let e = check(&config, &data).unwrap_err().to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{e}");
        }
        check(&TrainConfig::default(), &data).unwrap();
        let mut deep = mlp(100_000, 16);
        deep.limits.memory_mib = 1 << 20;
        let e = check(&deep, &data).unwrap_err().to_string();
        assert!(e.contains("4.3 GiB of captures.jsonl"), "{e}");
        deep.limits.captures_mib = 1 << 20;
        check(&deep, &data).unwrap();
    }

    #[test]
    fn a_stray_label_is_refused_unless_asked() {
        let x = ndarray::Array2::<f32>::zeros((100, 2));
        let mut y: Vec<usize> = (0..100).map(|i| i % 3).collect();
        y[7] = 999_999;
        let data = Dataset::split("stray.csv", &x, &y, 80, 0);
        let config = TrainConfig {
            batch: 16,
            ..TrainConfig::default()
        };
        let e = check(&config, &data).unwrap_err().to_string();
        assert!(
            e.contains("4 distinct values") && e.contains("1000000 classes"),
            "{e}"
        );
        let mut asked = config.clone();
        asked.limits.sparse_labels = true;
        // Asked, the million-class layer is still over the memory limit... with a narrow MLP,
        // not.
        asked.mlp.width = 16;
        asked.mlp.depth = 1;
        check(&asked, &data).unwrap();
    }
}
