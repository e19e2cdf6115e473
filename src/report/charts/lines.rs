//! Curves, bands and marked points over a shared x axis: losses, loss scales, windows, a grid's
//! metric against its key.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::DrawResult;
use super::*;

/// A curve.
#[derive(Clone, Debug)]
pub struct Line {
    /// Legend entry.
    pub name: String,
    /// Colour.
    pub color: RGBColor,
    /// `(x, y)`, in data units (the axis maps y).
    pub points: Vec<(f64, f64)>,
    /// How it is drawn; dashed and dotted curves go on top of the solid ones.
    pub stroke: Stroke,
}

/// How a [`Line`] is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    /// A run's own curve.
    Solid,
    /// A reference, or a curve that others may cover.
    Dashed,
    /// A second kind of reference beside dashed ones (a prediction).
    Dotted,
}

impl Stroke {
    /// [`Stroke::Dashed`] when `dashed`, else [`Stroke::Solid`].
    #[must_use]
    pub fn dashed_if(dashed: bool) -> Self {
        if dashed {
            Stroke::Dashed
        } else {
            Stroke::Solid
        }
    }
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

/// Pixels of one legend entry.
const LEGEND_ROW: usize = 21;
/// Pixels of a chart's height outside its plot (title, x labels, margins).
const PLOT_INSET: u32 = 130;
/// The largest share of the plot's height a legend under the data takes.
const MAX_LEGEND_SHARE: f64 = 0.6;

impl LineChart {
    /// Entries of the legend: curves, bands and marks.
    #[must_use]
    pub fn legend_entries(&self) -> usize {
        self.lines.len() + self.bands.len() + self.marks.len()
    }

