//! Exact rounding of binary64 values into a [`FloatFormat`], in every mode.
//!
//! The algorithm works on the integer significand of the input, so an `f64` is rounded once,
//! directly into the target format (rounding through f32 first would round twice and be wrong
//! just above ties).

use serde::{Deserialize, Serialize};

use super::{Encoding, FloatFormat, pow2, random};

/// How a value between two neighbours of the format is rounded.
///
/// Read from text (a flag, or a config file through serde) by its
/// [`FromStr`](std::str::FromStr) alone, so a name accepted on the command line is accepted in a
/// file; written by its [`Display`](std::fmt::Display) name, which serde's kebab-case name
/// equals. Both come from one table of names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", try_from = "String")]
pub enum Rounding {
    /// To the nearest value; ties to the one with an even last mantissa bit (IEEE default).
    #[default]
    NearestEven,
    /// Toward zero (truncation).
    TowardZero,
    /// Toward +infinity.
    Up,
    /// Toward -infinity.
    Down,
    /// Up with probability equal to the distance to the lower neighbour over the gap (CPFloat's
    /// and chop's proportional mode), from a seeded counter-based stream: reproducible and
    /// independent of how the work is split across threads.
    ///
    /// ```text
    /// f  = (|x| - lower) / gap            in [0, 1)
    /// up  iff  floor(f * 2^32) > u         u uniform in 0..2^32 from (seed, index)
    /// ```
    /// so `P(up) = floor(f * 2^32) / 2^32`, which is `f` exactly whenever at most 32 bits are
    /// discarded.
    Stochastic,
}

/// What happens to a value whose rounded magnitude exceeds the format's largest finite value.
/// Read by its [`FromStr`](std::str::FromStr) from flags and config files alike, as
/// [`Rounding`] is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", try_from = "String")]
pub enum Overflow {
    /// IEEE 754 section 7.4: infinity (NaN in formats without infinities), except that roundings
    /// directed toward zero for the value's sign give the largest finite value with its sign.
    /// Formats with neither infinities nor NaN ([`super::Encoding::Finite`]) saturate anyway.
    #[default]
    Ieee,
    /// Always clamp to the largest finite value with the input's sign (also for infinite inputs).
    Saturate,
}

/// Everything that decides how a value rounds, besides the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoundOptions {
    /// Rounding mode.
    pub rounding: Rounding,
    /// Overflow rule.
    pub overflow: Overflow,
    /// Whether subnormal results exist. With `false`, a result whose magnitude, rounded as if the
    /// exponent range were unbounded below, is under the smallest normal becomes a zero with the
    /// input's sign (flush to zero).
    pub subnormals: bool,
    /// Seed of the stochastic-rounding stream.
    pub seed: u64,
}

impl Default for RoundOptions {
    fn default() -> Self {
        RoundOptions {
            rounding: Rounding::NearestEven,
            overflow: Overflow::Ieee,
            subnormals: true,
            seed: 0,
        }
    }
}

/// What rounding one value did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The input was zero, or rounded to a normal value (possibly inexactly).
    Normal,
    /// A nonzero finite input became zero.
    Underflow,
    /// The result is nonzero and below the smallest normal: kept with reduced precision.
    Subnormal,
    /// The rounded magnitude exceeded the largest finite value.
    Overflow,
    /// The input was NaN.
    Nan,
    /// The input was infinite.
    Infinite,
}

/// A format with its rounding options and the constants both rounding paths need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rounder {
    format: FloatFormat,
    options: RoundOptions,
    max: f64,
    min_normal: f64,
    emin: i32,
    man_bits: i32,
}

impl Rounder {
    /// A rounder for `format` with `options`.
    #[must_use]
    pub fn new(format: FloatFormat, options: RoundOptions) -> Self {
        Rounder {
            format,
            options,
            max: format.max(),
            min_normal: format.min_normal(),
            emin: format.emin(),
            man_bits: format.man_bits as i32,
        }
    }

    /// The target format.
    #[must_use]
    pub fn format(&self) -> FloatFormat {
        self.format
    }

    /// The rounding options.
    #[must_use]
    pub fn options(&self) -> RoundOptions {
        self.options
    }

    /// Rounds `x` as the value at position 0 of the stream: in stochastic mode every call meets
    /// the same random bits, so use [`Rounder::round_at`] with distinct positions to draw anew.
    #[must_use]
    pub fn round(&self, x: f64) -> f64 {
        self.round_at(x, 0).0
    }

