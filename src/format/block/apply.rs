//! The loops every block scheme shares: find each block's amax, scale the block down, round the
//! elements with the element format's kernel, scale back.
//!
//! A matrix is row-major with `cols` columns (its last row may be shorter: the end of a
//! stream); a block covers `R` rows by `C` columns of it (MX
//! and NVFP4: 1 x 32 and 1 x 16), starting at column 0 of each band of `R` rows, so the last
//! block of a row (and the last band of a matrix) may be smaller. Where `R = 1` and `C` divides
//! `cols`, the blocks of consecutive rows line up, and the matrix is one long row.
//!
//! The element rounding is the element format's slice kernel on the scaled values in place, so
//! `xs[i]` keeps position `start + i` of the stochastic stream whatever the block shape, and its
//! counts are per element, relative to its block.
//!
//! The scaling is fused with the element rounding. MX skips it: its scales are powers of two,
//! so each block is rounded by the element kernel with its exponent range shifted by the
//! block's scale exponent (same bits; `format::slice::pow2_blocks` says why). NVFP4 and tiles
//! are scaled, rounded and scaled back while in registers (`format::slice::scaled_blocks`),
//! the same f32 operations as the passes of [`apply`]. [`apply`] rounds the blocks neither
//! loop takes (MX blocks whose shifted range leaves f32's, zero and NaN scales, NVFP4's
//! dequantiser overflowing f32) and is both loops' twin in the tests.

use std::ops::Add;

use rayon::prelude::*;

use super::super::slice::sticky;
use super::super::{KernelPath, RoundCounts, Rounder};
use super::{NVFP4_BLOCK, Plan, Scale};

/// Values per unit of work (rounded to whole blocks): scaled, rounded and scaled back while
/// they sit in the L1/L2 cache, and the unit of parallel work.
const CHUNK: usize = 4096;

/// Values per parallel task (whole chunks, rows or bands; at least one). A matrix of at most
/// this many values is rounded on the calling thread even where all threads are asked for, as
/// the element kernel rounds one of at most its `PAR_CHUNK` (`format::slice`): handing chunks
/// to the pool and waiting for them (from a thread outside it, a wake-up) cost 5-6 us a call
/// on a 2-core Xeon, a quarter of the time MXFP8 takes on 64K values.
pub(super) const PAR_TASK: usize = 1 << 16;

/// The bits of the largest magnitude in `block` (0 if empty): for non-negative floats integer
/// order is value order, and NaN and infinity sort above every finite value.
#[inline(always)]
pub(super) fn amax_bits(block: &[f32]) -> u32 {
    block
        .iter()
        .fold(0, |m, x| m.max(x.to_bits() & 0x7fff_ffff))
}

/// The amax bits of each block of `C` values of `chunk` (the last may be shorter), whole
/// blocks as arrays so that each is a few vector instructions.
#[inline(always)]
fn block_amaxes<const C: usize>(chunk: &[f32]) -> Vec<u32> {
    let (whole, last) = chunk.as_chunks::<C>();
    let mut amaxes = vec![0; chunk.len().div_ceil(C)];
    for (a, b) in amaxes.iter_mut().zip(whole) {
        let mut m = [0u32; C];
        for (m, x) in m.iter_mut().zip(b) {
            *m = x.to_bits() & 0x7fff_ffff;
        }
        *a = m.into_iter().fold(0, u32::max);
    }
    if !last.is_empty() {
        amaxes[whole.len()] = amax_bits(last);
    }
    amaxes
}

crate::isa::isa_dispatch! {
    /// [`amax_bits`] through the `isa` build: a tensor's amax (NVFP4's tensor scale), a pass
    /// over the whole tensor that the baseline build does in SSE2 (no unsigned max: five
    /// instructions a vector).
    pub(super) fn amax_bits_with<>(xs: &[f32]) -> u32 = |_isa| amax_bits(xs)
}

crate::isa::isa_dispatch! {
    /// [`block_amaxes`] of NVFP4's blocks of 16 through the `isa` build.
    pub(super) fn nvfp4_amaxes_with<>(chunk: &[f32]) -> Vec<u32> =
        |_isa| block_amaxes::<NVFP4_BLOCK>(chunk)
}

/// The same for f64 values, whose amax is rounded to f32 (scales are computed in f32).
fn amax_bits_f64(block: &[f64]) -> u32 {
    block
        .iter()
        .map(|x| (x.abs() as f32).to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0)
}

