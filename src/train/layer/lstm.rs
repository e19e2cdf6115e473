//! The LSTM, unrolled over a row's time steps, returning the last hidden state.

use ndarray::{Array2, Axis, s};

use super::{Layer, Param, init_uniform};
use crate::recipe::Class;
use crate::train::precision::Precision;
use crate::train::real::Real;
use crate::train::rng::Rng;

/// An LSTM over `T` steps of `inputs` features (a row is the steps side by side, `T·inputs`
/// values), returning `h_T` (many-to-one). Gates in the order input, forget, cell, output:
/// ```text
/// z = x_t Wxᵀ + h_{t-1} Whᵀ + b                   (4H)
/// i = σ(z_i)  f = σ(z_f)  g = tanh(z_g)  o = σ(z_o)
/// c_t = f ⊙ c_{t-1} + i ⊙ g        h_t = o ⊙ tanh(c_t)          h_0 = c_0 = 0
/// ```
/// Backward through time, from `dh = dL/dh_T`, `dc = 0`, for `t = T..1`:
/// ```text
/// dc += dh ⊙ o ⊙ (1 - tanh² c_t)
/// dz_i = dc ⊙ g ⊙ i(1-i)   dz_f = dc ⊙ c_{t-1} ⊙ f(1-f)   dz_g = dc ⊙ i ⊙ (1-g²)
/// dz_o = dh ⊙ tanh(c_t) ⊙ o(1-o)
/// dWx += dzᵀ x_t   dWh += dzᵀ h_{t-1}   db += Σ dz   dx_t = dz Wx   dh = dz Wh   dc = dc ⊙ f
/// ```
/// Storage points: every step's gates and states are activations, every step's `dz` and `dh`
/// activation gradients; the weight gradients are summed over time in FP32 and stored once.
#[derive(Clone, Debug)]
pub struct Lstm<T> {
    /// Input weights, (4H, inputs).
    pub wx: Param<T>,
    /// Recurrent weights, (4H, H).
    pub wh: Param<T>,
    /// Bias, (1, 4H); the forget gate's part starts at 1.
    pub bias: Param<T>,
    inputs: usize,
    hidden: usize,
    cache: Option<Cache<T>>,
}

#[derive(Clone, Debug)]
struct Cache<T> {
    x: Array2<T>,
    /// Per step: gates after their nonlinearities, (batch, 4H).
    gates: Vec<Array2<T>>,
    /// Per step `t`: `c_t` (index 0 is `c_0`).
    c: Vec<Array2<T>>,
    /// Per step `t`: `h_t` (index 0 is `h_0`).
    h: Vec<Array2<T>>,
}

fn sigmoid<T: Real>(v: T) -> T {
    T::one() / (T::one() + (-v).libm_exp())
}

impl<T: Real> Lstm<T> {
    /// An LSTM from `inputs` features per step to `hidden` units, owned by site `site`; weights
    /// uniform in `±init_scale/sqrt(hidden)` (PyTorch's default), forget-gate bias 1.
    #[must_use]
    pub fn new(inputs: usize, hidden: usize, init_scale: f64, site: usize, rng: &mut Rng) -> Self {
        let mut bias = Array2::zeros((1, 4 * hidden));
        bias.slice_mut(s![.., hidden..2 * hidden]).fill(T::one());
        Lstm {
            wx: Param::new(
                "weight_ih",
                site,
                init_uniform((4 * hidden, inputs), hidden, init_scale, rng),
            ),
            wh: Param::new(
                "weight_hh",
                site,
                init_uniform((4 * hidden, hidden), hidden, init_scale, rng),
            ),
            bias: Param::new("bias", site, bias),
            inputs,
            hidden,
            cache: None,
        }
    }
}

