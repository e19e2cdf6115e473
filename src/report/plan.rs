//! The page of a plan directory ([`crate::run::plan`]): the sensitivity of each layer (table
//! and figure), the plan, and, once validated, the three arms' loss curves and each arm's
//! metric against FP32 over seeds (mean, 95% interval, Welch's test, the verdict). The runs are
//! read as any run directory, whoever wrote them (`mixprec plan`, the PyTorch recorder).

use std::path::{Path, PathBuf};

use maud::{Markup, html};
use serde::Serialize;

use super::charts::{
    Band, Corner, DotChart, DotRow, GroupedBars, Line, LineChart, Stroke, run_color,
};
use super::grid::{ALPHA, LEVEL};
use super::html::{Chart, Figure, document, figures_of, section, section_headed, write_report};
use super::section::Section;
use crate::Result;
use crate::run::RunDir;
use crate::run::plan::{
    ARMS, PLAN, PLAN_RECIPE, Plan, SENSITIVITY, Sensitivity, VALIDATION, Validation,
    layers_in_words, read,
};
use crate::stats::seeds::{MeanCi, Welch, welch};
use crate::text::{four_digits, p_value, pct};

/// The `schema` of a plan page's `report.json` (its keys: docs/src/plan.md).
pub const SCHEMA: &str = "mixprec-report-plan/1";

/// One arm of a validation over its seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Arm {
    /// `fp32`, `all` or `plan`.
    pub arm: String,
    /// The recipe its runs ran.
    pub recipe: String,
    /// Each run's metric, in seed order.
    pub values: Vec<f64>,
    /// Their mean and 95% interval.
    pub metric: Option<MeanCi>,
    /// Welch's test against the fp32 arm (none for fp32 itself).
    pub vs_fp32: Option<Welch>,
    /// The mean loss per step over the seeds, with its 95% interval: `(step, mean, low, high)`.
    #[serde(skip)]
    pub curve: Vec<(f64, f64, f64, f64)>,
}

impl Arm {
    /// Whether the arm trains within seed noise of FP32: Welch's p at least [`ALPHA`].
    #[must_use]
    pub fn within_noise(&self) -> Option<bool> {
        self.vs_fp32.as_ref().map(|w| w.p_value >= ALPHA)
    }
}

/// The report of a plan directory.
#[derive(Clone, Debug, Serialize)]
pub struct PlanReport {
    /// The directory.
    pub dir: String,
    /// `sensitivity.json`.
    pub sensitivity: Sensitivity,
    /// `plan.json`.
    pub plan: Plan,
    /// `plan-recipe.json`, as written.
    pub plan_recipe: serde_json::Value,
    /// `validation.json`, when there is one.
    pub validation: Option<Validation>,
    /// The arms, in the order fp32, all, plan (those with runs).
    pub arms: Vec<Arm>,
}

impl PlanReport {
    /// Reads the plan directory `dir` and its validation's runs.
    ///
    /// # Errors
    /// A missing or malformed file, an unreadable run directory.
    pub fn read(dir: &Path) -> Result<PlanReport> {
        let validation: Option<Validation> = if dir.join(VALIDATION).is_file() {
            Some(read(dir, VALIDATION)?)
        } else {
            None
        };
        let mut arms = Vec::new();
        if let Some(v) = &validation {
            for name in ARMS {
                let runs: Vec<_> = v.runs.iter().filter(|r| r.arm == name).collect();
                if runs.is_empty() {
                    continue;
                }
                let mut values = Vec::new();
                let mut curves = Vec::new();
                let mut recipe = String::new();
                for r in runs {
                    let run = RunDir::open(&dir.join(&r.run))?;
                    recipe = run.recipe_name();
                    let losses: Vec<f64> = run
                        .steps()?
                        .map(|s| s.map(|s| s.loss))
                        .collect::<Result<_>>()?;
                    values.push(metric(&run, &losses, v)?);
                    curves.push(losses);
                }
                arms.push(Arm {
                    arm: name.to_string(),
                    recipe,
                    metric: MeanCi::new(&values, LEVEL),
                    values,
                    vs_fp32: None,
                    curve: mean_curve(&curves),
                });
            }
            let fp32 = arms
                .iter()
                .find(|a| a.arm == "fp32")
                .map(|a| a.values.clone());
            if let Some(fp32) = fp32 {
                for a in arms.iter_mut().filter(|a| a.arm != "fp32") {
                    a.vs_fp32 = welch(&a.values, &fp32, LEVEL);
                }
            }
        }
        Ok(PlanReport {
            dir: dir.display().to_string(),
            sensitivity: read(dir, SENSITIVITY)?,
            plan: read(dir, PLAN)?,
            plan_recipe: read(dir, PLAN_RECIPE)?,
            validation,
            arms,
        })
    }

