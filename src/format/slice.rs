//! Rounding whole slices in place, with counts of what rounding did.
//!
//! `f32` slices go through a branch-free kernel that works on the bit patterns and vectorises, in
//! every rounding mode (directed modes are stochastic rounding with fixed random bits) and with
//! subnormals on or off; it is compiled three times, for the baseline target, AVX2 and AVX-512,
//! and the best the CPU has is picked at run time. The exact scalar path
//! ([`Rounder::round_at`]) is the kernels' twin in the tests: all must agree bit for bit.

use std::ops::{Add, AddAssign};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::random::{BlockKey, mix};
use super::round::{Event, Overflow, Rounder, Rounding};

/// How many values of a slice each rounding event touched.
///
/// Zeros and values that rounded to normal numbers are not counted (they are the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RoundCounts {
    /// Nonzero finite inputs that became zero.
    pub underflow: u64,
    /// Nonzero results below the smallest normal (kept with reduced precision).
    pub subnormal: u64,
    /// Finite inputs whose rounded magnitude exceeded the largest finite value.
    pub overflow: u64,
    /// NaN inputs.
    pub nan: u64,
    /// Infinite inputs.
    pub infinite: u64,
}

impl RoundCounts {
    /// Counts one event.
    pub fn record(&mut self, event: Event) {
        match event {
            Event::Normal => {}
            Event::Underflow => self.underflow += 1,
            Event::Subnormal => self.subnormal += 1,
            Event::Overflow => self.overflow += 1,
            Event::Nan => self.nan += 1,
            Event::Infinite => self.infinite += 1,
        }
    }
}

impl Add for RoundCounts {
    type Output = RoundCounts;
    fn add(self, o: RoundCounts) -> RoundCounts {
        RoundCounts {
            underflow: self.underflow + o.underflow,
            subnormal: self.subnormal + o.subnormal,
            overflow: self.overflow + o.overflow,
            nan: self.nan + o.nan,
            infinite: self.infinite + o.infinite,
        }
    }
}

impl AddAssign for RoundCounts {
    fn add_assign(&mut self, o: RoundCounts) {
        *self = *self + o;
    }
}

/// Which implementation rounds an f32 slice (for tests and benchmarks).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelPath {
    /// The fastest the CPU supports (what the public API uses).
    Auto,
    /// The kernel compiled for AVX2 (falls back to `Portable` on CPUs without it).
    Avx2,
    /// The branch-free kernel compiled for the baseline target.
    Portable,
    /// Value by value through the exact f64 path.
    Scalar,
}

/// Values per kernel call: small enough for u32 lane counters, large enough to amortise.
const CHUNK: usize = 1 << 14;
/// Values per rayon task.
const PAR_CHUNK: usize = 1 << 18;

impl Rounder {
    /// Rounds `xs` in place as the first values of a stream (positions `0..xs.len()`); see
    /// [`Rounder::round_f32_slice_at`] to round later parts of a stream.
    ///
    /// Each value is rounded from its f32 value exactly, as [`Rounder::round_at`] would.
    pub fn round_f32_slice(&self, xs: &mut [f32]) -> RoundCounts {
        self.round_f32_slice_at(xs, 0)
    }

    /// Rounds `xs` in place as positions `start..start + xs.len()` of a stream (which selects
    /// the random bits in stochastic mode).
    pub fn round_f32_slice_at(&self, xs: &mut [f32], start: u64) -> RoundCounts {
        self.round_f32_slice_via(KernelPath::Auto, xs, start)
    }

    /// [`Rounder::round_f32_slice_at`] through a chosen implementation, so that tests can check
    /// that every path gives the same bits.
    #[doc(hidden)]
    pub fn round_f32_slice_via(&self, path: KernelPath, xs: &mut [f32], start: u64) -> RoundCounts {
        let mut counts = RoundCounts::default();
        let mut index = start;
        for chunk in xs.chunks_mut(CHUNK) {
            counts += match path {
                KernelPath::Scalar => self.round_f32_scalar(chunk, index),
                _ => self.round_f32_chunk(path, chunk, index),
            };
            index += chunk.len() as u64;
        }
        counts
    }

