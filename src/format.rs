//! Floating-point formats: what a format is, and how a value rounds into it.
//!
//! A format is a value ([`FloatFormat`]), not a type: presets are constants ([`FP16`], [`BF16`],
//! [`FP8_E4M3`], ...) and any IEEE-like `eXmY` parses from its name. Rounding lives in
//! [`Rounder`], which rounds `f64` values exactly (one rounding, integer arithmetic) and `f32`
//! slices in place at memory speed, counting what happened ([`RoundCounts`]).
//!
//! ```
//! use mixprec::format::{FloatFormat, Rounder, RoundOptions, FP16};
//!
//! let fp16: FloatFormat = "fp16".parse().unwrap();
//! assert_eq!(fp16, FP16);
//! assert_eq!(fp16.max(), 65504.0);
//! let r = Rounder::new(fp16, RoundOptions::default());
//! assert_eq!(r.round(0.1), 0.0999755859375);
//! let mut grads = [1e-8_f32, 3e-5, 70000.0];
//! let counts = r.round_f32_slice(&mut grads);
//! assert_eq!((counts.underflow, counts.subnormal, counts.overflow), (1, 1, 1));
//! ```

mod block;
mod encode;
pub mod explain;
mod random;
mod round;
mod scale;
mod slice;
mod target;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

pub use block::{
    BLOCK_PRESETS, BlockFormat, BlockRounder, E8m0, MAX_TILE_SIDE, MX_BLOCK, MX_PRESETS, MxFormat,
    MxRounder, NVFP4_BLOCK, Nvfp4TensorScale, TileFormat, amax_bits,
};
pub use random::stochastic_bits;
pub use round::{Event, Overflow, RoundOptions, Rounder, Rounding};
pub use scale::{deserialize_loss_scale, parse_log2_scale, parse_loss_scale};
pub use slice::{KernelPath, RoundCounts};
pub use target::{Target, split_targets};

/// A binary floating-point format with a sign bit, `exp_bits` exponent bits and `man_bits`
/// stored mantissa bits.
///
/// ```text
/// bias        = 2^(exp_bits-1) - 1
/// emin        = 1 - bias                      (exponent of the smallest normal)
/// emax        = bias      (Ieee: the all-ones exponent holds inf and NaN)
///             = bias + 1  (FiniteNan and Finite: the all-ones exponent holds finite values)
/// max         = (2 - 2^-man_bits) * 2^emax    (Ieee and Finite)
///             = (2 - 2^(1-man_bits)) * 2^emax (FiniteNan: all-ones exponent and mantissa is NaN)
/// min_normal  = 2^emin
/// min_subnormal = 2^(emin - man_bits)
/// epsilon     = 2^-man_bits                   (the gap between 1 and the next value)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FloatFormat {
    // Private, so that every format is a valid one: a preset, or made by `ieee` or `FromStr`.
    /// Exponent field width, 2..=8.
    exp_bits: u32,
    /// Stored mantissa (fraction) width, 1..=23.
    man_bits: u32,
    /// Which patterns are special.
    encoding: Encoding,
}

/// How a format uses its special patterns: the one place the formats differ beyond their field
/// widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// IEEE 754: the all-ones exponent holds the infinities (mantissa zero) and NaNs.
    Ieee,
    /// OCP "fn" (`fp8-e4m3`): no infinities; NaN only at all-ones exponent and mantissa, so the
    /// all-ones exponent otherwise holds finite values.
    FiniteNan,
    /// OCP FP6/FP4 elements (`fp6-e2m3`, `fp6-e3m2`, `fp4-e2m1`): every pattern is finite; no
    /// infinities, no NaN. Out-of-range values (infinities included) saturate to the largest
    /// finite value with their sign in every overflow mode. A NaN input has no encoding: the
    /// rounding simulation keeps it a NaN (sign kept, one quiet payload, counted as NaN) and
    /// [`FloatFormat::encode`] returns `None` for it.
    Finite,
}

