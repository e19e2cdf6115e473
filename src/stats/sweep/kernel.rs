//! The per-chunk loop of the sweep accumulator.
//!
//! One survey pass (counts, exponent range; taken from the histogram's scalar loop when the pass
//! counts a histogram, which reads the same values anyway), then three passes over the chunk,
//! all in cache:
//!
//! 1. **count**: each finite nonzero value's exponent row, flags and histogram sub-bin, one
//!    counter increment per value. Consecutive values usually share an exponent and would update
//!    the same counter one after the other, each waiting for the previous store; so value `i`
//!    goes to copy `i % COUNT_LANES` of its row's counters, summed at the end.
//! 2. **group**: a counting sort of the values' mantissas `f` in `[1, 2)` by exponent row, in
//!    value order within each row (the counters give each row's place), each row padded with
//!    zeros to a whole number of [`LANES`].
//! 3. **sum**: per row and per sum (slot), one loop over the row's `f` in vectors of [`LANES`]
//!    values: value `v` of the row's run adds its squared rounding error to lane `v % LANES`;
//!    the lanes are folded by a fixed pairwise tree. A padding zero adds `+0` to every sum.
//!
//! ```text
//! slot j = 0..=p   window error, rounding f to the grid 2^(1-j)
//! slot p+1         normal-range error, grid 2^-p, for the values with b = 0 and with b = 1
//! slot p+2         f^2 over the values with z = 0 (those with f == 1 add their count)
//! ```
//!
//! Rounding to a grid `2^g` is `(f + 1.5 * 2^(52+g)) - 1.5 * 2^(52+g)` in f64, exact for `f` in
//! `[1, 2)`, so every term is computed exactly; only the additions round. The order of the
//! additions is fixed by the data alone (chunk, row, position in the row, lane, tree), not by
//! the build: every build (baseline, AVX2, AVX-512) adds the same terms in the same order and
//! gives the same bits (tested). The AVX2 and AVX-512 builds fuse the multiply and the add for
//! f32 inputs only, where `d * d` is exact (24 significant bits squared), so the fused and the
//! separate forms round alike.
//!
//! Each lane adds at most `SWEEP_CHUNK / LANES` = 2048 nonnegative terms, so a chunk's sum is
//! within `(2048 + 5) * 2^-53` relative of the exact sum, and the fixed tree across chunks
//! ([`super::SweepAccumulator`]) adds `2^-53` per level.

use super::{FRAC_MASK, HistogramPart, ONE_BITS, Partial, Rows, SweepAccumulator, split};
use crate::stats::histogram::{Bits, ChunkStats, Isa, scalars};
use crate::stats::{CHUNK, Histogram};
use std::cell::RefCell;

/// Copies of each row's counters (value `i` counts in copy `i % COUNT_LANES`).
const COUNT_LANES: usize = 4;
/// The lanes of every sum: the `v`-th value of a row adds to lane `v % LANES`.
pub(super) const LANES: usize = 32;
/// The most sub-bins per octave (as a power of two) that the chunk loop counts for a histogram.
pub(super) const HIST_MAX_S: u32 = 2;
/// Counters per row and copy: the flags `z | a << 1 | b << 2` shifted left by [`HIST_MAX_S`],
/// or'ed with the sub-bin (so that the common flags-zero counters share one cache line).
const KEYS: usize = 8 << HIST_MAX_S;

// Value `i` of a chunk is counted in copy `i % COUNT_LANES`, so no u16 counter can wrap.
const _: () = assert!(super::SWEEP_CHUNK / COUNT_LANES <= u16::MAX as usize);
const INF: u64 = 0x7ff0_0000_0000_0000;

/// What the sweep reads: f32 or f64 values.
pub(super) trait Sample: Bits {
    /// Whether the squared rounding errors of these values are exact in f64 (f32 values: `f`
    /// has 24 significant bits), so that a fused multiply-add rounds as a multiply then an add.
    const EXACT_SQUARES: bool;

