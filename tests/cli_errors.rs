//! Bad command lines through the real binary: every refusal is one line on standard error, exit
//! code 2, naming the flag or file and what is wrong with it, and nothing is left behind.

use std::path::Path;

mod common;
use common::{bin, fails, fresh_dir, mixprec, ok};

/// Every numeric flag of every command, given a negative number: the flag and the problem are
/// named (not "unexpected argument '-1'", as when clap took the number for a flag).
#[test]
fn negative_numbers_name_their_flag() {
    let d = fresh_dir("negative");
    let out = d.join("out");
    let o = out.to_str().unwrap();
    let cases: [(&[&str], &str); 19] = [
        (
            &["train", "--steps", "-1", "--out", o],
            "'--steps <N>': a negative number",
        ),
        (
            &["train", "--batch", "-1", "--out", o],
            "'--batch <N>': a negative number",
        ),
        (
            &["train", "--lr", "-1", "--out", o],
            "'--lr <X>': invalid learning rate '-1'",
        ),
        (
            &["train", "--loss-scale", "-1", "--out", o],
            "'--loss-scale <S>': a loss scale must be positive",
        ),
        (
            &["train", "--seed", "-1", "--out", o],
            "'--seed <N>': a negative number",
        ),
        (
            &["train", "--capture-every", "-1", "--out", o],
            "'--capture-every <N>': a negative number",
        ),
        (
            &["train", "--eval-every", "-1", "--out", o],
            "'--eval-every <N>': a negative number",
        ),
        (
            &["train", "--shadow-every", "-1", "--out", o],
            "'--shadow-every <N>': a negative number",
        ),
        (
            &["train", "--max-memory", "-1", "--out", o],
            "'--max-memory <MIB>': a negative number",
        ),
        (
            &["train", "--max-captures", "-1", "--out", o],
            "'--max-captures <MIB>': a negative number",
        ),
        (
            &["train", "--steps", "2.5", "--out", o],
            "'--steps <N>': a fraction",
        ),
        (
            &["grid", "--seeds", "-1", "--out", o],
            "'--seeds <N>': a negative number",
        ),
        (
            &["quantize", "--cols", "-1"],
            "'--cols <N>': expected a whole number from 1 to",
        ),
        (
            &["quantize", "--rows", "-1", "-f", "mxfp4"],
            "'--rows <M>': expected a whole number from 1 to",
        ),
        (
            &["quantize", "--seed", "-1"],
            "'--seed <N>': a negative number",
        ),
        (
            &["explain", "1", "--seed", "-1"],
            "'--seed <N>': a negative number",
        ),
        (
            &["report", o, "--step", "-1", "--out", o],
            "'--step <N>': a negative number",
        ),
        (
            &["analyze", "x.npy", "--margin", "-1"],
            "invalid --margin '-1'",
        ),
        (
            &["analyze", "x.npy", "--max-underflow", "-0.5"],
            "invalid --max-underflow '-0.5'",
        ),
    ];
    for (args, needle) in cases {
        let err = fails(mixprec(args));
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} left {}", out.display());
    }
}

/// A file or directory of the wrong kind is named for what it is.
#[test]
fn wrong_kinds_of_paths_are_named() {
    let d = fresh_dir("kinds");
    let file = d.join("good.npy");
    std::fs::write(&file, "not a run").unwrap();
    let f = file.to_str().unwrap();
    let out = d.join("out");
    let o = out.to_str().unwrap();
    for args in [
        &["report", f, "--out", o][..],
        &["export-tensorboard", f, "--out", o],
        &["replay", f, "--policy", "gradscaler"],
    ] {
        let err = fails(mixprec(args));
        assert!(
            err.contains("good.npy: a file, not a run directory"),
            "{args:?}: {err}"
        );
        assert!(!out.exists());
    }
    let here = d.to_str().unwrap();
    let err = fails(mixprec(&["analyze", here]));
    assert!(
        err.contains(
            "is a directory, not a tensor file: expected a .safetensors, .npy or .npz file"
        ),
        "{err}"
    );
    // A grid directory given to replay: said to be a grid, with where its runs are.
    let grid = d.join("grid");
    ok(mixprec(&[
        "grid",
        "--vary",
        "steps=2",
        "--out",
        grid.to_str().unwrap(),
    ]));
    let err = fails(mixprec(&[
        "replay",
        grid.to_str().unwrap(),
        "--policy",
        "gradscaler",
    ]));
    assert!(
        err.contains(
            "a grid directory (written by mixprec grid), not a run directory: give one of its runs"
        ) && err.contains(&grid.join("runs").join("NAME").display().to_string()),
        "{err}"
    );
}

/// Replay of a run whose metrics.jsonl holds no step (emptied), its captures intact: refused,
/// not a table in which every policy is "the same as the run".
#[test]
fn replay_refuses_a_run_without_recorded_steps() {
    let d = fresh_dir("replay-empty");
    let run = d.join("run");
    ok(bin()
        .args([
            "train",
            "--recipe",
            "fp16-dynamic",
            "--steps",
            "20",
            "--capture-every",
            "10",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap());
    std::fs::write(run.join("metrics.jsonl"), "").unwrap();
    let page = d.join("page");
    let err = fails(mixprec(&[
        "replay",
        run.to_str().unwrap(),
        "--policy",
        "run",
        "gradscaler",
        "--out",
        page.to_str().unwrap(),
    ]));
    assert!(
        err.contains("metrics.jsonl: no steps recorded (the run wrote none, or the file was emptied): nothing to replay"),
        "{err}"
    );
    assert!(!page.exists());
}

/// A run's config.json stores its dataset path as given: repeated from another directory, the
/// error says the path is relative to the current directory and came from the config.
#[test]
fn a_config_dataset_path_is_said_to_be_relative_to_the_current_directory() {
    let d = fresh_dir("config-path");
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data");
    let run = d.join("run");
    ok(bin()
        .current_dir(&data)
        .args([
            "train",
            "--dataset",
            "train_xy.npy",
            "--steps",
            "2",
            "--batch",
            "16",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap());
    let again = d.join("again");
    let err = fails(
        bin()
            .current_dir(&d)
            .args(["train", "--config", "run/config.json", "--out", "again"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains(
            "train_xy.npy (from run/config.json): no such file relative to the current directory"
        ) && err.contains("run from the directory the run was trained in, or give --dataset"),
        "{err}"
    );
    assert!(!again.exists());
    // From the directory it was trained in, it repeats.
    ok(bin()
        .current_dir(&data)
        .arg("train")
        .arg("--config")
        .arg(run.join("config.json"))
        .arg("--out")
        .arg(&again)
        .output()
        .unwrap());
}

/// Help texts say what the code does, in the project's spelling.
#[test]
fn help_says_what_the_code_does() {
    // Help wraps its lines: read it as one.
    let demo = ok(mixprec(&["demo", "--help"])).replace('\n', " ");
    assert!(demo.contains("analyze the captured gradients") && !demo.contains("analyse"));
    // The grid runs one run per thread from as many runs as threads (workers = min(threads,
    // runs), each with threads / workers threads).
    let grid = ok(mixprec(&["grid", "--help"])).replace('\n', " ");
    assert!(
        grid.contains("one run per thread when there are at least as many runs as threads"),
        "{grid}"
    );
}
