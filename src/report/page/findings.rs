//! The findings of a run page: one sentence per thing worth saying, each with the figure that
//! shows it, computed from the runs' data.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::report::runs::{CaptureSummary, RunData, Shares};

/// A layer's gradient class at a capture step, and what rounding did to it.
type GradientShares = (String, Class, Shares);
use crate::recipe::Class;
use crate::report::section::Section;

/// A sentence of the findings, and the figure that shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The sentence, with its numbers.
    pub text: String,
    /// The id of the figure (an anchor of the page).
    pub figure: String,
}

pub(crate) fn window_name(w: &crate::stats::Recommendation) -> Option<String> {
    match (w.min_log2_scale, w.max_log2_scale) {
        (Some(lo), Some(hi)) if lo <= hi => Some(format!("2^{lo}..2^{hi}")),
        _ => None,
    }
}

/// How close to chance a metric may end and still be "at chance": within this share of the way
/// from chance to a perfect score (for ten balanced classes, below 19% accuracy).
pub const AT_CHANCE: f64 = 0.1;

/// A run's loss "ends far above" a reference's when the mean of its last losses is at least this
/// many times the reference's over the same steps ([`failed_to_train`]). The zoo's GPT-2 in fp16
/// without loss scaling ends 1.28x above FP32 on random tokens (7.09 against 5.55, ln 256: the
/// FP32 run learns the uniform predictor, the unscaled one not even that), while the committed
/// runs that trained end within 1.03x of theirs (swamping's fp16-pure: 2.289 against 2.237).
pub const LOSS_FAR_ABOVE: f64 = 1.2;

/// The last loss points a run's end is judged by: a tenth of its curve, at least 5 points.
fn last_losses(r: &RunData) -> &[(u64, f64)] {
    let p = &r.loss.points;
    &p[p.len().saturating_sub((p.len() / 10).max(5))..]
}

/// Whether a run uses loss scaling (its recipe's `loss_scaling` is not `none`).
fn scaled(r: &RunData) -> bool {
    r.config
        .pointer("/recipe/loss_scaling/kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "none")
}

/// The reference run of `runs` (FP32, or loss-scaled; finished, not diverged) whose loss `r`'s
/// ends far above, for runs with no metric to compare (the PyTorch recorder's): over `r`'s last
/// losses ([`last_losses`]), every one of `r`'s lies above every one of the reference's at the
/// same steps (beyond both runs' spread) and their mean is [`LOSS_FAR_ABOVE`] times the
/// reference's or more. Returns the reference's name and both means.
fn behind_in_loss<'a>(r: &RunData, runs: &'a [RunData]) -> Option<(&'a str, f64, f64)> {
    let last = last_losses(r);
    let (&(from, _), &(to, _)) = (last.first()?, last.last()?);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mine: Vec<f64> = last.iter().map(|p| p.1).collect();
    if mine.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let low = mine.iter().copied().fold(f64::INFINITY, f64::min);
    runs.iter()
        .filter(|o| o.dir != r.dir && o.complete && (o.is_fp32() || scaled(o)))
        .filter(|o| o.summary.as_ref().is_some_and(|s| !s.diverged))
        .filter_map(|o| {
            let theirs: Vec<f64> = o
                .loss
                .points
                .iter()
                .filter(|p| (from..=to).contains(&p.0))
                .map(|p| p.1)
                .collect();
            let high = theirs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let (a, b) = (mean(&mine), mean(&theirs));
            (!theirs.is_empty()
                && high.is_finite()
                && b > 0.0
                && low > high
                && a >= LOSS_FAR_ABOVE * b)
                .then_some((o.name.as_str(), a, b))
        })
        .min_by(|x, y| x.2.total_cmp(&y.2))
}

