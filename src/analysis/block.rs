//! Block-scaled analysis: what a block format (MX, NVFP4, RxC tiles with FP32 scales) loses on
//! a tensor, and the same tensors under several scaling schemes side by side.
//!
//! In a block-scaled format, where a value underflows or saturates is decided by its block's
//! largest magnitude, not by a loss scale: the block's scale maps its amax near the element
//! format's top, so a value `x` keeps
//!
//! ```text
//! r = log2(block amax / |x|)                     binades below its block's amax
//! subnormal  when  r > top - emin_elem          top = log2(amax / scale), in element units
//! lost       when  r >= top - log2(min_subnormal_elem) + 1    (below half the smallest subnormal)
//! ```
//!
//! where `top` is `log2(max_elem)` for an FP32 scale (tiles, per-tensor scaling), anywhere in
//! `[emax, emax + 1)` for MX's power-of-two scale (it depends on where the amax sits in its
//! binade), and about `log2(6)` for NVFP4 (its E4M3 block scale moves it by up to 1/16 either
//! way). The distribution of `r` (a log2 histogram) against these edges is the block-scaled
//! counterpart of the loss-scale sweep; the counts themselves come from rounding the values
//! with the format's rounder, so they are exact.
//!
//! Blocks run along a tensor's last axis; tiles cover its last two axes, with the leading axes
//! folded into rows; a 1-D tensor is one row (a scalar one value). Values are streamed: each
//! scheme holds one segment at a time (a run of whole blocks within a row, or, for tiles of
//! more than one row, one row-block of R rows), never the whole tensor. `f64` tensors are
//! narrowed to `f32` first (the input the block quantizers take); values beyond f32's range
//! become infinities and count as nonfinite. Rounding is nearest-even; elements saturate.
//!
//! Per-tensor scaling (the comparison's baseline, as a current-scaling FP8 recipe does it)
//! divides the tensor by one FP32 scale `amax / max_elem` (1 for a tensor without a finite
//! nonzero value), rounds into the element format with the plain [`Rounder`] (saturating) and
//! multiplies back. Its amax, and NVFP4's tensor amax (NaN and infinity included: either makes
//! the whole NVFP4 tensor NaN), come from a first pass over the files. Each NVFP4 segment is
//! rounded with that tensor amax ([`BlockRounder::par_round_part_at`]); the tests check the
//! result against the rounder on each whole tensor. NVFP4 also loses whole
//! blocks that `r` does not show: a block whose amax is below about `2^-18.8` of the tensor's
//! gets a block scale that rounds to zero in E4M3, and all its values underflow (counted).
//!
//! # JSON (`mixprec analyze --json` with a block format or `--compare-blocks`)
//!
//! One object:
//! - `schemes`: the schemes, in order, each `{name, kind, element, block_shape, scale,
//!   subnormal_from, lost_from}`: `kind` is `per-tensor`, `mx`, `nvfp4` or `tile`;
//!   `block_shape` `[rows, cols]` (`null` per tensor); `scale` how the scales are stored
//!   (`fp32`, `e8m0`, `e4m3 + fp32 per tensor`); `subnormal_from` and `lost_from` `[lo, hi]`:
//!   the values of `r` from which a value is subnormal, and lost, for a block whose amax is at
//!   the best and worst place (equal for FP32 scales).
//! - `tensors`: each tensor in file order, `{name, file, dtype, shape, rows, cols, amax,
//!   schemes}`, with `schemes` one statistics object per scheme, in the order of `schemes`.
//! - `total`: one statistics object per scheme, all tensors together.
//! - `skipped`: tensors skipped for their dtype, `{name, file, dtype}`.
//! - `options`: `{schemes: [names], tensors: [names asked for]}`.
//!
//! A statistics object: `scheme` (its name), `values`, `zeros`, `finite_nonzero`, `nonfinite`
//! (NaN and infinite inputs), `blocks` (per tensor: 1), `underflow` (finite nonzero values that
//! became zero), `subnormal` (subnormal in the element format), `saturated` (finite values
//! clamped to the element's max), `nan` (values that became NaN: NaN inputs, and every value of
//! an MX block holding a NaN or an infinity), `lost_share` (`underflow / finite_nonzero`),
//! `energy_lost` (the underflowed values' `x^2` over the `x^2` of all finite values),
//! `relative_error` (`||Q(x) - x|| / ||x||` over the values whose input and result are finite;
//! `null` when that norm is 0), and `log2_amax_ratio`: `[{binade, count}]`, the finite nonzero
//! values with `binade <= r < binade + 1` (values of blocks holding a NaN or an infinity are
//! left out).

