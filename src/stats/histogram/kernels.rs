//! The per-chunk loops of histogram building, written for the vectoriser: independent lanes,
//! selects instead of branches, integer max/min on bit patterns. The vector loop keeps what every
//! value needs (sums, amax, smallest nonzero, zeros, negatives) and counts the rare values
//! (subnormals, infinities, NaN); a chunk with any of those is scanned again by a scalar loop.
//! One generic body serves f32 and f64, compiled for the baseline target, AVX2 and AVX-512 and
//! picked at run time; every build runs the same operations on the same lanes, so all give
//! bit-identical results (tested).

pub(crate) use crate::isa::Isa;
use std::ops::{BitAnd, Shr};

use num_traits::{WrappingAdd, WrappingNeg, WrappingSub};

/// Scalar statistics of one chunk, combined in chunk order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ChunkStats {
    pub sum_abs: f64,
    pub sum_sq: f64,
    pub amax: f64,
    /// `+inf` when the chunk has no finite nonzero value.
    pub min_nonzero: f64,
    pub zeros: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
    pub negatives: u64,
    pub subnormals: u64,
}

/// The bit layout of a float type, for the generic loops.
pub(crate) trait Bits: Copy + Send + Sync {
    /// The bit pattern's integer type.
    type U: Copy
        + Ord
        + BitAnd<Output = Self::U>
        + Shr<u32, Output = Self::U>
        + TryInto<usize>
        + WrappingAdd
        + WrappingSub
        + WrappingNeg
        + From<bool>;
    /// Exponent field width.
    const EXP_BITS: u32;
    /// Fraction field width.
    const MAN_BITS: u32;
    /// All bits but the sign.
    const ABS: Self::U;
    /// +inf's pattern (exponent all ones, zero fraction).
    const INF: Self::U;
    /// The smallest normal's pattern.
    const MIN_NORMAL: Self::U;
    /// The zero pattern.
    const ZERO: Self::U;
    /// The largest pattern.
    const MAX: Self::U;
    /// The pattern.
    fn bits(self) -> Self::U;
    /// The value of a pattern as an f64 (exact).
    fn widen(u: Self::U) -> f64;
}

/// `Bits` of a float type `$t` with patterns `$u`, `$exp` exponent and `$man` fraction bits.
macro_rules! bits {
    ($t:ty, $u:ty, $exp:expr, $man:expr) => {
        impl Bits for $t {
            type U = $u;
            const EXP_BITS: u32 = $exp;
            const MAN_BITS: u32 = $man;
            const ABS: $u = <$u>::MAX >> 1;
            const INF: $u = ((1 << $exp) - 1) << $man;
            const MIN_NORMAL: $u = 1 << $man;
            const ZERO: $u = 0;
            const MAX: $u = <$u>::MAX;
            #[inline(always)]
            fn bits(self) -> $u {
                self.to_bits()
            }
            #[inline(always)]
            fn widen(u: $u) -> f64 {
                f64::from(<$t>::from_bits(u))
            }
        }
    };
}

bits!(f32, u32, 8, 23);
bits!(f64, u64, 11, 52);

// The layouts as the formats spell them.
const _: () = assert!(<f32 as Bits>::INF == 0x7f80_0000 && <f32 as Bits>::ABS == 0x7fff_ffff);
const _: () =
    assert!(<f64 as Bits>::INF == 0x7ff0_0000_0000_0000 && <f64 as Bits>::ABS == !(1 << 63));

/// Sets of bin counters a chunk is spread over.
const LANES: usize = 8;

/// Lanes of the f64 sums of [`scalars`]: value `i` of a chunk is added to lane `i % SUM_LANES`.
/// Part of every histogram's bits (the sums' order), whatever the build.
const SUM_LANES: usize = 16;

/// Lanes of the integer statistics of [`scalars`] (maxima, minima, counts: any order gives the
/// same result).
const INT_LANES: usize = 8;

/// Counters for the bins: [`LANES`] sets of `stride` u32 counters (so that runs of equal bins do not
/// serialise on one counter), flushed into u64 totals before they can overflow.
pub(super) struct LaneCounter {
    lanes: Vec<u32>,
    raw: Vec<u64>,
    stride: usize,
    shift: u32,
    since_flush: usize,
}

impl LaneCounter {
    /// Counters for `T` with `2^s` sub-bins per octave: the bin of a value is its pattern
    /// without the sign, shifted right by `MAN_BITS - s`.
    pub fn new<T: Bits>(s: u32) -> Self {
        let stride = (1usize << T::EXP_BITS) << s;
        LaneCounter {
            lanes: vec![0; LANES * stride],
            raw: vec![0; stride],
            stride,
            shift: T::MAN_BITS - s,
            since_flush: 0,
        }
    }

