//! Exact sums for f32 values rounded into formats of at most [`MAX_P`] mantissa bits: the
//! sweep's per-value work as one increment of a counter cell; the sums formed per pass from
//! the cells, in integers.
//!
//! A finite nonzero f32 is `G * 2^(E - 23)` with `G = 2^23 + F` its 24-bit significand. Every
//! error sum the sweep keeps for exponent `E` is a sum of `e^2`, `e` the error of rounding `G`
//! to a multiple of `2^d` (nearest, ties to even) in units of `2^-23` of `f = G / 2^23`: `d =
//! 24 - j` for the window grid `2^(1-j)`, `d = 23 - p` for the normal range; or a sum of `G^2`.
//! Split `F` into its top [`TOP`] bits `T` and its low [`LOW`] bits `R`. For `d > LOW` (every
//! `d` when `p <= MAX_P`) the part of `G` below `2^d` is `L + R`, `L` fixed by `T`, and
//! `R < 2^LOW <= 2^(d-1)` moves it past the midpoint `2^(d-1)` only when `L` is at the
//! midpoint, where rounding either way gives the same `e^2`. So within one cell `(E, T)`,
//! `e = A + R` with `A = 2^12 a` fixed by `T` and `d`, and over the cell's `n` values
//! `sum e^2 = 2^24 n a^2 + 2^13 a sum R + sum R^2`. The flags of the counts are thresholds on `T` too, except two
//! that also ask whether `R` is zero (`f == 1`, and `T` at the threshold of flag `b` when that
//! tie rounds down): those values have cells of their own.
//!
//! So per value a pass adds `(1, R, R^2)` to its cell in a packed table (two u64 a cell:
//! `count << 32 | sum R` and `sum R^2`, which cannot overflow in a pass of [`PASS`] values),
//! then forms each exponent's sums from the cells as dot products with weights that depend
//! on the format alone (u64 products and sums, exact; a slot whose `a` depends on `T mod 2^m`
//! alone over the `2^m` sums of the cells folded to that period), into i128 totals: integers
//! that add exactly in any order. [`Exact::rows_f64`] rounds each total once to f64: the same bits whatever
//! the order, thread count and build, within `2^-53` relative of the exact sums.
//!
//! The table has a row for every exponent an f32 can have, so the pass needs no survey first:
//! the loop that finds each value's cell also keeps what a histogram needs besides its bins
//! (the range of the magnitudes, zeros, NaN and infinities, negatives: [`Tally`]), and the sums
//! of the magnitudes and of their squares come from the cells as well, exactly
//! ([`Exact::magnitudes`]). One read of the values, whatever is asked of them.

use std::cell::RefCell;
use std::sync::{Mutex, PoisonError};

use super::{HistogramPart, Partial, Rows, split};
use crate::format::pow2;
use crate::stats::CHUNK;
use crate::stats::histogram::ChunkStats;

/// The widest format (mantissa bits) whose sums the cells hold: every `d` is then above
/// [`LOW`].
pub(super) const MAX_P: u32 = 10;
/// The fraction bits of a cell's key.
const TOP: u32 = 11;
/// The fraction bits summed in a cell.
const LOW: u32 = 23 - TOP;
/// The cell of the values with `f == 1`.
const ONE: usize = 1 << TOP;
/// The cell of the values with `T` at flag `b`'s threshold and `R == 0`.
const AT_B: usize = ONE + 1;
/// Cells per exponent (the two above, padded to whole vectors).
const CELLS: usize = ONE + 8;
/// The exponent of the smallest f32 subnormal: the table's row 0.
const FIRST_E: i32 = -149;
/// Exponents of finite nonzero f32 values, `FIRST_E..=127`: the table's rows, then one spare
/// row for zeros and nonfinite values.
const EXPONENTS: usize = 277;
const SPARE: u32 = EXPONENTS as u32;
/// The row of a normal f32 is its biased exponent plus this.
const NORMAL_ROW: u32 = (-FIRST_E - 127) as u32;
/// Below this many values per exponent a pass adds each value's errors to its exponent's sums
/// directly ([`direct`]) rather than through the cells, whose reduction costs a pass over
/// every exponent's 2,048 cells: the same integers either way.
pub(super) const DIRECT_PER_ROW: usize = 128;
/// The most occupied cells of a row that [`reduce`] sums one by one (fewer products than
/// folding all 2,048).
const SPARSE: usize = 256;
/// Values per pass (a whole number of the histogram's chunks): a count fits 32 bits, `sum R <
/// 2^20 * 2^12` fits 32 bits and `sum R^2 < 2^20 * 2^24` fits 64.
pub(super) const PASS: usize = 1 << 20;

