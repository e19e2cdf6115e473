//! Loss-scaling policies by name: the frameworks' scalers as presets of the one scaler type
//! ([`LossScaling`]), read from the command line (`train --scaler`, `replay --policy`) and from
//! config files (`"scaler": "megatron"`, or `"loss_scaling": "megatron"` in a recipe object)
//! through the same [`FromStr`], and printed back by [`Display`](std::fmt::Display).
//!
//! ```text
//! gradscaler   PyTorch GradScaler        2^16, x2 after 2000 clean steps, x0.5 on overflow
//! megatron     Megatron-LM               2^32, window 1000, hysteresis 2, min 1
//! deepspeed    DeepSpeed                 2^16 (initial_scale_power 16), window 1000,
//!                                        hysteresis 2, min 1, stops on overflow at the minimum
//! keras        Keras LossScaleOptimizer  2^15, x2 after 2000 clean steps, x0.5 on overflow
//! static:S     a constant scale S (2^16, 65536); overflowing steps are skipped
//! none         no loss scaling (scale 1, nothing skipped)
//! ```
//! A dynamic preset takes changes to its parameters after a colon, named as in a config file's
//! `loss_scaling` object ([`DynamicScaling`]): `deepspeed:consecutive_hysteresis=true` (DeepSpeed's
//! `consecutive_hysteresis` option), `gradscaler:growth_interval=50,init_scale=2^10`.
//!
//! ```
//! use mixprec::scaling::scaler::{DynamicScaling, LossScaling};
//!
//! let p: LossScaling = "deepspeed:consecutive_hysteresis=true".parse()?;
//! assert_eq!(p, LossScaling::Dynamic(DynamicScaling { consecutive_hysteresis: true, ..DynamicScaling::deepspeed() }));
//! assert_eq!(p.to_string(), "deepspeed:consecutive_hysteresis=true");
//! assert_eq!("static:2^16".parse::<LossScaling>()?, LossScaling::Static { scale: 65536.0 });
//! # Ok::<(), mixprec::Error>(())
//! ```

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::Value;

use super::scaler::{DynamicScaling, LossScaling};
use crate::error::Error;

/// The policy names, as messages list them (`static:S` takes its scale).
pub const POLICY_NAMES: [&str; 6] = [
    "gradscaler",
    "megatron",
    "deepspeed",
    "keras",
    "static:S",
    "none",
];

/// The dynamic presets, by name.
fn dynamic_presets() -> [(&'static str, DynamicScaling); 4] {
    [
        ("gradscaler", DynamicScaling::grad_scaler()),
        ("megatron", DynamicScaling::megatron()),
        ("deepspeed", DynamicScaling::deepspeed()),
        ("keras", DynamicScaling::keras()),
    ]
}

fn expected() -> String {
    format!(
        "expected one of {} (a dynamic preset may change parameters: deepspeed:consecutive_hysteresis=true)",
        POLICY_NAMES.join(", ")
    )
}

impl FromStr for LossScaling {
    type Err = Error;

    fn from_str(s: &str) -> crate::Result<LossScaling> {
        let text = s.trim();
        let bad = |problem: String| Error::BadScaler {
            value: text.to_string(),
            problem,
        };
        let (name, rest) = match text.split_once(':') {
            Some((n, r)) => (n.trim(), Some(r.trim())),
            None => (text, None),
        };
        let policy = match (name, rest) {
            ("none", None) => LossScaling::None,
            ("static", Some(scale)) => LossScaling::Static {
                scale: crate::format::parse_loss_scale("static", scale)
                    .map_err(|e| bad(e.to_string()))?,
            },
            ("static", None) => {
                return Err(bad(
                    "static needs its scale: static:S (static:2^16, static:65536)".into(),
                ));
            }
            ("none", Some(_)) => return Err(bad("none takes no parameters".into())),
            _ => {
                let Some((_, preset)) = dynamic_presets().into_iter().find(|(n, _)| *n == name)
                else {
                    return Err(bad(expected()));
                };
                LossScaling::Dynamic(match rest {
                    None => preset,
                    Some(changes) => with_changes(preset, changes).map_err(bad)?,
                })
            }
        };
        policy.validate().map_err(|e| bad(e.to_string()))?;
        Ok(policy)
    }
}

/// `preset` with `key=value,...` applied, each key a field of [`DynamicScaling`]'s serde form;
/// a value is a power of two (`2^10`), JSON (`true`, `50`) or a bare word (`since-overflow`).
fn with_changes(preset: DynamicScaling, changes: &str) -> Result<DynamicScaling, String> {
    let mut value = serde_json::to_value(preset).map_err(|e| e.to_string())?;
    for change in changes.split(',') {
        let Some((key, text)) = change.split_once('=') else {
            return Err(format!(
                "'{change}' is not key=value (as in deepspeed:consecutive_hysteresis=true)"
            ));
        };
        let (key, text) = (key.trim(), text.trim());
        let v = if text.contains('^') || text.contains("**") {
            let scale = crate::format::parse_loss_scale(key, text).map_err(|e| e.to_string())?;
            Value::from(f64::from(scale))
        } else {
            serde_json::from_str(text).unwrap_or_else(|_| Value::from(text))
        };
        value[key] = v;
    }
    DynamicScaling::deserialize(value).map_err(|e| e.to_string())
}

impl fmt::Display for LossScaling {
    /// The name [`FromStr`] reads back: a preset's name, followed by the parameters that differ
    /// from the nearest preset.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossScaling::None => f.write_str("none"),
            LossScaling::Static { scale } => write!(f, "static:{}", number(f64::from(*scale))),
            LossScaling::Dynamic(d) => {
                let mine = serde_json::to_value(d).map_err(|_| fmt::Error)?;
                let differences = |preset: &DynamicScaling| -> Vec<(String, Value)> {
                    let theirs = serde_json::to_value(preset).unwrap_or(Value::Null);
                    mine.as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(k, v)| theirs.get(k.as_str()) != Some(v))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                let (name, diff) = dynamic_presets()
                    .iter()
                    .map(|(n, p)| (*n, differences(p)))
                    .min_by_key(|(_, d)| d.len())
                    .ok_or(fmt::Error)?;
                f.write_str(name)?;
                for (i, (k, v)) in diff.iter().enumerate() {
                    let text = match v {
                        Value::Number(n) => n.as_f64().map_or(n.to_string(), number),
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    write!(f, "{}{k}={text}", if i == 0 { ':' } else { ',' })?;
                }
                Ok(())
            }
        }
    }
}

/// A scale as it reads best: a whole number up to 2^20, a power of two as `2^k`, else as it is.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() <= 1_048_576.0 {
        format!("{x}")
    } else if x > 0.0 && x.log2().fract() == 0.0 {
        format!("2^{}", x.log2())
    } else {
        format!("{x}")
    }
}

/// serde's `deserialize_with` for a loss-scaling field: a policy name ([`FromStr`]) or the
/// object [`LossScaling`]'s serde form writes (`{"kind": "dynamic", ...}`), as before names
/// existed.
///
/// # Errors
/// serde's custom error with the policy's or the object's problem.
pub fn deserialize_policy<'de, D: serde::Deserializer<'de>>(d: D) -> Result<LossScaling, D::Error> {
    use serde::de::Error as _;
    match Value::deserialize(d)? {
        Value::String(name) => name.parse().map_err(D::Error::custom),
        other => LossScaling::deserialize(other).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests;
