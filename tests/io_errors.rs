//! Every kind of bad tensor file gives a one-line error that names the file and the problem, and
//! no input at all (random, truncated or mutated bytes) makes a reader panic.

use std::path::{Path, PathBuf};

use mixprec::Error;
use mixprec::io::{TensorData, scan, write_npy, write_safetensors};
use proptest::prelude::*;

mod common;
use common::repeat_entry;

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

/// Scans `bytes` saved as `name` and returns the error, checking that it is a one-line
/// [`Error::BadFile`] naming the file and containing `needle`.
fn bad(name: &str, bytes: &[u8], needle: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let err = scan(&path, &|_| true, &mut |_, _| {}).expect_err(needle);
    let text = err.to_string();
    assert!(matches!(err, Error::BadFile { .. }), "{name}: {err:?}");
    assert!(
        text.contains(needle),
        "{name}: '{text}' should say '{needle}'"
    );
    assert!(text.contains(name), "{name}: '{text}' should name the file");
    assert!(!text.contains('\n'), "{name}: '{text}' is not one line");
    text
}

/// A safetensors file with the given header text and data bytes.
fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn fixture(file: &str) -> Vec<u8> {
    std::fs::read(data(file)).unwrap()
}

#[test]
fn missing_files_are_io_errors_naming_the_file() {
    for name in ["none.safetensors", "none.npy", "none.npz"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let err = scan(&path, &|_| true, &mut |_, _| {}).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn empty_files_and_unknown_extensions() {
    for name in ["e.safetensors", "e.npy", "e.npz"] {
        bad(name, b"", "the file is empty");
    }
    for name in ["d.safetensors", "d.npy", "d.npz"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::create_dir(&path).unwrap();
        let err = scan(&path, &|_| true, &mut |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }
    for name in ["model.pt", "grads", "x.npy.gz"] {
        bad(
            name,
            &fixture("f32.npy"),
            "expected a .safetensors, .npy or .npz extension",
        );
    }
}

#[test]
fn bad_safetensors() {
    let zeros = |header: &str, n: usize| safetensors(header, &vec![0; n]);
    let one = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let overlap = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let gap = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let out_of_range = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mismatch = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
    let dtype = r#"{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}"#;
    let overflow = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
    let mut cut = fixture("mixed.safetensors");
    cut.truncate(cut.len() - 1);
    for (name, bytes, needle) in [
        (
            "short",
            b"\x05\0\0".to_vec(),
            "truncated safetensors header",
        ),
        (
            "past",
            zeros("{}", 0)[..9].to_vec(),
            "runs past the end of the file",
        ),
        (
            "huge",
            u64::MAX.to_le_bytes().to_vec(),
            "not a safetensors file",
        ),
        ("json", zeros("{not json}", 0), "invalid JSON"),
        ("list", zeros("[1, 2]", 0), "invalid JSON"),
        (
            "shorter",
            zeros(one, 5),
            "data shorter than the header says: 5 bytes",
        ),
        ("longer", zeros(one, 12), "data longer than the header says"),
        ("overlap", zeros(overlap, 12), "tensor 'b' overlap"),
        ("gap", zeros(gap, 8), "data_offsets of tensor 'a'"),
        ("range", zeros(out_of_range, 8), "describes 16"),
        ("shape", zeros(mismatch, 8), "do not span its shape"),
        ("dtype", zeros(dtype, 16), "unknown variant"),
        ("overflow", zeros(overflow, 8), "invalid safetensors header"),
        ("cut", cut, "data shorter than the header says"),
    ] {
        bad(&format!("{name}.safetensors"), &bytes, needle);
    }
}

#[test]
fn bad_npy() {
    let good = fixture("f64_2d.npy");
    let edited = |at: usize, with: &[u8]| {
        let mut v = good.clone();
        v[at..at + with.len()].copy_from_slice(with);
        v
    };
    let shape_at = good.windows(5).position(|w| w == b"shape").unwrap();
    let mut long = good.clone();
    long.extend_from_slice(&[0; 4]);
    for (name, bytes, needle) in [
        (
            "magic",
            b"PK\x03\x04 this is a zip".to_vec(),
            "does not start with the magic",
        ),
        ("tiny", b"\x93NUM".to_vec(), "truncated .npy header"),
        (
            "nolen",
            b"\x93NUMPY\x01\x00\x76".to_vec(),
            "incomplete header length",
        ),
        ("header", good[..40].to_vec(), "truncated .npy header"),
        (
            "version",
            edited(6, &[9]),
            "unsupported .npy format version 9.0",
        ),
        ("dict", edited(10, b"["), "not a Python dict literal"),
        ("key", edited(shape_at, b"shope"), "no 'shape' key"),
        (
            "short",
            good[..good.len() - 8].to_vec(),
            "data shorter than the header says",
        ),
        ("long", long, "data longer than the header says"),
    ] {
        bad(&format!("{name}.npy"), &bytes, needle);
    }
}

#[test]
fn bad_npz() {
    let stored = fixture("stored.npz");
    let compressed = fixture("compressed.npz");
    // Zips whose entries are not (whole) .npy files.
    let zip_of = |entries: &[(&str, &[u8])]| {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, bytes) in entries {
            zip.start_file(*name, options).unwrap();
            std::io::Write::write_all(&mut zip, bytes).unwrap();
        }
        zip.finish().unwrap().into_inner()
    };
    let npy = fixture("f32.npy");
    let mut long = npy.clone();
    long.extend_from_slice(&[0; 8]);
    for (name, bytes, needle) in [
        ("notzip", npy.clone(), "not a valid .npz (zip) archive"),
        (
            "cut",
            stored[..stored.len() - 30].to_vec(),
            "not a valid .npz (zip) archive",
        ),
        (
            "readme",
            zip_of(&[("a.npy", &npy), ("README.txt", b"hi")]),
            "entry 'README.txt' is not a .npy file",
        ),
        (
            "shortentry",
            zip_of(&[("a.npy", &npy[..npy.len() - 4])]),
            "entry 'a.npy': data shorter than the header says",
        ),
        (
            "longentry",
            zip_of(&[("a.npy", &long)]),
            "data longer than the header says (8 bytes",
        ),
        (
            "headentry",
            zip_of(&[("a.npy", &npy[..20])]),
            "entry 'a.npy': truncated .npy header",
        ),
        (
            "magicentry",
            zip_of(&[("a.npy", b"\x93NUMPY\x07\x00")]),
            "entry 'a.npy': unsupported .npy format version 7.0",
        ),
    ] {
        bad(&format!("{name}.npz"), &bytes, needle);
    }

    // Flip one data byte of the stored 'h' entry: only the CRC can tell.
    let mut flipped = stored.clone();
    let h = flipped.windows(5).position(|w| w == b"h.npy").unwrap();
    let magic = h + flipped[h..]
        .windows(6)
        .position(|w| w == b"\x93NUMPY")
        .unwrap();
    let data_at = magic + 128 + 3;
    flipped[data_at] ^= 0x40;
    bad("crc.npz", &flipped, "entry 'h.npy' is corrupt");

    // Corrupt the middle of a deflated entry: the inflater or the CRC must object.
    let mut corrupt = compressed.clone();
    let at = corrupt
        .windows(12)
        .position(|w| w == b"layer1/w.npy")
        .unwrap()
        + 12
        + 20;
    for b in &mut corrupt[at..at + 16] {
        *b = !*b;
    }
    bad("inflate.npz", &corrupt, "entry 'layer1/w.npy' is corrupt");
}

/// 2,000 directory entries pointing at one deflated 4 MiB array stand for 8 GB of decompression
/// (minutes); the overlap is refused before any entry is read.
#[test]
fn an_npz_whose_entries_overlap_or_repeat_a_name_is_refused() {
    let n = 1 << 20;
    let zeros = vec![0f32; n];
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("z.npy");
    write_npy(&npy, &[n], TensorData::F32(&zeros)).unwrap();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("a.npy", options).unwrap();
    std::io::Write::write_all(&mut zip, &std::fs::read(&npy).unwrap()).unwrap();
    let one = zip.finish().unwrap().into_inner();
    let bomb = repeat_entry(&one, 2000, false);
    assert!(bomb.len() < 200_000, "{} bytes", bomb.len());
    let started = std::time::Instant::now();
    bad("bomb.npz", &bomb, "overlap in the file");
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
    bad(
        "twice.npz",
        &repeat_entry(&one, 1, true),
        "the entry name 'a.npy' appears more than once",
    );
}

#[test]
fn writers_refuse_bad_arguments_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("w.safetensors");
    let xs = [1.0f32, 2.0];
    for tensors in [
        vec![("a", &[3][..], TensorData::F32(&xs))],
        vec![
            ("a", &[2][..], TensorData::F32(&xs)),
            ("a", &[2][..], TensorData::F32(&xs)),
        ],
        vec![("__metadata__", &[2][..], TensorData::F32(&xs))],
    ] {
        let err = write_safetensors(&st, &tensors).unwrap_err();
        assert!(matches!(err, Error::InvalidValue { .. }), "{err:?}");
    }
    let err = write_npy(
        &dir.path().join("w.npy"),
        &[usize::MAX, 2],
        TensorData::F32(&xs),
    )
    .unwrap_err();
    assert!(err.to_string().contains("shape"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A file truncated by another writer while it is read (a training loop re-saving it in place)
/// gets a one-line error; with a memory map this was a SIGBUS that killed the process.
#[test]
fn a_file_that_shrinks_or_changes_while_read_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let n = 3 * mixprec::io::CHUNK;
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let st = dir.path().join("g.safetensors");
    let npy = dir.path().join("g.npy");
    write_safetensors(&st, &[("g", &[n], TensorData::F32(&values))]).unwrap();
    write_npy(&npy, &[n], TensorData::F32(&values)).unwrap();
    for path in [&st, &npy] {
        for shrink in [true, false] {
            let full = std::fs::read(path).unwrap();
            let mut calls = 0;
            let err = scan(path, &|_| true, &mut |_, _| {
                calls += 1;
                if calls == 1 {
                    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
                    if shrink {
                        f.set_len(4096).unwrap();
                    } else {
                        // Same length, new content: only the modification time tells.
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        std::io::Write::write_all(&mut &f, b"\0\0\0\0").unwrap();
                    }
                }
            })
            .expect_err("a changed file is an error");
            let text = err.to_string();
            assert!(
                text.contains("the file changed while it was read") && !text.contains('\n'),
                "{text}"
            );
            assert!(matches!(err, Error::BadFile { .. }), "{err:?}");
            std::fs::write(path, &full).unwrap();
        }
    }
}

/// A FIFO is refused before it is opened (opening it would wait for a writer forever).
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["p.npy", "p.safetensors", "p.npz"] {
        let path = dir.path().join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(scan(&p, &|_| true, &mut |_, _| {}).unwrap_err().to_string());
        });
        let text = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("scan of a FIFO hangs");
        assert!(text.contains("not a regular file"), "{text}");
    }
}

