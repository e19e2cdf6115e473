//! Matrix products accumulated in the storage format ([`Accumulation::Storage`]): each output is
//! one chain over the inner dimension, in order, its running sum rounded after every
//! multiply-add:
//! ```text
//! s_0 = +0,   s_l+1 = round(s_l + a[i, l] b[l, j])   (the product and the sum in f64),   c[i, j] = s_k
//! ```
//! A product of two f32 values is exact in f64, so `s_l + a b` is the exact sum rounded once to
//! f64, then once to the format: a multiply-add in the storage format (for f32 operands, exactly a
//! fused one unless the f64 sum itself is inexact).
//!
//! The chains are independent, so [`matmul_rounded`] advances the chains of up to [`COLUMNS`]
//! outputs of a row together, term by term (loops the compiler vectorises, with a branch-free
//! round to nearest even), and rows on rayon's threads; every chain keeps its order, so the
//! result does not depend on the thread count. [`matmul_rounded_reference`] is the same
//! definition written one output at a time: the test below checks them bit for bit.
//!
//! [`Accumulation::Storage`]: crate::recipe::Accumulation::Storage

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use crate::format::{Rounder, Rounding};
use crate::train::real::Real;

/// Output columns whose chains advance together: their running sums and unrounded sums (4 KiB)
/// stay in the L1 cache.
const COLUMNS: usize = 256;

/// Products at least this large (m n k) run their rows on all of rayon's threads.
const PARALLEL: usize = 1 << 16;

/// `a b` with each output's running sum rounded by `rounder` after every multiply-add, in the
/// order of the module docs. Rows run on rayon's threads when the product is large; the result
/// is the same bits for any thread count.
///
/// # Panics
/// If the inner dimensions differ.
#[must_use]
pub fn matmul_rounded<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>, rounder: &Rounder) -> Array2<T> {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert_eq!(k, b.nrows(), "matmul_rounded: inner dimensions differ");
    let mut c = Array2::zeros((m, n));
    if n >= m {
        c.zip_mut_with(&chains(a, b, rounder), |c, &s| *c = T::of(s));
    } else {
        // The chains of c^T = b^T a^T are those of c (a b = b a in f64, exactly): advance the
        // longer side together.
        let t = chains(b.t(), a.t(), rounder);
        c.zip_mut_with(&t.t(), |c, &s| *c = T::of(s));
    }
    c
}

/// The running sums of `a b` (m x n, in f64), row by row.
fn chains<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>, rounder: &Rounder) -> Array2<f64> {
    let ((m, k), n) = (a.dim(), b.ncols());
    // Row-major, whatever the layout of the view.
    let b: Vec<f64> = b.iter().map(|&v| v.to_f64()).collect();
    let right = Right {
        b: &b,
        n,
        rounder,
        nearest: Nearest::new(rounder),
    };
    let mut c = Array2::<f64>::zeros((m, n));
    if n == 0 {
        return c;
    }
    let row = |(i, c_row): (usize, &mut [f64])| {
        let x: Vec<f64> = a.row(i).iter().map(|&v| v.to_f64()).collect();
        for (block, sums) in c_row.chunks_mut(COLUMNS).enumerate() {
            advance(&right, &x, block * COLUMNS, sums);
        }
    };
    let c_slice = c.as_slice_mut().unwrap_or_default();
    if m * n * k >= PARALLEL && rayon::current_num_threads() > 1 {
        c_slice.par_chunks_mut(n).enumerate().for_each(row);
    } else {
        c_slice.chunks_mut(n).enumerate().for_each(row);
    }
    c
}

/// What every row's chains share: the right operand and the rounding.
struct Right<'a> {
    /// The `k x n` right operand, row-major.
    b: &'a [f64],
    /// Its columns.
    n: usize,
    /// The rounder every running sum goes through.
    rounder: &'a Rounder,
    /// Its branch-free twin, where it has one.
    nearest: Option<Nearest>,
}

/// Runs the chains of columns `j0..j0 + sums.len()` of one row over all `x.len()` terms,
/// compiled with AVX2 where the CPU has it (same bits: every operation is correctly rounded
/// either way).
fn advance(right: &Right<'_>, x: &[f64], j0: usize, sums: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::Isa::best() >= crate::isa::Isa::Avx2 {
        // SAFETY: the CPU has AVX2 (run-time detection).
        return unsafe { advance_avx2(right, x, j0, sums) };
    }
    advance_any(right, x, j0, sums);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn advance_avx2(right: &Right<'_>, x: &[f64], j0: usize, sums: &mut [f64]) {
    advance_any(right, x, j0, sums);
}

