//! Numbers and tables in words, for terminals and pages alike: one rule for each kind of number.
//!
//! A share is printed with its digits, never rounded to 0 or to 100 unless it is exactly that:
//!
//! ```text
//! 0 -> "0"   1 of 2 -> "50.0"   3 of 1000 -> "0.30"   1 of 4e6 -> "2.50e-5"   999999 of 1e6 -> "99.9999"   1 -> "100"
//! ```

use std::borrow::Cow;
use std::io::Write;

/// `100 * x` as text with its digits: `"0"` only for 0, `"100"` only for exactly 1; shares
/// under 0.1% in scientific notation with 3 digits, under 1% with two decimals (so that a share
/// just over a threshold of 0.1% never prints as 0.1); just under 100% with as many decimals as
/// it takes not to print 100.
#[must_use]
pub fn percent(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if x == 1.0 {
        return "100".into();
    }
    if !x.is_finite() {
        return "inf".into();
    }
    let p = 100.0 * x;
    if p.abs() < 0.1 {
        return format!("{p:.2e}");
    }
    if p.abs() < 1.0 {
        // Two decimals: 0.121% must not read as a --max-underflow of 0.1%.
        return format!("{p:.2}");
    }
    for decimals in 1..=15 {
        let s = format!("{p:.decimals$}");
        if !(x < 1.0 && s.starts_with("100")) {
            return s;
        }
    }
    format!("{p}")
}

/// `part` of `whole` as a percentage ([`percent`]); `"-"` when `whole` is 0.
#[must_use]
pub fn percent_of(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    if part == whole {
        return "100".into();
    }
    let x = part as f64 / whole as f64;
    // A share that is not all of them must not print as 100, even when the ratio rounds to 1.
    percent(if part < whole {
        x.min(1.0 - f64::EPSILON / 2.0)
    } else {
        x
    })
}

/// Items in words: `a`, `a and b`, `a; b and c` (semicolons, since an item may hold commas).
pub fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [a] => a.clone(),
        [init @ .., last] => format!("{} and {last}", init.join("; ")),
    }
}

/// A magnitude: as written when short, else 4 significant digits of scientific notation, or
/// more where four would round a value just under a power of two up to it (e2m23's max
/// 3.9999998 is not 4).
#[must_use]
pub fn magnitude(x: f64) -> String {
    let exact = format!("{x}");
    if exact.len() <= 9 {
        return exact;
    }
    let mut s = format!("{x:.3e}");
    for digits in 4..=16 {
        let shown: f64 = s.parse().unwrap_or(x);
        if shown == x || shown.abs().log2().fract() != 0.0 {
            break;
        }
        s = format!("{x:.digits$e}");
    }
    s
}

/// A terminal table: a left-aligned first column and right-aligned others, separated by two
/// spaces; control characters in a cell (a tensor name from a file can hold an escape sequence
/// or a newline) are written escaped, so that no cell can move the cursor or break a row.
pub fn table<R: AsRef<[String]>>(
    out: &mut dyn Write,
    header: &[&str],
    rows: &[R],
) -> std::io::Result<()> {
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|r| r.as_ref().iter().map(|c| printable(c)).collect())
        .collect();
    let width = |cell: &str| unicode_width::UnicodeWidthStr::width(cell);
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let pad = " ".repeat(w - width(cell));
            if i == 0 {
                s += &format!("{cell}{pad}");
            } else {
                s += &format!("  {pad}{cell}");
            }
        }
        s.trim_end().to_string()
    };
    writeln!(out, "{}", line(&mut header.iter().copied()))?;
    for row in &rows {
        writeln!(out, "{}", line(&mut row.iter().map(|c| c.as_ref())))?;
    }
    Ok(())
}

/// `s` with its control characters escaped (`\u{1b}`, `\n`): names from users' files, as a
/// terminal shows them.
pub fn printable(s: &str) -> Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A share in words: [`percent`] with its sign, `0.12%`.
#[must_use]
pub fn pct(x: f64) -> String {
    format!("{}%", percent(x))
}

