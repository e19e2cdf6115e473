//! The figures of a run page, from the runs' data: one function per figure, in a list in the
//! order of the page's sections ([`FIGURES`]).

use crate::recipe::Class;
use crate::report::charts::{
    self, Axis, Band, Corner, Heatmap, Line, LineChart, Log2Histograms, StackedShares, Stroke,
    Zone, run_color,
};
use crate::report::html::{Chart, Figure};
use crate::report::runs::{CaptureSummary, RunData, StepHistograms};
use crate::report::section::Section;
use crate::stats::Histogram;
use crate::stats::recommend::{MATCH_MAX_ENERGY_LOST, MATCH_MAX_UNDERFLOW};
use crate::text::threshold_percent;

pub(crate) fn curve(points: &[(u64, f64)]) -> Vec<(f64, f64)> {
    points.iter().map(|&(s, v)| (s as f64, v)).collect()
}

pub(crate) fn lines_of(runs: &[RunData], f: impl Fn(&RunData) -> Vec<(f64, f64)>) -> Vec<Line> {
    runs.iter()
        .enumerate()
        .map(|(i, r)| Line {
            name: r.name.clone(),
            color: run_color(i),
            points: f(r),
            // The fp32 baseline on top, dashed: a run that matches it does not hide it.
            stroke: Stroke::dashed_if(r.is_fp32()),
        })
        .collect()
}

/// A part of the page's list of figures.
enum Part {
    /// A figure of every run together, when they have something to draw.
    Runs(fn(&[RunData]) -> Option<Figure>),
    /// Figures of each run, run by run, each when the run has something to draw.
    EachRun(&'static [fn(usize, &RunData) -> Option<Figure>]),
}

/// The figures of the page, in the order of its sections, as the findings are a list of rules.
const FIGURES: [Part; 8] = [
    Part::Runs(loss),
    Part::Runs(metric),
    Part::Runs(loss_scale),
    Part::EachRun(&[gradient_outcomes, underflow_per_layer, shadow_per_layer]),
    Part::EachRun(&[figure3, figure3_per_layer]),
    Part::Runs(window),
    Part::EachRun(&[swamping]),
    Part::Runs(updates_lost),
];

/// Every figure of the page.
pub(crate) fn figures(runs: &[RunData]) -> Vec<Figure> {
    let mut out = Vec::new();
    for part in FIGURES {
        match part {
            Part::Runs(figure) => out.extend(figure(runs)),
            Part::EachRun(each) => {
                for (i, r) in runs.iter().enumerate() {
                    out.extend(each.iter().filter_map(|figure| figure(i, r)));
                }
            }
        }
    }
    out
}

/// Curves over steps, one per run, with a linear step axis and the legend where it fits.
fn over_steps(title: String, y_desc: String, axis: Axis, lines: Vec<Line>) -> LineChart {
    LineChart {
        title,
        x_desc: "step".into(),
        x_axis: Axis::Linear,
        y_desc,
        axis,
        lines,
        bands: vec![],
        marks: vec![],
        legend: Corner::Free,
    }
}

fn loss(runs: &[RunData]) -> Option<Figure> {
    let positive = runs
        .iter()
        .all(|r| r.loss.points.iter().all(|p| p.1 > 0.0 || p.1.is_nan()));
    Some(Figure {
        id: "loss".into(),
        section: Section::Curves,
        caption: "Training loss per step (the batch's mean loss, unscaled; the discriminator's for a GAN).".into(),
        chart: Chart::Lines(over_steps(
            "Training loss".into(),
            "loss (log scale)".into(),
            if positive { Axis::Log10 } else { Axis::Linear },
            lines_of(runs, |r| curve(&r.loss.points)),
        )),
    })
}

fn metric(runs: &[RunData]) -> Option<Figure> {
    if runs.iter().all(|r| r.eval.is_empty()) {
        return None;
    }
    let name = runs
        .iter()
        .find_map(|r| r.eval_name.clone())
        .unwrap_or_default();
    Some(Figure {
        id: "metric".into(),
        section: Section::Curves,
        caption: format!("The test metric ({name}) at each evaluation step."),
        chart: Chart::Lines(over_steps(
            format!("Test metric: {name}"),
            name,
            Axis::Linear,
            lines_of(runs, |r| curve(&r.eval)),
        )),
    })
}

fn loss_scale(runs: &[RunData]) -> Option<Figure> {
    let mut chart = over_steps(
        "Loss scale".into(),
        "loss scale (log2)".into(),
        Axis::Log2,
        lines_of(runs, |r| curve(&r.loss_scale.points)),
    );
    chart.marks = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.skip_marks.is_empty())
        .map(|(i, r)| Line {
            name: format!("{}: skipped", r.name),
            color: run_color(i),
            points: curve(&r.skip_marks),
            stroke: Stroke::Solid,
        })
        .collect();
    // Scales sit at the top (2^16) and the bottom (2^0): the legend goes under the data.
    chart.legend = Corner::BelowData;
    Some(Figure {
        id: "loss-scale".into(),
        section: Section::Curves,
        caption: "The loss scale each step's backward pass used; crosses mark skipped steps (inf or NaN gradients under loss scaling).".into(),
        chart: Chart::Lines(chart),
    })
}

