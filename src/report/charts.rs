//! The charts of run reports: one function each, taking plain data (curves, bands, bins, zones,
//! a grid of values) and generic over the plotters backend, so the same code draws the SVG in
//! the HTML page and the PNG beside it.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::plot::DrawResult;
use crate::stats::Histogram;

const FONT: &str = "sans-serif";

/// One colour per run (Okabe-Ito, black and grey, then Tol's wine and olive): runs keep their
/// colour in every chart, and ten series (the nine element formats of `formats --plots`) get
/// ten colours.
pub const RUN_COLORS: [RGBColor; 10] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(128, 128, 128),
    RGBColor(136, 34, 85),
    RGBColor(153, 153, 51),
];

/// The colour of run `i`.
#[must_use]
pub fn run_color(i: usize) -> RGBColor {
    RUN_COLORS[i % RUN_COLORS.len()]
}

/// Colours of the outcome classes of rounding (as in `analyze`'s charts).
pub const UNDERFLOW: RGBColor = RGBColor(213, 94, 0);
/// Subnormal results.
pub const SUBNORMAL: RGBColor = RGBColor(230, 159, 0);
/// Normal results.
pub const NORMAL: RGBColor = RGBColor(0, 158, 115);
/// Overflow.
pub const OVERFLOW: RGBColor = RGBColor(204, 121, 167);

/// Draws the legend of `chart`'s labelled series at `position`, on a light box.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.88))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 15))
        .position(position)
        .draw()?;
    Ok(())
}

/// How the y axis maps values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Axis {
    /// As they are.
    Linear,
    /// log10, labelled with the values.
    Log10,
    /// log2, labelled `2^k`.
    Log2,
}

impl Axis {
    fn map(self, y: f64) -> Option<f64> {
        let v = match self {
            Axis::Linear => y,
            Axis::Log10 => y.log10(),
            Axis::Log2 => y.log2(),
        };
        v.is_finite().then_some(v)
    }

    fn label(self, v: f64) -> String {
        match self {
            Axis::Linear => format!("{v:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string(),
            Axis::Log10 => {
                let x = 10f64.powf(v);
                if (1e-3..1e4).contains(&x) {
                    // Two significant digits, without trailing zeros: 0.032, 0.1, 3.2, 100.
                    let digits = (1 - x.log10().floor() as i32).max(0) as usize;
                    let text = format!("{x:.digits$}");
                    if text.contains('.') {
                        text.trim_end_matches('0').trim_end_matches('.').to_string()
                    } else {
                        text
                    }
                } else {
                    format!("{x:.1e}")
                }
            }
            // Whole powers only: a tick between two would repeat its neighbour's label.
            Axis::Log2 if (v - v.round()).abs() < 1e-6 => format!("2^{}", v.round() as i64),
            Axis::Log2 => String::new(),
        }
    }
}

/// A curve.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend entry.
    pub name: String,
    /// Colour.
    pub color: RGBColor,
    /// `(x, y)`, in data units (the axis maps y).
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (a reference, or a curve that others may cover), on top of the solid ones.
    pub dashed: bool,
}

/// A band between two curves, `(x, low, high)` in data units.
#[derive(Clone, Debug)]
pub struct Band {
    /// Legend entry.
    pub name: String,
    /// Colour (drawn translucent).
    pub color: RGBColor,
    /// `(x, low, high)`.
    pub points: Vec<(f64, f64, f64)>,
}

/// Curves, bands and marked points over a shared x axis.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// Title.
    pub title: String,
    /// x axis description, with units.
    pub x_desc: String,
    /// x mapping.
    pub x_axis: Axis,
    /// y axis description, with units.
    pub y_desc: String,
    /// y mapping.
    pub axis: Axis,
    /// Curves.
    pub lines: Vec<Line>,
    /// Bands (drawn under the curves).
    pub bands: Vec<Band>,
    /// Points drawn as crosses (events such as skipped steps), as curves of no line.
    pub marks: Vec<Line>,
    /// Where the legend goes: the corner the data leaves free.
    pub legend: Corner,
}

/// A corner of a chart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Corner {
    /// Upper right.
    #[default]
    UpperRight,
    /// Lower right.
    LowerRight,
    /// Lower right, in room made under the data (the y axis extended), so that the legend
    /// covers nothing.
    BelowData,
}

