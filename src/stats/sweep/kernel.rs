//! The per-chunk loop of the sweep accumulator.
//!
//! One survey pass (counts, exponent range) and one accumulation pass per chunk, both in cache.
//! Consecutive values usually share an exponent and would update the same accumulators one after
//! the other, each waiting for the previous store; so the accumulation spreads them over `LANES`
//! interleaved copies (value `i` into copy `i % LANES`), folded in lane order at the end of the
//! chunk: deterministic, and several times faster. The loop is compiled for the baseline target
//! and for AVX2 (picked at run time) and specialised for the window widths of the common formats;
//! every variant runs the same scalar code and gives bit-identical results (tested).
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

use super::{ONE_BITS, Partial, Rows, SweepAccumulator, split};

/// Interleaved copies of the accumulators.
const LANES: usize = 4;
const INF: u64 = 0x7ff0_0000_0000_0000;

/// What the sweep reads: f32 or f64 values.
pub(super) trait Sample: Copy + Send + Sync {
    /// The f64 bit pattern of `|x|` (exact: every f32 is an f64).
    fn abs_bits64(self) -> u64;

    /// Count, zeros, nonfinite values, and the smallest and largest f64 bit patterns of the
    /// finite nonzero magnitudes (`u64::MAX` and 0 when there are none).
    fn survey(xs: &[Self]) -> (u64, u64, u64, u64, u64);
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
}

/// The sums of one chunk, through the AVX2 build when the CPU has it and `simd` is true.
pub(super) fn chunk<T: Sample>(acc: &SweepAccumulator, xs: &[T], simd: bool) -> Partial {
    #[cfg(target_arch = "x86_64")]
    if simd && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { chunk_avx2(acc, xs) };
    }
    let _ = simd;
    chunk_any(acc, xs, false)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn chunk_avx2<T: Sample>(acc: &SweepAccumulator, xs: &[T]) -> Partial {
    chunk_any(acc, xs, false)
}

/// Slots per value for mantissa width `p`: `p + 4` rounded up to a multiple of 4.
fn slots(p: usize) -> usize {
    (p + 4).div_ceil(4) * 4
}

/// The chunk loop for whatever target it is compiled for; `generic` skips the width
/// specialisations (for the tests).
#[inline(always)]
pub(super) fn chunk_any<T: Sample>(acc: &SweepAccumulator, xs: &[T], generic: bool) -> Partial {
    let (count, zeros, nonfinite, lo_bits, hi_bits) = T::survey(xs);
    let width = acc.rows.width;
    let mut part = Partial {
        count,
        zeros,
        nonfinite,
        amax_bits: hi_bits,
        rows: Rows {
            width,
            ..Rows::default()
        },
    };
    if hi_bits == 0 {
        return part;
    }
    let (lo, hi) = (split(lo_bits).0, split(hi_bits).0);
    let n = (hi - lo + 1) as usize;
    let p = width - 1;
    let s = slots(p);
    let mut lanes = Lanes {
        counts: vec![[0; 8]; n * LANES],
        slots: vec![0.0; n * LANES * s],
    };
    let consts = Consts::new(acc, s);
    if generic {
        fill_any(acc, &consts, &mut lanes, lo, xs);
    } else {
        // Slot counts of e5m2/e4m3 (p = 2, 3), bf16 (7), fp16/tf32 (10) and fp32 (23).
        match s {
            8 => fill::<T, 8>(acc, &consts, &mut lanes, lo, xs),
            12 => fill::<T, 12>(acc, &consts, &mut lanes, lo, xs),
            16 => fill::<T, 16>(acc, &consts, &mut lanes, lo, xs),
            28 => fill::<T, 28>(acc, &consts, &mut lanes, lo, xs),
            _ => fill_any(acc, &consts, &mut lanes, lo, xs),
        }
    }
    part.rows = fold(&lanes, lo, n, p, s);
    part
}

/// The per-value accumulators of a chunk, `LANES` copies per exponent.
struct Lanes {
    counts: Vec<[u64; 8]>,
    /// `S` slots per row and lane (see the module docs).
    slots: Vec<f64>,
}

/// The grid constants and the four masks (by `z * 2 + b`) of the slots.
struct Consts {
    grid: Vec<f64>,
    masks: [Vec<f64>; 4],
}

impl Consts {
    fn new(acc: &SweepAccumulator, s: usize) -> Self {
        let p = acc.rows.width - 1;
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
        Consts { grid, masks }
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
                out.counts[r][c] += lanes.counts[i][c];
            }
            for (t, v) in sums.iter_mut().zip(&lanes.slots[i * s..(i + 1) * s]) {
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

/// The accumulation loop with `S` slots known at compile time.
#[inline(always)]
fn fill<T: Sample, const S: usize>(
    acc: &SweepAccumulator,
    k: &Consts,
    lanes: &mut Lanes,
    lo: i32,
    xs: &[T],
) {
    let mut grid = [0.0; S];
    grid.copy_from_slice(&k.grid);
    let mut masks = [[0.0; S]; 4];
    for (m, src) in masks.iter_mut().zip(&k.masks) {
        m.copy_from_slice(src);
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
        lanes.counts[r][z | usize::from(frac >= acc.t_a) << 1 | b << 2] += 1;
        let f = f64::from_bits(frac | ONE_BITS);
        let mask = &masks[z * 2 + b];
        let row: Option<&mut [f64; S]> = lanes
            .slots
            .get_mut(r * S..(r + 1) * S)
            .and_then(|s| s.try_into().ok());
        if let Some(row) = row {
            for j in 0..S {
                let d = f - ((f + grid[j]) - grid[j]);
                row[j] += d * d * mask[j];
            }
        }
    }
}

/// [`fill`] for any slot count.
fn fill_any<T: Sample>(acc: &SweepAccumulator, k: &Consts, lanes: &mut Lanes, lo: i32, xs: &[T]) {
    let s = k.grid.len();
    for (i, &x) in xs.iter().enumerate() {
        let a = x.abs_bits64();
        if a == 0 || a >= INF {
            continue;
        }
        let (e, frac) = split(a);
        let z = usize::from(frac == 0);
        let b = usize::from(frac >= acc.t_b);
        let r = (e - lo) as usize * LANES + i % LANES;
        lanes.counts[r][z | usize::from(frac >= acc.t_a) << 1 | b << 2] += 1;
        let f = f64::from_bits(frac | ONE_BITS);
        let mask = &k.masks[z * 2 + b];
        let row = &mut lanes.slots[r * s..(r + 1) * s];
        for j in 0..s {
            let d = f - ((f + k.grid[j]) - k.grid[j]);
            row[j] += d * d * mask[j];
        }
    }
}
