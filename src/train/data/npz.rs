//! The user's data from a `.npz` archive, as `np.savez("data.npz", x=features, y=labels)` writes
//! it: `x` the features and `y` the labels, each array read by the crate's `.npy` reader and held
//! to the rules of `.npy` data sets ([`super::npy`]: `x` 2-D, one row per example, finite in f32;
//! `y` 1-D class indices, integers or integral floats). Stored or deflated entries
//! (`np.savez_compressed`) both work. The split is that of every user file
//! ([`super::user_split`]): the rows permuted by [`crate::train::Rng`] seeded with 0, the first
//! 80% (rounded down) for training.

use std::io::Read;
use std::path::Path;

use super::npy::{Part, examples};
use super::{Dataset, user_split};
use crate::error::Error;
use crate::io::{NpyArray, read_npy_bytes};

/// Loads and splits `path`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened; [`Error::BadFile`] naming the problem when it is
/// not a zip, lacks `x.npy` or `y.npy`, or holds arrays that break the rules of `.npy` data sets
/// (another dtype or shape, labels that are not class indices, features that are not finite,
/// fewer than two rows).
pub fn load(path: &Path) -> crate::Result<Dataset> {
    let bad = |problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    let mut archive = crate::io::npz::open_archive(path)?;
    let mut entry = |name: &str| -> crate::Result<NpyArray> {
        let entry = archive.by_name(name).map_err(|_| {
            bad(format!(
                "no array '{}' (write it with np.savez(path, x=..., y=...))",
                &name[..1]
            ))
        })?;
        // No more than the directory declares: the CRC check at the end tells a lie.
        let declared = entry.size();
        let mut bytes = Vec::new();
        entry
            .take(declared.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("{name}: {e}")))?;
        if bytes.len() as u64 > declared {
            return Err(bad(format!(
                "{name}: longer than the {declared} bytes the archive's directory declares"
            )));
        }
        read_npy_bytes(&bytes).map_err(|p| bad(format!("{name}: {p}")))
    };
    let (x, y) = (entry("x.npy")?, entry("y.npy")?);
    let (x, labels) = examples(x, Some(y)).map_err(|(part, problem)| {
        let array = match part {
            Part::Features => "x",
            Part::Labels => "y",
        };
        bad(format!("{array}: {problem}"))
    })?;
    Ok(user_split(path, &x, &labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::test_npy as npy;
    use std::fs::File;
    use std::io::Write;

    fn npz(name: &str, entries: &[(&str, Vec<u8>)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mixprec-npz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let mut w = zip::ZipWriter::new(File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (entry, bytes) in entries {
            w.start_file(*entry, options).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap();
        path
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_features_and_labels_in_both_orders() {
        // x = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]], stored column-major; y as big-endian i2.
        let x = npy(
            "<f4",
            "(5, 2)",
            true,
            &f32s(&[0., 2., 4., 6., 8., 1., 3., 5., 7., 9.]),
        );
        let y: Vec<u8> = [0i16, 1, 2, 1, 0]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let path = npz(
            "ok.npz",
            &[("x.npy", x), ("y.npy", npy(">i2", "(5,)", false, &y))],
        );
        let d = load(&path).unwrap();
        assert_eq!(
            (d.train_x.nrows(), d.test_x.nrows(), d.features(), d.classes),
            (4, 1, 2, 3)
        );
        for (row, &label) in d.train_x.rows().into_iter().zip(&d.train_y) {
            let i = (row[0] / 2.0) as usize;
            assert_eq!(row[1], row[0] + 1.0);
            assert_eq!(label, [0, 1, 2, 1, 0][i]);
        }
    }

    #[test]
    fn bad_archives_name_the_problem() {
        let x = npy("<f8", "(2, 1)", false, &[0u8; 16]);
        let y_neg: Vec<u8> = [-1i64, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let y_ok: Vec<u8> = [1i64, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        type Entries<'a> = Vec<(&'a str, Vec<u8>)>;
        let cases: Vec<(Entries, &str)> = vec![
            (vec![("x.npy", x.clone())], "no array 'y'"),
            (
                vec![
                    ("x.npy", x.clone()),
                    ("y.npy", npy("<i8", "(2,)", false, &y_neg)),
                ],
                "label -1",
            ),
            (
                vec![
                    ("x.npy", x.clone()),
                    ("y.npy", npy("<f8", "(2,)", false, &f64s(&[0.5, 0.0]))),
                ],
                "y: label 0.5 at index 0",
            ),
            (
                vec![
                    ("x.npy", x.clone()),
                    ("y.npy", npy("<i8", "(3,)", false, &y_ok)),
                ],
                "y.npy: data shorter than the header says",
            ),
            (
                vec![
                    ("x.npy", npy("<c8", "(2, 1)", false, &[0u8; 16])),
                    ("y.npy", npy("<i8", "(2,)", false, &y_ok)),
                ],
                "x.npy: unsupported dtype '<c8'",
            ),
        ];
        for (entries, needle) in cases {
            let e = load(&npz("bad.npz", &entries)).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let not_zip =
            std::env::temp_dir().join(format!("mixprec-npz-{}-plain.npz", std::process::id()));
        std::fs::write(&not_zip, b"hello").unwrap();
        assert!(
            load(&not_zip)
                .unwrap_err()
                .to_string()
                .contains("not a valid .npz")
        );
    }
}
