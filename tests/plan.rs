//! `mixprec plan` and `mixprec report` of a plan directory through the real binary: the files
//! of the contract, the validation's runs, the page, and bad input.

use std::path::{Path, PathBuf};

mod common;
use common::{assert_bad, assert_contains, bin, fresh, fresh_dir, ok, read_json};

/// A small, fast MLP config.
fn config(dir: &Path) -> PathBuf {
    let path = dir.join("mlp.json");
    std::fs::write(
        &path,
        r#"{"mlp": {"depth": 2, "width": 32}, "steps": 20, "batch": 32, "seed": 3}"#,
    )
    .unwrap();
    path
}

fn plan(config: &Path, out: &Path, extra: &[&str]) -> String {
    ok(bin()
        .arg("plan")
        .arg("--config")
        .arg(config)
        .args(["--recipe", "mxfp4", "--batches", "2"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .unwrap())
}

#[test]
fn a_plan_is_measured_validated_and_reported() {
    let dir = fresh_dir("plan");
    let config = config(&dir);
    let out = dir.join("p");
    let text = plan(
        &config,
        &out,
        &["--flops-share", "0.5", "--validate", "--seeds", "2"],
    );
    assert_contains(
        &text,
        &[
            "mlp-digits: each layer cast alone to mxfp4",
            "(all at once)",
            "validation: 6 runs",
        ],
    );
    let s = read_json(&out.join("sensitivity.json"));
    assert_eq!(s["schema"], "mixprec-sensitivity/1");
    assert_eq!(
        (s["batches"].as_u64(), s["seed"].as_u64()),
        (Some(2), Some(3))
    );
    let errs: Vec<f64> = s["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["grad_rel_err"].as_f64().unwrap())
        .collect();
    assert_eq!(errs.len(), 3);
    assert!(errs.windows(2).all(|w| w[0] >= w[1]), "{errs:?}");
    let p = read_json(&out.join("plan.json"));
    assert_eq!(p["budget"]["flops_share"], 0.5);
    assert!(p["flops_share"].as_f64().unwrap() >= 0.5);
    // The plan's recipe is a recipe train reads, keeping the layers the plan keeps.
    let recipe = read_json(&out.join("plan-recipe.json"));
    let kept: Vec<&str> = recipe["keep"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let want: Vec<&str> = p["keep"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(kept, want);
    let v = read_json(&out.join("validation.json"));
    assert_eq!(v["runs"].as_array().unwrap().len(), 6);
    for arm in ["fp32", "all", "plan"] {
        assert!(
            out.join("runs")
                .join(format!("{arm}-seed4"))
                .join("summary.json")
                .is_file()
        );
    }
    let train_config = read_json(&out.join("runs/plan-seed3/config.json"));
    assert_eq!(train_config["recipe"], recipe);
    // The page.
    let page = dir.join("page");
    let said = ok(bin()
        .arg("report")
        .arg(&out)
        .arg("--out")
        .arg(&page)
        .output()
        .unwrap());
    assert_contains(
        &said,
        &[
            "The plan casts",
            "all (mxfp4): loss",
            "plan (mxfp4-plan): loss",
        ],
    );
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    assert_contains(
        &html,
        &[
            "1. Each layer cast alone",
            "2. The plan",
            "3. Validation by re-training",
            "Welch p",
        ],
    );
    for f in ["sensitivity", "loss", "metric"] {
        assert!(
            page.join("figures").join(format!("{f}.png")).is_file(),
            "{f}"
        );
    }
    // Without a validation, the page says so.
    let bare = dir.join("bare");
    plan(&config, &bare, &["--max-grad-error", "1"]);
    let said = ok(bin()
        .arg("report")
        .arg(&bare)
        .arg("--out")
        .arg(dir.join("bare-page"))
        .output()
        .unwrap());
    assert_contains(&said, &["The plan casts 3 of 3 layers"]);
    // A plan directory is not planned into twice.
    let again = bin()
        .args([
            "plan",
            "--recipe",
            "mxfp4",
            "--max-grad-error",
            "1",
            "--config",
        ])
        .arg(&config)
        .arg("--out")
        .arg(&bare)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let dir = fresh_dir("plan-bad");
    let config = config(&dir);
    let c = config.to_str().unwrap();
    let out = fresh("plan-bad-out");
    let o = out.to_str().unwrap();
    assert_bad(
        &["plan", "--config", c, "--recipe", "nvfp4", "--out", o],
        "--max-grad-error",
    );
    assert_bad(
        &[
            "plan",
            "--config",
            c,
            "--recipe",
            "nvfp4",
            "--flops-share",
            "1.5",
            "--out",
            o,
        ],
        "from 0 to 1",
    );
    assert_bad(
        &[
            "plan",
            "--config",
            c,
            "--recipe",
            "fp32",
            "--flops-share",
            "0.5",
            "--out",
            o,
        ],
        "--recipe fp32: stores and casts everything in FP32",
    );
    assert_bad(
        &[
            "plan",
            "--config",
            c,
            "--recipe",
            "nvfp5",
            "--flops-share",
            "0.5",
            "--out",
            o,
        ],
        "nvfp5",
    );
    assert_bad(
        &[
            "plan",
            "--config",
            c,
            "--recipe",
            "nvfp4",
            "--flops-share",
            "0.5",
            "--batches",
            "0",
            "--out",
            o,
        ],
        "--batches",
    );
    assert_bad(
        &[
            "plan",
            "--config",
            c,
            "--recipe",
            "nvfp4",
            "--flops-share",
            "0.5",
            "--validate",
            "--seeds",
            "1",
            "--out",
            o,
        ],
        "--seeds 1",
    );
    let gan = dir.join("gan.json");
    std::fs::write(&gan, r#"{"model": "gan", "dataset": "ring"}"#).unwrap();
    assert_bad(
        &[
            "plan",
            "--config",
            gan.to_str().unwrap(),
            "--recipe",
            "nvfp4",
            "--flops-share",
            "0.5",
            "--out",
            o,
        ],
        "a classifier",
    );
    // A keep pattern that names no layer, in train's config.
    let kept = dir.join("kept.json");
    std::fs::write(
        &kept,
        r#"{"steps": 2, "recipe": {"name": "x", "weights": "fp32", "activations": "fp32",
            "activation_grads": "fp32", "weight_grads": "fp32", "optimizer_state": "fp32",
            "master_weights": "fp32", "keep": {"*.lstm": "bf16-master"}}}"#,
    )
    .unwrap();
    assert_bad(
        &["train", "--config", kept.to_str().unwrap(), "--out", o],
        "keep pattern '*.lstm'",
    );
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
