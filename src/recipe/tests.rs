use super::*;
use crate::format::{FP16, FP32};

#[test]
fn every_preset_builds_and_round_trips_through_json() {
    for name in PRESET_NAMES {
        let r = Recipe::preset(name).unwrap();
        assert_eq!(r.name, name);
        let json = serde_json::to_string(&r).unwrap();
        let back: Recipe = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r, "{json}");
    }
    let e = Recipe::preset("fp17").unwrap_err().to_string();
    for name in PRESET_NAMES {
        assert!(
            e.contains(&format!(" {name},")) || e.ends_with(&format!(" {name}")),
            "{e}"
        );
    }
}

#[test]
fn only_fp32_with_a_static_power_of_two_scale_is_inert() {
    assert!(Recipe::fp32().is_fp32());
    let mut scaled = Recipe::fp32();
    scaled.name = "fp32+static".into();
    scaled.loss_scaling = LossScaling::Static { scale: 8.0 };
    assert!(scaled.is_fp32());
    assert!(scaled.loss_scale_inert(3) && scaled.loss_scale_inert(-32));
    assert!(scaled.loss_scale_inert(INERT_LOG2_SCALE));
    assert!(!scaled.loss_scale_inert(INERT_LOG2_SCALE + 1));
    let mut dynamic = scaled.clone();
    dynamic.loss_scaling = Recipe::preset("fp16-dynamic").unwrap().loss_scaling;
    assert!(dynamic.is_fp32() && !dynamic.loss_scale_inert(0));
    let mut storage = Recipe::fp32();
    storage.accumulation = Accumulation::Storage;
    assert!(storage.is_fp32());
    let mut stochastic = Recipe::fp32();
    stochastic.rounding = Rounding::Stochastic;
    assert!(!stochastic.is_fp32());
    for name in PRESET_NAMES.iter().filter(|n| **n != "fp32") {
        let r = Recipe::preset(name).unwrap();
        assert!(!r.is_fp32() && !r.loss_scale_inert(0), "{name}");
    }
}

#[test]
fn presets_say_what_the_table_says() {
    use Class::{Activation, ActivationGrad, Weight, WeightGrad};
    let pure = Recipe::preset("fp16-pure").unwrap();
    assert_eq!(pure.master_weights, FP16);
    assert_eq!(pure.optimizer_state, FP16);
    let master = Recipe::preset("fp16-master").unwrap();
    assert_eq!(master.weights, FP16);
    assert_eq!(master.master_weights, FP32);
    assert_eq!(master.loss_scaling, LossScaling::None);
    assert!(matches!(
        Recipe::preset("fp16-dynamic").unwrap().loss_scaling,
        LossScaling::Dynamic(_)
    ));
    // TE's DelayedScaling with Format.HYBRID: only GEMM operands in FP8.
    let te = Recipe::preset("fp8-hybrid").unwrap();
    assert_eq!(
        [
            te.gemm_operands.input,
            te.gemm_operands.weight,
            te.gemm_operands.grad_output
        ]
        .map(|f| f.name()),
        ["fp8-e4m3", "fp8-e4m3", "fp8-e5m2"]
    );
    for class in [Weight, Activation, ActivationGrad, WeightGrad] {
        assert_eq!(te.format(class), FP32, "{class:?}");
    }
    assert_eq!(te.fp8_scaling, Some(Fp8Scaling::default()));
    let every = Recipe::preset("fp8-every-store").unwrap();
    assert_eq!(every.weights.name(), "fp8-e4m3");
    assert_eq!(every.activation_grads.name(), "fp8-e5m2");
    assert_eq!(every.gemm_operands, GemmOperands::default());
    assert!(matches!(
        Recipe::preset("fp16-deepspeed").unwrap().loss_scaling,
        LossScaling::Dynamic(d) if d == DynamicScaling::deepspeed()
    ));
    assert!(matches!(
        Recipe::preset("fp16-megatron").unwrap().loss_scaling,
        LossScaling::Dynamic(d) if d == DynamicScaling::megatron()
    ));
}

