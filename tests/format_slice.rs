//! The fast f32 slice kernels against their scalar twin (the exact f64 path), the `half` crate
//! over all 2^32 f32 inputs, and exhaustive encode/decode round trips.

use mixprec::format::{
    BF16, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FP16, FP32, FloatFormat, KernelPath,
    Overflow, PRESETS, RoundCounts, RoundOptions, Rounder, Rounding, TF32, amax_bits,
    stochastic_bits,
};
use mixprec::train::Rng;

mod common;
use common::stochastic;

/// A deterministic spread of f32 bit patterns: random ones (splitmix64), plus values near every
/// format boundary that matters.
fn test_patterns(n: usize) -> Vec<f32> {
    let mut rng = Rng::new(0x1234_5678_9abc_def0);
    let mut next = || rng.next_u64();
    let mut xs: Vec<f32> = (0..n).map(|_| f32::from_bits(next() as u32)).collect();
    // Values of moderate magnitude, where gradients live.
    xs.extend((0..n).map(|_| {
        let b = next();
        let e = (b % 80) as i32 - 60;
        (2f32).powi(e)
            * (1.0 + (b >> 40) as f32 / (1u64 << 24) as f32)
            * if b & 1 == 0 { 1.0 } else { -1.0 }
    }));
    for (_, f) in PRESETS {
        for v in [
            f.max(),
            f.min_normal(),
            f.min_subnormal(),
            f.min_subnormal() / 2.0,
            1.0,
        ] {
            let b = (v as f32).to_bits();
            for d in 0..64u32 {
                xs.push(f32::from_bits(b.wrapping_add(d)));
                xs.push(f32::from_bits(b.wrapping_sub(d)));
                xs.push(-f32::from_bits(b.wrapping_add(d << 8)));
            }
        }
    }
    xs.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0xff80_0001),
    ]);
    xs
}

fn formats() -> Vec<FloatFormat> {
    let mut fs: Vec<FloatFormat> = PRESETS.iter().map(|(_, f)| *f).collect();
    fs.extend(
        ["e4m3", "e2m1", "e3m2", "e8m1", "e6m9", "e8m22", "e2m23"]
            .map(|n| n.parse::<FloatFormat>().unwrap()),
    );
    fs
}

fn all_options() -> Vec<RoundOptions> {
    let mut v = Vec::new();
    for rounding in Rounding::ALL {
        for overflow in [Overflow::Ieee, Overflow::Saturate] {
            for subnormals in [true, false] {
                v.push(RoundOptions {
                    rounding,
                    overflow,
                    subnormals,
                    seed: 99,
                });
            }
        }
    }
    v
}

fn rounded(r: &Rounder, path: KernelPath, xs: &[f32], start: u64) -> (Vec<u32>, RoundCounts) {
    let mut ys = xs.to_vec();
    let c = r.round_f32_slice_via(path, &mut ys, start);
    (ys.iter().map(|y| y.to_bits()).collect(), c)
}

#[test]
fn kernels_agree_with_the_scalar_twin() {
    let xs = test_patterns(20_000);
    for f in formats() {
        for o in all_options() {
            let r = Rounder::new(f, o);
            let start = 5_000_000_000; // crosses no block boundary, exercises the high key
            let (want, want_c) = rounded(&r, KernelPath::Scalar, &xs, start);
            for path in [KernelPath::Auto, KernelPath::Avx2, KernelPath::Portable] {
                let (got, got_c) = rounded(&r, path, &xs, start);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g,
                        w,
                        "{f} {o:?} {path:?}: x = {:e} ({:#x}): got {:#x}, want {w:#x}",
                        xs[i],
                        xs[i].to_bits(),
                        g
                    );
                }
                assert_eq!(got_c, want_c, "{f} {o:?} {path:?}");
                // Out of place, into a buffer of other values: the same bits and counts.
                let mut into = vec![f32::NAN; xs.len()];
                let into_c = r.round_f32_into_via(path, &xs, &mut into, start);
                let into: Vec<u32> = into.iter().map(|y| y.to_bits()).collect();
                assert!(into == want, "{f} {o:?} {path:?}: into");
                assert_eq!(into_c, want_c, "{f} {o:?} {path:?}: into");
            }
        }
    }
}

