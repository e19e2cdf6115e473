use super::*;
use crate::format::Rounding;
use crate::train::scaler::LossScaling;

fn vary(text: &str) -> Vary {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn vary_err(text: &str) -> String {
    text.parse::<Vary>().unwrap_err().to_string()
}

fn spec(varies: &[&str], seeds: u64) -> GridSpec {
    let base = TrainConfig {
        steps: 3,
        batch: 16,
        seed: 7,
        ..TrainConfig::default()
    };
    GridSpec::new(base, varies.iter().map(|v| vary(v)).collect(), seeds).unwrap()
}

#[test]
fn lists_and_ranges_parse() {
    assert_eq!(
        vary("recipe=fp32, fp16-master,fp16-dynamic").values,
        ["fp32", "fp16-master", "fp16-dynamic"]
    );
    let r = vary("loss_scale=2^-2..2**3");
    assert_eq!(r.key, "loss_scale");
    assert_eq!(r.values, ["2^-2", "2^-1", "2^0", "2^1", "2^2", "2^3"]);
    assert_eq!(vary("loss_scale=2^30..2^30").values, ["2^30"]);
    // Commas inside brackets belong to the value; 2**k is written 2^k.
    assert_eq!(vary("x=[64],[64, 32]").values, ["[64]", "[64, 32]"]);
    assert_eq!(
        vary(r#"x={"a":1,"b":"c,d"},2"#).values,
        [r#"{"a":1,"b":"c,d"}"#, "2"]
    );
    assert_eq!(vary("optimizer.lr=2**-10,0.01").values, ["2^-10", "0.01"]);
    // A path with dots is a value, not a range.
    assert_eq!(vary("dataset=../x.csv").values, ["../x.csv"]);
}

#[test]
fn bad_varies_are_named() {
    for (text, needle) in [
        ("recipe", "expected KEY=a,b,c"),
        ("=fp32", "the key is empty"),
        ("optimizer..lr=1", "the key is empty"),
        ("seed=1,2", "--seeds"),
        (
            "loss_scale=2^5..2^1",
            "is empty: write the smaller end first",
        ),
        ("loss_scale=2^0..30", "'30' is not"),
        ("loss_scale=2^0..2^x", "'2^x' is not"),
        ("loss_scale=2^0..2^5000", "'2^5000' is not"),
        ("recipe=fp32,,fp16-master", "an empty value"),
        ("recipe=fp32,fp32", "'fp32' is given twice"),
        (
            "dataset=a/b.csv,a:b.csv",
            "would name the same run directory",
        ),
    ] {
        let e = vary_err(text);
        assert!(e.contains(needle), "{text}: {e}");
        assert!(e.starts_with("--vary"), "{e}");
    }
}

#[test]
fn shards_partition_the_grid() {
    assert_eq!(
        "2/3".parse::<Shard>().unwrap(),
        Shard { index: 2, count: 3 }
    );
    for bad in ["0/3", "4/3", "1/0", "x/2", "3", "1/2/3", "-1/2"] {
        let e = bad.parse::<Shard>().unwrap_err().to_string();
        assert!(e.contains("--shard") && e.contains(bad), "{e}");
    }
    let shards: Vec<Shard> = (1..=3).map(|index| Shard { index, count: 3 }).collect();
    for position in 0..20 {
        assert_eq!(shards.iter().filter(|s| s.holds(position)).count(), 1);
    }
    assert!((0..5).all(|p| Shard::ALL.holds(p)));
}

#[test]
fn runs_are_named_ordered_and_configured() {
    let s = spec(&["recipe=fp32,fp16-master", "loss_scale=2^0..2^2"], 2);
    let runs = s.runs().unwrap();
    // fp32 once per seed (its loss scale is inert), fp16-master at each scale.
    assert_eq!(runs.len(), 8);
    assert_eq!(runs[0].planned.name, "recipe=fp32,loss_scale=2^0,seed=7");
    assert_eq!(runs[1].planned.name, "recipe=fp32,loss_scale=2^0,seed=8");
    assert_eq!(
        (runs[0].planned.inert.clone(), runs[2].planned.inert.len()),
        (vec!["loss_scale".to_string()], 0)
    );
    assert_eq!(
        runs[2].planned.name,
        "recipe=fp16-master,loss_scale=2^0,seed=7"
    );
    assert_eq!(
        runs[7].planned.name,
        "recipe=fp16-master,loss_scale=2^2,seed=8"
    );
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.planned.position, i);
    }
    let r = &runs[7];
    assert_eq!((r.planned.seed, r.config.seed), (8, 8));
    assert_eq!(
        r.planned.values,
        [
            ("recipe".to_string(), "fp16-master".to_string()),
            ("loss_scale".to_string(), "2^2".to_string())
        ]
    );
    // fp16-master given a static scale is the fp16-static preset, honestly named.
    assert_eq!(r.config.recipe.name, "fp16-static");
    assert_eq!(
        r.config.recipe.loss_scaling,
        LossScaling::Static { scale: 4.0 }
    );
    assert_eq!(runs[0].config.recipe.name, "fp32+static");
    // Everything else is the base config's.
    assert_eq!((r.config.steps, r.config.batch), (3, 16));
    // Without --vary: the base config, once per seed.
    let plain = spec(&[], 3).runs().unwrap();
    assert_eq!(plain.len(), 3);
    assert_eq!(plain[2].planned.name, "seed=9");
    assert_eq!(plain[0].config, s.base);
}

#[test]
fn an_inert_loss_scale_is_trained_once_at_the_scale_nearest_one() {
    let names = |varies: &[&str]| -> Vec<String> {
        spec(varies, 1)
            .runs()
            .unwrap()
            .into_iter()
            .map(|r| r.planned.name)
            .collect()
    };
    // The scale nearest 2^0, the first of equals; each other key's values kept.
    assert_eq!(
        names(&["recipe=fp32", "loss_scale=2^5,2^-1,2^1,2^9"]),
        ["recipe=fp32,loss_scale=2^-1,seed=7"]
    );
    assert_eq!(
        names(&["loss_scale=2^3,2^40,2^2", "recipe=fp32,fp16-master"]),
        [
            "loss_scale=2^3,recipe=fp16-master,seed=7",
            "loss_scale=2^40,recipe=fp32,seed=7",
            "loss_scale=2^40,recipe=fp16-master,seed=7",
            "loss_scale=2^2,recipe=fp32,seed=7",
            "loss_scale=2^2,recipe=fp16-master,seed=7",
        ]
    );
    // Not a power of two, or a dynamic scaler: every value trained.
    assert_eq!(names(&["recipe=fp32", "loss_scale=2^0,3"]).len(), 2);
    assert_eq!(
        names(&["recipe=fp16-dynamic", "loss_scale=2^0,2^1"]).len(),
        2
    );
    // One value varies nothing: nothing to collapse.
    assert_eq!(
        names(&["recipe=fp32", "loss_scale=2^4"]),
        ["recipe=fp32,loss_scale=2^4,seed=7"]
    );
}

#[test]
fn nested_keys_apply_after_their_parents_and_values_are_typed() {
    let runs = spec(
        &[
            "recipe.rounding=stochastic",
            "recipe=fp16-master",
            "steps=2^2",
            "optimizer.lr=2^-4",
        ],
        1,
    )
    .runs()
    .unwrap();
    let c = &runs[0].config;
    assert_eq!(c.recipe.name, "fp16-master");
    assert_eq!(c.recipe.rounding, Rounding::Stochastic);
    assert_eq!(c.steps, 4);
    assert_eq!(c.optimizer.lr(), 0.0625);
    // JSON values, commas inside them included.
    let g = spec(
        &[
            r#"optimizer={"kind":"sgd","lr":0.5},{"kind":"adam","lr":0.01}"#,
            "mlp.width=2^3,12",
        ],
        1,
    );
    let runs = g.runs().unwrap();
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[0].config.optimizer.lr(), 0.5);
    assert_eq!(runs[3].config.optimizer.lr(), 0.01);
    assert_eq!(
        (runs[0].config.mlp.width, runs[1].config.mlp.width),
        (8, 12)
    );
    // A string key keeps a value that reads as a number as a string.
    assert_eq!(
        spec(&["dataset=12"], 1).runs().unwrap()[0].config.dataset,
        "12"
    );
}

