//! Tensor range statistics: log2-magnitude histograms, loss-scale sweeps and loss-scale
//! recommendations.
//!
//! - [`Histogram`]: one bin per binary exponent (optionally split into sub-bins), built in one pass
//!   from the bit patterns, mergeable and compact when serialized.
//! - [`Sweep`]: for a format and a range of loss scales `2^k`, how many values of a tensor
//!   underflow, become subnormal, stay normal or overflow, with the share of the squared norm
//!   lost and the relative rounding error, exact and in one pass whatever the number of scales.
//! - [`recommend()`]: the loss-scale window that keeps the overflow and underflow of a set of
//!   tensors within bounds, or a plain explanation of why none exists.
//! - [`seeds`]: statistics over seeds (a mean with its Student t interval, Welch's t-test).
//!
//! ```
//! use mixprec::format::FP16;
//! use mixprec::stats::{Histogram, SweepAccumulator};
//!
//! let grads = [1e-9_f32, 3e-6, 2e-3, 0.5];
//! let mut h = Histogram::new(0);
//! h.add_f32(&grads);
//! assert_eq!(h.count(), 4);
//! assert_eq!(h.amax(), 0.5);
//!
//! let mut acc = SweepAccumulator::new(FP16);
//! acc.add_f32(&grads);
//! let sweep = acc.sweep(0..=16);
//! // At scale 1, 1e-9 underflows in fp16; at 2^16 nothing underflows and nothing overflows.
//! assert_eq!(sweep.rows[0].underflow, 1);
//! assert_eq!(sweep.rows[16].underflow, 0);
//! assert_eq!(sweep.rows[16].overflow, 0);
//! ```

mod histogram;
pub mod recommend;
pub mod seeds;
pub mod sweep;

pub use histogram::{Bin, Histogram, MAX_SUB_BINS_LOG2};
pub use recommend::{Alternative, Recommendation, explain, recommend};
#[doc(hidden)]
pub use sweep::SweepPath;
pub use sweep::{Sweep, SweepAccumulator, SweepRow, sweep_from_histogram};

/// Values per fixed-size chunk: floating-point sums are accumulated per chunk (relative to the
/// start of the slice given) and combined in chunk order, so that results do not depend on how
/// the work is split across threads.
pub const CHUNK: usize = 1 << 14;

/// Chunks per rayon task (64K values: a tensor of a million values makes 16 tasks).
const CHUNKS_PER_TASK: usize = 1;

/// Deterministic awkward values for the tests: random bit patterns, random magnitudes over a wide
/// range, and the specials.
#[cfg(test)]
pub(crate) mod testdata {
    /// splitmix64: a tiny seeded generator, enough for test data.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in [0, 1).
        pub fn uniform(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// `n` f32 values: a third raw bit patterns (all classes), a third log-uniform magnitudes
    /// between 2^-150 and 2^129 with random signs, a third specials and edges.
    pub fn awkward_f32(seed: u64, n: usize) -> Vec<f32> {
        let specials = [
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            -f32::MAX,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x007f_ffff),
            1.0,
            0.5,
            1.5,
            65504.0,
            65520.0,
            464.0,
            448.0,
            2f32.powi(-24),
            2f32.powi(-25),
            2f32.powi(-14),
        ];
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| match i % 3 {
                0 => f32::from_bits(rng.next_u64() as u32),
                1 => {
                    let e = rng.uniform() * 279.0 - 150.0;
                    let v = 2f64.powf(e) as f32;
                    if rng.next_u64() & 1 == 1 { -v } else { v }
                }
                _ => specials[(rng.next_u64() % specials.len() as u64) as usize],
            })
            .collect()
    }
}
