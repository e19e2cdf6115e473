//! The bad-input sweep as data: every case of issue 10 (and the probe's classic bad inputs) is a
//! row of (command line, standard input, standard output, expected exit code, expected fragment
//! of the message), run through the real binary. A bad input must give exit 2, exactly one line
//! on standard error naming the problem, no panic, no hang (each run is killed after 60 s), and
//! no run directory left behind.
//!
//! `{d}` in an argument is the directory of the files made by [`make_files`]. Set `MIXPREC_BIN`
//! to run the table against another build (how the report's "fails without the fix" column was
//! made).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::repeat_entry;

/// What the child reads.
#[derive(Clone, Copy, Debug)]
enum In {
    Nothing,
    Text(&'static str),
    /// A text followed by this many zero bytes (no newline).
    TextThenZeros(&'static str, usize),
    File(&'static str),
}

/// Where the child writes its standard output.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Out {
    Pipe,
    /// `/dev/full`: every write fails with ENOSPC.
    Full,
    /// Closed (`>&-`).
    Closed,
    /// `/dev/null` opened read-write, as Python's `subprocess.DEVNULL` opens it (and as Rust's
    /// runtime puts it in the place of a closed descriptor). The case's fragment is then a file
    /// the command must have written.
    DevNullReadWrite,
}

struct Case {
    name: &'static str,
    /// The arguments, separated by spaces (none of them holds one).
    args: &'static str,
    stdin: In,
    stdout: Out,
    code: i32,
    /// Must appear in standard error (code 2) or standard output (code 0).
    fragment: &'static str,
}

/// A bad input: exit 2, `fragment` in the one line on standard error.
const fn bad(name: &'static str, args: &'static str, fragment: &'static str) -> Case {
    Case {
        name,
        args,
        stdin: In::Nothing,
        stdout: Out::Pipe,
        code: 2,
        fragment,
    }
}

/// A good input: exit 0, `fragment` in standard output.
const fn good(name: &'static str, args: &'static str, fragment: &'static str) -> Case {
    Case {
        code: 0,
        ..bad(name, args, fragment)
    }
}

impl Case {
    const fn stdin(self, stdin: In) -> Case {
        Case { stdin, ..self }
    }

    const fn stdout(self, stdout: Out) -> Case {
        Case { stdout, ..self }
    }
}

/// The table. Issue 10's items first, in its order, then the probe's classic bad inputs and a
/// few good ones (so that the table also shows the commands still work).
#[rustfmt::skip]
const CASES: &[Case] = &[
    // Failure 2: no bound on model size.
    bad("train-width-1e9", "train --config {d}/width.json --out {d}/run", "e19 B of memory"),
    bad("train-depth-1e5", "train --config {d}/depth.json --out {d}/run",
        "over the limit of 4.0 GiB"),
    bad("train-captures",
        "train --config {d}/deep.json --capture-every 1 --max-memory 100000 --out {d}/run",
        "of captures.jsonl"),
    bad("train-stray-label", "train --dataset {d}/stray.csv --batch 16 --out {d}/run",
        "stray.csv: 4 distinct values, but the largest, 999999, makes 1000000 classes"),
    // Failure 3: quantize line cap.
    bad("quantize-dev-zero", "quantize", "input line 1: longer than 65536 bytes")
        .stdin(In::File("/dev/zero")),
    bad("quantize-long-line-3", "quantize", "input line 3: longer than")
        .stdin(In::TextThenZeros("1\n2\n", 70_000)),
    // Failure 5: a FIFO.
    bad("analyze-fifo", "analyze {d}/fifo.npy", "not a regular file"),
    bad("train-fifo-csv", "train --dataset {d}/fifo.csv --out {d}/run", "not a regular file"),
    // Failure 6: CSV features not finite in f32.
    bad("train-csv-1e39", "train --dataset {d}/huge.csv --batch 2 --out {d}/run",
        "line 3, column 2: feature 1e39 is not a finite f32"),
    bad("train-csv-nan", "train --dataset {d}/nan.csv --batch 2 --out {d}/run",
        "line 2, column 1: feature nan"),
    // Failure 7: a zip bomb.
    bad("analyze-npz-bomb", "analyze {d}/bomb.npz", "overlap in the file"),
    bad("train-npz-bomb", "train --dataset {d}/bomb.npz --out {d}/run", "overlap in the file"),
    // Unclear or silent.
    bad("train-csv-short-row", "train --dataset {d}/short.csv --batch 2 --out {d}/run",
        "line 3: the row is short: 2 values, expected 3"),
    bad("analyze-safetensors-dup-key", "analyze {d}/dup.safetensors",
        "the key 'w' appears more than once"),
    bad("train-stdout-full", "train --steps 2 --batch 16 --out {d}/run-full",
        "standard output: No space left on device").stdout(Out::Full),
    // Issue 25: a caller's own /dev/null, opened read-write (subprocess.DEVNULL), is not a
    // closed standard output: the run trains and its report is written.
    good("train-stdout-devnull-read-write", "train --steps 2 --batch 16 --out {d}/run-devnull",
        "{d}/run-devnull/summary.json").stdout(Out::DevNullReadWrite),
    good("report-stdout-devnull-read-write", "report {d}/run-devnull --out {d}/page-devnull",
        "{d}/page-devnull/index.html").stdout(Out::DevNullReadWrite),
    bad("formats-stdout-closed", "formats", "standard output is closed").stdout(Out::Closed),
    bad("quantize-stdout-full", "quantize", "standard output: No space left")
        .stdin(In::Text("1\n2\n")).stdout(Out::Full),
    bad("train-batch-too-large", "train --batch 1000000 --out {d}/run",
        "larger than the 1400 training examples of digits"),
    bad("train-print-config-lr-nan", "train --print-config --lr nan",
        "invalid learning rate 'nan'"),
    bad("train-lr-inf", "train --lr inf --out {d}/run", "invalid learning rate 'inf'"),
    bad("analyze-npz-dup-name", "analyze {d}/twice.npz",
        "the entry name 'a.npy' appears more than once"),
    good("train-recipe-rne-in-json", "train --print-config --config {d}/rne.json",
        "\"rounding\": \"nearest-even\""),
    bad("train-recipe-typo-key", "train --print-config --config {d}/rouding.json",
        "unknown field `rouding`"),
    bad("train-recipe-bad-format", "train --print-config --config {d}/e9m1.json",
        "unknown format 'e9m1'"),
    // The probe's classic bad inputs.
    bad("quantize-not-a-number", "quantize", "input line 2: 'abc' is not a number")
        .stdin(In::Text("1\nabc\n")),
    bad("quantize-bad-format", "quantize --format e9m1", "unknown format 'e9m1'"),
    bad("explain-bad-rounding", "explain 1 --rounding sideways",
        "invalid rounding mode 'sideways'"),
    bad("formats-unknown", "formats fp12", "unknown format 'fp12'"),
    bad("no-command", "", "missing command"),
    bad("analyze-missing", "analyze {d}/none.npy", "none.npy"),
    bad("analyze-directory", "analyze {d}/adir.npy", "is a directory"),
    bad("analyze-empty", "analyze {d}/empty.npy", "the file is empty"),
    bad("analyze-extension", "analyze {d}/width.json",
        "expected a .safetensors, .npy or .npz extension"),
    bad("analyze-truncated-npy", "analyze {d}/cut.npy", "data shorter than the header says"),
    bad("analyze-not-zip", "analyze {d}/text.npz", "not a valid .npz (zip) archive"),
    bad("analyze-safetensors-garbage", "analyze {d}/garbage.safetensors", "safetensors"),
    bad("train-unknown-dataset", "train --dataset mnist --out {d}/run", "dataset 'mnist'"),
    bad("train-missing-csv", "train --dataset {d}/none.csv --out {d}/run", "none.csv"),
    bad("train-steps-0", "train --steps 0 --out {d}/run", "invalid steps '0'"),
    bad("train-config-unknown-key", "train --config {d}/stepz.json --out {d}/run",
        "unknown field `stepz`"),
    bad("train-config-not-json", "train --config {d}/text.npz --out {d}/run", "text.npz"),
    bad("train-bad-model", "train --model rnn --out {d}/run", "invalid model 'rnn'"),
    bad("train-max-memory-raises", "train --config {d}/depth.json --max-memory 1 --out {d}/run",
        "over the limit of 1 MiB"),
    // Issue 42, class 1: a FIFO in a run directory (opening one blocks until a writer comes).
    bad("report-fifo-metrics", "report {d}/fifo-metrics --out {d}/page-fifo",
        "metrics.jsonl: not a regular file (a pipe)"),
    bad("replay-fifo-captures", "replay {d}/fifo-captures --policy gradscaler",
        "captures.jsonl: not a regular file (a pipe)"),
    bad("tensorboard-fifo-config", "export-tensorboard --out {d}/tb-fifo {d}/fifo-config",
        "config.json: not a regular file (a pipe)"),
    bad("train-config-fifo", "train --config {d}/fifo-config/config.json --out {d}/run",
        "not a regular file (a pipe)"),
    // Class 2: a file that never ends (a link to /dev/zero), and a line with no end in a
    // regular (sparse) file: refused before reading, or cut at the cap per line.
    bad("report-zero-config", "report {d}/zero-config --out {d}/page-zero",
        "config.json: not a regular file (a device)"),
    bad("replay-zero-captures", "replay {d}/zero-captures --policy gradscaler",
        "captures.jsonl: not a regular file (a device)"),
    bad("tensorboard-zero-metrics", "export-tensorboard --out {d}/tb-zero {d}/zero-metrics",
        "metrics.jsonl: not a regular file (a device)"),
    bad("report-endless-line", "report {d}/long-metrics --out {d}/page-long",
        "metrics.jsonl: line 1 is longer than 256 MiB"),
    // Class 3: the capture the histograms use has loss scale 0 (an infinite axis range, on
    // which plotters never returned): the page is written, with a note.
    good("report-scale-0", "report {d}/scale0 --out {d}/page-scale0", "index.html"),
    bad("formats-gradients-scale-0", "formats fp16 --plots {d}/plots-scale0 --gradients {d}/scale0",
        "3 of 3 captures have a loss scale that is not finite"),
    // Good inputs still work.
    good("formats-ok", "formats fp16", "65504"),
    good("quantize-ok", "quantize", "0.0999755859375").stdin(In::Text("0.1\n")),
    good("analyze-ok", "analyze {d}/ok.npy", "start the loss scale at"),
    good("train-ok", "train --steps 2 --batch 16 --capture-every 1 --out {d}/run-ok", "2 steps"),
    good("train-csv-ok", "train --dataset {d}/ok.csv --batch 2 --steps 2 --out {d}/run-csv",
        "2 steps"),
];

/// The binary under test.
fn bin() -> PathBuf {
    std::env::var_os("MIXPREC_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_mixprec")),
        PathBuf::from,
    )
}

