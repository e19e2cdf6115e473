//! The GAN's training step: the generator and discriminator of a [`GanConfig`] trained in
//! alternation under one loss scaler.

use ndarray::{Array2, Axis, concatenate};

use super::{Ended, on_worker, record};
use crate::error::Error;
use crate::recipe::Class;
use crate::run::schema::StepRecord;
use crate::scaling::scaler::{LossScaler, LossScaling};
use crate::train::data::{RING_MODES, RING_RADIUS, RING_STD};
use crate::train::layer::{Activation, grads_finite};
use crate::train::loss::{Loss, Targets};
use crate::train::model::{GanConfig, MlpConfig, Sequential};
use crate::train::optim::{Optimizer, OptimizerConfig, UpdateStats};
use crate::train::precision::Precision;
use crate::train::rng::Rng;

/// The two networks with their optimizers and one loss scaler (PyTorch's pattern for GANs under
/// AMP: each optimizer's step is skipped when its own gradients overflowed, and the scale is
/// updated once per iteration from both).
pub struct GanTrainer {
    /// The generator.
    pub generator: Sequential<f32>,
    /// The discriminator.
    pub discriminator: Sequential<f32>,
    /// The storage points (sites `noise`, `g.*`, `real`, `d.*`, `loss`).
    pub precision: Precision,
    opt_g: Box<dyn Optimizer<f32>>,
    opt_d: Box<dyn Optimizer<f32>>,
    scaler: LossScaler,
    rng: Rng,
    noise: usize,
    sites: [usize; 3],
    step: u64,
}

impl GanTrainer {
    /// Both networks for points of `dims` coordinates, with weights from `Rng::derive(seed, 1)`
    /// and noise from `Rng::derive(seed, 3)`, under the loss-scaling policy `loss_scaling`.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for a zero size.
    pub fn new(
        config: &GanConfig,
        dims: usize,
        mut precision: Precision,
        optimizer: &OptimizerConfig,
        loss_scaling: LossScaling,
        seed: u64,
    ) -> crate::Result<Self> {
        if config.noise == 0 || config.width == 0 || dims == 0 {
            return Err(Error::InvalidValue {
                what: "gan size",
                value: "0".into(),
                expected: "noise, width and data dimension at least 1",
            });
        }
        let mlp = MlpConfig {
            depth: config.depth,
            width: config.width,
            activation: Activation::Relu,
            init_scale: 1.0,
        };
        let mut rng = Rng::derive(seed, 1);
        let noise_site = precision.register("noise");
        let mut generator = mlp.build_prefixed("g.", config.noise, dims, &mut precision, &mut rng);
        let real_site = precision.register("real");
        let mut discriminator = mlp.build_prefixed("d.", dims, 1, &mut precision, &mut rng);
        let loss_site = precision.register("loss");
        for param in generator
            .params_mut()
            .into_iter()
            .chain(discriminator.params_mut())
        {
            param.sync(&mut precision);
        }
        Ok(GanTrainer {
            generator,
            discriminator,
            scaler: LossScaler::new(loss_scaling),
            precision,
            opt_g: optimizer.build(),
            opt_d: optimizer.build(),
            rng: Rng::derive(seed, 3),
            noise: config.noise,
            sites: [noise_site, real_site, loss_site],
            step: 0,
        })
    }

    fn sample_noise(&mut self, n: usize) -> Array2<f32> {
        let mut z = Array2::from_shape_simple_fn((n, self.noise), || self.rng.normal() as f32);
        self.precision.enter(self.sites[0]);
        self.precision.store_array(Class::Activation, &mut z);
        z
    }

    /// Scaled BCE gradient of `logits` against a constant `target`, stored at the loss site.
    fn loss_grad(
        &mut self,
        logits: &Array2<f32>,
        target: &Array2<f32>,
        scale: f32,
    ) -> crate::Result<(f64, Array2<f32>)> {
        self.precision.enter(self.sites[2]);
        let (loss, mut g) =
            Loss::BceWithLogits.evaluate(logits, Targets::Values(target), &mut self.precision)?;
        g.mapv_inplace(|v| v * scale);
        self.precision.store_array(Class::ActivationGrad, &mut g);
        Ok((loss, g))
    }

    /// One iteration on a batch of real points: a discriminator step, then a generator step.
    /// `loss` in the record is the discriminator's, `generator_loss` the generator's.
    ///
    /// # Errors
    /// Only if the loss rejects its targets (which cannot happen for matching shapes).
    pub fn step(&mut self, real: &Array2<f32>) -> crate::Result<StepRecord> {
        on_worker(|| self.step_here(real))
    }