/// Draws a [`LineChart`].
///
/// # Errors
/// Whatever the backend reports.
pub fn lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> DrawResult<DB> {
    let (axis, x_axis) = (c.axis, c.x_axis);
    let mapped = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        pts.iter()
            .filter_map(|&(x, y)| Some((x_axis.map(x)?, axis.map(y)?)))
            .collect()
    };
    let all_y = c
        .lines
        .iter()
        .chain(&c.marks)
        .flat_map(|l| mapped(&l.points))
        .chain(c.bands.iter().flat_map(|b| {
            let edges: Vec<(f64, f64)> = b
                .points
                .iter()
                .flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)])
                .collect();
            mapped(&edges)
        }));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in all_y {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.06).max(if axis == Axis::Linear { 1e-3 } else { 0.5 });
    let (mut y0, mut y1) = (y0 - pad, y1 + pad);
    if axis == Axis::Log2 && y1 - y0 < 2.0 {
        // At least two whole powers of two on the axis, so that a flat curve has labels.
        let mid = (y0 + y1) / 2.0;
        (y0, y1) = (mid - 1.0, mid + 1.0);
    }
    if c.legend == Corner::BelowData {
        // About 21 pixels per legend entry of a plot about 520 high.
        let entries = c.lines.len() + c.bands.len() + c.marks.len();
        let share = ((21 * entries + 24) as f64 / 520.0).min(0.6);
        y0 -= (y1 - y0) * share / (1.0 - share);
    }
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc(&c.x_desc)
        .y_desc(&c.y_desc)
        .x_label_formatter(&|x| x_axis.label(*x))
        .y_label_formatter(&|y| axis.label(*y))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    for b in &c.bands {
        let his: Vec<(f64, f64)> = b.points.iter().map(|&(x, _, hi)| (x, hi)).collect();
        let los: Vec<(f64, f64)> = b.points.iter().rev().map(|&(x, lo, _)| (x, lo)).collect();
        let mut poly = mapped(&his);
        poly.extend(mapped(&los));
        let color = b.color;
        chart
            .draw_series(std::iter::once(Polygon::new(
                poly,
                color.mix(0.18).filled(),
            )))?
            .label(&b.name)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.mix(0.3).filled())
            });
    }
    // Solid curves first, dashed ones on top (a dash shows what lies under it).
    let order = c
        .lines
        .iter()
        .filter(|l| !l.dashed)
        .chain(c.lines.iter().filter(|l| l.dashed));
    for l in order {
        let color = l.color;
        let style = color.stroke_width(2);
        let drawn = if l.dashed {
            chart.draw_series(DashedLineSeries::new(mapped(&l.points), 9, 6, style))?
        } else {
            chart.draw_series(LineSeries::new(mapped(&l.points), style))?
        };
        let dashed = l.dashed;
        drawn.label(&l.name).legend(move |(x, y)| {
            // A dash, a gap and a dash; one stroke for a solid curve.
            let (a, b) = if dashed {
                (x + 7, x + 11)
            } else {
                (x + 18, x + 18)
            };
            EmptyElement::at((0, 0))
                + PathElement::new(vec![(x, y), (a, y)], color.stroke_width(3))
                + PathElement::new(vec![(b, y), (x + 18, y)], color.stroke_width(3))
        });
        // A line of one point (a run that diverged at its first step) draws nothing: a dot.
        if let [point] = mapped(&l.points)[..] {
            chart.draw_series(std::iter::once(Circle::new(point, 4, color.filled())))?;
        }
    }
    for m in &c.marks {
        let color = m.color;
        chart
            .draw_series(
                mapped(&m.points)
                    .into_iter()
                    .map(|p| Cross::new(p, 5, color.stroke_width(2))),
            )?
            .label(&m.name)
            .legend(move |(x, y)| Cross::new((x + 9, y), 5, color.stroke_width(2)));
    }
    legend(
        &mut chart,
        match c.legend {
            Corner::UpperRight => SeriesLabelPosition::UpperRight,
            Corner::LowerRight | Corner::BelowData => SeriesLabelPosition::LowerRight,
        },
    )
}

/// A zone edge at or beyond this (log2) is open-ended: it does not widen the axis.
pub const OPEN_ZONE: f64 = 150.0;

/// A region of the x axis of a [`Log2Histograms`] (a format's zone).
#[derive(Clone, Debug)]
pub struct Zone {
    /// From (log2).
    pub from: f64,
    /// To (log2).
    pub to: f64,
    /// Colour (drawn translucent).
    pub color: RGBColor,
    /// Legend entry.
    pub label: String,
}

