//! `replay`'s reading of a run directory and its page: each policy's scale trajectory over the
//! window band (a figure) and a table, from [`crate::scaling::replay`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use maud::{Markup, html};
use serde::Serialize;

use super::charts::{Axis, Band, Corner, Line, LineChart, Stroke, run_color};
use super::html::{Chart, Figure, breakable, document, figure_markup, section, write_report};
use super::runs::{judged_format, recorded_step};
use super::section::Section;
use crate::format::{FP32, FloatFormat, Overflow};
use crate::recipe::Class;
use crate::run::RunDir;
use crate::scaling::replay::{OverflowModel, PolicyReplay, Replay, Replayer};
use crate::scaling::scaler::LossScaling;
use crate::{Error, Result};

/// The policy name that stands for the run's own loss scaling.
pub const RUN_POLICY: &str = "run";

/// A replay of one run directory.
#[derive(Clone, Debug, Serialize)]
pub struct RunReplay {
    /// The run directory.
    pub run: String,
    /// The run's recipe.
    pub recipe: String,
    /// The run's own loss scaling, by name.
    pub run_policy: Option<String>,
    /// The replay.
    #[serde(flatten)]
    pub replay: Replay,
}

/// Replays the policies named `policies` ([`crate::scaling::policy`] names, or [`RUN_POLICY`]
/// for the run's own) over the run directory `dir`, judging gradients against `format` (default:
/// the run's gradient format, fp16 for fp32 gradients). `progress` is called after every step.
///
/// # Errors
/// Not a run directory, a run without `grad_amax` (schema 0), an unreadable log, a bad policy
/// name, `run` for a run whose config describes no recipe, or a run with no recorded steps.
pub fn replay_run(
    dir: &Path,
    policies: &[String],
    format: Option<FloatFormat>,
    progress: &mut dyn FnMut(u64),
) -> Result<RunReplay> {
    let run = RunDir::open(dir)?;
    if run.schema == 0 {
        return Err(Error::BadFile {
            path: dir.to_path_buf(),
            problem: "written before schema 1: its steps have no grad_amax, which replay needs (train it again)".into(),
        });
    }
    let recipe = run.recipe();
    let own = recipe.as_ref().map(|r| r.loss_scaling);
    let mut named: Vec<(String, LossScaling)> = Vec::new();
    for name in policies {
        let entry = if name.trim() == RUN_POLICY {
            let p = own.ok_or_else(|| Error::BadFile {
                path: dir.join(crate::run::CONFIG),
                problem: "describes no recipe (recorded before recorders wrote one): its own loss scaling ('--policy run') is unknown".into(),
            })?;
            (format!("run ({p})"), p)
        } else {
            // Labelled as given: equal presets print as the first of them (keras with GradScaler's
            // initial scale is gradscaler), which would rename what the user asked for.
            (name.trim().to_string(), name.parse()?)
        };
        // Only a literal repeat is refused: another spelling of a policy already given (the
        // run's own written out, keras at GradScaler's initial scale) is what the user asked
        // to see, and the figure says when two policies' scales coincide.
        if named.iter().any(|(label, _)| *label == entry.0) {
            return Err(Error::BadScaler {
                value: name.clone(),
                problem: "given twice".into(),
            });
        }
        named.push(entry);
    }
    let run_model = match &recipe {
        Some(r) => {
            let f = r.format(Class::ActivationGrad);
            OverflowModel {
                format: f,
                // Saturating stores, and 8-bit formats scaled per tensor, do not overflow by the
                // loss scale.
                by_magnitude: r.overflow == Overflow::Ieee
                    && !(r.fp8_scaling.is_some() && f.total_bits() <= 8),
            }
        }
        None => OverflowModel {
            format: run.recorded_format().unwrap_or(FP32),
            by_magnitude: true,
        },
    };
    let judged = judged_format(run_model.format, format);
    let judged = OverflowModel {
        format: judged,
        by_magnitude: judged != run_model.format || run_model.by_magnitude,
    };
    let mut replayer = Replayer::new(&named, run_model, judged);
    let mut captures = run.captures()?.peekable();
    let mut steps = 0_u64;
    for record in run.steps()? {
        let r = record?;
        steps += 1;
        // Captures come in step order; feed the one of this step before the step itself.
        while let Some(c) = captures.next_if(|c| c.as_ref().map_or(true, |c| c.step <= r.step)) {
            let c = c?;
            if c.step == r.step {
                replayer.capture(c.step, c.loss_scale.unwrap_or(1.0), c.gradients());
            }
        }
        replayer.step(&recorded_step(&r));
        progress(r.step);
    }
    if steps == 0 {
        // Replay is of the recorded steps: with none, every policy would read as the run's.
        return Err(Error::BadFile {
            path: dir.join(crate::run::METRICS),
            problem:
                "no steps recorded (the run wrote none, or the file was emptied): nothing to replay"
                    .into(),
        });
    }
    Ok(RunReplay {
        run: dir.display().to_string(),
        recipe: run.recipe_name(),
        run_policy: own.map(|p| p.to_string()),
        replay: replayer.finish(),
    })
}

