//! Reads a run directory, finished or not: typed records, streamed line by line. Every file is
//! opened through the guarded open of [`crate::io`] (no FIFO, device or endless file; a line
//! at most [`crate::io::MAX_RECORD`] bytes).

use std::fs::File;
use std::io::BufReader;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::schema::{CaptureRecord, ShadowRecord, StepRecord, Summary, take_schema};
use super::{CAPTURES, CONFIG, INCOMPLETE, METRICS, SHADOW, SUMMARY};
use crate::error::Error;
use crate::recipe::Recipe;

/// A run directory opened for reading.
///
/// ```
/// use mixprec::run::RunDir;
/// use mixprec::recipe::Recipe;
/// use mixprec::train::{TrainConfig, training::train};
///
/// let config = TrainConfig { recipe: Recipe::preset("fp16-dynamic")?, steps: 4, batch: 16,
///     capture_every: 2, ..TrainConfig::default() };
/// let dir = std::env::temp_dir().join(format!("mixprec-doc-read-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// train(&config, &dir, &mut |_| {})?;
/// let run = RunDir::open(&dir)?;
/// assert!(run.is_complete());
/// let losses: Vec<f64> = run.steps()?.map(|r| r.map(|r| r.loss)).collect::<Result<_, _>>()?;
/// assert_eq!(losses.len(), 4);
/// assert_eq!(run.captures()?.count(), 3); // steps 1, 2 and 4
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct RunDir {
    /// The directory.
    pub path: PathBuf,
    /// The schema version of `config.json` (0: written before versions existed).
    pub schema: u32,
    /// `config.json` as written, without its `schema` key.
    pub config: Value,
    /// `summary.json`, when the run finished.
    pub summary: Option<Summary>,
    /// Whether the `INCOMPLETE` marker is there (or `summary.json` is missing): the run was killed
    /// or is still going.
    pub incomplete: bool,
}

impl RunDir {
    /// Opens `dir`: reads `config.json` and, when there, `summary.json`.
    ///
    /// # Errors
    /// No run directory at `dir` (no `config.json`), unreadable or malformed files, or a schema
    /// newer than this version of mixprec reads.
    pub fn open(dir: &Path) -> crate::Result<RunDir> {
        let refuse = |problem: String| {
            Err(Error::BadFile {
                path: dir.to_path_buf(),
                problem,
            })
        };
        if dir.exists() && !dir.is_dir() {
            return refuse("a file, not a run directory".into());
        }
        if !dir.is_dir() {
            return refuse("not a run directory (no such directory)".into());
        }
        let config_path = dir.join(CONFIG);
        if !config_path.exists() {
            if dir.join(crate::run::grid::GRID).is_file() {
                return refuse(format!(
                    "a grid directory (written by mixprec grid), not a run directory: give one of its runs, {}",
                    dir.join(crate::run::grid::RUNS).join("NAME").display()
                ));
            }
            return refuse("not a run directory (no config.json)".into());
        }
        let mut config = read_json(&config_path)?;
        let schema = take_schema(&mut config, &config_path)?;
        let summary_path = dir.join(SUMMARY);
        let summary = if summary_path.exists() {
            let mut value = read_json(&summary_path)?;
            let version = take_schema(&mut value, &summary_path)?;
            let mut summary: Summary =
                serde_json::from_value(value).map_err(|e| Error::BadFile {
                    path: summary_path.clone(),
                    problem: e.to_string(),
                })?;
            summary.schema = version;
            Some(summary)
        } else {
            None
        };
        let incomplete = summary.is_none() || dir.join(INCOMPLETE).exists();
        Ok(RunDir {
            path: dir.to_path_buf(),
            schema,
            config,
            summary,
            incomplete,
        })
    }

    /// Whether the run finished (a summary and no `INCOMPLETE` marker).
    #[must_use]
    pub fn is_complete(&self) -> bool {
        !self.incomplete
    }

    /// The run's recipe: a `train` run's, or the one a recorded run's config describes
    /// ([`RecordedConfig`](super::schema::RecordedConfig)); `None` when the config has neither
    /// (a run recorded before recorders wrote it).
    #[must_use]
    pub fn recipe(&self) -> Option<Recipe> {
        // A `train` run's config holds the recipe resolved, as a recorded run's does; a preset's
        // name stands for the preset.
        match self.config.get("recipe")? {
            Value::String(name) => Recipe::preset(name).ok(),
            recipe => Recipe::deserialize(recipe).ok(),
        }
    }

