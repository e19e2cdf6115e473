//! The grid report's findings in words, from its cells, window and edges.

use crate::run::grid::LOSS_SCALE;
use crate::stats::recommend::StepRule;

use super::*;

impl GridReport {
    /// The series trained once for every value of the x key.
    pub(super) fn inert_series(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.cells.iter().filter(|c| c.inert) {
            if !out.contains(&c.series) {
                out.push(c.series.clone());
            }
        }
        out
    }

    /// What the runs trained once stand for, in words; `None` when there are none.
    pub(super) fn trained_once(&self) -> Option<String> {
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
            crate::text::and_list(&once),
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

    /// Each compared series' matching range, for a loss-scale grid.
    pub(super) fn edges(&self) -> Vec<SeriesEdge> {
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

    /// The window of the fp32 runs as `(lo, hi)`, when it is not empty.
    fn window_edges(&self) -> Option<(i32, i32)> {
        self.window.as_ref().and_then(|w| {
            let (lo, hi) = (w.window.min_log2_scale?, w.window.max_log2_scale?);
            (lo <= hi).then_some((lo, hi))
        })
    }

    /// The findings: each rule's, in the order the page says them.
    pub(super) fn findings(&self) -> Vec<String> {
        let rules: [fn(&GridReport) -> Vec<String>; 6] = [
            GridReport::unfinished_runs,
            GridReport::one_seed,
            GridReport::trained_once_finding,
            GridReport::window_finding,
            GridReport::edge_findings,
            GridReport::series_findings,
        ];
        rules.iter().flat_map(|rule| rule(self)).collect()
    }

    /// Runs that have not finished.
    fn unfinished_runs(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unfinished.is_empty() {
            out.push(format!(
                "{} of the {} runs have not finished: the statistics use the finished ones.",
                self.unfinished.len(),
                self.runs
            ));
        }
        out
    }

    /// A grid of one seed has no statistics.
    fn one_seed(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.seeds < 2 {
            out.push(
                "One seed per combination: no confidence intervals or tests (run the grid with --seeds 5)."
                    .into(),
            );
        }
        out
    }

    /// What the runs trained once stand for.
    fn trained_once_finding(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(once) = self.trained_once() {
            out.push(once);
        }
        out
    }

    /// The fp32 runs' window, or that there is none.
    fn window_finding(&self) -> Vec<String> {
        let mut out = Vec::new();
        let window = self.window_edges();
        if let Some(w) = &self.window {
            out.push(match window {
                Some((lo, hi)) => format!(
                    "From the fp32 runs' captured gradients ({} runs at loss scale {}, {} capture steps pooled), analyze's loss-scale window for {} is 2^{lo}..2^{hi} (at most 0.1% of the values underflow, none overflows); it is drawn over the curves.",
                    w.runs,
                    crate::text::scale_name(w.loss_scale),
                    w.captures,
                    w.format
                ),
                None => format!(
                    "The fp32 runs' captured gradients ({} capture steps) leave no loss-scale window for {}: no single scale keeps underflow within 0.1% without overflow.",
                    w.captures, w.format
                ),
            });
        }
        out
    }

    /// Per series: where re-training matched fp32, against the predicted edge and the window.
    fn edge_findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let window = self.window_edges();
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
        out
    }

    /// Per series: where its metric differs from fp32's (Welch), inside and outside the window.
    fn series_findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let window = self.window_edges();
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
                    p_value(w.map_or(f64::NAN, |w| w.p_value)),
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
                            p_value(c.metric_vs_fp32.map_or(f64::NAN, |w| w.p_value))
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
}
