//! The sweep from a [`Histogram`] (as captured during training), exact except in the bins that
//! straddle a rounding boundary.

use super::{Sweep, SweepAccumulator, SweepRow, scale4};
use crate::format::FloatFormat;
use crate::stats::Histogram;

/// The loss-scale sweep of the values summarised by `h`, with, per row, a bound on how far each
/// of its counts can be from the exact sweep of the raw values.
///
/// A bin holds the magnitudes `f * 2^E` with `f` in `[1 + j/2^s, 1 + (j+1)/2^s)`; the class of a
/// value at each scale depends on `E` and on three mantissa conditions (see the module docs of
/// [`crate::stats::sweep`]): `f == 1`, `f >= 2 - 2^-p` and `RNE_p(f) > Mf`. The counts of a bin go to the class
/// of its lower edge taken as `f > 1`. They are exact unless the bin straddles one of those
/// conditions:
///
/// ```text
/// f == 1:           every bin with j = 0 (values exactly 2^E underflow one scale later:
///                   they are a tie at half the min subnormal)
/// f >= 2 - 2^-p:    the top bin of each octave unless s >= p (min-normal boundary)
/// RNE_p(f) > Mf:    the bin holding the midpoint above max's significand unless s >= p + 1
///                   (for fp8-e4m3, 464 = 1.8125 * 2^8: s >= 4)
/// ```
///
/// The bound of a row is the total count of the bins whose class at that scale would differ at
/// another point of the bin; every count of the row (underflow, subnormal, normal, overflow) is
/// within that bound of the exact one. With `s = 0`, the bound at a scale is at most the count
/// of the binade at the underflow edge plus those at the min-normal and overflow edges.
///
/// `energy_lost` takes each value's square as the mean of `f^2` over its bin (uniform within
/// the bin), which is within a factor `(1 + 2^-s)^2` of the true square; numerator and
/// denominator both, so the share is within a factor `(1 + 2^-s)^4` of the exact one, apart
/// from the values of the bins counted in the bound (which may be on the wrong side of the
/// underflow edge).
/// `relative_error` is `None`: a histogram does not keep the bits that decide rounding errors.
#[must_use]
pub fn sweep_from_histogram(
    h: &Histogram,
    format: FloatFormat,
    log2_scales: std::ops::RangeInclusive<i32>,
) -> (Sweep, Vec<u64>) {
    let acc = SweepAccumulator::new(format);
    let (p, emin, emax) = (format.man_bits() as i32, format.emin(), format.emax());
    let s = h.sub_bins_log2();
    let class = |frac: u64, z: bool| {
        (
            i32::from(z),
            i32::from(frac >= acc.t_a),
            i32::from(frac >= acc.t_b),
        )
    };
    // Per bin: exponent, count, class at the lower edge, the other classes within the bin,
    // mean f^2.
    struct B {
        e: i32,
        n: u64,
        lo: (i32, i32, i32),
        others: Vec<(i32, i32, i32)>,
        f2: f64,
    }
    let bins: Vec<B> = h
        .bins()
        .filter(|b| b.count > 0)
        .map(|b| {
            let j = (b.index - (b.exponent << s)) as u64;
            let frac_lo = j << (52 - s);
            let frac_hi = ((j + 1) << (52 - s)) - 1;
            let lo = class(frac_lo, false);
            let mut others = vec![class(frac_hi, false)];
            if j == 0 {
                others.push(class(0, true));
            }
            let (fl, fh) = (
                1.0 + frac_lo as f64 / 2f64.powi(52),
                1.0 + (j + 1) as f64 / f64::from(1u32 << s),
            );
            B {
                e: b.exponent,
                n: b.count,
                lo,
                others,
                f2: (fl * fl + fl * fh + fh * fh) / 3.0,
            }
        })
        .collect();
    let top = bins.last().map_or(0, |b| b.e);
    let total: f64 = bins
        .iter()
        .map(|b| b.n as f64 * b.f2 * scale4(b.e - top))
        .sum();
    // 0 underflow, 1 subnormal, 2 normal, 3 overflow.
    let which = |k: i32, e: i32, (z, a, b): (i32, i32, i32)| {
        if k < emin - p - e - 1 + z {
            0
        } else if k < emin - e - a {
            1
        } else if k < emax - e + 1 - b {
            2
        } else {
            3
        }
    };
    let mut bounds = Vec::new();
    let rows = log2_scales
        .map(|k| {
            let mut n = [0u64; 4];
            let (mut lost, mut bound) = (0.0, 0u64);
            for b in &bins {
                let c = which(k, b.e, b.lo);
                n[c] += b.n;
                if c == 0 {
                    lost += b.n as f64 * b.f2 * scale4(b.e - top);
                }
                if b.others.iter().any(|&o| which(k, b.e, o) != c) {
                    bound += b.n;
                }
            }
            bounds.push(bound);
            SweepRow::of_counts(k, n, if total > 0.0 { lost / total } else { 0.0 })
        })
        .collect();
    let sweep = Sweep {
        format,
        count: h.count(),
        zeros: h.zeros(),
        nonfinite: h.nonfinite(),
        amax: h.amax(),
        rows,
    };
    (sweep, bounds)
}
