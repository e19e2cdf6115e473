//! Statistics over seeds: the mean of a metric with its Student t confidence interval, and
//! Welch's t-test of the difference between two sets of runs.
//!
//! ```text
//! mean  m = sum x / n          s^2 = sum (x - m)^2 / (n - 1)
//! CI    m -/+ t(1 - a/2, n - 1) s / sqrt(n)
//! Welch d = m_a - m_b          se^2 = s_a^2 / n_a + s_b^2 / n_b
//!       df = se^4 / ((s_a^2/n_a)^2 / (n_a - 1) + (s_b^2/n_b)^2 / (n_b - 1))   (Welch-Satterthwaite)
//!       t = d / se             p = 2 (1 - T_df(|t|))      CI  d -/+ t(1 - a/2, df) se
//! ```
//! A run whose metric is not finite (a diverged run's loss) is not a sample: callers drop it and
//! count it separately.
//!
//! ```
//! use mixprec::stats::seeds::{MeanCi, welch};
//!
//! let m = MeanCi::new(&[0.97, 0.96, 0.98], 0.95).unwrap();
//! assert!((m.mean - 0.97).abs() < 1e-12 && m.low < 0.96 && m.high > 0.98);
//! let w = welch(&[0.97, 0.96, 0.98], &[0.90, 0.91, 0.89], 0.95).unwrap();
//! assert!(w.p_value < 0.01 && w.low > 0.0);
//! ```

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The mean of a sample and its confidence interval (Student t, `n - 1` degrees of freedom).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeanCi {
    /// Sample size.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (`n - 1` in the denominator; 0 for one value).
    pub sd: f64,
    /// Lower end of the interval (NaN for one value: no interval).
    pub low: f64,
    /// Upper end (NaN for one value).
    pub high: f64,
}

impl MeanCi {
    /// The mean of `xs` and its two-sided interval at `level` (0.95 for 95%); `None` when `xs`
    /// is empty. With one value the interval is NaN: one seed says nothing of the spread.
    ///
    /// # Panics
    /// If `level` is not in (0, 1).
    #[must_use]
    pub fn new(xs: &[f64], level: f64) -> Option<MeanCi> {
        assert!(level > 0.0 && level < 1.0, "confidence level {level}");
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let (mean, var) = mean_var(xs);
        let sd = var.sqrt();
        let half = if n > 1 {
            quantile(1.0 - (1.0 - level) / 2.0, (n - 1) as f64) * sd / (n as f64).sqrt()
        } else {
            f64::NAN
        };
        Some(MeanCi {
            n,
            mean,
            sd,
            low: mean - half,
            high: mean + half,
        })
    }
}

/// Welch's unequal-variance t-test of `mean(a) - mean(b)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Welch {
    /// `mean(a) - mean(b)`.
    pub difference: f64,
    /// Lower end of the difference's interval.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// The t statistic (infinite when both samples are constant and their means differ).
    pub t: f64,
    /// Welch-Satterthwaite degrees of freedom (`n_a + n_b - 2` when both samples are constant).
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
}

/// Welch's t-test of `a` against `b` with a two-sided interval at `level`; `None` unless both
/// hold at least two values. Two constant samples (zero variance) give `t = 0, p = 1` when their
/// means are equal, and `t = ±inf, p = 0` when they differ, with an interval of zero width.
///
/// # Panics
/// If `level` is not in (0, 1).
#[must_use]
pub fn welch(a: &[f64], b: &[f64], level: f64) -> Option<Welch> {
    assert!(level > 0.0 && level < 1.0, "confidence level {level}");
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let ((ma, va), (mb, vb)) = (mean_var(a), mean_var(b));
    let (qa, qb) = (va / na, vb / nb);
    let se = (qa + qb).sqrt();
    let difference = ma - mb;
    if se == 0.0 {
        let t = if difference == 0.0 {
            0.0
        } else {
            difference.signum() * f64::INFINITY
        };
        return Some(Welch {
            difference,
            low: difference,
            high: difference,
            t,
            df: na + nb - 2.0,
            p_value: if difference == 0.0 { 1.0 } else { 0.0 },
        });
    }
    let df = (qa + qb).powi(2) / (qa * qa / (na - 1.0) + qb * qb / (nb - 1.0));
    let t = difference / se;
    let p_value = 2.0 * student(df).sf(t.abs());
    let half = quantile(1.0 - (1.0 - level) / 2.0, df) * se;
    Some(Welch {
        difference,
        low: difference - half,
        high: difference + half,
        t,
        df,
        p_value,
    })
}

