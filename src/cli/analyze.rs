//! `mixprec analyze`: range analysis of tensor files, loss-scale sweeps and a recommendation.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use serde_json::{Value, json};

use super::formats::{sci, write_table};
use crate::Error;
use crate::format::{BF16, FP32, FloatFormat};
use crate::io::{self, TensorInfo, Values};
use crate::stats::{
    Alternative, Histogram, Recommendation, Sweep, SweepAccumulator, explain, recommend,
    sweep_from_histogram,
};

/// Analyze the range of tensors (gradients dumped from a framework) against a number format:
/// log2-magnitude histograms, a loss-scale sweep and the recommended loss scale.
///
/// For each scale 2^k of --scales, every finite nonzero value x is classified by what rounding
/// x * 2^k into the format (nearest-even, IEEE overflow) gives: underflow (zero), subnormal,
/// normal or overflow (inf/NaN). The recommended scale is the largest that keeps amax *
/// 2^(k + margin) finite; the window's low end is the smallest scale whose underflow is at most
/// --max-underflow of the values.
///
/// Per scale, energy_lost is the share of the squared L2 norm held by the values that underflow,
/// and relative_error is ||Q(x*S)/S - x|| / ||x|| over the finite values; at a scale where any
/// value overflows the error is infinite (the step would be skipped) and relative_error is null
/// in the JSON ("inf" in the table).
///
/// Files: .safetensors (F64, F32, F16, BF16 tensors; other dtypes are listed as skipped), .npy and
/// .npz (f64, f32, f16). Tensors are named by their name in the file (.npy: the file stem).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tensor files (.safetensors, .npy, .npz).
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Number format the scaled values are rounded into (fp16, bf16, fp8-e4m3, fp8-e5m2, eXmY...).
    #[arg(long, value_name = "F", default_value = "fp16")]
    format: String,
    /// Range of log2 loss scales, inclusive, e.g. 0..32 or --scales=-8..40.
    #[arg(
        long,
        value_name = "LO..HI",
        default_value = "0..32",
        allow_hyphen_values = true
    )]
    scales: String,
    /// Bits of headroom above amax: the recommended scale keeps amax * 2^(k + BITS) finite.
    #[arg(
        long,
        value_name = "BITS",
        default_value = "0",
        allow_hyphen_values = true
    )]
    margin: String,
    /// Largest share of the finite nonzero values allowed to underflow at the low end of the
    /// window.
    #[arg(
        long,
        value_name = "FRACTION",
        default_value = "0.001",
        allow_hyphen_values = true
    )]
    max_underflow: String,
    /// Only the tensors with this name (repeatable).
    #[arg(long = "tensor", value_name = "NAME")]
    tensors: Vec<String>,
    /// Print exactly one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Write plots (PNG and SVG) into this directory: the histogram against the format's zones,
    /// the sweep, and with several tensors a heatmap.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

/// Parsed and checked options.
struct Options {
    format: FloatFormat,
    lo: i32,
    hi: i32,
    margin: i32,
    max_underflow: f64,
}

/// Scales beyond this are meaningless for any format of at most 8 exponent bits and f64 data.
const SCALE_LIMIT: i32 = 2000;

/// Parses `LO..HI` (inclusive, either may be negative).
pub(crate) fn parse_scales(s: &str) -> Result<(i32, i32), Error> {
    let bad = || Error::InvalidValue {
        what: "--scales",
        value: s.to_string(),
        expected: "LO..HI with integers -2000 <= LO <= HI <= 2000, e.g. 0..32 or -8..40",
    };
    let (lo, hi) = s.trim().split_once("..").ok_or_else(bad)?;
    let lo: i32 = lo.trim().parse().map_err(|_| bad())?;
    let hi: i32 = hi.trim().parse().map_err(|_| bad())?;
    if lo > hi || lo < -SCALE_LIMIT || hi > SCALE_LIMIT {
        return Err(bad());
    }
    Ok((lo, hi))
}

