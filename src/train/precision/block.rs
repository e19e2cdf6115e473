//! Block-scaled operand casts: a matrix product's operand rounded to a block format (MXFP8,
//! NVFP4), one scale per block of values along the product's reduction axis, from the tensor
//! being cast (no amax history).
//!
//! Transformer Engine quantises a tensor for a block-scaled GEMM along the axis the GEMM sums
//! over, so a tensor read by two products is quantised once for each, from its high-precision
//! values (`MXFP8BlockScaling` and `NVFP4BlockScaling` in
//! `transformer_engine/common/recipe/__init__.py`: "when Transformer Engine needs both the
//! tensor and its transpose (e.g. to calculate both forward and backward pass), during the
//! quantization both versions are computed from the high precision input to avoid double
//! quantization errors"). TE calls the copy with blocks along a row of the (rows, cols) tensor
//! its "rowwise" usage (1x32 blocks, scales of shape `[rows, cols / 32]`) and the one with blocks
//! down a column its "columnwise" usage (32x1 blocks, `[rows / 32, cols]`;
//! `MXFP8Quantizer.get_scale_shape` in `transformer_engine/pytorch/tensor/mxfp8_tensor.py`).
//! Its Linear (`transformer_engine/pytorch/module/linear.py`) asks for:
//!
//! ```text
//! forward  Y  = X Wᵀ   X rowwise (blocks along in-features), W rowwise (along in-features)
//! dgrad    dX = dY W   dY rowwise (along out-features),   W columnwise (along out-features)
//! wgrad    dW = dYᵀ X  dY columnwise (along the batch),   X columnwise (along the batch)
//! ```
//!
//! (the input quantizer's `columnwise=backward_needs_input`, the weight's
//! `columnwise=columnwise_usage` when grad is enabled, `weight_fp8.update_usage(columnwise_usage=
//! True)` before dgrad, `inputmat_total.update_usage(columnwise_usage=True)` and
//! `grad_output.update_usage(columnwise_usage=True)` before wgrad). Here the layers ask
//! [`Precision::operand`] for each product's operand with the axis it sums over; a block cast
//! runs along that axis, so under a block recipe a Linear's weight is cast twice per step (rows
//! for forward, columns for dgrad), its input twice (rows, then columns for wgrad) and its output
//! gradient twice (columns for wgrad, rows for dgrad). A per-tensor cast does not depend on the
//! axis, and is made once and reused as before.
//!
//! Each block cast is a store of its class: counted ([`crate::recipe::StoreCounts::stored`] counts the
//! values of every cast, so a weight's values twice a step), its counts per element relative to
//! its block (as the block rounder defines them), captured before rounding on capture steps (a
//! tensor cast twice is observed twice) and checked for inf/NaN before rounding (an MX block
//! holding one becomes NaN throughout, as its scale does, and an NVFP4 tensor holding one
//! becomes NaN throughout, as its tensor scale does; what is counted as non-finite is the values
//! that were so before the cast).
//!
//! Where this differs from TE:
//! - TE requires both sides of a quantised tensor to be multiples of 32 (`MXFP8Quantizer`'s
//!   `is_quantizable`); the models here are small, so a row's last block may be shorter, with its
//!   own scale (as the block rounder rounds a row).
//! - TE's `MXFP8BlockScaling` defaults to `Format.E4M3` for every tensor; the `mxfp8` preset
//!   uses E5M2 for the output gradient (`Format.HYBRID`), as issue 13 asks.
//! - The stochastic-rounding stream (a recipe with `"rounding": "stochastic"`) numbers a
//!   column-wise cast's values in the transposed (column-major) order.
//! - NVFP4: TE's `NVFP4BlockScaling` quantises weights in 2-D blocks of 16x16 sharing one
//!   scale (`fp4_quant_fwd_weight`'s `fp4_2d_quantization`), so that the weight's row-wise and
//!   column-wise copies hold the same values; here the weight has 1-D blocks of 16 along each
//!   product's sum like the other operands (so its two casts differ), because the format layer's
//!   NVFP4 is 1-D. TE applies a random Hadamard transform (16x16) to the column-wise copies of
//!   the input and the output gradient, for the weight-gradient product ("RHT is currently only
//!   applied to column-wise usage so that it can be used for wgrad GEMM"); it is left out. TE
//!   rounds gradients stochastically (`fp4_quant_bwd_grad`); the `nvfp4` preset casts the
//!   output gradient to BF16 (issue 13), so this does not arise. Each NVFP4 cast takes its
//!   FP32 tensor scale from the amax of the tensor it casts (without the transform, the
//!   row-wise and column-wise amaxes are the same).
//! - Tiles (`fp8-e4m3@1x128`, `fp8-e4m3@128x128`, DeepSeek-V3's) may be given to any operand in
//!   a recipe file: a tile's `C` side runs along the product's sum, its `R` side across it.
//!
//! The block formats and their rounding are the format layer's ([`crate::format`]): this module
//! only says which values form a block.

