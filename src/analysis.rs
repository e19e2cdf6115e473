//! The `analyze` pipeline: tensors in, a typed [`Analysis`] out (what `mixprec analyze --json`
//! prints, and what its tables, plots and reports are made from).
//!
//! For each tensor and for all of them together: the log2 histogram, the loss-scale sweep over
//! `options.lo..=options.hi` (see [`crate::stats::sweep`]), each tensor's own window, the pooled
//! recommendation ([`crate::stats::recommend()`]) with what it means for PyTorch's
//! `GradScaler`, the tensors whose own window excludes it (worst first), and the explanation in
//! words ([`text`]).
//!
//! ```
//! use mixprec::analysis::{AnalysisOptions, TensorInput, analyze};
//! use mixprec::io::{Dtype, TensorInfo, Values};
//!
//! let options = AnalysisOptions::default(); // fp16, scales 2^0..2^32
//! let info = |name: &str| TensorInfo {
//!     name: name.into(),
//!     dtype: Dtype::F32,
//!     shape: vec![3],
//!     path: "grads.safetensors".into(),
//! };
//! let mut w = TensorInput::new(info("w"), options.format);
//! w.add(Values::F32(&[12.5]));
//! w.add(Values::F32(&vec![1e-3; 4000]));
//! let mut b = TensorInput::new(info("b"), options.format);
//! b.add(Values::F32(&[1e-13, 3e-13, 2e-3]));
//! let a = analyze(vec![w, b], Vec::new(), &options);
//! let rec = a.recommendation.as_ref().unwrap();
//! // 12.5 * 2^12 = 51200 is finite in fp16, 12.5 * 2^13 is not.
//! assert_eq!(rec.log2_scale, Some(12));
//! assert_eq!(rec.overflow_log2_scale, 13);
//! // b loses 2 of its 3 values at 2^12 (1e-13 * 2^12 is below half fp16's min subnormal): 67%
//! // of b, but 0.05% of all the values, within the pooled 0.1%. b's own window starts at 2^19,
//! // but both values lie below 2^-25, the noise floor of amax 12.5 (2^-28 of 2^3): FP32
//! // rounding residue, so b is named as noise, listed last, and not among the excluded tensors.
//! assert!(rec.excluded_tensors.is_empty());
//! assert_eq!(a.windows[1].name, "b");
//! assert!(a.windows[1].noise && a.windows[1].excludes_recommended);
//! assert_eq!(a.windows[1].window.min_log2_scale, Some(19));
//! ```

pub mod block;
mod dump;
mod json;
pub mod text;

pub use dump::{DumpCheck, TYPICAL_MAX_ZERO_SHARE};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::format::{BF16, FP16, FP32, FloatFormat, pow2};
use crate::io::{self, TensorInfo, Values};
use crate::stats::recommend::{StepRule, overflow_log2_scale, predicted_min_log2_scale};
use crate::stats::{
    Alternative, Histogram, Sweep, SweepAccumulator, recommend, sweep_from_histogram,
};
use crate::{Error, Result};

/// Scales beyond `2^±SCALE_LIMIT` are meaningless for any format of at most 8 exponent bits and
/// f64 data; `--scales` and `--margin` stay within it.
pub const SCALE_LIMIT: i32 = 2000;

/// Values more than `2^NOISE_LOG2` below the largest gradient (of a dump, or of a capture step)
/// are noise: FP32 rounding residue of a gradient that is truly zero, such as a transformer's
/// attention key bias (softmax is shift-invariant), not values a loss scale should keep.
///
/// Measured on FP32 dumps of the zoo (`python/tests/zoo.py`: GPT-2, BERT, ResNet-18, ViT; Adam
/// at lr 1e-3, steps 0, 10, 50, 100, 200, and GPT-2 every 100 steps to 800): the largest value of
/// a zero-gradient tensor (BERT's `attention.self.key.bias`, the k third of GPT-2's
/// `c_attn.bias`) lay 2^-30.8 to 2^-36.0 below the pooled amax; the lowest amax of a tensor with
/// a true gradient, 2^-25.2 (GPT-2's layer-1 query bias at step 700; every other tensor above
/// 2^-16). 2^-28 lies between, 2.8 binades from each.
pub const NOISE_LOG2: i32 = 28;

