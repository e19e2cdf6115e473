//! The grid directory as `grid` writes it and `report` reads it: its file names, the varied keys,
//! and the plan of its runs (names, values, seeds, recipes and configs as plain data), so that a
//! reader needs nothing of the training core. `crate::train::grid` makes the plan from a grid's
//! spec and trains it; its documentation describes the directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recipe::Recipe;

/// `grid.json`.
pub const GRID: &str = "grid.json";
/// `grid.jsonl`.
pub const INDEX: &str = "grid.jsonl";
/// The folder of the run directories.
pub const RUNS: &str = "runs";
/// The version of `grid.json`.
pub const SCHEMA: u32 = 1;
/// The key that means `train --loss-scale`.
pub const LOSS_SCALE: &str = "loss_scale";
/// One varied key and its values, as written (`2^k` for powers of two).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vary {
    /// The key (`recipe`, `optimizer.lr`, `loss_scale`).
    pub key: String,
    /// The values, in order.
    pub values: Vec<String>,
}

/// A value as run names and reports show it: the contents of a JSON string (`"a:b"` is `a:b`),
/// any other value as written.
#[must_use]
pub fn value_name(text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::String(s)) => s,
        _ => text.to_string(),
    }
}

/// One run of a grid, as a reader of the grid directory needs it.
#[derive(Clone, Debug)]
pub struct PlannedRun {
    /// Position in the grid (from 0).
    pub position: usize,
    /// The directory name under `runs/`.
    pub name: String,
    /// Each varied key with this run's value (as written), in the order of the flags.
    pub values: Vec<(String, String)>,
    /// The seed.
    pub seed: u64,
    /// The run's recipe.
    pub recipe: Recipe,
    /// The run's config, as `config.json` holds it.
    pub config: Value,
    /// The varied keys whose value this run's training cannot depend on: it is trained once,
    /// at the key's value nearest `2^0`, and stands for every value of the key.
    pub inert: Vec<String>,
}

impl PlannedRun {
    /// The run directory under the grid directory `dir`.
    #[must_use]
    pub fn dir(&self, dir: &Path) -> PathBuf {
        dir.join(RUNS).join(&self.name)
    }
}

/// Every run of a grid and the grid as `grid.json` holds it.
#[derive(Clone, Debug)]
pub struct GridPlan {
    /// `grid.json`'s contents.
    pub spec: Value,
    /// The varied keys, in the order of the flags.
    pub vary: Vec<Vary>,
    /// Seeds per combination.
    pub seeds: u64,
    /// The first seed.
    pub base_seed: u64,
    /// The runs, in grid order.
    pub runs: Vec<PlannedRun>,
}
