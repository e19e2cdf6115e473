//! Properties of rounding that hold for every input: monotonic, idempotent, odd-symmetric,
//! error at most half an ulp for nearest, directed modes bracket the input, and stochastic
//! rounding unbiased.

use mixprec::format::{
    BF16, FP8_E4M3, FP8_E5M2, FP16, FloatFormat, Overflow, RoundOptions, Rounder, Rounding,
};
use proptest::prelude::*;
use statrs::distribution::{Binomial, DiscreteCDF};

fn formats() -> Vec<FloatFormat> {
    vec![
        FP16,
        BF16,
        FP8_E4M3,
        FP8_E5M2,
        "e3m2".parse().unwrap(),
        "e6m12".parse().unwrap(),
    ]
}

fn rounder(f: FloatFormat, rounding: Rounding, subnormals: bool) -> Rounder {
    Rounder::new(
        f,
        RoundOptions {
            rounding,
            // Saturate keeps fp8-e4m3's overflow finite, so order comparisons stay meaningful.
            overflow: Overflow::Saturate,
            subnormals,
            seed: 0,
        },
    )
}

/// Values spread over every magnitude a gradient can have, both signs.
fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-60.0f64..20.0, any::<bool>()).prop_map(|(e, neg)| {
            let v = e.exp2();
            if neg { -v } else { v }
        }),
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        (-1e-30f64..1e-30),
        (-1e30f64..1e30),
    ]
}

const DETERMINISTIC: [Rounding; 4] = [
    Rounding::NearestEven,
    Rounding::TowardZero,
    Rounding::Up,
    Rounding::Down,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn monotonic(x in value(), y in value(), sub in any::<bool>()) {
        let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
        for f in formats() {
            for m in DETERMINISTIC {
                let r = rounder(f, m, sub);
                prop_assert!(r.round(lo) <= r.round(hi), "{f} {m}: {lo:e} {hi:e}");
            }
        }
    }

    #[test]
    fn idempotent(x in value(), sub in any::<bool>()) {
        for f in formats() {
            for m in DETERMINISTIC {
                let r = rounder(f, m, sub);
                let once = r.round(x);
                prop_assert_eq!(r.round(once).to_bits(), once.to_bits(), "{} {}: {:e}", f, m, x);
            }
        }
    }

    #[test]
    fn odd_symmetric(x in value(), sub in any::<bool>()) {
        for f in formats() {
            for m in [Rounding::NearestEven, Rounding::TowardZero] {
                let r = rounder(f, m, sub);
                prop_assert_eq!(r.round(-x).to_bits(), (-r.round(x)).to_bits());
            }
            let up = rounder(f, Rounding::Up, sub);
            let down = rounder(f, Rounding::Down, sub);
            prop_assert_eq!(up.round(-x).to_bits(), (-down.round(x)).to_bits());
        }
    }

    #[test]
    fn nearest_is_within_half_an_ulp(x in value()) {
        for f in formats() {
            let r = rounder(f, Rounding::NearestEven, true);
            if x.abs() > f.max() {
                continue;
            }
            let exponent = if x == 0.0 { f.emin() } else { (x.abs().log2().floor() as i32).max(f.emin()) };
            // log2 may be off by one next to a power of two: take the larger ulp of the two.
            let ulp = 2f64.powi(exponent + 1 - f.man_bits() as i32);
            let err = (r.round(x) - x).abs();
            prop_assert!(err <= ulp / 2.0, "{f}: {x:e} err {err:e} ulp {ulp:e}");
            // And exactly: never farther than the other neighbour.
            let up = rounder(f, Rounding::Up, true).round(x);
            let down = rounder(f, Rounding::Down, true).round(x);
            prop_assert!(err <= (up - x).abs().min((x - down).abs()));
        }
    }

    #[test]
    fn directed_modes_bracket(x in value(), sub in any::<bool>()) {
        for f in formats() {
            let up = rounder(f, Rounding::Up, sub).round(x);
            let down = rounder(f, Rounding::Down, sub).round(x);
            let zero = rounder(f, Rounding::TowardZero, sub).round(x);
            // Flush to zero gives up zeros below the smallest normal, whatever the direction.
            if x.abs() <= f.max() && (sub || x.abs() >= f.min_normal()) {
                prop_assert!(down <= x && x <= up, "{f}: {down:e} <= {x:e} <= {up:e}");
            }
            prop_assert!(zero.abs() <= x.abs());
        }
    }
}

