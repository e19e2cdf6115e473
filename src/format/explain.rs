//! How one value is stored in a format, field by field (what `mixprec explain` prints).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::error::Error;
use crate::format::{Event, FloatFormat, Overflow, RoundOptions, Rounder, Rounding};

/// How one value is stored in a format, field by field: what `mixprec explain` prints (its
/// [`Display`](fmt::Display)), `mixprec explain --json` writes and Python's `mixprec.explain`
/// returns (the serialized keys). Numbers are JSON numbers where finite and the strings `"inf"`,
/// `"-inf"` and `"nan"` otherwise.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// The value or bit pattern as given.
    pub input: String,
    /// The format's name.
    pub format: String,
    /// Its width: 1 sign bit, `exponent_bits`, `mantissa_bits`.
    pub total_bits: u32,
    /// Exponent field width.
    pub exponent_bits: u32,
    /// Mantissa field width (without the implicit bit).
    pub mantissa_bits: u32,
    /// Exponent bias.
    pub bias: i32,
    /// The rounding options.
    pub rounding: Rounding,
    /// What overflowing values become.
    pub overflow: Overflow,
    /// Whether subnormal results are kept (false: flushed to zero).
    pub subnormals: bool,
    /// Set when the input was a bit pattern of the format: the pattern (`0x3c00`), decoded into
    /// `value` (and not rounded when it decodes to NaN).
    pub pattern: Option<String>,
    /// The input as binary64.
    #[serde(serialize_with = "number")]
    pub value: f64,
    /// Its exact decimal expansion, when finite.
    pub value_exact: Option<String>,
    /// How a decimal beyond binary64's range was read (`"infinity"` or `"zero"`).
    pub read_as: Option<&'static str>,
    /// What the format stores.
    #[serde(serialize_with = "number")]
    pub stored: f64,
    /// Its exact decimal expansion, when finite.
    pub stored_exact: Option<String>,
    /// The stored bit pattern and its fields; `None` for NaN in a format without a NaN pattern
    /// (NaN stays NaN in the simulation).
    pub bits: Option<Fields>,
    /// For a NaN pattern: `"quiet"`, `"signalling"` or `"only"` (the format's one NaN).
    pub nan_kind: Option<&'static str>,
    /// For a finite value: whether the format holds it exactly (then there are no neighbours).
    pub exactly_representable: Option<bool>,
    /// For a finite value it does not hold: the representable values on either side.
    pub neighbours: Option<Neighbours>,
    /// Whether round-to-nearest-even met a tie (the value exactly halfway between neighbours).
    pub tie: bool,
    /// For a finite value stored as a finite value: the rounding error.
    pub error: Option<RoundingError>,
    /// What rounding did: normal, subnormal, underflow, overflow, infinite or nan.
    pub event: Event,
    /// The power of two a loss scale would need: for a subnormal or underflowing value, the
    /// smallest 2^k that makes it normal; for an infinite overflow, the smallest 2^-k (as `-k`)
    /// that keeps it finite.
    pub scale_log2: Option<i32>,
    /// What happened, in a sentence or two.
    pub outcome: String,
    #[serde(skip)]
    f: FloatFormat,
}

/// A stored bit pattern, field by field.
#[derive(Clone, Debug, Serialize)]
pub struct Fields {
    /// The whole pattern in hexadecimal (`0x3c00`).
    pub hex: String,
    /// The sign bit.
    pub sign: u32,
    /// The exponent field as stored (biased).
    pub exponent: u32,
    /// The mantissa field.
    pub mantissa: u32,
    /// What the fields encode: zero, subnormal, normal, infinity or nan.
    pub kind: &'static str,
    /// For zeros, subnormals and normals: the power of two the significand multiplies (emin for
    /// zero and subnormals).
    pub exponent_value: Option<i32>,
    /// For zeros, subnormals and normals: the significand, with the implicit leading 1 of normals.
    pub significand: Option<f64>,
    #[serde(skip)]
    pattern: u32,
}