    /// [`Rounder::round_f32_slice`] on all threads; the result is the same whatever their number.
    pub fn par_round_f32_slice(&self, xs: &mut [f32]) -> RoundCounts {
        self.par_round_f32_slice_at(xs, 0)
    }

    /// [`Rounder::round_f32_slice_at`] on all threads; the result is the same whatever their
    /// number.
    ///
    /// With stochastic rounding, a caller that rounds the same tensor again (every training step)
    /// must move `start` on (or change the seed), or each element meets the same random bits
    /// every time.
    pub fn par_round_f32_slice_at(&self, xs: &mut [f32], start: u64) -> RoundCounts {
        xs.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .map(|(i, chunk)| self.round_f32_slice_at(chunk, start + (i * PAR_CHUNK) as u64))
            .reduce(RoundCounts::default, Add::add)
    }

    /// Rounds `xs` in place, each value exactly and once, as positions `0..xs.len()`.
    pub fn round_f64_slice(&self, xs: &mut [f64]) -> RoundCounts {
        self.round_f64_slice_at(xs, 0)
    }

    /// Rounds `xs` in place as positions `start..start + xs.len()` of a stream.
    pub fn round_f64_slice_at(&self, xs: &mut [f64], start: u64) -> RoundCounts {
        let mut counts = RoundCounts::default();
        for (x, index) in xs.iter_mut().zip(start..) {
            let (r, event) = self.round_at(*x, index);
            *x = r;
            counts.record(event);
        }
        counts
    }

    /// [`Rounder::round_f64_slice`] on all threads; the result is the same whatever their number.
    pub fn par_round_f64_slice(&self, xs: &mut [f64]) -> RoundCounts {
        self.par_round_f64_slice_at(xs, 0)
    }

    /// [`Rounder::round_f64_slice_at`] on all threads; the result is the same whatever their
    /// number.
    pub fn par_round_f64_slice_at(&self, xs: &mut [f64], start: u64) -> RoundCounts {
        xs.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .map(|(i, chunk)| self.round_f64_slice_at(chunk, start + (i * PAR_CHUNK) as u64))
            .reduce(RoundCounts::default, Add::add)
    }

    /// One chunk of at most [`CHUNK`] values.
    fn round_f32_chunk(&self, path: KernelPath, xs: &mut [f32], start: u64) -> RoundCounts {
        let kernel = Kernel::new(self);
        // The random key changes every 2^32 positions: split a chunk that crosses a boundary.
        let to_boundary = (1u64 << 32) - (start & 0xffff_ffff);
        if kernel.mode == STOCHASTIC && xs.len() as u64 > to_boundary {
            let (head, tail) = xs.split_at_mut(to_boundary as usize);
            let tail_start = start + to_boundary;
            return self.round_f32_chunk(path, head, start)
                + self.round_f32_chunk(path, tail, tail_start);
        }
        let key = BlockKey::new(self.options().seed, start >> 32);
        let lo = start as u32;
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if path == KernelPath::Auto && has!("avx512f") && has!("avx512vl") && has!("avx512bw") {
                // SAFETY: the CPU supports these features, checked just above.
                return unsafe { kernel.run_avx512(xs, lo, key) };
            }
            if path != KernelPath::Portable && has!("avx2") {
                // SAFETY: the CPU supports AVX2, checked just above.
                return unsafe { kernel.run_avx2(xs, lo, key) };
            }
        }
        kernel.run(xs, lo, key)
    }

    /// The scalar twin: every value through the exact f64 path.
    fn round_f32_scalar(&self, xs: &mut [f32], start: u64) -> RoundCounts {
        let mut counts = RoundCounts::default();
        for (x, index) in xs.iter_mut().zip(start..) {
            let (r, event) = self.round_at(f64::from(*x), index);
            *x = f64_to_f32_exact(r);
            counts.record(event);
        }
        counts
    }
}

