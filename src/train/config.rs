//! The configuration of a training run: a serializable value, read from JSON, overridden by
//! command-line flags, and written in full to the run directory's `config.json`.
//!
//! Every field has a default, so a config file holds only what differs:
//! ```json
//! {
//!   "model": "mlp",
//!   "mlp": { "depth": 2, "width": 256, "activation": "relu", "init_scale": 1.0 },
//!   "cnn": { "channels": 16, "hidden": 64, "init_scale": 1.0 },
//!   "lstm": { "embed": 16, "hidden": 32, "init_scale": 1.0 },
//!   "gan": { "noise": 8, "width": 64, "depth": 2 },
//!   "dataset": "digits",
//!   "recipe": "fp16-dynamic",
//!   "optimizer": { "kind": "adam", "lr": 0.001 },
//!   "loss_multiplier": 1.0,
//!   "steps": 800, "batch": 128, "seed": 0, "capture_every": 100, "eval_every": 0,
//!   "limits": { "memory_mib": 4096, "captures_mib": 1024, "sparse_labels": false }
//! }
//! ```
//! `recipe` is a preset name or a full [`Recipe`] object (the resolved config always holds the
//! object). A `.npy` dataset takes its labels from `"labels": "Y.npy"` (absent: the features'
//! last column); the key is written only when set.

use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use super::model::{CnnConfig, GanConfig, LstmConfig, MlpConfig};
use super::optim::OptimizerConfig;
use crate::error::{Error, positive_finite};

mod overrides;
use crate::recipe::Recipe;
use crate::scaling::scaler::LossScaling;
pub use overrides::Overrides;

/// Which model to train. Read by its [`FromStr`](std::str::FromStr) from flags and config files
/// alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", try_from = "String")]
pub enum ModelKind {
    /// [`MlpConfig`].
    #[default]
    Mlp,
    /// [`CnnConfig`].
    Cnn,
    /// [`LstmConfig`] (on token-id sequences such as the `recall` set).
    Lstm,
    /// [`GanConfig`] (on points such as the `ring` set; labels are ignored).
    Gan,
}

crate::names::name_table!(ModelKind, "model", exact case, {
    Mlp => "mlp",
    Cnn => "cnn",
    Lstm => "lstm",
    Gan => "gan",
});

/// The limits a run must fit in; config key `limits`, flags `--max-memory`, `--max-captures`
/// and `--sparse-labels`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest estimated peak memory, in MiB.
    pub memory_mib: u64,
    /// Largest estimated size of `captures.jsonl`, in MiB.
    pub captures_mib: u64,
    /// Train even when the class count (the largest label plus one) is far above the number of
    /// distinct labels (see [`super::budget::check`]).
    pub sparse_labels: bool,
}

impl Default for Limits {
    /// 4 GiB of memory, 1 GiB of captures, dense labels.
    fn default() -> Self {
        Limits {
            memory_mib: 4096,
            captures_mib: 1024,
            sparse_labels: false,
        }
    }
}

/// Everything that determines a training run.
///
/// A config file may also name the recipe's loss scaling with `"scaler": "megatron"` (any
/// [`crate::scaling::policy`] name), which replaces the recipe's; the resolved config holds it
/// in the recipe (`recipe.loss_scaling`) and has no `scaler` key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, remote = "Self")]
pub struct TrainConfig {
    /// The model kind.
    pub model: ModelKind,
    /// MLP sizes (used when `model` is `mlp`).
    pub mlp: MlpConfig,
    /// CNN sizes (used when `model` is `cnn`).
    pub cnn: CnnConfig,
    /// LSTM sizes (used when `model` is `lstm`).
    pub lstm: LstmConfig,
    /// GAN sizes (used when `model` is `gan`).
    pub gan: GanConfig,
    /// A built-in data set (`digits`, `blobs`, `spirals`, `recall`, `ring`), or a `.csv`,
    /// `.npz` or `.npy` path.
    pub dataset: String,
    /// With a `.npy` dataset: the `.npy` file of its labels (a 1-D array of class indices).
    /// `None` (the key absent): the dataset's last column holds the labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    /// The precision recipe.
    #[serde(deserialize_with = "recipe_or_name")]
    pub recipe: Recipe,
    /// The optimizer.
    pub optimizer: OptimizerConfig,
    /// The loss is multiplied by this before backward (and reported divided by it): 1, or a small
    /// power of two to mimic a loss normalised over a large effective batch (gradient
    /// accumulation), which is what makes gradients of small networks underflow.
    pub loss_multiplier: f64,
    /// Optimizer steps.
    pub steps: u64,
    /// Examples per batch.
    pub batch: usize,
    /// Seed of initial weights, batches, synthetic data and stochastic rounding.
    pub seed: u64,
    /// Capture tensors every this many steps (0: never).
    pub capture_every: u64,
    /// Evaluate the test metric every this many steps, into that step's `metrics.jsonl` line
    /// (0: only at the end, into `summary.json`). Evaluation does not change training.
    pub eval_every: u64,
    /// The limits the run's estimated memory and captures must fit in ([`super::budget`]).
    pub limits: Limits,
    /// On the first step and every this many steps (0: never), also run the step in FP32 from
    /// the same weights and batch, and record in `shadow.jsonl` how far the run's gradients are
    /// from FP32's (classifiers only). The shadow changes nothing in training. Written only when
    /// set.
    #[serde(skip_serializing_if = "is_zero")]
    pub shadow_every: u64,
}

