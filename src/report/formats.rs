//! Teaching figures of number formats (`mixprec formats --plots DIR`): every value of the 8-bit
//! formats on a number line, the formats' ranges side by side on a log2 axis with where one run's
//! gradients live, and the relative spacing of neighbouring values (1 ulp / |x|) against magnitude.
//! Each chart takes plain data, computed by a function of its own that the tests check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::charts::DrawResult;
use super::charts::{
    Axis, Corner, Line, LineChart, NORMAL, SUBNORMAL, Stroke, legend_on, run_color, swatch,
};
use crate::format::FloatFormat;
use crate::stats::Histogram;
use crate::{Error, Result};

const FONT: &str = "sans-serif";

/// Every positive finite value of a format, split at the smallest normal.
#[derive(Clone, Debug, PartialEq)]
pub struct NumberLine {
    /// The format.
    pub format: FloatFormat,
    /// Its subnormal values, ascending.
    pub subnormals: Vec<f64>,
    /// Its normal values, ascending.
    pub normals: Vec<f64>,
}

/// The number line of `f`, from every bit pattern with the sign bit clear; `None` for formats
/// of more than 8 bits (too many values to draw one by one).
#[must_use]
pub fn number_line(f: FloatFormat) -> Option<NumberLine> {
    if f.total_bits() > 8 {
        return None;
    }
    let mut values: Vec<f64> = (1..1u32 << (f.total_bits() - 1))
        .map(|bits| f.decode(bits))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    values.sort_by(f64::total_cmp);
    let split = values.partition_point(|&x| x < f.min_normal());
    let normals = values.split_off(split);
    Some(NumberLine {
        format: f,
        subnormals: values,
        normals,
    })
}

/// `x` as a power of two, exactly where it can: `2^k`, or `(2 - 2^j) x 2^k` (a largest value:
/// fp16's 65504 is `(2 - 2^-10) x 2^15`), or `2^k.dddd`.
#[must_use]
pub fn power(x: f64) -> String {
    let k = x.log2();
    if k.fract() == 0.0 {
        return format!("2^{k}");
    }
    let e = k.floor();
    let short = 2.0 - x / 2f64.powf(e);
    let j = short.log2();
    if short > 0.0 && j.fract() == 0.0 {
        format!("(2 - 2^{j}) x 2^{e}")
    } else {
        format!("2^{k:.4}")
    }
}

/// A format's range in log2: smallest subnormal, smallest normal, largest finite value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    /// The format.
    pub format: FloatFormat,
    /// `log2` of the smallest subnormal.
    pub min_subnormal: f64,
    /// `log2` of the smallest normal (`emin`).
    pub min_normal: f64,
    /// `log2` of the largest finite value.
    pub max: f64,
}

/// The range of `f`.
#[must_use]
pub fn range(f: FloatFormat) -> Range {
    Range {
        format: f,
        min_subnormal: f.min_subnormal().log2(),
        min_normal: f.min_normal().log2(),
        max: f.max().log2(),
    }
}

/// Where one run's gradients live: the octaves `2^lo..2^hi` holding the central share of the
/// values, and where they were measured.
#[derive(Clone, Debug, PartialEq)]
pub struct GradientBand {
    /// `log2` of the low edge.
    pub lo: i32,
    /// `log2` of the high edge.
    pub hi: i32,
    /// The share of the values within.
    pub share: f64,
    /// Where the values come from.
    pub source: String,
}

/// The share of gradient values a [`GradientBand`] holds.
pub const BAND_SHARE: f64 = 0.98;

/// The default band: the activation and weight gradients of every capture step of the
/// underflow study's FP32 run (`mixprec train --config analyses/underflow/fp32.json`: an MLP
/// on the digits, loss multiplied by 2^-16 as for a large effective batch). A test trains that
/// run and checks these numbers against [`gradient_band`] of its captures.
#[must_use]
pub fn default_gradient_band() -> GradientBand {
    GradientBand {
        lo: DEFAULT_BAND.0,
        hi: DEFAULT_BAND.1,
        share: BAND_SHARE,
        source: "gradients of analyses/underflow/fp32.json (MLP on digits, loss x 2^-16), all capture steps".into(),
    }
}

/// `(lo, hi)` of [`default_gradient_band`].
pub const DEFAULT_BAND: (i32, i32) = (-48, -24);

