//! The scalar type the layers are generic over: `f32` for training, `f64` for gradient checks.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

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

    /// Adds `xs` to a log2-magnitude histogram.
    fn add_to_histogram(h: &mut Histogram, xs: &[Self]);
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
        h.add_f32(xs);
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
        h.add_f64(xs);
    }
}