const _: () = assert!((PASS as u64) << LOW <= 1 << 32);
const _: () = assert!(PASS.is_multiple_of(CHUNK));

/// The exact sums per exponent `lo..`: counts per flags (`z | a << 1 | b << 2`) and, in units
/// of `2^-46`, the `p + 1` window sums, the normal-range sums by `b`, and `sum f^2` over `f != 1`;
/// then `sum f` over every value in units of `2^-23` (for the histogram's sum of magnitudes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Exact {
    lo: i32,
    counts: Vec<[u64; 8]>,
    /// `p + 5` per exponent.
    sums: Vec<i128>,
}

impl Exact {
    fn rows(&self) -> usize {
        self.counts.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Makes the rows cover exponents `lo..=hi`, of `slots` sums each.
    fn cover(&mut self, lo: i32, hi: i32, slots: usize) {
        if self.is_empty() {
            self.lo = lo;
            self.counts = vec![[0; 8]; (hi - lo + 1) as usize];
            self.sums = vec![0; self.counts.len() * slots];
            return;
        }
        let top = self.lo + self.rows() as i32 - 1;
        if hi > top {
            let more = (hi - top) as usize;
            self.counts.resize(self.rows() + more, [0; 8]);
            self.sums.resize(self.sums.len() + more * slots, 0);
        }
        if lo < self.lo {
            let more = (self.lo - lo) as usize;
            self.counts.splice(0..0, std::iter::repeat_n([0; 8], more));
            self.sums.splice(0..0, std::iter::repeat_n(0, more * slots));
            self.lo = lo;
        }
    }

    /// Adds every sum of `other`.
    pub(super) fn merge(&mut self, other: &Exact) {
        if other.is_empty() {
            return;
        }
        let slots = other.sums.len() / other.rows();
        self.cover(other.lo, other.lo + other.rows() as i32 - 1, slots);
        let at = (other.lo - self.lo) as usize;
        for (c, o) in self.counts[at..].iter_mut().zip(&other.counts) {
            for (c, o) in c.iter_mut().zip(o) {
                *c += o;
            }
        }
        for (s, o) in self.sums[at * slots..].iter_mut().zip(&other.sums) {
            *s += o;
        }
    }

    /// The sums as the sweep reads them, each rounded once to f64.
    pub(super) fn rows_f64(&self, p: u32) -> Rows {
        let w = p as usize + 1;
        let n = self.rows();
        let mut out = Rows::new(self.lo, self.lo + n as i32 - 1, w);
        let f = |x: i128| x as f64 * 2f64.powi(-46);
        for (r, (sums, counts)) in self.sums.chunks_exact(w + 4).zip(&self.counts).enumerate() {
            for (o, &s) in out.window[r * w..(r + 1) * w].iter_mut().zip(sums) {
                *o = f(s);
            }
            out.normal_err[r] = [f(sums[w]), f(sums[w + 1])];
            out.sq[r] = [f(sums[w + 2]), ones(counts) as f64];
            out.counts[r] = *counts;
        }
        out
    }

    /// The sum of the magnitudes and the sum of their squares: each exponent's exact sums
    /// rounded once to f64, added from the lowest exponent up (within `(rows + 1) * 2^-53`
    /// relative of the exact sums).
    pub(super) fn magnitudes(&self) -> (f64, f64) {
        let (mut abs, mut sq) = (0.0, 0.0);
        if self.is_empty() {
            return (abs, sq);
        }
        let slots = self.sums.len() / self.rows();
        for (r, (sums, counts)) in self.sums.chunks_exact(slots).zip(&self.counts).enumerate() {
            let e = self.lo + r as i32;
            abs += sums[slots - 1] as f64 * pow2(e - 23);
            let squares = sums[slots - 2] + (i128::from(ones(counts)) << 46);
            sq += squares as f64 * pow2(2 * e - 46);
        }
        (abs, sq)
    }
}

/// Values with `f == 1` (flag z), whose `f^2 = 1` the `f^2` sums leave out.
fn ones(counts: &[u64; 8]) -> u64 {
    (1..8).step_by(2).map(|c| counts[c]).sum()
}

/// What a format's sums need of each cell. For the cells `T` of the values with `R > 0` (and
/// with `R == 0` but neither special): per slot (the `p + 1` windows, the normal range, `f^2`)
/// the weights `a^2`, `max(a, 0)` and `max(-a, 0)` of the module docs, `a` a function of `T`
/// modulo `2^period` (the bits of `G` below the grid); the flags of each such cell. For the two
/// special cells: their `T`, flags, and `a` per slot.
struct Weights {
    /// `(p, t_b)`, the format they are for.
    of: (u32, u64),
    /// Window slots, `p + 1`: then the normal range and `f^2`.
    w: usize,
    square: Vec<u32>,
    plus: Vec<u32>,
    minus: Vec<u32>,
    /// Per slot: `a` depends on `T mod 2^period` alone.
    period: Vec<u32>,
    class: Vec<u8>,
    /// `T` of flag `a`'s threshold: cells from `ta` on have flag `a`.
    ta: usize,
    /// `T` of flag `b`'s threshold: cells from `xb` on have flag `b`.
    xb: usize,
    /// The cells [`ONE`] and [`AT_B`]: flags, and whether flag `b` is set.
    special: [(u8, bool); 2],
    /// Every cell's `a` per slot (`gg` for `f^2`), cell by cell, the special cells' after the
    /// others': for [`direct`] and the special cells.
    by_cell: Vec<i32>,
}

impl Weights {
    /// Sums per exponent in [`Exact`].
    fn slots(&self) -> usize {
        self.w + 4
    }