    /// The f64 bit pattern of `|x|` (exact: every f32 is an f64).
    fn abs_bits64(self) -> u64;

    /// `(E, fraction)` of a finite nonzero value, as [`split`] gives them, or `None`.
    fn decode(self) -> Option<(i32, u64)>;

    /// Branch-free, for the vector pass: whether the value is normal, `E` and the fraction
    /// (as [`split`] gives them, if it is), and whether it is subnormal (which `decode` takes).
    fn parts(self) -> (bool, i32, u64, bool);

    /// Count, zeros, nonfinite values, and the smallest and largest f64 bit patterns of the
    /// finite nonzero magnitudes (`u64::MAX` and 0 when there are none).
    fn survey(xs: &[Self]) -> (u64, u64, u64, u64, u64);

    /// `hist.par_add_f32(xs)` or `hist.par_add_f64(xs)`.
    fn par_add_to(hist: &mut Histogram, xs: &[Self]);
}

impl Sample for f32 {
    const EXACT_SQUARES: bool = true;

    #[inline(always)]
    fn abs_bits64(self) -> u64 {
        f64::from(self).to_bits() & !(1 << 63)
    }

    #[inline(always)]
    fn decode(self) -> Option<(i32, u64)> {
        let a = self.to_bits() & 0x7fff_ffff;
        if a.wrapping_sub(0x0080_0000) < 0x7f00_0000 {
            // Normal: the exponent and fraction fields, widened.
            Some(((a >> 23) as i32 - 127, u64::from(a & 0x007f_ffff) << 29))
        } else if a != 0 && a < 0x0080_0000 {
            Some(split(self.abs_bits64()))
        } else {
            None
        }
    }

    #[inline(always)]
    fn parts(self) -> (bool, i32, u64, bool) {
        let a = self.to_bits() & 0x7fff_ffff;
        (
            a.wrapping_sub(0x0080_0000) < 0x7f00_0000,
            (a >> 23) as i32 - 127,
            u64::from(a & 0x007f_ffff) << 29,
            a.wrapping_sub(1) < 0x007f_ffff,
        )
    }

    #[inline(always)]
    fn survey(xs: &[f32]) -> (u64, u64, u64, u64, u64) {
        // On the f32 bits (u32 min/max vectorise); the order of magnitudes is that of the bits.
        let (mut zeros, mut nonfinite, mut lo, mut hi) = (0u64, 0u64, u32::MAX, 0u32);
        for &x in xs {
            let a = x.to_bits() & 0x7fff_ffff;
            zeros += u64::from(a == 0);
            nonfinite += u64::from(a >= 0x7f80_0000);
            let inside = a != 0 && a < 0x7f80_0000;
            lo = lo.min(if inside { a } else { u32::MAX });
            hi = hi.max(if inside { a } else { 0 });
        }
        let wide = |b: u32| f32::from_bits(b).abs_bits64();
        let (lo, hi) = if hi == 0 {
            (u64::MAX, 0)
        } else {
            (wide(lo), wide(hi))
        };
        (xs.len() as u64, zeros, nonfinite, lo, hi)
    }

    fn par_add_to(hist: &mut Histogram, xs: &[f32]) {
        hist.par_add_f32(xs);
    }
}

impl Sample for f64 {
    const EXACT_SQUARES: bool = false;

    #[inline(always)]
    fn abs_bits64(self) -> u64 {
        self.to_bits() & !(1 << 63)
    }

    #[inline(always)]
    fn decode(self) -> Option<(i32, u64)> {
        let a = self.abs_bits64();
        (a != 0 && a < INF).then(|| split(a))
    }

    #[inline(always)]
    fn parts(self) -> (bool, i32, u64, bool) {
        let a = self.abs_bits64();
        let biased = a >> 52;
        (
            biased.wrapping_sub(1) < 0x7fe,
            biased as i32 - 1023,
            a & FRAC_MASK,
            biased == 0 && a != 0,
        )
    }