    /// The findings in words: the plan, and each arm against FP32.
    #[must_use]
    pub fn findings(&self) -> Vec<String> {
        let mut out = vec![format!(
            "The plan casts {} of {} layers to {} ({} of the product FLOPs; gradient error {} against FP32, every layer cast: {}).",
            self.plan.cast.len(),
            self.plan.cast.len() + self.plan.keep.len(),
            self.plan.recipe,
            pct(self.plan.flops_share),
            four_digits(self.plan.grad_rel_err),
            four_digits(self.sensitivity.all.grad_rel_err)
        )];
        let metric = self
            .validation
            .as_ref()
            .map_or("loss", |v| v.metric.as_str());
        for a in &self.arms {
            let (Some(w), Some(within)) = (&a.vs_fp32, a.within_noise()) else {
                continue;
            };
            out.push(format!(
                "{} ({}): {} {} FP32's over {} seeds (difference {}, Welch p = {}).",
                a.arm,
                a.recipe,
                metric,
                if within {
                    "trains within seed noise of"
                } else {
                    "differs measurably from"
                },
                a.values.len(),
                four_digits(w.difference),
                p_value(w.p_value)
            ));
        }
        out
    }

    /// Writes the page into `out` (index.html, report.json, figures/); returns its path.
    ///
    /// # Errors
    /// A file there that mixprec did not write, a failed write.
    pub fn write(&self, out: &Path) -> Result<PathBuf> {
        let figures = self.figures();
        write_report(out, &figures, "report.json", Some(SCHEMA), self, |svgs| {
            self.page(&figures, svgs)
        })
    }

    /// The page's figures, in the order of its sections.
    fn figures(&self) -> Vec<Figure> {
        let mut figures = vec![self.sensitivity_figure()];
        if !self.arms.is_empty() {
            figures.push(self.loss_figure());
            figures.push(self.metric_figure());
        }
        figures
    }

    /// What casting each layer alone, and every layer at once, does.
    fn sensitivity_figure(&self) -> Figure {
        let s = &self.sensitivity;
        let mut groups: Vec<String> = s.layers.iter().map(|l| l.layer.clone()).collect();
        groups.push("all at once".into());
        let series = |name: &str, color: usize, f: &dyn Fn(&crate::run::plan::Harm) -> f64| {
            let mut v: Vec<f64> = s.layers.iter().map(|l| f(&l.harm)).collect();
            v.push(f(&s.all));
            (name.to_string(), run_color(color), v)
        };
        Figure {
            id: "sensitivity".into(),
            section: Section::Sensitivity,
            caption: format!(
                "Each layer cast alone to {} (every other layer in FP32), most harmful first, and every layer at once: the relative error of all the weight gradients and the relative change of the loss against FP32, on the same weights and {} batches.",
                s.recipe, s.batches
            ),
            chart: Chart::Bars(GroupedBars {
                title: format!("{}: what casting one layer to {} does", s.model, s.recipe),
                y_desc: "relative error against FP32 (log scale)".into(),
                axis: super::charts::Axis::Log10,
                groups,
                series: vec![
                    series("weight-gradient error ||g - g32|| / ||g32||", 0, &|h| {
                        h.grad_rel_err
                    }),
                    series("loss change |L - L32| / |L32|", 1, &|h| h.loss_change),
                ],
            }),
        }
    }

