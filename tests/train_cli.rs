//! The `train` command through the real binary: the run directory, determinism across thread
//! counts, and bad input.

use std::path::{Path, PathBuf};

mod common;
use common::{bin, fails, fresh, fresh_dir, json_lines, ok, read_json, with_config};

/// Trains with `extra` flags after the defaults; `--batch 64` unless `extra` sets the batch.
fn train(out: &Path, threads: &str, extra: &[&str]) -> std::process::Output {
    let batch: &[&str] = if extra.contains(&"--batch") {
        &[]
    } else {
        &["--batch", "64"]
    };
    bin()
        .args([
            "train",
            "--recipe",
            "fp16-dynamic",
            "--steps",
            "25",
            "--capture-every",
            "10",
            "--seed",
            "3",
        ])
        .args(batch)
        .args(extra)
        .arg("--out")
        .arg(out)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .unwrap()
}

/// `mixprec train ARGS --out OUT` is refused: exit 2, one line that starts with `mixprec: ` and
/// contains `needle`, and nothing written at `out`.
fn refused<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S], out: &Path, needle: &str) {
    let r = bin().arg("train").args(args).arg("--out").arg(out).output();
    let err = fails(r.unwrap());
    assert!(
        err.starts_with("mixprec: ") && err.contains(needle),
        "{args:?}: {err}"
    );
    assert!(!out.exists(), "{args:?}: nothing is written for bad input");
}

fn summary_without_time(dir: &Path) -> serde_json::Value {
    let mut v = read_json(&dir.join("summary.json"));
    v.as_object_mut().unwrap().remove("wall_seconds");
    v
}

