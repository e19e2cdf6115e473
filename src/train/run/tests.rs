//! Tests of whole runs: the run directory's files, capture, periodic evaluation.

use super::*;

fn small(recipe: &str) -> TrainConfig {
    TrainConfig {
        recipe: crate::train::Recipe::preset(recipe).unwrap(),
        steps: 12,
        batch: 32,
        capture_every: 5,
        mlp: crate::train::model::MlpConfig {
            width: 32,
            ..Default::default()
        },
        ..TrainConfig::default()
    }
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mixprec-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn writes_the_contract_files() {
    let dir = tempdir("contract");
    let mut seen = 0;
    let s = run(&small("fp16-dynamic"), &dir, &mut |_| seen += 1).unwrap();
    assert_eq!(seen, 12);
    assert_eq!(
        (s.recipe.as_str(), s.steps, s.diverged),
        ("fp16-dynamic", 12, false)
    );
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 12);
    let captures = std::fs::read_to_string(dir.join("captures.jsonl")).unwrap();
    let steps: Vec<u64> = captures
        .lines()
        .map(|l| serde_json::from_str::<CaptureRecord>(l).unwrap().step)
        .collect();
    assert_eq!(steps, vec![1, 5, 10]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    for key in [
        "recipe",
        "steps",
        "skipped_steps",
        "diverged",
        "final_loss",
        "eval_metric",
        "wall_seconds",
    ] {
        assert!(summary.get(key).is_some(), "{key}");
    }
    assert!(!dir.join("INCOMPLETE").exists());
    let config: TrainConfig =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config, small("fp16-dynamic"));
    // A second run into the same directory is refused.
    assert!(
        run(&small("fp32"), &dir, &mut |_| {})
            .unwrap_err()
            .to_string()
            .contains("not empty")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn capture_sees_every_storage_point() {
    let dir = tempdir("capture");
    run(&small("fp16-pure"), &dir, &mut |_| {}).unwrap();
    let captures = std::fs::read_to_string(dir.join("captures.jsonl")).unwrap();
    let first: CaptureRecord = serde_json::from_str(captures.lines().next().unwrap()).unwrap();
    let has = |layer: &str, tensor: Class| {
        first
            .sites
            .iter()
            .any(|s| s.layer == layer && s.tensor == tensor)
    };
    assert!(has("input", Class::Activation));
    assert!(has("0.linear", Class::Weight) && has("0.linear", Class::WeightGrad));
    assert!(has("0.linear", Class::OptimizerState) && has("0.linear", Class::Master));
    assert!(has("loss", Class::ActivationGrad));
    // Adam's state has one entry per part; epsilon underflows in fp16 state, once per parameter
    // tensor (weight and bias) per step, and is the only part with a count of 2.
    let part = |name: &str| {
        first
            .sites
            .iter()
            .find(|s| {
                s.layer == "0.linear"
                    && s.tensor == Class::OptimizerState
                    && s.part.as_deref() == Some(name)
            })
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let eps = part("adam_eps");
    assert_eq!(
        (eps.values.count(), eps.rounding.underflow),
        (2, 2),
        "{eps:?}"
    );
    assert_eq!(part("adam_m").values.count(), 64 * 32 + 32);
    assert_eq!(part("adam_v").values.count(), 64 * 32 + 32);
    assert_eq!(part("adam_denominator").values.count(), 64 * 32 + 32);
    assert!(
        first
            .sites
            .iter()
            .all(|s| s.part.is_none() || s.tensor == Class::OptimizerState)
    );
    // Histograms hold every value stored; update ratios are there for every linear layer.
    let w = first
        .sites
        .iter()
        .find(|s| s.layer == "0.linear" && s.tensor == Class::Weight)
        .unwrap();
    assert_eq!(w.values.count(), 64 * 32 + 32);
    let layers: Vec<&str> = first
        .update_ratios
        .iter()
        .map(|u| u.layer.as_str())
        .collect();
    assert_eq!(layers, ["0.linear", "2.linear", "4.linear"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run's files with `eval_every` set, and without.
fn with_and_without_eval(name: &str, config: &TrainConfig, every: u64) -> [(String, Summary); 2] {
    [every, 0].map(|eval_every| {
        let dir = tempdir(&format!("{name}-{eval_every}"));
        let config = TrainConfig {
            eval_every,
            ..config.clone()
        };
        let summary = run(&config, &dir, &mut |_| {}).unwrap();
        let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
        let captures = std::fs::read_to_string(dir.join("captures.jsonl")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        (metrics + &captures, summary)
    })
}

/// Periodic evaluation changes nothing in training: with stochastic rounding (whose stream an
/// evaluation pass also draws from), fp8 scaling (whose amax history it must not feed), the GAN
/// (whose noise stream it samples) and every model kind, the files without the `eval` keys are
/// the same bytes.
#[test]
fn periodic_evaluation_leaves_training_unchanged() {
    let stochastic = |recipe: &str| {
        let mut c = small(recipe);
        c.recipe.rounding = crate::format::Rounding::Stochastic;
        c
    };
    let gan = TrainConfig {
        model: ModelKind::Gan,
        dataset: "ring".into(),
        ..stochastic("fp16-dynamic")
    };
    let cnn = TrainConfig {
        model: ModelKind::Cnn,
        cnn: crate::train::model::CnnConfig {
            channels: 4,
            hidden: 16,
            ..Default::default()
        },
        ..stochastic("bf16-master")
    };
    let lstm = TrainConfig {
        model: ModelKind::Lstm,
        dataset: "recall".into(),
        ..stochastic("fp16-dynamic")
    };
    for (name, config) in [
        ("fp16", stochastic("fp16-master")),
        ("fp8", stochastic("fp8-hybrid")),
        ("gan", gan),
        ("cnn", cnn),
        ("lstm", lstm),
    ] {
        let [(with, s_with), (without, s_without)] = with_and_without_eval(name, &config, 4);
        let mut evals = Vec::new();
        let stripped: Vec<String> = with
            .lines()
            .map(|line| match line.find(r#","eval":"#) {
                Some(at) => {
                    let eval: serde_json::Value =
                        serde_json::from_str(&line[at + 8..line.len() - 1]).unwrap();
                    evals.push(eval);
                    format!("{}}}", &line[..at])
                }
                None => line.to_string(),
            })
            .collect();
        let without: Vec<&str> = without.lines().collect();
        assert_eq!(stripped.len(), without.len(), "{name}");
        let differ = (0..without.len()).find(|&i| stripped[i] != without[i]);
        assert!(differ.is_none(), "{name}: line {differ:?} differs");
        // Steps 4, 8 and 12; the last is the summary's evaluation, and that is unchanged too.
        assert_eq!(evals.len(), 3, "{name}");
        let last = evals.last().unwrap();
        assert_eq!(last["name"], s_with.eval_metric.name.as_str(), "{name}");
        assert_eq!(last["value"], s_with.eval_metric.value, "{name}");
        let drop_time = |s: &Summary| Summary {
            wall_seconds: 0.0,
            ..s.clone()
        };
        assert_eq!(drop_time(&s_with), drop_time(&s_without), "{name}");
    }
}

/// The evaluations are those of the model at that step: they follow the training (a model that
/// learns gets better), and differ from one step to the next.
#[test]
fn evaluation_lines_follow_training() {
    let dir = tempdir("eval-lines");
    let config = TrainConfig {
        steps: 30,
        eval_every: 10,
        capture_every: 0,
        ..small("fp32")
    };
    run(&config, &dir, &mut |_| {}).unwrap();
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let accuracy: Vec<f64> = lines
        .iter()
        .filter_map(|l| l.get("eval"))
        .map(|e| e["value"].as_f64().unwrap())
        .collect();
    assert_eq!(accuracy.len(), 3);
    assert!(lines[9]["eval"]["name"] == "test_accuracy" && lines[8].get("eval").is_none());
    assert!(
        accuracy[2] > accuracy[0] && accuracy[0] > 0.2,
        "{accuracy:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
