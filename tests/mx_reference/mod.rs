//! The OCP MX specification v1.0 as a reference, written from the specification alone: in
//! f64, block by block, the shared exponent found by comparing amax with powers of two, each
//! element divided by its block's scale and rounded by the exact scalar rounder, saturating;
//! and the options and awkward blocks both block-format test files run it on
//! (`mod mx_reference;` in each).
#![allow(dead_code)] // each test file uses its own subset

use mixprec::format::{
    Event, FloatFormat, MX_BLOCK, MX_PRESETS, Overflow, RoundCounts, RoundOptions, Rounder,
    Rounding,
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
pub fn reference(
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

pub fn all_options() -> Vec<RoundOptions> {
    let mut v = Vec::new();
    for rounding in Rounding::ALL {
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
pub fn awkward_blocks() -> Vec<f32> {
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