    /// The three arms' training loss over steps.
    fn loss_figure(&self) -> Figure {
        Figure {
            id: "loss".into(),
            section: Section::Validation,
            caption: "Training loss of the three arms: the mean over seeds of each run's loss (a moving average over a fiftieth of the run) and its 95% interval.".into(),
            chart: Chart::Lines(LineChart {
                title: "Training loss: FP32, every layer cast, the plan".into(),
                x_desc: "step".into(),
                x_axis: super::charts::Axis::Linear,
                y_desc: "training loss (cross-entropy, nats)".into(),
                axis: super::charts::Axis::Log10,
                lines: self
                    .arms
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Line {
                        name: format!("{} ({}), mean of {}", a.arm, a.recipe, a.values.len()),
                        color: run_color(i),
                        points: a.curve.iter().map(|&(x, m, _, _)| (x, m)).collect(),
                        stroke: Stroke::Solid,
                    })
                    .collect(),
                bands: self
                    .arms
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Band {
                        name: format!("{}: 95% interval", a.arm),
                        color: run_color(i),
                        points: a.curve.iter().filter(|c| c.2.is_finite()).map(|&(x, _, lo, hi)| (x, lo, hi)).collect(),
                    })
                    .collect(),
                marks: Vec::new(),
                legend: Corner::Free,
            }),
        }
    }

    /// Each arm's metric over seeds.
    fn metric_figure(&self) -> Figure {
        let metric = self
            .validation
            .as_ref()
            .map_or("loss", |v| v.metric.as_str());
        Figure {
            id: "metric".into(),
            section: Section::Validation,
            caption: format!(
                "Each run's {metric} (a dot per seed), the arm's mean and its 95% interval."
            ),
            chart: Chart::Dots(DotChart {
                title: format!("{metric} per arm over seeds"),
                x_desc: self.metric_desc(),
                axis: super::charts::Axis::Linear,
                rows: self
                    .arms
                    .iter()
                    .enumerate()
                    .map(|(i, a)| DotRow {
                        name: format!("{} ({})", a.arm, a.recipe),
                        color: run_color(i),
                        values: a.values.clone(),
                        mean: a.metric.as_ref().map(|m| (m.mean, m.low, m.high)),
                    })
                    .collect(),
            }),
        }
    }

    fn metric_desc(&self) -> String {
        match &self.validation {
            Some(v) if v.metric == "loss" => format!(
                "training loss (nats), mean over each run's last {} steps",
                v.last_steps
            ),
            Some(v) => format!("{} at the end of each run", v.metric),
            None => String::new(),
        }
    }

    fn page(
        &self,
        figures: &[Figure],
        svgs: &std::collections::BTreeMap<String, String>,
    ) -> Markup {
        let figure = |s: Section| figures_of(s, figures, svgs);
        let s = &self.sensitivity;
        let total: u64 = s.layers.iter().map(|l| l.flops).sum();
        let title = format!("mixprec plan: {} in {}", s.model, s.recipe);
        document(
            &title,
            html! {
                (section(Section::PlanFindings, html! {
                    ul { @for f in self.findings() { li { (f) } } }
                }))
                (section(Section::Sensitivity, html! {
                    p { "Every layer that forms matrix products, cast alone to " (s.recipe) " (every other layer in " (s.reference) "), against " (s.reference) " on the same weights and " (s.batches) " batches (seed " (s.seed) "), forward and backward, no update. Gradient error and cosine are over all the model's weight gradients; underflow is the share of the layer's cast operand values (nonzero before) that became zero, saturated the share clamped to the format's largest value." }
                    table {
                        thead { tr {
                            th { "layer" } th { "product FLOPs per step" } th { "share" } th { "gradient error" } th { "gradient cosine" }
                            th { "loss change" } th { "underflow" } th { "saturated" } th { "plan" }
                        } }
                        tbody {
                            @for l in &s.layers {
                                tr {
                                    td { (l.layer) } td { (l.flops) } td { (pct(l.flops as f64 / total.max(1) as f64)) }
                                    td { (four_digits(l.harm.grad_rel_err)) } td { (four_digits(l.harm.grad_cosine)) }
                                    td { (four_digits(l.harm.loss_change)) } td { (pct(l.harm.underflow)) } td { (pct(l.harm.saturate)) }
                                    td { (if self.plan.cast.contains(&l.layer) { format!("cast ({})", self.plan.recipe) } else { format!("kept ({})", self.plan.high) }) }
                                }
                            }
                            tr {
                                td { "all at once" } td { (total) } td { "100%" }
                                td { (four_digits(s.all.grad_rel_err)) } td { (four_digits(s.all.grad_cosine)) }
                                td { (four_digits(s.all.loss_change)) } td { (pct(s.all.underflow)) } td { (pct(s.all.saturate)) } td {}
                            }
                        }
                    }
                    (figure(Section::Sensitivity))
                }))
                (section(Section::Plan, html! {
                    p { "Layers cast in order of least harm, the gradient error of all of them cast together measured after each, until the budget (" (self.plan.budget.in_words()) "). Cast to " (self.plan.recipe) ": " (layers_in_words(&self.plan.cast)) "; kept in " (self.plan.high) ": " (layers_in_words(&self.plan.keep)) ". The plan casts " (pct(self.plan.flops_share)) " of the product FLOPs." }
                    table {
                        thead { tr { th { "step" } th { "layer added" } th { "product FLOPs cast" } th { "gradient error, together" } th { "in the plan" } } }
                        tbody {
                            @for (i, st) in self.plan.steps.iter().enumerate() {
                                tr { td { (i + 1) } td { (st.layer) } td { (pct(st.flops_share)) } td { (four_digits(st.grad_rel_err)) }
                                     td { (if i < self.plan.cast.len() { "yes" } else { "no: over the budget" }) } }
                            }
                        }
                    }
                    p { "The plan's recipe (plan-recipe.json):" }
                    pre { (serde_json::to_string_pretty(&self.plan_recipe.get("keep").cloned().unwrap_or_default()).unwrap_or_default()) }
                }))
                @if self.arms.is_empty() {
                    (section(Section::Validation, html! { p { "Not validated yet: `mixprec plan --validate` re-trains FP32, every layer cast and the plan over seeds." } }))
                } @else {
                    (section_headed(Section::Validation, &Section::Validation.titled("Validation by re-training"), html! {
                        p { "Each arm trained from the same seeds; the metric is " (self.metric_desc()) ". Welch's t-test of each arm against FP32; an arm trains within seed noise of FP32 when p >= " (ALPHA) "." }
                        table {
                            thead { tr { th { "arm" } th { "recipe" } th { "seeds" } th { "mean" } th { "95% interval" } th { "difference to FP32 (95% interval)" } th { "Welch p" } th { "verdict" } } }
                            tbody {
                                @for a in &self.arms {
                                    tr {
                                        td { (a.arm) } td { (a.recipe) } td { (a.values.len()) }
                                        td { (a.metric.as_ref().map_or("?".into(), |m| four_digits(m.mean))) }
                                        td { (a.metric.as_ref().map_or("?".into(), |m| format!("{} .. {}", four_digits(m.low), four_digits(m.high)))) }
                                        td { (a.vs_fp32.as_ref().map_or("(reference)".into(), |w| format!("{} ({} .. {})", four_digits(w.difference), four_digits(w.low), four_digits(w.high)))) }
                                        td { (a.vs_fp32.as_ref().map_or(String::new(), |w| p_value(w.p_value))) }
                                        td { (match a.within_noise() { Some(true) => "trains within seed noise of FP32", Some(false) => "differs from FP32", None => "" }) }
                                    }
                                }
                            }
                        }
                        (figure(Section::Validation))
                    }))
                }
                footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) " from the plan directory " (self.dir) ". The numbers are in report.json." } }
            },
        )
    }
}

