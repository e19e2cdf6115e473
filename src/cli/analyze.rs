//! `mixprec analyze`: range analysis of tensor files, loss-scale sweeps and a recommendation.
//! Parses the flags, calls [`mixprec::analysis::analyze_files`] and prints its tables, its JSON or
//! its plots.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mixprec::Error;
use mixprec::analysis::block::{self, BlockOptions};
use mixprec::analysis::{AnalysisOptions, SCALE_LIMIT, analyze_files, parse_log2_scales, text};
use mixprec::format::FloatFormat;
use mixprec::io::TensorInfo;

/// Analyze the range of tensors (gradients dumped from a framework) against a number format:
/// log2-magnitude histograms, a loss-scale sweep and the recommended loss scale.
///
/// For each scale 2^k of --scales, every finite nonzero value x is classified by what rounding
/// x * 2^k into the format (nearest-even, IEEE overflow) gives: underflow (zero), subnormal,
/// normal or overflow (inf/NaN). The window's top is the largest scale that keeps amax *
/// 2^(k + margin) finite (decided exactly from amax's exponent); its low end is the smallest
/// scale whose underflow is at most --max-underflow of the values. The recommended scale is the
/// window's top, or 2^0 when scaling is unnecessary (at 2^0 no more than --max-underflow of the
/// values underflow or are left subnormal) and only the top of --scales bounds the window. Each tensor also gets its own window; the recommendation names the tensors whose own
/// window excludes it, and says what to give PyTorch's GradScaler (init_scale, and where a
/// dynamic scaler settles: the largest power of two below the overflow boundary).
///
/// Per scale, energy_lost is the share of the squared L2 norm held by the values that underflow,
/// and relative_error is ||Q(x*S)/S - x|| / ||x|| over the finite values; at a scale where any
/// value overflows the error is infinite (the step would be skipped) and relative_error is null
/// in the JSON ("inf" in the table).
///
/// The window's low end is conservative: re-training finds fp16 matching FP32 from far lower
/// scales. Beside it, predicted_min_log2_scale is the smallest scale from which training is
/// predicted to match FP32: at most 0.5% of the squared norm and 40% of the values underflow
/// (the tensors taken as weight gradients, as param.grad dumps are). On mixprec's MLP, CNN and
/// LSTM loss-scale grids it is within one binade of re-training's lower edge
/// (docs/src/predicted-edge.md).
///
/// With a block format (--format mxfp8-e4m3, mxfp8-e5m2, mxfp6-e2m3, mxfp6-e3m2, mxfp4, nvfp4, or
/// a tile ELEMENT@RxC such as fp8-e4m3@1x128 or fp8-e4m3@128x128) there is no loss scale: each value is rounded in its block
/// (blocks along the last axis, tiles over the last two with leading axes folded into rows),
/// and the tables give per tensor the shares that underflow inside their block, are subnormal,
/// saturate or become NaN, the share of the squared norm lost, the relative error, and the
/// distribution of log2(block amax / |x|) against the element format's range. --compare-blocks
/// puts per-tensor scaling, MX, NVFP4 and 1x128 / 128x128 tiles side by side on the same
/// tensors. --scales, --margin, --max-underflow and --report belong to the loss-scale analysis.
///
/// Files: .safetensors (F64, F32, F16, BF16 tensors; other dtypes are listed as skipped), .npy and
/// .npz (f64, f32, f16). Tensors are named by their name in the file (.npy: the file stem). With
/// several files, tables get a file column; the same file given twice is an error.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tensor files (.safetensors, .npy, .npz).
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Number format the scaled values are rounded into (fp16, bf16, fp8-e4m3, fp8-e5m2, eXmY...),
    /// or a block format (mxfp8-e4m3, mxfp4, ...): the block-scaled analysis.
    #[arg(long, value_name = "F", default_value = DEFAULT_FORMAT)]
    format: String,
    /// Compare, on the same tensors, per-tensor scaling (one fp32 scale amax/max), MX blocks of
    /// 32, NVFP4 blocks of 16 and 1x128 / 128x128 tiles with fp32 scales: shares of values and
    /// of the squared norm lost, relative error. ELEMENT (written --compare-blocks=ELEMENT) is the
    /// element format of all but NVFP4 (fp4 always): fp8-e4m3 (default), fp8-e5m2, fp6-e2m3,
    /// fp6-e3m2 or fp4-e2m1.
    #[arg(
        long,
        value_name = "ELEMENT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "fp8-e4m3",
        conflicts_with_all = ["format", "scales", "margin", "max_underflow", "report"]
    )]
    compare_blocks: Option<String>,
    /// Range of log2 loss scales, inclusive; each end k or 2^k, e.g. 0..32, 2^0..2^32 or
    /// --scales=-8..40.
    #[arg(
        long,
        value_name = "LO..HI",
        default_value = DEFAULT_SCALES,
        allow_hyphen_values = true
    )]
    scales: String,
    /// Bits of headroom above amax: the recommended scale keeps amax * 2^(k + BITS) finite.
    #[arg(
        long,
        value_name = "BITS",
        default_value = DEFAULT_MARGIN,
        allow_hyphen_values = true
    )]
    margin: String,
    /// Largest share of the finite nonzero values allowed to underflow at the low end of the
    /// window.
    #[arg(
        long,
        value_name = "FRACTION",
        default_value = DEFAULT_MAX_UNDERFLOW,
        allow_hyphen_values = true
    )]
    max_underflow: String,
    /// Only the tensors with this name (repeatable).
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// Print exactly one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Write plots (PNG and SVG) into this directory (created if missing): the histogram
    /// against the format's zones, the sweep, and with several tensors a heatmap (block formats:
    /// block-ratios, the log2(|x| / block amax) histogram; --compare-blocks: block-compare). A plot file
    /// already there is replaced only if mixprec wrote it; any other file of that name is left
    /// alone and the command fails before analyzing anything.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Write a report into this directory (created if missing): index.html, one self-contained
    /// page (the recommendation in words, each tensor's own window, the plots inline as SVG),
    /// report.json (what --json prints) and figures/ (the --plots files). Files mixprec did not
    /// write are never replaced.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

