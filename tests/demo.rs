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
    assert!(accuracy("fp16-no-scaling") < 0.2, "{text}");
    assert!(accuracy("fp32") > 0.95 && (accuracy("fp16-dynamic") - accuracy("fp32")).abs() < 0.01);
    assert!(
        text.contains("fp16, no loss scaling      test accuracy 8.6%, failed to train"),
        "{text}"
    );
    assert!(
        !text.contains("fp32                       test accuracy 98.2%, failed"),
        "{text}"
    );
    assert!(
        text.contains("Without loss scaling, 78.0% of the nonzero gradient values")
            && text.contains("with the dynamic scaler (2^16 at the end), 3.3%"),
        "{text}"
    );
    assert!(text.contains("recommended 2^36"), "{text}");
    // The predicted edge, and the dynamic run's match said by the grid report's rule.
    assert!(
        text.contains("training in fp16 is predicted to match fp32 from 2^4 up")
            && text.contains("far below the window's conservative 2^29")
            && text.contains("the dynamic scaler's run, at 2^16, matched fp32."),
        "{text}"
    );
    let index = out.join("report").join("index.html");
    assert!(
        text.contains(&format!("Report: {}", index.display())),
        "{text}"
    );
    let page = std::fs::read_to_string(&index).unwrap();
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
        summary(&runs.join("fp16-no-scaling"))["eval_metric"]["chance"],
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
    // A capture step with an empty window is named, not silently left out of the figure.
    assert!(
        page.contains("At 5 of 9 capture steps (steps 400, 500, 600, 700, 800) no single scale kept the gradients (an empty window): the figure has no band there."),
        "{page}"
    );
    // Swamping counts only weights with a gradient (issue 29, case 5): Adam in fp32 loses
    // almost none (0.07% on average; 7.8% when weights without a gradient counted).
    assert!(!page.contains("changed no weight (swamping"), "{page}");
    for name in ["fp32", "fp16-no-scaling", "fp16-dynamic"] {
        assert!(page.contains(name), "{name} not on the page");
    }
    // A rerun replaces the runs (the same bits: the same words).
    assert_eq!(ok(mixprec(&["demo", "--out", out.to_str().unwrap()])), text);
    // Something else in the runs' place is never removed.
    let other = fresh("demo-other");
    std::fs::create_dir_all(other.join("runs").join("fp32")).unwrap();
    std::fs::write(other.join("runs").join("fp32").join("notes.txt"), "mine").unwrap();
    let err = fails(mixprec(&["demo", "--out", other.to_str().unwrap()]));
    assert!(err.contains("is not a run directory"), "{err}");
    assert!(other.join("runs").join("fp32").join("notes.txt").is_file());
}
