//! Loss-scale sweeps: what rounding `x * 2^k` into a format does to a tensor, for every `k` of a
//! range, in one pass over the data whatever the number of scales.
//!
//! For a format with `p` mantissa bits, exponent range `emin..=emax` and largest finite value
//! `max = Mf * 2^emax`, write a finite nonzero value as `|x| = f * 2^E` with `f` in `[1, 2)`.
//! Rounding `x * 2^k` with nearest-even and the IEEE overflow rule gives a class that only moves
//! up as `k` grows (rounding is monotone), and it changes at three thresholds:
//!
//! ```text
//! underflow  for k <  k_sub  = emin - p - E - 1 + [f == 1]          (result 0; at k_sub - 1 the
//!                                                                   scaled value is <= half the
//!                                                                   min subnormal, a tie at f == 1)
//! subnormal  for k <  k_norm = emin - E - [f >= 2 - 2^-p]           (rounds up to min normal)
//! normal     for k <  k_over = emax - E + 1 - [RNE_p(f) > Mf]       (rounds above max)
//! overflow   otherwise
//! ```
//!
//! So a value is summarised by its exponent `E` and three flags read from its mantissa bits, and
//! the counts at every scale follow exactly from counts per `(E, flags)`.
//!
//! The squared rounding error `(Q(x 2^k) / 2^k - x)^2` is, in units of `4^E`:
//! - `f^2` while the value underflows,
//! - in the `p + 1` scales `k = k_a + j`, `k_a = emin - p - E - 1`, `j = 0..=p` where the scaled
//!   value sits below the min normal, the error of rounding `f` to the grid `2^(1-j)`,
//! - above them, the error of rounding `f` to `p` fractional bits: the same at every scale,
//!   since scaling by a power of two is exact in the normal range.
//!
//! The accumulator keeps, per exponent `E`, the counts per flags, `sum f^2`, the `p + 1` window
//! errors and the normal-range error. For f32 values into formats of at most 10 mantissa bits
//! (nearly every use) the sums are exact: integers per cell of exponent and top fraction bits,
//! formed into per-exponent totals in i128 and rounded once to f64 (`exact`). Otherwise each
//! term is computed exactly per value (rounding to a grid `2^g` is `(f + 1.5 * 2^(52+g)) - 1.5 *
//! 2^(52+g)` in f64, exact for f in `[1, 2)`; for f32 inputs the same values come from `1.5 *
//! 2^(23+g)` in f32, 16 lanes to a vector) and summed in f64 in a fixed order: within a
//! fixed-size chunk, value `i` into lane `i % LANES` of its exponent's sums, the lanes added in
//! lane order; the chunks' sums combined by a fixed tree (a binary counter over the chunks in
//! slice order). Either way the order depends on the data alone, so a result is the same bits
//! whatever the thread count and build (baseline, AVX2, AVX-512); the f64 sums of nonnegative
//! terms are within `(SWEEP_CHUNK / LANES + LANES + levels) * 2^-53` relative of the exact
//! sums, `levels` being the depth of the tree across chunks: below `1e-12` up to `2^30` chunks
//! (both tested against exact sums). Sums are kept in units of `4^E` and rescaled relative to
//! the largest exponent, so they neither overflow nor underflow for f64 inputs of any
//! magnitude.
//!
//! `relative_error` is `||Q(x S)/S - x|| / ||x||` over the finite values. When any value
//! overflows at a scale, the error there is infinite (the step would be skipped):
//! [`SweepRow::relative_error`] is then `None` (null in JSON) and
//! [`SweepRow::relative_error_finite`] gives the error over the values that do not overflow,
//! still relative to the norm of the whole tensor. A tensor with no nonzero finite value has
//! zero error and zero energy lost.

mod exact;
mod from_histogram;
mod kernel;

use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::format::{FloatFormat, pow2};
use crate::stats::Histogram;
use crate::stats::histogram::{ChunkStats, Isa};
use exact::Exact;
use kernel::{HIST_MAX_S, Sample, Terms};

pub use from_histogram::sweep_from_histogram;

/// Values per chunk of the sweep accumulator (the chunks' sums are combined by a fixed tree).
const SWEEP_CHUNK: usize = 1 << 16;
/// Chunks handed to rayon at once (bounds the memory of the per-chunk partial sums).
const CHUNKS_PER_BATCH: usize = 64;
const FRAC_MASK: u64 = (1 << 52) - 1;
const ONE_BITS: u64 = 0x3ff0_0000_0000_0000;

