//! Block-scaled formats: values stored in a narrow element format, each block of them sharing a
//! scale set by the block's largest magnitude (its amax), so what underflows or saturates is
//! decided per block, not per tensor.
//!
//! Three schemes, one API ([`BlockFormat`], [`BlockRounder`]):
//! - OCP Microscaling, MX ([`mx`](MxFormat)): blocks of 32 along a row, a power-of-two
//!   [`E8m0`] scale; elements fp8-e4m3, fp8-e5m2, fp6-e2m3, fp6-e3m2 or fp4-e2m1;
//! - NVFP4 ([`Nvfp4TensorScale`]): blocks of 16 fp4-e2m1 values along a row, an E4M3 block
//!   scale under one FP32 scale per tensor, as Transformer Engine computes them;
//! - tiles ([`TileFormat`]): `R x C` tiles of a matrix with an FP32 scale `amax / max_elem`, as
//!   DeepSeek-V3 trains (1 x 128 activation tiles, 128 x 128 weight blocks).
//!
//! Each scheme's module docs give its formulas and its edge cases (zero blocks, NaN, infinity)
//! with the source they follow. For all of them the elements round with the given
//! [`RoundOptions`] (mode, subnormals, seed) but always saturate, and the counts are per
//! element, relative to its block: underflow (a nonzero value that became zero), subnormal (in
//! the element format), overflow (saturated to +-max) and NaN.
//!
//! ```
//! use mixprec::format::{BlockFormat, BlockRounder, RoundOptions};
//!
//! let nvfp4: BlockFormat = "nvfp4".parse().unwrap();
//! assert_eq!(nvfp4.block_shape(), (1, 16));
//! let r = BlockRounder::new(nvfp4, RoundOptions::default());
//! // One row of 16: amax 6 makes the block scale 448 (E4M3's max) and every element exact.
//! let mut xs: Vec<f32> = (0..16).map(|i| [0.5, 1.0, 1.5, 6.0][i % 4]).collect();
//! let want = xs.clone();
//! let counts = r.round_matrix_at(&mut xs, 16, 0);
//! assert_eq!(xs, want);
//! assert_eq!(counts.underflow + counts.overflow, 0);
//! ```

mod apply;
mod mx;
mod nvfp4;
mod tile;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use mx::{E8m0, MX_BLOCK, MX_PRESETS, MxFormat, MxRounder};
pub use nvfp4::{NVFP4_BLOCK, Nvfp4TensorScale};
pub use tile::{MAX_TILE_SIDE, TileFormat};

use super::slice::Scale;
use super::{
    FP4_E2M1, FP8_E4M3, FloatFormat, KernelPath, Overflow, RoundCounts, RoundOptions, Rounder,
};
use crate::error::Error;
use crate::isa::Isa;
use nvfp4::TensorScale;

/// A block scheme with whatever it needs to scale each block: its format, and for NVFP4 the
/// tensor's scale.
#[derive(Clone, Copy, Debug)]
enum Plan {
    Mx(MxFormat),
    Nvfp4(TensorScale),
    Tile(TileFormat),
}

impl Plan {
    /// Rows x columns of one block.
    fn shape(&self) -> (usize, usize) {
        match self {
            Plan::Mx(_) => (1, MX_BLOCK),
            Plan::Nvfp4(_) => (1, NVFP4_BLOCK),
            Plan::Tile(t) => (t.rows(), t.cols()),
        }
    }

    /// MX's own one-pass rounding of a chunk of whole blocks (its scales are powers of two:
    /// [`mx::chunk`]); `None` for the other schemes, whose blocks are scaled in registers.
    fn fused_mx(
        &self,
        path: KernelPath,
        element: &Rounder,
        chunk: &mut [f32],
        pos: u64,
    ) -> Option<RoundCounts> {
        match self {
            Plan::Mx(f) => Some(mx::chunk(path, f, element, chunk, pos)),
            Plan::Nvfp4(_) | Plan::Tile(_) => None,
        }
    }