/// The figure: each policy's scale over steps, over the band of the window.
#[must_use]
pub fn trajectory_figure(r: &RunReplay) -> Figure {
    let window = &r.replay.window;
    let stride = window.len().div_ceil(super::runs::MAX_POINTS).max(1);
    let kept: Vec<(f64, f64, f64)> = window
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0 || *i + 1 == window.len())
        .filter_map(|(_, &(step, lo, hi))| {
            let (lo, hi) = (lo?, hi?);
            (lo <= hi).then(|| (step as f64, 2f64.powi(lo), 2f64.powi(hi)))
        })
        .collect();
    // A staircase, as the scales are: each step's window holds until the next step's, so the
    // band has no slanted edges (which left white wedges where the window jumps).
    let band: Vec<(f64, f64, f64)> = kept
        .iter()
        .enumerate()
        .flat_map(|(i, &(x, lo, hi))| {
            let next = kept.get(i + 1).map_or(x, |n| n.0);
            [(x, lo, hi), (next, lo, hi)]
        })
        .collect();
    let last = window.last().map_or(1, |w| w.0);
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    let policies = &r.replay.policies;
    for (i, p) in policies.iter().enumerate() {
        let points = staircase(p, last);
        // A policy whose scales equal an earlier one's is drawn over it: the legend says so.
        let same = policies[..i]
            .iter()
            .find(|q| staircase(q, last) == points)
            .map_or_else(String::new, |q| {
                format!(" (same scales as {}: drawn over it)", q.policy)
            });
        lines.push(Line {
            stroke: Stroke::dashed_if(!same.is_empty()),
            name: format!("{}{same}", p.policy),
            color: run_color(i),
            points,
        });
        if p.skipped.count > 0 {
            marks.push(Line {
                name: format!("{}: skipped", p.policy),
                color: run_color(i),
                points: p
                    .skipped
                    .steps
                    .iter()
                    .filter_map(|&s| Some((s as f64, p.scale_at(s)?)))
                    .collect(),
                stroke: Stroke::Solid,
            });
        }
    }
    Figure {
        id: "replay".into(),
        section: Section::Replay,
        caption: format!(
            "Each policy's loss scale over the recorded run's steps (open loop), its skipped steps (crosses), and the window in {} (band: from the smallest scale that keeps {} of the captured gradient values from underflowing, at the last capture step, to the largest that keeps the step's largest gradient finite).",
            r.replay.judged.format,
            crate::text::threshold_percent(1.0 - crate::scaling::window::MAX_UNDERFLOW)
        ),
        chart: Chart::Lines(LineChart {
            title: format!("Loss-scale policies replayed over {}", r.recipe),
            x_desc: "step".into(),
            y_desc: "loss scale (log2)".into(),
            axis: Axis::Log2,
            x_axis: Axis::Linear,
            lines,
            bands: if band.is_empty() {
                Vec::new()
            } else {
                vec![Band {
                    name: format!("window in {}", r.replay.judged.format),
                    color: RGB_GREY,
                    points: band,
                }]
            },
            marks,
            legend: Corner::BelowData,
        }),
    }
}