/// The outcomes of the gradients stored at a capture (activation and weight gradients pooled),
/// as shares of the values stored: underflow, subnormal, normal, overflow, and the rest (zero,
/// inf or NaN before rounding).
fn gradient_shares(c: &CaptureSummary) -> [f64; 5] {
    let mut t = [0.0; 5];
    for class in [Class::ActivationGrad, Class::WeightGrad] {
        if let Some(x) = c.classes.get(&class) {
            let v = x.values as f64;
            for (t, share) in
                t.iter_mut()
                    .zip([1.0, x.underflow, x.subnormal, x.normal, x.overflow])
            {
                *t += share * v;
            }
        }
    }
    let n = t[0].max(1.0);
    let stored = [t[1] / n, t[2] / n, t[3] / n, t[4] / n];
    let rest = (1.0 - stored.iter().sum::<f64>()).max(0.0);
    [stored[0], stored[1], stored[2], stored[3], rest]
}

fn gradient_outcomes(i: usize, r: &RunData) -> Option<Figure> {
    if r.captures.is_empty() {
        return None;
    }
    let steps: Vec<u64> = r.captures.iter().map(|c| c.step).collect();
    let shares: Vec<[f64; 5]> = r.captures.iter().map(gradient_shares).collect();
    let outcomes = [
        ("underflow (became 0)", charts::UNDERFLOW),
        ("subnormal", charts::SUBNORMAL),
        ("normal", charts::NORMAL),
        ("overflow", charts::OVERFLOW),
        ("zero or inf/NaN before rounding", charts::LIGHT_GREY),
    ];
    Some(Figure {
        id: format!("shares-{i}"),
        section: Section::Information,
        caption: format!(
            "{}: what rounding into {} did to the activation and weight gradients stored at each capture step (all layers); in grey, the values that were zero, inf or NaN before rounding.",
            r.name,
            r.counted_formats
                .get(&Class::ActivationGrad)
                .map_or("?", String::as_str)
        ),
        chart: Chart::Stacked(StackedShares {
            title: format!("{}: gradients stored, by outcome", r.name),
            steps,
            layers: outcomes
                .iter()
                .enumerate()
                .map(|(j, &(name, color))| {
                    (
                        name.to_string(),
                        color,
                        shares.iter().map(|s| s[j]).collect(),
                    )
                })
                .collect(),
        }),
    })
}

fn underflow_per_layer(i: usize, r: &RunData) -> Option<Figure> {
    if r.captures.is_empty() {
        return None;
    }
    Some(layer_figure(
        format!("underflow-{i}"),
        format!(
            "{}: share of each layer's gradient values that underflowed to zero when stored, per capture step.",
            r.name
        ),
        format!("{}: underflow share per layer", r.name),
        "values that underflowed (%)",
        r.captures.iter().flat_map(|c| {
            c.gradients
                .iter()
                .map(|(l, class, x)| (c.step, l.as_str(), *class, x.underflow))
        }),
    ))
}

