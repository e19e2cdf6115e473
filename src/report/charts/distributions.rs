//! Distributions over seeds (a dot per run, the mean and its interval) and grouped bars.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::DrawResult;
use super::*;

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
        .build_cartesian_2d(axis_range(x0 - pad, x1 + pad), -1.5..nr as f64 - 0.5)?;
    // Enough decimals that neighbouring ticks differ (values near 1 spread over 0.005).
    let digits = ((-(x1 - x0).log10()).ceil() as i32 + 1).clamp(0, 8) as usize;
    let x_label = |v: f64| {
        if axis == Axis::Linear {
            crate::text::fixed(v, digits)
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
    // Group names too wide to sit side by side (a model's layer names) are written upwards.
    let (width, _) = root.dim_in_pixel();
    let spacing = f64::from(width.saturating_sub(90 + 32)) / ng as f64;
    let names = category_names(root, &c.groups, spacing);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(names.area)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..ng as f64 - 0.5, axis_range(y0, y1))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(225, 225, 225))
        .x_labels(0)
        .y_desc(&c.y_desc)
        // No tick labels in the legend's room above the data: on a log axis of percentages
        // they would read as shares above 100%.
        .y_label_formatter(&|y| axis.label_within(*y, f64::MIN, top))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    // The group names under the axis, centred on their groups (the x axis is categorical).
    let upward = names.upward;
    let names = names
        .names
        .into_iter()
        .enumerate()
        .map(|(g, n)| (g as f64, n));
    category_labels(root, &chart, y0, names, upward)?;
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
            .legend(swatch(color.filled()));
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

    /// Group names that fit side by side are written level; a model's long layer names, which
    /// would run into each other, upwards (every one of them), with room made under the axis.
    #[test]
    fn group_names_too_wide_to_sit_side_by_side_are_written_upwards() {
        let svg_of = |groups: Vec<String>| {
            let n = groups.len();
            let chart = GroupedBars {
                title: String::new(),
                y_desc: String::new(),
                axis: Axis::Log10,
                groups,
                series: vec![("error".into(), run_color(0), vec![0.1; n])],
            };
            let mut svg = String::new();
            {
                crate::report::register_font();
                let root = SVGBackend::with_string(&mut svg, (1100, 650)).into_drawing_area();
                grouped_bars(&root, &chart).unwrap();
                root.present().unwrap();
            }
            svg
        };
        let short: Vec<String> = (0..10).map(|i| format!("{i}.linear")).collect();
        let level = svg_of(short.clone());
        assert!(short.iter().all(|s| level.contains(s.as_str())), "{level}");
        let long: Vec<String> = (0..10)
            .map(|i| format!("transformer.h.{i}.attn.c_attn"))
            .collect();
        // The y axis's description is written upwards either way.
        let rotated = |svg: &str| svg.matches("rotate(").count();
        assert_eq!(rotated(&svg_of(long)), rotated(&level) + 10);
        // Names too long for a third of the chart's height lose their fronts, not their ends.
        let longest: Vec<String> = (0..10)
            .map(|i| format!("encoder.layers.encoder_layer_{i}.self_attention.out_proj"))
            .collect();
        let svg = svg_of(longest);
        assert_eq!(rotated(&svg), rotated(&level) + 10);
        assert_eq!(svg.matches("…").count(), 10, "{svg}");
        assert!(
            (0..10).all(|i| svg.contains(&format!("…{i}.self_attention.out_proj"))),
            "{svg}"
        );
        assert!(!svg.contains("encoder.layers.encoder_layer_0"));
    }

    /// The dots of a row go up in seed order, as the grid pages' captions say: the first
    /// seed's dot is drawn lowest (the largest SVG y).
    #[test]
    fn a_rows_dots_rise_in_seed_order() {
        let chart = DotChart {
            title: String::new(),
            x_desc: String::new(),
            axis: Axis::Linear,
            rows: vec![DotRow {
                name: "run".into(),
                color: run_color(0),
                values: vec![1.0, 2.0, 3.0],
                mean: None,
            }],
        };
        let mut svg = String::new();
        {
            crate::report::register_font();
            let root = SVGBackend::with_string(&mut svg, (800, 400)).into_drawing_area();
            dots(&root, &chart).unwrap();
            root.present().unwrap();
        }
        // The three dots, left to right (values 1, 2, 3: seeds 0, 1, 2), and their heights.
        let mut at: Vec<(f64, f64)> = svg
            .split("<circle")
            .skip(1)
            .filter(|c| c.contains("#0072B2"))
            .filter_map(|c| {
                let num = |k: &str| c.split(k).nth(1)?.split('"').next()?.parse::<f64>().ok();
                Some((num("cx=\"")?, num("cy=\"")?))
            })
            .collect();
        at.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(at.len(), 3, "{svg}");
        assert!(at[0].1 > at[1].1 && at[1].1 > at[2].1, "{at:?}");
    }
}
