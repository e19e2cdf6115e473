//! The fp8 scales: each tensor's delayed scale ([`DelayedScale`], Transformer Engine's rule) and
//! the scaled rounding into an 8-bit format that uses it.

use std::collections::BTreeMap;

use crate::format::{RoundCounts, Rounder};
use crate::recipe::SiteKey;
use crate::scaling::delayed::{DelayedScale, Fp8Scaling};
use crate::train::real::Real;

/// The delayed scale of every tensor cast to fp8 with scaling, by storage point and tensor name.
#[derive(Debug, Default)]
pub(super) struct Fp8Scales {
    scales: BTreeMap<(SiteKey, &'static str), DelayedScale>,
}

impl Fp8Scales {
    /// Rounds `xs` (tensor `tensor` at storage point `key`) with `rounder`'s 8-bit format and the
    /// tensor's delayed scale, `round(x * scale) / scale`, from position `start` of the
    /// stochastic stream. With `record`, the values' amax (NaN ignored, as CUDA's `fmaxf` does)
    /// joins the step's amax; an evaluation pass uses the scale but leaves the history to
    /// training.
    pub(super) fn round<T: Real>(
        &mut self,
        rounder: &Rounder,
        key: SiteKey,
        tensor: &'static str,
        xs: &mut [T],
        start: u64,
        record: bool,
    ) -> RoundCounts {
        let max = rounder.format().max() as f32;
        let meta = self
            .scales
            .entry((key, tensor))
            .or_insert_with(|| DelayedScale::new(max));
        let amax_now = xs
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs().to_f64() as f32));
        if record {
            meta.observe(amax_now);
        }
        let scale = meta.scale();
        let (s, inv) = (T::of(f64::from(scale)), T::of(f64::from(1.0 / scale)));
        xs.iter_mut().for_each(|v| *v *= s);
        let counts = T::round_slice_at(rounder, xs, start);
        xs.iter_mut().for_each(|v| *v *= inv);
        counts
    }

    /// Ends a step: each tensor's [`DelayedScale::end_step`] under the scaling its layer's recipe
    /// sets (`scaling(layer)`; none leaves the tensor as it is).
    pub(super) fn end_step(&mut self, scaling: impl Fn(usize) -> Option<Fp8Scaling>) {
        for ((key, _), meta) in &mut self.scales {
            if let Some(scaling) = scaling(key.layer) {
                meta.end_step(&scaling);
            }
        }
    }

    /// The scale of tensor `tensor` at `key` and its amax history, oldest first.
    pub(super) fn get(&self, key: SiteKey, tensor: &'static str) -> Option<(f32, Vec<f32>)> {
        self.scales
            .get(&(key, tensor))
            .map(|m| (m.scale(), m.history().collect()))
    }

    /// The tensors with a scale: storage point and tensor name.
    pub(super) fn tensors(&self) -> impl Iterator<Item = (SiteKey, &'static str)> + '_ {
        self.scales.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FP8_E4M3, RoundOptions};
    use crate::recipe::Class;

    /// E4M3's max is 448: a step with amax 2 gives the next step scale 448 / 2 = 224. At scale 1,
    /// 0.01 rounds to the subnormal 5 * 2^-9; at scale 224 it rounds as 2.24 does, to 2.25 (a
    /// step of 0.25 in [2, 4)), and comes back as 2.25 / 224.
    #[test]
    fn a_tensor_uses_scale_one_then_the_scale_of_its_history() {
        let r = Rounder::new(FP8_E4M3, RoundOptions::default());
        let key = SiteKey::new(0, Class::Activation, "");
        let mut s = Fp8Scales::default();
        let mut xs = [2.0f32, 0.01];
        s.round(&r, key, "weight", &mut xs, 0, true);
        assert_eq!(xs, [2.0, 0.009765625]);
        let every = |_| Some(Fp8Scaling::default());
        s.end_step(every);
        assert_eq!(s.get(key, "weight"), Some((224.0, vec![2.0])));
        let mut xs = [0.01f32];
        s.round(&r, key, "weight", &mut xs, 0, true);
        assert_eq!(xs, [2.25f32 * (1.0 / 224.0)]);
        // Another tensor of the same storage point has its own scale.
        assert_eq!(s.get(key, "bias"), None);
        assert_eq!(s.tensors().collect::<Vec<_>>(), [(key, "weight")]);
    }

    #[test]
    fn unrecorded_rounds_and_unscaled_layers_leave_the_history() {
        let r = Rounder::new(FP8_E4M3, RoundOptions::default());
        let key = SiteKey::new(3, Class::Weight, "");
        let mut s = Fp8Scales::default();
        s.round(&r, key, "", &mut [8.0f32], 0, false);
        s.end_step(|_| Some(Fp8Scaling::default()));
        assert_eq!(s.get(key, ""), Some((1.0, vec![])));
        s.round(&r, key, "", &mut [8.0f32], 0, true);
        s.end_step(|layer| (layer != 3).then(Fp8Scaling::default));
        assert_eq!(s.get(key, ""), Some((1.0, vec![])));
        s.end_step(|_| Some(Fp8Scaling::default()));
        assert_eq!(s.get(key, ""), Some((56.0, vec![8.0])));
    }
}
