//! A [`BlockAnalysis`] in tables, in the units of the loss-scale analysis's tables (counts,
//! magnitudes, percentages with their digits: [`percent`]).
//!
//! One block format: the tensors, each tensor's shares, and the distribution of
//! `log2(block amax / |x|)` of all tensors by binade with the element format's zone at each.
//! Several schemes (`--compare-blocks`): one table of all tensors together, one row per scheme,
//! and the share of values lost per tensor and scheme.

use std::io::Write;
use std::path::Path;

use super::{BlockAnalysis, BlockStats, BlockTensor, ElementRange, Scheme};
use crate::analysis::text::{Labeled, TensorColumns};
use crate::text::{magnitude, percent, percent_of, table};

/// An edge `[lo, hi]` of an [`ElementRange`] in words: `18..19`, or `18.81` when both agree.
#[must_use]
pub fn edge_words(edge: [f64; 2]) -> String {
    let one = |v: f64| {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    if edge[0] == edge[1] {
        one(edge[0])
    } else {
        format!("{}..{}", one(edge[0]), one(edge[1]))
    }
}

/// The zone(s) that values with `lo <= r < hi` fall in: `normal`, `subnormal`, `lost`, joined
/// with `/` where the binade straddles an edge (or an edge that depends on the block).
#[must_use]
pub fn zone_words(range: &ElementRange, lo: f64, hi: f64) -> String {
    let mut zones = Vec::new();
    if lo < range.subnormal_from[1] {
        zones.push("normal");
    }
    if hi > range.subnormal_from[0] && lo < range.lost_from[1] {
        zones.push("subnormal");
    }
    if hi > range.lost_from[0] {
        zones.push("lost");
    }
    zones.join("/")
}

/// The per-tensor share cells of `s`.
fn share_cells(s: &BlockStats) -> Vec<String> {
    let n = s.finite_nonzero;
    if n == 0 && s.nan == 0 {
        return vec!["-".to_string(); 6];
    }
    vec![
        percent_of(s.underflow, n),
        percent_of(s.subnormal, n),
        percent_of(s.saturated, n),
        percent_of(s.nan, s.values),
        percent(s.energy_lost),
        s.relative_error.map_or("-".into(), percent),
    ]
}

/// The scheme in words: `mxfp8-e4m3 (fp8-e4m3 elements, 1x32 blocks, e8m0 scales)`.
#[must_use]
pub fn scheme_words(s: &Scheme) -> String {
    match s.block_shape() {
        None => format!(
            "{} ({} with one fp32 scale per tensor)",
            s.name(),
            s.element()
        ),
        Some(_) => format!(
            "{} ({} elements, {} blocks, {} scales)",
            s.name(),
            s.element(),
            s.block_words(),
            s.scale_type()
        ),
    }
}

impl Labeled for BlockTensor {
    fn name_and_file(&self) -> (&str, &Path) {
        (&self.name, &self.file)
    }
}

/// Writes the tables (what `mixprec analyze` prints for a block format or `--compare-blocks`).
///
/// # Errors
/// Whatever writing to `out` reports.
pub fn write_tables(out: &mut dyn Write, a: &BlockAnalysis) -> std::io::Result<()> {
    let cols = TensorColumns {
        several_files: a.several_files(),
    };

    writeln!(
        out,
        "Tensors (count, zeros, nonfinite: numbers of values; amax: magnitude; rows x cols: as \
         the blocks see it, leading axes folded into rows):\n"
    )?;
    let rows = cols.rows(&a.tensors, |t| {
        let shape: Vec<String> = t.shape.iter().map(ToString::to_string).collect();
        let first = t.schemes.first();
        vec![
            t.dtype.to_string(),
            format!("[{}]", shape.join(", ")),
            format!("{} x {}", t.rows, t.cols),
            first.map_or(0, |s| s.values).to_string(),
            first.map_or(0, |s| s.zeros).to_string(),
            first.map_or(0, |s| s.nonfinite).to_string(),
            t.amax.map_or("-".into(), magnitude),
        ]
    });
    let h = cols.head(&[
        "dtype",
        "shape",
        "rows x cols",
        "count",
        "zeros",
        "nonfinite",
        "amax",
    ]);
    table(out, &h, &rows)?;
    for s in &a.skipped {
        writeln!(
            out,
            "skipped {} in {}: unsupported dtype {}",
            crate::text::printable(&s.name),
            crate::text::printable(&s.path.display().to_string()),
            s.dtype
        )?;
    }
    let share_cols = [
        "underflow",
        "subnormal",
        "saturated",
        "nan",
        "energy lost",
        "rel. error",
    ];
    if let [scheme] = a.schemes.as_slice() {
        writeln!(
            out,
            "\nIn {}, per tensor (% of each tensor's finite nonzero values; nan: % of all its \
             values; energy lost: % of its squared norm; rel. error: % of its norm):\n",
            scheme_words(scheme)
        )?;
        let mut rows = cols.rows(&a.tensors, |t| share_cells(&t.schemes[0]));
        if a.tensors.len() > 1 {
            rows.push(cols.all(share_cells(&a.total[0])));
        }
        table(out, &cols.head(&share_cols), &rows)?;
        write_ratios(out, scheme, &a.total[0])
    } else {
        write_comparison(out, a, &share_cols, cols)
    }
}

/// The distribution of `r = log2(block amax / |x|)` by binade, with the zones.
fn write_ratios(out: &mut dyn Write, scheme: &Scheme, s: &BlockStats) -> std::io::Result<()> {
    let range = scheme.range();
    let n = s.histogram.finite_nonzero();
    writeln!(
        out,
        "\nlog2(block amax / |x|) of all tensors, by binade (% of the {n} finite nonzero values \
         of blocks without NaN or infinity; {} here is subnormal from r = {} and lost from r = \
         {}):\n",
        s.scheme,
        edge_words(range.subnormal_from),
        edge_words(range.lost_from)
    )?;
    let rows: Vec<Vec<String>> = s
        .histogram
        .exponent_counts()
        .into_iter()
        .map(|(k, count)| {
            let (lo, hi) = (f64::from(k), f64::from(k + 1));
            vec![
                format!("{k}..{}", k + 1),
                percent_of(count, n),
                zone_words(&range, lo, hi),
            ]
        })
        .collect();
    table(out, &["r", "values", "zone"], &rows)?;
    writeln!(
        out,
        "\n{}: {}% of the finite nonzero values underflow to zero in their block ({}% of the \
         squared norm), {}% are subnormal, {}% saturate; relative error {}%.",
        s.scheme,
        percent_of(s.underflow, s.finite_nonzero),
        percent(s.energy_lost),
        percent_of(s.subnormal, s.finite_nonzero),
        percent_of(s.saturated, s.finite_nonzero),
        s.relative_error.map_or("-".into(), percent),
    )
}

/// One row per scheme (all tensors together), then the share lost per tensor and scheme.
fn write_comparison(
    out: &mut dyn Write,
    a: &BlockAnalysis,
    share_cols: &[&str],
    cols: TensorColumns,
) -> std::io::Result<()> {
    let n = a.total.first().map_or(0, |s| s.finite_nonzero);
    writeln!(
        out,
        "\nScaling schemes compared, all tensors together (% of the {n} finite nonzero values; \
         nan: % of all values; energy lost: % of the squared norm; rel. error: % of the norm):\n"
    )?;
    let rows: Vec<Vec<String>> = a
        .schemes
        .iter()
        .zip(&a.total)
        .map(|(scheme, s)| {
            let mut row = vec![
                scheme.name(),
                scheme.block_words(),
                scheme.scale_type().to_string(),
            ];
            row.extend(share_cells(s));
            row
        })
        .collect();
    let mut h = vec!["scheme", "block", "scale"];
    h.extend_from_slice(share_cols);
    table(out, &h, &rows)?;
    writeln!(
        out,
        "\nValues lost (underflow to zero) per tensor and scheme (% of each tensor's finite \
         nonzero values):\n"
    )?;
    let names: Vec<String> = a.schemes.iter().map(Scheme::name).collect();
    let scheme_cols: Vec<&str> = names.iter().map(String::as_str).collect();
    let rows = cols.rows(&a.tensors, |t| {
        t.schemes
            .iter()
            .map(|s| percent_of(s.underflow, s.finite_nonzero))
            .collect()
    });
    table(out, &cols.head(&scheme_cols), &rows)
}
