//! Log2-magnitude histograms built from the bit patterns of f32 and f64 values.
//!
//! The bin of a finite nonzero value is read from its bits: the binary exponent `E = floor(log2
//! |x|)` and, with `2^s` sub-bins per octave, the top `s` bits of the mantissa after the leading
//! one. The bin index is `E * 2^s + j`, and bin `i` holds the magnitudes in
//!
//! ```text
//! [ 2^E * (1 + j / 2^s),  2^E * (1 + (j + 1) / 2^s) )      E = i >> s, j = i & (2^s - 1)
//! ```
//!
//! so the sub-bins split an octave into equal widths in value (not in log2). The hot loop is one
//! shift and one increment per value on the bit pattern: for a normal f32 `|bits| >> (23 - s)` is
//! already `(E + 127) * 2^s + j`. Subnormal inputs, zeros, infinities and NaN take rarer paths.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod kernels;

use std::ops::Range;

use kernels::LaneCounter;
pub(crate) use kernels::{Bits, ChunkStats, Isa, scalars};

use super::{CHUNK, CHUNKS_PER_TASK};
use crate::format::pow2;

/// The largest `sub_bins_log2` accepted: 64 sub-bins per octave.
pub const MAX_SUB_BINS_LOG2: u32 = 6;

/// Exponent of the smallest positive f64 (the smallest bin any value can fall in).
const E_MIN: i32 = -1074;
/// Exponent of the largest finite f64.
const E_MAX: i32 = 1023;

/// A log2-magnitude histogram of a tensor, with counts of zeros, NaN, infinities and negatives
/// and the tensor's amax, smallest nonzero magnitude, sum of magnitudes and sum of squares.
///
/// Mergeable ([`Histogram::merge`]) and serializable; the serialized form stores only the range
/// of bins between the lowest and highest nonempty ones.
///
/// The sums of f64 inputs near f64's maximum can overflow to `+inf`; JSON has no infinity
/// (serde_json writes `null`), so such a histogram does not round-trip through JSON.
///
/// Floating-point sums are accumulated per [`CHUNK`](super::CHUNK) of the slice given to
/// `add_*`/`par_add_*` and combined in chunk order, so the sequential and parallel builders
/// give bit-identical results whatever the number of threads.
///
/// ```
/// use mixprec::stats::Histogram;
///
/// let mut h = Histogram::new(1); // two sub-bins per octave
/// h.add_f32(&[0.0, 1.0, 1.5, -3.0, f32::NAN]);
/// assert_eq!((h.count(), h.zeros(), h.nan(), h.negatives()), (5, 1, 1, 1));
/// let bins: Vec<(f64, u64)> = h.bins().map(|b| (b.lower, b.count)).collect();
/// assert_eq!(bins, [(1.0, 1), (1.5, 1), (2.0, 0), (3.0, 1)]);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// The derives make inherent `Histogram::serialize`/`deserialize`; the trait impls below call
// them, the deserializer then checking what it read.
#[serde(remote = "Self")]
pub struct Histogram {
    sub_bins_log2: u32,
    /// Index of `bins[0]` (see the module docs); 0 when `bins` is empty.
    first_bin: i32,
    /// Counts of finite nonzero values; empty, or with nonzero first and last entries.
    bins: Vec<u64>,
    zeros: u64,
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
    negatives: u64,
    amax: f64,
    min_nonzero: Option<f64>,
    sum_abs: f64,
    sum_sq: f64,
}

impl Serialize for Histogram {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Histogram::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Histogram {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Histogram::deserialize(deserializer)?
            .checked()
            .map_err(serde::de::Error::custom)
    }
}

impl Histogram {
    /// The histogram, if its fields are consistent (what deserializing one checks).
    fn checked(mut self) -> Result<Self, String> {
        let s = self.sub_bins_log2;
        if s > MAX_SUB_BINS_LOG2 {
            return Err(format!("sub_bins_log2 {s} exceeds {MAX_SUB_BINS_LOG2}"));
        }
        let lo = i64::from(E_MIN) << s;
        let hi = (i64::from(E_MAX + 1) << s) - 1;
        let last = i64::from(self.first_bin) + self.bins.len() as i64 - 1;
        if !self.bins.is_empty() && (i64::from(self.first_bin) < lo || last > hi) {
            return Err(format!(
                "bins {}..={last} outside {lo}..={hi}",
                self.first_bin
            ));
        }
        if self.bins.first() == Some(&0) || self.bins.last() == Some(&0) {
            return Err("bins must start and end with a nonzero count".into());
        }
        // Sums of huge f64 values may legitimately be +inf.
        if !(self.amax.is_finite() && self.amax >= 0.0 && self.sum_abs >= 0.0 && self.sum_sq >= 0.0)
        {
            return Err("amax must be finite, amax and sums nonnegative".into());
        }
        if self.bins.is_empty() {
            self.first_bin = 0;
        }
        Ok(self)
    }
}