impl<T: Real> Layer<T> for Lstm<T> {
    fn kind(&self) -> &'static str {
        "lstm"
    }

    fn forward(&mut self, x: Array2<T>, p: &mut Precision) -> Array2<T> {
        let (batch, hd) = (x.nrows(), self.hidden);
        let steps = x.ncols() / self.inputs.max(1);
        let mut cache = Cache {
            x,
            gates: Vec::new(),
            c: vec![Array2::zeros((batch, hd))],
            h: vec![Array2::zeros((batch, hd))],
        };
        for t in 0..steps {
            let xt = cache
                .x
                .slice(s![.., t * self.inputs..(t + 1) * self.inputs]);
            let mut z = gemm_cast(p, (xt, "input"), &self.wx, false, Class::Activation);
            z += &gemm_cast(
                p,
                (cache.h[t].view(), "hidden"),
                &self.wh,
                false,
                Class::Activation,
            );
            z += &self.bias.weight;
            for (col, mut v) in z.axis_iter_mut(Axis(1)).enumerate() {
                let cell = (2 * hd..3 * hd).contains(&col);
                v.mapv_inplace(|a| if cell { a.libm_tanh() } else { sigmoid(a) });
            }
            p.set_tensor("gates");
            p.store_array(Class::Activation, &mut z);
            let (i, f) = (z.slice(s![.., 0..hd]), z.slice(s![.., hd..2 * hd]));
            let (g, o) = (z.slice(s![.., 2 * hd..3 * hd]), z.slice(s![.., 3 * hd..]));
            let mut c = &f * &cache.c[t] + &i * &g;
            p.set_tensor("cell");
            p.store_array(Class::Activation, &mut c);
            let mut h = &o * &c.mapv(T::libm_tanh);
            p.set_tensor("hidden");
            p.store_array(Class::Activation, &mut h);
            p.set_tensor("");
            cache.gates.push(z);
            cache.c.push(c);
            cache.h.push(h);
        }
        let out = cache.h[steps].clone();
        self.cache = Some(cache);
        out
    }

    fn backward(&mut self, dy: Array2<T>, p: &mut Precision) -> Array2<T> {
        let Some(cache) = self.cache.as_ref() else {
            return Array2::zeros((dy.nrows(), 0));
        };
        let (batch, hd, one) = (dy.nrows(), self.hidden, T::one());
        let steps = cache.gates.len();
        let mut dwx = Array2::<T>::zeros(self.wx.weight.dim());
        let mut dwh = Array2::<T>::zeros(self.wh.weight.dim());
        let mut db = Array2::<T>::zeros(self.bias.weight.dim());
        let mut dx = Array2::zeros(cache.x.dim());
        let mut dh = dy;
        let mut dc = Array2::<T>::zeros((batch, hd));
        for t in (0..steps).rev() {
            let z = &cache.gates[t];
            let (i, f) = (z.slice(s![.., 0..hd]), z.slice(s![.., hd..2 * hd]));
            let (g, o) = (z.slice(s![.., 2 * hd..3 * hd]), z.slice(s![.., 3 * hd..]));
            let tc = cache.c[t + 1].mapv(T::libm_tanh);
            dc = dc + &dh * &o * &tc.mapv(|v| one - v * v);
            let mut dz = Array2::zeros((batch, 4 * hd));
            dz.slice_mut(s![.., 0..hd])
                .assign(&(&dc * &g * &i.mapv(|v| v * (one - v))));
            dz.slice_mut(s![.., hd..2 * hd])
                .assign(&(&dc * &cache.c[t] * &f.mapv(|v| v * (one - v))));
            dz.slice_mut(s![.., 2 * hd..3 * hd])
                .assign(&(&dc * &i * &g.mapv(|v| one - v * v)));
            dz.slice_mut(s![.., 3 * hd..])
                .assign(&(&dh * &tc * &o.mapv(|v| v * (one - v))));
            p.set_tensor("gates");
            p.store_array(Class::ActivationGrad, &mut dz);
            let xt = cache
                .x
                .slice(s![.., t * self.inputs..(t + 1) * self.inputs]);
            db += &p.sum_rows(dz.view(), Class::WeightGrad);
            // The products read dz, x_t and h_t as cast (with this step's scales, so x_t and h_t
            // as in forward, when cast per tensor); the bias gradient sums the uncast dz. The
            // weight gradients sum over the batch (axis 0 of dz, x_t and h_t), the input
            // gradients over the gates (axis 1 of dz, axis 0 of the weights).
            let dz_wgrad = p.operand(Class::GemmGradOutput, "grad_output", dz.view(), Axis(0));
            let dz_dgrad =
                p.block_operand(Class::GemmGradOutput, "grad_output", dz.view(), Axis(1));
            let dz_w = dz_wgrad.as_ref().unwrap_or(&dz);
            let dz_d = dz_dgrad.as_ref().unwrap_or(dz_w);
            let xq = p.operand(Class::GemmInput, "input", xt, Axis(0));
            let hq = p.operand(Class::GemmInput, "hidden", cache.h[t].view(), Axis(0));
            dwx += &p.matmul(
                dz_w.t(),
                xq.as_ref().map_or(xt, |a| a.view()),
                Class::WeightGrad,
            );
            dwh += &p.matmul(
                dz_w.t(),
                hq.as_ref().unwrap_or(&cache.h[t]).view(),
                Class::WeightGrad,
            );
            let mut dxt = gemm_cast(p, (dz_d.view(), ""), &self.wx, true, Class::ActivationGrad);
            p.set_tensor("input");
            p.store_array(Class::ActivationGrad, &mut dxt);
            dx.slice_mut(s![.., t * self.inputs..(t + 1) * self.inputs])
                .assign(&dxt);
            dh = gemm_cast(p, (dz_d.view(), ""), &self.wh, true, Class::ActivationGrad);
            p.set_tensor("hidden");
            p.store_array(Class::ActivationGrad, &mut dh);
            p.set_tensor("");
            dc = &dc * &f;
        }
        for (param, grad) in [
            (&mut self.wx, dwx),
            (&mut self.wh, dwh),
            (&mut self.bias, db),
        ] {
            param.set_grad(grad, p);
        }
        dx
    }

    fn params(&self) -> Vec<&Param<T>> {
        vec![&self.wx, &self.wh, &self.bias]
    }

    fn params_mut(&mut self) -> Vec<&mut Param<T>> {
        vec![&mut self.wx, &mut self.wh, &mut self.bias]
    }
}

