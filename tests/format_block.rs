//! MX block scaling checked bit for bit against a reference written from the OCP MX
//! specification v1.0 alone: in f64, block by block, the shared exponent found by comparing
//! amax with powers of two, each element divided by its block's scale and rounded by the exact
//! scalar rounder (itself checked against a grid reference in `format_exact.rs`), saturating.

use mixprec::format::{
    E8m0, Event, FloatFormat, MX_BLOCK, MX_PRESETS, MxFormat, MxRounder, Overflow, RoundCounts,
    RoundOptions, Rounder, Rounding,
};
use mixprec::train::Rng;

/// `floor(log2 a)` for a positive finite `a`, by comparison with powers of two.
fn floor_log2(a: f64) -> i32 {
    let mut k = 0;
    while 2f64.powi(k) > a {
        k -= 1;
    }
    while 2f64.powi(k + 1) <= a {
        k += 1;
    }
    k
}

/// The specification, one block at a time: the values (as f64) and each element's event.
fn reference(
    element: FloatFormat,
    o: RoundOptions,
    xs: &[f32],
    start: u64,
) -> (Vec<f64>, RoundCounts) {
    let rounder = Rounder::new(
        element,
        RoundOptions {
            overflow: Overflow::Saturate,
            ..o
        },
    );
    let mut out = Vec::with_capacity(xs.len());
    let mut counts = RoundCounts::default();
    for (b, block) in xs.chunks(MX_BLOCK).enumerate() {
        if block.iter().any(|x| !x.is_finite()) {
            // The NaN scale: every value of the block is NaN.
            out.extend(block.iter().map(|_| f64::NAN));
            block.iter().for_each(|_| counts.record(Event::Nan));
            continue;
        }
        let amax = block.iter().map(|x| f64::from(x.abs())).fold(0.0, f64::max);
        // An all-zero block: amax read as fp32's smallest normal.
        let k = if amax == 0.0 { -126 } else { floor_log2(amax) };
        let e = (k - element.emax()).clamp(-127, 127);
        let scale = 2f64.powi(e);
        for (i, &x) in block.iter().enumerate() {
            let index = start + (b * MX_BLOCK + i) as u64;
            let (p, event) = rounder.round_at(f64::from(x) / scale, index);
            assert!(p.abs() <= element.max());
            out.push(p * scale);
            counts.record(event);
        }
    }
    (out, counts)
}

fn check(format: MxFormat, o: RoundOptions, xs: &[f32], start: u64) {
    let (want, want_counts) = reference(format.element(), o, xs, start);
    let r = MxRounder::new(format, o);
    for parallel in [false, true] {
        let mut got = xs.to_vec();
        let counts = if parallel {
            r.par_round_f32_slice_at(&mut got, start)
        } else {
            r.round_f32_slice_at(&mut got, start)
        };
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            // Bit for bit (the f64 reference value is an f32); NaN blocks: any NaN.
            let same = if w.is_nan() {
                g.is_nan()
            } else {
                f64::from(g) == w && g.to_bits() == (w as f32).to_bits()
            };
            assert!(
                same,
                "{format} {o:?}: x[{i}] = {:e} (block amax {:e}): got {g:e}, want {w:e}",
                xs[i],
                xs[i / MX_BLOCK * MX_BLOCK..]
                    .iter()
                    .take(MX_BLOCK)
                    .fold(0f32, |a, x| a.max(x.abs()))
            );
        }
        assert_eq!(counts, want_counts, "{format} {o:?} counts");
    }
}

fn all_options() -> Vec<RoundOptions> {
    let mut v = Vec::new();
    for rounding in [
        Rounding::NearestEven,
        Rounding::Stochastic,
        Rounding::TowardZero,
        Rounding::Up,
        Rounding::Down,
    ] {
        for subnormals in [true, false] {
            // The overflow rule is ignored: MX elements always saturate.
            for overflow in [Overflow::Ieee, Overflow::Saturate] {
                v.push(RoundOptions {
                    rounding,
                    overflow,
                    subnormals,
                    seed: 11,
                });
            }
        }
    }
    v
}