impl Options {
    fn parse(args: &Args) -> Result<Self, Error> {
        let format: FloatFormat = args.format.parse()?;
        let (lo, hi) = parse_scales(&args.scales)?;
        let margin = args
            .margin
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|m| (0..=SCALE_LIMIT).contains(m))
            .ok_or_else(|| Error::InvalidValue {
                what: "--margin",
                value: args.margin.clone(),
                expected: "a whole number of bits from 0 to 2000",
            })?;
        let max_underflow = args
            .max_underflow
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| (0.0..=1.0).contains(f))
            .ok_or_else(|| Error::InvalidValue {
                what: "--max-underflow",
                value: args.max_underflow.clone(),
                expected: "a fraction from 0 to 1, e.g. 0.001",
            })?;
        Ok(Options {
            format,
            lo,
            hi,
            margin,
            max_underflow,
        })
    }
}

/// Everything gathered about one tensor.
pub(crate) struct TensorStats {
    pub info: TensorInfo,
    pub acc: SweepAccumulator,
    pub hist: Histogram,
}

/// Sub-bins per octave of the histograms kept for the plots and the wider-format check.
const SUB_BINS_LOG2: u32 = 2;

/// Reads every tensor of `files` that `want` accepts, one pass over the data.
fn gather(
    files: &[PathBuf],
    want: &dyn Fn(&str) -> bool,
    format: FloatFormat,
) -> crate::Result<(Vec<TensorStats>, Vec<TensorInfo>)> {
    let mut tensors: Vec<TensorStats> = Vec::new();
    let mut skipped = Vec::new();
    for path in files {
        let scan = io::scan(path, want, &mut |info, values| {
            let new = tensors
                .last()
                .is_none_or(|t| t.info.name != info.name || t.info.path != info.path);
            if new {
                tensors.push(TensorStats {
                    info: info.clone(),
                    acc: SweepAccumulator::new(format),
                    hist: Histogram::new(SUB_BINS_LOG2),
                });
            }
            if let Some(t) = tensors.last_mut() {
                match values {
                    Values::F32(xs) => {
                        t.acc.par_add_f32(xs);
                        t.hist.par_add_f32(xs);
                    }
                    Values::F64(xs) => {
                        t.acc.par_add_f64(xs);
                        t.hist.par_add_f64(xs);
                    }
                }
            }
        })?;
        skipped.extend(scan.skipped);
    }
    Ok((tensors, skipped))
}

/// The analysis of all tensors: per-tensor and total sweeps, the recommendation, its explanation.
pub(crate) struct Analysis {
    pub format: FloatFormat,
    pub tensors: Vec<(TensorStats, Sweep)>,
    pub total: Sweep,
    pub total_hist: Histogram,
    pub recommendation: Recommendation,
    pub explanation: String,
    pub max_underflow: f64,
}

impl Analysis {
    fn plot_data(&self) -> crate::report::AnalyzePlots<'_> {
        crate::report::AnalyzePlots {
            format: self.format,
            total: &self.total_hist,
            sweep: &self.total,
            recommendation: self.recommendation,
            max_underflow: self.max_underflow,
            tensors: self
                .tensors
                .iter()
                .map(|(t, _)| (t.info.name.as_str(), &t.hist))
                .collect(),
        }
    }
}