    /// Cell `t`'s `a` per slot (the windows, the normal range, `gg`).
    fn cell_weights(&self, t: usize) -> &[i32] {
        let n = self.w + 2;
        &self.by_cell[t * n..(t + 1) * n]
    }

    /// The weights for `p` mantissa bits and flags `frac >= t_a`, `frac >= t_b` (52-bit
    /// fractions).
    fn new(p: u32, t_a: u64, t_b: u64) -> Weights {
        // On the cells: frac >= t_a iff T >= ta (t_a is a multiple of 2^(52 - p)); frac = T *
        // 2^41 + R * 2^29 >= t_b = xb * 2^41 + rest iff T > xb, or T == xb and R * 2^29 >=
        // rest, which for R > 0 holds (rest <= 1: t_b is a midpoint at p + 1 bits, plus one
        // when the tie rounds down).
        let (ta, xb, rest) = (t_a >> 41, t_b >> 41, t_b & ((1 << 41) - 1));
        debug_assert!(t_a & ((1 << 41) - 1) == 0 && rest <= 1 && xb < ONE as u64);
        let w = p as usize + 1;
        // The bits d below which G rounds, per slot: windows j = 0..=p, then the normal range;
        // a's period is d - 12 bits of T (all 11 when d - 12 >= 11).
        let ds: Vec<u32> = (0..w as u32).map(|j| 24 - j).chain([23 - p]).collect();
        let mut period: Vec<u32> = ds.iter().map(|&d| (d - LOW).min(TOP)).collect();
        period.push(TOP);
        // a for the grid 2^d of gg = G / 2^12 = 2^11 + T: the part of gg below 2^(d - 12),
        // less 2^(d - 12) when it rounds up; then gg itself for f^2 (G^2 = 2^24 gg^2 + 2^13 gg
        // R + R^2).
        let a_of = |t: u64| -> Vec<i64> {
            let gg = (1 << TOP) + t as i64;
            ds.iter()
                .map(|&d| {
                    let low = gg & ((1 << (d - LOW)) - 1);
                    low - (i64::from(low >= 1 << (d - LOW - 1)) << (d - LOW))
                })
                .chain([gg])
                .collect()
        };
        let slots = w + 2;
        let (mut square, mut plus, mut minus) = (
            vec![0; slots * ONE],
            vec![0; slots * ONE],
            vec![0; slots * ONE],
        );
        let mut class = vec![0; ONE];
        for t in 0..ONE {
            class[t] = u8::from(t as u64 >= ta) << 1 | u8::from(t as u64 >= xb) << 2;
            for (k, a) in a_of(t as u64).into_iter().enumerate() {
                square[k * ONE + t] = (a * a) as u32;
                plus[k * ONE + t] = a.max(0) as u32;
                minus[k * ONE + t] = (-a).max(0) as u32;
            }
        }
        let one_b = xb == 0 && rest == 0;
        let at_b_class = u8::from(xb >= ta) << 1 | u8::from(rest == 0) << 2;
        Weights {
            of: (p, t_b),
            w,
            square,
            plus,
            minus,
            period,
            class,
            ta: ta as usize,
            xb: xb as usize,
            by_cell: (0..ONE as u64)
                .chain([0, xb])
                .flat_map(a_of)
                .map(|a| a as i32)
                .collect(),
            special: [(1 | u8::from(one_b) << 2, one_b), (at_b_class, rest == 0)],
        }
    }
}

/// A thread's packed table (zero between passes) and weights, kept: a new table per pass
/// would cost its page faults.
struct Scratch {
    packed: Vec<u64>,
    weights: Option<Weights>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { packed: Vec::new(), weights: None })
    };
}

