//! Run directories as TensorBoard event files (`mixprec export-tensorboard`): each run's per-step
//! scalars and captured histograms, one event file per run in a subdirectory of the log
//! directory named after the run, so that `tensorboard --logdir LOGDIR` compares the runs.
//!
//! # What is written (a contract other tools read)
//! `LOGDIR/<name>/events.out.tfevents.0.mixprec` ([`EVENTS_FILE`]), records as
//! [`crate::io::tensorboard`] describes: the version event, then one event per step that has a
//! line in `metrics.jsonl` or in `captures.jsonl`, in step order, holding:
//!
//! | tag | value | from |
//! |---|---|---|
//! | `loss` | the batch's mean loss, unscaled (NaN when the log says `null`: not finite) | every step |
//! | `loss_scale` | the scale the step's backward pass used | every step |
//! | `skipped` | 1 when the optimizer step was skipped, else 0 | every step |
//! | `skipped_steps` | steps skipped so far, this one included | every step |
//! | `overflow` | 1 when a weight gradient held an inf or NaN, else 0 | every step |
//! | `underflow/<class>` | the share (0 to 1) of the class's values stored that step that were nonzero and became zero (`underflow / stored` of the step's `counts`) | each class stored that step |
//! | `grad_amax` | the largest finite gradient magnitude, unscaled | steps that have one |
//! | `updates_lost` | the share of nonzero updates that changed no master weight | steps that measured it |
//! | `generator_loss` | the GAN's generator loss | the GAN |
//! | `eval/<metric>` | the test metric (`eval/test_accuracy`, `eval/modes_covered`) | evaluation steps |
//! | `<class>/<layer>`, `<class>/<layer>/<part>` | histogram of the values captured at that storage point (`weight/0.linear`, `weight_grad/2.linear`, `activation_grad/input`, `optimizer_state/0.linear/adam_m`) | capture steps |
//! | `update_ratio/<layer>` | histogram of `\|w\| / \|update\|` over the layer's nonzero updates | capture steps |
//!
//! Scalars are TensorBoard's `simple_value` (f32). Histograms are of magnitudes `|x|`, in the
//! capture's power-of-two bins ([`histogram_proto`]): gradients as the backward pass stored them,
//! scaled by the loss scale, as `captures.jsonl` holds them.
//!
//! Wall times: the run directory records no clock time, only the run's duration
//! (`summary.json`'s `wall_seconds`). Step `s` of `n` gets `wall_seconds * s / n` seconds after the
//! Unix epoch (the version event 0), so TensorBoard's relative time axis shows the run's
//! duration spread evenly over its steps; an unfinished run, which has no duration, has 0
//! throughout. So the file, and its name, depend only on the run directory: exporting it again
//! gives the same bytes.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Component, Path, PathBuf};

use crate::error::Error;
use crate::io::tensorboard::{EventWriter, HistogramProto, SummaryValue};
use crate::run::schema::{CaptureRecord, StepRecord};
use crate::run::{CAPTURES, CONFIG, METRICS, Records, RunDir};
use crate::stats::Histogram;

/// The event file written in each run's subdirectory of the log directory. TensorBoard reads
/// every file whose name contains `tfevents`; the conventional `<unix seconds>.<host>` part is
/// the first event's wall time (0) and the writer, so that exporting again replaces the file.
pub const EVENTS_FILE: &str = "events.out.tfevents.0.mixprec";

/// The writer named in the first event (`source_metadata.writer`).
pub const WRITER: &str = "mixprec export-tensorboard";

/// One run to export: its directory and its name under the log directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The run directory.
    pub dir: PathBuf,
    /// The subdirectory of the log directory its events go in (relative, one or more plain
    /// components: `fp16`, `grid/recipe=fp16-master,seed=0`); TensorBoard's run name.
    pub name: PathBuf,
}

/// What [`export`] wrote for one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    /// The run's name (its subdirectory of the log directory).
    pub name: PathBuf,
    /// The event file.
    pub file: PathBuf,
    /// What it holds.
    pub counts: EventCounts,
    /// Whether the run had finished.
    pub complete: bool,
}

/// What an event file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// Steps with a line in `metrics.jsonl` (each an event of scalars).
    pub steps: u64,
    /// Capture steps (their histograms).
    pub capture_steps: u64,
    /// Histograms written.
    pub histograms: u64,
}

