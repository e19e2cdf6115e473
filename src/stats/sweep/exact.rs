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
//! `e = A + R` with `A` fixed by `T` and `d`, and `sum e^2 = 2^24 * sum a^2 + 2^13 * a * sum R +
//! sum R^2` (with `A = 2^12 a`). The flags of the counts are thresholds on `T` too, except two
//! that also ask whether `R` is zero (`f == 1`, and `T` at the threshold of flag `b` when that
//! tie rounds down): those values have cells of their own.
//!
//! So per value a pass adds `(1, R, R^2)` to its cell in a packed table (two u64 a cell:
//! `count << 32 | sum R` and `sum R^2`, which cannot overflow in a pass of [`PASS`] values),
//! then forms each exponent's sums from the cells as dot products with weights that depend
//! on the format alone (u64 products and sums, exact), into i128 totals: integers that add
//! exactly in any order. [`Exact::rows`] rounds each total once to f64: the same bits whatever
//! the order, thread count and build, within `2^-53` relative of the exact sums.

use std::cell::RefCell;
use std::sync::{Mutex, PoisonError};

use super::{HistogramPart, Partial, Rows, split};
use crate::stats::CHUNK;
use crate::stats::histogram::{Isa, scalars};

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
/// Values per pass (a whole number of the histogram's chunks): a count fits 32 bits, `sum R <
/// 2^20 * 2^12` fits 32 bits and `sum R^2 < 2^20 * 2^24` fits 64.
pub(super) const PASS: usize = 1 << 20;

const _: () = assert!((PASS as u64) << LOW <= 1 << 32);
const _: () = assert!(PASS.is_multiple_of(CHUNK));

/// The exact sums per exponent `lo..`: counts per flags (`z | a << 1 | b << 2`) and, in units
/// of `2^-46`, the `p + 1` window sums, the normal-range sums by `b`, and `sum f^2` over `f != 1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Exact {
    lo: i32,
    counts: Vec<[u64; 8]>,
    /// `p + 4` per exponent.
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
        for (r, (sums, counts)) in self.sums.chunks_exact(w + 3).zip(&self.counts).enumerate() {
            for (o, &s) in out.window[r * w..(r + 1) * w].iter_mut().zip(sums) {
                *o = f(s);
            }
            out.normal_err[r] = [f(sums[w]), f(sums[w + 1])];
            // Values with f == 1 (flag z) have f^2 = 1.
            let ones: u64 = (1..8).step_by(2).map(|c| counts[c]).sum();
            out.sq[r] = [f(sums[w + 2]), ones as f64];
            out.counts[r] = *counts;
        }
        out
    }
}

/// What a format's sums need of each cell: per slot (the `p + 1` windows, the normal range
/// with flag `b` clear and set, `f^2`), the weights `a^2`, `max(a, 0)` and `max(-a, 0)` of the
/// module docs, and per cell its flags and whether it has flag `b`.
struct Weights {
    /// `(p, t_b)`, the format they are for.
    of: (u32, u64),
    slots: usize,
    square: Vec<u32>,
    plus: Vec<u32>,
    minus: Vec<u32>,
    class: Vec<u8>,
    b: Vec<bool>,
    /// `T` of flag `b`'s threshold.
    xb: u32,
}

