//! The library's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in mixprec, with the fields a caller needs to say what happened.
///
/// Numerical events (underflow, overflow, NaN) are not errors: they are counted and reported as data
/// (see [`crate::format::RoundCounts`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A format name that is neither a preset nor a valid `eXmY`.
    #[error(
        "unknown format '{name}': expected one of fp32, tf32, fp16, bf16, fp8-e4m3 (e4m3fn), fp8-e5m2, or eXmY with X in 2..=8 and Y in 1..=23"
    )]
    UnknownFormat {
        /// The name as given.
        name: String,
    },
    /// A value of an option that is not one of its allowed values.
    #[error("invalid {what} '{value}': expected {expected}")]
    InvalidValue {
        /// Which option or field.
        what: &'static str,
        /// The value as given.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// A line of numeric input that does not parse.
    #[error("input line {line}: '{text}' is not a number")]
    NotANumber {
        /// 1-based line number.
        line: u64,
        /// The offending text (trimmed, shortened).
        text: String,
    },
    /// A line of input longer than the longest accepted (no number needs more).
    #[error("input line {line}: longer than {limit} bytes without a newline: not a number")]
    LineTooLong {
        /// 1-based line number.
        line: u64,
        /// The longest line accepted, in bytes.
        limit: usize,
    },
    /// A file that cannot be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file that was read but does not hold what it should.
    #[error("{}: {problem}", path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
