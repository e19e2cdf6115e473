//! The site cursor: the registered layers, and which layer, part and tensor the following stores
//! belong to.

use crate::recipe::{Class, SiteKey};

/// The layers by index, and where the next store goes.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    layers: Vec<String>,
    current: usize,
    part: &'static str,
    /// The tensor the following stores hold, when a layer stores several of one class (a
    /// parameter's name): each has its own fp8 scale and amax history.
    tensor: &'static str,
}

impl Cursor {
    /// Adds a layer called `name` and returns its index.
    pub(super) fn register(&mut self, name: &str) -> usize {
        self.layers.push(name.to_string());
        self.layers.len() - 1
    }

    /// The registered layer names, by index.
    pub(super) fn layers(&self) -> &[String] {
        &self.layers
    }

    /// Makes layer `index` the owner of the following stores, of the whole class and no named
    /// tensor.
    pub(super) fn enter(&mut self, index: usize) {
        self.current = index;
        self.part = "";
        self.tensor = "";
    }

    /// The layer that owns the following stores.
    pub(super) fn layer(&self) -> usize {
        self.current
    }

    /// Names the part of a class the following stores hold (until the next enter).
    pub(super) fn set_part(&mut self, part: &'static str) {
        self.part = part;
    }

    /// Names the tensor the following stores hold (until the next enter); returns the one named
    /// before.
    pub(super) fn set_tensor(&mut self, tensor: &'static str) -> &'static str {
        std::mem::replace(&mut self.tensor, tensor)
    }

    /// The tensor the following stores hold.
    pub(super) fn tensor(&self) -> &'static str {
        self.tensor
    }

    /// The storage point of `class` at the current layer and part.
    pub(super) fn key(&self, class: Class) -> SiteKey {
        SiteKey::new(self.current, class, self.part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_numbered_in_order_and_enter_resets_part_and_tensor() {
        let mut c = Cursor::default();
        assert_eq!(
            [c.register("in"), c.register("fc"), c.register("in")],
            [0, 1, 2]
        );
        assert_eq!(c.layers(), ["in", "fc", "in"]);
        c.enter(1);
        c.set_part("adam_m");
        assert_eq!(c.set_tensor("weight"), "");
        assert_eq!(
            c.key(Class::OptimizerState),
            SiteKey::new(1, Class::OptimizerState, "adam_m")
        );
        assert_eq!((c.layer(), c.tensor()), (1, "weight"));
        c.enter(2);
        assert_eq!(
            c.key(Class::OptimizerState),
            SiteKey::new(2, Class::OptimizerState, "")
        );
        assert_eq!(c.tensor(), "");
    }
}
