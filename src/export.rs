//! Exports: run directories written in other tools' formats ([`tensorboard`]: TensorBoard event
//! files, what `mixprec tensorboard` runs).

pub mod tensorboard;
