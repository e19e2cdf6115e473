//! `mixprec report` through the real binary: its numbers against the run files (and against
//! `analyze`), unfinished and diverged runs, bad input, escaping, and the page in a real browser.

use std::path::Path;
use std::process::{Command, Output};

use mixprec::format::FP16;
use mixprec::io::{TensorData, write_npy};
use mixprec::stats::Histogram;
use serde_json::Value;

mod common;
use common::{
    assert_contains, bin, fails, file_names, fresh, fresh_dir, json_lines, keys, ok, read_json,
};

/// Trains the underflow study's `recipe` for `steps` steps into `dir`, with captures and the
/// shadow every 50 steps.
fn train(recipe: &str, steps: &str, dir: &Path) {
    ok(bin()
        .args(["train", "--config"])
        .arg(format!("analyses/underflow/{recipe}.json"))
        .args([
            "--steps",
            steps,
            "--capture-every",
            "50",
            "--shadow-every",
            "50",
            "--out",
        ])
        .arg(dir)
        .output()
        .unwrap());
}

/// `mixprec report RUNS.. --out OUT`.
fn make_report<P: AsRef<std::ffi::OsStr>>(runs: &[P], out: &Path) -> Output {
    let o = bin()
        .arg("report")
        .args(runs)
        .arg("--out")
        .arg(out)
        .output();
    o.unwrap()
}

fn is_gradient(site: &Value) -> bool {
    site["tensor"] == "activation_grad" || site["tensor"] == "weight_grad"
}

