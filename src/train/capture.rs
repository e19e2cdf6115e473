//! What a capture step sees: per storage point, the histogram of the values before rounding; per
//! layer, the update-to-weight ratios (swamping). The records written from it are in
//! [`crate::run::schema`].

use std::collections::BTreeMap;

use super::real::Real;
use crate::recipe::SiteKey;
use crate::stats::Histogram;

pub use crate::run::CAPTURE_SUB_BINS_LOG2;

/// Sees every stored tensor before rounding on capture steps (installed in
/// [`super::precision::Precision`] for those steps only), and the update-to-weight ratios.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    /// Per storage point (layer index, class, part): log2 histogram of the FP32 values before
    /// rounding.
    pub values: BTreeMap<SiteKey, Histogram>,
    /// Per layer index: histogram of `|w| / |update|` over the nonzero updates of that step
    /// (`w` the master weight before the update; 0 when the weight is 0). An update is lost in
    /// a format with `p` mantissa bits when the ratio exceeds about `2^(p+1)` (2^11 in fp16).
    pub update_ratios: BTreeMap<usize, Histogram>,
}

/// What the histogram of one observed tensor tells about it, so that the store need not read it
/// again for the same facts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seen {
    /// Its infinite and NaN values.
    pub nonfinite: u64,
    /// Its largest finite magnitude (0 when it has none), where the histogram shows it: always
    /// when the storage point had no histogram yet; otherwise only when the tensor raised the
    /// histogram's largest magnitude (`None`: not known).
    pub amax: Option<f64>,
}

impl Observer {
    /// Adds `xs`, stored at storage point `key`, and returns what its histogram shows of it.
    pub fn observe<T: Real>(&mut self, key: SiteKey, xs: &[T]) -> Seen {
        let h = self
            .values
            .entry(key)
            .or_insert_with(|| Histogram::new(CAPTURE_SUB_BINS_LOG2));
        // An empty histogram has no count and amax 0, so "no histogram yet" and "an empty one"
        // read alike: amax 0 before, and the tensor's amax is the histogram's after.
        let (count, nonfinite, amax) = (h.count(), h.nonfinite(), h.amax());
        T::add_to_histogram(h, xs);
        Seen {
            nonfinite: h.nonfinite() - nonfinite,
            amax: (count == 0 || h.amax() > amax).then(|| h.amax()),
        }
    }

    /// Adds the ratios `|w| / |u|` of layer `layer` for every nonzero `u` (computed in f64, so no
    /// ratio overflows).
    pub fn observe_updates<T: Real>(&mut self, layer: usize, weights: &[T], updates: &[T]) {
        T::add_ratios_to_histogram(
            self.update_ratios
                .entry(layer)
                .or_insert_with(|| Histogram::new(CAPTURE_SUB_BINS_LOG2)),
            weights,
            updates,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::Class;

    #[test]
    fn observer_histograms_values_and_update_ratios() {
        let mut o = Observer::default();
        let first = o.observe(
            SiteKey::new(0, Class::Activation, ""),
            &[0.0f32, 1e-3, -4.0, f32::NAN, f32::INFINITY],
        );
        assert_eq!(
            first,
            Seen {
                nonfinite: 2,
                amax: Some(4.0)
            }
        );
        // Below the largest magnitude so far: not known from the histogram.
        let second = o.observe(SiteKey::new(0, Class::Activation, ""), &[2.0f32]);
        assert_eq!(
            second,
            Seen {
                nonfinite: 0,
                amax: None
            }
        );
        let third = o.observe(SiteKey::new(0, Class::Activation, ""), &[-8.0f32, f32::NAN]);
        assert_eq!(
            third,
            Seen {
                nonfinite: 1,
                amax: Some(8.0)
            }
        );
        // Nothing but zeros and NaN: amax 0, read off a fresh histogram.
        let only_nan = o.observe(SiteKey::new(1, Class::Activation, ""), &[0.0f32, f32::NAN]);
        assert_eq!(
            only_nan,
            Seen {
                nonfinite: 1,
                amax: Some(0.0)
            }
        );
        let h = &o.values[&SiteKey::new(0, Class::Activation, "")];
        assert_eq!((h.count(), h.zeros(), h.nonfinite()), (8, 1, 3));
        assert_eq!(h.amax(), 8.0);
        assert_eq!(h.min_nonzero(), Some(f64::from(1e-3f32)));
        // Ratios 1/2^-12 = 2^12 and 0/1 = 0; the zero update is left out.
        o.observe_updates(3, &[1.0f32, 0.0, 5.0], &[2f32.powi(-12), 1.0, 0.0]);
        let r = &o.update_ratios[&3];
        assert_eq!((r.count(), r.zeros(), r.amax()), (2, 1, 4096.0));
    }
}
