//! The explanation against itself and the JSON's spelling; exact decimals.

use super::*;

/// The value's fields agree with one another: the bits decode to what is stored, sign,
/// exponent and significand give it back, the neighbours hold the value between them and
/// are the format's own values, the error is stored minus value, the event and the scale
/// agree with rounding the scaled value; for every element preset, over many binades.
#[test]
fn explanation_agrees_with_itself() {
    let names = [
        "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "fp6-e2m3", "fp4-e2m1", "e3m2",
    ];
    let mut checked = 0;
    for name in names {
        let f: FloatFormat = name.parse().unwrap();
        for rounding in [Rounding::NearestEven, Rounding::TowardZero, Rounding::Up] {
            let r = Rounder::new(
                f,
                RoundOptions {
                    rounding,
                    ..RoundOptions::default()
                },
            );
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..3000 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let mantissa = 1.0 + (state >> 11) as f64 / (1u64 << 53) as f64;
                let e = (state % 64) as i32 - 40;
                let sign = if state & (1 << 7) == 0 { 1.0 } else { -1.0 };
                let x = sign * mantissa * 2f64.powi(e);
                let ex = explain(&x.to_string(), x, &r);
                assert_eq!(ex.value, x);
                let same = |a: f64, b: f64| a == b || a.is_nan() && b.is_nan();
                assert!(same(ex.stored, r.round(x)), "{name} {x}");
                let b = ex.bits.as_ref().expect("finite inputs store a pattern");
                assert!(same(f.decode(b.pattern), ex.stored));
                assert_eq!(b.hex, hex(f, b.pattern));
                if let (Some(e), Some(m)) = (b.exponent_value, b.significand) {
                    let s = if b.sign == 1 { -1.0 } else { 1.0 };
                    assert_eq!(s * m * 2f64.powi(e), ex.stored, "{name} {x}");
                }
                match (&ex.neighbours, ex.exactly_representable) {
                    (None, Some(true)) => assert_eq!(ex.stored, x),
                    (Some(n), Some(false)) => {
                        assert!(n.below < x && x < n.above, "{name} {x}");
                        for (v, bits) in [(n.below, &n.below_bits), (n.above, &n.above_bits)] {
                            if v.is_finite() {
                                let p = u32::from_str_radix(&bits.as_ref().unwrap()[2..], 16);
                                assert_eq!(f.decode(p.unwrap()), v);
                            }
                        }
                        if ex.stored.is_finite() {
                            assert!(ex.stored == n.below || ex.stored == n.above);
                        }
                    }
                    other => panic!("{name} {x}: {other:?}"),
                }
                match &ex.error {
                    Some(err) => assert_eq!(err.absolute, ex.stored - x),
                    None => assert!(!ex.stored.is_finite()),
                }
                assert_eq!(ex.event, r.round_at(x, 0).1);
                if let Some(k) = ex.scale_log2 {
                    let scaled = r.round_at(x * 2f64.powi(k), 0).1;
                    assert_eq!(scaled, Event::Normal, "{name} {x} 2^{k}");
                    let short = if k > 0 { k - 1 } else { k + 1 };
                    assert_ne!(r.round_at(x * 2f64.powi(short), 0).1, Event::Normal);
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 7 * 3 * 3000);
}

/// NaN patterns keep their own bits and kind; the JSON spells non-finite numbers as strings.
#[test]
fn nan_patterns_and_json() {
    let r = Rounder::new("fp16".parse().unwrap(), RoundOptions::default());
    for (p, kind) in [
        ("0x7e01", "quiet"),
        ("0x7c01", "signalling"),
        ("0xfe00", "quiet"),
    ] {
        let e = explain_value(p, &r).unwrap();
        assert_eq!(e.nan_kind, Some(kind));
        assert_eq!(e.bits.as_ref().unwrap().hex, p);
    }
    let e8 = Rounder::new("fp8-e4m3".parse().unwrap(), RoundOptions::default());
    assert_eq!(explain_value("0x7f", &e8).unwrap().nan_kind, Some("only"));
    let j = serde_json::to_value(explain_value("inf", &r).unwrap()).unwrap();
    assert_eq!(j["value"], "inf");
    assert_eq!(j["stored"], "inf");
    let j = serde_json::to_value(explain_value("-1e400", &r).unwrap()).unwrap();
    assert_eq!(
        (&j["value"], &j["read_as"]),
        (&"-inf".into(), &"infinity".into())
    );
    let j = serde_json::to_value(explain_value("0x7e00", &r).unwrap()).unwrap();
    assert_eq!(
        (&j["stored"], &j["pattern"]),
        (&"nan".into(), &"0x7e00".into())
    );
    let j = serde_json::to_value(explain_value("70000", &r).unwrap()).unwrap();
    assert_eq!(j["neighbours"]["above"], "inf");
    assert_eq!(j["scale_log2"], -1);
}

#[test]
fn exact_decimals() {
    assert_eq!(
        exact_decimal(0.1),
        "0.1000000000000000055511151231257827021181583404541015625"
    );
    assert_eq!(exact_decimal(65504.0), "65504");
    assert_eq!(
        exact_decimal(-2f64.powi(-24)),
        "-0.000000059604644775390625"
    );
    assert_eq!(exact_decimal(0.0), "0");
    assert_eq!(exact_decimal(1.5), "1.5");
    assert_eq!(exact_decimal(2f64.powi(70)), "1180591620717411303424");
    let tiny = exact_decimal(f64::from_bits(1));
    assert!(
        tiny.starts_with("0.000") && tiny.ends_with("625") && tiny.len() == 1076,
        "{}",
        tiny.len()
    );
}