fn shadow_per_layer(i: usize, r: &RunData) -> Option<Figure> {
    if r.captures.is_empty() || r.shadow.is_empty() {
        return None;
    }
    Some(layer_figure(
        format!("shadow-{i}"),
        format!(
            "{}: share of each gradient's FP32 squared norm lost (values zero in the run but not in the FP32 shadow step from the same weights and batch).",
            r.name
        ),
        format!("{}: gradient norm lost against FP32", r.name),
        "FP32 gradient norm lost (%)",
        r.shadow
            .iter()
            .map(|p| (p.step, p.layer.as_str(), p.tensor, p.norm_lost)),
    ))
}

/// The log2 of the loss scale the chosen capture's gradients are divided by to unscale them;
/// `None` for a capture at loss scale 0 (or inf, NaN), which cannot be unscaled: only what was
/// stored is drawn.
fn unscaling(h: &StepHistograms) -> Option<f64> {
    (h.loss_scale.is_finite() && h.loss_scale > 0.0).then(|| h.loss_scale.log2())
}

/// Figure 3 of the paper from the run: its activation gradients at the chosen capture step
/// against the format's zones, unscaled, as stored and scaled by the recommended scale.
fn figure3(i: usize, r: &RunData) -> Option<Figure> {
    let h = r.histograms.as_ref()?;
    let unscalable = unscaling(h).is_none();
    let s = unscaling(h).unwrap_or(0.0);
    let at = r.captures.iter().find(|c| c.step == h.step);
    let rec = at
        .and_then(|c| c.window.max_log2_scale)
        .filter(|_| !unscalable);
    let mut series = Vec::new();
    if !unscalable {
        series.push((
            "unscaled gradients".to_string(),
            charts::RUN_COLORS[7],
            charts::bars(&h.activation_grads, -s),
        ));
    }
    if h.loss_scale != 1.0 {
        series.push((
            format!(
                "as stored: scaled by the run's {}",
                crate::text::scale_name(h.loss_scale)
            ),
            run_color(i),
            charts::bars(&h.activation_grads, 0.0),
        ));
    }
    if let Some(k) = rec {
        series.push((
            format!("scaled by the recommended 2^{k}"),
            // Blue, or orange beside a run drawn blue: two curves of one colour read as one.
            charts::RUN_COLORS[usize::from(run_color(i) == charts::RUN_COLORS[0])],
            charts::bars(&h.activation_grads, f64::from(k) - s),
        ));
    }
    Some(Figure {
        id: format!("figure3-{i}"),
        section: Section::Figure3,
        caption: format!(
            "{}: log2 magnitudes of the activation gradients of every layer at step {}, against {}'s zones: unscaled, as the run stored them, and scaled by the largest scale that keeps the largest finite (the recommendation, as analyze makes it).{}",
            r.name,
            h.step,
            r.grad_format,
            figure3_note(r, h)
        ),
        chart: Chart::Histograms(Log2Histograms {
            title: format!(
                "{}: activation gradients at step {} vs {}",
                r.name, h.step, r.grad_format
            ),
            x_desc: "log2 |gradient|".into(),
            zones: charts::format_zones(r.grad_format),
            series,
        }),
    })
}

/// Why Figure 3 shows this step, when the default passed over earlier ones; and why it is
/// empty, when it is.
fn figure3_note(r: &RunData, h: &StepHistograms) -> String {
    let mut note = String::new();
    if !h.passed_over.is_empty() {
        let steps: Vec<String> = h.passed_over.iter().map(u64::to_string).collect();
        note = format!(
            " Step {} is the first capture step with a finite nonzero activation gradient: at step{} {} every value stored was zero, inf or NaN.",
            h.step,
            if steps.len() == 1 { "" } else { "s" },
            steps.join(", ")
        );
    }
    if unscaling(h).is_none() {
        note.push_str(&format!(
            " The capture at step {} gives loss scale {}: its gradients cannot be unscaled, so they are drawn only as stored.",
            h.step, h.loss_scale
        ));
    }
    if !h.has_finite() {
        note = format!(
            " At step {} every activation gradient stored was zero, inf or NaN: there is nothing to draw{}.",
            h.step,
            if r.captures.iter().any(|c| c.finite_gradients > 0) {
                " (--step chooses another capture step)"
            } else {
                ", at any capture step"
            }
        );
    }
    note
}

