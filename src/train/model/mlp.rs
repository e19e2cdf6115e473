//! The multilayer perceptron.

use serde::{Deserialize, Serialize};

use super::{Cost, Sequential};
use crate::error::{Error, positive_finite};
use crate::train::layer::{Activation, ActivationLayer};
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// An MLP: `depth` hidden layers of `width` units with `activation`, then a linear output layer.
/// A deep, narrow MLP with a small `init_scale` is the classic way to get gradients small
/// enough to underflow.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MlpConfig {
    /// Hidden layers.
    pub depth: usize,
    /// Units per hidden layer.
    pub width: usize,
    /// Nonlinearity after each hidden layer.
    pub activation: Activation,
    /// Multiplies the initial weight bound `1/sqrt(fan_in)`.
    pub init_scale: f64,
}

impl Default for MlpConfig {
    /// 2 hidden layers of 256 ReLU units (PHENOMENA's digits network).
    fn default() -> Self {
        MlpConfig {
            depth: 2,
            width: 256,
            activation: Activation::Relu,
            init_scale: 1.0,
        }
    }
}

impl MlpConfig {
    /// What the model from `inputs` features to `outputs` costs ([`crate::train::budget`]).
    #[must_use]
    pub fn cost(&self, inputs: f64, outputs: f64) -> Cost {
        dense_cost(inputs, self.width as f64, self.depth, outputs)
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for a zero width or a non-positive init scale.
    pub fn validate(&self) -> crate::Result<()> {
        if self.width == 0 {
            return Err(Error::InvalidValue {
                what: "width",
                value: "0".into(),
                expected: "at least 1",
            });
        }
        positive_finite("init_scale", self.init_scale)?;
        Ok(())
    }

    /// The model from `inputs` features to `outputs`, with sites registered in `p` and weights
    /// drawn from `rng`.
    #[must_use]
    pub fn build<T: Real>(
        &self,
        inputs: usize,
        outputs: usize,
        p: &mut Precision,
        rng: &mut Rng,
    ) -> Sequential<T> {
        self.build_prefixed("", inputs, outputs, p, rng)
    }

    /// [`MlpConfig::build`] with site names starting with `prefix`.
    #[must_use]
    pub fn build_prefixed<T: Real>(
        &self,
        prefix: &str,
        inputs: usize,
        outputs: usize,
        p: &mut Precision,
        rng: &mut Rng,
    ) -> Sequential<T> {
        let mut model = Sequential::with_prefix(prefix);
        let mut fan_in = inputs;
        for _ in 0..self.depth {
            model.push_linear(fan_in, self.width, self.init_scale, p, rng);
            let site = model.next_site(self.activation.name(), p);
            model.push(Box::new(ActivationLayer::new(self.activation)), site);
            fan_in = self.width;
        }
        model.push_linear(fan_in, outputs, self.init_scale, p, rng);
        model
    }
}

/// The cost of `depth` hidden layers of `width` units (each a linear layer and its
/// activation: two stored outputs) from `input` features, then a linear layer to `output`.
pub(crate) fn dense_cost(input: f64, width: f64, depth: usize, output: f64) -> Cost {
    let mut parameters = 0.0;
    let mut activations = input;
    let mut fan_in = input;
    for _ in 0..depth {
        parameters += fan_in * width + width;
        activations += 2.0 * width;
        fan_in = width;
    }
    parameters += fan_in * output + output;
    activations += output;
    Cost {
        parameters,
        activations,
        sites: 2.0 * depth as f64 + 2.0,
        widest: input.max(output).max(if depth > 0 { width } else { 0.0 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_sites() {
        let mut p = Precision::exact();
        let model: Sequential<f32> = MlpConfig::default().build(64, 10, &mut p, &mut Rng::new(0));
        assert_eq!(
            model.parameter_count(),
            64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
        );
        assert_eq!(
            p.layers(),
            ["0.linear", "1.relu", "2.linear", "3.relu", "4.linear"]
        );
        assert!(
            MlpConfig {
                width: 0,
                ..MlpConfig::default()
            }
            .validate()
            .is_err()
        );
    }
}
