//! Tiles: `R x C` blocks of a matrix sharing one FP32 scale, as DeepSeek-V3 trained in FP8
//! (1 x 128 tiles of activations, 128 x 128 blocks of weights; DeepSeek-V3 technical report,
//! section 3.3.2).
//!
//! ```text
//! scale   = amax_tile / max_elem        in f32 (not a power of two)
//! P_i     = round_elem(x_i / scale)     the quotient in f32, elements saturating
//! value_i = P_i * scale                 in f32
//! ```
//!
//! Choices where the sources differ or say nothing:
//! - the quotient is a division in f32, rounded once into f32 before the element rounding
//!   (DeepSeek's DeepGEMM test helpers `per_token_cast_to_fp8` / `per_block_cast_to_fp8`
//!   multiply by `1 / scale` instead, and Transformer Engine's `Float8BlockScaling` by
//!   `max_elem / amax`: in nearest-even rounding into 8-bit elements the three agree except
//!   where an f32 rounding lands a value on a tie);
//! - a zero tile (amax 0) has scale 1, so its values stay zeros with their signs (Transformer
//!   Engine's scale for amax 0; DeepGEMM's helpers clamp amax at 1e-4, which would also change
//!   tiles of tiny but nonzero values, so we do not);
//! - a tile whose amax is so small that `amax / max_elem` rounds to zero in f32 takes f32's
//!   smallest subnormal 2^-149 as its scale;
//! - a tile holding a NaN or an infinity becomes NaN (counted as NaN), as an MX block with the
//!   NaN scale does;
//! - the edge tiles of a matrix whose sides are not multiples of the tile are smaller.
//!
//! A quotient that vanishes in f32 keeps its sign and lowest bit (only its being nonzero matters;
//! see `apply`).

use std::fmt;
use std::str::FromStr;

use super::super::{FloatFormat, PRESETS};
use super::Scale;
use crate::error::Error;

/// The largest tile side accepted (a bound on what a name can ask for, far above the 128 in use).
pub const MAX_TILE_SIDE: usize = 65536;

/// A tile format: an element format and a tile shape `rows x cols`, named `ELEMENT@RxC`
/// (`fp8-e4m3@1x128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileFormat {
    element: FloatFormat,
    rows: usize,
    cols: usize,
}

impl TileFormat {
    /// Tiles of `rows x cols` values of `element`.
    ///
    /// # Errors
    /// [`Error::BadBlockFormat`] if a side is outside 1..=[`MAX_TILE_SIDE`].
    pub fn new(element: FloatFormat, rows: usize, cols: usize) -> Result<Self, Error> {
        if !(1..=MAX_TILE_SIDE).contains(&rows) || !(1..=MAX_TILE_SIDE).contains(&cols) {
            return Err(Error::BadBlockFormat {
                name: format!("{}@{rows}x{cols}", element.name()),
                problem: shape_problem(&format!("{rows}x{cols}")),
            });
        }
        Ok(TileFormat {
            element,
            rows,
            cols,
        })
    }

    /// The same, for sides known to be valid (the presets).
    pub(super) const fn preset(element: FloatFormat, rows: usize, cols: usize) -> Self {
        TileFormat {
            element,
            rows,
            cols,
        }
    }

    /// The element format.
    #[must_use]
    pub const fn element(&self) -> FloatFormat {
        self.element
    }

    /// Rows of one tile.
    #[must_use]
    pub const fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of one tile.
    #[must_use]
    pub const fn cols(&self) -> usize {
        self.cols
    }

    /// The scale of a tile whose largest magnitude is `amax` (finite): `amax / max_elem` in
    /// f32, 1 for a zero tile, at least 2^-149.
    #[must_use]
    pub fn tile_scale(&self, amax: f32) -> f32 {
        let amax = amax.abs();
        if amax == 0.0 {
            return 1.0;
        }
        (amax / self.element.max() as f32).max(f32::from_bits(1))
    }

    /// What the scale of a tile with amax bits `amax` does to its values.
    #[inline]
    pub(super) fn scale(&self, amax: u32) -> Scale {
        if amax >= 0x7f80_0000 {
            return Scale::Nan;
        }
        Scale::Div(self.tile_scale(f32::from_bits(amax)))
    }
}

/// The message for a tile shape that is not `RxC` with sides in range.
fn shape_problem(shape: &str) -> String {
    format!(
        "the tile shape '{shape}' must be RxC with R and C whole numbers in 1..={MAX_TILE_SIDE}"
    )
}

impl FromStr for TileFormat {
    type Err = Error;

    /// Parses `ELEMENT@RxC`: any [`FloatFormat`] name, `@`, rows `x` columns.
    fn from_str(s: &str) -> Result<Self, Error> {
        let name = s.trim();
        let bad = |problem: String| Error::BadBlockFormat {
            name: name.to_string(),
            problem,
        };
        let (element, shape) = name
            .split_once('@')
            .ok_or_else(|| bad("a tile is named ELEMENT@RxC, e.g. fp8-e4m3@1x128".into()))?;
        let element: FloatFormat = element.parse().map_err(|_| {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            bad(format!(
                "unknown element format '{element}': expected {} or eXmY",
                names.join(", ")
            ))
        })?;
        let side = |t: &str| -> Option<usize> {
            let t = t.trim();
            (!t.is_empty() && t.len() <= 6 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse().ok())
                .flatten()
        };
        let (r, c) = shape
            .to_ascii_lowercase()
            .split_once('x')
            .and_then(|(r, c)| Some((side(r)?, side(c)?)))
            .ok_or_else(|| bad(shape_problem(shape)))?;
        TileFormat::new(element, r, c).map_err(|_| bad(shape_problem(shape)))
    }
}

impl fmt::Display for TileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}x{}", self.element, self.rows, self.cols)
    }
}
