//! Layer normalisation over the features of each example.

use ndarray::{Array1, Array2, Axis, Zip};

use super::{Layer, Param};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::Real;

/// `y = γ x̂ + β` with `x̂ = (x - μ) / σ`, `μ` and `σ² + ε` the row's mean and (biased) variance
/// plus `ε` (`σ = sqrt(var + ε)`):
/// ```text
/// dL/dγ = Σ_rows dy x̂            dL/dβ = Σ_rows dy
/// dL/dx = (g - mean(g) - x̂ mean(g x̂)) / σ        with g = dy γ
/// ```
/// The statistics are computed in FP32 unless the recipe's `fp32_ops.norm_stats` is off, when
/// `μ` and `σ` are rounded to the activation format.
#[derive(Clone, Debug)]
pub struct LayerNorm<T> {
    /// Scale γ, (1, features), initially 1.
    pub gamma: Param<T>,
    /// Shift β, (1, features), initially 0.
    pub beta: Param<T>,
    eps: f64,
    kept: Option<(Array2<T>, Array1<T>)>,
}

impl<T: Real> LayerNorm<T> {
    /// A layer over `features` features owned by site `site`, with `ε = 1e-5` (PyTorch's default).
    #[must_use]
    pub fn new(features: usize, site: usize) -> Self {
        LayerNorm {
            gamma: Param::new("weight", site, Array2::ones((1, features))),
            beta: Param::new("bias", site, Array2::zeros((1, features))),
            eps: 1e-5,
            kept: None,
        }
    }
}

