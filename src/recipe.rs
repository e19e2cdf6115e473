//! The precision vocabulary: the classes of tensors and the sites that store them ([`class`]),
//! the library's tables of names for the binding ([`catalog`]), and precision recipes: which
//! format each tensor class is stored in, how values round, how sums
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
//! | `fp16-megatron` | fp16 | fp16 | fp16 | fp16 | fp32 | fp32 | dynamic (Megatron-LM defaults) |
//! | `fp16-deepspeed` | fp16 | fp16 | fp16 | fp16 | fp32 | fp32 | dynamic (DeepSpeed defaults; stops on overflow at the minimum scale) |
//! | `bf16-master` | bf16 | bf16 | bf16 | bf16 | fp32 | fp32 | none |
//! | `fp8-hybrid` | fp32 (GEMM: e4m3) | fp32 (GEMM input: e4m3) | fp32 (GEMM grad output: e5m2) | fp32 | fp32 | fp32 | none; per-tensor delayed scaling |
//! | `fp8-every-store` | e4m3 | e4m3 | e5m2 | e5m2 | fp32 | fp32 | none; per-tensor delayed scaling |
//! | `mxfp8` | fp32 (GEMM: mxfp8-e4m3) | fp32 (GEMM input: mxfp8-e4m3) | fp32 (GEMM grad output: mxfp8-e5m2) | fp32 | fp32 | fp32 | none; a scale per block of 32 along each product's sum |
//! | `mxfp4` | fp32 (GEMM: mxfp4) | fp32 (GEMM input: mxfp4) | fp32 (GEMM grad output: mxfp4) | fp32 | fp32 | fp32 | none; a scale per block of 32 along each product's sum |
//! | `nvfp4` | fp32 (GEMM: nvfp4) | fp32 (GEMM input: nvfp4) | fp32 (GEMM grad output: bf16) | fp32 | fp32 | fp32 | none; a scale per block of 16 along each product's sum, and one per tensor |
//!
//! `fp8-hybrid` is Transformer Engine's `DelayedScaling(fp8_format=Format.HYBRID)` with its
//! defaults ([`Fp8Scaling`]): only the operands of matrix products are cast to FP8, just before
//! each product ([`GemmOperands`]; `transformer_engine/pytorch/module/linear.py`,
//! `Linear._get_quantizers`): the input activation and the weight to E4M3, the output gradient
//! to E5M2. The products' results (layer outputs, input gradients, weight gradients: TE's
//! grad-weight quantizer is `None`), biases, and the parameters of embeddings and LayerNorm are
//! not FP8; they are stored in FP32 here (TE's high precision is the model's dtype: set
//! `activations` and the other formats to `bf16` in a recipe file for a BF16 model). Linear,
//! convolution (on its im2col matrix) and LSTM layers (each time step's two products) cast
//! their operands; TE has no convolution or LSTM, so those follow its Linear.
//! `fp8-every-store` is what mixprec's fp8 recipe did before: every stored tensor in FP8,
//! layer outputs and weight gradients included; it is not what any framework does, and is kept
//! to show what storing those in FP8 would cost.
//!
//! The block-scaled recipes cast the same operands as `fp8-hybrid`, to block formats
//! ([`OperandFormat::Block`]), each cast with blocks along the axis its product sums over and
//! scales from the tensor being cast (no amax history): `mxfp8` is Transformer Engine's
//! `MXFP8BlockScaling` with `Format.HYBRID` (E4M3 input and weight, E5M2 output gradient, E8M0
//! scales per 32 values); `nvfp4` is its `NVFP4BlockScaling` for the input and weight (E2M1
//! elements, E4M3 scales per 16 values and an FP32 scale per tensor) with the output gradient
//! in BF16, as issue 13 asks (TE casts it to NVFP4 too). `mxfp4` is `mxfp8`'s operands in the
//! OCP MX specification's MXFP4 (E2M1 elements, an E8M0 scale per 32 values), the output
//! gradient too: the narrowest block recipe, for models that `mxfp8` and `nvfp4` do not hurt. What TE does, where it is written, and
//! what is left out (TE's 16x16 weight blocks, random Hadamard transforms) are in
//! [`crate::train::precision::block`].

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::format::BlockFormat;
use crate::format::{FloatFormat, Overflow, Rounding};
use crate::scaling::delayed::Fp8Scaling;
use crate::scaling::scaler::{DynamicScaling, LossScaling};
pub use class::{Class, Site, SiteKey, StoreCounts};
pub use keep::{Keep, glob};

/// The largest `|k|` of a loss scale `2^k` that [`Recipe::loss_scale_inert`] calls inert.
pub const INERT_LOG2_SCALE: i32 = 32;