/// The noise floor of gradients whose largest magnitude is `amax`: `2^(e - NOISE_LOG2)`, `e`
/// the binary exponent of `amax` (a power of two, so that log2 histograms count the values
/// below it exactly). `None` when `amax` is not finite and positive, or the floor lies below
/// f64's smallest subnormal.
#[must_use]
pub fn noise_floor(amax: f64) -> Option<f64> {
    let k = amax.log2().floor() as i32 - NOISE_LOG2;
    // Below f64's smallest subnormal no value lies: no floor.
    (amax.is_finite() && amax > 0.0 && k >= -1074).then(|| pow2(k))
}

/// The finite nonzero values of `h` below `floor` (a power of two: a bin edge).
#[must_use]
pub fn count_below(h: &Histogram, floor: f64) -> u64 {
    h.bins()
        .take_while(|b| b.upper <= floor)
        .map(|b| b.count)
        .sum()
}

/// Sub-bins per octave of the histograms kept for the plots and the wider-format check.
const SUB_BINS_LOG2: u32 = 2;

/// GradScaler keeps its scale in an f32: 2^127 is the largest power of two it can hold.
const F32_MAX_LOG2: i32 = 127;

/// What to analyse and against what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnalysisOptions {
    /// The format the scaled values are rounded into.
    pub format: FloatFormat,
    /// The smallest log2 scale of the sweep.
    pub lo: i32,
    /// The largest log2 scale of the sweep (inclusive).
    pub hi: i32,
    /// Bits of headroom: the recommended `k` keeps `amax * 2^(k + margin)` finite.
    pub margin: i32,
    /// The largest share of the finite nonzero values allowed to underflow at the window's low
    /// end.
    pub max_underflow: f64,
    /// Only the tensors with these names (all when empty).
    pub tensors: Vec<String>,
}

impl Default for AnalysisOptions {
    /// fp16, scales `2^0..=2^32`, no margin, at most 0.1% underflow, every tensor.
    fn default() -> Self {
        AnalysisOptions {
            format: FP16,
            lo: 0,
            hi: 32,
            margin: 0,
            max_underflow: 0.001,
            tensors: Vec::new(),
        }
    }
}

impl AnalysisOptions {
    /// The options, checked ([`AnalysisOptions::validate`]): the one way the command line and
    /// the Python binding build them.
    ///
    /// # Errors
    /// As [`AnalysisOptions::validate`].
    pub fn checked(
        format: FloatFormat,
        (lo, hi): (i32, i32),
        margin: i32,
        max_underflow: f64,
        tensors: Vec<String>,
    ) -> Result<Self> {
        let options = AnalysisOptions {
            format,
            lo,
            hi,
            margin,
            max_underflow,
            tensors,
        };
        options.validate()?;
        Ok(options)
    }

    /// Checks the ranges.
    ///
    /// # Errors
    /// [`Error::InvalidValue`] naming the option (as the command line spells it) that is out of
    /// range.
    pub fn validate(&self) -> Result<()> {
        if self.lo > self.hi || self.lo < -SCALE_LIMIT || self.hi > SCALE_LIMIT {
            return Err(Error::InvalidValue {
                what: "--scales",
                value: format!("{}..{}", self.lo, self.hi),
                expected: SCALES_EXPECTED,
            });
        }
        if !(0..=SCALE_LIMIT).contains(&self.margin) {
            return Err(Error::InvalidValue {
                what: "--margin",
                value: self.margin.to_string(),
                expected: "a whole number of bits from 0 to 2000",
            });
        }
        if !(0.0..=1.0).contains(&self.max_underflow) {
            return Err(Error::InvalidValue {
                what: "--max-underflow",
                value: self.max_underflow.to_string(),
                expected: "a fraction from 0 to 1, e.g. 0.001",
            });
        }
        Ok(())
    }
}

const SCALES_EXPECTED: &str = "LO..HI with whole exponents -2000 <= LO <= HI <= 2000, each \
                               written k or 2^k, e.g. 0..32, -8..40 or 2^0..2^32";

