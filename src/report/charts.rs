//! The one chart kit: every chart of every page and of `analyze --plots`, one function each,
//! generic over the plotters backend, so the same code draws the SVG in an HTML page and the PNG
//! beside it; one palette and one font. Charts take plain data (curves, bands, bins, zones, a
//! grid of values, stacked shares); what a page or `analyze --plots` shows is built from its
//! results elsewhere (`report/page/figures.rs`, [`super::analyze`]).
//!
//! Colours are the Okabe-Ito palette (distinguishable with the common colour-vision
//! deficiencies, and in greyscale print by their lightness).

use plotters::prelude::*;

mod distributions;
mod grids;
mod histograms;
mod lines;
mod sweep;

pub use distributions::{DotChart, DotRow, GroupedBars, dots, grouped_bars};
pub use grids::{
    Heatmap, MagnitudeHeatmap, StackedShares, heatmap, magnitude_heatmap, stacked_shares,
};
pub use histograms::{Log2Histograms, OPEN_ZONE, Zone, bars, format_zones, log2_histograms};
pub use lines::{Band, Line, LineChart, Stroke, lines};
pub use sweep::{SWEEP_FLOOR, ScaleSweep, Stack, scale_sweep};

/// The result of drawing on a backend `DB`.
pub type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A legend entry's swatch: an 18 x 12 rectangle in `style`, at the entry's place.
pub(crate) fn swatch(style: ShapeStyle) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], style)
}

/// The font of every chart (DejaVu Sans, embedded: [`crate::report`]).
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
/// Values before scaling, marks and reference ticks.
pub const GREY: RGBColor = RGBColor(90, 90, 90);
/// What no outcome class counts (values zero or not finite before rounding).
pub const LIGHT_GREY: RGBColor = RGBColor(205, 205, 205);

/// Draws the legend of `chart`'s labelled series at `position`, on a light box.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> DrawResult<DB> {
    legend_on(chart, position, 0.88)
}

/// [`legend`] on a white box of opacity `background`.
pub(crate) fn legend_on<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
    background: f64,
) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(background))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 15))
        .position(position)
        .draw()?;
    Ok(())
}

/// The size of a category label's font.
const CATEGORY_FONT: u32 = 17;

/// The names under a categorical x axis and the area they take: level (the area 50 pixels
/// tall) when each fits under its category, `spacing` pixels apart; else written upwards, in an
/// area of at most a third of the chart's height, a name too long for it shortened from the
/// front to `…` and its end (a model's layer names differ at their ends; the page's table has
/// them whole).
struct CategoryNames {
    names: Vec<String>,
    upward: bool,
    area: u32,
}

fn category_names<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    labels: &[String],
    spacing: f64,
) -> CategoryNames {
    let font = TextStyle::from((FONT, CATEGORY_FONT).into_font());
    let width = |l: &str| root.estimate_text_size(l, &font).map_or(0, |(w, _)| w);
    let widest = labels.iter().map(|l| width(l)).max().unwrap_or(0);
    if f64::from(widest) <= 0.95 * spacing {
        return CategoryNames {
            names: labels.to_vec(),
            upward: false,
            area: 50,
        };
    }
    let room = root.dim_in_pixel().1 / 3;
    let names: Vec<String> = labels
        .iter()
        .map(|l| {
            let chars: Vec<char> = l.chars().collect();
            let mut name = l.clone();
            let mut start = 0;
            while width(&name) + 24 > room && start + 2 < chars.len() {
                start += 1;
                name = std::iter::once('…')
                    .chain(chars[start..].iter().copied())
                    .collect();
            }
            name
        })
        .collect();
    let area = names.iter().map(|n| width(n)).max().unwrap_or(0) + 24;
    CategoryNames {
        names,
        upward: true,
        area,
    }
}

/// Writes `(x, name)` labels under a categorical x axis at `y` (its bottom), each centred at
/// its x, or, `upward`, written bottom to top and ending under its x (labels too wide to sit
/// side by side: [`category_names`]).
fn category_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    y: f64,
    labels: impl IntoIterator<Item = (f64, String)>,
    upward: bool,
) -> DrawResult<DB> {
    use plotters::style::FontTransform;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    for (x, name) in labels {
        let (px, py) = chart.backend_coord(&(x, y));
        let font = (FONT, CATEGORY_FONT).into_font();
        let style = if upward {
            TextStyle::from(font)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Right, VPos::Center))
        } else {
            TextStyle::from(font).pos(Pos::new(HPos::Center, VPos::Top))
        };
        root.draw(&Text::new(name, (px, py + 12), style))?;
    }
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
            Axis::Linear => crate::text::fixed(v, 3),
            Axis::Log10 => {
                let x = 10f64.powf(v);
                if (1e-3..1e4).contains(&x) {
                    // Two significant digits, without trailing zeros: 0.032, 0.1, 3.2, 100.
                    crate::text::fixed(x, (1 - x.log10().floor() as i32).max(0) as usize)
                } else {
                    format!("{x:.1e}")
                }
            }
            // Whole powers only: a tick between two would repeat its neighbour's label.
            Axis::Log2 if (v - v.round()).abs() < 1e-6 => format!("2^{}", v.round() as i64),
            Axis::Log2 => String::new(),
        }
    }

    /// [`Axis::label`] for a tick of the data's range `lo..=hi`; none in the room a legend
    /// takes above or below it (there a label would read as a value the data reach).
    fn label_within(self, v: f64, lo: f64, hi: f64) -> String {
        if (lo - 1e-9..=hi + 1e-9).contains(&v) {
            self.label(v)
        } else {
            String::new()
        }
    }
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
    /// The first of upper right and lower right where the legend's box covers no point of
    /// the data, else [`Corner::BelowData`]: for curves that may end anywhere.
    Free,
}

/// One histogram of a [`Log2Histograms`]: legend, colour, bars `(log2 lower, log2 upper,
/// percent per octave)`.
pub type HistogramLine = (String, RGBColor, Vec<(f64, f64, f64)>);
/// The largest magnitude an axis bound may have: beyond it, the width of the range overflows.
const AXIS_LIMIT: f64 = 1e300;

/// The range `lo..hi` made safe for plotters, which never returns from laying out the ticks of a
/// range that is infinite, NaN or empty (a capture at loss scale 0 unscales to an infinite
/// axis): every chart's axes go through this before plotters sees them. A bound that is not
/// finite is replaced by the other plus or minus one (0..1 when neither is), bounds are clamped
/// to +-1e300, and an empty or inverted range is widened around its low end.
#[must_use]
pub(crate) fn axis_range(lo: f64, hi: f64) -> std::ops::Range<f64> {
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) => (lo, hi),
        (true, false) => (lo, lo + 1.0),
        (false, true) => (hi - 1.0, hi),
        (false, false) => (0.0, 1.0),
    };
    let (lo, hi) = (
        lo.clamp(-AXIS_LIMIT, AXIS_LIMIT),
        hi.clamp(-AXIS_LIMIT, AXIS_LIMIT),
    );
    if hi > lo {
        lo..hi
    } else {
        let half = (lo.abs() * 0.05).max(0.5);
        (lo - half)..(lo + half)
    }
}