/// The names of the preset recipes, in the order of the table above.
pub const PRESET_NAMES: [&str; 13] = [
    "fp32",
    "fp16-pure",
    "fp16-master",
    "fp16-static",
    "fp16-dynamic",
    "fp16-megatron",
    "fp16-deepspeed",
    "bf16-master",
    "fp8-hybrid",
    "fp8-every-store",
    "mxfp8",
    "mxfp4",
    "nvfp4",
];

/// [`PRESET_NAMES`] as the error message lists them.
static PRESET_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("one of {}", PRESET_NAMES.join(", ")));

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

crate::names::name_table!(Accumulation, "accumulation", exact case, {
    Fp32 => "fp32",
    Storage => "storage",
});

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

/// The format a matrix product's operand is cast to (the library's [`crate::format::Target`]):
/// a number format (one scale per tensor, delayed when the recipe has [`Fp8Scaling`] and the
/// format is 8 bits or fewer) or a block-scaled format (a scale per block along the product's
/// reduction axis, from the current tensor: [`crate::train::precision::block`]).
///
/// Written in files and on the command line as its name: a number format's (`fp8-e4m3`, `bf16`,
/// `e5m7`...) or a block format's (`mxfp8-e4m3`, ...). The number-format names come first, so a
/// recipe written before block formats existed reads and writes exactly as it did.
pub use crate::format::Target as OperandFormat;

/// The formats the operands of matrix products are cast to just before each product, on top of
/// the format they are stored in: Transformer Engine's FP8 and FP4 GEMMs. FP32 (the default)
/// means no cast: the product reads its operands as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GemmOperands {
    /// A layer's input activation (forward product and weight-gradient product).
    pub input: OperandFormat,
    /// The weight (forward product and input-gradient product).
    pub weight: OperandFormat,
    /// The output gradient (input-gradient and weight-gradient products).
    pub grad_output: OperandFormat,
}

impl Default for GemmOperands {
    fn default() -> Self {
        let fp32 = OperandFormat::Element(crate::format::FP32);
        GemmOperands {
            input: fp32,
            weight: fp32,
            grad_output: fp32,
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
    /// Optimizer state (momentum, Adam's moments and epsilon). The update itself is never rounded:
    /// it is added to the weights in one fused operation, as PyTorch's optimizers do.
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
    /// Loss scaling: a policy name (`"megatron"`, `"static:2^16"`: [`crate::scaling::policy`])
    /// or the object written in full (`{"kind": "dynamic", ...}`).
    #[serde(
        default,
        deserialize_with = "crate::scaling::policy::deserialize_policy"
    )]
    pub loss_scaling: LossScaling,
    /// Per-tensor scaling of 8-bit formats, if any.
    #[serde(default)]
    pub fp8_scaling: Option<Fp8Scaling>,
    /// Casts of the operands of matrix products (none by default).
    #[serde(default)]
    pub gemm_operands: GemmOperands,
    /// Whether loss scaling may unscale FP16 gradients of FP16 weights (no FP32 master copy).
    /// PyTorch's GradScaler refuses ("Attempting to unscale FP16 gradients.",
    /// `_unscale_grads_` in `torch/amp/grad_scaler.py`, whose `allow_fp16` only its internal
    /// callers set), and so does [`Recipe::validate`] unless this is set.
    #[serde(default)]
    pub allow_fp16_unscale: bool,
    /// Layers that keep another recipe's per-layer formats ([`Recipe::for_layer`]): glob
    /// patterns over layer names, the first match deciding ([`keep`]). Not written when empty.
    #[serde(default, skip_serializing_if = "Keep::is_empty")]
    pub keep: Keep,
}