#[test]
fn bad_keys_values_and_combinations_are_named() {
    for (varies, needle) in [
        (&["stepz=1,2"][..], "stepz"),
        (&["optimizer.nope.lr=1"], "no key optimizer.nope"),
        (&["steps.x=1"], "steps holds no keys"),
        (
            &["recipe=fp12"],
            "--vary 'recipe=fp12': recipe: invalid recipe",
        ),
        (&["steps=0,5"], "--vary 'steps=0'"),
        (&["loss_scale=0,2"], "--vary 'loss_scale=0'"),
        (&["loss_scale=2^200..2^201"], "out of f32's range"),
        (
            &["recipe=fp32,fp16-pure", "loss_scale=2^4"],
            "recipe=fp16-pure,loss_scale=2^4,seed=7",
        ),
    ] {
        let e = spec(varies, 1).runs().unwrap_err().to_string();
        assert!(e.contains(needle), "{varies:?}: {e}");
    }
    let twice = GridSpec::new(
        TrainConfig::default(),
        vec![vary("steps=1"), vary("steps=2")],
        1,
    )
    .unwrap_err()
    .to_string();
    assert!(twice.contains("varied twice"), "{twice}");
    let e = GridSpec::new(TrainConfig::default(), vec![], 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--seeds"), "{e}");
}

#[test]
fn a_directory_holds_one_grid() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g");
    let s = spec(&["steps=1,2"], 1);
    s.prepare(&g).unwrap();
    assert!(g.join(RUNS).is_dir());
    assert_eq!(GridSpec::read(&g).unwrap(), s);
    // Again (a resumed grid, another shard): fine.
    s.prepare(&g).unwrap();
    let other = spec(&["steps=1,3"], 1);
    let e = other.prepare(&g).unwrap_err().to_string();
    assert!(e.contains("another grid"), "{e}");
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "").unwrap();
    let e = s.prepare(&full).unwrap_err().to_string();
    assert!(e.contains("holds no grid.json"), "{e}");
}