    fn step_here(&mut self, real: &Array2<f32>) -> crate::Result<StepRecord> {
        self.step += 1;
        self.precision.begin_step();
        let n = real.nrows();
        let scale = self.scaler.scale();
        // Discriminator: real points labelled 1, generated points 0.
        let z = self.sample_noise(n);
        let fake = self.generator.forward(z, &mut self.precision);
        self.precision.enter(self.sites[1]);
        let mut real = real.clone();
        self.precision.store_array(Class::Activation, &mut real);
        let both = concatenate(Axis(0), &[real.view(), fake.view()])
            .unwrap_or_else(|_| Array2::zeros((0, 2)));
        let logits = self.discriminator.forward(both, &mut self.precision);
        let mut target = Array2::zeros((2 * n, 1));
        target.slice_mut(ndarray::s![..n, ..]).fill(1.0);
        let (d_loss, g) = self.loss_grad(&logits, &target, scale)?;
        self.discriminator.backward_params(g, &mut self.precision);
        let mut d_params = self.discriminator.params_mut();
        let d_overflow = !grads_finite(&d_params, &self.precision);
        let skip_d = d_overflow && self.scaler.skips_on_overflow();
        let mut stats = UpdateStats::default();
        if !skip_d {
            stats += self
                .opt_d
                .step(&mut d_params, 1.0 / scale, &mut self.precision);
        }
        // Generator: its points labelled 1, through the (just updated) discriminator.
        let z = self.sample_noise(n);
        let fake = self.generator.forward(z, &mut self.precision);
        let logits = self.discriminator.forward(fake, &mut self.precision);
        let (g_loss, g) = self.loss_grad(&logits, &Array2::ones((n, 1)), scale)?;
        let d_fake = self.discriminator.backward(g, &mut self.precision);
        self.generator.backward_params(d_fake, &mut self.precision);
        let mut g_params = self.generator.params_mut();
        let g_overflow = !grads_finite(&g_params, &self.precision);
        let skip_g = g_overflow && self.scaler.skips_on_overflow();
        if !skip_g {
            stats += self
                .opt_g
                .step(&mut g_params, 1.0 / scale, &mut self.precision);
        }
        self.scaler.update(d_overflow || g_overflow)?;
        Ok(record(
            &self.precision,
            Ended {
                step: self.step,
                loss: d_loss,
                generator_loss: Some(g_loss),
                scale,
                overflow: d_overflow || g_overflow,
                skipped: skip_d || skip_g,
                updates_lost: stats.lost_share(),
            },
        ))
    }

    /// `n` generated points (rounded as in training, not counted).
    /// The noise stream is put back afterwards, so that sampling (an evaluation) leaves training
    /// exactly as it would have been without it.
    pub fn sample(&mut self, n: usize) -> Array2<f32> {
        let noise = self.rng.clone();
        self.precision.set_recording(false);
        let z = self.sample_noise(n);
        let x = self.generator.forward(z, &mut self.precision);
        self.precision.set_recording(true);
        self.rng = noise;
        x
    }

