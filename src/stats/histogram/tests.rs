use super::*;
use crate::stats::testdata::{Rng, awkward_f32};

/// The naive reference: the bin of a positive finite f64 by arithmetic (a log2 guess, corrected
/// by exact comparisons with powers of two), not by bits.
fn reference_bin(m: f64, s: u32) -> i32 {
    let mut e = m.log2().floor() as i32;
    e = e.clamp(E_MIN, E_MAX);
    while e > E_MIN && pow2(e) > m {
        e -= 1;
    }
    while e < E_MAX && pow2(e + 1) <= m {
        e += 1;
    }
    // m / 2^e is in [1, 2) and exact (dividing by a power of two into the normal range).
    let f = if e < -1000 {
        m * pow2(600) / pow2(e + 600)
    } else {
        m / pow2(e)
    };
    let j = ((f - 1.0) * f64::from(1u32 << s)).floor() as i32;
    (e << s) + j
}

/// Nonempty bins; zeros, nan, +inf, -inf, negatives; amax; smallest nonzero magnitude.
type Reference = (Vec<(i32, u64)>, [u64; 5], f64, Option<f64>);

fn reference(xs: &[f64], s: u32) -> Reference {
    let mut bins = std::collections::BTreeMap::new();
    let mut c = [0u64; 5]; // zeros, nan, +inf, -inf, negatives
    let mut amax = 0f64;
    let mut min: Option<f64> = None;
    for &x in xs {
        if x.is_nan() {
            c[1] += 1;
        } else if x == f64::INFINITY {
            c[2] += 1;
        } else if x == f64::NEG_INFINITY {
            c[3] += 1;
        } else if x == 0.0 {
            c[0] += 1;
        } else {
            *bins.entry(reference_bin(x.abs(), s)).or_insert(0u64) += 1;
            c[4] += u64::from(x < 0.0);
            amax = amax.max(x.abs());
            min = Some(min.map_or(x.abs(), |m: f64| m.min(x.abs())));
        }
    }
    (bins.into_iter().collect(), c, amax, min)
}

fn nonempty(h: &Histogram) -> Vec<(i32, u64)> {
    h.bins()
        .filter(|b| b.count > 0)
        .map(|b| (b.index, b.count))
        .collect()
}

fn check_against_reference(h: &Histogram, xs: &[f64]) {
    let (bins, c, amax, min) = reference(xs, h.sub_bins_log2());
    assert_eq!(nonempty(h), bins);
    assert_eq!(
        [h.zeros(), h.nan(), h.pos_inf(), h.neg_inf(), h.negatives()],
        c
    );
    assert_eq!(h.amax(), amax);
    assert_eq!(h.min_nonzero(), min);
    assert_eq!(h.count(), xs.len() as u64);
    let finite: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    let sum_abs: f64 = finite.iter().map(|x| x.abs()).sum();
    let sum_sq: f64 = finite.iter().map(|x| x * x).sum();
    // f64 sums of huge values overflow to inf in both.
    let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-12 * b;
    assert!(close(h.sum_abs(), sum_abs), "{} {sum_abs}", h.sum_abs());
    assert!(close(h.sum_sq(), sum_sq), "{} {sum_sq}", h.sum_sq());
}

#[test]
fn f32_matches_reference() {
    for s in [0, 1, 3, MAX_SUB_BINS_LOG2] {
        // Awkward sizes: chunk remainders and several chunks.
        for n in [1, 9, 1023, 3 * CHUNK + 7] {
            let xs = awkward_f32(s as u64 * 1000 + n as u64, n);
            let mut h = Histogram::new(s);
            h.add_f32(&xs);
            let wide: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
            check_against_reference(&h, &wide);
        }
    }
}

#[test]
fn f64_matches_reference() {
    let mut rng = Rng(7);
    let mut xs: Vec<f64> = (0..20_000)
        .map(|i| match i % 3 {
            0 => f64::from_bits(rng.next_u64()),
            1 => 2f64.powf(rng.uniform() * 2000.0 - 1000.0),
            _ => f64::from_bits(rng.next_u64() >> 12), // subnormal
        })
        .collect();
    xs.extend([
        0.0,
        -0.0,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::from_bits(1),
        f64::INFINITY,
        -f64::INFINITY,
        f64::NAN,
        1.0,
        -1.5,
    ]);
    for s in [0, 2, MAX_SUB_BINS_LOG2] {
        let mut h = Histogram::new(s);
        h.add_f64(&xs);
        check_against_reference(&h, &xs);
    }
}

