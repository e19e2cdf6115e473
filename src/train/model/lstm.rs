//! The LSTM sequence classifier: embedding, LSTM, linear.

use serde::{Deserialize, Serialize};

use super::{Cost, Sequential};
use crate::error::{Error, positive_finite};
use crate::train::layer::{Embedding, Lstm};
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// `embedding (vocab × embed) -> LSTM (hidden) -> linear (classes)` on rows of token ids, the
/// last hidden state classifying the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LstmConfig {
    /// Embedding width.
    pub embed: usize,
    /// LSTM units.
    pub hidden: usize,
    /// Multiplies the initial weight bounds.
    pub init_scale: f64,
}

impl Default for LstmConfig {
    /// 16-wide embeddings, 32 units.
    fn default() -> Self {
        LstmConfig {
            embed: 16,
            hidden: 32,
            init_scale: 1.0,
        }
    }
}

impl LstmConfig {
    /// What the model on sequences of `length` token ids below `vocab` for `classes` classes
    /// costs ([`crate::train::budget`]).
    #[must_use]
    pub fn cost(&self, length: f64, vocab: f64, classes: f64) -> Cost {
        let (e, h) = (self.embed as f64, self.hidden as f64);
        Cost {
            parameters: vocab * e + 4.0 * h * (e + h + 1.0) + h * classes + classes,
            // Per time step: the embedding, four gates, the cell and hidden states.
            activations: length * (e + 8.0 * h) + classes,
            sites: 5.0,
            widest: 4.0 * h.max(e),
        }
    }

    /// The model for sequences of token ids below `vocab`, `outputs` classes.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for a zero size or a non-positive init scale.
    pub fn build<T: Real>(
        &self,
        vocab: usize,
        outputs: usize,
        p: &mut Precision,
        rng: &mut Rng,
    ) -> crate::Result<Sequential<T>> {
        if self.embed == 0 || self.hidden == 0 || vocab == 0 {
            return Err(Error::InvalidValue {
                what: "lstm size",
                value: "0".into(),
                expected: "embed, hidden and vocabulary at least 1",
            });
        }
        positive_finite("init_scale", self.init_scale)?;
        let mut model = Sequential::new();
        let site = model.next_site("embedding", p);
        model.push(
            Box::new(Embedding::new(
                vocab,
                self.embed,
                self.init_scale,
                site,
                rng,
            )),
            site,
        );
        let site = model.next_site("lstm", p);
        model.push(
            Box::new(Lstm::new(
                self.embed,
                self.hidden,
                self.init_scale,
                site,
                rng,
            )),
            site,
        );
        model.push_linear(self.hidden, outputs, self.init_scale, p, rng);
        Ok(model)
    }
}

/// The vocabulary of a data set whose features are token ids: `max id + 1`.
///
/// # Errors
/// [`Error::InvalidValue`] when a feature is not an integer in `0..65536`.
pub fn vocabulary(features: &ndarray::Array2<f32>) -> crate::Result<usize> {
    let mut max = 0usize;
    for &v in features {
        if !((0.0..65536.0).contains(&v) && v.fract() == 0.0) {
            return Err(Error::InvalidValue {
                what: "token id for the lstm",
                value: v.to_string(),
                expected: "features that are integer token ids in 0..65536 (a sequence data set such as 'recall')",
            });
        }
        max = max.max(v as usize);
    }
    Ok(max + 1)
}