/// The octaves holding the central `share` of the values counted per octave in `octaves`
/// (`log2` of each octave's low edge, count): from the octave where the lowest
/// `(1 - share) / 2` end to the top of the one where the highest begin. `None` without values.
#[must_use]
pub fn gradient_band(octaves: &BTreeMap<i32, u64>, share: f64) -> Option<(i32, i32)> {
    let total: u64 = octaves.values().sum();
    if total == 0 {
        return None;
    }
    let tail = (1.0 - share) / 2.0 * total as f64;
    let mut seen = 0u64;
    let mut lo = None;
    let mut hi = None;
    for (&e, &n) in octaves {
        seen += n;
        if lo.is_none() && seen as f64 > tail {
            lo = Some(e);
        }
        if hi.is_none() && seen as f64 >= total as f64 - tail {
            hi = Some(e + 1);
        }
    }
    Some((lo?, hi?))
}

/// Adds the gradients of one capture (pooled, captured scaled by `loss_scale`) to `octaves`,
/// unscaled: per octave of the unscaled magnitude, the count. A capture whose loss scale is not
/// finite and positive (0 in a degenerate log) cannot be unscaled, and adds nothing.
pub fn add_unscaled(octaves: &mut BTreeMap<i32, u64>, gradients: &Histogram, loss_scale: f64) {
    if !(loss_scale.is_finite() && loss_scale > 0.0) {
        return;
    }
    let shift = loss_scale.log2().round() as i32;
    for (e, n) in gradients.exponent_counts() {
        *octaves.entry(e - shift).or_default() += n;
    }
}

/// The band of the gradients of the run directory `dir`: its activation and weight
/// gradients, unscaled, over every capture step.
///
/// # Errors
/// Not a run directory, an unreadable log, or a run with no captured gradient.
pub fn run_gradient_band(dir: &Path) -> Result<GradientBand> {
    let run = crate::run::RunDir::open(dir)?;
    let mut octaves = BTreeMap::new();
    let (mut captures, mut unscalable) = (0, 0);
    for c in run.captures()? {
        let c = c?;
        let scale = c.loss_scale.unwrap_or(1.0);
        unscalable += usize::from(!(scale.is_finite() && scale > 0.0));
        add_unscaled(&mut octaves, &c.gradients(), scale);
        captures += 1;
    }
    let (lo, hi) = gradient_band(&octaves, BAND_SHARE).ok_or_else(|| Error::BadFile {
        path: dir.to_path_buf(),
        problem: if unscalable > 0 {
            format!("no captured gradient that can be unscaled ({unscalable} of {captures} captures have a loss scale that is not finite and positive)")
        } else {
            "no captured gradient (train it with --capture-every N)".into()
        },
    })?;
    Ok(GradientBand {
        lo,
        hi,
        share: BAND_SHARE,
        source: format!("gradients of {}, {captures} capture steps", dir.display()),
    })
}

/// The relative spacing of neighbouring values of `f` against magnitude, `(|x|, ulp / |x|)` at
/// the bottom of each binade: 1 at the smallest subnormal (the next value is twice it), falling
/// to `2^-p` at the smallest normal, then `2^-p` (the format's precision) up to the largest
/// value. (Within a binade it falls to about `2^-(p+1)` before the next power of two.)
#[must_use]
pub fn relative_spacing(f: FloatFormat) -> Vec<(f64, f64)> {
    let eps = 2f64.powi(-(f.man_bits() as i32));
    vec![
        (f.min_subnormal(), 1.0),
        (f.min_normal(), eps),
        (f.max(), eps),
    ]
}