/// The representable values around a value the format does not hold.
#[derive(Clone, Debug, Serialize)]
pub struct Neighbours {
    /// The next representable value below (`-inf` past the negative range).
    #[serde(serialize_with = "number")]
    pub below: f64,
    /// Its pattern, when finite.
    pub below_bits: Option<String>,
    /// The next representable value above (`inf` past the positive range).
    #[serde(serialize_with = "number")]
    pub above: f64,
    /// Its pattern, when finite.
    pub above_bits: Option<String>,
    /// `above - below` (1 ulp here), when both are finite.
    pub ulp: Option<f64>,
}

/// The error of rounding a finite value to a finite one.
#[derive(Clone, Debug, Serialize)]
pub struct RoundingError {
    /// stored - value.
    pub absolute: f64,
    /// (stored - value) / |value| (0 for a zero value).
    pub relative: f64,
    /// |stored - value| in ulps of the neighbours' spacing, when the value lies between two
    /// representable values.
    pub ulps: Option<f64>,
}

/// Writes an f64 as a JSON number when finite and as `"inf"`, `"-inf"` or `"nan"` otherwise
/// (JSON has no such numbers).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn number<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    match *x {
        x if x.is_finite() => s.serialize_f64(x),
        x if x.is_nan() => s.serialize_str("nan"),
        x if x > 0.0 => s.serialize_str("inf"),
        _ => s.serialize_str("-inf"),
    }
}

/// How `value` (a decimal or scientific number, inf, -inf or nan; or a bit pattern of the
/// format, `0x3c00` or `0b...`) is stored with `rounder`: the bits, sign, exponent and mantissa,
/// the two neighbouring representable values, the rounding error (and whether a tie decided it),
/// and whether the result is normal, subnormal, underflowed to zero or overflowed; a bit pattern
/// is decoded in the format instead.
///
/// # Errors
/// A value that is neither a number nor a pattern of the format's width.
pub fn explain_value(value: &str, rounder: &Rounder) -> Result<Explanation, Error> {
    let f = rounder.format();
    match pattern(value, f)? {
        Some(bits) => {
            let x = f.decode(bits);
            let mut e = explain(&shortest(x), x, rounder);
            e.input = value.trim().to_string();
            e.pattern = Some(hex(f, bits));
            if x.is_nan() {
                // The pattern itself, not the quiet NaN that rounding a NaN would store.
                e.bits = Some(fields(f, bits, x));
                e.nan_kind = Some(nan_kind(f, bits));
            }
            Ok(e)
        }
        None => {
            let x: f64 = value.trim().parse().map_err(|_| Error::InvalidValue {
                what: "value",
                value: value.to_string(),
                expected: "a decimal or scientific number, inf, -inf or nan, or a bit pattern (0x3c00, 0b...)",
            })?;
            Ok(explain(value, x, rounder))
        }
    }
}

