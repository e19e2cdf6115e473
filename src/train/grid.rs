//! A grid of training runs: every combination of the varied config values, times seeds, each an
//! ordinary run directory written by [`super::training::train`].
//!
//! # The grid directory
//! - `grid.json`: the grid itself (`"schema": 1`, `base`: the resolved base config, `vary`: each
//!   key with its values as written, `seeds`). Written atomically before any run; a later
//!   command on the same directory (a resumed grid, another shard) must describe the same grid.
//! - `runs/NAME/`: one run directory per combination and seed, named by its values in the
//!   order of the `--vary` flags, then the seed: `recipe=fp16-master,loss_scale=2^16,seed=0`.
//! - `grid.jsonl`: one line per finished run, in grid order, `{"run", "values", "seed",
//!   "summary"}`, rebuilt atomically from the run directories at the end of every `grid`
//!   command, so shards writing into one directory, or directories copied together, merge.
//!
//! # What varies
//! A key is a config key as `mixprec train --print-config` shows it, nested keys joined by dots
//! (`steps`, `recipe`, `recipe.rounding`, `optimizer.lr`, `mlp.width`), or `loss_scale`, which
//! means what `train --loss-scale` does (the static scale, the initial scale of a dynamic scaler,
//! or a static scale for a recipe without one). Values are a list `a,b,c` (commas inside
//! brackets, braces and quotes belong to the value: `optimizer={"kind":"sgd","lr":0.1},{...}`) or
//! a range of powers of two `2^a..2^b`. A value is JSON where it parses as JSON (`0.01`, `true`,
//! `{...}`) and the key's
//! base value is not a string, `2^k` is the number 2^k, and anything else is a string
//! (`fp16-master`). Keys are applied shallowest first, so `recipe=fp16-master` comes before
//! `recipe.rounding=stochastic` whatever the order of the flags, then `loss_scale`.
//!
//! Seeds are the base config's seed and the `seeds - 1` after it: `--seeds 1` repeats the base
//! config exactly.
//!
//! # Runs trained once
//! A run whose training cannot depend on a varied key is trained once for all its values: the
//! `loss_scale` of an FP32 recipe (static or no scaling, powers of two within `2^-32..2^32`:
//! [`crate::recipe::Recipe::loss_scale_inert`]) is inert, so of `recipe=fp32` with
//! `loss_scale=2^0..2^30` only `loss_scale=2^0` is trained (the value nearest `2^0`), and its
//! `grid.jsonl` line says `"inert": ["loss_scale"]`. The report draws it as a reference line.

use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{Overrides, TrainConfig};
use super::training;
use crate::error::Error;
use crate::io::write_atomic;
use crate::run::grid::{GRID, INDEX, LOSS_SCALE, RUNS, SCHEMA, Vary, value_name};
use crate::run::grid::{GridPlan, PlannedRun};
use crate::run::{RunDir, Summary};

/// The most runs one grid may hold.
pub const MAX_RUNS: usize = 1_000_000;
/// The largest `|k|` of a `2^k` value.
const MAX_LOG2: i32 = 1023;

fn bad_vary(text: &str, problem: impl Into<String>) -> Error {
    Error::Grid {
        what: format!("--vary '{text}'"),
        problem: problem.into(),
    }
}

impl FromStr for Vary {
    type Err = Error;