    /// The scales of the blocks of a chunk of one row (blocks from its start, the last may be
    /// shorter): each from its block's amax, NVFP4's E4M3 block scales rounded together.
    fn block_scales(&self, chunk: &[f32]) -> Vec<Scale> {
        match self {
            Plan::Nvfp4(t) => t.block_scales(apply::nvfp4_amaxes_with(Isa::best(), chunk)),
            // MX's scales are asked for here only by the tests' unfused twin.
            Plan::Mx(_) | Plan::Tile(_) => chunk
                .chunks(self.shape().1)
                .map(|b| self.scale(apply::amax_bits(b)))
                .collect(),
        }
    }

    /// The scale of a block whose largest magnitude has the f32 bits `amax` (NaN and infinity
    /// are above every finite value).
    #[inline(always)]
    fn scale(&self, amax: u32) -> Scale {
        match self {
            Plan::Mx(f) => f.scale(amax),
            Plan::Nvfp4(t) => t.scale(amax),
            Plan::Tile(t) => t.scale(amax),
        }
    }
}

/// A block-scaled format: the scheme and its element format. Read and written by its name
/// ([`BLOCK_PRESETS`], or any tile `ELEMENT@RxC`), in flags and config files alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum BlockFormat {
    /// An OCP MX format: blocks of 32 along a row, E8M0 scales.
    Mx(MxFormat),
    /// NVFP4: blocks of 16 fp4-e2m1 values along a row, E4M3 block scales, an FP32 tensor scale.
    Nvfp4,
    /// Tiles of `R x C` values with FP32 scales.
    Tile(TileFormat),
}

/// The named block formats, in the order `mixprec formats` lists them: the MX formats, NVFP4,
/// and DeepSeek-V3's two tiles (any other `ELEMENT@RxC` is accepted too).
pub const BLOCK_PRESETS: [(&str, BlockFormat); 8] = [
    ("mxfp8-e4m3", BlockFormat::Mx(MX_PRESETS[0].1)),
    ("mxfp8-e5m2", BlockFormat::Mx(MX_PRESETS[1].1)),
    ("mxfp6-e2m3", BlockFormat::Mx(MX_PRESETS[2].1)),
    ("mxfp6-e3m2", BlockFormat::Mx(MX_PRESETS[3].1)),
    ("mxfp4", BlockFormat::Mx(MX_PRESETS[4].1)),
    ("nvfp4", BlockFormat::Nvfp4),
    (
        "fp8-e4m3@1x128",
        BlockFormat::Tile(TileFormat::preset(FP8_E4M3, 1, 128)),
    ),
    (
        "fp8-e4m3@128x128",
        BlockFormat::Tile(TileFormat::preset(FP8_E4M3, 128, 128)),
    ),
];

impl BlockFormat {
    /// The element format.
    #[must_use]
    pub fn element(&self) -> FloatFormat {
        match self {
            BlockFormat::Mx(f) => f.element(),
            BlockFormat::Nvfp4 => FP4_E2M1,
            BlockFormat::Tile(t) => t.element(),
        }
    }

    /// Rows x columns of one block: MX (1, 32), NVFP4 (1, 16), a tile (R, C).
    #[must_use]
    pub fn block_shape(&self) -> (usize, usize) {
        match self {
            BlockFormat::Mx(_) => (1, MX_BLOCK),
            BlockFormat::Nvfp4 => (1, NVFP4_BLOCK),
            BlockFormat::Tile(t) => (t.rows(), t.cols()),
        }
    }

    /// The canonical name: `mxfp8-e4m3`, `nvfp4`, `fp8-e4m3@1x128`.
    #[must_use]
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// The scheme's machine name: `mx`, `nvfp4` or `tile`.
    #[must_use]
    pub fn scheme(&self) -> &'static str {
        match self {
            BlockFormat::Mx(_) => "mx",
            BlockFormat::Nvfp4 => "nvfp4",
            BlockFormat::Tile(_) => "tile",
        }
    }

    /// The properties `mixprec formats --json` prints for the block format: its name, scheme,
    /// block shape, element format (with its max and smallest subnormal) and scale format.
    #[must_use]
    pub fn properties(&self) -> serde_json::Value {
        let (rows, cols) = self.block_shape();
        let element = self.element();
        serde_json::json!({
            "name": self.name(),
            "scheme": self.scheme(),
            "block_rows": rows,
            "block_cols": cols,
            "element": element.name(),
            "element_max": element.max(),
            "element_min_subnormal": element.min_subnormal(),
            "scale": self.scale_format(),
        })
    }

    /// How the scales are stored: `e8m0` (MX), `e4m3 + fp32 per tensor` (NVFP4), `fp32`
    /// (tiles).
    #[must_use]
    pub fn scale_format(&self) -> &'static str {
        match self {
            BlockFormat::Mx(_) => "e8m0",
            BlockFormat::Nvfp4 => "e4m3 + fp32 per tensor",
            BlockFormat::Tile(_) => "fp32",
        }
    }
}