/// One histogram of a [`Log2Histograms`]: legend, colour, bars `(log2 lower, log2 upper,
/// percent per octave)`.
pub type HistogramLine = (String, RGBColor, Vec<(f64, f64, f64)>);

/// Histograms of log2 magnitudes drawn as outlines over zones.
#[derive(Clone, Debug)]
pub struct Log2Histograms {
    /// Title.
    pub title: String,
    /// x axis description.
    pub x_desc: String,
    /// Zones.
    pub zones: Vec<Zone>,
    /// `(legend, colour, bars)`; bars `(log2 lower, log2 upper, percent per octave)`.
    pub series: Vec<HistogramLine>,
}

/// The bars of `h` shifted by `shift` octaves: percent of its finite nonzero values per octave.
#[must_use]
pub fn bars(h: &Histogram, shift: f64) -> Vec<(f64, f64, f64)> {
    let n = h.finite_nonzero().max(1) as f64;
    h.bins()
        .filter(|b| b.count > 0)
        .map(|b| {
            let (x0, x1) = (b.log2_lower, b.upper.log2());
            (
                x0 + shift,
                x1 + shift,
                100.0 * b.count as f64 / n / (x1 - x0),
            )
        })
        .collect()
}

/// Draws [`Log2Histograms`].
///
/// # Errors
/// Whatever the backend reports.
pub fn log2_histograms<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &Log2Histograms,
) -> DrawResult<DB> {
    let xs = c
        .series
        .iter()
        .flat_map(|(_, _, b)| b.iter().flat_map(|&(a, b, _)| [a, b]))
        .chain(
            c.zones
                .iter()
                .flat_map(|z| [z.from, z.to])
                .filter(|v| v.abs() < OPEN_ZONE),
        );
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for x in xs {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    if x0 > x1 {
        (x0, x1) = (-30.0, 20.0);
    }
    let (x0, x1) = ((x0 - 2.0).floor(), (x1 + 2.0).ceil());
    let top = c
        .series
        .iter()
        .flat_map(|(_, _, b)| b.iter().map(|b| b.2))
        .fold(1.0, f64::max)
        * 1.08;
    // Room above the bars for the legend in the upper left (about 21 pixels an entry of a plot
    // about 520 high), so that it covers no bar.
    let share = ((21 * (c.zones.len() + c.series.len()) + 24) as f64 / 520.0).min(0.6);
    let ymax = top / (1.0 - share);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&c.x_desc)
        .y_desc("values per octave (%)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        // No share above 100% exists: the room made for the legend is left unlabelled.
        .y_label_formatter(&|y| {
            if *y <= 100.0 {
                format!("{y:.0}")
            } else {
                String::new()
            }
        })
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    for z in &c.zones {
        let color = z.color;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(z.from.max(x0), 0.0), (z.to.min(x1), ymax)],
                color.mix(0.16).filled(),
            )))?
            .label(&z.label)
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.mix(0.4).filled())
            });
    }
    for (name, color, b) in &c.series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(
                super::plot::steps(b, 0.0),
                color.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

/// Values in `[0, 1]` on a grid of rows (layers) and columns (steps).
#[derive(Clone, Debug)]
pub struct Heatmap {
    /// Title.
    pub title: String,
    /// What a cell's value is (the colour bar's label).
    pub value_desc: String,
    /// Row labels, top to bottom.
    pub rows: Vec<String>,
    /// Column labels (steps), left to right.
    pub cols: Vec<u64>,
    /// `values[row][col]`; NaN where there is no value.
    pub values: Vec<Vec<f64>>,
}

/// Light grey (0) to vermillion (1).
fn heat(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * v).round() as u8;
    RGBColor(mix(245, 170), mix(245, 40), mix(245, 0))
}

