//! The scalar type the layers are generic over: `f32` for training, `f64` for gradient checks.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, BitAnd, DivAssign, MulAssign, SubAssign};

use ndarray::{LinalgScalar, ScalarOperand};
use num_traits::Float;

use crate::format::{RoundCounts, Rounder};
use crate::stats::Histogram;

/// A floating-point scalar the training core computes in.
///
/// Training runs in `f32` (values are held in f32 and rounded to the storage format where the
/// hardware would store them); the same layer code in `f64` is the reference that finite-difference
/// gradient checks compare against.
pub trait Real:
    Float
    + LinalgScalar
    + ScalarOperand
    + Debug
    + Default
    + Send
    + Sync
    + Sum
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    /// `x` converted to this type (rounded to nearest for `f32`).
    #[must_use]
    fn of(x: f64) -> Self;

    /// The value as an `f64` (exact).
    #[must_use]
    fn to_f64(self) -> f64;

    /// Rounds `xs` in place with `rounder` as positions `start..` of its stochastic stream.
    fn round_slice_at(rounder: &Rounder, xs: &mut [Self], start: u64) -> RoundCounts;

    /// Adds `xs` to a log2-magnitude histogram (in parallel when it is large; the result does
    /// not depend on the thread count).
    fn add_to_histogram(h: &mut Histogram, xs: &[Self]);

    /// Adds the ratios `|num[i]| / |den[i]|` of every nonzero `den[i]` to a histogram (formed in
    /// f64; in parallel when large).
    fn add_ratios_to_histogram(h: &mut Histogram, num: &[Self], den: &[Self]);

    /// Whether no value of `xs` is inf or NaN. Written for the vectoriser (an OR over the
    /// exponent fields of a block, then one test per block): every stored tensor is checked.
    #[must_use]
    fn all_finite(xs: &[Self]) -> bool;
}

/// Whether no value of `xs` has all the bits of `exponent` set in its pattern `bits(x)` (inf or
/// NaN).
#[inline(always)]
fn no_all_ones_exponent<T: Copy, U: Copy + BitAnd<Output = U> + PartialEq>(
    xs: &[T],
    bits: fn(T) -> U,
    exponent: U,
) -> bool {
    xs.chunks(256).all(|block| {
        !block
            .iter()
            .fold(false, |any, &x| any | (bits(x) & exponent == exponent))
    })
}

impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn round_slice_at(rounder: &Rounder, xs: &mut [Self], start: u64) -> RoundCounts {
        rounder.round_f32_slice_at(xs, start)
    }
    fn add_to_histogram(h: &mut Histogram, xs: &[Self]) {
        h.par_add_f32(xs);
    }
    fn add_ratios_to_histogram(h: &mut Histogram, num: &[Self], den: &[Self]) {
        h.par_add_ratios_f32(num, den);
    }
    fn all_finite(xs: &[Self]) -> bool {
        no_all_ones_exponent(xs, f32::to_bits, 0x7f80_0000)
    }
}

impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn round_slice_at(rounder: &Rounder, xs: &mut [Self], start: u64) -> RoundCounts {
        rounder.round_f64_slice_at(xs, start)
    }
    fn add_to_histogram(h: &mut Histogram, xs: &[Self]) {
        h.par_add_f64(xs);
    }
    fn add_ratios_to_histogram(h: &mut Histogram, num: &[Self], den: &[Self]) {
        let ratios: Vec<f64> = num
            .iter()
            .zip(den)
            .filter(|(_, d)| **d != 0.0)
            .map(|(n, d)| n.abs() / d.abs())
            .collect();
        h.par_add_f64(&ratios);
    }
    fn all_finite(xs: &[Self]) -> bool {
        no_all_ones_exponent(xs, f64::to_bits, 0x7ff0_0000_0000_0000)
    }
}
