//! Tests of whole runs: the run directory's files, capture, periodic evaluation.

use super::*;
use crate::run::*;
use std::path::PathBuf;

fn small(recipe: &str) -> TrainConfig {
    TrainConfig {
        recipe: crate::recipe::Recipe::preset(recipe).unwrap(),
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
    let s = train(&small("fp16-dynamic"), &dir, &mut |_| seen += 1).unwrap();
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
    let config: TrainConfig = TrainConfig::from_file(&dir.join("config.json")).unwrap();
    assert_eq!(config, small("fp16-dynamic"));
    // A second run into the same directory is refused.
    assert!(
        train(&small("fp32"), &dir, &mut |_| {})
            .unwrap_err()
            .to_string()
            .contains("not empty")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The parts of optimizer state each optimizer's run directory names are those of
/// [`OPTIMIZER_PARTS`] for its kind, all of them.
#[test]
fn optimizers_store_the_parts_the_table_names() {
    use crate::recipe::class::OPTIMIZER_PARTS;
    use crate::train::optim::OptimizerConfig;
    let optimizers = [
        (
            "sgd",
            OptimizerConfig::Sgd {
                lr: 0.1,
                momentum: 0.9,
            },
        ),
        ("adam", small("fp32").optimizer),
    ];
    for (kind, optimizer) in optimizers {
        let dir = tempdir(&format!("parts-{kind}"));
        let config = TrainConfig {
            optimizer,
            steps: 5,
            ..small("fp32")
        };
        train(&config, &dir, &mut |_| {}).unwrap();
        let captures = std::fs::read_to_string(dir.join("captures.jsonl")).unwrap();
        let first: CaptureRecord = serde_json::from_str(captures.lines().next().unwrap()).unwrap();
        let mut parts: Vec<String> = first.sites.iter().filter_map(|s| s.part.clone()).collect();
        parts.sort();
        parts.dedup();
        let mut want: Vec<&str> = OPTIMIZER_PARTS
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, part)| *part)
            .collect();
        want.sort_unstable();
        assert_eq!(parts, want, "{kind}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn capture_sees_every_storage_point() {
    let dir = tempdir("capture");
    train(&small("fp16-pure"), &dir, &mut |_| {}).unwrap();
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
        let summary = train(&config, &dir, &mut |_| {}).unwrap();
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
    train(&config, &dir, &mut |_| {}).unwrap();
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

/// The reader gives back what the writer wrote, typed: eval lines, schema versions, the summary.
#[test]
fn the_reader_reads_what_the_writer_wrote() {
    let dir = tempdir("reader");
    let config = TrainConfig {
        eval_every: 4,
        ..small("fp16-dynamic")
    };
    let summary = train(&config, &dir, &mut |_| {}).unwrap();
    let r = RunDir::open(&dir).unwrap();
    assert!(r.is_complete() && r.schema == schema::SCHEMA);
    assert_eq!(r.summary.as_ref(), Some(&summary));
    assert_eq!(
        serde_json::from_value::<TrainConfig>(r.config.clone()).unwrap(),
        config
    );
    assert_eq!(r.recipe_name(), "fp16-dynamic");
    let steps: Vec<StepRecord> = r.steps().unwrap().map(Result::unwrap).collect();
    assert_eq!(steps.len(), 12);
    let evals: Vec<u64> = steps
        .iter()
        .filter(|s| s.eval.is_some())
        .map(|s| s.step)
        .collect();
    assert_eq!(evals, [4, 8, 12]);
    assert_eq!(
        steps[11].eval.as_ref().unwrap().value,
        summary.eval_metric.value
    );
    let captures: Vec<CaptureRecord> = r.captures().unwrap().map(Result::unwrap).collect();
    assert_eq!(captures.len(), 3);
    assert!(r.shadow().unwrap().is_none());
    // Both JSON files carry the version first; config.json is a valid --config.
    for name in [CONFIG, SUMMARY] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(text.starts_with("{\n  \"schema\": 1,"), "{name}: {text}");
    }
    assert_eq!(TrainConfig::from_file(&dir.join(CONFIG)).unwrap(), config);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A recorded run's config: its recipe (formats and the scaler's policy) read back by
/// `RunDir::recipe` as a `train` run's is; a recorded run written before recorders wrote a recipe
/// has none, and a `train` run's recipe is its config's.
#[test]
fn a_recorded_config_gives_its_recipe() {
    let recipe = Recipe {
        name: "pytorch-fp16".into(),
        loss_scaling: "gradscaler:init_scale=2^12,growth_interval=7"
            .parse()
            .unwrap(),
        ..Recipe::preset("fp16-dynamic").unwrap()
    };
    let config = RecordedConfig {
        source: "pytorch".into(),
        recipe: recipe.clone(),
        format: crate::format::FP16,
        capture_every: 10,
        about: serde_json::from_str(r#"{"model": "Tiny", "layers": ["a", "b"]}"#).unwrap(),
    };
    let dir = tempdir("recorded");
    let w = RunWriter::create(&dir, &config, false).unwrap();
    drop(w);
    let r = RunDir::open(&dir).unwrap();
    assert!(serde_json::from_value::<TrainConfig>(r.config.clone()).is_err());
    assert_eq!(r.recipe(), Some(recipe));
    assert_eq!(r.recorded_format(), Some(crate::format::FP16));
    let back: RecordedConfig = serde_json::from_value(r.config.clone()).unwrap();
    assert_eq!(back, config);
    std::fs::remove_dir_all(&dir).unwrap();
    // Before recorders wrote one: a recipe of a name only.
    let old = serde_json::json!({"source": "pytorch", "recipe": {"name": "x"}, "format": "fp16"});
    let w = RunWriter::create(&dir, &old, false).unwrap();
    drop(w);
    assert_eq!(RunDir::open(&dir).unwrap().recipe(), None);
    std::fs::remove_dir_all(&dir).unwrap();
    let trained = tempdir("recipe-of-train");
    train(&small("fp16-dynamic"), &trained, &mut |_| {}).unwrap();
    let r = RunDir::open(&trained).unwrap();
    assert_eq!(
        r.recipe(),
        Some(
            serde_json::from_value::<TrainConfig>(r.config.clone())
                .unwrap()
                .recipe
        )
    );
    std::fs::remove_dir_all(&trained).unwrap();
}

/// A run cut short: the marker stays, the logs hold whole lines up to the cut, a cut-off last
/// line is ignored, a bad line in the middle is an error naming it, and training into the
/// directory again says that it holds an unfinished run.
#[test]
fn an_unfinished_run_is_read_up_to_its_last_whole_line() {
    let dir = tempdir("unfinished");
    train(&small("fp16-master"), &dir, &mut |_| {}).unwrap();
    std::fs::remove_file(dir.join(SUMMARY)).unwrap();
    std::fs::write(dir.join(INCOMPLETE), "killed\n").unwrap();
    let metrics = std::fs::read_to_string(dir.join(METRICS)).unwrap();
    let cut = metrics.match_indices('\n').nth(6).unwrap().0 + 20;
    std::fs::write(dir.join(METRICS), &metrics[..cut]).unwrap();
    let r = RunDir::open(&dir).unwrap();
    assert!(!r.is_complete() && r.summary.is_none());
    let steps: Vec<u64> = r.steps().unwrap().map(|s| s.unwrap().step).collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6, 7]);
    let e = train(&small("fp32"), &dir, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("unfinished run"), "{e}");
    // In the middle of the file, a bad line is an error with its number.
    let mut lines: Vec<&str> = metrics.lines().collect();
    lines[2] = "{\"step\": 3,";
    std::fs::write(dir.join(METRICS), lines.join("\n") + "\n").unwrap();
    let results: Vec<_> = RunDir::open(&dir).unwrap().steps().unwrap().collect();
    assert_eq!(results.len(), 3);
    let e = results[2].as_ref().unwrap_err().to_string();
    assert!(e.contains("metrics.jsonl: line 3"), "{e}");
    // Not a run directory at all.
    let e = RunDir::open(&dir.join("nothing")).unwrap_err().to_string();
    assert!(e.contains("not a run directory"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The per-step counts agree with the captures, which are formed by another path (histograms of
/// the values before rounding, and the rounding counts per site): on capture steps the values
/// stored per class are the captured values, and the rounding counts are their sums; `grad_amax`
/// is the captured gradients' amax over the loss scale.
#[test]
fn per_step_counts_agree_with_the_captures() {
    for recipe in [
        "fp16-master",
        "fp16-pure",
        "fp8-hybrid",
        "fp8-every-store",
        "fp32",
    ] {
        let dir = tempdir(&format!("counts-{recipe}"));
        let mut config = small(recipe);
        config.loss_multiplier = 2f64.powi(-20); // some gradients underflow in fp16
        train(&config, &dir, &mut |_| {}).unwrap();
        let r = RunDir::open(&dir).unwrap();
        let steps: Vec<StepRecord> = r.steps().unwrap().map(Result::unwrap).collect();
        for c in r.captures().unwrap().map(Result::unwrap) {
            let s = &steps[c.step as usize - 1];
            assert_eq!(c.loss_scale, Some(s.loss_scale));
            for class in Class::ALL {
                let sites: Vec<&SiteCapture> =
                    c.sites.iter().filter(|x| x.tensor == class).collect();
                let counts = s.counts.get(&class).copied().unwrap_or_default();
                if class == Class::Master && recipe != "fp16-pure" {
                    assert!(sites.is_empty());
                    continue;
                }
                let stored: u64 = sites.iter().map(|x| x.values.count()).sum();
                let under: u64 = sites.iter().map(|x| x.rounding.underflow).sum();
                let sub: u64 = sites.iter().map(|x| x.rounding.subnormal).sum();
                let nonfinite: u64 = sites.iter().map(|x| x.values.nonfinite()).sum();
                let what = format!("{recipe} step {} {class:?}", c.step);
                assert_eq!(counts.stored, stored, "{what}");
                assert_eq!((counts.underflow, counts.subnormal), (under, sub), "{what}");
                assert_eq!(counts.nonfinite, nonfinite, "{what}");
            }
            let amax = c
                .sites
                .iter()
                .filter(|x| matches!(x.tensor, Class::ActivationGrad | Class::WeightGrad))
                .map(|x| x.values.amax())
                .fold(0.0, f64::max);
            let want = (amax > 0.0).then(|| amax / s.loss_scale);
            assert_eq!(s.grad_amax, want, "{recipe}");
        }
        // The loss multiplier makes low-precision gradients underflow, and the counts say so
        // (in fp8-hybrid, as in Transformer Engine, activation gradients stay in FP32).
        let under: u64 = steps
            .iter()
            .map(|s| s.counts[&Class::ActivationGrad].underflow)
            .sum();
        let rounded = config.recipe.format(Class::ActivationGrad) != crate::format::FP32;
        assert_eq!(under > 0, rounded, "{recipe}: {under}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The FP32 shadow changes nothing in training, and measures what it should: an fp32 run equals
/// its shadow exactly; an fp16 run without loss scaling whose gradients underflow loses most of
/// the earlier layers' gradients, while its rounding counts there say nothing underflowed.
#[test]
fn the_shadow_changes_nothing_and_measures_the_loss() {
    let mut underflowing = small("fp16-master");
    underflowing.loss_multiplier = 2f64.powi(-28);
    for (name, config) in [("fp32", small("fp32")), ("fp16", underflowing)] {
        let files = [0, 3].map(|shadow_every| {
            let dir = tempdir(&format!("shadow-{name}-{shadow_every}"));
            let config = TrainConfig {
                shadow_every,
                ..config.clone()
            };
            let s = train(&config, &dir, &mut |_| {}).unwrap();
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
            let logs = read(METRICS) + &read(CAPTURES);
            let shadow: Vec<ShadowRecord> = RunDir::open(&dir)
                .unwrap()
                .shadow()
                .unwrap()
                .map(|r| r.map(Result::unwrap).collect())
                .unwrap_or_default();
            std::fs::remove_dir_all(&dir).unwrap();
            (
                logs,
                Summary {
                    wall_seconds: 0.0,
                    ..s
                },
                shadow,
            )
        });
        assert!(files[0].0 == files[1].0, "{name}: logs differ");
        assert_eq!(files[0].1, files[1].1, "{name}");
        assert!(files[0].2.is_empty());
        let shadow = &files[1].2;
        assert_eq!(
            shadow.iter().map(|r| r.step).collect::<Vec<_>>(),
            [1, 3, 6, 9, 12]
        );
        let first = &shadow[0];
        let layers: Vec<(&str, Class)> = first
            .sites
            .iter()
            .map(|s| (s.layer.as_str(), s.tensor))
            .collect();
        assert!(layers.contains(&("0.linear", Class::WeightGrad)));
        assert!(layers.contains(&("loss", Class::ActivationGrad)));
        for s in &first.sites {
            if name == "fp32" {
                assert_eq!(
                    (s.relative_error, s.cosine, s.zeroed, s.norm_lost),
                    (0.0, 1.0, 0.0, 0.0),
                    "{s:?}"
                );
            } else if s.layer == "0.linear" {
                assert!(s.norm_lost > 0.9 && s.zeroed > 0.9, "{s:?}");
            }
        }
    }
}

/// `small(base)` with `keep` (a JSON object of patterns to recipes).
fn kept(base: &str, keep: &str) -> TrainConfig {
    let mut recipe = serde_json::to_value(Recipe::preset(base).unwrap()).unwrap();
    recipe["keep"] = serde_json::from_str(keep).unwrap();
    TrainConfig {
        recipe: Recipe::from_value(recipe).unwrap(),
        ..small(base)
    }
}

/// Every layer kept in FP32: the run is the FP32 run, bit for bit (every step's loss and
/// counts), whatever the base recipe casts.
#[test]
fn keeping_every_layer_in_fp32_trains_the_fp32_bits() {
    let (a, b) = (tempdir("keep-all"), tempdir("keep-fp32"));
    train(&kept("nvfp4", r#"{"*": "fp32"}"#), &a, &mut |_| {}).unwrap();
    train(&small("fp32"), &b, &mut |_| {}).unwrap();
    let metrics = |d: &PathBuf| std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics(&a), metrics(&b));
    // The recipe with its keep is what the run directory records, and reads back.
    let r = RunDir::open(&a).unwrap();
    assert_eq!(r.recipe().unwrap().keep.0.len(), 1);
    for d in [a, b] {
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// Keeping one layer in FP32 removes that layer's operand casts, and only its: the layers
/// whose products cast their operands on a capture step.
#[test]
fn keeping_one_layer_removes_only_its_casts() {
    let cast_layers = |config: &TrainConfig, name: &str| {
        let dir = tempdir(name);
        train(config, &dir, &mut |_| {}).unwrap();
        let captures = std::fs::read_to_string(dir.join("captures.jsonl")).unwrap();
        let first: CaptureRecord = serde_json::from_str(captures.lines().next().unwrap()).unwrap();
        // The report says which layers each pattern kept.
        let read = crate::report::runs::RunData::read(&dir, &Default::default()).unwrap();
        let kept: Vec<(String, String, Vec<String>)> = read
            .kept
            .into_iter()
            .map(|k| (k.pattern, k.recipe, k.layers))
            .collect();
        let want: Vec<(String, String, Vec<String>)> = config
            .recipe
            .keep
            .0
            .iter()
            .map(|(p, r)| (p.clone(), r.name.clone(), vec![p.clone()]))
            .collect();
        assert_eq!(kept, want);
        std::fs::remove_dir_all(&dir).unwrap();
        let gemm = [Class::GemmInput, Class::GemmWeight, Class::GemmGradOutput];
        let mut layers: Vec<String> = first
            .sites
            .iter()
            .filter(|s| gemm.contains(&s.tensor))
            .map(|s| s.layer.clone())
            .collect();
        layers.dedup();
        layers
    };
    assert_eq!(
        cast_layers(&small("nvfp4"), "keep-none"),
        ["0.linear", "2.linear", "4.linear"]
    );
    assert_eq!(
        cast_layers(&kept("nvfp4", r#"{"2.linear": "fp32"}"#), "keep-one"),
        ["0.linear", "4.linear"]
    );
}

/// A kept layer's stored weights are in its recipe's format; the other layers' in the base's.
#[test]
fn a_kept_layer_stores_its_weights_in_its_format() {
    let config = kept("fp32", r#"{"0.linear": "bf16-master"}"#);
    let (_, Job::Classifier(t)) = build(&config).unwrap() else {
        panic!("a classifier")
    };
    let bf16 = |xs: &Array2<f32>| xs.iter().all(|&x| x.to_bits() & 0xffff == 0);
    let params = t.model.params();
    let names = t.precision.layers();
    for q in params.iter().filter(|q| q.name == "weight") {
        let layer = &names[q.site];
        assert_eq!(bf16(&q.weight), layer == "0.linear", "{layer}");
        // The master weights are global: FP32 in every layer.
        assert!(!bf16(&q.master), "{layer}");
    }
}

/// A pattern that matches no layer is an error naming it, before anything is written.
#[test]
fn a_keep_pattern_that_matches_nothing_is_an_error() {
    let dir = tempdir("keep-nothing");
    let e = train(&kept("nvfp4", r#"{"*.conv2d": "fp32"}"#), &dir, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("keep pattern '*.conv2d'") && e.contains("0.linear"),
        "{e}"
    );
    assert!(!dir.exists());
}
