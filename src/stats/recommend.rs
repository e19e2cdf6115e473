//! Loss-scale recommendations from sweeps.
//!
//! A loss scale multiplies every gradient at once, so the recommendation is over the union of
//! the tensors (a [`Sweep`] of all of them together):
//!
//! ```text
//! max_log2_scale = the largest k in the range with amax * 2^(k + margin) rounding to a finite
//!                  value of the format (none if even the smallest k overflows)
//! min_log2_scale = the smallest k in the range whose underflow count is at most
//!                  max_underflow * (finite nonzero values)
//! log2_scale     = max_log2_scale
//! ```
//!
//! The largest safe scale is recommended because it keeps the most small gradients and costs
//! nothing until a value overflows. When `min > max` (or either is missing) no single scale
//! works, and [`explain`] says so in plain words and what would: per-tensor scaling or a wider
//! format.

use serde::{Deserialize, Serialize};

use super::Sweep;
use crate::format::{Event, FloatFormat, RoundOptions, Rounder, pow2};

/// The recommended loss-scale window, as powers of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The recommended `k` (scale `2^k`): equal to `max_log2_scale`.
    pub log2_scale: Option<i32>,
    /// The smallest `k` whose underflow is within the allowed share.
    pub min_log2_scale: Option<i32>,
    /// The largest `k` that keeps amax (times `2^margin`) finite.
    pub max_log2_scale: Option<i32>,
}

impl Recommendation {
    /// Whether one scale satisfies both bounds.
    #[must_use]
    pub fn works(&self) -> bool {
        matches!((self.min_log2_scale, self.max_log2_scale), (Some(lo), Some(hi)) if lo <= hi)
    }
}

/// The recommendation from a sweep of all the tensors together, with `margin` bits of headroom
/// above amax and at most `max_underflow` (a fraction) of the finite nonzero values underflowing.
///
/// A sweep with no finite nonzero value puts no bound: every scale of the range is in the window.
///
/// ```
/// use mixprec::format::FP16;
/// use mixprec::stats::{SweepAccumulator, recommend};
///
/// let mut acc = SweepAccumulator::new(FP16);
/// acc.add_f32(&[1e-7, 1e-3, 2.0]);
/// let r = recommend(&acc.sweep(0..=32), 0, 0.0);
/// // 2 * 2^14 = 32768 is finite in fp16, 2 * 2^15 = 65536 is not; 1e-7 needs 2^0 (fp16's min
/// // subnormal is about 6e-8, and 1e-7 rounds to it rather than to zero).
/// assert_eq!((r.min_log2_scale, r.max_log2_scale, r.log2_scale), (Some(0), Some(14), Some(14)));
/// ```
#[must_use]
pub fn recommend(sweep: &Sweep, margin: i32, max_underflow: f64) -> Recommendation {
    let (Some(first), Some(last)) = (sweep.rows.first(), sweep.rows.last()) else {
        return Recommendation {
            log2_scale: None,
            min_log2_scale: None,
            max_log2_scale: None,
        };
    };
    let (lo, hi) = (i64::from(first.log2_scale), i64::from(last.log2_scale));
    // Exponent arithmetic only: amax * 2^k is never formed, so it cannot overflow binary64.
    let max_log2_scale = match overflow_log2_scale(sweep.format, sweep.amax) {
        None => Some(last.log2_scale),
        Some(k_over) => {
            let top = (i64::from(k_over) - 1 - i64::from(margin)).min(hi);
            (top >= lo).then_some(top as i32)
        }
    };
    let allowed = max_underflow * sweep.finite_nonzero() as f64;
    let min_log2_scale = sweep
        .rows
        .iter()
        .find(|r| r.underflow as f64 <= allowed)
        .map(|r| r.log2_scale);
    Recommendation {
        log2_scale: max_log2_scale,
        min_log2_scale,
        max_log2_scale,
    }
}

