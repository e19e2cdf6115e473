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

impl Bits for f32 {
    type U = u32;
    const EXP_BITS: u32 = 8;
    const MAN_BITS: u32 = 23;
    const ABS: u32 = 0x7fff_ffff;
    const INF: u32 = 0x7f80_0000;
    const MIN_NORMAL: u32 = 0x0080_0000;
    const ZERO: u32 = 0;
    const MAX: u32 = u32::MAX;
    #[inline(always)]
    fn bits(self) -> u32 {
        self.to_bits()
    }
    #[inline(always)]
    fn widen(u: u32) -> f64 {
        f64::from(f32::from_bits(u))
    }
}

impl Bits for f64 {
    type U = u64;
    const EXP_BITS: u32 = 11;
    const MAN_BITS: u32 = 52;
    const ABS: u64 = !(1 << 63);
    const INF: u64 = 0x7ff0_0000_0000_0000;
    const MIN_NORMAL: u64 = 1 << 52;
    const ZERO: u64 = 0;
    const MAX: u64 = u64::MAX;
    #[inline(always)]
    fn bits(self) -> u64 {
        self.to_bits()
    }
    #[inline(always)]
    fn widen(u: u64) -> f64 {
        f64::from_bits(u)
    }
}

/// Sets of bin counters a chunk is spread over.
const LANES: usize = 8;

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
    let mut c = match isa {
        // SAFETY: an `Isa` other than Baseline comes from run-time detection of its features.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { scalars_avx512(chunk) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { scalars_avx2(chunk) },
        _ => scalars_any(chunk),
    };
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scalars_avx2<T: Bits>(chunk: &[T]) -> ChunkStats {
    scalars_any(chunk)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn scalars_avx512<T: Bits>(chunk: &[T]) -> ChunkStats {
    scalars_any(chunk)
}

/// The vector loop; `subnormals` holds the count of all rare values (subnormal, inf, NaN).
#[inline(always)]
fn scalars_any<T: Bits>(chunk: &[T]) -> ChunkStats {
    const L: usize = 16;
    let mut sum_abs = [0f64; L];
    let mut sum_sq = [0f64; L];
    let mut amax = [T::ZERO; L];
    let mut amin = [T::MAX; L];
    let mut zeros = [0u32; L];
    let mut negatives = [0u32; L];
    let mut rare = [0u32; L];
    // Selects are written as masks (all ones when finite) so that the lanes stay in registers.
    let one = T::U::from(true);
    let mut step = |l: usize, x: T| {
        let bits = x.bits();
        let a = bits & T::ABS;
        let finite = T::U::from(a < T::INF).wrapping_neg();
        let a_finite = a & finite;
        // a - 1 for a finite nonzero value, the largest pattern for zero, inf and NaN.
        let key = a_finite.wrapping_sub(&one);
        let v = T::widen(a_finite);
        sum_abs[l] += v;
        sum_sq[l] += v * v;
        amax[l] = amax[l].max(a_finite);
        amin[l] = amin[l].min(key);
        zeros[l] += u32::from(a == T::ZERO);
        negatives[l] += u32::from(key != T::MAX && a != bits);
        rare[l] +=
            u32::from(a.wrapping_sub(&one) < T::MIN_NORMAL.wrapping_sub(&one) || a >= T::INF);
    };
    let mut blocks = chunk.chunks_exact(L);
    for b in &mut blocks {
        for (l, &x) in b.iter().enumerate() {
            step(l, x);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        step(l, x);
    }
    let total = |c: &[u32; L]| c.iter().map(|&v| u64::from(v)).sum::<u64>();
    let min_key = amin.iter().copied().min().unwrap_or(T::MAX);
    ChunkStats {
        sum_abs: sum_abs.iter().sum(),
        sum_sq: sum_sq.iter().sum(),
        amax: T::widen(amax.iter().copied().max().unwrap_or(T::ZERO)),
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