/// Parses `LO..HI`, an inclusive range of log2 scales; each end is `k` or `2^k` (either may be
/// negative).
///
/// # Errors
/// [`Error::InvalidValue`] for `--scales` when the text is not such a range or is outside
/// `-2000..2000`.
///
/// ```
/// use mixprec::analysis::parse_log2_scales;
///
/// assert_eq!(parse_log2_scales("-8..40").unwrap(), (-8, 40));
/// assert_eq!(parse_log2_scales("2^0..2^32").unwrap(), (0, 32));
/// assert!(parse_log2_scales("5..2").is_err());
/// ```
pub fn parse_log2_scales(s: &str) -> Result<(i32, i32)> {
    let bad = || Error::InvalidValue {
        what: "--scales",
        value: s.to_string(),
        expected: SCALES_EXPECTED,
    };
    let (lo, hi) = s.trim().split_once("..").ok_or_else(bad)?;
    let one = |t: &str| crate::format::parse_log2_scale("--scales", t, SCALE_LIMIT);
    let (lo, hi) = (one(lo).map_err(|_| bad())?, one(hi).map_err(|_| bad())?);
    if lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// One tensor's values, summarised as they are read (a sweep accumulator and a histogram).
#[derive(Clone, Debug)]
pub struct TensorInput {
    info: TensorInfo,
    acc: SweepAccumulator,
    hist: Histogram,
}

impl TensorInput {
    /// An empty summary of the tensor `info`, for rounding into `format`.
    #[must_use]
    pub fn new(info: TensorInfo, format: FloatFormat) -> Self {
        TensorInput {
            info,
            acc: SweepAccumulator::new(format),
            hist: Histogram::new(SUB_BINS_LOG2),
        }
    }

    /// Adds a chunk of the tensor's values (on all threads; the result does not depend on their
    /// number).
    pub fn add(&mut self, values: Values<'_>) {
        match values {
            // One pass for both (the sweep's loop counts the histogram's bins).
            Values::F32(xs) => self.acc.par_add_f32_with_histogram(xs, &mut self.hist),
            Values::F64(xs) => self.acc.par_add_f64_with_histogram(xs, &mut self.hist),
        }
    }

    /// The tensor.
    #[must_use]
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }
}

/// Refuses the same file given twice (the same path, another spelling of it, or a link to it):
/// its values would be counted twice.
fn check_distinct(files: &[PathBuf]) -> Result<()> {
    let mut seen: Vec<(FileId, &Path)> = Vec::new();
    for path in files {
        // A file that cannot be inspected is reported by the reader, with its own message.
        let Some(id) = file_id(path) else { continue };
        if let Some((_, first)) = seen.iter().find(|(other, _)| *other == id) {
            return Err(Error::SameFile {
                first: first.to_path_buf(),
                second: path.clone(),
            });
        }
        seen.push((id, path));
    }
    Ok(())
}