/// A loss scale in words: `2^k` for a power of two, the number otherwise.
#[must_use]
pub fn scale_name(s: f64) -> String {
    let k = s.log2();
    if (k - k.round()).abs() < 1e-9 {
        format!("2^{}", k.round())
    } else {
        format!("{s}")
    }
}

/// A p-value: three decimals, or two significant digits below 0.001.
#[must_use]
pub fn p_value(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// Four significant digits, plain between 1e-3 and 1e5 (`0.9712`, `30.70`), scientific
/// elsewhere (`1.200e-5`).
#[must_use]
pub fn four_digits(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if (1e-3..1e5).contains(&a) {
        let digits = (3 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.digits$}")
    } else {
        format!("{x:.3e}")
    }
}

/// `x` with `decimals` decimals, less its trailing zeros and a bare point: `0.032`, `3.2`,
/// `100` (an axis's tick labels).
#[must_use]
pub fn fixed(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A number with its sign, as [`four_digits`] writes it.
pub struct Signed(pub f64);

impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 0.0 {
            write!(f, "+{}", four_digits(self.0))
        } else {
            f.write_str(&four_digits(self.0))
        }
    }
}

/// The shortest decimal that parses back to exactly `x`; `NaN`, `inf`, `-inf`, `0`, `-0`, and
/// integers without a trailing `.0`.
#[must_use]
pub fn shortest(x: f64, buf: &mut ryu::Buffer) -> &str {
    if x.is_nan() {
        "NaN"
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }
    } else if x == 0.0 {
        if x.is_sign_negative() { "-0" } else { "0" }
    } else {
        let s = buf.format_finite(x);
        s.strip_suffix(".0").unwrap_or(s)
    }
}

/// A threshold given as a fraction (`--max-underflow 0.001`), in percent as it was set: `0.1%`.
#[must_use]
pub fn threshold_percent(fraction: f64) -> String {
    format!("{}%", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_in_words() {
        let items = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(and_list(&[]), "");
        assert_eq!(and_list(&items(&["a"])), "a");
        assert_eq!(and_list(&items(&["a, x", "b"])), "a, x and b");
        assert_eq!(and_list(&items(&["a", "b", "c"])), "a; b and c");
    }

    /// Columns line up by display width: a CJK name or an emoji takes two columns a character.
    #[test]
    fn tables_align_wide_characters() {
        let rows = [
            vec!["w".to_string(), "1".to_string()],
            vec!["梯度".to_string(), "22".to_string()],
            vec!["grad😀".to_string(), "333".to_string()],
        ];
        let mut out = Vec::new();
        table(&mut out, &["tensor", "n"], &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let widths: Vec<usize> = text
            .lines()
            .map(unicode_width::UnicodeWidthStr::width)
            .collect();
        assert_eq!(widths, [11, 11, 11, 11], "{text}");
    }

    /// Pages print shares by the terminal tables' rule (issue 25): 0.121% is not 0.1% (the
    /// threshold it exceeds), 99.96% is not 100%, and 0 and 100 are printed only when exact.
    #[test]
    fn shares_significant_digits_and_p_values() {
        assert_eq!(pct(0.00121), "0.12%");
        assert_eq!(pct(0.9996), "99.96%");
        assert_eq!(pct(0.0), "0%");
        assert_eq!(pct(1.0), "100%");
        assert_eq!(pct(0.999_999_9), "99.99999%");
        assert_eq!(pct(1e-7), "1.00e-5%");
        assert_eq!(percent(0.25), "25.0");
        assert_eq!(four_digits(0.971_234), "0.9712");
        assert_eq!(four_digits(30.703_81), "30.70");
        assert_eq!(four_digits(1.2e-5), "1.200e-5");
        assert_eq!(Signed(0.5).to_string(), "+0.5000");
        assert_eq!(p_value(0.000_176), "1.8e-4");
        assert_eq!(p_value(0.3220), "0.322");
        assert_eq!(scale_name(65536.0), "2^16");
        assert_eq!(scale_name(1000.0), "1000");
        assert_eq!(magnitude(3.999_999_761_581_421), "3.9999998e0");
        for (x, decimals, text) in [(0.0320, 3, "0.032"), (2.0, 3, "2"), (100.0, 0, "100")] {
            assert_eq!(fixed(x, decimals), text);
        }
    }
}