/// The largest share of the weight gradients' squared L2 norm that may underflow at a scale
/// where training is predicted to match FP32 ([`predicted_min_log2_scale`]).
pub const MATCH_MAX_ENERGY_LOST: f64 = 0.005;
/// The largest share of the weight-gradient values that may underflow there, under an
/// [`StepRule::Adaptive`] optimizer.
pub const MATCH_MAX_UNDERFLOW: f64 = 0.4;

/// How an optimizer's step depends on a weight's gradient, which decides what underflow costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepRule {
    /// Each weight's step normalised by its own gradient history (Adam, AdamW, RMSprop,
    /// Adagrad): a weight whose gradient underflows loses a full-size update however small its
    /// gradient was, so the share of values lost counts as well as their share of the norm.
    Adaptive,
    /// The step proportional to the gradient (SGD, with or without momentum): what underflow
    /// costs is its share of the squared norm.
    Sgd,
}

/// The smallest `k` of `sweep` (a sweep of weight gradients) from which training in the format
/// is predicted to match FP32: the first scale at which underflow takes at most
/// [`MATCH_MAX_ENERGY_LOST`] of the squared L2 norm (the step's direction is kept) and, under
/// an [`StepRule::Adaptive`] optimizer, at most [`MATCH_MAX_UNDERFLOW`] of the values. `None`
/// when no scale of the sweep does, or the sweep holds no finite nonzero value.
///
/// Both shares fall as the scale grows, so this is the larger of the two rules' edges. The
/// thresholds are measured, not derived: on mixprec's loss-scale grids (the book's "Which
/// scale trains like FP32", docs/src/predicted-edge.md) the predicted scale is within one binade of the smallest scale from
/// which fp16 re-training matched FP32, where analyze's window (at most 0.1% of the values)
/// starts 14 to 32 binades above it. It is a lower edge for choosing a scale, not a
/// recommendation: the largest safe scale remains the recommended one.
///
/// ```
/// use mixprec::format::FP16;
/// use mixprec::stats::SweepAccumulator;
/// use mixprec::stats::recommend::{StepRule, predicted_min_log2_scale};
///
/// let mut acc = SweepAccumulator::new(FP16);
/// acc.add_f32(&[1e-9, 1e-9, 1e-3, 2.0]);
/// // Half the values (1e-9: below half fp16's smallest subnormal until scaled by 2^5)
/// // underflow below 2^5, holding a tiny share of the squared norm: Adam loses their updates,
/// // SGD does not notice.
/// let sweep = acc.sweep(0..=20);
/// assert_eq!(predicted_min_log2_scale(&sweep, StepRule::Adaptive), Some(5));
/// assert_eq!(predicted_min_log2_scale(&sweep, StepRule::Sgd), Some(0));
/// ```
#[must_use]
pub fn predicted_min_log2_scale(sweep: &Sweep, rule: StepRule) -> Option<i32> {
    let n = sweep.finite_nonzero();
    if n == 0 {
        return None;
    }
    let counted = match rule {
        StepRule::Adaptive => MATCH_MAX_UNDERFLOW * n as f64,
        StepRule::Sgd => f64::INFINITY,
    };
    sweep
        .rows
        .iter()
        .find(|r| r.energy_lost <= MATCH_MAX_ENERGY_LOST && r.underflow as f64 <= counted)
        .map(|r| r.log2_scale)
}

