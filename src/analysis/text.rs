//! An [`Analysis`] in words and tables.
//!
//! One unit per table: a table of counts and magnitudes, a table of log2 scales, and tables of
//! percentages (shares of values, of the squared norm, and the relative error, all in percent).
//! A share is printed with its digits, never rounded to 0 or to 100 unless it is exactly that:
//!
//! ```text
//! 0 -> "0"   1 of 2 -> "50.0"   3 of 1000 -> "0.30"   1 of 4e6 -> "2.50e-5"   999999 of 1e6 -> "99.9999"   1 -> "100"
//! ```

use std::io::Write;
use std::path::Path;

use super::{Advice, Analysis, Limit, TensorAnalysis, ValueSummary, Window};
use crate::stats::{Alternative, Recommendation, explain};
use crate::text::{magnitude, percent, percent_of, printable, table};

/// A window in words: `2^a..2^b`, or why it is empty.
#[must_use]
pub fn window_words(w: &Window, max_underflow: f64) -> String {
    let pct = crate::text::threshold_percent(max_underflow);
    crate::stats::recommend::window_words(w.min_log2_scale, w.max_log2_scale, &pct, "the range")
}

/// The recommendation in words, with the numbers: the window and why, what to give
/// `GradScaler`, a warning within 2x of overflow, and the tensors the pooled window leaves out.
/// `alternatives` are the per-tensor windows and wider formats shown when no single scale works.
#[must_use]
pub fn explanation(a: &Analysis, alternatives: &(Vec<Alternative>, Vec<Alternative>)) -> String {
    let o = &a.options;
    let t = &a.total.values;
    let Some(r) = &a.recommendation else {
        return if t.count == 0 {
            "Nothing to scale: the tensors hold no values, so no loss scale changes anything."
                .to_string()
        } else if a.dump.overflowed {
            format!(
                "Nothing to scale: this dump comes from a step whose gradients overflowed, and \
                 none of the {} values is finite and nonzero ({} zero, {} NaN or infinite). Dump \
                 a step that did not overflow (one the scaler did not skip), with autocast off \
                 for that step, and analyse that.",
                t.count, t.zeros, t.nonfinite
            )
        } else {
            format!(
                "Nothing to scale: none of the {} values is finite and nonzero ({} zero, {} NaN \
                 or infinite), so no loss scale changes them.",
                t.count, t.zeros, t.nonfinite
            )
        };
    };
    let zeros = zeros_words(a);
    if a.dump.overflowed {
        return overflowed_words(a, r) + &zeros;
    }
    let fmt = a.format;
    let n = t.sweep.finite_nonzero();
    let pct = crate::text::threshold_percent(o.max_underflow);
    let headroom = if o.margin == 0 {
        String::new()
    } else {
        format!(" with {} bits of headroom", o.margin)
    };
    let settles = r.grad_scaler.settles_log2_scale;
    let over = format!(
        "amax {:.3e} overflows {fmt} from 2^{}",
        t.sweep.amax, r.overflow_log2_scale
    );
    let rec = Recommendation {
        log2_scale: r.log2_scale,
        min_log2_scale: r.min_log2_scale,
        max_log2_scale: r.max_log2_scale,
    };
    // Where one step's overflow bounds the window, a run starts below the bound: said first.
    let start = match (r.works, r.limited_by, r.grad_scaler.log2_init_scale) {
        (true, Limit::Overflow, Some(init)) => {
            let narrow = match r.min_log2_scale {
                Some(lo) if init < lo => format!(
                    ", though below the window's low edge 2^{lo} more than {} of this step's \
                     values underflow: its window is narrower than a run's growth",
                    crate::text::threshold_percent(o.max_underflow)
                ),
                _ => String::new(),
            };
            format!(
                "For a training run in {fmt}, start the loss scale at 2^{init} \
                 (torch.amp.GradScaler(init_scale=2.0**{init})), {} binades below what this step \
                 allows: a run's largest gradient grows past one step's (on the model zoo's \
                 GPT-2, BERT and ViT by up to 2.5 binades in 300 steps){narrow}. ",
                r.grad_scaler.settles_log2_scale - init
            )
        }
        _ => String::new(),
    };
    let mut s = start
        + &match (r.works, r.limited_by, r.log2_scale) {
            (false, _, _) | (true, Limit::Overflow, _) | (true, _, None) => explain(
                fmt,
                &t.sweep,
                &rec,
                o.margin,
                o.max_underflow,
                &alternatives.0,
                &alternatives.1,
            ),
            (true, Limit::Scales, Some(k)) => {
                let (lo, hi) = (r.min_log2_scale.unwrap_or(k), r.max_log2_scale.unwrap_or(k));
                let error = |k: i32| {
                    t.sweep
                        .row(k)
                        .and_then(|row| row.relative_error)
                        .map_or("?".into(), |e| format!("{}%", percent(e)))
                };
                if r.scaling_needed && lo <= 0 {
                    // Nothing underflows unscaled: the values are subnormal there.
                    let sub = t.sweep.row(0).map_or(0, |row| row.subnormal);
                    format!(
                        "Use a loss scale of 2^{k} for {fmt}: no scale from 2^{lo} to 2^{hi} \
                     underflows more than {pct} of the {n} finite nonzero values, but at 2^0 \
                     {sub} of them are subnormal, stored with fewer significant bits (relative \
                     error {} of the norm, {} at 2^{k}); only the top of --scales bounds the \
                     window ({over}{headroom}).",
                        error(0),
                        error(k)
                    )
                } else if r.scaling_needed {
                    format!(
                        "Any loss scale from 2^{lo} to 2^{hi} works for {fmt}: below 2^{lo} more \
                     than {pct} of the {n} finite nonzero values underflow, and only the top of \
                     --scales bounds the window ({over}{headroom})."
                    )
                } else {
                    let under = t.sweep.row(0).map_or(0, |row| row.underflow);
                    format!(
                        "Loss scaling is unnecessary for {fmt}: at 2^0 (no scaling) {under} of the \
                     {n} finite nonzero values underflow (at most {pct} allowed), and any scale \
                     from 2^{lo} to 2^{hi} works; only the top of --scales bounds the window \
                     ({over}{headroom})."
                    )
                }
            }
        };
    if let (false, Limit::Overflow, Some(lo)) = (r.scaling_needed, r.limited_by, r.min_log2_scale) {
        s += &format!(
            " (2^0 would do too: underflow is within {pct} from 2^{lo} up; the largest safe \
             scale keeps the most small values.)"
        );
    }
    if r.works {
        s += &match (r.limited_by, r.grad_scaler.log2_init_scale) {
            (Limit::Scales, _) if !r.scaling_needed => " No GradScaler is needed.".to_string(),
            (Limit::Scales, Some(init)) => {
                format!(" For torch.amp.GradScaler: init_scale=2.0**{init}.")
            }
            (Limit::Overflow, Some(_)) => {
                // Where the run settles is its own gradients' to say, not this step's.
                let from_default = match settles {
                    s if s < 16 => format!(
                        "; from the default init_scale 2^16 it would skip at least {} step{} \
                         backing off",
                        16 - s,
                        if s == 15 { "" } else { "s" }
                    ),
                    _ => String::new(),
                };
                format!(
                    " A dynamic scaler grows from there, every growth_interval clean steps, up \
                     to the run's own overflow boundary, which this step puts at 2^{} ({over}) \
                     and a recorded run shows (mixprec.torch.Recorder, then mixprec \
                     report){from_default}.",
                    r.overflow_log2_scale
                )
            }
            (_, None) => String::new(),
        };
    } else if r.overflow_log2_scale > o.lo {
        let under = t.sweep.row(settles).map_or_else(
            || "an unknown share (outside --scales)".to_string(),
            |row| format!("{}%", percent_of(row.underflow, n)),
        );
        s += &format!(
            " A dynamic GradScaler could rise no higher than 2^{settles}, the largest power of \
             two below this step's overflow boundary ({over}), where {under} of the values \
             underflow."
        );
    }
    if let (true, true, Some(k), Some(init)) = (
        r.works,
        r.near_overflow,
        r.log2_scale,
        r.grad_scaler.log2_init_scale,
    ) {
        // Said as what it is, not as a warning: the window's top is within 2x of overflow by
        // construction, for every healthy set of gradients.
        s += &format!(
            " As a static scale, 2^{k} (the window's top) has no headroom: amax x 2^{} overflows \
             {fmt}, so a later step whose largest gradient is twice this one's would be skipped; \
             2^{init} leaves {} binades for such growth.",
            k + 1,
            k - init
        );
    }
    s += &predicted_words(r, &fmt, o.lo);
    s += &excluded_words(a, r);
    s += &noise_words(a);
    s + &zeros
}

