use super::*;
use crate::format::{BF16, FP16, RoundOptions, Rounder};
use crate::stats::testdata::{Rng, awkward_f32};

const A: (&str, Class) = ("a", Class::Weight);
const B: (&str, Class) = ("b", Class::Activation);

/// The slow reference: one capture of `xs` at each of the sites A and B (B holds the values
/// negated), built with the library's own histogram and rounder, as the binding adds a tensor.
fn capture(xs: &[f32], layers: &[&str]) -> CaptureBuilder {
    let mut c = CaptureBuilder::new(layers.iter().map(|l| l.to_string()).collect());
    let r = Rounder::new(FP16, RoundOptions::default());
    if xs.is_empty() {
        return c;
    }
    for ((layer, class), sign) in [(A, 1.0f32), (B, -1.0)] {
        let mut ys: Vec<f32> = xs.iter().map(|x| sign * x).collect();
        let site = c.site(layer, class, None);
        site.values.add_f32(&ys);
        site.rounding += r.round_f32_slice(&mut ys);
        site.rounded_into = Some(FP16);
    }
    c
}

/// A site's histogram as JSON with its two floating-point sums taken out, and the sums.
fn split_sums(s: &SiteCapture) -> (serde_json::Value, f64, f64) {
    let mut v = serde_json::to_value(s).unwrap();
    let h = v["values"].as_object_mut().unwrap();
    h.remove("sum_abs");
    h.remove("sum_sq");
    (v, s.values.sum_abs(), s.values.sum_sq())
}

#[test]
fn the_merge_of_a_tensors_parts_counts_what_a_capture_of_the_whole_does() {
    for n in [1, 2, 9, 1023, 40_000] {
        let xs = awkward_f32(n as u64, n);
        for cut in [0, 1, n / 3, n / 2, n - 1, n] {
            let whole = capture(&xs, &["a", "b"]).sites();
            let mut merged = capture(&xs[..cut], &["a", "b"]);
            merged.merge(&capture(&xs[cut..], &["a", "b"]).sites());
            let merged = merged.sites();
            assert_eq!(merged.len(), whole.len(), "n {n} cut {cut}");
            for (m, w) in merged.iter().zip(&whole) {
                let (mv, m_abs, m_sq) = split_sums(m);
                let (wv, w_abs, w_sq) = split_sums(w);
                // Bins, zeros, NaN, infinities, negatives, amax, smallest nonzero magnitude and
                // the rounding counts: integers, a max and a min, exact.
                assert_eq!(mv, wv, "n {n} cut {cut} site {}", m.layer);
                // The sums add in another order: a sum of n nonnegative f64 terms, in any order,
                // is within (n - 1) * 2^-53 of the exact one, relatively; two such sums within
                // twice that, under n * 2^-52.
                let tol = |exact: f64| n as f64 * f64::EPSILON * exact;
                assert!(
                    (m_abs - w_abs).abs() <= tol(w_abs),
                    "n {n} cut {cut}: {m_abs} {w_abs}"
                );
                assert!(
                    (m_sq - w_sq).abs() <= tol(w_sq),
                    "n {n} cut {cut}: {m_sq} {w_sq}"
                );
            }
        }
    }
}

#[test]
fn the_merge_is_bit_exact_where_the_sums_are() {
    // Multiples of 2^-6 below 2^10: every partial sum of magnitudes and of squares has fewer
    // than 53 significant bits, so every order of adding gives the exact sum.
    let mut rng = Rng(7);
    let xs: Vec<f32> = (0..5000)
        .map(|_| (rng.next_u64() % 131_072) as f32 / 64.0 - 1024.0)
        .collect();
    let whole = capture(&xs, &["a", "b"]).sites();
    for cut in [0, 1, 2047, 4999, 5000] {
        let mut merged = capture(&xs[..cut], &["a", "b"]);
        merged.merge(&capture(&xs[cut..], &["a", "b"]).sites());
        assert_eq!(merged.sites(), whole, "cut {cut}");
    }
}

#[test]
fn a_site_only_the_other_capture_holds_is_added_in_record_order() {
    let xs = [1.0f32, -2.0, 0.0];
    // This capture has nothing at layer "a"; the other has both sites; layers order them.
    let mut mine = CaptureBuilder::new(vec!["a".into(), "b".into()]);
    mine.site("b", Class::Activation, None)
        .values
        .add_f32(&[3.0]);
    let mut other = capture(&xs, &["a", "b"]);
    other
        .site("b", Class::ActivationGrad, Some("x"))
        .rounded_into = Some(BF16);
    mine.merge(&other.sites());
    let sites = mine.sites();
    let keys: Vec<_> = sites
        .iter()
        .map(|s| {
            (
                s.layer.as_str(),
                s.tensor,
                s.part.as_deref(),
                s.rounded_into,
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("a", Class::Weight, None, Some(FP16)),
            ("b", Class::Activation, None, Some(FP16)),
            ("b", Class::ActivationGrad, Some("x"), Some(BF16)),
        ]
    );
    assert_eq!(sites[1].values.count(), 4);
    assert_eq!(sites[1].values.amax(), 3.0);
    assert_eq!(sites[0], other.sites()[0]);
}

#[test]
fn sites_cross_json_unchanged() {
    // What ranks send each other: every f64 (amax, the smallest subnormal, sums) round-trips.
    let xs: Vec<f32> = awkward_f32(3, 3000)
        .into_iter()
        .filter(|x| x.abs() < 1e30)
        .collect();
    let sites = capture(&xs, &["a", "b"]).sites();
    let json = serde_json::to_string(&sites).unwrap();
    let back: Vec<SiteCapture> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, sites);
    assert_eq!(
        back[0].values.sum_sq().to_bits(),
        sites[0].values.sum_sq().to_bits()
    );
}

#[test]
fn the_batch_classes_are_the_activations_and_what_is_cast_from_them() {
    let batch: Vec<Class> = Class::ALL.into_iter().filter(|c| c.from_batch()).collect();
    assert_eq!(
        batch,
        [
            Class::Activation,
            Class::ActivationGrad,
            Class::GemmInput,
            Class::GemmGradOutput
        ]
    );
}