/// The smallest `k` for which `amax * 2^k` rounds (nearest-even) to infinity, or NaN in a format
/// without infinities; `None` when `amax` is zero or not finite (nothing overflows).
///
/// Decided with the exponent alone, so `amax * 2^k` is never formed (it would overflow binary64
/// for `amax = 1e300`): with `amax = f * 2^E`, `f` in `[1, 2)`,
///
/// ```text
/// E + k >  emax:  overflow (the scaled value is at least 2^(emax+1) > max)
/// E + k == emax:  overflow iff f * 2^emax rounds above max
/// E + k <  emax:  finite (below 2^emax <= max)
/// so  k_over = emax - E + 1 - [f * 2^emax rounds above max]
/// ```
///
/// ```
/// use mixprec::format::FP16;
/// use mixprec::stats::recommend::overflow_log2_scale;
///
/// // 65504 is fp16's max; 65520 rounds up to infinity.
/// assert_eq!(overflow_log2_scale(FP16, 65504.0), Some(1));
/// assert_eq!(overflow_log2_scale(FP16, 65520.0), Some(0));
/// // 1e300 = 1.33 * 2^996: 2^(996 - 981) * 1.33 = 2^15 * 1.33 is finite, 2^16 * 1.33 is not.
/// assert_eq!(overflow_log2_scale(FP16, 1e300), Some(-980));
/// assert_eq!(overflow_log2_scale(FP16, 0.0), None);
/// ```
#[must_use]
pub fn overflow_log2_scale(format: FloatFormat, amax: f64) -> Option<i32> {
    let a = amax.abs();
    if a == 0.0 || !a.is_finite() {
        return None;
    }
    let bits = a.to_bits();
    let biased = (bits >> 52) as i32;
    // (E, f) with f in [1, 2); binary64 subnormals normalised.
    let (e, f) = if biased == 0 {
        let lz = bits.leading_zeros() as i32;
        let e = -1074 + 63 - lz;
        (e, a * pow2(-e - 600) * pow2(600))
    } else {
        (
            biased - 1023,
            f64::from_bits((bits & ((1 << 52) - 1)) | 0x3ff0_0000_0000_0000),
        )
    };
    let rounder = Rounder::new(format, RoundOptions::default());
    // f * 2^emax is finite in binary64 for every format (emax <= 128).
    let top = rounder.round_at(f * pow2(format.emax()), 0).1 == Event::Overflow;
    Some(format.emax() - e + 1 - i32::from(top))
}

/// The chance that a rerun's largest gradient exceeds the recorded run's by more than
/// [`RerunTop::excess`], under [`AmaxSpread`]'s model: one in twenty.
pub const RERUN_RISK: f64 = 0.05;

/// The statistics of a run's per-step gradient amax that say how far a rerun's may differ,
/// gathered one step at a time (memory independent of the run's length). Only steps whose amax
/// is exact belong here (not a bound).
///
/// A rerun (another loss scale, other skipped steps, another seed) trains along its own
/// trajectory, so its largest gradient is another draw, not the recorded one. The model, with
/// `a_t = log2 amax_t`:
///
/// ```text
/// a_t        = trend_t + noise_t, noise independent between steps, sd s
/// d_t        = a_(t+1) - a_t over consecutive steps: sd  sigma_d = s * sqrt(2)  (a slow trend cancels)
/// max of n   ~ Gumbel with scale  beta = s / sqrt(2 ln n) = sigma_d / (2 sqrt(ln n))   (Gaussian noise)
/// rerun      = the same trend, independent noise: (rerun's max - run's max) ~ Logistic(0, beta)
/// excess     = beta * ln((1 - RERUN_RISK) / RERUN_RISK)      exceeded with probability RERUN_RISK
/// rerun top  = min(recorded top, the largest k keeping  amax_max * 2^excess * 2^k  finite)
/// ```
///
/// Independent noise is the conservative case: a rerun on the same batches shares some of it.
#[derive(Clone, Copy, Debug, Default)]
pub struct AmaxSpread {
    steps: usize,
    last: Option<(u64, f64)>,
    peak: f64,
    // Welford's running mean and sum of squared deviations of the consecutive differences.
    diffs: usize,
    mean: f64,
    m2: f64,
}

