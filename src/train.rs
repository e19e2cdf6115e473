//! The instrumented training core: layers with explicit forward and backward passes, models,
//! data, optimizers, precision recipes and loss scalers, with every storage point observable.
//!
//! # How precision is simulated
//! Values are held in f32 and rounded to the recipe's format at every point where hardware would
//! store them ([`precision::Precision::store`]): layer outputs, gradients, weights, optimizer state
//! and master weights. A GEMM on rounded inputs with f32 accumulation is "low-precision multiply,
//! FP32 accumulate" (the product of two fp16 values is exact in f32); accumulation in the storage
//! format is a separate, slow path ([`precision::matmul_rounded`]). The same layer code in f64 with
//! no rounding is the reference for the finite-difference gradient checks.
//!
//! # One training step
//! ```text
//! x  -> round(activation) -> layers (each output rounded) -> loss (FP32 by default)
//! dz = S * dL/dz -> round(activation grad) -> backward (weight grads rounded)
//! overflow = any non-finite weight gradient
//! skip if overflow and loss scaling is on; else g = grad / S (FP32), optimizer state rounded,
//! master = round(master + update) (one fused rounding), weights = round(master)
//! ```
//!
//! # Training from the command line
//! ```text
//! mixprec train --recipe fp16-dynamic --steps 800 --out runs/digits-fp16
//! mixprec train --config analyses/underflow/fp16-master.json --out runs/underflow
//! mixprec train --model cnn --dataset digits --recipe bf16-master --lr 0.003 --out runs/cnn
//! mixprec train --model lstm --dataset recall --recipe fp16-master --out runs/lstm
//! mixprec train --model gan --dataset ring --recipe fp8-hybrid --out runs/gan
//! ```
//! Flags override the config file ([`config::TrainConfig`]); the run directory's contents are
//! described in [`crate::run`]. Models: MLP, CNN, LSTM, GAN ([`model`]); data: the embedded UCI digits,
//! synthetic blobs, spirals, the `recall` sequence task, the `ring` of Gaussians, a CSV, `.npz` or
//! `.npy` file ([`data`]); recipes: [`crate::recipe`]; optimizers: SGD with momentum and Adam ([`optim`]);
//! loss scaling: [`crate::scaling`] (also reachable as `train::scaler`).

pub mod budget;
pub mod capture;
pub mod config;
pub mod data;
pub mod grid;
pub mod layer;
pub mod loss;
pub mod model;
pub mod optim;
pub mod plan;
pub mod precision;
pub mod real;
pub mod rng;
pub mod step;
pub mod training;

/// The loss scaler, at its former path (it lives in [`crate::scaling`], below the training core).
pub use crate::scaling::scaler;

pub use config::TrainConfig;
pub use precision::Precision;
pub use real::Real;
pub use rng::Rng;