/// The tensors left out as noise ([`super::NOISE_LOG2`]), named as such.
fn noise_words(a: &Analysis) -> String {
    let noise: Vec<&super::TensorWindow> = a.windows.iter().filter(|w| w.noise).collect();
    let Some(floor) = super::noise_floor(a.total.values.sweep.amax).filter(|_| !noise.is_empty())
    else {
        return String::new();
    };
    let several = a.several_files();
    let shown: Vec<String> = noise
        .iter()
        .take(5)
        .map(|w| {
            let t = &a.tensors[w.index];
            let why = if t.values.sweep.amax < floor {
                format!("all its values: amax {}", magnitude(t.values.sweep.amax))
            } else {
                format!(
                    "the {}% of its values that underflow at 2^{}",
                    percent(w.underflow_share),
                    w.at_log2_scale
                )
            };
            format!("{} ({why})", t.label(several))
        })
        .collect();
    let more = noise.len() - shown.len();
    format!(
        " Left out as noise (values below {}, 2^-{} of the pooled amax's power of two, where FP32 \
         rounding residue of a truly zero gradient lies, such as an attention key bias's: softmax \
         is shift-invariant; no loss scale matters to them): {}{}.",
        magnitude(floor),
        super::NOISE_LOG2,
        shown.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        },
    )
}

