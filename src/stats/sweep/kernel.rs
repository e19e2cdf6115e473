//! The per-chunk loop of the sweep accumulator.
//!
//! One survey pass (counts, exponent range; taken from the histogram's scalar loop when the pass
//! counts a histogram, which reads the same values anyway) and one accumulation pass per chunk,
//! both in cache.
//! Consecutive values usually share an exponent and would update the same accumulators one after
//! the other, each waiting for the previous store; so the accumulation spreads them over `LANES`
//! interleaved copies (value `i` into copy `i % LANES`), folded in lane order at the end of the
//! chunk: deterministic, and several times faster. The loop is compiled for the baseline target,
//! AVX2 and AVX-512 (picked at run time by the histogram's `Isa::best()`) and specialised for the
//! window widths of the common formats; for f32 inputs into formats of up to
//! [`F32_TERMS_MAX_P`] mantissa bits the terms are computed in f32 ([`fill32`]), the same values
//! with half the vector width each. Every variant adds the same terms in the same order and gives
//! bit-identical results (tested).
//!
//! Per value, one fixed-length loop over `S` slots (a multiple of 4, so it runs as whole AVX2
//! vectors) computes `((f - RNE(f, grid_j)) * mask_j)^2`-style terms for all sums at once:
//!
//! ```text
//! slot j = 0..=p   window error, grid 2^(1-j)            mask 1
//! slot p+1         normal-range error, grid 2^-p         mask 1 - b
//! slot p+2         the same                              mask b
//! slot p+3         f^2 (a grid of 2^60 rounds f to 0)    mask 1 - z
//! ```
//! and `sum f^2` over the values with `f == 1` is their count. Masks are 0 or 1, exact.

use super::{HistogramPart, ONE_BITS, Partial, Rows, SweepAccumulator, split};
use crate::stats::histogram::{Bits, ChunkStats, Isa, scalars};
use crate::stats::{CHUNK, Histogram};

/// Interleaved copies of the accumulators (a power of two that divides the f32 loop's blocks): a
/// lane of a chunk adds at most `SWEEP_CHUNK / LANES` = 8192 terms, so its sums are within
/// `8192 * 2^-53` (9.1e-13) relative of the exact sums.
const LANES: usize = 8;
/// The most sub-bins per octave (as a power of two) that the chunk loop counts for a histogram.
pub(super) const HIST_MAX_S: u32 = 2;
/// Counters per row and lane: the flags `z | a << 1 | b << 2` shifted left by [`HIST_MAX_S`],
/// or'ed with the sub-bin (so that the common flags-zero counters share one cache line).
const KEYS: usize = 8 << HIST_MAX_S;

// Value `i` of a chunk is counted in lane `i % LANES`, so no u16 counter can wrap.
const _: () = assert!(super::SWEEP_CHUNK / LANES <= u16::MAX as usize);
const INF: u64 = 0x7ff0_0000_0000_0000;

/// What the sweep reads: f32 or f64 values.
pub(super) trait Sample: Bits {
    /// The f64 bit pattern of `|x|` (exact: every f32 is an f64).
    fn abs_bits64(self) -> u64;

    /// Count, zeros, nonfinite values, and the smallest and largest f64 bit patterns of the
    /// finite nonzero magnitudes (`u64::MAX` and 0 when there are none).
    fn survey(xs: &[Self]) -> (u64, u64, u64, u64, u64);

    /// The values as f32, if they are (the f32 terms need every `f` to fit an f32).
    fn as_f32(xs: &[Self]) -> Option<&[f32]>;

    /// `hist.par_add_f32(xs)` or `hist.par_add_f64(xs)`.
    fn par_add_to(hist: &mut Histogram, xs: &[Self]);
}

