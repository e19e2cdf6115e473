//! Grids of values: a heatmap of shares (layers by steps), and shares stacked over steps.

use plotters::coord::Shift;
use plotters::prelude::*;

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