/// Which chunk loop [`SweepAccumulator::add_f32_via`] runs (for benchmarks).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepPath {
    /// What the other methods run: the best build and loop for the CPU and the data.
    Auto,
    /// The loop before issue 11's work: every term in f64, at most the AVX2 build.
    F64Avx2,
}

/// One scale of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// `k`, the scale being `2^k`.
    pub log2_scale: i32,
    /// Finite nonzero values whose scaled value rounds to zero.
    pub underflow: u64,
    /// Values whose scaled value rounds to a nonzero value below the min normal.
    pub subnormal: u64,
    /// Values whose scaled value rounds to a normal finite value.
    pub normal: u64,
    /// Values whose scaled value rounds to infinity (or NaN in formats without infinities).
    pub overflow: u64,
    /// The share of the squared L2 norm (of the finite values) held by the values that underflow.
    pub energy_lost: f64,
    /// `||Q(x S)/S - x|| / ||x||`; `None` when a value overflows (the error is infinite) or when
    /// computed from a histogram (which does not keep the bits that decide rounding errors).
    pub relative_error: Option<f64>,
    /// The same over the values that do not overflow, relative to the whole norm; `None` from
    /// a histogram.
    pub relative_error_finite: Option<f64>,
}

impl SweepRow {
    /// The row of scale `2^k` whose classes hold `[underflow, subnormal, normal, overflow]`
    /// values, with `energy_lost` and no relative errors (a histogram's row).
    #[must_use]
    pub(crate) fn of_counts(
        k: i32,
        [underflow, subnormal, normal, overflow]: [u64; 4],
        energy_lost: f64,
    ) -> SweepRow {
        SweepRow {
            log2_scale: k,
            underflow,
            subnormal,
            normal,
            overflow,
            energy_lost,
            relative_error: None,
            relative_error_finite: None,
        }
    }
}

/// A loss-scale sweep of one tensor (or the union of several).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// The format rounded into.
    pub format: FloatFormat,
    /// Every element.
    pub count: u64,
    /// Finite zeros.
    pub zeros: u64,
    /// NaN and infinities.
    pub nonfinite: u64,
    /// The largest finite magnitude (0 if none).
    pub amax: f64,
    /// One row per scale, in increasing `log2_scale`.
    pub rows: Vec<SweepRow>,
}

impl Sweep {
    /// The row of scale `2^k`, if it is in the sweep.
    #[must_use]
    pub fn row(&self, k: i32) -> Option<&SweepRow> {
        self.rows.iter().find(|r| r.log2_scale == k)
    }

    /// Finite nonzero values: `underflow + subnormal + normal + overflow` at every scale.
    #[must_use]
    pub fn finite_nonzero(&self) -> u64 {
        self.count - self.zeros - self.nonfinite
    }
}

/// Per-exponent sums of one chunk, or of everything so far.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rows {
    /// Exponent `E` of row 0.
    lo: i32,
    /// Counts per flags `z | a << 1 | b << 2`.
    counts: Vec<[u64; 8]>,
    /// `sum f^2` split by `z`.
    sq: Vec<[f64; 2]>,
    /// Normal-range `sum (f - RNE_p(f))^2` split by `b`.
    normal_err: Vec<[f64; 2]>,
    /// Window errors, `width` per row.
    window: Vec<f64>,
    width: usize,
}

impl Rows {
    fn new(lo: i32, hi: i32, width: usize) -> Self {
        let n = (hi - lo + 1).max(0) as usize;
        Rows {
            lo,
            counts: vec![[0; 8]; n],
            sq: vec![[0.0; 2]; n],
            normal_err: vec![[0.0; 2]; n],
            window: vec![0.0; n * width],
            width,
        }
    }

    fn len(&self) -> usize {
        self.counts.len()
    }

    /// Adds `other` row by row (growing the range as needed).
    fn merge(&mut self, other: &Rows) {
        if other.len() == 0 {
            return;
        }
        if self.len() == 0 {
            *self = other.clone();
            return;
        }
        let lo = self.lo.min(other.lo);
        let hi = (self.lo + self.len() as i32 - 1).max(other.lo + other.len() as i32 - 1);
        if lo < self.lo || hi > self.lo + self.len() as i32 - 1 {
            let mut grown = Rows::new(lo, hi, self.width);
            grown.add_at(self);
            *self = grown;
        }
        self.add_at(other);
    }