fn analyze(tensors: Vec<TensorStats>, o: &Options) -> Analysis {
    let range = o.lo..=o.hi;
    let mut total_acc = SweepAccumulator::new(o.format);
    let mut total_hist = Histogram::new(SUB_BINS_LOG2);
    for t in &tensors {
        total_acc.merge(&t.acc);
        total_hist.merge(&t.hist);
    }
    let total = total_acc.sweep(range.clone());
    let rec = recommend(&total, o.margin, o.max_underflow);
    let tensors: Vec<(TensorStats, Sweep)> = tensors
        .into_iter()
        .map(|t| {
            let s = t.acc.sweep(range.clone());
            (t, s)
        })
        .collect();
    let per_tensor: Vec<Alternative> = if tensors.len() > 1 {
        tensors
            .iter()
            .map(|(t, s)| Alternative {
                name: t.info.name.clone(),
                recommendation: recommend(s, o.margin, o.max_underflow),
            })
            .collect()
    } else {
        Vec::new()
    };
    // Wider formats, from the histogram of everything (their sweep is then exact up to the
    // bound of the histogram sweep, which is what an explanation needs).
    let wider: Vec<Alternative> = [BF16, FP32]
        .into_iter()
        .filter(|w| w.exp_bits() > o.format.exp_bits())
        .take(1)
        .map(|w| {
            let (s, _) = sweep_from_histogram(&total_hist, w, range.clone());
            Alternative {
                name: w.name(),
                recommendation: recommend(&s, o.margin, o.max_underflow),
            }
        })
        .collect();
    let explanation = explain(
        o.format,
        &total,
        &rec,
        o.margin,
        o.max_underflow,
        &per_tensor,
        if rec.works() { &[] } else { &wider },
    );
    Analysis {
        format: o.format,
        tensors,
        total,
        total_hist,
        recommendation: rec,
        explanation,
        max_underflow: o.max_underflow,
    }
}