mod tally;
pub mod text;

use std::path::PathBuf;

use serde::{Serialize, Serializer};

use crate::format::Rounder;
use crate::format::{FP8_E4M3, FloatFormat, MX_PRESETS};
use crate::io::{self, TensorInfo, Values};
use crate::stats::Histogram;
use crate::{Error, Result};

pub use crate::format::{BlockFormat, BlockRounder};
pub use tally::TensorAmax;
use tally::{SchemeAcc, Sums};

/// Sub-bins per octave of the `r` histograms (as the loss-scale analysis keeps).
const SUB_BINS_LOG2: u32 = 2;

/// Values per segment of a scheme whose blocks lie within one row (rounded down to whole
/// blocks): large enough that rounding runs at speed, small enough to stay in cache.
const SEGMENT: usize = 1 << 16;

/// What kind of scaling a scheme is (the arms of [`BlockFormat`], and per-tensor scaling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One FP32 scale for the whole tensor.
    PerTensor,
    /// OCP MX: blocks of 32, E8M0 scales.
    Mx,
    /// NVFP4: blocks of 16, E4M3 scales and an FP32 tensor scale.
    Nvfp4,
    /// RxC tiles with FP32 scales.
    Tile,
}

/// One way of scaling a tensor into an element format.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scheme {
    /// The element format with one FP32 scale `amax / max` per tensor.
    PerTensor(FloatFormat),
    /// A block format.
    Block(BlockFormat),
}

impl Scheme {
    /// The name: the block format's, or `ELEMENT@tensor` for per-tensor scaling.
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Scheme::PerTensor(f) => format!("{}@tensor", f.name()),
            Scheme::Block(b) => b.to_string(),
        }
    }

    /// What kind of scaling it is.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Scheme::PerTensor(_) => Kind::PerTensor,
            Scheme::Block(BlockFormat::Mx(_)) => Kind::Mx,
            Scheme::Block(BlockFormat::Nvfp4) => Kind::Nvfp4,
            Scheme::Block(BlockFormat::Tile(_)) => Kind::Tile,
        }
    }

    /// The element format.
    #[must_use]
    pub fn element(&self) -> FloatFormat {
        match self {
            Scheme::PerTensor(f) => *f,
            Scheme::Block(b) => b.element(),
        }
    }

    /// Rows x columns of a block; `None` for per-tensor scaling.
    #[must_use]
    pub fn block_shape(&self) -> Option<(usize, usize)> {
        match self {
            Scheme::PerTensor(_) => None,
            Scheme::Block(b) => Some(b.block_shape()),
        }
    }

    /// How the scales are stored ([`BlockFormat::scale_format`]; `fp32` per tensor).
    #[must_use]
    pub fn scale_type(&self) -> &'static str {
        match self {
            Scheme::PerTensor(_) => "fp32",
            Scheme::Block(b) => b.scale_format(),
        }
    }

    /// The block shape in words: `1x32`, or `tensor`.
    #[must_use]
    pub fn block_words(&self) -> String {
        self.block_shape()
            .map_or_else(|| "tensor".to_string(), |(r, c)| format!("{r}x{c}"))
    }

    /// Where the element format's zones start, in `r = log2(block amax / |x|)`.
    #[must_use]
    pub fn range(&self) -> ElementRange {
        let e = self.element();
        // `top`: log2 of the block's amax in element units (amax / scale), at best and worst.
        let (lo, hi) = match self.kind() {
            Kind::PerTensor | Kind::Tile => (e.max().log2(), e.max().log2()),
            // amax / 2^(floor(log2 amax) - emax) lies in [2^emax, 2^(emax + 1)).
            Kind::Mx => (f64::from(e.emax()), f64::from(e.emax() + 1)),
            // The block scale amax / 6 rounds to E4M3 (3 mantissa bits): within 2^-4 of it.
            Kind::Nvfp4 => (
                e.max().log2() - (1.0 + 1.0 / 16.0f64).log2(),
                e.max().log2() - (1.0 - 1.0 / 16.0f64).log2(),
            ),
        };
        let emin = f64::from(e.emin());
        let lost = 1.0 - e.min_subnormal().log2();
        ElementRange {
            subnormal_from: [lo - emin, hi - emin],
            lost_from: [lo + lost, hi + lost],
        }
    }

    fn needs_tensor_amax(&self) -> bool {
        matches!(self.kind(), Kind::PerTensor | Kind::Nvfp4)
    }
}