const RGB_GREY: plotters::style::RGBColor = plotters::style::RGBColor(90, 90, 90);

/// A policy's scale as a staircase up to step `last` (or its stop).
fn staircase(p: &PolicyReplay, last: u64) -> Vec<(f64, f64)> {
    let end = p.stopped_at.unwrap_or(last) as f64;
    let mut points: Vec<(f64, f64)> = Vec::new();
    for &(step, scale) in &p.scale_changes {
        if let Some(&(_, before)) = points.last() {
            points.push((step as f64, before));
        }
        points.push((step as f64, scale));
    }
    if let Some(&(_, scale)) = points.last() {
        points.push((end, scale));
    }
    points
}

/// Writes `dir/index.html` (the table and the figure), `dir/replay.json` (what `--json` prints)
/// and `dir/figures/replay.{png,svg}`. Returns the page's path.
///
/// # Errors
/// A file in `dir` that mixprec did not write, a failed write, a chart that cannot be drawn.
pub fn write_replay(dir: &Path, r: &RunReplay) -> Result<PathBuf> {
    let figure = trajectory_figure(r);
    write_report(
        dir,
        std::slice::from_ref(&figure),
        "replay.json",
        None,
        r,
        |svgs| page(r, &figure, svgs),
    )
}

/// The replay page, with its figure's SVG.
fn page(r: &RunReplay, figure: &Figure, svgs: &BTreeMap<String, String>) -> Markup {
    let rows = table(r);
    let body = html! {
        (section(Section::Replay, html! {
            p { (r.replay.open_loop) }
            p { "The run's recipe: " (r.recipe) "; its loss scaling: " (r.run_policy.as_deref().unwrap_or("unknown")) ". Gradients judged against " (r.replay.judged.format) "."
                @for note in notes(&r.replay) { " " (note) }
            }
            table {
                thead { tr { @for h in HEADER { th { (h) } } } }
                tbody { @for row in &rows { tr { @for (i, c) in row.iter().enumerate() {
                    // The policy, spelled with its parameters, wraps at its separators.
                    td { @if i == 0 { (breakable(c)) } @else { (c) } }
                } } } }
            }
            (figure_markup(&figure.id, svgs.get(&figure.id).map_or("", String::as_str), &figure.caption))
        }))
        footer { p { "Made by mixprec " (env!("CARGO_PKG_VERSION")) ". The numbers are in replay.json (what replay --json prints)." } }
    };
    document(&format!("mixprec replay: {}", r.run), body)
}

/// What the table's numbers rest on, in words: the recorded overflows that happen at every
/// scale, and the steps that carry only a bound.
#[must_use]
pub fn notes(r: &Replay) -> Vec<String> {
    let mut notes = Vec::new();
    if r.unexplained_overflows > 0 {
        notes.push(format!(
            "{} recorded overflow steps are not explained by the largest gradient (inf or NaN from elsewhere): they overflow at every scale.",
            r.unexplained_overflows
        ));
    }
    if r.bounded_steps > 0 {
        notes.push(format!(
            "{} of {} steps carry only a bound (an inf or NaN in their backward pass hid later gradients): each overflows at the scale it overflowed at and above, and where its largest known gradient overflows; at a policy's scale where that decides nothing the step is undecided (the table's column) and replayed as if it fit.",
            r.bounded_steps, r.steps
        ));
    }
    notes
}

/// The table's columns.
pub const HEADER: [&str; 11] = [
    "policy",
    "scale at the last step",
    "scale changes",
    "overflow steps",
    "skipped",
    "undecided",
    "above window",
    "below window",
    "underflow (%, mean over captures)",
    "stopped at",
    "same as the run",
];