#[test]
fn a_recipe_in_json_with_defaults() {
    let json = r#"{"name":"mine","weights":"bf16","activations":"fp16","activation_grads":"fp16",
        "weight_grads":"fp16","optimizer_state":"fp32","master_weights":"fp32",
        "accumulation":"storage","rounding":"stochastic"}"#;
    let r: Recipe = serde_json::from_str(json).unwrap();
    assert_eq!(r.accumulation, Accumulation::Storage);
    assert_eq!(r.rounding, Rounding::Stochastic);
    assert_eq!(r.fp32_ops, Fp32Ops::default());
    assert!(serde_json::from_str::<Recipe>(r#"{"name":"x"}"#).is_err());
}

/// Every name a flag accepts (aliases and any case included) is accepted in a recipe object,
/// because both go through `FromStr`; and what is written reads back.
#[test]
fn names_in_json_are_the_names_on_the_command_line() {
    let base = serde_json::to_value(Recipe::preset("fp16-master").unwrap()).unwrap();
    for (key, names) in [
        (
            "rounding",
            &[
                "rne", "nearest", "RNE", "sr", "rz", "truncate", "ru", "rd", "up",
            ][..],
        ),
        ("overflow", &["ieee", "SATURATE"]),
        ("accumulation", &["fp32", "storage"]),
    ] {
        for name in names {
            let mut v = base.clone();
            v[key] = serde_json::Value::from(*name);
            let r: Recipe =
                serde_json::from_value(v).unwrap_or_else(|e| panic!("{key} {name}: {e}"));
            let again: Recipe = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
            assert_eq!(again, r);
        }
    }
    assert_eq!(
        "rne".parse::<Rounding>().unwrap(),
        serde_json::from_str::<Rounding>("\"rne\"").unwrap()
    );
    let e = serde_json::from_str::<Rounding>("\"rnx\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid rounding mode 'rnx'"), "{e}");
}

/// `fp8-hybrid` as the code before block formats wrote it (a run's `config.json`): it reads
/// as the preset and writes back the same JSON.
#[test]
fn a_recipe_written_before_block_formats_reads_and_writes_the_same() {
    let old = r#"{"name": "fp8-hybrid", "weights": "fp32", "activations": "fp32", "activation_grads": "fp32", "weight_grads": "fp32", "optimizer_state": "fp32", "master_weights": "fp32", "accumulation": "fp32", "rounding": "nearest-even", "overflow": "saturate", "fp32_ops": {"softmax": true, "loss": true, "norm_stats": true, "reductions": true}, "loss_scaling": {"kind": "none"}, "fp8_scaling": {"amax_history_len": 1024, "margin": 0, "amax_compute_algo": "max"}, "gemm_operands": {"input": "fp8-e4m3", "weight": "fp8-e4m3", "grad_output": "fp8-e5m2"}, "allow_fp16_unscale": false}"#;
    let old_value: serde_json::Value = serde_json::from_str(old).unwrap();
    let r: Recipe = serde_json::from_str(old).unwrap();
    assert_eq!(r, Recipe::preset("fp8-hybrid").unwrap());
    assert_eq!(serde_json::to_value(&r).unwrap(), old_value);
    // A recipe without gemm_operands (older still) has none.
    let mut v = old_value.clone();
    v.as_object_mut().unwrap().remove("gemm_operands");
    let r: Recipe = serde_json::from_value(v).unwrap();
    assert_eq!(r.gemm_operands, GemmOperands::default());
}