    /// `KEY=a,b,c` or `KEY=2^a..2^b`.
    fn from_str(text: &str) -> crate::Result<Vary> {
        let Some((key, list)) = text.split_once('=') else {
            return Err(bad_vary(text, "expected KEY=a,b,c or KEY=2^a..2^b"));
        };
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(bad_vary(text, "the key is empty"));
        }
        if key == "seed" {
            return Err(bad_vary(text, "seeds are set with --seeds N"));
        }
        let values = match list.split_once("..") {
            Some((lo, hi)) if power_of_two(lo).is_some() || power_of_two(hi).is_some() => {
                let end = |s: &str| {
                    power_of_two(s).ok_or_else(|| {
                        bad_vary(
                            text,
                            format!(
                                "a range is 2^a..2^b with whole a, b within -{MAX_LOG2}..{MAX_LOG2}: \
                                 '{}' is not",
                                s.trim()
                            ),
                        )
                    })
                };
                let (a, b) = (end(lo)?, end(hi)?);
                if a > b {
                    return Err(bad_vary(
                        text,
                        format!("the range 2^{a}..2^{b} is empty: write the smaller end first"),
                    ));
                }
                (a..=b).map(|k| format!("2^{k}")).collect()
            }
            _ => split_list(list)
                .into_iter()
                .map(|v| power_of_two(&v).map_or(v, |k| format!("2^{k}")))
                .collect::<Vec<_>>(),
        };
        if values.iter().any(String::is_empty) {
            return Err(bad_vary(text, "an empty value"));
        }
        for (i, v) in values.iter().enumerate() {
            if values[..i].contains(v) {
                return Err(bad_vary(text, format!("the value '{v}' is given twice")));
            }
            let name = file_safe(v);
            if let Some(w) = values[..i].iter().find(|w| file_safe(w) == name) {
                return Err(bad_vary(
                    text,
                    format!("the values '{w}' and '{v}' would name the same run directory"),
                ));
            }
        }
        Ok(Vary {
            key: key.to_string(),
            values,
        })
    }
}

/// `k` when `text` is `2^k` or `2**k` with a whole `k` within `MAX_LOG2`.
fn power_of_two(text: &str) -> Option<i32> {
    let t: String = text.split_whitespace().collect();
    let rest = t.strip_prefix("2**").or_else(|| t.strip_prefix("2^"))?;
    rest.parse::<i32>().ok().filter(|k| k.abs() <= MAX_LOG2)
}