/// Writes every file the table names into `d`.
fn make_files(d: &Path) {
    let w = |name: &str, bytes: &[u8]| std::fs::write(d.join(name), bytes).unwrap();
    w(
        "width.json",
        br#"{"mlp": {"depth": 2, "width": 1000000000}}"#,
    );
    w("depth.json", br#"{"mlp": {"depth": 100000, "width": 16}}"#);
    w(
        "deep.json",
        br#"{"mlp": {"depth": 3000, "width": 16}, "steps": 2000}"#,
    );
    w("stepz.json", br#"{"stepz": 3}"#);
    let recipe = |key: &str, value: &str| {
        format!(
            r#"{{"recipe": {{"name": "mine", "weights": "fp16", "activations": "fp16", "activation_grads": "fp16", "weight_grads": "fp16", "optimizer_state": "fp32", "master_weights": "fp32", "{key}": "{value}"}}}}"#
        )
    };
    w("rne.json", recipe("rounding", "rne").as_bytes());
    w("rouding.json", recipe("rouding", "rne").as_bytes());
    w(
        "e9m1.json",
        recipe("accumulation", "fp32")
            .replace("\"weights\": \"fp16\"", "\"weights\": \"e9m1\"")
            .as_bytes(),
    );
    let mut stray = String::from("a,b,label\n");
    for i in 0..100 {
        let label = if i == 7 { 999_999 } else { i % 3 };
        stray.push_str(&format!(
            "{},{},{label}\n",
            i as f32 / 100.0,
            (i * 7 % 13) as f32
        ));
    }
    w("stray.csv", stray.as_bytes());
    let mut ok = String::new();
    for i in 0..20 {
        ok.push_str(&format!(
            "{},{},{}\n",
            i as f32 / 20.0,
            (i % 5) as f32,
            i % 2
        ));
    }
    w("ok.csv", ok.as_bytes());
    w("huge.csv", b"1,2,0\n3,4,1\n5,1e39,0\n6,7,1\n");
    w("nan.csv", b"1,2,0\nnan,4,1\n5,6,0\n");
    w("short.csv", b"1,2,0\n3,4,1\n0.5,0.782\n6,7,1\n");
    let header = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
    let mut dup = (header.len() as u64).to_le_bytes().to_vec();
    dup.extend_from_slice(header.as_bytes());
    dup.extend_from_slice(&[0; 8]);
    w("dup.safetensors", &dup);
    w(
        "garbage.safetensors",
        b"\xff\xff\xff\xff\xff\xff\xff\x7fgarbage",
    );
    let npy = d.join("ok.npy");
    let values: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 1e-6).collect();
    mixprec::io::write_npy(&npy, &[1000], mixprec::io::TensorData::F32(&values)).unwrap();
    let ok_npy = std::fs::read(&npy).unwrap();
    w("cut.npy", &ok_npy[..ok_npy.len() - 10]);
    w("empty.npy", b"");
    w("text.npz", b"this is not a zip archive\n");
    std::fs::create_dir(d.join("adir.npy")).unwrap();
    // A zip of one deflated 4 MiB array, then the same with 2000 more directory records pointing
    // at it (8 GB of decompression), and with one more record of the same name.
    let zeros = vec![0f32; 1 << 20];
    let big = d.join("zeros.npy");
    mixprec::io::write_npy(&big, &[1 << 20], mixprec::io::TensorData::F32(&zeros)).unwrap();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("a.npy", options).unwrap();
    zip.write_all(&std::fs::read(&big).unwrap()).unwrap();
    let one = zip.finish().unwrap().into_inner();
    w("bomb.npz", &repeat_entry(&one, 2000, false));
    w("twice.npz", &repeat_entry(&one, 1, true));
    make_runs(d);
    for fifo in ["fifo.npy", "fifo.csv"] {
        let made = Command::new("mkfifo").arg(d.join(fifo)).status().unwrap();
        assert!(made.success());
    }
}

/// A small run in `d/base`, then copies of it with one file replaced: by a FIFO
/// (`fifo-<stem>`), by a link to `/dev/zero` (`zero-<stem>`), `metrics.jsonl` by 300 MiB of
/// zeros with no newline (`long-metrics`, sparse: no disk used), and every capture at loss scale
/// 0 (`scale0`).
fn make_runs(d: &Path) {
    let base = d.join("base");
    let trained = Command::new(bin())
        .args([
            "train",
            "--steps",
            "4",
            "--batch",
            "16",
            "--capture-every",
            "2",
            "--out",
        ])
        .arg(&base)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(trained.success());
    let copy = |name: &str| {
        let to = d.join(name);
        std::fs::create_dir(&to).unwrap();
        for entry in std::fs::read_dir(&base).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
        to
    };
    for (stem, file) in [
        ("config", "config.json"),
        ("metrics", "metrics.jsonl"),
        ("captures", "captures.jsonl"),
    ] {
        let fifo = copy(&format!("fifo-{stem}")).join(file);
        std::fs::remove_file(&fifo).unwrap();
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let zero = copy(&format!("zero-{stem}")).join(file);
        std::fs::remove_file(&zero).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    }
    let long = std::fs::File::create(copy("long-metrics").join("metrics.jsonl")).unwrap();
    long.set_len(300 << 20).unwrap();
    let captures = copy("scale0").join("captures.jsonl");
    let text = std::fs::read_to_string(&captures).unwrap();
    let zeroed: Vec<String> = text
        .lines()
        .map(|line| {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["loss_scale"] = serde_json::json!(0.0);
            record.to_string()
        })
        .collect();
    std::fs::write(&captures, zeroed.join("\n") + "\n").unwrap();
}

/// Runs one case; `Err` says how it failed.
fn run(c: &Case, d: &Path) -> Result<(), String> {
    let args: Vec<String> = c
        .args
        .split_whitespace()
        .map(|a| a.replace("{d}", &d.display().to_string()))
        .collect();
    let mut cmd = Command::new(bin());
    cmd.args(&args).stderr(Stdio::piped());
    cmd.stdin(match c.stdin {
        In::Nothing => Stdio::null(),
        In::File(path) => Stdio::from(std::fs::File::open(path).unwrap()),
        In::Text(_) | In::TextThenZeros(..) => Stdio::piped(),
    });
    match c.stdout {
        Out::Pipe => cmd.stdout(Stdio::piped()),
        Out::Full => cmd.stdout(Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )),
        Out::DevNullReadWrite => cmd.stdout(Stdio::from(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .unwrap(),
        )),
        Out::Closed => {
            use std::os::unix::process::CommandExt;
            cmd.stdout(Stdio::null());
            // SAFETY: close(2) is async-signal-safe, as pre_exec requires.
            unsafe {
                cmd.pre_exec(|| {
                    libc::close(1);
                    Ok(())
                })
            }
        }
    };
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        let (text, zeros) = match c.stdin {
            In::Text(t) => (t, 0),
            In::TextThenZeros(t, n) => (t, n),
            _ => ("", 0),
        };
        std::thread::spawn(move || {
            let _ = input.write_all(text.as_bytes());
            let _ = input.write_all(&vec![0; zeros]);
        });
    }
    // Read the pipes on threads, so a chatty child cannot block on a full pipe.
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = read(child.stdout.take().map(|p| Box::new(p) as _));
    let err = read(child.stderr.take().map(|p| Box::new(p) as _));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("hung: killed after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let code = status
        .code()
        .ok_or_else(|| format!("killed by a signal: {status:?}; stderr: {err}"))?;
    if code != c.code {
        return Err(format!("exit {code}, expected {}; stderr: {err}", c.code));
    }
    if err.contains("panicked") {
        return Err(format!("panic: {err}"));
    }
    if code == 2 {
        if err.lines().count() != 1 || !err.starts_with("mixprec: ") {
            return Err(format!("not one line: {err:?}"));
        }
        if !err.contains(c.fragment) {
            return Err(format!("'{}' not in: {err}", c.fragment));
        }
        // Nothing half-written: a refused run leaves no run directory.
        let run = d.join("run");
        if run.exists() {
            let _ = std::fs::remove_dir_all(&run);
            return Err("left a run directory".into());
        }
    } else if c.stdout == Out::DevNullReadWrite {
        let written = c.fragment.replace("{d}", &d.display().to_string());
        if !Path::new(&written).is_file() {
            return Err(format!("{written} was not written"));
        }
    } else if !out.contains(c.fragment) {
        return Err(format!("'{}' not in the output: {out}", c.fragment));
    }
    Ok(())
}

#[test]
fn every_case_of_the_table() {
    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    let mut failed = Vec::new();
    for c in CASES {
        if let Err(why) = run(c, dir.path()) {
            failed.push(format!("{}: {why}", c.name));
        }
    }
    eprintln!(
        "sweep: {} cases, {} passed",
        CASES.len(),
        CASES.len() - failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The table names each case once.
#[test]
fn names_are_unique() {
    let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n);
}