#[test]
fn binade_edges_are_exact() {
    for s in [0, 2] {
        let mut xs = Vec::new();
        for e in -149..=127 {
            let p = 2f64.powi(e) as f32;
            xs.extend([
                p,
                f32::from_bits(p.to_bits().saturating_sub(1)),
                f32::from_bits(p.to_bits() + 1),
            ]);
            xs.extend([p * 1.25, p * 1.75, -p * 1.5]);
        }
        xs.retain(|x| x.is_finite());
        let mut h = Histogram::new(s);
        h.add_f32(&xs);
        let wide: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        check_against_reference(&h, &wide);
    }
    let mut h = Histogram::new(2);
    h.add_f32(&[1.0, 1.25, 1.2499999, 0.75, 2f32.powi(-149)]);
    let bins: Vec<(i32, f64, u64)> = h
        .bins()
        .filter(|b| b.count > 0)
        .map(|b| (b.index, b.lower, b.count))
        .collect();
    assert_eq!(
        bins,
        [
            (-149 * 4, 2f64.powi(-149), 1),
            (-4 + 2, 0.75, 1),
            (0, 1.0, 2),
            (1, 1.25, 1)
        ]
    );
}

#[test]
fn merge_equals_build_on_concatenation() {
    let a = awkward_f32(1, 5000);
    let b = awkward_f32(2, 7000);
    let mut ha = Histogram::new(2);
    ha.add_f32(&a);
    let mut hb = Histogram::new(2);
    hb.add_f32(&b);
    let mut merged = ha.clone();
    merged.merge(&hb);
    let mut both = Histogram::new(2);
    both.add_f32(&[a.clone(), b.clone()].concat());
    assert_eq!(nonempty(&merged), nonempty(&both));
    assert_eq!(merged.count(), both.count());
    assert_eq!(merged.negatives(), both.negatives());
    assert_eq!(
        (merged.amax(), merged.min_nonzero()),
        (both.amax(), both.min_nonzero())
    );
    // The chunks differ (two parts versus one buffer), so the sums agree to rounding only.
    assert!((merged.sum_sq() - both.sum_sq()).abs() <= 1e-14 * both.sum_sq());
    assert!((merged.sum_abs() - both.sum_abs()).abs() <= 1e-14 * both.sum_abs());
    // Merging into an empty histogram is the identity.
    let mut empty = Histogram::new(2);
    empty.merge(&ha);
    assert_eq!(empty, ha);
}

#[test]
fn parallel_is_bit_identical_whatever_the_threads() {
    let xs = awkward_f32(3, 40 * CHUNK + 123);
    let xs64: Vec<f64> = xs.iter().map(|&x| f64::from(x) * 1e-3).collect();
    let mut seq = Histogram::new(1);
    seq.add_f32(&xs);
    let mut seq64 = Histogram::new(1);
    seq64.add_f64(&xs64);
    for threads in [1, 2, 3, 7] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let par = pool.install(|| Histogram::from_f32(1, &xs));
        assert_eq!(par, seq, "{threads} threads");
        assert_eq!(par.sum_sq().to_bits(), seq.sum_sq().to_bits());
        let par64 = pool.install(|| Histogram::from_f64(1, &xs64));
        assert_eq!(par64, seq64, "{threads} threads");
    }
}

#[test]
fn serialized_form_is_compact_and_round_trips() {
    let mut h = Histogram::new(0);
    h.add_f32(&[1e-3, 2e-3, 4e-3, -8e-3, 0.0, f32::NAN]);
    let json = serde_json::to_string(&h).unwrap();
    assert!(json.len() < 300, "{json}");
    assert!(json.contains("\"bins\":[1,1,1,1]"), "{json}");
    let back: Histogram = serde_json::from_str(&json).unwrap();
    assert_eq!(back, h);
    let empty = Histogram::new(3);
    let back: Histogram = serde_json::from_str(&serde_json::to_string(&empty).unwrap()).unwrap();
    assert_eq!(back, empty);
    for bad in [
        json.replace("\"bins\":[1,1,1,1]", "\"bins\":[0,1]"),
        json.replace("\"sub_bins_log2\":0", "\"sub_bins_log2\":9"),
        json.replace("\"first_bin\":-10", "\"first_bin\":5000"),
    ] {
        assert!(serde_json::from_str::<Histogram>(&bad).is_err(), "{bad}");
    }
}

