//! `mixprec replay` and `train --scaler` through the real binary: replaying the policy a run used
//! gives the run's scales and skipped steps exactly (runs whose dynamic scaler moves both ways),
//! another policy's skips follow from the recorded grad_amax, the page, and bad input.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::{bin, fails, fresh, json_lines, ok, strs};

fn train(scaler: &str, steps: &str, dir: &Path) {
    ok(bin()
        .args(["train", "--recipe", "fp16-master", "--scaler", scaler])
        .args(["--steps", steps, "--batch", "64", "--capture-every", "50"])
        .arg("--out")
        .arg(dir)
        .output()
        .unwrap());
}

/// A fresh directory `name` holding, as `run`, a run trained under `scaler` for `steps` steps.
fn trained_in(name: &str, scaler: &str, steps: &str) -> (PathBuf, PathBuf) {
    let root = fresh(name);
    let run = root.join("run");
    train(scaler, steps, &run);
    (root, run)
}

fn replay_json(dir: &Path, policies: &[&str]) -> Value {
    let out = ok(bin()
        .arg("replay")
        .arg(dir)
        .arg("--policy")
        .args(policies)
        .arg("--json")
        .output()
        .unwrap());
    serde_json::from_str(&out).unwrap()
}

fn steps(dir: &Path) -> Vec<Value> {
    json_lines(&dir.join("metrics.jsonl"))
}

/// The whole numbers of a JSON array.
fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect()
}

/// Per step, the scale of a replayed policy (from its change points).
fn scales(policy: &Value, n: usize) -> Vec<f64> {
    let changes = policy["scale_changes"].as_array().unwrap();
    (1..=n as u64)
        .map(|step| {
            changes
                .iter()
                .take_while(|c| c[0].as_u64().unwrap() <= step)
                .last()
                .unwrap()[1]
                .as_f64()
                .unwrap()
        })
        .collect()
}