    /// Counts every value of `chunk` (at most `u32::MAX` values).
    pub fn count<T: Bits>(&mut self, chunk: &[T]) {
        if self.since_flush + chunk.len() > u32::MAX as usize {
            self.flush();
        }
        self.since_flush += chunk.len();
        let shift = self.shift;
        let bin = |x: T| -> usize { ((x.bits() & T::ABS) >> shift).try_into().unwrap_or(0) };
        // LANES interleaved counter sets: value i goes to set i % LANES.
        let stride = self.stride;
        let mut groups = chunk.chunks_exact(LANES);
        for g in &mut groups {
            for (k, &x) in g.iter().enumerate() {
                self.lanes[k * stride + bin(x)] += 1;
            }
        }
        for &x in groups.remainder() {
            self.lanes[bin(x)] += 1;
        }
    }

    /// The totals per raw index (biased exponent and sub-bin).
    pub fn totals(mut self) -> Vec<u64> {
        self.flush();
        self.raw
    }

    fn flush(&mut self) {
        for lane in self.lanes.chunks_exact_mut(self.stride) {
            for (r, l) in self.raw.iter_mut().zip(lane.iter_mut()) {
                *r += u64::from(*l);
                *l = 0;
            }
        }
        self.since_flush = 0;
    }
}

/// Sums and scalar counts of one chunk (at most `u32::MAX` values).
pub(crate) fn scalars<T: Bits>(chunk: &[T], isa: Isa) -> ChunkStats {
    let mut c = scalars_with(isa, chunk);
    if c.subnormals > 0 {
        // The vector loop counted the rare values together: sort them out.
        c.subnormals = 0;
        for &x in chunk {
            let bits = x.bits();
            let a = bits & T::ABS;
            if a > T::INF {
                c.nan += 1;
            } else if a == T::INF {
                if a == bits {
                    c.pos_inf += 1;
                } else {
                    c.neg_inf += 1;
                }
            } else if a != T::ZERO && a < T::MIN_NORMAL {
                c.subnormals += 1;
            }
        }
    }
    c
}

crate::isa::isa_dispatch! {
    /// [`scalars_any`] through the `isa` build.
    fn scalars_with<T: Bits>(chunk: &[T]) -> ChunkStats = |_isa| scalars_any(chunk)
}

/// The quotients `|n| / |d|` in f64 of the pairs of `num` and `den` whose `d` is not zero
/// (`d != 0.0`: a NaN `d` is kept), in order, written to the front of `out`; returns how many.
/// A correctly rounded division, so every build gives the same bits.
///
/// # Panics
/// If `out` is shorter than `num.len() + 4` (the vector loop stores four lanes past the kept
/// ones) or `den` is shorter than `num`.
pub(crate) fn kept_quotients(num: &[f32], den: &[f32], out: &mut [f64], isa: Isa) -> usize {
    assert!(den.len() >= num.len() && out.len() >= num.len() + 4);
    match isa {
        // SAFETY: an `Isa` other than Baseline comes from run-time detection of its features,
        // and AVX-512 implies AVX2; the lengths were checked above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 => unsafe { kept_quotients_avx2(num, den, out) },
        _ => kept_quotients_scalar(num, den, out, 0),
    }
}

/// The scalar twin of the vector loop, from position `start` on (the vector loop's tail).
fn kept_quotients_scalar(num: &[f32], den: &[f32], out: &mut [f64], start: usize) -> usize {
    let mut kept = start;
    for (&n, &d) in num.iter().zip(den) {
        out[kept] = f64::from(n.abs()) / f64::from(d.abs());
        kept += usize::from(d != 0.0);
    }
    kept
}