    /// Adds `other`, whose range lies inside this one.
    fn add_at(&mut self, other: &Rows) {
        let at = (other.lo - self.lo) as usize;
        let w = self.width;
        for i in 0..other.len() {
            for c in 0..8 {
                self.counts[at + i][c] += other.counts[i][c];
            }
            for z in 0..2 {
                self.sq[at + i][z] += other.sq[i][z];
                self.normal_err[at + i][z] += other.normal_err[i][z];
            }
            let dst = &mut self.window[(at + i) * w..(at + i + 1) * w];
            for (d, s) in dst.iter_mut().zip(&other.window[i * w..(i + 1) * w]) {
                *d += s;
            }
        }
    }
}

/// Builds [`Sweep`]s: add values (f32 or f64, sequentially or in parallel), then ask for any range
/// of scales. The pass over the data does not depend on the range.
///
/// ```
/// use mixprec::format::FP16;
/// use mixprec::stats::SweepAccumulator;
///
/// let mut acc = SweepAccumulator::new(FP16);
/// acc.add_f32(&[1e-8, 70000.0, 1.0]);
/// let s = acc.sweep(-1..=1);
/// // 70000 overflows fp16 at every scale here; 1e-8 underflows until the scale reaches 2.
/// let r0 = s.row(0).unwrap();
/// assert_eq!((r0.underflow, r0.subnormal, r0.normal, r0.overflow), (1, 0, 1, 1));
/// assert_eq!(r0.relative_error, None);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SweepAccumulator {
    format: FloatFormat,
    /// Mantissa-fraction thresholds (52-bit units) of the flags `a` and `b`.
    t_a: u64,
    t_b: u64,
    /// `1.5 * 2^(53 - j)` for `j = 0..=p+1`: adding and subtracting rounds `f` to `2^(1-j)`.
    grid: Vec<f64>,
    count: u64,
    zeros: u64,
    nonfinite: u64,
    amax_bits: u64,
    /// Window errors per row: `p + 1`.
    width: usize,
    /// The chunks' sums so far as a binary counter: `(level, sums of 2^level chunks)`, levels
    /// decreasing; two of one level are added into one of the next (see `absorb`).
    tree: Vec<(u32, Rows)>,
    /// The exact cells of the f32 values of formats of at most [`exact::MAX_P`] mantissa bits
    /// (the tree holds the rest).
    exact: Exact,
}

impl SweepAccumulator {
    /// An empty accumulator for rounding into `format`.
    #[must_use]
    pub fn new(format: FloatFormat) -> Self {
        let p = format.man_bits();
        let t_a = (1u64 << 52) - (1u64 << (52 - p));
        let mf = format.max() / pow2(format.emax());
        let mf_frac = ((mf - 1.0) * pow2(52)) as u64;
        // Rounding f to p bits exceeds Mf iff f is above the midpoint between Mf and the next
        // p-bit value, or at it when Mf is odd (the tie then goes up).
        let odd = (mf_frac >> (52 - p)) & 1 == 1;
        let t_b = mf_frac + (1u64 << (51 - p)) + u64::from(!odd);
        let grid = (0..=p as i32 + 1).map(|j| 1.5 * pow2(53 - j)).collect();
        SweepAccumulator {
            format,
            t_a,
            t_b,
            grid,
            count: 0,
            zeros: 0,
            nonfinite: 0,
            amax_bits: 0,
            width: p as usize + 1,
            tree: Vec::new(),
            exact: Exact::default(),
        }
    }

    /// The format.
    #[must_use]
    pub fn format(&self) -> FloatFormat {
        self.format
    }

    /// Adds `xs` (one thread).
    pub fn add_f32(&mut self, xs: &[f32]) {
        self.add(xs, Isa::best(), Terms::Auto);
    }

    /// Adds `xs` chunk by chunk on this thread, through the loop built for `isa`.
    fn add<T: Sample>(&mut self, xs: &[T], isa: Isa, terms: Terms) {
        if let Some(xs) = self.cells_for(xs, terms) {
            let exact = Mutex::new(std::mem::take(&mut self.exact));
            for piece in xs.chunks(exact::PASS) {
                let part = exact::pass(isa, piece, self.flags(), None, &exact);
                self.absorb_counts(&part);
            }
            self.exact = exact.into_inner().unwrap_or_else(PoisonError::into_inner);
            return;
        }
        for chunk in xs.chunks(SWEEP_CHUNK) {
            let part = kernel::chunk(self, chunk, isa, terms);
            self.absorb(part);
        }
    }