#[test]
fn summaries() {
    let mut h = Histogram::new(0);
    h.add_f32(&[0.0, 2.0, -4.0, f32::INFINITY]);
    assert_eq!(h.mean_abs(), 2.0);
    assert_eq!(h.sum_sq(), 20.0);
    assert_eq!(h.exponent_counts(), [(1, 1), (2, 1)]);
    assert_eq!(Histogram::new(0).mean_abs(), 0.0);
    assert_eq!(Histogram::new(0).min_nonzero(), None);
}

#[test]
fn every_build_of_the_chunk_loop_gives_the_same_result() {
    for n in [0, 1, 9, 1023, CHUNK] {
        let xs = awkward_f32(n as u64 + 77, n);
        let xs64: Vec<f64> = awkward_f32(n as u64 + 78, n)
            .iter()
            .map(|&x| f64::from(x) * 1e-290)
            .collect();
        let base = kernels::scalars(&xs, kernels::Isa::Baseline);
        let base64 = kernels::scalars(&xs64, kernels::Isa::Baseline);
        for isa in kernels::Isa::available() {
            assert_eq!(kernels::scalars(&xs, isa), base, "{isa:?}");
            assert_eq!(kernels::scalars(&xs64, isa), base64, "{isa:?}");
        }
    }
}

#[test]
fn ratios_match_quotients_formed_one_by_one() {
    let n = 3 * CHUNK + 5;
    let mut num = awkward_f32(5, n);
    let mut den = awkward_f32(6, n);
    // Quotients exactly on and just off bin edges, zero numerators and denominators.
    num[..6].copy_from_slice(&[1.0, 1.0, 3.0, 0.0, 5.0, f32::from_bits(1)]);
    den[..6].copy_from_slice(&[0.25, 1.0 + f32::EPSILON, 2.0, 7.0, 0.0, f32::MAX]);
    for s in [0, 3] {
        let mut got = Histogram::new(s);
        got.add_ratios_f32(&num, &den);
        let quotients: Vec<f64> = num
            .iter()
            .zip(&den)
            .filter(|(_, d)| **d != 0.0)
            .map(|(n, d)| f64::from(n.abs()) / f64::from(d.abs()))
            .collect();
        let want = Histogram::from_f64(s, &quotients);
        assert_eq!(got.bins, want.bins, "s = {s}");
        assert_eq!(
            (got.first_bin, got.zeros, got.nan, got.pos_inf, got.amax),
            (
                want.first_bin,
                want.zeros,
                want.nan,
                want.pos_inf,
                want.amax
            )
        );
        assert_eq!(got.min_nonzero, want.min_nonzero);
        assert!((got.sum_abs - want.sum_abs).abs() <= 1e-12 * want.sum_abs);
        let mut par = Histogram::new(s);
        par.par_add_ratios_f32(&num, &den);
        assert_eq!(par, got);
        assert_eq!(par.sum_abs.to_bits(), got.sum_abs.to_bits());
    }
    // 4 = 1 / 0.25 is in the bin of 4; 1 / (1 + eps) is just below 1: the bin of 0.5.
    let mut h = Histogram::new(0);
    h.add_ratios_f32(&num[..2], &den[..2]);
    assert_eq!(h.exponent_counts(), [(-1, 1), (0, 0), (1, 0), (2, 1)]);
}

#[test]
fn every_build_keeps_the_same_quotients() {
    // Zero denominators of both signs, NaN and infinite ones, runs of zeros longer than a vector,
    // at every offset of the four-lane groups and in the scalar tail.
    for n in [0, 1, 3, 4, 5, 17, 1023] {
        let num = awkward_f32(n as u64 + 31, n);
        let mut den = awkward_f32(n as u64 + 32, n);
        for (i, d) in den.iter_mut().enumerate() {
            match i % 11 {
                0 | 4 | 5 | 6 | 7 | 8 => *d = 0.0,
                2 => *d = -0.0,
                9 if i % 3 == 0 => *d = f32::NAN,
                10 if i % 2 == 0 => *d = f32::NEG_INFINITY,
                _ => {}
            }
        }
        let want: Vec<u64> = num
            .iter()
            .zip(&den)
            .filter(|(_, d)| **d != 0.0)
            .map(|(n, d)| (f64::from(n.abs()) / f64::from(d.abs())).to_bits())
            .collect();
        for isa in kernels::Isa::available() {
            let mut out = vec![0f64; n + 4];
            let kept = kernels::kept_quotients(&num, &den, &mut out, isa);
            let got: Vec<u64> = out[..kept].iter().map(|q| q.to_bits()).collect();
            assert_eq!(got, want, "{isa:?}, n = {n}");
        }
    }
}
