//! OCP Microscaling (MX): 32 consecutive values share one power-of-two scale, an [`E8m0`].
//!
//! The OCP MX specification v1.0 (section 6.3) converts a block `V_1..V_32` of a tensor's
//! contiguous run (its last axis) as
//!
//! ```text
//! shared_exp = floor(log2(max_i |V_i|)) - emax_elem     clamped to -127..=127 (E8M0's range)
//! X          = 2^shared_exp                             the block's scale, an E8M0
//! P_i        = round_elem(V_i / X)                      elements saturate to +-max_elem
//! value_i    = X * P_i
//! ```
//!
//! `floor(log2(amax))` is taken exactly from amax's exponent (a float `log2` rounds values just
//! below a power of two up to it). Choices where the specification leaves room, as Microsoft's
//! reference (`microxcaling`, `mx_ops._quantize_mx`) makes them:
//! - an all-zero block has amax 0, read as 2^-126 (fp32's smallest normal), so its scale is the
//!   smallest, 2^-127; its values stay (signed) zeros;
//! - a block holding a NaN or an infinity gets the NaN scale (E8M0 0xff): all its values
//!   become NaN and are counted as NaN;
//! - the last block of a run whose length is not a multiple of 32 is shorter, with its own
//!   scale.
//!
//! The element rounding follows the [`RoundOptions`] given (mode, subnormals, seed; the value at
//! index `i` of the slice is position `start + i` of the stochastic stream), except that
//! overflow always saturates, as the specification requires. The counts are per element,
//! relative to its block: underflow (a nonzero value that became zero because its block's
//! scale left it below the element's range), subnormal, overflow (saturated to +-max: for
//! elements whose max is not `(2 - ulp) 2^emax`, such as E4M3's 448, the block's amax itself
//! may saturate) and NaN (values of NaN-scaled blocks).

use std::fmt;
use std::str::FromStr;

use super::super::{
    FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FloatFormat, KernelPath, Overflow,
    RoundCounts, RoundOptions, Rounder, pow2,
};
use super::apply;
use super::{Plan, Scale};
use crate::error::Error;

/// Values per MX block.
pub const MX_BLOCK: usize = 32;

/// The MX scale format E8M0: an unsigned 8-bit exponent, bias 127, no mantissa, no sign, no
/// zero; pattern `b` stands for `2^(b - 127)` (2^-127..2^127) and 0xff for NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct E8m0(u8);

impl E8m0 {
    /// The NaN scale.
    pub const NAN: E8m0 = E8m0(0xff);

    /// `2^e`, with `e` clamped to -127..=127.
    #[must_use]
    pub fn from_exponent(e: i32) -> E8m0 {
        E8m0((e.clamp(-127, 127) + 127) as u8)
    }

    /// The bit pattern.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The exponent `e` of the scale `2^e`; `None` for NaN.
    #[must_use]
    pub fn exponent(self) -> Option<i32> {
        (self.0 != 0xff).then(|| i32::from(self.0) - 127)
    }

    /// The scale's value.
    #[must_use]
    pub fn value(self) -> f64 {
        self.exponent().map_or(f64::NAN, pow2)
    }
}

/// An MX format: its element format, with blocks of [`MX_BLOCK`] values sharing an [`E8m0`]
/// scale. Named by [`MX_PRESETS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MxFormat {
    element: FloatFormat,
}

/// The MX formats of the OCP MX specification v1.0, with their names.
pub const MX_PRESETS: [(&str, MxFormat); 5] = [
    ("mxfp8-e4m3", MxFormat { element: FP8_E4M3 }),
    ("mxfp8-e5m2", MxFormat { element: FP8_E5M2 }),
    ("mxfp6-e2m3", MxFormat { element: FP6_E2M3 }),
    ("mxfp6-e3m2", MxFormat { element: FP6_E3M2 }),
    ("mxfp4", MxFormat { element: FP4_E2M1 }),
];

impl MxFormat {
    /// The element format.
    #[must_use]
    pub const fn element(&self) -> FloatFormat {
        self.element
    }

