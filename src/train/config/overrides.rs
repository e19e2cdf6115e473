//! The command-line values that replace a config file's: one struct that is both the library's
//! value ([`super::TrainConfig::apply`]) and the `train` command's flags (clap flattens it into
//! the command), so that no field is mirrored by hand between the two.

use crate::flags::{parse, whole};
use crate::format::{Overflow, Rounding};
use crate::recipe::{Accumulation, PRESET_NAMES};
use crate::scaling::policy::POLICY_NAMES;
use crate::scaling::scaler::LossScaling;

use super::ModelKind;

/// Command-line values that replace the config file's (each `None` keeps the file's). Each
/// field's doc comment is its flag's help.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// `--model`: the model (its help lists the models from their table).
    #[arg(long, value_parser = parse::<ModelKind>, help = format!("Model: {}", ModelKind::NAMES))]
    pub model: Option<ModelKind>,
    /// Data set: digits, blobs, spirals, recall (a sequence task), ring (for the GAN), a CSV
    /// file (features, then an integer label), a .npz with arrays x (features) and y (labels), or
    /// a .npy of features (2-D; labels from --labels, else its last column).
    #[arg(long, value_name = "NAME|PATH")]
    pub dataset: Option<String>,
    /// With a .npy dataset: a .npy of its labels (1-D, one integer class index per row).
    #[arg(long, value_name = "Y.npy")]
    pub labels: Option<String>,
    /// `--recipe`: a preset name (its help lists the presets from their table).
    #[arg(long, value_name = "NAME", help = format!("Precision recipe: {}", PRESET_NAMES.join(", ")))]
    pub recipe: Option<String>,
    /// `--rounding`: the rounding mode (its help lists the modes from their table).
    #[arg(long, value_name = "MODE", value_parser = parse::<Rounding>, help = format!(
        "Rounding mode at every storage point (overrides the recipe's): {}",
        Rounding::NAMES
    ))]
    pub rounding: Option<Rounding>,
    /// Where matrix-product sums are kept (overrides the recipe's): fp32, or storage (rounded to
    /// the output's format after every addition; slow).
    #[arg(long, value_name = Accumulation::CHOICES, value_parser = parse::<Accumulation>)]
    pub accumulation: Option<Accumulation>,
    /// Overflow rule at every storage point (overrides the recipe's): ieee (infinity) or
    /// saturate (clamp to the largest finite value).
    #[arg(long, value_name = Overflow::CHOICES, value_parser = parse::<Overflow>)]
    pub overflow: Option<Overflow>,
    /// `--scaler`: a loss-scaling policy (its help lists the policies from their table).
    #[arg(long, value_name = "NAME", value_parser = parse::<LossScaling>, help = format!(
        "Loss scaler (replaces the recipe's): {}; a dynamic one takes changes to its parameters \
         after a colon (deepspeed:consecutive_hysteresis=true, gradscaler:growth_interval=50). \
         Config key `scaler`",
        POLICY_NAMES.join(", ")
    ))]
    pub scaler: Option<LossScaling>,
    /// Loss scale: the static scale (or the initial dynamic scale); turns a recipe without
    /// scaling into a static one. A power of two (2^16, 2**16) or a number (65536).
    #[arg(long, value_name = "S", allow_negative_numbers = true, value_parser = parse_loss_scale)]
    pub loss_scale: Option<f32>,
    /// Optimizer steps.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub steps: Option<u64>,
    /// Examples per batch.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<usize>)]
    pub batch: Option<usize>,
    /// Learning rate (a positive finite number).
    #[arg(long, value_name = "X", allow_negative_numbers = true, value_parser = parse_lr)]
    pub lr: Option<f64>,
    /// Seed of weights, batches, synthetic data and stochastic rounding.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub seed: Option<u64>,
    /// Capture storage-point summaries every N steps (0: never).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub capture_every: Option<u64>,
    /// Evaluate the test metric every N steps, into that step's metrics.jsonl line as "eval"
    /// (0: only at the end).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub eval_every: Option<u64>,
    /// On step 1 and every N steps, also run the step in FP32 from the same weights and batch,
    /// recording in shadow.jsonl how much of each gradient was lost (0: never; classifiers only).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub shadow_every: Option<u64>,
    /// Refuse a run whose estimated peak memory exceeds this many MiB (default 4096; config key
    /// limits.memory_mib).
    #[arg(long, value_name = "MIB", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub max_memory: Option<u64>,
    /// Refuse a run whose estimated captures.jsonl exceeds this many MiB (default 1024; config
    /// key limits.captures_mib).
    #[arg(long, value_name = "MIB", allow_negative_numbers = true, value_parser = whole::<u64>)]
    pub max_captures: Option<u64>,
    /// Train even when the largest label makes far more classes than there are distinct labels
    /// (refused by default: one stray label of 999999 would build a million-class layer).
    #[arg(long)]
    pub sparse_labels: bool,
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

/// A loss scale as users write it ([`crate::format::parse_loss_scale`]).
fn parse_loss_scale(s: &str) -> Result<f32, String> {
    // clap already names the flag and the value: keep only the reason.
    crate::format::parse_loss_scale("--loss-scale", s).map_err(|e| match e {
        crate::Error::BadScale { problem, .. } => problem,
        e => e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The overrides as a command of their own, as `train` flattens them.
    #[derive(Debug, clap::Parser)]
    struct Flags {
        #[command(flatten)]
        overrides: Overrides,
    }

    fn flags(args: &[&str]) -> Result<Overrides, String> {
        let argv = std::iter::once("train").chain(args.iter().copied());
        Flags::try_parse_from(argv)
            .map(|f| f.overrides)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_flag_sets_its_field_and_no_flag_sets_none() {
        let o = flags(&[
            "--model",
            "cnn",
            "--recipe",
            "bf16-master",
            "--loss-scale",
            "2^10",
            "--steps",
            "7",
            "--lr",
            "0.5",
            "--max-captures",
            "3",
            "--sparse-labels",
        ])
        .unwrap();
        assert_eq!(o.model, Some(ModelKind::Cnn));
        assert_eq!(o.recipe.as_deref(), Some("bf16-master"));
        assert_eq!(
            (o.loss_scale, o.steps, o.lr),
            (Some(1024.0), Some(7), Some(0.5))
        );
        assert_eq!(
            (o.max_captures, o.max_memory, o.sparse_labels),
            (Some(3), None, true)
        );
        let none = flags(&[]).unwrap();
        assert!(none.model.is_none() && none.steps.is_none() && !none.sparse_labels);
    }

    #[test]
    fn bad_values_are_refused_with_their_reason() {
        for (args, reason) in [
            (["--lr", "-1"], "expected a positive finite number"),
            (["--lr", "nan"], "expected a positive finite number"),
            (["--steps", "-1"], "a negative number"),
            (["--batch", "1.5"], "a fraction"),
            (["--loss-scale", "0"], "--loss-scale"),
        ] {
            let e = flags(&args).unwrap_err();
            assert!(e.contains(reason) && e.contains(args[0]), "{args:?}: {e}");
        }
    }
}
