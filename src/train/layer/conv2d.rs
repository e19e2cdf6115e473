//! Two-dimensional convolution by im2col and one GEMM.

use ndarray::{Array2, Axis};

use super::linear::{forward_product, param_grads};
use super::{Layer, Param, init_uniform};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// The shape of a channel-major image row: `channels × height × width`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageShape {
    /// Channels.
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl ImageShape {
    /// Values per image.
    #[must_use]
    pub fn len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Whether the image has no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A convolution with square `k × k` kernels, stride 1 and zero padding `pad`:
/// ```text
/// cols[(n, y, x), (c, i, j)] = in[n, c, y + i - pad, x + j - pad]   (0 outside the image)
/// out = cols Wᵀ + b           W: (out_channels, in_channels·k·k)
/// dW = dOutᵀ cols      db = Σ dOut      dcols = dOut W      dx = col2im(dcols) (sums overlaps)
/// ```
///
/// GEMM operand casts as in [`super::Linear`], with the im2col matrix as the input: a block cast
/// runs along `(c, i, j)` for `out`, down the pixels `(n, y, x)` for `dW`.
#[derive(Clone, Debug)]
pub struct Conv2d<T> {
    /// Kernels, (out_channels, in_channels·k·k).
    pub weight: Param<T>,
    /// Bias, (1, out_channels).
    pub bias: Param<T>,
    input: ImageShape,
    out_channels: usize,
    k: usize,
    pad: usize,
    /// The im2col matrix for the weight-gradient product: as the forward product read it (cast
    /// per tensor), or uncast when its cast is block-scaled.
    cols: Option<Array2<T>>,
}

impl<T: Real> Conv2d<T> {
    /// A convolution of `input` images to `out_channels` channels with `k × k` kernels and
    /// padding `pad`, owned by site `site`; uniform initial weights of bound
    /// `init_scale / sqrt(in_channels·k·k)`, zero bias.
    #[must_use]
    pub fn new(
        input: ImageShape,
        out_channels: usize,
        k: usize,
        pad: usize,
        init_scale: f64,
        site: usize,
        rng: &mut Rng,
    ) -> Self {
        let fan_in = input.channels * k * k;
        Conv2d {
            weight: Param::new(
                "weight",
                site,
                init_uniform((out_channels, fan_in), fan_in, init_scale, rng),
            ),
            bias: Param::new("bias", site, Array2::zeros((1, out_channels))),
            input,
            out_channels,
            k,
            pad,
            cols: None,
        }
    }

    /// The shape of the output images.
    #[must_use]
    pub fn output_shape(&self) -> ImageShape {
        ImageShape {
            channels: self.out_channels,
            height: (self.input.height + 2 * self.pad + 1).saturating_sub(self.k),
            width: (self.input.width + 2 * self.pad + 1).saturating_sub(self.k),
        }
    }

    /// Calls `f(col_row, col_column, input_index)` for every entry of the im2col matrix that
    /// falls inside the image.
    fn for_each_tap(&self, batch: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        let (s, o, k) = (self.input, self.output_shape(), self.k);
        for n in 0..batch {
            for y in 0..o.height {
                for x in 0..o.width {
                    let row = (n * o.height + y) * o.width + x;
                    for c in 0..s.channels {
                        for i in 0..k {
                            let Some(iy) = (y + i).checked_sub(self.pad).filter(|&v| v < s.height)
                            else {
                                continue;
                            };
                            for j in 0..k {
                                let Some(ix) =
                                    (x + j).checked_sub(self.pad).filter(|&v| v < s.width)
                                else {
                                    continue;
                                };
                                f(
                                    n,
                                    row,
                                    (c * k + i) * k + j,
                                    (c * s.height + iy) * s.width + ix,
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Sets the weight and bias gradients from `dy`; returns the forward pass's im2col matrix
    /// (taken: the caller puts it back) and `dy` as one row per output pixel (as cast when the
    /// recipe casts it per tensor), or `None` before any forward pass.
    fn backward_params_cols(
        &mut self,
        dy: &Array2<T>,
        p: &mut Precision,
    ) -> Option<(Array2<T>, Array2<T>)> {
        let cols = self.cols.take()?;
        let batch = dy.nrows();
        let o = self.output_shape();
        let hw = o.height * o.width;
        let mut dy_cols = Array2::zeros((batch * hw, o.channels));
        for n in 0..batch {
            for c in 0..o.channels {
                for q in 0..hw {
                    dy_cols[[n * hw + q, c]] = dy[[n, c * hw + q]];
                }
            }
        }
        let per_tensor = param_grads(&mut self.weight, &mut self.bias, &cols, &dy_cols, p);
        Some((cols, per_tensor.unwrap_or(dy_cols)))
    }
}

impl<T: Real> Layer<T> for Conv2d<T> {
    fn kind(&self) -> &'static str {
        "conv2d"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let batch = x.nrows();
        let o = self.output_shape();
        let mut cols = Array2::zeros((
            batch * o.height * o.width,
            self.input.channels * self.k * self.k,
        ));
        self.for_each_tap(batch, |n, row, col, idx| cols[[row, col]] = x[[n, idx]]);
        // With operand casts, the im2col matrix is the product's input (kept cast for backward
        // when cast per tensor), its columns (c, i, j) the inputs.
        let (mut y_cols, cols, _) = forward_product(cols, &self.weight, p);
        y_cols += &self.bias.weight;
        // (n, y, x) x channel  ->  n x (channel, y, x)
        let hw = o.height * o.width;
        let mut y = Array2::zeros((batch, o.len()));
        for n in 0..batch {
            for c in 0..o.channels {
                for q in 0..hw {
                    y[[n, c * hw + q]] = y_cols[[n * hw + q, c]];
                }
            }
        }
        p.store_array(Class::Activation, &mut y);
        self.cols = Some(cols);
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let batch = dy.nrows();
        let Some((cols, dy_cols)) = self.backward_params_cols(&dy, p) else {
            return Array2::zeros((batch, self.input.len()));
        };
        // dcols = dy_cols W sums over the out channels: axis 1 of dy_cols, axis 0 of W. (A
        // per-tensor cast of W is made again: the same values, with this step's scale.)
        let dy_cols = p
            .block_operand(
                Class::GemmGradOutput,
                "grad_output",
                dy_cols.view(),
                Axis(1),
            )
            .unwrap_or(dy_cols);
        let weight_operand = p.operand(
            Class::GemmWeight,
            self.weight.name,
            self.weight.weight.view(),
            Axis(0),
        );
        let w = weight_operand.as_ref().unwrap_or(&self.weight.weight);
        let dcols = p.matmul(dy_cols.view(), w.view(), Class::ActivationGrad);
        let mut dx = Array2::zeros((batch, self.input.len()));
        self.for_each_tap(batch, |n, row, col, idx| dx[[n, idx]] += dcols[[row, col]]);
        p.store_array(Class::ActivationGrad, &mut dx);
        self.cols = Some(cols);
        dx
    }

    fn backward_params(&mut self, dy: Array2<T>, p: &mut Precision) {
        if let Some((cols, _)) = self.backward_params_cols(&dy, p) {
            self.cols = Some(cols);
        }
    }

    fn params(&self) -> Vec<&Param<T>> {
        vec![&self.weight, &self.bias]
    }

    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        vec![&mut self.weight, &mut self.bias]
    }
}

/// Flattens images (channels, height, width) into feature vectors for a linear layer: with one
/// row per example already in channel-major order, the identity in both directions
/// (`dL/dx = dL/dy`).
#[derive(Clone, Copy, Debug)]
pub struct Flatten {
    /// The shape of the images flattened.
    pub shape: ImageShape,
}

impl<T: Real> Layer<T> for Flatten {
    fn kind(&self) -> &'static str {
        "flatten"
    }

    fn forward(&mut self, x: Array2<T>, _: &mut Precision) -> Array2<T> {
        debug_assert_eq!(x.ncols(), self.shape.len());
        x
    }

    fn backward(&mut self, dy: Array2<T>, _: &mut Precision) -> Array2<T> {
        dy
    }
}

/// Max pooling over non-overlapping `k × k` windows (stride `k`; rows and columns that do not
/// fill a window are dropped). The gradient goes to the first maximum of each window.
#[derive(Clone, Debug)]
pub struct MaxPool2d {
    input: ImageShape,
    k: usize,
    argmax: Option<Array2<usize>>,
}

impl MaxPool2d {
    /// Pooling of `input` images with `k × k` windows (`k >= 1`).
    #[must_use]
    pub fn new(input: ImageShape, k: usize) -> Self {
        MaxPool2d {
            input,
            k: k.max(1),
            argmax: None,
        }
    }

    /// The shape of the output images.
    #[must_use]
    pub fn output_shape(&self) -> ImageShape {
        ImageShape {
            channels: self.input.channels,
            height: self.input.height / self.k,
            width: self.input.width / self.k,
        }
    }
}

impl<T: Real> Layer<T> for MaxPool2d {
    fn kind(&self) -> &'static str {
        "maxpool2d"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let (s, o, k) = (self.input, self.output_shape(), self.k);
        let mut y = Array2::zeros((x.nrows(), o.len()));
        let mut argmax = Array2::zeros((x.nrows(), o.len()));
        for (n, row) in x.axis_iter(Axis(0)).enumerate() {
            for c in 0..o.channels {
                for oy in 0..o.height {
                    for ox in 0..o.width {
                        let mut best = (usize::MAX, T::neg_infinity());
                        for i in 0..k {
                            for j in 0..k {
                                let idx = (c * s.height + oy * k + i) * s.width + ox * k + j;
                                // NaN propagates: it is taken as the maximum.
                                if best.0 == usize::MAX || row[idx] > best.1 || row[idx].is_nan() {
                                    best = (idx, row[idx]);
                                }
                            }
                        }
                        let out = (c * o.height + oy) * o.width + ox;
                        y[[n, out]] = best.1;
                        argmax[[n, out]] = best.0;
                    }
                }
            }
        }
        p.store_array(Class::Activation, &mut y);
        self.argmax = Some(argmax);
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let mut dx = Array2::zeros((dy.nrows(), self.input.len()));
        if let Some(argmax) = &self.argmax {
            for ((n, out), &idx) in argmax.indexed_iter() {
                dx[[n, idx]] += dy[[n, out]];
            }
        }
        p.store_array(Class::ActivationGrad, &mut dx);
        dx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::{check_layer, random};

    fn image(channels: usize, height: usize, width: usize) -> ImageShape {
        ImageShape {
            channels,
            height,
            width,
        }
    }

    #[test]
    fn flatten_gradient_check() {
        let mut rng = Rng::new(12);
        let shape = image(2, 3, 2);
        let x = random((3, shape.len()), &mut rng);
        check_layer(&mut Flatten { shape }, &x, 13);
    }

    #[test]
    fn conv_gradient_check() {
        let mut rng = Rng::new(11);
        for (c, h, w, oc, k, pad) in [(1, 4, 4, 2, 3, 1), (2, 5, 3, 3, 2, 0), (1, 1, 1, 1, 1, 0)] {
            let shape = image(c, h, w);
            let mut layer = Conv2d::<f64>::new(shape, oc, k, pad, 1.0, 0, &mut rng);
            layer.bias.weight = random((1, oc), &mut rng);
            let x = random((2, shape.len()), &mut rng);
            check_layer(&mut layer, &x, 12);
        }
    }

    #[test]
    fn conv_matches_a_direct_loop() {
        let mut rng = Rng::new(13);
        let shape = image(2, 4, 3);
        let mut layer = Conv2d::<f64>::new(shape, 2, 3, 1, 1.0, 0, &mut rng);
        let x = random((1, shape.len()), &mut rng);
        let mut p = Precision::exact();
        p.register("c");
        let y = layer.forward(x.clone(), &mut p);
        let at = |c: usize, yy: isize, xx: isize| {
            if yy < 0 || xx < 0 || yy >= 4 || xx >= 3 {
                0.0
            } else {
                x[[0, (c * 4 + yy as usize) * 3 + xx as usize]]
            }
        };
        for oc in 0..2 {
            for yy in 0..4 {
                for xx in 0..3 {
                    let mut want = layer.bias.weight[[0, oc]];
                    for c in 0..2 {
                        for i in 0..3 {
                            for j in 0..3 {
                                want += layer.weight.weight[[oc, (c * 3 + i) * 3 + j]]
                                    * at(c, yy + i as isize - 1, xx + j as isize - 1);
                            }
                        }
                    }
                    let got = y[[0, (oc * 4 + yy as usize) * 3 + xx as usize]];
                    assert!((got - want).abs() < 1e-14, "{got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn maxpool_gradient_check_and_values() {
        let mut rng = Rng::new(14);
        let shape = image(2, 4, 5);
        let x = random((3, shape.len()), &mut rng);
        check_layer(&mut MaxPool2d::new(shape, 2), &x, 15);
        let mut p = Precision::exact();
        p.register("m");
        let one = image(1, 2, 2);
        let y = MaxPool2d::new(one, 2).forward(ndarray::arr2(&[[1.0f64, -3.0, 7.0, 2.0]]), &mut p);
        assert_eq!(y, ndarray::arr2(&[[7.0]]));
    }
}
