//! The probes: the capture observer that sees values before rounding, and the taps that keep
//! the rounded gradients for comparison with an FP32 shadow step.

use std::collections::BTreeMap;

use crate::recipe::{Class, SiteKey};
use crate::train::capture::{Observer, Seen};
use crate::train::real::Real;

/// The observer of a capture step and the gradient taps of a shadowed one, when installed.
#[derive(Debug, Default)]
pub(super) struct Probes {
    observer: Option<Observer>,
    taps: Option<BTreeMap<(usize, Class), Vec<f32>>>,
}

impl Probes {
    /// Installs (or removes) the observer.
    pub(super) fn set_observer(&mut self, observer: Option<Observer>) {
        self.observer = observer;
    }

    /// Takes the observer back with what it saw.
    pub(super) fn take_observer(&mut self) -> Option<Observer> {
        self.observer.take()
    }

    /// Whether an observer is installed.
    pub(super) fn capturing(&self) -> bool {
        self.observer.is_some()
    }

    /// Shows `xs`, stored at `key`, to the observer; what it saw, when one is installed.
    pub(super) fn observe<T: Real>(&mut self, key: SiteKey, xs: &[T]) -> Option<Seen> {
        Some(self.observer.as_mut()?.observe(key, xs))
    }

    /// Shows layer `layer`'s update ratios `|w| / |u|` to the observer, when one is installed.
    pub(super) fn observe_updates<T: Real>(&mut self, layer: usize, weights: &[T], updates: &[T]) {
        if let Some(observer) = &mut self.observer {
            observer.observe_updates(layer, weights, updates);
        }
    }

    /// Turns the taps on (empty) or off.
    pub(super) fn set_taps(&mut self, on: bool) {
        self.taps = on.then(BTreeMap::new);
    }

    /// Keeps a copy of the gradient `xs` of `class` at layer `layer`, when the taps are on.
    pub(super) fn tap<T: Real>(&mut self, layer: usize, class: Class, xs: &[T]) {
        if let Some(taps) = &mut self.taps {
            taps.entry((layer, class))
                .or_default()
                .extend(xs.iter().map(|&v| Real::to_f64(v) as f32));
        }
    }

    /// Forgets what the taps kept (they stay on).
    pub(super) fn clear_taps(&mut self) {
        if let Some(taps) = &mut self.taps {
            taps.clear();
        }
    }

    /// What the taps kept, per layer and class in store order.
    pub(super) fn take_taps(&mut self) -> BTreeMap<(usize, Class), Vec<f32>> {
        self.taps.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_keep_gradients_in_store_order_only_while_on() {
        let mut p = Probes::default();
        p.tap(0, Class::WeightGrad, &[1.0f32]);
        assert!(p.take_taps().is_empty());
        p.set_taps(true);
        p.tap(0, Class::WeightGrad, &[1.0f32, 2.0]);
        p.tap(1, Class::ActivationGrad, &[0.5f64]);
        p.tap(0, Class::WeightGrad, &[3.0f32]);
        let taps = p.take_taps();
        assert_eq!(taps[&(0, Class::WeightGrad)], [1.0, 2.0, 3.0]);
        assert_eq!(taps[&(1, Class::ActivationGrad)], [0.5]);
        // Taken: still on, and empty.
        p.tap(2, Class::WeightGrad, &[4.0f32]);
        p.clear_taps();
        assert!(p.take_taps().is_empty());
        p.set_taps(false);
        p.tap(2, Class::WeightGrad, &[4.0f32]);
        assert!(p.take_taps().is_empty());
    }

    #[test]
    fn the_observer_sees_stores_only_while_installed() {
        let mut p = Probes::default();
        let key = SiteKey::new(0, Class::Activation, "");
        assert!(p.observe(key, &[1.0f32]).is_none() && !p.capturing());
        p.set_observer(Some(Observer::default()));
        let seen = p.observe(key, &[1.0f32, f32::NAN]).expect("installed");
        assert_eq!(seen.nonfinite, 1);
        assert!(p.capturing());
        assert!(p.take_observer().is_some());
        assert!(!p.capturing() && p.take_observer().is_none());
    }
}
