//! The grid report's figures: the final metric and loss against the x key, or their distribution
//! over seeds when nothing but the series varies.

use crate::report::charts::{
    Axis, Band, Corner, DotChart, DotRow, Line, LineChart, Stroke, run_color,
};
use crate::report::html::{Chart, Figure};
use crate::report::section::Section;
use crate::run::grid::LOSS_SCALE;
use crate::stats::seeds::MeanCi;

use super::*;

/// The colour of the window band.
const WINDOW_COLOR: plotters::style::RGBColor = plotters::style::RGBColor(110, 110, 110);

impl GridReport {
    pub(super) fn charts(&self) -> Vec<Figure> {
        let Some(x_key) = &self.x_key else {
            return vec![
                self.distribution("grid-metric", false),
                self.distribution("grid-loss", true),
            ];
        };
        let powers = self.cells.iter().all(|c| {
            let t = c.x.trim_start();
            t.starts_with("2^") || t.starts_with("2**")
        });
        let x_axis = if x_key == LOSS_SCALE || powers {
            Axis::Log2
        } else {
            Axis::Linear
        };
        let x_desc = if x_key == LOSS_SCALE {
            "loss scale (log2 axis)".to_string()
        } else {
            format!("{x_key}{}", if powers { " (log2 axis)" } else { "" })
        };
        let window = self.window.as_ref().and_then(|w| {
            let (lo, hi) = (w.window.min_log2_scale?, w.window.max_log2_scale?);
            (lo <= hi).then_some((lo, hi, w.format.clone()))
        });
        let xs: Vec<f64> = self.cells.iter().filter_map(|c| number(&c.x)).collect();
        let (x_min, x_max) = xs
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let chart = |id: &str, what: &str, pick: &dyn Fn(&Cell) -> Option<MeanCi>| {
            let mut lines = Vec::new();
            let mut bands = Vec::new();
            let (mut y0, mut y1) = (f64::MAX, f64::MIN);
            for (i, s) in self.series.iter().enumerate() {
                let mut points = Vec::new();
                let mut band = Vec::new();
                let mut reference = false;
                for c in self.cells.iter().filter(|c| &c.series == s) {
                    let (Some(x), Some(m)) = (number(&c.x), pick(c)) else {
                        continue;
                    };
                    // A cell standing for every value: a reference line across the grid.
                    let xs = if c.inert { vec![x_min, x_max] } else { vec![x] };
                    reference |= c.inert;
                    for x in xs {
                        points.push((x, m.mean));
                        if m.low.is_finite() {
                            band.push((x, m.low, m.high));
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
                        format!("{s} (mean; trained once, any {x_key})")
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
            let positive = y0 > 0.0;
            let axis = if what == "loss" && positive {
                Axis::Log10
            } else {
                Axis::Linear
            };
            let mut caption = format!(
                "Final {} of each series against {x_key}: the mean over seeds, with its 95% confidence interval shaded.",
                if what == "loss" {
                    "training loss"
                } else {
                    &self.metric
                }
            );
            let once = self.inert_series();
            if !once.is_empty() {
                caption += &format!(
                    " Dashed: {} (trained once: {x_key} cannot change {} training).",
                    crate::text::and_list(&once),
                    if once.len() == 1 { "its" } else { "their" }
                );
            }
            if let (Some((lo, hi, format)), true) = (&window, y0 <= y1) {
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
            if let (Some(k), true) = (predicted, y0 <= y1) {
                let x = crate::format::pow2(k);
                if (x_min..=x_max).contains(&x) {
                    lines.push(Line {
                        name: format!("predicted: matches fp32 from 2^{k}"),
                        color: WINDOW_COLOR,
                        points: vec![(x, y0), (x, y1)],
                        stroke: Stroke::Dashed,
                    });
                    caption += &format!(
                        " Dashed grey: the scale from which training is predicted to match fp32, from the fp32 runs' weight gradients (2^{k})."
                    );
                }
            }
            Figure {
                id: id.into(),
                section: Section::GridFigures,
                caption,
                chart: Chart::Lines(LineChart {
                    title: format!(
                        "{} against {x_key}",
                        if what == "loss" {
                            "final training loss"
                        } else {
                            &self.metric
                        }
                    ),
                    x_desc: x_desc.clone(),
                    x_axis,
                    y_desc: if what == "loss" {
                        "final training loss (mean over seeds)".into()
                    } else {
                        format!("{} (mean over seeds)", self.metric)
                    },
                    axis,
                    lines,
                    bands,
                    marks: Vec::new(),
                    legend: if what == "loss" {
                        Corner::UpperRight
                    } else {
                        Corner::LowerRight
                    },
                }),
            }
        };
        vec![
            chart("grid-metric", "metric", &|c| c.metric),
            chart("grid-loss", "loss", &|c| c.final_loss),
        ]
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
