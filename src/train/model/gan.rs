//! A small GAN: generator and discriminator MLPs, trained in alternation
//! ([`crate::train::step::GanTrainer`] trains them).

use serde::{Deserialize, Serialize};

use super::Cost;
use super::mlp::dense_cost;

/// Generator `noise -> width^depth -> 2` and discriminator `2 -> width^depth -> 1` MLPs (ReLU),
/// trained with BCE on logits: the discriminator on real (1) and generated (0) points, the
/// generator with the non-saturating loss (its points labelled 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GanConfig {
    /// Dimension of the generator's Gaussian input.
    pub noise: usize,
    /// Hidden units of both networks.
    pub width: usize,
    /// Hidden layers of both networks.
    pub depth: usize,
}

impl GanConfig {
    /// What the generator and discriminator on points of `features` coordinates cost
    /// ([`crate::train::budget`]): both dense networks, and the two sites of their losses.
    #[must_use]
    pub fn cost(&self, features: f64) -> Cost {
        let g = dense_cost(self.noise as f64, self.width as f64, self.depth, features);
        let d = dense_cost(features, self.width as f64, self.depth, 1.0);
        Cost {
            parameters: g.parameters + d.parameters,
            activations: g.activations + d.activations,
            sites: g.sites + d.sites + 2.0,
            widest: g.widest.max(d.widest),
        }
    }
}

impl Default for GanConfig {
    /// 8-dimensional noise, two hidden layers of 64 units.
    fn default() -> Self {
        GanConfig {
            noise: 8,
            width: 64,
            depth: 2,
        }
    }
}
