//! The user's data from a `.npz` archive, as `np.savez("data.npz", x=features, y=labels)` writes
//! it: `x` a 2-D float array (`f4` or `f8`, either byte order, C or Fortran order) of one row per
//! example, `y` a 1-D integer array (`i1`..`i8`, `u1`..`u8`) of class labels. Stored or
//! deflated entries (`np.savez_compressed`) both work. The split is that of every user file
//! ([`super::user_split`]): the rows permuted by [`crate::train::Rng`] seeded with 0, the first
//! 80% (rounded down) for training.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use ndarray::Array2;

use super::{Dataset, MAX_CLASSES, user_split};
use crate::error::Error;

/// An array read from a `.npy` entry: its shape and its values widened to f64 or i64.
#[derive(Debug)]
enum Npy {
    Float(Vec<usize>, Vec<f64>),
    Int(Vec<usize>, Vec<i64>),
}

/// Loads and splits `path`.
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened; [`Error::BadFile`] naming the problem when it is
/// not a zip, lacks `x.npy` or `y.npy`, holds other dtypes or shapes, labels that are negative,
/// features that are not finite, or fewer than two rows.
pub fn load(path: &Path) -> crate::Result<Dataset> {
    let bad = |problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    let file = File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .map_err(|e| bad(format!("not a .npz (zip) archive: {e}")))?;
    let mut entry = |name: &str| -> crate::Result<Npy> {
        let mut bytes = Vec::new();
        archive
            .by_name(name)
            .map_err(|_| {
                bad(format!(
                    "no array '{}' (write it with np.savez(path, x=..., y=...))",
                    &name[..1]
                ))
            })?
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("{name}: {e}")))?;
        parse_npy(&bytes).map_err(|p| bad(format!("{name}: {p}")))
    };
    let (x, y) = (entry("x.npy")?, entry("y.npy")?);
    let Npy::Float(xs, xv) = x else {
        return Err(bad("x must be a float array (f4 or f8)".into()));
    };
    let Npy::Int(ys, yv) = y else {
        return Err(bad("y must be an integer array of class labels".into()));
    };
    let ([rows, cols], [n]) = (xs.as_slice(), ys.as_slice()) else {
        return Err(bad(format!(
            "x must be 2-D and y 1-D (got shapes {xs:?} and {ys:?})"
        )));
    };
    if rows != n || *rows < 2 || *cols == 0 {
        return Err(bad(format!(
            "x has {rows} rows of {cols} features and y {n} labels: need the same number, at least 2"
        )));
    }
    if let Some(v) = yv.iter().find(|&&v| !(0..MAX_CLASSES as i64).contains(&v)) {
        return Err(bad(format!("label {v} is not a class index")));
    }
    if xv.iter().any(|v| !v.is_finite()) {
        return Err(bad("a feature is not finite".into()));
    }
    let x = Array2::from_shape_vec((*rows, *cols), xv.iter().map(|&v| v as f32).collect())
        .map_err(|e| bad(e.to_string()))?;
    let labels: Vec<usize> = yv.iter().map(|&v| v as usize).collect();
    Ok(user_split(path, &x, &labels))
}

/// Parses a `.npy` file (format versions 1 to 3). Fortran-order arrays are returned in C order.
fn parse_npy(b: &[u8]) -> Result<Npy, String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err("not a .npy array".into());
    }
    let (header_len, start) = match b[6] {
        1 => (usize::from(u16::from_le_bytes([b[8], b[9]])), 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!(".npy format version {v} is not supported")),
    };
    let header = b.get(start..start + header_len).ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let field = |key: &str| {
        header
            .split(&format!("'{key}':"))
            .nth(1)
            .map(str::trim_start)
    };
    let descr = field("descr")
        .and_then(|s| s.strip_prefix('\''))
        .and_then(|s| s.split('\'').next())
        .ok_or("no descr")?;
    let fortran = field("fortran_order").is_some_and(|s| s.starts_with("True"));
    let shape_text = field("shape")
        .and_then(|s| s.strip_prefix('('))
        .and_then(|s| s.split(')').next())
        .ok_or("no shape")?;
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| format!("bad shape '({shape_text})'"))
        })
        .collect::<Result<_, _>>()?;
    let (order, kind, size) = match descr.as_bytes() {
        [o @ (b'<' | b'>' | b'|' | b'='), k, rest @ ..] => (
            *o,
            *k,
            std::str::from_utf8(rest)
                .ok()
                .and_then(|s| s.parse::<usize>().ok()),
        ),
        _ => return Err(format!("unsupported dtype '{descr}'")),
    };
    let size = size
        .filter(|s| [1, 2, 4, 8].contains(s))
        .ok_or(format!("unsupported dtype '{descr}'"))?;
    let big = order == b'>' || (order == b'=' && cfg!(target_endian = "big"));
    let count: usize = shape.iter().product();
    let data = b.get(start + header_len..).ok_or("truncated data")?;
    if data.len() != count * size {
        return Err(format!(
            "{} data bytes for shape {shape:?} of {descr}",
            data.len()
        ));
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        let bytes = &data[i * size..(i + 1) * size];
        if big {
            w[..size]
                .iter_mut()
                .zip(bytes.iter().rev())
                .for_each(|(d, s)| *d = *s);
        } else {
            w[..size].copy_from_slice(bytes);
        }
        w
    };
    // Fortran order: element (r, c) of an R x C array is at c * R + r.
    let source = |i: usize| match (fortran, shape.as_slice()) {
        (true, [r, c]) => (i % c) * r + i / c,
        _ => i,
    };
    match (kind, size) {
        (b'f', 4) => Ok(Npy::Float(
            shape.clone(),
            (0..count)
                .map(|i| {
                    let w = word(source(i));
                    f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                })
                .collect(),
        )),
        (b'f', 8) => Ok(Npy::Float(
            shape.clone(),
            (0..count)
                .map(|i| f64::from_le_bytes(word(source(i))))
                .collect(),
        )),
        (b'i', _) => Ok(Npy::Int(
            shape.clone(),
            (0..count)
                .map(|i| {
                    // Sign-extend from `size` bytes.
                    let v = i64::from_le_bytes(word(source(i)));
                    let shift = 64 - 8 * size as u32;
                    (v << shift) >> shift
                })
                .collect(),
        )),
        (b'u', _) => Ok(Npy::Int(
            shape.clone(),
            (0..count)
                .map(|i| i64::from_le_bytes(word(source(i))) & i64::MAX)
                .collect(),
        )),
        _ => Err(format!(
            "unsupported dtype '{descr}' (x: f4 or f8; y: integers)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn npy(descr: &str, shape: &str, fortran: bool, data: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

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
                    ("y.npy", npy("<f8", "(2,)", false, &[0u8; 16])),
                ],
                "integer",
            ),
            (
                vec![
                    ("x.npy", x.clone()),
                    ("y.npy", npy("<i8", "(3,)", false, &y_ok)),
                ],
                "data bytes",
            ),
            (
                vec![
                    ("x.npy", npy("<c8", "(2, 1)", false, &[0u8; 16])),
                    ("y.npy", npy("<i8", "(2,)", false, &y_ok)),
                ],
                "dtype",
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
                .contains("not a .npz")
        );
    }
}
