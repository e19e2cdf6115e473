//! `analyze --plots`' charts: the histogram of log2 |x| over the format's zones, the loss-scale
//! sweep, and the heatmap of tensors by magnitude.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{DrawResult, FONT, GREY, NORMAL, OVERFLOW, RUN_COLORS, SUBNORMAL, UNDERFLOW};
use crate::format::FloatFormat;
use crate::report::AnalyzePlots;

/// Values as given, and scaled by the recommended loss scale.
const RAW: RGBColor = GREY;
const SCALED: RGBColor = RUN_COLORS[0];

/// `log2` of the edges of the format's zones: half the min subnormal (below: lost), the min
/// normal, and the max.
fn zones(f: FloatFormat) -> (f64, f64, f64) {
    (
        f.min_subnormal().log2() - 1.0,
        f64::from(f.emin()),
        f.max().log2(),
    )
}

/// What the histogram draws behind the bars over `x0..x1` (log2 |x|): each zone of format `f`
/// as `(from, to, colour, legend)`, lost values first.
fn histogram_zones(f: FloatFormat, x0: f64, x1: f64) -> [(f64, f64, RGBColor, String); 4] {
    let (lost, min_normal, max) = zones(f);
    [
        (
            x0,
            lost,
            UNDERFLOW,
            "lost: below half the min subnormal".to_string(),
        ),
        (
            lost,
            min_normal,
            SUBNORMAL,
            "subnormal: reduced precision".to_string(),
        ),
        (
            min_normal,
            max,
            NORMAL,
            format!("normal: {} significant bits", f.man_bits() + 1),
        ),
        (
            max,
            x1,
            OVERFLOW,
            format!("overflow: above max {}", f.max()),
        ),
    ]
}

/// One class of the sweep's stacked bars: its colour, its legend, and per scale `(k, y0, y1)`,
/// the bar at `log2_scale` `k` from `y0` to `y1` percent of the finite nonzero values.
type Stack = (RGBColor, &'static str, Vec<(f64, f64, f64)>);

/// What the sweep's upper panel draws: underflow, subnormal, normal and overflow shares stacked
/// in that order, from 0 up, at each scale of `s`.
fn sweep_stacks(s: &crate::stats::Sweep) -> Vec<Stack> {
    type Class = (RGBColor, &'static str, fn(&crate::stats::SweepRow) -> u64);
    let classes: [Class; 4] = [
        (UNDERFLOW, "underflow (becomes 0)", |r| r.underflow),
        (SUBNORMAL, "subnormal", |r| r.subnormal),
        (NORMAL, "normal", |r| r.normal),
        (OVERFLOW, "overflow (inf: step skipped)", |r| r.overflow),
    ];
    let n = s.finite_nonzero().max(1) as f64;
    classes
        .iter()
        .enumerate()
        .map(|(c, &(color, label, get))| {
            let bars = s.rows.iter().map(|row| {
                let below: u64 = classes[..c].iter().map(|(_, _, g)| g(row)).sum();
                let k = f64::from(row.log2_scale);
                let y0 = 100.0 * below as f64 / n;
                let y1 = 100.0 * (below + get(row)) as f64 / n;
                (k, y0, y1)
            });
            (color, label, bars.collect())
        })
        .collect()
}

/// The heatmap's edge lines at the scale `2^k`: `(log2 |x|, colour, legend)` for the lost,
/// subnormal and overflow edges of format `f`, each moved down by `k`.
fn heatmap_edges(f: FloatFormat, k: i32) -> [(f64, RGBColor, String); 3] {
    let (lost, min_normal, max) = zones(f);
    let kf = f64::from(k);
    [
        (
            lost - kf,
            UNDERFLOW,
            format!("left: lost at 2^{k} (below half the min subnormal / 2^{k})"),
        ),
        (
            min_normal - kf,
            SUBNORMAL,
            format!("left: subnormal at 2^{k} (below the min normal / 2^{k})"),
        ),
        (
            max - kf,
            OVERFLOW,
            format!("right: overflow at 2^{k} (above max / 2^{k})"),
        ),
    ]
}

/// The outline of histogram bars `(x0, x1, height)` shifted by `dx`, down to zero across gaps.
pub(crate) fn steps(bars: &[(f64, f64, f64)], dx: f64) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(bars.len() * 4 + 2);
    let mut prev_end = f64::NAN;
    for &(a, b, y) in bars {
        if a != prev_end {
            if prev_end.is_finite() {
                pts.push((prev_end + dx, 0.0));
            }
            pts.push((a + dx, 0.0));
        }
        pts.push((a + dx, y));
        pts.push((b + dx, y));
        prev_end = b;
    }
    if prev_end.is_finite() {
        pts.push((prev_end + dx, 0.0));
    }
    pts
}

fn legend_box(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled())
}

