//! Layers with explicit forward and backward passes, generic over the scalar ([`Real`]) so that
//! the same code trains in f32 and is checked against finite differences in f64.
//!
//! Every tensor is a matrix with one row per example: images are flattened channel-major
//! (`c * h * w + y * w + x`), so a layer that needs a shape keeps it itself, and flattening an
//! image for a linear layer is the identity: [`Flatten`] marks where a model does it, as in other
//! frameworks, and stores nothing (a flatten is a view, not a new tensor).

mod activation;
#[cfg(test)]
pub(crate) mod check;
mod conv2d;
mod embedding;
mod layernorm;
mod linear;
mod lstm;

use ndarray::Array2;

pub use activation::{Activation, ActivationLayer};
pub use conv2d::{Conv2d, Flatten, ImageShape, MaxPool2d};
pub use embedding::Embedding;
pub use layernorm::LayerNorm;
pub use linear::Linear;
pub use lstm::Lstm;

use super::precision::Precision;
use super::real::{Real, zip_chunks};
use super::rng::Rng;
use crate::recipe::Class;

/// A trainable tensor: the master copy the optimizer updates, the copy in the weight format the
/// passes read, and the gradient.
#[derive(Clone, Debug)]
pub struct Param<T> {
    /// `"weight"` or `"bias"`.
    pub name: &'static str,
    /// Index of the owning layer in the [`Precision`] registry.
    pub site: usize,
    /// The weights the optimizer updates (in the master-weight format).
    pub master: Array2<T>,
    /// The weights the forward and backward passes read (in the weight format).
    pub weight: Array2<T>,
    /// The gradient of the (scaled) loss (in the weight-gradient format).
    pub grad: Array2<T>,
}

impl<T: Real> Param<T> {
    /// A parameter with initial value `value`.
    #[must_use]
    pub fn new(name: &'static str, site: usize, value: Array2<T>) -> Self {
        let grad = Array2::zeros(value.dim());
        Param {
            name,
            site,
            master: value.clone(),
            weight: value,
            grad,
        }
    }

    /// Sets the gradient to `grad` and stores it as this parameter's weight gradient (the store
    /// names the parameter; the current tensor name is cleared after).
    pub(crate) fn set_grad(&mut self, grad: Array2<T>, p: &mut Precision) {
        self.grad = grad;
        p.set_tensor(self.name);
        p.store_array(Class::WeightGrad, &mut self.grad);
        p.set_tensor("");
    }

    /// Rounds the master copy to its format and refreshes the weight copy from it (at
    /// initialisation, and after every update).
    pub fn sync(&mut self, p: &mut Precision) {
        self.store_master_and_weight(p, true);
    }

    /// Stores the master copy and then the weight copy: refreshed from the master copy when
    /// `copy`, already equal to it otherwise (the caller wrote both, and the master format does
    /// not round).
    pub(crate) fn store_master_and_weight(&mut self, p: &mut Precision, copy: bool) {
        p.enter(self.site);
        p.set_tensor(self.name);
        p.store_array(Class::Master, &mut self.master);
        if copy {
            match (self.weight.as_slice_mut(), self.master.as_slice()) {
                (Some(w), Some(m)) if w.len() == m.len() => {
                    zip_chunks(w, m, <[T]>::copy_from_slice, |(), ()| ());
                }
                _ => self.weight.assign(&self.master),
            }
        }
        // An unrounded copy of the master weights (just checked for inf/NaN) needs no second
        // check; it is still observed on capture steps.
        if p.rounds(Class::Weight) || p.capturing() {
            p.store_array(Class::Weight, &mut self.weight);
        }
    }
}

/// Whether every gradient of `params` was stored finite this step (the loss scaler's overflow
/// check): every layer stores its parameters' final gradients as [`Class::WeightGrad`] at the
/// parameters' site, and that store checks them, so they need no second pass.
#[must_use]
pub fn grads_finite<T: Real>(params: &[&mut Param<T>], p: &Precision) -> bool {
    params
        .iter()
        .all(|q| !p.stored_nonfinite(q.site, Class::WeightGrad))
}

/// A layer with an explicit backward pass.
pub trait Layer<T: Real>: Send {
    /// Short kind name (`"linear"`, `"relu"`...), used in storage-point names.
    fn kind(&self) -> &'static str;

    /// The output for a batch `x` (rows are examples), stored as activations; keeps what
    /// backward needs.
    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T>;

    /// Given the gradient of the loss with respect to the last forward's output, sets the
    /// parameters' gradients and returns the gradient with respect to its input, stored as
    /// activation gradients.
    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T>;

    /// [`Layer::backward`] for the first layer of a network, whose input (the data) needs no
    /// gradient: sets the parameters' gradients only. Frameworks skip that work too (PyTorch
    /// computes no gradient for an input that does not require one); layers whose input gradient
    /// costs a GEMM override this to skip it.
    fn backward_params(&mut self, dy: Array2<T>, p: &mut Precision) {
        let _ = self.backward(dy, p);
    }

    /// The trainable parameters.
    fn params(&self) -> Vec<&Param<T>> {
        Vec::new()
    }

    /// The trainable parameters, mutably.
    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        Vec::new()
    }
}

/// Uniform initial weights in `[-b, b]` with `b = scale / sqrt(fan_in)` (PyTorch's default for
/// linear and convolution layers when `scale = 1`).
#[must_use]
pub fn init_uniform<T: Real>(
    shape: (usize, usize),
    fan_in: usize,
    scale: f64,
    rng: &mut Rng,
) -> Array2<T> {
    let bound = scale / (fan_in.max(1) as f64).sqrt();
    Array2::from_shape_simple_fn(shape, || T::of((2.0 * rng.uniform() - 1.0) * bound))
}