impl Weights {
    /// The weights for `p` mantissa bits and flags `frac >= t_a`, `frac >= t_b` (52-bit
    /// fractions).
    fn new(p: u32, t_a: u64, t_b: u64) -> Weights {
        // On the cells: frac >= t_a iff T >= ta (t_a is a multiple of 2^(52 - p)); frac = T *
        // 2^41 + R * 2^29 >= t_b = xb * 2^41 + rest iff T > xb, or T == xb and R * 2^29 >=
        // rest, which for R > 0 holds (rest <= 1: t_b is a midpoint at p + 1 bits, plus one
        // when the tie rounds down).
        let (ta, xb, rest) = (t_a >> 41, t_b >> 41, t_b & ((1 << 41) - 1));
        debug_assert!(t_a & ((1 << 41) - 1) == 0 && rest <= 1);
        // Each cell's T (gg = G / 2^12 = 2^11 + T) and flags (z, a, b).
        let cell = |t: usize| -> Option<(u64, bool, bool, bool)> {
            match t {
                ONE => Some((0, true, false, xb == 0 && rest == 0)),
                AT_B => Some((xb, false, xb >= ta, rest == 0)),
                t if t < ONE => Some((t as u64, false, t as u64 >= ta, t as u64 >= xb)),
                _ => None,
            }
        };
        let w = p as usize + 1;
        let slots = w + 3;
        let (mut square, mut plus, mut minus) = (vec![0; slots * CELLS], vec![0; slots * CELLS], vec![0; slots * CELLS]);
        let mut class = vec![0; CELLS];
        let mut b = vec![false; CELLS];
        for t in 0..CELLS {
            let Some((tt, z, a, bt)) = cell(t) else {
                continue;
            };
            class[t] = u8::from(z) | u8::from(a) << 1 | u8::from(bt) << 2;
            b[t] = bt;
            let gg = (1 << TOP) + tt as i64;
            // a for the grid 2^d: the part of gg below 2^(d - 12), less 2^(d - 12) when it
            // rounds up.
            let a_of = |d: u32| {
                let low = gg & ((1 << (d - LOW)) - 1);
                low - (i64::from(low >= 1 << (d - LOW - 1)) << (d - LOW))
            };
            let mut set = |k: usize, a: i64| {
                square[k * CELLS + t] = (a * a) as u32;
                plus[k * CELLS + t] = a.max(0) as u32;
                minus[k * CELLS + t] = (-a).max(0) as u32;
            };
            for j in 0..w as u32 {
                set(j as usize, a_of(24 - j));
            }
            set(w + usize::from(bt), a_of(23 - p));
            if !z {
                // f^2: G^2 = 2^24 gg^2 + 2^13 gg R + R^2.
                set(w + 2, gg);
            }
        }
        Weights {
            of: (p, t_b),
            slots,
            square,
            plus,
            minus,
            class,
            b,
            xb: xb as u32,
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
    ) -> Partial = |isa| pass_any(xs, isa, flags, hist_s, exact)
}

#[inline(always)]
fn pass_any(
    xs: &[f32],
    isa: Isa,
    (p, t_a, t_b): (u32, u64, u64),
    hist_s: Option<u32>,
    exact: &Mutex<Exact>,
) -> Partial {
    debug_assert!(xs.len() <= PASS && p <= MAX_P);
    let histogram = hist_s.map(|_| HistogramPart {
        bins: Vec::new(),
        chunks: xs.chunks(CHUNK).map(|c| scalars(c, isa)).collect(),
    });
    let (count, zeros, nonfinite, lo_bits, hi_bits) = match &histogram {
        Some(h) => super::kernel::survey_of(xs.len(), &h.chunks),
        None => <f32 as super::kernel::Sample>::survey(xs),
    };
    let mut part = Partial {
        count,
        zeros,
        nonfinite,
        amax_bits: hi_bits,
        rows: Rows::default(),
        histogram,
    };
    if hi_bits == 0 {
        return part;
    }
    let (lo, hi) = (split(lo_bits).0, split(hi_bits).0);
    let rows = (hi - lo + 1) as usize;
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
    // A spare row after the last, for zeros and nonfinite values.
    let need = (rows + 1) * CELLS * 2;
    if scratch.packed.len() < need {
        scratch.packed.resize(need, 0);
    }
    fill(xs, lo, rows as u32, weights.xb, &mut scratch.packed);
    let mut sums = Exact::default();
    sums.cover(lo, hi, weights.slots);
    let hs = hist_s.unwrap_or(0);
    let mut bins = vec![0; if hist_s.is_some() { rows << hs } else { 0 }];
    for (r, packed) in scratch.packed.chunks_exact_mut(CELLS * 2).take(rows).enumerate() {
        let row_bins = bins.get_mut(r << hs..(r + 1) << hs);
        reduce(packed, &weights, &mut sums, r, row_bins, hs);
    }
    scratch.packed[rows * CELLS * 2..need].fill(0);
    scratch.weights = Some(weights);
    SCRATCH.set(scratch);
    exact
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .merge(&sums);
    part.rows.lo = lo;
    if let Some(h) = &mut part.histogram {
        h.bins = bins;
    }
    part
}

/// Forms row `r`'s sums from its cells (`packed`, cleared), and its histogram counts by the
/// top `hs` bits of `T`.
#[inline(always)]
fn reduce(
    packed: &mut [u64],
    w: &Weights,
    sums: &mut Exact,
    r: usize,
    bins: Option<&mut [u64]>,
    hs: u32,
) {
    let (mut n, mut s1) = ([0u32; CELLS], [0u32; CELLS]);
    let mut s2 = [0u64; 2];
    let mut total = 0u64;
    for (t, c) in packed.chunks_exact_mut(2).enumerate() {
        n[t] = (c[0] >> 32) as u32;
        s1[t] = c[0] as u32;
        s2[usize::from(w.b[t])] += c[1];
        total += u64::from(n[t]);
        c[0] = 0;
        c[1] = 0;
    }
    if total == 0 {
        return;
    }
    for (t, &k) in n.iter().enumerate() {
        sums.counts[r][usize::from(w.class[t])] += u64::from(k);
    }
    if let Some(bins) = bins {
        let t_of = |t: usize| match t {
            ONE => 0,
            AT_B => w.xb as usize,
            t => t,
        };
        for (t, &k) in n.iter().enumerate().take(AT_B + 1) {
            bins[t_of(t) >> (TOP - hs)] += u64::from(k);
        }
    }
    let slots = w.slots;
    for k in 0..slots {
        let at = k * CELLS..(k + 1) * CELLS;
        let dot = |a: &[u32], x: &[u32; CELLS]| -> u64 {
            a.iter().zip(x).map(|(&a, &x)| u64::from(a) * u64::from(x)).sum()
        };
        let square = dot(&w.square[at.clone()], &n);
        let linear = i128::from(dot(&w.plus[at.clone()], &s1)) - i128::from(dot(&w.minus[at], &s1));
        let s2 = match k {
            k if k == slots - 3 => s2[0],
            k if k == slots - 2 => s2[1],
            _ => s2[0] + s2[1],
        };
        sums.sums[r * slots + k] += (i128::from(square) << 24) + (linear << 13) + i128::from(s2);
    }
}

/// Adds each value's `(1, R, R^2)` to its cell of the packed table (exponents from `lo`,
/// zeros and nonfinite values into the spare row `spare`; `xb`, the `T` of flag `b`'s
/// threshold). Values go by blocks of 16: one vectorised pass finds each value's cell and
/// addends, then the adds; a block holding an f32 subnormal goes value by value.
#[inline(always)]
fn fill(xs: &[f32], lo: i32, spare: u32, xb: u32, packed: &mut [u64]) {
    const BLOCK: usize = 16;
    let base = lo + 127;
    let mut blocks = xs.chunks_exact(BLOCK);
    for block in &mut blocks {
        let (mut at, mut w0, mut w1) = ([0u32; BLOCK], [0u64; BLOCK], [0u64; BLOCK]);
        let mut subnormal = false;
        for l in 0..BLOCK {
            let a = block[l].to_bits() & 0x7fff_ffff;
            let normal = a.wrapping_sub(0x0080_0000) < 0x7f00_0000;
            subnormal |= a.wrapping_sub(1) < 0x007f_ffff;
            let row = ((a >> 23) as i32).wrapping_sub(base) as u32;
            let row = if normal { row } else { spare };
            let frac = a & 0x007f_ffff;
            at[l] = (row * CELLS as u32 + cell(frac, xb)) * 2;
            let r = u64::from(frac & ((1 << LOW) - 1));
            w0[l] = 1 << 32 | r;
            w1[l] = r * r;
        }
        if subnormal {
            for &x in block {
                add_one(x, lo, spare, xb, packed);
            }
            continue;
        }
        for l in 0..BLOCK {
            let i = at[l] as usize;
            if let Some(c) = packed.get_mut(i..i + 2) {
                c[0] += w0[l];
                c[1] += w1[l];
            }
        }
    }
    for &x in blocks.remainder() {
        add_one(x, lo, spare, xb, packed);
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
fn add_one(x: f32, lo: i32, spare: u32, xb: u32, packed: &mut [u64]) {
    let a = x.to_bits() & 0x7fff_ffff;
    let (row, frac) = if a.wrapping_sub(1) >= 0x7f7f_ffff {
        // Zero and the nonfinite patterns wrap to the top.
        (spare, 0)
    } else {
        let (e, frac) = split(f64::from(f32::from_bits(a)).to_bits());
        // A normalised f32 subnormal has no fraction bits below bit 29 either.
        ((e - lo) as u32, (frac >> 29) as u32)
    };
    let i = (row * CELLS as u32 + cell(frac, xb)) as usize * 2;
    let r = u64::from(frac & ((1 << LOW) - 1));
    if let Some(c) = packed.get_mut(i..i + 2) {
        c[0] += 1 << 32 | r;
        c[1] += r * r;
    }
}
