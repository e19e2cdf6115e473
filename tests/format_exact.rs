//! Rounding from binary64 checked against an exact reference in every mode, overflow rule and
//! subnormal setting.
//!
//! The reference shares nothing with the implementation: it enumerates every magnitude the
//! format can hold (by decoding every bit pattern), finds the two neighbours of `|x|` by binary
//! search and decides between them by exact comparisons with their midpoint (which is exact in
//! f64: the formats have at most 24 significant bits). Overflow is a neighbour above the largest
//! finite value (the value the next exponent would give), and flush-to-zero uses a grid extended
//! below the smallest normal with full precision (the exponent range unbounded below).

use mixprec::format::{
    BF16, Encoding, Event, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FP16, FloatFormat,
    Overflow, RoundOptions, Rounder, Rounding, TF32, stochastic_bits,
};

mod common;
use common::stochastic;

/// The grid of nonnegative magnitudes one rounding chooses from, with each point's parity.
struct Grid {
    points: Vec<f64>,
    /// Whether the point's last mantissa bit is odd (ties go to the even one).
    odd: Vec<bool>,
}

fn grid(f: FloatFormat, subnormals: bool) -> Grid {
    let m = f.man_bits() as i32;
    let mut pts: Vec<(f64, bool)> = Vec::new();
    if subnormals {
        for bits in 0..1u32 << (f.exp_bits() + f.man_bits()) {
            let v = f.decode(bits);
            if v.is_finite() {
                pts.push((v, bits & 1 == 1));
            }
        }
    } else {
        pts.push((0.0, false));
        // Full-precision binades from well below the smallest normal.
        for e in f.emin() - 60..f.emin() {
            for j in 0..1u64 << m {
                let v = ((1u64 << m) + j) as f64 * 2f64.powi(e - m);
                pts.push((v, j & 1 == 1));
            }
        }
        for bits in 1u32 << f.man_bits()..1u32 << (f.exp_bits() + f.man_bits()) {
            let v = f.decode(bits);
            if v.is_finite() {
                pts.push((v, bits & 1 == 1));
            }
        }
    }
    // The value past the largest finite one, as if the exponent range went on.
    let ulp = 2f64.powi(f.emax() - m);
    let beyond = f.max() + ulp;
    pts.push((beyond, f.encoding() == Encoding::FiniteNan));
    pts.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    Grid {
        points: pts.iter().map(|p| p.0).collect(),
        odd: pts.iter().map(|p| p.1).collect(),
    }
}

/// The exact reference for one finite nonzero-or-zero input.
fn reference(f: FloatFormat, g: &Grid, o: RoundOptions, x: f64, index: u64) -> (f64, Event) {
    if x.is_nan() {
        return (f64::NAN, Event::Nan);
    }
    let neg = x.is_sign_negative();
    let sign = |v: f64| if neg { -v } else { v };
    if x.is_infinite() {
        let r = match (o.overflow, f.has_infinity(), f.has_nan()) {
            (Overflow::Saturate, _, _) | (_, _, false) => sign(f.max()),
            (Overflow::Ieee, true, _) => x,
            (Overflow::Ieee, false, true) => f64::NAN,
        };
        return (r, Event::Infinite);
    }
    let a = x.abs();
    if a == 0.0 {
        return (x, Event::Normal);
    }
    let pts = &g.points;
    let i = pts.partition_point(|&p| p <= a); // pts[i-1] <= a < pts[i]
    let (mag, is_overflow) = if i == pts.len() {
        // Beyond the grid: only directed rounding toward zero stays finite.
        (f64::INFINITY, true)
    } else {
        let (lo, hi) = (pts[i - 1], pts[i]);
        let r = if lo == a {
            lo
        } else {
            let mid = (lo + hi) / 2.0;
            match o.rounding {
                Rounding::NearestEven => {
                    // Above the midpoint, or on it with an odd lower neighbour: up.
                    if a > mid || (a == mid && g.odd[i - 1]) {
                        hi
                    } else {
                        lo
                    }
                }
                Rounding::TowardZero => lo,
                Rounding::Up => {
                    if neg {
                        lo
                    } else {
                        hi
                    }
                }
                Rounding::Down => {
                    if neg {
                        hi
                    } else {
                        lo
                    }
                }
                Rounding::Stochastic => {
                    let frac32 = ((a - lo) / (hi - lo) * 2f64.powi(32)).floor();
                    if frac32 > f64::from(stochastic_bits(o.seed, index)) {
                        hi
                    } else {
                        lo
                    }
                }
            }
        };
        (r, r > f.max())
    };
    if is_overflow {
        let toward_zero = match o.rounding {
            Rounding::TowardZero => true,
            Rounding::Up => neg,
            Rounding::Down => !neg,
            _ => false,
        };
        let r = match o.overflow {
            _ if !f.has_nan() => sign(f.max()),
            Overflow::Saturate => sign(f.max()),
            Overflow::Ieee if toward_zero => sign(f.max()),
            Overflow::Ieee if f.has_infinity() => sign(f64::INFINITY),
            Overflow::Ieee => f64::NAN,
        };
        return (r, Event::Overflow);
    }
    if mag == 0.0 || (!o.subnormals && mag < f.min_normal()) {
        return (sign(0.0), Event::Underflow);
    }
    let ev = if mag < f.min_normal() {
        Event::Subnormal
    } else {
        Event::Normal
    };
    (sign(mag), ev)
}

fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() + 1)
    }
}

fn next_down(x: f64) -> f64 {
    if x == 0.0 {
        -f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

/// Inputs at, just above and just below every grid point and every midpoint, and specials.
fn probes(g: &Grid, stride: usize) -> Vec<f64> {
    let mut xs = vec![
        0.0,
        f64::from_bits(1),
        f64::MIN_POSITIVE,
        1e-300,
        1e300,
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
    ];
    let pts = &g.points;
    for i in (0..pts.len()).step_by(stride) {
        let p = pts[i];
        xs.extend([p, next_up(p), next_down(p).max(0.0)]);
        if let Some(&q) = pts.get(i + 1) {
            let mid = (p + q) / 2.0;
            xs.extend([mid, next_up(mid), next_down(mid), (p + mid) / 2.0]);
        }
    }
    let negated: Vec<f64> = xs.iter().map(|x| -x).collect();
    xs.extend(negated);
    xs
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn check_format(f: FloatFormat, stride: usize) {
    let modes = Rounding::ALL;
    for subnormals in [true, false] {
        let g = grid(f, subnormals);
        let xs = probes(&g, stride);
        for rounding in modes {
            for overflow in [Overflow::Ieee, Overflow::Saturate] {
                let o = RoundOptions {
                    rounding,
                    overflow,
                    subnormals,
                    seed: 7,
                };
                let r = Rounder::new(f, o);
                for (index, &x) in xs.iter().enumerate() {
                    let index = index as u64 * 977;
                    let got = r.round_at(x, index);
                    let want = reference(f, &g, o, x, index);
                    assert!(
                        same(got.0, want.0) && got.1 == want.1,
                        "{f} {o:?}: x = {x:e} ({:#x}): got {got:?}, want {want:?}",
                        x.to_bits()
                    );
                }
            }
        }
    }
}

#[test]
fn fp16_exact() {
    check_format(FP16, 1);
}

#[test]
fn fp8_formats_exact() {
    for f in [FP8_E4M3, FP8_E5M2, "e4m3".parse().unwrap()] {
        check_format(f, 1);
    }
}

/// The OCP FP6/FP4 elements: the all-ones exponent holds finite values, and everything out of
/// range saturates in both overflow rules (the reference grid is their decoded patterns).
#[test]
fn ocp_fp6_fp4_exact() {
    for f in [FP6_E2M3, FP6_E3M2, FP4_E2M1] {
        check_format(f, 1);
    }
}

/// No NaN pattern: a NaN input stays NaN in the simulation (one quiet payload, counted as NaN)
/// and has no encoding; infinities saturate.
#[test]
fn ocp_fp4_nan_and_infinity() {
    for f in [FP6_E2M3, FP6_E3M2, FP4_E2M1] {
        let r = Rounder::new(f, RoundOptions::default());
        let (v, ev) = r.round_at(-f64::NAN, 0);
        assert!(
            v.is_nan() && v.is_sign_negative() && ev == Event::Nan,
            "{f}"
        );
        assert_eq!(f.encode(f64::NAN), None, "{f}");
        assert_eq!(r.round(f64::INFINITY), f.max(), "{f}");
        assert_eq!(r.round(-1e30), -f.max(), "{f}");
        // Every pattern decodes to a finite value and encodes back.
        for bits in 0..1u32 << f.total_bits() {
            let v = f.decode(bits);
            assert!(v.is_finite(), "{f} {bits:#x}");
            assert_eq!(f.encode(v), Some(bits), "{f} {bits:#x}");
        }
    }
    assert_eq!(FP4_E2M1.decode(0b0111), 6.0);
    assert_eq!(FP6_E2M3.decode(0b01_1111), 7.5);
    assert_eq!(FP6_E3M2.decode(0b01_1111), 28.0);
}

#[test]
fn small_custom_formats_exact() {
    for name in ["e2m1", "e2m3", "e3m2", "e8m1", "e5m7", "e6m4", "e3m9"] {
        check_format(name.parse().unwrap(), 1);
    }
}

#[test]
fn bf16_exact() {
    check_format(BF16, if cfg!(debug_assertions) { 7 } else { 1 });
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "slow in debug builds; runs under cargo test --release"
)]
fn tf32_exact() {
    check_format(TF32, 3);
}

/// Rounding through f32 first rounds twice: 1 + 2^-11 + 2^-40 becomes the tie 1 + 2^-11 in f32,
/// which fp16 then rounds down to 1; rounded once it goes up to 1 + 2^-10.
#[test]
fn single_rounding_just_above_a_tie() {
    let r = Rounder::new(FP16, RoundOptions::default());
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(r.round(x), 1.0 + 2f64.powi(-10));
    assert_eq!(r.round(f64::from(x as f32)), 1.0);
    // Same with bf16 and the overflow threshold of fp16 (65520 is the tie with infinity).
    let b = Rounder::new(BF16, RoundOptions::default());
    assert_eq!(
        b.round(1.0 + 2f64.powi(-8) + 2f64.powi(-50)),
        1.0 + 2f64.powi(-7)
    );
    assert_eq!(r.round(65519.999999), 65504.0);
    assert_eq!(r.round(65520.0), f64::INFINITY);
    assert_eq!(r.round(-65520.0), f64::NEG_INFINITY);
}

#[test]
fn directed_overflow_follows_ieee_7_4() {
    let opts = |rounding| RoundOptions {
        rounding,
        ..RoundOptions::default()
    };
    let big = 1e6;
    let rz = Rounder::new(FP16, opts(Rounding::TowardZero));
    assert_eq!(rz.round(big), 65504.0);
    assert_eq!(rz.round(-big), -65504.0);
    let up = Rounder::new(FP16, opts(Rounding::Up));
    assert_eq!(up.round(big), f64::INFINITY);
    assert_eq!(up.round(-big), -65504.0);
    let down = Rounder::new(FP16, opts(Rounding::Down));
    assert_eq!(down.round(big), 65504.0);
    assert_eq!(down.round(-big), f64::NEG_INFINITY);
    // OCP e4m3 has no infinity: overflow is NaN, and 464 (the tie above 448) stays finite.
    let e4 = Rounder::new(FP8_E4M3, RoundOptions::default());
    assert!(e4.round(465.0).is_nan());
    assert_eq!(e4.round(464.0), 448.0);
    assert!(e4.round(f64::INFINITY).is_nan());
    let sat = Rounder::new(
        FP8_E4M3,
        RoundOptions {
            overflow: Overflow::Saturate,
            ..RoundOptions::default()
        },
    );
    assert_eq!(sat.round(1e9), 448.0);
    assert_eq!(sat.round(f64::NEG_INFINITY), -448.0);
}

#[test]
fn sign_of_zero_is_kept() {
    let r = Rounder::new(FP16, RoundOptions::default());
    let z = r.round(-1e-30);
    assert_eq!(z, 0.0);
    assert!(z.is_sign_negative());
    assert!(r.round(-0.0).is_sign_negative());
    let ftz = Rounder::new(
        FP16,
        RoundOptions {
            subnormals: false,
            ..RoundOptions::default()
        },
    );
    let z = ftz.round(-3e-5);
    assert_eq!(z, 0.0);
    assert!(z.is_sign_negative());
}

/// The scalar path's stochastic rounding on its boundary: up iff `floor(f 2^32) > u`, strictly,
/// with `u` the stream's bits at the value's position ([`stochastic_bits`]). A value whose
/// fraction of the gap is exactly `u / 2^32` stays at its lower neighbour (`>=` would round it
/// up); one 2^-32 of the gap more rounds up. Normals (1 + f 2^-10), subnormals (3 2^-24 +
/// f 2^-24) and values under the smallest subnormal (f 2^-24), both signs, at positions in
/// the first and later blocks of 2^32 (another random key).
#[test]
fn stochastic_rounding_is_strict_at_the_random_bits() {
    let seed = 0x005e_ed0f_5eed;
    let r = Rounder::new(FP16, stochastic(seed));
    let p = |e: i32| 2f64.powi(e);
    let mut indices: Vec<u64> = (0..2000).collect();
    indices.extend([1 << 32, (1 << 32) + 7, 5 << 40, u64::MAX]);
    for index in indices {
        let u = f64::from(stochastic_bits(seed, index));
        for (lower, gap) in [(1.0, p(-10)), (3.0 * p(-24), p(-24)), (0.0, p(-24))] {
            for sign in [1.0, -1.0] {
                let at = sign * (lower + u * p(-32) * gap);
                let above = sign * (lower + (u + 1.0) * p(-32) * gap);
                assert_eq!(r.round_at(at, index).0, sign * lower, "{index} {at:e}");
                assert_eq!(r.round_at(above, index).0, sign * (lower + gap), "{index}");
            }
        }
    }
}
