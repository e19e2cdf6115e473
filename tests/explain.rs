//! The real binary: `explain`, its text and `--json`, and its bad input.

mod common;

use common::{assert_bad, assert_contains, mixprec, stderr, stdout};

/// What `mixprec explain ARGS` prints.
fn explain(args: &[&str]) -> String {
    stdout(&mixprec(&[&["explain"], args].concat()))
}

#[test]
fn explain_normal_subnormal_underflow_overflow() {
    let o = mixprec(&["explain", "0.1"]);
    assert!(o.status.success());
    let t = stdout(&o);
    assert_contains(
        &t,
        &[
            "0.0999755859375",
            "0x2e66",
            "0 01011 1001100110",
            "minus bias 15 = -4",
            "0.10003662109375",
            "normal",
        ],
    );
    #[rustfmt::skip]
    let cases: [(&[&str], &[&str]); 6] = [
        (&["3e-6"], &["subnormal", "0x0032"]),
        (&["1e-8"], &["underflow", "2^13"]),
        (&["-70000"], &["overflow", "-inf", "0xfc00"]),
        (&["1000", "--format", "fp8-e4m3"], &["NaN", "0x7f"]),
        (&["1000", "--format", "fp8-e4m3", "--overflow", "saturate"], &["stored      448"]),
        (&["0.3", "-f", "e3m2", "--rounding", "toward-zero"], &["stored      0.25"]),
    ];
    for (args, says) in cases {
        assert_contains(&explain(args), says);
    }
}

#[test]
fn explain_bad_input() {
    assert_bad(&["explain", "abc"], "'abc'");
    assert_bad(&["explain", "1", "--format", "fp99"], "fp99");
    assert_bad(&["explain", "1", "--rounding", "sideways"], "sideways");
    assert_bad(&["explain"], "VALUE");
}

#[test]
fn explain_with_subnormals_off_and_directed_modes() {
    // (arguments, what the text says, what it must not say)
    #[rustfmt::skip]
    let cases: [(&[&str], &[&str], &str); 5] = [
        (&["3e-5", "--subnormals", "off"], &["0 (0x0000) < x < 0.00006103515625 (0x0400)", "flushed to zero"], ""),
        (&["5e-8", "--rounding", "toward-zero"], &["below the smallest subnormal"], "half"),
        (&["2.9802322387695312e-8"], &["at most half the smallest subnormal"], ""),
        (&["1000", "-f", "fp8-e4m3", "--overflow", "saturate"], &["(clamped)"], "scaling down"),
        (&["1e400"], &["beyond binary64's range"], ""),
    ];
    for (args, says, never) in cases {
        let t = explain(args);
        assert_contains(&t, says);
        assert!(never.is_empty() || !t.contains(never), "{t}");
    }
}

