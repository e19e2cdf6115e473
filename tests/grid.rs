//! `mixprec grid` and `mixprec report` of a grid through the real binary: runs identical to
//! `train` alone, resuming, shards merging, the report's statistics, and bad input.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;
use common::{assert_contains, bin, file_names, json_lines, ok, read_json, with_config};

/// A small, fast base config (digits MLP, a few steps, captures).
fn base(dir: &Path) -> PathBuf {
    let path = dir.join("base.json");
    std::fs::write(
        &path,
        r#"{"mlp": {"depth": 2, "width": 64}, "loss_multiplier": 1.52587890625e-05,
            "steps": 12, "batch": 32, "seed": 5, "capture_every": 5}"#,
    )
    .unwrap();
    path
}

fn grid(base: &Path, out: &Path, threads: &str, extra: &[&str]) -> Output {
    with_config("grid", base, extra, out, threads)
}

/// The final metric of each run in grid.jsonl's `index` whose varied values include `when`'s
/// (key, value) pairs.
fn metric_values(index: &[Value], when: &[(&str, &str)]) -> Vec<f64> {
    index
        .iter()
        .filter(|l| when.iter().all(|(k, v)| l["values"][k] == *v))
        .map(|l| l["summary"]["eval_metric"]["value"].as_f64().unwrap())
        .collect()
}

/// `mixprec report GRID --out OUT`, which must succeed; what it prints.
fn grid_report(grid: &Path, out: &Path) -> String {
    ok(bin()
        .arg("report")
        .arg(grid)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap())
}

fn without_time(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("wall_seconds");
    v
}

const VARY: [&str; 6] = [
    "--vary",
    "recipe=fp32,fp16-master,fp16-dynamic",
    "--vary",
    "loss_scale=2^0..2^12",
    "--seeds",
    "2",
];

fn runs_of(dir: &Path) -> Vec<String> {
    file_names(&dir.join("runs"))
}

