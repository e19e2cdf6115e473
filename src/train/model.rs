//! Models: a sequence of layers with one storage site each, built from a serializable config.

mod cnn;
mod gan;
mod lstm;
mod mlp;

use ndarray::Array2;

pub use cnn::CnnConfig;
pub use gan::GanConfig;
pub use lstm::{LstmConfig, vocabulary};
pub use mlp::MlpConfig;

/// What a model costs, for [`crate::train::budget`]'s estimate (counts as `f64`, so that no
/// config can overflow them): each model's config computes its own, beside what it builds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Trainable parameters.
    pub parameters: f64,
    /// Layer outputs per example (the activations the backward pass keeps).
    pub activations: f64,
    /// Storage sites (points where values are rounded and counted: about two per layer).
    pub sites: f64,
    /// Units of the widest layer.
    pub widest: f64,
}

use super::layer::{Layer, Linear, Param};
use super::precision::Precision;
use super::real::Real;
use super::rng::Rng;

/// Layers applied in order; layer `i` stores its tensors at site `"{prefix}{i}.{kind}"`.
pub struct Sequential<T: Real> {
    layers: Vec<Box<dyn Layer<T>>>,
    sites: Vec<usize>,
    prefix: String,
}

impl<T: Real> Sequential<T> {
    /// An empty model.
    #[must_use]
    pub fn new() -> Self {
        Sequential::with_prefix("")
    }

    /// An empty model whose site names start with `prefix` (`"g."` and `"d."` in the GAN).
    #[must_use]
    pub fn with_prefix(prefix: &str) -> Self {
        Sequential {
            layers: Vec::new(),
            sites: Vec::new(),
            prefix: prefix.to_string(),
        }
    }

    /// The site the next pushed layer will own: registers `"{prefix}{i}.{kind}"` in `p`.
    pub fn next_site(&self, kind: &str, p: &mut Precision) -> usize {
        p.register(&format!("{}{}.{kind}", self.prefix, self.layers.len()))
    }

    /// Appends `layer`, which owns storage site `site` (from [`Sequential::next_site`]).
    pub fn push(&mut self, layer: Box<dyn Layer<T>>, site: usize) {
        self.layers.push(layer);
        self.sites.push(site);
    }

    /// Appends a [`Linear`] layer from `inputs` to `outputs` features on a new `"linear"` site
    /// (the step every model config repeats; the site is registered before `rng` is drawn from).
    pub(crate) fn push_linear(
        &mut self,
        inputs: usize,
        outputs: usize,
        init_scale: f64,
        p: &mut Precision,
        rng: &mut Rng,
    ) {
        let site = self.next_site("linear", p);
        self.push(
            Box::new(Linear::new(inputs, outputs, init_scale, site, rng)),
            site,
        );
    }

    /// The layers.
    #[must_use]
    pub fn layers(&self) -> &[Box<dyn Layer<T>>] {
        &self.layers
    }

    /// The output for batch `x` (already stored as the input activation).
    pub fn forward(&mut self, mut x: Array2<T>, p: &mut Precision) -> Array2<T> {
        for (layer, &site) in self.layers.iter_mut().zip(&self.sites) {
            p.enter(site);
            x = layer.forward(x, p);
        }
        x
    }

    /// Backpropagates `dy`, the gradient with respect to the last output; sets every parameter's
    /// gradient and returns the gradient with respect to the input.
    pub fn backward(&mut self, mut dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        for (layer, &site) in self.layers.iter_mut().zip(&self.sites).rev() {
            p.enter(site);
            dy = layer.backward(dy, p);
        }
        dy
    }

    /// Backpropagates `dy` to set every parameter's gradient, without the gradient with respect
    /// to the network's input (the first layer skips it, see [`Layer::backward_params`]).
    pub fn backward_params(&mut self, mut dy: Array2<T>, p: &mut Precision) {
        for (i, (layer, &site)) in self.layers.iter_mut().zip(&self.sites).enumerate().rev() {
            p.enter(site);
            if i == 0 {
                layer.backward_params(dy, p);
                return;
            }
            dy = layer.backward(dy, p);
        }
    }

    /// Every parameter, in layer order.
    #[must_use]
    pub fn params(&self) -> Vec<&Param<T>> {
        self.layers.iter().flat_map(|l| l.params()).collect()
    }

    /// Every parameter, mutably, in layer order.
    pub fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        self.layers
            .iter_mut()
            .flat_map(|l| l.params_mut())
            .collect()
    }

    /// Number of trainable scalars.
    #[must_use]
    pub fn parameter_count(&self) -> usize {
        self.params().iter().map(|q| q.master.len()).sum()
    }
}

impl<T: Real> Default for Sequential<T> {
    fn default() -> Self {
        Sequential::new()
    }
}