/// `a Wᵀ` (forward: `a.0` is the input operand called `a.1`, cast, as the weight is, when the
/// recipe casts GEMM operands) or, with `backward`, `a W` (`a.0` is the output gradient, already
/// cast).
fn gemm_cast<T: Real>(
    p: &mut Precision,
    a: (ndarray::ArrayView2<'_, T>, &'static str),
    w: &Param<T>,
    backward: bool,
    class: Class,
) -> Array2<T> {
    // Forward sums over the inputs (axis 1 of a and W), backward over the gates (axis 0 of W).
    let w_axis = if backward { Axis(0) } else { Axis(1) };
    let cast_w = p.operand(Class::GemmWeight, w.name, w.weight.view(), w_axis);
    let w_gemm = cast_w.as_ref().unwrap_or(&w.weight);
    if backward {
        return p.matmul(a.0, w_gemm.view(), class);
    }
    let cast_a = p.operand(Class::GemmInput, a.1, a.0, Axis(1));
    match &cast_a {
        Some(x) => p.matmul(x.view(), w_gemm.t(), class),
        None => p.matmul(a.0, w_gemm.t(), class),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::layer::check::{check_layer, random};

    #[test]
    fn gradient_check_through_time() {
        let mut rng = Rng::new(41);
        for (batch, inputs, hidden, steps) in [(2, 3, 4, 3), (1, 1, 2, 1), (3, 2, 3, 5)] {
            let mut layer = Lstm::<f64>::new(inputs, hidden, 1.0, 0, &mut rng);
            layer.bias.weight = random((1, 4 * hidden), &mut rng);
            let x = random((batch, inputs * steps), &mut rng);
            check_layer(&mut layer, &x, 42);
        }
    }

    #[test]
    fn one_step_matches_the_equations() {
        let mut rng = Rng::new(43);
        let mut layer = Lstm::<f64>::new(2, 1, 1.0, 0, &mut rng);
        let x = ndarray::arr2(&[[0.3, -0.7]]);
        let mut p = Precision::exact();
        p.register("l");
        let h = layer.forward(x.clone(), &mut p)[[0, 0]];
        let gate = |k: usize| {
            layer.wx.weight[[k, 0]] * 0.3
                + layer.wx.weight[[k, 1]] * -0.7
                + layer.bias.weight[[0, k]]
        };
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let c = sig(gate(0)) * gate(2).tanh();
        assert!((h - sig(gate(3)) * c.tanh()).abs() < 1e-15);
    }
}