#[inline(always)]
fn advance_any(right: &Right<'_>, x: &[f64], j0: usize, sums: &mut [f64]) {
    // The fields in locals, which the loop keeps in registers.
    let Right {
        b,
        n,
        rounder,
        ref nearest,
    } = *right;
    let nearest = nearest.as_ref();
    let width = sums.len();
    let mut unrounded = [0.0f64; COLUMNS];
    let unrounded = &mut unrounded[..width];
    sums.fill(0.0);
    for (&xl, b_row) in x.iter().zip(b.chunks_exact(n)) {
        for ((u, &s), &y) in unrounded
            .iter_mut()
            .zip(sums.iter())
            .zip(&b_row[j0..j0 + width])
        {
            *u = s + xl * y;
        }
        // Lanes outside the fast rounder's domain (inf, NaN, overflow, tiny) are rare: the
        // whole block then goes through the exact scalar rounder.
        if !nearest.is_some_and(|r| r.round(unrounded, sums)) {
            for (s, &u) in sums.iter_mut().zip(unrounded.iter()) {
                *s = rounder.round(u);
            }
        }
    }
}

/// Round to nearest, ties to even, into a format of at most 50 significand bits, written
/// without branches so that it vectorises: [`Rounder::round`] for every finite nonzero input
/// in `[2^-960, 2^960)` whose result does not overflow, and for zeros.
#[derive(Clone, Copy, Debug)]
struct Nearest {
    /// The format's largest finite value.
    max: f64,
    /// The format's smallest normal value.
    min_normal: f64,
    /// The least quantum (the subnormals' spacing), or 0 without subnormals.
    min_quantum: f64,
    /// `2^-man_bits`: the quantum of `[1, 2)`.
    ulp_of_one: f64,
    /// Whether results below the smallest normal flush to zero.
    flush: bool,
}

/// `|x|` bit patterns inside this range take the fast path (so that the quantum and its inverse
/// are normal f64 values).
const TINY: u64 = (1023 - 960) << 52;
const HUGE: u64 = (1023 + 960) << 52;

impl Nearest {
    fn new(rounder: &Rounder) -> Option<Nearest> {
        let (format, options) = (rounder.format(), rounder.options());
        (options.rounding == Rounding::NearestEven && format.man_bits() <= 50).then(|| Nearest {
            max: format.max(),
            min_normal: format.min_normal(),
            min_quantum: if options.subnormals {
                format.min_subnormal()
            } else {
                0.0
            },
            ulp_of_one: f64::from_bits((1023 - u64::from(format.man_bits())) << 52),
            flush: !options.subnormals,
        })
    }

    /// Rounds `xs` into `out`; false if some value was outside the fast path's domain (`out`
    /// then holds garbage there).
    ///
    /// ```text
    /// quantum = max(2^floor(log2 |x|) 2^-man_bits, min_quantum)
    /// result  = sign(x) rint(|x| / quantum) quantum         (0 when below min_normal and flushing)
    /// ```
    /// `rint` by adding and subtracting 2^52, which rounds to nearest even in f64 for values below
    /// 2^52; dividing and multiplying by a power of two in range is exact.
    #[inline(always)]
    fn round(&self, xs: &[f64], out: &mut [f64]) -> bool {
        const EXPONENT: u64 = 0x7ff << 52;
        const MAGIC: f64 = 4_503_599_627_370_496.0; // 2^52
        let mut bad = 0u64;
        for (o, &x) in out.iter_mut().zip(xs) {
            let abs_bits = x.to_bits() & !(1 << 63);
            let abs = f64::from_bits(abs_bits);
            let binade = f64::from_bits(abs_bits & EXPONENT);
            let quantum = (binade * self.ulp_of_one).max(self.min_quantum);
            let inverse = f64::from_bits((2046 << 52) - quantum.to_bits());
            let magnitude = ((abs * inverse + MAGIC) - MAGIC) * quantum;
            let zero = magnitude == 0.0 || (self.flush && magnitude < self.min_normal);
            *o = if zero { 0.0 } else { magnitude }.copysign(x);
            let inside = (TINY..HUGE).contains(&abs_bits) && magnitude <= self.max;
            bad |= u64::from(!(inside || abs_bits == 0));
        }
        bad == 0
    }
}