/// The run name of `dir`: its last component (of the absolute path, for `.` and the like).
///
/// # Errors
/// A path with no name even when made absolute (`/`).
pub fn run_name(dir: &Path) -> crate::Result<PathBuf> {
    let name = match dir.file_name() {
        Some(name) => Some(name.to_os_string()),
        None => std::fs::canonicalize(dir)
            .ok()
            .and_then(|d| d.file_name().map(OsString::from)),
    };
    name.map(PathBuf::from).ok_or_else(|| Error::BadFile {
        path: dir.to_path_buf(),
        problem: "has no name to give its run in TensorBoard".into(),
    })
}

/// A captured log2 histogram as TensorBoard's: the zeros (when there are any) in a first bucket
/// that ends where the first power-of-two bin starts (at the smallest positive f64 when no value
/// is nonzero), then one bucket per bin, `bucket_limit` its upper edge, empty bins between the
/// lowest and the highest included; `min` is 0 with zeros, else the smallest nonzero magnitude,
/// `max` the largest finite one, `num` the finite values (zeros included), `sum` and
/// `sum_squares` the sums of their magnitudes and squares. NaN and infinities have no place in a
/// TensorBoard histogram and are left out. `None` when no value is finite.
#[must_use]
pub fn histogram_proto(h: &Histogram) -> Option<HistogramProto> {
    let num = h.finite_nonzero() + h.zeros();
    if num == 0 {
        return None;
    }
    let mut bucket_limit = Vec::new();
    let mut bucket = Vec::new();
    if h.zeros() > 0 {
        let first = h.bins().next().map_or(f64::from_bits(1), |b| b.lower);
        bucket_limit.push(first);
        bucket.push(h.zeros() as f64);
    }
    for bin in h.bins() {
        bucket_limit.push(bin.upper);
        bucket.push(bin.count as f64);
    }
    let min = if h.zeros() > 0 {
        0.0
    } else {
        h.min_nonzero().unwrap_or(0.0)
    };
    Some(HistogramProto {
        min,
        max: h.amax(),
        num: num as f64,
        sum: h.sum_abs(),
        sum_squares: h.sum_sq(),
        bucket_limit,
        bucket,
    })
}

/// The scalars of one step (see the [module docs](self)), `skipped_steps` the steps skipped up to
/// and including it.
#[must_use]
pub fn step_scalars(record: &StepRecord, skipped_steps: u64) -> Vec<(String, f32)> {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut out = vec![
        ("loss".to_string(), record.loss as f32),
        ("loss_scale".to_string(), record.loss_scale as f32),
        ("skipped".to_string(), flag(record.skipped)),
        ("skipped_steps".to_string(), skipped_steps as f32),
        ("overflow".to_string(), flag(record.overflow)),
    ];
    for (class, counts) in &record.counts {
        if counts.stored > 0 {
            let share = counts.underflow as f64 / counts.stored as f64;
            out.push((format!("underflow/{}", class.name()), share as f32));
        }
    }
    if let Some(amax) = record.grad_amax {
        out.push(("grad_amax".to_string(), amax as f32));
    }
    if !record.updates_lost.is_nan() {
        out.push(("updates_lost".to_string(), record.updates_lost as f32));
    }
    if let Some(loss) = record.generator_loss {
        out.push(("generator_loss".to_string(), loss as f32));
    }
    if let Some(eval) = &record.eval {
        out.push((format!("eval/{}", eval.name), eval.value as f32));
    }
    out
}

/// The histograms of one capture step (see the [module docs](self)), in the capture's order:
/// sites, then update ratios. Histograms with no finite value are left out.
#[must_use]
pub fn capture_histograms(record: &CaptureRecord) -> Vec<(String, HistogramProto)> {
    let sites = record.sites.iter().filter_map(|site| {
        let tag = match &site.part {
            Some(part) => format!("{}/{}/{part}", site.tensor.name(), site.layer),
            None => format!("{}/{}", site.tensor.name(), site.layer),
        };
        Some((tag, histogram_proto(&site.values)?))
    });
    let ratios = record.update_ratios.iter().filter_map(|r| {
        Some((
            format!("update_ratio/{}", r.layer),
            histogram_proto(&r.ratios)?,
        ))
    });
    sites.chain(ratios).collect()
}