/// The window's top for a rerun ([`AmaxSpread::rerun_top`]): the recorded top less the margin
/// a rerun's own largest gradient needs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RerunTop {
    /// The largest `k` whose scale `2^k` a rerun's largest gradient overflows with probability
    /// at most [`RERUN_RISK`] (under the model): the recorded top less `margin`.
    pub log2_scale: i32,
    /// Binades below the recorded top (0 when the recorded peak leaves room for `excess`).
    pub margin: i32,
    /// How far above the recorded run's largest gradient (log2) a rerun's reaches with
    /// probability [`RERUN_RISK`].
    pub excess: f64,
    /// How far the recorded run's largest gradient, scaled by the recorded top, lies below the
    /// format's largest value (log2).
    pub headroom: f64,
    /// The standard deviation of `log2 amax` between consecutive steps.
    pub step_sd: f64,
    /// The steps with an exact amax.
    pub steps: usize,
}

impl AmaxSpread {
    /// Adds step `step`'s exact, unscaled amax (ignored unless finite and positive).
    pub fn add(&mut self, step: u64, amax: f64) {
        if !(amax.is_finite() && amax > 0.0) {
            return;
        }
        let a = amax.log2();
        if let Some((s, prev)) = self.last
            && step == s + 1
        {
            let d = a - prev;
            self.diffs += 1;
            let delta = d - self.mean;
            self.mean += delta / self.diffs as f64;
            self.m2 += delta * (d - self.mean);
        }
        self.steps += 1;
        self.peak = if self.steps == 1 {
            amax
        } else {
            self.peak.max(amax)
        };
        self.last = Some((step, a));
    }

    /// The top for a rerun below the recorded window top `2^top` in `format`; `None` with fewer
    /// than two pairs of consecutive steps (no spread to measure).
    #[must_use]
    pub fn rerun_top(&self, format: FloatFormat, top: i32) -> Option<RerunTop> {
        if self.diffs < 2 {
            return None;
        }
        let step_sd = (self.m2 / self.diffs as f64).sqrt();
        let beta = step_sd / (2.0 * (self.steps as f64).ln().sqrt());
        let excess = beta * ((1.0 - RERUN_RISK) / RERUN_RISK).ln();
        let edge = |amax: f64| overflow_log2_scale(format, amax).map(|k| k - 1);
        let log2_scale = edge(self.peak * excess.exp2())?.min(top);
        Some(RerunTop {
            log2_scale,
            margin: top - log2_scale,
            excess,
            headroom: (format.max() * pow2(-top) / self.peak).log2(),
            step_sd,
            steps: self.steps,
        })
    }
}

/// What a tensor, or a wider format, would do on its own: its name and recommendation.
#[derive(Clone, Debug)]
pub struct Alternative {
    /// A tensor name, or a format name.
    pub name: String,
    /// Its own window.
    pub recommendation: Recommendation,
}

/// A window of log2 scales `lo..hi` in words: `2^lo..2^hi`, or why it is empty. `pct` is the
/// underflow threshold as printed; `range` names the scales tried (`the range`, `2^-8..2^24`).
#[must_use]
pub fn window_words(lo: Option<i32>, hi: Option<i32>, pct: &str, range: &str) -> String {
    match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= hi => format!("2^{lo}..2^{hi}"),
        (Some(lo), Some(hi)) => {
            format!("none (needs 2^{lo} to keep small values, overflows above 2^{hi})")
        }
        (None, Some(hi)) => {
            format!("none (underflow stays above {pct} in {range}; overflows above 2^{hi})")
        }
        (Some(lo), None) => format!("none (needs 2^{lo}, but amax overflows at every scale)"),
        (None, None) => "none".to_string(),
    }
}