/// IEEE 754 binary32.
pub const FP32: FloatFormat = FloatFormat::ieee(8, 23);
/// NVIDIA TensorFloat-32: fp32's range with fp16's precision.
pub const TF32: FloatFormat = FloatFormat::ieee(8, 10);
/// IEEE 754 binary16.
pub const FP16: FloatFormat = FloatFormat::ieee(5, 10);
/// bfloat16: fp32's range with 8 bits of precision.
pub const BF16: FloatFormat = FloatFormat::ieee(8, 7);
/// OCP FP8 E4M3 (`e4m3fn`): bias 7, no infinities, one NaN per sign, max 448.
pub const FP8_E4M3: FloatFormat = FloatFormat::with_encoding(4, 3, Encoding::FiniteNan);
/// OCP FP8 E5M2: IEEE-like, max 57344.
pub const FP8_E5M2: FloatFormat = FloatFormat::ieee(5, 2);
/// OCP MX FP6 E2M3: bias 1, no infinities or NaN, max 7.5.
pub const FP6_E2M3: FloatFormat = FloatFormat::with_encoding(2, 3, Encoding::Finite);
/// OCP MX FP6 E3M2: bias 3, no infinities or NaN, max 28.
pub const FP6_E3M2: FloatFormat = FloatFormat::with_encoding(3, 2, Encoding::Finite);
/// OCP MX FP4 E2M1: bias 1, no infinities or NaN, max 6 (also NVFP4's element).
pub const FP4_E2M1: FloatFormat = FloatFormat::with_encoding(2, 1, Encoding::Finite);

/// The presets, in the order `mixprec formats` lists them, with their names.
pub const PRESETS: [(&str, FloatFormat); 9] = [
    ("fp32", FP32),
    ("tf32", TF32),
    ("fp16", FP16),
    ("bf16", BF16),
    ("fp8-e4m3", FP8_E4M3),
    ("fp8-e5m2", FP8_E5M2),
    ("fp6-e2m3", FP6_E2M3),
    ("fp6-e3m2", FP6_E3M2),
    ("fp4-e2m1", FP4_E2M1),
];

/// The presets' names, as a message lists them.
pub(crate) fn preset_names() -> String {
    PRESETS.map(|(name, _)| name).join(", ")
}

/// [`Error::UnknownFormat`] for `name`, saying what would be accepted.
pub(crate) fn unknown_format(name: &str) -> Error {
    Error::UnknownFormat {
        name: name.to_string(),
        expected: format!(
            "one of {}, or eXmY with X in 2..=8 and Y in 1..=23",
            preset_names()
        ),
    }
}