    #[inline(always)]
    fn survey(xs: &[f64]) -> (u64, u64, u64, u64, u64) {
        let (mut zeros, mut nonfinite, mut lo, mut hi) = (0u64, 0u64, u64::MAX, 0u64);
        for &x in xs {
            let a = x.abs_bits64();
            zeros += u64::from(a == 0);
            nonfinite += u64::from(a >= INF);
            let inside = a != 0 && a < INF;
            lo = lo.min(if inside { a } else { u64::MAX });
            hi = hi.max(if inside { a } else { 0 });
        }
        (xs.len() as u64, zeros, nonfinite, lo, hi)
    }

    fn par_add_to(hist: &mut Histogram, xs: &[f64]) {
        hist.par_add_f64(xs);
    }
}

crate::isa::isa_dispatch! {
    /// The sums of one chunk through the loop built for `isa`, and with `hist_s = Some(s)` (at
    /// most [`HIST_MAX_S`]) what a histogram with `2^s` sub-bins per octave needs of the chunk
    /// ([`HistogramPart`]): the pass that counts each value's exponent and flags also counts its
    /// sub-bin, in the same counter increment.
    pub(super) fn chunk_with<T: Sample>(
        acc: &SweepAccumulator,
        xs: &[T],
        hist_s: Option<u32>,
    ) -> Partial = |isa| chunk_any(acc, xs, isa, hist_s)
}