    /// The name (`mxfp8-e4m3`, ..., `mxfp4`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        MX_PRESETS
            .iter()
            .find(|(_, f)| f == self)
            .map_or("mx", |(name, _)| name)
    }

    /// The scale of one block: `2^(floor(log2 amax) - emax_elem)` clamped to E8M0's range, NaN
    /// if the block holds a NaN or an infinity (see the module docs).
    #[must_use]
    #[inline]
    pub fn block_scale(&self, block: &[f32]) -> E8m0 {
        self.scale_of_amax(apply::amax_bits(block))
    }

    /// [`MxFormat::block_scale`] from the bits of the block's largest magnitude.
    #[inline(always)]
    pub(super) fn scale_of_amax(&self, amax: u32) -> E8m0 {
        let floor_log2 = match amax {
            0x7f80_0000.. => return E8m0::NAN,
            0x0080_0000.. => (amax >> 23) as i32 - 127,
            0 => -126,
            _ => 31 - amax.leading_zeros() as i32 - 149,
        };
        E8m0::from_exponent(floor_log2 - self.element.emax())
    }

    /// What the block scale does to the block's values: multiplications by powers of two.
    #[inline(always)]
    pub(super) fn scale(&self, amax: u32) -> Scale {
        match self.scale_of_amax(amax).exponent() {
            Some(e) => Scale::Mul {
                down: pow2(-e) as f32,
                up: pow2(e) as f32,
            },
            None => Scale::Nan,
        }
    }
}

impl FromStr for MxFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.trim().to_ascii_lowercase();
        MX_PRESETS
            .iter()
            .find(|(name, _)| *name == lower)
            .map(|(_, f)| *f)
            .ok_or_else(|| crate::format::unknown_format(s))
    }
}

impl fmt::Display for MxFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Rounds `f32` slices into an MX format.
///
/// ```
/// use mixprec::format::{MxRounder, RoundOptions};
///
/// let r = MxRounder::new("mxfp8-e4m3".parse().unwrap(), RoundOptions::default());
/// // One block: amax 1000 = 1.95 x 2^9, so the scale is 2^(9 - 8) = 2 and 0.001 / 2 is below
/// // E4M3's smallest subnormal 2^-9 / 2: it underflows inside its block.
/// let mut xs = [1000.0_f32, 3.0, 0.001];
/// let counts = r.round_f32_slice(&mut xs);
/// assert_eq!(xs, [896.0, 3.0, 0.0]);
/// assert_eq!((counts.overflow, counts.underflow), (1, 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MxRounder {
    format: MxFormat,
    element: Rounder,
}

impl MxRounder {
    /// A rounder for `format`; its elements round with `options`, saturating.
    #[must_use]
    pub fn new(format: MxFormat, options: RoundOptions) -> Self {
        let options = RoundOptions {
            overflow: Overflow::Saturate,
            ..options
        };
        MxRounder {
            format,
            element: Rounder::new(format.element, options),
        }
    }

    /// The MX format.
    #[must_use]
    pub fn format(&self) -> MxFormat {
        self.format
    }

    /// The element rounder (its overflow rule is always saturate).
    #[must_use]
    pub fn element(&self) -> Rounder {
        self.element
    }

    /// Rounds `xs` in place, blocks of [`MX_BLOCK`] from its start, as positions 0.. of the
    /// stochastic stream.
    pub fn round_f32_slice(&self, xs: &mut [f32]) -> RoundCounts {
        self.round_f32_slice_at(xs, 0)
    }

    /// Rounds `xs` in place, blocks of [`MX_BLOCK`] from its start; `xs[i]` is position
    /// `start + i` of the stochastic stream.
    pub fn round_f32_slice_at(&self, xs: &mut [f32], start: u64) -> RoundCounts {
        let cols = xs.len().max(1);
        apply::round_f32(&self.plan(), &self.element, xs, cols, start, false)
    }

    /// [`MxRounder::round_f32_slice_at`] on all threads, with the same results.
    pub fn par_round_f32_slice_at(&self, xs: &mut [f32], start: u64) -> RoundCounts {
        let cols = xs.len().max(1);
        apply::round_f32(&self.plan(), &self.element, xs, cols, start, true)
    }

    /// The blocks and scales, for the shared block-scaling loops.
    pub(super) fn plan(&self) -> Plan {
        Plan::Mx(self.format)
    }
}
/// Rounds a chunk of whole MX blocks (the last may be shorter) in one pass, through a chosen
/// kernel: each block of 32 rounded by the element kernel with its exponent range shifted by
/// the block's scale exponent, no scaling (same bits, see `format::slice::pow2_blocks`); blocks
/// whose shifted range leaves f32's (tiny amax, the NaN scale) are scaled, rounded and scaled
/// back. [`KernelPath::Scalar`] scales every block (the unfused twin, for tests).
pub(super) fn chunk(
    path: KernelPath,
    format: &MxFormat,
    element: &Rounder,
    chunk: &mut [f32],
    pos: u64,
) -> RoundCounts {
    element.round_f32_pow2_blocks_at::<MX_BLOCK, _, _>(
        path,
        chunk,
        pos,
        |amax| format.scale_of_amax(amax).exponent(),
        |block, at| {
            let scale = format.scale(apply::amax_bits(block));
            apply::apply(element, block, scale, at)
        },
    )
}