/// Bit patterns are decoded; ties say so (and only ties).
#[test]
fn explain_bit_patterns_and_ties() {
    let t = explain(&["0x3c00", "--format", "fp16"]);
    assert!(
        t.starts_with("bit pattern 0x3c00 of fp16 decodes to 1\n"),
        "{t}"
    );
    assert!(
        t.contains("0 01111 0000000000") && t.contains("stored      1\n"),
        "{t}"
    );
    let t = explain(&["0b00000001", "--format", "fp8-e4m3"]);
    assert!(
        t.contains("decodes to 0.001953125") && t.contains("subnormal"),
        "{t}"
    );
    // A NaN pattern is shown as given, quiet or signalling, not as the NaN rounding stores.
    for (pattern, format, bits, kind) in [
        (
            "0x7e00",
            "fp16",
            "0 11111 1000000000  = 0x7e00",
            "a quiet NaN",
        ),
        (
            "0xfc01",
            "fp16",
            "1 11111 0000000001  = 0xfc01",
            "a signalling NaN; rounding or arithmetic gives the quiet NaN 0xfe01",
        ),
        ("0x7d", "fp8-e5m2", "0 11111 01  = 0x7d", "quiet NaN 0x7f"),
        (
            "0xff",
            "fp8-e4m3",
            "1 1111 111  = 0xff",
            "only NaN encoding",
        ),
    ] {
        let t = explain(&[pattern, "--format", format]);
        assert!(t.contains("decodes to NaN"), "{t}");
        assert!(t.contains(bits) && t.contains(kind), "{pattern}: {t}");
    }
    assert_bad(
        &["explain", "0x10000", "--format", "fp16"],
        "wider than the format's 16 bits",
    );
    assert_bad(&["explain", "0xzz"], "not a hexadecimal number");
    // 2049 lies halfway between 2048 and 2050 in fp16: to even, 2048. 2051: to even, 2052.
    for (x, kept) in [("2049", "2048"), ("2051", "2052"), ("464", "448")] {
        let f = if x == "464" { "fp8-e4m3" } else { "fp16" };
        let t = explain(&[x, "--format", f]);
        assert!(
            t.contains("tie, to even") && t.contains(&format!("kept ({kept}")),
            "{x}: {t}"
        );
    }
    // At the top of the range the even neighbour lies past the largest value: it overflows to
    // infinity, or saturates to the largest value, whose last mantissa bit is 1.
    for (args, after) in [
        (&["65520"][..], "lies past the largest finite value: inf\n"),
        (
            &["65520", "--overflow", "saturate"],
            "lies past the largest finite value: clamped to 65504\n",
        ),
        (
            &["7", "--format", "fp4-e2m1"],
            "lies past the largest finite value: clamped to 6\n",
        ),
    ] {
        let t = explain(args);
        assert!(
            t.contains("tie, to even") && t.contains(after),
            "{args:?}: {t}"
        );
        assert!(!t.contains("is kept"), "{args:?}: {t}");
    }
    for x in ["2049.5", "0.1", "2048"] {
        let t = explain(&[x]);
        assert!(!t.contains("tie"), "{x}: {t}");
    }
    // Not nearest-even: no tie is decided.
    let t = explain(&["2049", "--rounding", "toward-zero"]);
    assert!(!t.contains("tie"), "{t}");
}

/// `explain --json` is one object with the text's facts, non-finite numbers as strings; bad
/// input is refused as without it.
#[test]
fn explain_json_matches_the_text() {
    for (args, stored, event, kind) in [
        (
            &["explain", "0.1"][..],
            "0.0999755859375",
            "normal",
            "normal",
        ),
        (
            &["explain", "3e-6"][..],
            "2.9802322387695312e-6",
            "subnormal",
            "subnormal",
        ),
        (&["explain", "1e-8"][..], "0", "underflow", "zero"),
        (
            &["explain", "1000", "-f", "fp8-e4m3"][..],
            "nan",
            "overflow",
            "nan",
        ),
        (&["explain", "0x3c00"][..], "1", "normal", "normal"),
    ] {
        let text = stdout(&mixprec(args));
        let o = mixprec(&[args, &["--json"]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let got = match &j["stored"] {
            serde_json::Value::String(s) => s.clone(),
            n => n.as_f64().unwrap().to_string(),
        };
        let (got, want) = (got.parse::<f64>().unwrap(), stored.parse::<f64>().unwrap());
        assert!(
            got == want || got.is_nan() && want.is_nan(),
            "{args:?}: {got}"
        );
        assert!(
            stored == "nan" || text.contains(&format!("stored      {stored}")),
            "{text}"
        );
        assert_eq!(j["event"], event, "{args:?}");
        assert_eq!(j["bits"]["kind"], kind, "{args:?}");
        let outcome = j["outcome"].as_str().unwrap();
        let first = outcome.split(' ').take(4).collect::<Vec<_>>().join(" ");
        assert!(
            text.contains(&format!("outcome     {first}")),
            "{first}\n{text}"
        );
        if let Some(hex) = j["bits"]["hex"].as_str() {
            assert!(text.contains(&format!("= {hex}")), "{hex}\n{text}");
        }
    }
    assert_bad(&["explain", "abc", "--json"], "'abc'");
}