/// Splits at the commas outside brackets, braces and quotes; trims each value.
fn split_list(list: &str) -> Vec<String> {
    let (mut out, mut current, mut depth, mut quoted) = (Vec::new(), String::new(), 0i32, false);
    for c in list.chars() {
        match c {
            '"' => quoted = !quoted,
            '[' | '{' if !quoted => depth += 1,
            ']' | '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_string());
    out
}

/// [`value_name`] as a file name: quotes, brackets, braces and spaces dropped, every other
/// character that is awkward in a file name (or is a separator of run names, `=` and `,`)
/// written `-`: `gradscaler:init_scale=1` is `gradscaler-init_scale-1`, `{"lr":0.5}` is
/// `lr-0.5`.
fn file_safe(text: &str) -> String {
    let name: String = value_name(text)
        .chars()
        .filter(|c| !"\"'[]{} ".contains(*c))
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._^+-".contains(c) || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() { "-".into() } else { name }
}

/// `--shard I/N`: the runs whose position in the grid is `I - 1` modulo `N` (`I` from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// `I`, from 1.
    pub index: usize,
    /// `N`.
    pub count: usize,
}

impl Shard {
    /// The whole grid (`1/1`).
    pub const ALL: Shard = Shard { index: 1, count: 1 };

    /// Whether the run at `position` (from 0) is in this shard.
    #[must_use]
    pub fn holds(self, position: usize) -> bool {
        position % self.count == self.index - 1
    }
}

impl FromStr for Shard {
    type Err = Error;
    fn from_str(text: &str) -> crate::Result<Shard> {
        let bad = || Error::InvalidValue {
            what: "--shard",
            value: text.to_string(),
            expected: "I/N with 1 <= I <= N (1/4 is the first of four shares)",
        };
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// A grid: a base config, the varied keys and the number of seeds (`grid.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridSpec {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The base config, resolved.
    pub base: TrainConfig,
    /// The varied keys, in the order of the flags.
    pub vary: Vec<Vary>,
    /// Seeds per combination.
    pub seeds: u64,
}

/// One run of a grid: the plan a reader of the grid directory sees ([`PlannedRun`]: position,
/// name, values, seed, recipe, inert keys) and the config the training core trains.
#[derive(Clone, Debug)]
pub struct GridRun {
    /// The run as `report` reads it; its `config` is [`GridRun::config`] as JSON.
    pub planned: PlannedRun,
    /// The run's config.
    pub config: TrainConfig,
}

impl GridRun {
    /// Run `name` at `position` of its grid, of `values` and `seed`, training `config`.
    pub(crate) fn new(
        position: usize,
        name: String,
        values: Vec<(String, String)>,
        seed: u64,
        config: TrainConfig,
    ) -> GridRun {
        GridRun {
            planned: PlannedRun {
                position,
                name,
                values,
                seed,
                recipe: config.recipe.clone(),
                config: serde_json::to_value(&config).unwrap_or(Value::Null),
                inert: Vec::new(),
            },
            config,
        }
    }
}

impl GridSpec {
    /// A grid of `base` with `vary`, `seeds` seeds each.
    ///
    /// # Errors
    /// A key varied twice, no seeds.
    pub fn new(base: TrainConfig, vary: Vec<Vary>, seeds: u64) -> crate::Result<GridSpec> {
        if seeds == 0 {
            return Err(Error::InvalidValue {
                what: "--seeds",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        for (i, v) in vary.iter().enumerate() {
            if vary[..i].iter().any(|w| w.key == v.key) {
                return Err(bad_vary(&v.key, "the key is varied twice"));
            }
        }
        Ok(GridSpec {
            schema: SCHEMA,
            base,
            vary,
            seeds,
        })
    }

    /// Every run of the grid, in grid order (the first key varies slowest, the seed fastest),
    /// each config built and validated.
    ///
    /// # Errors
    /// A key that is not a config key, a value the config rejects (named with its key), a
    /// combination the config rejects (named by its run), or more than [`MAX_RUNS`] runs.
    pub fn runs(&self) -> crate::Result<Vec<GridRun>> {
        let total = self
            .vary
            .iter()
            .try_fold(self.seeds as usize, |n, v| n.checked_mul(v.values.len()))
            .filter(|&n| n <= MAX_RUNS);
        let Some(total) = total else {
            return Err(Error::Grid {
                what: "--vary, --seeds".into(),
                problem: format!("more than {MAX_RUNS} runs"),
            });
        };
        // Each value alone first, so that a bad one is named by itself.
        for v in &self.vary {
            for value in &v.values {
                self.configure(&[(&v.key, value)], self.base.seed)
                    .map_err(|e| bad_vary(&format!("{}={value}", v.key), e))?;
            }
        }
        let mut out = Vec::with_capacity(total);
        for position in 0..total {
            let (mut rest, seed) = (position / self.seeds as usize, position as u64 % self.seeds);
            let mut picked = vec![0; self.vary.len()];
            for (i, v) in self.vary.iter().enumerate().rev() {
                picked[i] = rest % v.values.len();
                rest /= v.values.len();
            }
            let values: Vec<(String, String)> = self
                .vary
                .iter()
                .zip(&picked)
                .map(|(v, &j)| (v.key.clone(), v.values[j].clone()))
                .collect();
            let seed = self.base.seed + seed;
            let mut name: Vec<String> = values
                .iter()
                .map(|(k, v)| format!("{}={}", file_safe(k), file_safe(v)))
                .collect();
            name.push(format!("seed={seed}"));
            let name = name.join(",");
            let pairs: Vec<(&str, &str)> = values
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let config = self
                .configure(&pairs, seed)
                .map_err(|problem| Error::Grid {
                    what: format!("{RUNS}/{name}"),
                    problem,
                })?;
            out.push(GridRun::new(position, name, values, seed, config));
        }
        Ok(self.train_inert_once(out))
    }

    /// `runs` with each run whose loss scale is inert kept only at the scale nearest `2^0`
    /// (the first of equals) among the inert ones, marked so; positions renumbered.
    fn train_inert_once(&self, runs: Vec<GridRun>) -> Vec<GridRun> {
        let Some(at) = self
            .vary
            .iter()
            .position(|v| v.key == LOSS_SCALE && v.values.len() > 1)
        else {
            return runs;
        };
        let log2 = |run: &GridRun| power_of_two(&run.planned.values[at].1);
        let inert =
            |run: &GridRun| log2(run).is_some_and(|k| run.config.recipe.loss_scale_inert(k));
        let mut out: Vec<GridRun> = Vec::with_capacity(runs.len());
        for mut run in runs {
            if inert(&run) {
                let kept = self.vary[at]
                    .values
                    .iter()
                    .filter_map(|v| power_of_two(v))
                    .filter(|&k| run.config.recipe.loss_scale_inert(k))
                    .min_by_key(|k| k.abs());
                if log2(&run) != kept {
                    continue;
                }
                run.planned.inert.push(LOSS_SCALE.to_string());
            }
            run.planned.position = out.len();
            out.push(run);
        }
        out
    }

    /// The base config with `values` set (shallowest keys first, `loss_scale` last) and `seed`;
    /// `Err` says what the config rejects.
    fn configure(&self, values: &[(&str, &str)], seed: u64) -> Result<TrainConfig, String> {
        let mut config = self.base.clone();
        let paths = values.iter().filter(|(k, _)| *k != LOSS_SCALE);
        let deepest = paths.clone().map(|(k, _)| k.split('.').count()).max();
        for depth in 1..=deepest.unwrap_or(0) {
            // Round-trips through the config between depths: a preset name set at depth 1
            // becomes the object whose fields depth 2 sets.
            let mut json = serde_json::to_value(&config).map_err(|e| e.to_string())?;
            for (key, value) in paths.clone().filter(|(k, _)| k.split('.').count() == depth) {
                set_path(&mut json, key, value)?;
            }
            config = serde_json::from_value(json).map_err(|e| e.to_string())?;
        }
        if let Some((_, text)) = values.iter().find(|(k, _)| *k == LOSS_SCALE) {
            let scale =
                crate::format::parse_loss_scale(LOSS_SCALE, text).map_err(|e| e.to_string())?;
            config
                .apply(&Overrides {
                    loss_scale: Some(scale),
                    ..Overrides::default()
                })
                .map_err(|e| e.to_string())?;
        }
        config.seed = seed;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    /// The plan of the grid's runs, for a reader of the grid directory (`report`).
    ///
    /// # Errors
    /// As [`GridSpec::runs`].
    pub fn plan(&self) -> crate::Result<GridPlan> {
        Ok(GridPlan {
            spec: serde_json::to_value(self).map_err(|e| Error::Grid {
                what: GRID.into(),
                problem: e.to_string(),
            })?,
            vary: self.vary.clone(),
            seeds: self.seeds,
            base_seed: self.base.seed,
            runs: self.runs()?.into_iter().map(|r| r.planned).collect(),
        })
    }

    /// Creates the grid directory `dir` (and `runs/`) and writes `grid.json`, or checks that
    /// the one there describes this grid.
    ///
    /// # Errors
    /// `dir` holds something other than this grid, or a failed write.
    pub fn prepare(&self, dir: &Path) -> crate::Result<()> {
        let path = dir.join(GRID);
        if path.exists() {
            let there = GridSpec::read(dir)?;
            if there != *self {
                return Err(Error::BadFile {
                    path,
                    problem: "describes another grid (another base config, --vary or --seeds); \
                              choose another --out"
                        .into(),
                });
            }
        } else if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(Error::io_at(dir))?;
            if entries.next().is_some() {
                return Err(Error::BadFile {
                    path: dir.to_path_buf(),
                    problem: "exists, is not empty and holds no grid.json (choose a new --out)"
                        .into(),
                });
            }
        }
        let runs = dir.join(RUNS);
        std::fs::create_dir_all(&runs).map_err(Error::io_at(&runs))?;
        if !path.exists() {
            let json = serde_json::to_vec_pretty(self).map_err(|e| Error::BadFile {
                path: path.clone(),
                problem: e.to_string(),
            })?;
            write_atomic(&path, |w| w.write_all(&json))?;
        }
        Ok(())
    }

    /// Reads `dir/grid.json`.
    ///
    /// # Errors
    /// A missing, unreadable or malformed file, or a newer schema.
    pub fn read(dir: &Path) -> crate::Result<GridSpec> {
        let path = dir.join(GRID);
        let bytes = crate::io::read_document(&path, crate::io::MAX_DOCUMENT)?;
        let spec: GridSpec = serde_json::from_slice(&bytes).map_err(|e| Error::BadFile {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        if spec.schema > SCHEMA {
            return Err(Error::BadFile {
                path,
                problem: format!(
                    "schema {} is newer than this mixprec reads ({SCHEMA})",
                    spec.schema
                ),
            });
        }
        Ok(spec)
    }
}

/// Sets the dotted `key` of `json` to `text` read as a value (see the module's documentation).
fn set_path(json: &mut Value, key: &str, text: &str) -> Result<(), String> {
    let unknown = |why: String| {
        format!("unknown config key {key} ({why}; mixprec train --print-config shows the keys)")
    };
    let mut parts: Vec<&str> = key.split('.').collect();
    let leaf = parts.pop().unwrap_or(key);
    let mut node = json;
    for (i, part) in parts.iter().enumerate() {
        node = match node.get_mut(*part) {
            Some(child) if child.is_object() => child,
            Some(_) => return Err(unknown(format!("{} holds no keys", parts[..=i].join(".")))),
            None => return Err(unknown(format!("no key {}", parts[..=i].join(".")))),
        };
    }
    let Some(object) = node.as_object_mut() else {
        return Err(unknown("not a key of an object".into()));
    };
    let value = match (object.get(leaf), power_of_two(text)) {
        (Some(Value::String(_)), _) => Value::from(value_name(text)),
        (_, Some(k)) if (0..64).contains(&k) => Value::from(1u64 << k),
        (_, Some(k)) => Value::from(crate::format::pow2(k)),
        _ => serde_json::from_str(text).unwrap_or_else(|_| Value::from(text)),
    };
    object.insert(leaf.to_string(), value);
    Ok(())
}

/// Checks every run's data set and budget ([`super::budget::check`]) and that its recipe's
/// `keep` patterns name layers of its model, before any training, each data set loaded once
/// (with the base seed: only its shape matters here).
///
/// # Errors
/// The first run whose data set cannot be loaded or whose run would not fit, named by its
/// directory.
pub fn check_data(runs: &[GridRun]) -> crate::Result<()> {
    let mut loaded: Vec<((String, Option<String>), super::data::Dataset)> = Vec::new();
    for run in runs {
        let c = &run.config;
        let key = (c.dataset.clone(), c.labels.clone());
        let named = |e: Error| Error::Grid {
            what: format!("{RUNS}/{}", run.planned.name),
            problem: e.to_string(),
        };
        let i = match loaded.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let data =
                    super::data::Dataset::load_with_labels(&c.dataset, c.labels.as_deref(), c.seed)
                        .map_err(named)?;
                loaded.push((key, data));
                loaded.len() - 1
            }
        };
        super::budget::check(c, &loaded[i].1).map_err(named)?;
        if !c.recipe.keep.is_empty() {
            // Every keep pattern must name a layer of the model: building it checks.
            training::build(c).map_err(named)?;
        }
    }
    Ok(())
}

/// The state of a run's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// No directory yet.
    Missing,
    /// Killed or failed (`INCOMPLETE`, or no summary): to be run again.
    Incomplete,
    /// Finished.
    Complete,
}

/// The state of `run`'s directory under the grid directory `dir`.
///
/// # Errors
/// A finished run whose config is not the one the grid gives it (the directory belongs to
/// another grid), or an unreadable directory.
pub fn state(dir: &Path, run: &GridRun) -> crate::Result<RunState> {
    let path = run.planned.dir(dir);
    if !path.exists() {
        return Ok(RunState::Missing);
    }
    let Ok(found) = RunDir::open(&path) else {
        return Ok(RunState::Incomplete);
    };
    if !found.is_complete() {
        return Ok(RunState::Incomplete);
    }
    let expected = serde_json::to_value(&run.config).map_err(|e| Error::BadFile {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    if found.config != expected {
        return Err(Error::BadFile {
            path,
            problem: "a finished run whose config.json is not this grid's (another grid's run?)"
                .into(),
        });
    }
    Ok(RunState::Complete)
}

/// What happened to one run of [`execute`].
pub enum Event<'a> {
    /// A training step ended.
    Step,
    /// A run ended, with its summary or its error.
    Done(&'a GridRun, Result<&'a Summary, &'a Error>),
}

/// Trains `runs` into the grid directory `dir` on `threads` threads: one run per thread when
/// there are at least as many runs, each run's training then on one thread (the threads divided
/// among the runs otherwise). A run directory left incomplete is removed and trained again. A
/// run's files do not depend on the threads (training is deterministic whatever their number).
/// Returns the runs that failed, with their errors; the others go on.
pub fn execute(
    dir: &Path,
    runs: &[&GridRun],
    threads: usize,
    progress: &(dyn Fn(Event<'_>) + Sync),
) -> Vec<(String, Error)> {
    let workers = threads.max(1).min(runs.len());
    let per_run = (threads / workers.max(1)).max(1);
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(per_run).build();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(run) = runs.get(i) else { break };
                    let path = run.planned.dir(dir);
                    let result = match &pool {
                        Ok(pool) => pool.install(|| train_one(run, &path, progress)),
                        Err(e) => Err(Error::io(&path, std::io::Error::other(e.to_string()))),
                    };
                    progress(Event::Done(run, result.as_ref()));
                    if let Err(e) = result
                        && let Ok(mut f) = failed.lock()
                    {
                        f.push((run.planned.name.clone(), e));
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap_or_default();
    failed.sort_by(|a, b| a.0.cmp(&b.0));
    failed
}

fn train_one(
    run: &GridRun,
    path: &Path,
    progress: &(dyn Fn(Event<'_>) + Sync),
) -> crate::Result<Summary> {
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(Error::io_at(path))?;
    }
    training::train(&run.config, path, &mut |_| progress(Event::Step))
}

/// One line of `grid.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IndexLine {
    /// The run directory, relative to the grid directory.
    pub run: String,
    /// Each varied key's value, as written.
    pub values: serde_json::Map<String, Value>,
    /// The seed.
    pub seed: u64,
    /// The run's `summary.json`.
    pub summary: Summary,
    /// The varied keys this run stands for every value of ([`PlannedRun::inert`]); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inert: Vec<String>,
}

/// The finished runs of `runs` under `dir`, as lines of `grid.jsonl`, in grid order.
///
/// # Errors
/// An unreadable run directory.
pub fn index(dir: &Path, runs: &[GridRun]) -> crate::Result<Vec<IndexLine>> {
    let mut out = Vec::new();
    for run in runs {
        let path = run.planned.dir(dir);
        if !path.join(crate::run::SUMMARY).exists() {
            continue;
        }
        let found = RunDir::open(&path)?;
        if let (true, Some(summary)) = (found.is_complete(), found.summary) {
            out.push(IndexLine {
                run: format!("{RUNS}/{}", run.planned.name),
                values: run
                    .planned
                    .values
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                    .collect(),
                seed: run.planned.seed,
                summary,
                inert: run.planned.inert.clone(),
            });
        }
    }
    Ok(out)
}

/// Rewrites `dir/grid.jsonl` (atomically) from the finished runs; returns how many it lists.
///
/// # Errors
/// An unreadable run directory or a failed write.
pub fn write_index(dir: &Path, runs: &[GridRun]) -> crate::Result<usize> {
    let lines = index(dir, runs)?;
    let path = dir.join(INDEX);
    let mut text = Vec::new();
    for line in &lines {
        serde_json::to_writer(&mut text, line).map_err(|e| Error::BadFile {
            path: path.clone(),
            problem: e.to_string(),
        })?;
        text.push(b'\n');
    }
    write_atomic(&path, |w| w.write_all(&text))?;
    Ok(lines.len())
}

#[cfg(test)]
mod tests;