/// Histogram of log2|x| of all tensors, over the format's zones, raw and shifted by the
/// recommended scale.
///
/// # Errors
/// Whatever the backend reports.
pub(crate) fn analyze_histogram<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &AnalyzePlots<'_>,
) -> DrawResult<DB> {
    let (lost, _, max) = zones(p.format);
    let k = p.recommendation.log2_scale;
    let shift = f64::from(k.unwrap_or(0));
    let n = p.total.finite_nonzero().max(1) as f64;
    // Percent of the values per octave: bins are narrower than an octave with sub-bins.
    let bars: Vec<(f64, f64, f64)> = p
        .total
        .bins()
        .filter(|b| b.count > 0)
        .map(|b| {
            let (x0, x1) = (b.log2_lower, b.upper.log2());
            (x0, x1, 100.0 * b.count as f64 / n / (x1 - x0))
        })
        .collect();
    let lo_data = bars.first().map_or(lost, |b| b.0);
    let hi_data = bars.last().map_or(max, |b| b.1);
    let x0 = (lo_data.min(lost) - 2.0).floor();
    let x1 = (hi_data + shift.max(0.0)).max(max).ceil() + 2.0;
    let x0 = x0.min(lo_data + shift.min(0.0) - 1.0);
    let ymax = bars.iter().map(|b| b.2).fold(1.0, f64::max) * 1.2;
    let caption = match k {
        Some(k) => format!(
            "log2 |x| of all tensors vs {}, raw and scaled by 2^{k}",
            p.format
        ),
        None => format!(
            "log2 |x| of all tensors vs {} (no single loss scale works)",
            p.format
        ),
    };
    let mut chart = ChartBuilder::on(root)
        .caption(caption, (FONT, 26))
        .margin(16)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("log2 |x|  (binary exponent of the magnitude)")
        .y_desc("values per octave (%)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .draw()?;
    let zone = |a: f64, b: f64, c: RGBColor| {
        Rectangle::new([(a.max(x0), 0.0), (b.min(x1), ymax)], c.mix(0.18).filled())
    };
    for (a, b, c, label) in histogram_zones(p.format, x0, x1) {
        chart
            .draw_series(std::iter::once(zone(a, b, c)))?
            .label(label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 16, y + 6)], c.mix(0.4).filled())
            });
    }
    chart
        .draw_series(std::iter::once(Polygon::new(
            steps(&bars, 0.0),
            RAW.mix(0.5).filled(),
        )))?
        .label("raw |x|")
        .legend(legend_box(RAW));
    if let Some(k) = k {
        chart
            .draw_series(std::iter::once(PathElement::new(
                steps(&bars, shift),
                SCALED.stroke_width(3),
            )))?
            .label(format!("|x| * 2^{k} (recommended loss scale)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], SCALED.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 16))
        .draw()?;
    Ok(())
}

/// The sweep: stacked shares of underflow, subnormal, normal and overflow against the log2 loss
/// scale, with the recommended window and scale marked.
///
/// # Errors
/// Whatever the backend reports.
pub(crate) fn analyze_sweep<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &AnalyzePlots<'_>,
) -> DrawResult<DB> {
    let s = p.sweep;
    let (lo, hi) = match (s.rows.first(), s.rows.last()) {
        (Some(a), Some(b)) => (f64::from(a.log2_scale), f64::from(b.log2_scale)),
        _ => (0.0, 1.0),
    };
    let r = p.recommendation;
    let caption = match (r.min_log2_scale, r.max_log2_scale) {
        (Some(a), Some(b)) if a <= b => {
            format!("Loss-scale sweep, {}: window 2^{a}..2^{b}", p.format)
        }
        _ => format!("Loss-scale sweep, {}: no single scale works", p.format),
    };
    let root = root.titled(&caption, (FONT, 26))?;
    let (upper, lower) = root.split_vertically((62).percent_height());
    let mut chart = ChartBuilder::on(&upper)
        .margin(16)
        .margin_right(LEGEND_W)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((lo - 0.5)..(hi + 0.5), 0.0..100.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("log2 loss scale k  (scale = 2^k)")
        .y_desc("share of finite nonzero values (%)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .draw()?;
    let stacks = sweep_stacks(s);
    for (color, _, bars) in &stacks {
        let rects = bars
            .iter()
            .map(|&(k, y0, y1)| Rectangle::new([(k - 0.5, y0), (k + 0.5, y1)], color.filled()));
        chart.draw_series(rects)?;
    }
    if let (Some(a), Some(b)) = (r.min_log2_scale, r.max_log2_scale)
        && a <= b
    {
        let (a, b) = (f64::from(a) - 0.5, f64::from(b) + 0.5);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(a, 0.0), (b, 100.0)],
                BLACK.stroke_width(3),
            )))?
            .label("window (underflow and overflow within bounds)")
            .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], BLACK.stroke_width(2)));
    }
    if let Some(k) = r.log2_scale {
        let k = f64::from(k);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(k, 0.0), (k, 100.0)],
            BLACK.stroke_width(3),
        )))?;
    }
    let mut entries: Vec<(Swatch, String)> = stacks
        .iter()
        .map(|(c, l, _)| (Swatch::Fill(*c), (*l).to_string()))
        .collect();
    if let (Some(a), Some(b)) = (r.min_log2_scale, r.max_log2_scale)
        && a <= b
    {
        entries.push((Swatch::Outline(BLACK), format!("window 2^{a}..2^{b}")));
    }
    if let Some(k) = r.log2_scale {
        entries.push((Swatch::Line(BLACK), format!("recommended 2^{k}")));
    }
    legend(&upper, &entries)?;
    tails(&lower, p, lo, hi)
}

