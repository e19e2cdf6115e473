//! The fully connected layer.

use ndarray::{Array2, Axis};

use super::{Layer, Param, init_uniform};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// `y = x Wᵀ + b` with `W` of shape (outputs, inputs) and `b` of shape (1, outputs).
///
/// ```text
/// dL/dx = dL/dy W          dL/dW = (dL/dy)ᵀ x          dL/db = Σ_rows dL/dy
/// ```
///
/// With a recipe that casts GEMM operands ([`crate::recipe::GemmOperands`]), the three
/// products read `x`, `W` and `dL/dy` as cast: with a per-tensor format, x and W once, in
/// forward, kept for backward (as Transformer Engine's Linear keeps its FP8 input and weight),
/// and `dL/dy` once for both backward products; with a block format, each for each product, its
/// blocks along the axis that product sums over (x and W along the inputs for `y`, `dL/dy`
/// along the outputs and W down its columns for `dL/dx`, `dL/dy` and x along the batch for
/// `dL/dW`: [`crate::train::precision::block`]). The bias and its gradient (a sum of the uncast
/// `dL/dy`, as TE's fused bias-gradient cast computes it) are never cast.
#[derive(Clone, Debug)]
pub struct Linear<T> {
    /// Weights, (outputs, inputs).
    pub weight: Param<T>,
    /// Bias, (1, outputs).
    pub bias: Param<T>,
    /// The input for the weight-gradient product: as the forward product read it (cast when the
    /// recipe casts it per tensor), or as stored when its cast is block-scaled (cast again
    /// along the batch).
    input: Option<Array2<T>>,
    /// The weight as cast for this forward pass, when the recipe casts it per tensor.
    weight_operand: Option<Array2<T>>,
}

impl<T: Real> Linear<T> {
    /// A layer from `inputs` to `outputs` features owned by storage site `site`, with uniform
    /// initial weights of bound `init_scale / sqrt(inputs)` and zero bias.
    #[must_use]
    pub fn new(inputs: usize, outputs: usize, init_scale: f64, site: usize, rng: &mut Rng) -> Self {
        let w = init_uniform((outputs, inputs), inputs, init_scale, rng);
        Linear {
            weight: Param::new("weight", site, w),
            bias: Param::new("bias", site, Array2::zeros((1, outputs))),
            input: None,
            weight_operand: None,
        }
    }
}

impl<T: Real> Linear<T> {
    /// Sets the weight and bias gradients from `dy` (zero before any forward pass) and returns
    /// `dy` as cast for them when the recipe casts it per tensor (the input-gradient product
    /// reads the same cast).
    fn backward_params_ref(&mut self, dy: &Array2<T>, p: &mut Precision) -> Option<Array2<T>> {
        let Some(x) = self.input.as_ref() else {
            self.weight.grad.fill(T::zero());
            self.bias.grad.fill(T::zero());
            return None;
        };
        param_grads(&mut self.weight, &mut self.bias, x, dy, p)
    }
}

/// `y = x Wᵀ` (a linear layer's product, and a convolution's over its im2col matrix) with the
/// recipe's operand casts, unrounded. Returns `y`, the input as the weight-gradient product
/// reads it (the forward cast when cast per tensor, otherwise `x`), and the weight's cast when
/// cast per tensor.
pub(super) fn forward_product<T: Real>(
    x: Array2<T>,
    weight: &Param<T>,
    p: &mut Precision,
) -> (Array2<T>, Array2<T>, Option<Array2<T>>) {
    // y = x Wᵀ sums over the inputs, axis 1 of both.
    let x_operand = p.operand(Class::GemmInput, "input", x.view(), Axis(1));
    let w_operand = p.operand(
        Class::GemmWeight,
        weight.name,
        weight.weight.view(),
        Axis(1),
    );
    let w = w_operand.as_ref().unwrap_or(&weight.weight);
    let y = p.matmul(
        x_operand.as_ref().unwrap_or(&x).view(),
        w.t(),
        Class::Activation,
    );
    let input = match x_operand {
        Some(cast) if !p.casts_per_product(Class::GemmInput) => cast,
        _ => x,
    };
    (
        y,
        input,
        w_operand.filter(|_| !p.casts_per_product(Class::GemmWeight)),
    )
}

/// Sets the gradients of `weight` and `bias` in `y = x Wᵀ + b` from `dy` and returns `dy` as
/// cast for them when the recipe casts it per tensor (the input-gradient product reads the same
/// cast). The bias gradient sums the uncast `dy`; the product reads it cast.
pub(super) fn param_grads<T: Real>(
    weight: &mut Param<T>,
    bias: &mut Param<T>,
    x: &Array2<T>,
    dy: &Array2<T>,
    p: &mut Precision,
) -> Option<Array2<T>> {
    // dW = dyᵀ x sums over the rows (examples, or pixels), axis 0 of both.
    let dy_operand = p.operand(Class::GemmGradOutput, "grad_output", dy.view(), Axis(0));
    let dy_gemm = dy_operand.as_ref().unwrap_or(dy);
    let x_block = p.block_operand(Class::GemmInput, "input", x.view(), Axis(0));
    let x_gemm = x_block.as_ref().unwrap_or(x);
    weight.set_grad(p.matmul(dy_gemm.t(), x_gemm.view(), Class::WeightGrad), p);
    bias.set_grad(p.sum_rows(dy.view(), Class::WeightGrad), p);
    dy_operand.filter(|_| !p.casts_per_product(Class::GemmGradOutput))
}