/// The spacing chart of `formats`.
#[must_use]
pub fn spacing_chart(formats: &[FloatFormat]) -> LineChart {
    LineChart {
        title: "Relative spacing of neighbouring values against magnitude".into(),
        x_desc: "magnitude |x|".into(),
        y_desc: "1 ulp / |x|, at the bottom of each binade".into(),
        axis: Axis::Log2,
        x_axis: Axis::Log2,
        lines: formats
            .iter()
            .enumerate()
            .map(|(i, f)| Line {
                name: format!("{f}: {} mantissa bits", f.man_bits()),
                color: run_color(i),
                points: relative_spacing(*f),
                stroke: Stroke::Solid,
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
        legend: Corner::Free,
    }
}

/// Draws the number lines: one row per format, a tick per value on a log2 axis, the subnormal
/// and normal zones shaded.
///
/// # Errors
/// Whatever the backend reports.
pub fn draw_number_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    lines: &[NumberLine],
) -> DrawResult<DB> {
    let all = lines
        .iter()
        .flat_map(|l| l.subnormals.iter().chain(&l.normals));
    let (x0, x1) = all.fold((f64::MAX, f64::MIN), |(a, b), &x| {
        (a.min(x.log2()), b.max(x.log2()))
    });
    let (x0, x1) = if x0 > x1 {
        (0.0, 1.0)
    } else {
        (x0.floor() - 1.0, x1.ceil() + 1.0)
    };
    let rows = lines.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Every positive value of the formats of 8 bits or fewer (0 and negatives mirror them)",
            (FONT, 24),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(110)
        .build_cartesian_2d(super::charts::axis_range(x0, x1), 0.0..rows)?;
    let names: Vec<String> = lines.iter().map(|l| l.format.name()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .x_desc("value (log2 axis)")
        .y_desc("format")
        .x_label_formatter(&|x| format!("2^{x:.0}"))
        .y_labels(lines.len() * 2 + 1)
        .y_label_formatter(&|y| {
            let i = (rows - y - 0.5).round();
            if (rows - y - 0.5 - i).abs() < 0.1 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    for (i, l) in lines.iter().enumerate() {
        // The row's top fifth holds its count, above the values.
        let (top, bottom) = (rows - i as f64 - 0.3, rows - i as f64 - 0.9);
        let zones = [
            (
                l.format.min_subnormal().log2() - 0.25,
                l.format.min_normal().log2(),
                SUBNORMAL,
                "subnormal zone",
            ),
            (
                l.format.min_normal().log2(),
                l.format.max().log2() + 0.25,
                NORMAL,
                "normal zone",
            ),
        ];
        draw_spans(&mut chart, &zones, (bottom, top), (0.15, 0.4), i == 0)?;
        for (values, color) in [(&l.subnormals, SUBNORMAL), (&l.normals, NORMAL)] {
            chart.draw_series(values.iter().map(|&v| {
                PathElement::new(
                    vec![(v.log2(), bottom + 0.1), (v.log2(), top - 0.1)],
                    color.stroke_width(2),
                )
            }))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            format!(
                "{} subnormal + {} normal values",
                l.subnormals.len(),
                l.normals.len()
            ),
            (x0 + 0.3, rows - i as f64 - 0.08),
            (FONT, 14),
        )))?;
    }
    legend_on(&mut chart, SeriesLabelPosition::UpperRight, 0.88)
}

/// Draws each span `(from, to, colour, label)` of a row as a rectangle from `bottom` to `top`
/// filled with its colour at opacity `fill`; with `legend`, each with its legend entry (a
/// swatch at opacity `legend_fill`).
fn draw_spans<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    spans: &[(f64, f64, RGBColor, &str)],
    (bottom, top): (f64, f64),
    (fill, legend_fill): (f64, f64),
    legend: bool,
) -> DrawResult<DB> {
    for &(from, to, color, label) in spans {
        let series = chart.draw_series(std::iter::once(Rectangle::new(
            [(from, bottom), (to, top)],
            color.mix(fill).filled(),
        )))?;
        if legend {
            series
                .label(label)
                .legend(swatch(color.mix(legend_fill).filled()));
        }
    }
    Ok(())
}

/// Draws the ranges: one row per format, the subnormal range light and the normal range dark on
/// a log2 axis, each edge labelled with its power of two, and the band of one run's gradients
/// across all rows.
///
/// # Errors
/// Whatever the backend reports.
pub fn draw_ranges<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    ranges: &[Range],
    band: Option<&GradientBand>,
) -> DrawResult<DB> {
    let x0 = ranges.iter().map(|r| r.min_subnormal).fold(0.0, f64::min) - 32.0;
    let x1 = ranges.iter().map(|r| r.max).fold(0.0, f64::max) + 40.0;
    let rows = ranges.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "The formats' ranges: smallest subnormal, smallest normal, largest",
            (FONT, 24),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(10)
        .build_cartesian_2d(super::charts::axis_range(x0, x1), 0.0..rows + 1.4)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .light_line_style(RGBColor(240, 240, 240))
        .x_desc("magnitude (log2 axis)")
        .x_label_formatter(&|x| format!("2^{x:.0}"))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    if let Some(b) = band {
        let color = RGBColor(0, 114, 178);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(f64::from(b.lo), 0.0), (f64::from(b.hi), rows + 1.4)],
                color.mix(0.15).filled(),
            )))?
            .label(format!(
                "{:.0}% of the {}: 2^{}..2^{}",
                100.0 * b.share,
                b.source,
                b.lo,
                b.hi
            ))
            .legend(swatch(color.mix(0.4).filled()));
    }
    for (i, r) in ranges.iter().enumerate() {
        let (top, bottom) = (rows - i as f64 - 0.25, rows - i as f64 - 0.75);
        let segments = [
            (r.min_subnormal, r.min_normal, SUBNORMAL, "subnormal range"),
            (r.min_normal, r.max, NORMAL, "normal range"),
        ];
        draw_spans(&mut chart, &segments, (bottom, top), (0.75, 0.75), i == 0)?;
        let label = |x: f64| {
            if x.fract() == 0.0 {
                format!("2^{x:.0}")
            } else {
                format!("2^{x:.2}")
            }
        };
        let style = (FONT, 13).into_font().color(&BLACK);
        chart.draw_series(std::iter::once(Text::new(
            r.format.name(),
            (x0 + 1.0, top - 0.1),
            (FONT, 17).into_font().color(&BLACK),
        )))?;
        chart.draw_series([
            Text::new(
                label(r.min_subnormal),
                (r.min_subnormal - 11.0, top - 0.05),
                style.clone(),
            ),
            Text::new(
                label(r.min_normal),
                (r.min_normal + 0.5, top + 0.2),
                style.clone(),
            ),
            Text::new(power(r.format.max()), (r.max + 1.0, top - 0.05), style),
        ])?;
    }
    legend_on(&mut chart, SeriesLabelPosition::UpperLeft, 0.9)
}

