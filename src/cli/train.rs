//! `mixprec train`: trains a model under a precision recipe and writes a run directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixprec::train::config::{Overrides, TrainConfig};
use mixprec::train::training;

/// Train a model under a precision recipe and write a run directory (config.json, metrics.jsonl,
/// captures.jsonl, summary.json). Flags override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A JSON config file (`--print-config` shows every key); flags override its values.
    #[arg(long, value_name = "FILE.json")]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
    /// The run directory to create (must not exist, or be empty).
    #[arg(long, value_name = "DIR", required_unless_present = "print_config")]
    out: Option<PathBuf>,
    /// Print the resolved config (defaults, then the config file, then the flags) as JSON and
    /// exit without training: every key a config file can set, as a starting point for one.
    #[arg(long)]
    print_config: bool,
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
    config.apply(&args.overrides)?;
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
                args.overrides
                    .dataset
                    .is_none()
                    .then_some(config.dataset.as_str()),
                "--dataset",
            ),
            (
                config
                    .labels
                    .as_deref()
                    .filter(|_| args.overrides.labels.is_none()),
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