/// The advice for a dump that holds inf or NaN: its step overflowed, so its finite values are
/// survivors whose amax understates the step's; a back-off below the largest scale they allow,
/// never that scale.
fn overflowed_words(a: &Analysis, r: &Advice) -> String {
    let (t, fmt) = (&a.total.values, a.format);
    let lost = if a.dump.no_finite_tensors.is_empty() {
        String::new()
    } else {
        let n = a.dump.no_finite_tensors.len();
        let shown: Vec<&str> = a
            .dump
            .no_finite_tensors
            .iter()
            .take(5)
            .map(String::as_str)
            .collect();
        format!(
            "; {n} of the {} tensors {} no finite value at all ({}{})",
            a.tensors.len(),
            if n == 1 { "holds" } else { "hold" },
            shown.join(", "),
            if n > shown.len() { ", ..." } else { "" }
        )
    };
    let k_over = r.overflow_log2_scale;
    let backoff = match r.log2_scale {
        Some(k) => format!(
            "Back off: start at most at 2^{k} (torch.amp.GradScaler(init_scale=2.0**{k})), a \
             halving below that, and let a dynamic scaler halve again on every step that still \
             overflows."
        ),
        None => format!(
            "Back off below the lowest of --scales (2^{}): even it is not a halving below the \
             largest scale the surviving values allow.",
            a.options.lo
        ),
    };
    format!(
        "This dump comes from a step whose gradients overflowed: {} of the {} values ({}%) are \
         inf or NaN{lost}. No loss scale is recommended from it as if the step were healthy: the \
         values lost were the largest (or were made NaN by them), so the {} finite values left \
         understate where overflow starts. Their amax {:.3e} overflows {fmt} from 2^{k_over}, so \
         if the file holds the unscaled gradients (scaler.unscale_ before the dump), the scale \
         that overflowed was at most 2^{}, and the step's own values needed less. {backoff} To \
         choose a scale, dump a step that did not overflow (one the scaler did not skip), with \
         autocast off for that step, and analyse that.",
        t.nonfinite,
        t.count,
        percent_of(t.nonfinite, t.count),
        t.count - t.nonfinite,
        t.sweep.amax,
        k_over - 1,
    )
}