use ndarray::{Array2, ArrayView2, Axis};

use super::Precision;
use crate::format::{BlockRounder, RoundCounts, RoundOptions};
use crate::recipe::Class;
use crate::train::real::Real;

/// The block formats an operand may be cast to.
pub use crate::format::BlockFormat;

/// The block rounder of one operand class: the one place the training core rounds blocks.
#[derive(Clone, Copy, Debug)]
pub(super) struct BlockCast(BlockRounder);

impl BlockCast {
    /// A cast to `format` whose elements round with `options` (they saturate whatever its
    /// overflow rule says).
    pub(super) fn new(format: BlockFormat, options: RoundOptions) -> Self {
        BlockCast(BlockRounder::new(format, options))
    }

    /// Rounds the row-major matrix `xs` of `cols` columns in place, blocks along each row; `xs[i]`
    /// is position `start + i` of the stochastic stream.
    pub(super) fn round<T: Real>(&self, xs: &mut [T], cols: usize, start: u64) -> RoundCounts {
        T::round_blocks_at(&self.0, xs, cols, start)
    }
}

impl Precision {
    /// Whether operand class `class` is cast to a block format, so that its cast depends on the
    /// product it feeds (the axis its blocks run along): a layer then keeps the tensor as stored
    /// and casts it for each product ([`Precision::block_operand`]), where a per-tensor cast is
    /// made once and kept.
    #[must_use]
    pub fn casts_per_product(&self, class: Class) -> bool {
        self.here().block(class).is_some()
    }

    /// The cast of `x` for a product that sums over its axis `reduce` when operand class `class`
    /// is block-scaled (see [`Precision::operand`]); `None` otherwise: with a per-tensor format
    /// the caller reuses the cast it made for an earlier product, and with FP32 there is none.
    pub fn block_operand<T: Real>(
        &mut self,
        class: Class,
        tensor: &'static str,
        x: ArrayView2<'_, T>,
        reduce: Axis,
    ) -> Option<Array2<T>> {
        if !self.casts_per_product(class) {
            return None;
        }
        self.operand(class, tensor, x, reduce)
    }

    /// A copy of `x` rounded by class `class`'s block cast with blocks along axis `reduce`,
    /// stored as a store of that class (see the module docs).
    pub(super) fn store_blocks<T: Real>(
        &mut self,
        class: Class,
        x: ArrayView2<'_, T>,
        reduce: Axis,
    ) -> Array2<T> {
        #[cfg(test)]
        self.block_casts
            .push((class, self.cursor.tensor(), x.dim(), reduce.index()));
        if reduce == Axis(1) {
            let mut copy = x.as_standard_layout().into_owned();
            let cols = copy.ncols();
            self.store_shaped(class, copy.as_slice_mut().unwrap_or(&mut []), cols);
            copy
        } else {
            // Blocks down the columns: round the transpose row by row.
            let mut t = x.t().as_standard_layout().into_owned();
            let cols = t.ncols();
            self.store_shaped(class, t.as_slice_mut().unwrap_or(&mut []), cols);
            t.t().as_standard_layout().into_owned()
        }
    }
}
