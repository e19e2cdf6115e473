//! Log2-magnitude histograms over a format's zones (lost, subnormal, normal, overflow).

use plotters::coord::Shift;
use plotters::prelude::*;

use super::DrawResult;
use super::*;
use crate::format::FloatFormat;
use crate::stats::Histogram;

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
        // A shift that is not finite (unscaling by a loss scale of 0) places no bar anywhere.
        .filter(|&(x0, x1, y)| x0.is_finite() && x1.is_finite() && y.is_finite())
        .collect()
}

/// The zones of format `f` on a log2 |x| axis, each with its colour and legend: underflow
/// (below half the min subnormal, rounds to 0), subnormal, normal, overflow (above the max),
/// the outer two open-ended.
#[must_use]
pub fn format_zones(f: FloatFormat) -> Vec<Zone> {
    let lost = f.min_subnormal().log2() - 1.0;
    let min_normal = f64::from(f.emin());
    let max = f.max().log2();
    vec![
        Zone {
            from: -2.0 * OPEN_ZONE,
            to: lost,
            color: UNDERFLOW,
            label: format!("underflow in {f}: below half the min subnormal, rounds to 0"),
        },
        Zone {
            from: lost,
            to: min_normal,
            color: SUBNORMAL,
            label: "subnormal: reduced precision".into(),
        },
        Zone {
            from: min_normal,
            to: max,
            color: NORMAL,
            label: format!("normal: {} significant bits", f.man_bits() + 1),
        },
        Zone {
            from: max,
            to: 2.0 * OPEN_ZONE,
            color: OVERFLOW,
            label: format!("overflow: above max {}", f.max()),
        },
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
    // A series with no bars (no finite nonzero value) draws nothing and has no legend entry.
    let series: Vec<&HistogramLine> = c.series.iter().filter(|s| !s.2.is_empty()).collect();
    // With nothing to draw, the axis spans every share a bar could have.
    let top = series
        .iter()
        .flat_map(|(_, _, b)| b.iter().map(|b| b.2))
        .reduce(f64::max)
        .unwrap_or(100.0)
        .max(1.0)
        * 1.08;
    // Room above the bars for the legend in the upper left (about 21 pixels an entry of a plot
    // about 520 high), so that it covers no bar.
    let share = ((21 * (c.zones.len() + series.len()) + 24) as f64 / 520.0).min(0.6);
    let ymax = top / (1.0 - share);
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(axis_range(x0, x1), axis_range(0.0, ymax))?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(&c.x_desc)
        .y_desc("values per octave (%)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        // No share above 100% exists: the room made for the legend is left unlabelled. As many
        // decimals as a tick needs, so that those of a low axis read apart (not "0 0 1 1").
        .y_label_formatter(&|y| Axis::Linear.label_within(*y, 0.0, 100.0))
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
            .legend(swatch(color.mix(0.4).filled()));
    }
    for &(name, color, b) in &series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(steps(b, 0.0), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BF16, FP8_E5M2, FP16};

    /// The run report's format zones: each label and colour goes with its edges (fp16:
    /// underflow below 2^-25, half the min subnormal; subnormal up to the min normal 2^-14;
    /// normal up to the max; overflow above), and the zones tile the axis in that order.
    #[test]
    fn zones_label_and_colour_the_right_ranges() {
        let z = format_zones(FP16);
        let named = |label: &str| z.iter().find(|z| z.label.starts_with(label)).unwrap();
        let under = named("underflow");
        assert_eq!(
            under.label,
            "underflow in fp16: below half the min subnormal, rounds to 0"
        );
        assert_eq!(named("normal").label, "normal: 11 significant bits");
        assert_eq!(named("overflow").label, "overflow: above max 65504");
        assert_eq!((under.to, under.color), (-25.0, UNDERFLOW));
        let sub = named("subnormal");
        assert_eq!((sub.from, sub.to, sub.color), (-25.0, -14.0, SUBNORMAL));
        let normal = named("normal");
        assert_eq!(
            (normal.from, normal.to, normal.color),
            (-14.0, 65504f64.log2(), NORMAL)
        );
        let over = named("overflow");
        assert_eq!((over.from, over.color), (65504f64.log2(), OVERFLOW));
        for f in [FP16, BF16, FP8_E5M2] {
            let z = format_zones(f);
            assert_eq!(z[0].to, f.min_subnormal().log2() - 1.0, "{f}");
            assert_eq!(z[0].color, UNDERFLOW, "{f}");
            assert_eq!(z[3].from, f.max().log2(), "{f}");
            assert_eq!(z[3].color, OVERFLOW, "{f}");
            assert!(z[0].from < z[0].to && z[3].from < z[3].to, "{f}");
            for w in z.windows(2) {
                assert_eq!(w[0].to, w[1].from, "{f}");
            }
        }
    }
}