#[test]
fn quoted_values_name_runs_cleanly() {
    // A JSON string is its contents, in run names and in string keys alike.
    assert_eq!(
        value_name(r#""gradscaler:init_scale=1""#),
        "gradscaler:init_scale=1"
    );
    assert_eq!(value_name("fp32"), "fp32");
    assert_eq!(value_name(r#"{"lr":0.5}"#), r#"{"lr":0.5}"#);
    let runs = spec(
        &[
            r#"scaler=static:2^0,"gradscaler:init_scale=1,growth_interval=100""#,
            r#"dataset="digits",blobs"#,
        ],
        1,
    )
    .runs()
    .unwrap();
    let names: Vec<&str> = runs.iter().map(|r| r.planned.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "scaler=static-2^0,dataset=digits,seed=7",
            "scaler=static-2^0,dataset=blobs,seed=7",
            "scaler=gradscaler-init_scale-1-growth_interval-100,dataset=digits,seed=7",
            "scaler=gradscaler-init_scale-1-growth_interval-100,dataset=blobs,seed=7",
        ]
    );
    assert_eq!(runs[0].config.dataset, "digits");
    let g = spec(
        &[r#"optimizer={"kind":"sgd","lr":0.5},{"kind":"adam","lr":0.01}"#],
        1,
    );
    assert_eq!(
        g.runs().unwrap()[0].planned.name,
        "optimizer=kind-sgd-lr-0.5,seed=7"
    );
    // A quoted and a bare spelling of one value, or two values that differ only in awkward
    // characters, would share a directory: refused.
    for text in [r#"recipe="fp32",fp32"#, "scaler=a:b,a=b"] {
        assert!(
            vary_err(text).contains("would name the same run directory"),
            "{text}"
        );
    }
}
