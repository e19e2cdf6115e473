//! Section 6 of a run page: the loss-scale window over training and the GradScaler setting it
//! recommends. One rule ([`WindowAdvice::of`]) for the page and for `mixprec demo`'s summary.
//!
//! ```text
//! bottom     the highest low edge of the capture steps' windows
//! top        the lowest high edge of every step (RunData::window_top)
//! start      the top for a rerun (RunData::window_rerun_top), else the top
//! bottom <= start           one scale lies in every window, for a rerun too: init_scale 2^start
//! start < bottom <= top     it lay in every window of this run, not of a rerun: init_scale 2^top
//! top < bottom              no one scale did: init_scale the first window's high edge
//! ```

use std::fmt::Write as _;

use serde::Serialize;

use super::findings::{failed_to_train, matched_fp32, outside_window, window_name};
use crate::report::runs::{MAX_UNDERFLOW, RunData, WINDOW_SCALES};
use crate::stats::recommend::{MATCH_MAX_ENERGY_LOST, MATCH_MAX_UNDERFLOW, RERUN_RISK, RerunTop};
use crate::text::threshold_percent;

/// Whether one loss scale lay in every window of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Fit {
    /// One did, and for a rerun too (`bottom <= start`).
    Every,
    /// One did in this run, but the top for a rerun lies below the windows' low edge.
    NotForARerun,
    /// None did: the lowest high edge lies below the highest low edge.
    NoOne,
}

/// The loss-scale window of one run over training, as the window section says it, and the
/// GradScaler `init_scale` it recommends (`2^init_scale`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WindowAdvice {
    /// The first capture step with a window, and its window's edges.
    pub first: (u64, i32, i32),
    /// The last capture step with a window, and its edges (`None` with only one).
    pub last: Option<(u64, i32, i32)>,
    /// The highest low edge of the capture steps' windows.
    pub bottom: i32,
    /// The lowest high edge of every step ([`RunData::window_top`]; the capture steps' without
    /// step lines).
    pub top: i32,
    /// The step that set `top`, when known.
    pub top_step: Option<u64>,
    /// The top for a rerun ([`RunData::window_rerun_top`]).
    pub rerun_top: Option<RerunTop>,
    /// Whether one scale lay in every window.
    pub fit: Fit,
    /// The recommended `GradScaler(init_scale=2.0**init_scale)`.
    pub init_scale: i32,
    /// Whether a loss scale is needed: false when `2^0` lay in every window and only the end of
    /// the scales searched ([`WINDOW_SCALES`]) bounds the top (bf16, or any format with FP32's
    /// exponent range), as `analyze` says no scaling is needed there.
    pub scaling_needed: bool,
}

impl WindowAdvice {
    /// The advice for run `r`: `None` when no capture step has a window (no gradients captured,
    /// none finite, or no single scale keeps them at any step).
    #[must_use]
    pub fn of(r: &RunData) -> Option<WindowAdvice> {
        let windows: Vec<(u64, i32, i32)> = r
            .captures
            .iter()
            .filter_map(|c| Some((c.step, c.window.min_log2_scale?, c.window.max_log2_scale?)))
            .filter(|(_, lo, hi)| lo <= hi)
            .collect();
        let &first = windows.first()?;
        // The high edge of every step, not only of the capture steps: the largest gradient of a
        // step between captures can overflow where the captures' windows do not.
        let (top, top_step) = match r.window_top {
            Some((k, step)) => (k, Some(step)),
            None => {
                let w = windows.iter().min_by_key(|w| w.2).unwrap_or(&first);
                (w.2, Some(w.0))
            }
        };
        let bottom = windows.iter().map(|w| w.1).max().unwrap_or(first.1);
        let start = r.window_rerun_top.map_or(top, |t| t.log2_scale);
        let (fit, init_scale) = if bottom > top {
            (Fit::NoOne, first.2)
        } else if bottom <= start {
            (Fit::Every, start)
        } else {
            (Fit::NotForARerun, top)
        };
        Some(WindowAdvice {
            first,
            last: (windows.len() > 1).then(|| windows[windows.len() - 1]),
            bottom,
            top,
            top_step,
            rerun_top: r.window_rerun_top,
            fit,
            init_scale,
            scaling_needed: !(fit != Fit::NoOne && bottom <= 0 && top >= *WINDOW_SCALES.end()),
        })
    }
}

/// The window's advice in plain words, as `mixprec demo` ends and the window section says it: which
/// scales are predicted to train like FP32 (from the predicted edge up to the top for a rerun),
/// which scale to start a GradScaler at, and why the windows' low edge is stricter than the
/// prediction. Sentences without their final period, so that a caller may add to them.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainWords {
    /// The scales predicted to train like FP32, when there is a prediction.
    pub predicted: Option<String>,
    /// Where to start a GradScaler (or that no loss scaling is needed).
    pub start: String,
    /// Why the windows' low edge lies above the predicted edge, when it does.
    pub stricter: Option<String>,
}

