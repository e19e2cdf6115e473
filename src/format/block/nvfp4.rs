//! NVFP4: blocks of 16 FP4 (E2M1) elements with an E4M3 block scale, under one FP32 scale per
//! tensor, as NVIDIA Transformer Engine quantises them.
//!
//! Read from Transformer Engine's source (github.com/NVIDIA/TransformerEngine at d0067d0, August
//! 2026): the reference quantiser `transformer_engine/pytorch/custom_recipes/reference_nvfp4.py`
//! (`NVFP4QuantizerRef._quantize_blockwise_reference`, 1-D blocks, no random Hadamard
//! transform, no 4over6), the CUDA kernels' scale functions in
//! `transformer_engine/common/cast/nvfp4/core_nvfp4.cuh` (`compute_global_encode_scaling_factor_FP4`,
//! `compute_decoding_scaling_factor`) and `quantize_transpose_nvfp4.cuh` (`block_scale_inverse`),
//! and the dequantisation kernel `dequantize_nvfp4.cuh` (`dequantize_fp4_kernel`). Every step
//! is an f32 operation, in this order:
//!
//! ```text
//! amax_t  = max |x| over the tensor
//! S_enc   = min(448 * 6 / amax_t, FLT_MAX); 1 if amax_t = 0 or S_enc = 0   (tensor encode scale)
//! S_dec   = 1 / S_enc
//! s_b     = e4m3(amax_b * (S_enc * f32(1/6)))   round to nearest even, saturating at 448
//! enc_b   = min(1 / (s_b * S_dec), FLT_MAX)
//! P_i     = e2m1(x_i * enc_b)                   saturating at +-6
//! value_i = P_i * ((s_b * amax_t) * f32(1/2688))                           (the dequantiser)
//! ```
//!
//! Edge cases, as the source has them:
//! - a zero tensor: S_enc = 1 (the kernel; the Python reference takes FLT_MAX), every block
//!   scale 0 and every value zero;
//! - a block scale that rounds to 0 in E4M3 (amax_b * S_enc / 6 below 2^-10, half E4M3's
//!   smallest subnormal): enc_b = FLT_MAX, so the kernel stores saturated elements, which the
//!   zero scale dequantises to zeros; here the block's values become zeros with their signs
//!   directly, and its nonzero values count as underflow;
//! - NaN or infinity in the tensor: amax_t is NaN or infinite, and the dequantiser multiplies
//!   every value by it (NaN, or infinity times elements, NaN for zero elements); here every
//!   value of such a tensor becomes NaN and counts as NaN, as an MX block with a NaN scale does;
//! - a finite amax_t above f32's max over 448 (about 7.6e35): `s_b * amax_t` overflows f32 in
//!   the dequantiser, so a block with scale 448 dequantises the elements that do not round to
//!   zero to infinity and the rest to NaN (`1e36` and `1` in one block give `inf` and `NaN`);
//!   every value of such a block counts as overflow (none as underflow, though some elements
//!   rounded to zero: what leaves the block is not finite).
//!
//! The element rounding follows the [`RoundOptions`](crate::format::RoundOptions) given
//! (Transformer Engine rounds gradients stochastically), always saturating; the block scale is
//! always rounded to nearest even. A value scaled in f32 that vanishes keeps its sign and
//! lowest bit (only its being nonzero matters; see `apply`).

use super::super::{FP8_E4M3, Overflow, RoundOptions, Rounder, Rounding};
use super::Scale;

/// Values per NVFP4 block.
pub const NVFP4_BLOCK: usize = 16;

/// E4M3's largest value times E2M1's, `448 * 6`.
const RANGE: f32 = 2688.0;

/// The per-tensor part of NVFP4's scaling: what every block scale of one tensor derives from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Nvfp4TensorScale {
    amax: f32,
    encode: f32,
    decode: f32,
    e4m3: Rounder,
}

/// The crate's short name for it.
pub(super) type TensorScale = Nvfp4TensorScale;

impl Nvfp4TensorScale {
    /// The tensor scale for a tensor whose largest magnitude is `amax`; `None` if `amax` is
    /// NaN or infinite (the whole tensor becomes NaN).
    #[must_use]
    pub fn new(amax: f32) -> Option<Self> {
        let amax = amax.abs();
        if !amax.is_finite() {
            return None;
        }
        let mut encode = (RANGE / amax).min(f32::MAX);
        if amax == 0.0 || encode == 0.0 {
            encode = 1.0;
        }
        Some(Nvfp4TensorScale {
            amax,
            encode,
            decode: 1.0 / encode,
            e4m3: Rounder::new(
                FP8_E4M3,
                RoundOptions {
                    rounding: Rounding::NearestEven,
                    overflow: Overflow::Saturate,
                    subnormals: true,
                    seed: 0,
                },
            ),
        })
    }

    /// The tensor's largest magnitude.
    #[must_use]
    pub fn amax(&self) -> f32 {
        self.amax
    }

    /// The tensor encode scale `S_enc`.
    #[must_use]
    pub fn encode(&self) -> f32 {
        self.encode
    }

    /// The E4M3 block scale `s_b` of a block whose largest magnitude is `amax_block`.
    #[must_use]
    pub fn block_scale(&self, amax_block: f32) -> f32 {
        let mut s = [self.unrounded(amax_block)];
        self.e4m3.round_f32_slice(&mut s);
        s[0]
    }

    /// `amax_block * (S_enc * f32(1/6))`, the block scale before its rounding to E4M3.
    #[inline(always)]
    fn unrounded(&self, amax_block: f32) -> f32 {
        amax_block * (self.encode * (1.0 / 6.0))
    }

    /// What the block scale of a block with amax bits `amax` does to its values.
    pub(super) fn scale(&self, amax: u32) -> Scale {
        self.scale_of(self.block_scale(f32::from_bits(amax)))
    }

    /// [`Nvfp4TensorScale::scale`] of every block amax (bits) of `amaxes`: their E4M3 block
    /// scales rounded in one call of the element kernel (the same bits as one by one).
    pub(super) fn block_scales(&self, amaxes: Vec<u32>) -> Vec<Scale> {
        let mut s: Vec<f32> = amaxes
            .into_iter()
            .map(|a| self.unrounded(f32::from_bits(a)))
            .collect();
        self.e4m3.round_f32_slice(&mut s);
        s.into_iter().map(|s| self.scale_of(s)).collect()
    }

    /// What the E4M3 block scale `s` does to its block's values.
    #[inline(always)]
    fn scale_of(&self, s: f32) -> Scale {
        if s == 0.0 {
            return Scale::Zero;
        }
        Scale::Mul {
            down: (1.0 / (s * self.decode)).min(f32::MAX),
            up: (s * self.amax) * (1.0 / RANGE),
        }
    }
}