    /// Rounds `x`, the value at position `index` of a stream (which selects its random bits in
    /// stochastic mode), and says what happened.
    ///
    /// The result is exactly representable in the format (or ±inf, or NaN). A NaN keeps its sign
    /// and the top `man_bits` of its payload and is made quiet, as hardware conversions do.
    #[must_use]
    pub fn round_at(&self, x: f64, index: u64) -> (f64, Event) {
        let bits = x.to_bits();
        let negative = bits >> 63 == 1;
        let abs = bits & !(1 << 63);
        let sign = |v: f64| if negative { -v } else { v };
        if abs > f64::INFINITY.to_bits() {
            return (self.quiet_nan(bits), Event::Nan);
        }
        if abs == f64::INFINITY.to_bits() {
            let r = match (self.options.overflow, self.format.encoding()) {
                (Overflow::Saturate, _) | (_, Encoding::Finite) => sign(self.max),
                (Overflow::Ieee, Encoding::Ieee) => x,
                (Overflow::Ieee, Encoding::FiniteNan) => self.quiet_nan(bits),
            };
            return (r, Event::Infinite);
        }
        if abs == 0 {
            return (x, Event::Normal);
        }

        // |x| = sig * 2^e with sig an integer of at most 53 bits.
        let biased = (abs >> 52) as i32;
        let (sig, e) = if biased == 0 {
            (abs, -1074)
        } else {
            (abs & ((1 << 52) - 1) | (1 << 52), biased - 1075)
        };
        let top = e + 63 - sig.leading_zeros() as i32; // floor(log2 |x|)
        // The quantum (last-place value) of the result, as an exponent of two.
        let q = if self.options.subnormals {
            top.max(self.emin) - self.man_bits
        } else {
            top - self.man_bits
        };
        let shift = q - e; // bits of sig below the quantum
        let magnitude = if shift <= 0 {
            f64::from_bits(abs)
        } else {
            let (kept, rest) = if shift >= 64 {
                (0, sig)
            } else {
                (sig >> shift, sig & ((1u64 << shift) - 1))
            };
            let up = rest != 0
                && match self.options.rounding {
                    Rounding::NearestEven => {
                        // rest vs half a quantum; for shift > 53, rest < 2^53 < half.
                        shift <= 64 && {
                            let half = 1u64 << (shift - 1);
                            rest > half || (rest == half && kept & 1 == 1)
                        }
                    }
                    Rounding::TowardZero => false,
                    Rounding::Up => !negative,
                    Rounding::Down => negative,
                    Rounding::Stochastic => {
                        // floor(f * 2^32) where f = rest / 2^shift.
                        let frac32 = if shift <= 32 {
                            rest << (32 - shift)
                        } else if shift - 32 < 64 {
                            rest >> (shift - 32)
                        } else {
                            0
                        };
                        frac32 > u64::from(random::stochastic_bits(self.options.seed, index))
                    }
                };
            (kept + u64::from(up)) as f64 * pow2(q)
        };

        if magnitude > self.max {
            let toward_zero = match self.options.rounding {
                Rounding::TowardZero => true,
                Rounding::Up => negative,
                Rounding::Down => !negative,
                Rounding::NearestEven | Rounding::Stochastic => false,
            };
            let r = match (self.options.overflow, self.format.encoding()) {
                (Overflow::Saturate, _) | (_, Encoding::Finite) => sign(self.max),
                (Overflow::Ieee, _) if toward_zero => sign(self.max),
                (Overflow::Ieee, Encoding::Ieee) => sign(f64::INFINITY),
                (Overflow::Ieee, Encoding::FiniteNan) => self.quiet_nan(bits),
            };
            return (r, Event::Overflow);
        }
        if magnitude == 0.0 || (!self.options.subnormals && magnitude < self.min_normal) {
            return (sign(0.0), Event::Underflow);
        }
        let event = if magnitude < self.min_normal {
            Event::Subnormal
        } else {
            Event::Normal
        };
        (sign(magnitude), event)
    }

    /// A quiet NaN with the sign and the top `man_bits` payload bits of `bits` (an f64 NaN);
    /// the format's one NaN pattern where it has only one, and that same all-ones payload in
    /// formats without NaN (whose NaN inputs stay NaN in the simulation).
    fn quiet_nan(&self, bits: u64) -> f64 {
        let top_bits = ((1u64 << self.man_bits) - 1) << (52 - self.man_bits);
        let payload = match self.format.encoding() {
            Encoding::Ieee => bits & top_bits,
            Encoding::FiniteNan | Encoding::Finite => top_bits,
        };
        f64::from_bits(bits & (1 << 63) | (0x7ff << 52) | (1 << 51) | payload)
    }
}

impl Rounding {
    /// Every mode, in the order of the enum.
    pub const ALL: [Rounding; 5] = [
        Rounding::NearestEven,
        Rounding::TowardZero,
        Rounding::Up,
        Rounding::Down,
        Rounding::Stochastic,
    ];
}

crate::names::name_table!(Rounding, "rounding mode", any case, {
    NearestEven => "nearest-even" | "nearest" | "rne",
    TowardZero => "toward-zero" | "rz" | "truncate",
    Up => "up" | "ru",
    Down => "down" | "rd",
    Stochastic => "stochastic" | "sr",
});

crate::names::name_table!(Overflow, "overflow rule", any case, {
    Ieee => "ieee",
    Saturate => "saturate",
});
