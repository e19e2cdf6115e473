//! The scalar type the layers are generic over: `f32` for training, `f64` for gradient checks.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, BitAnd, DivAssign, MulAssign, SubAssign};

use ndarray::{LinalgScalar, ScalarOperand};
use num_traits::Float;

use crate::format::{BlockRounder, RoundCounts, Rounder};
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

    /// `e^x`, by the pure-Rust `libm` crate, as every transcendental function of the training
    /// core: the same bits on every machine. The C library's functions (which `f32::exp` and
    /// the like call) promise no such thing: glibc picks a variant per CPU (FMA or not) and
    /// versions differ.
    #[must_use]
    fn libm_exp(self) -> Self;

    /// The natural logarithm, by `libm` (see [`Real::libm_exp`]).
    #[must_use]
    fn libm_ln(self) -> Self;

    /// The hyperbolic tangent, by `libm` (see [`Real::libm_exp`]).
    #[must_use]
    fn libm_tanh(self) -> Self;

    /// Rounds `xs` in place with `rounder` as positions `start..` of its stochastic stream (on
    /// rayon's threads for long slices; the same bits on any thread count).
    fn round_slice_at(rounder: &Rounder, xs: &mut [Self], start: u64) -> RoundCounts;

    /// Rounds the row-major matrix `xs` of `cols` columns in place with the block rounder
    /// `rounder`, blocks along each row, as positions `start..` of its stochastic stream.
    fn round_blocks_at(
        rounder: &BlockRounder,
        xs: &mut [Self],
        cols: usize,
        start: u64,
    ) -> RoundCounts;

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

    /// The largest finite magnitude in `xs` (0 when none) and whether every value is finite, in
    /// one pass (a maximum over the magnitudes' bit patterns, which order as the magnitudes do;
    /// the result does not depend on the thread count).
    #[must_use]
    fn finite_amax(xs: &[Self]) -> (f64, bool);
}

/// [`Real::finite_amax`] from each block's largest finite magnitude and whether the block is
/// all finite (`block`): on rayon's threads for long slices, the blocks' maxima combined by
/// `max` (the result does not depend on how the slice is cut).
fn finite_amax_by<T: Sync, U: Copy + Send + Default>(
    xs: &[T],
    block: impl Fn(&[T]) -> (U, bool) + Sync,
    max: impl Fn(U, U) -> U + Sync + Send,
) -> (U, bool) {
    if xs.len() < 2 * PAR_CHUNK || rayon::current_num_threads() == 1 {
        return block(xs);
    }
    use rayon::prelude::*;
    xs.par_chunks(PAR_CHUNK)
        .map(&block)
        .reduce(|| (U::default(), true), |a, b| (max(a.0, b.0), a.1 && b.1))
}

crate::isa::isa_dispatch! {
    /// The largest finite magnitude of f32 values `xs` and whether every one is finite, through
    /// the `isa` build: float compares and selects in 16 lanes (NaN fails both tests).
    fn amax_f32_with<>(xs: &[f32]) -> (f32, bool) = |_isa| {
        const LANES: usize = 16;
        let (mut m, mut bad) = ([0f32; LANES], [false; LANES]);
        let chunks = xs.chunks_exact(LANES);
        let tail = chunks.remainder();
        for c in chunks {
            for i in 0..LANES {
                let a = c[i].abs();
                let finite = a < f32::INFINITY;
                m[i] = if finite && a > m[i] { a } else { m[i] };
                bad[i] |= !finite;
            }
        }
        for (i, &x) in tail.iter().enumerate() {
            let a = x.abs();
            let finite = a < f32::INFINITY;
            m[i] = if finite && a > m[i] { a } else { m[i] };
            bad[i] |= !finite;
        }
        (m.into_iter().fold(0f32, f32::max), !bad.contains(&true))
    }
}

/// Whether no value of `xs` has all the bits of `exponent` set in its pattern `bits(x)` (inf or
/// NaN).
#[inline(always)]
fn no_all_ones_exponent<T: Copy + Sync, U: Copy + Sync + BitAnd<Output = U> + PartialEq>(
    xs: &[T],
    bits: impl Fn(T) -> U + Copy + Sync,
    exponent: U,
) -> bool {
    let block_ok = |block: &[T]| {
        !block
            .iter()
            .fold(false, |any, &x| any | (bits(x) & exponent == exponent))
    };
    if xs.len() < 2 * PAR_CHUNK || rayon::current_num_threads() == 1 {
        return xs.chunks(256).all(block_ok);
    }
    use rayon::prelude::*;
    xs.par_chunks(PAR_CHUNK)
        .all(|chunk| chunk.chunks(256).all(block_ok))
}

