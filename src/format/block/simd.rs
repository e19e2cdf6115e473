//! MX's scaling passes without allocation, blocks of a fixed 32 values (so that each block's
//! amax and scaling vectorise) and one scale per block kept in an array on the stack.
//!
//! Compiled for the baseline target only: the same loops compiled for AVX-512 (with run-time
//! dispatch, as the element kernels are) measured slower on a Zen 4, 31 ms against 21.6 ms for
//! MXFP8 on 16M values (reports/perf/quantize.md), so they were left out.
//!
//! The generic loops of `apply` ([`Scale::down`](super::apply) and `up`) are the twin: the
//! test below checks that both give the same bits, and tests/format_block.rs checks the
//! result against the OCP specification.

use super::apply::Scale;
use super::mx::{MX_BLOCK, MxFormat};

/// Scales each block of 32 of `chunk` (from its start; the last may be shorter) down by its
/// scale, writing the factor that scales it back to `ups` (one per block). A block with the NaN
/// scale becomes NaN.
///
/// # Panics
/// If `ups` has fewer entries than `chunk` has blocks.
pub(super) fn down(format: &MxFormat, chunk: &mut [f32], ups: &mut [f32]) {
    assert!(ups.len() >= chunk.len().div_ceil(MX_BLOCK));
    down_body(format, chunk, ups);
}

/// Multiplies each block of 32 of `chunk` by its factor in `ups`.
pub(super) fn up(chunk: &mut [f32], ups: &[f32]) {
    up_body(chunk, ups);
}

#[inline(always)]
fn down_body(format: &MxFormat, chunk: &mut [f32], ups: &mut [f32]) {
    let whole = chunk.len() / MX_BLOCK * MX_BLOCK;
    let (blocks, last) = chunk.split_at_mut(whole);
    // Fixed-length blocks, so that the amax and the scaling vectorise.
    for (block, up) in blocks.chunks_exact_mut(MX_BLOCK).zip(ups.iter_mut()) {
        *up = down_block(format, block);
    }
    if !last.is_empty() {
        ups[whole / MX_BLOCK] = down_block(format, last);
    }
}

/// One block: its scale from its amax, the block scaled down in place; returns the factor
/// back (NaN for the NaN scale, which also makes the block NaN).
#[inline(always)]
fn down_block(format: &MxFormat, block: &mut [f32]) -> f32 {
    let scale = format.scale(super::apply::amax_bits(block));
    scale.down(block);
    match scale {
        Scale::Mul { up, .. } => up,
        _ => f32::NAN,
    }
}

#[inline(always)]
fn up_body(chunk: &mut [f32], ups: &[f32]) {
    let whole = chunk.len() / MX_BLOCK * MX_BLOCK;
    let (blocks, last) = chunk.split_at_mut(whole);
    for (block, &up) in blocks.chunks_exact_mut(MX_BLOCK).zip(ups) {
        block.iter_mut().for_each(|x| *x *= up);
    }
    if let Some(&up) = ups.get(whole / MX_BLOCK) {
        last.iter_mut().for_each(|x| *x *= up);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::MX_PRESETS;

    /// Awkward blocks: zeros, NaN, infinity, f32 subnormals, huge values, powers of two and
    /// their neighbours, a short last block.
    fn awkward() -> Vec<f32> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut xs: Vec<f32> = (0..32 * 40 + 7)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let block = i / 32;
                let magnitude = 2f32.powi((block * 13) % 250 - 140);
                let v = f32::from_bits(
                    (magnitude.to_bits() & 0xff80_0000) | (state as u32 & 0x007f_ffff),
                );
                if state & 1 == 0 { v } else { -v }
            })
            .collect();
        xs[32 * 3..32 * 4].fill(0.0);
        xs[32 * 5 + 9] = f32::NAN;
        xs[32 * 6] = f32::NEG_INFINITY;
        xs[32 * 7 + 1] = f32::MAX;
        xs[32 * 8 + 2] = 1.0;
        xs[32 * 9 + 3] = f32::from_bits(1);
        xs
    }

    /// The fixed-block loops give the bits of the generic loops.
    #[test]
    fn paths_agree_with_the_generic_loops() {
        let xs = awkward();
        for (_, format) in MX_PRESETS {
            let mut want = xs.clone();
            let scales: Vec<Scale> = want
                .chunks(MX_BLOCK)
                .map(|b| format.scale(super::super::apply::amax_bits(b)))
                .collect();
            for (b, s) in want.chunks_mut(MX_BLOCK).zip(&scales) {
                s.down(b);
            }
            let scaled = want.clone();
            for (b, s) in want.chunks_mut(MX_BLOCK).zip(&scales) {
                s.up(b);
            }
            let mut got = xs.clone();
            let mut ups = vec![0f32; xs.len().div_ceil(MX_BLOCK)];
            down(&format, &mut got, &mut ups);
            let same = |a: &[f32], b: &[f32]| {
                a.iter()
                    .zip(b)
                    .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
            };
            assert!(same(&got, &scaled), "{format}: scaled down");
            up(&mut got, &ups);
            assert!(same(&got, &want), "{format}: scaled back");
        }
    }
}
