//! Loss scaling as data: the scaler and its parameters ([`scaler`]), the frameworks' policies by
//! name ([`policy`]), the loss-scale window of a step's gradients ([`window`]), and the open-loop
//! replay of policies over a recorded run's gradients ([`replay`]).
//!
//! This layer sits below the training core (which runs a [`scaler::LossScaler`]) and above
//! `stats` (whose sweeps and recommendations give the window); it reads no files: the commands
//! on top hand it a run's per-step records.

pub mod delayed;
pub mod policy;
pub mod replay;
pub mod scaler;
pub mod window;