impl Serialize for Scheme {
    fn serialize<S: Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        ser.collect_str(&self.name())
    }
}

/// Where an element format's zones start below a block's amax, in binades
/// (`r = log2(block amax / |x|)`), each `[lo, hi]`: for the block whose amax lands highest and
/// lowest in the element's top binade (equal for FP32 scales).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ElementRange {
    /// Values with `r` above this are subnormal in the element format.
    pub subnormal_from: [f64; 2],
    /// Values with `r` at or above this become zero (below half the smallest subnormal).
    pub lost_from: [f64; 2],
}

/// The element formats `--compare-blocks` accepts: those of the MX formats.
#[must_use]
pub fn compare_elements() -> Vec<FloatFormat> {
    MX_PRESETS.iter().map(|(_, m)| m.element()).collect()
}

/// What to analyse.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BlockOptions {
    /// The schemes, in the order the tables and figures show them.
    pub schemes: Vec<Scheme>,
    /// Only the tensors with these names (all when empty).
    pub tensors: Vec<String>,
}

impl BlockOptions {
    /// The block analysis that a format name and a comparison's element name ask for
    /// (`analyze --format NAME [--compare-blocks[=ELEMENT]]`): the comparison for `compare`,
    /// else the one block format `format` names; `None` when `format` is an element format (the
    /// loss-scale analysis).
    ///
    /// # Errors
    /// A `compare` that is not one of [`compare_elements`]; a `format` that is neither kind, with
    /// the block formats' message where it reads as one (`mx...`, `nv...`, a tile `A@RxC`), else
    /// the element formats'.
    pub fn from_names(
        format: &str,
        compare: Option<&str>,
        tensors: Vec<String>,
    ) -> Result<Option<Self>> {
        if let Some(element) = compare {
            let element: FloatFormat = element.parse().map_err(|_| Error::InvalidValue {
                what: "--compare-blocks",
                value: element.to_string(),
                expected: COMPARE_EXPECTED,
            })?;
            return BlockOptions::compare(element, tensors).map(Some);
        }
        let float_error = match format.parse::<FloatFormat>() {
            Ok(_) => return Ok(None),
            Err(e) => e,
        };
        let lower = format.trim().to_ascii_lowercase();
        match format.parse::<BlockFormat>() {
            Ok(f) => Ok(Some(BlockOptions::single(f, tensors))),
            Err(e) if lower.contains('@') || lower.starts_with("mx") || lower.starts_with("nv") => {
                Err(e)
            }
            // A name that is no format at all: refused with every format analyze takes, element
            // and block (the element formats' own message lists only those).
            Err(_) => Err(match format.parse::<crate::format::Target>() {
                Err(any) => any,
                Ok(_) => float_error,
            }),
        }
    }

    /// One block format.
    #[must_use]
    pub fn single(format: BlockFormat, tensors: Vec<String>) -> Self {
        BlockOptions {
            schemes: vec![Scheme::Block(format)],
            tensors,
        }
    }

    /// The comparison for `element`: per-tensor scaling, the MX format of that element, NVFP4,
    /// and `element@1x128` and `element@128x128` tiles (those the format layer has).
    ///
    /// # Errors
    /// [`Error::InvalidValue`] for `--compare-blocks` when `element` is not one of
    /// [`compare_elements`].
    pub fn compare(element: FloatFormat, tensors: Vec<String>) -> Result<Self> {
        let mx = MX_PRESETS
            .iter()
            .find(|(_, m)| m.element() == element)
            .map(|(_, m)| *m)
            .ok_or_else(|| Error::InvalidValue {
                what: "--compare-blocks",
                value: element.name(),
                expected: COMPARE_EXPECTED,
            })?;
        let mut schemes = vec![
            Scheme::PerTensor(element),
            Scheme::Block(BlockFormat::Mx(mx)),
        ];
        for name in [
            "nvfp4",
            &format!("{element}@1x128"),
            &format!("{element}@128x128"),
        ] {
            if let Ok(b) = name.parse::<BlockFormat>() {
                schemes.push(Scheme::Block(b));
            }
        }
        Ok(BlockOptions { schemes, tensors })
    }
}

