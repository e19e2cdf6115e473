//! The per-tensor tallies of a block analysis: each scheme's rounding counts, squared norms and
//! binades of block amax over |x|, summed a segment at a time in a fixed order (the same result
//! whatever the thread count), and each tensor's amax.

use super::*;
use crate::format::Rounder;
use crate::format::{NVFP4_BLOCK, Overflow, RoundCounts, RoundOptions};
use crate::io::Values;
use crate::stats::Histogram;

/// Running sums of one scheme over some values.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sums {
    pub(super) values: u64,
    pub(super) zeros: u64,
    pub(super) finite_nonzero: u64,
    pub(super) nonfinite: u64,
    pub(super) blocks: u64,
    pub(super) counts: RoundCounts,
    pub(super) sum_sq: f64,
    pub(super) sum_sq_lost: f64,
    pub(super) sum_sq_err: f64,
    pub(super) sum_sq_kept: f64,
}

impl Sums {
    pub(super) fn merge(&mut self, o: &Sums) {
        self.values += o.values;
        self.zeros += o.zeros;
        self.finite_nonzero += o.finite_nonzero;
        self.nonfinite += o.nonfinite;
        self.blocks += o.blocks;
        self.counts += o.counts;
        self.sum_sq += o.sum_sq;
        self.sum_sq_lost += o.sum_sq_lost;
        self.sum_sq_err += o.sum_sq_err;
        self.sum_sq_kept += o.sum_sq_kept;
    }
}

/// What the first pass learns of a tensor ([`tensor_amaxes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TensorAmax {
    /// The largest finite magnitude: per-tensor scaling's amax.
    pub finite: f32,
    /// The largest magnitude's bits, NaN and infinity included (above every finite value):
    /// NVFP4's tensor amax, as its rounder takes it.
    pub bits: u32,
}

impl TensorAmax {
    /// Adds the values of `xs`.
    #[must_use]
    pub fn with(self, xs: &[f32]) -> Self {
        xs.iter().fold(self, |a, x| TensorAmax {
            finite: if x.is_finite() {
                a.finite.max(x.abs())
            } else {
                a.finite
            },
            bits: a.bits.max(x.to_bits() & 0x7fff_ffff),
        })
    }

    /// Adds `values` (f64 narrowed to f32 first, as the schemes see them; `narrow` is scratch).
    #[must_use]
    pub fn with_values(self, values: Values<'_>, narrow: &mut Vec<f32>) -> Self {
        match values {
            Values::F32(xs) => self.with(xs),
            Values::F64(xs) => {
                narrow.clear();
                narrow.extend(xs.iter().map(|&x| x as f32));
                self.with(narrow)
            }
        }
    }
}

/// One scheme's state on one tensor: the segment being filled, scratch buffers, the sums.
#[derive(Clone, Debug)]
pub(super) struct SchemeAcc {
    pub(super) rounder: SchemeRounder,
    /// Rows x columns of a block (per tensor: 1 x 1, the amax being the tensor's).
    pub(super) block: (usize, usize),
    /// Rows per segment when blocks span rows (then segments are whole rows), else 1.
    pub(super) unit_rows: usize,
    /// Values per segment when `unit_rows` is 1 (a multiple of the block's width).
    pub(super) segment: usize,
    pub(super) cols: usize,
    pub(super) tensor_amax: TensorAmax,
    pub(super) buf: Vec<f32>,
    /// The tensor position of `buf[0]`.
    pub(super) done: u64,
    pub(super) q: Vec<f32>,
    pub(super) num: Vec<f32>,
    pub(super) den: Vec<f32>,
    pub(super) sums: Sums,
    pub(super) hist: Histogram,
}

impl SchemeAcc {
    pub(super) fn new(scheme: Scheme, rows: usize, cols: usize, tensor_amax: TensorAmax) -> Self {
        let options = RoundOptions::default();
        let (rounder, block) = match scheme {
            Scheme::PerTensor(f) => {
                let r = Rounder::new(
                    f,
                    RoundOptions {
                        overflow: Overflow::Saturate,
                        ..options
                    },
                );
                let scale = (f64::from(tensor_amax.finite) / f.max()) as f32;
                // A tensor without a finite nonzero value has nothing to scale.
                let scale = if scale > 0.0 && scale.is_finite() {
                    scale
                } else {
                    1.0
                };
                (SchemeRounder::PerTensor(r, scale), (1, 1))
            }
            Scheme::Block(BlockFormat::Nvfp4) => (
                SchemeRounder::Nvfp4 {
                    rounder: BlockRounder::new(BlockFormat::Nvfp4, options),
                    tensor_amax: f32::from_bits(tensor_amax.bits),
                },
                BlockFormat::Nvfp4.block_shape(),
            ),
            Scheme::Block(b) => (
                SchemeRounder::Block(BlockRounder::new(b, options)),
                b.block_shape(),
            ),
        };
        let unit_rows = block.0.min(rows).max(1);
        let width = block.1.max(1);
        SchemeAcc {
            rounder,
            block,
            unit_rows,
            segment: (SEGMENT / width).max(1) * width,
            cols,
            tensor_amax,
            buf: Vec::new(),
            done: 0,
            q: Vec::new(),
            num: Vec::new(),
            den: Vec::new(),
            sums: Sums::default(),
            hist: Histogram::new(SUB_BINS_LOG2),
        }
    }