/// Why a run that did not diverge still failed to train, if it did (the report's findings and
/// table, and the demo, say it from this one rule): its loss grew many-fold (4x or more from its
/// first step to its last), its metric ended at chance (a tenth, `AT_CHANCE`, of the way from the
/// summary's chance level to a perfect score, or below), its metric ended far below another
/// run's of the same report (by half the metric's range or more), or, with no test accuracy to
/// compare, its loss ended far above an FP32 or loss-scaled run's: over its last losses (a
/// tenth of its curve, at least 5 points), every one above every one of the reference's at the
/// same steps, and their mean `LOSS_FAR_ABOVE` (1.2) times the reference's or more.
pub fn failed_to_train(r: &RunData, runs: &[RunData]) -> Option<String> {
    let s = r.summary.as_ref().filter(|s| r.complete && !s.diverged)?;
    let &(first_step, first) = r.loss.points.first()?;
    let metric = &s.eval_metric;
    let chance = metric.chance.filter(|&c| {
        c < 1.0 && metric.value.is_finite() && metric.value - c <= AT_CHANCE * (1.0 - c)
    });
    let best = runs
        .iter()
        .filter_map(|o| Some((&o.name, o.summary.as_ref()?)))
        .filter(|(_, o)| o.eval_metric.name == metric.name && o.eval_metric.value.is_finite())
        .max_by(|a, b| a.1.eval_metric.value.total_cmp(&b.1.eval_metric.value));
    let grew = first > 0.0 && s.final_loss.is_finite() && s.final_loss >= 4.0 * first;
    let behind = metric.name == "test_accuracy"
        && best.is_some_and(|(_, b)| b.eval_metric.value - metric.value >= 0.5);
    let behind_loss = (metric.name != "test_accuracy")
        .then(|| behind_in_loss(r, runs))
        .flatten();
    if !grew && !behind && chance.is_none() && behind_loss.is_none() {
        return None;
    }
    let d = crate::text::four_digits;
    let mut why = Vec::new();
    if grew {
        why.push(format!(
            "its loss grew from {first:.4} at step {first_step} to {:.4}",
            s.final_loss
        ));
    }
    if let Some((name, mine, theirs)) = behind_loss {
        let last = last_losses(r);
        why.push(format!(
            "its loss over steps {}..{} averages {} against {} for {name}, {:.2}x, every step above {name}'s",
            last[0].0,
            last[last.len() - 1].0,
            d(mine),
            d(theirs),
            mine / theirs
        ));
    }
    match (chance, best.filter(|_| behind)) {
        (Some(c), Some((name, b))) => why.push(format!(
            "its {} ends at chance, {:.4} (always predicting the test set's most common label scores {c:.4}), against {:.4} for {name}",
            metric.name, metric.value, b.eval_metric.value
        )),
        (Some(c), None) => why.push(format!(
            "its {} ends at chance, {:.4} (always predicting the test set's most common label scores {c:.4})",
            metric.name, metric.value
        )),
        (None, Some((name, b))) => why.push(format!(
            "its {} ends at {:.4} against {:.4} for {name}",
            metric.name, metric.value, b.eval_metric.value
        )),
        (None, None) => {}
    }
    Some(format!(
        "{} failed to train without diverging: {}.",
        r.name,
        why.join(", and ")
    ))
}

/// Where a rule says a finding: its sentence and the figure that shows it.
type Say<'a> = &'a mut dyn FnMut(String, &str);

