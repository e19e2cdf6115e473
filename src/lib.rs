//! mixprec: the numerics of mixed-precision training.
//!
//! Exact low-precision rounding ([`format`]), and on top of it tensor range analysis, an
//! instrumented training core and reports. Data flows one way: `format` -> `stats` -> `io` ->
//! `train` -> `report` -> `cli`.

pub mod cli;
pub mod error;
pub mod format;
pub mod io;
pub mod report;
pub mod stats;

pub use error::{Error, Result};