/// Every kernel path against the scalar twin over f32 bit patterns spread evenly across all
/// 2^32 (a prime stride, so that low mantissa bits vary too), in runs of 64 consecutive patterns
/// at each step (so that blocks hold ordinary values only, or a mix), for every format, mode,
/// overflow rule and subnormal setting.
#[test]
fn kernels_agree_with_the_scalar_twin_across_all_patterns() {
    let mut xs = Vec::new();
    let mut bits = 0u64;
    while bits < 1 << 32 {
        xs.extend((0..64).map(|d| f32::from_bits((bits as u32).wrapping_add(d))));
        bits += 2_097_143; // prime, about 2^21
    }
    for f in formats() {
        for o in all_options() {
            let r = Rounder::new(f, o);
            let want = rounded(&r, KernelPath::Scalar, &xs, 77);
            for path in [KernelPath::Auto, KernelPath::Avx2, KernelPath::Portable] {
                let got = rounded(&r, path, &xs, 77);
                if got != want {
                    let i = (0..xs.len()).find(|&i| got.0[i] != want.0[i]);
                    panic!(
                        "{f} {o:?} {path:?}: first difference at {i:?}; counts {:?} vs {:?}",
                        got.1, want.1
                    );
                }
            }
        }
    }
}

/// The OCP FP6/FP4 elements (no infinities, no NaN, saturation in every overflow rule), densely:
/// every f32 from an eighth of the smallest subnormal to 8 times the largest value, both signs,
/// whose 7 lowest mantissa bits are 0, 1 or all ones (the 16 bits above them, which hold every
/// kept, round and sticky bit of a 1- to 3-bit mantissa, take every value), in every rounding
/// mode, overflow rule and subnormals setting, on every kernel path.
#[test]
fn ocp_small_formats_densely_against_the_scalar_twin() {
    for f in [FP6_E2M3, FP6_E3M2, FP4_E2M1] {
        let lo = (f.min_subnormal() as f32 / 8.0).to_bits();
        let hi = (f.max() as f32 * 8.0).to_bits();
        let mut xs = vec![0.0, f32::INFINITY, f32::NAN];
        for b in (lo..=hi).step_by(128) {
            for low in [0, 1, 127] {
                xs.push(f32::from_bits(b | low));
            }
        }
        let negated: Vec<f32> = xs.iter().map(|x| -x).collect();
        xs.extend(negated);
        for o in all_options() {
            let r = Rounder::new(f, o);
            let want = rounded(&r, KernelPath::Scalar, &xs, 5);
            for path in [KernelPath::Auto, KernelPath::Avx2, KernelPath::Portable] {
                let got = rounded(&r, path, &xs, 5);
                let i = (0..xs.len()).find(|&i| got.0[i] != want.0[i]);
                assert!(
                    got == want,
                    "{f} {o:?} {path:?}: first difference at {:?}; counts {:?} vs {:?}",
                    i.map(|i| xs[i]),
                    got.1,
                    want.1
                );
            }
            // Nothing is infinite, and every non-NaN result is a value of the format.
            assert!(want.0.iter().all(|&b| {
                let v = f32::from_bits(b);
                v.is_nan() || f.encode(f64::from(v)).is_some()
            }));
        }
    }
}