/// Each run of a grid on 2 threads (one run per thread) is the run `train` makes alone, on 1
/// thread, from its config.json: the same bytes.
#[test]
fn every_run_is_the_run_train_makes_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    let g = tmp.path().join("g");
    let o = grid(&base, &g, "2", &VARY);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let stdout = ok(o);
    assert!(
        stdout.contains("grid: 54 runs (0 already finished, 54 trained, 0 failed); 54 of 54"),
        "{stdout}"
    );
    // Piped: no progress bar.
    assert!(stderr.is_empty(), "{stderr}");
    let names = runs_of(&g);
    // fp32 is trained once for all 13 scales (a loss scale cannot change FP32 training): 2 runs,
    // and 26 of each fp16 recipe.
    assert_eq!(names.len(), 54);
    let index = json_lines(&g.join("grid.jsonl"));
    assert_eq!(index.len(), 54);
    // Grid order: the first --vary slowest, the seed fastest.
    assert_eq!(index[0]["run"], "runs/recipe=fp32,loss_scale=2^0,seed=5");
    assert_eq!(index[1]["run"], "runs/recipe=fp32,loss_scale=2^0,seed=6");
    assert_eq!(index[0]["inert"], serde_json::json!(["loss_scale"]));
    assert_eq!(
        index[2]["run"],
        "runs/recipe=fp16-master,loss_scale=2^0,seed=5"
    );
    assert!(index[2].get("inert").is_none());
    assert_eq!(
        index[53]["run"],
        "runs/recipe=fp16-dynamic,loss_scale=2^12,seed=6"
    );
    let line = &index[6];
    assert_eq!(line["values"]["recipe"], "fp16-master");
    assert_eq!(line["values"]["loss_scale"], "2^2");
    assert_eq!(line["seed"], 5);
    // Its config: the base, the recipe honestly named, the scale, the seed.
    let dir = g.join("runs/recipe=fp16-master,loss_scale=2^2,seed=5");
    let config = read_json(&dir.join("config.json"));
    assert_eq!(config["recipe"]["name"], "fp16-static");
    assert_eq!(config["recipe"]["loss_scaling"]["scale"], 4.0);
    assert_eq!(
        (config["seed"].clone(), config["steps"].clone()),
        (5.into(), 12.into())
    );
    assert_eq!(config["mlp"]["width"], 64);
    assert_eq!(line["summary"], read_json(&dir.join("summary.json")));
    let dynamic = read_json(&g.join("runs/recipe=fp16-dynamic,loss_scale=2^12,seed=6/config.json"));
    assert_eq!(dynamic["recipe"]["loss_scaling"]["init_scale"], 4096.0);
    assert_eq!(dynamic["seed"], 6);
    for name in [
        "recipe=fp16-master,loss_scale=2^2,seed=5",
        "recipe=fp16-dynamic,loss_scale=2^12,seed=6",
        "recipe=fp32,loss_scale=2^0,seed=6",
    ] {
        let run = g.join("runs").join(name);
        let alone = tmp.path().join(format!("alone-{name}"));
        let o = bin()
            .arg("train")
            .arg("--config")
            .arg(run.join("config.json"))
            .arg("--out")
            .arg(&alone)
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .unwrap();
        ok(o);
        for file in ["config.json", "metrics.jsonl", "captures.jsonl"] {
            assert!(
                std::fs::read(run.join(file)).unwrap() == std::fs::read(alone.join(file)).unwrap(),
                "{name}/{file}"
            );
        }
        assert_eq!(
            without_time(read_json(&run.join("summary.json"))),
            without_time(read_json(&alone.join("summary.json")))
        );
        assert!(!run.join("INCOMPLETE").exists());
    }
    // What the grid did not train is what it says: fp32 at 2^7 and 2^12 trains to the bits of
    // fp32 at 2^0 (every step's loss, counts and amax; only the recorded scale differs).
    let once = g.join("runs/recipe=fp32,loss_scale=2^0,seed=6");
    let without_scale = |path: &Path| -> Vec<Value> {
        json_lines(path)
            .into_iter()
            .map(|mut l| {
                l.as_object_mut().unwrap().remove("loss_scale");
                l
            })
            .collect()
    };
    for scale in ["128", "4096"] {
        let other = tmp.path().join(format!("fp32-{scale}"));
        ok(bin()
            .arg("train")
            .arg("--config")
            .arg(once.join("config.json"))
            .args(["--loss-scale", scale, "--out"])
            .arg(&other)
            .output()
            .unwrap());
        assert_eq!(
            without_scale(&other.join("metrics.jsonl")),
            without_scale(&once.join("metrics.jsonl")),
            "fp32 at {scale}"
        );
        assert_eq!(
            read_json(&other.join("config.json"))["recipe"]["loss_scaling"]["scale"],
            scale.parse::<f64>().unwrap()
        );
    }
}