/// A warning when far more values are exactly zero than in an FP32 dump
/// ([`super::TYPICAL_MAX_ZERO_SHARE`]).
fn zeros_words(a: &Analysis) -> String {
    if !a.dump.many_zeros {
        return String::new();
    }
    let t = &a.total.values;
    format!(
        " Note: {} of the {} values ({}%) are exactly zero, more than the {} of any FP32 dump \
         measured (README): if they were dumped from a step under fp16 autocast, its backward \
         pass may already have flushed small gradients to zero, which this analysis cannot see \
         (its shares are of the nonzero values, so it understates underflow); dump that step \
         with autocast off and compare.",
        t.zeros,
        t.count,
        percent_of(t.zeros, t.count),
        crate::text::threshold_percent(super::TYPICAL_MAX_ZERO_SHARE),
    )
}

/// The tensors whose own window excludes the recommended scale, worst first.
/// Where training is predicted to match FP32, beside the window.
fn predicted_words(r: &Advice, fmt: &crate::format::FloatFormat, lowest: i32) -> String {
    use crate::stats::recommend::{MATCH_MAX_ENERGY_LOST, MATCH_MAX_UNDERFLOW};
    use crate::text::threshold_percent;
    let from = |k: Option<i32>| match (k, r.max_log2_scale) {
        (Some(k), Some(_)) if k == lowest => {
            format!("from 2^{k} up (the lowest of --scales: perhaps from lower)")
        }
        (Some(k), Some(hi)) if k <= hi => format!("from 2^{k} up"),
        (Some(k), _) => format!("only from 2^{k}, above every scale that keeps amax finite"),
        (None, _) => "at no scale of the range".to_string(),
    };
    let conservative = match (r.min_log2_scale, r.predicted_min_log2_scale) {
        (Some(lo), Some(p)) if lo > p => format!("; the window's 2^{lo} is the conservative edge"),
        _ => String::new(),
    };
    let (adam, sgd) = (r.predicted_min_log2_scale, r.predicted_min_log2_scale_sgd);
    let scales = if adam == sgd {
        format!("{} with Adam and SGD alike", from(adam))
    } else {
        format!("{} with Adam and {} with SGD", from(adam), from(sgd))
    };
    format!(
        " Training in {fmt} is predicted to match fp32 {scales} (underflow takes at most {} of \
         the squared norm there, and with Adam at most {} of the values: within one binade of \
         re-training on mixprec's loss-scale grids){conservative}.",
        threshold_percent(MATCH_MAX_ENERGY_LOST),
        threshold_percent(MATCH_MAX_UNDERFLOW),
    )
}

fn excluded_words(a: &Analysis, r: &Advice) -> String {
    let (Some(k), false) = (r.log2_scale, r.excluded_tensors.is_empty()) else {
        return String::new();
    };
    let several = a.several_files();
    let shown: Vec<String> = a
        .windows
        .iter()
        .filter(|w| w.excludes_recommended && !w.noise)
        .take(5)
        .map(|w| {
            let t = &a.tensors[w.index];
            format!(
                "{} ({}% of its values underflow at 2^{k}; its own window {})",
                t.label(several),
                percent(w.underflow_share),
                window_words(&w.window, a.options.max_underflow)
            )
        })
        .collect();
    let more = r.excluded_tensors.len().saturating_sub(shown.len());
    let tail = if more > 0 {
        format!("; and {more} more")
    } else {
        String::new()
    };
    format!(
        " But the pooled window hides {} tensor{} whose own window excludes 2^{k}: {}{tail}.",
        r.excluded_tensors.len(),
        if r.excluded_tensors.len() == 1 {
            ""
        } else {
            "s"
        },
        shown.join("; ")
    )
}