/// `r` as f32, for values the format makes exactly representable in f32; a NaN keeps its sign and
/// top 23 payload bits (an `as` cast leaves NaN payloads unspecified).
fn f64_to_f32_exact(r: f64) -> f32 {
    if r.is_nan() {
        let b = r.to_bits();
        f32::from_bits(
            ((b >> 32) as u32 & 0x8000_0000) | 0x7f80_0000 | ((b >> 29) as u32 & 0x007f_ffff),
        )
    } else {
        r as f32
    }
}

const INF: u32 = 0x7f80_0000;

/// Kernel modes. Directed rounding is stochastic rounding with fixed random bits: all ones never
/// rounds up, zero rounds up whenever the result is inexact.
const NEAREST: u8 = 0;
const STOCHASTIC: u8 = 1;
const DIRECTED: u8 = 2;

/// The constants of the branch-free f32 kernel (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Kernel {
    /// One of [`NEAREST`], [`STOCHASTIC`], [`DIRECTED`].
    mode: u8,
    /// For directed modes, the random bits that make the stochastic formulas round every
    /// inexact value away from zero (0) or toward zero (all ones), for each sign.
    h_positive: u32,
    h_negative: u32,
    /// Subnormals off: results below the smallest normal become zero (a const parameter of the
    /// loops, so that neither setting pays for the other's branch).
    flush: bool,
    /// Mantissa bits dropped: 23 - man_bits.
    s: u32,
    low_mask: u32,
    /// Half a quantum minus one, for ties-to-even by integer addition.
    half_m1: u32,
    /// 1 when s > 0, so that `(a >> s) & lsb_enable` is the last kept bit.
    lsb_enable: u32,
    min_normal_bits: u32,
    max_bits: u32,
    /// Biased f32 exponent of the smallest normal of the format.
    emin_b: u32,
    /// `2^(emin - man_bits + 23)`: adding and subtracting it rounds a value below the smallest
    /// normal to a multiple of the smallest subnormal, ties to even.
    magic: f32,
    /// The smallest subnormal.
    quantum: f32,
    /// Results of overflow, for positive and negative inputs (without the sign bit).
    overflow_positive: u32,
    overflow_negative: u32,
    infinity_bits: u32,
    /// NaN results keep these bits of the input and set `nan_set`.
    nan_keep: u32,
    nan_set: u32,
}