/// What identifies a file: device and inode on Unix, the canonical path elsewhere.
#[derive(PartialEq)]
enum FileId {
    #[cfg(unix)]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

fn file_id(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileId::Inode(m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::canonicalize(path).ok().map(FileId::Path)
    }
}

/// The tensors of `files` that `options.tensors` selects, read in one pass, and the tensors
/// skipped for their dtype.
///
/// # Errors
/// [`Error::SameFile`] when a file is given twice; the readers' [`Error::Io`] and
/// [`Error::BadFile`]; [`Error::NoSuchTensor`] for a name in `options.tensors` that no file
/// holds; [`Error::NoFloatTensors`] when nothing is left to analyse.
pub fn read_tensors(
    files: &[PathBuf],
    options: &AnalysisOptions,
) -> Result<(Vec<TensorInput>, Vec<TensorInfo>)> {
    check_distinct(files)?;
    let want = |name: &str| options.tensors.is_empty() || options.tensors.iter().any(|t| t == name);
    let mut tensors: Vec<TensorInput> = Vec::new();
    let mut skipped = Vec::new();
    for path in files {
        let scan = io::scan(path, &want, &mut |info, values| {
            let new = tensors
                .last()
                .is_none_or(|t| t.info.name != info.name || t.info.path != info.path);
            if new {
                tensors.push(TensorInput::new(info.clone(), options.format));
            }
            if let Some(t) = tensors.last_mut() {
                t.add(values);
            }
        })?;
        skipped.extend(scan.skipped);
    }
    check_found(
        files,
        &options.tensors,
        &skipped,
        tensors.is_empty(),
        |name| tensors.iter().any(|t| t.info.name == name),
    )?;
    Ok((tensors, skipped))
}

/// Checks what a read found: every name of `wanted` is a tensor read (`read(name)`) or
/// skipped, and something was read (`nothing` is false).
fn check_found(
    files: &[PathBuf],
    wanted: &[String],
    skipped: &[TensorInfo],
    nothing: bool,
    read: impl Fn(&str) -> bool,
) -> Result<()> {
    let list = || {
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    for name in wanted {
        if !(read(name) || skipped.iter().any(|t| &t.name == name)) {
            return Err(Error::NoSuchTensor {
                name: name.clone(),
                files: list(),
            });
        }
    }
    if nothing {
        return Err(Error::NoFloatTensors {
            files: list(),
            skipped: skipped.len(),
        });
    }
    Ok(())
}

/// [`read_tensors`] then [`analyze`].
///
/// # Errors
/// [`AnalysisOptions::validate`]'s and [`read_tensors`]'s.
pub fn analyze_files(files: &[PathBuf], options: &AnalysisOptions) -> Result<Analysis> {
    options.validate()?;
    let (tensors, skipped) = read_tensors(files, options)?;
    Ok(analyze(tensors, skipped, options))
}

/// The analysis of one or several tensor files.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    /// The format the values are rounded into.
    pub format: FloatFormat,
    /// Each tensor, in file order (files in the order given).
    pub tensors: Vec<TensorAnalysis>,
    /// All tensors together.
    pub total: Total,
    /// The loss scale for all tensors together; `None` (JSON `null`) when no tensor holds a
    /// finite nonzero value: there is nothing to scale.
    pub recommendation: Option<Advice>,
    /// Each tensor's own window, worst first (see [`TensorWindow`]); tensors with nothing to
    /// scale are left out.
    pub windows: Vec<TensorWindow>,
    /// The recommendation in words, with the numbers ([`text::explanation`]).
    pub explanation: String,
    /// Tensors skipped for their dtype.
    #[serde(serialize_with = "json::skipped_json")]
    pub skipped: Vec<TensorInfo>,
    /// The options that produced this analysis.
    pub options: AnalysisOptions,
    /// What the values say about the step they were dumped from (see [`DumpCheck`]).
    pub dump: DumpCheck,
}

/// What the loss-scale sweep of some values (a tensor's, or all tensors' together) says of
/// them, as [`TensorAnalysis`] and [`Total`] hold it.
#[derive(Clone, Debug, Serialize)]
pub struct ValueSummary {
    /// The number of values.
    pub count: u64,
    /// Exact zeros (either sign).
    pub zeros: u64,
    /// NaN and infinities.
    pub nonfinite: u64,
    /// The largest finite magnitude; `None` (JSON `null`) when no value is finite (0 when
    /// every value is zero).
    pub amax: Option<f64>,
    /// The sweep over the options' scales.
    #[serde(serialize_with = "json::sweep_json")]
    pub sweep: Sweep,
}

impl ValueSummary {
    fn of(sweep: Sweep) -> ValueSummary {
        ValueSummary {
            count: sweep.count,
            zeros: sweep.zeros,
            nonfinite: sweep.nonfinite,
            amax: (sweep.count > sweep.nonfinite).then_some(sweep.amax),
            sweep,
        }
    }
}

/// One tensor's numbers.
#[derive(Clone, Debug, Serialize)]
pub struct TensorAnalysis {
    /// Its name in its file.
    pub name: String,
    /// Its values' counts, amax and sweep (in JSON, keys of the tensor's object).
    #[serde(flatten)]
    pub values: ValueSummary,
    /// The file that holds it.
    #[serde(serialize_with = "json::path_json")]
    pub file: PathBuf,
    /// Its dtype in the file (`F32`, `BF16`, ...).
    #[serde(serialize_with = "json::display_json")]
    pub dtype: io::Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The smallest nonzero finite magnitude, if any.
    pub min_nonzero: Option<f64>,
    /// Its own window; `None` when it has no finite nonzero value.
    pub window: Option<Window>,
    /// Its log2 histogram (not serialized: for plots and reports).
    #[serde(skip)]
    pub histogram: Histogram,
}

impl TensorAnalysis {
    /// The tensor's name, with its file when `with_file` (several files given).
    #[must_use]
    pub fn label(&self, with_file: bool) -> String {
        tensor_label(&self.file, &self.name, with_file)
    }
}

/// A tensor's name in tables and legends, `file:name` when several files are shown.
#[must_use]
pub(crate) fn tensor_label(file: &Path, name: &str, with_file: bool) -> String {
    let name = crate::text::printable(name);
    if with_file {
        format!(
            "{}:{name}",
            crate::text::printable(&file.display().to_string())
        )
    } else {
        name.into_owned()
    }
}

/// All tensors together.
#[derive(Clone, Debug, Serialize)]
pub struct Total {
    /// The counts, amax and sweep of all values together (in JSON, keys of `total`).
    #[serde(flatten)]
    pub values: ValueSummary,
    /// The smallest nonzero finite magnitude, if any.
    pub min_nonzero: Option<f64>,
    /// The histogram of all values (not serialized).
    #[serde(skip)]
    pub histogram: Histogram,
}

/// A window of log2 loss scales `[min, max]`, as [`recommend()`] finds it, with where overflow
/// starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The smallest `k` of the range whose underflow is within the allowed share (`None`: none
    /// is).
    pub min_log2_scale: Option<i32>,
    /// The largest `k` of the range that keeps amax (times `2^margin`) finite (`None`: amax
    /// overflows at every scale of the range).
    pub max_log2_scale: Option<i32>,
    /// The smallest `k` at which amax overflows, whatever the range (exact).
    pub overflow_log2_scale: i32,
    /// Whether some scale satisfies both bounds (`min <= max`).
    pub works: bool,
}