/// Checks the matrix shape (its last row may be shorter).
///
/// # Panics
/// If `cols` is 0 for a nonempty matrix.
fn check_shape(len: usize, cols: usize) {
    assert!(
        len == 0 || cols > 0,
        "a matrix of {len} values cannot have 0 columns"
    );
}

/// Sums `f(i, item)` over `items` of `len` values each, on all threads (tasks of about
/// [`PAR_TASK`] values) or one; the same result either way.
fn sum<T, F>(parallel: bool, items: Vec<T>, len: usize, f: F) -> RoundCounts
where
    T: Send,
    F: Fn(usize, T) -> RoundCounts + Sync + Send,
{
    if parallel {
        items
            .into_par_iter()
            .with_min_len((PAR_TASK / len.max(1)).max(1))
            .enumerate()
            .map(|(i, t)| f(i, t))
            .reduce(RoundCounts::default, Add::add)
    } else {
        items
            .into_iter()
            .enumerate()
            .map(|(i, t)| f(i, t))
            .fold(RoundCounts::default(), Add::add)
    }
}

/// Values per unit of work for blocks `c` wide: whole blocks, about [`CHUNK`].
fn chunk_len(c: usize) -> usize {
    c * (CHUNK / c).max(1)
}

/// Rounds the row-major matrix `xs` with `cols` columns in place; `xs[i]` is position
/// `start + i` of the stochastic stream.
pub(super) fn round_f32(
    plan: &Plan,
    element: &Rounder,
    xs: &mut [f32],
    cols: usize,
    start: u64,
    parallel: bool,
) -> RoundCounts {
    round_f32_via(KernelPath::Auto, plan, element, xs, cols, start, parallel)
}

/// [`round_f32`] through a chosen kernel; [`KernelPath::Scalar`] takes the unfused passes of
/// [`apply`] for every block (the fused loop's twin, for tests).
fn round_f32_via(
    path: KernelPath,
    plan: &Plan,
    element: &Rounder,
    xs: &mut [f32],
    cols: usize,
    start: u64,
    parallel: bool,
) -> RoundCounts {
    check_shape(xs.len(), cols);
    if xs.is_empty() {
        return RoundCounts::default();
    }
    let parallel = parallel && xs.len() > PAR_TASK;
    let (r, c) = plan.shape();
    let chunk = chunk_len(c);
    if r == 1 {
        let row_len = if cols.is_multiple_of(c) {
            xs.len()
        } else {
            cols
        };
        let rows: Vec<&mut [f32]> = xs.chunks_mut(row_len).collect();
        return sum(parallel, rows, row_len, |i, row| {
            let row_start = start + (i * row_len) as u64;
            let chunks: Vec<&mut [f32]> = row.chunks_mut(chunk).collect();
            sum(parallel, chunks, chunk, |k, ch| {
                let pos = row_start + (k * chunk) as u64;
                if let Some(counts) = plan.fused_mx(path, element, ch, pos) {
                    return counts;
                }
                fused(path, element, ch, &plan.block_scales(ch), c, pos)
            })
        });
    }
    let bands: Vec<&mut [f32]> = xs.chunks_mut(r * cols).collect();
    sum(parallel, bands, r * cols, |b, band| {
        let scales = band_scales(plan, band, cols, c, amax_bits);
        let rows: Vec<&mut [f32]> = band.chunks_mut(cols).collect();
        sum(parallel, rows, cols, |i, row| {
            let row_start = start + ((b * r + i) * cols) as u64;
            row.chunks_mut(chunk)
                .enumerate()
                .map(|(k, ch)| {
                    let first = k * chunk / c;
                    let pos = row_start + (k * chunk) as u64;
                    fused(path, element, ch, &scales[first..], c, pos)
                })
                .fold(RoundCounts::default(), Add::add)
        })
    })
}

/// The scale of each block of a band of rows (one per `c` columns).
fn band_scales<T>(
    plan: &Plan,
    band: &[T],
    cols: usize,
    c: usize,
    amax: fn(&[T]) -> u32,
) -> Vec<Scale> {
    let mut top = vec![0u32; cols.div_ceil(c)];
    for row in band.chunks(cols) {
        for (a, seg) in top.iter_mut().zip(row.chunks(c)) {
            *a = (*a).max(amax(seg));
        }
    }
    top.into_iter().map(|a| plan.scale(a)).collect()
}