/// The files [`write_format_plots`] writes.
pub const FORMAT_PLOT_FILES: [&str; 6] = [
    "number-line.png",
    "number-line.svg",
    "ranges.png",
    "ranges.svg",
    "spacing.png",
    "spacing.svg",
];

/// Writes the three figures into `dir` (created if needed): the number lines of the formats of
/// 8 bits or fewer among `formats` (fp8-e4m3 and fp8-e5m2 when there are none), the ranges
/// of `formats` with `band`, and their spacing. Returns the paths written.
///
/// # Errors
/// A file in `dir` that mixprec did not write, a failed write, a chart that cannot be drawn.
pub fn write_format_plots(
    dir: &Path,
    formats: &[FloatFormat],
    band: &GradientBand,
) -> Result<Vec<PathBuf>> {
    super::check_outputs(dir, &FORMAT_PLOT_FILES, "--plots")?;
    let written =
        crate::io::write_dir_atomic(dir, |staging| draw_format_plots(staging, formats, band))?;
    Ok(super::rebase(&written, dir))
}

/// Writes [`write_format_plots`]'s files into the new directory `dir`; returns their paths.
fn draw_format_plots(
    dir: &Path,
    formats: &[FloatFormat],
    band: &GradientBand,
) -> Result<Vec<PathBuf>> {
    let mut lines: Vec<NumberLine> = formats.iter().filter_map(|f| number_line(*f)).collect();
    if lines.is_empty() {
        lines = [crate::format::FP8_E4M3, crate::format::FP8_E5M2]
            .iter()
            .filter_map(|f| number_line(*f))
            .collect();
    }
    let ranges: Vec<Range> = formats.iter().map(|f| range(*f)).collect();
    let spacing = spacing_chart(formats);
    let size = super::SIZE;
    let ranges_size = (size.0 + 400, (220 + 70 * ranges.len() as u32).max(420));
    let mut written = Vec::new();
    let mut both = |name: &str,
                    size: (u32, u32),
                    draw: &dyn Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> super::DrawOutcome,
                    png: &dyn Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> super::DrawOutcome|
     -> Result<()> {
        let path = dir.join(format!("{name}.png"));
        super::write_png(&path, size, png)?;
        written.push(path);
        let path = dir.join(format!("{name}.svg"));
        super::write_svg(&path, size, draw)?;
        written.push(path);
        Ok(())
    };
    let lines_size = (size.0, (160 + 110 * lines.len() as u32).max(360));
    both(
        "number-line",
        lines_size,
        &|a| draw_number_lines(a, &lines).map_err(|e| e.to_string()),
        &|a| draw_number_lines(a, &lines).map_err(|e| e.to_string()),
    )?;
    both(
        "ranges",
        ranges_size,
        &|a| draw_ranges(a, &ranges, Some(band)).map_err(|e| e.to_string()),
        &|a| draw_ranges(a, &ranges, Some(band)).map_err(|e| e.to_string()),
    )?;
    both(
        "spacing",
        size,
        &|a| super::charts::lines(a, &spacing).map_err(|e| e.to_string()),
        &|a| super::charts::lines(a, &spacing).map_err(|e| e.to_string()),
    )?;
    Ok(written)
}

#[cfg(test)]
mod tests;