impl Window {
    fn of(sweep: &Sweep, options: &AnalysisOptions) -> Option<Window> {
        let k_over = overflow_log2_scale(sweep.format, sweep.amax)?;
        let r = recommend(sweep, options.margin, options.max_underflow);
        Some(Window {
            min_log2_scale: r.min_log2_scale,
            max_log2_scale: r.max_log2_scale,
            overflow_log2_scale: k_over,
            works: r.works(),
        })
    }

    /// Whether `k` lies in the window.
    #[must_use]
    pub fn contains(&self, k: i32) -> bool {
        matches!((self.min_log2_scale, self.max_log2_scale), (Some(a), Some(b)) if a <= k && k <= b)
    }
}

/// What bounds the top of the recommended window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// amax: one scale more (with the margin) and it overflows.
    Overflow,
    /// The top of the options' range (`--scales`): larger scales were not considered.
    Scales,
}

/// The loss scale for all tensors together, and what it means for a scaler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    /// The recommended `k` (scale `2^k`): the window's top when overflow bounds it; `0` (no
    /// scaling) when only the range's top bounds it and `2^0` is in the window; `None` when amax
    /// overflows at every scale of the range. When the dump holds inf or NaN
    /// ([`DumpCheck::overflowed`]) a back-off instead: at most `overflow_log2_scale - 2`, a
    /// halving below the largest scale the surviving values allow (the step that overflowed used
    /// at most that one), `None` when that is below the range.
    pub log2_scale: Option<i32>,
    /// The window's low end: the smallest `k` whose underflow is within the allowed share.
    pub min_log2_scale: Option<i32>,
    /// The window's top: the largest `k` of the range keeping amax (times `2^margin`) finite.
    pub max_log2_scale: Option<i32>,
    /// Whether one scale satisfies both bounds.
    pub works: bool,
    /// What bounds the window's top.
    pub limited_by: Limit,
    /// The smallest `k` at which amax overflows (exact exponent arithmetic, any range).
    pub overflow_log2_scale: i32,
    /// Whether a loss scale is needed at all: false when `2^0` keeps underflow within bounds
    /// and leaves no more than that share of the values subnormal.
    pub scaling_needed: bool,
    /// Whether the recommended scale is within 2x of overflow: amax times twice the scale
    /// overflows.
    pub near_overflow: bool,
    /// What to give PyTorch's `GradScaler`.
    pub grad_scaler: GradScalerAdvice,
    /// The tensors (labelled as in [`TensorAnalysis::label`]) whose own window excludes the
    /// recommended scale, worst first.
    pub excluded_tensors: Vec<String>,
    /// The smallest `k` from which training with Adam (or another optimizer normalising each
    /// weight's step) is predicted to match FP32
    /// ([`crate::stats::recommend::predicted_min_log2_scale`], the tensors taken as weight
    /// gradients, as `param.grad` dumps are): a lower edge measured against re-training, less
    /// conservative than `min_log2_scale`. `None` when no scale of the range is.
    pub predicted_min_log2_scale: Option<i32>,
    /// The same for SGD (with or without momentum): the squared-norm rule alone.
    pub predicted_min_log2_scale_sgd: Option<i32>,
}