/// Four pairs at a time: four quotients in one vector division, the kept ones moved to the
/// front by a permutation looked up from the mask of nonzero denominators, all four lanes
/// stored at the next free position (the lanes past the kept ones are overwritten later).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn kept_quotients_avx2(num: &[f32], den: &[f32], out: &mut [f64]) -> usize {
    use std::arch::x86_64::*;
    // For each 4-bit mask, the f32 lanes (two per f64) of the kept f64 lanes, in order.
    const PERMUTATIONS: [[i32; 8]; 16] = {
        let mut table = [[0i32; 8]; 16];
        let mut mask = 0;
        while mask < 16 {
            let mut at = 0;
            let mut lane = 0;
            while lane < 4 {
                if mask & (1 << lane) != 0 {
                    table[mask][2 * at] = 2 * lane;
                    table[mask][2 * at + 1] = 2 * lane + 1;
                    at += 1;
                }
                lane += 1;
            }
            mask += 1;
        }
        table
    };
    let groups = num.len() / 4;
    let abs = _mm_castsi128_ps(_mm_set1_epi32(0x7fff_ffff));
    let zero = _mm_setzero_ps();
    let mut kept = 0;
    for g in 0..groups {
        // SAFETY: 4 g + 3 < num.len() <= den.len(); kept <= 4 g, and out.len() >= num.len() + 4
        // >= kept + 4 (checked by the caller).
        unsafe {
            let n = _mm_loadu_ps(num.as_ptr().add(4 * g));
            let d = _mm_loadu_ps(den.as_ptr().add(4 * g));
            let q = _mm256_div_pd(
                _mm256_cvtps_pd(_mm_and_ps(n, abs)),
                _mm256_cvtps_pd(_mm_and_ps(d, abs)),
            );
            let mask = _mm_movemask_ps(_mm_cmpneq_ps(d, zero)) as usize;
            let perm = _mm256_loadu_si256(PERMUTATIONS[mask].as_ptr().cast());
            let packed = _mm256_permutevar8x32_ps(_mm256_castpd_ps(q), perm);
            _mm256_storeu_ps(out.as_mut_ptr().add(kept).cast(), packed);
            kept += mask.count_ones() as usize;
        }
    }
    kept_quotients_scalar(&num[4 * groups..], &den[4 * groups..], out, kept)
}

/// The vector loops; `subnormals` holds the count of all rare values (subnormal, inf, NaN).
///
/// Two passes over the chunk (which is in cache), so that each loop's accumulators fit in AVX2's
/// sixteen registers (one loop keeping all of them spilled to the stack on every value): the
/// f64 sums in [`SUM_LANES`] lanes, value `i` in lane `i % SUM_LANES` and the lanes added in
/// order at the end (this order is part of every histogram's bits), then the integer
/// statistics, which do not depend on the order, in [`INT_LANES`] lanes.
#[inline(always)]
fn scalars_any<T: Bits>(chunk: &[T]) -> ChunkStats {
    // The finite magnitude's pattern: the magnitude, or zero for inf and NaN (a select written
    // as a mask, all ones when finite, so that the lanes stay in registers).
    let finite_abs = |x: T| {
        let a = x.bits() & T::ABS;
        a & T::U::from(a < T::INF).wrapping_neg()
    };
    let mut sum_abs = [0f64; SUM_LANES];
    let mut sum_sq = [0f64; SUM_LANES];
    let mut blocks = chunk.chunks_exact(SUM_LANES);
    for b in &mut blocks {
        for (l, &x) in b.iter().enumerate() {
            let v = T::widen(finite_abs(x));
            sum_abs[l] += v;
            sum_sq[l] += v * v;
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        let v = T::widen(finite_abs(x));
        sum_abs[l] += v;
        sum_sq[l] += v * v;
    }

    let zero = T::ZERO;
    let one = T::U::from(true);
    let mut amax = [zero; INT_LANES];
    let mut amin = [T::MAX; INT_LANES];
    let mut zeros = [zero; INT_LANES];
    let mut negatives = [zero; INT_LANES];
    let mut rare = [zero; INT_LANES];
    let mut step = |l: usize, x: T| {
        let bits = x.bits();
        let a = bits & T::ABS;
        let a_finite = finite_abs(x);
        // a - 1 for a finite nonzero value, the largest pattern for zero, inf and NaN.
        let key = a_finite.wrapping_sub(&one);
        amax[l] = amax[l].max(a_finite);
        amin[l] = amin[l].min(key);
        zeros[l] = zeros[l].wrapping_add(&T::U::from(a == zero));
        negatives[l] = negatives[l].wrapping_add(&T::U::from(key != T::MAX && a != bits));
        rare[l] = rare[l].wrapping_add(&T::U::from(
            a.wrapping_sub(&one) < T::MIN_NORMAL.wrapping_sub(&one) || a >= T::INF,
        ));
    };
    let mut blocks = chunk.chunks_exact(INT_LANES);
    for b in &mut blocks {
        for (l, &x) in b.iter().enumerate() {
            step(l, x);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        step(l, x);
    }
    // A chunk has at most u32::MAX values, so no lane's count wrapped.
    let total = |c: &[T::U; INT_LANES]| {
        c.iter()
            .map(|&v| v.try_into().map_or(0, |v: usize| v as u64))
            .sum::<u64>()
    };
    let min_key = amin.iter().copied().min().unwrap_or(T::MAX);
    ChunkStats {
        sum_abs: sum_abs.iter().sum(),
        sum_sq: sum_sq.iter().sum(),
        amax: T::widen(amax.iter().copied().max().unwrap_or(zero)),
        min_nonzero: if min_key == T::MAX {
            f64::INFINITY
        } else {
            T::widen(min_key.wrapping_add(&one))
        },
        zeros: total(&zeros),
        negatives: total(&negatives),
        subnormals: total(&rare),
        ..ChunkStats::default()
    }
}
