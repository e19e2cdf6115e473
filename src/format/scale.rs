//! Loss scales as users write them: a power of two (`2^16`, `2**16`) or a plain number (`65536`,
//! `6.5e4`), checked once here for every command and config file that takes one.
//!
//! ```text
//! scale      := "2^" INT | "2**" INT | DECIMAL        (spaces around the operator allowed)
//! log2 scale := INT | "2^" INT | "2**" INT            (an exponent: 16 and 2^16 both mean 2^16)
//! ```
//!
//! A loss scale is stored as an f32 (as PyTorch's `GradScaler` keeps it), so it must be positive
//! and within f32's range: from the smallest subnormal 2^-149 up to the largest finite value
//! (just under 2^128). A decimal that is not exactly an f32 is rounded to the nearest one.

use crate::error::Error;

/// The largest exponent accepted in a `2^k` written as a scale (f32 holds up to 2^127).
const F32_MAX_LOG2: i32 = 127;
/// The smallest (2^-149 is f32's smallest subnormal).
const F32_MIN_LOG2: i32 = -149;

/// The exponent of `2^k` or `2**k`, if `text` is written that way; `Err` with a reason if it
/// starts that way but the exponent is not an integer.
fn power_of_two(text: &str) -> Option<Result<i64, &'static str>> {
    let t: String = text.split_whitespace().collect();
    let rest = t.strip_prefix("2**").or_else(|| t.strip_prefix("2^"))?;
    let rest = rest.trim();
    let digits = rest.strip_prefix('-').unwrap_or(rest);
    Some(match rest.parse::<i64>() {
        Ok(k) => Ok(k),
        // Too many digits for i64: far outside any range, which the caller reports.
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(if rest.starts_with('-') {
                i64::MIN
            } else {
                i64::MAX
            })
        }
        Err(_) => Err("the exponent of 2^k must be a whole number"),
    })
}

/// Parses a loss scale into the f32 a scaler holds: `2^k` or `2**k` (`k` a whole number, spaces
/// allowed), or a decimal number (`65536`, `6.5e4`, rounded to the nearest f32). It must be
/// positive and within f32's range: 2^-149 up to the largest finite f32, just under 2^128.
///
/// `what` names the option or key in the error (`--loss-scale`, `init_scale`).
///
/// # Errors
/// [`Error::BadScale`] when the text is not a number or a power of two, is zero or negative,
/// NaN or infinite, or is outside f32's range (too large, or so small it would round to zero).
///
/// ```
/// use mixprec::format::parse_loss_scale;
///
/// assert_eq!(parse_loss_scale("--loss-scale", "2^16").unwrap(), 65536.0);
/// assert_eq!(parse_loss_scale("--loss-scale", "2**-3").unwrap(), 0.125);
/// assert_eq!(parse_loss_scale("--loss-scale", "1024").unwrap(), 1024.0);
/// let e = parse_loss_scale("--loss-scale", "0").unwrap_err().to_string();
/// assert!(e.contains("a loss scale must be positive"), "{e}");
/// let e = parse_loss_scale("--loss-scale", "1e308").unwrap_err().to_string();
/// assert!(e.contains("out of f32's range"), "{e}");
/// ```
pub fn parse_loss_scale(what: &str, text: &str) -> Result<f32, Error> {
    let bad = |problem: String| Error::BadScale {
        what: what.to_string(),
        value: text.trim().to_string(),
        problem,
    };
    let range = "out of f32's range (a loss scale is an f32: 2^-149 to about 3.4e38, just under \
                 2^128)";
    if let Some(k) = power_of_two(text) {
        let k = k.map_err(|p| bad(p.to_string()))?;
        if !(i64::from(F32_MIN_LOG2)..=i64::from(F32_MAX_LOG2)).contains(&k) {
            return Err(bad(range.to_string()));
        }
        return Ok(crate::format::pow2(k as i32) as f32);
    }
    let x: f64 = text.trim().parse().map_err(|_| {
        bad("not a number: expected a power of two (2^16, 2**16) or a number (65536)".into())
    })?;
    if x.is_nan() {
        return Err(bad("a loss scale must be a positive number, not NaN".into()));
    }
    if x <= 0.0 {
        return Err(bad("a loss scale must be positive".into()));
    }
    let s = x as f32;
    if !s.is_finite() || s == 0.0 {
        return Err(bad(range.to_string()));
    }
    Ok(s)
}