/// One bin of a [`Histogram`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    /// The bin index `E * 2^s + j`.
    pub index: i32,
    /// The binary exponent `E` of the values in the bin.
    pub exponent: i32,
    /// Lower edge (inclusive) of the magnitudes in the bin.
    pub lower: f64,
    /// Upper edge (exclusive).
    pub upper: f64,
    /// `log2(lower)`.
    pub log2_lower: f64,
    /// Number of values.
    pub count: u64,
}

impl Histogram {
    /// An empty histogram with `2^sub_bins_log2` sub-bins per octave.
    ///
    /// # Panics
    /// If `sub_bins_log2` exceeds [`MAX_SUB_BINS_LOG2`].
    #[must_use]
    pub fn new(sub_bins_log2: u32) -> Self {
        assert!(
            sub_bins_log2 <= MAX_SUB_BINS_LOG2,
            "sub_bins_log2 {sub_bins_log2} exceeds {MAX_SUB_BINS_LOG2}"
        );
        Histogram {
            sub_bins_log2,
            first_bin: 0,
            bins: Vec::new(),
            zeros: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            negatives: 0,
            amax: 0.0,
            min_nonzero: None,
            sum_abs: 0.0,
            sum_sq: 0.0,
        }
    }

    /// A histogram of `xs`, built in parallel (see [`Histogram::par_add_f32`]).
    #[must_use]
    pub fn from_f32(sub_bins_log2: u32, xs: &[f32]) -> Self {
        let mut h = Histogram::new(sub_bins_log2);
        h.par_add_f32(xs);
        h
    }

    /// A histogram of `xs`, built in parallel (see [`Histogram::par_add_f64`]).
    #[must_use]
    pub fn from_f64(sub_bins_log2: u32, xs: &[f64]) -> Self {
        let mut h = Histogram::new(sub_bins_log2);
        h.par_add_f64(xs);
        h
    }

    /// Adds the values of `xs` (one thread).
    pub fn add_f32(&mut self, xs: &[f32]) {
        let sums = self.add_counts(xs);
        self.add_chunk_sums(&sums);
    }

    /// Adds the values of `xs` (one thread).
    pub fn add_f64(&mut self, xs: &[f64]) {
        let sums = self.add_counts(xs);
        self.add_chunk_sums(&sums);
    }

    /// Adds the values of `xs` with rayon; bit-identical to [`Histogram::add_f32`].
    pub fn par_add_f32(&mut self, xs: &[f32]) {
        self.par_add(xs.len(), |h, r| h.add_counts(&xs[r]));
    }

    /// Adds the values of `xs` with rayon; bit-identical to [`Histogram::add_f64`].
    pub fn par_add_f64(&mut self, xs: &[f64]) {
        self.par_add(xs.len(), |h, r| h.add_counts(&xs[r]));
    }

    /// Adds the ratios `|num[i]| / |den[i]|` for every `i` with `den[i] != 0` (one thread); the
    /// slices are paired up to the shorter one's length. Quotients are formed in f64, where the
    /// quotient of two f32 values never rounds across a bin edge (an edge has at most 7
    /// significant bits, and a quotient of 24-bit significands that is not exactly on it is at
    /// least 2^-31 away in relative terms, far more than f64's rounding error), and no quotient
    /// overflows.
    pub fn add_ratios_f32(&mut self, num: &[f32], den: &[f32]) {
        let sums = self.add_ratio_counts(num, den);
        self.add_chunk_sums(&sums);
    }

    /// [`Histogram::add_ratios_f32`] with rayon; bit-identical to it.
    pub fn par_add_ratios_f32(&mut self, num: &[f32], den: &[f32]) {
        let n = num.len().min(den.len());
        self.par_add(n, |h, r| h.add_ratio_counts(&num[r.clone()], &den[r]));
    }