/// One rule of the findings: what it says of run `i` of `runs`, if anything.
type Rule = fn(usize, &RunData, &[RunData], Say<'_>);

/// The rules, in the order the page says them for each run.
const RULES: [Rule; 14] = [
    unfinished,
    uncast,
    changed_after_the_run,
    diverged,
    failed,
    amax_jump,
    underflow,
    noise,
    shadow,
    outside,
    overflow,
    forward_overflow,
    intermediate_overflow,
    swamping,
];

/// The findings, most important first: every rule, run by run.
pub(crate) fn findings(runs: &[RunData]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut say = |text: String, figure: &str| {
        out.push(Finding {
            text,
            figure: figure.to_string(),
        });
    };
    for (i, r) in runs.iter().enumerate() {
        for rule in RULES {
            rule(i, r, runs, &mut say);
        }
    }
    out
}

/// Whether the run rounds its gradients (stores them in a format narrower than FP32): only then
/// are underflow, the shadow and the window worth a word.
fn rounds_gradients(r: &RunData) -> bool {
    r.formats
        .get(&Class::ActivationGrad)
        .is_some_and(|f| f != "fp32")
}

/// A run that did not finish: how far it got.
fn unfinished(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
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
}

/// A run whose trainer left the products of some weights uncast (in FP32) under a recipe that
/// casts the operands of products: which, so that FP32 is never read as the recipe's format.
fn uncast(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let Some(c) = r.summary.as_ref().and_then(|s| s.coverage.as_ref()) else {
        return;
    };
    if c.uncast.is_empty() {
        return;
    }
    const SHOWN: usize = 6;
    let mut names: Vec<String> = c.uncast.iter().take(SHOWN).cloned().collect();
    if c.uncast.len() > SHOWN {
        names.push(format!("{} more", c.uncast.len() - SHOWN));
    }
    say(
        format!(
            "{}: the products of {} ran uncast, in FP32, not in the recipe's operand formats; {}% of the scalars of the weights that formed products were cast ({} of {}).",
            r.name,
            crate::text::and_list(&names),
            crate::text::percent_of(c.cast_weights, c.product_weights),
            c.cast_weights,
            c.product_weights
        ),
        "loss",
    );
}

/// A finished run whose metrics do not hold its steps: its directory was changed afterwards.
fn changed_after_the_run(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
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
}

/// A run that diverged, with its final loss, skipped and overflow steps.
fn diverged(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
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
}

/// A run that failed to train without diverging ([`failed_to_train`]).
fn failed(_: usize, r: &RunData, runs: &[RunData], say: Say<'_>) {
    if let Some(text) = failed_to_train(r, runs) {
        say(text, "loss");
    }
}

/// The share of a gradient tensor's values that underflowed, less those below the noise floor
/// (every one of which underflows before any value above it).
fn underflow_above_noise(s: &Shares) -> f64 {
    (s.underflow - s.noise).max(0.0)
}

/// Where gradients underflowed first (1% or more of a tensor, noise aside), what the FP32 shadow saw, and the step's pooled window beside the run's scale; or that none did.
fn underflow(i: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
    // Underflow: the first capture step where a gradient tensor lost 1% or more.
    let worst = r.captures.iter().find_map(|c| {
        c.gradients
            .iter()
            .filter(|(_, _, s)| underflow_above_noise(s) >= 0.01)
            .max_by(|a, b| a.2.underflow.total_cmp(&b.2.underflow))
            .map(|g| (c, g))
    });
    if let Some((c, (layer, class, s))) = worst {
        let mut text = format!(
            "At step {}, {} of {layer}'s {} underflowed in {} ({n}).",
            c.step,
            crate::text::pct(s.underflow),
            class.name().replace('_', " ").replace("grad", "gradients"),
            r.counted_formats
                .get(class)
                .map_or("its format", String::as_str),
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
                if least >= 0.995 { "all".to_string() } else { format!("at least {}", crate::text::pct(least)) },
                shadow.iter().map(|p| p.layer.as_str()).collect::<Vec<_>>().join(", "),
                counted.map_or(String::new(), |u| format!(
                    ", while the rounding counts there show {} underflow: the zeros came from upstream",
                    crate::text::pct(u)
                )),
            );
        }
        // The window is of every layer's gradients pooled: said in its own sentence, never of
        // the one tensor's share above.
        let pooled = format!(
            "the step's gradients, every layer's pooled (all but {} kept)",
            crate::text::threshold_percent(crate::report::runs::MAX_UNDERFLOW)
        );
        let used = match crate::text::scale_name(c.loss_scale) {
            s if c.loss_scale == 1.0 => format!("{s} (no loss scaling)"),
            s => s,
        };
        let k = c.loss_scale.log2();
        match (
            window_name(&c.window),
            c.window.min_log2_scale,
            c.window.max_log2_scale,
        ) {
            (Some(w), _, _) if r.counted_formats.get(class).is_some_and(|f| f == "fp32") => {
                let _ = write!(
                    text,
                    " Stored in {}, loss scales {w} would keep {pooled}.",
                    r.grad_format
                );
            }
            (Some(w), Some(lo), Some(hi)) if f64::from(lo) <= k && k <= f64::from(hi) => {
                let _ = write!(
                    text,
                    " The run's loss scale, {used}, lay inside the window of {pooled}, {w}: the loss is confined to few tensors, which no scale of that window keeps."
                );
            }
            (Some(w), Some(lo), _) => {
                let _ = write!(
                    text,
                    " The window of {pooled}, was {w}; the run's loss scale, {used}, lay {} it.",
                    if k < f64::from(lo) { "below" } else { "above" }
                );
            }
            _ => {
                let _ = write!(
                    text,
                    " No single loss scale kept the step's gradients, every layer's pooled: see section {}.",
                    Section::Window.number()
                );
            }
        }
        say(text, &format!("underflow-{i}"));
    } else if !r.captures.is_empty() && rounds_gradients(r) {
        let aside = if noise_sites(r).is_some() {
            " (noise aside: below)"
        } else {
            ""
        };
        say(
            format!(
                "{n}: no gradient tensor lost 1% or more of its values to underflow at any capture step{aside}."
            ),
            &format!("shares-{i}"),
        );
    }
}

