//! The grid report's figures: the final metric and loss against the x key, or their distribution
//! over seeds when nothing but the series varies.

use crate::report::charts::{
    Axis, Band, Corner, DotChart, DotRow, Line, LineChart, Stroke, run_color,
};
use crate::report::html::{Chart, Figure};
use crate::report::section::Section;
use crate::run::grid::LOSS_SCALE;

use super::*;

/// The colour of the window band.
const WINDOW_COLOR: plotters::style::RGBColor = plotters::style::RGBColor(110, 110, 110);

/// The x axis of a grid's figures against its varied key.
struct XAxis<'a> {
    /// The key.
    key: &'a str,
    /// Its description under the axis.
    desc: String,
    /// Linear, or log2 for loss scales and powers of two.
    axis: Axis,
    /// The smallest and largest x of the grid.
    range: (f64, f64),
    /// Analyze's window from the fp32 runs, when it is not empty: `(lo, hi, format)`.
    window: Option<(i32, i32, String)>,
}

impl GridReport {
    /// The grid's figures: the final metric and loss against the x key, or their distribution
    /// over seeds when nothing but the series varies.
    pub(super) fn charts(&self) -> Vec<Figure> {
        let Some(x_key) = &self.x_key else {
            return vec![
                self.distribution("grid-metric", false),
                self.distribution("grid-loss", true),
            ];
        };
        let x = self.x_axis(x_key);
        vec![
            self.against_x(&x, "grid-metric", false),
            self.against_x(&x, "grid-loss", true),
        ]
    }