/// The kernels' stochastic rounding on its boundary: up iff the dropped fraction, as 32 bits,
/// is strictly greater than the position's random bits `h` ([`stochastic_bits`] of the seed
/// and the position, as [`Rounding::Stochastic`] says). Each value is built from its own
/// position's `h` so that its fraction equals `h` (`>` keeps it, `>=` would round it up), and
/// one step above (rounds up):
/// - normals, through the kernels' integer addition: fp16 drops 13 of f32's 23 mantissa bits,
///   so `1 + (h >> 19) 2^-23` has the fraction `h`'s top 13 bits (all the kernel compares);
/// - fp16 subnormals, through the kernels' explicit comparison: `3 2^-24 + h 2^-56` (quantum
///   2^-24, fraction `h / 2^32`) is an f32 when `h`'s low 10 bits are zero; the positions
///   where they are are found by drawing the stream.
#[test]
fn stochastic_rounding_is_strict_at_the_random_bits() {
    let seed = 0x005e_ed0f_5eed;
    let r = Rounder::new(FP16, stochastic(seed));
    let start = 12_345u64;
    let n = 1usize << 16;
    let h: Vec<f64> = (0..n as u64)
        .map(|i| f64::from(stochastic_bits(seed, start + i)))
        .collect();
    let sign = |i: usize| if i.is_multiple_of(3) { -1.0 } else { 1.0 };
    let p = |e: i32| 2f64.powi(e);
    // (fraction, lower neighbour, gap) per position; None where the position is left at 0.
    let normal = |i: usize, step: f64| {
        let t = (h[i] * p(-19)).floor() + step;
        Some((1.0 + t * p(-23), 1.0, p(-10)))
    };
    let subnormal = |i: usize, step: f64| {
        (h[i] % 1024.0 == 0.0)
            .then(|| (3.0 * p(-24) + (h[i] + step) * p(-56), 3.0 * p(-24), p(-24)))
    };
    // Far below (|x| in [2^-34, 2^-33): the quantum 2^-24 is 33 bits above the last bit, so
    // nothing is kept): `(2h + 1) 2^-57` has the 32-bit fraction floor(h + 1/2) = h (stays
    // zero), `(2h + 2) 2^-57` has h + 1 (rounds up to 2^-24); for h in [2^22, 2^23 - 1).
    let far = |i: usize, step: f64| {
        (h[i] >= p(22) && h[i] < p(23) - 1.0)
            .then(|| ((2.0 * h[i] + 1.0 + step) * p(-57), 0.0, p(-24)))
    };
    let mut boundaries = 0;
    for (what, case) in [
        (
            "normal",
            &normal as &dyn Fn(usize, f64) -> Option<(f64, f64, f64)>,
        ),
        ("subnormal", &subnormal),
        ("far", &far),
    ] {
        for (step, up) in [(0.0, false), (1.0, true)] {
            let step = if what == "subnormal" {
                step * 1024.0
            } else {
                step
            };
            let cases: Vec<_> = (0..n).map(|i| case(i, step)).collect();
            let xs: Vec<f32> = cases
                .iter()
                .enumerate()
                .map(|(i, c)| c.map_or(0.0, |c| (sign(i) * c.0) as f32))
                .collect();
            // The values are f32s exactly.
            for (x, c) in xs.iter().zip(&cases) {
                assert!(c.is_none_or(|c| f64::from(*x).abs() == c.0));
            }
            for path in [KernelPath::Auto, KernelPath::Portable] {
                let mut got = xs.clone();
                r.round_f32_slice_via(path, &mut got, start);
                if path == KernelPath::Auto {
                    let mut public = xs.clone();
                    r.round_f32_slice_at(&mut public, start);
                    assert_eq!(public, got);
                }
                for (i, c) in cases.iter().enumerate() {
                    let Some((_, lower, gap)) = *c else { continue };
                    boundaries += usize::from(!up);
                    let want = sign(i) * if up { lower + gap } else { lower };
                    assert_eq!(
                        f64::from(got[i]),
                        want,
                        "{what} {path:?}: position {}, h {:#x}, x {:e}",
                        start + i as u64,
                        h[i] as u32,
                        xs[i]
                    );
                }
            }
        }
    }
    // Every normal position, and the subnormal ones found (about n / 1024 per path).
    assert!(boundaries > 2 * (n + 32), "{boundaries}");
}

#[test]
fn stochastic_stream_crosses_a_block_boundary() {
    let xs = test_patterns(3_000);
    let r = Rounder::new(FP16, stochastic(0));
    let start = (1u64 << 32) - 1000;
    assert_eq!(
        rounded(&r, KernelPath::Auto, &xs, start),
        rounded(&r, KernelPath::Scalar, &xs, start)
    );
}