/// Draws a [`Heatmap`] with a colour bar.
///
/// # Errors
/// Whatever the backend reports.
pub fn heatmap<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Heatmap) -> DrawResult<DB> {
    let (w, _) = root.dim_in_pixel();
    let (main, bar) = root.split_horizontally(w.saturating_sub(130));
    let (nr, nc) = (c.rows.len().max(1), c.cols.len().max(1));
    let label_width = c
        .rows
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .clamp(6, 28) as u32
        * 9;
    let row_font = if nr > 40 { 10 } else { 14 };
    // Cells are centred on integer coordinates, so that ticks (and labels) fall on them.
    let mut chart = ChartBuilder::on(&main)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(label_width)
        .build_cartesian_2d(-0.5..nc as f64 - 0.5, -0.5..nr as f64 - 0.5)?;
    let cols = c.cols.clone();
    let rows = c.rows.clone();
    let at = |v: f64, n: usize| {
        let i = v.round();
        ((v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n).then_some(i as usize)
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("step")
        .y_labels(nr + 1)
        .x_labels(nc.min(12) + 1)
        .x_label_formatter(&|x| {
            at(*x, cols.len())
                .map(|i| cols[i].to_string())
                .unwrap_or_default()
        })
        // Row 0 is drawn at the top.
        .y_label_formatter(&|y| {
            at(*y, rows.len())
                .map(|i| rows[rows.len() - 1 - i].clone())
                .unwrap_or_default()
        })
        .axis_desc_style((FONT, 18))
        .label_style((FONT, row_font))
        .draw()?;
    let cells = c.values.iter().enumerate().flat_map(|(r, row)| {
        row.iter().enumerate().map(move |(col, &v)| {
            let (x, y) = (col as f64, (nr - 1 - r) as f64);
            let color = if v.is_finite() { heat(v) } else { WHITE };
            Rectangle::new([(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)], color.filled())
        })
    });
    chart.draw_series(cells)?;
    let mut scale = ChartBuilder::on(&bar)
        .margin_top(60)
        .margin_bottom(66)
        .margin_right(16)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..1.0, 0.0..100.0)?;
    scale
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_desc(&c.value_desc)
        .y_label_formatter(&|y| format!("{y:.0}%"))
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .draw()?;
    scale.draw_series((0..100).map(|i| {
        let v = f64::from(i);
        Rectangle::new([(0.0, v), (1.0, v + 1.0)], heat(v / 100.0).filled())
    }))?;
    Ok(())
}

/// Stacked shares over capture steps: one bar per step, one colour per outcome.
#[derive(Clone, Debug)]
pub struct StackedShares {
    /// Title.
    pub title: String,
    /// The steps.
    pub steps: Vec<u64>,
    /// `(legend, colour, share per step)`, stacked bottom to top.
    pub layers: Vec<(String, RGBColor, Vec<f64>)>,
}

/// Draws [`StackedShares`].
///
/// # Errors
/// Whatever the backend reports.
pub fn stacked_shares<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &StackedShares,
) -> DrawResult<DB> {
    let n = c.steps.len().max(1);
    let steps = c.steps.clone();
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..100.0)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("capture step")
        .y_desc("share of values stored (%)")
        .x_labels(n.min(12))
        .x_label_formatter(&|x| {
            steps
                .get(x.floor() as usize)
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    let mut base = vec![0.0; n];
    for (name, color, shares) in &c.layers {
        let color = *color;
        let rects: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let (y0, y1) = (base[i], base[i] + 100.0 * s);
                base[i] = y1;
                Rectangle::new([(i as f64 + 0.1, y0), (i as f64 + 0.9, y1)], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// One row of a [`DotChart`]: a series' values over seeds, their mean and its interval.
#[derive(Clone, Debug)]
pub struct DotRow {
    /// Row label.
    pub name: String,
    /// Colour of its dots and interval.
    pub color: RGBColor,
    /// One value per run (seed), in seed order.
    pub values: Vec<f64>,
    /// The mean and its confidence interval `(mean, low, high)` (low and high NaN for one run).
    pub mean: Option<(f64, f64, f64)>,
}

/// A distribution per category: one row per series, a dot per run, the mean and its confidence
/// interval (rows, so that long series names stay readable).
#[derive(Clone, Debug)]
pub struct DotChart {
    /// Title.
    pub title: String,
    /// x axis description, with units.
    pub x_desc: String,
    /// x mapping.
    pub axis: Axis,
    /// Rows, top to bottom.
    pub rows: Vec<DotRow>,
}

/// Draws a [`DotChart`]: each run a hollow dot, spread vertically in seed order so that equal
/// values stay visible; the mean a black tick; its interval a bar with end caps.
///
/// # Errors
/// Whatever the backend reports.
pub fn dots<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &DotChart) -> DrawResult<DB> {
    let axis = c.axis;
    let nr = c.rows.len().max(1);
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for r in &c.rows {
        let (lo, hi) = r.mean.map_or((f64::NAN, f64::NAN), |m| (m.1, m.2));
        for v in r
            .values
            .iter()
            .chain([lo, hi].iter())
            .filter_map(|&v| axis.map(v))
        {
            x0 = x0.min(v);
            x1 = x1.max(v);
        }
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    let pad = ((x1 - x0) * 0.06).max(if axis == Axis::Linear { 1e-3 } else { 0.05 });
    let label_width = c
        .rows
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .clamp(6, 60) as u32
        * 8
        + 20;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(label_width)
        // An empty band under the last row holds the legend.
        .build_cartesian_2d(x0 - pad..x1 + pad, -1.5..nr as f64 - 0.5)?;
    // Enough decimals that neighbouring ticks differ (values near 1 spread over 0.005).
    let digits = ((-(x1 - x0).log10()).ceil() as i32 + 1).clamp(0, 8) as usize;
    let x_label = |v: f64| {
        if axis == Axis::Linear {
            let text = format!("{v:.digits$}");
            if text.contains('.') {
                text.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                text
            }
        } else {
            axis.label(v)
        }
    };
    let names: Vec<String> = c.rows.iter().map(|r| r.name.clone()).collect();
    let at = |v: f64| {
        let i = v.round();
        ((v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len()).then_some(i as usize)
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc(&c.x_desc)
        .y_desc("series")
        .y_labels(nr + 1)
        // Rows are named, not measured: no tick marks (one would stand in the legend's band).
        .set_tick_mark_size(LabelAreaPosition::Left, 0)
        .x_label_formatter(&|x| x_label(*x))
        // Row 0 is drawn at the top.
        .y_label_formatter(&|y| {
            at(*y)
                // Spaced off the axis, which has no tick marks to do it.
                .map(|i| format!("{}  ", names[names.len() - 1 - i]))
                .unwrap_or_default()
        })
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    let grey = RGBColor(90, 90, 90);
    for (i, r) in c.rows.iter().enumerate() {
        let y = (nr - 1 - i) as f64;
        let color = r.color;
        let n = r.values.len();
        let dots = r.values.iter().enumerate().filter_map(|(k, &v)| {
            let dy = if n > 1 {
                (k as f64 / (n - 1) as f64 - 0.5) * 0.5
            } else {
                0.0
            };
            Some(Circle::new(
                (axis.map(v)?, y + dy),
                5,
                color.stroke_width(2),
            ))
        });
        let drawn = chart.draw_series(dots)?;
        if i == 0 {
            drawn
                .label("one run (seed), spread vertically in seed order")
                .legend(move |(x, y)| Circle::new((x + 9, y), 5, grey.stroke_width(2)));
        }
        let Some((mean, lo, hi)) = r.mean else {
            continue;
        };
        if let (Some(lo), Some(hi)) = (axis.map(lo), axis.map(hi)) {
            let bar = chart.draw_series([
                PathElement::new(vec![(lo, y), (hi, y)], color.stroke_width(3)),
                PathElement::new(vec![(lo, y - 0.12), (lo, y + 0.12)], color.stroke_width(3)),
                PathElement::new(vec![(hi, y - 0.12), (hi, y + 0.12)], color.stroke_width(3)),
            ])?;
            if i == 0 {
                bar.label("95% confidence interval of the mean")
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(3))
                    });
            }
        }
        if let Some(m) = axis.map(mean) {
            let tick = chart.draw_series(std::iter::once(PathElement::new(
                vec![(m, y - 0.3), (m, y + 0.3)],
                BLACK.stroke_width(3),
            )))?;
            if i == 0 {
                tick.label("mean over seeds").legend(move |(x, y)| {
                    PathElement::new(vec![(x + 9, y - 7), (x + 9, y + 7)], BLACK.stroke_width(3))
                });
            }
        }
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}

/// Bars side by side: one group per category along x, one bar (a colour) per series in each.
#[derive(Clone, Debug)]
pub struct GroupedBars {
    /// Title.
    pub title: String,
    /// y axis description, with units.
    pub y_desc: String,
    /// y mapping ([`Axis::Log10`] for shares that span decades; values of 0 are then written
    /// `0` at the axis instead of a bar).
    pub axis: Axis,
    /// The categories, left to right.
    pub groups: Vec<String>,
    /// `(legend, colour, one value per group)`.
    pub series: Vec<(String, RGBColor, Vec<f64>)>,
}

/// The value of a bar in words (its label above the bar): 2 significant digits.
fn bar_label(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if (0.01..1000.0).contains(&v.abs()) {
        let digits = (1 - v.abs().log10().floor() as i32).max(0) as usize;
        format!("{v:.digits$}")
    } else {
        format!("{v:.1e}")
    }
}

/// Draws [`GroupedBars`]; each bar is labelled with its value.
///
/// # Errors
/// Whatever the backend reports.
pub fn grouped_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &GroupedBars,
) -> DrawResult<DB> {
    let axis = c.axis;
    let ng = c.groups.len().max(1);
    let mapped: Vec<f64> = c
        .series
        .iter()
        .flat_map(|(_, _, v)| v.iter().filter_map(|&y| axis.map(y)))
        .collect();
    let (lo, hi) = mapped
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &y| (a.min(y), b.max(y)));
    let (y0, top) = match axis {
        _ if lo > hi => (0.0, 1.0),
        Axis::Linear => (0.0, hi.max(0.0) * 1.1 + 1e-12),
        // A decade below the smallest bar (so that it shows) and room for the labels above.
        Axis::Log10 | Axis::Log2 => ((lo - 1.0).floor(), hi + 0.6),
    };
    // Room above the bars for the legend (about 21 pixels an entry of a plot about 520 high),
    // so that it covers no bar.
    let share = ((21 * c.series.len() + 24) as f64 / 520.0).min(0.6);
    let y1 = top + (top - y0) * share / (1.0 - share);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..ng as f64 - 0.5, y0..y1)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(225, 225, 225))
        .x_labels(0)
        .y_desc(&c.y_desc)
        // No tick labels in the legend's room above the data: on a log axis of percentages
        // they would read as shares above 100%.
        .y_label_formatter(&|y| {
            if *y > top + 1e-9 {
                String::new()
            } else {
                axis.label(*y)
            }
        })
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    // The group names under the axis, centred on their groups (the x axis is categorical).
    for (g, name) in c.groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(g as f64, y0));
        root.draw(&Text::new(
            name.clone(),
            (px, py + 12),
            TextStyle::from((FONT, 17).into_font()).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
        ))?;
    }
    let ns = c.series.len().max(1);
    let width = 0.8 / ns as f64;
    for (s, (name, color, values)) in c.series.iter().enumerate() {
        let color = *color;
        let x = |g: usize| g as f64 - 0.4 + width * s as f64;
        let bars: Vec<_> = values
            .iter()
            .enumerate()
            .filter_map(|(g, &v)| {
                let top = axis.map(v)?;
                Some(Rectangle::new(
                    [(x(g) + 0.05 * width, y0), (x(g) + 0.95 * width, top)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));
        let labels: Vec<_> = values
            .iter()
            .enumerate()
            .filter(|&(_, v)| v.is_finite())
            .map(|(g, &v)| {
                let top = axis.map(v).unwrap_or(y0);
                Text::new(
                    bar_label(v),
                    (x(g) + 0.5 * width, top),
                    TextStyle::from((FONT, 13).into_font()).pos(
                        plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Center,
                            plotters::style::text_anchor::VPos::Bottom,
                        ),
                    ),
                )
            })
            .collect();
        chart.draw_series(labels)?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The y labels of a drawn chart's SVG, in order.
    fn y_labels(c: &LineChart) -> Vec<String> {
        let mut svg = String::new();
        {
            crate::report::register_font();
            let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
            lines(&root, c).unwrap();
            root.present().unwrap();
        }
        svg.split("</text>")
            .filter_map(|t| Some(t.rsplit('>').next()?.trim()))
            .filter(|t| t.starts_with("2^"))
            .map(str::to_string)
            .collect()
    }

    /// A constant loss scale (2^16, or 2^0) gets one whole-power label per tick, never the
    /// same label twice or `2^-0`.
    #[test]
    fn a_constant_log2_curve_has_distinct_labels() {
        for scale in [65536.0, 1.0, 0.5] {
            let c = LineChart {
                title: "loss scale".into(),
                x_desc: "step".into(),
                x_axis: Axis::Linear,
                y_desc: "scale".into(),
                axis: Axis::Log2,
                lines: vec![Line {
                    name: "run".into(),
                    color: run_color(0),
                    points: (0..50).map(|i| (f64::from(i), scale)).collect(),
                    dashed: false,
                }],
                bands: vec![],
                marks: vec![],
                legend: Corner::UpperRight,
            };
            let labels = y_labels(&c);
            let k = f64::log2(scale) as i64;
            assert!(labels.contains(&format!("2^{k}")), "{scale}: {labels:?}");
            let mut distinct = labels.clone();
            distinct.dedup();
            assert_eq!(distinct, labels, "{scale}");
            assert!(labels.iter().all(|l| l != "2^-0"), "{labels:?}");
        }
    }
}
