//! The library's one error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong in mixprec, with the fields a caller needs to say what happened.
///
/// Numerical events (underflow, overflow, NaN) are not errors: they are counted and reported as data
/// (see [`crate::format::RoundCounts`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A format name that is neither a preset nor a valid `eXmY`.
    #[error("unknown format '{name}': expected {expected}")]
    UnknownFormat {
        /// The name as given.
        name: String,
        /// What would be accepted: the presets, or eXmY.
        expected: String,
    },
    /// A block-scaled format name that is neither a named block format nor a valid tile.
    #[error("unknown block format '{name}': {problem}")]
    BadBlockFormat {
        /// The name as given.
        name: String,
        /// What is wrong, and what would be accepted.
        problem: String,
    },
    /// A name that is neither an element format nor a block-scaled format.
    #[error("unknown format '{name}': expected {expected}")]
    UnknownTarget {
        /// The name as given.
        name: String,
        /// What would be accepted (from the lists of names).
        expected: String,
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
    /// A loss scale (or its log2) that cannot be used, with the reason.
    #[error("{what} '{value}': {problem}")]
    BadScale {
        /// Which option or key.
        what: String,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A loss-scaling policy (`--scaler`, `--policy`, a config's `scaler`) that cannot be used.
    #[error("invalid loss scaler '{value}': {problem}")]
    BadScaler {
        /// The policy as given.
        value: String,
        /// What is wrong with it, and what would be accepted.
        problem: String,
    },
    /// The same file given twice (another spelling of its path, or a link to it).
    #[error(
        "{} is the same file as {}: give each file once (its values would be counted twice)",
        second.display(),
        first.display()
    )]
    SameFile {
        /// The file as first given.
        first: PathBuf,
        /// The same file, given again.
        second: PathBuf,
    },
    /// A tensor asked for by name that no file holds.
    #[error("--tensor '{name}': no tensor of that name in {files}")]
    NoSuchTensor {
        /// The name asked for.
        name: String,
        /// The files searched, comma-separated.
        files: String,
    },
    /// Files that hold no tensor of a float dtype.
    #[error("no float tensors to analyze in {files} ({skipped} skipped for their dtype)")]
    NoFloatTensors {
        /// The files, comma-separated.
        files: String,
        /// How many tensors were skipped for their dtype.
        skipped: usize,
    },
    /// A line of numeric input that does not parse.
    #[error("input line {line}: '{text}' is not a number")]
    NotANumber {
        /// 1-based line number.
        line: u64,
        /// The offending text (trimmed, shortened).
        text: String,
    },
    /// A NaN asked for as a bit pattern of a format that has no NaN (fp6/fp4).
    #[error("input line {line}: NaN has no bit pattern in {format} (it has no NaN)")]
    NoNanPattern {
        /// 1-based line number.
        line: u64,
        /// The format's name.
        format: String,
    },
    /// The gradients overflowed with the loss scale already at its minimum, under a scaler that
    /// stops there (DeepSpeed's default; see `scaling::scaler::DynamicScaling::stop_at_min_scale`).
    #[error(
        "the gradients overflowed with the loss scale already at its minimum ({scale}): stopping, as DeepSpeed does (raise_error_at_min_scale); set loss_scaling.stop_at_min_scale to false to keep going"
    )]
    LossScaleAtMinimum {
        /// The loss scale (the minimum).
        scale: f32,
    },
    /// A line of input longer than the longest accepted (no number needs more).
    #[error("input line {line}: longer than {limit} bytes without a newline: not a number")]
    LineTooLong {
        /// 1-based line number.
        line: u64,
        /// The longest line accepted, in bytes.
        limit: usize,
    },
    /// A run that does not fit its data or its limits (`train`, `grid`): what, why, and what
    /// would allow it.
    #[error("{what}: {problem}; {allow}")]
    DoesNotFit {
        /// The setting or the data, with its value (`batch 5000`, `labels of y.npy`).
        what: String,
        /// Why it does not fit.
        problem: String,
        /// What would make it fit.
        allow: &'static str,
    },
    /// A grid of runs that cannot be run as given (`mixprec grid`).
    #[error("{what}: {problem}")]
    Grid {
        /// What is wrong: the flag and its value, or the run.
        what: String,
        /// Why.
        problem: String,
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
    /// Options that do not go together (a loss-scale flag with a block format, `--report`
    /// with the block analysis).
    #[error("{what}: {problem}")]
    Unsupported {
        /// The flag, or the flags, as the command line spells them.
        what: String,
        /// Why, and what to use instead.
        problem: String,
    },
}

impl Error {
    /// An [`Error::Io`]: what the operating system said about `path`.
    #[must_use]
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// [`Error::io`] on `path`, for `map_err`:
    /// `std::fs::create_dir_all(dir).map_err(Error::io_at(dir))?`.
    pub fn io_at(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
        move |source| Error::io(path, source)
    }
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `Ok` when `x` is positive and finite; otherwise [`Error::InvalidValue`] for `what`, expecting
/// "a positive finite number" (the check of every scale, rate and multiplier a config gives).
///
/// # Errors
/// [`Error::InvalidValue`] for zero, a negative number, inf or NaN.
pub(crate) fn positive_finite<T: Copy + Into<f64> + std::fmt::Display>(
    what: &'static str,
    x: T,
) -> Result<()> {
    let v: f64 = x.into();
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what,
            value: x.to_string(),
            expected: "a positive finite number",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_finite_takes_only_positive_finite_numbers() {
        assert!(positive_finite("x", 1e-30f64).is_ok() && positive_finite("x", 3.0f32).is_ok());
        for bad in [0.0, -0.0, -1.0, f64::INFINITY, f64::NAN] {
            let e = positive_finite("init_scale", bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("invalid init_scale '{bad}': expected a positive finite number")
            );
        }
    }
}