/// How many binades below the largest scale that keeps one dump's amax finite a run should start
/// (`init_scale`). One step's weight gradients bound a run's scale from above only: over 300
/// steps of the model zoo's GPT-2, BERT and ViT (`python/tests/zoo.py`; fp16 autocast, AdamW at
/// learning rates 3e-4 to 3e-3, 3 seeds) the run's largest backward gradient lay 0 to 2.5
/// binades above the first step's FP32 weight gradients (the backward's other gradients at that
/// step within 0.12 binades of them), and closed-loop reruns from the bound itself skipped steps
/// within 100 on all three, from two binades below it none (`benches/dump_margin.py`;
/// `python/tests/test_advice_reruns.py`).
pub const RUN_MARGIN_BITS: i32 = 3;

/// The recommendation in `GradScaler`'s terms (its scale is an f32, so powers of two from
/// 2^-149 to 2^127).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GradScalerAdvice {
    /// `init_scale`: where a run should start: the recommended scale, at most
    /// [`RUN_MARGIN_BITS`] (`run_margin_bits`) below the largest scale that keeps amax finite
    /// (`None` when amax overflows at every scale of the range).
    pub init_scale: Option<f64>,
    /// Its log2.
    pub log2_init_scale: Option<i32>,
    /// The largest power of two below this dump's overflow boundary: where a dynamic scaler
    /// would settle on gradients like these alone (it doubles until a step overflows, then
    /// halves); a run's own gradients grow, and its scaler settles lower (a recorded run shows
    /// where).
    pub settles_at: f64,
    /// Its log2: `overflow_log2_scale - 1`, at most 127.
    pub settles_log2_scale: i32,
    /// How far below `settles_log2_scale` `init_scale` may lie: [`RUN_MARGIN_BITS`].
    pub run_margin_bits: i32,
}

/// A tensor's own window beside the pooled recommendation (one entry of [`Analysis::windows`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorWindow {
    /// The tensor's index in [`Analysis::tensors`].
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its file.
    pub file: String,
    /// Its own window.
    #[serde(flatten)]
    pub window: Window,
    /// The scale the shares are taken at: the recommended one, or the best there is.
    pub at_log2_scale: i32,
    /// The share of its finite nonzero values that underflow there (a fraction).
    pub underflow_share: f64,
    /// Whether its window excludes the recommended scale.
    pub excludes_recommended: bool,
    /// Whether it is noise ([`NOISE_LOG2`]): its amax lies below the noise floor of the pooled
    /// amax, or every value it loses at the recommended scale does (with those values left out,
    /// its share is within `--max-underflow`). A noise tensor is listed last and never in
    /// [`Advice::excluded_tensors`].
    #[serde(default)]
    pub noise: bool,
}

