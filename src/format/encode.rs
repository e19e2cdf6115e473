//! Bit patterns: a format's encoding of the values it can represent.

use super::{Encoding, FloatFormat, pow2};

impl FloatFormat {
    /// The value a bit pattern stands for (the low [`FloatFormat::total_bits`] bits of `bits`).
    ///
    /// A NaN keeps its sign and payload (in the top bits of the f64 mantissa), so that
    /// [`FloatFormat::encode`] gives the same pattern back.
    #[must_use]
    pub fn decode(&self, bits: u32) -> f64 {
        let m = self.man_bits;
        let man = u64::from(bits) & ((1 << m) - 1);
        let exp = (bits >> m) & ((1 << self.exp_bits) - 1);
        let negative = (bits >> (m + self.exp_bits)) & 1 == 1;
        let all_ones = (1 << self.exp_bits) - 1;
        let nan =
            |man: u64| f64::from_bits(u64::from(negative) << 63 | 0x7ff << 52 | man << (52 - m));
        let magnitude = if exp == all_ones && self.has_infinity() {
            if man == 0 {
                f64::INFINITY
            } else {
                return nan(man);
            }
        } else if exp == all_ones && man == (1 << m) - 1 && self.has_nan() {
            return nan(man);
        } else if exp == 0 {
            man as f64 * self.min_subnormal()
        } else {
            (man | 1 << m) as f64 * pow2(exp as i32 - self.bias() - m as i32)
        };
        if negative { -magnitude } else { magnitude }
    }

    /// The bit pattern of `x`, or `None` if `x` is not exactly representable (round it first
    /// with a [`super::Rounder`]).
    ///
    /// A NaN maps to a NaN pattern with its sign and the top payload bits (set quiet if those
    /// are all zero); in `fn` formats, to the one NaN pattern; in formats without NaN, to `None`.
    #[must_use]
    pub fn encode(&self, x: f64) -> Option<u32> {
        let m = self.man_bits;
        let sign = u32::from(x.is_sign_negative()) << (m + self.exp_bits);
        let all_ones = (1u32 << self.exp_bits) - 1;
        let man_mask = (1u32 << m) - 1;
        if x.is_nan() {
            let payload = match self.encoding() {
                Encoding::Finite => return None,
                Encoding::FiniteNan => man_mask,
                Encoding::Ieee => {
                    let p = ((x.to_bits() & ((1 << 52) - 1)) >> (52 - m)) as u32;
                    if p == 0 { 1 << (m - 1) } else { p }
                }
            };
            return Some(sign | all_ones << m | payload);
        }
        let a = x.abs();
        if a == f64::INFINITY {
            return self.has_infinity().then_some(sign | all_ones << m);
        }
        if a > self.max() {
            return None;
        }
        if a < self.min_normal() {
            let k = a / self.min_subnormal(); // exact: a power-of-two scaling
            return (k.fract() == 0.0).then_some(sign | k as u32);
        }
        let e = ((a.to_bits() >> 52) as i32) - 1023;
        let scaled = a * pow2(m as i32 - e); // in [2^m, 2^(m+1))
        (scaled.fract() == 0.0)
            .then(|| sign | ((e + self.bias()) as u32) << m | (scaled as u32 & man_mask))
    }
}