/// Rounds the blocks of `chunk` (`c` wide, from its start; the last may be shorter) with
/// their `scales` as positions `pos..`, in one pass where the fused loop takes the block's
/// scale, by [`apply`] where not. The fused loop chooses between the element kernel's loops
/// per 32 values, or per 16 for blocks of 16 (NVFP4) and widths that are not multiples of 32.
fn fused(
    path: KernelPath,
    element: &Rounder,
    chunk: &mut [f32],
    scales: &[Scale],
    c: usize,
    pos: u64,
) -> RoundCounts {
    let other = |block: &mut [f32], s: Scale, at: u64| apply(element, block, s, at);
    if c.is_multiple_of(32) {
        element.round_f32_scaled_blocks_at::<32>(path, chunk, c, scales, pos, other)
    } else {
        element.round_f32_scaled_blocks_at::<16>(path, chunk, c, scales, pos, other)
    }
}

/// Scales one block down by `scale`, rounds it with the element kernel as positions `pos..`,
/// and scales it back. A block whose scale back overflows f32 (NVFP4's dequantiser) leaves as
/// infinities and NaNs: every value of it counts as overflowing, whatever its element did.
pub(super) fn apply(element: &Rounder, block: &mut [f32], scale: Scale, pos: u64) -> RoundCounts {
    let zeroed = scale.down(block);
    let mut counts = element.round_f32_slice_at(block, pos);
    scale.up(block);
    if scale.overflows() {
        return RoundCounts {
            overflow: block.len() as u64,
            ..RoundCounts::default()
        };
    }
    counts.underflow += zeroed;
    counts
}

impl Scale {
    /// Whether scaling back overflows f32 (NVFP4's `s_b * amax_t` beyond f32's max): every
    /// value of the block leaves as an infinity, or a NaN where its element is zero.
    #[inline(always)]
    fn overflows(&self) -> bool {
        matches!(*self, Scale::Mul { up, .. } if up.is_infinite())
    }

    /// Scales a block down to the element format's range; returns how many nonzero values a
    /// [`Scale::Zero`] made zero.
    #[inline(always)]
    pub(super) fn down(&self, block: &mut [f32]) -> u64 {
        match *self {
            Scale::Mul { down, .. } => block.iter_mut().for_each(|x| *x = sticky(*x, *x * down)),
            Scale::Div(s) => block.iter_mut().for_each(|x| *x = sticky(*x, *x / s)),
            Scale::Zero => {
                let nonzero = block.iter().filter(|x| **x != 0.0).count() as u64;
                block
                    .iter_mut()
                    .for_each(|x| *x = f32::from_bits(x.to_bits() & 0x8000_0000));
                return nonzero;
            }
            Scale::Nan => block.fill(f32::NAN),
        }
        0
    }

    /// Scales rounded elements back to values.
    #[inline(always)]
    pub(super) fn up(&self, block: &mut [f32]) {
        match *self {
            // An infinite `up` (NVFP4's dequantiser overflowing f32) makes zero elements NaN:
            // the library's NaN, not the hardware's default one (negative on x86, positive on
            // Arm), so that the bits are the same on every machine.
            Scale::Mul { up, .. } if up.is_infinite() => block
                .iter_mut()
                .for_each(|x| *x = if *x == 0.0 { f32::NAN } else { *x * up }),
            Scale::Mul { up, .. } => block.iter_mut().for_each(|x| *x *= up),
            Scale::Div(s) => block.iter_mut().for_each(|x| *x *= s),
            Scale::Zero | Scale::Nan => {}
        }
    }

    /// One f64 value at stream position `pos`: the same steps in f64 arithmetic.
    fn round_f64(&self, element: &Rounder, x: &mut f64, pos: u64, counts: &mut RoundCounts) {
        let (q, up) = match *self {
            Scale::Mul { down, up } => (*x * f64::from(down), f64::from(up)),
            Scale::Div(s) => (*x / f64::from(s), f64::from(s)),
            Scale::Zero => {
                if *x != 0.0 {
                    counts.underflow += 1;
                }
                *x = 0f64.copysign(*x);
                return;
            }
            Scale::Nan => {
                *x = f64::NAN;
                counts.nan += 1;
                return;
            }
        };
        let (p, event) = element.round_at(q, pos);
        if self.overflows() {
            counts.overflow += 1; // as `apply` counts it
        } else {
            counts.record(event);
        }
        // As in `up`: zero times an infinite scale is the library's NaN on every machine.
        *x = if p == 0.0 && up.is_infinite() {
            f64::NAN
        } else {
            p * up
        };
    }
}