impl PlainWords {
    /// The words for advice `a` in format `format`, with the predicted edge `2^predicted`.
    #[must_use]
    pub fn of(a: &WindowAdvice, predicted: Option<i32>, format: &str) -> PlainWords {
        let rerun_top = a.rerun_top.map_or(a.top, |t| t.log2_scale.min(a.top));
        let predicted_words = predicted.map(|p| {
            if p <= rerun_top {
                format!("Loss scales 2^{p}..2^{rerun_top} are predicted to train like fp32 in {format}")
            } else {
                format!(
                    "Loss scales from 2^{p} up are predicted to train like fp32 in {format}, above the top for a rerun, 2^{rerun_top}"
                )
            }
        });
        let init = a.init_scale;
        let start = match a.fit {
            _ if !a.scaling_needed => format!("No loss scaling is needed in {format}"),
            Fit::Every => {
                format!("Start with GradScaler(init_scale=2.0**{init}): the top for a rerun")
            }
            Fit::NotForARerun => format!(
                "Start with GradScaler(init_scale=2.0**{init}): the top of the run's gradients; it halves on overflow"
            ),
            Fit::NoOne => format!(
                "Start with GradScaler(init_scale=2.0**{init}), inside the first window: no one scale fit every step"
            ),
        };
        let stricter = predicted.filter(|&p| a.bottom > p).map(|_| {
            format!(
                "The windows' low edge, 2^{}, is stricter: it lets {} of the values underflow; matching fp32 allows {}",
                a.bottom,
                threshold_percent(MAX_UNDERFLOW),
                threshold_percent(MATCH_MAX_UNDERFLOW)
            )
        });
        PlainWords {
            predicted: predicted_words,
            start,
            stricter,
        }
    }
}

/// How many of a run's steps gave only a bound of their high edge, as a clause.
fn bounded_note(r: &RunData) -> String {
    if r.bounded_steps == 0 {
        return String::new();
    }
    format!(
        "; {} of {} steps give only an upper bound of it (an inf or NaN hid their later gradients)",
        r.bounded_steps, r.steps_read
    )
}

/// In words, the window's top for a rerun against this run's top `2^top`: how far a rerun's
/// largest gradient may exceed this run's, and the margin that asks for.
fn rerun_clause(s: &mut String, top: i32, t: &RerunTop) {
    let _ = write!(
        s,
        " A rerun trains along its own trajectory: from this run's spread of log2 grad_amax between consecutive steps (sd {:.2} over {} steps), a rerun's largest gradient exceeds this run's by {:.2} bits or more one time in {:.0}; at 2^{top} this run's had {:.2} bits to spare below the format's largest value, ",
        t.step_sd,
        t.steps,
        t.excess,
        1.0 / RERUN_RISK,
        t.headroom
    );
    if t.margin == 0 {
        s.push_str("so the top holds for a rerun.");
    } else {
        let _ = write!(s, "so the top for a rerun is 2^{}.", t.log2_scale);
    }
}

/// `steps` as "step 1" or "steps 1, 50".
fn steps_named(steps: &[String]) -> String {
    format!(
        "step{} {}",
        if steps.len() == 1 { "" } else { "s" },
        steps.join(", ")
    )
}