/// Below the stacked shares: the small shares that decide the window, on a log scale.
fn tails<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &AnalyzePlots<'_>,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    const FLOOR: f64 = 1e-7;
    let s = p.sweep;
    let n = s.finite_nonzero().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .margin_right(LEGEND_W)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((lo - 0.5)..(hi + 0.5), (FLOOR..1.0).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("log2 loss scale k  (scale = 2^k)")
        .y_desc("share (log; 1e-7 = none)")
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()?;
    let at = |v: f64| v.max(FLOOR);
    let line = |get: &dyn Fn(&crate::stats::SweepRow) -> f64| -> Vec<(f64, f64)> {
        s.rows
            .iter()
            .map(|r| (f64::from(r.log2_scale), at(get(r))))
            .collect()
    };
    type Points = Vec<(f64, f64)>;
    let series: [(RGBColor, &str, Points); 3] = [
        (
            UNDERFLOW,
            "underflow share",
            line(&|r| r.underflow as f64 / n),
        ),
        (
            RAW,
            "energy lost (share of squared norm)",
            line(&|r| r.energy_lost),
        ),
        (OVERFLOW, "overflow share", line(&|r| r.overflow as f64 / n)),
    ];
    let mut entries = Vec::new();
    for (color, label, pts) in series {
        chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))?;
        chart.draw_series(pts.into_iter().map(|c| Circle::new(c, 3, color.filled())))?;
        entries.push((Swatch::Line(color), label.to_string()));
    }
    let limit = at(p.max_underflow);
    chart.draw_series(DashedLineSeries::new(
        vec![(lo - 0.5, limit), (hi + 0.5, limit)],
        8,
        6,
        BLACK.stroke_width(2),
    ))?;
    entries.push((
        Swatch::Line(BLACK),
        format!("--max-underflow {}", p.max_underflow),
    ));
    legend(area, &entries)
}