/// [`round_f32`] for f64 values: each block's scale from its amax rounded to f32, computed as
/// for f32 values; the scaling and the element rounding in f64 (the element rounded once,
/// exactly, from the f64 quotient or product).
pub(super) fn round_f64(
    plan: &Plan,
    element: &Rounder,
    xs: &mut [f64],
    cols: usize,
    start: u64,
) -> RoundCounts {
    check_shape(xs.len(), cols);
    let mut counts = RoundCounts::default();
    if xs.is_empty() {
        return counts;
    }
    let (r, c) = plan.shape();
    for (b, band) in xs.chunks_mut(r * cols).enumerate() {
        let scales = band_scales(plan, band, cols, c, amax_bits_f64);
        for (i, row) in band.chunks_mut(cols).enumerate() {
            let row_start = start + ((b * r + i) * cols) as u64;
            for (t, (seg, s)) in row.chunks_mut(c).zip(&scales).enumerate() {
                for (j, x) in seg.iter_mut().enumerate() {
                    s.round_f64(element, x, row_start + (t * c + j) as u64, &mut counts);
                }
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::super::{Nvfp4TensorScale, TileFormat};
    use super::*;
    use crate::format::{FP8_E4M3, MX_PRESETS, Overflow, RoundOptions, Rounding};

    /// Blocks of every magnitude (their amax from f32 subnormals to near f32's max, values
    /// spread 40 binades below it), zeros, NaN, infinity, f32's max, and a short last block.
    fn awkward() -> Vec<f32> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut xs: Vec<f32> = (0..32 * 300 + 7)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let block = i / 32;
                let below = (state >> 40) as i32 % 40;
                let magnitude = 2f32.powi((block * 13) % 277 - 150 - below);
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

    /// The plans the fused loop serves: every MX format, NVFP4 under tensor scales that give
    /// ordinary blocks, zero block scales (a small tensor amax) and a dequantiser that
    /// overflows f32 (a huge one), and tiles of one row and of several (band scales), as wide
    /// as a vector and not.
    fn plans(xs: &[f32]) -> Vec<(Plan, usize)> {
        let finite = xs
            .iter()
            .filter(|x| x.is_finite())
            .map(|x| x.abs())
            .fold(0.0, f32::max);
        let mut plans: Vec<(Plan, usize)> = MX_PRESETS
            .iter()
            .map(|(_, f)| (Plan::Mx(*f), xs.len()))
            .collect();
        for amax in [finite, 1.0, 1e-30, 3e38] {
            let t = Nvfp4TensorScale::new(amax).unwrap();
            plans.push((Plan::Nvfp4(t), xs.len()));
            plans.push((Plan::Nvfp4(t), 16 * 7 + 5));
        }
        for (r, c, cols) in [(1, 128, xs.len()), (1, 3, 100), (2, 32, 96), (3, 40, 130)] {
            plans.push((Plan::Tile(TileFormat::preset(FP8_E4M3, r, c)), cols));
        }
        plans
    }

    /// The fused loop, on every instruction set, gives the bits and counts of the scaled
    /// passes (every block scaled down, rounded, scaled back) for every plan, in every mode,
    /// subnormals on and off, at positions that start mid-block, and across a boundary of the
    /// random key.
    #[test]
    fn fused_blocks_agree_with_the_scaled_passes() {
        let xs = awkward();
        for (plan, cols) in plans(&xs) {
            let element_format = match plan {
                Plan::Mx(f) => f.element(),
                Plan::Nvfp4(_) => crate::format::FP4_E2M1,
                Plan::Tile(t) => t.element(),
            };
            for rounding in Rounding::ALL {
                for subnormals in [true, false] {
                    let o = RoundOptions {
                        rounding,
                        overflow: Overflow::Saturate,
                        subnormals,
                        seed: 5,
                    };
                    let element = Rounder::new(element_format, o);
                    for start in [0, 3, (1 << 32) - 100, (1 << 32) + 7] {
                        let round = |path| {
                            let mut got = xs.clone();
                            let counts =
                                round_f32_via(path, &plan, &element, &mut got, cols, start, false);
                            (got, counts)
                        };
                        let (want, want_counts) = round(KernelPath::Scalar);
                        for path in [KernelPath::Auto, KernelPath::Avx2, KernelPath::Portable] {
                            let (got, counts) = round(path);
                            let what = format!("{plan:?} cols {cols} {o:?} start {start} {path:?}");
                            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                                assert_eq!(
                                    g.to_bits(),
                                    w.to_bits(),
                                    "{what}: x[{i}] = {:e}: got {g:e}, want {w:e}",
                                    xs[i]
                                );
                            }
                            assert_eq!(counts, want_counts, "{what}: counts");
                        }
                    }
                }
            }
        }
    }
}