fn figure3_per_layer(i: usize, r: &RunData) -> Option<Figure> {
    let h = r.histograms.as_ref()?;
    let shift = unscaling(h);
    Some(Figure {
        id: format!("figure3-layers-{i}"),
        section: Section::Figure3,
        caption: format!(
            "{}: the same, per layer, unscaled.{}",
            r.name,
            if h.has_finite() && shift.is_some() {
                ""
            } else {
                " Nothing to draw (see above)."
            }
        ),
        chart: Chart::Histograms(Log2Histograms {
            title: format!(
                "{}: activation gradients per layer at step {}",
                r.name, h.step
            ),
            x_desc: "log2 |gradient| (unscaled)".into(),
            zones: charts::format_zones(r.grad_format),
            series: shift.map_or_else(Vec::new, |s| per_layer(&h.layers, -s)),
        }),
    })
}

fn window(runs: &[RunData]) -> Option<Figure> {
    Some(window_figure(runs))
}

fn swamping(i: usize, r: &RunData) -> Option<Figure> {
    let h = r.update_ratios.as_ref().filter(|h| !h.layers.is_empty())?;
    let t = f64::from(r.master_mantissa_bits + 1);
    Some(Figure {
        id: format!("swamping-{i}"),
        section: Section::Swamping,
        caption: format!(
            "{}: |w| / |update| per layer at step {}; an update is lost (rounds away) when the ratio exceeds about 2^{t} for master weights with {} mantissa bits.",
            r.name, h.step, r.master_mantissa_bits
        ),
        chart: Chart::Histograms(Log2Histograms {
            title: format!("{}: weight-to-update ratios at step {}", r.name, h.step),
            x_desc: "log2 (|w| / |update|)".into(),
            zones: vec![
                Zone {
                    from: -2.0 * charts::OPEN_ZONE,
                    to: t,
                    color: charts::NORMAL,
                    label: "update changes the weight".into(),
                },
                Zone {
                    from: t,
                    to: 2.0 * charts::OPEN_ZONE,
                    color: charts::UNDERFLOW,
                    label: format!("lost: above 2^{t}"),
                },
            ],
            series: per_layer(&h.layers, 0.0),
        }),
    })
}

fn updates_lost(runs: &[RunData]) -> Option<Figure> {
    if runs.iter().all(|r| r.updates_lost.points.is_empty()) {
        return None;
    }
    Some(Figure {
        id: "updates-lost".into(),
        section: Section::Swamping,
        caption: "Share of nonzero updates that changed no master weight, per step.".into(),
        chart: Chart::Lines(over_steps(
            "Updates lost to swamping".into(),
            "updates lost (% of nonzero updates)".into(),
            Axis::Linear,
            lines_of(runs, |r| {
                let percent = r.updates_lost.points.iter().map(|&(s, v)| (s, 100.0 * v));
                curve(&percent.collect::<Vec<_>>())
            }),
        )),
    })
}