#[test]
fn a_safetensors_key_given_twice_is_named() {
    let header = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    bad(
        "dup.safetensors",
        &safetensors(header, &[0; 8]),
        "the key 'w' appears more than once",
    );
}

/// Scans `bytes` saved as `name`; only the absence of a panic is checked (Ok or Err both fine).
fn survives(name: &str, bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    let mut n = 0usize;
    let result = scan(&path, &|_| true, &mut |info, values| {
        // The visitor may see at most what the header promised.
        n += values.len();
        assert!(values.len() <= info.len().max(1) && n <= 1 << 24);
    });
    if let Err(e) = result {
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

const FIXTURES: [&str; 8] = [
    "mixed.safetensors",
    "bf16.safetensors",
    "f64_2d.npy",
    "big_endian.npy",
    "fortran.npy",
    "v3.npy",
    "stored.npz",
    "compressed.npz",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(
        which in 0..FIXTURES.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let file = FIXTURES[which];
        let mut bytes = fixture(file);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let ext = file.rsplit('.').next().unwrap_or("");
        survives(&format!("m.{ext}"), &bytes);
    }

    #[test]
    fn random_bytes_never_panic(
        ext in prop::sample::select(vec!["safetensors", "npy", "npz"]),
        prefix in prop::sample::select(vec![&b""[..], b"\x93NUMPY\x01\x00", b"\x93NUMPY\x03\x00", b"PK\x03\x04", b"\x40\0\0\0\0\0\0\0{\""]),
        tail in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut bytes = prefix.to_vec();
        bytes.extend_from_slice(&tail);
        survives(&format!("r.{ext}"), &bytes);
    }
}