crate::isa::isa_dispatch! {
    /// Adds `xs` (at most [`PASS`] values) to `exact` for `p` mantissa bits and the flags'
    /// thresholds `t_a`, `t_b`, through the loop built for `isa` (the lock held only while the
    /// pass's sums are added); returns the pass's counts, and with `hist_s = Some(s)` what a
    /// histogram of `2^s` sub-bins per octave needs of it.
    pub(super) fn pass<>(
        xs: &[f32],
        flags: (u32, u64, u64),
        hist_s: Option<u32>,
        exact: &Mutex<Exact>,
    ) -> Partial = |_isa| pass_any(xs, flags, hist_s, exact)
}

#[inline(always)]
fn pass_any(
    xs: &[f32],
    (p, t_a, t_b): (u32, u64, u64),
    hist_s: Option<u32>,
    exact: &Mutex<Exact>,
) -> Partial {
    debug_assert!(xs.len() <= PASS && p <= MAX_P);
    // Out of the thread-local for the loops, which must inline here (a closure would not
    // take this function's target features).
    let mut scratch = SCRATCH.replace(Scratch {
        packed: Vec::new(),
        weights: None,
    });
    let weights = match scratch.weights.take() {
        Some(w) if w.of == (p, t_b) => w,
        _ => Weights::new(p, t_a, t_b),
    };
    let hs = hist_s.unwrap_or(0);
    let mut sums = Exact::default();
    let mut bins = Vec::new();
    // Few values per exponent (which a pass this short may have): value by value, after a
    // survey for the exponents; else through the cells, the survey taken on the way.
    let surveyed = (xs.len() < DIRECT_PER_ROW * EXPONENTS).then(|| survey(xs));
    let tally = match surveyed {
        Some(t) if xs.len() < DIRECT_PER_ROW * t.exponents() => {
            let (lo, hi) = t.exponents_range();
            sums.cover(lo, hi, weights.slots());
            if hist_s.is_some() {
                bins = vec![0; t.exponents() << hs];
            }
            direct(
                xs,
                lo,
                &weights,
                &mut sums,
                hist_s.map(|_| &mut bins[..]),
                hs,
            );
            t
        }
        _ => {
            if scratch.packed.is_empty() {
                // Zero pages until touched: a pass touches the rows of its exponents alone.
                scratch.packed = vec![0; (EXPONENTS + 1) * CELLS * 2];
            }
            let t = fill(xs, weights.xb as u32, &mut scratch.packed);
            if t.hi != 0 {
                let (lo, hi) = t.exponents_range();
                sums.cover(lo, hi, weights.slots());
                if hist_s.is_some() {
                    bins = vec![0; t.exponents() << hs];
                }
                let rows = scratch
                    .packed
                    .chunks_exact_mut(CELLS * 2)
                    .skip((lo - FIRST_E) as usize)
                    .take(t.exponents());
                for (r, packed) in rows.enumerate() {
                    let row_bins = bins.get_mut(r << hs..(r + 1) << hs);
                    reduce(packed, &weights, &mut sums, r, row_bins, hs);
                }
            }
            scratch.packed[SPARE as usize * CELLS * 2..].fill(0);
            t
        }
    };
    scratch.weights = Some(weights);
    SCRATCH.set(scratch);
    exact
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merge(&sums);
    let wide = |a: u32| f64::from(f32::from_bits(a));
    let has_values = tally.hi != 0;
    Partial {
        count: xs.len() as u64,
        zeros: tally.zeros,
        nonfinite: tally.nonfinite,
        amax_bits: wide(tally.hi).to_bits(),
        rows: Rows {
            lo: if has_values {
                tally.exponents_range().0
            } else {
                0
            },
            ..Rows::default()
        },
        histogram: hist_s.map(|_| {
            let mut stats = ChunkStats {
                amax: wide(tally.hi),
                min_nonzero: if has_values {
                    wide(tally.lo)
                } else {
                    f64::INFINITY
                },
                zeros: tally.zeros,
                negatives: tally.negatives,
                ..ChunkStats::default()
            };
            if tally.nonfinite > 0 {
                for &x in xs {
                    let (bits, a) = (x.to_bits(), x.to_bits() & 0x7fff_ffff);
                    stats.nan += u64::from(a > INF);
                    stats.pos_inf += u64::from(bits == INF);
                    stats.neg_inf += u64::from(a == INF && bits != INF);
                }
            }
            HistogramPart {
                bins,
                chunks: vec![stats],
                exact: Some(sums),
            }
        }),
    }
}