impl<T: Real> Layer<T> for LayerNorm<T> {
    fn kind(&self) -> &'static str {
        "layernorm"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let d = T::of(x.ncols().max(1) as f64);
        let mut mean = x.sum_axis(Axis(1)) / d;
        let low = !p.recipe().fp32_ops.norm_stats;
        if low {
            p.set_tensor("mean");
            p.store(Class::Activation, mean.as_slice_mut().unwrap_or(&mut []));
        }
        let mut xhat = &x - &mean.view().insert_axis(Axis(1));
        let var = xhat.mapv(|v| v * v).sum_axis(Axis(1)) / d;
        let mut sigma = var.mapv(|v| (v + T::of(self.eps)).sqrt());
        if low {
            p.set_tensor("sigma");
            p.store(Class::Activation, sigma.as_slice_mut().unwrap_or(&mut []));
        }
        p.set_tensor("");
        xhat /= &sigma.view().insert_axis(Axis(1));
        let mut y = &xhat * &self.gamma.weight + &self.beta.weight;
        p.store_array(Class::Activation, &mut y);
        self.kept = Some((xhat, sigma));
        y
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let Some((xhat, sigma)) = self.kept.as_ref() else {
            return dy;
        };
        let prod = &dy * xhat;
        self.gamma
            .set_grad(p.sum_rows(prod.view(), Class::WeightGrad), p);
        self.beta
            .set_grad(p.sum_rows(dy.view(), Class::WeightGrad), p);
        let g = &dy * &self.gamma.weight;
        let d = T::of(g.ncols().max(1) as f64);
        let mean_g = g.sum_axis(Axis(1)) / d;
        let mean_gx = (&g * xhat).sum_axis(Axis(1)) / d;
        let mut dx = g;
        for (i, mut row) in dx.axis_iter_mut(Axis(0)).enumerate() {
            let (mg, mgx, s) = (mean_g[i], mean_gx[i], sigma[i]);
            Zip::from(&mut row)
                .and(xhat.row(i))
                .for_each(|v, &xh| *v = (*v - mg - xh * mgx) / s);
        }
        p.store_array(Class::ActivationGrad, &mut dx);
        dx
    }

    fn params(&self) -> Vec<&Param<T>> {
        vec![&self.gamma, &self.beta]
    }

    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        vec![&mut self.gamma, &mut self.beta]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::{check_layer, random};
    use crate::train::rng::Rng;

    #[test]
    fn gradient_check() {
        let mut rng = Rng::new(21);
        let mut layer = LayerNorm::<f64>::new(6, 0);
        layer.gamma.weight = random((1, 6), &mut rng);
        layer.beta.weight = random((1, 6), &mut rng);
        let x = random((4, 6), &mut rng);
        check_layer(&mut layer, &x, 22);
    }

    /// `fp32_ops.norm_stats` under fp16: rows with a large mean and a small spread (1000 plus
    /// multiples of an fp16 ulp there, 0.5; -2048 minus multiples of 2). Kept in FP32, the statistics give the f64
    /// LayerNorm to within the rounding of its output to fp16 (half an ulp, at most
    /// `|y| 2^-11`, plus a little for f32's own error). Rounded to fp16, the mean of
    /// `[1000, 1000.5, 1000.5, 1000.5]` (1000.375) becomes 1000.5 and the output is
    /// `[-2, 0, 0, 0]` instead of `[-1.73, 0.58, 0.58, 0.58]`.
    #[test]
    fn norm_stats_in_fp32_follow_f64_and_in_fp16_do_not() {
        use crate::recipe::Recipe;
        let rows = [
            [1000.0, 1000.5, 1000.5, 1000.5],
            [1000.0, 1000.0, 1000.0, 1001.5],
            [-2048.0, -2050.0, -2050.0, -2050.0],
            [0.25, -0.5, 0.125, 1.0],
        ];
        let x = Array2::from_shape_fn((rows.len(), 4), |(i, j)| rows[i][j] as f32);
        let (gamma, beta) = ([1.5f32, -0.75, 1.0, 2.0], [0.25f32, 0.0, -0.5, 1.0]);
        let run = |norm_stats: bool| {
            let mut recipe = Recipe::preset("fp16-master").unwrap();
            recipe.fp32_ops.norm_stats = norm_stats;
            let mut p = Precision::new(&recipe, 0);
            p.register("n");
            let mut layer = LayerNorm::<f32>::new(4, 0);
            layer.gamma.weight = Array2::from_shape_fn((1, 4), |(_, j)| gamma[j]);
            layer.beta.weight = Array2::from_shape_fn((1, 4), |(_, j)| beta[j]);
            layer.forward(x.clone(), &mut p)
        };
        // The f64 reference (`eps` as the layer's).
        let reference = Array2::from_shape_fn(x.dim(), |(i, j)| {
            let r = rows[i];
            let mean = r.iter().sum::<f64>() / 4.0;
            let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 4.0;
            f64::from(gamma[j]) * (r[j] - mean) / (var + 1e-5).sqrt() + f64::from(beta[j])
        });
        let within_output_rounding =
            |y: f32, want: f64| (f64::from(y) - want).abs() <= want.abs() * 2f64.powi(-11) * 1.01;
        let fp32 = run(true);
        for (&y, &want) in fp32.iter().zip(&reference) {
            assert!(within_output_rounding(y, want), "{y} vs {want}");
        }
        let fp16 = run(false);
        assert_eq!(fp16.row(0).to_vec(), [-2.75, 0.0, -0.5, 1.0]);
        let off = fp16
            .iter()
            .zip(&reference)
            .filter(|&(&y, &want)| !within_output_rounding(y, want))
            .count();
        assert!(off >= 8, "{off} outputs off with fp16 statistics: {fp16}");
    }

    #[test]
    fn output_rows_are_normalised() {
        let mut p = Precision::exact();
        p.register("n");
        let x = random((3, 8), &mut Rng::new(2)).mapv(|v| 5.0 * v + 3.0);
        let y = LayerNorm::<f64>::new(8, 0).forward(x, &mut p);
        for row in y.axis_iter(Axis(0)) {
            let m = row.sum() / 8.0;
            let v = row.mapv(|a| (a - m) * (a - m)).sum() / 8.0;
            assert!(m.abs() < 1e-12 && (v - 1.0).abs() < 1e-3, "{m} {v}");
        }
    }
}