    /// The height a chart drawn at least `height` high needs so that its
    /// legend, under the data, takes at most 60% of the plot: `height` for
    /// a legend of a dozen entries, more for a long one (a report of many runs).
    #[must_use]
    pub fn height_for_legend(&self, height: u32) -> u32 {
        let legend = (LEGEND_ROW * self.legend_entries() + 24) as f64;
        height.max(PLOT_INSET + (legend / MAX_LEGEND_SHARE).ceil() as u32)
    }
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
    let all_points = || {
        c.lines
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
            }))
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in all_points() {
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
    // A linear axis of data that are never negative (shares, losses) stops at 0.
    let floor = if axis == Axis::Linear && y0 >= 0.0 {
        0.0
    } else {
        f64::MIN
    };
    let (mut y0, mut y1) = ((y0 - pad).max(floor), y1 + pad);
    if axis == Axis::Log2 && y1 - y0 < 2.0 {
        // At least two whole powers of two on the axis, so that a flat curve has labels.
        let mid = (y0 + y1) / 2.0;
        (y0, y1) = (mid - 1.0, mid + 1.0);
    }
    let entries = c.legend_entries();
    let (w, h) = root.dim_in_pixel();
    let corner = match c.legend {
        Corner::Free => {
            // The legend's box as shares of the plot (about 21 pixels an entry, 8 a character
            // of the longest name, inside the label areas and margins below), with a margin.
            let longest = c
                .lines
                .iter()
                .chain(&c.marks)
                .map(|l| l.name.chars().count());
            let longest = longest
                .chain(c.bands.iter().map(|b| b.name.chars().count()))
                .max();
            let box_w =
                (60 + 8 * longest.unwrap_or(0)) as f64 / f64::from(w.saturating_sub(122).max(1));
            let box_h =
                (LEGEND_ROW * entries + 34) as f64 / f64::from(h.saturating_sub(120).max(1));
            free_corner(&all_points, (x0, x1), (y0, y1), (box_w, box_h))
        }
        fixed => fixed,
    };
    // The data's lowest label; the room made under it for a legend has none.
    let data_y0 = y0;
    if corner == Corner::BelowData {
        // The plot is the chart less about 130 pixels of title, labels and margins.
        let plot = f64::from(h.saturating_sub(PLOT_INSET).max(1));
        let share = ((LEGEND_ROW * entries + 24) as f64 / plot).min(MAX_LEGEND_SHARE);
        y0 -= (y1 - y0) * share / (1.0 - share);
    }
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(axis_range(x0, x1), axis_range(y0, y1))?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(225, 225, 225))
        .x_desc(&c.x_desc)
        .y_desc(&c.y_desc)
        .x_label_formatter(&|x| x_axis.label(*x))
        .y_label_formatter(&|y| axis.label_within(*y, data_y0, f64::MAX))
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
            .legend(swatch(color.mix(0.3).filled()));
    }
    // Solid curves first, dashed and dotted ones on top (a dash shows what lies under it).
    let order = c
        .lines
        .iter()
        .filter(|l| l.stroke == Stroke::Solid)
        .chain(c.lines.iter().filter(|l| l.stroke != Stroke::Solid));
    for l in order {
        let color = l.color;
        let style = color.stroke_width(2);
        let drawn = match l.stroke {
            Stroke::Solid => chart.draw_series(LineSeries::new(mapped(&l.points), style))?,
            Stroke::Dashed => {
                chart.draw_series(DashedLineSeries::new(mapped(&l.points), 9, 6, style))?
            }
            Stroke::Dotted => chart.draw_series(DashedLineSeries::new(
                mapped(&l.points),
                2,
                5,
                color.stroke_width(3),
            ))?,
        };
        let stroke = l.stroke;
        drawn.label(&l.name).legend(move |(x, y)| {
            // Its pattern over 18 pixels in two pieces: one stroke (the second empty), a dash
            // and a dash, or two dots.
            let [(a, b), (c, d)] = match stroke {
                Stroke::Solid => [(0, 18), (18, 18)],
                Stroke::Dashed => [(0, 7), (11, 18)],
                Stroke::Dotted => [(3, 5), (12, 14)],
            };
            EmptyElement::at((0, 0))
                + PathElement::new(vec![(x + a, y), (x + b, y)], color.stroke_width(3))
                + PathElement::new(vec![(x + c, y), (x + d, y)], color.stroke_width(3))
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
        if corner == Corner::UpperRight {
            SeriesLabelPosition::UpperRight
        } else {
            SeriesLabelPosition::LowerRight
        },
    )
}

/// Upper right if no point (in axis coordinates) falls in a legend box of `share` of the plot
/// `x` by `y` there, else lower right if none falls there, else under the data.
fn free_corner<I: Iterator<Item = (f64, f64)>>(
    points: &impl Fn() -> I,
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
    share: (f64, f64),
) -> Corner {
    let (bx, by) = (x1 - (x1 - x0) * share.0, (y1 - y0) * share.1);
    let covered =
        |top: bool| points().any(|(x, y)| x >= bx && if top { y >= y1 - by } else { y <= y0 + by });
    if !covered(true) {
        Corner::UpperRight
    } else if !covered(false) {
        Corner::LowerRight
    } else {
        Corner::BelowData
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The legend goes to the first corner the data leaves free: a loss that falls leaves the
    /// upper right; one that ends high, the lower right; curves ending at both, neither.
    #[test]
    fn a_free_corner_is_one_the_data_leaves_free() {
        let corner = |pts: &[(f64, f64)]| {
            free_corner(
                &|| pts.iter().copied(),
                (0.0, 10.0),
                (0.0, 10.0),
                (0.3, 0.3),
            )
        };
        assert_eq!(corner(&[(0.0, 10.0), (10.0, 1.0)]), Corner::UpperRight);
        assert_eq!(corner(&[(0.0, 1.0), (10.0, 9.0)]), Corner::LowerRight);
        assert_eq!(corner(&[(10.0, 9.0), (10.0, 1.0)]), Corner::BelowData);
        // A point left of the box covers nothing.
        assert_eq!(corner(&[(6.0, 10.0), (6.0, 0.0)]), Corner::UpperRight);
    }

    /// A dozen entries fit under the data of a 650-pixel chart; a longer legend makes the
    /// chart taller, keeping the legend to at most 60% of the plot.
    #[test]
    fn a_long_legend_makes_the_chart_taller() {
        let line = |i: usize| Line {
            name: format!("run {i}"),
            color: run_color(i),
            points: vec![(0.0, 1.0)],
            stroke: Stroke::Solid,
        };
        let chart = |n: usize| LineChart {
            title: String::new(),
            x_desc: String::new(),
            x_axis: Axis::Linear,
            y_desc: String::new(),
            axis: Axis::Linear,
            lines: (0..n).map(line).collect(),
            bands: vec![],
            marks: vec![],
            legend: Corner::BelowData,
        };
        assert_eq!(chart(13).height_for_legend(650), 650);
        let h = chart(35).height_for_legend(650);
        assert!(
            h > 650 && (21 * 35 + 24) as f64 <= 0.6 * f64::from(h - 130) + 1.0,
            "{h}"
        );
    }

    /// Every label of a drawn chart's SVG.
    fn labels(c: &LineChart) -> Vec<String> {
        let mut svg = String::new();
        {
            crate::report::register_font();
            let root = SVGBackend::with_string(&mut svg, (800, 500)).into_drawing_area();
            lines(&root, c).unwrap();
            root.present().unwrap();
        }
        svg.split("</text>")
            .filter_map(|t| Some(t.rsplit('>').next()?.trim().to_string()))
            .collect()
    }

    /// A share (never negative) gets no axis below 0, and the room made under the data for a
    /// legend has no labels (on a log axis they would read as scales the runs had).
    #[test]
    fn no_labels_below_the_data() {
        let chart = |axis, points: Vec<(f64, f64)>, legend| LineChart {
            title: String::new(),
            x_desc: "step".into(),
            x_axis: Axis::Linear,
            y_desc: String::new(),
            axis,
            lines: vec![Line {
                name: "run".into(),
                color: run_color(0),
                points,
                stroke: Stroke::Solid,
            }],
            bands: vec![],
            marks: vec![],
            legend,
        };
        let share = (0..50)
            .map(|i| (f64::from(i), f64::from(i % 7) * 1e-3))
            .collect();
        let got = labels(&chart(Axis::Linear, share, Corner::UpperRight));
        assert!(got.iter().any(|l| l == "0"), "{got:?}");
        assert!(!got.iter().any(|l| l.starts_with('-')), "{got:?}");
        let scale = (0..50)
            .map(|i| (f64::from(i), 2f64.powi(10 + i % 5)))
            .collect();
        let got = labels(&chart(Axis::Log2, scale, Corner::BelowData));
        let powers: Vec<i32> = got
            .iter()
            .filter_map(|l| l.strip_prefix("2^")?.parse().ok())
            .collect();
        assert!(
            powers.contains(&10) && powers.iter().all(|&k| k >= 10),
            "{got:?}"
        );
    }

    /// The `2^k` labels of a drawn chart's SVG, in order.
    fn y_labels(c: &LineChart) -> Vec<String> {
        labels(c)
            .into_iter()
            .filter(|t| t.starts_with("2^"))
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
                    stroke: Stroke::Solid,
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