/// Writes the tables and the explanation (what `mixprec analyze` prints).
///
/// # Errors
/// Whatever writing to `out` reports.
pub fn write_tables(out: &mut dyn Write, a: &Analysis) -> std::io::Result<()> {
    let cols = TensorColumns {
        several_files: a.several_files(),
    };

    writeln!(
        out,
        "Tensors (count, zeros, nonfinite: numbers of values; amax, min |x|: magnitudes):\n"
    )?;
    let cells = |dtype: String, v: &ValueSummary, min_nonzero: Option<f64>| {
        vec![
            dtype,
            v.count.to_string(),
            v.zeros.to_string(),
            v.nonfinite.to_string(),
            v.amax.map_or("-".into(), magnitude),
            min_nonzero.map_or("-".into(), magnitude),
        ]
    };
    let mut rows = cols.rows(&a.tensors, |t| {
        cells(t.dtype.to_string(), &t.values, t.min_nonzero)
    });
    if a.tensors.len() > 1 {
        let total = &a.total;
        rows.push(cols.all(cells(String::new(), &total.values, total.min_nonzero)));
    }
    table(
        out,
        &cols.head(&["dtype", "count", "zeros", "nonfinite", "amax", "min |x|"]),
        &rows,
    )?;
    for s in &a.skipped {
        writeln!(
            out,
            "skipped {} in {}: unsupported dtype {}",
            printable(&s.name),
            printable(&s.path.display().to_string()),
            s.dtype
        )?;
    }

    let Some(r) = a.recommendation.as_ref() else {
        // Nothing to scale: every share below would be 0 of 0.
        return writeln!(out, "\nlog2_scale: none\n{}", a.explanation);
    };
    let at = a.windows.first().map_or(a.options.lo, |w| w.at_log2_scale);
    if a.tensors.len() > 1 && !a.windows.is_empty() {
        let rec = r.log2_scale.filter(|_| r.works);
        writeln!(
            out,
            "\nEach tensor's own window, worst first (log2 loss scales k, scale = 2^k):\n"
        )?;
        let show = |k: Option<i32>| k.map_or("none".into(), |k| k.to_string());
        // A window bounded by the range of --scales rather than by the tensor: marked, since
        // the tensor's own window reaches past it.
        let (lo, hi, margin) = (a.options.lo, a.options.hi, a.options.margin);
        let mut at_edge = false;
        let rows: Vec<Vec<String>> = a
            .windows
            .iter()
            .map(|w| {
                let (low, high) = (w.window.min_log2_scale, w.window.max_log2_scale);
                let low = match low {
                    Some(k) if k == lo => {
                        at_edge = true;
                        format!("<={k}")
                    }
                    k => show(k),
                };
                let high = match high {
                    Some(k)
                        if k == hi
                            && i64::from(w.window.overflow_log2_scale)
                                > i64::from(k) + 1 + i64::from(margin) =>
                    {
                        at_edge = true;
                        format!(">={k}")
                    }
                    k => show(k),
                };
                let note = match (w.window.works, rec) {
                    _ if w.noise => "noise".to_string(),
                    (false, _) => "no window of its own".to_string(),
                    (true, Some(k)) if w.excludes_recommended => format!("excludes {k}"),
                    (true, Some(k)) => format!("holds {k}"),
                    (true, None) => String::new(),
                };
                let cells = vec![low, high, w.window.overflow_log2_scale.to_string(), note];
                cols.row(&a.tensors[w.index], cells)
            })
            .collect();
        table(
            out,
            &cols.head(&["lowest k", "highest k", "overflows from k", "recommended k"]),
            &rows,
        )?;
        if at_edge {
            writeln!(
                out,
                "\n<=k, >=k: the edge of --scales {lo}..{hi}; the tensor's own window may reach past it."
            )?;
        }
    }

    writeln!(
        out,
        "\nAt 2^{at} in {}, per tensor{} (% of each tensor's finite nonzero values; energy lost: \
         % of its squared norm; rel. error: % of its norm):\n",
        a.format,
        if a.tensors.len() > 1 {
            ", worst first"
        } else {
            ""
        }
    )?;
    let order: Vec<usize> = a
        .windows
        .iter()
        .map(|w| w.index)
        .chain((0..a.tensors.len()).filter(|i| a.tensors[*i].window.is_none()))
        .collect();
    let share_cells = |s: &crate::stats::Sweep| -> Vec<String> {
        let n = s.finite_nonzero();
        match s.row(at) {
            Some(row) if n > 0 => row_shares(row, n),
            _ => vec!["-".to_string(); 6],
        }
    };
    let tensors = order.iter().map(|&i| &a.tensors[i]);
    let mut rows = cols.rows(tensors, |t| share_cells(&t.values.sweep));
    if a.tensors.len() > 1 {
        rows.push(cols.all(share_cells(&a.total.values.sweep)));
    }
    let share_cols = [
        "underflow",
        "subnormal",
        "normal",
        "overflow",
        "energy lost",
        "rel. error",
    ];
    table(out, &cols.head(&share_cols), &rows)?;

    let n = a.total.values.sweep.finite_nonzero();
    writeln!(
        out,
        "\nSweep of all tensors together (% of the {n} finite nonzero values; energy lost: % of \
         the squared norm; rel. error: % of the norm):\n"
    )?;
    let rows: Vec<Vec<String>> = a
        .total
        .values
        .sweep
        .rows
        .iter()
        .map(|row| {
            let k = row.log2_scale;
            let mark = if !r.works {
                ""
            } else if Some(k) == r.log2_scale {
                // An overflowed dump's scale is a ceiling to back off from, not a choice.
                if a.dump.overflowed {
                    "<- back off to at most"
                } else {
                    "<- recommended"
                }
            } else if r.min_log2_scale.is_some_and(|lo| lo <= k)
                && r.max_log2_scale.is_some_and(|hi| k <= hi)
            {
                "window"
            } else {
                ""
            };
            let mut cells = vec![k.to_string()];
            cells.extend(row_shares(row, n));
            cells.push(mark.to_string());
            cells
        })
        .collect();
    let mut header = vec!["log2 scale"];
    header.extend_from_slice(&share_cols);
    header.push("");
    table(out, &header, &rows)?;

    let show = |v: Option<i32>| v.map_or("none".into(), |k| k.to_string());
    writeln!(
        out,
        "\nlog2_scale: {}   min_log2_scale: {}   max_log2_scale: {}   predicted_min_log2_scale: {}   \
         predicted_min_log2_scale_sgd: {}",
        show(r.log2_scale),
        show(r.min_log2_scale),
        show(r.max_log2_scale),
        show(r.predicted_min_log2_scale),
        show(r.predicted_min_log2_scale_sgd)
    )?;
    writeln!(out, "{}", a.explanation)
}