#[test]
fn same_seed_same_files_whatever_the_threads() {
    let (a, b) = (fresh("t1"), fresh("t2"));
    // Wide enough that the GEMMs are split across threads.
    let ra = train(&a, "1", &[]);
    // Piped: no progress bar on stderr.
    assert!(
        ra.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&ra.stderr)
    );
    let stdout = ok(ra);
    ok(train(&b, "2", &[]));
    assert!(
        stdout.contains("fp16-dynamic: 25 steps") && stdout.contains("test_accuracy"),
        "{stdout}"
    );
    for file in ["metrics.jsonl", "captures.jsonl", "config.json"] {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file}"
        );
    }
    assert_eq!(summary_without_time(&a), summary_without_time(&b));
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(a.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    for key in ["step", "loss", "loss_scale", "overflow", "skipped"] {
        assert!(first.get(key).is_some(), "{key} in {first}");
    }
    assert_eq!(first["loss_scale"], 65536.0);
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn config_file_and_flags() {
    let dir = fresh_dir("cfg");
    let cfg = dir.join("c.json");
    std::fs::write(&cfg, r#"{"recipe": "bf16-master", "steps": 4, "model": "cnn", "cnn": {"channels": 4, "hidden": 8}}"#).unwrap();
    let out = dir.join("run");
    let r = bin()
        .args(["train", "--config"])
        .arg(&cfg)
        .args(["--steps", "3", "--batch", "16", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    ok(r);
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["steps"], 3);
    assert_eq!(config["model"], "cnn");
    assert_eq!(config["recipe"]["weights"], "bf16");
    assert_eq!(
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .count(),
        3
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = fresh_dir("bad");
    std::fs::write(dir.join("x"), "occupied").unwrap();
    let config = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        vec!["--config".to_string(), path.display().to_string()]
    };
    let out = dir.join("run");
    let mut cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--recipe".into(), "fp12".into()], "recipe 'fp12'"),
        (vec!["--dataset".into(), "mnist".into()], "dataset 'mnist'"),
        (vec!["--batch".into(), "0".into()], "batch"),
        (vec!["--lr".into(), "0".into()], "learning rate"),
        (
            vec!["--dataset".into(), "/nonexistent/d.csv".into()],
            "/nonexistent/d.csv",
        ),
    ];
    // A config file: the key path of what is wrong, a repeated key, a schema from the future.
    for (text, needle) in [
        (r#"{"stepz": 3}"#, ".json: unknown field `stepz`"),
        (r#"{"steps": "5"}"#, "steps: invalid type: string"),
        (r#"{"mlp": {"widht": 3}}"#, "mlp: unknown field `widht`"),
        (
            r#"{"optimizer": {"kind": "adam", "beta1": 0.5}}"#,
            "optimizer: missing field `lr`",
        ),
        (
            r#"{"recipe": {"name": "x", "weights": "fp17"}}"#,
            "recipe: weights: unknown format 'fp17'",
        ),
        (
            r#"{"recipe": "fp16-master", "recipe": "fp32"}"#,
            "the key 'recipe' appears more than once",
        ),
        (
            r#"{"optimizer": {"kind": "sgd", "lr": 0.1, "lr": 1}}"#,
            "the key 'optimizer.lr' appears more than once",
        ),
        ("[]", "expected a JSON object"),
        (
            r#"{"schema": 2}"#,
            "schema 2 is newer than this mixprec reads",
        ),
        (r#"{"schema": "1"}"#, "is not a version number"),
        ("{\"steps\": 5,}", "trailing comma at line 1"),
    ] {
        cases.push((config(&format!("bad{}.json", cases.len()), text), needle));
    }
    for (args, needle) in cases {
        refused(&args, &out, needle);
    }
    let r = bin()
        .args(["train", "--steps", "1", "--out"])
        .arg(&dir)
        .output();
    assert!(fails(r.unwrap()).contains("not empty"));
    refused(&["--model", "rnn"], &out, "'rnn'");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_killed_run_is_marked_incomplete_and_readable() {
    let out = fresh("killed");
    let mut child = bin()
        .args([
            "train",
            "--steps",
            "1000000",
            "--batch",
            "8",
            "--capture-every",
            "50",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until some lines have reached the log (every 2 s at the latest), then kill the run.
    let started = std::time::Instant::now();
    let metrics = out.join("metrics.jsonl");
    while std::fs::metadata(&metrics).map_or(0, |m| m.len()) == 0
        && started.elapsed().as_secs() < 60
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(out.join("INCOMPLETE").exists());
    assert!(!out.join("summary.json").exists());
    let run = mixprec::run::RunDir::open(&out).unwrap();
    assert!(!run.is_complete());
    assert_eq!(run.config["steps"], 1_000_000);
    // Every line read is whole, in order from step 1.
    let steps: Vec<u64> = run.steps().unwrap().map(|r| r.unwrap().step).collect();
    assert!(!steps.is_empty());
    assert!(steps.iter().enumerate().all(|(i, &s)| s == i as u64 + 1));
    let captures: Vec<u64> = run.captures().unwrap().map(|r| r.unwrap().step).collect();
    assert_eq!(captures[0], 1);
    // Training into it again says what it holds.
    let again = bin()
        .args(["train", "--steps", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2));
    assert!(err.contains("holds an unfinished run"), "{err}");
    std::fs::remove_dir_all(&out).unwrap();
}

/// `--print-config` shows every key a config file can set; fed back as `--config`, it resolves to
/// the same config.
#[test]
fn print_config_round_trips_through_a_config_file() {
    let bin = env!("CARGO_BIN_EXE_mixprec");
    let first = std::process::Command::new(bin)
        .args([
            "train",
            "--print-config",
            "--recipe",
            "fp16-static",
            "--loss-scale",
            "1024",
            "--steps",
            "7",
        ])
        .output()
        .unwrap();
    let first = ok(first);
    let json: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(json["steps"], 7);
    assert_eq!(json["recipe"]["name"], "fp16-static");
    // Every key a config file can set, those at their defaults too.
    assert_eq!(json["shadow_every"], 0);
    assert!(
        json.get("labels").is_some_and(serde_json::Value::is_null),
        "{json}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, &first).unwrap();
    let second = std::process::Command::new(bin)
        .args(["train", "--print-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(first, ok(second));
}

/// The numpy-written fixtures (tests/data/make_train_npy.py).
fn fixture(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn metrics_lines(dir: &Path) -> Vec<serde_json::Value> {
    json_lines(&dir.join("metrics.jsonl"))
}

/// The same examples as features (f4, Fortran order) with labels (i1) in a second file, and as
/// one f8 array with the label in the last column: the same data set, so the same run.
#[test]
fn npy_datasets_from_numpy_with_or_without_a_labels_file() {
    let (a, b) = (fresh("npy-xy"), fresh("npy-x-y"));
    let (x, y, xy) = (
        fixture("train_x.npy"),
        fixture("train_y.npy"),
        fixture("train_xy.npy"),
    );
    // 60 rows: 48 for training, so a batch of 32.
    let ra = train(&a, "1", &["--dataset", &xy, "--batch", "32"]);
    ok(ra);
    let rb = train(&b, "1", &["--dataset", &x, "--labels", &y, "--batch", "32"]);
    ok(rb);
    for file in ["metrics.jsonl", "captures.jsonl"] {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file}"
        );
    }
    assert_eq!(summary_without_time(&a), summary_without_time(&b));
    // Three well-separated blobs: learnt in 25 steps.
    let accuracy = summary_without_time(&a)["eval_metric"]["value"]
        .as_f64()
        .unwrap();
    assert!(accuracy >= 0.9, "{accuracy}");
    let config = read_json(&b.join("config.json"));
    assert_eq!(
        (config["dataset"].as_str(), config["labels"].as_str()),
        (Some(x.as_str()), Some(y.as_str()))
    );
    let config = read_json(&a.join("config.json"));
    assert!(config.get("labels").is_none(), "{config}");
    for d in [a, b] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn bad_npy_datasets_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.npy");
    mixprec::io::write_npy(&short, &[59], mixprec::io::TensorData::F32(&[1.0; 59])).unwrap();
    let short = short.display().to_string();
    let (x, y, xy) = (
        fixture("train_x.npy"),
        fixture("train_y.npy"),
        fixture("train_xy.npy"),
    );
    let out = dir.path().join("run");
    let cases: [(&[&str], &str); 6] = [
        (&["--labels", &y], "invalid labels"),
        (
            &["--dataset", &x, "--labels", "/nonexistent/y.npy"],
            "/nonexistent/y.npy",
        ),
        (
            &["--dataset", &x, "--labels", &xy],
            "train_xy.npy: labels must be a 1-D array",
        ),
        (
            &["--dataset", &y],
            "train_y.npy: features must be a 2-D array",
        ),
        (
            &["--dataset", &x],
            "train_x.npy: without --labels the last column holds the labels: label 1.05",
        ),
        (
            &["--dataset", &x, "--labels", &short],
            "short.npy: 59 labels for 60 rows of features",
        ),
    ];
    for (args, needle) in cases {
        refused(args, &out, needle);
    }
}

/// `--rounding`, `--accumulation` and `--overflow` set the recipe's options in config.json.
#[test]
fn recipe_option_flags_reach_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("small.json");
    std::fs::write(&cfg, r#"{"mlp": {"width": 16}, "recipe": "fp16-master"}"#).unwrap();
    let run = |name: &str, flags: &[&str]| {
        let out = dir.path().join(name);
        let r = bin()
            .args(["train", "--steps", "2", "--batch", "8", "--config"])
            .arg(&cfg)
            .args(flags)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        ok(r);
        let config = read_json(&out.join("config.json"));
        config["recipe"].clone()
    };
    let plain = run("plain", &[]);
    assert_eq!(
        (
            &plain["rounding"],
            &plain["accumulation"],
            &plain["overflow"]
        ),
        (&"nearest-even".into(), &"fp32".into(), &"ieee".into())
    );
    for (flag, value) in [
        ("rounding", "stochastic"),
        ("rounding", "toward-zero"),
        ("accumulation", "storage"),
        ("overflow", "saturate"),
    ] {
        let recipe = run(&format!("{flag}-{value}"), &[&format!("--{flag}"), value]);
        assert_eq!(recipe[flag], value, "--{flag} {value}");
        assert_eq!(recipe["weights"], "fp16");
    }
    for (flag, value, needle) in [
        ("--rounding", "sideways", "rounding mode 'sideways'"),
        ("--accumulation", "fp16", "accumulation 'fp16'"),
        ("--overflow", "wrap", "'wrap'"),
    ] {
        let r = bin()
            .args(["train", flag, value, "--out"])
            .arg(dir.path().join("bad"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}

/// Stochastic rounding is a different run from nearest-even, and the same seed gives the same
/// stochastic run.
#[test]
fn stochastic_rounding_is_seeded_and_differs_from_nearest_even() {
    let dirs = [fresh("sr1"), fresh("sr2"), fresh("rne")];
    for (dir, mode) in dirs
        .iter()
        .zip(["stochastic", "stochastic", "nearest-even"])
    {
        let r = train(dir, "2", &["--rounding", mode]);
        ok(r);
    }
    let read = |d: &Path| std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
    assert_eq!(read(&dirs[0]), read(&dirs[1]));
    assert_eq!(
        summary_without_time(&dirs[0]),
        summary_without_time(&dirs[1])
    );
    let (sr, rne) = (metrics_lines(&dirs[0]), metrics_lines(&dirs[2]));
    let differ = sr
        .iter()
        .zip(&rne)
        .filter(|(a, b)| a["loss"] != b["loss"])
        .count();
    assert!(differ >= 20, "{differ} of 25 losses differ");
    for d in dirs {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// `--eval-every N`: the test metric on the lines of steps N, 2N, ..., under the summary's name.
#[test]
fn eval_every_writes_the_test_metric_into_metrics() {
    let dir = fresh("eval-every");
    let r = train(&dir, "1", &["--eval-every", "10"]);
    ok(r);
    let lines = metrics_lines(&dir);
    let steps: Vec<u64> = lines
        .iter()
        .filter(|l| l.get("eval").is_some())
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [10, 20]);
    let summary = summary_without_time(&dir);
    let eval = &lines[19]["eval"];
    assert_eq!(eval["name"], summary["eval_metric"]["name"]);
    assert!(
        (0.0..=1.0).contains(&eval["value"].as_f64().unwrap()),
        "{eval}"
    );
    let config = read_json(&dir.join("config.json"));
    assert_eq!(config["eval_every"], 10);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--print-config` shows the new keys: `labels` when given, `eval_every` always.
#[test]
fn print_config_shows_labels_and_eval_every() {
    let r = bin()
        .args([
            "train",
            "--print-config",
            "--dataset",
            "x.npy",
            "--labels",
            "y.npy",
        ])
        .args(["--eval-every", "7", "--rounding", "stochastic"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&ok(r)).unwrap();
    assert_eq!(
        (json["labels"].as_str(), json["eval_every"].as_u64()),
        (Some("y.npy"), Some(7))
    );
    assert_eq!(json["recipe"]["rounding"], "stochastic");
    let plain = bin().args(["train", "--print-config"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(
        json.get("labels").is_some_and(serde_json::Value::is_null) && json["eval_every"] == 0,
        "{json}"
    );
}

/// Every model, and an MLP wide enough that the weight-sized passes and the capture histograms
/// split across threads, gives the same files with 1 and 3 threads.
#[test]
fn every_model_is_the_same_whatever_the_threads() {
    let configs = [
        (
            "wide-mlp",
            r#"{"model": "mlp", "mlp": {"depth": 2, "width": 384}, "recipe": "fp16-dynamic", "optimizer": {"kind": "sgd", "lr": 0.01, "momentum": 0.9}}"#,
        ),
        ("cnn", r#"{"model": "cnn", "recipe": "fp8-hybrid"}"#),
        (
            "lstm",
            r#"{"model": "lstm", "dataset": "recall", "recipe": "bf16-master"}"#,
        ),
        (
            "gan",
            r#"{"model": "gan", "dataset": "ring", "recipe": "fp16-dynamic"}"#,
        ),
    ];
    for (name, json) in configs {
        let dir = fresh_dir(&format!("threads-{name}"));
        let cfg = dir.join("c.json");
        std::fs::write(&cfg, json).unwrap();
        let outs: Vec<PathBuf> = ["1", "3"]
            .iter()
            .map(|threads| {
                let out = dir.join(format!("run-{threads}"));
                let flags = ["--steps", "12", "--batch", "32", "--capture-every", "4"];
                let r = with_config("train", &cfg, &flags, &out, threads);
                assert!(
                    r.status.success(),
                    "{name}: {}",
                    String::from_utf8_lossy(&r.stderr)
                );
                out
            })
            .collect();
        for file in ["metrics.jsonl", "captures.jsonl"] {
            assert_eq!(
                std::fs::read(outs[0].join(file)).unwrap(),
                std::fs::read(outs[1].join(file)).unwrap(),
                "{name}: {file}"
            );
        }
        assert_eq!(
            summary_without_time(&outs[0]),
            summary_without_time(&outs[1]),
            "{name}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// A short run whose scaler is still backing off (Megatron's starts at 2^32) skips every step
/// without having diverged: the summary and the line printed say what happened.
#[test]
fn a_short_run_that_skips_every_step_has_not_diverged() {
    let out = fresh("backing-off");
    let o = bin()
        .args([
            "train",
            "--recipe",
            "fp16-megatron",
            "--steps",
            "10",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout.contains("10 steps (10 skipped)")
            && stdout.contains("no update applied (every step skipped for overflow)")
            && !stdout.contains("DIVERGED"),
        "{stdout}"
    );
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(summary["diverged"], false);
    assert_eq!(summary["skipped_steps"], 10);
    std::fs::remove_dir_all(&out).unwrap();
}
