//! `mixprec report`: one self-contained HTML page (and report.json, PNG and SVG figures) of one
//! or more run directories.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mixprec::format::FloatFormat;
use mixprec::report::grid::is_grid;
use mixprec::report::{GridReport, Report, ReportOptions, RunData};

/// Report on training runs: findings in words, the runs compared, loss and loss-scale curves,
/// what rounding lost per layer over training, the paper's Figure 3 from the run, the
/// loss-scale window over training, swamping and non-finite events. Writes DIR/index.html (one
/// self-contained page: figures inline as SVG, no script, no network), DIR/report.json (its
/// numbers) and DIR/figures/*.png and *.svg. Unfinished (killed) runs are reported up to their
/// last written step.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directories (written by `mixprec train`); several are compared on the same axes. Or one
    /// grid directory (written by `mixprec grid`): the metric against the varied key, over seeds.
    /// Or one plan directory (written by `mixprec plan` or the PyTorch side): each layer's
    /// sensitivity, the plan, and its validation by re-training.
    #[arg(value_name = "RUN_DIR", required = true)]
    runs: Vec<PathBuf>,
    /// The directory to write the report into (created if needed; its index.html, report.json
    /// and the figures in figures/ are replaced, figures an earlier report wrote there are
    /// removed, and a file mixprec did not write is never touched).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The format gradients are judged against (zones, loss-scale windows); default: each run's
    /// gradient format, fp16 for runs whose gradients are fp32.
    #[arg(long, value_name = "F")]
    format: Option<String>,
    /// The capture step of the histogram figures (default: the first capture whose activation
    /// gradients hold a finite nonzero value, else the first).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = mixprec::flags::whole::<u64>)]
    step: Option<u64>,
}

/// Runs the command.
///
/// # Errors
/// An unreadable run directory, a bad format name or step, a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let format: Option<FloatFormat> = args.format.as_deref().map(str::parse).transpose()?;
    let options = ReportOptions {
        format,
        step: args.step,
    };
    if let Some(dir) = args.runs.iter().find(|d| mixprec::run::plan::is_plan(d)) {
        if args.runs.len() > 1 {
            anyhow::bail!(
                "{} is a plan directory: report it alone (its runs are compared in its report)",
                dir.display()
            );
        }
        let report = mixprec::report::plan::PlanReport::read(dir)?;
        let index = report.write(&args.out)?;
        for f in report.findings() {
            writeln!(out, "- {f}")?;
        }
        writeln!(out, "report: {}", index.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(grid) = args.runs.iter().find(|d| is_grid(d)) {
        if args.runs.len() > 1 {
            anyhow::bail!(
                "{} is a grid directory: report it alone (its runs are compared in its report)",
                grid.display()
            );
        }
        let plan = mixprec::train::grid::GridSpec::read(grid)?.plan()?;
        let report = GridReport::read(grid, &plan, &options)?;
        let index = report.write(&args.out)?;
        for f in &report.findings {
            writeln!(out, "- {f}")?;
        }
        writeln!(out, "report: {}", index.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    for (i, a) in args.runs.iter().enumerate() {
        if args.runs[..i].iter().any(|b| same_dir(a, b)) {
            anyhow::bail!("{}: given twice", a.display());
        }
    }
    let runs = args
        .runs
        .iter()
        .map(|dir| RunData::read(dir, &options))
        .collect::<mixprec::Result<Vec<_>>>()?;
    let report = Report::new(runs);
    let index = report.write(&args.out)?;
    for f in &report.findings {
        writeln!(out, "- {}", f.text)?;
    }
    writeln!(out, "report: {}", index.display())?;
    Ok(ExitCode::SUCCESS)
}

fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}
