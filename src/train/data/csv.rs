//! The user's data from a CSV file: one example per line, numeric features, then an integer
//! class label in the last column. A first line that does not parse as numbers is a header and
//! is skipped. The split is that of every user file ([`super::user_split`]): the rows permuted by
//! [`crate::train::Rng`] seeded with 0, the first 80% (rounded down, at least 1) for training.

use std::path::Path;

use ndarray::Array2;

use super::{Dataset, MAX_CLASSES, user_split};
use crate::error::Error;

/// Loads and splits `path`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::BadFile`] naming the line for a
/// non-numeric value, a label that is not a non-negative integer, rows of different lengths, or
/// fewer than two rows or two columns.
pub fn load(path: &Path) -> crate::Result<Dataset> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let bad = |problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut labels = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed: Result<Vec<f64>, _> = fields.iter().map(|f| f.parse::<f64>()).collect();
        let Ok(values) = parsed else {
            if i == 0 {
                continue;
            }
            return Err(bad(format!("line {}: a value is not a number", i + 1)));
        };
        let Some((&label, features)) = values.split_last() else {
            continue;
        };
        if features.is_empty() {
            return Err(bad(format!(
                "line {}: need at least one feature and a label",
                i + 1
            )));
        }
        if !(label >= 0.0 && label.fract() == 0.0 && label < MAX_CLASSES as f64) {
            return Err(bad(format!(
                "line {}: label {label} is not a class index",
                i + 1
            )));
        }
        if let Some(first) = rows.first() {
            if first.len() != features.len() {
                return Err(bad(format!(
                    "line {}: {} features, expected {}",
                    i + 1,
                    features.len(),
                    first.len()
                )));
            }
        }
        if features.iter().any(|v| !v.is_finite()) {
            return Err(bad(format!("line {}: a feature is not finite", i + 1)));
        }
        rows.push(features.iter().map(|&v| v as f32).collect());
        labels.push(label as usize);
    }
    if rows.len() < 2 {
        return Err(bad("fewer than two examples".into()));
    }
    let width = rows[0].len();
    let x = Array2::from_shape_vec((rows.len(), width), rows.concat())
        .map_err(|e| bad(e.to_string()))?;
    Ok(user_split(path, &x, &labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mixprec-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn reads_features_and_labels_with_a_header() {
        let path = write("ok.csv", "a,b,label\n0.5,1,0\n2,3,1\n4,5,2\n6,7,1\n8,9,0\n");
        let d = load(&path).unwrap();
        assert_eq!(
            (d.train_x.nrows(), d.test_x.nrows(), d.features(), d.classes),
            (4, 1, 2, 3)
        );
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, needle) in [
            ("1,2,0\n1,x,1\n", "line 2"),
            ("1,2,0\n1,2,0.5\n", "line 2: label 0.5"),
            ("1,2,0\n1,1\n", "line 2: 1 features, expected 2"),
            ("1,2,0\n", "fewer than two"),
        ] {
            let e = load(&write("bad.csv", text)).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        assert!(load(Path::new("/nonexistent/x.csv")).is_err());
    }
}
