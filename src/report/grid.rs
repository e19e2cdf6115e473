//! The report of a grid directory (`mixprec grid`): the final metric and loss of its runs
//! against the varied key, per series (the other varied values, such as the recipe), as a mean
//! with its 95% Student t interval over seeds, and Welch's t-test of each series against the
//! `fp32` series at the same value; for a loss-scale grid, the loss-scale window that `analyze`
//! computes from the fp32 runs' captured gradients, drawn over the curves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maud::{Markup, html};
use serde::Serialize;

use super::charts::run_color;
use super::html::{Figure, css, document, figures_of, fold, section, section_headed, write_report};
use super::runs::{ReportOptions, unscaled_window};
use super::section::Section;
use crate::Result;
use crate::format::{FP16, FP32, FloatFormat};
use crate::recipe::Class;
use crate::run::grid::{GRID, GridPlan, LOSS_SCALE, PlannedRun as GridRun, value_name};
use crate::run::{RunDir, Summary};
use crate::scaling::scaler::LossScaling;
use crate::scaling::window::{step_rule, unscaled_predicted};
use crate::stats::recommend::StepRule;
use crate::stats::seeds::{MeanCi, Welch, welch};
use crate::stats::{Histogram, Recommendation};
use crate::text::{Signed, four_digits, p_value};

mod figures;
mod findings;

/// The `schema` of a grid page's `report.json` (its keys: docs/src/report.md).
pub const SCHEMA: &str = "mixprec-report-grid/1";

/// The confidence level of every interval.
pub const LEVEL: f64 = 0.95;
/// The significance level of the findings.
pub const ALPHA: f64 = 0.05;
/// The key whose `fp32` value is the baseline.
const RECIPE: &str = "recipe";

/// Whether `dir` is a grid directory (it holds `grid.json`).
#[must_use]
pub fn is_grid(dir: &Path) -> bool {
    dir.join(GRID).is_file()
}

/// One value of the x key in one series: its runs over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The series (the other varied values).
    pub series: String,
    /// The x value as written (`2^16`); empty when nothing but the series varies.
    pub x: String,
    /// The recipe names the runs had (`fp16-static` for `fp16-master` with a scale).
    pub recipes: Vec<String>,
    /// Whether the runs here stand for every value of the x key (its value cannot change their
    /// training, [`crate::run::grid::PlannedRun::inert`]): trained once, drawn as a reference line.
    pub inert: bool,
    /// Runs of the grid here.
    pub runs: usize,
    /// Of which finished.
    pub finished: usize,
    /// Of which diverged.
    pub diverged: usize,
    /// The final metric of each finished run, in seed order.
    pub metric_values: Vec<f64>,
    /// The final metric, over the finished runs.
    pub metric: Option<MeanCi>,
    /// Welch's test of the metric against the fp32 series here.
    pub metric_vs_fp32: Option<Welch>,
    /// The final loss of each finished run whose loss is finite, in seed order.
    pub loss_values: Vec<f64>,
    /// The final loss, over the finished runs whose loss is finite.
    pub final_loss: Option<MeanCi>,
    /// Welch's test of the final loss against the fp32 series here.
    pub loss_vs_fp32: Option<Welch>,
}

/// The loss-scale window from the fp32 runs' captured gradients.
#[derive(Clone, Debug, Serialize)]
pub struct GridWindow {
    /// The format the gradients were judged against.
    pub format: String,
    /// The loss scale of the fp32 runs whose captures were pooled (the one nearest 2^0).
    pub loss_scale: f64,
    /// Runs pooled (seeds).
    pub runs: usize,
    /// Capture steps pooled.
    pub captures: usize,
    /// The window, in log2 of the scale.
    pub window: Recommendation,
    /// The smallest `k` from which training is predicted to match FP32, from the same runs'
    /// weight gradients ([`crate::stats::recommend::predicted_min_log2_scale`]).
    pub predicted_min_log2_scale: Option<i32>,
    /// The optimizer's rule it was predicted under (SGD's when every run pooled is SGD).
    pub step_rule: StepRule,
}

