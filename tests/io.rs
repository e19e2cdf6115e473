//! The tensor readers against files made by numpy and the safetensors library (tests/data, made
//! by tests/data/make_fixtures.py, which records the expected values bit for bit), round trips
//! through the writers, and chunking of tensors larger than one chunk.

use std::io::Write;
use std::path::{Path, PathBuf};

use mixprec::io::{
    CHUNK, Scan, TensorData, TensorInfo, Values, scan, write_npy, write_safetensors,
};

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

/// One visited tensor: its info and its values widened to f64, and the chunk lengths seen.
#[derive(Debug)]
struct Seen {
    info: TensorInfo,
    values: Vec<f64>,
    chunks: Vec<usize>,
    is_f64: bool,
}

fn read_all(path: &Path, want: &dyn Fn(&str) -> bool) -> mixprec::Result<(Scan, Vec<Seen>)> {
    let mut seen: Vec<Seen> = Vec::new();
    let found = scan(path, want, &mut |info, values| {
        if seen.last().is_none_or(|s| s.info != *info) {
            seen.push(Seen {
                info: info.clone(),
                values: Vec::new(),
                chunks: Vec::new(),
                is_f64: matches!(values, Values::F64(_)),
            });
        }
        let last = seen.last_mut().expect("pushed above");
        assert_eq!(
            last.is_f64,
            matches!(values, Values::F64(_)),
            "one type per tensor"
        );
        last.chunks.push(values.len());
        match values {
            Values::F32(xs) => last.values.extend(xs.iter().map(|&x| f64::from(x))),
            Values::F64(xs) => last.values.extend_from_slice(xs),
        }
    })?;
    Ok((found, seen))
}

fn same_bits(x: f64, bits: u64) -> bool {
    let y = f64::from_bits(bits);
    x.to_bits() == bits || (x.is_nan() && y.is_nan())
}

