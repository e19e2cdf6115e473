//! Fuzzing on stable Rust: one target per parser, each fed mutations of its corpus
//! (`tests/fuzz/<target>/`, which holds every case of issue 10 plus ordinary files) for a bounded
//! time, in-process, through the library's public entry points.
//!
//! Every target asserts what the promise is for any input: no panic, and either a result or a
//! one-line error (naming the file, for file readers); the text targets also check that what
//! parses prints back to something that parses to the same value.
//!
//! The mutator is a small AFL-style one (bit flips, interesting bytes and tokens, inserted,
//! deleted and repeated ranges, splices of two corpus files, truncation), driven by a seeded
//! generator: a failure prints the seed, the iteration and the input, and the input is saved
//! under `target/fuzz-failures/`. It is not coverage-guided (cargo-fuzz needs a nightly
//! compiler); what it lacks in guidance it makes up for with seeds that already sit next to every
//! known failure.
//!
//! Time per target: `MIXPREC_FUZZ_SECONDS` (default 2; CI runs the default, and
//! `reports/reliability.md` records a longer run). Seed: `MIXPREC_FUZZ_SEED` (default: the
//! clock, printed).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mixprec::format::{FloatFormat, Overflow, Rounding};
use mixprec::recipe::{Accumulation, Recipe};
use mixprec::train::config::{ModelKind, TrainConfig};
use mixprec::train::data::Dataset;

/// xorshift64*: tiny, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

const INTERESTING: [u8; 12] = [
    0, 1, 0x7f, 0x80, 0xff, b'\n', b',', b'"', b'{', b'}', b'9', b'-',
];
const TOKENS: [&str; 24] = [
    "1e39",
    "-1e39",
    "nan",
    "inf",
    "-0",
    "999999",
    "18446744073709551615",
    "4294967296",
    "\"w\"",
    "{}",
    "[]",
    "null",
    "true",
    ",",
    ":",
    "0.782",
    "e9m1",
    "rne",
    "\u{feff}",
    "\r\n",
    "PK\x01\x02",
    "PK\x05\x06",
    "NUMPY",
    "'shape': (",
];

/// One mutation of `input`, with `other` (another corpus file) for splicing.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.below(4) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(len + 1);
                v.splice(i..i, t.iter().copied());
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below((len - i).min(64)) + 1;
                v.drain(i..i + n);
            }
            4 if len > 0 => {
                // Repeat a range (lengths, headers and directory records that say "more").
                let i = rng.below(len);
                let n = rng.below((len - i).min(256)) + 1;
                let chunk: Vec<u8> = v[i..i + n].to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, chunk);
            }
            5 if !other.is_empty() => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len());
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            6 => v.truncate(rng.below(len + 1)),
            7 if len >= 8 => {
                // Overwrite a little-endian word with an extreme value.
                let i = rng.below(len - 7);
                let word = [0u64, u64::MAX, u64::from(u32::MAX), 1 << 40][rng.below(4)];
                v[i..i + 8].copy_from_slice(&word.to_le_bytes());
            }
            _ => {
                let i = rng.below(len + 1);
                v.insert(i, rng.next() as u8);
            }
        }
    }
    v
}

/// The files of `tests/fuzz/<target>/` (and, for the tensor readers, the fixtures).
fn corpus(target: &str, extra: &[&str]) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("fuzz").join(target))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.extend(extra.iter().map(|f| root.join("data").join(f)));
    files.sort();
    let out: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!out.is_empty(), "no corpus for {target}");
    out
}