fn shortest(x: f64) -> String {
    crate::text::shortest(x, &mut ryu::Buffer::new()).to_string()
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

/// How `x` (read from the text `input`) rounds with `rounder`.
#[must_use]
pub fn explain(input: &str, x: f64, rounder: &Rounder) -> Explanation {
    let t = input.trim().to_ascii_lowercase();
    let input_was_finite = !t.contains("inf") && !t.contains("nan");
    let mantissa = t.split('e').next().unwrap_or_default();
    let input_was_nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    let f = rounder.format();
    let o = rounder.options();
    let (r, event) = rounder.round_at(x, 0);
    let read_as = if x.is_infinite() && input_was_finite {
        Some("infinity")
    } else if x == 0.0 && input_was_nonzero {
        Some("zero")
    } else {
        None
    };
    let finite_exact = |x: f64| x.is_finite().then(|| exact_decimal(x));
    let mut e = Explanation {
        input: input.trim().to_string(),
        format: f.name(),
        total_bits: f.total_bits(),
        exponent_bits: f.exp_bits(),
        mantissa_bits: f.man_bits(),
        bias: f.bias(),
        rounding: o.rounding,
        overflow: o.overflow,
        subnormals: o.subnormals,
        pattern: None,
        value: x,
        value_exact: finite_exact(x),
        read_as,
        stored: r,
        stored_exact: finite_exact(r),
        bits: f.encode(r).map(|p| fields(f, p, r)),
        nan_kind: None,
        exactly_representable: None,
        neighbours: None,
        tie: false,
        error: None,
        event,
        scale_log2: None,
        outcome: String::new(),
        f,
    };
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
        let bits = |n: f64| f.encode(n).filter(|_| n.is_finite()).map(|b| hex(f, b));
        e.exactly_representable = Some(lo == hi);
        if lo != hi {
            e.neighbours = Some(Neighbours {
                below: lo,
                below_bits: bits(lo),
                above: hi,
                above_bits: bits(hi),
                ulp: (hi.is_finite() && lo.is_finite()).then_some(hi - lo),
            });
            e.tie = o.rounding == Rounding::NearestEven && is_tie(f, x, lo, hi);
        }
        if r.is_finite() {
            let abs = r - x;
            e.error = Some(RoundingError {
                absolute: abs,
                relative: if x == 0.0 { 0.0 } else { abs / x.abs() },
                ulps: (lo != hi && hi.is_finite()).then(|| abs.abs() / (hi - lo)),
            });
        }
    }
    (e.outcome, e.scale_log2) = outcome(x, r, event, rounder);
    e
}

impl fmt::Display for Explanation {
    /// The explanation as `mixprec explain` prints it: a heading, then labelled lines.
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let f = self.f;
        let v = shortest;
        if let Some(p) = &self.pattern {
            writeln!(
                out,
                "bit pattern {p} of {} decodes to {}",
                self.format,
                v(self.value)
            )?;
        }
        let mut s = String::new();
        let mut line = |label: &str, text: String| {
            s += &format!("  {label:<11} {text}\n");
        };
        if let Some(kind) = self.nan_kind {
            let bits = self.bits.as_ref().expect("a NaN pattern has its fields");
            write_fields(&mut line, f, bits);
            nan_line(&mut line, f, bits, kind);
            return write!(out, "\n{s}");
        }
        let x = self.value;
        let r = self.stored;
        let mut head = format!(
            "{} in {} ({} bits: 1 sign, {} exponent, {} mantissa; bias {}), rounding {}",
            v(x),
            self.format,
            self.total_bits,
            self.exponent_bits,
            self.mantissa_bits,
            self.bias,
            self.rounding
        );
        if self.overflow == Overflow::Saturate {
            head += ", saturating";
        }
        if !self.subnormals {
            head += ", subnormals off";
        }

        line("input", v(x));
        match self.read_as {
            Some("infinity") => line(
                "",
                "(beyond binary64's range: read as infinity)".to_string(),
            ),
            Some(_) => line(
                "",
                "(below binary64's smallest subnormal: read as zero)".to_string(),
            ),
            None => {}
        }
        if let Some(exact) = &self.value_exact
            && *exact != v(x)
            && exact.trim_start_matches('-') != v(x).trim_start_matches('-')
        {
            line("", format!("(as binary64, exactly {exact})"));
        }
        let exactly = match &self.stored_exact {
            Some(exact) if *exact != v(r) => format!("  (exactly {exact})"),
            _ => String::new(),
        };
        line("stored", format!("{}{exactly}", v(r)));
        match &self.bits {
            Some(bits) => write_fields(&mut line, f, bits),
            None => line(
                "bits",
                format!(
                    "none: {} has no NaN pattern (NaN stays NaN in the simulation)",
                    self.format
                ),
            ),
        }