/// Where a series' re-training matched FP32: the lower edge of its longest run of consecutive
/// loss scales at which the mean metric is within [`MATCH_TOLERANCE`] of the fp32 series' and
/// Welch's test does not tell them apart (p >= [`ALPHA`]).
#[derive(Clone, Debug, Serialize)]
pub struct SeriesEdge {
    /// The series.
    pub series: String,
    /// The lowest `k` of the matching run (`None`: no scale matched).
    pub matches_from_log2_scale: Option<i32>,
    /// The highest.
    pub matches_to_log2_scale: Option<i32>,
}

/// How far a mean metric may be from fp32's and still match it (one point of accuracy).
pub const MATCH_TOLERANCE: f64 = 0.01;

/// The report of a grid directory.
#[derive(Clone, Debug, Serialize)]
pub struct GridReport {
    /// The grid directory.
    pub dir: String,
    /// The grid (`grid.json`).
    pub grid: serde_json::Value,
    /// Runs in the grid.
    pub runs: usize,
    /// Runs not finished (killed, failed, still running or not run yet), by directory name.
    pub unfinished: Vec<String>,
    /// The final metric's name (`test_accuracy`, `modes_covered`).
    pub metric: String,
    /// The key on the x axis, if any.
    pub x_key: Option<String>,
    /// The series, in grid order.
    pub series: Vec<String>,
    /// One per series and x value, in grid order.
    pub cells: Vec<Cell>,
    /// For a loss-scale grid with fp32 runs: their window.
    pub window: Option<GridWindow>,
    /// For a loss-scale grid: where each series compared with fp32 matched it.
    pub edges: Vec<SeriesEdge>,
    /// The findings in words.
    pub findings: Vec<String>,
    /// The ids of the figures.
    pub figures: Vec<String>,
    #[serde(skip)]
    vary: Vec<crate::run::grid::Vary>,
    #[serde(skip)]
    seeds: u64,
    #[serde(skip)]
    base_seed: u64,
    #[serde(skip)]
    figure_data: Vec<Figure>,
}

/// A finished run's summary, or none.
fn summary(dir: &Path, run: &GridRun) -> Option<Summary> {
    RunDir::open(&run.dir(dir))
        .ok()
        .filter(RunDir::is_complete)
        .and_then(|d| d.summary)
}

/// A value written as `2^k` or a plain number.
fn number(text: &str) -> Option<f64> {
    let t = text.trim();
    let x = if t.starts_with("2^") || t.starts_with("2**") {
        crate::format::pow2(crate::format::parse_log2_scale("x", t, 1023).ok()?)
    } else {
        t.parse().ok()?
    };
    x.is_finite().then_some(x)
}

