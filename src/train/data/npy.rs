//! The user's data from `.npy` files, as `np.save` writes them.
//!
//! - Features: a 2-D array, one row per example, of any dtype [`crate::io::read_npy`] reads
//!   (`f2`, `f4`, `f8`, integers; either byte order, C or Fortran order). Values are converted to
//!   f32 and must be finite there: a NaN, an infinity or an `f8` beyond f32's range is an error
//!   naming its row and column (a network cannot learn from it, and silently dropping rows would
//!   change the split).
//! - Labels: from a second file (`--labels Y.npy`, config key `labels`), a 1-D array (or `n x 1`)
//!   with one label per row of the features, of any integer dtype (`i1`..`i8`, `u1`..`u8`, `b1`)
//!   or of floats that hold integers; or, without a labels file, the features' last column (as in
//!   a CSV file). A label must be a class index: an integer from 0 to 999,999.
//!
//! The split is that of every user file ([`super::user_split`]): the rows permuted by
//! [`crate::train::Rng`] seeded with 0, the first 80% (rounded down, at least 1) for training.

use std::path::Path;

use ndarray::Array2;

use super::{Dataset, MAX_CLASSES, user_split};
use crate::error::Error;
use crate::io::{NpyArray, NpyValues, read_npy};

/// Loads the features at `features` and the labels at `labels` (or in the features' last
/// column), and splits them.
///
/// # Errors
/// [`Error::Io`] when a file cannot be opened; [`Error::BadFile`] naming the file and the problem
/// for a file that is not a readable `.npy`, features that are not 2-D or not finite, labels that
/// are not 1-D, not one per row, or not class indices, or fewer than two examples.
pub fn load(features: &Path, labels: Option<&Path>) -> crate::Result<Dataset> {
    let x = read_npy(features)?;
    let y = labels.map(read_npy).transpose()?;
    let (x, y) = examples(x, y).map_err(|(part, problem)| Error::BadFile {
        path: match (part, labels) {
            (Part::Labels, Some(path)) => path.to_path_buf(),
            _ => features.to_path_buf(),
        },
        problem,
    })?;
    Ok(user_split(features, &x, &y))
}

/// Which array a problem is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    Features,
    Labels,
}

/// The examples (features as f32 rows, and class indices) that the arrays `x` and `y` hold, with
/// the rules of the [module docs](self); `y` `None` takes the labels from `x`'s last column. A
/// problem is returned with the array it is in.
pub(super) fn examples(
    x: NpyArray,
    y: Option<NpyArray>,
) -> Result<(Array2<f32>, Vec<usize>), (Part, String)> {
    use Part::{Features, Labels};
    let x = x.into_c_order();
    let &[rows, cols] = x.shape.as_slice() else {
        return Err((
            Features,
            format!(
                "features must be a 2-D array (one row per example), got shape {:?}",
                x.shape
            ),
        ));
    };
    if rows < 2 {
        return Err((Features, format!("{rows} rows: need at least two examples")));
    }
    let values = widen(&x.values);
    let (width, labels) = match y {
        Some(y) => {
            let n = match y.shape.as_slice() {
                &[n] | &[n, 1] => n,
                shape => {
                    return Err((
                        Labels,
                        format!("labels must be a 1-D array, got shape {shape:?}"),
                    ));
                }
            };
            if n != rows {
                return Err((
                    Labels,
                    format!("{n} labels for {rows} rows of features: need one label per row"),
                ));
            }
            (
                cols,
                class_indices(&widen(&y.values)).map_err(|p| (Labels, p))?,
            )
        }
        None => {
            if cols < 2 {
                return Err((
                    Features,
                    format!(
                        "{cols} column(s): without --labels the last column is the label, so at least two are needed"
                    ),
                ));
            }
            let last: Vec<f64> = values.chunks_exact(cols).map(|r| r[cols - 1]).collect();
            let labels = class_indices(&last).map_err(|p| {
                (
                    Features,
                    format!("without --labels the last column holds the labels: {p}"),
                )
            })?;
            (cols - 1, labels)
        }
    };
    if width == 0 {
        return Err((Features, "no feature columns".into()));
    }
    let mut xs = Vec::with_capacity(rows * width);
    for (r, row) in values.chunks_exact(cols).enumerate() {
        for (c, &v) in row[..width].iter().enumerate() {
            let f = v as f32;
            if !f.is_finite() {
                return Err((
                    Features,
                    format!(
                        "feature {} at row {r}, column {c} is not a finite f32",
                        show(v)
                    ),
                ));
            }
            xs.push(f);
        }
    }
    let x = Array2::from_shape_vec((rows, width), xs).map_err(|e| (Features, e.to_string()))?;
    Ok((x, labels))
}

