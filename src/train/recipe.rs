//! Precision recipes: which format each tensor class is stored in, how values round, how sums
//! accumulate, which operations stay in FP32 and how the loss is scaled.
//!
//! A recipe is data: the training step reads it, and no recipe has a code path of its own. The
//! named presets are those of the paper and its successors:
//!
//! | name | weights | activations | act. grads | weight grads | optimizer state | master | loss scaling |
//! |---|---|---|---|---|---|---|---|
//! | `fp32` | fp32 | fp32 | fp32 | fp32 | fp32 | fp32 | none |
//! | `fp16-pure` | fp16 | fp16 | fp16 | fp16 | fp16 | fp16 | none |
//! | `fp16-master` | fp16 | fp16 | fp16 | fp16 | fp32 | fp32 | none |
//! | `fp16-static` | fp16 | fp16 | fp16 | fp16 | fp32 | fp32 | static (2^16 unless set) |
//! | `fp16-dynamic` | fp16 | fp16 | fp16 | fp16 | fp32 | fp32 | dynamic (GradScaler defaults) |
//! | `bf16-master` | bf16 | bf16 | bf16 | bf16 | fp32 | fp32 | none |
//! | `fp8-hybrid` | e4m3 | e4m3 | e5m2 | e5m2 | fp32 | fp32 | none; per-tensor delayed scaling |

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::precision::Class;
use super::scaler::LossScaling;
use crate::error::Error;
use crate::format::{FloatFormat, Overflow, Rounding};

/// The names of the preset recipes, in the order of the table above.
pub const PRESET_NAMES: [&str; 7] = [
    "fp32",
    "fp16-pure",
    "fp16-master",
    "fp16-static",
    "fp16-dynamic",
    "bf16-master",
    "fp8-hybrid",
];

/// Where the sums of a matrix product are kept. Read by its [`FromStr`] from flags and config
/// files alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", try_from = "String")]
pub enum Accumulation {
    /// In FP32 (what tensor cores do): products of storage-format values are exact in f32, so an
    /// f32 GEMM on rounded inputs is "low-precision multiply, FP32 accumulate".
    #[default]
    Fp32,
    /// In the output's storage format: the running sum is rounded after every addition (a fused
    /// multiply-add rounded once). A slow path, there to show why FP32 accumulation matters.
    Storage,
}

impl FromStr for Accumulation {
    type Err = Error;
    /// The serde names: `fp32` or `storage`.
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "fp32" => Ok(Accumulation::Fp32),
            "storage" => Ok(Accumulation::Storage),
            _ => Err(Error::InvalidValue {
                what: "accumulation",
                value: s.to_string(),
                expected: "fp32 or storage",
            }),
        }
    }
}

impl TryFrom<String> for Accumulation {
    type Error = Error;
    fn try_from(s: String) -> crate::Result<Self> {
        s.parse()
    }
}

impl std::fmt::Display for Accumulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Accumulation::Fp32 => "fp32",
            Accumulation::Storage => "storage",
        })
    }
}

/// Which operations run in FP32 whatever the storage formats (what mixed-precision frameworks
/// keep in FP32 by default). Setting a field to `false` rounds that operation's results to the
/// storage format instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fp32Ops {
    /// Softmax and log-softmax inside the cross-entropy loss: with `false`, the probabilities are
    /// rounded to the activation format.
    pub softmax: bool,
    /// The loss value: with `false`, it is rounded to the activation format.
    pub loss: bool,
    /// Normalisation statistics (LayerNorm mean and variance): with `false`, rounded to the
    /// activation format.
    pub norm_stats: bool,
    /// Reductions over the batch (bias gradients): with `false`, accumulated in the weight-gradient
    /// format, rounding after every addition.
    pub reductions: bool,
}

impl Default for Fp32Ops {
    fn default() -> Self {
        Fp32Ops {
            softmax: true,
            loss: true,
            norm_stats: true,
            reductions: true,
        }
    }
}

/// Per-tensor delayed scaling for 8-bit formats (Transformer Engine's recipe).
///
/// Before a tensor is rounded into a format of at most 8 bits it is multiplied by
/// ```text
/// scale = max_finite / amax / 2^margin        amax = max |x| over the last `history` steps
/// ```
/// (1 while there is no history, or when the amax is 0), rounded, and divided by the scale again
/// (the dequantised value is what later operations see). The current tensor's amax enters the
/// history after it is used: the scale is always from earlier steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fp8Scaling {
    /// Steps of amax history.
    pub history: usize,
    /// Headroom in powers of two.
    pub margin: i32,
}

impl Default for Fp8Scaling {
    fn default() -> Self {
        Fp8Scaling {
            history: 16,
            margin: 0,
        }
    }
}