/// Shares run separately merge into one directory, or into copies merged afterwards; a killed
/// run is redone, a finished one kept, on a rerun of the same command.
#[test]
fn shards_merge_and_a_killed_grid_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    let vary = [
        "--vary",
        "recipe=fp32,fp16-master",
        "--vary",
        "loss_scale=2^0,2^8",
        "--seeds",
        "2",
    ];
    let whole = tmp.path().join("whole");
    ok(grid(&base, &whole, "2", &vary));
    // Two shares into one directory.
    let shared = tmp.path().join("shared");
    let with = |shard: &'static str| [&vary[..], &["--shard", shard]].concat();
    let first = ok(grid(&base, &shared, "1", &with("1/2")));
    assert!(
        first.contains(
            "grid: 3 runs in share 1/2 (0 already finished, 3 trained, 0 failed); 3 of 6"
        ),
        "{first}"
    );
    // Share 1 of 2 holds every other run in grid order.
    let index = json_lines(&shared.join("grid.jsonl"));
    assert_eq!(index[0]["run"], "runs/recipe=fp32,loss_scale=2^0,seed=5");
    assert_eq!(
        index[1]["run"],
        "runs/recipe=fp16-master,loss_scale=2^0,seed=5"
    );
    let second = ok(grid(&base, &shared, "1", &with("2/2")));
    assert!(second.contains("6 of 6"), "{second}");
    assert_eq!(runs_of(&shared), runs_of(&whole));
    let strip = |mut v: Vec<Value>| -> Vec<Value> {
        for l in &mut v {
            l["summary"].as_object_mut().unwrap().remove("wall_seconds");
        }
        v
    };
    assert_eq!(
        strip(json_lines(&shared.join("grid.jsonl"))),
        strip(json_lines(&whole.join("grid.jsonl")))
    );
    // Two shares in two directories, copied together: the report reads the run directories.
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    ok(grid(&base, &a, "1", &with("1/2")));
    ok(grid(&base, &b, "1", &with("2/2")));
    for name in runs_of(&b) {
        std::fs::rename(b.join("runs").join(&name), a.join("runs").join(&name)).unwrap();
    }
    let report = tmp.path().join("report-a");
    grid_report(&a, &report);
    let r = read_json(&report.join("report.json"));
    assert_eq!(r["unfinished"], Value::Array(vec![]));
    assert_eq!(r["runs"], 6);
    // A rerun rebuilds grid.jsonl from the run directories, training nothing.
    let again = ok(grid(&base, &a, "1", &vary));
    assert!(
        again.contains("(6 already finished, 0 trained, 0 failed); 6 of 6"),
        "{again}"
    );
    assert_eq!(json_lines(&a.join("grid.jsonl")).len(), 6);

    // Killed: one run left INCOMPLETE (its logs cut short), one never started.
    let runs = whole.join("runs");
    let killed = runs.join("recipe=fp16-master,loss_scale=2^8,seed=6");
    let before = std::fs::read(killed.join("metrics.jsonl")).unwrap();
    std::fs::write(killed.join("INCOMPLETE"), "killed\n").unwrap();
    std::fs::write(killed.join("metrics.jsonl"), &before[..before.len() / 2]).unwrap();
    std::fs::remove_dir_all(runs.join("recipe=fp32,loss_scale=2^0,seed=5")).unwrap();
    let kept = runs.join("recipe=fp16-master,loss_scale=2^0,seed=6/summary.json");
    let kept_before = std::fs::read(&kept).unwrap();
    let resumed = ok(grid(&base, &whole, "2", &vary));
    assert!(
        resumed.contains("grid: 6 runs (4 already finished, 2 trained, 0 failed); 6 of 6"),
        "{resumed}"
    );
    assert!(!killed.join("INCOMPLETE").exists());
    assert_eq!(std::fs::read(killed.join("metrics.jsonl")).unwrap(), before);
    // The finished run was left alone (its wall time would differ if it had been rerun).
    assert_eq!(std::fs::read(&kept).unwrap(), kept_before);
}

