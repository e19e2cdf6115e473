//! Rounding block-scaled values in one pass: each block's values scaled into the element
//! format's range, rounded by the element kernel and scaled back while they sit in registers.
//!
//! The steps are those of scaling a whole block in memory, rounding it with the slice kernel
//! and scaling it back, value for value (the same f32 operations, the same stream positions,
//! the same kernel functions), so the bits and counts are the same; only the passes over
//! memory go. A scaled value that vanished keeps its sign and lowest bit ([`sticky`]).
//!
//! Blocks whose scale the loop does not take ([`Scale::Zero`], [`Scale::Nan`], and a
//! [`Scale::Mul`] whose `up` is infinite, which turns zeros into NaN) go through the caller's
//! unfused path, as does a chunk that crosses a boundary of the stochastic stream's key (every
//! 2^32 positions: rare).

use std::ops::Add;

use super::super::random::BlockKey;
use super::super::round::Rounder;
use super::{DIRECTED, Kernel, KernelPath, NEAREST, RoundCounts, STOCHASTIC, Tally};
use crate::isa::Isa;

/// What a block's scale does to its values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scale {
    /// Elements round from `x * down` (in f32); the value is `element * up`.
    Mul {
        /// The encode factor.
        down: f32,
        /// The decode factor.
        up: f32,
    },
    /// Elements round from `x / s` (in f32); the value is `element * s`.
    Div(f32),
    /// Every value becomes a zero with its sign (an NVFP4 block scale that rounded to zero);
    /// nonzero values count as underflow.
    Zero,
    /// Every value becomes NaN (and counts as NaN).
    Nan,
}

/// `y`, the f32 result of scaling `x`, except that a nonzero `x` whose scaled value vanished
/// keeps its sign and the lowest bit: far below every element's smallest subnormal, only its
/// being nonzero matters to the rounding (directed modes move it to the smallest subnormal) and
/// to the counts (an underflow).
#[inline(always)]
pub(crate) fn sticky(x: f32, y: f32) -> f32 {
    let y = y.to_bits();
    let vanished = (x.to_bits() << 1 != 0) & (y << 1 == 0);
    f32::from_bits(y | u32::from(vanished))
}

impl Rounder {
    /// Rounds `xs` in place in blocks of `c` values from its start (the last may be shorter),
    /// as positions `start..` of the stream, block `i` scaled by `scales[i]`: each value
    /// scaled into the element format's range, rounded and scaled back, in one pass (see the
    /// module docs). Blocks this loop does not take are rounded by `other(block, scale,
    /// position of its first value)`, whose counts are added.
    ///
    /// `S` is the values per decision between the kernel's count-free loop and its general
    /// one (within a block; a whole number of vectors). `path` picks the kernel's instruction
    /// set as for [`Rounder::round_f32_slice_via`]; [`KernelPath::Scalar`] sends every block
    /// through `other` (the unfused twin, for tests).
    ///
    /// # Panics
    /// If `scales` has fewer than one scale per block.
    pub(crate) fn round_f32_scaled_blocks_at<const S: usize>(
        &self,
        path: KernelPath,
        xs: &mut [f32],
        c: usize,
        scales: &[Scale],
        start: u64,
        mut other: impl FnMut(&mut [f32], Scale, u64) -> RoundCounts,
    ) -> RoundCounts {
        assert!(scales.len() >= xs.len().div_ceil(c), "a scale per block");
        let kernel = Kernel::new(self);
        // The random key changes every 2^32 positions; a chunk crossing that boundary is rare.
        let crosses =
            kernel.mode == STOCHASTIC && (start & 0xffff_ffff) + xs.len() as u64 > 1u64 << 32;
        if path == KernelPath::Scalar || crosses {
            return xs
                .chunks_mut(c)
                .zip(scales)
                .enumerate()
                .map(|(b, (block, &s))| other(block, s, start + (b * c) as u64))
                .fold(RoundCounts::default(), Add::add);
        }
        let key = BlockKey::new(self.options().seed, start >> 32);
        let job = Blocks {
            xs,
            c,
            scales,
            start,
            key,
        };
        match path.isa() {
            // SAFETY: an `Isa` other than Baseline comes from run-time detection of its features.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { kernel.scaled_avx512::<S>(job, &mut other) },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { kernel.scaled_avx2::<S>(job, &mut other) },
            _ => kernel.scaled_run::<8, S>(job, &mut other),
        }
    }
}

/// The arguments of one call of the fused loop.
struct Blocks<'a> {
    xs: &'a mut [f32],
    /// Values per block.
    c: usize,
    scales: &'a [Scale],
    start: u64,
    key: BlockKey,
}