/// The information section's figure `id`: a layers x steps map from `(step, layer, class,
/// value)` points, one row per layer and class and one column per step, in the order they
/// first appear; NaN where a pair has no point.
fn layer_figure<'a>(
    id: String,
    caption: String,
    title: String,
    value_desc: &str,
    points: impl Iterator<Item = (u64, &'a str, Class, f64)>,
) -> Figure {
    let mut rows: Vec<(&str, Class)> = Vec::new();
    let mut cols: Vec<u64> = Vec::new();
    let mut cells: Vec<(usize, usize, f64)> = Vec::new();
    for (step, layer, class, value) in points {
        let row = rows
            .iter()
            .position(|&r| r == (layer, class))
            .unwrap_or_else(|| {
                rows.push((layer, class));
                rows.len() - 1
            });
        let col = cols.iter().position(|&c| c == step).unwrap_or_else(|| {
            cols.push(step);
            cols.len() - 1
        });
        cells.push((row, col, value));
    }
    let mut values = vec![vec![f64::NAN; cols.len()]; rows.len()];
    for (row, col, value) in cells {
        values[row][col] = value;
    }
    Figure {
        id,
        section: Section::Information,
        caption,
        chart: Chart::Heatmap(Heatmap {
            title,
            value_desc: value_desc.to_string(),
            rows: rows
                .iter()
                .map(|(l, c)| format!("{l} {}", c.name()))
                .collect(),
            cols,
            values,
        }),
    }
}

pub(crate) fn per_layer(hists: &[(String, Histogram)], shift: f64) -> Vec<charts::HistogramLine> {
    hists
        .iter()
        .enumerate()
        .map(|(i, (name, h))| (name.clone(), run_color(i), charts::bars(h, shift)))
        .collect()
}

/// Curves of several runs that coincide (the same points, stroke and words after the run's
/// name: two runs at the same loss scale or top) as one grey curve named for all of them, which
/// would otherwise hide one another.
fn merge_coinciding(curves: Vec<Line>) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for c in curves {
        let words = |l: &Line| l.name.split_once(": ").map(|(_, w)| w.to_string());
        let same = out.iter_mut().find(|o| {
            o.points == c.points
                && o.stroke == c.stroke
                && words(o).is_some()
                && words(o) == words(&c)
        });
        match same {
            Some(o) => {
                let (runs, w) = o.name.split_once(": ").unwrap_or_default();
                let run = c.name.split_once(": ").map_or("", |(r, _)| r);
                o.name = format!("{runs}, {run}: {w}");
                o.color = charts::GREY;
            }
            None => out.push(c),
        }
    }
    out
}

/// One run's part of the window figure: its window band, predicted edge, loss scale, skipped
/// steps, the top from every step where no band shows it, and the top for a rerun.
fn window_curves(
    i: usize,
    r: &RunData,
    bands: &mut Vec<Band>,
    lines: &mut Vec<Line>,
    marks: &mut Vec<Line>,
) {
    let pts: Vec<(f64, f64, f64)> = r
        .captures
        .iter()
        .filter_map(|c| {
            let (lo, hi) = (c.window.min_log2_scale?, c.window.max_log2_scale?);
            (lo <= hi).then(|| (c.step as f64, 2f64.powi(lo), 2f64.powi(hi)))
        })
        .collect();
    if !pts.is_empty() {
        bands.push(Band {
            name: format!("{}: window in {}", r.name, r.grad_format),
            color: run_color(i),
            points: pts,
        });
    }
    let predicted: Vec<(f64, f64)> = r
        .captures
        .iter()
        .filter_map(|c| Some((c.step as f64, 2f64.powi(c.predicted_min_log2_scale?))))
        .collect();
    if let Some(&(_, last)) = predicted.last() {
        lines.push(Line {
            name: format!(
                "{}: predicted to match fp32 from (2^{} at the end)",
                r.name,
                last.log2()
            ),
            color: run_color(i),
            points: predicted,
            stroke: Stroke::Dotted,
        });
    }
    lines.push(Line {
        name: format!("{}: loss scale", r.name),
        color: run_color(i),
        points: curve(&r.loss_scale.points),
        stroke: Stroke::Solid,
    });
    if !r.skip_marks.is_empty() {
        marks.push(Line {
            name: format!("{}: skipped", r.name),
            color: run_color(i),
            points: curve(&r.skip_marks),
            stroke: Stroke::Solid,
        });
    }
    // The window's top comes from every step: mark it where no capture step's band shows
    // it (a step between captures whose largest gradient sets a lower top).
    let band_top = r
        .captures
        .iter()
        .filter_map(|c| c.window.max_log2_scale)
        .min();
    if let Some((k, step)) = r.window_top
        && band_top.is_none_or(|t| k < t)
    {
        marks.push(Line {
            name: format!(
                "{}: window top from every step, 2^{k} at step {step}",
                r.name
            ),
            // Grey, so that it is not read as one of the run's skipped steps.
            color: charts::GREY,
            points: vec![(step as f64, 2f64.powi(k))],
            stroke: Stroke::Solid,
        });
    }
    // The top for a rerun, where it lies below the recorded one: a level across the run.
    let steps = r.loss_scale.points.first().zip(r.loss_scale.points.last());
    if let (Some(top), Some(((first, _), (last, _)))) = (r.window_rerun_top, steps)
        && top.margin > 0
    {
        let level = 2f64.powi(top.log2_scale);
        lines.push(Line {
            name: format!("{}: top for a rerun, 2^{}", r.name, top.log2_scale),
            color: run_color(i),
            points: vec![(*first as f64, level), (*last as f64, level)],
            stroke: Stroke::Dashed,
        });
    }
}