/// A plain-words explanation of a recommendation: the window when one exists, otherwise why no
/// single scale works and what would (per-tensor scaling, with each tensor's own window, and the
/// wider formats whose window is not empty), with the numbers.
#[must_use]
pub fn explain(
    format: FloatFormat,
    total: &Sweep,
    rec: &Recommendation,
    margin: i32,
    max_underflow: f64,
    per_tensor: &[Alternative],
    wider: &[Alternative],
) -> String {
    let pct = crate::text::threshold_percent(max_underflow);
    let range = match (total.rows.first(), total.rows.last()) {
        (Some(a), Some(b)) => format!("2^{}..2^{}", a.log2_scale, b.log2_scale),
        _ => "an empty range".to_string(),
    };
    let headroom = if margin == 0 {
        String::new()
    } else {
        format!(" with {margin} bits of headroom")
    };
    let window =
        |r: &Recommendation| window_words(r.min_log2_scale, r.max_log2_scale, &pct, &range);
    if let (true, Some(k)) = (rec.works(), rec.log2_scale) {
        let lost = total.row(k).map_or(0, |r| r.underflow);
        return format!(
            "2^{k} ({}) is the largest loss scale in {range} that keeps amax {:.3e} finite in \
             {format}{headroom}: an upper bound for a run, whose later gradients grow. Scales \
             2^{} to 2^{k} keep underflow within {pct} of the {} finite nonzero values; at 2^{k}, \
             {lost} underflow.",
            2f64.powi(k),
            total.amax,
            rec.min_log2_scale.unwrap_or(k),
            total.finite_nonzero(),
        );
    }
    let mut s = format!("No single loss scale in {range} works for {format}: ");
    s += &match (rec.min_log2_scale, rec.max_log2_scale) {
        (Some(lo), Some(hi)) => format!(
            "amax {:.3e} stays finite{headroom} only up to 2^{hi}, but keeping underflow within \
             {pct} of the {} finite nonzero values needs at least 2^{lo}.",
            total.amax,
            total.finite_nonzero()
        ),
        (None, Some(hi)) => format!(
            "amax {:.3e} stays finite{headroom} up to 2^{hi}, but even at 2^{} more than {pct} of \
             the values underflow ({} of {}).",
            total.amax,
            total.rows.last().map_or(hi, |r| r.log2_scale),
            total.rows.last().map_or(0, |r| r.underflow),
            total.finite_nonzero()
        ),
        (_, None) => format!(
            "amax {:.3e} overflows{headroom} at every scale of the range, even 2^{}.",
            total.amax,
            total.rows.first().map_or(0, |r| r.log2_scale)
        ),
    };
    let good: Vec<&Alternative> = per_tensor
        .iter()
        .filter(|a| a.recommendation.works())
        .collect();
    if !per_tensor.is_empty() {
        s += if good.len() == per_tensor.len() {
            " Per-tensor scaling would work: each tensor has its own window ("
        } else {
            " Per-tensor scaling alone would not be enough; the tensors' own windows ("
        };
        let shown: Vec<String> = per_tensor
            .iter()
            .take(8)
            .map(|a| format!("{}: {}", a.name, window(&a.recommendation)))
            .collect();
        s += &shown.join("; ");
        if per_tensor.len() > 8 {
            s += &format!("; and {} more", per_tensor.len() - 8);
        }
        s += ").";
    }
    for w in wider {
        s += &match w.recommendation.works() {
            true => format!(
                " A wider format would work: {} has the window {}.",
                w.name,
                window(&w.recommendation)
            ),
            false => format!(
                " {} has no window either: {}.",
                w.name,
                window(&w.recommendation)
            ),
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BF16, FP16};
    use crate::stats::SweepAccumulator;

    #[test]
    fn overflow_exponent_is_exact_where_products_overflow_binary64() {
        use crate::format::{FP8_E4M3, FP8_E5M2};
        // Reference: round amax * 2^k, formed in two exact steps (2^k alone may not be finite).
        let overflows = |f: FloatFormat, x: f64, k: i32| {
            let r = Rounder::new(f, RoundOptions::default());
            let h = k / 2;
            r.round_at(x * 2f64.powi(h) * 2f64.powi(k - h), 0).1 == Event::Overflow
        };
        let mut rng = crate::stats::testdata::Rng(11);
        for f in [FP16, BF16, FP8_E4M3, FP8_E5M2, "e2m1".parse().unwrap()] {
            let mut xs = vec![
                f64::MAX,
                5e-324,
                1e-310,
                1e300,
                65504.0,
                65520.0,
                448.0,
                464.0,
            ];
            xs.extend((0..300).map(|_| f64::from_bits(rng.next_u64() >> 1)));
            for x in xs.into_iter().filter(|x| x.is_finite() && *x != 0.0) {
                let k = overflow_log2_scale(f, x).unwrap();
                assert!(overflows(f, x, k), "{f} {x:e} at 2^{k}");
                assert!(!overflows(f, x, k - 1), "{f} {x:e} at 2^{}", k - 1);
            }
        }
        assert_eq!(overflow_log2_scale(FP16, f64::NAN), None);
    }

    #[test]
    fn window_top_never_trusts_an_overflowing_product() {
        // Issue 10: [1e10, 1e-3] over -2000..2000 recommended 2^1000, and [1e300, 1] 2^32.
        let mut acc = SweepAccumulator::new(FP16);
        acc.add_f32(&[1e10, 1e-3]);
        let r = recommend(&acc.sweep(-2000..=2000), 0, 0.001);
        assert_eq!(r.max_log2_scale, Some(-18));
        let mut acc = SweepAccumulator::new(FP16);
        acc.add_f64(&[1e300, 1.0]);
        let s = acc.sweep(0..=32);
        let r = recommend(&s, 0, 0.001);
        assert_eq!(r.max_log2_scale, None);
        assert!(s.rows.iter().all(|row| row.overflow >= 1));
        // A margin that would push k + margin past i32 is fine too.
        assert_eq!(recommend(&s, i32::MAX, 0.001).max_log2_scale, None);
    }

    fn sweep(xs: &[f32], ks: std::ops::RangeInclusive<i32>) -> Sweep {
        let mut acc = SweepAccumulator::new(FP16);
        acc.add_f32(xs);
        acc.sweep(ks)
    }

    #[test]
    fn window_bounds() {
        // amax 1000: 1000 * 2^6 = 64000 < 65504, 1000 * 2^7 overflows.
        let s = sweep(&[1000.0, 1e-6, 1e-6], -4..=20);
        assert_eq!(recommend(&s, 0, 0.0).max_log2_scale, Some(6));
        assert_eq!(recommend(&s, 2, 0.0).max_log2_scale, Some(4));
        // 1e-6 is subnormal in fp16 but above half the min subnormal (2^-25 = 3e-8): no underflow.
        assert_eq!(recommend(&s, 0, 0.0).min_log2_scale, Some(-4));
        // 1e-9 needs 2^-25 / 1e-9 = 29.8 -> 2^5 to round to the min subnormal.
        let s = sweep(&[1000.0, 1e-9], -4..=20);
        let r = recommend(&s, 0, 0.0);
        assert_eq!(
            (r.min_log2_scale, r.max_log2_scale, r.log2_scale),
            (Some(5), Some(6), Some(6))
        );
        assert!(r.works());
        // Allowing half the values to underflow.
        assert_eq!(recommend(&s, 0, 0.5).min_log2_scale, Some(-4));
    }

    #[test]
    fn no_scale_is_explained_with_the_alternatives() {
        let s = sweep(&[60000.0, 1e-12], 0..=32);
        let r = recommend(&s, 0, 0.0);
        // 1e-12 * 2^15 = 3.3e-8 is above half the min subnormal (2^-25 = 3.0e-8).
        assert_eq!((r.min_log2_scale, r.max_log2_scale), (Some(15), Some(0)));
        assert!(!r.works());
        let mut acc = SweepAccumulator::new(BF16);
        acc.add_f32(&[60000.0, 1e-12]);
        let bf = recommend(&acc.sweep(0..=32), 0, 0.0);
        assert!(bf.works());
        let per = [
            Alternative {
                name: "a".into(),
                recommendation: recommend(&sweep(&[60000.0], 0..=32), 0, 0.0),
            },
            Alternative {
                name: "b".into(),
                recommendation: recommend(&sweep(&[1e-12], 0..=32), 0, 0.0),
            },
        ];
        let text = explain(
            FP16,
            &s,
            &r,
            0,
            0.0,
            &per,
            &[Alternative {
                name: "bf16".into(),
                recommendation: bf,
            }],
        );
        assert!(
            text.starts_with("No single loss scale in 2^0..2^32 works for fp16"),
            "{text}"
        );
        assert!(text.contains("Per-tensor scaling would work"), "{text}");
        assert!(text.contains("a: 2^0..2^0; b: 2^15..2^32"), "{text}");
        assert!(text.contains("bf16 has the window 2^0..2^32"), "{text}");
        let ok = sweep(&[1.0], 0..=4);
        let text = explain(FP16, &ok, &recommend(&ok, 0, 0.001), 0, 0.001, &[], &[]);
        assert!(
            text.starts_with("2^4 (16) is the largest loss scale in 2^0..2^4 that keeps amax"),
            "{text}"
        );
    }

    #[test]
    fn empty_tensor_puts_no_bound() {
        let s = sweep(&[0.0, f32::NAN], 0..=3);
        let r = recommend(&s, 0, 0.001);
        assert_eq!((r.min_log2_scale, r.max_log2_scale), (Some(0), Some(3)));
        #[allow(clippy::reversed_empty_ranges)]
        let s = sweep(&[1.0], 3..=2);
        assert_eq!(recommend(&s, 0, 0.001).log2_scale, None);
    }

    /// The consecutive differences' sd by two passes, the slow reference.
    fn two_pass_sd(xs: &[(u64, f64)]) -> f64 {
        let d: Vec<f64> = xs
            .windows(2)
            .filter(|w| w[1].0 == w[0].0 + 1)
            .map(|w| w[1].1.log2() - w[0].1.log2())
            .collect();
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64).sqrt()
    }

    #[test]
    fn a_rerun_top_leaves_room_for_the_steps_spread() {
        let spread = |xs: &[(u64, f64)]| {
            let mut s = AmaxSpread::default();
            for &(t, a) in xs {
                s.add(t, a);
            }
            s
        };
        // 2^-3, 2^-2, ... over 101 steps: differences +-1 bit, sd 1.
        let alternating: Vec<(u64, f64)> = (1..=101)
            .map(|t| (t, if t % 2 == 0 { 0.25 } else { 0.125 }))
            .collect();
        let r = spread(&alternating).rerun_top(FP16, 17).unwrap();
        assert!((r.step_sd - 1.0).abs() < 1e-12, "{r:?}");
        let excess = 19f64.ln() / (2.0 * 101f64.ln().sqrt());
        assert!((r.excess - excess).abs() < 1e-12 && excess > 0.68 && excess < 0.69);
        // 0.25 * 2^17 = 32768: a binade of headroom, more than the excess.
        assert!((r.headroom - (65504f64 / 32768.0).log2()).abs() < 1e-12);
        assert_eq!((r.log2_scale, r.margin, r.steps), (17, 0, 101));
        // A peak 0.07 bits below fp16's max at 2^17: a rerun needs a binade more.
        let mut tight = alternating.clone();
        tight[50].1 = 0.25 * 1.9;
        let r = spread(&tight).rerun_top(FP16, 17).unwrap();
        assert!((r.step_sd - two_pass_sd(&tight)).abs() < 1e-12);
        assert_eq!((r.log2_scale, r.margin), (16, 1));
        // A recorded top already below the peak's (a bounded step's) stands.
        assert_eq!(spread(&tight).rerun_top(FP16, 15).unwrap().margin, 0);
        // Only consecutive steps pair up; fewer than two pairs measure nothing; zero, inf and
        // NaN are not amaxes.
        let gapped = [
            (1, 0.25),
            (3, 0.5),
            (4, 0.0),
            (5, f64::NAN),
            (6, 0.25),
            (7, 0.125),
        ];
        assert_eq!(spread(&gapped).rerun_top(FP16, 17), None);
        let r = spread(&[(1, 0.25), (2, 0.5), (4, 0.25), (5, 0.125)]).rerun_top(FP16, 15);
        assert!((r.unwrap().step_sd - 1.0).abs() < 1e-12);
    }
}
