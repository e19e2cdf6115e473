//! `mixprec train`: trains a model under a precision recipe and writes a run directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixprec::format::{Overflow, Rounding};
use mixprec::recipe::{Accumulation, PRESET_NAMES};
use mixprec::scaling::policy::POLICY_NAMES;
use mixprec::scaling::scaler::LossScaling;
use mixprec::train::config::{ModelKind, Overrides, TrainConfig};
use mixprec::train::training;

use super::round_args::{parse, whole};

/// Train a model under a precision recipe and write a run directory (config.json, metrics.jsonl,
/// captures.jsonl, summary.json). Flags override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A JSON config file (`--print-config` shows every key); flags override its values.
    #[arg(long, value_name = "FILE.json")]
    config: Option<PathBuf>,
    // The help lists the models from their table.
    #[arg(long, value_parser = parse::<ModelKind>, help = format!("Model: {}", ModelKind::NAMES))]
    model: Option<ModelKind>,
    /// Data set: digits, blobs, spirals, recall (a sequence task), ring (for the GAN), a CSV
    /// file (features, then an integer label), a .npz with arrays x (features) and y (labels), or
    /// a .npy of features (2-D; labels from --labels, else its last column).
    #[arg(long, value_name = "NAME|PATH")]
    dataset: Option<String>,
    /// With a .npy dataset: a .npy of its labels (1-D, one integer class index per row).
    #[arg(long, value_name = "Y.npy")]
    labels: Option<String>,
    // The help lists the presets from their table.
    #[arg(long, value_name = "NAME", help = format!("Precision recipe: {}", PRESET_NAMES.join(", ")))]
    recipe: Option<String>,
    // The help lists the modes from their table.
    #[arg(long, value_name = "MODE", value_parser = parse::<Rounding>, help = format!(
        "Rounding mode at every storage point (overrides the recipe's): {}",
        Rounding::NAMES
    ))]
    rounding: Option<Rounding>,
    /// Where matrix-product sums are kept (overrides the recipe's): fp32, or storage (rounded to
    /// the output's format after every addition; slow).
    #[arg(long, value_name = Accumulation::CHOICES, value_parser = parse::<Accumulation>)]
    accumulation: Option<Accumulation>,
    /// Overflow rule at every storage point (overrides the recipe's): ieee (infinity) or
    /// saturate (clamp to the largest finite value).
    #[arg(long, value_name = Overflow::CHOICES, value_parser = parse::<Overflow>)]
    overflow: Option<Overflow>,
    // The help lists the policies from their table.
    #[arg(long, value_name = "NAME", value_parser = parse::<LossScaling>, help = format!(
        "Loss scaler (replaces the recipe's): {}; a dynamic one takes changes to its parameters \
         after a colon (deepspeed:consecutive_hysteresis=true, gradscaler:growth_interval=50). \
         Config key `scaler`",
        POLICY_NAMES.join(", ")
    ))]
    scaler: Option<LossScaling>,
    /// Loss scale: the static scale (or the initial dynamic scale); turns a recipe without
    /// scaling into a static one. A power of two (2^16, 2**16) or a number (65536).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = parse_loss_scale)]
    loss_scale: Option<f32>,
    /// Optimizer steps.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    steps: Option<u64>,
    /// Examples per batch.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<usize>)]
    batch: Option<usize>,
    /// Learning rate (a positive finite number).
    #[arg(long, value_name = "X", allow_negative_numbers = true, value_parser = parse_lr)]
    lr: Option<f64>,
    /// Seed of weights, batches, synthetic data and stochastic rounding.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    seed: Option<u64>,
    /// Capture storage-point summaries every N steps (0: never).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    capture_every: Option<u64>,
    /// Evaluate the test metric every N steps, into that step's metrics.jsonl line as "eval"
    /// (0: only at the end).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    eval_every: Option<u64>,
    /// On step 1 and every N steps, also run the step in FP32 from the same weights and batch,
    /// recording in shadow.jsonl how much of each gradient was lost (0: never; classifiers only).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    shadow_every: Option<u64>,
    /// Refuse a run whose estimated peak memory exceeds this many MiB (default 4096; config key
    /// limits.memory_mib).
    #[arg(long, value_name = "MIB", allow_negative_numbers = true, value_parser = whole::<u64>)]
    max_memory: Option<u64>,
    /// Refuse a run whose estimated captures.jsonl exceeds this many MiB (default 1024; config
    /// key limits.captures_mib).
    #[arg(long, value_name = "MIB", allow_negative_numbers = true, value_parser = whole::<u64>)]
    max_captures: Option<u64>,
    /// Train even when the largest label makes far more classes than there are distinct labels
    /// (refused by default: one stray label of 999999 would build a million-class layer).
    #[arg(long)]
    sparse_labels: bool,
    /// The run directory to create (must not exist, or be empty).
    #[arg(long, value_name = "DIR", required_unless_present = "print_config")]
    out: Option<PathBuf>,
    /// Print the resolved config (defaults, then the config file, then the flags) as JSON and
    /// exit without training: every key a config file can set, as a starting point for one.
    #[arg(long)]
    print_config: bool,
}