/// Writes the event file of `run` to `out` (`path` names it in errors): the version event, then
/// one event per step of `metrics.jsonl` or `captures.jsonl`, in step order, streamed (memory
/// independent of the run's length).
///
/// # Errors
/// An unreadable or malformed log, a log whose steps do not increase, a failed write.
pub fn write_events(run: &RunDir, out: &mut dyn Write, path: &Path) -> crate::Result<EventCounts> {
    let duration = run
        .summary
        .as_ref()
        .filter(|s| s.steps > 0 && s.wall_seconds.is_finite() && s.wall_seconds >= 0.0)
        .map(|s| (s.wall_seconds, s.steps));
    let wall_time = |step: u64| duration.map_or(0.0, |(secs, n)| secs * step as f64 / n as f64);
    let mut events = EventWriter::new(out, 0.0, WRITER).map_err(Error::io_at(path))?;
    let mut steps = Ordered {
        records: run.steps()?,
        path: run.path.join(METRICS),
        step_of: |r: &StepRecord| r.step,
        last: None,
    };
    let mut captures = Ordered {
        records: run.captures()?,
        path: run.path.join(CAPTURES),
        step_of: |r: &CaptureRecord| r.step,
        last: None,
    };
    let (mut step, mut capture) = (steps.next()?, captures.next()?);
    let mut counts = EventCounts::default();
    let mut skipped_steps = 0;
    loop {
        let at = match (&step, &capture) {
            (None, None) => break,
            (Some(s), None) => s.step,
            (None, Some(c)) => c.step,
            (Some(s), Some(c)) => s.step.min(c.step),
        };
        let mut scalars = Vec::new();
        let mut histograms = Vec::new();
        if let Some(record) = step.take_if(|r| r.step == at) {
            skipped_steps += u64::from(record.skipped);
            scalars = step_scalars(&record, skipped_steps);
            counts.steps += 1;
            step = steps.next()?;
        }
        if let Some(record) = capture.take_if(|r| r.step == at) {
            histograms = capture_histograms(&record);
            counts.capture_steps += 1;
            counts.histograms += histograms.len() as u64;
            capture = captures.next()?;
        }
        let values: Vec<SummaryValue<'_>> = scalars
            .iter()
            .map(|(tag, value)| SummaryValue::Scalar { tag, value: *value })
            .chain(
                histograms
                    .iter()
                    .map(|(tag, histo)| SummaryValue::Histogram { tag, histo }),
            )
            .collect();
        let step_number = i64::try_from(at).map_err(|_| Error::BadFile {
            path: run.path.clone(),
            problem: format!("step {at} is beyond TensorBoard's steps (int64)"),
        })?;
        events
            .write_summary(wall_time(at), step_number, &values)
            .map_err(Error::io_at(path))?;
    }
    events.into_inner().flush().map_err(Error::io_at(path))?;
    Ok(counts)
}

/// A log's records, checked to come in increasing step order (TensorBoard takes a step that goes
/// back for a restart of the run and discards what came after it).
struct Ordered<T> {
    records: Records<T>,
    path: PathBuf,
    step_of: fn(&T) -> u64,
    last: Option<u64>,
}

impl<T: serde::de::DeserializeOwned> Ordered<T> {
    fn next(&mut self) -> crate::Result<Option<T>> {
        let Some(record) = self.records.next().transpose()? else {
            return Ok(None);
        };
        let step = (self.step_of)(&record);
        if let Some(last) = self.last
            && step <= last
        {
            return Err(Error::BadFile {
                path: self.path.clone(),
                problem: format!("step {step} after step {last}: the steps must increase"),
            });
        }
        self.last = Some(step);
        Ok(Some(record))
    }
}