    /// [`SweepAccumulator::add_f32`] through a chosen chunk loop, so that benchmarks can set
    /// the loops side by side (all give the same bits).
    #[doc(hidden)]
    pub fn add_f32_via(&mut self, path: SweepPath, xs: &[f32]) {
        let (isa, terms) = match path {
            SweepPath::Auto => (Isa::best(), Terms::Auto),
            SweepPath::F64Avx2 => (Isa::best().min(Isa::Avx2), Terms::F64),
        };
        self.add(xs, isa, terms);
    }

    /// Adds `xs` (one thread).
    pub fn add_f64(&mut self, xs: &[f64]) {
        self.add(xs, Isa::best(), Terms::Auto);
    }

    /// Adds `xs` with rayon; bit-identical to [`SweepAccumulator::add_f32`].
    pub fn par_add_f32(&mut self, xs: &[f32]) {
        self.par_add(xs);
    }

    /// Adds `xs` with rayon; bit-identical to [`SweepAccumulator::add_f64`].
    pub fn par_add_f64(&mut self, xs: &[f64]) {
        self.par_add(xs);
    }

    /// [`SweepAccumulator::par_add_f32`] and [`Histogram::par_add_f32`] on the same values, in
    /// one pass: the loop that decodes each value's exponent and flags for the sweep also
    /// counts its histogram bin. Both results are the same bits whatever the thread count, and
    /// the same as the two calls made separately, but for the histogram's sums of magnitudes
    /// and squares where the sweep's sums are exact (formats of at most 10 mantissa bits): they
    /// are then formed from the exact cells, each exponent's rounded once, not in the
    /// histogram's f64 order (both within `1e-12` relative of the exact sums). A histogram of
    /// more than `2^2` sub-bins per octave is built by its own pass.
    pub fn par_add_f32_with_histogram(&mut self, xs: &[f32], hist: &mut Histogram) {
        self.par_add_with(xs, hist, Isa::best());
    }

    /// [`SweepAccumulator::par_add_f32_with_histogram`] for f64 values.
    pub fn par_add_f64_with_histogram(&mut self, xs: &[f64], hist: &mut Histogram) {
        self.par_add_with(xs, hist, Isa::best());
    }

    /// [`SweepAccumulator::par_add_f32`] and [`SweepAccumulator::par_add_f64`]: chunks are
    /// absorbed in slice order, whatever the thread count, so the result equals the one-thread
    /// result.
    fn par_add<T: Sample>(&mut self, xs: &[T]) {
        self.par_add_parts(xs, Isa::best(), None, |_| {});
    }

    /// The fused pass through the loops built for `isa` (tests run each build).
    fn par_add_with<T: Sample>(&mut self, xs: &[T], hist: &mut Histogram, isa: Isa) {
        let s = hist.sub_bins_log2();
        if s > HIST_MAX_S {
            self.par_add_parts(xs, isa, None, |_| {});
            T::par_add_to(hist, xs);
            return;
        }
        // The exact cells' sums of magnitudes and squares, added in integers over the whole
        // call, so that how the values were cut into pieces does not show in the rounding.
        let mut exact = Exact::default();
        self.par_add_parts(xs, isa, Some(s), |p| {
            if let Some(h) = &p.histogram {
                let lo = p.rows.lo;
                hist.add_counted(lo, &h.bins, &h.chunks);
                if let Some(e) = &h.exact {
                    exact.merge(e);
                }
            }
        });
        if !exact.is_empty() {
            let (sum_abs, sum_sq) = exact.magnitudes();
            hist.add_sums(sum_abs, sum_sq);
        }
    }

    /// Runs the chunk loop on every [`SWEEP_CHUNK`] of `xs` with rayon and absorbs the chunks in
    /// slice order, handing each to `then` before it is absorbed.
    fn par_add_parts<T: Sample>(
        &mut self,
        xs: &[T],
        isa: Isa,
        hist_s: Option<u32>,
        mut then: impl FnMut(&Partial),
    ) {
        if let Some(xs) = self.cells_for(xs, Terms::Auto) {
            self.par_add_cells(xs, isa, hist_s, then);
            return;
        }
        for batch in xs.chunks(SWEEP_CHUNK * CHUNKS_PER_BATCH) {
            let parts: Vec<Partial> = batch
                .par_chunks(SWEEP_CHUNK)
                .map(|c| kernel::chunk_with(isa, self, c, Terms::Auto, hist_s))
                .collect();
            for p in parts {
                then(&p);
                self.absorb(p);
            }
        }
    }