impl Serialize for TrainConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TrainConfig::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for TrainConfig {
    /// The fields, then `scaler` (a policy name) in place of the recipe's loss scaling.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut value = serde_json::Value::deserialize(d)?;
        let scaler = value.as_object_mut().and_then(|o| o.remove("scaler"));
        let mut config = crate::io::json_tracked(value, |d| TrainConfig::deserialize(d))
            .map_err(D::Error::custom)?;
        if let Some(scaler) = scaler {
            let scaling = crate::scaling::policy::deserialize_policy(scaler)
                .map_err(|e| D::Error::custom(format!("scaler: {e}")))?;
            config.recipe = config.recipe.with_loss_scaling(scaling);
        }
        Ok(config)
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` signature
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            model: ModelKind::Mlp,
            mlp: MlpConfig::default(),
            cnn: CnnConfig::default(),
            lstm: LstmConfig::default(),
            gan: GanConfig::default(),
            dataset: "digits".into(),
            labels: None,
            recipe: Recipe::fp32(),
            optimizer: OptimizerConfig::Adam {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            },
            loss_multiplier: 1.0,
            steps: 800,
            batch: 128,
            seed: 0,
            capture_every: 100,
            eval_every: 0,
            shadow_every: 0,
            limits: Limits::default(),
        }
    }
}

/// A preset name or a recipe object ([`Recipe::from_value`]).
fn recipe_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<Recipe, D::Error> {
    use serde::de::Error as _;
    Recipe::from_value(serde_json::Value::deserialize(d)?).map_err(D::Error::custom)
}

impl TrainConfig {
    /// Reads a config file (a run directory's `config.json` too: its `schema` key, a version
    /// this mixprec reads, is skipped, so a run can be repeated; a dataset path in it is read
    /// relative to the current directory).
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read; [`Error::BadFile`] when it is not a JSON object,
    /// repeats a key, has a newer schema, or is not a valid config (serde's message after the
    /// path of keys to the unknown or mistyped value).
    pub fn from_file(path: &Path) -> crate::Result<TrainConfig> {
        let bytes = crate::io::read_document(path, crate::io::MAX_DOCUMENT)?;
        let mut value = crate::io::parse_json(path, &bytes)?;
        crate::run::schema::take_schema(&mut value, path)?;
        crate::io::json_from_value(path, value)
    }

    /// Applies `o`. `--dataset` replaces the labels file too (with `--labels`, or none: labels
    /// belong to their dataset). `--recipe` replaces the whole recipe with a preset; then
    /// `--rounding`, `--accumulation` and `--overflow` set those options of the recipe (preset or
    /// the config file's), and `--loss-scale S` sets the static scale (static recipes), the
    /// initial scale (dynamic recipes), or turns a recipe without loss scaling into a static one
    /// with scale `S`, renamed so that its name says so (`fp16-master` becomes `fp16-static`,
    /// the preset it then is; any other gets `+static`: `fp32+static`).
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for an unknown recipe name.
    pub fn apply(&mut self, o: &Overrides) -> crate::Result<()> {
        if let Some(m) = o.model {
            self.model = m;
        }
        if let Some(d) = &o.dataset {
            self.dataset.clone_from(d);
            self.labels.clone_from(&o.labels);
        } else if o.labels.is_some() {
            self.labels.clone_from(&o.labels);
        }
        if let Some(r) = &o.recipe {
            self.recipe = Recipe::preset(r)?;
        }
        if let Some(r) = o.rounding {
            self.recipe.rounding = r;
        }
        if let Some(a) = o.accumulation {
            self.recipe.accumulation = a;
        }
        if let Some(v) = o.overflow {
            self.recipe.overflow = v;
        }
        if let Some(p) = o.scaler {
            self.recipe = self.recipe.with_loss_scaling(p);
        }
        if let Some(s) = o.loss_scale {
            if self.recipe.loss_scaling == LossScaling::None {
                self.recipe = self
                    .recipe
                    .with_loss_scaling(LossScaling::Static { scale: s });
            }
            self.recipe.loss_scaling = match self.recipe.loss_scaling {
                LossScaling::Dynamic(mut d) => {
                    d.init_scale = s;
                    LossScaling::Dynamic(d)
                }
                LossScaling::None | LossScaling::Static { .. } => LossScaling::Static { scale: s },
            };
        }
        if let Some(v) = o.steps {
            self.steps = v;
        }
        if let Some(v) = o.batch {
            self.batch = v;
        }
        if let Some(lr) = o.lr {
            self.optimizer = self.optimizer.with_lr(lr);
        }
        if let Some(v) = o.seed {
            self.seed = v;
        }
        if let Some(v) = o.capture_every {
            self.capture_every = v;
        }
        if let Some(v) = o.eval_every {
            self.eval_every = v;
        }
        if let Some(v) = o.shadow_every {
            self.shadow_every = v;
        }
        if let Some(v) = o.max_memory {
            self.limits.memory_mib = v;
        }
        if let Some(v) = o.max_captures {
            self.limits.captures_mib = v;
        }
        if o.sparse_labels {
            self.limits.sparse_labels = true;
        }
        Ok(())
    }

    /// Checks every value that could make a run meaningless or crash.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming the first bad value.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &'static str, value: String, expected: &'static str| {
            Err(Error::InvalidValue {
                what,
                value,
                expected,
            })
        };
        if self.steps == 0 {
            return bad("steps", "0".into(), "at least 1");
        }
        if self.batch == 0 {
            return bad("batch", "0".into(), "at least 1");
        }
        positive_finite("loss_multiplier", self.loss_multiplier)?;
        if self.shadow_every > 0 && self.model == ModelKind::Gan {
            return bad(
                "shadow_every",
                self.shadow_every.to_string(),
                "0 for the gan (the FP32 shadow compares one backward pass; the GAN's step has \
                 two, each after an update)",
            );
        }
        self.mlp.validate()?;
        self.optimizer.validate()?;
        self.recipe.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Overflow, Rounding};
    use crate::recipe::Accumulation;

    #[test]
    fn defaults_names_and_overrides() {
        let c: TrainConfig =
            serde_json::from_str(r#"{"recipe":"fp16-dynamic","steps":5}"#).unwrap();
        assert_eq!(c.recipe, Recipe::preset("fp16-dynamic").unwrap());
        assert_eq!((c.steps, c.batch), (5, 128));
        let mut c2 = c.clone();
        c2.apply(&Overrides {
            loss_scale: Some(1024.0),
            lr: Some(0.5),
            ..Overrides::default()
        })
        .unwrap();
        assert!(
            matches!(c2.recipe.loss_scaling, LossScaling::Dynamic(d) if d.init_scale == 1024.0)
        );
        assert_eq!(c2.optimizer.lr(), 0.5);
        c2.apply(&Overrides {
            recipe: Some("fp16-master".into()),
            loss_scale: Some(8.0),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(c2.recipe.loss_scaling, LossScaling::Static { scale: 8.0 });
        // A static scale is named as such: fp16-master with a scale is the fp16-static preset.
        assert_eq!(
            c2.recipe,
            Recipe {
                loss_scaling: LossScaling::Static { scale: 8.0 },
                ..Recipe::preset("fp16-static").unwrap()
            }
        );
        let mut f = TrainConfig::default();
        let scale = |s| Overrides {
            loss_scale: Some(s),
            ..Overrides::default()
        };
        f.apply(&scale(4.0)).unwrap();
        assert_eq!(f.recipe.name, "fp32+static");
        // A second scale changes the scale, not the name again.
        f.apply(&scale(2.0)).unwrap();
        assert_eq!(f.recipe.name, "fp32+static");
        f.apply(&Overrides {
            recipe: Some("fp16-dynamic".into()),
            loss_scale: Some(8.0),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(f.recipe.name, "fp16-dynamic");
        // The resolved config round-trips.
        let json = serde_json::to_string(&c2).unwrap();
        assert_eq!(serde_json::from_str::<TrainConfig>(&json).unwrap(), c2);
    }

    #[test]
    fn new_keys_have_defaults_and_flags_override_them() {
        // A config from before `labels` and `eval_every` existed.
        let old: TrainConfig = serde_json::from_str(r#"{"dataset":"blobs"}"#).unwrap();
        assert_eq!((old.labels.as_deref(), old.eval_every), (None, 0));
        let json = serde_json::to_value(&old).unwrap();
        assert!(
            json.get("labels").is_none() && json["eval_every"] == 0,
            "{json}"
        );
        let mut c = old.clone();
        c.apply(&Overrides {
            dataset: Some("x.npy".into()),
            labels: Some("y.npy".into()),
            recipe: Some("fp16-master".into()),
            rounding: Some(Rounding::Stochastic),
            accumulation: Some(Accumulation::Storage),
            overflow: Some(Overflow::Saturate),
            eval_every: Some(5),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!((c.labels.as_deref(), c.eval_every), (Some("y.npy"), 5));
        assert_eq!(serde_json::to_value(&c).unwrap()["labels"], "y.npy");
        // The flags change the preset's options, and nothing else in it.
        let r = &c.recipe;
        assert_eq!(
            (r.rounding, r.accumulation, r.overflow),
            (
                Rounding::Stochastic,
                Accumulation::Storage,
                Overflow::Saturate
            )
        );
        let preset = Recipe::preset("fp16-master").unwrap();
        assert_eq!(
            Recipe {
                rounding: preset.rounding,
                accumulation: preset.accumulation,
                overflow: preset.overflow,
                ..r.clone()
            },
            preset
        );
        // --labels alone keeps the dataset; --dataset alone drops the old dataset's labels.
        let mut d = c.clone();
        d.apply(&Overrides {
            labels: Some("z.npy".into()),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(
            (d.dataset.as_str(), d.labels.as_deref()),
            ("x.npy", Some("z.npy"))
        );
        d.apply(&Overrides {
            dataset: Some("digits".into()),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(d.labels, None);
    }

    /// A recipe given another loss scaling says so in its name: the preset it then is, else
    /// its name with the scaling's; the same scaling keeps the name.
    #[test]
    fn a_new_scaler_renames_the_recipe() {
        let named = |recipe: &str, scaler: &str| {
            let mut c = TrainConfig {
                recipe: Recipe::preset(recipe).unwrap(),
                ..TrainConfig::default()
            };
            c.apply(&Overrides {
                scaler: Some(scaler.parse().unwrap()),
                ..Overrides::default()
            })
            .unwrap();
            c.recipe.name
        };
        assert_eq!(named("fp16-master", "gradscaler"), "fp16-dynamic");
        assert_eq!(named("fp16-master", "static:2^10"), "fp16-static");
        assert_eq!(named("fp16-dynamic", "gradscaler"), "fp16-dynamic");
        assert_eq!(
            named("fp16-master", "megatron:hysteresis=3"),
            "fp16-master+megatron:hysteresis=3"
        );
        assert_eq!(named("fp32", "keras"), "fp32+keras");
        assert_eq!(named("fp32", "static:8"), "fp32+static");
    }

    /// A scaler by name: the `scaler` key (replacing the recipe's, whatever the key order), a
    /// name as the recipe's `loss_scaling`, and `--scaler` before `--loss-scale`; the resolved
    /// config holds the object and reads back the same.
    #[test]
    fn scalers_by_name() {
        use crate::scaling::scaler::DynamicScaling;
        let c: TrainConfig =
            serde_json::from_str(r#"{"scaler":"megatron","recipe":"fp16-dynamic"}"#).unwrap();
        assert_eq!(
            c.recipe.loss_scaling,
            LossScaling::Dynamic(DynamicScaling::megatron())
        );
        // fp16-dynamic with Megatron's scaler is the fp16-megatron preset, and named so.
        assert_eq!(c.recipe.name, "fp16-megatron");
        let json = serde_json::to_value(&c).unwrap();
        assert!(json.get("scaler").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<TrainConfig>(json).unwrap(), c);
        let mut recipe = serde_json::to_value(Recipe::preset("fp16-master").unwrap()).unwrap();
        recipe["loss_scaling"] = "static:2^12".into();
        let c: TrainConfig =
            serde_json::from_value(serde_json::json!({ "recipe": recipe })).unwrap();
        assert_eq!(c.recipe.loss_scaling, LossScaling::Static { scale: 4096.0 });
        let mut d = c.clone();
        d.apply(&Overrides {
            scaler: Some("keras".parse().unwrap()),
            loss_scale: Some(8.0),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(
            d.recipe.loss_scaling,
            LossScaling::Dynamic(DynamicScaling {
                init_scale: 8.0,
                ..DynamicScaling::keras()
            })
        );
        let e = serde_json::from_str::<TrainConfig>(r#"{"scaler":"meg"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scaler") && e.contains("invalid loss scaler 'meg'"),
            "{e}"
        );
        let e = serde_json::from_str::<TrainConfig>(r#"{"scaler":"none","stepz":1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("stepz"), "{e}");
    }

    #[test]
    fn bad_configs_are_named() {
        let e = serde_json::from_str::<TrainConfig>(r#"{"stepz":5}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("stepz"), "{e}");
        let e = serde_json::from_str::<TrainConfig>(r#"{"recipe":"fp12"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("recipe"), "{e}");
        let c = TrainConfig {
            batch: 0,
            ..TrainConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("batch"));
        assert!("rnn".parse::<ModelKind>().is_err());
    }
}
