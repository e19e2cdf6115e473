//! The report of a grid directory (`mixprec grid`): the final metric and loss of its runs
//! against the varied key, per series (the other varied values, such as the recipe), as a mean
//! with its 95% Student t interval over seeds, and Welch's t-test of each series against the
//! `fp32` series at the same value; for a loss-scale grid, the loss-scale window that `analyze`
//! computes from the fp32 runs' captured gradients, drawn over the curves.

use std::path::{Path, PathBuf};

use maud::{Markup, html};
use serde::Serialize;

use super::charts::{Axis, Band, Corner, DotChart, DotRow, Line, LineChart, run_color};
use super::html::{
    Chart, Figure, css, document, figure_markup, fold, write_figures, write_json, write_page,
};
use super::runs::{ReportOptions, unscaled_window};
use crate::Result;
use crate::format::{FP16, FP32, FloatFormat};
use crate::run::Class;
use crate::run::grid::{GRID, GridPlan, LOSS_SCALE, PlannedRun as GridRun, value_name};
use crate::run::{RunDir, Summary};
use crate::scaling::scaler::LossScaling;
use crate::scaling::window::{step_rule, unscaled_predicted};
use crate::stats::recommend::StepRule;
use crate::stats::seeds::{MeanCi, Welch, welch};
use crate::stats::{Histogram, Recommendation};

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
        let mut names = vec!["index.html".to_string(), "report.json".to_string()];
        for f in &self.figure_data {
            names.push(format!("figures/{}.svg", f.id));
            names.push(format!("figures/{}.png", f.id));
        }
        super::check_outputs(dir, &names, "--out")?;
        let svgs = write_figures(dir, &self.figure_data)?;
        write_json(&dir.join("report.json"), self)?;
        let x = self.x_key.as_deref().unwrap_or("the series");
        let title = format!(
            "mixprec grid report: {} against {x}, {} seeds",
            self.metric, self.seeds
        );
        let body = html! {
            section id="findings" {
                h2 { "1. Findings" }
                @if self.findings.is_empty() {
                    // Every comparison is with the fp32 series: without one, say so.
                    p { "No series of this grid is fp32, so none is compared with an fp32 baseline: \
                         each series' mean and interval are in section 4." }
                } @else {
                    ul { @for f in &self.findings { li { (f) } } }
                }
            }
            section id="figures" {
                h2 { "2. Figures" }
                @for f in &self.figure_data {
                    (figure_markup(&f.id, svgs.get(&f.id).map_or("", String::as_str), &f.caption))
                }
            }
            section id="grid" {
                h2 { "3. The grid" }
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
            }
            section id="table" {
                h2 { "4. " (self.metric) " and final loss over seeds" }
                p { "Mean over the finished runs with its 95% confidence interval (Student t, n - 1 degrees of freedom); the difference from the fp32 series at the same value with its 95% interval and the two-sided p-value of Welch's t-test (unequal variances), each test on its own: with many rows, some p-values under 0.05 come by chance. A diverged run's loss is not finite and is left out of the loss columns." }
                (fold(self.cells.len(), self.table()))
            }
            footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) " from the grid directory " (self.dir) ". The numbers are in report.json." } }
        };
        write_page(dir, &document(&title, body))
    }

    /// The series trained once for every value of the x key.
    fn inert_series(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.cells.iter().filter(|c| c.inert) {
            if !out.contains(&c.series) {
                out.push(c.series.clone());
            }
        }
        out
    }

    /// What the runs trained once stand for, in words; `None` when there are none.
    fn trained_once(&self) -> Option<String> {
        let once = self.inert_series();
        let (x_key, cell) = (self.x_key.as_ref()?, self.cells.iter().find(|c| c.inert)?);
        let values = self
            .vary
            .iter()
            .find(|v| &v.key == x_key)
            .map_or(0, |v| v.values.len());
        Some(format!(
            "{} {} trained once per seed, at {x_key} {}, for all {values} values: {} every \
             gradient in FP32 and scales by a power of two, which is exact there (it changes only \
             exponents), so {x_key} cannot change {} training. {} drawn as a dashed reference \
             line and compared with every value.",
            crate::analysis::text::and_list(&once),
            if once.len() == 1 { "was" } else { "were" },
            cell.x,
            if once.len() == 1 {
                "the recipe stores and accumulates"
            } else {
                "each recipe stores and accumulates"
            },
            if once.len() == 1 { "its" } else { "their" },
            if once.len() == 1 { "It is" } else { "They are" },
        ))
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

    /// Each compared series' matching range, for a loss-scale grid.
    fn edges(&self) -> Vec<SeriesEdge> {
        if self.x_key.as_deref() != Some(LOSS_SCALE) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for s in &self.series {
            let mut cells: Vec<(i32, bool)> = self
                .cells
                .iter()
                .filter(|c| &c.series == s && c.metric_vs_fp32.is_some())
                .filter_map(|c| {
                    let k = number(&c.x)?.log2();
                    let w = c.metric_vs_fp32?;
                    let matches = w.difference.abs() <= MATCH_TOLERANCE && w.p_value >= ALPHA;
                    (k.fract() == 0.0).then_some((k as i32, matches))
                })
                .collect();
            if cells.is_empty() {
                continue;
            }
            cells.sort_by_key(|c| c.0);
            // The longest run of consecutive matching scales, the first of equals.
            let (mut best, mut start): (Option<(i32, i32)>, Option<i32>) = (None, None);
            for &(k, matches) in &cells {
                if matches {
                    let from = *start.get_or_insert(k);
                    let longer = best.is_none_or(|(a, b)| {
                        cells.iter().filter(|c| c.0 >= from && c.0 <= k).count()
                            > cells.iter().filter(|c| c.0 >= a && c.0 <= b).count()
                    });
                    if longer {
                        best = Some((from, k));
                    }
                } else {
                    start = None;
                }
            }
            out.push(SeriesEdge {
                series: s.clone(),
                matches_from_log2_scale: best.map(|b| b.0),
                matches_to_log2_scale: best.map(|b| b.1),
            });
        }
        out
    }

    fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unfinished.is_empty() {
            out.push(format!(
                "{} of the {} runs have not finished: the statistics use the finished ones.",
                self.unfinished.len(),
                self.runs
            ));
        }
        if self.seeds < 2 {
            out.push(
                "One seed per combination: no confidence intervals or tests (run the grid with --seeds 5)."
                    .into(),
            );
        }
        if let Some(once) = self.trained_once() {
            out.push(once);
        }
        let window = self.window.as_ref().and_then(|w| {
            let (lo, hi) = (w.window.min_log2_scale?, w.window.max_log2_scale?);
            (lo <= hi).then_some((lo, hi))
        });
        if let Some(w) = &self.window {
            out.push(match window {
                Some((lo, hi)) => format!(
                    "From the fp32 runs' captured gradients ({} runs at loss scale {}, {} capture steps pooled), analyze's loss-scale window for {} is 2^{lo}..2^{hi} (at most 0.1% of the values underflow, none overflows); it is drawn over the curves.",
                    w.runs,
                    super::html::scale_name(w.loss_scale),
                    w.captures,
                    w.format
                ),
                None => format!(
                    "The fp32 runs' captured gradients ({} capture steps) leave no loss-scale window for {}: no single scale keeps underflow within 0.1% without overflow.",
                    w.captures, w.format
                ),
            });
        }
        if let Some(w) = &self.window {
            let predicted = w.predicted_min_log2_scale;
            for e in &self.edges {
                let matched = match (e.matches_from_log2_scale, e.matches_to_log2_scale) {
                    (Some(a), Some(b)) => format!(
                        "Re-trained, {} matches fp32 (mean {} within {MATCH_TOLERANCE} of fp32's, \
                         Welch p >= {ALPHA}) from 2^{a} to 2^{b}",
                        e.series, self.metric
                    ),
                    _ => format!("Re-trained, {} matches fp32 at no scale", e.series),
                };
                let off = |k: i32, what: &str| match e.matches_from_log2_scale {
                    Some(a) if a == k => format!("{what} 2^{k}, the same scale"),
                    Some(a) => format!(
                        "{what} 2^{k}, {} binade{} {}",
                        (k - a).abs(),
                        if (k - a).abs() == 1 { "" } else { "s" },
                        if k > a { "above" } else { "below" }
                    ),
                    None => format!("{what} 2^{k}"),
                };
                let rule = match w.step_rule {
                    StepRule::Adaptive => "Adam",
                    StepRule::Sgd => "SGD",
                };
                let mut text = format!(
                    "{matched}; predicted from the fp32 runs' weight gradients ({rule}'s rule): "
                );
                text += &predicted.map_or_else(|| "no scale".to_string(), |k| off(k, "from"));
                if let Some(lo) = window.map(|(lo, _)| lo) {
                    text += &format!(
                        "; analyze's conservative window starts at {}",
                        off(lo, "").trim_start()
                    );
                }
                out.push(text + ".");
            }
        }
        for s in &self.series {
            let tested: Vec<&Cell> = self
                .cells
                .iter()
                .filter(|c| &c.series == s && c.metric_vs_fp32.is_some())
                .collect();
            if tested.is_empty() {
                continue;
            }
            let differs = |c: &&&Cell| c.metric_vs_fp32.is_some_and(|w| w.p_value < ALPHA);
            let sig: Vec<&&Cell> = tested.iter().filter(differs).collect();
            let at = |c: &Cell| {
                if c.x.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", c.x)
                }
            };
            let mut text = if let ([c], true) = (&tested[..], tested[0].x.is_empty()) {
                // Nothing but the series varies: one comparison, said with its numbers.
                let (m, w) = (c.metric, c.metric_vs_fp32);
                let (m, w) = (m.as_ref(), w.as_ref());
                format!(
                    "{s}: {} {:.4} [{:.4}, {:.4}] over {} seeds, {:+.4} [{:+.4}, {:+.4}] from fp32 (Welch p = {}): {}",
                    self.metric,
                    m.map_or(f64::NAN, |m| m.mean),
                    m.map_or(f64::NAN, |m| m.low),
                    m.map_or(f64::NAN, |m| m.high),
                    m.map_or(0, |m| m.n),
                    w.map_or(f64::NAN, |w| w.difference),
                    w.map_or(f64::NAN, |w| w.low),
                    w.map_or(f64::NAN, |w| w.high),
                    p_text(w.map_or(f64::NAN, |w| w.p_value)),
                    if sig.is_empty() {
                        "not distinguishable from fp32"
                    } else {
                        "differs from fp32"
                    }
                )
            } else if sig.is_empty() {
                format!(
                    "{s}: {} is not distinguishable from fp32's (Welch p >= {ALPHA}) at any of the {} values",
                    self.metric,
                    tested.len()
                )
            } else {
                let worst = sig
                    .iter()
                    .min_by(|a, b| {
                        let d = |c: &Cell| c.metric_vs_fp32.map_or(0.0, |w| w.difference);
                        d(a).total_cmp(&d(b))
                    })
                    .map_or_else(String::new, |c| {
                        let w = c.metric_vs_fp32.map_or(f64::NAN, |w| w.difference);
                        let m = c.metric.map_or(f64::NAN, |m| m.mean);
                        format!(
                            "; the largest drop{}: mean {m:.4}, {w:+.4} from fp32 (p = {})",
                            at(c),
                            p_text(c.metric_vs_fp32.map_or(f64::NAN, |w| w.p_value))
                        )
                    });
                format!(
                    "{s}: {} differs from fp32's (Welch p < {ALPHA}) at {} of {} values{}{worst}",
                    self.metric,
                    sig.len(),
                    tested.len(),
                    if sig.len() <= 8 {
                        format!(
                            " ({})",
                            sig.iter()
                                .map(|c| c.x.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    } else {
                        String::new()
                    }
                )
            };
            if let Some((lo, hi)) = window {
                let inside = |c: &&Cell| {
                    number(&c.x).is_some_and(|x| {
                        let k = x.log2();
                        k >= f64::from(lo) && k <= f64::from(hi)
                    })
                };
                let (n_in, sig_in) = (
                    tested.iter().filter(|c| inside(c)).count(),
                    sig.iter().filter(|c| inside(c)).count(),
                );
                text += &format!(
                    "; inside the window: {sig_in} of {n_in} scales differ, outside: {} of {}",
                    sig.len() - sig_in,
                    tested.len() - n_in
                );
            }
            out.push(text + ".");
        }
        out
    }

    fn charts(&self) -> Vec<Figure> {
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
                    dashed: reference,
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
                    crate::analysis::text::and_list(&once),
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
                        dashed: true,
                    });
                    caption += &format!(
                        " Dashed grey: the scale from which training is predicted to match fp32, from the fp32 runs' weight gradients (2^{k})."
                    );
                }
            }
            Figure {
                id: id.into(),
                section: 4,
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
}