/// Width kept right of the sweep panels for their legends, in pixels.
const LEGEND_W: u32 = 300;

/// What a legend entry shows beside its text.
enum Swatch {
    Fill(RGBColor),
    Outline(RGBColor),
    Line(RGBColor),
}

/// A legend in the `LEGEND_W` pixels at the right of `area`, top-aligned.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(Swatch, String)],
) -> DrawResult<DB> {
    let (w, _) = area.dim_in_pixel();
    let x = w as i32 - LEGEND_W as i32 + 24;
    let style = TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (swatch, text)) in entries.iter().enumerate() {
        let y = 30 + 24 * i as i32;
        match swatch {
            Swatch::Fill(c) => {
                area.draw(&Rectangle::new([(x, y - 7), (x + 18, y + 7)], c.filled()))?
            }
            Swatch::Outline(c) => area.draw(&Rectangle::new(
                [(x, y - 7), (x + 18, y + 7)],
                c.stroke_width(2),
            ))?,
            Swatch::Line(c) => area.draw(&PathElement::new(
                vec![(x, y), (x + 18, y)],
                c.stroke_width(3),
            ))?,
        }
        area.draw(&Text::new(text.clone(), (x + 26, y), style.clone()))?;
    }
    Ok(())
}

/// A sequential colour map from white (0) to dark blue (1).
fn shade(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// The most rows the heatmap draws: beyond it, tensors are grouped by name prefix
/// ([`heatmap_rows`]).
pub const HEATMAP_MAX_ROWS: usize = 300;

/// One heatmap row: its label and the share of its values per binary exponent.
type HeatRow = (String, Vec<(i32, f64)>);

/// The heatmap's rows: one per tensor, in order, up to [`HEATMAP_MAX_ROWS`]; beyond, tensors
/// that share a name prefix (`layers.3.attn` for `layers.3.attn.q.grad`, shortened one dotted
/// component at a time until the groups fit) are pooled into one row labelled `prefix.* (n)`;
/// if that is still too many, consecutive tensors are pooled.
#[must_use]
pub fn heatmap_rows(p: &AnalyzePlots<'_>) -> Vec<HeatRow> {
    let shares = |counts: &std::collections::BTreeMap<i32, u64>| -> Vec<(i32, f64)> {
        let n: u64 = counts.values().sum();
        counts
            .iter()
            .map(|(&e, &c)| (e, c as f64 / n.max(1) as f64))
            .collect()
    };
    let pool = |members: &[usize], label: String| -> HeatRow {
        let mut counts = std::collections::BTreeMap::new();
        for &i in members {
            for (e, c) in p.tensors[i].1.exponent_counts() {
                *counts.entry(e).or_insert(0) += c;
            }
        }
        (label, shares(&counts))
    };
    let n = p.tensors.len();
    if n <= HEATMAP_MAX_ROWS {
        return (0..n).map(|i| pool(&[i], p.tensors[i].0.clone())).collect();
    }
    // Group by ever shorter prefixes, keeping first-seen order.
    let names: Vec<&str> = p.tensors.iter().map(|t| t.0.as_str()).collect();
    let mut depth_cut = 1;
    loop {
        let prefix = |name: &str| -> String {
            let parts: Vec<&str> = name.split('.').collect();
            let keep = parts.len().saturating_sub(depth_cut).max(1);
            parts[..keep].join(".")
        };
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let key = prefix(name);
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(i),
                None => groups.push((key, vec![i])),
            }
        }
        let deepest = names
            .iter()
            .map(|n| n.split('.').count())
            .max()
            .unwrap_or(1);
        if groups.len() <= HEATMAP_MAX_ROWS || depth_cut >= deepest {
            if groups.len() <= HEATMAP_MAX_ROWS {
                return groups
                    .into_iter()
                    .map(|(key, members)| {
                        let label = if members.len() == 1 {
                            names[members[0]].to_string()
                        } else {
                            format!("{key}.* ({})", members.len())
                        };
                        pool(&members, label)
                    })
                    .collect();
            }
            break;
        }
        depth_cut += 1;
    }
    let per = n.div_ceil(HEATMAP_MAX_ROWS);
    (0..n)
        .step_by(per)
        .map(|start| {
            let members: Vec<usize> = (start..(start + per).min(n)).collect();
            let label = format!("{} .. ({})", names[start], members.len());
            pool(&members, label)
        })
        .collect()
}