    /// `xs` as f32 when their sums go into the exact cells: f32 values, formats of at most
    /// [`exact::MAX_P`] mantissa bits, the default loop.
    fn cells_for<'a, T: Sample>(&self, xs: &'a [T], terms: Terms) -> Option<&'a [f32]> {
        (terms == Terms::Auto && self.format.man_bits() <= exact::MAX_P)
            .then(|| T::as_f32(xs))
            .flatten()
    }

    /// The mantissa bits and the thresholds of the flags `a` and `b`.
    fn flags(&self) -> (u32, u64, u64) {
        (self.format.man_bits(), self.t_a, self.t_b)
    }

    /// [`SweepAccumulator::par_add_parts`] into the exact cells: pieces of up to
    /// [`exact::PASS`] values in parallel, each added to the cells as it ends (integers: in any order), and the
    /// pieces' counts and histogram parts handed to `then` in slice order.
    fn par_add_cells(
        &mut self,
        xs: &[f32],
        isa: Isa,
        hist_s: Option<u32>,
        mut then: impl FnMut(&Partial),
    ) {
        let exact = Mutex::new(std::mem::take(&mut self.exact));
        let flags = self.flags();
        // A piece per thread at least (whole histogram chunks, one at least, at most a pass): the sums are
        // integers, the same however the values are cut.
        let piece = xs
            .len()
            .div_ceil(rayon::current_num_threads())
            .next_multiple_of(crate::stats::CHUNK)
            .clamp(crate::stats::CHUNK, exact::PASS);
        let parts: Vec<Partial> = xs
            .par_chunks(piece)
            .map(|piece| exact::pass(isa, piece, flags, hist_s, &exact))
            .collect();
        self.exact = exact.into_inner().unwrap_or_else(PoisonError::into_inner);
        for p in &parts {
            then(p);
            self.absorb_counts(p);
        }
    }

    /// Adds everything `other` holds (another tensor, for the union of several).
    ///
    /// # Panics
    /// If the formats differ.
    pub fn merge(&mut self, other: &SweepAccumulator) {
        assert_eq!(
            self.format, other.format,
            "merging sweeps of different formats"
        );
        self.count += other.count;
        self.zeros += other.zeros;
        self.nonfinite += other.nonfinite;
        self.amax_bits = self.amax_bits.max(other.amax_bits);
        self.exact.merge(&other.exact);
        let mut rows = self.tree_rows();
        rows.merge(&other.tree_rows());
        // Whatever is added next goes beside the union, never into it.
        self.tree = vec![(u32::MAX, rows)];
    }

    /// Adds a chunk's sums: into the tree as a leaf, then each pair of equal levels at its top
    /// into one of the next level (a binary counter, so the tree over the chunks is the same
    /// whatever the batches and threads that computed them).
    fn absorb(&mut self, p: Partial) {
        self.absorb_counts(&p);
        self.tree.push((0, p.rows));
        while let [.., (a, _), (b, _)] = self.tree[..] {
            if a != b {
                break;
            }
            if let (Some((_, right)), Some((level, left))) = (self.tree.pop(), self.tree.last_mut())
            {
                left.merge(&right);
                *level += 1;
            }
        }
    }

    /// A chunk's counts (its sums go elsewhere).
    fn absorb_counts(&mut self, p: &Partial) {
        self.count += p.count;
        self.zeros += p.zeros;
        self.nonfinite += p.nonfinite;
        self.amax_bits = self.amax_bits.max(p.amax_bits);
    }

    /// Every value's sums: the tree's and the exact cells'.
    fn rows(&self) -> Rows {
        let mut rows = self.tree_rows();
        if !self.exact.is_empty() {
            rows.merge(&self.exact.rows_f64(self.format.man_bits()));
        }
        rows
    }

    /// Every chunk's sums: the tree's partial sums added from the last (smallest) up.
    fn tree_rows(&self) -> Rows {
        let mut parts = self.tree.iter().rev().map(|(_, r)| r);
        let mut sum = parts.next().cloned().unwrap_or_else(|| Rows {
            width: self.width,
            ..Rows::default()
        });
        for left in parts {
            let mut l = left.clone();
            l.merge(&sum);
            sum = l;
        }
        sum
    }

    /// The sweep over scales `2^k` for `k` in `log2_scales` (empty if the range is).
    #[must_use]
    pub fn sweep(&self, log2_scales: std::ops::RangeInclusive<i32>) -> Sweep {
        let f = self.format;
        let (p, emin, emax) = (f.man_bits() as i32, f.emin(), f.emax());
        let rows = &self.rows();
        let w = rows.width;
        let top = rows.lo + rows.len() as i32 - 1;
        // Sums in units of 4^E, brought to a common scale relative to the top exponent.
        let unit = |e: i32| scale4(e - top);
        let total: f64 = (0..rows.len())
            .map(|i| (rows.sq[i][0] + rows.sq[i][1]) * unit(rows.lo + i as i32))
            .sum();
        let out = log2_scales
            .map(|k| {
                let mut row = SweepRow {
                    log2_scale: k,
                    underflow: 0,
                    subnormal: 0,
                    normal: 0,
                    overflow: 0,
                    energy_lost: 0.0,
                    relative_error: None,
                    relative_error_finite: None,
                };
                let (mut lost, mut err) = (0.0, 0.0);
                for i in 0..rows.len() {
                    let e = rows.lo + i as i32;
                    let u = unit(e);
                    for (c, &n) in rows.counts[i].iter().enumerate() {
                        if n == 0 {
                            continue;
                        }
                        let (z, a, b) = ((c & 1) as i32, (c >> 1 & 1) as i32, (c >> 2) as i32);
                        if k < emin - p - e - 1 + z {
                            row.underflow += n;
                        } else if k < emin - e - a {
                            row.subnormal += n;
                        } else if k < emax - e + 1 - b {
                            row.normal += n;
                        } else {
                            row.overflow += n;
                        }
                    }
                    let k_a = emin - p - e - 1;
                    for z in 0..2 {
                        if k < k_a + z as i32 {
                            lost += rows.sq[i][z] * u;
                        }
                    }
                    if k < k_a {
                        err += (rows.sq[i][0] + rows.sq[i][1]) * u;
                    } else if k < k_a + w as i32 {
                        err += rows.window[i * w + (k - k_a) as usize] * u;
                    } else {
                        for b in 0..2 {
                            if k < emax - e + 1 - b as i32 {
                                err += rows.normal_err[i][b] * u;
                            }
                        }
                    }
                }
                let ratio = |x: f64| if total > 0.0 { x / total } else { 0.0 };
                row.energy_lost = ratio(lost);
                let finite = ratio(err).sqrt();
                row.relative_error_finite = Some(finite);
                row.relative_error = (row.overflow == 0).then_some(finite);
                row
            })
            .collect();
        Sweep {
            format: f,
            count: self.count,
            zeros: self.zeros,
            nonfinite: self.nonfinite,
            amax: f64::from_bits(self.amax_bits),
            rows: out,
        }
    }
}