    fn x_axis<'a>(&self, key: &'a str) -> XAxis<'a> {
        let powers = self.cells.iter().all(|c| {
            let t = c.x.trim_start();
            t.starts_with("2^") || t.starts_with("2**")
        });
        let axis = if key == LOSS_SCALE || powers {
            Axis::Log2
        } else {
            Axis::Linear
        };
        let desc = if key == LOSS_SCALE {
            "loss scale (log2 axis)".to_string()
        } else {
            format!("{key}{}", if powers { " (log2 axis)" } else { "" })
        };
        let window = self.window.as_ref().and_then(|w| {
            let (lo, hi) = (w.window.min_log2_scale?, w.window.max_log2_scale?);
            (lo <= hi).then_some((lo, hi, w.format.clone()))
        });
        let xs: Vec<f64> = self.cells.iter().filter_map(|c| number(&c.x)).collect();
        let range = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        XAxis {
            key,
            desc,
            axis,
            range,
            window,
        }
    }

    /// Each series' mean (or, with `loss`, its final loss) against x, with its 95% interval as
    /// a band; and the range of y they cover.
    fn series_curves(&self, x: &XAxis<'_>, loss: bool) -> (Vec<Line>, Vec<Band>, (f64, f64)) {
        let pick = |c: &Cell| if loss { c.final_loss } else { c.metric };
        let (x_min, x_max) = x.range;
        let mut lines = Vec::new();
        let mut bands = Vec::new();
        let (mut y0, mut y1) = (f64::MAX, f64::MIN);
        for (i, s) in self.series.iter().enumerate() {
            let mut points = Vec::new();
            let mut band = Vec::new();
            let mut reference = false;
            for c in self.cells.iter().filter(|c| &c.series == s) {
                let (Some(at), Some(m)) = (number(&c.x), pick(c)) else {
                    continue;
                };
                // A cell standing for every value: a reference line across the grid.
                let xs = if c.inert {
                    vec![x_min, x_max]
                } else {
                    vec![at]
                };
                reference |= c.inert;
                for at in xs {
                    points.push((at, m.mean));
                    if m.low.is_finite() {
                        band.push((at, m.low, m.high));
                    }
                }
                y0 = y0.min(m.mean);
                y1 = y1.max(m.mean);
                if m.low.is_finite() {
                    y0 = y0.min(m.low);
                    y1 = y1.max(m.high);
                }
            }
            lines.push(Line {
                name: if reference {
                    format!("{s} (mean; trained once, any {})", x.key)
                } else {
                    format!("{s} (mean)")
                },
                color: run_color(i),
                points,
                stroke: Stroke::dashed_if(reference),
            });
            if !band.is_empty() {
                bands.push(Band {
                    name: format!("{s} (95% CI)"),
                    color: run_color(i),
                    points: band,
                });
            }
        }
        (lines, bands, (y0, y1))
    }

    /// The final metric (or, with `loss`, the final training loss) of each series against the
    /// x key, with analyze's window and the predicted edge drawn over it.
    fn against_x(&self, x: &XAxis<'_>, id: &str, loss: bool) -> Figure {
        let (mut lines, mut bands, (y0, y1)) = self.series_curves(x, loss);
        let what = if loss {
            "training loss"
        } else {
            self.metric.as_str()
        };
        let mut caption = format!(
            "Final {what} of each series against {}: the mean over seeds, with its 95% confidence interval shaded.",
            x.key
        );
        let once = self.inert_series();
        if !once.is_empty() {
            caption += &format!(
                " Dashed: {} (trained once: {} cannot change {} training).",
                crate::text::and_list(&once),
                x.key,
                if once.len() == 1 { "its" } else { "their" }
            );
        }
        if y0 <= y1 {
            caption += &self.overlays(x, (y0, y1), &mut lines, &mut bands);
        }
        let axis = if loss && y0 > 0.0 {
            Axis::Log10
        } else {
            Axis::Linear
        };
        let title = if loss {
            "final training loss"
        } else {
            &self.metric
        };
        Figure {
            id: id.into(),
            section: Section::GridFigures,
            caption,
            chart: Chart::Lines(LineChart {
                title: format!("{title} against {}", x.key),
                x_desc: x.desc.clone(),
                x_axis: x.axis,
                y_desc: format!("{title} (mean over seeds)"),
                axis,
                lines,
                bands,
                marks: Vec::new(),
                legend: if loss {
                    Corner::UpperRight
                } else {
                    Corner::LowerRight
                },
            }),
        }
    }

    /// Analyze's window (a grey band under the curves) and the predicted edge (a dashed grey
    /// line) over the y range `ys`, clipped to the grid; returns what the caption says of them.
    fn overlays(
        &self,
        x: &XAxis<'_>,
        (y0, y1): (f64, f64),
        lines: &mut Vec<Line>,
        bands: &mut Vec<Band>,
    ) -> String {
        let (x_min, x_max) = x.range;
        let mut caption = String::new();
        if let Some((lo, hi, format)) = &x.window {
            let (a, b) = (
                crate::format::pow2(*lo).max(x_min),
                crate::format::pow2(*hi).min(x_max),
            );
            if a <= b {
                bands.insert(
                    0,
                    Band {
                        name: format!(
                            "analyze's window (fp32 gradients, {format}): 2^{lo}..2^{hi}"
                        ),
                        color: WINDOW_COLOR,
                        points: vec![(a, y0, y1), (b, y0, y1)],
                    },
                );
            }
            caption += &format!(
                " Grey: the loss-scale window that analyze computes from the fp32 runs' captured gradients (2^{lo}..2^{hi} for {format}, clipped to the grid)."
            );
        }
        let predicted = self
            .window
            .as_ref()
            .and_then(|w| w.predicted_min_log2_scale);
        if let Some(k) = predicted {
            let at = crate::format::pow2(k);
            if (x_min..=x_max).contains(&at) {
                lines.push(Line {
                    name: format!("predicted: matches fp32 from 2^{k}"),
                    color: WINDOW_COLOR,
                    points: vec![(at, y0), (at, y1)],
                    stroke: Stroke::Dashed,
                });
                caption += &format!(
                    " Dashed grey: the scale from which training is predicted to match fp32, from the fp32 runs' weight gradients (2^{k})."
                );
            }
        }
        caption
    }

    /// For a grid that varies nothing but the series: the final metric (or, with `loss`, the
    /// final training loss) of each series as a distribution over seeds.
    pub(super) fn distribution(&self, id: &str, loss: bool) -> Figure {
        // The axis names the quantity; the caption starts with "Final".
        let (what, caption) = if loss {
            ("final training loss", "Final training loss".to_string())
        } else {
            (self.metric.as_str(), format!("Final {}", self.metric))
        };
        let rows: Vec<DotRow> = self
            .series
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let c = self.cells.iter().find(|c| &c.series == s)?;
                let (values, m) = if loss {
                    (c.loss_values.clone(), c.final_loss)
                } else {
                    (c.metric_values.clone(), c.metric)
                };
                Some(DotRow {
                    name: s.clone(),
                    color: run_color(i),
                    values,
                    mean: m.map(|m| (m.mean, m.low, m.high)),
                })
            })
            .collect();
        // A log axis where the values span more than a decade.
        let (lo, hi) = rows
            .iter()
            .flat_map(|r| &r.values)
            .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let positive = lo > 0.0 && hi > 10.0 * lo;
        Figure {
            id: id.into(),
            section: Section::GridFigures,
            caption: format!(
                "{caption} of each series over {} seeds: one dot per run (seeds {} to {}, bottom to top within a row), the mean (black tick) and its 95% confidence interval (bar; Student t).",
                self.seeds,
                self.base_seed,
                self.base_seed + self.seeds.max(1) - 1
            ),
            chart: Chart::Dots(DotChart {
                title: format!("{what} per series, over seeds"),
                x_desc: format!(
                    "{what}{}",
                    if loss && positive {
                        " (log10 axis)"
                    } else {
                        ""
                    }
                ),
                axis: if loss && positive {
                    Axis::Log10
                } else {
                    Axis::Linear
                },
                rows,
            }),
        }
    }
}
