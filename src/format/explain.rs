//! How one value is stored in a format, field by field (what `mixprec explain` prints).

use crate::error::Error;
use crate::format::{Event, FloatFormat, Overflow, RoundOptions, Rounder, Rounding};

/// How `value` (a decimal or scientific number, inf, -inf or nan; or a bit pattern of the
/// format, `0x3c00` or `0b...`) is stored with `rounder`, as lines of text: the bits, sign,
/// exponent and mantissa, the two neighbouring representable values, the rounding error (and
/// whether a tie decided it), and whether the result is normal, subnormal, underflowed to zero
/// or overflowed; a bit pattern is decoded in the format instead.
///
/// # Errors
/// A value that is neither a number nor a pattern of the format's width.
pub fn explain_value(value: &str, rounder: &Rounder) -> Result<String, Error> {
    let text = match pattern(value, rounder.format())? {
        Some(bits) => {
            let f = rounder.format();
            let x = f.decode(bits);
            let v = crate::text::shortest(x, &mut ryu::Buffer::new()).to_string();
            let head = format!(
                "bit pattern {} of {} decodes to {v}",
                hex(f, bits),
                f.name()
            );
            if x.is_nan() {
                // The pattern itself, not the quiet NaN that rounding a NaN would store.
                format!("{head}\n\n{}", nan_pattern(f, bits))
            } else {
                format!("{head}\n{}", explain(&v, x, rounder))
            }
        }
        None => {
            let x: f64 = value.trim().parse().map_err(|_| Error::InvalidValue {
                what: "value",
                value: value.to_string(),
                expected: "a decimal or scientific number, inf, -inf or nan, or a bit pattern (0x3c00, 0b...)",
            })?;
            explain(value, x, rounder)
        }
    };
    Ok(text)
}

/// The bit pattern written as `0x...` or `0b...`, checked against the width of `f`; `None`
/// when the text is not written as a pattern.
fn pattern(text: &str, f: FloatFormat) -> Result<Option<u32>, Error> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, radix) = if let Some(d) = t.strip_prefix("0x") {
        (d, 16)
    } else if let Some(d) = t.strip_prefix("0b") {
        (d, 2)
    } else {
        return Ok(None);
    };
    let bad = |problem: String| Error::BadScale {
        what: format!("bit pattern of {}", f.name()),
        value: text.trim().to_string(),
        problem,
    };
    let bits = u64::from_str_radix(&digits.replace('_', ""), radix).map_err(|_| {
        bad(if radix == 16 {
            "not a hexadecimal number".into()
        } else {
            "not a binary number".into()
        })
    })?;
    if bits >> f.total_bits() != 0 {
        return Err(bad(format!(
            "wider than the format's {} bits (largest pattern {})",
            f.total_bits(),
            hex(f, ((1u64 << f.total_bits()) - 1) as u32)
        )));
    }
    Ok(Some(bits as u32))
}