/// What `--compare-blocks` accepts (the elements of [`MX_PRESETS`]).
pub const COMPARE_EXPECTED: &str =
    "an MX element format: fp8-e4m3 (the default), fp8-e5m2, fp6-e2m3, fp6-e3m2 or fp4-e2m1";

/// The default element of `--compare-blocks`.
pub const COMPARE_DEFAULT: FloatFormat = FP8_E4M3;

/// How a scheme rounds a segment.
#[derive(Clone, Copy, Debug)]
enum SchemeRounder {
    /// The element rounder (saturating) and the tensor's FP32 scale.
    PerTensor(Rounder, f32),
    /// MX and tiles: each block's scale is its own.
    Block(BlockRounder),
    /// NVFP4, with the whole tensor's amax (its tensor scale is the tensor's, not a segment's).
    Nvfp4 {
        rounder: BlockRounder,
        tensor_amax: f32,
    },
}

/// One tensor's values, rounded under each scheme as they are read (one segment at a time).
#[derive(Clone, Debug)]
pub struct BlockInput {
    info: TensorInfo,
    rows: usize,
    cols: usize,
    /// The largest finite magnitude so far; `None` until a finite value is seen.
    amax: Option<f32>,
    schemes: Vec<(Scheme, SchemeAcc)>,
    narrow: Vec<f32>,
}

/// Rows x columns of a tensor of `shape` as the block formats see it: blocks along the last
/// axis, the leading axes folded into rows; a scalar is 1 x 1.
#[must_use]
pub fn matrix_shape(shape: &[usize]) -> (usize, usize) {
    match shape.split_last() {
        None => (1, 1),
        Some((&cols, lead)) => (lead.iter().product(), cols),
    }
}

impl BlockInput {
    /// An empty summary of the tensor `info` under `options.schemes`. `tensor_amax` is what
    /// per-tensor scaling and NVFP4 need of the whole tensor (narrowed to f32) before they see
    /// any value ([`tensor_amaxes`] reads it; [`TensorAmax::with`] computes it); the other
    /// schemes ignore it.
    #[must_use]
    pub fn new(info: TensorInfo, options: &BlockOptions, tensor_amax: TensorAmax) -> Self {
        let (rows, cols) = matrix_shape(&info.shape);
        let schemes = options
            .schemes
            .iter()
            .map(|&s| (s, SchemeAcc::new(s, rows, cols, tensor_amax)))
            .collect();
        BlockInput {
            info,
            rows,
            cols,
            amax: None,
            schemes,
            narrow: Vec::new(),
        }
    }

    /// Adds the next chunk of the tensor's values (in order; f64 values are narrowed to f32).
    pub fn add(&mut self, values: Values<'_>) {
        let xs: &[f32] = match values {
            Values::F32(xs) => xs,
            Values::F64(xs) => {
                self.narrow.clear();
                self.narrow.extend(xs.iter().map(|&x| x as f32));
                &self.narrow
            }
        };
        self.amax = xs
            .iter()
            .filter(|x| x.is_finite())
            .fold(self.amax, |m, x| Some(m.unwrap_or(0.0).max(x.abs())));
        for (_, acc) in &mut self.schemes {
            acc.add(xs);
        }
    }

    /// The tensor.
    #[must_use]
    pub fn info(&self) -> &TensorInfo {
        &self.info
    }

    /// Rounds what is left (the last segment) and summarises the tensor.
    #[must_use]
    pub fn finish(mut self) -> BlockTensor {
        let stats = self
            .schemes
            .iter_mut()
            .map(|(s, acc)| {
                acc.flush();
                BlockStats::new(*s, &acc.sums, acc.hist.clone())
            })
            .collect();
        BlockTensor {
            name: self.info.name,
            file: self.info.path,
            dtype: self.info.dtype,
            shape: self.info.shape,
            rows: self.rows,
            cols: self.cols,
            amax: self.amax.map(f64::from),
            schemes: stats,
        }
    }
}

/// One tensor under each scheme.
#[derive(Clone, Debug, Serialize)]
pub struct BlockTensor {
    /// Its name in its file.
    pub name: String,
    /// The file that holds it.
    #[serde(serialize_with = "super::json::path_json")]
    pub file: PathBuf,
    /// Its dtype in the file.
    #[serde(serialize_with = "super::json::display_json")]
    pub dtype: io::Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Rows as the block formats see it (the leading axes folded).
    pub rows: usize,
    /// Columns (its last axis).
    pub cols: usize,
    /// The largest finite magnitude (after narrowing to f32); `None` (`null`) when the tensor
    /// holds no finite value.
    pub amax: Option<f64>,
    /// One entry per scheme, in the options' order.
    pub schemes: Vec<BlockStats>,
}

