//! The report of training runs: findings in words, tables and figures, assembled from
//! [`RunData`] into one self-contained HTML page (figures inline as SVG, no script, no network),
//! with every figure also as PNG and SVG and the numbers as `report.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maud::{Markup, html};
use serde::Serialize;
use serde_json::Value;

use super::charts::run_color;
use super::html::{Figure, css, document, figures_of, section, section_headed, write_report};
use super::runs::RunData;
use super::section::Section;
use crate::Result;
use crate::recipe::Class;

mod figures;
mod findings;
mod window;

use figures::figures;
pub use findings::failed_to_train;
pub(crate) use findings::{Finding, findings};
use window::window_sentence;
pub use window::{Fit, PlainWords, WindowAdvice};

/// The `schema` of a run page's `report.json` (its keys: docs/src/report.md).
pub const SCHEMA: &str = "mixprec-report-runs/1";

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
        write_report(
            dir,
            &self.figure_data,
            "report.json",
            Some(SCHEMA),
            self,
            |svgs| self.html(svgs),
        )
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
        // The curves' section is headed by what it draws: the metric only with evaluations.
        let curves_heading = if self.figure_data.iter().any(|f| f.id == "metric") {
            Section::Curves.titled("Loss, metric and loss scale")
        } else {
            Section::Curves.heading()
        };
        let figure = |s: Section| figures_of(s, &self.figure_data, svgs);
        document(
            &title,
            html! {
                (section(Section::Findings, html! {
                    ul {
                        @for f in &self.findings {
                            li { (f.text) " " a href=(format!("#{}", f.figure)) { "(figure)" } }
                        }
                    }
                }))
                (section_headed(Section::Curves, &curves_heading, figure(Section::Curves)))
                (section(Section::Runs, html! {
                    (self.runs_table())
                    @if !self.differing_config_keys.is_empty() {
                        p { "The runs differ in: " (self.differing_config_keys.join(", ")) "." }
                    }
                    (self.kept_layers())
                }))
                (section(Section::Information, html! {
                    p { "What rounding did to the gradients stored at each capture step (activation and weight gradients of every layer), and per layer the share that underflowed to zero. With an FP32 shadow, the share of each layer's FP32 gradient norm that the run lost (zero in the run, not in FP32), whatever the layer where it was lost." }
                    (self.classes_table())
                    (figure(Section::Information))
                }))
                (section(Section::Figure3, figure(Section::Figure3)))
                (section(Section::Window, html! { (self.window_text()) (figure(Section::Window)) }))
                (section(Section::Swamping, html! {
                    @if self.runs.iter().all(|r| r.updates_lost.points.is_empty()) {
                        p { "No run in this report recorded updates lost to swamping (metrics.jsonl's updates_lost; the PyTorch recorder does not count them)." }
                    }
                    (figure(Section::Swamping))
                }))
                (section(Section::Nonfinite, self.nonfinite_table()))
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
                            td { (r.summary.as_ref().map_or("?", |s| if s.diverged { "yes" } else if failed_to_train(r, &self.runs).is_some() { "no, but failed to train" } else { "no" })) }
                            td { (r.metric().map_or("?".into(), |(n, v)| format!("{n} {}", crate::text::four_digits(v)))) }
                            td { (r.summary.as_ref().map_or("?".into(), |s| format!("{:.1}", s.wall_seconds))) }
                            td { (if r.complete { "finished" } else { "UNFINISHED (killed or running)" }) }
                        }
                    }
                }
            }
        }
    }

    /// Which layers ran another recipe's formats (the recipes' `keep`), per run that has one.
    fn kept_layers(&self) -> Markup {
        html! {
            @for r in self.runs.iter().filter(|r| !r.kept.is_empty()) {
                p { (r.name) ": every layer runs " (r.recipe) " except " }
                ul {
                    @for k in &r.kept {
                        li { "'" (k.pattern) "' (" (k.recipe) "): "
                            (if k.layers.is_empty() { "no captured layer (the run captured none it matched)".to_string() } else { k.layers.join(", ") }) }
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
                    th { "run" } th { "step" } th { "tensor class" } th { "counts of rounding into" } th { "values" }
                    th { "underflow (%)" } th { "subnormal (%)" } th { "normal (%)" } th { "overflow (%)" } th { "zero before rounding (%)" } th { "inf or NaN (%)" }
                } }
                tbody {
                    @for r in &self.runs {
                        @if let Some(c) = r.captures.last() {
                            @for (class, x) in &c.classes {
                                tr {
                                    td { (r.name) } td { (c.step) } td { (class.name()) }
                                    td { (counted_label(r, *class)) }
                                    td { (x.values) }
                                    td { (crate::text::percent(x.underflow)) } td { (crate::text::percent(x.subnormal)) } td { (crate::text::percent(x.normal)) }
                                    td { (crate::text::percent(x.overflow)) } td { (crate::text::percent(x.zero)) } td { (crate::text::percent(x.nonfinite)) }
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
                p { (window_sentence(r, &self.runs)) }
            }
        }
    }

    fn nonfinite_table(&self) -> Markup {
        // From the same counts as the findings: a run whose steps held inf or NaN is named here
        // even when its writer recorded no storage site (the PyTorch recorder records none).
        let any = self.runs.iter().any(|r| !r.nonfinite.is_empty());
        let unsited: Vec<&RunData> = self
            .runs
            .iter()
            .filter(|r| r.nonfinite.is_empty() && r.overflow.count > 0)
            .collect();
        html! {
            @for r in &unsited {
                p { (overflow_without_sites(r)) }
            }
            @if any {
                table {
                    thead { tr { th { "run" } th { "first inf/NaN at (layer)" } th { "tensor" } th { "formed by" } th { "steps" } th { "first" } th { "last" } } }
                    tbody {
                        @for r in &self.runs {
                            @for (i, s) in r.nonfinite.iter().enumerate() {
                                @if i < 12 {
                                    tr { td { (r.name) } td { (s.layer) } td { (s.tensor.name()) } td { (s.op.as_deref().unwrap_or("")) } td { (s.steps) } td { (s.first) } td { (s.last) } }
                                }
                            }
                            @if r.nonfinite.len() > 12 {
                                tr { td { (r.name) } td colspan="6" { (r.nonfinite.len() - 12) " more sites (report.json lists them)" } }
                            }
                        }
                    }
                }
            } @else if unsited.is_empty() {
                p { "No inf or NaN was stored in any run." }
            }
        }
    }
}

/// The format a class's rounding counts are of, and the one it is stored in when they differ.
fn counted_label(r: &RunData, class: Class) -> String {
    let counted = r.counted_formats.get(&class).map_or("?", String::as_str);
    match r.formats.get(&class) {
        Some(stored) if stored != counted => format!("{counted} (stored in {stored})"),
        _ => counted.to_string(),
    }
}

/// The non-finite section's line for a run whose steps held inf or NaN but whose writer recorded no storage
/// site for them.
fn overflow_without_sites(r: &RunData) -> String {
    format!(
        "{}: {} steps had inf or NaN gradients ({} skipped; first at step {}); where each was first stored was not recorded (the PyTorch recorder named no site before it recorded where an inf or NaN formed).",
        r.name,
        r.overflow.count,
        r.skipped.count,
        r.overflow.steps.first().map_or("?".into(), u64::to_string)
    )
}

fn formats_cell(r: &RunData) -> String {
    Class::STORED
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
