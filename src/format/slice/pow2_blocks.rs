//! Rounding blocks whose scale is a power of two (MX's E8M0) in one pass, with the element
//! kernel's exponent range shifted instead of the values scaled.
//!
//! For a block with scale `2^e`, rounding `x * 2^-e` into the element format and scaling back
//! by `2^e` gives what rounding `x` into the element format with its exponent range shifted by
//! `e` gives (the same mantissa bits; the smallest normal, the largest finite value and the
//! smallest subnormal times `2^e`), as long as the shifted format stays inside f32's range:
//!
//! ```text
//! emin + e >= -126 (f32's smallest normal),   emax + e <= 127,   emin - man_bits + 23 + e <= 127
//! ```
//!
//! (the last for the nearest mode's `magic` constant: blocks with an amax of
//! `2^(105 + emax - emin + man_bits)` or more, `2^122` for E4M3, are not fused).
//!
//! Under that condition the kernel's steps commute with the scaling bit for bit, in every mode
//! and with the same random bits (the stream position of a value does not change):
//! - normal values (`round_normal`) work on the bit pattern, which scaling by `2^e` only moves
//!   by `e` in the exponent field while both stay f32 normals;
//! - values below the element's smallest normal round to multiples of its smallest subnormal
//!   (`round_small`): the `magic` addition is exact up to the same scaling (both sums are f32
//!   normals), the integer path compares the same fraction of a quantum with the same random
//!   bits (an f32 subnormal input's significand is the scaled value's shifted by as many bits
//!   as its quantum's position moves), and flushing compares with the shifted smallest normal
//!   (f32's own smallest normal where the shifted emin is -126: the kernel's doubling case);
//! - the one place the unfused path is not exact, a scaled value that fell into f32's
//!   subnormals or vanished (kept nonzero by `sticky`), is a value below `2^-126`, at least
//!   `2^-109` of the element's smallest subnormal (`2^-17` for E5M2): there both paths round
//!   to zero (nearest, stochastic: the fraction's top 32 bits are zero) or to the smallest
//!   subnormal (directed away from zero), and count it the same;
//! - results, multiples of `2^(emin + e - man_bits) >= 2^-149`, are f32 values exactly, as the
//!   unfused path's products by `2^e` are.
//!
//! Blocks outside the condition (tiny amax, the NaN scale) go through the caller's unfused
//! path, as does a chunk that crosses a boundary of the stochastic stream's key (every 2^32
//! positions: rare). All-zero blocks stay as they are, which is what rounding does to zeros
//! in every mode.

use std::ops::Add;

use super::super::random::BlockKey;
use super::super::round::Rounder;
use super::{DIRECTED, Kernel, KernelPath, NEAREST, RoundCounts, STOCHASTIC, Tally};
use crate::isa::Isa;

impl Rounder {
    /// Rounds `xs` in place in blocks of `B` values from its start (the last may be shorter),
    /// as positions `start..` of the stream, each block as if scaled by `2^-e`, rounded and
    /// scaled back, where `e = exponent(amax)` for the bits `amax` of the block's largest
    /// magnitude: in one pass (see the module docs). Blocks for which `exponent` gives `None`,
    /// or an `e` that takes the shifted format out of f32's range, are rounded by `other(block,
    /// position of its first value)`, whose counts are added.
    ///
    /// `path` picks the kernel's instruction set as for [`Rounder::round_f32_slice_via`];
    /// [`KernelPath::Scalar`] sends every block through `other` (the unfused twin, for tests).
    pub(crate) fn round_f32_pow2_blocks_at<const B: usize, E, O>(
        &self,
        path: KernelPath,
        xs: &mut [f32],
        start: u64,
        exponent: E,
        mut other: O,
    ) -> RoundCounts
    where
        E: Fn(u32) -> Option<i32>,
        O: FnMut(&mut [f32], u64) -> RoundCounts,
    {
        let kernel = Kernel::new(self);
        // The random key changes every 2^32 positions; a chunk crossing that boundary is rare.
        let crosses =
            kernel.mode == STOCHASTIC && (start & 0xffff_ffff) + xs.len() as u64 > 1u64 << 32;
        if path == KernelPath::Scalar || crosses {
            return xs
                .chunks_mut(B)
                .enumerate()
                .map(|(b, block)| other(block, start + (b * B) as u64))
                .fold(RoundCounts::default(), Add::add);
        }
        let key = BlockKey::new(self.options().seed, start >> 32);
        match path.isa() {
            // SAFETY: an `Isa` other than Baseline comes from run-time detection of its features.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe {
                kernel.pow2_avx512::<B>(xs, start, key, &exponent, &mut other)
            },
            // SAFETY: as above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { kernel.pow2_avx2::<B>(xs, start, key, &exponent, &mut other) },
            _ => kernel.pow2_run::<8, B>(xs, start, key, &exponent, &mut other),
        }
    }
}

impl Kernel {
    /// Whether the format shifted by `e` (scale `2^e`) stays where [`Kernel::shifted`] is
    /// exact: its smallest normal an f32 normal, its largest finite value and the nearest
    /// mode's `magic` (`2^(emin - man_bits + 23)`, above the largest finite value of formats
    /// with few exponent bits) below f32's infinity, and `2^e` itself an f32 normal.
    #[inline(always)]
    fn shift_fits(&self, e: i32) -> bool {
        let top = (self.max_bits.max(self.magic.to_bits()) >> 23) as i32;
        (-126..=127).contains(&e) && self.emin_b as i32 + e >= 1 && top + e <= 254
    }