/// A thread's buffers for one chunk, reused chunk after chunk: each value's counter (row and
/// copy), its mantissa `f`, and the mantissas grouped by row.
#[derive(Default)]
struct Scratch {
    codes: Vec<u32>,
    fs: Vec<f64>,
    grouped: Vec<f64>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The chunk loop for whatever target it is compiled for (`isa`, for the histogram's scalars
/// and whether to fuse multiply-adds).
#[inline(always)]
fn chunk_any<T: Sample>(
    acc: &SweepAccumulator,
    xs: &[T],
    isa: Isa,
    hist_s: Option<u32>,
) -> Partial {
    // The histogram's own scalar loop, per histogram chunk in order (so its sums are the ones
    // `Histogram::par_add_*` forms); the bins come from the counters below.
    let histogram = hist_s.map(|_| HistogramPart {
        bins: Vec::new(),
        chunks: xs.chunks(CHUNK).map(|c| scalars(c, isa)).collect(),
    });
    // The survey is in the histogram's scalars when they are computed: one pass fewer.
    let (count, zeros, nonfinite, lo_bits, hi_bits) = match &histogram {
        Some(h) => survey_of(xs.len(), &h.chunks),
        None => T::survey(xs),
    };
    let width = acc.width;
    let mut part = Partial {
        count,
        zeros,
        nonfinite,
        amax_bits: hi_bits,
        rows: Rows {
            width,
            ..Rows::default()
        },
        histogram,
    };
    if hi_bits == 0 {
        return part;
    }
    // Sub-bins 0 (every value in sub-bin 0) when no histogram is counted.
    let hs = hist_s.unwrap_or(0).min(HIST_MAX_S);
    let (lo, hi) = (split(lo_bits).0, split(hi_bits).0);
    let n = (hi - lo + 1) as usize;
    let fused = T::EXACT_SQUARES && isa >= Isa::Avx2;
    // Taken out of the thread-local and put back, rather than used in a closure: a closure is
    // not compiled for the build's instruction set, and its fused multiply-adds would be calls.
    let mut scratch = SCRATCH.take();
    let counts = count_values(acc, xs, lo, n, hs, &mut scratch);
    let starts = group(&counts, &mut scratch);
    let mut rows = fold_counts(&counts[..n * COUNT_LANES], lo, n, width);
    let grouped = &scratch.grouped;
    let consts = Consts::new(acc);
    for r in 0..n {
        let run = &grouped[starts[r]..starts[r + 1]];
        if fused {
            sum_row::<true>(&consts, run, &mut rows, r);
        } else {
            sum_row::<false>(&consts, run, &mut rows, r);
        }
    }
    SCRATCH.set(scratch);
    part.rows = rows;
    if let Some(h) = &mut part.histogram {
        h.bins = fold_bins(&counts[..n * COUNT_LANES], n, hs);
    }
    part
}

/// [`Sample::survey`] of `len` values from their histogram chunks' scalars: the same counts,
/// and the smallest and largest finite nonzero magnitudes as f64 bit patterns (exact: they are
/// values of the input type, widened).
fn survey_of(len: usize, chunks: &[ChunkStats]) -> (u64, u64, u64, u64, u64) {
    let (mut zeros, mut nonfinite, mut lo, mut hi) = (0, 0, u64::MAX, 0);
    for c in chunks {
        zeros += c.zeros;
        nonfinite += c.nan + c.pos_inf + c.neg_inf;
        if c.min_nonzero.is_finite() {
            lo = lo.min(c.min_nonzero.to_bits());
        }
        hi = hi.max(c.amax.to_bits());
    }
    (len as u64, zeros, nonfinite, lo, hi)
}

/// Pass 1: each value's counter, row `E - lo` and copy `i % COUNT_LANES` (`codes`; zeros and
/// nonfinite values count in a spare row `n`), its mantissa `f` in `[1, 2)` (`fs`), and the
/// counters of every row and copy ([`key`]). Values go by blocks of [`BLOCK`]: one branch-free
/// pass over the block's bits, then the counter increments; a block holding a subnormal (whose
/// exponent needs its leading zeros counted) is decoded value by value instead.
#[inline(always)]
fn count_values<T: Sample>(
    acc: &SweepAccumulator,
    xs: &[T],
    lo: i32,
    n: usize,
    hist_s: u32,
    scratch: &mut Scratch,
) -> Vec<[u16; KEYS]> {
    const BLOCK: usize = 16;
    let mut counts = vec![[0u16; KEYS]; (n + 1) * COUNT_LANES];
    scratch.codes.resize(xs.len(), 0);
    scratch.fs.resize(xs.len(), 0.0);
    let spare = (n * COUNT_LANES) as u32;
    let (t_a, t_b) = (acc.t_a, acc.t_b);
    let key_of = |frac: u64| {
        let z = u64::from(frac == 0);
        let class = z | u64::from(frac >= t_a) << 1 | u64::from(frac >= t_b) << 2;
        (class << HIST_MAX_S | frac >> (52 - hist_s)) as u32
    };
    let one_by_one = |block: &[T], codes: &mut [u32], fs: &mut [f64], keys: &mut [u32]| {
        for (l, &x) in block.iter().enumerate() {
            let copy = l as u32 % COUNT_LANES as u32;
            (codes[l], keys[l]) = match x.decode() {
                Some((e, frac)) => {
                    fs[l] = f64::from_bits(frac | ONE_BITS);
                    ((e - lo) as u32 * COUNT_LANES as u32 | copy, key_of(frac))
                }
                None => (spare | copy, 0),
            };
        }
    };
    let mut blocks = xs.chunks_exact(BLOCK);
    let (mut codes, mut fs) = (
        scratch.codes.chunks_exact_mut(BLOCK),
        scratch.fs.chunks_exact_mut(BLOCK),
    );
    let mut keys = [0u32; BLOCK];
    for ((block, codes), fs) in (&mut blocks).zip(&mut codes).zip(&mut fs) {
        let mut subnormal = false;
        for l in 0..BLOCK {
            let (normal, e, frac, sub) = block[l].parts();
            subnormal |= sub;
            // The block starts at a multiple of COUNT_LANES.
            let copy = l as u32 % COUNT_LANES as u32;
            let row = (e - lo) as u32 * COUNT_LANES as u32;
            codes[l] = if normal { row | copy } else { spare | copy };
            keys[l] = key_of(frac);
            fs[l] = f64::from_bits(frac | ONE_BITS);
        }
        if subnormal {
            one_by_one(block, codes, fs, &mut keys);
        }
        for (&c, &k) in codes.iter().zip(&keys) {
            if let Some(counters) = counts.get_mut(c as usize) {
                counters[k as usize & (KEYS - 1)] += 1;
            }
        }
    }
    let rest = blocks.remainder();
    let (codes, fs) = (codes.into_remainder(), fs.into_remainder());
    one_by_one(rest, codes, fs, &mut keys);
    for (&c, &k) in codes.iter().zip(&keys) {
        if let Some(counters) = counts.get_mut(c as usize) {
            counters[k as usize & (KEYS - 1)] += 1;
        }
    }
    counts
}

/// Pass 2: the mantissas grouped by row into `scratch.grouped`, row after row (the spare row
/// last), in value order within a row, each row padded with zeros to a multiple of [`LANES`];
/// returns where each row starts (and the end, last).
#[inline(always)]
fn group(counts: &[[u16; KEYS]], scratch: &mut Scratch) -> Vec<usize> {
    let mut next = vec![0usize; counts.len()];
    let mut starts = Vec::with_capacity(counts.len() / COUNT_LANES + 1);
    let mut at = 0;
    let grouped = &mut scratch.grouped;
    for (row, copies) in counts.chunks_exact(COUNT_LANES).enumerate() {
        starts.push(at);
        for (c, keys) in copies.iter().enumerate() {
            next[row * COUNT_LANES + c] = at;
            at += keys.iter().map(|&k| usize::from(k)).sum::<usize>();
        }
        let end = at.next_multiple_of(LANES);
        if grouped.len() < end {
            grouped.resize(end, 0.0);
        }
        grouped[at..end].fill(0.0);
        at = end;
    }
    starts.push(at);
    // A value's copy of its row's cursor (as its counter): consecutive values of one row do
    // not wait on each other's stores.
    for (&c, &f) in scratch.codes.iter().zip(&scratch.fs) {
        if let Some(to) = next.get_mut(c as usize) {
            // The cursor moves before the store, which then cannot make the compiler read it
            // again.
            let at = *to;
            *to = at + 1;
            if let Some(slot) = grouped.get_mut(at) {
                *slot = f;
            }
        }
    }
    starts
}

/// [`Rows`] of `n` rows from `lo` with the counts of the counters (over copies and sub-bins),
/// and `sum f^2` of the values with `f == 1`: their count. The sums of the rounding errors are
/// [`sum_row`]'s.
fn fold_counts(counts: &[[u16; KEYS]], lo: i32, n: usize, width: usize) -> Rows {
    let mut out = Rows::new(lo, lo + n as i32 - 1, width);
    for (r, copies) in counts.chunks_exact(COUNT_LANES).enumerate() {
        for keys in copies {
            for (c, flags) in keys.chunks_exact(1 << HIST_MAX_S).enumerate() {
                out.counts[r][c] += flags.iter().map(|&k| u64::from(k)).sum::<u64>();
            }
        }
        // Values with f == 1 (flag z, class bit 0) have f^2 = 1.
        let ones: u64 = (0..8)
            .filter(|c| c & 1 == 1)
            .map(|c| out.counts[r][c])
            .sum();
        out.sq[r][1] = ones as f64;
    }
    out
}

/// The constants of the sums: `1.5 * 2^(53 - j)` rounds `f` to `2^(1 - j)` (adding then
/// subtracting it), and `f` has flag `b` from `b_from` up.
struct Consts {
    grid: Vec<f64>,
    b_from: f64,
}

impl Consts {
    fn new(acc: &SweepAccumulator) -> Self {
        let b_from = if acc.t_b < 1 << 52 {
            f64::from_bits(acc.t_b | ONE_BITS)
        } else {
            f64::INFINITY
        };
        Consts {
            grid: acc.grid.clone(),
            b_from,
        }
    }
}

/// Pass 3: the sums of row `r` from its grouped mantissas `run` (a whole number of
/// [`LANES`], padded with zeros).
#[inline(always)]
fn sum_row<const FUSED: bool>(k: &Consts, run: &[f64], rows: &mut Rows, r: usize) {
    let w = rows.width;
    let p = w - 1;
    for j in 0..w {
        rows.window[r * w + j] = sum_squares::<FUSED, ALL>(run, k.grid[j], k.b_from);
    }
    let g = k.grid[p + 1];
    rows.normal_err[r] = [
        sum_squares::<FUSED, BELOW_B>(run, g, k.b_from),
        sum_squares::<FUSED, FROM_B>(run, g, k.b_from),
    ];
    rows.sq[r][0] = sum_squares::<FUSED, SQUARES>(run, 0.0, k.b_from);
}

/// Which values' terms [`sum_squares`] adds: every value's rounding error, the values' below
/// `b_from` or from it up, or (no rounding) `f` itself where `f != 1`.
const ALL: u8 = 0;
const BELOW_B: u8 = 1;
const FROM_B: u8 = 2;
const SQUARES: u8 = 3;

/// `sum d^2` over `run`, `d = f - RNE(f)` (rounding by adding and subtracting `grid`) or `f`,
/// for the values that `TERMS` selects: the `v`-th value into lane `v % LANES`, the lanes
/// folded by [`tree`]; fused multiply-adds where `FUSED` (only where `d * d` is exact). No
/// closures: they would not be compiled for the caller's instruction set.
#[inline(always)]
fn sum_squares<const FUSED: bool, const TERMS: u8>(run: &[f64], grid: f64, b_from: f64) -> f64 {
    // LANES as vectors of 8: value v into vector (v / 8) % 4, lane v % 8, which is lane v % 32.
    let mut lanes = [[0.0; 8]; LANES / 8];
    for block in run.chunks_exact(LANES) {
        for (acc, eight) in lanes.iter_mut().zip(block.chunks_exact(8)) {
            for l in 0..8 {
                let f = eight[l];
                let d = match TERMS {
                    SQUARES => f,
                    _ => f - ((f + grid) - grid),
                };
                let keep = match TERMS {
                    BELOW_B => f < b_from,
                    FROM_B => f >= b_from,
                    SQUARES => f != 1.0,
                    _ => true,
                };
                let d = if keep { d } else { 0.0 };
                acc[l] = if FUSED {
                    d.mul_add(d, acc[l])
                } else {
                    acc[l] + d * d
                };
            }
        }
    }
    tree(lanes.concat().try_into().unwrap_or([0.0; LANES]))
}

/// The sum of the lanes by a fixed pairwise tree: `(l0 + l1) + (l2 + l3)`, and so on.
#[inline(always)]
fn tree(mut v: [f64; LANES]) -> f64 {
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            v[i] = v[2 * i] + v[2 * i + 1];
        }
    }
    v[0]
}

/// The histogram's counts per row and sub-bin, `bins[r << hist_s | j]`, over lanes and flags
/// (a counter's sub-bin field is below `2^hist_s`).
fn fold_bins(counts: &[[u16; KEYS]], n: usize, hist_s: u32) -> Vec<u64> {
    let width = 1usize << hist_s;
    let mut bins = vec![0u64; n * width];
    for (row, out) in counts
        .chunks_exact(COUNT_LANES)
        .zip(bins.chunks_exact_mut(width))
    {
        // A row holds at most a chunk's values, which u32 sums hold.
        let mut sums = [0u32; 1 << HIST_MAX_S];
        for keys in row {
            for flags in keys.chunks_exact(1 << HIST_MAX_S) {
                for (s, &k) in sums.iter_mut().zip(flags) {
                    *s += u32::from(k);
                }
            }
        }
        for (o, &s) in out.iter_mut().zip(&sums) {
            *o = u64::from(s);
        }
    }
    bins
}
