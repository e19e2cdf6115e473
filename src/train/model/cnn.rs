//! A small convolutional network for square one-channel images (the digits' 8x8).

use serde::{Deserialize, Serialize};

use super::{Cost, Sequential};
use crate::error::{Error, positive_finite};
use crate::train::layer::{Activation, ActivationLayer, Conv2d, Flatten, ImageShape, MaxPool2d};
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// `conv 3x3 (pad 1) -> ReLU -> maxpool 2 -> flatten -> linear -> ReLU -> linear`, on `side × side`
/// one-channel images.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CnnConfig {
    /// Convolution output channels.
    pub channels: usize,
    /// Units of the hidden linear layer.
    pub hidden: usize,
    /// Multiplies the initial weight bound `1/sqrt(fan_in)`.
    pub init_scale: f64,
}

impl Default for CnnConfig {
    /// 16 channels, 64 hidden units.
    fn default() -> Self {
        CnnConfig {
            channels: 16,
            hidden: 64,
            init_scale: 1.0,
        }
    }
}

impl CnnConfig {
    /// What the model on images of `features` pixels for `classes` classes costs
    /// ([`crate::train::budget`]).
    #[must_use]
    pub fn cost(&self, features: f64, classes: f64) -> Cost {
        let (ch, hidden) = (self.channels as f64, self.hidden as f64);
        let pooled = ch * (features / 4.0).floor();
        Cost {
            parameters: 9.0 * ch + ch + pooled * hidden + hidden + hidden * classes + classes,
            // conv and relu outputs, the im2col matrix, pooled, hidden twice, logits.
            activations: features
                + 2.0 * ch * features
                + 9.0 * features
                + pooled
                + 2.0 * hidden
                + classes,
            sites: 9.0,
            widest: (9.0 * features).max(ch * features).max(hidden),
        }
    }

    /// The image shape for `features` inputs: one channel, square.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] when `features` is not a square of at least 4 (2x2), or a size is 0.
    pub fn image_shape(&self, features: usize) -> crate::Result<ImageShape> {
        let side = (features as f64).sqrt().round() as usize;
        if side * side != features || side < 2 {
            return Err(Error::InvalidValue {
                what: "features for the cnn",
                value: features.to_string(),
                expected: "a square number of at least 4 (one-channel square images)",
            });
        }
        if self.channels == 0 || self.hidden == 0 {
            return Err(Error::InvalidValue {
                what: "cnn size",
                value: "0".into(),
                expected: "channels and hidden at least 1",
            });
        }
        positive_finite("init_scale", self.init_scale)?;
        Ok(ImageShape {
            channels: 1,
            height: side,
            width: side,
        })
    }

    /// The model for `features` inputs (a square image) and `outputs` classes.
    ///
    /// # Errors
    /// As [`CnnConfig::image_shape`].
    pub fn build<T: Real>(
        &self,
        features: usize,
        outputs: usize,
        p: &mut Precision,
        rng: &mut Rng,
    ) -> crate::Result<Sequential<T>> {
        let shape = self.image_shape(features)?;
        let mut model = Sequential::new();
        let site = model.next_site("conv2d", p);
        let conv = Conv2d::new(shape, self.channels, 3, 1, self.init_scale, site, rng);
        let conv_out = conv.output_shape();
        model.push(Box::new(conv), site);
        let site = model.next_site("relu", p);
        model.push(Box::new(ActivationLayer::new(Activation::Relu)), site);
        let pool = MaxPool2d::new(conv_out, 2);
        let pooled = pool.output_shape();
        let site = model.next_site("maxpool2d", p);
        model.push(Box::new(pool), site);
        let site = model.next_site("flatten", p);
        model.push(Box::new(Flatten { shape: pooled }), site);
        model.push_linear(pooled.len(), self.hidden, self.init_scale, p, rng);
        let site = model.next_site("relu", p);
        model.push(Box::new(ActivationLayer::new(Activation::Relu)), site);
        model.push_linear(self.hidden, outputs, self.init_scale, p, rng);
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_for_digits_and_rejects_non_square_inputs() {
        let mut p = Precision::exact();
        let model: Sequential<f32> = CnnConfig::default()
            .build(64, 10, &mut p, &mut Rng::new(0))
            .unwrap();
        assert_eq!(
            model.parameter_count(),
            16 * 9 + 16 + 16 * 16 * 64 + 64 + 64 * 10 + 10
        );
        assert!(
            CnnConfig::default()
                .build::<f32>(10, 2, &mut p, &mut Rng::new(0))
                .is_err()
        );
    }
}