impl<T: Real> Layer<T> for Linear<T> {
    fn kind(&self) -> &'static str {
        "linear"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let (mut y, input, weight_operand) = forward_product(x, &self.weight, p);
        self.weight_operand = weight_operand;
        let cols = y.ncols();
        let bias = self.bias.weight.as_slice().filter(|b| !b.is_empty());
        match (y.as_slice_mut(), bias) {
            // The bias added and the sum checked in one pass, where the store would only check.
            (Some(ys), Some(b)) if p.check_only(Class::Activation) && b.len() == cols => {
                let mut bad = 0u64;
                for row in ys.chunks_exact_mut(b.len()) {
                    for (y, &b) in row.iter_mut().zip(b) {
                        *y += b;
                        bad += u64::from(!y.is_finite());
                    }
                }
                p.note_store(Class::Activation, ys.len(), bad);
            }
            _ => {
                y += &self.bias.weight;
                p.store_array(Class::Activation, &mut y);
            }
        }
        self.input = Some(input);
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let dy_operand = self.backward_params_ref(&dy, p);
        // dx = dy W sums over the outputs: axis 1 of dy, axis 0 of W.
        let dy = match dy_operand {
            Some(cast) => cast,
            None => p
                .block_operand(Class::GemmGradOutput, "grad_output", dy.view(), Axis(1))
                .unwrap_or(dy),
        };
        let w_block = p.block_operand(
            Class::GemmWeight,
            self.weight.name,
            self.weight.weight.view(),
            Axis(0),
        );
        let w = w_block
            .as_ref()
            .or(self.weight_operand.as_ref())
            .unwrap_or(&self.weight.weight);
        let mut dx = p.matmul(dy.view(), w.view(), Class::ActivationGrad);
        p.store_array(Class::ActivationGrad, &mut dx);
        dx
    }

    fn backward_params(&mut self, dy: Array2<T>, p: &mut Precision) {
        let _ = self.backward_params_ref(&dy, p);
    }

    fn params(&self) -> Vec<&Param<T>> {
        vec![&self.weight, &self.bias]
    }

    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        vec![&mut self.weight, &mut self.bias]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::{check_layer, random};

    #[test]
    fn gradient_check() {
        let mut rng = Rng::new(1);
        for (batch, inputs, outputs) in [(1, 1, 1), (3, 5, 4), (9, 2, 7)] {
            let mut layer = Linear::<f64>::new(inputs, outputs, 1.0, 0, &mut rng);
            layer.bias.weight = random((1, outputs), &mut rng);
            layer.bias.master = layer.bias.weight.clone();
            let x = random((batch, inputs), &mut rng);
            check_layer(&mut layer, &x, 2);
        }
    }

    /// Under per-tensor operand casts (`fp8-hybrid`) the layer keeps the input and the weight
    /// as the forward product read them, cast, for the backward products.
    #[test]
    fn backward_reads_the_forward_casts() {
        let recipe = crate::recipe::Recipe::preset("fp8-hybrid").unwrap();
        let mut layer = Linear::<f32>::new(3, 2, 1.0, 0, &mut Rng::new(5));
        let x = Array2::from_shape_fn((4, 3), |(i, j)| 0.3 + (i * 3 + j) as f32 * 0.0137);
        let fresh = || {
            let mut p = Precision::new(&recipe, 0);
            p.register("l");
            p.begin_step();
            p
        };
        let mut cast = fresh();
        let x_cast = cast.operand(Class::GemmInput, "input", x.view(), Axis(1));
        let w = layer.weight.weight.view();
        let w_cast = cast.operand(Class::GemmWeight, "weight", w, Axis(1));
        assert!(x_cast.as_ref().is_some_and(|c| *c != x));
        let _ = layer.forward(x, &mut fresh());
        assert_eq!(layer.input, x_cast);
        assert_eq!(layer.weight_operand, w_cast);
    }

    #[test]
    fn forward_matches_a_plain_loop() {
        let mut rng = Rng::new(4);
        let mut layer = Linear::<f64>::new(3, 2, 1.0, 0, &mut rng);
        let x = random((4, 3), &mut rng);
        let mut p = Precision::exact();
        p.register("l");
        let y = layer.forward(x.clone(), &mut p);
        for i in 0..4 {
            for o in 0..2 {
                let want: f64 = (0..3)
                    .map(|k| x[[i, k]] * layer.weight.weight[[o, k]])
                    .sum::<f64>()
                    + layer.bias.weight[[0, o]];
                assert!((y[[i, o]] - want).abs() < 1e-14);
            }
        }
    }
}