impl Kernel {
    isa_builds! {
        scaled_avx2, scaled_avx512 =>
        /// Picks the loop for the mode and the subnormal setting (as [`Kernel::run`] does).
        fn scaled_run<const L: usize, const S: usize>(
            &self,
            job: Blocks<'_>,
            other: &mut impl FnMut(&mut [f32], Scale, u64) -> RoundCounts,
        ) -> RoundCounts {
            by_mode!(self.scaled_mode::<_, _, L, S>(job, other))
        }
    }

    /// The loop over blocks (see [`Kernel::scaled_block`]).
    #[inline(always)]
    fn scaled_mode<const MODE: u8, const FLUSH: bool, const L: usize, const S: usize>(
        &self,
        job: Blocks<'_>,
        other: &mut impl FnMut(&mut [f32], Scale, u64) -> RoundCounts,
    ) -> RoundCounts {
        let Blocks {
            xs,
            c,
            scales,
            start,
            key,
        } = job;
        // Per-lane u32 counters: each segment adds at most one per lane.
        debug_assert!(xs.len() / L <= u32::MAX as usize);
        let mut tally = Tally::<L>::default();
        let mut rest = RoundCounts::default();
        for (b, (block, &scale)) in xs.chunks_mut(c).zip(scales).enumerate() {
            let at = b * c;
            let lo = (start as u32).wrapping_add(at as u32);
            let t = &mut tally;
            match scale {
                Scale::Mul { down, up } if up.is_finite() => {
                    self.scaled_block::<MODE, FLUSH, L, S>(
                        block,
                        lo,
                        key,
                        |x| x * down,
                        |r| r * up,
                        t,
                    );
                }
                Scale::Div(s) => {
                    self.scaled_block::<MODE, FLUSH, L, S>(block, lo, key, |x| x / s, |r| r * s, t);
                }
                _ => rest += other(block, scale, start + at as u64),
            }
        }
        tally.counts() + rest
    }

    /// Rounds one block, positions `lo..`, in segments of `S` values (see
    /// [`Kernel::scaled_segment`]); a shorter last segment is padded with zeros, which scale
    /// and round to zeros, uncounted.
    #[inline(always)]
    fn scaled_block<const MODE: u8, const FLUSH: bool, const L: usize, const S: usize>(
        &self,
        block: &mut [f32],
        lo: u32,
        key: BlockKey,
        down: impl Fn(f32) -> f32,
        up: impl Fn(f32) -> f32,
        tally: &mut Tally<L>,
    ) {
        let (whole, last) = block.as_chunks_mut::<S>();
        let mut at = lo;
        for seg in whole {
            self.scaled_segment::<MODE, FLUSH, L, S>(seg, at, key, &down, &up, tally);
            at = at.wrapping_add(S as u32);
        }
        if !last.is_empty() {
            let mut seg = [0f32; S];
            seg[..last.len()].copy_from_slice(last);
            self.scaled_segment::<MODE, FLUSH, L, S>(&mut seg, at, key, &down, &up, tally);
            last.copy_from_slice(&seg[..last.len()]);
        }
    }

    /// Rounds `S` values of one block, positions `lo..`: each scaled by `down` (kept nonzero
    /// by [`sticky`]), rounded (the count-free loop if every scaled value is zero or a normal
    /// of the format, the general loop counting in `tally` if not) and scaled back by `up`.
    /// Fixed-length arrays throughout, so that loads and stores are whole vectors (narrow
    /// stores read back as vectors stall store forwarding).
    #[inline(always)]
    fn scaled_segment<const MODE: u8, const FLUSH: bool, const L: usize, const S: usize>(
        &self,
        seg: &mut [f32; S],
        lo: u32,
        key: BlockKey,
        down: &impl Fn(f32) -> f32,
        up: &impl Fn(f32) -> f32,
        tally: &mut Tally<L>,
    ) {
        const { assert!(S.is_multiple_of(L)) };
        let mut x = [0u32; S];
        for (v, &y) in x.iter_mut().zip(seg.iter()) {
            *v = sticky(y, down(y)).to_bits();
        }
        let mut y = [0u32; S];
        // The positions of sub-block `i` as the kernel takes them (see `BlockKey::scale`).
        let pos = |i: usize| -> [u32; L] {
            std::array::from_fn(|j| key.scale(lo.wrapping_add((i * L + j) as u32)))
        };
        let (xl, _) = x.as_chunks::<L>();
        let (yl, _) = y.as_chunks_mut::<L>();
        if self.is_ordinary(&x) {
            for (i, (xi, yi)) in xl.iter().zip(yl).enumerate() {
                *yi = self.ordinary_block::<MODE, L>(xi, &pos(i), key);
            }
        } else {
            for (i, (xi, yi)) in xl.iter().zip(yl).enumerate() {
                *yi = self.general_block::<MODE, FLUSH, L>(xi, &pos(i), key, tally);
            }
        }
        for (d, v) in seg.iter_mut().zip(y) {
            *d = up(f32::from_bits(v));
        }
    }
}