    /// Counts each task (a range of [`CHUNK`]-aligned positions below `len`) into its own
    /// histogram with `counts`, then merges the tasks in order: the result does not depend on
    /// the thread count.
    fn par_add(
        &mut self,
        len: usize,
        counts: impl Fn(&mut Histogram, Range<usize>) -> Vec<ChunkStats> + Sync,
    ) {
        let s = self.sub_bins_log2;
        let task = CHUNK * CHUNKS_PER_TASK;
        if len <= task || rayon::current_num_threads() == 1 {
            let sums = counts(self, 0..len);
            self.add_chunk_sums(&sums);
            return;
        }
        let parts: Vec<(Histogram, Vec<ChunkStats>)> = (0..len.div_ceil(task))
            .into_par_iter()
            .map(|t| {
                let mut h = Histogram::new(s);
                let sums = counts(&mut h, t * task..((t + 1) * task).min(len));
                (h, sums)
            })
            .collect();
        for (h, sums) in parts {
            self.merge_counts(&h);
            self.add_chunk_sums(&sums);
        }
    }

    /// Adds the counts and sums of `other` (for example the same tensor at another step, or
    /// another tensor).
    ///
    /// # Panics
    /// If the two histograms have different sub-bin counts.
    pub fn merge(&mut self, other: &Histogram) {
        self.merge_counts(other);
        self.sum_abs += other.sum_abs;
        self.sum_sq += other.sum_sq;
    }