const DEFAULT_FORMAT: &str = "fp16";
const DEFAULT_SCALES: &str = "0..32";
const DEFAULT_MARGIN: &str = "0";
const DEFAULT_MAX_UNDERFLOW: &str = "0.001";

impl Args {
    /// The block-scaled analysis's options when --format names a block format or
    /// --compare-blocks is given; `None` for the loss-scale analysis.
    fn block_options(&self) -> Result<Option<BlockOptions>, Error> {
        let options = BlockOptions::from_names(
            &self.format,
            self.compare_blocks.as_deref(),
            self.tensors.clone(),
        )?;
        let Some(options) = options else {
            return Ok(None);
        };
        let format = match options.schemes.as_slice() {
            [block::Scheme::Block(f)] if self.compare_blocks.is_none() => *f,
            _ => return Ok(Some(options)),
        };
        // The loss-scale flags mean nothing here: refuse them rather than ignore them.
        let given = [
            ("--scales", self.scales.as_str(), DEFAULT_SCALES),
            ("--margin", self.margin.as_str(), DEFAULT_MARGIN),
            (
                "--max-underflow",
                self.max_underflow.as_str(),
                DEFAULT_MAX_UNDERFLOW,
            ),
        ];
        for (flag, value, default) in given {
            if value != default {
                return Err(Error::Unsupported {
                    what: flag.to_string(),
                    problem: format!(
                        "sets the loss-scale sweep of a float --format; block format {format} \
                         has no loss scale (its blocks scale themselves)"
                    ),
                });
            }
        }
        if self.report.is_some() {
            return Err(Error::Unsupported {
                what: "--report".to_string(),
                problem: format!(
                    "the report page is the loss-scale analysis's; for block format {format} use \
                     --plots DIR and --json"
                ),
            });
        }
        Ok(Some(options))
    }

    fn options(&self) -> Result<AnalysisOptions, Error> {
        let format: FloatFormat = self.format.parse()?;
        let (lo, hi) = parse_log2_scales(&self.scales)?;
        let margin = self
            .margin
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|m| (0..=SCALE_LIMIT).contains(m))
            .ok_or_else(|| Error::InvalidValue {
                what: "--margin",
                value: self.margin.clone(),
                expected: "a whole number of bits from 0 to 2000",
            })?;
        let max_underflow = self
            .max_underflow
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| (0.0..=1.0).contains(f))
            .ok_or_else(|| Error::InvalidValue {
                what: "--max-underflow",
                value: self.max_underflow.clone(),
                expected: "a fraction from 0 to 1, e.g. 0.001",
            })?;
        AnalysisOptions::checked(
            format,
            (lo, hi),
            margin,
            max_underflow,
            self.tensors.clone(),
        )
    }
}

/// Runs the command.
///
/// # Errors
/// Bad flags, unreadable or repeated files, a `--plots` or `--report` directory that cannot take
/// the files,
/// a failed write.
pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    if let Some(options) = args.block_options()? {
        return run_blocks(args, &options, out);
    }
    let options = args.options()?;
    // Before the work, so that a bad directory costs nothing and leaves nothing half-written.
    if let Some(dir) = &args.plots {
        mixprec::report::check_plots_dir(dir)?;
    }
    if let Some(dir) = &args.report {
        mixprec::report::check_outputs(dir, &["index.html", "report.json"], "--report")?;
        mixprec::report::check_plots_dir(&dir.join("figures"))?;
    }
    let a = analyze_files(&args.files, &options)?;
    if let Some(dir) = &args.plots {
        mixprec::report::analyze_plots(dir, &mixprec::report::AnalyzePlots::new(&a))?;
    }
    if let Some(dir) = &args.report {
        mixprec::report::write_analysis(dir, &a)?;
    }
    print(args, out, &a, &a.skipped, text::write_tables)
}

/// The block-scaled analysis: tables, JSON, plots.
fn run_blocks(
    args: &Args,
    options: &BlockOptions,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.plots {
        mixprec::report::block::check_block_plots_dir(dir)?;
    }
    let a = block::analyze_block_files(&args.files, options)?;
    if let Some(dir) = &args.plots {
        mixprec::report::block::block_plots(dir, &a)?;
    }
    print(args, out, &a, &a.skipped, block::text::write_tables)
}

/// Prints `a`: as JSON with `--json` (the tables' "skipped" lines then go to stderr), else as
/// its tables.
fn print<T: serde::Serialize>(
    args: &Args,
    out: &mut dyn Write,
    a: &T,
    skipped: &[TensorInfo],
    write_tables: fn(&mut dyn Write, &T) -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    if args.json {
        warn_skipped(skipped);
        writeln!(out, "{}", serde_json::to_string(a)?)?;
    } else {
        write_tables(out, a)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// With --json the tables' "skipped" lines go to stderr.
fn warn_skipped(skipped: &[TensorInfo]) {
    for s in skipped {
        eprintln!(
            "mixprec: skipped {} ({}): unsupported dtype {}",
            s.name,
            s.path.display(),
            s.dtype
        );
    }
}
