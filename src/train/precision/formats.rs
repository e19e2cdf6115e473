//! The rounders of the storage points: how each class is rounded in each layer, under the recipe
//! or under the recipe of the `keep` pattern that matches the layer's name.

use super::block::BlockCast;
use crate::format::{FP32, RoundOptions, Rounder};
use crate::recipe::{Class, Keep, Recipe};

/// How one recipe rounds each class: the formats of the layers that run it.
#[derive(Debug)]
pub(super) struct Formats {
    /// The recipe as the layer runs it ([`Recipe::for_layer`] for a kept one).
    pub(super) recipe: Recipe,
    rounders: [Option<Rounder>; Class::ALL.len()],
    /// The block casts of the operand classes the recipe casts to block formats (whose
    /// `rounders` entry is `None`).
    blocks: [Option<BlockCast>; Class::ALL.len()],
}

impl Formats {
    /// A class stored in fp32 has no rounder: values computed in f32 are already fp32, and in the
    /// f64 reference path such a class is left exact.
    fn new(recipe: Recipe, seed: u64) -> Formats {
        let options = RoundOptions {
            rounding: recipe.rounding,
            overflow: recipe.overflow,
            subnormals: true,
            seed,
        };
        let blocks = Class::ALL.map(|class| {
            recipe
                .block_format(class)
                .map(|format| BlockCast::new(format, options))
        });
        let rounders = Class::ALL.map(|class| {
            let format = recipe.format(class);
            (format != FP32 && blocks[class.index()].is_none())
                .then(|| Rounder::new(format, options))
        });
        Formats {
            recipe,
            rounders,
            blocks,
        }
    }

    /// The rounder of a class stored in a number format other than fp32.
    pub(super) fn rounder(&self, class: Class) -> Option<Rounder> {
        self.rounders[class.index()]
    }

    /// The block cast of a class stored in a block format.
    pub(super) fn block(&self, class: Class) -> Option<BlockCast> {
        self.blocks[class.index()]
    }

    /// Whether `class` is rounded at all (a number format other than fp32, or a block format).
    pub(super) fn rounds(&self, class: Class) -> bool {
        self.rounder(class).is_some() || self.block(class).is_some()
    }
}

/// The formats of a recipe and of each of its `keep` entries, and which of them each registered
/// layer runs.
#[derive(Debug)]
pub(super) struct Rounders {
    keep: Keep,
    /// The base recipe's formats, then those of each `keep` entry, in order.
    formats: Vec<Formats>,
    /// Which `formats` each registered layer uses.
    layer_formats: Vec<usize>,
}

impl Rounders {
    /// The formats of `recipe` and its `keep` entries, with `seed` for stochastic rounding.
    pub(super) fn new(recipe: &Recipe, seed: u64) -> Rounders {
        let base = Recipe {
            keep: Keep::default(),
            ..recipe.clone()
        };
        let formats = std::iter::once(Formats::new(base, seed))
            .chain(
                recipe
                    .keep
                    .0
                    .iter()
                    .map(|(_, kept)| Formats::new(recipe.for_layer(kept), seed)),
            )
            .collect();
        Rounders {
            keep: recipe.keep.clone(),
            formats,
            layer_formats: Vec::new(),
        }
    }

    /// No rounding anywhere (an fp32 recipe whose classes are left exact in f64 too).
    pub(super) fn exact() -> Rounders {
        let mut r = Rounders::new(&Recipe::fp32(), 0);
        r.formats[0].rounders = [None; Class::ALL.len()];
        r.formats[0].blocks = [None; Class::ALL.len()];
        r
    }

    /// Adds the next layer, called `name`: it runs the formats of the first `keep` pattern that
    /// matches `name`, or the recipe's.
    pub(super) fn add_layer(&mut self, name: &str) {
        self.layer_formats
            .push(self.keep.find(name).map_or(0, |k| k + 1));
    }

    /// The formats layer `layer` runs (the recipe's for a layer not added).
    pub(super) fn of(&self, layer: usize) -> &Formats {
        &self.formats[self.layer_formats.get(layer).copied().unwrap_or(0)]
    }

    /// The first `keep` pattern that no added layer runs.
    pub(super) fn unmatched_keep(&self) -> Option<&str> {
        (0..self.keep.0.len())
            .find(|k| !self.layer_formats.contains(&(k + 1)))
            .map(|k| self.keep.0[k].0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BF16, FP16};

    fn kept() -> Recipe {
        Recipe::from_value(serde_json::json!({
            "name": "mine",
            "weights": "fp16", "activations": "fp16", "activation_grads": "fp16",
            "weight_grads": "fp16", "optimizer_state": "fp32", "master_weights": "fp32",
            "keep": {"head*": "bf16-master", "*.norm": "fp32"}
        }))
        .unwrap()
    }

    #[test]
    fn each_layer_runs_its_first_matching_keep_or_the_recipe() {
        let mut r = Rounders::new(&kept(), 0);
        for name in ["0.linear", "head.linear", "head.norm", "1.norm"] {
            r.add_layer(name);
        }
        let format = |layer: usize| r.of(layer).rounder(Class::Activation).map(|r| r.format());
        assert_eq!(format(0), Some(FP16));
        // Order decides: "head.norm" matches both patterns and runs the first.
        assert_eq!([format(1), format(2)], [Some(BF16), Some(BF16)]);
        assert_eq!(format(3), None);
        assert!(!r.of(3).rounds(Class::Activation));
        // A layer never added runs the recipe.
        assert_eq!(format(9), Some(FP16));
        assert_eq!(r.unmatched_keep(), None);
    }

    #[test]
    fn an_unmatched_keep_is_named_and_fp32_classes_have_no_rounder() {
        let mut r = Rounders::new(&kept(), 0);
        r.add_layer("1.norm");
        assert_eq!(r.unmatched_keep(), Some("head*"));
        let f = r.of(7);
        assert!(f.rounder(Class::Master).is_none() && !f.rounds(Class::Master));
        assert!(f.rounds(Class::Weight));
    }

    #[test]
    fn block_classes_cast_in_blocks_and_exact_rounds_nothing() {
        let mx = Rounders::new(&Recipe::preset("mxfp8").unwrap(), 0);
        let block = (Class::ALL.iter()).find(|&&c| mx.of(0).block(c).is_some());
        let class = *block.expect("mxfp8 casts some class to a block format");
        assert!(mx.of(0).rounder(class).is_none() && mx.of(0).rounds(class));
        let exact = Rounders::exact();
        assert!(Class::ALL.iter().all(|&c| !exact.of(0).rounds(c)));
    }
}