/// The sums of one chunk.
#[derive(Debug, PartialEq)]
struct Partial {
    count: u64,
    zeros: u64,
    nonfinite: u64,
    amax_bits: u64,
    rows: Rows,
    /// What a histogram of the chunk needs, when the pass counts one.
    histogram: Option<HistogramPart>,
}

/// A histogram's share of one chunk's pass: the bins, by exponent from the chunk's lowest
/// (`rows.lo`) and sub-bin, and the histogram's scalars of each of its chunks ([`CHUNK`]
/// values: a sweep chunk is a whole number of them). The exact cells' pass gives its counts
/// as one chunk's, with no sums: its sums of magnitudes and squares are integers, in `exact`.
///
/// [`CHUNK`]: crate::stats::CHUNK
#[derive(Debug, PartialEq)]
struct HistogramPart {
    bins: Vec<u64>,
    chunks: Vec<ChunkStats>,
    exact: Option<Exact>,
}

// The histogram's chunks must tile the sweep's, so that its sums are formed over the same values.
const _: () = assert!(SWEEP_CHUNK.is_multiple_of(crate::stats::CHUNK));

/// `(E, fraction)` of a positive finite f64 given by its bits, with `|x| = (1 + frac / 2^52) *
/// 2^E` (subnormals normalised).
fn split(a: u64) -> (i32, u64) {
    let biased = (a >> 52) as i32;
    if biased == 0 {
        let lz = a.leading_zeros();
        (-1074 + 63 - lz as i32, ((a << lz) << 1) >> 12)
    } else {
        (biased - 1023, a & FRAC_MASK)
    }
}

/// `4^e`, flushed to 0 far below f64's range (a share that small of the total is nothing).
fn scale4(e: i32) -> f64 {
    let twice = 2 * e;
    if twice < -2000 {
        0.0
    } else if twice < -1000 {
        pow2(twice / 2) * pow2(twice - twice / 2)
    } else {
        pow2(twice.min(1023))
    }
}

#[cfg(test)]
mod tests;