#[test]
fn fixtures_match_the_reference_libraries_value_for_value() {
    let text = std::fs::read_to_string(data("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let files = expected.as_object().unwrap();
    assert!(files.len() >= 16, "every fixture is checked");
    for (file, want) in files {
        let path = data(file);
        let (found, seen) = read_all(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let read = want["read"].as_array().unwrap();
        let skipped = want["skipped"].as_array().unwrap();
        assert_eq!(found.read.len(), read.len(), "{file}");
        assert_eq!(
            seen.len(),
            read.len(),
            "{file}: every read tensor is visited"
        );
        for ((info, s), w) in found.read.iter().zip(&seen).zip(read) {
            assert_eq!(info.name, w["name"].as_str().unwrap(), "{file}");
            assert_eq!(
                info.dtype.to_string(),
                w["dtype"].as_str().unwrap(),
                "{file}"
            );
            let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
            assert_eq!(info.shape, shape, "{file} {}", info.name);
            assert_eq!(info.path, path);
            assert_eq!(s.info, *info);
            assert_eq!(
                s.is_f64,
                info.dtype.to_string() == "F64",
                "{file} {}",
                info.name
            );
            let bits: Vec<u64> = serde_json::from_value(w["bits"].clone()).unwrap();
            assert_eq!(s.values.len(), bits.len(), "{file} {}", info.name);
            assert_eq!(info.len(), bits.len());
            for (i, (&x, &b)) in s.values.iter().zip(&bits).enumerate() {
                assert!(
                    same_bits(x, b),
                    "{file} {}[{i}]: {x:e} != {:e}",
                    info.name,
                    f64::from_bits(b)
                );
            }
        }
        let names: Vec<_> = found
            .skipped
            .iter()
            .map(|t| (t.name.clone(), t.dtype.to_string(), t.shape.clone()))
            .collect();
        let want_names: Vec<_> = skipped
            .iter()
            .map(|w| {
                let shape: Vec<usize> = serde_json::from_value(w["shape"].clone()).unwrap();
                (
                    w["name"].as_str().unwrap().to_string(),
                    w["dtype"].as_str().unwrap().to_string(),
                    shape,
                )
            })
            .collect();
        assert_eq!(names, want_names, "{file}");
    }
}

#[test]
fn the_name_filter_selects_tensors_and_skips_only_wanted_ones() {
    let (found, seen) =
        read_all(&data("mixed.safetensors"), &|n| n == "half" || n == "step").unwrap();
    assert_eq!(
        seen.iter()
            .map(|s| s.info.name.as_str())
            .collect::<Vec<_>>(),
        ["half"]
    );
    assert_eq!(found.skipped.len(), 1);
    assert_eq!(found.skipped[0].name, "step");
    let (found, seen) = read_all(&data("compressed.npz"), &|n| n == "layer1/w").unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(found.read[0].shape, [4, 3]);
    assert!(found.skipped.is_empty());
    let (found, _) = read_all(&data("f32.npy"), &|n| n == "other").unwrap();
    assert_eq!(found, Scan::default());
}

#[test]
fn extension_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Grads.NPY");
    std::fs::copy(data("f64_2d.npy"), &path).unwrap();
    let (found, _) = read_all(&path, &|_| true).unwrap();
    assert_eq!(found.read[0].name, "Grads");
}

/// The values a fixture holds, as the writers take them.
fn fixture_values(file: &str) -> (Vec<usize>, Vec<f64>) {
    let (found, seen) = read_all(&data(file), &|_| true).unwrap();
    (
        found.read[0].shape.clone(),
        seen.into_iter()
            .next()
            .map(|s| s.values)
            .unwrap_or_default(),
    )
}

#[test]
fn write_npy_is_byte_identical_to_np_save() {
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "f64_2d.npy",
        "scalar.npy",
        "f32.npy",
        "f16.npy",
        "empty.npy",
    ] {
        let (shape, values) = fixture_values(file);
        let path = dir.path().join(file);
        match file {
            "f32.npy" | "empty.npy" => {
                let xs: Vec<f32> = values.iter().map(|&x| x as f32).collect();
                write_npy(&path, &shape, TensorData::F32(&xs)).unwrap();
            }
            "f16.npy" => {
                let xs: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f64(x)).collect();
                write_npy(&path, &shape, TensorData::F16(&xs)).unwrap();
            }
            _ => write_npy(&path, &shape, TensorData::F64(&values)).unwrap(),
        }
        let ours = std::fs::read(&path).unwrap();
        let theirs = std::fs::read(data(file)).unwrap();
        assert!(ours == theirs, "{file}: our .npy differs from np.save's");
    }
}

#[test]
fn write_safetensors_is_byte_identical_to_the_reference_serializer() {
    let (shape, values) = fixture_values("bf16.safetensors");
    let xs: Vec<half::bf16> = values.iter().map(|&x| half::bf16::from_f64(x)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bf.safetensors");
    write_safetensors(&path, &[("bf", &shape, TensorData::BF16(&xs))]).unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(data("bf16.safetensors")).unwrap()
    );
}