        if x.is_finite() {
            let show = |n: f64, bits: &Option<String>| match bits {
                Some(b) => format!("{} ({b})", v(n)),
                None => format!("no finite value (the largest is {})", v(f.max())),
            };
            match &self.neighbours {
                None => line(
                    "neighbours",
                    format!("none needed: {} is exactly representable", v(x)),
                ),
                Some(n) => {
                    line(
                        "neighbours",
                        format!(
                            "{} < x < {}",
                            show(n.below, &n.below_bits),
                            show(n.above, &n.above_bits)
                        ),
                    );
                    if let Some(gap) = n.ulp {
                        line(
                            "",
                            format!(
                                "spacing here (1 ulp): {} = 2^{}",
                                v(gap),
                                gap.log2().round() as i64
                            ),
                        );
                    }
                    if self.tie {
                        let odd = self.bits.as_ref().is_some_and(|b| b.mantissa & 1 == 1);
                        line(
                            "rounding",
                            format!(
                                "tie, to even: x is exactly halfway between its neighbours, and the one whose last mantissa bit is 0 {}",
                                if !r.is_finite() {
                                    format!("lies past the largest finite value: {}", v(r))
                                } else if odd {
                                    // The odd neighbour kept: the even one overflowed and saturated.
                                    format!(
                                        "lies past the largest finite value: clamped to {}",
                                        v(r)
                                    )
                                } else {
                                    format!("is kept ({})", v(r))
                                }
                            ),
                        );
                    }
                }
            }
            match &self.error {
                _ if r.is_nan() => line("error", "none to speak of: the result is NaN".to_string()),
                Some(e) => {
                    let mut text = format!(
                        "absolute {}, relative {:.3e}",
                        crate::text::magnitude(e.absolute),
                        e.relative
                    );
                    if let Some(ulps) = e.ulps {
                        text += &format!(" ({ulps:.3} ulp)");
                    }
                    line("error", text);
                }
                None => line("error", "infinite: the value is gone".to_string()),
            }
        }
        // The outcome is a sentence or two: wrap it to a terminal's width under its label.
        let mut rows = vec![String::new()];
        for word in self.outcome.split(' ') {
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
        write!(out, "{head}\n\n{s}")
    }
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

/// What kind of NaN a pattern is (IEEE 754's convention, for the formats with infinities: the
/// top mantissa bit set is quiet).
fn nan_kind(f: FloatFormat, bits: u32) -> &'static str {
    let m = f.man_bits();
    if !f.has_infinity() {
        "only"
    } else if (bits >> (m - 1)) & 1 == 1 {
        "quiet"
    } else {
        "signalling"
    }
}

/// The mantissa line of a NaN pattern: what kind of NaN it is.
fn nan_line(line: &mut impl FnMut(&str, String), f: FloatFormat, bits: &Fields, kind: &str) {
    let m = f.man_bits();
    let kind = match kind {
        "only" => format!(
            "{}'s only NaN encoding (no quiet or signalling kinds)",
            f.name()
        ),
        "quiet" => "top bit 1: a quiet NaN".to_string(),
        _ => format!(
            "top bit 0: a signalling NaN; rounding or arithmetic gives the quiet NaN {}",
            hex(f, bits.pattern | 1 << (m - 1))
        ),
    };
    line(
        "  mantissa",
        format!("{:0w$b}: {kind}", bits.mantissa, w = m as usize),
    );
}

/// The fields of `pattern`, which decodes to `r`.
fn fields(f: FloatFormat, pattern: u32, r: f64) -> Fields {
    let m = f.man_bits();
    let mantissa = pattern & ((1 << m) - 1);
    let exponent = (pattern >> m) & ((1 << f.exp_bits()) - 1);
    let fraction = f64::from(mantissa) / f64::from(1u32 << m);
    let (kind, exponent_value, significand) = if r.is_nan() {
        ("nan", None, None)
    } else if r.is_infinite() {
        ("infinity", None, None)
    } else if exponent == 0 {
        let kind = if mantissa == 0 { "zero" } else { "subnormal" };
        (kind, Some(f.emin()), Some(fraction))
    } else {
        (
            "normal",
            Some(exponent as i32 - f.bias()),
            Some(1.0 + fraction),
        )
    };
    Fields {
        hex: hex(f, pattern),
        sign: pattern >> (m + f.exp_bits()) & 1,
        exponent,
        mantissa,
        kind,
        exponent_value,
        significand,
        pattern,
    }
}