/// A run's value of the validation's metric: its mean loss over its last `last_steps` steps, or
/// its summary's evaluation metric of that name.
fn metric(run: &RunDir, losses: &[f64], v: &Validation) -> Result<f64> {
    if v.metric == "loss" {
        let n = (v.last_steps as usize).clamp(1, losses.len().max(1));
        let tail = &losses[losses.len().saturating_sub(n)..];
        return Ok(tail.iter().sum::<f64>() / tail.len().max(1) as f64);
    }
    match &run.summary {
        Some(s) if s.eval_metric.name == v.metric => Ok(s.eval_metric.value),
        _ => Err(crate::Error::BadFile {
            path: PathBuf::from(VALIDATION),
            problem: format!(
                "metric '{}': a run whose summary does not record it",
                v.metric
            ),
        }),
    }
}

/// The mean over runs of each run's loss smoothed by a moving average (a fiftieth of the run),
/// with its 95% interval, per step the runs share.
fn mean_curve(curves: &[Vec<f64>]) -> Vec<(f64, f64, f64, f64)> {
    let steps = curves.iter().map(Vec::len).min().unwrap_or(0);
    let window = (steps / 50).max(1);
    let smooth: Vec<Vec<f64>> = curves
        .iter()
        .map(|c| {
            (0..steps)
                .map(|i| {
                    let lo = (i + 1).saturating_sub(window);
                    c[lo..=i].iter().sum::<f64>() / (i + 1 - lo) as f64
                })
                .collect()
        })
        .collect();
    (0..steps)
        .filter_map(|i| {
            let xs: Vec<f64> = smooth.iter().map(|c| c[i]).collect();
            let m = MeanCi::new(&xs, LEVEL)?;
            Some(((i + 1) as f64, m.mean, m.low, m.high))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunWriter;
    use crate::run::schema::{EvalMetric, StepRecord};

    /// A plan directory written by hand as the PyTorch side writes one (its runs with a
    /// recorder's config): each arm's metric is its runs' mean loss over their last steps, and
    /// each arm is tested against fp32.
    #[test]
    fn a_plan_directory_from_another_writer_reads() {
        let dir = std::env::temp_dir().join(format!("mixprec-plan-page-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write(
            SENSITIVITY,
            r#"{"schema": "mixprec-sensitivity/1", "model": "tiny", "recipe": "nvfp4",
                "reference": "fp32", "batches": 2, "seed": 0,
                "layers": [{"layer": "fc2", "flops": 2.0e3, "grad_rel_err": 0.3, "grad_cosine": 0.9,
                            "loss_change": 0.01, "underflow": 0.0, "saturate": 0.0},
                           {"layer": "fc1", "flops": 6000, "grad_rel_err": 0.1, "grad_cosine": 0.99,
                            "loss_change": 0.001, "underflow": 0.0, "saturate": 0.0}],
                "all": {"grad_rel_err": 0.35, "grad_cosine": 0.88, "loss_change": 0.02,
                        "underflow": 0.0, "saturate": 0.0}}"#,
        );
        write(
            PLAN,
            r#"{"schema": "mixprec-plan/1", "recipe": "nvfp4", "high": "bf16-master",
                "budget": {"max_grad_error": 0.2}, "cast": ["fc1"], "keep": ["fc2"],
                "flops_share": 0.75, "grad_rel_err": 0.1,
                "steps": [{"layer": "fc1", "flops_share": 0.75, "grad_rel_err": 0.1},
                          {"layer": "fc2", "flops_share": 1.0, "grad_rel_err": 0.35}]}"#,
        );
        write(
            PLAN_RECIPE,
            r#"{"name": "nvfp4-plan", "keep": {"fc2": "bf16-master"}}"#,
        );
        // Losses per arm and seed: the last two steps count.
        let losses = [
            ("fp32", [[9.0, 1.0, 1.2], [9.0, 1.1, 1.1]]),
            ("all", [[9.0, 2.0, 2.2], [9.0, 2.1, 2.3]]),
            ("plan", [[9.0, 1.0, 1.3], [9.0, 1.2, 1.0]]),
        ];
        let mut runs = Vec::new();
        for (arm, seeds) in losses {
            for (seed, curve) in seeds.iter().enumerate() {
                let run = format!("runs/{arm}-seed{seed}");
                let config = serde_json::json!({"source": "pytorch", "recipe": {"name": arm}});
                let mut w = RunWriter::create(&dir.join(&run), &config, false).unwrap();
                for (i, &loss) in curve.iter().enumerate() {
                    let line = format!(
                        r#"{{"step": {}, "loss": {loss}, "loss_scale": 1.0, "overflow": false,
                            "skipped": false, "updates_lost": 0.0}}"#,
                        i + 1
                    );
                    w.step(&serde_json::from_str::<StepRecord>(&line).unwrap())
                        .unwrap();
                }
                let metric = EvalMetric {
                    name: "loss".into(),
                    value: 0.0,
                    chance: None,
                };
                let summary = w.summary(arm, metric, 1, true, 0.0);
                w.finish(&summary).unwrap();
                runs.push(serde_json::json!({"arm": arm, "seed": seed, "run": run}));
            }
        }
        let validation = serde_json::json!({"schema": "mixprec-validation/1", "metric": "loss",
                                            "last_steps": 2, "runs": runs});
        write(VALIDATION, &validation.to_string());
        let r = PlanReport::read(&dir).unwrap();
        let values: Vec<Vec<f64>> = r.arms.iter().map(|a| a.values.clone()).collect();
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(&values[0], &[1.1, 1.1]), "{values:?}");
        assert!(close(&values[1], &[2.1, 2.2]), "{values:?}");
        assert!(close(&values[2], &[1.15, 1.1]), "{values:?}");
        assert_eq!(r.arms[1].within_noise(), Some(false));
        assert_eq!(r.arms[2].within_noise(), Some(true));
        assert_eq!(r.sensitivity.layers[0].flops, 2000);
        let page = dir.join("page");
        r.write(&page).unwrap();
        let html = std::fs::read_to_string(page.join("index.html")).unwrap();
        assert!(html.contains("kept (bf16-master)") && html.contains("cast (nvfp4)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
