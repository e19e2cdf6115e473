//! `mixprec demo`: the paper's story in one command. The built-in MLP is trained on the built-in
//! digits three ways (fp32; fp16 with FP32 master weights and no loss scaling; the same with a
//! dynamic loss scaler), on a loss that is small as averaging over a large effective batch makes
//! it; the captured gradients are analyzed and one report page compares the runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixprec::io::write_dir_atomic;
use mixprec::recipe::Class;
use mixprec::report::page::{PlainWords, WindowAdvice, failed_to_train};
use mixprec::report::{Report, ReportOptions, RunData, Section};
use mixprec::run::{RunDir, Summary};
use mixprec::train::config::{Overrides, TrainConfig};
use mixprec::train::training;

/// Train the built-in MLP on the built-in digits in fp32, in fp16 without loss scaling and in
/// fp16 with a dynamic loss scaler; analyze the captured gradients; write one report page and
/// say what happened (seconds on 2 cores). Writes DIR/runs/* (run directories, replaced on a
/// rerun) and DIR/report/index.html.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The directory to write into (created if needed).
    #[arg(long, value_name = "DIR", default_value = "mixprec-demo")]
    out: PathBuf,
}

/// The loss multiplier: the loss divided by 2^16, as normalising over an effective batch of
/// 65,536 examples (gradient accumulation) does. In fp32 with Adam it changes nothing; in fp16 it
/// pushes the gradients under the smallest subnormal (../shared/PHENOMENA.md).
const LOSS_MULTIPLIER: f64 = 1.0 / 65536.0;

/// The three runs: the recipe, which names the run's directory and the run on the page, and
/// what it is in words.
const RUNS: [(&str, &str); 3] = [
    ("fp32", ""),
    ("fp16-master", "no loss scaling"),
    ("fp16-dynamic", "dynamic loss scale"),
];

/// Directories earlier versions of the demo gave a run, removed on a rerun with the others.
const EARLIER_NAMES: [&str; 1] = ["fp16-no-scaling"];

/// Runs the command.
///
/// # Errors
/// An output directory that cannot be written, or holding something other than the demo's runs.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let runs_dir = args.out.join("runs");
    let base = TrainConfig {
        loss_multiplier: LOSS_MULTIPLIER,
        ..TrainConfig::default()
    };
    let bar = super::progress_bar(base.steps * RUNS.len() as u64, "steps");
    let mut summaries = Vec::new();
    if args.out.exists() && !args.out.is_dir() {
        anyhow::bail!(
            "--out {}: an existing file, not a directory: choose another --out",
            args.out.display()
        );
    }
    let names: Vec<&str> = EARLIER_NAMES
        .into_iter()
        .chain(RUNS.iter().map(|(n, _)| *n))
        .collect();
    for name in &names {
        check_earlier_run(&runs_dir.join(name))?;
    }
    // The runs train into a staging directory beside `runs/` and move into place together, an
    // earlier demo's runs replaced only then: a failure leaves those, or nothing (the --out
    // directory removed when this call made it).
    let made = !args.out.exists();
    let trained = write_dir_atomic(&runs_dir, |staging| {
        for (name, _) in RUNS {
            let mut config = base.clone();
            config.apply(&Overrides {
                recipe: Some(name.into()),
                ..Overrides::default()
            })?;
            bar.set_message(name);
            summaries.push(training::train(&config, &staging.join(name), &mut |_| {
                bar.inc(1)
            })?);
        }
        for name in &names {
            let dir = runs_dir.join(name);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(mixprec::Error::io_at(&dir))?;
            }
        }
        Ok(())
    });
    if trained.is_err() && made {
        let _ = std::fs::remove_dir_all(&args.out);
    }
    trained?;
    bar.finish_and_clear();

    let dirs: Vec<PathBuf> = RUNS.iter().map(|(n, _)| runs_dir.join(n)).collect();
    let options = ReportOptions::default();
    let data = dirs
        .iter()
        .map(|d| RunData::read(d, &options))
        .collect::<mixprec::Result<Vec<_>>>()?;

    writeln!(
        out,
        "Trained the built-in MLP on the built-in digits ({} steps each), the loss divided by 2^16 \
         as averaging over a large effective batch does:",
        base.steps
    )?;
    for ((name, words), (r, s)) in RUNS.iter().zip(data.iter().zip(&summaries)) {
        let label = if words.is_empty() {
            (*name).to_string()
        } else {
            format!("{name} ({words})")
        };
        writeln!(out, "  {label:<34} {}", outcome(r, s, &data))?;
    }
    let (unscaled, dynamic) = (&data[1], &data[2]);
    let dynamic_scale = dynamic
        .loss_scale
        .points
        .last()
        .map_or(0, |p| p.1.log2().round() as i32);
    writeln!(
        out,
        "Without loss scaling, {} of the nonzero gradient values (activation and weight \
         gradients, over the {} capture steps) underflowed to zero in fp16; with the dynamic \
         scaler (2^{} at the end), {}.",
        mixprec::text::pct(gradients_underflowed(unscaled)),
        unscaled.captures.len(),
        dynamic_scale,
        mixprec::text::pct(gradients_underflowed(dynamic)),
    )?;
    // Section 6's window and recommendation for the fp32 run, from the same rule and data, and
    // the page's prediction for it (its weight gradients, every capture pooled).
    let advice = WindowAdvice::of(&data[0]);
    let predicted = data[0].predicted_min_log2_scale;
    // Within MATCH_TOLERANCE of fp32's accuracy: the grid report's rule for matching.
    let matched = (summaries[2].eval_metric.value - summaries[0].eval_metric.value).abs()
        <= mixprec::report::grid::MATCH_TOLERANCE;
    for line in conclusion(advice.as_ref(), predicted, dynamic_scale, matched) {
        writeln!(out, "{line}")?;
    }
    let index = Report::new(data).write(&args.out.join("report"))?;
    writeln!(out, "Report: {}", index.display())?;
    Ok(ExitCode::SUCCESS)
}