/// Mean and sample variance (`n - 1`; 0 for one value), by Welford's update.
fn mean_var(xs: &[f64]) -> (f64, f64) {
    let (mut mean, mut m2) = (0.0, 0.0);
    for (i, &x) in xs.iter().enumerate() {
        let delta = x - mean;
        mean += delta / (i + 1) as f64;
        m2 += delta * (x - mean);
    }
    let var = if xs.len() > 1 {
        m2 / (xs.len() - 1) as f64
    } else {
        0.0
    };
    (mean, var)
}

fn student(df: f64) -> StudentsT {
    // df > 0 is finite here (n >= 2, or Welch's df of positive variances): new() cannot fail.
    StudentsT::new(0.0, 1.0, df).unwrap_or_else(|_| unreachable!("t with {df} degrees of freedom"))
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
fn quantile(p: f64, df: f64) -> f64 {
    student(df).inverse_cdf(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within `rel` of `want`, relatively.
    fn close(got: f64, want: f64, rel: f64) {
        assert!(
            (got - want).abs() <= rel * want.abs(),
            "got {got}, want {want}"
        );
    }

    // Reference values from SciPy 1.17.1:
    //   stats.ttest_ind(a, b, equal_var=False) and its .confidence_interval(0.95);
    //   stats.t.ppf(0.975, n - 1) for the mean's interval.
    const A: [f64; 5] = [0.9712, 0.9688, 0.9735, 0.9701, 0.9724];
    const B: [f64; 6] = [0.9523, 0.9610, 0.9488, 0.9571, 0.9546, 0.9602];

    #[test]
    fn mean_and_interval_match_scipy() {
        let m = MeanCi::new(&A, 0.95).unwrap();
        assert_eq!(m.n, 5);
        close(m.mean, 0.9712, 1e-13);
        close(m.low, 0.968_902_082_794_313_2, 1e-10);
        close(m.high, 0.973_497_917_205_686_7, 1e-10);
        close(quantile(0.975, 4.0), 2.776_445_105_197_793_4, 1e-9);
        close(quantile(0.975, 1.0), 12.706_204_736_174_694, 1e-9);
        // One value: a mean, no interval.
        let one = MeanCi::new(&[3.0], 0.95).unwrap();
        assert_eq!((one.mean, one.sd), (3.0, 0.0));
        assert!(one.low.is_nan() && one.high.is_nan());
        assert!(MeanCi::new(&[], 0.95).is_none());
    }

    #[test]
    fn welch_matches_scipy() {
        let w = welch(&A, &B, 0.95).unwrap();
        close(w.difference, 0.015_533_333_333_333_288, 1e-9);
        close(w.t, 7.427_108_297_549_237, 1e-9);
        close(w.df, 6.738_782_375_247_585_5, 1e-9);
        close(w.p_value, 0.000_176_035_853_056_620_76, 1e-6);
        close(w.low, 0.010_548_741_092_232_966, 1e-8);
        close(w.high, 0.020_517_925_574_433_61, 1e-8);
        // Very unequal variances and sizes: df near 1.
        let w = welch(&[1.0, 2.0, 3.0], &[10.0, 30.0], 0.95).unwrap();
        close(w.t, -1.797_007_479_227_248_8, 1e-9);
        close(w.df, 1.006_672_185_154_527, 1e-9);
        close(w.p_value, 0.322_032_517_655_044_6, 1e-6);
        close(w.low, -143.297_414_250_296_8, 1e-7);
        close(w.high, 107.297_414_250_296_82, 1e-7);
        // Swapping the samples flips the difference, not the p-value.
        let back = welch(&[10.0, 30.0], &[1.0, 2.0, 3.0], 0.95).unwrap();
        close(back.t, 1.797_007_479_227_248_8, 1e-9);
        close(back.p_value, w.p_value, 1e-12);
    }

    #[test]
    fn constant_and_small_samples() {
        let same = welch(&[0.5, 0.5], &[0.5, 0.5, 0.5], 0.95).unwrap();
        assert_eq!((same.t, same.p_value, same.df), (0.0, 1.0, 3.0));
        let apart = welch(&[0.5, 0.5], &[0.25, 0.25], 0.95).unwrap();
        assert_eq!((apart.t, apart.p_value), (f64::INFINITY, 0.0));
        assert_eq!((apart.low, apart.high), (0.25, 0.25));
        assert!(welch(&[1.0], &[1.0, 2.0], 0.95).is_none());
    }
}