    /// Everything but the floating-point sums.
    fn merge_counts(&mut self, other: &Histogram) {
        assert_eq!(
            self.sub_bins_log2, other.sub_bins_log2,
            "merging histograms with different sub-bins"
        );
        if !other.bins.is_empty() {
            let lo = other.first_bin;
            self.ensure_range(lo, lo + other.bins.len() as i32 - 1);
            let at = (lo - self.first_bin) as usize;
            for (dst, src) in self.bins[at..].iter_mut().zip(&other.bins) {
                *dst += src;
            }
        }
        self.zeros += other.zeros;
        self.nan += other.nan;
        self.pos_inf += other.pos_inf;
        self.neg_inf += other.neg_inf;
        self.negatives += other.negatives;
        self.amax = self.amax.max(other.amax);
        self.min_nonzero = match (self.min_nonzero, other.min_nonzero) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    fn add_chunk_sums(&mut self, chunks: &[ChunkStats]) {
        for c in chunks {
            self.add_sums(c.sum_abs, c.sum_sq);
        }
    }

    /// Adds to the sum of the magnitudes and to the sum of the squares (what another pass
    /// summed, with [`Histogram::add_counted`]'s counts).
    pub(crate) fn add_sums(&mut self, sum_abs: f64, sum_sq: f64) {
        self.sum_abs += sum_abs;
        self.sum_sq += sum_sq;
    }

    /// Makes `bins` cover indices `lo..=hi`.
    fn ensure_range(&mut self, lo: i32, hi: i32) {
        if self.bins.is_empty() {
            self.first_bin = lo;
            self.bins = vec![0; (hi - lo + 1) as usize];
            return;
        }
        let last = self.first_bin + self.bins.len() as i32 - 1;
        if hi > last {
            self.bins.resize(self.bins.len() + (hi - last) as usize, 0);
        }
        if lo < self.first_bin {
            let grow = (self.first_bin - lo) as usize;
            self.bins.splice(0..0, std::iter::repeat_n(0, grow));
            self.first_bin = lo;
        }
    }

    /// Adds per-index counts from a dense `raw` array whose entry `r` is bin `r + offset`
    /// (entries outside `valid` are ignored).
    fn add_raw(&mut self, raw: &[u64], valid: std::ops::Range<usize>, offset: i32) {
        let nonzero = |r: &usize| raw[*r] != 0;
        let (Some(lo), Some(hi)) = (
            valid.clone().find(nonzero),
            valid.clone().rev().find(nonzero),
        ) else {
            return;
        };
        self.ensure_range(lo as i32 + offset, hi as i32 + offset);
        let at = (lo as i32 + offset - self.first_bin) as usize;
        for (dst, src) in self.bins[at..].iter_mut().zip(&raw[lo..=hi]) {
            *dst += src;
        }
    }

    /// Adds what another pass over the values counted for the histogram (the sweep's, which
    /// decodes every value's exponent and top mantissa bits anyway): `bins[(E - first_exponent)
    /// << s | j]` values in sub-bin `j` of octave `E`, and the scalars of each [`CHUNK`] of the
    /// values, in slice order. The same counts and sums as [`Histogram::par_add_f32`] on the
    /// same values when the chunks are the same ones (the sums are added in chunk order).
    pub(crate) fn add_counted(&mut self, first_exponent: i32, bins: &[u64], chunks: &[ChunkStats]) {
        let s = self.sub_bins_log2;
        self.add_raw(bins, 0..bins.len(), first_exponent << s);
        for c in chunks {
            self.add_scalars(c);
        }
        self.add_chunk_sums(chunks);
    }

    /// Adds one value's bin, by its f64 bit pattern (the rare paths: subnormal inputs).
    fn add_one_f64_bits(&mut self, abs: u64) {
        let i = bin_of_f64_bits(abs, self.sub_bins_log2);
        self.ensure_range(i, i);
        self.bins[(i - self.first_bin) as usize] += 1;
    }

    fn add_scalars(&mut self, c: &ChunkStats) {
        self.zeros += c.zeros;
        self.nan += c.nan;
        self.pos_inf += c.pos_inf;
        self.neg_inf += c.neg_inf;
        self.negatives += c.negatives;
        self.amax = self.amax.max(c.amax);
        if c.min_nonzero.is_finite() {
            self.min_nonzero = Some(
                self.min_nonzero
                    .map_or(c.min_nonzero, |m| m.min(c.min_nonzero)),
            );
        }
    }

    /// Counts `xs` into the bins and scalar counters; returns each chunk's sums.
    fn add_counts<T: Bits>(&mut self, xs: &[T]) -> Vec<ChunkStats> {
        let isa = Isa::best();
        let mut counter = LaneCounter::new::<T>(self.sub_bins_log2);
        let chunks = xs
            .chunks(CHUNK)
            .map(|chunk| self.count_chunk(&mut counter, chunk, isa))
            .collect();
        self.add_lane_totals::<T>(counter);
        chunks
    }

    /// [`Histogram::add_counts`] for the ratios of [`Histogram::add_ratios_f32`], one chunk of
    /// pairs at a time.
    fn add_ratio_counts(&mut self, num: &[f32], den: &[f32]) -> Vec<ChunkStats> {
        let isa = Isa::best();
        let mut counter = LaneCounter::new::<f64>(self.sub_bins_log2);
        let n = num.len().min(den.len());
        let (num, den) = (&num[..n], &den[..n]);
        let mut ratios = vec![0f64; CHUNK + 4];
        let chunks = num
            .chunks(CHUNK)
            .zip(den.chunks(CHUNK))
            .map(|(num, den)| {
                let kept = kernels::kept_quotients(num, den, &mut ratios, isa);
                self.count_chunk(&mut counter, &ratios[..kept], isa)
            })
            .collect();
        self.add_lane_totals::<f64>(counter);
        chunks
    }

    /// Counts one chunk: its bins into `counter` (subnormals directly), its scalars into `self`.
    fn count_chunk<T: Bits>(
        &mut self,
        counter: &mut LaneCounter,
        chunk: &[T],
        isa: Isa,
    ) -> ChunkStats {
        counter.count(chunk);
        let c = kernels::scalars(chunk, isa);
        if c.subnormals > 0 {
            for &x in chunk {
                let a = x.bits() & T::ABS;
                if a != T::ZERO && a < T::MIN_NORMAL {
                    self.add_one_f64_bits(T::widen(a).to_bits());
                }
            }
        }
        self.add_scalars(&c);
        c
    }

    /// Adds the bins `counter` counted (biased exponents 0, zeros and subnormals, and all ones,
    /// inf and NaN, are counted elsewhere).
    fn add_lane_totals<T: Bits>(&mut self, counter: LaneCounter) {
        let s = self.sub_bins_log2;
        let all_ones = (1usize << T::EXP_BITS) - 1;
        let bias = (all_ones / 2) as i32;
        self.add_raw(&counter.totals(), (1 << s)..(all_ones << s), -(bias << s));
    }

    /// Sub-bins per octave, as a power of two.
    #[must_use]
    pub fn sub_bins_log2(&self) -> u32 {
        self.sub_bins_log2
    }

    /// Every value added, including zeros, NaN and infinities.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.finite_nonzero() + self.zeros + self.nonfinite()
    }