/// Runs whose scaler grows and backs off (each framework's rule, with short growth intervals);
/// replaying `run` gives the recorded scale and skip of every step.
#[test]
fn replaying_the_runs_own_policy_is_exact() {
    let root = fresh("exact");
    for (i, scaler) in [
        "gradscaler:growth_interval=20",
        "megatron:growth_interval=15",
        "deepspeed:growth_interval=10,stop_at_min_scale=false",
        "keras:growth_interval=15",
    ]
    .iter()
    .enumerate()
    {
        let dir = root.join(i.to_string());
        train(scaler, "200", &dir);
        let recorded = steps(&dir);
        let rec_scales: Vec<f64> = recorded
            .iter()
            .map(|s| s["loss_scale"].as_f64().unwrap())
            .collect();
        let rec_skipped: Vec<u64> = recorded
            .iter()
            .filter(|s| s["skipped"] == true)
            .map(|s| s["step"].as_u64().unwrap())
            .collect();
        // The scaler really moved, both ways.
        assert!(
            rec_scales.windows(2).any(|w| w[1] > w[0])
                && rec_scales.windows(2).any(|w| w[1] < w[0]),
            "{scaler}: {rec_scales:?}"
        );
        assert!(!rec_skipped.is_empty(), "{scaler}");
        let r = replay_json(&dir, &["run", "static:1"]);
        assert_eq!(r["steps"], 200);
        assert_eq!(r["run_policy"], *scaler);
        let own = &r["policies"][0];
        assert_eq!(own["policy"], format!("run ({scaler})"));
        assert_eq!(scales(own, recorded.len()), rec_scales, "{scaler}");
        assert_eq!(u64s(&own["skipped"]["steps"]), rec_skipped, "{scaler}");
        assert_eq!(own["matches_run"], true);
        assert_eq!(r["policies"][1]["matches_run"], false);
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// Another policy's skipped steps, recomputed from the recorded grad_amax: at a static scale S a
/// step overflows fp16 when grad_amax * S reaches 65520 (the tie above 65504 that rounds to
/// infinity); its underflow at capture steps is reported for every capture.
#[test]
fn a_static_policys_skips_follow_from_grad_amax() {
    let dir = fresh("static");
    train("gradscaler:growth_interval=20", "150", &dir);
    let recorded = steps(&dir);
    let s = 2f64.powi(19);
    let want: Vec<u64> = recorded
        .iter()
        .filter(|r| {
            r["grad_amax"]
                .as_f64()
                .is_some_and(|a| (a * s) as f32 >= 65520.0)
        })
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert!(!want.is_empty() && want.len() < recorded.len(), "{want:?}");
    let r = replay_json(&dir, &["static:2^19"]);
    let p = &r["policies"][0];
    assert_eq!(p["policy"], "static:2^19", "labelled as given");
    assert_eq!(u64s(&p["skipped"]["steps"]), want);
    assert_eq!(p["above_window"]["steps"], p["skipped"]["steps"]);
    assert_eq!(p["scale_changes"], serde_json::json!([[1, s]]));
    // Captures at steps 1, 50, 100, 150.
    let at: Vec<u64> = p["underflow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["step"].as_u64().unwrap())
        .collect();
    assert_eq!(at, vec![1, 50, 100, 150]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_table_and_the_page() {
    let (root, run) = trained_in("page", "megatron", "60");
    let into_page = |policies: &[&str]| {
        let mut c = bin();
        c.arg("replay").arg(&run).arg("--policy").args(policies);
        ok(c.arg("--out").arg(root.join("page")).output().unwrap())
    };
    let table = into_page(&["run", "gradscaler", "keras"]);
    assert!(table.contains("Open-loop replay"), "{table}");
    assert!(table.contains("run (megatron)"), "{table}");
    for name in ["gradscaler", "keras", "same as the run", "report: "] {
        assert!(table.contains(name), "{name}: {table}");
    }
    let page = std::fs::read_to_string(root.join("page/index.html")).unwrap();
    assert!(
        page.contains("Open-loop replay") && page.contains("<svg"),
        "{page}"
    );
    let png = std::fs::read(root.join("page/figures/replay.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let mut written: Value =
        serde_json::from_slice(&std::fs::read(root.join("page/replay.json")).unwrap()).unwrap();
    written.as_object_mut().unwrap().remove("written_by");
    assert_eq!(written, replay_json(&run, &["run", "gradscaler", "keras"]));
    // Again into the same directory: its own files are replaced.
    into_page(&["none"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bad_input() {
    let (root, run) = trained_in("bad", "gradscaler", "3");
    let replay = |args: &[&str]| bin().arg("replay").args(args).output().unwrap();
    let r = run.to_str().unwrap();
    let e = fails(replay(&[r]));
    assert!(e.contains("--policy"), "{e}");
    let e = fails(replay(&[r, "--policy", "gradscalar"]));
    assert!(
        e.contains("invalid loss scaler 'gradscalar'") && e.contains("keras"),
        "{e}"
    );
    let e = fails(replay(&[r, "--policy", "static:0"]));
    assert!(e.contains("must be positive"), "{e}");
    let e = fails(replay(&[r, "--policy", "keras", "keras"]));
    assert!(e.contains("given twice"), "{e}");
    // Only a literal repeat is refused: the same policy spelled another way (keras at
    // GradScaler's initial scale, the run's own written out) is replayed under each name.
    let own = steps(&run)[0]["loss_scale"].as_f64().unwrap();
    assert_eq!(own, 65536.0);
    let same = replay_json(
        &run,
        &[
            "keras:init_scale=2^16",
            "gradscaler",
            "run",
            "gradscaler:init_scale=65536",
        ],
    );
    let names = strs(&same["policies"], "policy");
    assert_eq!(
        names,
        [
            "keras:init_scale=2^16",
            "gradscaler",
            "run (gradscaler)",
            "gradscaler:init_scale=65536"
        ]
    );
    assert!(
        same["policies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["matches_run"] == true)
    );
    let e = fails(replay(&[r, "--policy", "gradscaler", " gradscaler"]));
    assert!(e.contains("given twice"), "{e}");
    let e = fails(replay(&[root.to_str().unwrap(), "--policy", "keras"]));
    assert!(e.contains("not a run directory"), "{e}");
    let e = fails(replay(&[r, "--policy", "keras", "--format", "fp17"]));
    assert!(e.contains("unknown format 'fp17'"), "{e}");
    // A file of the user's where the page would go is not replaced.
    let page = root.join("page");
    std::fs::create_dir_all(&page).unwrap();
    std::fs::write(page.join("index.html"), "mine").unwrap();
    let e = fails(replay(&[
        r,
        "--policy",
        "keras",
        "--out",
        page.to_str().unwrap(),
    ]));
    assert!(e.contains("not written by mixprec"), "{e}");
    assert_eq!(
        std::fs::read_to_string(page.join("index.html")).unwrap(),
        "mine"
    );
    assert!(!page.join("replay.json").exists());
    // train --scaler: the same names, the same message.
    let e = fails(
        bin()
            .args(["train", "--scaler", "deepspeed:consecutive=true", "--out"])
            .arg(root.join("t"))
            .output()
            .unwrap(),
    );
    assert!(e.contains("unknown field `consecutive`"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}