/// Operand formats by name: number formats (aliases included) first, then block formats;
/// anything else is refused naming both kinds.
#[test]
fn operand_formats_are_named() {
    for (name, canonical, block) in [
        ("fp8-e4m3", "fp8-e4m3", false),
        ("e4m3fn", "fp8-e4m3", false),
        ("BF16", "bf16", false),
        ("e3m4", "e3m4", false),
        ("mxfp8-e4m3", "mxfp8-e4m3", true),
        ("MXFP8-E5M2", "mxfp8-e5m2", true),
        ("mxfp4", "mxfp4", true),
    ] {
        let f: OperandFormat = name.parse().unwrap();
        assert_eq!(f.to_string(), canonical);
        assert_eq!(f.block().is_some(), block, "{name}");
        let json: OperandFormat = serde_json::from_str(&format!("\"{name}\"")).unwrap();
        assert_eq!(json, f);
        assert_eq!(
            serde_json::to_string(&f).unwrap(),
            format!("\"{canonical}\"")
        );
    }
    let e = "mxfp9".parse::<OperandFormat>().unwrap_err().to_string();
    assert!(
        e.contains("unknown format 'mxfp9'") && e.contains("fp8-e4m3") && e.contains("mxfp8-e4m3"),
        "{e}"
    );
    let bad = r#"{"input": "mxfp9"}"#;
    let e = serde_json::from_str::<GemmOperands>(bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown format 'mxfp9'"), "{e}");
}

/// The block presets: only the GEMM operands cast, to the issue's formats, no delayed
/// scaling; the format of a block class is its element format, its name the block format's.
#[test]
fn block_presets_cast_only_the_operands() {
    use Class::{Activation, Master, Weight, WeightGrad};
    let mx = Recipe::preset("mxfp8").unwrap();
    let names = |r: &Recipe| {
        [Class::GemmInput, Class::GemmWeight, Class::GemmGradOutput].map(|c| r.format_name(c))
    };
    assert_eq!(names(&mx), ["mxfp8-e4m3", "mxfp8-e4m3", "mxfp8-e5m2"]);
    assert_eq!(mx.format(Class::GemmGradOutput).name(), "fp8-e5m2");
    assert_eq!(mx.fp8_scaling, None);
    assert_eq!(mx.overflow, Overflow::Saturate);
    for class in Class::STORED {
        assert_eq!(mx.format(class), FP32, "{class:?}");
        assert_eq!(mx.block_format(class), None, "{class:?}");
    }
    assert_eq!(mx.format_name(Class::Weight), "fp32");
    let nv = Recipe::preset("nvfp4").unwrap();
    assert_eq!(names(&nv), ["nvfp4", "nvfp4", "bf16"]);
    assert_eq!(nv.format(Class::GemmInput).name(), "fp4-e2m1");
    assert_eq!(nv.block_format(Class::GemmGradOutput), None);
    assert_eq!(nv.fp8_scaling, None);
    for class in [Weight, Activation, WeightGrad, Master] {
        assert_eq!(nv.format(class), FP32, "{class:?}");
    }
    // mxfp4: mxfp8's operands, every one in MXFP4 (E2M1 elements, E8M0 scales per 32).
    let mx4 = Recipe::preset("mxfp4").unwrap();
    assert_eq!(names(&mx4), ["mxfp4", "mxfp4", "mxfp4"]);
    assert_eq!(mx4.format(Class::GemmGradOutput).name(), "fp4-e2m1");
    assert_eq!(
        Recipe {
            gemm_operands: mx.gemm_operands,
            name: mx.name.clone(),
            ..mx4.clone()
        },
        mx
    );
}

/// A config names a block recipe as any other, and a recipe object takes block formats for
/// its operands; an unknown one is refused naming the field and the value.
#[test]
fn configs_take_block_recipes_and_formats() {
    use crate::train::TrainConfig;
    let c: TrainConfig = serde_json::from_str(r#"{"recipe": "mxfp8"}"#).unwrap();
    assert_eq!(c.recipe, Recipe::preset("mxfp8").unwrap());
    let mut v = serde_json::to_value(Recipe::fp32()).unwrap();
    v["gemm_operands"] = serde_json::json!({"weight": "mxfp8-e4m3"});
    let c: TrainConfig = serde_json::from_value(serde_json::json!({ "recipe": v })).unwrap();
    assert_eq!(c.recipe.format_name(Class::GemmWeight), "mxfp8-e4m3");
    assert_eq!(c.recipe.format_name(Class::GemmInput), "fp32");
    v["gemm_operands"] = serde_json::json!({"weight": "mxfp3"});
    let e = serde_json::from_value::<TrainConfig>(serde_json::json!({ "recipe": v }))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown format 'mxfp3'"), "{e}");
}

#[test]
fn accumulation_parses_and_prints_its_serde_names() {
    for a in [Accumulation::Fp32, Accumulation::Storage] {
        let name = a.to_string();
        assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{name}\""));
        assert_eq!(name.parse::<Accumulation>().unwrap(), a);
    }
    let e = "fp16".parse::<Accumulation>().unwrap_err().to_string();
    assert!(e.contains("'fp16'") && e.contains("fp32 or storage"), "{e}");
}