/// Width of the colour bar panel at the right of the heatmap, in pixels.
const COLOUR_BAR_W: u32 = 130;

/// Heatmap of tensors (rows) by binary exponent of the magnitude (columns): the share of each
/// tensor's values per octave on a log colour scale (with a colour bar), and the edges of the
/// format's zones at the recommended scale: lost, subnormal, overflow. The image grows taller
/// with the number of rows ([`super::heatmap_size`]); beyond [`HEATMAP_MAX_ROWS`] tensors are
/// grouped by name prefix.
///
/// # Errors
/// Whatever the backend reports.
pub(crate) fn analyze_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &AnalyzePlots<'_>,
) -> DrawResult<DB> {
    let rows = heatmap_rows(p);
    let e_lo = rows
        .iter()
        .filter_map(|r| r.1.first())
        .map(|c| c.0)
        .min()
        .unwrap_or(-30);
    let e_hi = rows
        .iter()
        .filter_map(|r| r.1.last())
        .map(|c| c.0)
        .max()
        .unwrap_or(0);
    let vmax = rows
        .iter()
        .flat_map(|r| r.1.iter().map(|c| c.1))
        .fold(1e-12, f64::max);
    let k = p.recommendation.log2_scale.unwrap_or(0);
    let edges = heatmap_edges(p.format, k);
    let (lost, max) = (edges[0].0, edges[2].0);
    let x0 = f64::from(e_lo).min(lost) - 1.0;
    let x1 = f64::from(e_hi + 1).max(max) + 1.0;
    let nrows = rows.len().max(1);
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let caption = format!(
        "{} tensors by log2 |x| (share of each row per octave); {} edges at 2^{k}",
        p.tensors.len(),
        p.format
    );
    let root = root.titled(&caption, (FONT, 24))?;
    let (w, h) = root.dim_in_pixel();
    let (main, bar) = root.split_horizontally(w.saturating_sub(COLOUR_BAR_W));
    // A blank band of about 110 pixels above the rows holds the legend of the edges.
    let plot_h = f64::from(h.saturating_sub(16 + 55 + 10).max(200));
    let legend_px = 110.0;
    let row_px = (plot_h - legend_px) / nrows as f64;
    let top = nrows as f64 * plot_h / (plot_h - legend_px);
    let mut chart = ChartBuilder::on(&main)
        .margin(16)
        .margin_top(10)
        .x_label_area_size(55)
        .y_label_area_size(longest_label(&names))
        .build_cartesian_2d(x0..x1, 0.0..top)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("log2 |x|  (binary exponent of the magnitude)")
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_labels(0)
        .draw()?;
    for (i, (_, cells)) in rows.iter().enumerate() {
        // Row 0 at the top, as in a table.
        let y = (nrows - 1 - i) as f64;
        chart.draw_series(cells.iter().filter(|c| c.1 > 0.0).map(|&(e, v)| {
            Rectangle::new(
                [(f64::from(e), y + 0.05), (f64::from(e + 1), y + 0.95)],
                shade(log_share(v, vmax)).filled(),
            )
        }))?;
    }
    let font_px = (row_px * 0.8).clamp(8.0, 16.0).round() as i32;
    let label_style =
        TextStyle::from((FONT, font_px).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, name) in names.iter().enumerate() {
        let y = (nrows - 1 - i) as f64 + 0.5;
        chart.draw_series(std::iter::once(Text::new(
            format!("{name} "),
            (x0, y),
            label_style.clone(),
        )))?;
    }
    for (x, color, label) in edges {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, nrows as f64)],
                color.stroke_width(3),
            )))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font((FONT, 15))
        .draw()?;
    colour_bar(&bar, vmax)
}

