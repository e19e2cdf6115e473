//! What the teaching figures draw.

use super::*;
use crate::format::{BF16, FP8_E4M3, FP8_E5M2, FP16, FP32, TF32};

/// Every value of fp8-e4m3: 7 subnormals (k/8 x 2^-6) and 119 normals (exponents 1..15 with 8
/// mantissas each, less the NaN pattern), up to 448; e5m2: 3 subnormals, 120 normals up to 57344
/// (the all-ones exponent holds infinities and NaN).
#[test]
fn number_lines_hold_every_value_in_its_zone() {
    let l = number_line(FP8_E4M3).unwrap();
    assert_eq!(l.subnormals.len(), 7);
    assert_eq!(l.subnormals[0], 2f64.powi(-9));
    assert_eq!(*l.subnormals.last().unwrap(), 7.0 / 8.0 * 2f64.powi(-6));
    assert_eq!(l.normals.len(), 15 * 8 - 1);
    assert_eq!(
        (l.normals[0], *l.normals.last().unwrap()),
        (2f64.powi(-6), 448.0)
    );
    assert!(l.subnormals.iter().all(|&x| x < FP8_E4M3.min_normal()));
    assert!(l.normals.windows(2).all(|w| w[0] < w[1]));
    let l = number_line(FP8_E5M2).unwrap();
    assert_eq!((l.subnormals.len(), l.normals.len()), (3, 30 * 4));
    assert_eq!(*l.normals.last().unwrap(), 57344.0);
    assert!(number_line(FP16).is_none());
}

#[test]
fn ranges_are_the_formats_powers_of_two() {
    let r = range(FP16);
    assert_eq!((r.min_subnormal, r.min_normal), (-24.0, -14.0));
    assert_eq!(r.max, 65504f64.log2());
    let r = range(BF16);
    assert_eq!((r.min_subnormal, r.min_normal), (-133.0, -126.0));
    assert_eq!(range(FP32).min_subnormal, -149.0);
    assert_eq!(range(TF32).min_subnormal, -136.0);
    assert_eq!(range(FP8_E4M3).max, 448f64.log2());
}

/// The relative spacing: 1 at fp16's smallest subnormal (the next value is twice it), 2^-10 at
/// the smallest normal and on to the max, each checked against the next value's distance.
#[test]
fn relative_spacing_falls_over_the_subnormals_then_stays_at_the_precision() {
    let s = relative_spacing(FP16);
    assert_eq!(
        s,
        [
            (2f64.powi(-24), 1.0),
            (2f64.powi(-14), 2f64.powi(-10)),
            (65504.0, 2f64.powi(-10))
        ]
    );
    for &(x, rel) in &s[..2] {
        assert_eq!(
            (FP16.decode(FP16.encode(x).unwrap() + 1) - x) / x,
            rel,
            "{x}"
        );
    }
    let chart = spacing_chart(&[FP16, BF16]);
    assert_eq!(chart.lines.len(), 2);
    assert_eq!(chart.lines[1].points, relative_spacing(BF16));
    assert!(chart.lines[0].name.starts_with("fp16"));
}

/// The band: the octaves holding the central 98% (1% cut at each end).
#[test]
fn gradient_band_cuts_the_tails() {
    let octaves: BTreeMap<i32, u64> = [(-30, 1), (-20, 49), (-10, 49), (0, 1)].into();
    assert_eq!(gradient_band(&octaves, 0.98), Some((-20, -9)));
    let wide: BTreeMap<i32, u64> = [(-30, 5), (-20, 45), (-10, 45), (0, 5)].into();
    assert_eq!(gradient_band(&wide, 0.98), Some((-30, 1)));
    assert_eq!(gradient_band(&BTreeMap::new(), 0.98), None);
    // Captured at scale 2^4: unscaled, an octave 4 lower.
    let mut h = Histogram::new(0);
    h.add_f32(&[1.0, 2.0]);
    let mut o = BTreeMap::new();
    add_unscaled(&mut o, &h, 16.0);
    assert_eq!(o, [(-4, 1), (-3, 1)].into());
}

#[test]
fn powers_of_two_exactly() {
    assert_eq!(power(65504.0), "(2 - 2^-10) x 2^15");
    assert_eq!(power(448.0), "(2 - 2^-2) x 2^8");
    assert_eq!(power(f64::from(f32::MAX)), "(2 - 2^-23) x 2^127");
    assert_eq!(power(2f64.powi(-24)), "2^-24");
    assert_eq!(power(3.0), "(2 - 2^-1) x 2^1");
    assert_eq!(power(5.0), "2^2.3219");
}

/// At the edge: with half the values kept, a quarter (2 of 8) is cut at each end; the 2 values
/// of the lowest octave are exactly that quarter, so the band starts one octave up.
#[test]
fn gradient_band_edges_are_exact() {
    let octaves: BTreeMap<i32, u64> = [(0, 2), (1, 4), (2, 2)].into();
    assert_eq!(gradient_band(&octaves, 0.5), Some((1, 2)));
}

/// Every element format gets its own colour in the spacing chart (nine formats: fp4-e2m1
/// shared fp32's blue when the palette had eight colours).
#[test]
fn every_format_has_its_own_colour() {
    let formats: Vec<FloatFormat> = crate::format::PRESETS.iter().map(|(_, f)| *f).collect();
    let chart = spacing_chart(&formats);
    let mut colours: Vec<_> = chart
        .lines
        .iter()
        .map(|l| (l.color.0, l.color.1, l.color.2))
        .collect();
    colours.sort_unstable();
    colours.dedup();
    assert_eq!(colours.len(), formats.len());
}