/// Analyses summarised tensors (from [`read_tensors`], or built with [`TensorInput::add`]).
#[must_use]
pub fn analyze(
    inputs: Vec<TensorInput>,
    skipped: Vec<TensorInfo>,
    options: &AnalysisOptions,
) -> Analysis {
    let range = options.lo..=options.hi;
    let mut total_acc = SweepAccumulator::new(options.format);
    let mut total_hist = Histogram::new(SUB_BINS_LOG2);
    for t in &inputs {
        total_acc.merge(&t.acc);
        total_hist.merge(&t.hist);
    }
    let tensors: Vec<TensorAnalysis> = inputs
        .into_iter()
        .map(|t| {
            let sweep = t.acc.sweep(range.clone());
            TensorAnalysis {
                name: t.info.name,
                window: Window::of(&sweep, options),
                values: ValueSummary::of(sweep),
                file: t.info.path,
                dtype: t.info.dtype,
                shape: t.info.shape,
                min_nonzero: t.hist.min_nonzero(),
                histogram: t.hist,
            }
        })
        .collect();
    let total = Total {
        values: ValueSummary::of(total_acc.sweep(range.clone())),
        min_nonzero: total_hist.min_nonzero(),
        histogram: total_hist,
    };
    let mut advice = advise(&total.values.sweep, options);
    // The scale the per-tensor shares are taken at: the recommendation, or the best there is.
    let at = advice
        .as_ref()
        .and_then(|a| a.log2_scale.or(a.min_log2_scale))
        .unwrap_or(options.lo);
    let recommended = advice
        .as_ref()
        .filter(|a| a.works)
        .and_then(|a| a.log2_scale);
    let several = several_files(&tensors);
    let floor = noise_floor(total.values.sweep.amax);
    let mut windows: Vec<TensorWindow> = tensors
        .iter()
        .enumerate()
        .filter_map(|(index, t)| {
            let window = t.window?;
            let n = t.values.sweep.finite_nonzero();
            let under = t.values.sweep.row(at).map_or(0, |r| r.underflow);
            // Values below the floor underflow before any above it: those lost above it are
            // the ones lost less the ones below it.
            let noise = floor.is_some_and(|f| {
                let below = count_below(&t.histogram, f);
                let kept = n - below;
                let allowed = |of: u64| options.max_underflow * of as f64;
                t.values.sweep.amax < f
                    || (under as f64 > allowed(n)
                        && window.max_log2_scale.is_some_and(|hi| at <= hi)
                        && under.saturating_sub(below) as f64 <= allowed(kept))
            });
            Some(TensorWindow {
                index,
                name: t.name.clone(),
                file: t.file.display().to_string(),
                window,
                at_log2_scale: at,
                underflow_share: under as f64 / n as f64,
                excludes_recommended: recommended.is_some_and(|k| !window.contains(k)),
                noise,
            })
        })
        .collect();
    // Worst first: noise last, then excluded ones, then by the share lost at the scale, then
    // the tensors that need the largest scale, then those with no window of their own.
    windows.sort_by(|a, b| {
        a.noise
            .cmp(&b.noise)
            .then(b.excludes_recommended.cmp(&a.excludes_recommended))
            .then(b.underflow_share.total_cmp(&a.underflow_share))
            .then(b.window.min_log2_scale.cmp(&a.window.min_log2_scale))
            .then(a.window.works.cmp(&b.window.works))
            .then(a.index.cmp(&b.index))
    });
    if let Some(a) = advice.as_mut() {
        a.excluded_tensors = windows
            .iter()
            .filter(|w| w.excludes_recommended && !w.noise)
            .map(|w| tensors[w.index].label(several))
            .collect();
    }
    let dump = DumpCheck::of(&tensors, &total.values, several);
    let mut analysis = Analysis {
        format: options.format,
        tensors,
        total,
        recommendation: advice,
        windows,
        explanation: String::new(),
        skipped,
        options: options.clone(),
        dump,
    };
    analysis.explanation = text::explanation(&analysis, &alternatives(&analysis, options));
    analysis
}

/// Whether the tensors (of an [`Analysis`] or a [`block::BlockAnalysis`]) come from more than
/// one file.
fn several_files(tensors: &[impl text::Labeled]) -> bool {
    tensors
        .windows(2)
        .any(|w| w[0].name_and_file().1 != w[1].name_and_file().1)
}

impl Analysis {
    /// Whether the tensors come from more than one file (tables then get a file column).
    #[must_use]
    pub fn several_files(&self) -> bool {
        several_files(&self.tensors)
    }
}