/// Blocks with every awkward amax: zeros, NaN and infinities, amax exactly at and just below a
/// power of two, amax at the element's max times a power of two and just above, tiny blocks
/// (f32 subnormals: the scale clamps at 2^-127) and huge ones (near f32's max), wide spreads
/// inside a block (values far below the block's range), and a short last block.
fn awkward_blocks() -> Vec<f32> {
    let mut rng = Rng::new(0xb10c_5ca1e);
    let mut next = || rng.next_u64();
    let mut blocks: Vec<Vec<f32>> = vec![
        vec![0.0; MX_BLOCK],
        (0..MX_BLOCK)
            .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
            .collect(),
    ];
    let spread = |amax: f32, lowest_exp: i32, next: &mut dyn FnMut() -> u64| -> Vec<f32> {
        let mut b: Vec<f32> = (0..MX_BLOCK - 1)
            .map(|_| {
                let r = next();
                let e = lowest_exp + (r % 64) as i32;
                let v = amax
                    * 2f32.powi(-(e.unsigned_abs() as i32 % 150))
                    * (1.0 + (r >> 40) as f32 / (1u64 << 24) as f32)
                    / 2.0;
                if r & 1 == 0 { v } else { -v }
            })
            .collect();
        b.insert(
            (next() % MX_BLOCK as u64) as usize,
            if next() & 1 == 0 { amax } else { -amax },
        );
        b
    };
    for k in [
        -149, -140, -130, -127, -126, -125, -20, -9, -1, 0, 1, 3, 8, 9, 15, 64, 120, 127,
    ] {
        let p = 2f32.powi(k);
        for amax in [
            p,
            f32::from_bits(p.to_bits() - 1),
            f32::from_bits(p.to_bits() + 1),
        ] {
            if amax > 0.0 && amax.is_finite() {
                blocks.push(spread(amax, 0, &mut next));
                blocks.push(spread(amax, 20, &mut next));
            }
        }
    }
    for (_, f) in MX_PRESETS {
        let m = f.element().max() as f32;
        for s in [1.0, 2f32.powi(-30), 2f32.powi(40)] {
            for amax in [m * s, f32::from_bits((m * s).to_bits() + 1), (m * s) * 1.03] {
                blocks.push(spread(amax, 0, &mut next));
            }
        }
    }
    blocks.push(vec![f32::MAX; MX_BLOCK]);
    // Values that vanish when scaled in f32 (2^-140 / 2^112): only their being nonzero matters
    // (directed rounding moves them to the smallest subnormal).
    let mut vanishing = vec![
        2f32.powi(-100),
        -1e-35,
        f32::from_bits(1),
        -f32::from_bits(3),
        0.0,
    ];
    vanishing.resize(MX_BLOCK - 1, 1e-30);
    vanishing.push(2f32.powi(120));
    blocks.push(vanishing);
    let mut with_nan = spread(1.0, 0, &mut next);
    with_nan[5] = f32::NAN;
    blocks.push(with_nan);
    let mut with_inf = spread(100.0, 0, &mut next);
    with_inf[31] = f32::NEG_INFINITY;
    blocks.push(with_inf);
    let mut xs: Vec<f32> = blocks.concat();
    // A short last block.
    xs.extend(spread(7.0, 0, &mut next).into_iter().take(7));
    xs
}

#[test]
fn mx_kernels_agree_with_the_specification() {
    let xs = awkward_blocks();
    assert_eq!(xs.len() % MX_BLOCK, 7);
    for (_, format) in MX_PRESETS {
        for o in all_options() {
            check(format, o, &xs, 3);
        }
    }
}

/// Random tensors longer than one unit of work (4096 values), with a short last block, at a
/// start position past 2^32 (another random key).
#[test]
fn mx_long_random_tensors() {
    let mut rng = Rng::new(42);
    let xs: Vec<f32> = (0..3 * 4096 + 45)
        .map(|_| {
            let r = rng.next_u64();
            let e = (r % 60) as i32 - 30;
            2f32.powi(e)
                * ((r >> 32) as f32 / u32::MAX as f32)
                * if r & 1 == 0 { 1.0 } else { -1.0 }
        })
        .collect();
    for (_, format) in MX_PRESETS {
        for o in all_options() {
            check(format, o, &xs, (1 << 32) - 1000);
        }
    }
}

#[test]
fn e8m0_and_block_scales() {
    assert_eq!(E8m0::from_exponent(0).bits(), 127);
    assert_eq!(E8m0::from_exponent(-300).value(), 2f64.powi(-127));
    assert_eq!(E8m0::from_exponent(300).value(), 2f64.powi(127));
    assert_eq!(E8m0::from_exponent(127).bits(), 0xfe);
    assert!(E8m0::NAN.value().is_nan());
    assert_eq!(E8m0::NAN.exponent(), None);
    let e4m3: MxFormat = "mxfp8-e4m3".parse().unwrap();
    // amax 2^k gives 2^(k - 8); just below it, 2^(k - 9).
    assert_eq!(e4m3.block_scale(&[1.0, -0.5]).exponent(), Some(-8));
    assert_eq!(
        e4m3.block_scale(&[-f32::from_bits(1f32.to_bits() - 1)])
            .exponent(),
        Some(-9)
    );
    assert_eq!(e4m3.block_scale(&[0.0; 32]).exponent(), Some(-127));
    assert_eq!(e4m3.block_scale(&[f32::MAX]).exponent(), Some(119));
    assert_eq!(e4m3.block_scale(&[1.0, f32::NAN]), E8m0::NAN);
    let fp4: MxFormat = "MXFP4".parse().unwrap();
    assert_eq!(fp4.element().max(), 6.0);
    assert_eq!(fp4.block_scale(&[6.0]).exponent(), Some(0));
    for (name, f) in MX_PRESETS {
        assert_eq!(f.name(), name);
        assert_eq!(name.parse::<MxFormat>().unwrap(), f);
    }
    assert!("mxfp8".parse::<MxFormat>().is_err());
}

/// Saturation regardless of the overflow option, underflow inside a block, and NaN blocks.
#[test]
fn mx_counts_say_what_happened() {
    let r = MxRounder::new(
        "mxfp8-e4m3".parse().unwrap(),
        RoundOptions {
            overflow: Overflow::Ieee,
            ..RoundOptions::default()
        },
    );
    let mut xs = vec![0.0f32; 40];
    xs[0] = 500.0; // scale 2^0 (floor(log2 500) = 8): 500 saturates to 448
    xs[1] = 9e-4; // below 2^-10 (half the smallest subnormal): underflows
    xs[2] = 3e-3; // a subnormal of E4M3
    xs[33] = f32::NAN; // the second block is all NaN
    let c = r.round_f32_slice(&mut xs);
    assert_eq!(&xs[..3], &[448.0, 0.0, 2f32.powi(-9) * 2.0]);
    assert!(xs[32..].iter().all(|x| x.is_nan()));
    assert_eq!((c.overflow, c.underflow, c.subnormal, c.nan), (1, 1, 1, 8));
}