/// Whether `ups` successes out of `n` is plausible for probability `p`: a two-sided binomial test
/// with false-alarm probability at most `alpha`.
fn plausible(ups: u64, n: u64, p: f64, alpha: f64) -> bool {
    let b = Binomial::new(p, n).unwrap();
    let below = b.cdf(ups);
    let above = if ups == 0 { 1.0 } else { 1.0 - b.cdf(ups - 1) };
    below > alpha / 2.0 && above > alpha / 2.0
}

/// Stochastic rounding is unbiased: over many positions of the stream, a value rounds up with
/// probability equal to its distance from the lower neighbour over the gap. Each of the checks
/// below has a false-alarm probability of at most 1e-6, so the whole test fails by chance with
/// probability under 1e-4.
#[test]
fn stochastic_rounding_is_unbiased() {
    const N: u64 = 200_000;
    let alpha = 1e-6;
    let cases: &[(FloatFormat, f64, f64, f64)] = &[
        // (format, lower, upper, x)
        (FP16, 1.0, 1.0 + 2f64.powi(-10), 1.0 + 0.3 * 2f64.powi(-10)),
        (FP16, 1.0, 1.0 + 2f64.powi(-10), 1.0 + 0.5 * 2f64.powi(-10)),
        (FP16, 0.0, 2f64.powi(-24), 0.01 * 2f64.powi(-24)),
        (FP16, 0.0, 2f64.powi(-24), 2f64.powi(-24 - 10)), // ~195 ups expected
        (BF16, 3.0, 3.0 + 2f64.powi(-6), 3.0 + 0.9 * 2f64.powi(-6)),
        (FP8_E4M3, 448.0, 480.0, 460.0), // 480 is past the max: those overflow (saturate)
    ];
    for &(f, lower, upper, x) in cases {
        let p = ((x - lower) / (upper - lower) * 2f64.powi(32)).floor() / 2f64.powi(32);
        for seed in [0, 12345] {
            let r = Rounder::new(
                f,
                RoundOptions {
                    rounding: Rounding::Stochastic,
                    overflow: Overflow::Saturate,
                    seed,
                    ..RoundOptions::default()
                },
            );
            // The exact f64 path, value by value.
            let ups = (0..N)
                .filter(|&i| {
                    let (v, ev) = r.round_at(x, i);
                    assert!(v == lower || v == upper.min(f.max()), "{f}: {x:e} -> {v:e}");
                    v != lower
                        || (upper > f.max() && matches!(ev, mixprec::format::Event::Overflow))
                })
                .count() as u64;
            assert!(
                plausible(ups, N, p, alpha),
                "{f} f64 path: {ups} ups of {N}, p = {p}"
            );
            // The f32 slice kernel.
            if x as f32 as f64 == x {
                let mut xs = vec![x as f32; N as usize];
                let c = r.round_f32_slice(&mut xs);
                let ups = xs.iter().filter(|&&v| f64::from(v) != lower).count() as u64 + c.overflow;
                assert!(
                    plausible(ups, N, p, alpha),
                    "{f} f32 path: {ups} ups of {N}, p = {p}"
                );
            }
        }
    }
}

/// A biased rounder fails the same test: the test can fail.
#[test]
fn the_unbiasedness_test_rejects_nearest() {
    let x = 1.0 + 0.3 * 2f64.powi(-10);
    let r = Rounder::new(FP16, RoundOptions::default());
    let ups = (0..200_000u64)
        .filter(|&i| r.round_at(x, i).0 != 1.0)
        .count() as u64;
    assert!(!plausible(ups, 200_000, 0.3, 1e-6));
}