/// The heatmap's colour bar: the log colour scale from [`LOG_FLOOR`] to `vmax`, labelled at
/// the decades, at most about 560 pixels high.
fn colour_bar<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, vmax: f64) -> DrawResult<DB> {
    let (_, h) = area.dim_in_pixel();
    let (x, y0) = (14, 64);
    let len = (h as i32 - 110).clamp(100, 560);
    let title = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Bottom));
    area.draw(&Text::new(
        "share of the row",
        (x - 6, y0 - 18),
        title.clone(),
    ))?;
    area.draw(&Text::new("per octave", (x - 6, y0 - 2), title))?;
    let (lo, hi) = (LOG_FLOOR.log10(), vmax.max(LOG_FLOOR * 10.0).log10());
    // Top = vmax, bottom = LOG_FLOOR, one rectangle per pixel.
    for py in 0..len {
        let v = 10f64.powf(hi - (hi - lo) * f64::from(py) / f64::from(len - 1));
        area.draw(&Rectangle::new(
            [(x, y0 + py), (x + 22, y0 + py + 1)],
            shade(log_share(v, vmax)).filled(),
        ))?;
    }
    area.draw(&Rectangle::new(
        [(x, y0), (x + 22, y0 + len)],
        BLACK.stroke_width(1),
    ))?;
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let at = |v: f64| y0 + ((hi - v.log10()) / (hi - lo) * f64::from(len - 1)).round() as i32;
    let mut ticks: Vec<(f64, String)> = vec![(vmax, format!("{:.0}%", 100.0 * vmax))];
    let mut d = hi.floor();
    while d >= lo {
        let v = 10f64.powf(d);
        // Skip a decade too close to the top label.
        if (at(v) - at(vmax)).abs() >= 14 {
            let label = if v >= 0.01 {
                format!("{:.0}%", 100.0 * v)
            } else {
                format!("{v:.0e}")
            };
            ticks.push((v, label));
        }
        d -= 1.0;
    }
    for (v, label) in ticks {
        let y = at(v);
        area.draw(&PathElement::new(
            vec![(x + 22, y), (x + 28, y)],
            BLACK.stroke_width(1),
        ))?;
        area.draw(&Text::new(label, (x + 32, y), style.clone()))?;
    }
    let note = TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Top));
    area.draw(&Text::new(
        format!("palest: {LOG_FLOOR:.0e} or less"),
        (x - 6, y0 + len + 10),
        note.clone(),
    ))?;
    area.draw(&Text::new("white: none", (x - 6, y0 + len + 28), note))?;
    Ok(())
}

/// Shares below this get the palest colour.
const LOG_FLOOR: f64 = 1e-6;

/// A share in `(0, vmax]` on a log scale from [`LOG_FLOOR`] (0.1, still visible against the
/// white of empty octaves) to `vmax` (1), so that rare tails, which decide overflow, show.
fn log_share(v: f64, vmax: f64) -> f64 {
    let (lo, hi) = (LOG_FLOOR.log10(), vmax.max(LOG_FLOOR * 10.0).log10());
    0.1 + 0.9 * ((v.log10() - lo) / (hi - lo)).clamp(0.0, 1.0)
}

