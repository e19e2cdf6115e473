//! Reading JSON files people write (configs) strictly: a repeated key is an error, and a value
//! of the wrong type is named by its path of keys.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::Error;

/// The JSON text `bytes` of the file `path`, as a value.
///
/// # Errors
/// [`Error::BadFile`] for text that is not JSON (with serde's line and column) or that repeats
/// a key in one object (the path to it).
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> crate::Result<Value> {
    let bad = |problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    let value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    match duplicate_key(bytes) {
        Some(key) => Err(bad(format!("the key '{key}' appears more than once"))),
        None => Ok(value),
    }
}

/// `T` from `value`, read from the file `path`.
///
/// # Errors
/// [`Error::BadFile`] with serde's message, after the path of keys to the value it is about
/// (`optimizer.lr: invalid type: string "x", expected f64`).
pub(crate) fn from_value<T: DeserializeOwned>(path: &Path, value: Value) -> crate::Result<T> {
    tracked(value, |d| T::deserialize(d)).map_err(|problem| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    })
}

/// `deserialize` run on `value` with the path of keys tracked; its error as [`at_path`] words
/// it. For the types whose own `Deserialize` reads a [`Value`] first and would lose the path.
pub(crate) fn tracked<T>(
    value: Value,
    deserialize: impl for<'a, 'b> FnOnce(
        serde_path_to_error::Deserializer<'a, 'b, Value>,
    ) -> Result<T, serde_json::Error>,
) -> Result<T, String> {
    let mut track = serde_path_to_error::Track::new();
    deserialize(serde_path_to_error::Deserializer::new(value, &mut track))
        .map_err(|e| at_path(&track.path(), &e))
}

/// `error`, after the path of keys to the value it is about when that is not the top (for an
/// unknown key, the path to the object that holds it: the message names the key).
pub(crate) fn at_path(path: &serde_path_to_error::Path, error: &dyn fmt::Display) -> String {
    let error = error.to_string();
    let mut at = path.to_string();
    if let Some(key) = error
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next())
    {
        if at == key {
            at = ".".into();
        } else if let Some(parent) = at.strip_suffix(&format!(".{key}")) {
            at = parent.to_string();
        }
    }
    if at == "." {
        error
    } else {
        format!("{at}: {error}")
    }
}

/// The first key that appears twice in one object of the JSON text `json`, as the path to it
/// (`optimizer.lr`, `layers[2].name`). JSON parsers keep the last of the two without a word,
/// so a config or a header would mean something other than it reads. `None` when no key repeats
/// or the text is not valid JSON (which the parser then reports).
pub(crate) fn duplicate_key(json: &[u8]) -> Option<String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    Repeated.deserialize(&mut de).ok().flatten()
}

/// Visits any JSON value; yields the path of the first repeated key in it.
struct Repeated;

impl<'de> DeserializeSeed<'de> for Repeated {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Repeated {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = HashSet::new();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            let inner = map.next_value_seed(Repeated)?;
            if found.is_none() {
                found = match inner {
                    Some(path) if path.starts_with('[') => Some(format!("{key}{path}")),
                    Some(path) => Some(format!("{key}.{path}")),
                    None => (!seen.insert(key.clone())).then_some(key),
                };
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut i = 0;
        while let Some(inner) = seq.next_element_seed(Repeated)? {
            if found.is_none() {
                found = inner.map(|path| {
                    if path.starts_with('[') {
                        format!("[{i}]{path}")
                    } else {
                        format!("[{i}].{path}")
                    }
                });
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::duplicate_key;

    #[test]
    fn repeated_keys_are_found_at_any_depth() {
        for (json, want) in [
            (r#"{"a": 1, "b": 2}"#, None),
            (r#"{"a": 1, "a": 2}"#, Some("a")),
            (r#"{"a": {"x": 1, "y": {"z": 1, "z": 2}}}"#, Some("a.y.z")),
            (r#"{"a": [1, {"k": 1}, {"k": 1, "k": 2}]}"#, Some("a[2].k")),
            (r#"[[{"k": 1, "k": 2}]]"#, Some("[0][0].k")),
            (r#"{"a": {"k": 1}, "b": {"k": 1}}"#, None),
            (r#"{"a": 1, "b": {"c": 1, "c": 2}, "a": 3}"#, Some("b.c")),
            (r#"{"a": null, "a": true}"#, Some("a")),
            ("not json", None),
            ("[1, 2.5, \"s\", null, false]", None),
        ] {
            assert_eq!(duplicate_key(json.as_bytes()).as_deref(), want, "{json}");
        }
    }
}