    /// The recipe's name, from the config (`"?"` when it has none).
    #[must_use]
    pub fn recipe_name(&self) -> String {
        self.config
            .pointer("/recipe/name")
            .or_else(|| self.config.get("recipe"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    }

    /// The format a run recorded from outside mixprec (the PyTorch recorder) names as its
    /// gradients' in the config's `format` key; `None` for `train`'s runs, whose recipe says it.
    #[must_use]
    pub fn recorded_format(&self) -> Option<crate::format::FloatFormat> {
        self.config.get("format")?.as_str()?.parse().ok()
    }

    /// The lines of `metrics.jsonl`, in step order.
    ///
    /// # Errors
    /// A missing or unreadable log (each line's own error comes from the iterator).
    pub fn steps(&self) -> crate::Result<Records<StepRecord>> {
        self.log(METRICS)
    }

    /// The lines of `captures.jsonl`.
    ///
    /// # Errors
    /// As [`RunDir::steps`].
    pub fn captures(&self) -> crate::Result<Records<CaptureRecord>> {
        self.log(CAPTURES)
    }

    /// The lines of `shadow.jsonl`, when the run had an FP32 shadow.
    ///
    /// # Errors
    /// As [`RunDir::steps`].
    pub fn shadow(&self) -> crate::Result<Option<Records<ShadowRecord>>> {
        let exists = self.path.join(SHADOW).exists();
        exists.then(|| self.log(SHADOW)).transpose()
    }

    fn log<T: DeserializeOwned>(&self, name: &str) -> crate::Result<Records<T>> {
        let mut path = self.path.join(name);
        // Schema 0 kept the logs of an unfinished run under a hidden temporary name.
        let legacy = self.path.join(format!(".{name}.partial"));
        if !path.exists() && legacy.exists() {
            path = legacy;
        }
        let file = crate::io::open_log(&path)?;
        Ok(Records {
            reader: BufReader::new(file),
            path,
            line: 0,
            buffer: Vec::new(),
            tolerate_cut: self.incomplete,
            done: false,
            _record: PhantomData,
        })
    }
}

/// The records of a JSON-lines log, read one line at a time (memory independent of its length).
/// In an unfinished run a last line without its newline (cut off when the run was killed) is
/// ignored; anywhere else a line that does not parse is an error naming the file and line.
pub struct Records<T> {
    reader: BufReader<File>,
    path: PathBuf,
    line: u64,
    buffer: Vec<u8>,
    tolerate_cut: bool,
    done: bool,
    _record: PhantomData<T>,
}

impl<T: DeserializeOwned> Iterator for Records<T> {
    type Item = crate::Result<T>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        self.buffer.clear();
        match crate::io::read_line(&mut self.reader, &mut self.buffer, crate::io::MAX_RECORD) {
            Ok((0, _)) => {
                self.done = true;
                return None;
            }
            Ok((_, false)) => {}
            Ok((_, true)) => {
                self.done = true;
                return Some(Err(Error::BadFile {
                    path: self.path.clone(),
                    problem: format!(
                        "line {} is longer than {} MiB: not a log mixprec wrote?",
                        self.line + 1,
                        crate::io::MAX_RECORD >> 20
                    ),
                }));
            }
            Err(source) => {
                self.done = true;
                return Some(Err(Error::io(&self.path, source)));
            }
        }
        self.line += 1;
        let whole = self.buffer.last() == Some(&b'\n');
        if !whole && self.tolerate_cut {
            self.done = true;
            return None;
        }
        let parsed = serde_json::from_slice(&self.buffer).map_err(|e| Error::BadFile {
            path: self.path.clone(),
            problem: format!(
                "line {}: {}{e}",
                self.line,
                if whole { "" } else { "cut off: " }
            ),
        });
        if parsed.is_err() {
            self.done = true;
        }
        Some(parsed)
    }
}

fn read_json(path: &Path) -> crate::Result<Value> {
    let bytes = crate::io::read_document(path, crate::io::MAX_DOCUMENT)?;
    crate::io::parse_json(path, &bytes)
}
