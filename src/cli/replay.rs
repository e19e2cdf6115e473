//! `mixprec replay`: what other loss-scaling policies would have done over a recorded run.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use mixprec::format::FloatFormat;
use mixprec::report::replay::{HEADER, notes, replay_run, table, write_replay};
use mixprec::scaling::policy::POLICY_NAMES;

/// Replay loss-scaling policies over a recorded run, open loop: from each step's largest
/// gradient (grad_amax) and the captured gradient histograms, each policy's scale trajectory,
/// skipped steps, steps outside the loss-scale window and underflow at its scale. Later
/// gradients are the recorded run's whatever a policy would have done; replaying the policy the
/// run used ('run') gives exactly the run's scales and skipped steps.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (written by `mixprec train`, schema 1).
    #[arg(value_name = "RUN_DIR")]
    run: PathBuf,
    // The help lists the policies from their table.
    #[arg(long, value_name = "NAME", num_args = 1.., required = true, help = format!(
        "Policies: {}, a dynamic one with changed parameters \
         (deepspeed:consecutive_hysteresis=true, gradscaler:growth_interval=50), or run (the \
         run's own)",
        POLICY_NAMES.join(", ")
    ))]
    policy: Vec<String>,
    /// Print the numbers as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write a report page into DIR: index.html (table and figure), replay.json,
    /// figures/replay.{png,svg}.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The format gradients are judged against (default: the run's gradient format, fp16 for
    /// fp32 gradients).
    #[arg(long, value_name = "F")]
    format: Option<String>,
}

/// Runs the command.
///
/// # Errors
/// An unreadable run directory, a bad policy or format name, a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let format: Option<FloatFormat> = args.format.as_deref().map(str::parse).transpose()?;
    if let Some(dir) = &args.out {
        // Refused before the (possibly long) replay rather than after it.
        mixprec::report::check_outputs(dir, &["index.html", "replay.json"], "--out")?;
    }
    let steps = mixprec::run::RunDir::open(&args.run)?
        .summary
        .map(|s| s.steps);
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(steps, ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} steps  [{elapsed} < {eta}]")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let r = replay_run(&args.run, &args.policy, format, &mut |_| bar.inc(1))?;
    bar.finish_and_clear();
    let page = args
        .out
        .as_ref()
        .map(|dir| write_replay(dir, &r))
        .transpose()?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        writeln!(
            out,
            "{}: {} steps of {} (loss scaling {}), gradients judged against {}",
            r.run,
            r.replay.steps,
            r.recipe,
            r.run_policy.as_deref().unwrap_or("unknown"),
            r.replay.judged.format
        )?;
        writeln!(out, "{}\n", r.replay.open_loop)?;
        mixprec::text::table(out, &HEADER, &table(&r))?;
        for note in notes(&r.replay) {
            writeln!(out, "\n{note}")?;
        }
        if r.replay.captures.is_empty() {
            writeln!(
                out,
                "\nThe run has no capture steps: no underflow, and no low edge of the window."
            )?;
        }
    }
    if let Some(page) = page
        && !args.json
    {
        writeln!(out, "\nreport: {}", page.display())?;
    }
    Ok(ExitCode::SUCCESS)
}
