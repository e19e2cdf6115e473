//! `mixprec export-tensorboard`: run directories as TensorBoard event files.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mixprec::export::tensorboard::{EVENTS_FILE, Export, export, run_name};
use mixprec::run::grid::GRID;

/// Export runs to TensorBoard: per step the scalars loss, loss_scale, skipped (0/1),
/// skipped_steps (so far), overflow (0/1), underflow/<class> (the share of the class's values
/// stored that step that underflowed to zero), grad_amax, updates_lost, generator_loss and
/// eval/<metric> where the run has them; per capture step the histograms <class>/<layer>[/<part>]
/// (weight/0.linear, weight_grad/2.linear, ...) and update_ratio/<layer>, of magnitudes |x| in
/// the capture's power-of-two bins (zeros in a first bucket below them; gradients scaled by the
/// loss scale, as captured). Each run goes in its own subdirectory of LOGDIR, named after the
/// run directory (a grid's runs: GRID_NAME/RUN_NAME), as LOGDIR/NAME/events.out.tfevents.0.mixprec,
/// so that `tensorboard --logdir LOGDIR` compares them. Exporting again replaces the files (the
/// same bytes for the same run: wall times are the run's duration spread over its steps, 0 for
/// an unfinished run); nothing is written unless every run reads.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directories (written by `mixprec train` or the PyTorch recorder, finished or not), or
    /// grid directories (written by `mixprec grid`: each of its started runs).
    #[arg(value_name = "RUN_DIR", required = true)]
    runs: Vec<PathBuf>,
    /// The log directory (created if needed). A run's subdirectory that holds event files
    /// mixprec did not write is refused; other files there are never touched.
    #[arg(long, value_name = "LOGDIR")]
    out: PathBuf,
}

/// Runs the command.
///
/// # Errors
/// An unreadable run or grid directory, two runs of one name, a target that holds other event
/// files, a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut runs = Vec::new();
    for dir in &args.runs {
        if dir.join(GRID).is_file() {
            let grid = run_name(dir)?;
            let plan = mixprec::train::grid::GridSpec::read(dir)?.plan()?;
            let started: Vec<_> = plan.runs.iter().filter(|r| r.dir(dir).is_dir()).collect();
            if started.is_empty() {
                anyhow::bail!("{}: a grid with no run started", dir.display());
            }
            runs.extend(started.into_iter().map(|r| Export {
                dir: r.dir(dir),
                name: grid.join(&r.name),
            }));
        } else {
            runs.push(Export {
                dir: dir.clone(),
                name: run_name(dir)?,
            });
        }
    }
    for e in export(&runs, &args.out)? {
        writeln!(
            out,
            "{}: {} steps, {} capture steps ({} histograms){}",
            e.name.display(),
            e.counts.steps,
            e.counts.capture_steps,
            e.counts.histograms,
            if e.complete { "" } else { ", unfinished" }
        )?;
    }
    writeln!(
        out,
        "each in {}/NAME/{EVENTS_FILE}; view with: tensorboard --logdir {}",
        args.out.display(),
        args.out.display()
    )?;
    Ok(ExitCode::SUCCESS)
}
