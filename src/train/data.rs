//! Data sets: the embedded UCI digits, deterministic synthetic sets and the user's CSV, `.npz` and
//! `.npy` files.
//! Every set is a fixed train/test split of features (f32 rows) and integer labels.

mod csv;
mod digits;
mod npy;
mod npz;
mod synthetic;

use std::path::Path;

use ndarray::{Array2, Axis};

pub use digits::digits;
pub use synthetic::{
    RECALL_STEPS, RECALL_VOCAB, RING_MODES, RING_RADIUS, RING_STD, blobs, recall, ring, spirals,
};

use super::rng::Rng;
use crate::error::Error;

/// The names of the built-in sets.
pub const BUILTIN: [&str; 5] = ["digits", "blobs", "spirals", "recall", "ring"];

/// Labels of the user's files are class indices below this (a larger value is surely not a
/// class index but a regression target or an id).
const MAX_CLASSES: usize = 1_000_000;

/// The split of every user file (CSV, `.npz`, `.npy`): the rows permuted by [`Rng`] seeded with
/// 0, the first 80% (rounded down, at least 1) for training; named by the (features') path.
fn user_split(path: &Path, x: &Array2<f32>, labels: &[usize]) -> Dataset {
    let train = (labels.len() * 4 / 5).max(1);
    Dataset::split(&path.display().to_string(), x, labels, train, 0)
}

/// A classification data set with a fixed train/test split.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// `"digits"`, `"blobs"`, `"spirals"`, `"recall"`, `"ring"`, or the file's path.
    pub name: String,
    /// Training features, one row per example.
    pub train_x: Array2<f32>,
    /// Training labels.
    pub train_y: Vec<usize>,
    /// Test features.
    pub test_x: Array2<f32>,
    /// Test labels.
    pub test_y: Vec<usize>,
    /// Number of classes (labels are `0..classes`).
    pub classes: usize,
}

impl Dataset {
    /// The built-in set `name`, or a CSV file (`.csv`) or NumPy archive (`.npz`, arrays `x` and
    /// `y`) at that path. Synthetic sets are drawn from `seed`; the digits split and the split of
    /// user files are fixed.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for an unknown name; [`Error::Io`] or [`Error::BadFile`] for a file
    /// that cannot be read or parsed.
    pub fn load(name: &str, seed: u64) -> crate::Result<Dataset> {
        Dataset::load_with_labels(name, None, seed)
    }

    /// [`Dataset::load`], plus features in a `.npy` file (a 2-D array) with their labels in the
    /// `.npy` file `labels` (a 1-D array of class indices) or, when `labels` is `None`, in the
    /// features' last column.
    ///
    /// # Errors
    /// As [`Dataset::load`]; [`Error::InvalidValue`] for `labels` with a data set that is not a
    /// `.npy` file (the others hold their labels).
    pub fn load_with_labels(name: &str, labels: Option<&str>, seed: u64) -> crate::Result<Dataset> {
        if let Some(labels) = labels
            && !name.ends_with(".npy")
        {
            return Err(Error::InvalidValue {
                what: "labels",
                value: labels.to_string(),
                expected: "a labels file only with a .npy dataset (built-in sets, CSV and .npz files hold their labels)",
            });
        }
        match name {
            "digits" => digits(),
            "blobs" => Ok(blobs(seed)),
            "spirals" => Ok(spirals(seed)),
            "recall" => Ok(recall(seed)),
            "ring" => Ok(ring(seed)),
            _ if name.ends_with(".csv") => csv::load(Path::new(name)),
            _ if name.ends_with(".npz") => npz::load(Path::new(name)),
            _ if name.ends_with(".npy") => npy::load(Path::new(name), labels.map(Path::new)),
            _ => Err(Error::InvalidValue {
                what: "dataset",
                value: name.to_string(),
                expected: "digits, blobs, spirals, recall, ring, or a path ending in .csv, .npz or .npy",
            }),
        }
    }

    /// Features per example.
    #[must_use]
    pub fn features(&self) -> usize {
        self.train_x.ncols()
    }

    /// Splits `x` and `y` into train and test sets: a permutation from `Rng::new(split_seed)`,
    /// the first `train` examples for training.
    #[must_use]
    pub fn split(
        name: &str,
        x: &Array2<f32>,
        y: &[usize],
        train: usize,
        split_seed: u64,
    ) -> Dataset {
        let mut order: Vec<usize> = (0..y.len()).collect();
        Rng::new(split_seed).shuffle(&mut order);
        let (tr, te) = order.split_at(train.min(order.len()));
        Dataset {
            name: name.to_string(),
            train_x: x.select(Axis(0), tr),
            train_y: tr.iter().map(|&i| y[i]).collect(),
            test_x: x.select(Axis(0), te),
            test_y: te.iter().map(|&i| y[i]).collect(),
            classes: y.iter().max().map_or(0, |m| m + 1),
        }
    }
}

/// Draws mini-batches: a fresh seeded permutation of the training set each epoch, consumed in
/// order; a batch that would cross the end of an epoch starts the next one instead (every batch
/// has the full size when the set is at least that large).
#[derive(Clone, Debug)]
pub struct Batches {
    rng: Rng,
    order: Vec<usize>,
    pos: usize,
}

impl Batches {
    /// A sampler over `n` examples with its own stream from `rng`.
    #[must_use]
    pub fn new(n: usize, rng: Rng) -> Self {
        Batches {
            rng,
            order: (0..n).collect(),
            pos: n,
        }
    }

    /// The indices of the next batch of (up to) `size` examples.
    pub fn next_batch(&mut self, size: usize) -> Vec<usize> {
        let size = size.min(self.order.len());
        if self.pos + size > self.order.len() {
            self.rng.shuffle(&mut self.order);
            self.pos = 0;
        }
        let batch = self.order[self.pos..self.pos + size].to_vec();
        self.pos += size;
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_an_epoch_and_are_seeded() {
        let mut b = Batches::new(10, Rng::new(1));
        let mut seen: Vec<usize> = (0..3).flat_map(|_| b.next_batch(3)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 9);
        let mut a = Batches::new(10, Rng::new(1));
        let mut c = Batches::new(10, Rng::new(1));
        assert_eq!(a.next_batch(4), c.next_batch(4));
        assert_eq!(Batches::new(2, Rng::new(0)).next_batch(5).len(), 2);
    }

    #[test]
    fn unknown_names_are_errors() {
        let e = Dataset::load("mnist", 0).unwrap_err().to_string();
        assert!(e.contains("mnist") && e.contains("digits"), "{e}");
    }
}
