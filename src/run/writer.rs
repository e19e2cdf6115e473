//! Writes a run directory: `config.json` and `summary.json` atomically, the logs append-only
//! under their final names, each line written whole.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value};

use super::schema::{CaptureRecord, EvalMetric, SCHEMA, ShadowRecord, StepRecord, Summary};
use super::{CAPTURES, CONFIG, INCOMPLETE, METRICS, SHADOW, SUMMARY};
use crate::error::Error;
use crate::io::write_atomic;

/// The longest a written line waits in memory before it reaches the file.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// Bytes of lines kept in memory before they are written regardless of time.
const BUFFER: usize = 1 << 20;

/// An append-only JSON-lines log. Lines are serialised whole into a buffer that is written with
/// one `write_all` when flushed, so the file only ever ends in the middle of a line if the
/// process dies inside that call; readers ignore such a cut-off last line.
struct Log {
    path: PathBuf,
    file: File,
    buffer: Vec<u8>,
}

impl Log {
    fn create(path: PathBuf) -> crate::Result<Log> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(Error::io_at(&path))?;
        Ok(Log {
            path,
            file,
            buffer: Vec::with_capacity(BUFFER),
        })
    }

    fn push<T: Serialize>(&mut self, value: &T) -> crate::Result<()> {
        serde_json::to_writer(&mut self.buffer, value)
            .map_err(|e| Error::io(&self.path, e.into()))?;
        self.buffer.push(b'\n');
        if self.buffer.len() >= BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> crate::Result<()> {
        if !self.buffer.is_empty() {
            self.file
                .write_all(&self.buffer)
                .map_err(Error::io_at(&self.path))?;
            self.buffer.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> crate::Result<()> {
        self.flush()?;
        self.file.sync_all().map_err(Error::io_at(&self.path))
    }
}

/// A run whose last this many steps were all skipped has diverged: the loss scale can no longer
/// make its gradients finite. A shorter run that skipped every step has not (a dynamic scaler
/// starting high, as Megatron's at 2^32, backs off for longer than it ran).
pub const STUCK_SKIPS: u64 = 20;

/// The steps a recorder's default metric averages the loss over.
pub const RECENT_STEPS: usize = 20;

/// What `summary.json` says of the steps, tallied as they are written: the one definition of
/// skipped, overflow and final loss, and of a run stuck skipping, for every writer of runs
/// (`train`, `grid` and the PyTorch recorder).
#[derive(Clone, Debug)]
struct Tally {
    steps: u64,
    skipped: u64,
    overflows: u64,
    bounded: u64,
    trailing_skips: u64,
    final_loss: f64,
    /// The last [`RECENT_STEPS`] losses, oldest first.
    recent: std::collections::VecDeque<f64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            steps: 0,
            skipped: 0,
            overflows: 0,
            bounded: 0,
            trailing_skips: 0,
            final_loss: f64::NAN,
            recent: std::collections::VecDeque::with_capacity(RECENT_STEPS),
        }
    }

    fn add(&mut self, r: &StepRecord) {
        self.steps += 1;
        self.skipped += u64::from(r.skipped);
        self.overflows += u64::from(r.overflow);
        self.bounded += u64::from(r.grad_amax_bounded);
        self.trailing_skips = if r.skipped {
            self.trailing_skips + 1
        } else {
            0
        };
        self.final_loss = r.loss;
        if self.recent.len() == RECENT_STEPS {
            self.recent.pop_front();
        }
        self.recent.push_back(r.loss);
    }
}

/// The writer of one run directory. Create it with [`RunWriter::create`], append records, and
/// [`RunWriter::finish`] with the summary ([`RunWriter::summary`] makes it from the steps
/// written); a writer dropped unfinished (a failed or killed run) leaves the `INCOMPLETE` marker
/// and every line it wrote before its last flush.
pub struct RunWriter {
    dir: PathBuf,
    metrics: Log,
    captures: Log,
    shadow: Option<Log>,
    flushed: Instant,
    flush_every: Duration,
    tally: Tally,
}