/// `impl Real for $t`: the methods whose bodies differ between the types only in the function
/// they call take its name (`libm`'s function for the type, the rounders' and the histogram's
/// method, the exponent field), and the rest follow as written.
macro_rules! impl_real {
    (
        $t:ident {
            exp: $exp:ident,
            ln: $ln:ident,
            tanh: $tanh:ident,
            round_slice_at: $round_slice_at:ident,
            round_blocks_at: $round_blocks_at:ident,
            add_to_histogram: $add_to_histogram:ident,
            exponent: $exponent:literal $(,)?
        }
        $($rest:tt)*
    ) => {
        impl Real for $t {
            fn of(x: f64) -> Self {
                x as $t
            }
            fn libm_exp(self) -> Self {
                libm::$exp(self)
            }
            fn libm_ln(self) -> Self {
                libm::$ln(self)
            }
            fn libm_tanh(self) -> Self {
                libm::$tanh(self)
            }
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            fn round_slice_at(rounder: &Rounder, xs: &mut [Self], start: u64) -> RoundCounts {
                rounder.$round_slice_at(xs, start)
            }
            fn round_blocks_at(
                rounder: &BlockRounder,
                xs: &mut [Self],
                cols: usize,
                start: u64,
            ) -> RoundCounts {
                rounder.$round_blocks_at(xs, cols, start)
            }
            fn add_to_histogram(h: &mut Histogram, xs: &[Self]) {
                h.$add_to_histogram(xs);
            }
            fn all_finite(xs: &[Self]) -> bool {
                no_all_ones_exponent(xs, $t::to_bits, $exponent)
            }
            $($rest)*
        }
    };
}

impl_real! {
    f32 {
        exp: expf,
        ln: logf,
        tanh: tanhf,
        round_slice_at: par_round_f32_slice_at,
        round_blocks_at: round_matrix_at,
        add_to_histogram: par_add_f32,
        exponent: 0x7f80_0000,
    }

    fn add_ratios_to_histogram(h: &mut Histogram, num: &[Self], den: &[Self]) {
        h.par_add_ratios_f32(num, den);
    }

    fn finite_amax(xs: &[Self]) -> (f64, bool) {
        let isa = crate::isa::Isa::best();
        let (m, finite) = finite_amax_by(xs, |block| amax_f32_with(isa, block), f32::max);
        (f64::from(m), finite)
    }
}