/// [`matmul_rounded`] one output at a time, as defined in the module docs: the reference the
/// fast path is checked against.
///
/// # Panics
/// If the inner dimensions differ.
#[must_use]
pub fn matmul_rounded_reference<T: Real>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    rounder: &Rounder,
) -> Array2<T> {
    let (m, k) = a.dim();
    assert_eq!(k, b.nrows(), "matmul_rounded: inner dimensions differ");
    Array2::from_shape_fn((m, b.ncols()), |(i, j)| {
        let mut acc = 0.0f64;
        for l in 0..k {
            acc = rounder.round(acc + a[[i, l]].to_f64() * b[[l, j]].to_f64());
        }
        T::of(acc)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BF16, FP8_E4M3, FP16, Overflow, RoundOptions};
    use crate::train::Rng;

    fn same_bits<T: Real>(x: &Array2<T>, y: &Array2<T>) -> bool {
        x.dim() == y.dim()
            && x.iter()
                .zip(y)
                .all(|(&p, &q)| Real::to_f64(p).to_bits() == Real::to_f64(q).to_bits())
    }

    fn rounders() -> Vec<Rounder> {
        let nearest = RoundOptions::default();
        vec![
            Rounder::new(FP16, nearest),
            Rounder::new(BF16, nearest),
            Rounder::new(FP8_E4M3, nearest),
            Rounder::new(
                FP16,
                RoundOptions {
                    subnormals: false,
                    overflow: Overflow::Saturate,
                    ..nearest
                },
            ),
            Rounder::new(
                FP16,
                RoundOptions {
                    rounding: Rounding::TowardZero,
                    ..nearest
                },
            ),
        ]
    }

    #[test]
    fn the_fast_rounder_is_the_rounder() {
        // Random bit patterns over every exponent (inf, NaN, f64 subnormals and zeros among
        // them), and values near fp16's ties, subnormals and largest value.
        let mut rng = Rng::new(11);
        let mut random: Vec<f64> = (0..200_000)
            .map(|_| f64::from_bits(rng.below(1 << 32) as u64 | (rng.below(1 << 32) as u64) << 32))
            .collect();
        random.extend([
            0.0,
            -0.0,
            65504.0,
            65519.99,
            65520.0,
            2f64.powi(-25),
            -(2f64.powi(-25)),
        ]);
        let near: Vec<f64> = (0..200_000)
            .map(|i| {
                let e = i % 60 - 30;
                let tie = 1.0 + (rng.below(1 << 11) as f64 + 0.5) * 2f64.powi(-10);
                let x = tie * 2f64.powi(e) * if i % 2 == 0 { 1.0 } else { -1.0 };
                if i % 3 == 0 {
                    x
                } else {
                    x * (1.0 + rng.normal() * 1e-6)
                }
            })
            .collect();
        for rounder in rounders() {
            let Some(nearest) = Nearest::new(&rounder) else {
                continue;
            };
            for (set, xs) in [("random", &random), ("near", &near)] {
                for block in xs.chunks(64) {
                    let mut out = vec![0.0; block.len()];
                    let block_ok = nearest.round(block, &mut out);
                    for (&x, &o) in block.iter().zip(&out) {
                        let mut single = [0.0];
                        let want = rounder.round(x).to_bits();
                        if nearest.round(&[x], &mut single) {
                            assert_eq!(single[0].to_bits(), want, "{x:e}, {:?}", rounder.format());
                            if block_ok {
                                assert_eq!(o.to_bits(), want);
                            }
                        } else {
                            assert!(!block_ok);
                            // The near set leaves the fast path only where it overflows.
                            assert!(
                                set == "random" || x.abs() > rounder.format().max() / 2.0,
                                "{x:e}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fast_path_matches_the_reference() {
        let mut rng = Rng::new(7);
        for (m, k, n) in [
            (0, 3, 4),
            (3, 0, 4),
            (3, 4, 0),
            (1, 1, 1),
            (5, 7, 1),
            (1, 300, 3),
            (9, 33, 17),
            (2, 40, 300),
            (300, 40, 3),
            (16, 2000, 9),
            (7, 65, 513),
        ] {
            for rounder in rounders() {
                for scale in [1e-6f64, 1.0, 300.0] {
                    let mut a =
                        Array2::from_shape_simple_fn((m, k), || (rng.normal() * scale) as f32);
                    let b = Array2::from_shape_simple_fn((k, n), || rng.normal() as f32);
                    // Zeros, a negative zero and an infinity where there is room.
                    if m * k > 3 {
                        a[[0, 0]] = 0.0;
                        a[[m - 1, k - 1]] = -0.0;
                        if scale == 300.0 {
                            a[[m / 2, k / 2]] = f32::INFINITY;
                        }
                    }
                    let want = matmul_rounded_reference(a.view(), b.view(), &rounder);
                    for threads in [1, 3] {
                        let pool = rayon::ThreadPoolBuilder::new()
                            .num_threads(threads)
                            .build()
                            .unwrap();
                        let got = pool.install(|| matmul_rounded(a.view(), b.view(), &rounder));
                        assert!(
                            same_bits(&got, &want),
                            "{m}x{k}x{n}, {:?}, scale {scale}, {threads} threads",
                            rounder.format()
                        );
                        // A transposed operand, as the layers pass them.
                        let bt = b.t().as_standard_layout().into_owned();
                        let got_t = pool.install(|| matmul_rounded(a.view(), bt.t(), &rounder));
                        assert!(same_bits(&got_t, &want));
                    }
                }
            }
        }
        // f64 operands (the gradient checks' scalar), with products that are not exact.
        let a = Array2::from_shape_simple_fn((4, 50), || rng.normal() * 1e-3);
        let b = Array2::from_shape_simple_fn((50, 6), || rng.normal());
        let rounder = Rounder::new(FP16, RoundOptions::default());
        assert!(same_bits(
            &matmul_rounded(a.view(), b.view(), &rounder),
            &matmul_rounded_reference(a.view(), b.view(), &rounder)
        ));
    }
}