/// The first capture step where gradient tensors lost 1% or more of their values to underflow,
/// but under 1% above the noise floor, and those tensors (layer, class, share lost).
fn noise_sites(r: &RunData) -> Option<(&CaptureSummary, Vec<&GradientShares>)> {
    r.captures.iter().find_map(|c| {
        let sites: Vec<_> = c
            .gradients
            .iter()
            .filter(|(_, _, s)| s.underflow >= 0.01 && underflow_above_noise(s) < 0.01)
            .collect();
        (!sites.is_empty()).then_some((c, sites))
    })
}

/// Gradient tensors whose underflow is noise ([`crate::analysis::NOISE_LOG2`]), named as such.
fn noise(i: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let Some((c, sites)) = noise_sites(r) else {
        return;
    };
    const SHOWN: usize = 4;
    let mut names: Vec<String> = sites
        .iter()
        .take(SHOWN)
        .map(|(layer, class, s)| {
            format!(
                "{layer}'s {} ({})",
                class.name().replace('_', " ").replace("grad", "gradients"),
                crate::text::pct(s.underflow)
            )
        })
        .collect();
    if sites.len() > SHOWN {
        names.push(format!("{} more", sites.len() - SHOWN));
    }
    say(
        format!(
            "{}: at step {}, {} lost to underflow values below the noise floor, 2^-{} of the step's largest gradient: FP32 rounding residue of a truly zero gradient (such as an attention key bias's: softmax is shift-invariant), which no loss scale need keep; left out of the underflow findings.",
            r.name,
            c.step,
            crate::text::and_list(&names),
            crate::analysis::NOISE_LOG2
        ),
        &format!("underflow-{i}"),
    );
}

/// A rise of `grad_amax` by many binades from one step to the next
/// ([`crate::report::runs::AMAX_JUMP_BINADES`]): where, and who made it.
fn amax_jump(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let Some(j) = r.amax_jumps.first() else {
        return;
    };
    let at = j.tensor.as_ref().map_or(
        "the step was not captured, so the tensor is not known".to_string(),
        |(layer, class)| format!("largest in {layer}'s {}", class.name().replace('_', " ")),
    );
    let more = match r.amax_jumps.len() {
        1 => String::new(),
        k => format!("; {} such rises in all", k),
    };
    let cause = if j.loss.is_finite() {
        let who = if r.config.get("source").and_then(Value::as_str) == Some("pytorch") {
            "PyTorch's own backward produced it"
        } else {
            "the backward pass produced it"
        };
        format!(
            " The loss stayed finite ({}) and grad_amax is unscaled, so neither the forward pass nor the loss scale explains it: {who}.",
            crate::text::four_digits(j.loss)
        )
    } else {
        " The step's loss was not finite.".to_string()
    };
    say(
        format!(
            "{}: at step {}, grad_amax rose {:.1} binades in one step, from {:.3e} to {:.3e} ({at}{more}).{cause}",
            r.name,
            j.step,
            (j.to / j.from).log2(),
            j.from,
            j.to
        ),
        "window",
    );
}