/// The numbers of report.json, recomputed from the run's own files: the shares from the
/// captured counts, the window by `analyze` on values with the captured histograms, the shadow's
/// numbers as shadow.jsonl has them; the findings say what the example says.
#[test]
fn report_json_agrees_with_the_run_files_and_with_analyze() {
    let root = fresh("agrees");
    let (fp32, master, dynamic) = (root.join("fp32"), root.join("master"), root.join("dynamic"));
    train("fp32", "100", &fp32);
    train("fp16-master", "100", &master);
    train("fp16-dynamic", "100", &dynamic);
    let out = root.join("report");
    let stdout = ok(make_report(&[&fp32, &master, &dynamic], &out));
    let report = read_json(&out.join("report.json"));
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let names: Vec<&str> = runs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fp32", "fp16-master", "fp16-dynamic"]);

    let captures = json_lines(&master.join("captures.jsonl"));
    let summaries = runs[1]["captures"].as_array().unwrap();
    assert_eq!(captures.len(), summaries.len());
    for (c, s) in captures.iter().zip(summaries) {
        assert_eq!(c["step"], s["step"]);
        // Per class: the shares are the captured counts over the captured values.
        for class in ["activation_grad", "weight_grad", "weight", "activation"] {
            let sites: Vec<&Value> = c["sites"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["tensor"] == class)
                .collect();
            let count: u64 = sites
                .iter()
                .map(|x| {
                    serde_json::from_value::<Histogram>(x["values"].clone())
                        .unwrap()
                        .count()
                })
                .sum();
            let under: u64 = sites
                .iter()
                .map(|x| x["rounding"]["underflow"].as_u64().unwrap())
                .sum();
            let shares = &s["classes"][class];
            assert_eq!(shares["values"].as_u64().unwrap(), count, "{class}");
            let want = under as f64 / count as f64;
            assert!(
                (shares["underflow"].as_f64().unwrap() - want).abs() < 1e-12,
                "{class}"
            );
        }
        // The window: analyze on values laid out as the captured gradient histograms (unscaled),
        // one per bin at 1.5 * 2^e (which every scale classifies as the bin's histogram sweep
        // does), and the largest magnitude itself.
        let mut pooled = Histogram::new(0);
        for site in c["sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| is_gradient(x))
        {
            pooled.merge(&serde_json::from_value(site["values"].clone()).unwrap());
        }
        let scale = c["loss_scale"].as_f64().unwrap();
        let mut values: Vec<f64> = pooled
            .bins()
            .flat_map(|b| std::iter::repeat_n(1.5 * b.lower / scale, b.count as usize))
            .collect();
        let last = values.len() - 1;
        values[last] = pooled.amax() / scale;
        let npy = root.join(format!("grads-{}.npy", c["step"]));
        write_npy(&npy, &[values.len()], TensorData::F64(&values)).unwrap();
        let analyzed: Value = serde_json::from_str(&ok(bin()
            .arg("analyze")
            .arg(&npy)
            .args(["--scales=-24..48", "--json"])
            .output()
            .unwrap()))
        .unwrap();
        let (mine, theirs) = (&s["window"], &analyzed["recommendation"]);
        for key in ["min_log2_scale", "max_log2_scale"] {
            assert_eq!(mine[key], theirs[key], "step {}: {key}", c["step"]);
        }
    }

    // The window's top over the whole run: the lowest of every step's high edge (the largest
    // 2^k that keeps its grad_amax finite in fp16), first reached at the step named.
    for (run, dir) in runs[1..].iter().zip([&master, &dynamic]) {
        let mut want: Option<(i64, u64)> = None;
        for line in json_lines(&dir.join("metrics.jsonl")) {
            let Some(a) = line["grad_amax"].as_f64() else {
                continue;
            };
            let k = i64::from(mixprec::stats::recommend::overflow_log2_scale(FP16, a).unwrap()) - 1;
            if want.is_none_or(|(top, _)| k < top) {
                want = Some((k, line["step"].as_u64().unwrap()));
            }
        }
        let (k, step) = want.unwrap();
        assert_eq!(
            run["window_top"],
            serde_json::json!([k, step]),
            "{}",
            run["name"]
        );
        assert_eq!(run["bounded_steps"], 0);
    }

    // The shadow, as shadow.jsonl has it: all of the earlier layers' weight gradients lost in
    // fp16-master (rounding counts there: no underflow), nothing in fp32, under 1% with scaling.
    let shadow = json_lines(&master.join("shadow.jsonl"));
    let points = runs[1]["shadow"].as_array().unwrap();
    let n: usize = shadow
        .iter()
        .map(|r| r["sites"].as_array().unwrap().len())
        .sum();
    assert_eq!(points.len(), n);
    let first = &shadow[0]["sites"];
    for layer in ["0.linear", "2.linear"] {
        let site = first
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["layer"] == layer && s["tensor"] == "weight_grad")
            .unwrap();
        assert!(site["norm_lost"].as_f64().unwrap() > 0.99, "{site}");
        let counted = summaries[0]["gradients"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g[0] == layer && g[1] == "weight_grad")
            .unwrap();
        assert_eq!(counted[2]["underflow"], 0.0, "{counted}");
    }
    let worst = |run: &Value| {
        run["shadow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["norm_lost"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    assert_eq!(worst(&runs[0]), 0.0);
    assert!(worst(&runs[2]) < 0.01);

    // The findings in words, each linked to a figure of the page.
    let findings = report["findings"].as_array().unwrap();
    let text: Vec<&str> = findings
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert!(
        text.iter().any(|t| t
            .contains("At step 1, 100% of 4.linear's activation gradients underflowed in fp16")
            && t.contains("lost all of their weight gradients' norm: 0.linear, 2.linear")
            && t.contains("the run's loss scale, 2^0 (no loss scaling), lay below it")),
        "{text:#?}"
    );
    assert!(stdout.contains("At step 1, 100% of 4.linear"));
    let figures: Vec<&str> = report["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for f in findings {
        assert!(figures.contains(&f["figure"].as_str().unwrap()), "{f}");
    }
    for id in &figures {
        for ext in ["png", "svg"] {
            let file = out.join("figures").join(format!("{id}.{ext}"));
            assert!(
                std::fs::metadata(&file).unwrap().len() > 1000,
                "{}",
                file.display()
            );
        }
    }
    // The same directory for a report of one run: the other runs' figures go, a file of the
    // user's stays, and figures/ holds the new report's figures and that file only.
    std::fs::write(out.join("figures/mine.png"), "not mixprec's").unwrap();
    ok(make_report(&[&fp32], &out));
    let report = read_json(&out.join("report.json"));
    let mut want: Vec<String> = report["figures"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| ["png", "svg"].map(|ext| format!("{}.{ext}", f.as_str().unwrap())))
        .chain(["mine.png".to_string()])
        .collect();
    want.sort();
    let have = file_names(&out.join("figures"));
    assert!(want.len() < 2 * figures.len() + 1, "{want:?}");
    assert_eq!(have, want);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A killed run and a diverged run get reports that say so; bad input is one line and exit 2;
/// names from the user's files are escaped.
#[test]
fn unfinished_diverged_bad_and_hostile_runs() {
    let root = fresh("cases");
    let run = root.join("run");
    train("fp16-dynamic", "60", &run);
    // Cut it as a kill would: no summary, the marker back, half a last line.
    std::fs::remove_file(run.join("summary.json")).unwrap();
    std::fs::write(run.join("INCOMPLETE"), "").unwrap();
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let cut = metrics.match_indices('\n').nth(39).unwrap().0 + 30;
    std::fs::write(run.join("metrics.jsonl"), &metrics[..cut]).unwrap();
    let out = root.join("killed");
    let stdout = ok(make_report(&[&run], &out));
    assert!(
        stdout.contains(
            "did not finish (killed, crashed or still running): 40 steps were written of 60 planned"
        ),
        "{stdout}"
    );
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(page.contains("UNFINISHED"));

    // A finished run whose metrics.jsonl was emptied afterwards: said, not reported silently.
    let edited = root.join("edited");
    train("fp16-dynamic", "20", &edited);
    std::fs::write(edited.join("metrics.jsonl"), "").unwrap();
    let stdout = ok(make_report(&[&edited], &root.join("edited-report")));
    assert!(
        stdout.contains("summary.json says 20 steps, but metrics.jsonl holds 0"),
        "{stdout}"
    );

    let lstm = root.join("lstm");
    ok(bin()
        .args([
            "train",
            "--config",
            "analyses/lstm/fp16-pure.json",
            "--steps",
            "30",
            "--out",
        ])
        .arg(&lstm)
        .output()
        .unwrap());
    let stdout = ok(make_report(&[&lstm], &root.join("lstm-report")));
    assert!(stdout.contains("fp16-pure diverged"), "{stdout}");
    assert!(
        stdout.contains("the first inf or NaN was stored at step 1 in 0.embedding update"),
        "{stdout}"
    );

    let nothing = root.join("nothing");
    let (n, r) = (nothing.to_str().unwrap(), run.to_str().unwrap());
    #[rustfmt::skip]
    let cases: [(&[&str], &str); 4] = [
        (&[n], "not a run directory"),
        (&[r, r], "given twice"),
        (&[r, "--step", "7"], "step 7 was not captured (capture steps: 1, 50)"),
        (&[r, "--format", "fp17"], "unknown format 'fp17'"),
    ];
    for (args, needle) in cases {
        let e = fails(make_report(args, &root.join("x")));
        assert!(e.contains(needle), "{e}");
    }

    // A recipe named by the user with markup in it.
    let config = root.join("hostile.json");
    let mut recipe = read_json(Path::new("analyses/underflow/fp16-master.json"));
    let full: Value = serde_json::from_str(&ok(bin()
        .args([
            "train",
            "--print-config",
            "--config",
            "analyses/underflow/fp16-master.json",
        ])
        .output()
        .unwrap()))
    .unwrap();
    recipe["recipe"] = full["recipe"].clone();
    recipe["recipe"]["name"] = "<script>alert(1)</script>".into();
    recipe["steps"] = 5.into();
    std::fs::write(&config, recipe.to_string()).unwrap();
    let hostile = root.join("hostile");
    ok(bin()
        .args(["train", "--config"])
        .arg(&config)
        .arg("--out")
        .arg(&hostile)
        .output()
        .unwrap());
    ok(make_report(&[&hostile], &root.join("hostile-report")));
    let page = std::fs::read_to_string(root.join("hostile-report/index.html")).unwrap();
    assert!(!page.contains("<script"), "unescaped");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    std::fs::remove_dir_all(&root).unwrap();
}

/// The page in headless Chromium with no network: every section and figure is in the DOM, no
/// console message, nothing referenced outside the page but its own figure files; and a
/// screenshot is taken. Chromium comes from `scripts/test` (which installs it when missing);
/// set MIXPREC_NO_BROWSER=1 to skip this test knowingly.
#[test]
fn the_page_renders_in_a_real_browser() {
    if std::env::var_os("MIXPREC_NO_BROWSER").is_some() {
        eprintln!("skipped: MIXPREC_NO_BROWSER is set");
        return;
    }
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no Chromium: run scripts/test (it installs it), or set MIXPREC_NO_BROWSER=1");
    let root = fresh("browser");
    train("fp16-dynamic", "100", &root.join("run"));
    let out = root.join("report");
    ok(make_report(&[root.join("run")], &out));
    let index = out.join("index.html");
    let page = std::fs::read_to_string(&index).unwrap();
    // Nothing to fetch: no script, stylesheet, image or frame element, and links only to the
    // page's anchors and its own figure files.
    for tag in ["<script", "<link", "<img", "<iframe", "@import", "url("] {
        assert!(!page.contains(tag), "{tag}");
    }
    for (at, _) in page.match_indices("href=\"") {
        let target = &page[at + 6..];
        assert!(
            target.starts_with('#') || target.starts_with("figures/"),
            "{}",
            &target[..40]
        );
    }
    let browse = |extra: &[&str]| {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--proxy-server=127.0.0.1:9",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .args(extra)
            .arg(format!(
                "file://{}",
                index.canonicalize().unwrap().display()
            ))
            .output()
            .unwrap()
    };
    let dom = browse(&["--dump-dom"]);
    assert!(dom.status.success(), "{dom:?}");
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(!log.contains("CONSOLE"), "console output: {log}");
    for section in [
        "findings",
        "runs",
        "curves",
        "information",
        "figure3",
        "window",
        "swamping",
        "nonfinite",
    ] {
        assert!(
            dom_text.contains(&format!("<section id=\"{section}\"")),
            "{section}"
        );
    }
    let report = read_json(&out.join("report.json"));
    for id in report["figures"].as_array().unwrap() {
        let id = id.as_str().unwrap();
        let at = dom_text
            .find(&format!("<figure id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id}"));
        assert!(
            dom_text[at..].find("<svg").unwrap() < 200,
            "{id} has its SVG inline"
        );
    }
    // Nothing runs past the right edge of a narrow window: a wide table scrolls inside itself.
    // Measured by a copy of the page with a script that writes the document's width into it.
    let probe = out.join("probe.html");
    std::fs::write(
        &probe,
        page.replace(
            "</body>",
            "<script>document.body.dataset.width=document.documentElement.scrollWidth</script></body>",
        ),
    )
    .unwrap();
    let measured = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=640,4000",
            "--dump-dom",
        ])
        .arg(format!(
            "file://{}",
            probe.canonicalize().unwrap().display()
        ))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&measured.stdout);
    let width: u32 = dom
        .split("data-width=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no width measured: {measured:?}"));
    assert!(
        width <= 640,
        "the page is {width} px wide in a 640 px window"
    );
    let shot = root.join("shot.png");
    let taken = browse(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1280,2400",
    ]);
    assert!(taken.status.success(), "{taken:?}");
    assert!(std::fs::metadata(&shot).unwrap().len() > 20_000);
    std::fs::remove_dir_all(&root).unwrap();
}