/// A precision recipe: a format per tensor class and the rules of the arithmetic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The preset this was built from, or a name of the user's choice.
    pub name: String,
    /// The copy of the weights the forward and backward passes read.
    pub weights: FloatFormat,
    /// Layer outputs (and the network's input).
    pub activations: FloatFormat,
    /// Gradients with respect to layer outputs and inputs.
    pub activation_grads: FloatFormat,
    /// Gradients with respect to weights and biases.
    pub weight_grads: FloatFormat,
    /// Optimizer state (momentum, Adam's moments and epsilon) and the update itself.
    pub optimizer_state: FloatFormat,
    /// The weights the optimizer updates. Equal to `weights` when there is no separate master
    /// copy (updates are then rounded into the storage format: swamping).
    pub master_weights: FloatFormat,
    /// Where matrix-product sums are kept.
    #[serde(default)]
    pub accumulation: Accumulation,
    /// Rounding mode at every storage point.
    #[serde(default)]
    pub rounding: Rounding,
    /// Overflow rule at every storage point.
    #[serde(default)]
    pub overflow: Overflow,
    /// Operations kept in FP32.
    #[serde(default)]
    pub fp32_ops: Fp32Ops,
    /// Loss scaling.
    #[serde(default)]
    pub loss_scaling: LossScaling,
    /// Per-tensor scaling of 8-bit formats, if any.
    #[serde(default)]
    pub fp8_scaling: Option<Fp8Scaling>,
}

impl Recipe {
    /// The preset called `name` (one of [`PRESET_NAMES`]).
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for any other name.
    pub fn preset(name: &str) -> crate::Result<Recipe> {
        use crate::format::{BF16, FP8_E4M3, FP8_E5M2, FP16, FP32};
        let uniform = |storage, master, state| Recipe::uniform(name, storage, master, state);
        Ok(match name {
            "fp32" => uniform(FP32, FP32, FP32),
            "fp16-pure" => uniform(FP16, FP16, FP16),
            "fp16-master" => uniform(FP16, FP32, FP32),
            "fp16-static" => Recipe {
                loss_scaling: LossScaling::Static { scale: 65536.0 },
                ..uniform(FP16, FP32, FP32)
            },
            "fp16-dynamic" => Recipe {
                loss_scaling: LossScaling::Dynamic(Default::default()),
                ..uniform(FP16, FP32, FP32)
            },
            "bf16-master" => uniform(BF16, FP32, FP32),
            "fp8-hybrid" => Recipe {
                activation_grads: FP8_E5M2,
                weight_grads: FP8_E5M2,
                // E4M3 has no infinity: clamp rather than produce NaN, as FP8 casts do.
                overflow: Overflow::Saturate,
                fp8_scaling: Some(Fp8Scaling::default()),
                ..uniform(FP8_E4M3, FP32, FP32)
            },
            _ => {
                return Err(Error::InvalidValue {
                    what: "recipe",
                    value: name.to_string(),
                    expected: "one of fp32, fp16-pure, fp16-master, fp16-static, fp16-dynamic, bf16-master, fp8-hybrid",
                });
            }
        })
    }

    /// The FP32 baseline (the `fp32` preset).
    #[must_use]
    pub fn fp32() -> Recipe {
        use crate::format::FP32;
        Recipe::uniform("fp32", FP32, FP32, FP32)
    }

    /// Every tensor class in `storage` except the master weights and optimizer state; no loss
    /// scaling, FP32 accumulation, nearest-even rounding.
    fn uniform(
        name: &str,
        storage: FloatFormat,
        master: FloatFormat,
        state: FloatFormat,
    ) -> Recipe {
        Recipe {
            name: name.to_string(),
            weights: storage,
            activations: storage,
            activation_grads: storage,
            weight_grads: storage,
            optimizer_state: state,
            master_weights: master,
            accumulation: Accumulation::Fp32,
            rounding: Rounding::NearestEven,
            overflow: Overflow::Ieee,
            fp32_ops: Fp32Ops::default(),
            loss_scaling: LossScaling::None,
            fp8_scaling: None,
        }
    }

    /// The format of tensor class `class`.
    #[must_use]
    pub fn format(&self, class: Class) -> FloatFormat {
        match class {
            Class::Weight => self.weights,
            Class::Activation => self.activations,
            Class::ActivationGrad => self.activation_grads,
            Class::WeightGrad => self.weight_grads,
            Class::OptimizerState | Class::Update => self.optimizer_state,
            Class::Master => self.master_weights,
        }
    }
}

impl FromStr for Recipe {
    type Err = Error;
    fn from_str(s: &str) -> crate::Result<Recipe> {
        Recipe::preset(s)
    }
}

#[cfg(test)]
mod tests {
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
        assert!(Recipe::preset("fp17").is_err());
    }

    #[test]
    fn presets_say_what_the_table_says() {
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
        let fp8 = Recipe::preset("fp8-hybrid").unwrap();
        assert_eq!(fp8.weights.name(), "fp8-e4m3");
        assert_eq!(fp8.activation_grads.name(), "fp8-e5m2");
        assert!(fp8.fp8_scaling.is_some());
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
                let again: Recipe =
                    serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
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
}
