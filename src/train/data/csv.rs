//! The user's data from a CSV file: one example per line, numeric features, then an integer
//! class label in the last column. A first line that does not parse as numbers is a header and
//! is skipped. The split is that of every user file ([`super::user_split`]): the rows permuted by
//! [`crate::train::Rng`] seeded with 0, the first 80% (rounded down, at least 1) for training.

use std::io::Read;
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
    let mut file = crate::io::open_regular(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(Error::io_at(path))?;
    let (x, labels) = parse(&text).map_err(|problem| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    })?;
    Ok(user_split(path, &x, &labels))
}

/// The examples in the text of a CSV file: features (finite in f32) and class labels; the
/// problem, naming the line (and column), when there is one.
pub(crate) fn parse(text: &str) -> Result<(Array2<f32>, Vec<usize>), String> {
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut labels = Vec::new();
    // Values per row (features and the label), from the first row.
    let mut width = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parsed: Result<Vec<f64>, _> = fields.iter().map(|f| f.parse::<f64>()).collect();
        let Ok(values) = parsed else {
            if i == 0 {
                continue;
            }
            let column = fields
                .iter()
                .position(|f| f.parse::<f64>().is_err())
                .unwrap_or(0)
                + 1;
            return Err(format!(
                "line {n}, column {column}: '{}' is not a number",
                shorten(fields[column - 1])
            ));
        };
        if values.len() < 2 {
            return Err(format!("line {n}: need at least one feature and a label"));
        }
        // The row's length first: in a short row the last value is a feature, not the label.
        match width {
            Some(w) if w != values.len() => {
                let what = if values.len() < w { "short" } else { "long" };
                return Err(format!(
                    "line {n}: the row is {what}: {} values, expected {w} ({} features and a label)",
                    values.len(),
                    w - 1
                ));
            }
            _ => width = Some(values.len()),
        }
        let Some((&label, features)) = values.split_last() else {
            continue;
        };
        if !(label >= 0.0 && label.fract() == 0.0 && label < MAX_CLASSES as f64) {
            return Err(format!(
                "line {n}, column {}: label {label} is not a class index (an integer from 0 to {})",
                values.len(),
                MAX_CLASSES - 1
            ));
        }
        let mut row = Vec::with_capacity(features.len());
        for (c, &v) in features.iter().enumerate() {
            // Finite in f32, where training holds it: 1e39 is finite in f64 but not there.
            let f = v as f32;
            if !f.is_finite() {
                return Err(format!(
                    "line {n}, column {}: feature {} is not a finite f32",
                    c + 1,
                    fields[c]
                ));
            }
            row.push(f);
        }
        rows.push(row);
        labels.push(label as usize);
    }
    if rows.len() < 2 {
        return Err("fewer than two examples".into());
    }
    let width = rows[0].len();
    let x =
        Array2::from_shape_vec((rows.len(), width), rows.concat()).map_err(|e| e.to_string())?;
    Ok((x, labels))
}

/// A field for a message: at most 40 characters, escaped.
fn shorten(field: &str) -> String {
    let s: String = field.escape_debug().collect();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s
    }
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
            ("1,2,0\n1,x,1\n", "line 2, column 2: 'x' is not a number"),
            ("1,2,0\n1,2,0.5\n", "line 2, column 3: label 0.5"),
            (
                "1,2,0\n1,1\n",
                "line 2: the row is short: 2 values, expected 3",
            ),
            ("1,2,0\n0.5,0.782\n", "line 2: the row is short"),
            ("1,2,0\n1,2,3,1\n", "line 2: the row is long"),
            (
                "1,2,0\n1,1e39,1\n",
                "line 2, column 2: feature 1e39 is not a finite f32",
            ),
            (
                "1,2,0\n-1e39,1,1\n",
                "line 2, column 1: feature -1e39 is not a finite f32",
            ),
            ("1,2,0\n1,nan,1\n", "line 2, column 2: feature nan"),
            ("1,2,0\n", "fewer than two"),
        ] {
            let e = load(&write("bad.csv", text)).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        assert!(load(Path::new("/nonexistent/x.csv")).is_err());
    }
}