impl_real! {
    f64 {
        exp: exp,
        ln: log,
        tanh: tanh,
        round_slice_at: par_round_f64_slice_at,
        round_blocks_at: round_matrix_f64_at,
        add_to_histogram: par_add_f64,
        exponent: 0x7ff0_0000_0000_0000,
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

    fn finite_amax(xs: &[Self]) -> (f64, bool) {
        // Over bit patterns: |x| is bits & magnitude, finite below inf's pattern (NaN's above).
        const INF: u64 = 0x7ff0_0000_0000_0000;
        let block = |block: &[f64]| {
            let (m, worst) = block.iter().fold((0, 0), |(m, worst): (u64, u64), &x| {
                let a = x.to_bits() & !(1 << 63);
                (m.max(if a < INF { a } else { 0 }), worst.max(a))
            });
            (m, worst < INF)
        };
        let (m, finite) = finite_amax_by(xs, block, u64::max);
        (f64::from_bits(m), finite)
    }
}

/// Elements per parallel task in [`zip_chunks`]; slices shorter than two tasks run on the calling
/// thread.
const PAR_CHUNK: usize = 1 << 15;

/// Applies `f` to matching chunks of `dst` and `src` (paired up to the shorter length), on
/// rayon's threads when the slices are long, and sums what the chunks return. The weight-sized
/// elementwise passes of a step (the update, adding it to the master weights, refreshing the
/// weight copy) go through here. Each element is computed the same way wherever it runs, and the
/// chunk results are combined by `add`, so a result is independent of the thread count when
/// `add` is associative (integer counts are).
pub fn zip_chunks<T: Send + Sync, U: Sync, R: Send + Default>(
    dst: &mut [T],
    src: &[U],
    f: impl Fn(&mut [T], &[U]) -> R + Sync,
    add: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    // A second output and a second input of zero-sized elements: no memory, nothing written.
    let mut none = vec![(); dst.len()];
    let nothing = vec![(); dst.len()];
    zip2_chunks(dst, &mut none, src, &nothing, |d, _, s, _| f(d, s), add)
}

/// [`zip_chunks`] with two outputs and two inputs (paired up to the shortest of the four slices).
pub fn zip2_chunks<T: Send + Sync, V: Send + Sync, U: Sync, W: Sync, R: Send + Default>(
    dst: &mut [T],
    dst2: &mut [V],
    src: &[U],
    src2: &[W],
    f: impl Fn(&mut [T], &mut [V], &[U], &[W]) -> R + Sync,
    add: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    use rayon::prelude::*;
    let n = dst.len().min(dst2.len()).min(src.len()).min(src2.len());
    let (dst, dst2, src, src2) = (&mut dst[..n], &mut dst2[..n], &src[..n], &src2[..n]);
    if n < 2 * PAR_CHUNK || rayon::current_num_threads() == 1 {
        return f(dst, dst2, src, src2);
    }
    dst.par_chunks_mut(PAR_CHUNK)
        .zip(dst2.par_chunks_mut(PAR_CHUNK))
        .zip(src.par_chunks(PAR_CHUNK))
        .zip(src2.par_chunks(PAR_CHUNK))
        .map(|(((d, d2), s), s2)| f(d, d2, s, s2))
        .reduce(R::default, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn parallel_passes_match_the_sequential_ones() {
        let n = 5 * PAR_CHUNK + 123;
        let src: Vec<f32> = (0..n).map(|i| ((i % 7) as f32 - 3.0) * 1e-3).collect();
        let results: Vec<(Vec<f32>, u64)> = [1, 2, 3]
            .map(|threads| {
                pool(threads).install(|| {
                    let mut dst = vec![1.0f32; n];
                    let zeros = zip_chunks(
                        &mut dst,
                        &src,
                        |d, s| {
                            d.iter_mut().zip(s).for_each(|(d, &s)| *d += s);
                            s.iter().filter(|&&s| s == 0.0).count() as u64
                        },
                        |a, b| a + b,
                    );
                    (dst, zeros)
                })
            })
            .into();
        let zeros = src.iter().filter(|&&s| s == 0.0).count() as u64;
        assert!(zeros > 0 && results[0].1 == zeros);
        assert!(results.iter().all(|r| *r == results[0]));
        for threads in [1, 2] {
            pool(threads).install(|| {
                let mut xs = vec![1.0f32; n];
                assert!(f32::all_finite(&xs));
                xs[n - 1] = f32::NAN;
                assert!(!f32::all_finite(&xs));
                xs[n - 1] = 1.0;
                xs[3 * PAR_CHUNK] = f32::NEG_INFINITY;
                assert!(!f32::all_finite(&xs));
                let ys = vec![f64::INFINITY; 3];
                assert!(!f64::all_finite(&ys) && f64::all_finite(&[]));
                // The largest finite magnitude skips the infinity and the NaN, wherever they are.
                xs[7] = -3.5;
                xs[2 * PAR_CHUNK + 5] = f32::NAN;
                assert_eq!(f32::finite_amax(&xs), (3.5, false));
                xs[3 * PAR_CHUNK] = 1.0;
                xs[2 * PAR_CHUNK + 5] = 1.0;
                assert_eq!(f32::finite_amax(&xs), (3.5, true));
                assert_eq!(f64::finite_amax(&[-0.0, f64::NAN, -2.0]), (2.0, false));
                assert_eq!(f64::finite_amax(&[]), (0.0, true));
            });
        }
    }

    /// Every build of the f32 amax kernel against a plain loop: signs, subnormals, the largest
    /// finite value, infinities and NaN in every lane position and in the tail.
    #[test]
    fn amax_builds_match_a_plain_loop() {
        let specials = [
            -0.0,
            1e-45,
            -3e-39,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let mut rng = crate::train::rng::Rng::new(3);
        for n in [0usize, 1, 15, 16, 17, 33, 1000] {
            for special in specials {
                for at in [0, n / 2, n.saturating_sub(1)] {
                    let mut xs: Vec<f32> = (0..n).map(|_| (rng.normal() * 8.0) as f32).collect();
                    if n > 0 {
                        xs[at] = special;
                    }
                    let finite = xs.iter().all(|x| x.is_finite());
                    let amax = xs
                        .iter()
                        .filter(|x| x.is_finite())
                        .fold(0f32, |m, x| m.max(x.abs()));
                    for isa in crate::isa::Isa::available() {
                        let got = amax_f32_with(isa, &xs);
                        assert_eq!(
                            (got.0.to_bits(), got.1),
                            (amax.to_bits(), finite),
                            "{isa:?}, n = {n}, {special} at {at}"
                        );
                    }
                }
            }
        }
    }
}