/// f32 `+inf`.
const INF: u32 = 0x7f80_0000;
/// Values a vector pass takes at once (lanes of [`Tally`]).
const BLOCK: usize = 16;

/// What a pass learns of its values besides their cells, in `L` lanes (value `i` of a block in
/// lane `i`): the range of the finite nonzero magnitudes as f32 patterns without the sign (the
/// order of the patterns is that of the magnitudes), zeros, NaN and infinities, finite nonzero
/// negatives. Lanes of u32: a pass has at most [`PASS`] values.
#[derive(Clone, Copy)]
struct Tally<const L: usize> {
    lo: [u32; L],
    hi: [u32; L],
    zeros: [u32; L],
    nonfinite: [u32; L],
    negatives: [u32; L],
}

/// A [`Tally`]'s lanes added up.
#[derive(Clone, Copy, Debug)]
struct Survey {
    /// The smallest and largest finite nonzero magnitudes' patterns; `hi == 0` when none.
    lo: u32,
    hi: u32,
    zeros: u64,
    nonfinite: u64,
    negatives: u64,
}

impl<const L: usize> Tally<L> {
    const EMPTY: Self = Tally {
        lo: [u32::MAX; L],
        hi: [0; L],
        zeros: [0; L],
        nonfinite: [0; L],
        negatives: [0; L],
    };

    #[inline(always)]
    fn add(&mut self, l: usize, bits: u32) {
        let a = bits & 0x7fff_ffff;
        // Zero and the nonfinite patterns wrap to the top.
        let inside = a.wrapping_sub(1) < INF - 1;
        self.lo[l] = self.lo[l].min(if inside { a } else { u32::MAX });
        self.hi[l] = self.hi[l].max(if inside { a } else { 0 });
        self.zeros[l] += u32::from(a == 0);
        self.nonfinite[l] += u32::from(a >= INF);
        self.negatives[l] += u32::from(inside && a != bits);
    }

    fn total(&self) -> Survey {
        let sum = |c: &[u32; L]| c.iter().map(|&k| u64::from(k)).sum();
        Survey {
            lo: self.lo.iter().copied().min().unwrap_or(u32::MAX),
            hi: self.hi.iter().copied().max().unwrap_or(0),
            zeros: sum(&self.zeros),
            nonfinite: sum(&self.nonfinite),
            negatives: sum(&self.negatives),
        }
    }
}

impl Survey {
    /// The exponents of the smallest and largest finite nonzero magnitudes (`hi != 0`).
    fn exponents_range(&self) -> (i32, i32) {
        let e = |a: u32| split(f64::from(f32::from_bits(a)).to_bits()).0;
        (e(self.lo), e(self.hi))
    }

    /// Exponents from the lowest to the highest (0 without finite nonzero values).
    fn exponents(&self) -> usize {
        if self.hi == 0 {
            return 0;
        }
        let (lo, hi) = self.exponents_range();
        (hi - lo + 1) as usize
    }
}