/// Against the FP32 shadow: steps with nothing to compare, or that under 1% of every layer's gradient norm was lost.
fn shadow(i: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
    if !r.shadow.is_empty() && rounds_gradients(r) {
        // Where the run's (or the shadow's) gradients were not finite, nothing is compared.
        let compared: Vec<_> = r
            .shadow
            .iter()
            .filter(|p| p.relative_error.is_finite())
            .collect();
        let worst = compared.iter().map(|p| p.norm_lost).fold(0.0, f64::max);
        let steps = |points: &[&crate::report::runs::ShadowPoint]| {
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
                    crate::text::pct(worst),
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
}

/// Whether a run trained like an FP32 run of the same report: it finished without diverging or
/// failing to train, and its final metric is within [`crate::report::grid::MATCH_TOLERANCE`] of
/// the FP32 run's (test accuracy; for another metric, within that share of its value). Returns
/// the FP32 run's name and metric; `None` when it did not, or when no FP32 run is there to say.
pub(crate) fn matched_fp32<'a>(r: &RunData, runs: &'a [RunData]) -> Option<(&'a str, f64)> {
    let s = r.summary.as_ref().filter(|s| r.complete && !s.diverged)?;
    if failed_to_train(r, runs).is_some() || r.is_fp32() {
        return None;
    }
    let tolerance = crate::report::grid::MATCH_TOLERANCE;
    runs.iter().filter(|o| o.is_fp32()).find_map(|o| {
        let b = o.summary.as_ref()?;
        let (m, base) = (&s.eval_metric, &b.eval_metric);
        let allowed = if m.name == "test_accuracy" {
            tolerance
        } else {
            tolerance * base.value.abs()
        };
        (m.name == base.name && (m.value - base.value).abs() <= allowed)
            .then_some((o.name.as_str(), base.value))
    })
}

/// The capture steps whose loss scale was outside the window, weighed against the scale
/// predicted to train like fp32; said only when the run's outcome differs (it diverged, failed
/// to train, or ended apart from an FP32 run of the report). Outside the window and trained like
/// fp32, a run shows the window conservative, which section 6 says; with no FP32 run to compare
/// with, nothing shows a cost, and section 6 says that too.
fn outside(_: usize, r: &RunData, runs: &[RunData], say: Say<'_>) {
    let n = &r.name;
    let outside = outside_window(r);
    let healthy =
        !r.summary.as_ref().is_some_and(|s| s.diverged) && failed_to_train(r, runs).is_none();
    let differs = !healthy
        || (matched_fp32(r, runs).is_none()
            && runs.iter().any(|o| o.is_fp32() && o.summary.is_some()));
    if let (Some(first), true, true) = (outside.first(), rounds_gradients(r), differs) {
        // Against the scale predicted to train like fp32 from an fp32 run's gradients.
        let predicted = runs.iter().filter_map(|q| q.predicted_min_log2_scale).max();
        let lowest = outside
            .iter()
            .map(|c| c.loss_scale)
            .fold(f64::INFINITY, f64::min);
        let verdict = match predicted {
            Some(p) if lowest < crate::format::pow2(p) => format!(
                "; below 2^{p}, the scale from which training is predicted to match fp32, at {}",
                crate::text::scale_name(lowest)
            ),
            Some(p) => format!(
                "; every one at or above 2^{p}, the scale from which training is predicted to match fp32: underflow does not explain how it ended"
            ),
            None => String::new(),
        };
        say(
            format!(
                "{n}: the loss scale was outside the window at {} of {} capture steps (first at step {}: {} against {}){verdict}.",
                outside.len(),
                r.captures.len(),
                first.step,
                crate::text::scale_name(first.loss_scale),
                window_name(&first.window).unwrap_or_default()
            ),
            "window",
        );
    }
}

/// Steps with inf or NaN gradients, the skipped ones, and where the first inf or NaN was stored.
fn overflow(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
    if r.overflow.count > 0 {
        let earliest = r.nonfinite.iter().min_by_key(|s| s.first);
        let mut site = earliest.map_or(String::new(), |s| {
            format!(
                "; the first inf or NaN was stored at step {} in {} {}{}",
                s.first,
                s.layer,
                s.tensor.name(),
                s.op.as_ref().map_or(String::new(), |op| format!(" ({op})"))
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
}

/// Overflow in the forward pass, which no loss scale reaches (the scale multiplies the loss
/// after it): a site of the activations where a step's first inf or NaN was stored, with the
/// symptom a dynamic scaler shows (its scale halving on each of those steps).
fn forward_overflow(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    // An activation that only carried on a weight an earlier step's update made inf or NaN
    // did not form it: then the update is where the run's overflow began.
    let earliest = r.nonfinite.iter().map(|s| s.first).min();
    let updated = r
        .nonfinite
        .iter()
        .filter(|s| s.tensor != Class::Activation && s.tensor != Class::ActivationGrad)
        .map(|s| s.first)
        .min();
    if updated.is_some() && updated == earliest {
        return;
    }
    for s in r.nonfinite.iter().filter(|s| s.tensor == Class::Activation) {
        let halved: Vec<f64> = r
            .skip_marks
            .iter()
            .filter(|(step, _)| (s.first..=s.last).contains(step))
            .map(|&(_, scale)| scale)
            .collect();
        let spiral = match (halved.first(), halved.last()) {
            (Some(a), Some(b)) if halved.len() >= 3 => format!(
                " The scaler skipped {} of these steps, halving its scale each time ({} to {}): \
                 that spiral is the symptom, not a scale too high.",
                halved.len(),
                crate::text::scale_name(*a),
                crate::text::scale_name(b / 2.0)
            ),
            _ => String::new(),
        };
        say(
            format!(
                "{}: on {} step{} (the first {}) the forward pass formed an inf or NaN in {}{}, beyond any loss scale's reach: the scale multiplies the loss only after the forward pass.{spiral} Compute that operation in a wider format (FP32 or BF16) or bound its inputs.",
                r.name,
                s.steps,
                if s.steps == 1 { "" } else { "s" },
                s.first,
                s.layer,
                s.op.as_ref().map_or(String::new(), |op| format!(" ({op})")),
            ),
            "loss-scale",
        );
    }
}

/// Overflow no loss scale avoids: an autograd node whose formula formed an inf or NaN from finite
/// gradients, and again from zero ones (the PyTorch recorder's `intermediate_overflow`).
fn intermediate_overflow(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    for (node, (steps, first)) in &r.intermediate_overflow {
        say(
            format!(
                "{}: on {steps} step{} (the first {first}) the backward formula of {node} formed an inf or NaN from finite gradients, and formed it again from zero gradients: a value inside the formula overflows whatever the loss scale, so no scale avoids these steps' overflow; compute the operation this node differentiates in FP32.",
                r.name,
                if *steps == 1 { "" } else { "s" }
            ),
            "loss-scale",
        );
    }
}

/// Updates that changed no weight, when they are 10% or more on average (swamping).
fn swamping(_: usize, r: &RunData, _: &[RunData], say: Say<'_>) {
    let n = &r.name;
    let lost: Vec<f64> = r.updates_lost.points.iter().map(|p| p.1).collect();
    let mean = lost.iter().sum::<f64>() / lost.len().max(1) as f64;
    if mean >= 0.1 {
        say(
            format!(
                "{n}: on average {} of the nonzero updates of weights with a nonzero gradient changed no weight (swamping in the {}-bit-mantissa master weights).",
                crate::text::pct(mean),
                r.master_mantissa_bits
            ),
            "updates-lost",
        );
    }
}

/// The capture steps whose loss scale was outside that step's window.
pub(crate) fn outside_window(r: &RunData) -> Vec<&CaptureSummary> {
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
