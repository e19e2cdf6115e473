//! The plots of the block-scaled analysis ([`crate::analysis::block`]): the distribution of
//! `log2(block amax / |x|)` against the element format's zones (one block format), and the
//! schemes side by side (`--compare-blocks`). Both are drawn by the shared charts
//! ([`charts::log2_histograms`], [`charts::grouped_bars`]) from plain data built here.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::charts::{self, GroupedBars, Log2Histograms, OPEN_ZONE, Zone};
use super::{SIZE, check_outputs, remove_stale_plot, write_png, write_svg};
use crate::analysis::block::{BlockAnalysis, BlockStats, Scheme};
use crate::{Error, Result};

/// The files [`block_plots`] may write in its directory.
pub const BLOCK_PLOT_FILES: [&str; 4] = [
    "block-ratios.png",
    "block-ratios.svg",
    "block-compare.png",
    "block-compare.svg",
];

/// Per-tensor outlines drawn beside the total in the ratio histogram, at most (more would be
/// unreadable).
const MAX_TENSOR_LINES: usize = 6;

/// Checks that [`block_plots`] can write into `dir` (as [`super::check_plots_dir`] does for the
/// loss-scale plots).
///
/// # Errors
/// [`super::check_outputs`]'s.
pub fn check_block_plots_dir(dir: &Path) -> Result<()> {
    check_outputs(dir, &BLOCK_PLOT_FILES, "--plots")
}

/// The element format's zones for `scheme` along `log2(|x| / block amax)` (the x axis of the
/// ratio chart, `-r`, so that small values sit on the left as in the loss-scale histogram):
/// normal, subnormal, lost, and where an edge depends on the block (MX, NVFP4), the band
/// between its best and worst place.
#[must_use]
pub fn ratio_zones(scheme: &Scheme) -> Vec<Zone> {
    let range = scheme.range();
    let e = scheme.element();
    let [s0, s1] = range.subnormal_from;
    let [l0, l1] = range.lost_from;
    let zone = |from: f64, to: f64, color: RGBColor, label: String| Zone {
        from: -to,
        to: -from,
        color,
        label,
    };
    let mut zones = vec![zone(0.0, s0, charts::NORMAL, format!("normal in {e}"))];
    if s1 > s0 {
        let label = "subnormal or normal, by block".to_string();
        zones.push(zone(s0, s1, RGBColor(240, 200, 120), label));
    }
    zones.push(zone(s1, l0, charts::SUBNORMAL, format!("subnormal in {e}")));
    if l1 > l0 {
        let label = "lost or subnormal, by block".to_string();
        zones.push(zone(l0, l1, RGBColor(235, 150, 110), label));
    }
    let label = "lost: underflows to zero".to_string();
    zones.push(zone(l1, OPEN_ZONE, charts::UNDERFLOW, label));
    zones
}

/// The bars of a histogram of `r = log2(block amax / |x|)` drawn along `-r`.
fn negated_bars(h: &crate::stats::Histogram) -> Vec<(f64, f64, f64)> {
    let mut bars: Vec<(f64, f64, f64)> = charts::bars(h, 0.0)
        .into_iter()
        .map(|(lo, hi, pct)| (-hi, -lo, pct))
        .collect();
    bars.reverse();
    bars
}

/// The chart data of the ratio histogram of the first scheme of `a`.
#[must_use]
pub fn ratio_chart(a: &BlockAnalysis) -> Log2Histograms {
    let scheme = a.schemes[0];
    let total: &BlockStats = &a.total[0];
    let mut series = vec![(
        if a.tensors.len() > 1 {
            "all tensors".to_string()
        } else {
            a.tensors
                .first()
                .map_or_else(|| "tensor".into(), |t| t.name.clone())
        },
        RGBColor(60, 60, 60),
        negated_bars(&total.histogram),
    )];
    if (2..=MAX_TENSOR_LINES).contains(&a.tensors.len()) {
        let several = a.several_files();
        for (i, t) in a.tensors.iter().enumerate() {
            series.push((
                t.label(several),
                charts::run_color(i),
                negated_bars(&t.schemes[0].histogram),
            ));
        }
    }
    Log2Histograms {
        title: format!(
            "{}: each value against its block's amax ({} finite nonzero values)",
            scheme.name(),
            total.histogram.finite_nonzero()
        ),
        x_desc: format!(
            "log2(|x| / block amax): binades below the largest magnitude of the value's {} block",
            scheme.block_words()
        ),
        zones: ratio_zones(&scheme),
        series,
    }
}

/// The chart data of the comparison: shares lost and relative error, one bar per scheme.
#[must_use]
pub fn compare_chart(a: &BlockAnalysis) -> GroupedBars {
    let n: u64 = a.total.first().map_or(0, |s| s.finite_nonzero);
    GroupedBars {
        title: format!(
            "Scaling schemes on the same tensors ({} tensors, {n} finite nonzero values)",
            a.tensors.len()
        ),
        y_desc: "% (log scale)".into(),
        axis: charts::Axis::Log10,
        groups: vec![
            "values lost (underflow to zero)".into(),
            "squared norm lost".into(),
            "relative error ||Q(x) - x|| / ||x||".into(),
        ],
        series: a
            .schemes
            .iter()
            .zip(&a.total)
            .enumerate()
            .map(|(i, (scheme, s))| {
                (
                    format!(
                        "{} ({}, {} scale)",
                        scheme.name(),
                        scheme.block_words(),
                        scheme.scale_type()
                    ),
                    charts::run_color(i),
                    vec![
                        100.0 * s.lost_share,
                        100.0 * s.energy_lost,
                        s.relative_error.map_or(f64::NAN, |e| 100.0 * e),
                    ],
                )
            })
            .collect(),
    }
}

/// Writes the plots into `dir` (created if needed): `block-ratios.{png,svg}` for one block
/// format, `block-compare.{png,svg}` for several schemes; a plot of the other kind that
/// mixprec wrote there earlier is removed, so that the directory describes this analysis only.
/// Returns the paths written.
///
/// # Errors
/// [`check_block_plots_dir`]'s; [`Error::Io`] if the directory or a file cannot be written.
pub fn block_plots(dir: &Path, a: &BlockAnalysis) -> Result<Vec<PathBuf>> {
    check_block_plots_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(Error::io_at(dir))?;
    let (name, stale) = if a.schemes.len() == 1 {
        ("block-ratios", "block-compare")
    } else {
        ("block-compare", "block-ratios")
    };
    remove_stale_plot(dir, stale)?;
    let png = dir.join(format!("{name}.png"));
    write_png(&png, SIZE, &|area| draw_one(area, a))?;
    let svg = dir.join(format!("{name}.svg"));
    write_svg(&svg, SIZE, &|area| draw_one(area, a))?;
    Ok(vec![png, svg])
}

fn draw_one<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    a: &BlockAnalysis,
) -> super::DrawOutcome {
    if a.schemes.len() == 1 {
        charts::log2_histograms(area, &ratio_chart(a))
    } else {
        charts::grouped_bars(area, &compare_chart(a))
    }
    .map_err(|e| e.to_string())
}
