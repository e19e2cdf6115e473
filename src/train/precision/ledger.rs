//! The step ledger: what the storage points counted during one step (rounding events per
//! storage point and per class, non-finite sites, the gradients' largest magnitude, product
//! FLOPs).

use std::collections::{BTreeMap, BTreeSet};

use crate::format::RoundCounts;
use crate::recipe::{Class, SiteKey, StoreCounts};

/// One step's counts; [`Ledger::clear`] starts the next.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    counts: BTreeMap<SiteKey, RoundCounts>,
    tally: [StoreCounts; Class::ALL.len()],
    first_nonfinite: Option<(usize, Class)>,
    nonfinite: BTreeSet<(usize, Class)>,
    grad_amax: f64,
    /// Whether a gradient held an inf or NaN before rounding (one formed upstream, hiding the
    /// values it reached: `grad_amax` is then a lower bound).
    grad_nonfinite: bool,
    /// Matrix-product FLOPs per layer (`2 m n k` per product).
    flops: BTreeMap<usize, u64>,
}

impl Ledger {
    /// Forgets the step that ended.
    pub(super) fn clear(&mut self) {
        *self = Ledger::default();
    }

    /// `len` values of `class` were stored, `nonfinite` of them inf or NaN before rounding.
    pub(super) fn stored(&mut self, class: Class, len: usize, nonfinite: u64) {
        let tally = &mut self.tally[class.index()];
        tally.stored += len as u64;
        tally.nonfinite += nonfinite;
    }

    /// Rounding at storage point `key` did `counts`; `nonfinite` of its inputs were inf or NaN
    /// (the counts' own NaN and inf for a number format; a block cast counts them before
    /// rounding).
    pub(super) fn rounded(&mut self, key: SiteKey, counts: RoundCounts, nonfinite: u64) {
        let tally = &mut self.tally[key.class.index()];
        tally.underflow += counts.underflow;
        tally.subnormal += counts.subnormal;
        tally.overflow += counts.overflow;
        tally.nonfinite += nonfinite;
        *self.counts.entry(key).or_default() += counts;
    }

    /// A value stored as `class` of layer `layer` was inf or NaN.
    pub(super) fn mark_nonfinite(&mut self, layer: usize, class: Class) {
        self.nonfinite.insert((layer, class));
        self.first_nonfinite.get_or_insert((layer, class));
    }

    /// A gradient was stored whose largest finite magnitude is `amax`, `finite` when it held no
    /// inf or NaN.
    pub(super) fn gradient(&mut self, amax: f64, finite: bool) {
        self.grad_amax = self.grad_amax.max(amax);
        self.grad_nonfinite |= !finite;
    }

    /// Layer `layer` formed a product of `flops` FLOPs.
    pub(super) fn product(&mut self, layer: usize, flops: u64) {
        *self.flops.entry(layer).or_default() += flops;
    }

    /// The rounding counts of layer `layer` and class `class`, all parts summed.
    pub(super) fn counts(&self, layer: usize, class: Class) -> RoundCounts {
        self.counts
            .range(SiteKey::new(layer, class, "")..)
            .take_while(|(k, _)| (k.layer, k.class) == (layer, class))
            .fold(RoundCounts::default(), |sum, (_, &c)| sum + c)
    }

    /// The rounding counts of one storage point.
    pub(super) fn part_counts(&self, key: SiteKey) -> RoundCounts {
        self.counts.get(&key).copied().unwrap_or_default()
    }

    /// The counts per class, summed over layers (classes with no store absent).
    pub(super) fn class_counts(&self) -> BTreeMap<Class, StoreCounts> {
        Class::ALL
            .iter()
            .zip(&self.tally)
            .filter(|(_, t)| t.stored > 0)
            .map(|(&c, &t)| (c, t))
            .collect()
    }

    /// The first (layer, class) where a stored value was inf or NaN.
    pub(super) fn first_nonfinite(&self) -> Option<(usize, Class)> {
        self.first_nonfinite
    }

    /// Whether a value stored as `class` of layer `layer` was inf or NaN.
    pub(super) fn stored_nonfinite(&self, layer: usize, class: Class) -> bool {
        self.nonfinite.contains(&(layer, class))
    }

    /// The largest finite gradient magnitude (0 when none).
    pub(super) fn grad_amax(&self) -> f64 {
        self.grad_amax
    }

    /// Whether a gradient held an inf or NaN before rounding.
    pub(super) fn grad_nonfinite(&self) -> bool {
        self.grad_nonfinite
    }

    /// The product FLOPs per layer.
    pub(super) fn flops(&self) -> &BTreeMap<usize, u64> {
        &self.flops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(underflow: u64, overflow: u64, nan: u64) -> RoundCounts {
        RoundCounts {
            underflow,
            overflow,
            nan,
            ..RoundCounts::default()
        }
    }

    #[test]
    fn a_layer_and_class_sums_its_parts_and_no_neighbour() {
        let mut l = Ledger::default();
        let state = Class::OptimizerState;
        l.rounded(SiteKey::new(1, state, "adam_m"), counts(1, 0, 0), 0);
        l.rounded(SiteKey::new(1, state, "adam_v"), counts(2, 1, 0), 0);
        l.rounded(SiteKey::new(1, state, "adam_v"), counts(4, 0, 0), 0);
        l.rounded(SiteKey::new(0, state, ""), counts(8, 0, 0), 0);
        l.rounded(SiteKey::new(2, state, ""), counts(16, 0, 0), 0);
        // Classes on either side of the optimizer state's, at the same layer.
        l.rounded(SiteKey::new(1, Class::Weight, ""), counts(32, 0, 0), 0);
        l.rounded(SiteKey::new(1, Class::Master, ""), counts(64, 0, 0), 0);
        assert_eq!(l.counts(1, state), counts(7, 1, 0));
        assert_eq!(
            l.part_counts(SiteKey::new(1, state, "adam_v")),
            counts(6, 1, 0)
        );
        assert_eq!(
            l.part_counts(SiteKey::new(1, state, "")),
            RoundCounts::default()
        );
        // The class tally sums every layer; only classes that stored something are listed.
        l.stored(state, 10, 0);
        let by_class = l.class_counts();
        assert_eq!(by_class.keys().copied().collect::<Vec<_>>(), [state]);
        assert_eq!(
            (by_class[&state].stored, by_class[&state].underflow),
            (10, 31)
        );
    }

    #[test]
    fn the_first_nonfinite_site_stays_first_until_cleared() {
        let mut l = Ledger::default();
        l.stored(Class::Activation, 3, 1);
        l.mark_nonfinite(2, Class::Activation);
        l.mark_nonfinite(1, Class::WeightGrad);
        assert_eq!(l.first_nonfinite(), Some((2, Class::Activation)));
        assert!(l.stored_nonfinite(1, Class::WeightGrad));
        assert!(!l.stored_nonfinite(1, Class::Activation));
        assert_eq!(l.class_counts()[&Class::Activation].nonfinite, 1);
        l.gradient(3.0, true);
        l.gradient(2.0, false);
        l.product(4, 100);
        l.product(4, 28);
        assert_eq!((l.grad_amax(), l.grad_nonfinite()), (3.0, true));
        assert_eq!(l.flops()[&4], 128);
        l.clear();
        assert_eq!(l.first_nonfinite(), None);
        assert!(l.class_counts().is_empty() && l.flops().is_empty());
        assert_eq!((l.grad_amax(), l.grad_nonfinite()), (0.0, false));
    }
}