#[test]
fn round_trips_keep_every_bit() {
    let dir = tempfile::tempdir().unwrap();
    let f64s: Vec<f64> = (0..1000)
        .map(|i| f64::from_bits(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i)))
        .collect();
    let f32s: Vec<f32> = (0..1000u32)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
        .collect();
    let f16s: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
    let bf16s: Vec<half::bf16> = (0..=u16::MAX).map(half::bf16::from_bits).collect();
    let st = dir.path().join("all.safetensors");
    write_safetensors(
        &st,
        &[
            ("a", &[10, 100], TensorData::F64(&f64s)),
            ("b", &[1000], TensorData::F32(&f32s)),
            ("c", &[256, 256], TensorData::F16(&f16s)),
            ("d", &[65536], TensorData::BF16(&bf16s)),
        ],
    )
    .unwrap();
    let (_, seen) = read_all(&st, &|_| true).unwrap();
    let check = |got: &[f64], want: &mut dyn Iterator<Item = f64>| {
        for (i, (&x, y)) in got.iter().zip(want).enumerate() {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "[{i}] {x} {y}"
            );
        }
    };
    assert_eq!(seen.len(), 4);
    check(&seen[0].values, &mut f64s.iter().copied());
    check(&seen[1].values, &mut f32s.iter().map(|&x| f64::from(x)));
    check(&seen[2].values, &mut f16s.iter().map(|x| x.to_f64()));
    check(&seen[3].values, &mut bf16s.iter().map(|x| x.to_f64()));
    assert!(seen[2].values.len() == 65536 && seen[3].values.len() == 65536);

    let npy = dir.path().join("c.npy");
    write_npy(&npy, &[65536], TensorData::F16(&f16s)).unwrap();
    let (_, seen) = read_all(&npy, &|_| true).unwrap();
    check(&seen[0].values, &mut f16s.iter().map(|x| x.to_f64()));
}

/// Index `i` as an f32: exact below 2^24, so chunk order and boundaries are checkable.
fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn assert_chunked(seen: &[Seen], big: usize) {
    assert_eq!(seen.len(), 3, "each tensor visited once, in order");
    assert_eq!(seen[0].info.name, "big");
    assert_eq!(seen[0].chunks, [CHUNK, CHUNK, big - 2 * CHUNK]);
    assert!(
        seen[0]
            .values
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as f64)
    );
    assert_eq!(seen[1].info.name, "small");
    assert_eq!(seen[1].chunks, [3]);
    assert_eq!(seen[2].info.name, "wide");
    assert_eq!(seen[2].chunks, [CHUNK, 1]);
    assert!(seen[2].is_f64);
    assert!(
        seen[2]
            .values
            .iter()
            .enumerate()
            .all(|(i, &x)| x == -(i as f64))
    );
}

#[test]
fn tensors_larger_than_a_chunk_come_in_order_and_whole() {
    let big = 2 * CHUNK + 12_345;
    let values = ramp(big);
    let wide: Vec<f64> = (0..=CHUNK).map(|i| -(i as f64)).collect();
    let dir = tempfile::tempdir().unwrap();

    let st = dir.path().join("big.safetensors");
    write_safetensors(
        &st,
        &[
            ("big", &[big], TensorData::F32(&values)),
            ("small", &[3], TensorData::F32(&[1.0, 2.0, 3.0])),
            ("wide", &[CHUNK + 1], TensorData::F64(&wide)),
        ],
    )
    .unwrap();
    assert_chunked(&read_all(&st, &|_| true).unwrap().1, big);

    // The same tensors as .npy files, then zipped (stored and deflated) into .npz archives.
    let mut entries = Vec::new();
    for (name, shape, data) in [
        ("big", vec![big], TensorData::F32(&values)),
        ("small", vec![3], TensorData::F32(&[1.0, 2.0, 3.0])),
        ("wide", vec![CHUNK + 1], TensorData::F64(&wide)),
    ] {
        let path = dir.path().join(format!("{name}.npy"));
        write_npy(&path, &shape, data).unwrap();
        let (_, seen) = read_all(&path, &|_| true).unwrap();
        assert_eq!(seen[0].values.len(), shape[0]);
        entries.push((name, std::fs::read(&path).unwrap()));
    }
    let (_, seen) = read_all(&dir.path().join("big.npy"), &|_| true).unwrap();
    assert_eq!(seen[0].chunks, [CHUNK, CHUNK, big - 2 * CHUNK]);
    for method in [
        zip::CompressionMethod::Stored,
        zip::CompressionMethod::Deflated,
    ] {
        let path = dir.path().join(format!("big-{method:?}.npz"));
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(method)
            .large_file(true);
        for (name, bytes) in &entries {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        assert_chunked(&read_all(&path, &|_| true).unwrap().1, big);
    }
}