    /// Takes the values of `xs`, rounding each segment as it fills.
    pub(super) fn add(&mut self, mut xs: &[f32]) {
        if self.cols == 0 {
            return;
        }
        while !xs.is_empty() {
            let room = if self.unit_rows > 1 {
                self.unit_rows * self.cols - self.buf.len()
            } else {
                // Up to the segment's length or the end of the row, whichever comes first.
                let in_row = (self.done as usize + self.buf.len()) % self.cols;
                (self.segment - self.buf.len()).min(self.cols - in_row)
            };
            let n = room.min(xs.len());
            self.buf.extend_from_slice(&xs[..n]);
            xs = &xs[n..];
            if n == room {
                self.flush();
            }
        }
    }

    /// Rounds the segment in `buf` and adds what happened to the sums.
    pub(super) fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let len = self.buf.len();
        // A segment is whole rows when blocks span rows, else one run of whole blocks (the
        // last of a row may be short) starting at a block boundary: one row of its own.
        let seg_cols = if self.unit_rows > 1 { self.cols } else { len };
        self.q.clear();
        self.q.extend_from_slice(&self.buf);
        let counts = match self.rounder {
            SchemeRounder::Block(r) => r.par_round_matrix_at(&mut self.q, seg_cols, self.done),
            SchemeRounder::Nvfp4 {
                rounder,
                tensor_amax,
            } => rounder.par_round_part_at(&mut self.q, seg_cols, self.done, tensor_amax),
            SchemeRounder::PerTensor(r, scale) => {
                for y in &mut self.q {
                    let x = y.to_bits();
                    let d = (*y / scale).to_bits();
                    // A value divided below f32's range keeps its lowest bit, so that it still
                    // counts as a nonzero that underflows.
                    let vanished = (x << 1 != 0) & (d << 1 == 0);
                    *y = f32::from_bits(d | u32::from(vanished));
                }
                let c = r.round_f32_slice_at(&mut self.q, self.done);
                self.q.iter_mut().for_each(|y| *y *= scale);
                c
            }
        };
        self.block_amaxes(seg_cols);
        self.hist.par_add_ratios_f32(&self.num, &self.den);
        let s = &mut self.sums;
        s.counts += counts;
        s.values += len as u64;
        for (&x, &y) in self.buf.iter().zip(&self.q) {
            if !x.is_finite() {
                s.nonfinite += 1;
                continue;
            }
            let (x, y) = (f64::from(x), f64::from(y));
            s.sum_sq += x * x;
            if x == 0.0 {
                s.zeros += 1;
                continue;
            }
            s.finite_nonzero += 1;
            if y == 0.0 {
                s.sum_sq_lost += x * x;
            }
            if y.is_finite() {
                s.sum_sq_err += (y - x) * (y - x);
                s.sum_sq_kept += x * x;
            }
        }
        self.done += len as u64;
        self.buf.clear();
    }

    /// Fills `num` with each value's block amax and `den` with the value, or 0 where the ratio
    /// is meaningless (a nonfinite value, or any value of a block holding one).
    pub(super) fn block_amaxes(&mut self, seg_cols: usize) {
        let len = self.buf.len();
        self.num.clear();
        self.num.resize(len, 0.0);
        self.den.clear();
        self.den.resize(len, 0.0);
        if let SchemeRounder::Nvfp4 { tensor_amax, .. } = self.rounder
            && !tensor_amax.is_finite()
        {
            // A NaN or an infinity anywhere makes the whole tensor NaN.
            self.sums.blocks += len.div_ceil(NVFP4_BLOCK) as u64;
            return;
        }
        if let SchemeRounder::PerTensor(..) = self.rounder {
            for ((n, d), &x) in self.num.iter_mut().zip(&mut self.den).zip(&self.buf) {
                *n = self.tensor_amax.finite;
                *d = if x.is_finite() { x } else { 0.0 };
            }
            self.sums.blocks = 1;
            return;
        }
        let (br, bc) = (self.block.0.max(1), self.block.1.max(1));
        let rows = len / seg_cols;
        for r0 in (0..rows).step_by(br) {
            let r1 = (r0 + br).min(rows);
            for c0 in (0..seg_cols).step_by(bc) {
                let c1 = (c0 + bc).min(seg_cols);
                let mut amax = 0u32;
                for r in r0..r1 {
                    for &x in &self.buf[r * seg_cols + c0..r * seg_cols + c1] {
                        amax = amax.max(x.to_bits() & 0x7fff_ffff);
                    }
                }
                self.sums.blocks += 1;
                if amax >= 0x7f80_0000 {
                    continue;
                }
                let amax = f32::from_bits(amax);
                for r in r0..r1 {
                    let at = r * seg_cols;
                    self.num[at + c0..at + c1].fill(amax);
                    self.den[at + c0..at + c1].copy_from_slice(&self.buf[at + c0..at + c1]);
                }
            }
        }
    }
}
