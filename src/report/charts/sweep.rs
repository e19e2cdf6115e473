//! Loss-scale sweeps: shares of the values stacked against the log2 loss scale, with a window
//! and a chosen scale marked, over a panel of the small shares that decide the window.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{DrawResult, FONT, Line, Stroke, axis_range};

/// One class of a [`ScaleSweep`]'s stacked bars: legend, colour, and per scale `(k, from, to)`,
/// the bar at the log2 scale `k` from `from` to `to` percent.
pub type Stack = (String, RGBColor, Vec<(f64, f64, f64)>);

/// Shares stacked against the log2 loss scale (upper panel, 0..100%) over curves of small
/// shares on a log axis (lower panel).
#[derive(Clone, Debug)]
pub struct ScaleSweep {
    /// Title.
    pub title: String,
    /// y axis description of the upper panel, with units.
    pub y_desc: String,
    /// The stacked classes, bottom to top.
    pub stacks: Vec<Stack>,
    /// The window of scales `(from, to)` (log2), outlined.
    pub window: Option<(i32, i32)>,
    /// The chosen scale (log2), as a vertical rule.
    pub chosen: Option<i32>,
    /// The lower panel's curves, shares in `(0, 1]` (smaller ones are drawn at [`SWEEP_FLOOR`]);
    /// dashed ones are thresholds (drawn without points).
    pub tails: Vec<Line>,
}

/// The lower panel's floor: a share of zero is drawn here.
pub const SWEEP_FLOOR: f64 = 1e-7;

/// Draws a [`ScaleSweep`].
///
/// # Errors
/// Whatever the backend reports.
pub fn scale_sweep<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &ScaleSweep,
) -> DrawResult<DB> {
    let ks = c.stacks.iter().flat_map(|s| s.2.iter().map(|b| b.0));
    let (lo, hi) = ks
        .fold(None, |r: Option<(f64, f64)>, k| {
            Some(r.map_or((k, k), |(a, b)| (a.min(k), b.max(k))))
        })
        .unwrap_or((0.0, 1.0));
    let root = root.titled(&c.title, (FONT, 26))?;
    let (upper, lower) = root.split_vertically((62).percent_height());
    let mut chart = ChartBuilder::on(&upper)
        .margin(16)
        .margin_right(LEGEND_W)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(axis_range(lo - 0.5, hi + 0.5), 0.0..100.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("log2 loss scale k  (scale = 2^k)")
        .y_desc(&c.y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .axis_desc_style((FONT, 20))
        .label_style((FONT, 16))
        .draw()?;
    for (_, color, bars) in &c.stacks {
        let rects = bars
            .iter()
            .map(|&(k, y0, y1)| Rectangle::new([(k - 0.5, y0), (k + 0.5, y1)], color.filled()));
        chart.draw_series(rects)?;
    }
    let mut entries: Vec<(Swatch, String)> = c
        .stacks
        .iter()
        .map(|(l, c, _)| (Swatch::Fill(*c), l.clone()))
        .collect();
    if let Some((a, b)) = c.window.filter(|(a, b)| a <= b) {
        let (x0, x1) = (f64::from(a) - 0.5, f64::from(b) + 0.5);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x0, 0.0), (x1, 100.0)],
            BLACK.stroke_width(3),
        )))?;
        entries.push((Swatch::Outline(BLACK), format!("window 2^{a}..2^{b}")));
    }
    if let Some(k) = c.chosen {
        let x = f64::from(k);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, 100.0)],
            BLACK.stroke_width(3),
        )))?;
        entries.push((Swatch::Line(BLACK), format!("recommended 2^{k}")));
    }
    legend(&upper, &entries)?;
    tails(&lower, c, lo, hi)
}

/// The lower panel: the small shares, on a log scale.
fn tails<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &ScaleSweep,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let mut chart = ChartBuilder::on(area)
        .margin(16)
        .margin_right(LEGEND_W)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(
            axis_range(lo - 0.5, hi + 0.5),
            (SWEEP_FLOOR..1.0).log_scale(),
        )?;
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
    let mut entries = Vec::new();
    for line in &c.tails {
        let pts: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|&(x, y)| (x, y.max(SWEEP_FLOOR)))
            .collect();
        if line.stroke != Stroke::Solid {
            chart.draw_series(DashedLineSeries::new(pts, 8, 6, line.color.stroke_width(2)))?;
        } else {
            let color = line.color;
            chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))?;
            chart.draw_series(pts.into_iter().map(|c| Circle::new(c, 3, color.filled())))?;
        }
        entries.push((Swatch::Line(line.color), line.name.clone()));
    }
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