/// Parses a log2 loss scale `k` written as `16`, `2^16` or `2**16`, within `-limit..=limit`.
///
/// # Errors
/// [`Error::BadScale`] naming `what` when the text is neither form or the exponent is outside
/// the limit.
///
/// ```
/// use mixprec::format::parse_log2_scale;
///
/// assert_eq!(parse_log2_scale("--scales", "2^-8", 2000).unwrap(), -8);
/// assert_eq!(parse_log2_scale("--scales", "40", 2000).unwrap(), 40);
/// assert!(parse_log2_scale("--scales", "65536", 2000).is_err());
/// ```
pub fn parse_log2_scale(what: &str, text: &str, limit: i32) -> Result<i32, Error> {
    let bad = |problem: String| Error::BadScale {
        what: what.to_string(),
        value: text.trim().to_string(),
        problem,
    };
    let k = match power_of_two(text) {
        Some(k) => k.map_err(|p| bad(p.to_string()))?,
        None => text.trim().parse::<i64>().map_err(|_| {
            bad("expected a whole exponent k (scale 2^k), written k or 2^k".to_string())
        })?,
    };
    if k.unsigned_abs() > u64::from(limit.unsigned_abs()) {
        return Err(bad(format!(
            "the exponent must be within -{limit}..{limit}"
        )));
    }
    Ok(k as i32)
}

/// serde's `deserialize_with` for a loss scale in a config file: a JSON number, or a string in
/// any form [`parse_loss_scale`] accepts (`"2^16"`), checked the same way as on the command line.
///
/// # Errors
/// serde's custom error with [`parse_loss_scale`]'s message.
pub fn deserialize_loss_scale<'de, D>(d: D) -> Result<f32, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    let text = match <Raw as serde::Deserialize>::deserialize(d)? {
        Raw::Number(x) => x.to_string(),
        Raw::Text(t) => t,
    };
    parse_loss_scale("loss scale", &text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_and_numbers() {
        for (text, want) in [
            ("2^16", 65536.0f32),
            ("2**16", 65536.0),
            (" 2 ^ 0 ", 1.0),
            ("2^-149", f32::from_bits(1)),
            ("2^127", 2f32.powi(127)),
            ("65536", 65536.0),
            ("6.5e4", 65000.0),
            ("0.5", 0.5),
            ("3.4e38", 3.4e38),
        ] {
            assert_eq!(parse_loss_scale("s", text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn each_problem_has_its_message() {
        for (text, needle) in [
            ("0", "must be positive"),
            ("-0", "must be positive"),
            ("-4", "must be positive"),
            ("1e308", "out of f32's range"),
            ("3.5e38", "out of f32's range"),
            ("1e-50", "out of f32's range"),
            ("2^128", "out of f32's range"),
            ("2^-150", "out of f32's range"),
            ("2^99999999999999999999", "out of f32's range"),
            ("2^1.5", "whole number"),
            ("inf", "out of f32's range"),
            ("NaN", "not NaN"),
            ("lots", "not a number"),
        ] {
            let e = parse_loss_scale("--loss-scale", text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{text}: {e}");
            assert!(e.starts_with("--loss-scale '"), "{e}");
        }
    }

    #[test]
    fn log2_scales() {
        assert_eq!(parse_log2_scale("x", "2**3", 10).unwrap(), 3);
        assert_eq!(parse_log2_scale("x", "-10", 10).unwrap(), -10);
        assert!(parse_log2_scale("x", "11", 10).is_err());
        assert!(parse_log2_scale("x", "2^-11", 10).is_err());
        assert!(parse_log2_scale("x", "1.5", 10).is_err());
    }
}