#[test]
fn parallel_equals_serial() {
    let xs: Vec<f32> = test_patterns(300_000);
    for rounding in [Rounding::NearestEven, Rounding::Stochastic] {
        let r = Rounder::new(
            BF16,
            RoundOptions {
                rounding,
                ..RoundOptions::default()
            },
        );
        let (mut a, mut b) = (xs.clone(), xs.clone());
        let ca = r.round_f32_slice(&mut a);
        let cb = r.par_round_f32_slice(&mut b);
        assert_eq!(ca, cb);
        let mut into = vec![0f32; xs.len()];
        assert_eq!(r.par_round_f32_into(&xs, &mut into, 0), ca);
        assert!(a.iter().zip(&into).all(|(x, y)| x.to_bits() == y.to_bits()));
        // From a position of the stream, in one task (run on the calling thread) or in many.
        for len in [1_000, xs.len()] {
            let mut at = xs[..len].to_vec();
            let c_at = r.round_f32_slice_at(&mut at, 12_345);
            let mut into = vec![0f32; len];
            assert_eq!(r.par_round_f32_into(&xs[..len], &mut into, 12_345), c_at);
            assert!(
                at.iter()
                    .zip(&into)
                    .all(|(x, y)| x.to_bits() == y.to_bits())
            );
        }
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        let mut c: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        let mut d = c.clone();
        assert_eq!(r.round_f64_slice(&mut c), r.par_round_f64_slice(&mut d));
        assert!(c.iter().zip(&d).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn counts_say_what_happened() {
    let r = Rounder::new(FP16, RoundOptions::default());
    let mut xs = [
        1e-9f32,
        -1e-9,
        1e-6,
        1.0,
        0.0,
        1e5,
        -1e6,
        f32::NAN,
        f32::INFINITY,
    ];
    let c = r.round_f32_slice(&mut xs);
    assert_eq!(
        c,
        RoundCounts {
            underflow: 2,
            subnormal: 1,
            overflow: 2,
            nan: 1,
            infinite: 1
        }
    );
    assert_eq!(xs[0].to_bits(), 0);
    assert_eq!(xs[1].to_bits(), 0x8000_0000);
    assert_eq!(xs[6], f32::NEG_INFINITY);
}

#[test]
fn every_pattern_decodes_and_encodes_to_itself() {
    let mut formats = vec![FP16, BF16, FP8_E4M3, FP8_E5M2, TF32];
    formats.extend(["e4m3", "e2m1", "e3m2", "e8m1"].map(|n| n.parse::<FloatFormat>().unwrap()));
    for f in formats {
        for bits in 0..1u32 << f.total_bits() {
            let v = f.decode(bits);
            assert_eq!(f.encode(v), Some(bits), "{f} {bits:#x} -> {v:e}");
            // Rounding a representable value changes nothing (NaNs aside: they are quieted).
            if !v.is_nan() {
                let r = Rounder::new(f, RoundOptions::default()).round(v);
                assert_eq!(r.to_bits(), v.to_bits(), "{f} {bits:#x}");
            }
        }
    }
    // The decoding itself, against an implementation that shares nothing with it: the `half`
    // crate's fp16 and bf16 (the exact-reference tests build their grids from `decode`).
    for bits in 0..=u16::MAX {
        for (f, want) in [
            (FP16, half::f16::from_bits(bits).to_f64()),
            (BF16, half::bf16::from_bits(bits).to_f64()),
        ] {
            let got = f.decode(u32::from(bits));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{f} {bits:#06x}: {got:e} vs {want:e}"
            );
        }
    }
    assert_eq!(FP16.encode(0.1), None);
    assert_eq!(FP16.encode(65536.0), None);
    assert_eq!(FP8_E4M3.encode(f64::INFINITY), None);
    assert_eq!(FP8_E4M3.encode(f64::NAN), Some(0x7f));
    assert_eq!(FP32.encode(f64::from(f32::MAX)), Some(0x7f7f_ffff));
}

/// fp16 and bf16 from f32 agree bit for bit with the `half` crate (hardware F16C where present)
/// for every f32 input, NaN payloads included.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "2^32 inputs: runs under cargo test --release"
)]
fn all_f32_inputs_agree_with_half() {
    use rayon::prelude::*;
    let fp16 = Rounder::new(FP16, RoundOptions::default());
    let bf16 = Rounder::new(BF16, RoundOptions::default());
    let mismatches: u64 = (0..1u32 << 16)
        .into_par_iter()
        .map(|hi| {
            let xs: Vec<f32> = (0..1u32 << 16)
                .map(|lo| f32::from_bits(hi << 16 | lo))
                .collect();
            let (mut a, mut b) = (xs.clone(), xs.clone());
            fp16.round_f32_slice(&mut a);
            bf16.round_f32_slice(&mut b);
            // half's slice conversions (F16C where the CPU has it) are the reference.
            let mut h16 = vec![half::f16::ZERO; xs.len()];
            let mut hb = vec![half::bf16::ZERO; xs.len()];
            let (mut want16, mut want_b) = (vec![0f32; xs.len()], vec![0f32; xs.len()]);
            use half::slice::HalfFloatSliceExt;
            h16.convert_from_f32_slice(&xs);
            h16.convert_to_f32_slice(&mut want16);
            hb.convert_from_f32_slice(&xs);
            hb.convert_to_f32_slice(&mut want_b);
            let mut bad = 0;
            for i in 0..xs.len() {
                if a[i].to_bits() != want16[i].to_bits() || b[i].to_bits() != want_b[i].to_bits() {
                    if bad < 3 {
                        eprintln!(
                            "{:#x}: fp16 {:#x} vs {:#x}, bf16 {:#x} vs {:#x}",
                            xs[i].to_bits(),
                            a[i].to_bits(),
                            want16[i].to_bits(),
                            b[i].to_bits(),
                            want_b[i].to_bits()
                        );
                    }
                    bad += 1;
                }
            }
            bad
        })
        .sum();
    assert_eq!(mismatches, 0);
}

#[test]
fn amax_bits_is_the_largest_magnitudes_bits() {
    // Every length up to a few vectors of every width (their tails), the largest magnitude at
    // every position, and the special values that order above it (infinity, then NaN) or
    // below (signed zeros, subnormals).
    let scalar = |xs: &[f32]| xs.iter().fold(0, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
    assert_eq!(amax_bits(&[]), 0);
    for len in 1..70 {
        let base: Vec<f32> = (0..len).map(|i| (i as f32 - 30.0) * 1e-40).collect();
        for at in 0..len {
            for top in [
                -3.5f32,
                0.25,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                -0.0,
            ] {
                let mut xs = base.clone();
                xs[at] = top;
                assert_eq!(amax_bits(&xs), scalar(&xs), "len {len}, {top} at {at}");
            }
        }
    }
    let mut xs = vec![1.0f32; 100];
    xs[99] = -f32::NAN;
    assert_eq!(amax_bits(&xs), 0x7fc0_0000);
}