impl Kernel {
    fn new(r: &Rounder) -> Kernel {
        let o = r.options();
        let (mode, away_positive, away_negative) = match o.rounding {
            Rounding::NearestEven => (NEAREST, false, false),
            Rounding::Stochastic => (STOCHASTIC, false, false),
            Rounding::TowardZero => (DIRECTED, false, false),
            Rounding::Up => (DIRECTED, true, false),
            Rounding::Down => (DIRECTED, false, true),
        };
        let h = |away: bool| if away { 0 } else { u32::MAX };
        let f = r.format();
        let s = 23 - f.man_bits;
        let low_mask = (1u32 << s) - 1;
        let max_bits = (f.max() as f32).to_bits();
        let nan_payload = ((1u32 << f.man_bits) - 1) << s;
        let (nan_keep, nan_set) = if f.finite_only {
            (0x8000_0000, INF | nan_payload)
        } else {
            (0x8000_0000 | nan_payload, INF | 0x0040_0000)
        };
        let format_nan = INF | 0x0040_0000 | if f.finite_only { nan_payload } else { 0 };
        let (overflow_bits, infinity_bits) = match (o.overflow, f.has_infinity()) {
            (Overflow::Saturate, _) => (max_bits, max_bits),
            (Overflow::Ieee, true) => (INF, INF),
            (Overflow::Ieee, false) => (format_nan, format_nan),
        };
        // IEEE 754 7.4: a directed rounding toward zero for the value's sign gives the largest
        // finite value.
        let overflow = |away: bool| {
            if mode == DIRECTED && !away {
                max_bits
            } else {
                overflow_bits
            }
        };
        Kernel {
            mode,
            h_positive: h(away_positive),
            h_negative: h(away_negative),
            overflow_positive: overflow(away_positive),
            overflow_negative: overflow(away_negative),
            flush: !o.subnormals,
            s,
            low_mask,
            half_m1: if s > 0 { (1 << (s - 1)) - 1 } else { 0 },
            lsb_enable: u32::from(s > 0),
            min_normal_bits: ((f.emin() + 127) as u32) << 23,
            max_bits,
            emin_b: (f.emin() + 127) as u32,
            magic: super::pow2(f.emin() - f.man_bits as i32 + 23) as f32,
            quantum: f.min_subnormal() as f32,
            infinity_bits,
            nan_keep,
            nan_set,
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2(&self, xs: &mut [f32], lo: u32, key: BlockKey) -> RoundCounts {
        self.run(xs, lo, key)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512bw")]
    unsafe fn run_avx512(&self, xs: &mut [f32], lo: u32, key: BlockKey) -> RoundCounts {
        self.run(xs, lo, key)
    }

    #[inline(always)]
    fn run(&self, xs: &mut [f32], lo: u32, key: BlockKey) -> RoundCounts {
        match (self.mode, self.flush) {
            (NEAREST, false) => self.run_mode::<NEAREST, false>(xs, lo, key),
            (NEAREST, true) => self.run_mode::<NEAREST, true>(xs, lo, key),
            (STOCHASTIC, false) => self.run_mode::<STOCHASTIC, false>(xs, lo, key),
            (STOCHASTIC, true) => self.run_mode::<STOCHASTIC, true>(xs, lo, key),
            (_, false) => self.run_mode::<DIRECTED, false>(xs, lo, key),
            (_, true) => self.run_mode::<DIRECTED, true>(xs, lo, key),
        }
    }

    /// Blocks of 16 values with no nonzero value below the format's smallest normal (the common
    /// case for weights and activations) skip the subnormal-range arithmetic.
    #[inline(always)]
    fn run_mode<const MODE: u8, const FLUSH: bool>(
        &self,
        xs: &mut [f32],
        lo: u32,
        key: BlockKey,
    ) -> RoundCounts {
        const BLOCK: usize = 16;
        let mut counts = [0u32; 5];
        let mut blocks = xs.chunks_exact_mut(BLOCK);
        let mut at = lo;
        for block in &mut blocks {
            // Which kinds of value the block holds decides which loop it needs.
            let (mut small, mut special) = (false, false);
            for x in block.iter() {
                let a = x.to_bits() & 0x7fff_ffff;
                small |= a.wrapping_sub(1) < self.min_normal_bits - 1;
                special |= a > self.max_bits;
            }
            match (small, special) {
                (false, false) => self.ordinary_block::<MODE>(block, at, key),
                (true, false) => {
                    self.block::<MODE, FLUSH, true, false>(block, at, key, &mut counts)
                }
                (false, true) => {
                    self.block::<MODE, FLUSH, false, true>(block, at, key, &mut counts)
                }
                (true, true) => self.block::<MODE, FLUSH, true, true>(block, at, key, &mut counts),
            }
            at = at.wrapping_add(BLOCK as u32);
        }
        self.block::<MODE, FLUSH, true, true>(blocks.into_remainder(), at, key, &mut counts);
        let [under, sub, over, nan, inf] = counts.map(u64::from);
        RoundCounts {
            underflow: under,
            subnormal: sub,
            overflow: over,
            nan,
            infinite: inf,
        }
    }

    /// Rounds the bits of a magnitude at least as large as f32's smallest normal to the format's
    /// precision, with the exponent range unbounded (below and above).
    #[inline(always)]
    fn round_normal<const MODE: u8>(&self, v: u32, h: u32) -> u32 {
        let addend = if MODE == NEAREST {
            // Half a quantum, less one unless the last kept bit is odd: ties to even.
            self.half_m1 + ((v >> self.s) & self.lsb_enable)
        } else {
            // Up iff the dropped bits exceed the top s bits of h.
            (!h >> (31 - self.s)) >> 1
        };
        (v + addend) & !self.low_mask
    }

    /// The random bits of the value at stream position `lo` with sign bit `sign`: drawn in
    /// stochastic mode, fixed by the sign in directed modes, unused for nearest.
    #[inline(always)]
    fn random_bits<const MODE: u8>(&self, lo: u32, key: BlockKey, sign: u32) -> u32 {
        match MODE {
            STOCHASTIC => mix(lo, key),
            DIRECTED if sign != 0 => self.h_negative,
            DIRECTED => self.h_positive,
            _ => 0,
        }
    }

    /// Rounds a block in which every value is zero or a normal no larger than the largest
    /// finite value: nothing to count, nothing special (the common case for weights and
    /// activations), so the loop runs at memory speed.
    #[inline(always)]
    fn ordinary_block<const MODE: u8>(&self, xs: &mut [f32], lo: u32, key: BlockKey) {
        for (i, x) in xs.iter_mut().enumerate() {
            let bits = x.to_bits();
            let sign = bits & 0x8000_0000;
            let h = self.random_bits::<MODE>(lo.wrapping_add(i as u32), key, sign);
            *x = f32::from_bits(self.round_normal::<MODE>(bits ^ sign, h) | sign);
        }
    }

    /// Rounds `xs` (positions `lo..` of the stream); with `SMALL` false, no value may be nonzero
    /// and below the smallest normal; with `SPECIAL` false, none may be above the largest finite
    /// value (nor infinite or NaN).
    #[inline(always)]
    fn block<const MODE: u8, const FLUSH: bool, const SMALL: bool, const SPECIAL: bool>(
        &self,
        xs: &mut [f32],
        lo: u32,
        key: BlockKey,
        counts: &mut [u32; 5],
    ) {
        let k = *self;
        let [mut under, mut sub, mut over, mut nan, mut inf] = *counts;
        for (i, x) in xs.iter_mut().enumerate() {
            let bits = x.to_bits();
            let sign = bits & 0x8000_0000;
            let a = bits ^ sign;
            let h = self.random_bits::<MODE>(lo.wrapping_add(i as u32), key, sign);
            let normal = |v: u32| k.round_normal::<MODE>(v, h);
            let r = if !SMALL || a >= k.min_normal_bits {
                normal(a)
            } else if FLUSH {
                // Only a value in the binade just under the smallest normal can round up to it.
                // Where that binade holds f32 subnormals (whose bits have one leading bit fewer),
                // double them first.
                let (b, limit) = if k.emin_b == 1 {
                    (a << 1, 0x0100_0000)
                } else {
                    (a, k.min_normal_bits)
                };
                if normal(b) >= limit {
                    k.min_normal_bits
                } else {
                    0
                }
            } else if MODE != NEAREST {
                // Below the smallest normal: integer significand, variable shift.
                let exp = a >> 23;
                let exp_eff = exp.max(1);
                let sig = (a & 0x007f_ffff) | if exp > 0 { 0x0080_0000 } else { 0 };
                let sh = k.s + k.emin_b.saturating_sub(exp_eff);
                let sh_c = sh.min(31);
                let kept = sig >> sh_c;
                let rest = sig - (kept << sh_c);
                // floor(rest / 2^sh * 2^32)
                let frac = if sh <= 31 {
                    (rest << (31 - sh)) << 1
                } else {
                    sig >> (sh - 32).min(31)
                };
                let up = if MODE == STOCHASTIC {
                    u32::from(frac > h)
                } else {
                    // Directed: h is 0 (away from zero) or all ones (toward zero).
                    u32::from((rest != 0) & (h == 0))
                };
                ((kept + up) as f32 * k.quantum).to_bits()
            } else {
                ((f32::from_bits(a) + k.magic) - k.magic).to_bits()
            };
            under += u32::from((a != 0) & (r == 0));
            sub += u32::from((r != 0) & (r < k.min_normal_bits));
            if !SPECIAL {
                *x = f32::from_bits(r | sign);
                continue;
            }
            let finite = a < INF;
            let overflowed = finite & (r > k.max_bits);
            let out = if a > INF {
                (bits & k.nan_keep) | k.nan_set
            } else if a == INF {
                k.infinity_bits | sign
            } else if overflowed {
                sign | if sign != 0 {
                    k.overflow_negative
                } else {
                    k.overflow_positive
                }
            } else {
                r | sign
            };
            *x = f32::from_bits(out);
            over += u32::from(overflowed);
            nan += u32::from(a > INF);
            inf += u32::from(a == INF);
        }
        *counts = [under, sub, over, nan, inf];
    }
}