/// Runs `check` on the corpus, then on mutations of it, for the time budget; returns the number
/// of inputs tried. `check` panics (or returns `Err`) on a broken promise.
fn fuzz(target: &str, extra: &[&str], check: &dyn Fn(&[u8]) -> Result<(), String>) -> u64 {
    let seconds: f64 = std::env::var("MIXPREC_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed: u64 = std::env::var("MIXPREC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    let seeds = corpus(target, extra);
    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tried = 0u64;
    let mut queue: Vec<Vec<u8>> = seeds.clone();
    loop {
        let input = if (tried as usize) < seeds.len() {
            seeds[tried as usize].clone()
        } else {
            if Instant::now() > deadline {
                break;
            }
            let a = &queue[rng.below(queue.len())];
            let b = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, a, b)
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| check(&input)));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(why)) => Some(why),
            Err(panic) => Some(
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into()),
            ),
        };
        if let Some(why) = failure {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("{target}-{seed}-{tried}"));
            let _ = std::fs::write(&file, &input);
            panic!(
                "fuzz {target}: seed {seed}, input {tried} (saved to {}): {why}\ninput: {:?}",
                file.display(),
                String::from_utf8_lossy(&input[..input.len().min(400)])
            );
        }
        // Keep a few mutants as parents too, so mutations stack up.
        if tried as usize >= seeds.len() && queue.len() < 256 && rng.below(16) == 0 {
            queue.push(input);
        }
        tried += 1;
    }
    eprintln!("fuzz {target}: {tried} inputs in {seconds} s, seed {seed}, no failure");
    tried
}

/// A temporary directory in memory (`/dev/shm`) when there is one: the file targets write every
/// input to a file, which is 25 times faster there than on a disk-backed `/tmp`.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// A one-line error naming `path`, or an explanation.
fn one_line_naming(e: &mixprec::Error, path: &Path) -> Result<(), String> {
    let text = e.to_string();
    if text.contains('\n') {
        return Err(format!("not one line: {text:?}"));
    }
    let name = path.file_name().unwrap().to_string_lossy();
    if !text.contains(&*name) {
        return Err(format!("does not name the file: {text}"));
    }
    Ok(())
}

/// A fuzz target that writes each input to `file` in a temporary directory and scans it.
fn scan_target(file: &str, extra: &[&str]) -> u64 {
    let dir = scratch();
    let path = dir.path().join(file);
    let target = file.rsplit('.').next().unwrap();
    fuzz(target, extra, &|bytes| {
        std::fs::write(&path, bytes).unwrap();
        let mut seen = 0usize;
        let result = mixprec::io::scan(&path, &|_| true, &mut |info, values| {
            seen += values.len();
            assert!(values.len() <= info.len().max(1));
        });
        // Nothing is visited beyond what the file could hold (a bomb would blow this).
        if seen > bytes.len().saturating_mul(1032) + 1 {
            return Err(format!("{seen} values from {} bytes", bytes.len()));
        }
        match result {
            Ok(_) => Ok(()),
            Err(e) => one_line_naming(&e, &path),
        }
    })
}

#[test]
fn fuzz_safetensors_header() {
    scan_target("f.safetensors", &["mixed.safetensors", "bf16.safetensors"]);
}

#[test]
fn fuzz_npy_header() {
    let n = scan_target(
        "f.npy",
        &["f64_2d.npy", "big_endian.npy", "fortran.npy", "v3.npy"],
    );
    assert!(n > 0);
    // The whole-array reader (data sets) on the same inputs.
    let dir = scratch();
    let path = dir.path().join("r.npy");
    fuzz("npy", &["ints.npy"], &|bytes| {
        std::fs::write(&path, bytes).unwrap();
        match mixprec::io::read_npy(&path) {
            Ok(a) => {
                let len: usize = a.shape.iter().product();
                (len == a.values.len())
                    .then_some(())
                    .ok_or("shape and values disagree".into())
            }
            Err(e) => one_line_naming(&e, &path),
        }
    });
}

#[test]
fn fuzz_npz_directory() {
    scan_target("f.npz", &["stored.npz", "compressed.npz"]);
    // The data-set reader of .npz archives.
    fuzz_dataset("npz", "d.npz");
}

/// The `target` corpus, saved as `file`, through the data-set reader: a data set it loads is
/// sound, and what it refuses gets one line naming the file.
fn fuzz_dataset(target: &str, file: &str) {
    let dir = scratch();
    let path = dir.path().join(file);
    fuzz(target, &[], &|bytes| {
        std::fs::write(&path, bytes).unwrap();
        match Dataset::load(&path.display().to_string(), 0) {
            Ok(d) => check_dataset(&d),
            Err(e) => one_line_naming(&e, &path),
        }
    });
}