/// The [`Survey`] of `xs` alone.
#[inline(always)]
fn survey(xs: &[f32]) -> Survey {
    let mut tally = Tally::<BLOCK>::EMPTY;
    let mut blocks = xs.chunks_exact(BLOCK);
    for block in &mut blocks {
        for (l, &x) in block.iter().enumerate() {
            tally.add(l, x.to_bits());
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        tally.add(l, x.to_bits());
    }
    tally.total()
}

/// Forms row `r`'s sums from its cells (`packed`, cleared), and its histogram counts by the
/// top `hs` bits of `T`. A slot whose `a` has a period of `m` bits takes its dot products over
/// the `2^m` sums of the cells with equal `T mod 2^m`.
#[inline(always)]
fn reduce(
    packed: &mut [u64],
    w: &Weights,
    sums: &mut Exact,
    r: usize,
    bins: Option<&mut [u64]>,
    hs: u32,
) {
    // Counts and sum R by T, then folded: level m at [2^m, 2^(m+1)) holds the sums over T
    // modulo 2^m (level 11, the cells themselves).
    let (mut n, mut s1) = ([0u32; 2 * ONE], [0u32; 2 * ONE]);
    let mut s2 = [0u64; 2];
    let mut special = [0u64; 2];
    let mut occupied = 0;
    for (t, c) in packed.chunks_exact_mut(2).enumerate() {
        if t < ONE {
            occupied += usize::from(c[0] != 0);
            n[ONE + t] = (c[0] >> 32) as u32;
            s1[ONE + t] = c[0] as u32;
            s2[usize::from(t >= w.xb)] += c[1];
        } else if t - ONE < 2 {
            special[t - ONE] = c[0] >> 32;
        }
        c[0] = 0;
        c[1] = 0;
    }
    let cells = &n[ONE..];
    if cells.iter().all(|&k| k == 0) && special == [0, 0] {
        return;
    }
    // A cell's flags are thresholds on T, so they are the same between two thresholds: whole
    // ranges of cells are summed (not each cell added to its flags' count, one after the other).
    let counts = &mut sums.counts[r];
    let edges = [0, w.ta.min(w.xb), w.ta.max(w.xb), ONE];
    for range in edges.windows(2).filter(|e| e[0] < e[1]) {
        counts[usize::from(w.class[range[0]])] += count(&cells[range[0]..range[1]]);
    }
    for (&k, (c, _)) in special.iter().zip(&w.special) {
        counts[usize::from(*c)] += k;
    }
    if let Some(bins) = bins {
        for (bin, cells) in bins.iter_mut().zip(cells.chunks(1 << (TOP - hs))) {
            *bin += count(cells);
        }
        bins[0] += special[0];
        bins[w.xb >> (TOP - hs)] += special[1];
    }
    // A row with few occupied cells sums them one by one; a fuller one folds first.
    let sparse: Option<Vec<usize>> =
        (occupied <= SPARSE).then(|| (0..ONE).filter(|&t| cells[t] != 0).collect());
    if sparse.is_none() {
        for m in (0..TOP as usize).rev() {
            for u in 0..1 << m {
                n[(1 << m) + u] = n[(2 << m) + u] + n[(2 << m) + (1 << m) + u];
                s1[(1 << m) + u] = s1[(2 << m) + u] + s1[(2 << m) + (1 << m) + u];
            }
        }
    }
    let slots = w.slots();
    let out = &mut sums.sums[r * slots..(r + 1) * slots];
    // sum G = 2^12 sum gg + sum R, over the cells and the special cells (R == 0).
    let gg: u64 = n[ONE..]
        .iter()
        .enumerate()
        .map(|(t, &k)| (ONE + t) as u64 * u64::from(k))
        .sum();
    let r_sum: u64 = s1[ONE..].iter().map(|&x| u64::from(x)).sum();
    out[slots - 1] += i128::from(gg << LOW)
        + i128::from(r_sum)
        + i128::from(special[0] << 23)
        + i128::from(special[1] * ((ONE + w.xb) << LOW) as u64);
    let whole = i128::from(s2[0] + s2[1]);
    for k in 0..w.period.len() {
        let total = slot_sum(w, &n, &s1, sparse.as_deref(), k, 0);
        if k < w.w {
            out[k] += total + whole;
        } else if k == w.w {
            // The normal range by flag b: the cells from xb on.
            let b = slot_sum(w, &n, &s1, sparse.as_deref(), k, w.xb);
            out[k] += total - b + i128::from(s2[0]);
            out[k + 1] += b + i128::from(s2[1]);
        } else {
            out[k + 1] += total + whole;
        }
    }
    // The special cells (R == 0: only their a^2).
    for (i, (&k, (_, b))) in special.iter().zip(&w.special).enumerate() {
        let a = w.cell_weights(ONE + i);
        let add = |a: i32| (i128::from(k) * i128::from(i64::from(a).pow(2))) << 24;
        for (o, &a) in out[..w.w].iter_mut().zip(a) {
            *o += add(a);
        }
        out[w.w + usize::from(*b)] += add(a[w.w]);
        // f^2 (f == 1, cell ONE, is not in the sum).
        if ONE + i == AT_B {
            out[w.w + 2] += add(a[w.w + 1]);
        }
    }
}

/// The values in `cells`.
#[inline(always)]
fn count(cells: &[u32]) -> u64 {
    cells.iter().map(|&k| u64::from(k)).sum()
}

/// `sum a x` over a row's cells (u32 weights and sums: the products and the sum fit u64).
#[inline(always)]
fn dot(a: &[u32], x: &[u32]) -> u64 {
    a.iter()
        .zip(x)
        .map(|(&a, &x)| u64::from(a) * u64::from(x))
        .sum()
}

/// A row's `sum e^2` for slot `k` over the cells `T >= from`, but `sum R^2` (of the module docs),
/// from the counts `n` and sums of `R` `s1` by cell and folded (see [`reduce`]): over the
/// occupied cells `sparse` one by one, or by dot products. Functions, not closures, so that they
/// inline into the build of their caller (a closure left out of line is a baseline build).
#[inline(always)]
fn slot_sum(
    w: &Weights,
    n: &[u32],
    s1: &[u32],
    sparse: Option<&[usize]>,
    k: usize,
    from: usize,
) -> i128 {
    let (square, linear) = match sparse {
        Some(ts) => ts
            .iter()
            .filter(|&&t| t >= from)
            .fold((0, 0), |(sq, li), &t| {
                let (i, x) = (k * ONE + t, ONE + t);
                let square = u64::from(w.square[i]) * u64::from(n[x]);
                let linear = (i128::from(w.plus[i]) - i128::from(w.minus[i])) * i128::from(s1[x]);
                (sq + square, li + linear)
            }),
        None => {
            // From 0, over the sums folded to the slot's period; else over the cells.
            let (at, range) = match from {
                0 => (1 << w.period[k], 0..1 << w.period[k]),
                _ => (ONE, from..ONE),
            };
            let weights = k * ONE + range.start..k * ONE + range.end;
            let (nn, ss) = (
                &n[at + range.start..at + range.end],
                &s1[at + range.start..at + range.end],
            );
            let square = dot(&w.square[weights.clone()], nn);
            let linear = i128::from(dot(&w.plus[weights.clone()], ss))
                - i128::from(dot(&w.minus[weights], ss));
            (square, linear)
        }
    };
    (i128::from(square) << 24) + (linear << 13)
}

/// [`fill`] and [`reduce`] value by value, for a pass with few values per exponent: each
/// value's cell, then its `e^2` per slot (`e = 2^12 a + R`, `a` the cell's weight) and its
/// `G^2` added to its exponent's sums, its counts and histogram bin.
#[inline(always)]
fn direct(
    xs: &[f32],
    lo: i32,
    w: &Weights,
    sums: &mut Exact,
    mut bins: Option<&mut [u64]>,
    hs: u32,
) {
    let slots = w.slots();
    for &x in xs {
        let a = x.to_bits() & 0x7fff_ffff;
        // Zero and the nonfinite patterns wrap to the top.
        if a.wrapping_sub(1) >= 0x7f7f_ffff {
            continue;
        }
        let (e, frac) = split(f64::from(f32::from_bits(a)).to_bits());
        // A normalised f32 subnormal has no fraction bits below bit 29 either.
        let frac = (frac >> 29) as u32;
        let r = (e - lo) as usize;
        let low = i64::from(frac & ((1 << LOW) - 1));
        let t = cell(frac, w.xb as u32) as usize;
        // The cell's flags, whether it has flag b, its T, and its weight a per slot.
        let (class, b, tt) = match t {
            ONE | AT_B => {
                let (class, b) = &w.special[t - ONE];
                (*class, *b, if t == ONE { 0 } else { w.xb })
            }
            _ => (w.class[t], t >= w.xb, t),
        };
        let a = w.cell_weights(t);
        sums.counts[r][usize::from(class)] += 1;
        if let Some(bins) = bins.as_deref_mut() {
            bins[r << hs | tt >> (TOP - hs)] += 1;
        }
        let out = &mut sums.sums[r * slots..(r + 1) * slots];
        let square = |a: i32| {
            let e = (i64::from(a) << LOW) + low;
            i128::from(e * e)
        };
        for (o, &a) in out[..w.w].iter_mut().zip(a) {
            *o += square(a);
        }
        out[w.w + usize::from(b)] += square(a[w.w]);
        if t != ONE {
            out[w.w + 2] += square(a[w.w + 1]);
        }
        out[slots - 1] += i128::from(frac | 1 << 23);
    }
}

/// Adds each value's `(1, R, R^2)` to its cell of the packed table (row `E - FIRST_E` for
/// exponent `E`, zeros and nonfinite values into the spare row; `xb`, the `T` of flag `b`'s
/// threshold), and returns what else the pass needs of the values. Values go by blocks of 16:
/// one vectorised pass finds each value's cell and addends and tallies it, then the adds; a
/// block holding an f32 subnormal goes value by value.
#[inline(always)]
fn fill(xs: &[f32], xb: u32, packed: &mut [u64]) -> Survey {
    let mut tally = Tally::<BLOCK>::EMPTY;
    // Each block's increments wait for the next block while their cells are fetched: two sets
    // of cells and addends, the block `k`'s in set `k % 2`.
    let (mut at, mut w0, mut w1) = ([[0u32; BLOCK]; 2], [[0u64; BLOCK]; 2], [[0u64; BLOCK]; 2]);
    let mut k = 0;
    let mut blocks = xs.chunks_exact(BLOCK);
    for block in &mut blocks {
        let (at, w0, w1) = (&mut at, &mut w0, &mut w1);
        let now = k & 1;
        let mut subnormal = false;
        for l in 0..BLOCK {
            let bits = block[l].to_bits();
            tally.add(l, bits);
            let a = bits & 0x7fff_ffff;
            let normal = a.wrapping_sub(0x0080_0000) < 0x7f00_0000;
            subnormal |= a.wrapping_sub(1) < 0x007f_ffff;
            let row = if normal {
                (a >> 23) + NORMAL_ROW
            } else {
                SPARE
            };
            let frac = a & 0x007f_ffff;
            at[now][l] = (row * CELLS as u32 + cell(frac, xb)) * 2;
            let r = u64::from(frac & ((1 << LOW) - 1));
            w0[now][l] = 1 << 32 | r;
            w1[now][l] = r * r;
        }
        if subnormal {
            for &x in block {
                add_one(x, xb, packed);
            }
            continue;
        }
        for &i in &at[now] {
            prefetch(packed, i as usize);
        }
        if k > 0 {
            add_block(&at[now ^ 1], &w0[now ^ 1], &w1[now ^ 1], packed);
        }
        k += 1;
    }
    if k > 0 {
        let last = (k - 1) & 1;
        add_block(&at[last], &w0[last], &w1[last], packed);
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        tally.add(l, x.to_bits());
        add_one(x, xb, packed);
    }
    tally.total()
}

/// Adds a block's addends `w0`, `w1` to their cells (at `at` in `packed`).
#[inline(always)]
fn add_block(at: &[u32; BLOCK], w0: &[u64; BLOCK], w1: &[u64; BLOCK], packed: &mut [u64]) {
    for l in 0..BLOCK {
        let i = at[l] as usize;
        if let Some(c) = packed.get_mut(i..i + 2) {
            c[0] += w0[l];
            c[1] += w1[l];
        }
    }
}

/// Asks for the cache line of `packed[i]` ahead of its increment (a hint: nothing changes but
/// the time).
#[inline(always)]
fn prefetch(packed: &[u64], i: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is in x86_64's baseline; a prefetch reads nothing and never faults,
        // whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(packed.as_ptr().wrapping_add(i).cast()) };
    }
}