impl FloatFormat {
    /// The properties `mixprec formats --json` prints for the format (and Python's
    /// `mixprec.formats()` returns): fields, bias, extremes and epsilon, the extremes also as
    /// powers of two.
    #[must_use]
    pub fn properties(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name(),
            "exponent_bits": self.exp_bits(),
            "mantissa_bits": self.man_bits(),
            "bias": self.bias(),
            "max": self.max(),
            "min_normal": self.min_normal(),
            "min_subnormal": self.min_subnormal(),
            "epsilon": self.epsilon(),
            "log2_max": self.max().log2(),
            "log2_min_normal": self.min_normal().log2(),
            "log2_min_subnormal": self.min_subnormal().log2(),
            "has_infinity": self.has_infinity(),
            "has_nan": self.has_nan(),
        })
    }

    /// An IEEE-like format: bias `2^(exp_bits-1) - 1`, the top exponent reserved for infinities
    /// and NaN, subnormals.
    ///
    /// # Panics
    /// If `exp_bits` is outside 2..=8 or `man_bits` outside 1..=23 (use [`FromStr`] for names a
    /// user typed).
    #[must_use]
    pub const fn ieee(exp_bits: u32, man_bits: u32) -> Self {
        FloatFormat::with_encoding(exp_bits, man_bits, Encoding::Ieee)
    }

    /// A format with the given field widths and [`Encoding`] (bias `2^(exp_bits-1) - 1`,
    /// subnormals).
    ///
    /// # Panics
    /// If `exp_bits` is outside 2..=8 or `man_bits` outside 1..=23.
    #[must_use]
    pub const fn with_encoding(exp_bits: u32, man_bits: u32, encoding: Encoding) -> Self {
        assert!(exp_bits >= 2 && exp_bits <= 8 && man_bits >= 1 && man_bits <= 23);
        FloatFormat {
            exp_bits,
            man_bits,
            encoding,
        }
    }

    /// Exponent field width, 2..=8.
    #[must_use]
    pub const fn exp_bits(&self) -> u32 {
        self.exp_bits
    }

    /// Stored mantissa (fraction) width, 1..=23.
    #[must_use]
    pub const fn man_bits(&self) -> u32 {
        self.man_bits
    }

    /// How the format uses its special patterns.
    #[must_use]
    pub const fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The canonical name: the preset's name where there is one, else `eXmY`.
    #[must_use]
    pub fn name(&self) -> String {
        match PRESETS.iter().find(|(_, f)| f == self) {
            Some((name, _)) => (*name).to_string(),
            None => format!("e{}m{}", self.exp_bits, self.man_bits),
        }
    }

    /// Total width in bits (sign, exponent, mantissa).
    #[must_use]
    pub const fn total_bits(&self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    /// Exponent bias.
    #[must_use]
    pub const fn bias(&self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    /// Exponent of the smallest normal value.
    #[must_use]
    pub const fn emin(&self) -> i32 {
        1 - self.bias()
    }

    /// Exponent of the largest finite value.
    #[must_use]
    pub const fn emax(&self) -> i32 {
        match self.encoding {
            Encoding::Ieee => self.bias(),
            Encoding::FiniteNan | Encoding::Finite => self.bias() + 1,
        }
    }

    /// Largest finite value.
    #[must_use]
    pub fn max(&self) -> f64 {
        let top_mantissa = match self.encoding {
            // All-ones mantissa at the top exponent is NaN.
            Encoding::FiniteNan => (1u64 << (self.man_bits + 1)) - 2,
            Encoding::Ieee | Encoding::Finite => (1u64 << (self.man_bits + 1)) - 1,
        };
        top_mantissa as f64 * pow2(self.emax() - self.man_bits as i32)
    }

    /// Smallest positive normal value, `2^emin`.
    #[must_use]
    pub fn min_normal(&self) -> f64 {
        pow2(self.emin())
    }

    /// Smallest positive subnormal value, `2^(emin - man_bits)`.
    #[must_use]
    pub fn min_subnormal(&self) -> f64 {
        pow2(self.emin() - self.man_bits as i32)
    }

    /// Machine epsilon `2^-man_bits`: the gap between 1 and the next larger value.
    #[must_use]
    pub fn epsilon(&self) -> f64 {
        pow2(-(self.man_bits as i32))
    }

    /// Whether the format encodes infinities.
    #[must_use]
    pub const fn has_infinity(&self) -> bool {
        matches!(self.encoding, Encoding::Ieee)
    }

    /// Whether the format encodes NaN.
    #[must_use]
    pub const fn has_nan(&self) -> bool {
        !matches!(self.encoding, Encoding::Finite)
    }
}

/// `2^k` exactly, for `k` in -1074..=1023.
///
/// # Panics
/// Outside that range (every caller passes exponents of formats no wider than f32, or of f64
/// values).
#[must_use]
pub(crate) fn pow2(k: i32) -> f64 {
    assert!(
        (-1074..=1023).contains(&k),
        "2^{k} is not a finite nonzero f64"
    );
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

impl FromStr for FloatFormat {
    type Err = Error;

    /// Parses a preset name (any case; `e4m3fn` is an alias of `fp8-e4m3`, and `fp8-` may be
    /// dropped from `fp8-e5m2`) or `eXmY`, which is always IEEE-like (so `e2m1`, max 3, is not
    /// `fp4-e2m1`, max 6).
    fn from_str(s: &str) -> Result<Self, Error> {
        let lower = s.trim().to_ascii_lowercase();
        let unknown = || unknown_format(s);
        match lower.as_str() {
            "fp32" | "f32" | "float32" => return Ok(FP32),
            "tf32" => return Ok(TF32),
            "fp16" | "f16" | "float16" | "half" => return Ok(FP16),
            "bf16" | "bfloat16" => return Ok(BF16),
            "fp8-e4m3" | "e4m3fn" | "fp8-e4m3fn" | "fp8_e4m3" | "float8_e4m3fn" => {
                return Ok(FP8_E4M3);
            }
            "fp8-e5m2" | "fp8_e5m2" | "float8_e5m2" => return Ok(FP8_E5M2),
            "fp6-e2m3" | "fp6_e2m3" | "float6_e2m3fn" => return Ok(FP6_E2M3),
            "fp6-e3m2" | "fp6_e3m2" | "float6_e3m2fn" => return Ok(FP6_E3M2),
            "fp4-e2m1" | "fp4_e2m1" | "float4_e2m1fn" => return Ok(FP4_E2M1),
            _ => {}
        }
        let rest = lower.strip_prefix('e').ok_or_else(unknown)?;
        let (e, m) = rest.split_once('m').ok_or_else(unknown)?;
        let digits = |t: &str| -> Option<u32> {
            (!t.is_empty() && t.len() <= 2 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse().ok())
                .flatten()
        };
        match (digits(e), digits(m)) {
            (Some(e @ 2..=8), Some(m @ 1..=23)) => Ok(FloatFormat::ieee(e, m)),
            _ => Err(unknown()),
        }
    }
}

crate::names::try_from_string!(FloatFormat, into String);

impl fmt::Display for FloatFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_properties() {
        assert_eq!(FP16.max(), 65504.0);
        assert_eq!(FP16.min_normal(), 2f64.powi(-14));
        assert_eq!(FP16.min_subnormal(), 2f64.powi(-24));
        assert_eq!(
            BF16.max(),
            f32::MAX as f64 * (1.0 - 2f64.powi(-8)) / (1.0 - 2f64.powi(-24))
        );
        assert_eq!(FP8_E4M3.max(), 448.0);
        assert_eq!(FP8_E4M3.bias(), 7);
        assert_eq!("e4m3".parse::<FloatFormat>().unwrap().max(), 240.0);
        assert_eq!(FP8_E5M2.max(), 57344.0);
        assert_eq!(FP32.max(), f32::MAX as f64);
        assert_eq!(FP32.min_subnormal(), f64::from(f32::from_bits(1)));
        assert_eq!(TF32.epsilon(), 2f64.powi(-10));
        assert_eq!(FP6_E2M3.max(), 7.5);
        assert_eq!(FP6_E3M2.max(), 28.0);
        assert_eq!(FP4_E2M1.max(), 6.0);
        assert_eq!(FP4_E2M1.min_subnormal(), 0.5);
        assert_eq!(FP6_E2M3.min_subnormal(), 0.125);
        assert_eq!(FP6_E3M2.min_subnormal(), 0.0625);
        assert_eq!("e2m1".parse::<FloatFormat>().unwrap().max(), 3.0);
    }

    #[test]
    fn names_round_trip() {
        for (name, f) in PRESETS {
            assert_eq!(f.name(), name);
            assert_eq!(name.parse::<FloatFormat>().unwrap(), f);
        }
        assert_eq!("E4M3FN".parse::<FloatFormat>().unwrap(), FP8_E4M3);
        assert_eq!("e5m10".parse::<FloatFormat>().unwrap(), FP16);
        assert_eq!("e3m4".parse::<FloatFormat>().unwrap().name(), "e3m4");
        for bad in [
            "", "e1m3", "e9m2", "e4m0", "e4m24", "fp12", "e4m", "em3", "e+4m3", "e04m003",
        ] {
            assert!(bad.parse::<FloatFormat>().is_err(), "{bad}");
        }
    }
}
