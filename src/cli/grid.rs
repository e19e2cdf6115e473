//! `mixprec grid`: every combination of varied config values, times seeds, as run directories
//! trained in parallel, resumable and shardable.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use mixprec::run::grid::Vary;
use mixprec::train::TrainConfig;
use mixprec::train::grid::{self, Event, GridSpec, RunState, Shard};

/// Train a grid of runs: every combination of the --vary values, times --seeds seeds, each an
/// ordinary run directory under DIR/runs/ (as `mixprec train` writes it), in parallel (one run
/// per thread when there are at least as many runs as threads, the threads divided among the runs
/// otherwise; RAYON_NUM_THREADS sets the threads), plus
/// DIR/grid.jsonl (one line per finished run: varied values, seed, summary). A killed grid
/// resumes where it stopped: run the same command again. `mixprec report DIR` reports on it.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The base config (`mixprec train --print-config` shows every key); default: train's
    /// defaults.
    #[arg(long, value_name = "BASE.json")]
    config: Option<PathBuf>,
    /// A config key and its values: KEY=a,b,c or KEY=2^a..2^b (powers of two). Keys are
    /// config keys, nested ones joined by dots (recipe, recipe.rounding, optimizer.lr, steps),
    /// or loss_scale (what train --loss-scale does). Repeat for more keys: every combination
    /// is run.
    #[arg(long, value_name = "KEY=VALUES")]
    vary: Vec<String>,
    /// Seeds per combination: the base config's seed and the ones after it.
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true, value_parser = mixprec::flags::whole::<u64>)]
    seeds: u64,
    /// Run only the I-th of N deterministic shares of the grid (I from 1), for a scheduler's
    /// job array; the shares' runs merge in one grid directory.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// The grid directory (created; an existing one must hold the same grid: it is resumed).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Runs the command.
///
/// # Errors
/// A bad config, --vary, --seeds or --shard, or a directory holding another grid (all before any
/// training); a run that failed (after the others ran); a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let base = match &args.config {
        Some(path) => TrainConfig::from_file(path)?,
        None => TrainConfig::default(),
    };
    base.validate()?;
    let vary = args
        .vary
        .iter()
        .map(|v| v.parse::<Vary>())
        .collect::<mixprec::Result<Vec<_>>>()?;
    let shard = match &args.shard {
        Some(s) => s.parse::<Shard>()?,
        None => Shard::ALL,
    };
    let spec = GridSpec::new(base, vary, args.seeds)?;
    let runs = spec.runs()?;
    let share: Vec<&grid::GridRun> = runs
        .iter()
        .filter(|r| shard.holds(r.planned.position))
        .collect();
    grid::check_data(&runs)?;
    spec.prepare(&args.out)?;
    let mut todo = Vec::new();
    for run in &share {
        if grid::state(&args.out, run)? != RunState::Complete {
            todo.push(*run);
        }
    }
    let steps: u64 = todo.iter().map(|r| r.config.steps).sum();
    let bar = super::progress_bar(steps, "steps");
    let done = AtomicUsize::new(0);
    let threads = rayon::current_num_threads();
    let failed = grid::execute(&args.out, &todo, threads, &|event| match event {
        Event::Step => bar.inc(1),
        Event::Done(..) => {
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            bar.set_message(format!("{n}/{} runs", todo.len()));
        }
    });
    bar.finish_and_clear();
    let listed = grid::write_index(&args.out, &runs)?;
    writeln!(
        out,
        "grid: {} runs{} ({} already finished, {} trained, {} failed); {listed} of {} finished in the grid -> {}",
        share.len(),
        if shard == Shard::ALL {
            String::new()
        } else {
            format!(" in share {}/{}", shard.index, shard.count)
        },
        share.len() - todo.len(),
        todo.len() - failed.len(),
        failed.len(),
        runs.len(),
        args.out.join(mixprec::run::grid::INDEX).display()
    )?;
    if let Some((name, e)) = failed.first() {
        anyhow::bail!(
            "{} of {} runs failed, first {}: {e}",
            failed.len(),
            todo.len(),
            args.out.join(mixprec::run::grid::RUNS).join(name).display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