/// A sweep row's shares, as the tables print them: underflow, subnormal, normal and overflow in
/// percent of the `n` finite nonzero values, then the energy lost and the relative error.
fn row_shares(row: &crate::stats::SweepRow, n: u64) -> Vec<String> {
    vec![
        percent_of(row.underflow, n),
        percent_of(row.subnormal, n),
        percent_of(row.normal, n),
        percent_of(row.overflow, n),
        percent(row.energy_lost),
        row.relative_error.map_or("inf".into(), percent),
    ]
}

/// A tensor as the leading columns of a table show it.
pub(super) trait Labeled {
    /// Its name in its file, and the file.
    fn name_and_file(&self) -> (&str, &Path);
}

impl Labeled for TensorAnalysis {
    fn name_and_file(&self) -> (&str, &Path) {
        (&self.name, &self.file)
    }
}

/// The leading columns of a per-tensor table: `tensor`, and `file` when the tensors come from
/// several files (the block tables have the same).
#[derive(Clone, Copy)]
pub(super) struct TensorColumns {
    /// Whether there is a file column.
    pub(super) several_files: bool,
}

impl TensorColumns {
    /// The header: the leading columns, then `cols`.
    pub(super) fn head<'a>(self, cols: &[&'a str]) -> Vec<&'a str> {
        let mut h = vec!["tensor"];
        if self.several_files {
            h.push("file");
        }
        h.extend_from_slice(cols);
        h
    }

    /// A tensor's row: its name (and file), then `cells`.
    pub(super) fn row(self, t: &impl Labeled, cells: Vec<String>) -> Vec<String> {
        let (name, file) = t.name_and_file();
        self.lead(name.to_string(), || file.display().to_string(), cells)
    }

    /// A row per tensor of `tensors`, in their order: [`TensorColumns::row`] with `cells(t)`.
    pub(super) fn rows<'t, T: Labeled + 't>(
        self,
        tensors: impl IntoIterator<Item = &'t T>,
        mut cells: impl FnMut(&T) -> Vec<String>,
    ) -> Vec<Vec<String>> {
        tensors.into_iter().map(|t| self.row(t, cells(t))).collect()
    }

    /// The row of all tensors together: `(all)` (and an empty file cell), then `cells`.
    pub(super) fn all(self, cells: Vec<String>) -> Vec<String> {
        self.lead("(all)".to_string(), String::new, cells)
    }

    fn lead(self, first: String, file: impl FnOnce() -> String, cells: Vec<String>) -> Vec<String> {
        let mut row = vec![first];
        if self.several_files {
            row.push(file());
        }
        row.extend(cells);
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_keep_their_digits() {
        assert_eq!(percent(0.0), "0");
        assert_eq!(percent(1.0), "100");
        assert_eq!(percent(0.5), "50.0");
        assert_eq!(percent(8.66e-14), "8.66e-12");
        assert_eq!(percent(2.18e-4), "2.18e-2");
        // Under 1%, two decimals: 0.121% is not the 0.1% threshold it exceeds.
        assert_eq!(percent(0.00121), "0.12");
        assert_eq!(percent(0.001), "0.10");
        assert_eq!(percent(0.0099), "0.99");
        assert_eq!(percent(0.25), "25.0");
        assert_eq!(percent_of(1, 4_000_000), "2.50e-5");
        assert_eq!(percent_of(999_999, 1_000_000), "99.9999");
        assert_eq!(percent_of(3, 3), "100");
        assert_eq!(percent_of(0, 0), "-");
        // Never 0 or 100 unless exact.
        for (part, whole) in [(1u64, u64::MAX / 2), (u64::MAX / 2 - 1, u64::MAX / 2)] {
            let s = percent_of(part, whole);
            assert!(s != "0" && !s.starts_with("100"), "{s}");
        }
    }

    #[test]
    fn windows_in_words() {
        let words = |lo, hi| {
            let w = Window {
                min_log2_scale: lo,
                max_log2_scale: hi,
                overflow_log2_scale: 20,
                works: false,
            };
            window_words(&w, 0.001)
        };
        assert_eq!(words(Some(-3), Some(4)), "2^-3..2^4");
        let needs = "none (needs 2^5 to keep small values, overflows above 2^4)";
        assert_eq!(words(Some(5), Some(4)), needs);
        let stays = "none (underflow stays above 0.1% in the range; overflows above 2^4)";
        assert_eq!(words(None, Some(4)), stays);
        let amax = "none (needs 2^5, but amax overflows at every scale)";
        assert_eq!(words(Some(5), None), amax);
        assert_eq!(words(None, None), "none");
    }
}