    /// Modes of the ring covered by 2,000 generated points: a mode is covered when at least 1%
    /// of the points lie within 4 standard deviations of its centre (0 to [`RING_MODES`]).
    pub fn modes_covered(&mut self) -> f64 {
        let x = self.sample(2000);
        let mut hits = [0usize; RING_MODES];
        for row in x.axis_iter(Axis(0)) {
            for (k, hit) in hits.iter_mut().enumerate() {
                let angle = std::f64::consts::TAU * k as f64 / RING_MODES as f64;
                let (dx, dy) = (
                    f64::from(row[0]) - RING_RADIUS * libm::cos(angle),
                    f64::from(row[1]) - RING_RADIUS * libm::sin(angle),
                );
                if (dx * dx + dy * dy).sqrt() < 4.0 * RING_STD {
                    *hit += 1;
                }
            }
        }
        hits.iter().filter(|&&h| h >= 20).count() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::Recipe;
    use crate::train::data::ring;

    #[test]
    fn steps_update_both_networks_and_name_their_sites() {
        let data = ring(0);
        let opt = OptimizerConfig::Adam {
            lr: 1e-3,
            beta1: 0.5,
            beta2: 0.999,
            eps: 1e-8,
        };
        let recipe = Recipe::preset("fp16-dynamic").unwrap();
        let p = Precision::new(&recipe, 0);
        let config = GanConfig::default();
        let mut gan = GanTrainer::new(&config, 2, p, &opt, recipe.loss_scaling, 0).unwrap();
        let g0 = gan.generator.params()[0].master.clone();
        let d0 = gan.discriminator.params()[0].master.clone();
        let real = data.train_x.slice(ndarray::s![..64, ..]).to_owned();
        let r = gan.step(&real).unwrap();
        assert!(r.loss.is_finite() && r.generator_loss.is_some_and(f64::is_finite));
        assert_ne!(gan.generator.params()[0].master, g0);
        assert_ne!(gan.discriminator.params()[0].master, d0);
        assert!(gan.precision.layers().iter().any(|l| l == "g.0.linear"));
        assert!(gan.precision.layers().iter().any(|l| l == "d.4.linear"));
    }

    /// The master weights of every parameter of `net`, in order.
    fn masters(net: &Sequential<f32>) -> Vec<Array2<f32>> {
        net.params().iter().map(|q| q.master.clone()).collect()
    }

    fn sgd_gan(recipe: &str) -> GanTrainer {
        let recipe = Recipe::preset(recipe).unwrap();
        let p = Precision::new(&recipe, 0);
        let opt = OptimizerConfig::Sgd {
            lr: 0.01,
            momentum: 0.0,
        };
        GanTrainer::new(&GanConfig::default(), 2, p, &opt, recipe.loss_scaling, 0).unwrap()
    }

    /// A generator whose last layer ignores its input puts every point at its bias: on one mode
    /// of the ring, one mode covered; half-way between two modes, none.
    #[test]
    fn modes_covered_counts_the_modes_the_points_fall_on() {
        let mut gan = sgd_gan("fp32");
        for (point, modes) in [((RING_RADIUS, 0.0), 1.0), ((0.0, 0.0), 0.0)] {
            for q in gan.generator.params_mut() {
                if gan.precision.layers()[q.site] == "g.4.linear" {
                    match q.name {
                        "weight" => q.master.fill(0.0),
                        _ => q
                            .master
                            .assign(&ndarray::arr2(&[[point.0 as f32, point.1 as f32]])),
                    }
                    q.sync(&mut gan.precision);
                }
            }
            assert_eq!(gan.modes_covered(), modes, "{point:?}");
        }
    }

    /// The generator's step moves it toward what the discriminator calls real: through the
    /// updated discriminator, its points on fixed noise score higher after the generator's
    /// update than before (the generator's loss, BCE toward "real", falls).
    #[test]
    fn the_generator_step_makes_its_points_look_more_real() {
        let mut gan = sgd_gan("fp32");
        let real = ring(0).train_x.slice(ndarray::s![..64, ..]).to_owned();
        let before = masters(&gan.generator);
        gan.step(&real).unwrap();
        let z = Array2::from_shape_fn((256, 8), |(i, j)| ((i * 8 + j) as f32 * 0.37).sin());
        let fake_loss = |gan: &mut GanTrainer| {
            let x = gan.generator.forward(z.clone(), &mut gan.precision);
            let logits = gan.discriminator.forward(x, &mut gan.precision);
            // BCE toward 1 on logits: softplus(-l).
            logits
                .iter()
                .map(|&l| f64::from(-l).exp().ln_1p())
                .sum::<f64>()
        };
        let after = fake_loss(&mut gan);
        for (q, w) in gan.generator.params_mut().into_iter().zip(before) {
            q.master.assign(&w);
            q.weight.assign(&w);
        }
        let untrained = fake_loss(&mut gan);
        assert!(after < untrained, "{after} vs {untrained}");
    }

    /// One scaler for both networks: an overflow in the generator's gradients alone skips the
    /// generator's update (not the discriminator's) and lowers the scale. The generator is made
    /// to overflow by moving a factor 2^12 from its middle layer into its last (ReLU is
    /// positively homogeneous: its points stay the same, its middle gradients grow 2^12 times).
    #[test]
    fn a_generator_overflow_skips_the_generator_and_lowers_the_shared_scale() {
        let mut gan = sgd_gan("fp16-dynamic");
        let real = ring(0).train_x.slice(ndarray::s![..64, ..]).to_owned();
        let factor = 2f32.powi(12);
        for q in gan.generator.params_mut() {
            let layer = gan.precision.layers()[q.site].clone();
            let f = match (layer.as_str(), q.name) {
                ("g.2.linear", _) => 1.0 / factor,
                ("g.4.linear", "weight") => factor,
                _ => continue,
            };
            q.master.mapv_inplace(|v| v * f);
            q.sync(&mut gan.precision);
        }
        let g0 = masters(&gan.generator);
        let d0 = gan.discriminator.params()[0].master.clone();
        let scale = gan.scaler.scale();
        let r = gan.step(&real).unwrap();
        assert!(r.overflow && r.skipped);
        assert_eq!(
            masters(&gan.generator),
            g0,
            "the generator's update is skipped"
        );
        assert_ne!(
            gan.discriminator.params()[0].master,
            d0,
            "the discriminator's is not"
        );
        assert_eq!(gan.scaler.scale(), scale / 2.0);
    }
}