/// The message for a name that is no block format, generated from [`BLOCK_PRESETS`].
fn expected_names() -> String {
    let names: Vec<&str> = BLOCK_PRESETS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !n.contains('@'))
        .collect();
    format!(
        "expected one of {}, or a tile ELEMENT@RxC such as fp8-e4m3@1x128 or fp8-e4m3@128x128",
        names.join(", ")
    )
}

impl FromStr for BlockFormat {
    type Err = Error;

    /// Parses a name of [`BLOCK_PRESETS`] (any case) or a tile `ELEMENT@RxC` (see
    /// [`TileFormat`]).
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.trim().to_ascii_lowercase();
        if lower.contains('@') {
            return s.parse().map(BlockFormat::Tile);
        }
        BLOCK_PRESETS
            .iter()
            .find(|(name, _)| *name == lower)
            .map(|(_, f)| *f)
            .ok_or_else(|| Error::BadBlockFormat {
                name: s.trim().to_string(),
                problem: expected_names(),
            })
    }
}

impl fmt::Display for BlockFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockFormat::Mx(m) => f.write_str(m.name()),
            BlockFormat::Nvfp4 => f.write_str("nvfp4"),
            BlockFormat::Tile(t) => t.fmt(f),
        }
    }
}

crate::names::try_from_string!(BlockFormat, into String);

/// Rounds matrices into a block-scaled format.
///
/// A matrix is row-major with `cols` columns (a 1-D tensor is one row; if `cols` does not divide
/// `xs.len()`, the last row is shorter, as at the end of a stream). Blocks run along each row from column 0, so a row's last block may be shorter;
/// tiles cover `R` rows by `C` columns, the edge tiles smaller. Where `C` divides `cols`, the
/// blocks of a 1-row scheme do not depend on `cols`. `xs[i]` is position `start + i` of the
/// stochastic stream. NVFP4's tensor scale is taken over the whole of `xs`.
///
/// ```
/// use mixprec::format::{BlockRounder, RoundOptions};
///
/// // Two rows of 3 in 1 x 2 tiles of fp8-e4m3: the tiles are [1000, 3], [0.001], [1, 2], [3].
/// let r = BlockRounder::new("fp8-e4m3@1x2".parse().unwrap(), RoundOptions::default());
/// let mut xs = [1000.0_f32, 3.0, 0.001, 1.0, 2.0, 3.0];
/// let counts = r.round_matrix_at(&mut xs, 3, 0);
/// // 3 is below 1000's tile's range: 3 / (1000 / 448) = 1.344 rounds to 1.375.
/// assert_eq!(xs[2], 0.001);
/// assert!((xs[1] - 1.375 * 1000.0 / 448.0).abs() < 1e-6);
/// assert_eq!(counts.underflow, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockRounder {
    format: BlockFormat,
    element: Rounder,
}

impl BlockRounder {
    /// A rounder for `format`; its elements round with `options`, saturating.
    #[must_use]
    pub fn new(format: BlockFormat, options: RoundOptions) -> Self {
        let options = RoundOptions {
            overflow: Overflow::Saturate,
            ..options
        };
        BlockRounder {
            format,
            element: Rounder::new(format.element(), options),
        }
    }

    /// The block format.
    #[must_use]
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// The element rounder (its overflow rule is always saturate).
    #[must_use]
    pub fn element(&self) -> Rounder {
        self.element
    }

    /// Rounds the row-major matrix `xs` with `cols` columns in place; `xs[i]` is position
    /// `start + i` of the stochastic stream.
    ///
    /// # Panics
    /// If `xs` is not empty and `cols` is 0.
    pub fn round_matrix_at(&self, xs: &mut [f32], cols: usize, start: u64) -> RoundCounts {
        self.round_f32(xs, cols, start, false, None)
    }

