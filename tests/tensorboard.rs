//! `mixprec export-tensorboard` through the real binary: a run's and a grid's events, written
//! where TensorBoard looks for them, the same bytes when exported again, and bad input refused
//! in one line with nothing written. That TensorBoard reads the events back is checked by the
//! Python tests (python/tests/test_tensorboard.py), with the `tensorboard` package's reader.

use std::path::Path;

mod common;
use common::{bin, fails, file_names, fresh, fresh_dir, ok};

const EVENTS: &str = "events.out.tfevents.0.mixprec";

fn train(dir: &Path, steps: &str) {
    ok(bin()
        .args(["train", "--recipe", "fp16-dynamic", "--steps", steps])
        .args(["--batch", "16", "--capture-every", "5"])
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap());
}

fn export(runs: &[&Path], out: &Path) -> std::process::Output {
    bin()
        .arg("export-tensorboard")
        .args(runs)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// The number of records in an event file, walking their length fields to its exact end.
fn record_count(file: &[u8]) -> usize {
    let (mut at, mut n) = (0, 0);
    while at < file.len() {
        let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
        at += 16 + len;
        n += 1;
    }
    assert_eq!(at, file.len());
    n
}

#[test]
fn a_run_is_one_subdirectory_and_exporting_again_gives_the_same_bytes() {
    let root = fresh("runs");
    let (a, b) = (root.join("fp16-a"), root.join("fp16-b"));
    train(&a, "12");
    train(&b, "7");
    let logdir = root.join("logs");
    let out = ok(export(&[&a, &b], &logdir));
    assert!(
        out.contains("fp16-a: 12 steps, 3 capture steps (105 histograms)"),
        "{out}"
    );
    assert!(
        out.contains("fp16-b: 7 steps, 2 capture steps (70 histograms)"),
        "{out}"
    );
    assert!(out.contains(&format!("tensorboard --logdir {}", logdir.display())));
    let file = logdir.join("fp16-a").join(EVENTS);
    let first = std::fs::read(&file).unwrap();
    // The version event, then one event per step (the capture steps are among them).
    assert_eq!(record_count(&first), 1 + 12);
    assert_eq!(
        record_count(&std::fs::read(logdir.join("fp16-b").join(EVENTS)).unwrap()),
        1 + 7
    );
    ok(export(&[&a], &logdir));
    assert_eq!(std::fs::read(&file).unwrap(), first);
    let names = file_names(&logdir);
    assert_eq!(names, ["fp16-a", "fp16-b"], "no staging directory left");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_grid_exports_each_run_under_its_name() {
    let root = fresh_dir("grid");
    let base = root.join("base.json");
    std::fs::write(
        &base,
        r#"{"mlp": {"depth": 2, "width": 32}, "steps": 6, "batch": 16, "capture_every": 3}"#,
    )
    .unwrap();
    let grid = root.join("g");
    ok(bin()
        .args(["grid", "--config"])
        .arg(&base)
        .args(["--vary", "recipe=fp32,fp16-dynamic", "--out"])
        .arg(&grid)
        .output()
        .unwrap());
    let logdir = root.join("logs");
    let out = ok(export(&[&grid], &logdir));
    for name in ["recipe=fp32,seed=0", "recipe=fp16-dynamic,seed=0"] {
        assert!(out.contains(&format!("g/{name}: 6 steps")), "{out}");
        assert!(logdir.join("g").join(name).join(EVENTS).is_file());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bad_input_is_one_line_and_writes_nothing() {
    let root = fresh("bad");
    let run = root.join("run");
    train(&run, "3");
    let logdir = root.join("logs");
    let missing = root.join("missing");
    let err = fails(export(&[&run, &missing], &logdir));
    assert!(
        err.contains("not a run directory (no such directory)"),
        "{err}"
    );
    assert!(!logdir.exists());
    let err = fails(export(&[&run, &run], &logdir));
    assert!(err.contains("given twice"), "{err}");
    // A cut-off line in a finished run: read errors surface before anything is in place.
    let broken = root.join("broken");
    train(&broken, "3");
    let metrics = broken.join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&metrics).unwrap();
    text.truncate(text.len() - 10);
    std::fs::write(&metrics, text).unwrap();
    let err = fails(export(&[&run, &broken], &logdir));
    assert!(err.contains("metrics.jsonl: line 3: cut off"), "{err}");
    assert!(!logdir.exists());
    // Another writer's events in the run's subdirectory.
    std::fs::create_dir_all(logdir.join("run")).unwrap();
    std::fs::write(logdir.join("run/events.out.tfevents.1700000000.host"), "x").unwrap();
    let err = fails(export(&[&run], &logdir));
    assert!(
        err.contains("holds an event file mixprec did not write"),
        "{err}"
    );
    assert!(!logdir.join("run").join(EVENTS).exists());
    let err = fails(
        bin()
            .args(["export-tensorboard", "--out", "x"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("RUN_DIR"), "{err}");
    let err = fails(export(&[&run], &run.join("config.json")));
    assert!(err.contains("--out is not a directory"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}