/// In words: where the scaler was against the window, and GradScaler settings that keep it
/// ([`WindowAdvice`]); whether leaving it cost anything against an FP32 run of `runs`; the
/// capture steps with an empty window or no finite gradient (no band in the figure).
pub(crate) fn window_sentence(r: &RunData, runs: &[RunData]) -> String {
    // Capture steps with no finite nonzero gradient have no window (nothing bounds one).
    let no_finite: Vec<String> = r
        .captures
        .iter()
        .filter(|c| c.finite_gradients == 0)
        .map(|c| c.step.to_string())
        .collect();
    let Some(a) = WindowAdvice::of(r) else {
        if !r.captures.is_empty() && no_finite.len() == r.captures.len() {
            return format!(
                "{}: no finite gradient at any of the {} capture steps (every value stored was zero, inf or NaN): no window.",
                r.name,
                r.captures.len()
            );
        }
        return format!(
            "{}: no capture step has a window for {} (no gradients captured, or no single scale keeps them).",
            r.name, r.grad_format
        );
    };
    let (first_step, lo, hi) = a.first;
    // Capture steps with finite gradients but an empty window: said before the range common to
    // the others, which leaves them out.
    let empty: Vec<String> = r
        .captures
        .iter()
        .filter(|c| c.finite_gradients > 0 && window_name(&c.window).is_none())
        .map(|c| c.step.to_string())
        .collect();
    // The capture steps before the first window that held no finite gradient, named where the
    // window would be.
    let before: Vec<String> = r
        .captures
        .iter()
        .take_while(|c| c.step < first_step && c.finite_gradients == 0)
        .map(|c| c.step.to_string())
        .collect();
    let empty_words = format!(
        "At {} of {} capture steps ({}) no single scale kept the gradients (an empty window)",
        empty.len(),
        r.captures.len(),
        steps_named(&empty)
    );
    let stored = r.formats.get(&crate::recipe::Class::ActivationGrad);
    let mut s = if stored.is_some_and(|f| f == "fp32") {
        format!(
            "{} stores its gradients in FP32, which needs no loss scaling; stored in {}, ",
            r.name, r.grad_format
        )
    } else {
        format!("{}: in {}, ", r.name, r.grad_format)
    };
    if !before.is_empty() {
        let _ = write!(s, "no finite gradient at {}; ", steps_named(&before));
    }
    let _ = write!(
        s,
        "the window of the unscaled gradients was 2^{lo}..2^{hi} at step {first_step}"
    );
    if let Some((step, l, h)) = a.last {
        let _ = write!(s, " and 2^{l}..2^{h} at step {step}");
    }
    let (bottom, top) = (a.bottom, a.top);
    match a.fit {
        Fit::Every | Fit::NotForARerun => {
            let one = match empty.len() {
                0 => ". One".to_string(),
                1 => format!(". {empty_words}. Apart from it, one"),
                _ => format!(". {empty_words}. Apart from them, one"),
            };
            let _ = write!(
                s,
                "{one} scale lay in every window of this run (the captures' low edges, every step's high edge{}): 2^{bottom}..2^{top}.",
                bounded_note(r),
            );
            if let Some(t) = a.rerun_top {
                rerun_clause(&mut s, top, &t);
            }
            if !a.scaling_needed {
                let _ = write!(
                    s,
                    " No loss scaling is needed in {}: 2^0 lay in every window, whose top 2^{top} is only the end of the scales searched, as analyze says of such gradients.",
                    r.grad_format
                );
            }
        }
        Fit::NoOne => {
            let _ = write!(
                s,
                ". No one scale lay in every window (the lowest upper edge 2^{top} is below the highest lower edge 2^{bottom}): a dynamic scaler must move; GradScaler(init_scale=2.0**{}) starts inside.",
                a.init_scale
            );
        }
    }
    let words = PlainWords::of(&a, r.predicted_min_log2_scale, &r.grad_format.to_string());
    if let Some(predicted) = &words.predicted {
        let _ = write!(
            s,
            " {predicted} (from its FP32 weight gradients, every capture step pooled: at most {} of their squared norm and {} of their values underflow; mixprec's loss-scale grids confirm this rule within one binade).",
            threshold_percent(MATCH_MAX_ENERGY_LOST),
            threshold_percent(MATCH_MAX_UNDERFLOW)
        );
    }
    if a.scaling_needed && a.fit != Fit::NoOne {
        let _ = write!(s, " {}.", words.start);
        if a.fit == Fit::Every {
            let _ = write!(
                s,
                " With growth_interval at least the run's length ({} steps) it never grows out, and a dynamic scaler that overflows halves back inside.",
                r.steps_read
            );
        } else {
            let _ = write!(
                s,
                " For a rerun, at those odds, no one static scale lies in every window: the top for a rerun is below the windows' low edge 2^{}.",
                a.bottom
            );
        }
    }
    if let Some(stricter) = &words.stricter {
        let _ = write!(s, " {stricter}.");
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
                crate::text::scale_name(first.loss_scale)
            );
            let healthy = !r.summary.as_ref().is_some_and(|s| s.diverged)
                && failed_to_train(r, runs).is_none();
            match matched_fp32(r, runs) {
                Some((base, v)) => {
                    let _ = write!(
                        s,
                        " Yet it trained like {base} ({} {} against {v:.4}): the window, which keeps all but {} of the values, is conservative here, and leaving it cost nothing.",
                        r.metric().map_or(String::new(), |m| m.0),
                        r.metric().map_or("?".into(), |m| format!("{:.4}", m.1)),
                        threshold_percent(MAX_UNDERFLOW)
                    );
                }
                None if healthy && !runs.iter().any(|o| o.is_fp32() && o.summary.is_some()) => {
                    let _ = write!(
                        s,
                        " The run trained, and no FP32 run is in this report to say whether leaving the window cost anything: the window, which keeps all but {} of the values, is conservative.",
                        threshold_percent(MAX_UNDERFLOW)
                    );
                }
                None => {}
            }
        }
        None => s.push_str(" The run's loss scale stayed inside the window at every capture step."),
    }
    if !empty.is_empty() {
        if a.fit == Fit::NoOne {
            let _ = write!(s, " {empty_words}.");
        }
        s.push_str(" The figure has no band at a step with an empty window.");
    }
    if !no_finite.is_empty() {
        let _ = write!(
            s,
            " At {} of {} capture steps ({}) every gradient value stored was zero, inf or NaN: no finite gradient, no window, and no band in the figure.",
            no_finite.len(),
            r.captures.len(),
            steps_named(&no_finite)
        );
    }
    let range = format!("2^{}..2^{}", WINDOW_SCALES.start(), WINDOW_SCALES.end());
    let _ = write!(s, " (Windows searched over {range}.)");
    s
}