impl Recipe {
    /// The preset called `name` (one of [`PRESET_NAMES`]).
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for any other name.
    pub fn preset(name: &str) -> crate::Result<Recipe> {
        use crate::format::{BF16, FP8_E4M3, FP8_E5M2, FP16, FP32};
        let uniform = |storage, master, state| Recipe::uniform(name, storage, master, state);
        let block = |name: &str| match name.parse() {
            Ok(b) => OperandFormat::Block(b),
            Err(_) => unreachable!("{name} is a block format"),
        };
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
            "fp16-megatron" => Recipe {
                loss_scaling: LossScaling::Dynamic(DynamicScaling::megatron()),
                ..uniform(FP16, FP32, FP32)
            },
            "fp16-deepspeed" => Recipe {
                loss_scaling: LossScaling::Dynamic(DynamicScaling::deepspeed()),
                ..uniform(FP16, FP32, FP32)
            },
            "bf16-master" => uniform(BF16, FP32, FP32),
            "fp8-hybrid" => Recipe {
                gemm_operands: GemmOperands {
                    input: FP8_E4M3.into(),
                    weight: FP8_E4M3.into(),
                    grad_output: FP8_E5M2.into(),
                },
                // FP8 casts saturate (TE's cast kernels convert with __NV_SATFINITE).
                overflow: Overflow::Saturate,
                fp8_scaling: Some(Fp8Scaling::default()),
                ..uniform(FP32, FP32, FP32)
            },
            "fp8-every-store" => Recipe {
                activation_grads: FP8_E5M2,
                weight_grads: FP8_E5M2,
                // E4M3 has no infinity: clamp rather than produce NaN, as FP8 casts do.
                overflow: Overflow::Saturate,
                fp8_scaling: Some(Fp8Scaling::default()),
                ..uniform(FP8_E4M3, FP32, FP32)
            },
            "mxfp8" => Recipe {
                gemm_operands: GemmOperands {
                    input: block("mxfp8-e4m3"),
                    weight: block("mxfp8-e4m3"),
                    grad_output: block("mxfp8-e5m2"),
                },
                // MX elements saturate whatever this says (the OCP MX specification); it is
                // set so that the recipe says so.
                overflow: Overflow::Saturate,
                ..uniform(FP32, FP32, FP32)
            },
            "mxfp4" => Recipe {
                gemm_operands: GemmOperands {
                    input: block("mxfp4"),
                    weight: block("mxfp4"),
                    grad_output: block("mxfp4"),
                },
                overflow: Overflow::Saturate,
                ..uniform(FP32, FP32, FP32)
            },
            "nvfp4" => Recipe {
                gemm_operands: GemmOperands {
                    input: block("nvfp4"),
                    weight: block("nvfp4"),
                    grad_output: BF16.into(),
                },
                ..uniform(FP32, FP32, FP32)
            },
            _ => {
                return Err(Error::InvalidValue {
                    what: "recipe",
                    value: name.to_string(),
                    expected: &PRESET_LIST,
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

    /// Whether the recipe is the FP32 baseline but for its name, its loss scaling and its
    /// accumulation (a sum rounded to FP32 storage is an FP32 sum).
    #[must_use]
    pub fn is_fp32(&self) -> bool {
        let plain = Recipe {
            name: "fp32".into(),
            loss_scaling: LossScaling::None,
            accumulation: Accumulation::Fp32,
            ..self.clone()
        };
        plain == Recipe::fp32()
    }

    /// Whether a loss scale of `2^log2_scale` can change nothing this recipe trains: the recipe
    /// is FP32 throughout with a static scale or none (a dynamic scaler's scale moves), and
    /// `|log2_scale|` is at most [`INERT_LOG2_SCALE`], so that multiplying the loss by the scale
    /// and the gradients by its inverse is exact: a power of two changes only the exponent of
    /// an FP32 value, unless the value leaves FP32's normal range (below 2^-126 or above
    /// 2^128), which a gradient between 2^-94 and 2^96 does not at such a scale. A grid trains
    /// such a run once for every scale (checked: the MLP of analyses/underflow trains to the same
    /// bits at all 31 scales 2^0..2^30, tests/grid.rs).
    #[must_use]
    pub fn loss_scale_inert(&self, log2_scale: i32) -> bool {
        self.is_fp32()
            && !matches!(self.loss_scaling, LossScaling::Dynamic(_))
            && log2_scale.abs() <= INERT_LOG2_SCALE
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
            gemm_operands: GemmOperands::default(),
            allow_fp16_unscale: false,
            keep: Keep::default(),
        }
    }

    /// What a layer that keeps `kept` runs: `kept`'s per-layer formats (`weights`,
    /// `activations`, `activation_grads`, `weight_grads`, `gemm_operands` and `fp8_scaling` for
    /// the layer's own tensors) with everything global of this recipe (loss scaling, master
    /// weights, optimizer state, accumulation, rounding, overflow, FP32 operations), named as
    /// `kept`, without a `keep`.
    #[must_use]
    pub fn for_layer(&self, kept: &Recipe) -> Recipe {
        Recipe {
            name: kept.name.clone(),
            weights: kept.weights,
            activations: kept.activations,
            activation_grads: kept.activation_grads,
            weight_grads: kept.weight_grads,
            gemm_operands: kept.gemm_operands,
            fp8_scaling: kept.fp8_scaling,
            keep: Keep::default(),
            ..self.clone()
        }
    }

    /// Checks the recipe: its `keep` ([`Keep::validate`]), the loss scaling's parameters, an fp8
    /// history of at least one step, and no loss scaling of FP16 weights without an FP32 master
    /// copy unless [`Recipe::allow_fp16_unscale`].
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming the first problem.
    pub fn validate(&self) -> crate::Result<()> {
        self.loss_scaling.validate()?;
        self.keep.validate().map_err(|problem| Error::Unsupported {
            what: format!("recipe {}", self.name),
            problem,
        })?;
        if let Some(f) = self.fp8_scaling
            && f.amax_history_len == 0
        {
            return Err(Error::InvalidValue {
                what: "amax_history_len",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        let scaled = self.loss_scaling != LossScaling::None;
        if scaled && self.master_weights == crate::format::FP16 && !self.allow_fp16_unscale {
            return Err(Error::InvalidValue {
                what: "loss scaling",
                value: format!("{} with fp16 master weights", self.name),
                expected: "FP32 master weights: GradScaler refuses to unscale FP16 gradients (\"Attempting to unscale FP16 gradients.\"); set allow_fp16_unscale to true to do it anyway",
            });
        }
        Ok(())
    }

    /// The format of tensor class `class` (for a block-scaled operand, its element format:
    /// [`Recipe::block_format`] says which block format).
    #[must_use]
    pub fn format(&self, class: Class) -> FloatFormat {
        match class {
            Class::Weight => self.weights,
            Class::Activation => self.activations,
            Class::ActivationGrad => self.activation_grads,
            Class::WeightGrad => self.weight_grads,
            Class::OptimizerState => self.optimizer_state,
            // Never stored: PyTorch's optimizers add the update to the weights in one fused
            // operation (`param.add_(grad, alpha=-lr)`, `param.addcdiv_(exp_avg, denom,
            // value=-step_size)` in `torch/optim/sgd.py` and `adam.py`), rounded once as part of
            // the new weight.
            Class::Update => crate::format::FP32,
            Class::Master => self.master_weights,
            Class::GemmInput => self.gemm_operands.input.element(),
            Class::GemmWeight => self.gemm_operands.weight.element(),
            Class::GemmGradOutput => self.gemm_operands.grad_output.element(),
        }
    }

    /// The block format of operand class `class` ([`Class::GemmInput`], [`Class::GemmWeight`]
    /// or [`Class::GemmGradOutput`]) when the recipe casts it to one; `None` otherwise.
    #[must_use]
    pub fn block_format(&self, class: Class) -> Option<BlockFormat> {
        match class {
            Class::GemmInput => self.gemm_operands.input.block(),
            Class::GemmWeight => self.gemm_operands.weight.block(),
            Class::GemmGradOutput => self.gemm_operands.grad_output.block(),
            _ => None,
        }
    }

    /// The name of the format of tensor class `class`: [`Recipe::format`]'s, or the block
    /// format's for a block-scaled operand.
    #[must_use]
    pub fn format_name(&self, class: Class) -> String {
        match self.block_format(class) {
            Some(b) => b.to_string(),
            None => self.format(class).to_string(),
        }
    }
}

impl Recipe {
    /// A preset name (a JSON string) or a recipe object, as `train`'s config file and the
    /// PyTorch simulator take it; a problem inside the object is reported as serde sees it
    /// (naming the unknown or mistyped key and the value), not as a generic "not a recipe".
    ///
    /// # Errors
    /// The problem, in words.
    pub fn from_value(value: serde_json::Value) -> Result<Recipe, String> {
        match value {
            serde_json::Value::String(name) => Recipe::preset(&name).map_err(|e| e.to_string()),
            object @ serde_json::Value::Object(_) => {
                crate::io::json_tracked(object, |d| Recipe::deserialize(d))
            }
            other => Err(format!(
                "expected a preset name or a recipe object, got {other}"
            )),
        }
    }

    /// This recipe with loss scaling `scaling`, renamed when that changes what it is, so that no
    /// run is labelled as a recipe it is not: the preset it then is (`fp16-master` with a static
    /// scale is `fp16-static`, with `gradscaler` `fp16-dynamic`), else its name with the
    /// scaling's (`fp32+static`, `fp16-master+megatron:hysteresis=3`). A static scale's value
    /// is a setting, not part of the name.
    #[must_use]
    pub fn with_loss_scaling(&self, scaling: LossScaling) -> Recipe {
        let mut out = Recipe {
            loss_scaling: scaling,
            ..self.clone()
        };
        if scaling == self.loss_scaling {
            return out;
        }
        let key = |r: &Recipe| Recipe {
            name: String::new(),
            loss_scaling: match r.loss_scaling {
                LossScaling::Static { .. } => LossScaling::Static { scale: 1.0 },
                other => other,
            },
            ..r.clone()
        };
        let target = key(&out);
        let suffix = match scaling {
            LossScaling::Static { .. } => "static".to_string(),
            other => other.to_string(),
        };
        out.name = PRESET_NAMES
            .iter()
            .filter_map(|name| Recipe::preset(name).ok())
            .find(|p| key(p) == target)
            .map_or_else(|| format!("{}+{suffix}", self.name), |p| p.name);
        out
    }
}

impl FromStr for Recipe {
    type Err = Error;
    fn from_str(s: &str) -> crate::Result<Recipe> {
        Recipe::preset(s)
    }
}

pub mod catalog;
pub mod class;
pub mod keep;
#[cfg(test)]
mod tests;
