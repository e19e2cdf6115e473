//! What a value may be rounded into: an element format or a block-scaled format, parsed from
//! one name (`quantize --format`, `formats NAME...`, and the Python package read it the same way).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{BLOCK_PRESETS, BlockFormat, FloatFormat, PRESETS};
use crate::error::Error;

/// An element format (one format for every value) or a block-scaled format (blocks of values
/// sharing scales); (de)serialised as its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Target {
    /// One format for every value.
    Element(FloatFormat),
    /// Blocks of values sharing scales.
    Block(BlockFormat),
}

impl Target {
    /// The format the values are rounded to: the element format, or a block format's element.
    #[must_use]
    pub fn element(&self) -> FloatFormat {
        match self {
            Target::Element(f) => *f,
            Target::Block(b) => b.element(),
        }
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The block format, if this is one.
    #[must_use]
    pub fn block(&self) -> Option<BlockFormat> {
        match self {
            Target::Element(_) => None,
            Target::Block(b) => Some(*b),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Element(x) => x.fmt(f),
            Target::Block(b) => b.fmt(f),
        }
    }
}

crate::names::try_from_string!(Target, into String);

impl From<FloatFormat> for Target {
    fn from(f: FloatFormat) -> Self {
        Target::Element(f)
    }
}

impl FromStr for Target {
    type Err = Error;
    /// An element format name, else a block format name; the message for a name that is neither
    /// lists both, from their lists of names.
    fn from_str(s: &str) -> crate::Result<Target> {
        if let Ok(f) = s.parse::<FloatFormat>() {
            return Ok(Target::Element(f));
        }
        match s.parse::<BlockFormat>() {
            Ok(b) => Ok(Target::Block(b)),
            // A tile's own message says which part is wrong.
            Err(e) if s.contains('@') => Err(e),
            Err(_) => {
                let blocks: Vec<&str> = BLOCK_PRESETS.iter().map(|(n, _)| *n).collect();
                Err(Error::UnknownTarget {
                    name: s.trim().to_string(),
                    expected: format!(
                        "an element format ({} or eXmY with X in 2..=8 and Y in 1..=23) or a \
                         block format ({} or any tile ELEMENT@RxC)",
                        super::preset_names(),
                        blocks.join(", ")
                    ),
                })
            }
        }
    }
}

/// The formats `names` name, element formats and block formats apart, each in the order given;
/// with no names, every preset of both (what `mixprec formats` lists).
///
/// # Errors
/// The first name that is neither.
pub fn split_targets(names: &[String]) -> crate::Result<(Vec<FloatFormat>, Vec<BlockFormat>)> {
    if names.is_empty() {
        return Ok((
            PRESETS.iter().map(|(_, f)| *f).collect(),
            BLOCK_PRESETS.iter().map(|(_, f)| *f).collect(),
        ));
    }
    let (mut formats, mut blocks) = (Vec::new(), Vec::new());
    // Each format once, however often or under whichever alias it is named.
    for name in names {
        match name.parse()? {
            Target::Element(f) if !formats.contains(&f) => formats.push(f),
            Target::Block(b) if !blocks.contains(&b) => blocks.push(b),
            _ => {}
        }
    }
    Ok((formats, blocks))
}
