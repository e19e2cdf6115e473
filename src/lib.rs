//! mixprec: the numerics of mixed-precision training.
//!
//! Exact low-precision rounding ([`mod@format`]), and on top of it tensor range analysis, an
//! instrumented training core and reports. Data flows one way: `format` and `text` -> `stats`
//! -> `io` -> `analysis` / `scaling` / `quantize` -> `run` -> `train` -> `report`; the commands
//! (`src/cli`) belong to the binary and call this library.

#![warn(missing_docs)]

pub mod analysis;
pub mod error;
pub mod export;
pub mod flags;
pub mod format;
pub mod io;
pub(crate) mod isa;
pub(crate) mod names;
pub mod quantize;
pub mod recipe;
pub mod report;
pub mod run;
pub mod scaling;
pub mod stats;
pub mod text;
pub mod train;

pub use error::{Error, Result};

/// The README's Rust examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The book's chapter on the library: its Rust examples, compiled and run as doctests.
#[doc = include_str!("../docs/src/library.md")]
#[cfg(doctest)]
pub struct BookLibraryDoctests;