    /// The kernel of the format with its exponent range shifted by `e` (see the module docs);
    /// only where [`Kernel::shift_fits`].
    #[inline(always)]
    fn shifted(&self, e: i32) -> Kernel {
        let d = (e << 23) as u32;
        // Overflow and infinity results that are the largest finite value move with it;
        // infinities and NaNs do not.
        let with_max = |b: u32| {
            if b == self.max_bits {
                b.wrapping_add(d)
            } else {
                b
            }
        };
        Kernel {
            min_normal_bits: self.min_normal_bits.wrapping_add(d),
            max_bits: self.max_bits.wrapping_add(d),
            emin_b: self.emin_b.wrapping_add(e as u32),
            sh_base: self.sh_base.wrapping_add(e as u32),
            magic: f32::from_bits(self.magic.to_bits().wrapping_add(d)),
            // 2^e is an f32 normal; the product, a power of two >= 2^-149, is exact.
            quantum: self.quantum * f32::from_bits(((e + 127) as u32) << 23),
            overflow_positive: with_max(self.overflow_positive),
            overflow_negative: with_max(self.overflow_negative),
            infinity_bits: with_max(self.infinity_bits),
            ..*self
        }
    }

    isa_builds! {
        pow2_avx2, pow2_avx512 =>
        /// Picks the loop for the mode and the subnormal setting (as [`Kernel::run`] does).
        fn pow2_run<const L: usize, const B: usize>(
            &self,
            xs: &mut [f32],
            start: u64,
            key: BlockKey,
            exponent: &impl Fn(u32) -> Option<i32>,
            other: &mut impl FnMut(&mut [f32], u64) -> RoundCounts,
        ) -> RoundCounts {
            by_mode!(self.pow2_mode::<_, _, L, B, _, _>(xs, start, key, exponent, other))
        }
    }

    /// The loop over blocks (see [`Kernel::pow2_block`]); whole blocks as arrays, so that
    /// their loads and stores (inlined) are whole vectors, then the shorter last one.
    #[inline(always)]
    fn pow2_mode<const MODE: u8, const FLUSH: bool, const L: usize, const B: usize, E, O>(
        &self,
        xs: &mut [f32],
        start: u64,
        key: BlockKey,
        exponent: &E,
        other: &mut O,
    ) -> RoundCounts
    where
        E: Fn(u32) -> Option<i32>,
        O: FnMut(&mut [f32], u64) -> RoundCounts,
    {
        // Per-lane u32 counters: each general-loop call adds at most one per lane.
        debug_assert!(xs.len() / L <= u32::MAX as usize);
        let lo = start as u32;
        let mut c = Tally::<L>::default();
        let mut rest = RoundCounts::default();
        let (whole, last) = xs.as_chunks_mut::<B>();
        for (b, block) in whole.iter_mut().enumerate() {
            let at = b * B;
            if !self.pow2_block::<MODE, FLUSH, L, B, E>(block, lo, at, key, exponent, &mut c) {
                rest += other(block, start + at as u64);
            }
        }
        let at = whole.len() * B;
        if !last.is_empty()
            && !self.pow2_block::<MODE, FLUSH, L, B, E>(last, lo, at, key, exponent, &mut c)
        {
            rest += other(last, start + at as u64);
        }
        c.counts() + rest
    }

    /// One block of at most `B` values at offset `at` (positions `lo + at..`): its amax, its
    /// exponent, then the shifted kernel's count-free loop where every value is zero or a
    /// normal of the shifted format, its general loop (counting in `c`) where not. Returns
    /// whether the block was fused; one that is not stays as it is, as does an all-zero block.
    #[inline(always)]
    fn pow2_block<const MODE: u8, const FLUSH: bool, const L: usize, const B: usize, E>(
        &self,
        block: &mut [f32],
        lo: u32,
        at: usize,
        key: BlockKey,
        exponent: &E,
        c: &mut Tally<L>,
    ) -> bool
    where
        E: Fn(u32) -> Option<i32>,
    {
        const { assert!(B.is_multiple_of(L)) };
        // Element-wise copies of fixed length (`array::map` is not inlined here, and its
        // narrow stores read back as vectors stalled store forwarding: 28% of the time); a
        // shorter last block is padded with zeros, which round to zero uncounted.
        let mut x = [0u32; B];
        for (v, y) in x.iter_mut().zip(block.iter()) {
            *v = y.to_bits();
        }
        let amax = x.iter().fold(0, |m, &v| m.max(v & 0x7fff_ffff));
        if amax == 0 {
            return true;
        }
        let Some(e) = exponent(amax).filter(|&e| self.shift_fits(e)) else {
            return false;
        };
        let k = self.shifted(e);
        // The positions as the kernel takes them (see `BlockKey::scale`).
        let pos: [u32; B] = std::array::from_fn(|j| key.scale(lo.wrapping_add((at + j) as u32)));
        // The count-free loop on the whole block as one array: called per `L` values, its
        // calls were vectorised across each other (lane j of every call in one 128-bit
        // register, gathered by inserts and shuffles), 2.5x slower.
        let y = if k.is_ordinary(&x) {
            k.ordinary_block::<MODE, B>(&x, &pos, key)
        } else {
            let mut y = [0u32; B];
            let (xl, _) = x.as_chunks::<L>();
            let (pl, _) = pos.as_chunks::<L>();
            let (yl, _) = y.as_chunks_mut::<L>();
            for ((xi, pi), yi) in xl.iter().zip(pl).zip(yl) {
                *yi = k.general_block::<MODE, FLUSH, L>(xi, pi, key, c);
            }
            y
        };
        for (d, v) in block.iter_mut().zip(y) {
            *d = f32::from_bits(v);
        }
        true
    }
}