/// The loss-scale window over training, every run's on the same axes.
fn window_figure(runs: &[RunData]) -> Figure {
    let mut bands = Vec::new();
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        window_curves(i, r, &mut bands, &mut lines, &mut marks);
    }
    let (lines, marks) = (merge_coinciding(lines), merge_coinciding(marks));
    Figure {
        id: "window".into(),
        section: Section::Window,
        caption: format!(
            "The loss-scale window at each capture step (band: from the smallest scale that keeps 99.9% of the gradient values from underflowing to the largest that keeps the largest finite; a step whose window is empty has no band, and section {w} names it), with each run's loss scale and its skipped steps; a cross also marks a step between captures whose largest gradient gives a lower top than any capture step (the top section {w} gives comes from every step; grey). The edges are this run's; a dashed level is the top for a rerun (section {w}), whose own trajectory can reach larger gradients, where it lies below them. Dotted curve: for a run whose weight gradients are stored in FP32, the scale from which training is predicted to match fp32 (at most {} of their squared norm and {} of their values underflow), less conservative than the band's lower edge.",
            threshold_percent(MATCH_MAX_ENERGY_LOST),
            threshold_percent(MATCH_MAX_UNDERFLOW),
            w = Section::Window.number(),
        ),
        chart: Chart::Lines(LineChart {
            title: "Loss-scale window over training".into(),
            x_desc: "step".into(),
            x_axis: Axis::Linear,
            y_desc: "loss scale (log2)".into(),
            axis: Axis::Log2,
            lines,
            bands,
            marks,
            legend: Corner::BelowData,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two runs' curves that coincide become one grey curve named for both; a curve with other
    /// points, another stroke or other words stays its run's.
    #[test]
    fn coinciding_curves_are_drawn_once_for_all_their_runs() {
        let line = |name: &str, i: usize, y: f64, stroke| Line {
            name: name.into(),
            color: run_color(i),
            points: vec![(1.0, y), (9.0, y)],
            stroke,
        };
        let merged = merge_coinciding(vec![
            line("fp32: top for a rerun, 2^34", 0, 34.0, Stroke::Dashed),
            line("fp32: loss scale", 0, 1.0, Stroke::Solid),
            line("bf16: top for a rerun, 2^34", 1, 34.0, Stroke::Dashed),
            line("fp16: top for a rerun, 2^34", 2, 34.0, Stroke::Solid),
            line("fp8: top for a rerun, 2^33", 3, 33.0, Stroke::Dashed),
            line("fp16: loss scale", 2, 1.0, Stroke::Solid),
            line("fp16: predicted", 2, 1.0, Stroke::Solid),
        ]);
        let names: Vec<&str> = merged.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "fp32, bf16: top for a rerun, 2^34",
                "fp32, fp16: loss scale",
                "fp16: top for a rerun, 2^34",
                "fp8: top for a rerun, 2^33",
                "fp16: predicted",
            ]
        );
        assert_eq!(merged[0].color, charts::GREY);
        assert_eq!(merged[2].color, run_color(2));
    }
}