/// A learning rate: refused here, before `--print-config` could print a NaN as `null` that a
/// config file then cannot hold.
fn parse_lr(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(x) => Err(format!(
            "invalid learning rate '{s}' ({x}): expected a positive finite number"
        )),
        Err(_) => Err(format!(
            "invalid learning rate '{s}': expected a positive finite number"
        )),
    }
}

fn parse_loss_scale(s: &str) -> Result<f32, String> {
    // clap already names the flag and the value: keep only the reason.
    mixprec::format::parse_loss_scale("--loss-scale", s).map_err(|e| match e {
        mixprec::Error::BadScale { problem, .. } => problem,
        e => e.to_string(),
    })
}

/// Refuses a data file named by the config file `config` that is not there: the path is read
/// relative to the current directory, as `train` stored it, not to the config file's, which a
/// user repeating a run from its `config.json` elsewhere would not guess.
fn missing_relative_path(file: &str, config: &Path, flag: &str) -> anyhow::Result<()> {
    let path = Path::new(file);
    if mixprec::train::data::BUILTIN.contains(&file) || path.is_absolute() || path.exists() {
        return Ok(());
    }
    let here = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
    anyhow::bail!(
        "{file} (from {}): no such file relative to the current directory {here}; a path in a config file is read from the current directory, as train stored it, not from the config file's: run from the directory the run was trained in, or give {flag}",
        config.display()
    )
}

/// Runs the command.
///
/// # Errors
/// A bad config, flag or data set, a non-empty output directory, a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_file(path)?,
        None => TrainConfig::default(),
    };
    config.apply(&Overrides {
        model: args.model,
        dataset: args.dataset.clone(),
        labels: args.labels.clone(),
        recipe: args.recipe.clone(),
        rounding: args.rounding,
        accumulation: args.accumulation,
        overflow: args.overflow,
        scaler: args.scaler,
        loss_scale: args.loss_scale,
        steps: args.steps,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
        capture_every: args.capture_every,
        eval_every: args.eval_every,
        shadow_every: args.shadow_every,
        max_memory: args.max_memory,
        max_captures: args.max_captures,
        sparse_labels: args.sparse_labels,
    })?;
    // Whatever the config file or a flag holds, what is printed must read back as a config.
    config.validate()?;
    if args.print_config {
        // Every key, also those a run's config.json leaves out at their defaults.
        let mut json = serde_json::to_value(&config)?;
        if let Some(keys) = json.as_object_mut() {
            keys.entry("labels").or_insert(serde_json::Value::Null);
            keys.entry("shadow_every").or_insert(0.into());
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(dir) = &args.out else {
        anyhow::bail!("--out DIR is required (see --help)");
    };
    if let Some(path) = &args.config {
        let from_config = [
            (
                args.dataset.is_none().then_some(config.dataset.as_str()),
                "--dataset",
            ),
            (
                config.labels.as_deref().filter(|_| args.labels.is_none()),
                "--labels",
            ),
        ];
        for (file, flag) in from_config {
            if let Some(file) = file {
                missing_relative_path(file, path, flag)?;
            }
        }
    }
    let bar = super::progress_bar(config.steps, "steps");
    let summary = training::train(&config, dir, &mut |r| {
        bar.inc(1);
        if r.step % 10 == 0 {
            bar.set_message(format!("loss {:.4}  scale {}", r.loss, r.loss_scale));
        }
    })?;
    bar.finish_and_clear();
    writeln!(
        out,
        "{}: {} steps ({} skipped), final loss {:.4}, {} {:.4}{}, {:.1} s -> {}",
        summary.recipe,
        summary.steps,
        summary.skipped_steps,
        summary.final_loss,
        summary.eval_metric.name,
        summary.eval_metric.value,
        if summary.diverged {
            ", DIVERGED"
        } else if summary.skipped_steps == summary.steps {
            ", no update applied (every step skipped for overflow)"
        } else {
            ""
        },
        summary.wall_seconds,
        dir.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