impl RunWriter {
    /// Creates `dir` (or takes it when it exists and is empty), writes the `INCOMPLETE` marker and
    /// `config.json` (`config` with `"schema"` first), and opens the logs; `shadow.jsonl` only
    /// when `shadow` is true.
    ///
    /// # Errors
    /// A directory that holds an unfinished run or anything else, or a failed write.
    pub fn create(dir: &Path, config: &impl Serialize, shadow: bool) -> crate::Result<RunWriter> {
        let made = prepare_dir(dir)?;
        let started = Self::start(dir, config, shadow);
        if started.is_err() {
            // A refused run leaves nothing behind: the directories this made (the error that
            // brought us here matters more than one from cleaning up), or the files in the
            // empty directory it was given.
            match made {
                Some(top) => {
                    let _ = std::fs::remove_dir_all(top);
                }
                None => {
                    for name in [INCOMPLETE, CONFIG, METRICS, CAPTURES, SHADOW] {
                        let _ = std::fs::remove_file(dir.join(name));
                    }
                }
            }
        }
        started
    }

    /// Writes the marker, the config and the empty logs into the prepared `dir`.
    fn start(dir: &Path, config: &impl Serialize, shadow: bool) -> crate::Result<RunWriter> {
        write_atomic(&dir.join(INCOMPLETE), |w| {
            w.write_all(b"this run has not finished (or was killed)\n")
        })?;
        write_json(&dir.join(CONFIG), config)?;
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            metrics: Log::create(dir.join(METRICS))?,
            captures: Log::create(dir.join(CAPTURES))?,
            shadow: shadow.then(|| Log::create(dir.join(SHADOW))).transpose()?,
            flushed: Instant::now(),
            flush_every: FLUSH_EVERY,
            tally: Tally::new(),
        })
    }

    /// Checks, creating nothing, that [`RunWriter::create`] would take `dir`: it does not exist,
    /// or is an empty directory (a recorder checks its directory when it is made and writes
    /// into it only once the loop starts).
    ///
    /// # Errors
    /// As [`RunWriter::create`]'s for the directory: one that holds an unfinished run or
    /// anything else, or cannot be read.
    pub fn check_dir(dir: &Path) -> crate::Result<()> {
        if !dir.exists() {
            return Ok(());
        }
        check_empty(dir)
    }

    /// Sets the longest a step's line waits in memory ([`FLUSH_EVERY`] unless set): a recorder
    /// whose steps take longer may want every line on disk at once (`Duration::ZERO`).
    pub fn set_flush_every(&mut self, every: Duration) {
        self.flush_every = every;
    }

    /// Appends a line to `metrics.jsonl` (reaching the file within the flush interval).
    ///
    /// # Errors
    /// A failed write.
    pub fn step(&mut self, record: &StepRecord) -> crate::Result<()> {
        self.metrics.push(record)?;
        self.tally.add(record);
        if self.flushed.elapsed() >= self.flush_every {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends a line to `captures.jsonl` and writes every log out.
    ///
    /// # Errors
    /// A failed write.
    pub fn capture(&mut self, record: &CaptureRecord) -> crate::Result<()> {
        self.captures.push(record)?;
        self.flush()
    }

    /// Appends a line to `shadow.jsonl` (ignored when the writer was created without it).
    ///
    /// # Errors
    /// A failed write.
    pub fn shadow(&mut self, record: &ShadowRecord) -> crate::Result<()> {
        match &mut self.shadow {
            Some(log) => log.push(record),
            None => Ok(()),
        }
    }

    /// Writes every line held in memory to its log (a recorder does so before it lets an
    /// exception through, so that a crashed loop's run ends at its last step).
    ///
    /// # Errors
    /// A failed write.
    pub fn flush(&mut self) -> crate::Result<()> {
        self.metrics.flush()?;
        self.captures.flush()?;
        if let Some(log) = &mut self.shadow {
            log.flush()?;
        }
        self.flushed = Instant::now();
        Ok(())
    }

    /// The run's summary from the steps written so far and what only the trainer knows: the
    /// recipe's name, the evaluation, the trainable scalars, whether every weight is finite and
    /// the wall time. Diverged: the final loss or a weight is not finite, or the last
    /// [`STUCK_SKIPS`] steps were all skipped.
    #[must_use]
    pub fn summary(
        &self,
        recipe: &str,
        eval_metric: EvalMetric,
        parameters: usize,
        weights_finite: bool,
        wall_seconds: f64,
    ) -> Summary {
        let t = &self.tally;
        Summary {
            schema: SCHEMA,
            recipe: recipe.to_string(),
            steps: t.steps,
            skipped_steps: t.skipped,
            overflow_steps: t.overflows,
            bounded_steps: t.bounded,
            diverged: !t.final_loss.is_finite()
                || !weights_finite
                || t.trailing_skips >= STUCK_SKIPS,
            final_loss: t.final_loss,
            eval_metric,
            parameters,
            wall_seconds,
            coverage: None,
        }
    }

    /// The mean of the finite losses of the last [`RECENT_STEPS`] steps written (NaN when
    /// none is finite): the metric of a run whose loop gives none.
    #[must_use]
    pub fn recent_mean_loss(&self) -> f64 {
        let finite: Vec<f64> = self
            .tally
            .recent
            .iter()
            .copied()
            .filter(|l| l.is_finite())
            .collect();
        if finite.is_empty() {
            f64::NAN
        } else {
            finite.iter().sum::<f64>() / finite.len() as f64
        }
    }

    /// Syncs the logs, writes `summary.json` (with `"schema"`), removes the marker and syncs the
    /// directory.
    ///
    /// # Errors
    /// A failed write.
    pub fn finish(self, summary: &Summary) -> crate::Result<()> {
        self.metrics.finish()?;
        self.captures.finish()?;
        if let Some(log) = self.shadow {
            log.finish()?;
        }
        write_json(&self.dir.join(SUMMARY), summary)?;
        let marker = self.dir.join(INCOMPLETE);
        std::fs::remove_file(&marker).map_err(Error::io_at(&marker))?;
        // The renames and the removal are durable once the directory itself is synced.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io_at(&self.dir))
    }
}

/// `value` as pretty JSON with `"schema": SCHEMA` as its first key, written atomically.
fn write_json(path: &Path, value: &impl Serialize) -> crate::Result<()> {
    let bad = |e: serde_json::Error| Error::BadFile {
        path: path.to_path_buf(),
        problem: e.to_string(),
    };
    let mut object = Map::new();
    object.insert("schema".into(), Value::from(SCHEMA));
    match serde_json::to_value(value).map_err(bad)? {
        Value::Object(fields) => object.extend(fields.into_iter().filter(|(k, _)| k != "schema")),
        other => {
            object.insert("value".into(), other);
        }
    }
    let bytes = serde_json::to_vec_pretty(&object).map_err(bad)?;
    write_atomic(path, |w| w.write_all(&bytes))
}

/// Creates `dir` (and its missing parents), or checks that it is empty: the topmost directory
/// it made, which removing undoes it (`None` when `dir` was there).
fn prepare_dir(dir: &Path) -> crate::Result<Option<std::path::PathBuf>> {
    if dir.exists() {
        return check_empty(dir).map(|()| None);
    }
    let top = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .last()
        .unwrap_or(dir)
        .to_path_buf();
    std::fs::create_dir_all(dir).map_err(Error::io_at(dir))?;
    Ok(Some(top))
}

fn check_empty(dir: &Path) -> crate::Result<()> {
    if dir.join(INCOMPLETE).exists() {
        return Err(Error::BadFile {
            path: dir.to_path_buf(),
            problem: "holds an unfinished run (INCOMPLETE: killed, or still running); \
                      `mixprec report` can still read it; train into a new directory"
                .into(),
        });
    }
    let mut entries = std::fs::read_dir(dir).map_err(Error::io_at(dir))?;
    if entries.next().is_some() {
        return Err(Error::BadFile {
            path: dir.to_path_buf(),
            problem: "the output directory exists and is not empty (choose a new one)".into(),
        });
    }
    Ok(())
}
