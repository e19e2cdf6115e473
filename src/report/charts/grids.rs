//! Grids of values: a heatmap of shares (layers by steps), shares stacked over steps, and the
//! shares of tensors' values per octave of magnitude.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::DrawResult;
use super::*;

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
    let (main, bar) = root.split_horizontally(w.saturating_sub(COLOUR_BAR_W));
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
    // Room above 100% for the legend (about 21 pixels an entry of a plot about 520 high), so
    // that it covers no bar; no tick labels there.
    let share = ((21 * c.layers.len() + 24) as f64 / 520.0).min(0.6);
    let top = 100.0 / (1.0 - share);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, axis_range(0.0, top))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("capture step")
        .y_desc("share of values stored (%)")
        .x_labels(0)
        .y_label_formatter(&|y| Axis::Linear.label_within(*y, 0.0, 100.0))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .draw()?;
    // The steps under their bars (the x axis is categorical), at most about 12 of them.
    let every = n.div_ceil(12);
    let steps = c.steps.iter().enumerate().filter(|(i, _)| i % every == 0);
    category_labels(
        root,
        &chart,
        0.0,
        steps.map(|(i, s)| (i as f64 + 0.5, s.to_string())),
        false,
    )?;
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
            .legend(swatch(color.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// Shares of each row's values per octave of magnitude (rows: tensors; columns: the binary
/// exponent of |x|), on a log colour scale, with vertical edges marked (a format's zones).
#[derive(Clone, Debug)]
pub struct MagnitudeHeatmap {
    /// Title.
    pub title: String,
    /// Top to bottom: `(label, [(e, share of the row's values in [2^e, 2^(e+1)))])`, `e`
    /// ascending.
    pub rows: Vec<(String, Vec<(i32, f64)>)>,
    /// Vertical lines: `(log2 |x|, colour, legend)`.
    pub edges: Vec<(f64, RGBColor, String)>,
}

/// Width of the colour bar panel at the right of the heatmap, in pixels.
const COLOUR_BAR_W: u32 = 130;

/// Draws a [`MagnitudeHeatmap`] with a colour bar; rows share the height left under a band
/// for the edges' legend (size the image with [`crate::report::heatmap_size`]).
///
/// # Errors
/// Whatever the backend reports.
pub fn magnitude_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &MagnitudeHeatmap,
) -> DrawResult<DB> {
    let rows = &c.rows;
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
    let edge =
        |pick: fn(f64, f64) -> f64, start: f64| c.edges.iter().map(|e| e.0).fold(start, pick);
    let x0 = edge(f64::min, f64::from(e_lo)) - 1.0;
    let x1 = edge(f64::max, f64::from(e_hi + 1)) + 1.0;
    let nrows = rows.len().max(1);
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let root = root.titled(&c.title, (FONT, 24))?;
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
        .build_cartesian_2d(axis_range(x0, x1), axis_range(0.0, top))?;
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
    for (x, color, label) in c.edges.iter().cloned() {
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

/// A sequential colour map from white (0) to dark blue (1).
fn shade(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// The heatmap's colour bar: the log colour scale from [`LOG_FLOOR`] to `vmax`, labelled at
/// the decades, at most about 560 pixels high.
fn colour_bar<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, vmax: f64) -> DrawResult<DB> {
    let (_, h) = area.dim_in_pixel();
    let (x, y0) = (14, 64);
    let len = (h as i32 - 126).clamp(100, 560);
    let title = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Bottom));
    // Clear of the top tick's label, which is centred on the bar's top edge.
    area.draw(&Text::new(
        "share of the row",
        (x - 6, y0 - 26),
        title.clone(),
    ))?;
    area.draw(&Text::new("per octave", (x - 6, y0 - 10), title))?;
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
            // Every label a percentage, as the top one is (10%, 1%, 0.1%, .. 0.0001%).
            ticks.push((v, format!("{}%", crate::text::fixed(100.0 * v, 6))));
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
    let floor = crate::text::fixed(100.0 * LOG_FLOOR, 6);
    for (i, line) in [
        format!("palest: {floor}%"),
        "or less".into(),
        "white: none".into(),
    ]
    .into_iter()
    .enumerate()
    {
        area.draw(&Text::new(
            line,
            (x - 6, y0 + len + 10 + 16 * i as i32),
            note.clone(),
        ))?;
    }
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
