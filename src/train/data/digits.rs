//! The UCI optical recognition of handwritten digits data set, 8x8 version, embedded.
//!
//! 1,797 images of 8x8 pixels with values 0..=16 (counts of on pixels in 4x4 blocks of 32x32
//! bitmaps), 10 classes. Source: E. Alpaydin and C. Kaynak, "Optical Recognition of Handwritten
//! Digits", UCI Machine Learning Repository (1998), <https://doi.org/10.24432/C50P49>, licensed
//! CC BY 4.0 (<https://creativecommons.org/licenses/by/4.0/>). The file is the copy scikit-learn
//! ships (`sklearn/datasets/data/digits.csv.gz`, scikit-learn 1.9.1), unchanged: 65 comma-separated
//! integers per line, 64 pixels then the label. See `README.md` beside it.
//!
//! Features are pixel / 16 (in [0, 1]). The split is fixed: the examples permuted by
//! [`crate::train::Rng`] seeded with 0, the first 1,400 for training and the other 397 for test.

use std::io::Read;
use std::path::PathBuf;

use flate2::read::GzDecoder;
use ndarray::Array2;

use super::Dataset;
use crate::error::Error;

const DIGITS_CSV_GZ: &[u8] = include_bytes!("digits.csv.gz");
const EXAMPLES: usize = 1797;
const TRAIN: usize = 1400;

/// The digits set with its fixed 1,400 / 397 split.
///
/// # Errors
/// [`Error::BadFile`] if the embedded file does not decompress or parse (it is checked by tests,
/// so this means a corrupted build).
pub fn digits() -> crate::Result<Dataset> {
    let bad = |problem: String| Error::BadFile {
        path: PathBuf::from("<embedded digits.csv.gz>"),
        problem,
    };
    let mut text = String::new();
    GzDecoder::new(DIGITS_CSV_GZ)
        .read_to_string(&mut text)
        .map_err(|e| bad(e.to_string()))?;
    let mut x = Array2::zeros((EXAMPLES, 64));
    let mut y = Vec::with_capacity(EXAMPLES);
    for (i, line) in text.lines().enumerate() {
        if i >= EXAMPLES {
            return Err(bad(format!("more than {EXAMPLES} lines")));
        }
        let values: Vec<u8> = line
            .split(',')
            .map(|v| v.trim().parse::<u8>())
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("line {}: {e}", i + 1)))?;
        if values.len() != 65 || values[64] > 9 || values[..64].iter().any(|&v| v > 16) {
            return Err(bad(format!(
                "line {}: not 64 pixels in 0..=16 and a digit",
                i + 1
            )));
        }
        for (j, &v) in values[..64].iter().enumerate() {
            x[[i, j]] = f32::from(v) / 16.0;
        }
        y.push(usize::from(values[64]));
    }
    if y.len() != EXAMPLES {
        return Err(bad(format!("{} lines, expected {EXAMPLES}", y.len())));
    }
    Ok(Dataset::split("digits", &x, &y, TRAIN, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_load_with_the_fixed_split() {
        let d = digits().unwrap();
        assert_eq!((d.train_x.dim(), d.test_x.dim()), ((1400, 64), (397, 64)));
        assert_eq!(d.classes, 10);
        // Every class appears in both halves, and the class counts add up to the published ones
        // (178, 182, 177, 183, 181, 182, 181, 179, 174, 180).
        let mut counts = [0usize; 10];
        for &l in d.train_y.iter().chain(&d.test_y) {
            counts[l] += 1;
        }
        assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
        assert!((0..10).all(|c| d.test_y.contains(&c)));
        assert!(d.train_x.iter().all(|&v| (0.0..=1.0).contains(&v)));
        // The split does not change between calls.
        assert_eq!(digits().unwrap().test_y, d.test_y);
    }
}