    /// Finite nonzero values (the ones in the bins).
    #[must_use]
    pub fn finite_nonzero(&self) -> u64 {
        self.bins.iter().sum()
    }

    /// Zeros (of either sign).
    #[must_use]
    pub fn zeros(&self) -> u64 {
        self.zeros
    }

    /// NaN values.
    #[must_use]
    pub fn nan(&self) -> u64 {
        self.nan
    }

    /// `+inf` values.
    #[must_use]
    pub fn pos_inf(&self) -> u64 {
        self.pos_inf
    }

    /// `-inf` values.
    #[must_use]
    pub fn neg_inf(&self) -> u64 {
        self.neg_inf
    }

    /// NaN and infinities.
    #[must_use]
    pub fn nonfinite(&self) -> u64 {
        self.nan + self.pos_inf + self.neg_inf
    }

    /// Finite nonzero negative values.
    #[must_use]
    pub fn negatives(&self) -> u64 {
        self.negatives
    }

    /// The largest finite magnitude (0 if there is none).
    #[must_use]
    pub fn amax(&self) -> f64 {
        self.amax
    }

    /// The smallest nonzero finite magnitude, if any.
    #[must_use]
    pub fn min_nonzero(&self) -> Option<f64> {
        self.min_nonzero
    }

    /// The sum of the finite magnitudes.
    #[must_use]
    pub fn sum_abs(&self) -> f64 {
        self.sum_abs
    }

    /// The sum of the squares of the finite values (the squared L2 norm).
    #[must_use]
    pub fn sum_sq(&self) -> f64 {
        self.sum_sq
    }

    /// The mean magnitude of the finite values (zeros included), 0 when there are none.
    #[must_use]
    pub fn mean_abs(&self) -> f64 {
        let n = self.finite_nonzero() + self.zeros;
        if n == 0 { 0.0 } else { self.sum_abs / n as f64 }
    }

    /// The bins from the lowest nonempty one to the highest, empty ones between included.
    pub fn bins(&self) -> impl Iterator<Item = Bin> + '_ {
        let s = self.sub_bins_log2;
        self.bins.iter().enumerate().map(move |(n, &count)| {
            let index = self.first_bin + n as i32;
            let (lower, upper) = bin_edges(index, s);
            Bin {
                index,
                exponent: index >> s,
                lower,
                upper,
                log2_lower: lower.log2(),
                count,
            }
        })
    }

    /// Counts per binary exponent `E` (sub-bins summed), lowest first, empty octaves between
    /// included.
    #[must_use]
    pub fn exponent_counts(&self) -> Vec<(i32, u64)> {
        let s = self.sub_bins_log2;
        let mut out: Vec<(i32, u64)> = Vec::new();
        for (n, &count) in self.bins.iter().enumerate() {
            let e = (self.first_bin + n as i32) >> s;
            match out.last_mut() {
                Some((last, c)) if *last == e => *c += count,
                _ => out.push((e, count)),
            }
        }
        out
    }
}

/// The edges `[lower, upper)` of bin `index` with `2^s` sub-bins per octave (exact, except
/// that sub-bin edges in f64's subnormal octaves round to the f64 grid).
fn bin_edges(index: i32, s: u32) -> (f64, f64) {
    let e = index >> s;
    let j = f64::from(index & ((1 << s) - 1));
    let width = f64::from(1u32 << s);
    let base = pow2(e);
    (base * (1.0 + j / width), base * (1.0 + (j + 1.0) / width))
}

/// The bin index of a positive finite f64 given by its bits (normal or subnormal).
fn bin_of_f64_bits(abs: u64, s: u32) -> i32 {
    let biased = (abs >> 52) as i32;
    let (e, frac) = if biased == 0 {
        // Subnormal: shift the leading one out to get a normalised 52-bit fraction.
        let lz = abs.leading_zeros(); // >= 12
        let top = 63 - lz as i32; // position of the leading one
        (E_MIN + top, ((abs << lz) << 1) >> 12)
    } else {
        (biased - 1023, abs & ((1 << 52) - 1))
    };
    (e << s) | (frac >> (52 - s)) as i32
}

#[cfg(test)]
mod tests;