/// The pooled advice; `None` when there is nothing to scale.
fn advise(sweep: &Sweep, options: &AnalysisOptions) -> Option<Advice> {
    let k_over = overflow_log2_scale(sweep.format, sweep.amax)?;
    if sweep.finite_nonzero() == 0 {
        return None;
    }
    let r = recommend(sweep, options.margin, options.max_underflow);
    let works = r.works();
    // The top of the window is bound by overflow when one scale more (with the margin) overflows.
    let limited_by = match r.max_log2_scale {
        Some(k) if i64::from(k) + 1 + i64::from(options.margin) < i64::from(k_over) => {
            Limit::Scales
        }
        _ => Limit::Overflow,
    };
    // 2^0 does without scaling when it keeps underflow within bounds and leaves no more than
    // that share subnormal (stored with fewer significant bits).
    let allowed = options.max_underflow * sweep.finite_nonzero() as f64;
    let unscaled_ok = r.min_log2_scale.is_some_and(|lo| lo <= 0)
        && sweep
            .row(0)
            .is_none_or(|row| row.subnormal as f64 <= allowed);
    let log2_scale = match (limited_by, works, unscaled_ok) {
        (Limit::Scales, true, true) if r.max_log2_scale.is_some_and(|hi| hi >= 0) => Some(0),
        _ => r.max_log2_scale,
    };
    // An overflowed step's survivors understate its amax: never the scale it may have used.
    let log2_scale = if sweep.nonfinite > 0 {
        log2_scale
            .map(|k| k.min(k_over.saturating_sub(2)))
            .filter(|&k| k >= options.lo)
    } else {
        log2_scale
    };
    let near_overflow = log2_scale.is_some_and(|k| i64::from(k) + 1 >= i64::from(k_over));
    let settles = (k_over - 1).clamp(-149, F32_MAX_LOG2);
    // A run starts below what this one step allows, by the margin its later gradients need.
    let init = log2_scale.map(|k| {
        k.min(k_over - 1 - RUN_MARGIN_BITS)
            .clamp(-149, F32_MAX_LOG2)
    });
    Some(Advice {
        log2_scale,
        min_log2_scale: r.min_log2_scale,
        max_log2_scale: r.max_log2_scale,
        works,
        limited_by,
        overflow_log2_scale: k_over,
        scaling_needed: !(works && unscaled_ok && r.max_log2_scale.is_some_and(|hi| hi >= 0)),
        near_overflow,
        grad_scaler: GradScalerAdvice {
            init_scale: init.map(pow2),
            log2_init_scale: init,
            settles_at: pow2(settles),
            settles_log2_scale: settles,
            run_margin_bits: RUN_MARGIN_BITS,
        },
        excluded_tensors: Vec::new(),
        predicted_min_log2_scale: predicted_min_log2_scale(sweep, StepRule::Adaptive),
        predicted_min_log2_scale_sgd: predicted_min_log2_scale(sweep, StepRule::Sgd),
    })
}

/// When no single scale works: each tensor's own window, and the first wider format's (from
/// the histogram of everything, exact up to the histogram sweep's bound).
fn alternatives(a: &Analysis, options: &AnalysisOptions) -> (Vec<Alternative>, Vec<Alternative>) {
    if a.recommendation.as_ref().is_none_or(|r| r.works) {
        return (Vec::new(), Vec::new());
    }
    let several = a.several_files();
    let per_tensor = if a.tensors.len() > 1 {
        a.tensors
            .iter()
            .map(|t| Alternative {
                name: t.label(several),
                recommendation: recommend(&t.values.sweep, options.margin, options.max_underflow),
            })
            .collect()
    } else {
        Vec::new()
    };
    let wider = [BF16, FP32]
        .into_iter()
        .filter(|w| w.exp_bits() > options.format.exp_bits())
        .take(1)
        .map(|w| {
            let (s, _) = sweep_from_histogram(&a.total.histogram, w, options.lo..=options.hi);
            Alternative {
                name: w.name(),
                recommendation: recommend(&s, options.margin, options.max_underflow),
            }
        })
        .collect();
    (per_tensor, wider)
}

#[cfg(test)]
mod tests;
