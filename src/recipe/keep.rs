//! Per-layer recipes: layers, named by glob patterns, that keep another recipe's formats.
//!
//! ```text
//! {"name": "nvfp4", ..., "keep": {"0.linear": "fp32", "*.lstm": "bf16-master"}}
//! ```
//! The first pattern (in the file's order) that matches a layer's name decides it; a layer no
//! pattern matches uses the base recipe. A matching layer takes the per-layer formats of its
//! kept recipe ([`Recipe::for_layer`]); everything global stays the base recipe's.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Recipe;

/// The `keep` of a recipe: `(pattern, recipe)` pairs in the order written. Empty means no
/// per-layer recipes (and is not written: recipes without it serialise as they always did).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Keep(pub Vec<(String, Recipe)>);

impl Keep {
    /// Whether no layer keeps another recipe.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The index (in order) of the first pattern that matches layer `name`, if any.
    #[must_use]
    pub fn find(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|(pattern, _)| glob(pattern, name))
    }

    /// Checks every pattern's syntax and that no kept recipe has its own `keep`.
    ///
    /// # Errors
    /// The first problem, in words.
    pub fn validate(&self) -> Result<(), String> {
        for (pattern, recipe) in &self.0 {
            if pattern.is_empty() {
                return Err("keep: an empty pattern matches no layer".into());
            }
            if unclosed_class(pattern) {
                return Err(format!(
                    "keep pattern '{pattern}': a '[' without its ']' (a character class)"
                ));
            }
            if !recipe.keep.is_empty() {
                return Err(format!(
                    "keep pattern '{pattern}': the kept recipe has its own keep (nested keep is not allowed)"
                ));
            }
            recipe.validate().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// A kept recipe is written as its preset name when it is that preset, else as the object.
impl Serialize for Keep {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (pattern, recipe) in &self.0 {
            if Recipe::preset(&recipe.name).is_ok_and(|p| &p == recipe) {
                map.serialize_entry(pattern, &recipe.name)?;
            } else {
                map.serialize_entry(pattern, recipe)?;
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Keep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Keep, D::Error> {
        // serde_json's `preserve_order`: the map keeps the file's order, which decides.
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let mut keep = Vec::with_capacity(map.len());
        for (pattern, value) in map {
            let recipe = Recipe::from_value(value)
                .map_err(|e| serde::de::Error::custom(format!("keep pattern '{pattern}': {e}")))?;
            keep.push((pattern, recipe));
        }
        let keep = Keep(keep);
        keep.validate().map_err(serde::de::Error::custom)?;
        Ok(keep)
    }
}

/// Whether `pattern` has a `[` that opens no class (no `]` after it): [`glob`] reads it as a
/// literal, as fnmatch does, but in a layer pattern it is surely a mistake.
fn unclosed_class(pattern: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    (0..p.len()).any(|k| p[k] == '[' && class(&p[k..], '[').is_none())
}

/// Whether `name` matches the fnmatch-style `pattern`: `*` any run of characters (dots
/// included), `?` one character, `[abc]`, `[a-z]` and `[!abc]` a character class; everything
/// else matches itself. Python's `fnmatch.fnmatchcase`, which the PyTorch side uses.
#[must_use]
pub fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // The classic backtracking match: on a mismatch, let the last `*` swallow one more.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        let step = match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
                continue;
            }
            Some('?') => Some(i + 1),
            Some('[') => match class(&p[i..], n[j]) {
                Some((hit, len)) => hit.then_some(i + len),
                None => (n[j] == '[').then_some(i + 1),
            },
            Some(&c) => (c == n[j]).then_some(i + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                i = next;
                j += 1;
            }
            (None, Some((si, sj))) => {
                i = si + 1;
                j = sj + 1;
                star = Some((si, sj + 1));
            }
            (None, None) => return false,
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The character class at the start of `p` (which starts with `[`) against `c`: whether it
/// matches and the class's length, or `None` when it is not closed (then `[` is a literal and
/// matches only itself, as fnmatch has it).
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let negate = p.get(1) == Some(&'!');
    let start = 1 + usize::from(negate);
    // A ']' first in the class is a member.
    let close = (start + 1..p.len()).find(|&k| p[k] == ']')?;
    let members = &p[start..close];
    let mut hit = false;
    let mut k = 0;
    while k < members.len() {
        if k + 2 < members.len() && members[k + 1] == '-' {
            hit |= members[k] <= c && c <= members[k + 2];
            k += 3;
        } else {
            hit |= members[k] == c;
            k += 1;
        }
    }
    Some((hit != negate, close + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_is_fnmatch() {
        for (pattern, name, want) in [
            ("*", "0.linear", true),
            ("*", "", true),
            ("0.linear", "0.linear", true),
            ("0.linear", "10.linear", false),
            ("*.linear", "g.0.linear", true),
            ("*.lstm", "1.lstm", true),
            ("?.linear", "0.linear", true),
            ("?.linear", "10.linear", false),
            ("[02].linear", "2.linear", true),
            ("[02].linear", "1.linear", false),
            ("[!02].linear", "1.linear", true),
            ("[0-3].*", "3.relu", true),
            ("[0-3].*", "4.relu", false),
            ("d.*", "g.0.linear", false),
            ("*a*b", "xaxxb", true),
            ("*a*b", "xaxxbc", false),
            ("[.linear", "[.linear", true),
        ] {
            assert_eq!(glob(pattern, name), want, "{pattern} {name}");
        }
    }

    #[test]
    fn order_decides_and_bad_keeps_are_errors() {
        let r: Recipe = serde_json::from_str(
            r#"{"name":"x","weights":"fp32","activations":"fp32","activation_grads":"fp32",
                "weight_grads":"fp32","optimizer_state":"fp32","master_weights":"fp32",
                "keep":{"2.linear":"bf16-master","*":"fp32"}}"#,
        )
        .unwrap();
        assert_eq!(r.keep.find("2.linear"), Some(0));
        assert_eq!(r.keep.find("0.linear"), Some(1));
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            json.ends_with(r#""keep":{"2.linear":"bf16-master","*":"fp32"}}"#),
            "{json}"
        );
        let bad = |keep: &str| {
            let text = format!(
                r#"{{"name":"nvfp4","weights":"fp32","activations":"fp32","activation_grads":"fp32","weight_grads":"fp32","optimizer_state":"fp32","master_weights":"fp32","keep":{keep}}}"#
            );
            Recipe::from_value(serde_json::from_str(&text).unwrap()).unwrap_err()
        };
        let nested = bad(
            r#"{"0.linear":{"name":"y","weights":"fp32","activations":"fp32","activation_grads":"fp32","weight_grads":"fp32","optimizer_state":"fp32","master_weights":"fp32","keep":{"*":"fp32"}}}"#,
        );
        assert!(nested.contains("nested keep"), "{nested}");
        assert!(bad(r#"{"[0.linear":"fp32"}"#).contains("without its ']'"));
        assert!(bad(r#"{"0.linear":"fp17"}"#).contains("keep pattern '0.linear'"));
        assert!(bad(r#"{"0.linear":3}"#).contains("preset name or a recipe object"));
    }
}