/// Lines for the bit pattern and what each field means.
fn write_fields(line: &mut impl FnMut(&str, String), f: FloatFormat, b: &Fields) {
    let (ew, mw) = (f.exp_bits() as usize, f.man_bits() as usize);
    let (sign, exp, man) = (b.sign, b.exponent, b.mantissa);
    line(
        "bits",
        format!("{sign} {exp:0ew$b} {man:0mw$b}  = {}", b.hex),
    );
    line(
        "  sign",
        format!(
            "{sign} ({})",
            if sign == 1 { "negative" } else { "positive" }
        ),
    );
    let signed = if sign == 1 { "-" } else { "+" };
    let value = shortest(f.decode(b.pattern));
    let scale = 1u64 << mw;
    match (b.kind, b.exponent_value, b.significand) {
        ("nan", ..) => line(
            "  exponent",
            format!("{exp:0ew$b} all ones, with this mantissa: NaN"),
        ),
        ("infinity", ..) => line(
            "  exponent",
            format!("{exp:0ew$b} all ones, mantissa 0: infinity"),
        ),
        ("normal", Some(e), Some(frac)) => {
            line(
                "  exponent",
                format!("{exp:0ew$b} = {exp}, minus bias {} = {e}", f.bias()),
            );
            line(
                "  mantissa",
                format!("{man:0mw$b} = {man}/{scale}, with the implicit leading 1: {frac}"),
            );
            line("  value", format!("{signed}{frac} x 2^{e} = {value}"));
        }
        _ => {
            line(
                "  exponent",
                format!(
                    "{exp:0ew$b} = 0: zero or subnormal, exponent fixed at emin = {}",
                    f.emin()
                ),
            );
            line(
                "  mantissa",
                format!("{man:0mw$b} = {man}/{scale} (no implicit leading 1)"),
            );
            line(
                "  value",
                format!("{signed}{man}/{scale} x 2^{} = {value}", f.emin()),
            );
        }
    }
}

/// One sentence on what happened, with the scale that would have avoided a loss (as the power
/// of two [`Explanation::scale_log2`] holds).
fn outcome(x: f64, r: f64, event: Event, rounder: &Rounder) -> (String, Option<i32>) {
    let f = rounder.format();
    let v = shortest;
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
    let text = |s: String| (s, None);
    match event {
        Event::Nan => text("NaN: stays NaN".to_string()),
        Event::Infinite if r.is_nan() => text(format!(
            "{} has no infinity: the ieee rule gives NaN",
            f.name()
        )),
        Event::Infinite => text(format!("infinite: stored as {}", v(r))),
        Event::Normal if x == 0.0 => text("zero: stored exactly, sign kept".to_string()),
        Event::Normal if r == x => text("normal: stored exactly".to_string()),
        Event::Normal => text(format!(
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
        )),
        Event::Subnormal => {
            let bits = (r.abs() / f.min_subnormal()).log2().floor() as u32 + 1;
            let mut s = format!(
                "subnormal: below the smallest normal {} the implicit 1 is gone; {bits} significant bit{} left instead of {}",
                v(f.min_normal()),
                if bits == 1 { "" } else { "s" },
                f.man_bits() + 1
            );
            let k = fix(true);
            if let Some(k) = k {
                s += &format!("; a loss scale of 2^{k} would make it normal");
            }
            (s, k)
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
            let k = fix(true);
            if let Some(k) = k {
                s += &format!("; a loss scale of 2^{k} would keep it as a normal number");
            }
            (s, k)
        }
        Event::Overflow => {
            let mut s = format!(
                "overflow: |x| rounds past the largest finite value {}, giving {}",
                v(f.max()),
                v(r)
            );
            let mut k = None;
            if r.is_finite() {
                s += " (clamped)";
            } else if let Some(down) = fix(false) {
                s += &format!("; scaling down by 2^{down} would keep it finite");
                k = Some(-down);
            }
            (s, k)
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
mod tests;