impl GridReport {
    /// Reads the grid directory `dir` (finished runs only; the others are listed).
    ///
    /// # Errors
    /// A missing or malformed `grid.json`, or a capture log of an fp32 run that cannot be read.
    pub fn read(dir: &Path, plan: &GridPlan, options: &ReportOptions) -> Result<GridReport> {
        let runs = &plan.runs;
        let summaries: Vec<Option<Summary>> = runs.iter().map(|r| summary(dir, r)).collect();
        let metric = summaries
            .iter()
            .flatten()
            .map(|s| s.eval_metric.name.clone())
            .next()
            .unwrap_or_else(|| "metric".into());
        // A key given one value varies nothing: it is neither the x axis nor part of a name.
        let varied: Vec<&_> = plan.vary.iter().filter(|v| v.values.len() > 1).collect();
        let x_key = varied
            .iter()
            .find(|v| v.key == LOSS_SCALE)
            .or_else(|| {
                varied
                    .iter()
                    .find(|v| v.key != RECIPE && v.values.iter().all(|x| number(x).is_some()))
            })
            .map(|v| v.key.clone());
        let series_of = |run: &GridRun| -> String {
            let others: Vec<&(String, String)> = run
                .values
                .iter()
                .filter(|(k, _)| Some(k) != x_key.as_ref() && varied.iter().any(|v| &v.key == k))
                .collect();
            match others.as_slice() {
                [] => run.recipe.name.clone(),
                [(k, v)] if k == RECIPE => value_name(v),
                _ => others
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_name(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        };
        let x_of = |run: &GridRun| -> String {
            run.values
                .iter()
                .find(|(k, _)| Some(k) == x_key.as_ref())
                .map_or_else(String::new, |(_, v)| value_name(v))
        };
        // The fp32 twin of a run's series: the same values with recipe fp32.
        let baseline_of = |run: &GridRun| -> Option<String> {
            let recipe = run.values.iter().find(|(k, _)| k == RECIPE)?;
            (value_name(&recipe.1) != "fp32").then(|| {
                let twin = GridRun {
                    values: run
                        .values
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                if k == RECIPE {
                                    "fp32".into()
                                } else {
                                    v.clone()
                                },
                            )
                        })
                        .collect(),
                    ..run.clone()
                };
                series_of(&twin)
            })
        };
        let mut series: Vec<String> = Vec::new();
        let mut cells: Vec<Cell> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            let (s, x) = (series_of(run), x_of(run));
            if !series.contains(&s) {
                series.push(s.clone());
            }
            let at = match cells.iter().position(|c| c.series == s && c.x == x) {
                Some(at) => at,
                None => {
                    cells.push(Cell {
                        series: s,
                        inert: x_key.as_ref().is_some_and(|k| run.inert.contains(k)),
                        x,
                        recipes: Vec::new(),
                        runs: 0,
                        finished: 0,
                        diverged: 0,
                        metric_values: Vec::new(),
                        metric: None,
                        metric_vs_fp32: None,
                        loss_values: Vec::new(),
                        final_loss: None,
                        loss_vs_fp32: None,
                    });
                    members.push(Vec::new());
                    cells.len() - 1
                }
            };
            members[at].push(i);
            let cell = &mut cells[at];
            cell.runs += 1;
            if !cell.recipes.contains(&run.recipe.name) {
                cell.recipes.push(run.recipe.name.clone());
            }
        }
        let samples = |at: usize, f: &dyn Fn(&Summary) -> f64| -> Vec<f64> {
            members[at]
                .iter()
                .filter_map(|&i| summaries[i].as_ref())
                .map(f)
                .filter(|v| v.is_finite())
                .collect()
        };
        let metric_of = |s: &Summary| s.eval_metric.value;
        let loss_of = |s: &Summary| s.final_loss;
        for at in 0..cells.len() {
            let done: Vec<&Summary> = members[at]
                .iter()
                .filter_map(|&i| summaries[i].as_ref())
                .collect();
            let (m, l) = (samples(at, &metric_of), samples(at, &loss_of));
            // The fp32 twin at the same value, or the one standing for every value.
            let baseline = baseline_of(&runs[members[at][0]]).and_then(|b| {
                cells
                    .iter()
                    .position(|c| c.series == b && (c.x == cells[at].x || c.inert))
            });
            let vs = |f: &dyn Fn(&Summary) -> f64, own: &[f64]| {
                baseline.and_then(|b| welch(own, &samples(b, f), LEVEL))
            };
            let cell = Cell {
                finished: done.len(),
                diverged: done.iter().filter(|s| s.diverged).count(),
                metric: MeanCi::new(&m, LEVEL),
                metric_vs_fp32: vs(&metric_of, &m),
                final_loss: MeanCi::new(&l, LEVEL),
                loss_vs_fp32: vs(&loss_of, &l),
                metric_values: m,
                loss_values: l,
                ..cells[at].clone()
            };
            cells[at] = cell;
        }
        let unfinished = runs
            .iter()
            .zip(&summaries)
            .filter(|(_, s)| s.is_none())
            .map(|(r, _)| r.name.clone())
            .collect();
        let window = if x_key.as_deref() == Some(LOSS_SCALE) {
            fp32_window(dir, runs, &summaries, options)?
        } else {
            None
        };
        let mut report = GridReport {
            dir: dir.display().to_string(),
            runs: runs.len(),
            unfinished,
            metric,
            x_key,
            series,
            cells,
            window,
            edges: Vec::new(),
            findings: Vec::new(),
            figures: Vec::new(),
            figure_data: Vec::new(),
            grid: plan.spec.clone(),
            vary: plan.vary.clone(),
            seeds: plan.seeds,
            base_seed: plan.base_seed,
        };
        report.edges = report.edges();
        report.findings = report.findings();
        report.figure_data = report.charts();
        report.figures = report.figure_data.iter().map(|f| f.id.clone()).collect();
        Ok(report)
    }

    /// Writes `index.html`, `report.json` and `figures/*.{png,svg}` into `dir` (created if
    /// needed), each file atomically. Returns the page's path.
    ///
    /// # Errors
    /// A file there that mixprec did not write, a failed write, a chart that cannot be drawn.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        write_report(
            dir,
            &self.figure_data,
            "report.json",
            Some(SCHEMA),
            self,
            |svgs| self.html(svgs),
        )
    }

    /// The page, with the figures' SVGs by id.
    fn html(&self, svgs: &BTreeMap<String, String>) -> Markup {
        let x = self.x_key.as_deref().unwrap_or("the series");
        let title = format!(
            "mixprec grid report: {} against {x}, {} seeds",
            self.metric, self.seeds
        );
        let body = html! {
            (section(Section::GridFindings, html! {
                @if self.findings.is_empty() {
                    // Every comparison is with the fp32 series: without one, say so.
                    p { "No series of this grid is fp32, so none is compared with an fp32 baseline: \
                         each series' mean and interval are in section " (Section::GridTable.number()) "." }
                } @else {
                    ul { @for f in &self.findings { li { (f) } } }
                }
            }))
            (section(Section::GridFigures, figures_of(Section::GridFigures, &self.figure_data, svgs)))
            (section(Section::Grid, html! {
                p { (self.runs) " runs: every combination of the values below, times " (self.seeds)
                    " seeds (" (self.base_seed) " to " (self.base_seed + self.seeds - 1)
                    ")" @if self.trained_once().is_some() { ", but for the series trained once (below)" } ", each a run directory under " code { (self.dir) "/runs/" } "; the rest of the config is the base config ("
                    code { "grid.json" } ")." }
                table {
                    thead { tr { th { "key" } th { "values" } } }
                    tbody { @for v in &self.vary { tr { td { (v.key) } td { (v.values.join(", ")) } } } }
                }
                @if let Some(once) = self.trained_once() { p { (once) } }
                @if !self.unfinished.is_empty() {
                    p { (self.unfinished.len()) " runs have not finished (killed, failed, still running, or in a share not run yet) and are left out: "
                        (self.unfinished.iter().take(12).cloned().collect::<Vec<_>>().join("; "))
                        @if self.unfinished.len() > 12 { "; and " (self.unfinished.len() - 12) " more" } "." }
                }
            }))
            (section_headed(Section::GridTable, &Section::GridTable.titled(&format!("{} and final loss over seeds", self.metric)), html! {
                p { "Mean over the finished runs with its 95% confidence interval (Student t, n - 1 degrees of freedom); the difference from the fp32 series at the same value with its 95% interval and the two-sided p-value of Welch's t-test (unequal variances), each test on its own: with many rows, some p-values under 0.05 come by chance. A diverged run's loss is not finite and is left out of the loss columns." }
                (fold(self.cells.len(), self.table()))
            }))
            footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) " from the grid directory " (self.dir) ". The numbers are in report.json." } }
        };
        document(&title, body)
    }

    fn table(&self) -> Markup {
        let color = |s: &str| {
            css(run_color(
                self.series.iter().position(|x| x == s).unwrap_or(0),
            ))
        };
        html! {
            table {
                thead { tr {
                    th { "series" } @if let Some(x) = &self.x_key { th { (x) } } th { "recipe as run" }
                    th { "runs" } th { "diverged" }
                    th { (self.metric) " mean [95% CI]" } th { "difference from fp32 [95% CI]" } th { "p" }
                    th { "final loss mean [95% CI]" } th { "difference from fp32 [95% CI]" } th { "p" }
                } }
                tbody {
                    @for c in &self.cells {
                        tr {
                            td { span.swatch style=(format!("background:{}", color(&c.series))) {} (c.series) }
                            @if self.x_key.is_some() { td { @if c.inert { "any (trained at " (c.x) ")" } @else { (c.x) } } }
                            td { (c.recipes.join(", ")) }
                            td { (c.finished) @if c.finished < c.runs { " of " (c.runs) } }
                            td { (c.diverged) }
                            td { (mean_cell(c.metric)) } td { (diff_cell(c.metric_vs_fp32)) } td { (p_cell(c.metric_vs_fp32)) }
                            td { (mean_cell(c.final_loss)) } td { (diff_cell(c.loss_vs_fp32)) } td { (p_cell(c.loss_vs_fp32)) }
                        }
                    }
                }
            }
        }
    }
}