/// A run's outcome in words: its metric, whether it diverged or failed to train (the report's
/// rules), and its skipped steps.
fn outcome(r: &RunData, s: &Summary, runs: &[RunData]) -> String {
    let metric = format!("test accuracy {}", mixprec::text::pct(s.eval_metric.value));
    let failed = if s.diverged {
        ", diverged"
    } else if failed_to_train(r, runs).is_some() {
        ", failed to train"
    } else {
        ""
    };
    let skipped = if s.skipped_steps > 0 {
        format!(", {} steps skipped for overflow", s.skipped_steps)
    } else {
        String::new()
    };
    format!("{metric}{failed}{skipped}")
}

/// The share of the finite nonzero gradient values (activation and weight gradients of every
/// layer) that underflowed to zero when stored, over a run's capture steps: from the counts of
/// the page's information section (its shares are of every value stored, zeros included).
fn gradients_underflowed(r: &RunData) -> f64 {
    let (mut lost, mut nonzero) = (0.0, 0.0);
    for c in &r.captures {
        for class in [Class::ActivationGrad, Class::WeightGrad] {
            if let Some(s) = c.classes.get(&class) {
                let n = s.values as f64;
                lost += (s.underflow * n).round();
                nonzero += ((1.0 - s.zero - s.nonfinite) * n).round();
            }
        }
    }
    if nonzero > 0.0 { lost / nonzero } else { 0.0 }
}

/// The conclusion in at most three short lines, as the page's window section says it
/// ([`PlainWords`]): which scales are predicted to train like fp32, which scale to start a
/// GradScaler at, and why the windows' low edge is stricter; the first adds whether the dynamic
/// run matched fp32.
fn conclusion(
    advice: Option<&WindowAdvice>,
    predicted: Option<i32>,
    dynamic_scale: i32,
    matched: bool,
) -> Vec<String> {
    let dynamic = format!(
        "the dynamic run, at 2^{dynamic_scale}, {}",
        if matched { "did" } else { "did not" }
    );
    let Some(a) = advice else {
        return vec![format!(
            "No capture step of the fp32 run has a window in fp16: see the page's section {}.",
            Section::Window.number()
        )];
    };
    let words = PlainWords::of(a, predicted, "fp16");
    words
        .predicted
        .map(|p| format!("{p}; {dynamic}."))
        .into_iter()
        .chain([format!("{}.", words.start)])
        .chain(words.stricter.map(|s| format!("{s}.")))
        .collect()
}

/// Refuses anything at `dir` but a run directory an earlier demo wrote (which a rerun replaces).
fn check_earlier_run(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && RunDir::open(dir).is_err() {
        anyhow::bail!(
            "{} exists and is not a run directory: choose another --out",
            dir.display()
        );
    }
    Ok(())
}
