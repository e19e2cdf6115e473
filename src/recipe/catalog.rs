//! The library's tables of names as one JSON object, for the Python binding (`names_json`), so
//! that Python reads them rather than restating them: the rounding modes and overflow rules a
//! recipe takes (with their aliases), the tensor classes a run directory names (with the
//! recipe key of each), the parts of optimizer state, and the block scaling schemes.

use serde_json::{Value, json};

use super::Class;
use super::class::OPTIMIZER_PARTS;
use crate::format::{BLOCK_PRESETS, Overflow, Rounding};

/// The tables, as described in the module docs:
/// ```text
/// {"rounding":        [{"name": "nearest-even", "aliases": ["nearest", "rne"]}, ...],
///  "overflow":        [{"name": "ieee", "aliases": []}, ...],
///  "classes":         [{"name": "weight", "recipe_key": "weights", "operand": false}, ...],
///  "optimizer_parts": [{"name": "momentum", "optimizer": "sgd"}, ...],
///  "block_schemes":   ["mx", "nvfp4", "tile"]}
/// ```
/// An operand class's `recipe_key` is a key of the recipe's `gemm_operands`; the update's is
/// `null` (it has no format).
#[must_use]
pub fn names_json() -> Value {
    let table = |t: &[(&str, &[&str])]| -> Vec<Value> {
        t.iter()
            .map(|(name, aliases)| json!({"name": name, "aliases": aliases}))
            .collect()
    };
    let classes: Vec<Value> = Class::ALL
        .iter()
        .map(|c| json!({"name": c.name(), "recipe_key": c.recipe_key(), "operand": c.is_operand()}))
        .collect();
    let parts: Vec<Value> = OPTIMIZER_PARTS
        .iter()
        .map(|(optimizer, name)| json!({"name": name, "optimizer": optimizer}))
        .collect();
    let mut schemes: Vec<&str> = BLOCK_PRESETS.iter().map(|(_, b)| b.scheme()).collect();
    schemes.dedup();
    json!({
        "rounding": table(Rounding::TABLE),
        "overflow": table(Overflow::TABLE),
        "classes": classes,
        "optimizer_parts": parts,
        "block_schemes": schemes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Target;
    use crate::recipe::Recipe;

    /// Every name and alias of the JSON reads back as its canonical name's value.
    #[test]
    fn rounding_and_overflow_names_parse_to_their_canonical_value() {
        let v = names_json();
        for entry in v["rounding"].as_array().unwrap() {
            let name = entry["name"].as_str().unwrap();
            let mode: Rounding = name.parse().unwrap();
            assert_eq!(mode.to_string(), name);
            for alias in entry["aliases"].as_array().unwrap() {
                assert_eq!(alias.as_str().unwrap().parse::<Rounding>().unwrap(), mode);
            }
        }
        let overflow: Vec<&str> = v["overflow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(overflow, ["ieee", "saturate"]);
        assert_eq!(v["rounding"].as_array().unwrap().len(), Rounding::ALL.len());
    }

    /// Each class's `recipe_key` is the key of a recipe's JSON that holds the format
    /// `Recipe::format_name` gives it, on a recipe whose classes all have different formats.
    #[test]
    fn recipe_keys_hold_each_class_format() {
        let mut r = Recipe::preset("fp32").unwrap();
        let f = |name: &str| name.parse().unwrap();
        (r.weights, r.activations, r.activation_grads) = (f("fp16"), f("bf16"), f("fp8-e5m2"));
        (r.weight_grads, r.optimizer_state) = (f("fp8-e4m3"), f("e5m7"));
        r.gemm_operands.input = f("e3m2").into();
        r.gemm_operands.weight = Target::Block("mxfp8-e4m3".parse().unwrap());
        r.gemm_operands.grad_output = f("e2m3").into();
        let recipe = serde_json::to_value(&r).unwrap();
        let v = names_json();
        let classes = v["classes"].as_array().unwrap();
        let names: Vec<&str> = classes
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, Class::ALL.map(Class::name));
        let mut seen = std::collections::BTreeSet::new();
        for (entry, class) in classes.iter().zip(Class::ALL) {
            let operand = entry["operand"].as_bool().unwrap();
            let Some(key) = entry["recipe_key"].as_str() else {
                assert_eq!(class, Class::Update);
                continue;
            };
            let holder = if operand {
                &recipe["gemm_operands"]
            } else {
                &recipe
            };
            assert_eq!(holder[key], r.format_name(class).as_str(), "{class:?}");
            assert!(seen.insert(r.format_name(class)), "{class:?}");
        }
    }

    /// The block schemes are those of the block presets, each once, and each preset's scheme
    /// is one of them.
    #[test]
    fn block_schemes_cover_the_presets() {
        let v = names_json();
        assert_eq!(v["block_schemes"], json!(["mx", "nvfp4", "tile"]));
        for (name, b) in BLOCK_PRESETS {
            assert_eq!(b.properties()["scheme"], b.scheme(), "{name}");
        }
    }
}