impl BlockTensor {
    /// The tensor's name, with its file when `with_file`.
    #[must_use]
    pub fn label(&self, with_file: bool) -> String {
        super::tensor_label(&self.file, &self.name, with_file)
    }
}

/// What one scheme did to some values (see the module docs for each field).
#[derive(Clone, Debug, Serialize)]
pub struct BlockStats {
    /// The scheme's name.
    pub scheme: String,
    /// Values.
    pub values: u64,
    /// Exact zeros.
    pub zeros: u64,
    /// Finite nonzero values.
    pub finite_nonzero: u64,
    /// NaN and infinite inputs.
    pub nonfinite: u64,
    /// Blocks (tiles; 1 per tensor for per-tensor scaling).
    pub blocks: u64,
    /// Finite nonzero values that became zero.
    pub underflow: u64,
    /// Values that are subnormal in the element format.
    pub subnormal: u64,
    /// Finite values clamped to the element's max.
    pub saturated: u64,
    /// Values that became NaN.
    pub nan: u64,
    /// `underflow / finite_nonzero` (0 when there is no finite nonzero value).
    pub lost_share: f64,
    /// The underflowed values' share of the squared norm of the finite values.
    pub energy_lost: f64,
    /// `||Q(x) - x|| / ||x||` over the values whose input and result are finite; `None` when
    /// their norm is 0.
    pub relative_error: Option<f64>,
    /// Counts of finite nonzero values per whole binade of `log2(block amax / |x|)`.
    #[serde(serialize_with = "binades_json", rename = "log2_amax_ratio")]
    pub histogram: Histogram,
    #[serde(skip)]
    sums: Sums,
}

impl BlockStats {
    fn new(scheme: Scheme, s: &Sums, histogram: Histogram) -> Self {
        let share = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        BlockStats {
            scheme: scheme.name(),
            values: s.values,
            zeros: s.zeros,
            finite_nonzero: s.finite_nonzero,
            nonfinite: s.nonfinite,
            blocks: s.blocks,
            underflow: s.counts.underflow,
            subnormal: s.counts.subnormal,
            saturated: s.counts.overflow,
            nan: s.counts.nan,
            lost_share: share(s.counts.underflow as f64, s.finite_nonzero as f64),
            energy_lost: share(s.sum_sq_lost, s.sum_sq),
            relative_error: (s.sum_sq_kept > 0.0).then(|| (s.sum_sq_err / s.sum_sq_kept).sqrt()),
            histogram,
            sums: *s,
        }
    }
}

fn binades_json<S: Serializer>(h: &Histogram, ser: S) -> std::result::Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Binade {
        binade: i32,
        count: u64,
    }
    ser.collect_seq(
        h.exponent_counts()
            .into_iter()
            .filter(|&(_, count)| count > 0)
            .map(|(binade, count)| Binade { binade, count }),
    )
}

/// The block-scaled analysis of one or several tensor files.
#[derive(Clone, Debug, Serialize)]
pub struct BlockAnalysis {
    /// The schemes, each with its element's zones.
    #[serde(serialize_with = "schemes_json")]
    pub schemes: Vec<Scheme>,
    /// Each tensor, in file order.
    pub tensors: Vec<BlockTensor>,
    /// All tensors together, one entry per scheme.
    pub total: Vec<BlockStats>,
    /// Tensors skipped for their dtype.
    #[serde(serialize_with = "super::json::skipped_json")]
    pub skipped: Vec<TensorInfo>,
    /// The options that produced it.
    pub options: BlockOptions,
}

fn schemes_json<S: Serializer>(schemes: &[Scheme], ser: S) -> std::result::Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Info {
        name: String,
        kind: Kind,
        element: FloatFormat,
        block_shape: Option<(usize, usize)>,
        scale: &'static str,
        subnormal_from: [f64; 2],
        lost_from: [f64; 2],
    }
    ser.collect_seq(schemes.iter().map(|s| {
        let range = s.range();
        Info {
            name: s.name(),
            kind: s.kind(),
            element: s.element(),
            block_shape: s.block_shape(),
            scale: s.scale_type(),
            subnormal_from: range.subnormal_from,
            lost_from: range.lost_from,
        }
    }))
}