/// Writes the event file of every run of `runs` into `logdir/<name>/` ([`EVENTS_FILE`]),
/// replacing an earlier export's.
///
/// Everything is checked before anything is written: every run directory opens, the names are
/// distinct plain relative paths, no target is a file or a run directory, and no target holds an
/// event file that this command did not write (TensorBoard would show both). The event files
/// are then written into a staging directory in `logdir` (under names without `tfevents`, which
/// TensorBoard does not read) and renamed into place once all are complete: a run that fails to
/// read midway (a malformed line) leaves nothing written, and a reader of an earlier export sees
/// its old file or the complete new one.
///
/// # Errors
/// As said above, and failed writes.
pub fn export(runs: &[Export], logdir: &Path) -> crate::Result<Vec<Exported>> {
    let opened = runs
        .iter()
        .map(|r| RunDir::open(&r.dir))
        .collect::<crate::Result<Vec<_>>>()?;
    check_targets(runs, logdir)?;
    let created = !logdir.exists();
    std::fs::create_dir_all(logdir).map_err(Error::io_at(logdir))?;
    let staging = logdir.join(format!(".mixprec-tensorboard-{}.tmp", std::process::id()));
    let result = stage(&opened, &staging).and_then(|counts| commit(runs, logdir, &staging, counts));
    let result = result.map(|counts| {
        runs.iter()
            .zip(&opened)
            .zip(counts)
            .map(|((r, run), counts)| Exported {
                name: r.name.clone(),
                file: logdir.join(&r.name).join(EVENTS_FILE),
                counts,
                complete: run.is_complete(),
            })
            .collect()
    });
    // Best effort: the staging directory holds nothing once committed, and only our files.
    let _ = std::fs::remove_dir_all(&staging);
    if result.is_err() && created {
        let _ = std::fs::remove_dir(logdir);
    }
    result
}

fn check_targets(runs: &[Export], logdir: &Path) -> crate::Result<()> {
    let bad = |path: &Path, problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    if logdir.exists() && !logdir.is_dir() {
        return Err(bad(logdir, "--out is not a directory".into()));
    }
    for (i, run) in runs.iter().enumerate() {
        let plain = run.name.components().count() > 0
            && run
                .name
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(bad(
                &run.dir,
                format!(
                    "run name '{}' is not a plain relative path",
                    run.name.display()
                ),
            ));
        }
        if let Some(other) = runs[..i].iter().find(|o| o.name == run.name) {
            let problem = if same_dir(&other.dir, &run.dir) {
                "given twice".to_string()
            } else {
                format!(
                    "has the same name as {} ('{}'): TensorBoard's runs are named by directory; export them to different --out directories",
                    other.dir.display(),
                    run.name.display()
                )
            };
            return Err(bad(&run.dir, problem));
        }
        let target = logdir.join(&run.name);
        // Each existing ancestor must be a directory, or the target cannot be made.
        for dir in target.ancestors().take(run.name.components().count()) {
            if dir.exists() && !dir.is_dir() {
                return Err(bad(dir, "exists and is not a directory".into()));
            }
        }
        if target.join(CONFIG).exists() {
            return Err(bad(
                &target,
                "is a run directory: the events would be written into it; choose another --out"
                    .into(),
            ));
        }
        if target.is_dir() {
            let entries = std::fs::read_dir(&target).map_err(Error::io_at(&target))?;
            for entry in entries {
                let name = entry.map_err(Error::io_at(&target))?.file_name();
                let name = name.to_string_lossy();
                if name.contains("tfevents") && name != EVENTS_FILE {
                    return Err(bad(
                        &target,
                        format!(
                            "holds an event file mixprec did not write ({name}): TensorBoard would show both; remove it or choose another --out"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Writes every run's events into `staging/<i>`, synced.
fn stage(runs: &[RunDir], staging: &Path) -> crate::Result<Vec<EventCounts>> {
    // A directory of this name was left by a killed process that had our id.
    let _ = std::fs::remove_dir_all(staging);
    std::fs::create_dir(staging).map_err(Error::io_at(staging))?;
    let mut all = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let path = staging.join(i.to_string());
        let file = File::create_new(&path).map_err(Error::io_at(&path))?;
        let mut out = BufWriter::new(file);
        let counts = write_events(run, &mut out, &path)?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        file.sync_all().map_err(Error::io_at(&path))?;
        all.push(counts);
    }
    Ok(all)
}

/// Renames the staged files into place.
fn commit(
    runs: &[Export],
    logdir: &Path,
    staging: &Path,
    counts: Vec<EventCounts>,
) -> crate::Result<Vec<EventCounts>> {
    for (i, run) in runs.iter().enumerate() {
        let dir = logdir.join(&run.name);
        std::fs::create_dir_all(&dir).map_err(Error::io_at(&dir))?;
        let target = dir.join(EVENTS_FILE);
        std::fs::rename(staging.join(i.to_string()), &target).map_err(Error::io_at(&target))?;
    }
    Ok(counts)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
