//! MX block scaling checked bit for bit against a reference written from the OCP MX
//! specification v1.0 alone: in f64, block by block, the shared exponent found by comparing
//! amax with powers of two, each element divided by its block's scale and rounded by the exact
//! scalar rounder (itself checked against a grid reference in `format_exact.rs`), saturating.

use mixprec::format::{E8m0, MX_BLOCK, MX_PRESETS, MxFormat, MxRounder, Overflow, RoundOptions};
use mixprec::train::Rng;

mod mx_reference;
use mx_reference::{all_options, awkward_blocks, reference};

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

/// Blocks at the edges of the one-pass path (each block rounded by the element kernel with its
/// exponent range shifted by the block's scale exponent `e`, fused where the shifted range
/// stays inside f32's): for each MX format, amax where the shifted smallest normal
/// `2^(emin + e)` is f32's smallest normal, one binade above and one below (the scaled path);
/// amax where the nearest mode's constant `2^(emin - man_bits + 23 + e)` reaches f32's top
/// (about 2^122 for E4M3) and near 2^127, 2^-127 and f32's max; inside each block, values at
/// and around the shifted smallest subnormal, its half (ties), the shifted smallest normal,
/// f32's smallest normal and subnormals, and the saturation point; zero blocks of both signs
/// between them, NaN and infinity blocks, and a short last block.
fn fused_edge_blocks(format: MxFormat, rng: &mut Rng) -> Vec<f32> {
    let el = format.element();
    let (emin, emax, man) = (el.emin(), el.emax(), el.man_bits() as i32);
    // floor(log2 amax) where emin + e = -126, and where the nearest constant tops out.
    let k_low = -126 - emin + emax;
    let k_high = 104 - emin + man + emax;
    let mut blocks: Vec<Vec<f32>> = Vec::new();
    let ks = [
        k_low - 2,
        k_low - 1,
        k_low,
        k_low + 1,
        k_high - 1,
        k_high,
        k_high + 1,
        126,
        127,
        -127,
        -126,
        -130,
    ];
    for k in ks.into_iter().filter(|k| (-149..=127).contains(k)) {
        let p = 2f64.powi(k);
        for amax in [
            p,
            2.0 * p * (1.0 - 2f64.powi(-24)),
            1.5 * p,
            el.max() * p / 2f64.powi(emax),
        ] {
            let amax = amax as f32;
            if !(amax > 0.0 && amax.is_finite()) {
                continue;
            }
            // The shifted format's landmarks for this block's scale exponent.
            let e = (k - emax).clamp(-127, 127);
            let quantum = 2f64.powi(emin + e - man);
            let min_normal = 2f64.powi(emin + e);
            let mut b: Vec<f32> = [
                quantum,
                quantum / 2.0,
                quantum / 2.0 * (1.0 + 2f64.powi(-20)),
                quantum / 2.0 * (1.0 - 2f64.powi(-20)),
                quantum * 1.5,
                quantum * 2.5,
                quantum / 4.0,
                quantum * 3.0 / 4.0,
                min_normal,
                min_normal * (1.0 - 2f64.powi(-man - 2)),
                min_normal * (1.0 - 2f64.powi(-man - 1)),
                min_normal * (1.0 - 2f64.powi(-23)),
                min_normal * 1.5,
                2f64.powi(-126),
                2f64.powi(-126) * (1.0 - 2f64.powi(-23)),
                f64::from(f32::from_bits(1)),
                f64::from(f32::from_bits(0x0040_0001)),
                f64::from(amax) * 0.999,
            ]
            .into_iter()
            .map(|v| v as f32)
            .collect();
            while b.len() < MX_BLOCK - 1 {
                let r = rng.next_u64();
                let v = f64::from(amax)
                    * 2f64.powi(-((r % 160) as i32))
                    * (1.0 + (r >> 40) as f64 / 2f64.powi(24))
                    / 2.0;
                b.push(v as f32);
            }
            b.insert((rng.next_u64() % MX_BLOCK as u64) as usize, amax);
            for v in &mut b {
                if rng.next_u64() & 1 == 0 {
                    *v = -*v;
                }
            }
            blocks.push(b);
            blocks.push(if blocks.len().is_multiple_of(2) {
                vec![0.0; MX_BLOCK]
            } else {
                vec![-0.0; MX_BLOCK]
            });
        }
    }
    let mut special = blocks[2].clone();
    special[17] = f32::NAN;
    blocks.push(special);
    let mut special = blocks[4].clone();
    special[0] = f32::INFINITY;
    blocks.push(special);
    let mut xs = blocks.concat();
    xs.extend_from_slice(&blocks[4][..11]);
    xs
}

/// The one-pass path at its edges, against the specification, at stream positions that do not
/// start on a block (so each block's random bits are its own positions), serial and parallel.
#[test]
fn mx_fused_path_edges() {
    let mut rng = Rng::new(0xed9e);
    for (_, format) in MX_PRESETS {
        let xs = fused_edge_blocks(format, &mut rng);
        for o in all_options() {
            check(format, o, &xs, 5);
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