impl GridReport {
    /// For a grid that varies nothing but the series: the final metric (or, with `loss`, the
    /// final training loss) of each series as a distribution over seeds.
    fn distribution(&self, id: &str, loss: bool) -> Figure {
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
            section: 4,
            caption: format!(
                "{caption} of each series over {} seeds: one dot per run (seeds {} to {}, top to bottom within a row), the mean (black tick) and its 95% confidence interval (bar; Student t).",
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

/// The colour of the window band.
const WINDOW_COLOR: plotters::style::RGBColor = plotters::style::RGBColor(110, 110, 110);

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
        Some(m) if m.low.is_finite() => format!("{} [{}, {}]", g4(m.mean), g4(m.low), g4(m.high)),
        Some(m) => format!("{} (n = 1)", g4(m.mean)),
    }
}

fn diff_cell(w: Option<Welch>) -> String {
    w.map_or_else(
        || "-".into(),
        |w| format!("{:+} [{}, {}]", Signed(w.difference), g4(w.low), g4(w.high)),
    )
}

fn p_cell(w: Option<Welch>) -> String {
    w.map_or_else(|| "-".into(), |w| p_text(w.p_value))
}

fn p_text(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// Four significant digits, plain between 1e-3 and 1e5.
fn g4(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if (1e-3..1e5).contains(&a) {
        let digits = (3 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.digits$}")
    } else {
        format!("{x:.3e}")
    }
}

/// A number with its sign, as [`g4`] writes it.
struct Signed(f64);

impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 0.0 {
            write!(f, "+{}", g4(self.0))
        } else {
            f.write_str(&g4(self.0))
        }
    }
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
        assert_eq!(g4(0.971_234), "0.9712");
        assert_eq!(g4(30.703_81), "30.70");
        assert_eq!(g4(1.2e-5), "1.200e-5");
        assert_eq!(p_text(0.000_176), "1.8e-4");
        assert_eq!(p_text(0.3220), "0.322");
    }
}