/// `v` for a message: in full, or in scientific notation when it is huge (`1e300`, not 301
/// digits).
fn show(v: f64) -> String {
    if v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Every value as f64: exact for floats and for integers up to 2^53 (larger ones only ever
/// matter as features, where f32 rounds them anyway, or as labels, which they cannot be).
fn widen(v: &NpyValues) -> Vec<f64> {
    match v {
        NpyValues::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        NpyValues::F64(v) => v.clone(),
        NpyValues::I64(v) => v.iter().map(|&x| x as f64).collect(),
        NpyValues::U64(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

/// The values as class indices, or the first one that is not (negative, fractional, NaN, too
/// large), with its index.
fn class_indices(values: &[f64]) -> Result<Vec<usize>, String> {
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if v >= 0.0 && v.fract() == 0.0 && v < MAX_CLASSES as f64 {
                Ok(v as usize)
            } else {
                Err(format!(
                    "label {} at index {i} is not a class index (an integer from 0 to {})",
                    show(v),
                    MAX_CLASSES - 1
                ))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{TensorData, write_npy};

    #[test]
    fn labels_from_a_file_or_the_last_column_give_the_same_set() {
        let dir = tempfile::tempdir().unwrap();
        // Row i: features (i, 10 i), label i % 3.
        let xy: Vec<f32> = (0..10)
            .flat_map(|i| [i as f32, 10.0 * i as f32, (i % 3) as f32])
            .collect();
        let x: Vec<f64> = (0..10)
            .flat_map(|i| [f64::from(i), 10.0 * f64::from(i)])
            .collect();
        let labels: Vec<f64> = (0..10).map(|i| f64::from(i % 3)).collect();
        let (pxy, px, py) = (
            dir.path().join("xy.npy"),
            dir.path().join("x.npy"),
            dir.path().join("y.npy"),
        );
        write_npy(&pxy, &[10, 3], TensorData::F32(&xy)).unwrap();
        write_npy(&px, &[10, 2], TensorData::F64(&x)).unwrap();
        write_npy(&py, &[10], TensorData::F64(&labels)).unwrap();
        let a = load(&pxy, None).unwrap();
        let b = load(&px, Some(&py)).unwrap();
        assert_eq!(
            (a.train_x.nrows(), a.test_x.nrows(), a.features(), a.classes),
            (8, 2, 2, 3)
        );
        assert_eq!((&a.train_x, &a.train_y), (&b.train_x, &b.train_y));
        assert_eq!((&a.test_x, &a.test_y), (&b.test_x, &b.test_y));
        for (row, &label) in a.train_x.rows().into_iter().zip(&a.train_y) {
            assert_eq!((row[1], label), (10.0 * row[0], row[0] as usize % 3));
        }
    }

    #[test]
    fn bad_inputs_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let w = |name: &str, shape: &[usize], v: &[f32]| {
            write_npy(&p(name), shape, TensorData::F32(v)).unwrap();
        };
        w("x.npy", &[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        w("flat.npy", &[6], &[0.0; 6]);
        w("one.npy", &[1, 2], &[0.0, 1.0]);
        w("col.npy", &[3, 1], &[0.0; 3]);
        w("nan.npy", &[2, 2], &[0.0, f32::NAN, 1.0, 2.0]);
        w(
            "inf.npy",
            &[2, 3],
            &[0.0, 0.0, 1.0, f32::INFINITY, 0.0, 0.0],
        );
        w("y2.npy", &[2], &[0.0, 1.0]);
        w("yhalf.npy", &[3], &[0.0, 1.5, 1.0]);
        w("yneg.npy", &[3], &[0.0, -1.0, 1.0]);
        w("ybig.npy", &[3], &[0.0, 1.0, 1.5e7]);
        w("y2d.npy", &[3, 2], &[0.0; 6]);
        write_npy(
            &p("big.npy"),
            &[2, 2],
            TensorData::F64(&[1e300, 0.0, 1.0, 1.0]),
        )
        .unwrap();
        let cases: [(&str, Option<&str>, &str); 11] = [
            (
                "flat.npy",
                Some("y2.npy"),
                "flat.npy: features must be a 2-D array",
            ),
            ("one.npy", None, "one.npy: 1 rows: need at least two"),
            ("col.npy", None, "col.npy: 1 column(s): without --labels"),
            (
                "nan.npy",
                Some("y2.npy"),
                "nan.npy: feature NaN at row 0, column 1",
            ),
            ("inf.npy", None, "inf.npy: feature inf at row 1, column 0"),
            (
                "big.npy",
                None,
                "feature 1e300 at row 0, column 0 is not a finite f32",
            ),
            (
                "x.npy",
                Some("y2.npy"),
                "y2.npy: 2 labels for 3 rows of features",
            ),
            (
                "x.npy",
                Some("yhalf.npy"),
                "yhalf.npy: label 1.5 at index 1",
            ),
            ("x.npy", Some("yneg.npy"), "yneg.npy: label -1 at index 1"),
            (
                "x.npy",
                Some("ybig.npy"),
                "label 15000000 at index 2 is not a class index",
            ),
            (
                "x.npy",
                Some("y2d.npy"),
                "y2d.npy: labels must be a 1-D array",
            ),
        ];
        for (x, y, needle) in cases {
            let e = load(&p(x), y.map(&p).as_deref()).unwrap_err().to_string();
            assert!(e.contains(needle) && !e.contains('\n'), "{needle}: {e}");
        }
        // Without --labels the last column of x.npy (1, 3, 5) holds the labels.
        assert_eq!(load(&p("x.npy"), None).unwrap().classes, 6);
        let e = load(&p("missing.npy"), None).unwrap_err().to_string();
        assert!(e.contains("missing.npy"), "{e}");
    }
}