/// The explanation of how `x` (read from the text `input`) rounds with `rounder`, as lines of
/// text.
#[must_use]
pub fn explain(input: &str, x: f64, rounder: &Rounder) -> String {
    let t = input.trim().to_ascii_lowercase();
    let input_was_finite = !t.contains("inf") && !t.contains("nan");
    let mantissa = t.split('e').next().unwrap_or_default();
    let input_was_nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    let f = rounder.format();
    let o = rounder.options();
    let mut s = String::new();
    let mut line = |label: &str, text: String| {
        s += &format!("  {label:<11} {text}\n");
    };
    let v = |x: f64| crate::text::shortest(x, &mut ryu::Buffer::new()).to_string();
    let (r, event) = rounder.round_at(x, 0);
    let pattern = f.encode(r);

    let mut head = format!(
        "{} in {} ({} bits: 1 sign, {} exponent, {} mantissa; bias {}), rounding {}",
        v(x),
        f.name(),
        f.total_bits(),
        f.exp_bits(),
        f.man_bits(),
        f.bias(),
        o.rounding
    );
    if o.overflow == Overflow::Saturate {
        head += ", saturating";
    }
    if !o.subnormals {
        head += ", subnormals off";
    }
    let mut text = head + "\n\n";

    line("input", v(x));
    if x.is_infinite() && input_was_finite {
        line(
            "",
            "(beyond binary64's range: read as infinity)".to_string(),
        );
    } else if x == 0.0 && input_was_nonzero {
        line(
            "",
            "(below binary64's smallest subnormal: read as zero)".to_string(),
        );
    }
    if x.is_finite() {
        let exact = exact_decimal(x);
        if exact != v(x) && exact.trim_start_matches('-') != v(x).trim_start_matches('-') {
            line("", format!("(as binary64, exactly {exact})"));
        }
    }
    let exactly = if r.is_finite() && exact_decimal(r) != v(r) {
        format!("  (exactly {})", exact_decimal(r))
    } else {
        String::new()
    };
    line("stored", format!("{}{exactly}", v(r)));
    match pattern {
        Some(pattern) => fields(&mut line, f, pattern, r),
        None => line(
            "bits",
            format!(
                "none: {} has no NaN pattern (NaN stays NaN in the simulation)",
                f.name()
            ),
        ),
    }

    if x.is_finite() {
        let neighbour = |rounding| {
            Rounder::new(
                f,
                RoundOptions {
                    rounding,
                    overflow: Overflow::Ieee,
                    ..o
                },
            )
            .round(x)
        };
        let (mut lo, mut hi) = (neighbour(Rounding::Down), neighbour(Rounding::Up));
        if x.abs() > f.max() {
            // Beyond the largest value: nothing finite on the far side (formats without
            // infinities or NaN saturate even when rounding away from zero).
            if x > 0.0 {
                hi = f64::INFINITY;
            } else {
                lo = f64::NEG_INFINITY;
            }
        }
        if !o.subnormals && x != 0.0 && x.abs() < f.min_normal() {
            // Flushed: the representable values around x are zero and the smallest normal.
            let (zero, normal) = (0.0f64.copysign(x), f.min_normal().copysign(x));
            (lo, hi) = if x > 0.0 {
                (zero, normal)
            } else {
                (normal, zero)
            };
        }
        let show = |n: f64| match f.encode(n) {
            Some(b) if n.is_finite() => format!("{} ({})", v(n), hex(f, b)),
            _ => format!("no finite value (the largest is {})", v(f.max())),
        };
        if lo == hi {
            line(
                "neighbours",
                format!("none needed: {} is exactly representable", v(x)),
            );
        } else {
            line("neighbours", format!("{} < x < {}", show(lo), show(hi)));
            if hi.is_finite() && lo.is_finite() {
                let gap = hi - lo;
                line(
                    "",
                    format!(
                        "spacing here (1 ulp): {} = 2^{}",
                        v(gap),
                        gap.log2().round() as i64
                    ),
                );
            }
            if o.rounding == Rounding::NearestEven && is_tie(f, x, lo, hi) {
                line(
                    "rounding",
                    format!(
                        "tie, to even: x is exactly halfway between its neighbours, and the one whose last mantissa bit is 0 {}",
                        if !r.is_finite() {
                            format!("lies past the largest finite value: {}", v(r))
                        } else if pattern.is_some_and(|p| p & 1 == 1) {
                            // The odd neighbour kept: the even one overflowed and saturated.
                            format!("lies past the largest finite value: clamped to {}", v(r))
                        } else {
                            format!("is kept ({})", v(r))
                        }
                    ),
                );
            }
        }
        if r.is_nan() {
            line("error", "none to speak of: the result is NaN".to_string());
        } else if r.is_finite() {
            let abs = r - x;
            let rel = if x == 0.0 { 0.0 } else { abs / x.abs() };
            let mut e = format!(
                "absolute {}, relative {:.3e}",
                crate::text::magnitude(abs),
                rel
            );
            if lo != hi && hi.is_finite() {
                e += &format!(" ({:.3} ulp)", abs.abs() / (hi - lo));
            }
            line("error", e);
        } else {
            line("error", "infinite: the value is gone".to_string());
        }
    }
    // The outcome is a sentence or two: wrap it to a terminal's width under its label.
    let mut rows = vec![String::new()];
    for word in outcome(x, r, event, rounder).split(' ') {
        let last = rows.last_mut().expect("rows is never empty");
        if !last.is_empty() && last.len() + 1 + word.len() > 84 {
            rows.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    for (i, row) in rows.into_iter().enumerate() {
        line(if i == 0 { "outcome" } else { "" }, row);
    }
    text += &s;
    text
}

/// Whether `x` lies exactly halfway between its neighbours `lo` and `hi` (beyond the largest
/// finite value, the neighbour above is the next value the exponent range would give, `max +
/// ulp(max)`; the midpoint between the largest subnormal and zero is decided the same way).
fn is_tie(f: FloatFormat, x: f64, lo: f64, hi: f64) -> bool {
    let (a, b) = if x >= 0.0 { (lo, hi) } else { (-hi, -lo) };
    let a = a.max(0.0);
    let ax = x.abs();
    let b = if b.is_finite() {
        b
    } else {
        // ulp at the top binade: 2^(emax - man_bits).
        f.max() + crate::format::pow2(f.emax() - f.man_bits() as i32)
    };
    ax - a == b - ax && ax > a
}

/// The fields of a NaN pattern, and whether it is quiet or signalling (IEEE 754's convention,
/// for the formats with infinities: the top mantissa bit set is quiet).
fn nan_pattern(f: FloatFormat, bits: u32) -> String {
    let mut s = String::new();
    let mut line = |label: &str, text: String| s += &format!("  {label:<11} {text}\n");
    fields(&mut line, f, bits, f64::NAN);
    let m = f.man_bits();
    let man = bits & ((1 << m) - 1);
    let kind = if !f.has_infinity() {
        format!(
            "{}'s only NaN encoding (no quiet or signalling kinds)",
            f.name()
        )
    } else if man >> (m - 1) == 1 {
        "top bit 1: a quiet NaN".to_string()
    } else {
        let quiet = bits | 1 << (m - 1);
        format!(
            "top bit 0: a signalling NaN; rounding or arithmetic gives the quiet NaN {}",
            hex(f, quiet)
        )
    };
    line("  mantissa", format!("{man:0w$b}: {kind}", w = m as usize));
    s
}

/// Lines for the bit pattern and what each field means.
fn fields(line: &mut impl FnMut(&str, String), f: FloatFormat, pattern: u32, r: f64) {
    let m = f.man_bits();
    let man = pattern & ((1 << m) - 1);
    let exp = (pattern >> m) & ((1 << f.exp_bits()) - 1);
    let sign = pattern >> (m + f.exp_bits()) & 1;
    line(
        "bits",
        format!(
            "{sign} {:0ew$b} {man:0mw$b}  = {}",
            exp,
            hex(f, pattern),
            ew = f.exp_bits() as usize,
            mw = m as usize
        ),
    );
    line(
        "  sign",
        format!(
            "{sign} ({})",
            if sign == 1 { "negative" } else { "positive" }
        ),
    );
    if r.is_nan() {
        line(
            "  exponent",
            format!(
                "{exp:0w$b} all ones, with this mantissa: NaN",
                w = f.exp_bits() as usize
            ),
        );
        return;
    }
    if r.is_infinite() {
        line(
            "  exponent",
            format!(
                "{exp:0w$b} all ones, mantissa 0: infinity",
                w = f.exp_bits() as usize
            ),
        );
        return;
    }
    let scale = 1u64 << m;
    if exp == 0 {
        line(
            "  exponent",
            format!(
                "{exp:0w$b} = 0: zero or subnormal, exponent fixed at emin = {}",
                f.emin(),
                w = f.exp_bits() as usize
            ),
        );
        line(
            "  mantissa",
            format!(
                "{man:0w$b} = {man}/{scale} (no implicit leading 1)",
                w = m as usize
            ),
        );
        line(
            "  value",
            format!(
                "{}{man}/{scale} x 2^{} = {}",
                if sign == 1 { "-" } else { "+" },
                f.emin(),
                crate::text::shortest(r, &mut ryu::Buffer::new())
            ),
        );
    } else {
        let e = exp as i32 - f.bias();
        line(
            "  exponent",
            format!(
                "{exp:0w$b} = {exp}, minus bias {} = {e}",
                f.bias(),
                w = f.exp_bits() as usize
            ),
        );
        let frac = 1.0 + man as f64 / scale as f64;
        line(
            "  mantissa",
            format!(
                "{man:0w$b} = {man}/{scale}, with the implicit leading 1: {frac}",
                w = m as usize
            ),
        );
        line(
            "  value",
            format!(
                "{}{frac} x 2^{e} = {}",
                if sign == 1 { "-" } else { "+" },
                crate::text::shortest(r, &mut ryu::Buffer::new())
            ),
        );
    }
}

/// One sentence on what happened, with the scale that would have avoided a loss.
fn outcome(x: f64, r: f64, event: Event, rounder: &Rounder) -> String {
    let f = rounder.format();
    let v = |x: f64| crate::text::shortest(x, &mut ryu::Buffer::new()).to_string();
    // The smallest k such that x * 2^k (or x / 2^k) rounds to a normal number.
    let fix = |up: bool| {
        (1..=2200).find(|&k| {
            let scaled = if up {
                x * 2f64.powi(k)
            } else {
                x / 2f64.powi(k)
            };
            rounder.round_at(scaled, 0).1 == Event::Normal
        })
    };
    match event {
        Event::Nan => "NaN: stays NaN".to_string(),
        Event::Infinite if r.is_nan() => {
            format!("{} has no infinity: the ieee rule gives NaN", f.name())
        }
        Event::Infinite => format!("infinite: stored as {}", v(r)),
        Event::Normal if x == 0.0 => "zero: stored exactly, sign kept".to_string(),
        Event::Normal if r == x => "normal: stored exactly".to_string(),
        Event::Normal => format!(
            "normal: rounded {}{} ({:.1} significant decimal digits kept)",
            if rounder.options().rounding == Rounding::NearestEven {
                "to the nearest value, "
            } else {
                ""
            },
            if r.abs() > x.abs() {
                "away from zero"
            } else {
                "toward zero"
            },
            f64::from(f.man_bits() + 1) * 2f64.log10()
        ),
        Event::Subnormal => {
            let bits = (r.abs() / f.min_subnormal()).log2().floor() as u32 + 1;
            let mut s = format!(
                "subnormal: below the smallest normal {} the implicit 1 is gone; {bits} significant bit{} left instead of {}",
                v(f.min_normal()),
                if bits == 1 { "" } else { "s" },
                f.man_bits() + 1
            );
            if let Some(k) = fix(true) {
                s += &format!("; a loss scale of 2^{k} would make it normal");
            }
            s
        }
        Event::Underflow => {
            let o = rounder.options();
            let why = if !o.subnormals {
                format!(
                    "it is below the smallest normal {} and subnormals are off, so it is flushed to zero",
                    v(f.min_normal())
                )
            } else {
                match o.rounding {
                    Rounding::NearestEven => format!(
                        "|x| is at most half the smallest subnormal ({}; a tie goes to the even 0), so it rounds to zero",
                        v(f.min_subnormal() / 2.0)
                    ),
                    Rounding::Stochastic => format!(
                        "|x| is below the smallest subnormal ({}) and was rounded down by chance",
                        v(f.min_subnormal())
                    ),
                    _ => format!(
                        "|x| is below the smallest subnormal ({}) and {} rounding goes to zero",
                        v(f.min_subnormal()),
                        o.rounding
                    ),
                }
            };
            let mut s = format!("underflow: {why}, and the value is lost");
            if let Some(k) = fix(true) {
                s += &format!("; a loss scale of 2^{k} would keep it as a normal number");
            }
            s
        }
        Event::Overflow => {
            let mut s = format!(
                "overflow: |x| rounds past the largest finite value {}, giving {}",
                v(f.max()),
                v(r)
            );
            if r.is_finite() {
                s += " (clamped)";
            } else if let Some(k) = fix(false) {
                s += &format!("; scaling down by 2^{k} would keep it finite");
            }
            s
        }
    }
}

fn hex(f: FloatFormat, bits: u32) -> String {
    format!("0x{bits:0w$x}", w = f.total_bits().div_ceil(4) as usize)
}

/// The exact decimal expansion of a finite f64 (every binary fraction has one).
#[must_use]
pub fn exact_decimal(x: f64) -> String {
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    let (sig, e) = if biased == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, biased - 1075)
    };
    // Little-endian base-10^9 digits of sig * 2^e (e >= 0) or sig * 5^-e (e < 0).
    let mut n: Vec<u64> = vec![
        sig % 1_000_000_000,
        sig / 1_000_000_000 % 1_000_000_000,
        sig / 1_000_000_000_000_000_000,
    ];
    let mul = |n: &mut Vec<u64>, k: u64| {
        let mut carry = 0;
        for d in n.iter_mut() {
            let t = *d * k + carry;
            *d = t % 1_000_000_000;
            carry = t / 1_000_000_000;
        }
        while carry > 0 {
            n.push(carry % 1_000_000_000);
            carry /= 1_000_000_000;
        }
    };
    for _ in 0..e.unsigned_abs() {
        mul(&mut n, if e >= 0 { 2 } else { 5 });
    }
    let mut digits = String::new();
    for d in n.iter().rev() {
        digits += &format!("{d:09}");
    }
    let digits = digits.trim_start_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let point = if e >= 0 { 0 } else { e.unsigned_abs() as usize };
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if point == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>w$}", w = point + 1);
    let (int, fraction) = padded.split_at(padded.len() - point);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