    /// [`BlockRounder::round_matrix_at`] on all threads, with the same results.
    ///
    /// # Panics
    /// As [`BlockRounder::round_matrix_at`].
    pub fn par_round_matrix_at(&self, xs: &mut [f32], cols: usize, start: u64) -> RoundCounts {
        self.round_f32(xs, cols, start, true, None)
    }

    /// [`BlockRounder::par_round_matrix_at`] for a part of a larger tensor whose largest
    /// magnitude is `tensor_amax` (NaN or infinity if the tensor holds one): NVFP4's tensor
    /// scale comes from it rather than from `xs`, so that a tensor rounded part by part gives
    /// the bits of the whole. The other formats have no tensor scale and ignore it.
    ///
    /// # Panics
    /// As [`BlockRounder::round_matrix_at`].
    pub fn par_round_part_at(
        &self,
        xs: &mut [f32],
        cols: usize,
        start: u64,
        tensor_amax: f32,
    ) -> RoundCounts {
        let bits = tensor_amax.to_bits() & 0x7fff_ffff;
        self.round_f32(xs, cols, start, true, Some(bits))
    }

    /// [`BlockRounder::round_matrix_at`] for f64 values (the training core's f64 path): the
    /// scales computed as for f32 values from each block's amax rounded to f32, the scaling
    /// and the element rounding (once, exactly) in f64. For f32 inputs in nearest-even rounding
    /// the results, rounded to f32, are those of the f32 path.
    ///
    /// # Panics
    /// As [`BlockRounder::round_matrix_at`].
    pub fn round_matrix_f64_at(&self, xs: &mut [f64], cols: usize, start: u64) -> RoundCounts {
        let amax = || {
            xs.iter()
                .map(|x| (x.abs() as f32).to_bits() & 0x7fff_ffff)
                .max()
                .unwrap_or(0)
        };
        let Some(plan) = self.plan(amax) else {
            xs.fill(f64::NAN);
            return all_nan(xs.len());
        };
        apply::round_f64(&plan, &self.element, xs, cols, start)
    }

    /// Rounds `xs`; NVFP4's tensor scale from `tensor_amax` (f32 bits of a magnitude) if given,
    /// else from `xs`.
    fn round_f32(
        &self,
        xs: &mut [f32],
        cols: usize,
        start: u64,
        parallel: bool,
        tensor_amax: Option<u32>,
    ) -> RoundCounts {
        let amax = || {
            if let Some(amax) = tensor_amax {
                amax
            } else if parallel && xs.len() > apply::PAR_TASK {
                use rayon::prelude::*;
                xs.par_chunks(apply::PAR_TASK)
                    .map(amax_bits)
                    .max()
                    .unwrap_or(0)
            } else {
                amax_bits(xs)
            }
        };
        let Some(plan) = self.plan(amax) else {
            xs.fill(f32::NAN);
            return all_nan(xs.len());
        };
        apply::round_f32(&plan, &self.element, xs, cols, start, parallel)
    }

    /// How to round into the format; `amax` (f32 bits of a magnitude) is asked for NVFP4's
    /// tensor scale only. `None` when that amax gives no tensor scale (it is infinite or NaN):
    /// every value is then NaN.
    fn plan(&self, amax: impl FnOnce() -> u32) -> Option<Plan> {
        Some(match self.format {
            BlockFormat::Mx(f) => Plan::Mx(f),
            BlockFormat::Tile(t) => Plan::Tile(t),
            BlockFormat::Nvfp4 => Plan::Nvfp4(Nvfp4TensorScale::new(f32::from_bits(amax()))?),
        })
    }
}

/// The counts of rounding `n` values that all became NaN.
fn all_nan(n: usize) -> RoundCounts {
    RoundCounts {
        nan: n as u64,
        ..RoundCounts::default()
    }
}

/// The bit pattern of the largest magnitude among `xs`, its sign cleared (0 for none): for
/// non-negative floats integer order is magnitude order, so infinity sorts above every finite
/// value and NaN above infinity. One pass, on this CPU's widest vector build (the baseline
/// build has no unsigned max: five SSE2 instructions a vector): NVFP4's tensor scale, and the
/// Python binding's reads of a gradient's largest magnitude.
pub fn amax_bits(xs: &[f32]) -> u32 {
    apply::amax_bits_with(Isa::best(), xs)
}