/// The report of a grid: means, intervals and Welch's tests as the summaries give them, the
/// window from the fp32 runs' captures, the figures.
#[test]
fn the_report_of_a_grid() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    // Runs the grid of `flags` into `name` and reports it into `report-name`: the grid's
    // directory, the report's, and what `report` printed.
    let grid_and_report = |name: &str, flags: &[&str]| {
        let g = tmp.path().join(name);
        ok(grid(&base, &g, "2", flags));
        let out = tmp.path().join(format!("report-{name}"));
        let printed = grid_report(&g, &out);
        (g, out, printed)
    };
    let (g, out, stdout) = grid_and_report(
        "g",
        &[
            "--vary",
            "recipe=fp32,fp16-master",
            "--vary",
            "loss_scale=2^0,2^4,2^8",
            "--seeds",
            "3",
        ],
    );
    assert!(
        stdout.contains("analyze's loss-scale window for fp16 is 2^"),
        "{stdout}"
    );
    let r = read_json(&out.join("report.json"));
    assert_eq!(r["metric"], "test_accuracy");
    assert_eq!(r["x_key"], "loss_scale");
    assert_eq!(r["series"], serde_json::json!(["fp32", "fp16-master"]));
    let cells = r["cells"].as_array().unwrap();
    // fp32 trained once, standing for the three scales; fp16-master at each.
    assert_eq!(cells.len(), 4);
    // Recompute one cell from grid.jsonl.
    let index = json_lines(&g.join("grid.jsonl"));
    let values = |recipe: &str, scale: &str| {
        metric_values(&index, &[("recipe", recipe), ("loss_scale", scale)])
    };
    let (master, fp32) = (values("fp16-master", "2^4"), values("fp32", "2^0"));
    assert!(values("fp32", "2^4").is_empty());
    assert_eq!((master.len(), fp32.len()), (3, 3));
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let cell = cells
        .iter()
        .find(|c| c["series"] == "fp16-master" && c["x"] == "2^4")
        .unwrap();
    assert_eq!(cell["recipes"], serde_json::json!(["fp16-static"]));
    assert_eq!(cell["metric"]["n"], 3);
    assert!((cell["metric"]["mean"].as_f64().unwrap() - mean(&master)).abs() < 1e-12);
    let d = cell["metric_vs_fp32"]["difference"].as_f64().unwrap();
    assert!((d - (mean(&master) - mean(&fp32))).abs() < 1e-12, "{cell}");
    let (lo, hi) = (
        cell["metric"]["low"].as_f64().unwrap(),
        cell["metric"]["high"].as_f64().unwrap(),
    );
    assert!(lo <= mean(&master) && mean(&master) <= hi);
    // The fp32 series is the baseline: not tested against itself.
    let base_cell = cells.iter().find(|c| c["series"] == "fp32").unwrap();
    assert!(base_cell["metric_vs_fp32"].is_null());
    assert_eq!(
        (base_cell["inert"].clone(), base_cell["x"].clone()),
        (true.into(), "2^0".into())
    );
    assert!(
        cells
            .iter()
            .filter(|c| c["series"] == "fp16-master")
            .all(|c| c["inert"] == false)
    );
    // Where fp16-master matched fp32, and the scale predicted from fp32's weight gradients.
    let edges = r["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 1);
    assert_eq!(edges[0]["series"], "fp16-master");
    assert!(
        r["window"]["predicted_min_log2_scale"].is_i64(),
        "{}",
        r["window"]
    );
    assert!(
        stdout.contains("predicted from the fp32 runs' weight gradients"),
        "{stdout}"
    );
    assert!(
        stdout.contains("fp32 was trained once per seed, at loss_scale 2^0, for all 3 values"),
        "{stdout}"
    );
    // The window comes from the fp32 runs at 2^0, all seeds, every capture (steps 1, 5, 10).
    let w = &r["window"];
    assert_eq!(
        (w["loss_scale"].clone(), w["runs"].clone()),
        (1.0.into(), 3.into())
    );
    assert_eq!(w["captures"], 9);
    assert_eq!(w["format"], "fp16");
    assert!(
        w["window"]["min_log2_scale"].as_i64().unwrap()
            <= w["window"]["max_log2_scale"].as_i64().unwrap()
    );
    for f in [
        "index.html",
        "figures/grid-metric.png",
        "figures/grid-metric.svg",
        "figures/grid-loss.png",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(page.contains("difference from fp32") && page.contains("fp16-static"));
    // Another x key: the baseline is fp32 at the same number of steps, whose runs differ.
    let (s, out_s, _) = grid_and_report(
        "steps",
        &[
            "--vary",
            "recipe=fp32,bf16-master",
            "--vary",
            "steps=3,9",
            "--seeds",
            "2",
        ],
    );
    let r = read_json(&out_s.join("report.json"));
    assert_eq!(r["x_key"], "steps");
    let index = json_lines(&s.join("grid.jsonl"));
    let metric =
        |recipe: &str, steps: &str| metric_values(&index, &[("recipe", recipe), ("steps", steps)]);
    assert_ne!(metric("fp32", "3"), metric("fp32", "9"));
    for steps in ["3", "9"] {
        let cell = r["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["series"] == "bf16-master" && c["x"] == steps)
            .unwrap();
        let want = mean(&metric("bf16-master", steps)) - mean(&metric("fp32", steps));
        let got = cell["metric_vs_fp32"]["difference"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "steps {steps}: {got} vs {want}");
    }
    // Only the recipe varies: one comparison per recipe, said with its numbers (the mean over
    // the seeds and the difference from fp32, recomputed from grid.jsonl).
    let (c, recipes_report, findings) = grid_and_report(
        "recipes",
        &["--vary", "recipe=fp32,bf16-master", "--seeds", "3"],
    );
    let index = json_lines(&c.join("grid.jsonl"));
    let by = |recipe: &str| metric_values(&index, &[("recipe", recipe)]);
    let (bf16, fp32) = (mean(&by("bf16-master")), mean(&by("fp32")));
    let line = findings
        .lines()
        .find(|l| l.starts_with("- bf16-master:"))
        .unwrap_or_else(|| panic!("{findings}"));
    assert!(
        line.contains(&format!("test_accuracy {bf16:.4} ["))
            && line.contains(&format!("over 3 seeds, {:+.4} [", bf16 - fp32)),
        "{line}"
    );
    // Its figures are distributions over seeds, captioned by what they show.
    let page = std::fs::read_to_string(recipes_report.join("index.html")).unwrap();
    assert_contains(
        &page,
        &[
            "Final test_accuracy of each series over 3 seeds",
            "Final training loss of each series over 3 seeds",
        ],
    );
    assert!(!page.contains("Final final"));
    // Without an fp32 series nothing is compared, and the findings say so.
    let (_, out_nb, _) = grid_and_report(
        "no-baseline",
        &["--vary", "recipe=bf16-master,fp16-dynamic", "--seeds", "2"],
    );
    let page = std::fs::read_to_string(out_nb.join("index.html")).unwrap();
    assert!(page.contains("No series of this grid is fp32"), "{page}");
    // A grid is reported alone.
    let o = bin()
        .arg("report")
        .arg(&g)
        .arg(&g)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is a grid directory: report it alone"));
}

/// Bad input: one line naming the problem, exit code 2, nothing trained or written.
#[test]
fn bad_input_is_named_before_any_training() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--vary", "stepz=1,2"],
            "--vary 'stepz=1': unknown field `stepz`",
        ),
        (
            &["--vary", "optimizer.nope.x=1"],
            "unknown config key optimizer.nope.x",
        ),
        (
            &["--vary", "loss_scale=2^9..2^3"],
            "the range 2^9..2^3 is empty",
        ),
        (&["--vary", "loss_scale=2^0..2^x"], "'2^x' is not"),
        (&["--vary", "loss_scale=0,2"], "--vary 'loss_scale=0': "),
        (&["--vary", "steps=0,3"], "--vary 'steps=0': invalid steps"),
        (
            &["--vary", "recipe=fp12"],
            "--vary 'recipe=fp12': recipe: invalid recipe 'fp12'",
        ),
        (
            &["--vary", "recipe=fp16-pure", "--vary", "loss_scale=2^4"],
            "runs/recipe=fp16-pure,loss_scale=2^4,seed=5: invalid loss scaling",
        ),
        (
            &["--vary", "batch=32,100000"],
            "runs/batch=100000,seed=5: batch 100000: larger than",
        ),
        (&["--vary", "dataset=missing.csv"], "missing.csv"),
        (&["--vary", "steps=1,1"], "given twice"),
        (&["--vary", "steps=1", "--vary", "steps=2"], "varied twice"),
        (&["--seeds", "0"], "invalid --seeds '0'"),
        (&["--shard", "3/2"], "invalid --shard '3/2'"),
        (&["--shard", "1/0"], "invalid --shard '1/0'"),
        (&["--shard", "a/b"], "invalid --shard 'a/b'"),
    ];
    for (args, needle) in cases {
        let out = tmp.path().join("never");
        let o = grid(&base, &out, "1", args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
    // A directory that holds another grid, or anything else, is not touched.
    let g = tmp.path().join("g");
    ok(grid(&base, &g, "1", &["--vary", "steps=1,2"]));
    let before = std::fs::read(g.join("grid.json")).unwrap();
    let o = grid(&base, &g, "1", &["--vary", "steps=1,3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("describes another grid"));
    assert_eq!(std::fs::read(g.join("grid.json")).unwrap(), before);
    assert_eq!(runs_of(&g).len(), 2);
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let o = grid(&base, &other, "1", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no grid.json"));
}