/// `analyze --report`: the same kind of page, whose report.json is what `--json` prints; and
/// neither command replaces a file in its output directory that mixprec did not write.
#[test]
fn analyze_writes_the_same_kind_of_page_and_replaces_only_its_own_files() {
    let root = fresh_dir("analyze");
    let npy = root.join("grads.npy");
    let values: Vec<f32> = (0..4000).map(|i| 1e-9 * 1.01f32.powi(i % 1500)).collect();
    write_npy(&npy, &[values.len()], TensorData::F32(&values)).unwrap();
    let out = root.join("page");
    let analyze_report = || {
        let o = bin()
            .arg("analyze")
            .arg(&npy)
            .arg("--report")
            .arg(&out)
            .output();
        o.unwrap()
    };
    let json: Value = serde_json::from_str(&ok(bin()
        .arg("analyze")
        .arg(&npy)
        .arg("--json")
        .output()
        .unwrap()))
    .unwrap();
    ok(analyze_report());
    let mut written = read_json(&out.join("report.json"));
    assert_eq!(written["written_by"], "mixprec");
    assert_eq!(written["schema"], mixprec::report::analyze::SCHEMA);
    written.as_object_mut().unwrap().remove("written_by");
    written.as_object_mut().unwrap().remove("schema");
    assert_eq!(written, json);
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert_contains(
        &page,
        &[
            "<section id=\"findings\"",
            "<section id=\"tensors\"",
            "<figure id=\"histogram\"",
            "<figure id=\"sweep\"",
            "For a training run in fp16, start the loss scale at 2^",
        ],
    );
    // Run again: its own files are replaced; a user's index.html is not.
    ok(analyze_report());
    std::fs::write(out.join("index.html"), "<p>my notes</p>").unwrap();
    let e = fails(analyze_report());
    assert!(
        e.contains("index.html: exists and was not written by mixprec"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("index.html")).unwrap(),
        "<p>my notes</p>"
    );
    let run = root.join("run");
    train("fp32", "5", &run);
    let e = fails(make_report(&[&run], &out));
    assert!(
        e.contains("index.html: exists and was not written by mixprec"),
        "{e}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A run under a block-scaled recipe names its operands' block formats (not their element
/// formats) in report.json and on the page.
#[test]
fn a_block_recipe_run_names_its_block_formats() {
    let root = fresh("block");
    let run = root.join("mxfp8");
    ok(bin()
        .args(["train", "--config", "analyses/low-precision/fp32.json"])
        .args(["--recipe", "mxfp8", "--steps", "3", "--out"])
        .arg(&run)
        .output()
        .unwrap());
    let out = root.join("report");
    ok(make_report(&[&run], &out));
    let report = read_json(&out.join("report.json"));
    let formats = &report["runs"][0]["formats"];
    assert_eq!(formats["gemm_input"], "mxfp8-e4m3", "{formats}");
    assert_eq!(formats["gemm_weight"], "mxfp8-e4m3", "{formats}");
    assert_eq!(formats["gemm_grad_output"], "mxfp8-e5m2", "{formats}");
    assert_eq!(formats["weight"], "fp32", "{formats}");
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        page.contains("mxfp8-e5m2"),
        "the page does not name mxfp8-e5m2"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A run whose first capture steps stored no finite gradient (a loss scale far too large, as
/// the PyTorch example's step 1 at 2^24): by default the histogram figures show the first capture
/// step with something to draw and say which steps they passed over; those steps have no window
/// (not the whole search range) and section 6 says "no finite gradient" there; an explicit
/// `--step` at such a step is drawn as asked, with a note that it is empty.
#[test]
fn capture_steps_without_a_finite_gradient_have_no_window() {
    let root = fresh("no-finite");
    let run = root.join("run");
    ok(bin()
        .args(["train", "--recipe", "fp16-dynamic", "--loss-scale", "2^60"])
        .args(["--steps", "60", "--capture-every", "20", "--out"])
        .arg(&run)
        .output()
        .unwrap());
    // Steps 1 and 20: every gradient value stored inf or NaN.
    let captures: Vec<String> = json_lines(&run.join("captures.jsonl"))
        .into_iter()
        .map(|mut r| {
            if r["step"] == 1 || r["step"] == 20 {
                for site in r["sites"].as_array_mut().unwrap() {
                    if is_gradient(site) {
                        let v = &site["values"];
                        let n: u64 = v["bins"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|b| b.as_u64().unwrap())
                            .sum::<u64>()
                            + ["zeros", "nan", "pos_inf", "neg_inf"]
                                .iter()
                                .map(|k| v[k].as_u64().unwrap())
                                .sum::<u64>();
                        site["values"] = serde_json::json!({
                            "sub_bins_log2": v["sub_bins_log2"], "first_bin": 0, "bins": [],
                            "zeros": 0, "nan": n, "pos_inf": 0, "neg_inf": 0, "negatives": 0,
                            "amax": 0.0, "min_nonzero": null, "sum_abs": 0.0, "sum_sq": 0.0
                        });
                    }
                }
            }
            r.to_string()
        })
        .collect();
    std::fs::write(run.join("captures.jsonl"), captures.join("\n") + "\n").unwrap();

    let out = root.join("report");
    ok(make_report(&[&run], &out));
    let report = read_json(&out.join("report.json"));
    let r = &report["runs"][0];
    for c in &r["captures"].as_array().unwrap()[..2] {
        assert_eq!(c["finite_gradients"], 0, "{c}");
        assert_eq!(
            c["window"],
            serde_json::json!({"log2_scale": null, "min_log2_scale": null, "max_log2_scale": null})
        );
    }
    assert!(r["captures"][2]["finite_gradients"].as_u64().unwrap() > 0);
    assert_eq!(r["histograms"]["step"], 40);
    assert_eq!(r["histograms"]["passed_over"], serde_json::json!([1, 20]));
    let page = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert_contains(
        &page,
        &[
            "activation gradients of every layer at step 40",
            "Step 40 is the first capture step with a finite nonzero activation gradient: at steps 1, 20 every value stored was zero, inf or NaN.",
            "fp16-dynamic: in fp16, no finite gradient at steps 1, 20; the window of the unscaled gradients was 2^",
            "At 2 of 4 capture steps (steps 1, 20) every gradient value stored was zero, inf or NaN: no finite gradient, no window, and no band in the figure.",
        ],
    );
    // No evaluation but the last: no metric chart, and the heading says only what is drawn.
    assert!(
        page.contains("2. Loss and loss scale") && !page.contains("Loss, metric"),
        "the heading of section 2"
    );
    // -24 is only the bottom of the search range.
    assert!(!page.contains("was 2^-24.."), "a made-up window");
    // The first run is drawn blue: its stored and recommended curves are not both blue.
    let svg = std::fs::read_to_string(out.join("figures").join("figure3-0.svg")).unwrap();
    let colours: std::collections::BTreeSet<&str> = svg
        .split("<polyline")
        .filter(|e| e.contains("stroke-width=\"2\""))
        .filter_map(|e| e.split("stroke=\"").nth(1)?.get(..7))
        .collect();
    assert!(
        svg.contains("scaled by the recommended") && colours.len() == 3,
        "unscaled, stored and recommended curves in three colours: {colours:?}"
    );

    // Asked for explicitly: drawn as asked, and said to be empty.
    let asked = root.join("step-1");
    ok(bin()
        .arg("report")
        .arg(&run)
        .args(["--step", "1", "--out"])
        .arg(&asked)
        .output()
        .unwrap());
    let page = std::fs::read_to_string(asked.join("index.html")).unwrap();
    assert_contains(
        &page,
        &[
            "activation gradients of every layer at step 1,",
            "At step 1 every activation gradient stored was zero, inf or NaN: there is nothing to draw (--step chooses another capture step).",
        ],
    );
    // No legend for curves that are not drawn.
    let svg = std::fs::read_to_string(asked.join("figures").join("figure3-0.svg")).unwrap();
    assert!(
        !svg.contains("scaled by the run's"),
        "a legend without a curve"
    );
}

/// The keys that the table `nth` (from 0) under the heading of `doc` that contains `heading`
/// lists in its first column (a row of several, `a`, `b`, lists each), in order.
fn documented_keys(doc: &str, heading: &str, nth: usize) -> Vec<String> {
    let text = std::fs::read_to_string(doc).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| !(l.starts_with('#') && l.contains(heading)));
    assert!(lines.next().is_some(), "{doc}: no heading '{heading}'");
    let section: Vec<&str> = lines.take_while(|l| !l.starts_with('#')).collect();
    let table = section
        .split(|l| !l.starts_with('|'))
        .filter(|rows| !rows.is_empty())
        .nth(nth)
        .unwrap_or_else(|| panic!("{doc}: no table {nth} under '{heading}'"));
    // The header row and the separator row name no key.
    let first_cells = table
        .iter()
        .skip(2)
        .map(|row| row.split('|').nth(1).unwrap());
    first_cells
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_string))
        .collect()
}

/// Each page kind's report.json opens with its `schema` and holds exactly the keys its chapter
/// documents, in order (docs/src/report.md for the run, grid and analyze pages, plan.md for the
/// plan's), so that the tables are the contract a reader can rely on.
#[test]
fn report_json_holds_its_schema_and_the_documented_keys() {
    let root = fresh_dir("documented-keys");
    let check = |json: &Value, schema: &str, doc: &str, heading: &str| {
        assert_eq!(json["schema"], schema, "{heading}");
        assert_eq!(keys(json), documented_keys(doc, heading, 0), "{heading}");
    };
    let run = root.join("run");
    train("fp16-dynamic", "60", &run);
    ok(make_report(&[&run], &root.join("runs-page")));
    let page = read_json(&root.join("runs-page/report.json"));
    check(
        &page,
        mixprec::report::page::SCHEMA,
        "docs/src/report.md",
        "Run page",
    );
    let run_keys = documented_keys("docs/src/report.md", "Run page", 1);
    assert_eq!(keys(&page["runs"][0]), run_keys);

    let mut base: Value = read_json(Path::new("analyses/underflow/grid.json"));
    base["steps"] = 20.into();
    let config = root.join("grid.json");
    std::fs::write(&config, base.to_string()).unwrap();
    let grid = root.join("grid");
    let vary = [
        "--vary",
        "recipe=fp32,fp16-master",
        "--vary",
        "loss_scale=2^0,2^8",
    ];
    ok(common::with_config("grid", &config, &vary, &grid, "2"));
    ok(make_report(&[&grid], &root.join("grid-page")));
    let page = read_json(&root.join("grid-page/report.json"));
    check(
        &page,
        mixprec::report::grid::SCHEMA,
        "docs/src/report.md",
        "Grid page",
    );
    let cell_keys = documented_keys("docs/src/report.md", "Grid page", 1);
    assert_eq!(keys(&page["cells"][0]), cell_keys);

    let npy = root.join("grads.npy");
    let values: Vec<f32> = (0..2000).map(|i| 1e-7 * 1.01f32.powi(i % 900)).collect();
    write_npy(&npy, &[values.len()], TensorData::F32(&values)).unwrap();
    let out = root.join("analyze-page");
    ok(bin()
        .arg("analyze")
        .arg(&npy)
        .arg("--report")
        .arg(&out)
        .output()
        .unwrap());
    let page = read_json(&out.join("report.json"));
    check(
        &page,
        mixprec::report::analyze::SCHEMA,
        "docs/src/report.md",
        "Analyze's page",
    );

    let plan = root.join("plan");
    let flags = ["--recipe", "mxfp4", "--flops-share", "0.6"];
    ok(common::with_config(
        "plan",
        Path::new("analyses/plan/mlp/fp32.json"),
        &flags,
        &plan,
        "2",
    ));
    ok(make_report(&[&plan], &root.join("plan-page")));
    let page = read_json(&root.join("plan-page/report.json"));
    check(
        &page,
        mixprec::report::plan::SCHEMA,
        "docs/src/plan.md",
        "report.json",
    );
    std::fs::remove_dir_all(&root).unwrap();
}
