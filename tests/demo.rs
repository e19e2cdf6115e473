//! `mixprec demo`, the README's first command: the three runs, the page, and the summary in
//! words, with what each number says checked against the run directories it came from.

use std::path::Path;

mod common;
use common::{fails, fresh, mixprec, ok};

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_demo_tells_the_story_and_reruns_in_place() {
    let out = fresh("demo");
    let text = ok(mixprec(&["demo", "--out", out.to_str().unwrap()]));
    let runs = out.join("runs");
    let accuracy = |name: &str| {
        summary(&runs.join(name))["eval_metric"]["value"]
            .as_f64()
            .unwrap()
    };
    // The story: fp16 without scaling fails, the dynamic scaler matches fp32.
    assert!(accuracy("fp16-master") < 0.2, "{text}");
    assert!(accuracy("fp32") > 0.95 && (accuracy("fp16-dynamic") - accuracy("fp32")).abs() < 0.01);
    assert!(
        text.contains("  fp16-master (no loss scaling)      test accuracy 8.6%, failed to train"),
        "{text}"
    );
    assert!(
        !text.contains("fp32                               test accuracy 98.2%, failed"),
        "{text}"
    );
    assert!(
        text.contains("Without loss scaling, 78.0% of the nonzero gradient values")
            && text.contains("with the dynamic scaler (2^16 at the end), 3.3%"),
        "{text}"
    );
    // The recommendation is the page's (section 6, report.json), from every step's high edge:
    // no step of the fp32 run overflows fp16 at the printed init_scale (at 2^36, 29 of its 800
    // steps did).
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report").join("report.json")).unwrap())
            .unwrap();
    let fp32 = &report["runs"][0];
    assert_eq!(fp32["window_top"], serde_json::json!([35, 31]));
    assert_eq!(fp32["window_rerun_top"]["log2_scale"], 34);
    assert!(
        text.contains(
            "Start with GradScaler(init_scale=2.0**35): the top of the run's gradients; it halves on overflow.\n"
        ),
        "{text}"
    );
    let init = text
        .split("GradScaler(init_scale=2.0**")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|k| k.parse::<i32>().ok())
        .expect("an init_scale");
    let metrics = std::fs::read_to_string(runs.join("fp32").join("metrics.jsonl")).unwrap();
    let overflowing = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["grad_amax"].as_f64().unwrap() * 2f64.powi(init) > 65504.0)
        .count();
    assert_eq!(overflowing, 0, "{text}");
    // The conclusion in three short lines: the scales predicted to train like fp32 (the predicted
    // edge up to the top for a rerun), the dynamic run's match said by the grid report's rule,
    // and why the windows' low edge is stricter.
    let conclusion: Vec<&str> = text.lines().rev().skip(1).take(3).collect();
    assert_eq!(
        conclusion,
        [
            "The windows' low edge, 2^35, is stricter: it lets 0.1% of the values underflow; matching fp32 allows 40%.",
            "Start with GradScaler(init_scale=2.0**35): the top of the run's gradients; it halves on overflow.",
            "Loss scales 2^4..2^34 are predicted to train like fp32 in fp16; the dynamic run, at 2^16, did.",
        ],
        "{text}"
    );
    assert!(conclusion.iter().all(|l| l.len() <= 110), "{text}");
    // The README quotes this output verbatim (at the default --out).
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let quoted = text.replace(&out.display().to_string(), "mixprec-demo");
    assert!(
        readme.contains(&format!("```text\n{quoted}```")),
        "the README's quote of the demo:\n{quoted}"
    );
    let index = out.join("report").join("index.html");
    assert!(
        text.contains(&format!("Report: {}", index.display())),
        "{text}"
    );
    let page = std::fs::read_to_string(&index).unwrap();
    // Section 6 says what the demo's conclusion says, in the same words.
    for said in [
        "Loss scales 2^4..2^34 are predicted to train like fp32 in fp16 (",
        "Start with GradScaler(init_scale=2.0**35): the top of the run's gradients; it halves on overflow.",
        "The windows' low edge, 2^35, is stricter: it lets 0.1% of the values underflow; matching fp32 allows 40%.",
    ] {
        assert!(page.contains(said), "section 6 does not say: {said}");
    }
    // The run that failed without diverging is said to have failed (issue 29, item 4); the
    // others are not.
    assert!(
        page.contains("fp16-master failed to train without diverging: its loss grew from"),
        "{page}"
    );
    assert!(!page.contains("fp32 failed to train") && !page.contains("fp16-dynamic failed"));
    // Its accuracy ends at chance (issue 29, case 4): the summary's chance level is the test
    // set's most common label's share, and the runs table says it too.
    assert_eq!(
        summary(&runs.join("fp16-master"))["eval_metric"]["chance"],
        0.118_387_909_319_899_25
    );
    assert!(
        page.contains("its test_accuracy ends at chance, 0.0856 (always predicting the test set's most common label scores 0.1184)"),
        "{page}"
    );
    assert!(page.contains("<td>no, but failed to train</td>"), "{page}");
    // The window findings (issue 29, case 6): the failed run's, weighed against the predicted
    // edge (2^4, the summary's); none for the dynamic run, which matched fp32 outside the
    // window: section 6 says plainly that the window is conservative there.
    assert!(
        page.contains(
            "fp16-master: the loss scale was outside the window at 4 of 9 capture steps (first at step 1: 2^0 against 2^13..2^34); below 2^4, the scale from which training is predicted to match fp32, at 2^0"
        ),
        "{page}"
    );
    assert!(
        !page.contains("fp16-dynamic: the loss scale was outside the window"),
        "{page}"
    );
    assert!(
        page.contains("Yet it trained like fp32 (test_accuracy 0.9824 against 0.9824): the window, which keeps all but 0.1% of the values, is conservative here, and leaving it cost nothing."),
        "{page}"
    );
    // A capture step with an empty window is named, not silently left out of the figure, and
    // before the range common to the others, which is said to leave it out (issue 41).
    assert!(
        page.contains("At 5 of 9 capture steps (steps 400, 500, 600, 700, 800) no single scale kept the gradients (an empty window). Apart from them, one scale lay in every window of this run"),
        "{page}"
    );
    assert!(
        page.contains("The figure has no band at a step with an empty window."),
        "{page}"
    );
    // A tensor's share and the pooled window in sentences of their own; the run's 2^0 named
    // as a scale (issue 41).
    assert!(
        page.contains("At step 1, 100% of 4.linear's activation gradients underflowed in fp16 (fp16-master). The window of the step's gradients, every layer's pooled (all but 0.1% kept), was 2^13..2^34; the run's loss scale, 2^0 (no loss scaling), lay below it."),
        "{page}"
    );
    // The fp32 run needs no loss scaling; its window is of its gradients stored in fp16.
    assert!(
        page.contains("fp32 stores its gradients in FP32, which needs no loss scaling; stored in fp16, the window"),
        "{page}"
    );
    // Swamping counts only weights with a gradient (issue 29, case 5): Adam in fp32 loses
    // almost none (0.07% on average; 7.8% when weights without a gradient counted).
    assert!(!page.contains("changed no weight (swamping"), "{page}");
    // One name a run (the recipe): the directory, the summary's label and the page agree.
    for name in ["fp32", "fp16-master", "fp16-dynamic"] {
        assert!(runs.join(name).join("config.json").is_file(), "{name}");
        assert!(text.contains(&format!("\n  {name} ")), "{name}: {text}");
        assert!(
            page.contains(&format!("runs/{name}")),
            "{name} not on the page"
        );
    }
    assert!(!page.contains("no-scaling") && !text.contains("no-scaling"));
    // A run an earlier demo named fp16-no-scaling goes on a rerun, as the others are replaced.
    let earlier = runs.join("fp16-no-scaling");
    std::fs::create_dir_all(&earlier).unwrap();
    for f in std::fs::read_dir(runs.join("fp16-master")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, earlier.join(f.file_name().unwrap())).unwrap();
    }
    // A rerun replaces the runs (the same bits: the same words).
    assert_eq!(ok(mixprec(&["demo", "--out", out.to_str().unwrap()])), text);
    assert!(!earlier.exists());
    // Something else in the runs' place is never removed.
    let other = fresh("demo-other");
    std::fs::create_dir_all(other.join("runs").join("fp32")).unwrap();
    std::fs::write(other.join("runs").join("fp32").join("notes.txt"), "mine").unwrap();
    let err = fails(mixprec(&["demo", "--out", other.to_str().unwrap()]));
    assert!(err.contains("is not a run directory"), "{err}");
    assert!(other.join("runs").join("fp32").join("notes.txt").is_file());
    // --out an existing file: said so, nothing written.
    let file = fresh("demo-file");
    std::fs::write(&file, "mine").unwrap();
    let err = fails(mixprec(&["demo", "--out", file.to_str().unwrap()]));
    assert!(
        err.contains("an existing file, not a directory") && err.contains("--out"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
}