/// Room for the tensor names left of the heatmap.
fn longest_label(names: &[String]) -> u32 {
    let chars = names.iter().map(|n| n.chars().count()).max().unwrap_or(4) as u32;
    (chars * 9 + 20).clamp(60, 320)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BF16, FP8_E4M3, FP16};
    use crate::stats::SweepAccumulator;

    /// The histogram's bands: what is lost lies below half the min subnormal, in the underflow
    /// colour; subnormals up to the min normal; normals up to the max; overflow above it.
    #[test]
    fn histogram_zones_colour_each_range_of_the_format() {
        let zones = histogram_zones(FP16, -40.0, 30.0);
        let at = |c: RGBColor| zones.iter().find(|z| z.2 == c).unwrap();
        let (under, sub, normal, over) = (at(UNDERFLOW), at(SUBNORMAL), at(NORMAL), at(OVERFLOW));
        // fp16: min subnormal 2^-24 (half of it 2^-25), min normal 2^-14, max 65504.
        assert_eq!((under.0, under.1), (-40.0, -25.0));
        assert_eq!((sub.0, sub.1), (-25.0, -14.0));
        assert_eq!((normal.0, normal.1), (-14.0, 65504f64.log2()));
        assert_eq!((over.0, over.1), (65504f64.log2(), 30.0));
        assert!(under.3.starts_with("lost"), "{}", under.3);
        assert!(sub.3.starts_with("subnormal"), "{}", sub.3);
        assert_eq!(normal.3, "normal: 11 significant bits");
        assert_eq!(over.3, "overflow: above max 65504");
        for f in [BF16, FP8_E4M3] {
            let z = histogram_zones(f, -200.0, 200.0);
            assert_eq!(z[0].1, f.min_subnormal().log2() - 1.0, "{f}");
            assert_eq!(z[0].2, UNDERFLOW, "{f}");
            assert_eq!(z[3].0, f.max().log2(), "{f}");
            assert_eq!(z[3].2, OVERFLOW, "{f}");
        }
    }

    /// The heatmap's edge lines sit at the zone edges moved down by the scale, each in its
    /// zone's colour.
    #[test]
    fn heatmap_edges_are_the_zone_edges_over_the_scale() {
        let e = heatmap_edges(FP16, 8);
        assert_eq!((e[0].0, e[0].1), (-33.0, UNDERFLOW));
        assert_eq!((e[1].0, e[1].1), (-22.0, SUBNORMAL));
        assert_eq!((e[2].0, e[2].1), (65504f64.log2() - 8.0, OVERFLOW));
        assert!(e[0].2.starts_with("left: lost at 2^8"), "{}", e[0].2);
        assert!(e[2].2.starts_with("right: overflow"), "{}", e[2].2);
    }

    /// The sweep's stacked bars on values whose fate is known: in fp16 at scale 1, 2^-26
    /// underflows (below 2^-25), 2^-20 is subnormal, 1 is normal, 2^17 overflows (above
    /// 65504); 1, 2, 3 and 4 of each. At 2^10 the underflow becomes subnormal and the
    /// subnormals normal.
    #[test]
    fn sweep_stacks_draw_each_class_in_its_colour() {
        let mut acc = SweepAccumulator::new(FP16);
        let mut xs = vec![2f32.powi(-26)];
        xs.extend([2f32.powi(-20); 2]);
        xs.extend([1.0; 3]);
        xs.extend([2f32.powi(17); 4]);
        xs.extend([0.0; 5]);
        acc.add_f32(&xs);
        let sweep = acc.sweep(0..=10);
        let stacks = sweep_stacks(&sweep);
        let colours: Vec<RGBColor> = stacks.iter().map(|s| s.0).collect();
        assert_eq!(colours, [UNDERFLOW, SUBNORMAL, NORMAL, OVERFLOW]);
        assert!(stacks[0].1.starts_with("underflow"));
        assert!(stacks[3].1.starts_with("overflow"));
        let at = |k: usize| -> Vec<(f64, f64)> {
            stacks
                .iter()
                .map(|s| {
                    assert_eq!(s.2[k].0, k as f64);
                    (s.2[k].1, s.2[k].2)
                })
                .collect()
        };
        // Shares of the 10 finite nonzero values, stacked from 0 to 100.
        assert_eq!(
            at(0),
            [(0.0, 10.0), (10.0, 30.0), (30.0, 60.0), (60.0, 100.0)]
        );
        assert_eq!(
            at(10),
            [(0.0, 0.0), (0.0, 10.0), (10.0, 60.0), (60.0, 100.0)]
        );
    }
}