impl BlockAnalysis {
    /// Whether the tensors come from more than one file.
    #[must_use]
    pub fn several_files(&self) -> bool {
        super::several_files(&self.tensors)
    }
}

/// Summarises the tensors (from [`read_block_tensors`], or built with [`BlockInput::add`]).
#[must_use]
pub fn analyze_blocks(
    tensors: Vec<BlockTensor>,
    skipped: Vec<TensorInfo>,
    options: &BlockOptions,
) -> BlockAnalysis {
    let total = options
        .schemes
        .iter()
        .enumerate()
        .map(|(i, &scheme)| {
            let mut sums = Sums::default();
            let mut hist = Histogram::new(SUB_BINS_LOG2);
            for t in &tensors {
                sums.merge(&t.schemes[i].sums);
                hist.merge(&t.schemes[i].histogram);
            }
            BlockStats::new(scheme, &sums, hist)
        })
        .collect();
    BlockAnalysis {
        schemes: options.schemes.clone(),
        tensors,
        total,
        skipped,
        options: options.clone(),
    }
}

/// The [`TensorAmax`] of each tensor of `files` that `want` selects, in scan order with its
/// file and name: the first pass per-tensor scaling and NVFP4 need.
///
/// # Errors
/// The readers'.
pub fn tensor_amaxes(
    files: &[PathBuf],
    want: &dyn Fn(&str) -> bool,
) -> Result<Vec<(PathBuf, String, TensorAmax)>> {
    let mut out: Vec<(PathBuf, String, TensorAmax)> = Vec::new();
    let mut narrow = Vec::new();
    for path in files {
        io::scan(path, want, &mut |info, values| {
            let new = out
                .last()
                .is_none_or(|(p, n, _)| *n != info.name || *p != info.path);
            if new {
                out.push((info.path.clone(), info.name.clone(), TensorAmax::default()));
            }
            if let Some((_, _, amax)) = out.last_mut() {
                *amax = amax.with_values(values, &mut narrow);
            }
        })?;
    }
    Ok(out)
}

/// The tensors of `files` that `options.tensors` selects, each rounded under every scheme as it
/// is read (a first pass reads the tensors' amax when a scheme needs it), and the tensors
/// skipped for their dtype.
///
/// # Errors
/// As [`super::read_tensors`].
pub fn read_block_tensors(
    files: &[PathBuf],
    options: &BlockOptions,
) -> Result<(Vec<BlockTensor>, Vec<TensorInfo>)> {
    super::check_distinct(files)?;
    let want = |name: &str| options.tensors.is_empty() || options.tensors.iter().any(|t| t == name);
    let amaxes = if options.schemes.iter().any(Scheme::needs_tensor_amax) {
        tensor_amaxes(files, &want)?
    } else {
        Vec::new()
    };
    let amax_of = |info: &TensorInfo| {
        amaxes
            .iter()
            .find(|(p, n, _)| *p == info.path && *n == info.name)
            .map_or(TensorAmax::default(), |a| a.2)
    };
    let mut tensors = Vec::new();
    let mut skipped = Vec::new();
    for path in files {
        let mut current: Option<BlockInput> = None;
        let scan = io::scan(path, &want, &mut |info, values| {
            let new = current
                .as_ref()
                .is_none_or(|t| t.info.name != info.name || t.info.path != info.path);
            if new {
                if let Some(t) = current.take() {
                    tensors.push(t.finish());
                }
                current = Some(BlockInput::new(info.clone(), options, amax_of(info)));
            }
            if let Some(t) = current.as_mut() {
                t.add(values);
            }
        })?;
        if let Some(t) = current.take() {
            tensors.push(t.finish());
        }
        skipped.extend(scan.skipped);
    }
    super::check_found(
        files,
        &options.tensors,
        &skipped,
        tensors.is_empty(),
        |name| tensors.iter().any(|t: &BlockTensor| t.name == name),
    )?;
    Ok((tensors, skipped))
}

/// [`read_block_tensors`] then [`analyze_blocks`].
///
/// # Errors
/// [`read_block_tensors`]'s.
pub fn analyze_block_files(files: &[PathBuf], options: &BlockOptions) -> Result<BlockAnalysis> {
    let (tensors, skipped) = read_block_tensors(files, options)?;
    Ok(analyze_blocks(tensors, skipped, options))
}