fn check_dataset(d: &Dataset) -> Result<(), String> {
    let finite = d
        .train_x
        .iter()
        .chain(d.test_x.iter())
        .all(|x| x.is_finite());
    let labels = d.train_y.iter().chain(&d.test_y).all(|&y| y < d.classes);
    (finite && labels)
        .then_some(())
        .ok_or_else(|| "a non-finite feature or a label out of range".into())
}

#[test]
fn fuzz_csv() {
    fuzz_dataset("csv", "d.csv");
}

#[test]
fn fuzz_config_json() {
    fuzz("config", &[], &|bytes| {
        let Ok(config) = serde_json::from_slice::<TrainConfig>(bytes) else {
            return Ok(());
        };
        if config.validate().is_err() {
            return Ok(());
        }
        // A valid config prints as JSON that reads back to the same config (what --print-config
        // promises).
        let text = serde_json::to_string_pretty(&config).map_err(|e| e.to_string())?;
        let back: TrainConfig = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        (back == config)
            .then_some(())
            .ok_or_else(|| format!("does not read back: {text}"))
    });
}

#[test]
fn fuzz_quantize_lines() {
    let rounder = mixprec::format::Rounder::new(mixprec::format::FP16, Default::default());
    fuzz("quantize", &[], &|bytes| {
        let mut input = std::io::BufReader::with_capacity(64, bytes);
        let mut out = Vec::new();
        let result = mixprec::quantize::quantize(&rounder, false, &mut input, &mut out);
        let lines = bytes.split(|&b| b == b'\n').count();
        let printed = out.iter().filter(|&&b| b == b'\n').count();
        if printed > lines {
            return Err(format!("{printed} lines out for {lines} in"));
        }
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.to_string().contains('\n') => Err(format!("not one line: {e}")),
            Err(e) if !e.to_string().starts_with("input line ") => Err(format!("unexpected: {e}")),
            Err(_) => Ok(()),
        }
    });
}

#[test]
fn fuzz_format_and_mode_names() {
    fuzz("names", &[], &|bytes| {
        let Ok(s) = std::str::from_utf8(bytes) else {
            return Ok(());
        };
        // What parses prints a name that parses to the same value; what does not is one line.
        fn same<T: std::str::FromStr<Err = mixprec::Error> + PartialEq + std::fmt::Debug>(
            s: &str,
            name: impl Fn(&T) -> String,
        ) -> Result<(), String> {
            match s.parse::<T>() {
                Ok(v) => {
                    let again = name(&v).parse::<T>().map_err(|e| e.to_string())?;
                    (again == v)
                        .then_some(())
                        .ok_or_else(|| format!("{s:?} -> {v:?} -> {again:?}"))
                }
                Err(e) if e.to_string().contains('\n') && !s.contains('\n') => {
                    Err(format!("not one line: {e}"))
                }
                Err(_) => Ok(()),
            }
        }
        same::<FloatFormat>(s, |f| f.name())?;
        same::<Rounding>(s, ToString::to_string)?;
        same::<Overflow>(s, ToString::to_string)?;
        same::<Accumulation>(s, ToString::to_string)?;
        same::<ModelKind>(s, |m| {
            serde_json::to_value(m)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })?;
        // Flags and JSON accept the same names.
        let json = serde_json::Value::from(s);
        for (flag, file) in [
            (
                s.parse::<Rounding>().is_ok(),
                serde_json::from_value::<Rounding>(json.clone()).is_ok(),
            ),
            (
                s.parse::<Overflow>().is_ok(),
                serde_json::from_value::<Overflow>(json.clone()).is_ok(),
            ),
            (
                s.parse::<FloatFormat>().is_ok(),
                serde_json::from_value::<FloatFormat>(json.clone()).is_ok(),
            ),
            (
                s.parse::<ModelKind>().is_ok(),
                serde_json::from_value::<ModelKind>(json.clone()).is_ok(),
            ),
        ] {
            if flag != file {
                return Err(format!("{s:?}: flag {flag}, JSON {file}"));
            }
        }
        let _ = Recipe::preset(s);
        Ok(())
    });
}