impl Sample for f32 {
    #[inline(always)]
    fn abs_bits64(self) -> u64 {
        f64::from(self).to_bits() & !(1 << 63)
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

    #[inline(always)]
    fn as_f32(xs: &[f32]) -> Option<&[f32]> {
        Some(xs)
    }

    fn par_add_to(hist: &mut Histogram, xs: &[f32]) {
        hist.par_add_f32(xs);
    }
}

impl Sample for f64 {
    #[inline(always)]
    fn abs_bits64(self) -> u64 {
        self.to_bits() & !(1 << 63)
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

    #[inline(always)]
    fn as_f32(_: &[f64]) -> Option<&[f32]> {
        None
    }

    fn par_add_to(hist: &mut Histogram, xs: &[f64]) {
        hist.par_add_f64(xs);
    }
}

/// How the chunk loop computes the per-value terms (the tests and benches compare them; every
/// choice gives the same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Terms {
    /// The fastest: f32 arithmetic for f32 inputs into formats of up to [`F32_TERMS_MAX_P`]
    /// mantissa bits, else [`Terms::F64`].
    Auto,
    /// Every term in f64, the loop specialised for the common slot counts.
    F64,
    /// Every term in f64, the slot count a run-time value.
    Generic,
}

/// The widest format whose grids the f32 terms can round to: adding `1.5 * 2^(23 + g)` to `f`
/// in `[1, 2)` rounds it to a multiple of `2^g` only while the sum stays in the binade of the
/// constant, below `2^(24 + g)`, so for `g >= -21`; the finest grid is the normal range's `2^-p`.
const F32_TERMS_MAX_P: usize = 21;

/// The sums of one chunk, through the loop built for `isa`.
pub(super) fn chunk<T: Sample>(
    acc: &SweepAccumulator,
    xs: &[T],
    isa: Isa,
    terms: Terms,
) -> Partial {
    chunk_with(isa, acc, xs, terms, None)
}

crate::isa::isa_dispatch! {
    /// [`chunk`], and with `hist_s = Some(s)` (at most [`HIST_MAX_S`]) what a histogram with
    /// `2^s` sub-bins per octave needs of the chunk ([`HistogramPart`]): the loop that decodes
    /// each value's exponent and flags also counts its sub-bin, in the same counter increment.
    pub(super) fn chunk_with<T: Sample>(
        acc: &SweepAccumulator,
        xs: &[T],
        terms: Terms,
        hist_s: Option<u32>,
    ) -> Partial = |isa| chunk_any(acc, xs, isa, terms, hist_s)
}

/// Slots per value for mantissa width `p`: `p + 4` rounded up to a multiple of 4.
fn slots(p: usize) -> usize {
    (p + 4).div_ceil(4) * 4
}

/// The chunk loop for whatever target it is compiled for (`isa`, for the histogram's scalars).
#[inline(always)]
fn chunk_any<T: Sample>(
    acc: &SweepAccumulator,
    xs: &[T],
    isa: Isa,
    terms: Terms,
    hist_s: Option<u32>,
) -> Partial {
    // The histogram's own scalar loop, per histogram chunk in order (so its sums are the ones
    // `Histogram::par_add_*` forms); the bins come from the counters below.
    let histogram = hist_s.map(|_| HistogramPart {
        bins: Vec::new(),
        chunks: xs.chunks(CHUNK).map(|c| scalars(c, isa)).collect(),
        exact: None,
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
    let p = width - 1;
    let s = slots(p);
    // A spare row after the last, for the values the f32 loop skips.
    let mut lanes = Lanes::new(n + 1, s, hs);
    let consts = Consts::new(acc, s);
    let f32_terms = (terms == Terms::Auto && p <= F32_TERMS_MAX_P)
        .then(|| T::as_f32(xs))
        .flatten();
    if let Some(xs) = f32_terms {
        match s {
            8 => fill32::<8>(acc, &consts, &mut lanes, lo, xs),
            12 => fill32::<12>(acc, &consts, &mut lanes, lo, xs),
            16 => fill32::<16>(acc, &consts, &mut lanes, lo, xs),
            // p = 21, the widest format of the f32 terms (28 is also fp32's width, p = 23,
            // which takes the f64 terms).
            28 => fill32::<28>(acc, &consts, &mut lanes, lo, xs),
            _ => fill(acc, &consts, &mut lanes, lo, xs, s),
        }
    } else if terms == Terms::Generic {
        fill(acc, &consts, &mut lanes, lo, xs, s);
    } else {
        // Slot counts of e5m2/e4m3 (p = 2, 3), bf16 (7), fp16/tf32 (10) and fp32 (23).
        match s {
            8 => fill(acc, &consts, &mut lanes, lo, xs, 8),
            12 => fill(acc, &consts, &mut lanes, lo, xs, 12),
            16 => fill(acc, &consts, &mut lanes, lo, xs, 16),
            28 => fill(acc, &consts, &mut lanes, lo, xs, 28),
            _ => fill(acc, &consts, &mut lanes, lo, xs, s),
        }
    }
    part.rows = fold(&lanes, lo, n, p, s);
    if let Some(h) = &mut part.histogram {
        h.bins = fold_bins(&lanes, n, hs);
    }
    part
}

/// [`Sample::survey`] of `len` values from their histogram chunks' scalars: the same counts,
/// and the smallest and largest finite nonzero magnitudes as f64 bit patterns (exact: they are
/// values of the input type, widened).
pub(super) fn survey_of(len: usize, chunks: &[ChunkStats]) -> (u64, u64, u64, u64, u64) {
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

/// The per-value accumulators of a chunk, `LANES` copies per exponent.
struct Lanes {
    /// Counts per flags and sub-bin, [`KEYS`]: a lane holds at most a quarter of a chunk's
    /// values, which u16 counters hold, and the row and lane's counters fit one cache line.
    counts: Vec<[u16; KEYS]>,
    /// The histogram's sub-bins per octave as a power of two (0 when none is counted).
    hist_s: u32,
    /// `S` slots per row and lane (see the module docs), from `slots[at]`.
    slots: Vec<f64>,
    at: usize,
}

impl Lanes {
    fn new(rows: usize, s: usize, hist_s: u32) -> Self {
        // The rows start on a 64-byte boundary: a row of 8 or 16 slots is then whole cache
        // lines, and no vector load or store of it straddles two (which costs extra on every
        // value).
        let slots = vec![0.0; rows * LANES * s + 7];
        let at = slots.as_ptr().align_offset(64).min(7);
        Lanes {
            counts: vec![[0; KEYS]; rows * LANES],
            hist_s,
            slots,
            at,
        }
    }

    fn slots(&self) -> &[f64] {
        &self.slots[self.at..]
    }

    fn slots_mut(&mut self) -> &mut [f64] {
        &mut self.slots[self.at..]
    }
}

/// The grid constants and the four masks (by `z * 2 + b`) of the slots, in f64 and (for the f32
/// terms) f32, where a mask is a bit pattern: all ones keeps the error, zero clears it.
struct Consts {
    grid: Vec<f64>,
    masks: [Vec<f64>; 4],
    grid32: Vec<f32>,
    masks32: [Vec<u32>; 4],
}

impl Consts {
    fn new(acc: &SweepAccumulator, s: usize) -> Self {
        let p = acc.width - 1;
        let mut grid = vec![0.0; s];
        grid[..=p + 1].copy_from_slice(&acc.grid[..=p + 1]);
        grid[p + 2] = acc.grid[p + 1];
        grid[p + 3] = 2f64.powi(60);
        let masks = [0, 1, 2, 3].map(|zb: usize| {
            let (z, b) = ((zb >> 1) as f64, (zb & 1) as f64);
            let mut m = vec![0.0; s];
            m[..=p].fill(1.0);
            m[p + 1] = 1.0 - b;
            m[p + 2] = b;
            m[p + 3] = 1.0 - z;
            m
        });
        // The same grids: 1.5 * 2^(53 - j) in f64 rounds to 2^(1 - j) as 1.5 * 2^(24 - j) does
        // in f32 (a constant with the grid as its ulp); padding slots add 0 and subtract 0.
        let grid32 = grid
            .iter()
            .map(|&g| {
                if g == 0.0 {
                    0.0
                } else {
                    (g * 2f64.powi(-29)) as f32
                }
            })
            .collect::<Vec<f32>>();
        let mut grid32 = grid32;
        grid32[p + 3] = 2f32.powi(60);
        let masks32 = masks.clone().map(|m| {
            m.iter()
                .map(|&v| if v == 1.0 { u32::MAX } else { 0 })
                .collect()
        });
        Consts {
            grid,
            masks,
            grid32,
            masks32,
        }
    }
}

/// Sums the lanes of each row, in lane order, and unpacks the slots.
fn fold(lanes: &Lanes, lo: i32, n: usize, p: usize, s: usize) -> Rows {
    let w = p + 1;
    let mut out = Rows::new(lo, lo + n as i32 - 1, w);
    let mut sums = vec![0.0; s];
    for r in 0..n {
        sums.fill(0.0);
        for l in 0..LANES {
            let i = r * LANES + l;
            for c in 0..8 {
                let keys = &lanes.counts[i][c << HIST_MAX_S..(c + 1) << HIST_MAX_S];
                out.counts[r][c] += keys.iter().map(|&k| u64::from(k)).sum::<u64>();
            }
            for (t, v) in sums.iter_mut().zip(&lanes.slots()[i * s..(i + 1) * s]) {
                *t += v;
            }
        }
        out.window[r * w..(r + 1) * w].copy_from_slice(&sums[..w]);
        out.normal_err[r] = [sums[p + 1], sums[p + 2]];
        // Values with f == 1 (flag z, class bit 0) have f^2 = 1.
        let ones: u64 = (0..8)
            .filter(|c| c & 1 == 1)
            .map(|c| out.counts[r][c])
            .sum();
        out.sq[r] = [sums[p + 3], ones as f64];
    }
    out
}

/// The histogram's counts per row and sub-bin, `bins[r << hist_s | j]`, over lanes and flags
/// (a counter's sub-bin field is below `2^hist_s`).
fn fold_bins(lanes: &Lanes, n: usize, hist_s: u32) -> Vec<u64> {
    let width = 1usize << hist_s;
    let mut bins = vec![0u64; n * width];
    for (row, out) in lanes
        .counts
        .chunks_exact(LANES)
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

/// The counter of a value: flags `z`, `a`, `b` and the top `hist_s` bits of its 52-bit
/// fraction.
#[inline(always)]
fn key(z: usize, a: usize, b: usize, frac: u64, hist_s: u32) -> usize {
    (z | a << 1 | b << 2) << HIST_MAX_S | (frac >> (52 - hist_s)) as usize
}

/// The most slots per value: [`slots`] of the widest format (23 mantissa bits).
const MAX_SLOTS: usize = 28;

/// The accumulation loop of `s` slots per value (inlined where `s` is a constant, so the slot
/// loop runs as whole vectors).
#[inline(always)]
fn fill<T: Sample>(
    acc: &SweepAccumulator,
    k: &Consts,
    lanes: &mut Lanes,
    lo: i32,
    xs: &[T],
    s: usize,
) {
    // The constants in local arrays, where the compiler keeps them in registers.
    let (mut grid, mut masks) = ([0.0; MAX_SLOTS], [[0.0; MAX_SLOTS]; 4]);
    grid[..s].copy_from_slice(&k.grid);
    for (m, src) in masks.iter_mut().zip(&k.masks) {
        m[..s].copy_from_slice(src);
    }
    for (i, &x) in xs.iter().enumerate() {
        let a = x.abs_bits64();
        if a == 0 || a >= INF {
            continue;
        }
        let (e, frac) = split(a);
        let z = usize::from(frac == 0);
        let b = usize::from(frac >= acc.t_b);
        let r = (e - lo) as usize * LANES + i % LANES;
        lanes.counts[r][key(z, usize::from(frac >= acc.t_a), b, frac, lanes.hist_s)] += 1;
        let f = f64::from_bits(frac | ONE_BITS);
        let mask = &masks[z * 2 + b];
        if let Some(row) = lanes.slots_mut().get_mut(r * s..(r + 1) * s) {
            for j in 0..s {
                let d = f - ((f + grid[j]) - grid[j]);
                row[j] += d * d * mask[j];
            }
        }
    }
}

/// [`fill`] for f32 inputs and formats of at most [`F32_TERMS_MAX_P`] mantissa bits, with every
/// error computed in f32 and squared in f64: `f` has 24 significant bits, so the rounding to each
/// grid, the difference and its square (at most 48 bits) are exact in these types and the terms
/// are the f64 loop's, bit for bit; the accumulators add the same terms in the same order. A
/// cleared term adds +0, which leaves a sum unchanged.
///
/// Values go by blocks of [`BLOCK`]: one vectorised pass over the block's bit patterns finds each
/// value's row (zeros, infinities and NaN get the spare row after the last, which is never
/// read), flags and `f`, then the per-value loop only adds. A block holding an f32 subnormal
/// (whose exponent needs its leading zeros counted) goes value by value instead, in the same
/// order.
#[inline(always)]
fn fill32<const S: usize>(
    acc: &SweepAccumulator,
    k: &Consts,
    lanes: &mut Lanes,
    lo: i32,
    xs: &[f32],
) {
    const BLOCK: usize = 16;
    let mut grid = [0f32; S];
    grid.copy_from_slice(&k.grid32);
    let mut masks = [[0u32; S]; 4];
    for (m, src) in masks.iter_mut().zip(&k.masks32) {
        m.copy_from_slice(src);
    }
    // Flags on the 23 fraction bits: frac << 29 >= t iff frac >= ceil(t / 2^29).
    let up = |t: u64| u32::try_from(t.div_ceil(1 << 29)).unwrap_or(u32::MAX);
    let (ta, tb) = (up(acc.t_a), up(acc.t_b));
    let spare = (lanes.counts.len() - LANES) as u32;
    let base = lo + 127;
    let hist_s = lanes.hist_s;
    let hist_shift = 23 - hist_s;
    // The counters and the slots as plain slices, taken once: per value, only the row's index.
    let at = lanes.at;
    let mut sink = Sink {
        counts: &mut lanes.counts[..],
        slots: &mut lanes.slots[at..],
        hist_s,
    };
    let mut blocks = xs.chunks_exact(BLOCK);
    for (bi, block) in (&mut blocks).enumerate() {
        let (mut row, mut class, mut zb, mut f) =
            ([0u32; BLOCK], [0u32; BLOCK], [0u32; BLOCK], [0u32; BLOCK]);
        let mut subnormal = false;
        for l in 0..BLOCK {
            let a = block[l].to_bits() & 0x7fff_ffff;
            let normal = a.wrapping_sub(0x0080_0000) < 0x7f00_0000;
            subnormal |= a.wrapping_sub(1) < 0x007f_ffff;
            let frac = a & 0x007f_ffff;
            let (z, b) = (u32::from(frac == 0), u32::from(frac >= tb));
            // Lane l % LANES: the block starts at a multiple of LANES.
            let lane = l as u32 % LANES as u32;
            let r = ((((a >> 23) as i32).wrapping_sub(base) as u32) * LANES as u32) | lane;
            // The spare row's lanes too, so that no counter takes more than a lane's share.
            row[l] = if normal { r } else { spare | lane };
            class[l] = z | u32::from(frac >= ta) << 1 | b << 2;
            zb[l] = z * 2 + b;
            f[l] = frac | 0x3f80_0000;
        }
        if subnormal {
            for (l, &x) in block.iter().enumerate() {
                add_one32(acc, &grid, &masks, &mut sink, lo, bi * BLOCK + l, x);
            }
            continue;
        }
        for l in 0..BLOCK {
            // The sub-bin here rather than in the vector pass above: there it makes the
            // compiler pick 512-bit stores for the block's arrays, which the 32-bit loads of
            // this loop then wait on (measured 20% slower on Zen 4).
            let key = (class[l] << HIST_MAX_S | (f[l] & 0x007f_ffff) >> hist_shift) as usize;
            let f = f32::from_bits(f[l]);
            add32(
                &grid,
                &masks,
                &mut sink,
                row[l] as usize,
                key,
                zb[l] as usize,
                f,
            );
        }
    }
    let done = xs.len() - blocks.remainder().len();
    for (i, &x) in blocks.remainder().iter().enumerate() {
        add_one32(acc, &grid, &masks, &mut sink, lo, done + i, x);
    }
}

/// Where [`fill32`] adds: the lanes' counters and slots (see [`Lanes`]), and the histogram's
/// sub-bins per octave as a power of two.
struct Sink<'a> {
    counts: &'a mut [[u16; KEYS]],
    slots: &'a mut [f64],
    hist_s: u32,
}

/// Adds the value `f` (its counts by `class`, its terms by the masks `zb`) to row and lane `r`.
#[inline(always)]
fn add32<const S: usize>(
    grid: &[f32; S],
    masks: &[[u32; S]; 4],
    sink: &mut Sink,
    r: usize,
    class: usize,
    zb: usize,
    f: f32,
) {
    if let Some(c) = sink.counts.get_mut(r) {
        c[class & (KEYS - 1)] += 1;
    }
    let mask = &masks[zb & 3];
    let row: Option<&mut [f64; S]> = sink
        .slots
        .get_mut(r * S..(r + 1) * S)
        .and_then(|s| s.try_into().ok());
    if let Some(row) = row {
        let mut d = [0f32; S];
        for j in 0..S {
            let t = f - ((f + grid[j]) - grid[j]);
            d[j] = f32::from_bits(t.to_bits() & mask[j]);
        }
        for j in 0..S {
            let t = f64::from(d[j]);
            row[j] += t * t;
        }
    }
}

/// [`fill32`]'s value by value path: any f32 (subnormal too), at index `i` of the chunk.
#[inline(always)]
fn add_one32<const S: usize>(
    acc: &SweepAccumulator,
    grid: &[f32; S],
    masks: &[[u32; S]; 4],
    sink: &mut Sink,
    lo: i32,
    i: usize,
    x: f32,
) {
    let a = x.to_bits() & 0x7fff_ffff;
    // Zero and the nonfinite patterns wrap to the top.
    if a.wrapping_sub(1) >= 0x7f7f_ffff {
        return;
    }
    let (e, frac) = split(f64::from(f32::from_bits(a)).to_bits());
    let z = usize::from(frac == 0);
    let b = usize::from(frac >= acc.t_b);
    let class = key(z, usize::from(frac >= acc.t_a), b, frac, sink.hist_s);
    // A normalised f32 subnormal has no fraction bits below bit 29 either.
    let f = f32::from_bits((frac >> 29) as u32 | 0x3f80_0000);
    let r = (e - lo) as usize * LANES + i % LANES;
    add32(grid, masks, sink, r, class, z * 2 + b, f);
}
