//! Rounding whole slices in place, with counts of what rounding did.
//!
//! `f32` slices go through a branch-free kernel that works on the bit patterns and vectorises, in
//! every rounding mode (directed modes are stochastic rounding with fixed random bits) and with
//! subnormals on or off; it is compiled three times, for the baseline target, AVX2 and AVX-512,
//! and the best the CPU has is picked at run time. The exact scalar path
//! ([`Rounder::round_at`]) is the kernels' twin in the tests: all must agree bit for bit.

use std::ops::Add;

use rayon::prelude::*;

use super::Encoding;
use super::random::{BlockKey, mix_scaled};
use super::round::{Overflow, Rounder, Rounding};
use crate::isa::Isa;

/// Defines the kernel loop `$body::<L, ..>`, generic over its `L` lanes per block, as an
/// `#[inline(always)]` method, and its AVX2 and AVX-512 builds: `unsafe` methods `$avx2` and
/// `$avx512` that call it with 8 and 16 lanes, so that each compiles the whole loop for its
/// instruction set. The baseline build is `$body::<8, ..>` itself.
///
/// # Safety
///
/// The builds may only be called on a CPU with the instruction set, which an [`Isa`] from
/// run-time detection guarantees.
macro_rules! isa_builds {
    (
        $avx2:ident, $avx512:ident =>
        $(#[$meta:meta])*
        fn $body:ident<const L: usize $(, const $c:ident: $ct:ty)*>(
            &$self:ident $(, $arg:ident: $ty:ty)* $(,)?
        ) -> $ret:ty $block:block
    ) => {
        $(#[$meta])*
        #[inline(always)]
        fn $body<const L: usize $(, const $c: $ct)*>(&$self $(, $arg: $ty)*) -> $ret $block

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2<$(const $c: $ct),*>(&$self $(, $arg: $ty)*) -> $ret {
            $self.$body::<8 $(, $c)*>($($arg),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512vl,avx512bw")]
        unsafe fn $avx512<$(const $c: $ct),*>(&$self $(, $arg: $ty)*) -> $ret {
            $self.$body::<16 $(, $c)*>($($arg),*)
        }
    };
}

/// Calls the kernel method `$body::<MODE, FLUSH, ..>` of `$k` with its rounding mode and
/// subnormal setting as the first two constants (the directed modes share one loop), so that
/// each combination compiles to its own branch-free loop.
macro_rules! by_mode {
    ($k:ident.$body:ident::<_, _ $(, $g:tt)*>($($arg:expr),* $(,)?)) => {
        match ($k.mode, $k.flush) {
            (NEAREST, false) => $k.$body::<NEAREST, false $(, $g)*>($($arg),*),
            (NEAREST, true) => $k.$body::<NEAREST, true $(, $g)*>($($arg),*),
            (STOCHASTIC, false) => $k.$body::<STOCHASTIC, false $(, $g)*>($($arg),*),
            (STOCHASTIC, true) => $k.$body::<STOCHASTIC, true $(, $g)*>($($arg),*),
            (_, false) => $k.$body::<DIRECTED, false $(, $g)*>($($arg),*),
            (_, true) => $k.$body::<DIRECTED, true $(, $g)*>($($arg),*),
        }
    };
}

mod counts;
mod pow2_blocks;
mod scaled_blocks;

pub(crate) use scaled_blocks::{Scale, sticky};

pub use counts::RoundCounts;

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

impl KernelPath {
    /// The build of the branch-free kernel this path runs on this CPU (the scalar twin aside).
    fn isa(self) -> Isa {
        match self {
            KernelPath::Avx2 => Isa::best().min(Isa::Avx2),
            KernelPath::Portable | KernelPath::Scalar => Isa::Baseline,
            KernelPath::Auto => Isa::best(),
        }
    }
}

/// Values per kernel call (each splits its work further; see [`Kernel::run_mode`]).
const CHUNK: usize = 1 << 14;
/// Values per rayon task (a storage point of the training core's, 256 x 1,024 activations, is
/// four tasks).
const PAR_CHUNK: usize = 1 << 16;

/// Where a kernel reads and writes: one slice (in place), or a source and a destination of
/// the same length that share no memory. Every value is read before its own result is
/// written, in blocks, so both cases run one implementation.
#[derive(Clone, Copy)]
struct Io {
    src: *const f32,
    dst: *mut f32,
    len: usize,
}

impl Io {
    fn in_place(xs: &mut [f32]) -> Io {
        let p = xs.as_mut_ptr();
        Io {
            src: p,
            dst: p,
            len: xs.len(),
        }
    }

    /// # Panics
    /// If the lengths differ.
    fn copy(src: &[f32], dst: &mut [f32]) -> Io {
        assert_eq!(
            src.len(),
            dst.len(),
            "source and destination lengths differ"
        );
        Io {
            src: src.as_ptr(),
            dst: dst.as_mut_ptr(),
            len: src.len(),
        }
    }

    /// The first `n` values (`n <= len`) and the rest.
    fn split_at(self, n: usize) -> (Io, Io) {
        debug_assert!(n <= self.len);
        // SAFETY (of the `add`s): n <= len, so both pointers stay within their slices.
        let rest = unsafe {
            Io {
                src: self.src.add(n),
                dst: self.dst.add(n),
                len: self.len - n,
            }
        };
        (Io { len: n, ..self }, rest)
    }

    /// Reads `N` values from `at` (all within the slice).
    #[inline(always)]
    fn load<const N: usize>(&self, at: usize) -> [u32; N] {
        debug_assert!(at + N <= self.len);
        // SAFETY: `at + N <= len`: in bounds of the source.
        unsafe { self.src.add(at).cast::<[u32; N]>().read_unaligned() }
    }

    /// Writes `N` values at `at` (all within the slice).
    #[inline(always)]
    fn store<const N: usize>(&self, at: usize, v: [u32; N]) {
        debug_assert!(at + N <= self.len);
        // SAFETY: `at + N <= len`: in bounds of the destination, which no one else borrows.
        unsafe { self.dst.add(at).cast::<[u32; N]>().write_unaligned(v) }
    }
}

/// `round` on every [`PAR_CHUNK`] of `xs` (as positions `start..` of the stream) on all threads,
/// the counts added up: the same whatever the number of threads.
fn par_chunks<T: Send>(
    xs: &mut [T],
    start: u64,
    round: impl Fn(&mut [T], u64) -> RoundCounts + Sync,
) -> RoundCounts {
    if xs.len() <= PAR_CHUNK || rayon::current_num_threads() == 1 {
        return round(xs, start);
    }
    xs.par_chunks_mut(PAR_CHUNK)
        .enumerate()
        .map(|(i, chunk)| round(chunk, start + (i * PAR_CHUNK) as u64))
        .reduce(RoundCounts::default, Add::add)
}

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

    /// Rounds `src` into `dst` (of the same length) as positions `start..start + src.len()` of
    /// a stream: what [`Rounder::round_f32_slice_at`] does to a copy of `src`, in one pass and
    /// without the copy (the destination is only written, so a fresh allocation costs no
    /// reads).
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn round_f32_into(&self, src: &[f32], dst: &mut [f32], start: u64) -> RoundCounts {
        self.round_f32_into_via(KernelPath::Auto, src, dst, start)
    }

    /// [`Rounder::round_f32_slice_at`] through a chosen implementation, so that tests can check
    /// that every path gives the same bits.
    #[doc(hidden)]
    pub fn round_f32_slice_via(&self, path: KernelPath, xs: &mut [f32], start: u64) -> RoundCounts {
        self.round_f32_io(path, Io::in_place(xs), start)
    }

    /// [`Rounder::round_f32_into`] through a chosen implementation (for tests).
    #[doc(hidden)]
    pub fn round_f32_into_via(
        &self,
        path: KernelPath,
        src: &[f32],
        dst: &mut [f32],
        start: u64,
    ) -> RoundCounts {
        self.round_f32_io(path, Io::copy(src, dst), start)
    }

    fn round_f32_io(&self, path: KernelPath, mut io: Io, start: u64) -> RoundCounts {
        let mut counts = RoundCounts::default();
        let mut index = start;
        while io.len > 0 {
            let (chunk, rest) = io.split_at(io.len.min(CHUNK));
            counts += match path {
                KernelPath::Scalar => self.round_f32_scalar(chunk, index),
                _ => self.round_f32_chunk(path, chunk, index),
            };
            index += chunk.len as u64;
            io = rest;
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
        par_chunks(xs, start, |chunk, at| self.round_f32_slice_at(chunk, at))
    }

    /// [`Rounder::round_f32_into`] on all threads; the result is the same whatever their
    /// number.
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn par_round_f32_into(&self, src: &[f32], dst: &mut [f32], start: u64) -> RoundCounts {
        assert_eq!(
            src.len(),
            dst.len(),
            "source and destination lengths differ"
        );
        // As `par_chunks`: one task runs here, without rayon's iterator (1.1x on 5K values).
        if src.len() <= PAR_CHUNK || rayon::current_num_threads() == 1 {
            return self.round_f32_into(src, dst, start);
        }
        src.par_chunks(PAR_CHUNK)
            .zip(dst.par_chunks_mut(PAR_CHUNK))
            .enumerate()
            .map(|(i, (s, d))| self.round_f32_into(s, d, start + (i * PAR_CHUNK) as u64))
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
        par_chunks(xs, start, |chunk, at| self.round_f64_slice_at(chunk, at))
    }

    /// One chunk of at most [`CHUNK`] values.
    fn round_f32_chunk(&self, path: KernelPath, io: Io, start: u64) -> RoundCounts {
        let kernel = Kernel::new(self);
        // The random key changes every 2^32 positions: split a chunk that crosses a boundary.
        let to_boundary = (1u64 << 32) - (start & 0xffff_ffff);
        if kernel.mode == STOCHASTIC && io.len as u64 > to_boundary {
            let (head, tail) = io.split_at(to_boundary as usize);
            let tail_start = start + to_boundary;
            return self.round_f32_chunk(path, head, start)
                + self.round_f32_chunk(path, tail, tail_start);
        }
        let key = BlockKey::new(self.options().seed, start >> 32);
        let lo = start as u32;
        match path.isa() {
            // SAFETY: an `Isa` other than Baseline comes from run-time detection of its features.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { kernel.run_avx512(io, lo, key) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { kernel.run_avx2(io, lo, key) },
            _ => kernel.run::<8>(io, lo, key),
        }
    }

    /// The scalar twin: every value through the exact f64 path.
    fn round_f32_scalar(&self, io: Io, start: u64) -> RoundCounts {
        let mut counts = RoundCounts::default();
        for i in 0..io.len {
            let [x] = io.load::<1>(i);
            let (r, event) = self.round_at(f64::from(f32::from_bits(x)), start + i as u64);
            io.store(i, [f64_to_f32_exact(r).to_bits()]);
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
    /// `s + emin_b`: less the biased exponent (at least 1) of a value below the smallest
    /// normal, the position of the quantum in its integer significand.
    sh_base: u32,
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
        let (nan_keep, nan_set) = match f.encoding() {
            Encoding::Ieee => (0x8000_0000 | nan_payload, INF | 0x0040_0000),
            Encoding::FiniteNan | Encoding::Finite => (0x8000_0000, INF | nan_payload),
        };
        let format_nan = INF | 0x0040_0000 | nan_payload;
        let (overflow_bits, infinity_bits) = match (o.overflow, f.encoding()) {
            (Overflow::Saturate, _) | (_, Encoding::Finite) => (max_bits, max_bits),
            (Overflow::Ieee, Encoding::Ieee) => (INF, INF),
            (Overflow::Ieee, Encoding::FiniteNan) => (format_nan, format_nan),
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
            sh_base: s + (f.emin() + 127) as u32,
            magic: super::pow2(f.emin() - f.man_bits as i32 + 23) as f32,
            quantum: f.min_subnormal() as f32,
            infinity_bits,
            nan_keep,
            nan_set,
        }
    }

    isa_builds! {
        run_avx2, run_avx512 =>
        /// `L` values per block: a whole number of vectors (8 for AVX2, 16 for AVX-512: larger
        /// blocks only add register pressure). The results do not depend on it.
        fn run<const L: usize>(&self, io: Io, lo: u32, key: BlockKey) -> RoundCounts {
            by_mode!(self.run_mode::<_, _, L>(io, lo, key))
        }
    }

    /// Rounds blocks of `L` values: where [`SUPER`] values hold no nonzero value below the
    /// format's smallest normal and none above its largest finite value (the common case for weights
    /// and activations) takes the count-free loop; any other block takes the general one, which
    /// computes every case for every lane and selects (no branch on the data), counting events
    /// per lane (see [`Tally`]).
    #[inline(always)]
    fn run_mode<const MODE: u8, const FLUSH: bool, const L: usize>(
        &self,
        io: Io,
        lo: u32,
        key: BlockKey,
    ) -> RoundCounts {
        // Per-lane u32 counters cannot overflow: a call rounds at most CHUNK values.
        debug_assert!(io.len <= CHUNK);
        let mut tally = Tally::<L>::default();
        // The hash's first step for the block's positions, `(pos + i) mul`, moved on by
        // `L mul` per block: an addition instead of a multiply per vector (written as
        // `pos mul + i mul` in the block, the compiler folds it back into the multiply).
        let mut scaled: [u32; L] = std::array::from_fn(|i| key.scale(lo.wrapping_add(i as u32)));
        let step = key.scale(L as u32);
        let next = |scaled: &mut [u32; L]| {
            let now = *scaled;
            for s in scaled.iter_mut() {
                *s = s.wrapping_add(step);
            }
            now
        };
        // Which loop runs is decided per SUPER values, so that on data that mixes kinds of
        // value (rounded gradients: zeros, subnormals, normals) the branch stays predictable.
        let supers = io.len / SUPER;
        for sb in 0..supers {
            let base = sb * SUPER;
            let ordinary = self.is_ordinary(&io.load::<SUPER>(base));
            for at in (base..base + SUPER).step_by(L) {
                let x = io.load::<L>(at);
                let pos = next(&mut scaled);
                let y = if ordinary {
                    self.ordinary_block::<MODE, L>(&x, &pos, key)
                } else {
                    self.general_block::<MODE, FLUSH, L>(&x, &pos, key, &mut tally)
                };
                io.store(at, y);
            }
        }
        // The last values (fewer than SUPER), the very last as a block padded with zeros (which
        // round to zero, uncounted).
        for at in (supers * SUPER..io.len).step_by(L) {
            let pos = next(&mut scaled);
            if at + L <= io.len {
                let y = self.general_block::<MODE, FLUSH, L>(&io.load(at), &pos, key, &mut tally);
                io.store(at, y);
            } else {
                let mut x = [0u32; L];
                for (i, v) in x.iter_mut().enumerate().take(io.len - at) {
                    [*v] = io.load::<1>(at + i);
                }
                let y = self.general_block::<MODE, FLUSH, L>(&x, &pos, key, &mut tally);
                for (i, v) in y.iter().enumerate().take(io.len - at) {
                    io.store(at + i, [*v]);
                }
            }
        }
        tally.counts()
    }

    /// Whether every value of the block is zero, or a normal of the format no larger than its
    /// largest finite value (magnitudes compared as i32: they are below 2^31).
    #[inline(always)]
    fn is_ordinary<const N: usize>(&self, x: &[u32; N]) -> bool {
        let mut odd = 0u32;
        for &bits in x {
            let a = (bits & 0x7fff_ffff) as i32;
            let small = (a > 0) & (a < self.min_normal_bits as i32);
            odd |= u32::from(small | (a > self.max_bits as i32));
        }
        odd == 0
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
        v.wrapping_add(addend) & !self.low_mask
    }

    /// Rounds a magnitude below the format's smallest normal (the bits of an f32): to a
    /// multiple of the smallest subnormal, or with `FLUSH`, to zero or the smallest normal.
    #[inline(always)]
    fn round_small<const MODE: u8, const FLUSH: bool>(&self, a: u32, h: u32) -> u32 {
        if FLUSH {
            // Only a value in the binade just under the smallest normal can round up to it.
            // Where that binade holds f32 subnormals (whose bits have one leading bit fewer),
            // double them first.
            let (b, limit) = if self.emin_b == 1 {
                (a << 1, 0x0100_0000)
            } else {
                (a, self.min_normal_bits)
            };
            if self.round_normal::<MODE>(b, h) >= limit {
                self.min_normal_bits
            } else {
                0
            }
        } else if MODE == NEAREST {
            // Adding and subtracting 2^(emin - man_bits + 23) rounds to a multiple of the
            // smallest subnormal, ties to even.
            ((f32::from_bits(a) + self.magic) - self.magic).to_bits()
        } else {
            // Integer significand `sig`, with the quantum at bit `sh` (a per-lane shift; the
            // exponent of an f32 subnormal counts as 1). Lanes holding normals compute garbage
            // here, not selected.
            let exp = a >> 23;
            let sig = (a & 0x007f_ffff) | if exp > 0 { 0x0080_0000 } else { 0 };
            let sh = self.sh_base.wrapping_sub(exp.max(1));
            // sig < 2^24: a shift by 31 drops it all, as any larger one would.
            let sh_c = sh.min(31);
            let kept = sig >> sh_c;
            let up = if MODE == STOCHASTIC {
                // The dropped bits as a 32-bit fraction of the quantum, truncated (rest
                // 2^(32 - sh) for sh <= 32, sig 2^(32 - sh) floored beyond): up iff it exceeds h.
                let frac = shl(sig, 32u32.wrapping_sub(sh)) | shr(sig, sh.wrapping_sub(32));
                frac > h
            } else {
                // Directed (h is 0 or all ones): up iff inexact and h is 0.
                (h == 0) & (kept << sh_c != sig)
            };
            // At most 2^24: exact as i32 and as f32.
            (((kept + u32::from(up)) as i32) as f32 * self.quantum).to_bits()
        }
    }

    /// The random bits of the value at stream position `lo` with sign bit `sign`, given
    /// `scaled = key.scale(lo)`: drawn in stochastic mode, fixed by the sign in directed modes,
    /// unused for nearest.
    #[inline(always)]
    fn random_bits<const MODE: u8>(&self, scaled: u32, key: BlockKey, sign: u32) -> u32 {
        match MODE {
            STOCHASTIC => mix_scaled(scaled, key),
            DIRECTED => by_sign(sign, self.h_negative, self.h_positive),
            _ => 0,
        }
    }

    /// Rounds a block in which every value is zero or a normal no larger than the largest
    /// finite value: nothing to count, nothing special, so the loop runs at memory speed.
    #[inline(always)]
    fn ordinary_block<const MODE: u8, const L: usize>(
        &self,
        x: &[u32; L],
        scaled: &[u32; L],
        key: BlockKey,
    ) -> [u32; L] {
        let mut y = [0u32; L];
        for ((&bits, &scaled), y) in x.iter().zip(scaled).zip(&mut y) {
            let sign = bits & 0x8000_0000;
            let h = self.random_bits::<MODE>(scaled, key, sign);
            *y = self.round_normal::<MODE>(bits ^ sign, h) | sign;
        }
        y
    }

    /// Rounds any block (positions whose [`BlockKey::scale`] is `scaled`): every lane computes the normal and
    /// the below-normal result and the special values, and selects; what happened is counted
    /// in the lane's counters of `tally`.
    #[inline(always)]
    fn general_block<const MODE: u8, const FLUSH: bool, const L: usize>(
        &self,
        x: &[u32; L],
        scaled: &[u32; L],
        key: BlockKey,
        tally: &mut Tally<L>,
    ) -> [u32; L] {
        let k = self;
        let mut y = [0u32; L];
        for i in 0..L {
            let bits = x[i];
            let sign = bits & 0x8000_0000;
            let a = bits ^ sign;
            let h = k.random_bits::<MODE>(scaled[i], key, sign);
            // Magnitudes compared as i32 (they are below 2^31), one instruction on every
            // vector unit.
            let small = (a as i32) < k.min_normal_bits as i32;
            let r = if small {
                k.round_small::<MODE, FLUSH>(a, h)
            } else {
                k.round_normal::<MODE>(a, h)
            };
            // The rounded bits (as u32: a NaN's may pass 2^31) exceed the largest finite value
            // exactly when the input overflows, is infinite or is NaN: those of an infinity or
            // NaN are at least INF's, those of a value below the smallest normal at most it.
            let special = r > k.max_bits;
            let nan = a > INF;
            let inf = a == INF;
            // Only values below the smallest normal round to zero or below the smallest normal
            // (a normal rounds to at least its truncation, itself at least the smallest normal).
            let under = (r == 0) & (a != 0);
            let sub = (r != 0) & (r < k.min_normal_bits);
            let overflow = if MODE == DIRECTED {
                by_sign(sign, k.overflow_negative, k.overflow_positive)
            } else {
                // Only directed modes round overflows by the sign.
                k.overflow_positive
            };
            // NaN results keep the sign through `nan_keep`.
            let special_bits = if nan {
                (a & k.nan_keep) | k.nan_set
            } else if inf {
                k.infinity_bits
            } else {
                overflow
            };
            y[i] = if special { special_bits } else { r } | sign;
            tally.underflow[i] += u32::from(under);
            tally.subnormal[i] += u32::from(sub);
            tally.special[i] += u32::from(special);
            tally.nan[i] += u32::from(nan);
            tally.infinite[i] += u32::from(inf);
        }
        y
    }
}

/// `negative` where the sign bit `sign` is set, else `positive`, by arithmetic (a select of
/// struct fields by the data can become a load from one of two addresses per lane: a gather).
#[inline(always)]
fn by_sign(sign: u32, negative: u32, positive: u32) -> u32 {
    let mask = ((sign as i32) >> 31) as u32;
    positive ^ ((positive ^ negative) & mask)
}

/// `x << n`, 0 for `n >= 32` (as the vector units' variable shifts do, so that it compiles to
/// one instruction).
#[inline(always)]
fn shl(x: u32, n: u32) -> u32 {
    if n < 32 { x << n } else { 0 }
}

/// `x >> n`, 0 for `n >= 32` (see [`shl`]).
#[inline(always)]
fn shr(x: u32, n: u32) -> u32 {
    if n < 32 { x >> n } else { 0 }
}

/// Values per decision between the count-free loop and the general one.
const SUPER: usize = 64;

/// Per-lane event counters of the general loop, one vector of `L` lanes each (a masked add per
/// event and block). Overflows are not counted apart: they are the special results that are
/// neither NaN nor infinite.
struct Tally<const L: usize> {
    underflow: [u32; L],
    subnormal: [u32; L],
    /// Results that exceed the largest finite value: overflows, infinities and NaNs.
    special: [u32; L],
    nan: [u32; L],
    infinite: [u32; L],
}

impl<const L: usize> Default for Tally<L> {
    fn default() -> Self {
        Tally {
            underflow: [0; L],
            subnormal: [0; L],
            special: [0; L],
            nan: [0; L],
            infinite: [0; L],
        }
    }
}

impl<const L: usize> Tally<L> {
    /// The lanes' sums.
    fn counts(&self) -> RoundCounts {
        let sum = |lanes: &[u32; L]| lanes.iter().map(|&c| u64::from(c)).sum::<u64>();
        let (nan, infinite) = (sum(&self.nan), sum(&self.infinite));
        RoundCounts {
            underflow: sum(&self.underflow),
            subnormal: sum(&self.subnormal),
            overflow: sum(&self.special) - nan - infinite,
            nan,
            infinite,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract the below-normal fraction relies on: shifts by the word size or more give 0
    /// (Rust's own `<<` panics in debug and wraps the count in release).
    #[test]
    fn shifts_past_the_word_give_zero() {
        let x = 0xdead_beefu32;
        for n in [0, 1, 13, 31] {
            assert_eq!(shl(x, n), x << n, "{n}");
            assert_eq!(shr(x, n), x >> n, "{n}");
        }
        for n in [32, 33, 45, 63, 64, 0x8000_0000, u32::MAX] {
            assert_eq!((shl(x, n), shr(x, n)), (0, 0), "{n}");
        }
    }
}