/// One row per policy.
#[must_use]
pub fn table(r: &RunReplay) -> Vec<[String; 11]> {
    r.replay
        .policies
        .iter()
        .map(|p| {
            [
                p.policy.clone(),
                p.scale_changes
                    .last()
                    .map_or("-".into(), |&(_, s)| crate::text::scale_name(s)),
                p.scale_changes.len().saturating_sub(1).to_string(),
                p.overflow.count.to_string(),
                p.skipped.count.to_string(),
                p.undecided.count.to_string(),
                p.above_window.count.to_string(),
                p.below_window.count.to_string(),
                p.mean_underflow().map_or("-".into(), crate::text::percent),
                p.stopped_at.map_or("-".into(), |s| s.to_string()),
                if p.matches_run { "yes" } else { "no" }.into(),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FP16;
    use crate::scaling::replay::RecordedStep;
    use crate::stats::Histogram;

    /// The figure draws each policy's scale as a staircase through its change points up to the
    /// last step, crosses at its skipped steps at the scale they used, and the band between the
    /// window's edges (low edge from the capture, high edge from each step's grad_amax).
    #[test]
    fn the_figure_draws_the_trajectories_over_the_window() {
        let model = OverflowModel {
            format: FP16,
            by_magnitude: true,
        };
        // The same policy twice, written in two ways.
        let policies: Vec<(String, LossScaling)> = [
            "gradscaler:init_scale=2^10,growth_interval=2",
            "gradscaler:growth_interval=2,init_scale=2^10",
        ]
        .iter()
        .map(|n| ((*n).to_string(), n.parse().unwrap()))
        .collect();
        let mut r = Replayer::new(&policies, model, model);
        let mut h = Histogram::new(0);
        h.add_f32(&[2f32.powi(-16), 1024.0]);
        r.capture(1, 1024.0, h);
        for step in 1..=4 {
            r.step(&RecordedStep {
                step,
                loss_scale: 1024.0,
                overflow: step == 3,
                skipped: step == 3,
                grad_amax: Some(if step == 3 { 100.0 } else { 1.0 }),
                grad_amax_bounded: false,
            });
        }
        let run = RunReplay {
            run: "r".into(),
            recipe: "fp16-dynamic".into(),
            run_policy: None,
            replay: r.finish(),
        };
        let f = trajectory_figure(&run);
        let Chart::Lines(c) = &f.chart else { panic!() };
        assert_eq!(c.axis, Axis::Log2);
        // 1024 on steps 1-2, 2048 on step 3 (overflows: 100 x 2048), 1024 on step 4.
        assert_eq!(
            c.lines[0].points,
            vec![
                (1.0, 1024.0),
                (3.0, 1024.0),
                (3.0, 2048.0),
                (4.0, 2048.0),
                (4.0, 1024.0),
                (4.0, 1024.0)
            ]
        );
        assert_eq!(c.marks[0].points, vec![(3.0, 2048.0)]);
        // Low edge 2^1 (from the capture), high edge 2^15 (grad_amax 1) or 2^9 (100).
        assert_eq!(
            c.bands[0].points,
            // A staircase: each step's window holds until the next step.
            vec![
                (1.0, 2.0, 32768.0),
                (2.0, 2.0, 32768.0),
                (2.0, 2.0, 32768.0),
                (3.0, 2.0, 32768.0),
                (3.0, 2.0, 512.0),
                (4.0, 2.0, 512.0),
                (4.0, 2.0, 32768.0),
                (4.0, 2.0, 32768.0)
            ]
        );
        assert_eq!(c.lines[0].name, policies[0].0);
        assert_eq!(
            c.lines[1].name,
            format!(
                "{} (same scales as {}: drawn over it)",
                policies[1].0, policies[0].0
            )
        );
        assert_eq!(c.legend, Corner::BelowData);
    }
}