/// The cell of a 23-bit fraction.
#[inline(always)]
fn cell(frac: u32, xb: u32) -> u32 {
    let (t, r) = (frac >> LOW, frac & ((1 << LOW) - 1));
    if frac == 0 {
        ONE as u32
    } else if r == 0 && t == xb {
        AT_B as u32
    } else {
        t
    }
}

/// [`fill`]'s value by value path: any f32 (subnormal too).
#[inline(always)]
fn add_one(x: f32, xb: u32, packed: &mut [u64]) {
    let a = x.to_bits() & 0x7fff_ffff;
    let (row, frac) = if a.wrapping_sub(1) >= 0x7f7f_ffff {
        // Zero and the nonfinite patterns wrap to the top.
        (SPARE, 0)
    } else {
        let (e, frac) = split(f64::from(f32::from_bits(a)).to_bits());
        // A normalised f32 subnormal has no fraction bits below bit 29 either.
        ((e - FIRST_E) as u32, (frac >> 29) as u32)
    };
    let i = (row * CELLS as u32 + cell(frac, xb)) as usize * 2;
    let r = u64::from(frac & ((1 << LOW) - 1));
    if let Some(c) = packed.get_mut(i..i + 2) {
        c[0] += 1 << 32 | r;
        c[1] += r * r;
    }
}
