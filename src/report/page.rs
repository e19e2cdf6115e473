//! The report of training runs: findings in words, tables and figures, assembled from
//! [`RunData`] into one self-contained HTML page (figures inline as SVG, no script, no network),
//! with every figure also as PNG and SVG and the numbers as `report.json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use maud::{DOCTYPE, Markup, PreEscaped, html};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use serde_json::Value;

use super::charts::{
    self, Axis, Band, Corner, DotChart, Heatmap, Line, LineChart, Log2Histograms, StackedShares,
    Zone, run_color,
};
use super::runs::{RunData, WINDOW_SCALES};
use crate::analysis::Analysis;
use crate::analysis::text::percent;
use crate::format::FloatFormat;
use crate::io::write_atomic;
use crate::run::Class;
use crate::stats::Histogram;
use crate::stats::recommend::{MATCH_MAX_ENERGY_LOST, MATCH_MAX_UNDERFLOW, threshold_percent};
use crate::{Error, Result};

/// A sentence of the findings, and the figure that shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The sentence, with its numbers.
    pub text: String,
    /// The id of the figure (an anchor of the page).
    pub figure: String,
}

/// A chart of the page, as plain data.
#[derive(Clone, Debug)]
pub enum Chart {
    /// Curves over steps.
    Lines(LineChart),
    /// Log2 histograms over zones.
    Histograms(Log2Histograms),
    /// A grid of shares.
    Heatmap(Heatmap),
    /// Stacked shares over capture steps.
    Stacked(StackedShares),
    /// A distribution per series: a dot per run, the mean and its interval.
    Dots(DotChart),
}

impl Chart {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> super::DrawOutcome {
        match self {
            Chart::Lines(c) => charts::lines(area, c),
            Chart::Histograms(c) => charts::log2_histograms(area, c),
            Chart::Heatmap(c) => charts::heatmap(area, c),
            Chart::Stacked(c) => charts::stacked_shares(area, c),
            Chart::Dots(c) => charts::dots(area, c),
        }
        .map_err(|e| e.to_string())
    }

    fn size(&self) -> (u32, u32) {
        match self {
            // Rows stay readable with many layers: the map grows instead.
            Chart::Heatmap(h) => (super::SIZE.0, (200 + 22 * h.rows.len() as u32).max(420)),
            Chart::Dots(d) => (super::SIZE.0, (260 + 70 * d.rows.len() as u32).max(420)),
            _ => super::SIZE,
        }
    }
}

/// A figure: its anchor, section, caption and chart.
#[derive(Clone, Debug)]
pub struct Figure {
    /// The anchor and file name (`figures/{id}.svg`, `.png`).
    pub id: String,
    /// The section it belongs to (1 to 8, see the page).
    pub section: u8,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The chart.
    pub chart: Chart,
}

/// A report of one or more runs.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The runs, in the order given.
    pub runs: Vec<RunData>,
    /// The findings, most important first.
    pub findings: Vec<Finding>,
    /// Config keys (JSON pointers) whose values differ between the runs.
    pub differing_config_keys: Vec<String>,
    /// The ids of the figures.
    pub figures: Vec<String>,
    #[serde(skip)]
    figure_data: Vec<Figure>,
}

impl Report {
    /// Assembles the report of `runs`.
    #[must_use]
    pub fn new(mut runs: Vec<RunData>) -> Report {
        unique_names(&mut runs);
        let figure_data = figures(&runs);
        let findings = findings(&runs);
        Report {
            differing_config_keys: differing_keys(&runs),
            figures: figure_data.iter().map(|f| f.id.clone()).collect(),
            figure_data,
            findings,
            runs,
        }
    }