pub fn run(args: &Args, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let o = Options::parse(args)?;
    let want = |name: &str| args.tensors.is_empty() || args.tensors.iter().any(|t| t == name);
    // Flattened to its one-line message: `Error::Io` already shows its source, which the
    // binary's `{:#}` would print a second time.
    let (tensors, skipped) =
        gather(&args.files, &want, o.format).map_err(|e| anyhow::anyhow!("{e}"))?;
    for name in &args.tensors {
        let known =
            tensors.iter().any(|t| &t.info.name == name) || skipped.iter().any(|t| &t.name == name);
        if !known {
            bail!(
                "--tensor '{name}': no tensor of that name in {}",
                list_files(&args.files)
            );
        }
    }
    if tensors.is_empty() {
        bail!(
            "no float tensors to analyze in {} ({} skipped for their dtype)",
            list_files(&args.files),
            skipped.len()
        );
    }
    let a = analyze(tensors, &o);
    if let Some(dir) = &args.plots {
        crate::report::analyze_plots(dir, &a.plot_data()).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    if args.json {
        for s in &skipped {
            eprintln!(
                "mixprec: skipped {} ({}): unsupported dtype {}",
                s.name,
                s.path.display(),
                s.dtype
            );
        }
        writeln!(out, "{}", serde_json::to_string(&to_json(&a))?)?;
    } else {
        write_text(out, &a, &o, &skipped)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn list_files(files: &[PathBuf]) -> String {
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

fn sweep_json(s: &Sweep) -> Value {
    let rows: Vec<Value> = s
        .rows
        .iter()
        .map(|r| {
            json!({
                "log2_scale": r.log2_scale,
                "underflow": r.underflow,
                "subnormal": r.subnormal,
                "normal": r.normal,
                "overflow": r.overflow,
                "energy_lost": r.energy_lost,
                "relative_error": r.relative_error,
            })
        })
        .collect();
    Value::Array(rows)
}

fn to_json(a: &Analysis) -> Value {
    let tensors: Vec<Value> = a
        .tensors
        .iter()
        .map(|(t, s)| {
            json!({
                "name": t.info.name,
                "count": s.count,
                "zeros": s.zeros,
                "nonfinite": s.nonfinite,
                "amax": s.amax,
                "sweep": sweep_json(s),
            })
        })
        .collect();
    let r = &a.recommendation;
    json!({
        "format": a.format.name(),
        "tensors": tensors,
        "total": {
            "count": a.total.count,
            "zeros": a.total.zeros,
            "nonfinite": a.total.nonfinite,
            "amax": a.total.amax,
            "sweep": sweep_json(&a.total),
        },
        "recommendation": {
            "log2_scale": r.log2_scale,
            "min_log2_scale": r.min_log2_scale,
            "max_log2_scale": r.max_log2_scale,
        },
    })
}

/// A share as a percentage with enough digits to tell a few values from none.
fn pct(part: u64, whole: u64) -> String {
    if whole == 0 || part == 0 {
        return "0".into();
    }
    let p = 100.0 * part as f64 / whole as f64;
    if p >= 0.1 {
        format!("{p:.1}%")
    } else {
        format!("{p:.1e}%")
    }
}

fn write_text(
    out: &mut dyn Write,
    a: &Analysis,
    o: &Options,
    skipped: &[TensorInfo],
) -> std::io::Result<()> {
    let r = &a.recommendation;
    // The scale the per-tensor columns describe: the recommendation, or the best there is.
    let k = r.log2_scale.or(r.min_log2_scale).unwrap_or(o.lo);
    writeln!(
        out,
        "Tensors, and what rounding x * 2^{k} into {} does to them:\n",
        a.format
    )?;
    let header = [
        "tensor",
        "dtype",
        "count",
        "zeros",
        "nonfinite",
        "amax",
        "min |x|",
        "underflow",
        "subnormal",
        "overflow",
        "energy lost",
        "rel. error",
    ];
    let mut rows: Vec<[String; 12]> = a
        .tensors
        .iter()
        .map(|(t, s)| {
            row_cells(
                &t.info.name,
                &t.info.dtype.to_string(),
                s,
                t.hist.min_nonzero(),
                k,
            )
        })
        .collect();
    if a.tensors.len() > 1 {
        rows.push(row_cells(
            "(all)",
            "",
            &a.total,
            a.total_hist.min_nonzero(),
            k,
        ));
    }
    write_table(out, &header, &rows)?;
    for s in skipped {
        writeln!(
            out,
            "skipped {} in {}: unsupported dtype {}",
            s.name,
            s.path.display(),
            s.dtype
        )?;
    }
    writeln!(
        out,
        "\nSweep of all tensors together ({} finite nonzero values):\n",
        a.total.finite_nonzero()
    )?;
    let header = [
        "log2 scale",
        "underflow",
        "subnormal",
        "normal",
        "overflow",
        "energy lost",
        "rel. error",
        "",
    ];
    let n = a.total.finite_nonzero();
    let rows: Vec<[String; 8]> = a
        .total
        .rows
        .iter()
        .map(|row| {
            let mark = match (r.min_log2_scale, r.max_log2_scale) {
                _ if Some(row.log2_scale) == r.log2_scale => "<- recommended",
                (Some(lo), Some(hi)) if lo <= row.log2_scale && row.log2_scale <= hi => "window",
                _ => "",
            };
            [
                row.log2_scale.to_string(),
                pct(row.underflow, n),
                pct(row.subnormal, n),
                pct(row.normal, n),
                row.overflow.to_string(),
                sci_share(row.energy_lost),
                row.relative_error.map_or("inf".into(), sci_share),
                mark.to_string(),
            ]
        })
        .collect();
    write_table(out, &header, &rows)?;
    let show = |v: Option<i32>| v.map_or("none".into(), |k| k.to_string());
    writeln!(
        out,
        "\nlog2_scale: {}   min_log2_scale: {}   max_log2_scale: {}",
        show(r.log2_scale),
        show(r.min_log2_scale),
        show(r.max_log2_scale)
    )?;
    writeln!(out, "{}", a.explanation)
}

fn sci_share(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.2e}")
    }
}

fn row_cells(name: &str, dtype: &str, s: &Sweep, min: Option<f64>, k: i32) -> [String; 12] {
    let n = s.finite_nonzero();
    let row = s.row(k);
    [
        name.to_string(),
        dtype.to_string(),
        s.count.to_string(),
        s.zeros.to_string(),
        s.nonfinite.to_string(),
        sci(s.amax),
        min.map_or("-".into(), sci),
        row.map_or("-".into(), |r| pct(r.underflow, n)),
        row.map_or("-".into(), |r| pct(r.subnormal, n)),
        row.map_or("-".into(), |r| r.overflow.to_string()),
        row.map_or("-".into(), |r| sci_share(r.energy_lost)),
        row.map_or("-".into(), |r| {
            r.relative_error.map_or("inf".into(), sci_share)
        }),
    ]
}