/// The window of the fp32 runs nearest loss scale 2^0, their captures pooled.
fn fp32_window(
    dir: &Path,
    runs: &[GridRun],
    summaries: &[Option<Summary>],
    options: &ReportOptions,
) -> Result<Option<GridWindow>> {
    let scale_of = |r: &GridRun| match r.recipe.loss_scaling {
        LossScaling::Static { scale } => f64::from(scale),
        LossScaling::Dynamic(d) => f64::from(d.init_scale),
        LossScaling::None => 1.0,
    };
    let fp32: Vec<&GridRun> = runs
        .iter()
        .zip(summaries)
        .filter(|(r, s)| s.is_some() && r.recipe.is_fp32())
        .map(|(r, _)| r)
        .collect();
    let Some(nearest) = fp32
        .iter()
        .map(|r| scale_of(r))
        .min_by(|a, b| a.log2().abs().total_cmp(&b.log2().abs()))
    else {
        return Ok(None);
    };
    let format: FloatFormat = options.format.unwrap_or_else(|| {
        runs.iter()
            .map(|r| r.recipe.format(Class::ActivationGrad))
            .find(|&f| f != FP32)
            .unwrap_or(FP16)
    });
    // The optimizer's rule of the runs pooled: SGD's when every one is SGD.
    let all_sgd = fp32.iter().all(|r| step_rule(&r.config) == StepRule::Sgd);
    let rule = if all_sgd {
        StepRule::Sgd
    } else {
        StepRule::Adaptive
    };
    let mut pooled = Histogram::new(0);
    let mut weights = Histogram::new(0);
    let (mut used, mut captures) = (0, 0);
    for run in fp32.into_iter().filter(|r| scale_of(r) == nearest) {
        used += 1;
        for record in RunDir::open(&run.dir(dir))?.captures()? {
            let record = record?;
            if record.loss_scale.unwrap_or(1.0) == nearest {
                let (h, w) = (record.gradients(), record.weight_gradients());
                if h.sub_bins_log2() == pooled.sub_bins_log2() {
                    pooled.merge(&h);
                    weights.merge(&w);
                    captures += 1;
                }
            }
        }
    }
    if captures == 0 {
        // Runs without captures (capture_every 0): no gradients to judge.
        return Ok(None);
    }
    Ok(Some(GridWindow {
        format: format.to_string(),
        loss_scale: nearest,
        runs: used,
        captures,
        window: unscaled_window(&pooled, nearest, format),
        predicted_min_log2_scale: unscaled_predicted(&weights, nearest, format, rule),
        step_rule: rule,
    }))
}

fn mean_cell(m: Option<MeanCi>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.low.is_finite() => format!(
            "{} [{}, {}]",
            four_digits(m.mean),
            four_digits(m.low),
            four_digits(m.high)
        ),
        Some(m) => format!("{} (n = 1)", four_digits(m.mean)),
    }
}

fn diff_cell(w: Option<Welch>) -> String {
    w.map_or_else(
        || "-".into(),
        |w| {
            format!(
                "{:+} [{}, {}]",
                Signed(w.difference),
                four_digits(w.low),
                four_digits(w.high)
            )
        },
    )
}

fn p_cell(w: Option<Welch>) -> String {
    w.map_or_else(|| "-".into(), |w| p_value(w.p_value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_cells() {
        assert_eq!(number("2^16"), Some(65536.0));
        assert_eq!(number("2**-2"), Some(0.25));
        assert_eq!(number("0.01"), Some(0.01));
        assert_eq!(number("16"), Some(16.0));
        assert_eq!(number("fp32"), None);
    }
}