    /// Writes `index.html`, `report.json` and `figures/*.{png,svg}` into `dir` (created if
    /// needed), each file atomically. Returns the page's path.
    ///
    /// # Errors
    /// A directory or file that cannot be written, or a chart that cannot be drawn.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let mut names = vec!["index.html".to_string(), "report.json".to_string()];
        for f in &self.figure_data {
            names.push(format!("figures/{}.svg", f.id));
            names.push(format!("figures/{}.png", f.id));
        }
        super::check_outputs(dir, &names, "--out")?;
        let svgs = write_figures(dir, &self.figure_data)?;
        write_json(&dir.join("report.json"), self)?;
        write_page(dir, &self.html(&svgs))
    }

    fn html(&self, svgs: &BTreeMap<String, String>) -> Markup {
        let title = format!(
            "mixprec report: {}",
            self.runs
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(" vs ")
        );
        let figure = |section: u8| -> Markup {
            html! {
                @for f in self.figure_data.iter().filter(|f| f.section == section) {
                    (figure_markup(&f.id, svgs.get(&f.id).map_or("", String::as_str), &f.caption))
                }
            }
        };
        document(
            &title,
            html! {
                        section id="findings" {
                            h2 { "1. Findings" }
                            ul {
                                @for f in &self.findings {
                                    li { (f.text) " " a href=(format!("#{}", f.figure)) { "(figure)" } }
                                }
                            }
                        }
                        section id="curves" {
                            h2 { "2. Loss, metric and loss scale" }
                            (figure(3))
                        }
                        section id="runs" {
                            h2 { "3. Runs" }
                            (self.runs_table())
                            @if !self.differing_config_keys.is_empty() {
                                p { "The runs differ in: " (self.differing_config_keys.join(", ")) "." }
                            }
                        }
                        section id="information" {
                            h2 { "4. Information lost and preserved" }
                            p { "What rounding did to the gradients stored at each capture step (activation and weight gradients of every layer), and per layer the share that underflowed to zero. With an FP32 shadow, the share of each layer's FP32 gradient norm that the run lost (zero in the run, not in FP32), whatever the layer where it was lost." }
                            (self.classes_table())
                            (figure(4))
                        }
                        section id="figure3" {
                            h2 { "5. Activation gradients against the format (the paper's Figure 3)" }
                            (figure(5))
                        }
                        section id="window" {
                            h2 { "6. The loss-scale window over training" }
                            (self.window_text())
                            (figure(6))
                        }
                        section id="swamping" {
                            h2 { "7. Swamping: updates lost to the master weights' precision" }
                            (figure(7))
                        }
                        section id="nonfinite" {
                            h2 { "8. Non-finite events" }
                            (self.nonfinite_table())
                        }
                        footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) " from the run directories: " (self.runs.iter().map(|r| r.dir.as_str()).collect::<Vec<_>>().join(", ")) ". The numbers are in report.json." } }
            },
        )
    }

    fn runs_table(&self) -> Markup {
        html! {
            table {
                thead { tr {
                    th { "run" } th { "recipe" } th { "formats (w / act / act grad / w grad / opt / master)" }
                    th { "loss scaling" } th { "steps" } th { "skipped" } th { "overflow steps" }
                    th { "diverged" } th { "metric" } th { "wall time (s)" } th { "status" }
                } }
                tbody {
                    @for (i, r) in self.runs.iter().enumerate() {
                        tr {
                            td { span.swatch style=(format!("background:{}", css(run_color(i)))) {} (r.name) }
                            td { (r.recipe) }
                            td { (formats_cell(r)) }
                            td { (scaling_cell(&r.config)) }
                            td { (r.steps_read) }
                            td { (r.skipped.count) }
                            td { (r.overflow.count) }
                            td { (r.summary.as_ref().map_or("?", |s| if s.diverged { "yes" } else { "no" })) }
                            td { (r.metric().map_or("?".into(), |(n, v)| format!("{n} {v:.4}"))) }
                            td { (r.summary.as_ref().map_or("?".into(), |s| format!("{:.1}", s.wall_seconds))) }
                            td { (if r.complete { "finished" } else { "UNFINISHED (killed or running)" }) }
                        }
                    }
                }
            }
        }
    }

    /// Per run and tensor class, at the last capture step: what rounding did, in percent of
    /// the values stored.
    fn classes_table(&self) -> Markup {
        html! {
            table {
                thead { tr {
                    th { "run" } th { "step" } th { "tensor class" } th { "format" } th { "values" }
                    th { "underflow (%)" } th { "subnormal (%)" } th { "normal (%)" } th { "overflow (%)" } th { "zero before rounding (%)" } th { "inf or NaN (%)" }
                } }
                tbody {
                    @for r in &self.runs {
                        @if let Some(c) = r.captures.last() {
                            @for (class, x) in &c.classes {
                                tr {
                                    td { (r.name) } td { (c.step) } td { (class.name()) }
                                    td { (r.formats.get(class).map_or("?", String::as_str)) }
                                    td { (x.values) }
                                    td { (pct_cell(x.underflow)) } td { (pct_cell(x.subnormal)) } td { (pct_cell(x.normal)) }
                                    td { (pct_cell(x.overflow)) } td { (pct_cell(x.zero)) } td { (pct_cell(x.nonfinite)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    fn window_text(&self) -> Markup {
        html! {
            @for r in &self.runs {
                p { (window_sentence(r)) }
            }
        }
    }

    fn nonfinite_table(&self) -> Markup {
        let any = self.runs.iter().any(|r| !r.nonfinite.is_empty());
        html! {
            @if any {
                table {
                    thead { tr { th { "run" } th { "first inf/NaN at (layer)" } th { "tensor" } th { "steps" } th { "first" } th { "last" } } }
                    tbody {
                        @for r in &self.runs {
                            @for (i, s) in r.nonfinite.iter().enumerate() {
                                @if i < 12 {
                                    tr { td { (r.name) } td { (s.layer) } td { (s.tensor.name()) } td { (s.steps) } td { (s.first) } td { (s.last) } }
                                }
                            }
                            @if r.nonfinite.len() > 12 {
                                tr { td { (r.name) } td colspan="5" { (r.nonfinite.len() - 12) " more sites (report.json lists them)" } }
                            }
                        }
                    }
                }
            } @else {
                p { "No inf or NaN was stored in any run." }
            }
        }
    }
}

/// Writes each figure as `dir/figures/{id}.svg` and `.png` (the directory created if needed);
/// returns the SVGs by id, to inline in the page.
///
/// # Errors
/// A directory or file that cannot be written, or a chart that cannot be drawn.
pub(crate) fn write_figures(dir: &Path, figures: &[Figure]) -> Result<BTreeMap<String, String>> {
    let figures_dir = dir.join("figures");
    std::fs::create_dir_all(&figures_dir).map_err(|source| Error::Io {
        path: figures_dir.clone(),
        source,
    })?;
    let mut svgs = BTreeMap::new();
    for f in figures {
        let size = f.chart.size();
        let svg_path = figures_dir.join(format!("{}.svg", f.id));
        let svg = super::render_svg(&svg_path, size, &|a| f.chart.draw(a))?;
        write_atomic(&svg_path, |w| w.write_all(svg.as_bytes()))?;
        let png_path = figures_dir.join(format!("{}.png", f.id));
        super::write_png(&png_path, size, &|a| f.chart.draw(a))?;
        svgs.insert(f.id.clone(), svg);
    }
    remove_stale_figures(&figures_dir, &svgs).map_err(|source| Error::Io {
        path: figures_dir.clone(),
        source,
    })?;
    Ok(svgs)
}

/// Removes the figures an earlier report wrote into `figures_dir` that this one (`current`, by
/// id) did not, so that the directory holds this report's figures only; files mixprec did not
/// write stay.
fn remove_stale_figures(
    figures_dir: &Path,
    current: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(figures_dir)? {
        let path = entry?.path();
        let figure = path.extension().is_some_and(|e| e == "png" || e == "svg");
        let id = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        if figure
            && id.is_some_and(|id| !current.contains_key(&id))
            && path.is_file()
            && super::written_by_mixprec(&path)
        {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// A page: the skeleton every report shares (title, styles, mixprec's mark), around `body`.
pub(crate) fn document(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        (PreEscaped(super::SVG_SIGNATURE))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content="mixprec";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                (body)
            }
        }
    }
}

/// A figure: its SVG inline (from a file mixprec rendered: trusted markup whose text plotters
/// escapes), the caption, links to its files.
pub(crate) fn figure_markup(id: &str, svg: &str, caption: &str) -> Markup {
    html! {
        figure id=(id) {
            (PreEscaped(svg))
            figcaption {
                (caption) " "
                a href=(format!("figures/{id}.png")) { "PNG" } " · "
                a href=(format!("figures/{id}.svg")) { "SVG" }
            }
        }
    }
}

/// `value` as pretty JSON with `"written_by": "mixprec"` first (the mark that lets a later report
/// replace it), atomically.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let bad = |e: serde_json::Error| Error::BadFile {
        path: path.to_path_buf(),
        problem: e.to_string(),
    };
    let mut object = serde_json::Map::new();
    object.insert("written_by".into(), Value::from("mixprec"));
    match serde_json::to_value(value).map_err(bad)? {
        Value::Object(fields) => object.extend(fields),
        other => {
            object.insert("value".into(), other);
        }
    }
    let json = serde_json::to_vec_pretty(&object).map_err(bad)?;
    write_atomic(path, |w| w.write_all(&json))
}

/// Writes `page` as `dir/index.html`, atomically; returns its path.
pub(crate) fn write_page(dir: &Path, page: &Markup) -> Result<PathBuf> {
    let index = dir.join("index.html");
    write_atomic(&index, |w| w.write_all(page.0.as_bytes()))?;
    Ok(index)
}

/// The page of an `analyze`: the recommendation in words, each tensor's own window (worst
/// first), and the analysis charts (histogram against the format's zones, the sweep, the
/// tensors by magnitude), written into `dir` as `index.html`, `report.json` (what `analyze
/// --json` prints) and `figures/` (the `--plots` files). Returns the page's path.
///
/// # Errors
/// A file in `dir` that mixprec did not write, a failed write, a chart that cannot be drawn.
pub fn write_analysis(dir: &Path, a: &Analysis) -> Result<PathBuf> {
    super::check_outputs(dir, &["index.html", "report.json"], "--report")?;
    let figures_dir = dir.join("figures");
    let written = super::analyze_plots(&figures_dir, &super::AnalyzePlots::new(a))?;
    write_json(&dir.join("report.json"), a)?;
    let mut figures = Vec::new();
    for path in written
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
    {
        let svg = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let id = path
            .file_stem()
            .map_or(String::new(), |s| s.to_string_lossy().into_owned());
        let caption = match id.as_str() {
            "histogram" => format!("log2 |x| of every value of every tensor against {}'s zones, as they are and scaled by the recommended loss scale.", a.format),
            "sweep" => "What each loss scale 2^k does to the values: the share that underflows, becomes subnormal, stays normal or overflows.".to_string(),
            _ => "Each tensor's values by magnitude (share per octave), with the format's edges: which tensors sit where.".to_string(),
        };
        figures.push((id, svg, caption));
    }
    let files: Vec<String> = {
        let mut f: Vec<String> = a
            .tensors
            .iter()
            .map(|t| t.file.display().to_string())
            .collect();
        f.dedup();
        f
    };
    let title = format!("mixprec analyze: {} against {}", files.join(", "), a.format);
    let body = html! {
        section id="findings" {
            h2 { "1. Recommendation" }
            p { (a.explanation) }
            @if let Some(r) = &a.recommendation {
                @if !r.excluded_tensors.is_empty() {
                    p { "Tensors whose own window excludes the recommended scale: " (r.excluded_tensors.join(", ")) "." }
                }
            }
        }
        section id="tensors" {
            h2 { "2. Each tensor's own window (worst first)" }
            table {
                thead { tr {
                    th { "tensor" } th { "file" } th { "window (log2 scale)" }
                    th { "at 2^k" } th { "underflow there (%)" } th { "excludes the recommendation" }
                } }
                tbody {
                    @for w in &a.windows {
                        tr {
                            td { (w.name) } td { (w.file) }
                            td { (match (w.window.min_log2_scale, w.window.max_log2_scale) {
                                (Some(lo), Some(hi)) if lo <= hi => format!("{lo}..{hi}"),
                                _ => "none".to_string(),
                            }) }
                            td { (w.at_log2_scale) }
                            td { (pct_cell(w.underflow_share)) }
                            td { (if w.excludes_recommended { "yes" } else { "no" }) }
                        }
                    }
                }
            }
        }
        section id="figures" {
            h2 { "3. Figures" }
            @for (id, svg, caption) in &figures {
                (figure_markup(id, svg, caption))
            }
        }
        footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) ". The numbers are in report.json (what analyze --json prints)." } }
    };
    write_page(dir, &document(&title, body))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{margin-top:2em;border-bottom:1px solid #ccc}\
table{display:block;max-width:100%;overflow-x:auto;border-collapse:collapse;font-size:0.9em;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}\
th{background:#f3f3f3}figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}\
figcaption{font-size:0.9em;color:#444}.swatch{display:inline-block;width:0.9em;height:0.9em;margin-right:0.4em;vertical-align:middle}\
li{margin:0.4em 0}";

pub(crate) fn css(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

fn formats_cell(r: &RunData) -> String {
    [
        Class::Weight,
        Class::Activation,
        Class::ActivationGrad,
        Class::WeightGrad,
        Class::OptimizerState,
        Class::Master,
    ]
    .iter()
    .map(|c| r.formats.get(c).map_or("?", String::as_str))
    .collect::<Vec<_>>()
    .join(" / ")
}

fn scaling_cell(config: &Value) -> String {
    match config.pointer("/recipe/loss_scaling") {
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| format!("{k} {}", compact(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Some(v) => compact(v),
        None => "?".into(),
    }
}

fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Makes the runs' names unique: the recipe, then the directory's name where recipes repeat.
fn unique_names(runs: &mut [RunData]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in runs.iter() {
        *seen.entry(r.recipe.clone()).or_default() += 1;
    }
    for r in runs.iter_mut() {
        if seen[&r.recipe] > 1 {
            let base = Path::new(&r.dir)
                .file_name()
                .map_or(r.dir.clone(), |n| n.to_string_lossy().into_owned());
            r.name = format!("{} ({base})", r.recipe);
        }
    }
}

/// JSON pointers of the config values that differ between runs.
fn differing_keys(runs: &[RunData]) -> Vec<String> {
    fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    flatten(&format!("{prefix}/{k}"), v, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let flat: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|r| {
            let mut m = BTreeMap::new();
            flatten("", &r.config, &mut m);
            m
        })
        .collect();
    let mut keys: Vec<&String> = flat.iter().flat_map(BTreeMap::keys).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| flat.iter().any(|m| m.get(*k) != flat[0].get(*k)))
        .map(|k| k.trim_start_matches('/').replace('/', "."))
        .collect()
}

/// A share as a percent with its digits (no unit: the column says it), small values kept.
/// The most rows a table shows unfolded: a longer one is folded (HTML `<details>`) so that it
/// does not push the page's figures and findings out of sight.
pub(crate) const UNFOLDED_ROWS: usize = 15;

/// `table` of `rows` rows, folded under a summary line when it has more than [`UNFOLDED_ROWS`].
pub(crate) fn fold(rows: usize, table: Markup) -> Markup {
    if rows <= UNFOLDED_ROWS {
        return table;
    }
    html! { details { summary { "The table (" (rows) " rows)" } (table) } }
}

/// A share as a table cell: [`percent`]'s rule, without the sign.
pub(crate) fn pct_cell(x: f64) -> String {
    percent(x)
}

/// A share in words: the terminal tables' rule ([`percent`]: under 1% with two decimals, 0 and
/// 100 only when exact).
pub(crate) fn pct(x: f64) -> String {
    format!("{}%", percent(x))
}

pub(crate) fn scale_name(s: f64) -> String {
    let k = s.log2();
    if (k - k.round()).abs() < 1e-9 {
        format!("2^{}", k.round())
    } else {
        format!("{s}")
    }
}

pub(super) fn window_name(w: &crate::stats::Recommendation) -> Option<String> {
    match (w.min_log2_scale, w.max_log2_scale) {
        (Some(lo), Some(hi)) if lo <= hi => Some(format!("2^{lo}..2^{hi}")),
        _ => None,
    }
}

/// The findings, most important first.
/// Why a run that did not diverge still failed to train, if it did: its loss grew many-fold
/// (4x or more from its first step to its last), or its metric ended far below another run's of
/// the same report (by half the metric's range or more).
pub(crate) fn failed_to_train(r: &RunData, runs: &[RunData]) -> Option<String> {
    let s = r.summary.as_ref().filter(|s| r.complete && !s.diverged)?;
    let &(first_step, first) = r.loss.points.first()?;
    let metric = &s.eval_metric;
    let best = runs
        .iter()
        .filter_map(|o| Some((&o.name, o.summary.as_ref()?)))
        .filter(|(_, o)| o.eval_metric.name == metric.name && o.eval_metric.value.is_finite())
        .max_by(|a, b| a.1.eval_metric.value.total_cmp(&b.1.eval_metric.value));
    let grew = first > 0.0 && s.final_loss.is_finite() && s.final_loss >= 4.0 * first;
    let behind = metric.name == "test_accuracy"
        && best.is_some_and(|(_, b)| b.eval_metric.value - metric.value >= 0.5);
    if !grew && !behind {
        return None;
    }
    let mut why = Vec::new();
    if grew {
        why.push(format!(
            "its loss grew from {first:.4} at step {first_step} to {:.4}",
            s.final_loss
        ));
    }
    if behind && let Some((name, b)) = best {
        why.push(format!(
            "its {} ends at {:.4} against {:.4} for {name}",
            metric.name, metric.value, b.eval_metric.value
        ));
    }
    Some(format!(
        "{} failed to train without diverging: {}.",
        r.name,
        why.join(", and ")
    ))
}

fn findings(runs: &[RunData]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut say = |text: String, figure: &str| {
        out.push(Finding {
            text,
            figure: figure.to_string(),
        });
    };
    for (i, r) in runs.iter().enumerate() {
        let n = &r.name;
        if !r.complete {
            let planned = r.config.get("steps").and_then(Value::as_u64);
            say(
                format!(
                    "{n} did not finish (killed, crashed or still running): {} steps were written{}; this report shows them.",
                    r.steps_read,
                    planned.map_or(String::new(), |p| format!(" of {p} planned"))
                ),
                "loss",
            );
        }
        if let Some(s) = r
            .summary
            .as_ref()
            .filter(|s| r.complete && s.steps != r.steps_read)
        {
            // A finished run whose metrics do not hold its steps: a file edited, cut or
            // replaced after the run; the figures show what metrics.jsonl holds.
            say(
                format!(
                    "{n}: summary.json says {} steps, but metrics.jsonl holds {}: the run directory was changed after the run; the curves show the steps it holds.",
                    s.steps, r.steps_read
                ),
                "loss",
            );
        }
        if let Some(s) = r.summary.as_ref().filter(|s| s.diverged) {
            say(
                format!(
                    "{n} diverged: final loss {}, {} of {} steps skipped, {} steps with inf or NaN gradients.",
                    if s.final_loss.is_finite() {
                        format!("{:.4}", s.final_loss)
                    } else {
                        "not finite".into()
                    },
                    s.skipped_steps,
                    s.steps,
                    s.overflow_steps
                ),
                "loss",
            );
        }
        if let Some(text) = failed_to_train(r, runs) {
            say(text, "loss");
        }
        let rounds_gradients = r
            .formats
            .get(&Class::ActivationGrad)
            .is_some_and(|f| f != "fp32");
        // Underflow: the first capture step where a gradient tensor lost 1% or more.
        let worst = r.captures.iter().find_map(|c| {
            c.gradients
                .iter()
                .filter(|(_, _, s)| s.underflow >= 0.01)
                .max_by(|a, b| a.2.underflow.total_cmp(&b.2.underflow))
                .map(|g| (c, g))
        });
        if let Some((c, (layer, class, s))) = worst {
            let mut text = format!(
                "At step {}, {} of {layer}'s {} underflowed in {} ({n}).",
                c.step,
                pct(s.underflow),
                class.name().replace('_', " ").replace("grad", "gradients"),
                r.formats.get(class).map_or("its format", String::as_str),
            );
            let shadow: Vec<_> = r
                .shadow
                .iter()
                .filter(|p| r.shadow.first().is_some_and(|f| f.step == p.step))
                .filter(|p| p.tensor == Class::WeightGrad && p.norm_lost >= 0.5)
                .collect();
            if !shadow.is_empty() {
                let least = shadow.iter().map(|p| p.norm_lost).fold(1.0, f64::min);
                // What the rounding counts said about those layers' weight gradients then.
                let counted = r
                    .captures
                    .iter()
                    .find(|c| c.step == shadow[0].step)
                    .map(|c| {
                        c.gradients
                            .iter()
                            .filter(|(l, k, _)| {
                                *k == Class::WeightGrad && shadow.iter().any(|p| p.layer == *l)
                            })
                            .map(|g| g.2.underflow)
                            .fold(0.0, f64::max)
                    });
                let _ = write!(
                    text,
                    " Against the FP32 shadow at step {}, {} lost {} of their weight gradients' norm: {}{}.",
                    shadow[0].step,
                    if shadow.len() == 1 { "one layer".to_string() } else { format!("{} layers", shadow.len()) },
                    if least >= 0.995 { "all".to_string() } else { format!("at least {}", pct(least)) },
                    shadow.iter().map(|p| p.layer.as_str()).collect::<Vec<_>>().join(", "),
                    counted.map_or(String::new(), |u| format!(
                        ", while the rounding counts there show {} underflow: the zeros came from upstream",
                        pct(u)
                    )),
                );
            }
            match window_name(&c.window) {
                Some(w) if r.formats.get(class).is_some_and(|f| f == "fp32") => {
                    let _ = write!(
                        text,
                        " Stored in {}, loss scales {w} would keep them.",
                        r.grad_format
                    );
                }
                Some(w) => {
                    let _ = write!(
                        text,
                        " Loss scales {w} would have kept all but {} of them; this run used {}.",
                        crate::stats::recommend::threshold_percent(super::runs::MAX_UNDERFLOW),
                        if c.loss_scale == 1.0 {
                            "none".into()
                        } else {
                            scale_name(c.loss_scale)
                        }
                    );
                }
                None => {
                    text.push_str(" No single loss scale keeps them all in range: see section 6.")
                }
            }
            say(text, &format!("underflow-{i}"));
        } else if !r.captures.is_empty() && rounds_gradients {
            say(
                format!(
                    "{n}: no gradient tensor lost 1% or more of its values to underflow at any capture step."
                ),
                &format!("shares-{i}"),
            );
        }
        if !r.shadow.is_empty() && rounds_gradients {
            // Where the run's (or the shadow's) gradients were not finite, nothing is compared.
            let compared: Vec<_> = r
                .shadow
                .iter()
                .filter(|p| p.relative_error.is_finite())
                .collect();
            let worst = compared.iter().map(|p| p.norm_lost).fold(0.0, f64::max);
            let steps = |points: &[&super::runs::ShadowPoint]| {
                let mut s: Vec<u64> = points.iter().map(|p| p.step).collect();
                s.dedup();
                s.len()
            };
            let all: Vec<_> = r.shadow.iter().collect();
            if compared.len() < r.shadow.len() {
                let bad: Vec<_> = r
                    .shadow
                    .iter()
                    .filter(|p| !p.relative_error.is_finite())
                    .collect();
                say(
                    format!(
                        "{n}: at {} of {} shadow steps (first at step {}) some gradient was not finite in the run or in the FP32 shadow from its weights: there is nothing to compare.",
                        steps(&bad),
                        steps(&all),
                        bad[0].step
                    ),
                    &format!("shadow-{i}"),
                );
            }
            if !compared.is_empty() && worst < 0.01 {
                say(
                    format!(
                        "{n}: against the FP32 shadow, under 1% of every layer's gradient norm was lost (largest {}{}).",
                        pct(worst),
                        if compared.len() < r.shadow.len() {
                            match steps(&compared) {
                                1 => ", at the one shadow step where both were finite".to_string(),
                                k => format!(", at the {k} shadow steps where both were finite"),
                            }
                        } else {
                            String::new()
                        }
                    ),
                    &format!("shadow-{i}"),
                );
            }
        }
        let outside = outside_window(r);
        let judged = r
            .formats
            .get(&Class::ActivationGrad)
            .is_some_and(|f| f != "fp32");
        if let (Some(first), true) = (outside.first(), judged) {
            // Against the scale predicted to train like fp32 from an fp32 run's gradients.
            let predicted = runs.iter().filter_map(|q| q.predicted_min_log2_scale).max();
            let lowest = outside
                .iter()
                .map(|c| c.loss_scale)
                .fold(f64::INFINITY, f64::min);
            let healthy = !r.summary.as_ref().is_some_and(|s| s.diverged)
                && failed_to_train(r, runs).is_none();
            let verdict = match predicted {
                Some(p) if lowest >= crate::format::pow2(p) && healthy => format!(
                    "; every one at or above 2^{p}, the scale from which training is predicted to match fp32 (from fp32's weight gradients), and the run trained: the window is conservative here"
                ),
                Some(p) if lowest < crate::format::pow2(p) => format!(
                    "; below 2^{p}, the scale from which training is predicted to match fp32, at {}",
                    scale_name(lowest)
                ),
                _ => String::new(),
            };
            say(
                format!(
                    "{n}: the loss scale was outside the window at {} of {} capture steps (first at step {}: {} against {}){verdict}.",
                    outside.len(),
                    r.captures.len(),
                    first.step,
                    scale_name(first.loss_scale),
                    window_name(&first.window).unwrap_or_default()
                ),
                "window",
            );
        }
        if r.overflow.count > 0 {
            let earliest = r.nonfinite.iter().min_by_key(|s| s.first);
            let mut site = earliest.map_or(String::new(), |s| {
                format!(
                    "; the first inf or NaN was stored at step {} in {} {}",
                    s.first,
                    s.layer,
                    s.tensor.name()
                )
            });
            if let Some(most) = r
                .nonfinite
                .first()
                .filter(|m| earliest.is_some_and(|e| e.first != m.first || e.layer != m.layer))
            {
                let _ = write!(
                    site,
                    ", and on {} steps first in {} {}",
                    most.steps,
                    most.layer,
                    most.tensor.name()
                );
            }
            say(
                format!(
                    "{n}: {} steps had inf or NaN gradients, {} were skipped{site}.",
                    r.overflow.count, r.skipped.count
                ),
                "loss-scale",
            );
        }
        let lost: Vec<f64> = r.updates_lost.points.iter().map(|p| p.1).collect();
        let mean = lost.iter().sum::<f64>() / lost.len().max(1) as f64;
        if mean >= 0.1 {
            say(
                format!(
                    "{n}: on average {} of nonzero updates changed no weight (swamping in the {}-bit-mantissa master weights).",
                    pct(mean),
                    r.master_mantissa_bits
                ),
                "updates-lost",
            );
        }
    }
    out
}

/// The capture steps whose loss scale was outside that step's window.
fn outside_window(r: &RunData) -> Vec<&super::runs::CaptureSummary> {
    r.captures
        .iter()
        .filter(|c| {
            let k = c.loss_scale.log2();
            match (c.window.min_log2_scale, c.window.max_log2_scale) {
                (Some(lo), Some(hi)) if lo <= hi => k < f64::from(lo) || k > f64::from(hi),
                _ => false,
            }
        })
        .collect()
}

/// In words: where the scaler was against the window, and GradScaler settings that keep it.
fn window_sentence(r: &RunData) -> String {
    let windows: Vec<_> = r
        .captures
        .iter()
        .filter_map(|c| Some((c.step, c.window.min_log2_scale?, c.window.max_log2_scale?)))
        .filter(|(_, lo, hi)| lo <= hi)
        .collect();
    let Some(&(first_step, lo, hi)) = windows.first() else {
        return format!(
            "{}: no capture step has a window for {} (no gradients captured, or no single scale keeps them).",
            r.name, r.grad_format
        );
    };
    let top = windows.iter().map(|w| w.2).min().unwrap_or(hi);
    let bottom = windows.iter().map(|w| w.1).max().unwrap_or(lo);
    let mut s = format!(
        "{}: in {}, the window of the unscaled gradients was 2^{lo}..2^{hi} at step {first_step}",
        r.name, r.grad_format
    );
    if windows.len() > 1 {
        let (_, l, h) = windows[windows.len() - 1];
        let _ = write!(
            s,
            " and 2^{l}..2^{h} at step {}",
            windows[windows.len() - 1].0
        );
    }
    if bottom <= top {
        let _ = write!(
            s,
            ". One scale lay in every window: 2^{bottom}..2^{top}. GradScaler(init_scale=2.0**{top}) starts inside; with growth_interval at least the run's length ({} steps) it never grows out, and a dynamic scaler that overflows halves back inside.",
            r.steps_read
        );
    } else {
        let _ = write!(
            s,
            ". No one scale lay in every window (the lowest upper edge 2^{top} is below the highest lower edge 2^{bottom}): a dynamic scaler must move; GradScaler(init_scale=2.0**{hi}) starts inside."
        );
    }
    if let Some(p) = r.predicted_min_log2_scale {
        let _ = write!(
            s,
            " From its FP32 weight gradients (every capture step pooled), training is predicted to match fp32 from 2^{p} up (at most {} of their squared norm and {} of their values underflow; mixprec's loss-scale grids confirm this rule within one binade, where the window's lower edge is the conservative one).",
            threshold_percent(MATCH_MAX_ENERGY_LOST),
            threshold_percent(MATCH_MAX_UNDERFLOW)
        );
    }
    let outside = outside_window(r);
    match outside.first() {
        Some(first) => {
            let _ = write!(
                s,
                " The run's loss scale left the window at {} of {} capture steps, first at step {} ({}).",
                outside.len(),
                r.captures.len(),
                first.step,
                scale_name(first.loss_scale)
            );
        }
        None => s.push_str(" The run's loss scale stayed inside the window at every capture step."),
    }
    let range = format!("2^{}..2^{}", WINDOW_SCALES.start(), WINDOW_SCALES.end());
    let _ = write!(s, " (Windows searched over {range}.)");
    s
}

/// log2 of the zone edges of `f`: half the min subnormal, the min normal, the max.
fn zones(f: FloatFormat) -> Vec<Zone> {
    let lost = f.min_subnormal().log2() - 1.0;
    let min_normal = f64::from(f.emin());
    let max = f.max().log2();
    vec![
        Zone {
            from: -2.0 * charts::OPEN_ZONE,
            to: lost,
            color: charts::UNDERFLOW,
            label: format!("underflow in {f} (rounds to 0)"),
        },
        Zone {
            from: lost,
            to: min_normal,
            color: charts::SUBNORMAL,
            label: "subnormal".into(),
        },
        Zone {
            from: min_normal,
            to: max,
            color: charts::NORMAL,
            label: "normal".into(),
        },
        Zone {
            from: max,
            to: 2.0 * charts::OPEN_ZONE,
            color: charts::OVERFLOW,
            label: "overflow".into(),
        },
    ]
}

fn curve(points: &[(u64, f64)]) -> Vec<(f64, f64)> {
    points.iter().map(|&(s, v)| (s as f64, v)).collect()
}

fn lines_of(runs: &[RunData], f: impl Fn(&RunData) -> Vec<(f64, f64)>) -> Vec<Line> {
    runs.iter()
        .enumerate()
        .map(|(i, r)| Line {
            name: r.name.clone(),
            color: run_color(i),
            points: f(r),
            // The fp32 baseline on top, dashed: a run that matches it does not hide it.
            dashed: r.is_fp32(),
        })
        .collect()
}

/// Every figure of the page.
#[allow(clippy::too_many_lines)] // one list of figures, read top to bottom as the page is
fn figures(runs: &[RunData]) -> Vec<Figure> {
    let mut out = Vec::new();
    let positive = runs
        .iter()
        .all(|r| r.loss.points.iter().all(|p| p.1 > 0.0 || p.1.is_nan()));
    out.push(Figure {
        id: "loss".into(),
        section: 3,
        caption: "Training loss per step (the batch's mean loss, unscaled; the discriminator's for a GAN).".into(),
        chart: Chart::Lines(LineChart {
            title: "Training loss".into(),
            x_desc: "step".into(),
            x_axis: Axis::Linear,
            y_desc: "loss (log scale)".into(),
            axis: if positive { Axis::Log10 } else { Axis::Linear },
            lines: lines_of(runs, |r| curve(&r.loss.points)),
            bands: vec![],
            marks: vec![],
            legend: Corner::UpperRight,
        }),
    });
    if runs.iter().any(|r| !r.eval.is_empty()) {
        let name = runs
            .iter()
            .find_map(|r| r.eval_name.clone())
            .unwrap_or_default();
        out.push(Figure {
            id: "metric".into(),
            section: 3,
            caption: format!("The test metric ({name}) at each evaluation step."),
            chart: Chart::Lines(LineChart {
                title: format!("Test metric: {name}"),
                x_desc: "step".into(),
                x_axis: Axis::Linear,
                y_desc: name,
                axis: Axis::Linear,
                lines: lines_of(runs, |r| curve(&r.eval)),
                bands: vec![],
                marks: vec![],
                legend: Corner::LowerRight,
            }),
        });
    }
    out.push(Figure {
        id: "loss-scale".into(),
        section: 3,
        caption: "The loss scale each step's backward pass used; crosses mark skipped steps (inf or NaN gradients under loss scaling).".into(),
        chart: Chart::Lines(LineChart {
            title: "Loss scale".into(),
            x_desc: "step".into(),
            x_axis: Axis::Linear,
            y_desc: "loss scale (log2)".into(),
            axis: Axis::Log2,
            lines: lines_of(runs, |r| curve(&r.loss_scale.points)),
            bands: vec![],
            marks: runs
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.skip_marks.is_empty())
                .map(|(i, r)| Line { name: format!("{}: skipped", r.name), color: run_color(i), points: curve(&r.skip_marks), dashed: false })
                .collect(),
            // Scales sit at the top (2^16) and the bottom (2^0): the legend goes under the data.
            legend: Corner::BelowData,
        }),
    });
    for (i, r) in runs.iter().enumerate() {
        if r.captures.is_empty() {
            continue;
        }
        let steps: Vec<u64> = r.captures.iter().map(|c| c.step).collect();
        // The outcomes of the gradients stored (activation and weight gradients pooled), as
        // shares of the values stored; the rest were zero, inf or NaN before rounding.
        let grad = |c: &super::runs::CaptureSummary| {
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
            [t[1] / n, t[2] / n, t[3] / n, t[4] / n]
        };
        let shares: Vec<[f64; 4]> = r.captures.iter().map(grad).collect();
        let outcomes = [
            ("underflow (became 0)", charts::UNDERFLOW),
            ("subnormal", charts::SUBNORMAL),
            ("normal", charts::NORMAL),
            ("overflow", charts::OVERFLOW),
        ];
        out.push(Figure {
            id: format!("shares-{i}"),
            section: 4,
            caption: format!("{}: what rounding into {} did to the activation and weight gradients stored at each capture step (all layers); the rest of the 100% were zero before rounding, or inf/NaN.", r.name, r.formats.get(&Class::ActivationGrad).map_or("?", String::as_str)),
            chart: Chart::Stacked(StackedShares {
                title: format!("{}: gradients stored, by outcome", r.name),
                steps: steps.clone(),
                layers: outcomes
                    .iter()
                    .enumerate()
                    .map(|(j, &(name, color))| (name.to_string(), color, shares.iter().map(|s| s[j]).collect()))
                    .collect(),
            }),
        });
        out.push(Figure {
            id: format!("underflow-{i}"),
            section: 4,
            caption: format!("{}: share of each layer's gradient values that underflowed to zero when stored, per capture step.", r.name),
            chart: Chart::Heatmap(layer_grid(
                format!("{}: underflow share per layer", r.name),
                "values that underflowed (%)",
                r.captures.iter().flat_map(|c| {
                    c.gradients.iter().map(|(l, class, x)| (c.step, l.as_str(), *class, x.underflow))
                }),
            )),
        });
        if !r.shadow.is_empty() {
            out.push(Figure {
                id: format!("shadow-{i}"),
                section: 4,
                caption: format!("{}: share of each gradient's FP32 squared norm lost (values zero in the run but not in the FP32 shadow step from the same weights and batch).", r.name),
                chart: Chart::Heatmap(layer_grid(
                    format!("{}: gradient norm lost against FP32", r.name),
                    "FP32 gradient norm lost (%)",
                    r.shadow.iter().map(|p| (p.step, p.layer.as_str(), p.tensor, p.norm_lost)),
                )),
            });
        }
    }
    for (i, r) in runs.iter().enumerate() {
        let Some(h) = &r.histograms else { continue };
        let s = h.loss_scale.log2();
        let at = r.captures.iter().find(|c| c.step == h.step);
        let rec = at.and_then(|c| c.window.max_log2_scale);
        let mut series = vec![(
            "unscaled gradients".to_string(),
            charts::RUN_COLORS[7],
            charts::bars(&h.activation_grads, -s),
        )];
        if h.loss_scale != 1.0 {
            series.push((
                format!(
                    "as stored: scaled by the run's {}",
                    scale_name(h.loss_scale)
                ),
                run_color(i),
                charts::bars(&h.activation_grads, 0.0),
            ));
        }
        if let Some(k) = rec {
            series.push((
                format!("scaled by the recommended 2^{k}"),
                charts::RUN_COLORS[0],
                charts::bars(&h.activation_grads, f64::from(k) - s),
            ));
        }
        out.push(Figure {
            id: format!("figure3-{i}"),
            section: 5,
            caption: format!("{}: log2 magnitudes of the activation gradients of every layer at step {}, against {}'s zones: unscaled, as the run stored them, and scaled by the largest scale that keeps the largest finite (the recommendation, as analyze makes it).", r.name, h.step, r.grad_format),
            chart: Chart::Histograms(Log2Histograms {
                title: format!("{}: activation gradients at step {} vs {}", r.name, h.step, r.grad_format),
                x_desc: "log2 |gradient|".into(),
                zones: zones(r.grad_format),
                series,
            }),
        });
        out.push(Figure {
            id: format!("figure3-layers-{i}"),
            section: 5,
            caption: format!("{}: the same, per layer, unscaled.", r.name),
            chart: Chart::Histograms(Log2Histograms {
                title: format!(
                    "{}: activation gradients per layer at step {}",
                    r.name, h.step
                ),
                x_desc: "log2 |gradient| (unscaled)".into(),
                zones: zones(r.grad_format),
                series: per_layer(&h.layers, -s),
            }),
        });
    }
    out.push(window_figure(runs));
    for (i, r) in runs.iter().enumerate() {
        let Some(h) = r.update_ratios.as_ref().filter(|h| !h.layers.is_empty()) else {
            continue;
        };
        let t = f64::from(r.master_mantissa_bits + 1);
        out.push(Figure {
            id: format!("swamping-{i}"),
            section: 7,
            caption: format!("{}: |w| / |update| per layer at step {}; an update is lost (rounds away) when the ratio exceeds about 2^{t} for master weights with {} mantissa bits.", r.name, h.step, r.master_mantissa_bits),
            chart: Chart::Histograms(Log2Histograms {
                title: format!("{}: weight-to-update ratios at step {}", r.name, h.step),
                x_desc: "log2 (|w| / |update|)".into(),
                zones: vec![
                    Zone { from: -2.0 * charts::OPEN_ZONE, to: t, color: charts::NORMAL, label: "update changes the weight".into() },
                    Zone { from: t, to: 2.0 * charts::OPEN_ZONE, color: charts::UNDERFLOW, label: format!("lost: above 2^{t}") },
                ],
                series: per_layer(&h.layers, 0.0),
            }),
        });
    }
    out.push(Figure {
        id: "updates-lost".into(),
        section: 7,
        caption: "Share of nonzero updates that changed no master weight, per step.".into(),
        chart: Chart::Lines(LineChart {
            title: "Updates lost to swamping".into(),
            x_desc: "step".into(),
            x_axis: Axis::Linear,
            y_desc: "updates lost (share of nonzero updates)".into(),
            axis: Axis::Linear,
            lines: lines_of(runs, |r| curve(&r.updates_lost.points)),
            bands: vec![],
            marks: vec![],
            legend: Corner::UpperRight,
        }),
    });
    out
}

/// A layers x steps map from `(step, layer, class, value)` points: one row per layer and class
/// and one column per step, in the order they first appear; NaN where a pair has no point.
fn layer_grid<'a>(
    title: String,
    value_desc: &str,
    points: impl Iterator<Item = (u64, &'a str, Class, f64)>,
) -> Heatmap {
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
    Heatmap {
        title,
        value_desc: value_desc.to_string(),
        rows: rows
            .iter()
            .map(|(l, c)| format!("{l} {}", c.name()))
            .collect(),
        cols,
        values,
    }
}

fn per_layer(hists: &[(String, Histogram)], shift: f64) -> Vec<charts::HistogramLine> {
    hists
        .iter()
        .enumerate()
        .map(|(i, (name, h))| (name.clone(), run_color(i), charts::bars(h, shift)))
        .collect()
}

fn window_figure(runs: &[RunData]) -> Figure {
    let mut bands = Vec::new();
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for (i, r) in runs.iter().enumerate() {
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
        if !predicted.is_empty() {
            lines.push(Line {
                name: format!("{}: predicted to match fp32 from", r.name),
                color: run_color(i),
                points: predicted,
                dashed: true,
            });
        }
        lines.push(Line {
            name: format!("{}: loss scale", r.name),
            color: run_color(i),
            points: curve(&r.loss_scale.points),
            dashed: false,
        });
        if !r.skip_marks.is_empty() {
            marks.push(Line {
                name: format!("{}: skipped", r.name),
                color: run_color(i),
                points: curve(&r.skip_marks),
                dashed: false,
            });
        }
    }
    Figure {
        id: "window".into(),
        section: 6,
        caption: format!(
            "The loss-scale window at each capture step (band: from the smallest scale that keeps 99.9% of the gradient values from underflowing to the largest that keeps the largest finite), with each run's loss scale and its skipped steps. Dashed: for a run whose weight gradients are stored in FP32, the scale from which training is predicted to match fp32 (at most {} of their squared norm and {} of their values underflow), less conservative than the band's lower edge.",
            threshold_percent(MATCH_MAX_ENERGY_LOST),
            threshold_percent(MATCH_MAX_UNDERFLOW)
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
    use crate::format::{BF16, FP8_E5M2, FP16};

    /// Pages print shares by the terminal tables' rule (issue 25): 0.121% is not 0.1% (the
    /// threshold it exceeds), 99.96% is not 100%, and 0 and 100 are printed only when exact.
    /// Tables of more than 15 rows are folded, shorter ones shown.
    #[test]
    fn long_tables_are_folded() {
        let table = html! { table { tr { td { "x" } } } };
        assert!(
            !fold(UNFOLDED_ROWS, table.clone())
                .into_string()
                .contains("<details>")
        );
        let folded = fold(UNFOLDED_ROWS + 1, table).into_string();
        assert!(
            folded.starts_with("<details><summary>The table (16 rows)</summary><table>"),
            "{folded}"
        );
    }

    #[test]
    fn shares_on_pages_follow_the_terminal_rule() {
        assert_eq!(pct(0.00121), "0.12%");
        assert_eq!(pct(0.9996), "99.96%");
        assert_eq!(pct(0.0), "0%");
        assert_eq!(pct(1.0), "100%");
        assert_eq!(pct(0.999_999_9), "99.99999%");
        assert_eq!(pct(1e-7), "1.00e-5%");
        assert_eq!(pct_cell(0.25), "25.0");
    }

    /// The run report's format zones: each label and colour goes with its edges (fp16:
    /// underflow below 2^-25, half the min subnormal; subnormal up to the min normal 2^-14;
    /// normal up to the max; overflow above), and the zones tile the axis in that order.
    #[test]
    fn zones_label_and_colour_the_right_ranges() {
        let z = zones(FP16);
        let named = |label: &str| z.iter().find(|z| z.label.starts_with(label)).unwrap();
        let under = named("underflow");
        assert_eq!(under.label, "underflow in fp16 (rounds to 0)");
        assert_eq!((under.to, under.color), (-25.0, charts::UNDERFLOW));
        let sub = named("subnormal");
        assert_eq!(
            (sub.from, sub.to, sub.color),
            (-25.0, -14.0, charts::SUBNORMAL)
        );
        let normal = named("normal");
        assert_eq!(
            (normal.from, normal.to, normal.color),
            (-14.0, 65504f64.log2(), charts::NORMAL)
        );
        let over = named("overflow");
        assert_eq!((over.from, over.color), (65504f64.log2(), charts::OVERFLOW));
        for f in [FP16, BF16, FP8_E5M2] {
            let z = zones(f);
            assert_eq!(z[0].to, f.min_subnormal().log2() - 1.0, "{f}");
            assert_eq!(z[0].color, charts::UNDERFLOW, "{f}");
            assert_eq!(z[3].from, f.max().log2(), "{f}");
            assert_eq!(z[3].color, charts::OVERFLOW, "{f}");
            assert!(z[0].from < z[0].to && z[3].from < z[3].to, "{f}");
            for w in z.windows(2) {
                assert_eq!(w[0].to, w[1].from, "{f}");
            }
        }
    }
}
