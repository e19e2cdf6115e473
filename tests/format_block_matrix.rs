//! BlockFormat / BlockRounder: MX as matrices, NVFP4 and tiles, each checked bit for bit
//! against a reference written from its source's formulas (see the modules' docs), in f64
//! arithmetic rounded to f32 after each step the source does in f32 (an f64 operation on f32
//! values rounded to f32 is the f32 operation: 53 >= 2 * 24 + 2). The MX elements themselves:
//! `format_block.rs`.

use mixprec::format::{
    BLOCK_PRESETS, BlockFormat, BlockRounder, Event, FP4_E2M1, FP8_E4M3, FloatFormat, MX_PRESETS,
    MxFormat, Overflow, RoundCounts, RoundOptions, Rounder, TileFormat,
};
use mixprec::train::Rng;

mod mx_reference;
use mx_reference::{all_options, awkward_blocks, reference};

mod common;
use common::stochastic;

/// The f32 rounding of an f64 result.
fn f(x: f64) -> f64 {
    x as f32 as f64
}

/// A scaled value that vanished in f32 keeps its sign and f32's smallest subnormal (the
/// schemes' rule: only its being nonzero matters).
fn keep_nonzero(x: f32, q: f64) -> f64 {
    if q == 0.0 && x != 0.0 {
        f64::from(f32::from_bits(1)).copysign(f64::from(x))
    } else {
        q
    }
}

/// Bit-for-bit comparison of a kernel's f32 results with the reference's (NaN: any NaN).
fn assert_same(what: &str, xs: &[f32], got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            f64::from(g) == w && g.to_bits() == (w as f32).to_bits()
        };
        assert!(same, "{what}: x[{i}] = {:e}: got {g:e}, want {w:e}", xs[i]);
    }
}

/// The f64 path's results against a reference computed with wide (f64) element arithmetic.
fn assert_same_f64(what: &str, xs: &[f32], got: &[f64], want: &[f64]) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == w.to_bits()
        };
        assert!(
            same,
            "{what} (f64 path): x[{i}] = {:e}: got {g:e}, want {w:e}",
            xs[i]
        );
    }
}

/// The element rounder every scheme uses: the options, saturating.
fn element_rounder(element: FloatFormat, o: RoundOptions) -> Rounder {
    Rounder::new(
        element,
        RoundOptions {
            overflow: Overflow::Saturate,
            ..o
        },
    )
}

/// What a reference rounds: the options, a matrix of `cols` columns whose first value is at
/// position `start` of the random stream, and whether the scaling and dequantisation run in
/// f64 (`wide`: the f64 path) or in f32.
#[derive(Clone, Copy)]
struct Input<'a> {
    o: RoundOptions,
    xs: &'a [f32],
    cols: usize,
    start: u64,
    wide: bool,
}

impl<'a> Input<'a> {
    /// The fields, in order.
    fn parts(self) -> (RoundOptions, &'a [f32], usize, u64, bool) {
        (self.o, self.xs, self.cols, self.start, self.wide)
    }
}

/// NVFP4 as Transformer Engine computes it (reference_nvfp4.py, core_nvfp4.cuh,
/// dequantize_nvfp4.cuh).
fn nvfp4_reference(input: Input<'_>) -> (Vec<f64>, RoundCounts) {
    let (o, xs, cols, start, wide) = input.parts();
    let mut counts = RoundCounts::default();
    if xs.iter().any(|x| !x.is_finite()) {
        counts.nan = xs.len() as u64;
        return (vec![f64::NAN; xs.len()], counts);
    }
    let e4m3 = element_rounder(FP8_E4M3, RoundOptions::default());
    let elem = element_rounder(FP4_E2M1, o);
    let fmax = f64::from(f32::MAX);
    let amax_t = xs.iter().map(|x| f64::from(x.abs())).fold(0.0, f64::max);
    let mut s_enc = if amax_t == 0.0 {
        f64::INFINITY
    } else {
        f(448.0 * 6.0 / amax_t)
    }
    .min(fmax);
    if amax_t == 0.0 || s_enc == 0.0 {
        s_enc = 1.0;
    }
    let s_dec = f(1.0 / s_enc);
    let mult = f(s_enc * f(1.0 / 6.0));
    let mut out = vec![0.0; xs.len()];
    for (r, row) in xs.chunks(cols).enumerate() {
        for (b, block) in row.chunks(16).enumerate() {
            let amax_b = block.iter().map(|x| f64::from(x.abs())).fold(0.0, f64::max);
            let sb = e4m3.round(f(amax_b * mult).min(fmax));
            let enc = if sb == 0.0 {
                0.0
            } else {
                (1.0 / f(sb * s_dec)).min(fmax)
            };
            let enc = f(enc);
            let dq = f(f(sb * amax_t) * f(1.0 / 2688.0));
            for (j, &x) in block.iter().enumerate() {
                let i = r * cols + b * 16 + j;
                if sb == 0.0 {
                    // The zero block scale: a zero with the value's sign.
                    out[i] = 0f64.copysign(f64::from(x));
                    if x != 0.0 {
                        counts.record(Event::Underflow);
                    }
                    continue;
                }
                let q = f64::from(x) * enc;
                let q = if wide { q } else { keep_nonzero(x, f(q)) };
                let (p, event) = elem.round_at(q, start + i as u64);
                assert!(p.abs() <= 6.0);
                counts.record(event);
                out[i] = if wide { p * dq } else { f(p * dq) };
            }
        }
    }
    (out, counts)
}

/// Tiles `tr x tc` with FP32 scales amax / max_elem (DeepSeek-V3), the quotient in f32.
fn tile_reference(t: TileFormat, input: Input<'_>) -> (Vec<f64>, RoundCounts) {
    let (o, xs, cols, start, wide) = input.parts();
    let (tr, tc) = (t.rows(), t.cols());
    let elem = element_rounder(t.element(), o);
    // The last row may be short.
    let rows = xs.len().div_ceil(cols);
    let mut out = vec![0.0; xs.len()];
    let mut counts = RoundCounts::default();
    for r0 in (0..rows).step_by(tr) {
        for c0 in (0..cols).step_by(tc) {
            let cells: Vec<usize> = (r0..(r0 + tr).min(rows))
                .flat_map(|r| (c0..(c0 + tc).min(cols)).map(move |c| r * cols + c))
                .filter(|&i| i < xs.len())
                .collect();
            if cells.is_empty() {
                continue;
            }
            if cells.iter().any(|&i| !xs[i].is_finite()) {
                for &i in &cells {
                    out[i] = f64::NAN;
                    counts.record(Event::Nan);
                }
                continue;
            }
            let amax = cells
                .iter()
                .map(|&i| f64::from(xs[i].abs()))
                .fold(0.0, f64::max);
            let s = if amax == 0.0 {
                1.0
            } else {
                f(amax / t.element().max()).max(f64::from(f32::from_bits(1)))
            };
            for &i in &cells {
                let x = xs[i];
                let q = f64::from(x) / s;
                let q = if wide { q } else { keep_nonzero(x, f(q)) };
                let (p, event) = elem.round_at(q, start + i as u64);
                counts.record(event);
                out[i] = if wide { p * s } else { f(p * s) };
            }
        }
    }
    (out, counts)
}

/// The MX reference of this file, row by row (blocks restart at each row).
fn mx_matrix_reference(format: MxFormat, input: Input<'_>) -> (Vec<f64>, RoundCounts) {
    let (o, xs, cols, start, _) = input.parts();
    let mut out = Vec::new();
    let mut counts = RoundCounts::default();
    for (r, row) in xs.chunks(cols).enumerate() {
        let (v, c) = reference(format.element(), o, row, start + (r * cols) as u64);
        out.extend(v);
        counts += c;
    }
    (out, counts)
}

/// The reference of any block format.
fn block_reference(format: BlockFormat, input: Input<'_>) -> (Vec<f64>, RoundCounts) {
    match format {
        // Exact in f64 (powers of two): the same whether wide or not.
        BlockFormat::Mx(m) => mx_matrix_reference(m, input),
        BlockFormat::Nvfp4 => nvfp4_reference(input),
        BlockFormat::Tile(t) => tile_reference(t, input),
    }
}

/// Checks the serial, parallel and f64 paths of `format` on the matrix `xs` with `cols`
/// columns against the reference.
fn check_block(format: BlockFormat, o: RoundOptions, xs: &[f32], cols: usize, start: u64) {
    let what = format!("{format} {o:?} cols {cols}");
    let input = Input {
        o,
        xs,
        cols,
        start,
        wide: false,
    };
    let (want, want_counts) = block_reference(format, input);
    let r = BlockRounder::new(format, o);
    for parallel in [false, true] {
        let mut got = xs.to_vec();
        let counts = if parallel {
            r.par_round_matrix_at(&mut got, cols, start)
        } else {
            r.round_matrix_at(&mut got, cols, start)
        };
        assert_same(&format!("{what} parallel {parallel}"), xs, &got, &want);
        assert_eq!(counts, want_counts, "{what} parallel {parallel}: counts");
    }
    let (want, want_counts) = block_reference(
        format,
        Input {
            wide: true,
            ..input
        },
    );
    let mut got: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
    let counts = r.round_matrix_f64_at(&mut got, cols, start);
    assert_same_f64(&what, xs, &got, &want);
    assert_eq!(counts, want_counts, "{what}: f64 path counts");
}

/// Random values over `binades` binades below `top`, signed, some zeros.
fn spread_values(n: usize, top: f32, binades: u32, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let r = rng.next_u64();
            if r.is_multiple_of(17) {
                return 0.0;
            }
            let e = (r >> 8) as u32 % binades.max(1);
            let m = 1.0 + (r >> 40) as f32 / (1u64 << 24) as f32;
            let v = top * 2f32.powi(-(e as i32)) * m / 2.0;
            if r & 1 == 0 { v } else { -v }
        })
        .collect()
}

/// Tensors that exercise NVFP4's edge cases, as (values, cols).
fn nvfp4_tensors() -> Vec<(Vec<f32>, usize)> {
    let mut rng = Rng::new(0x4e5f4);
    let mut v: Vec<(Vec<f32>, usize)> = vec![
        (vec![0.0; 64], 32),
        (
            (0..48)
                .map(|i| if i % 3 == 0 { -0.0 } else { 0.0 })
                .collect(),
            16,
        ),
    ];
    // amax at a power of two, just below and above; tiny (f32 subnormals) and huge tensors.
    for top in [
        1.0f32,
        f32::from_bits(1f32.to_bits() - 1),
        f32::from_bits(1f32.to_bits() + 1),
        2f32.powi(-126),
        1e-40,
        f32::from_bits(7),
        1e-30,
        6.0,
        448.0,
        2688.0,
        1e30,
        f32::MAX,
    ] {
        for cols in [16, 37, 5] {
            v.push((spread_values(cols * 6, top, 12, &mut rng), cols));
        }
    }
    // Wide spreads: blocks far below the tensor's amax get block scales that round to 0 or
    // to E4M3 subnormals.
    for binades in [20, 40, 80, 160] {
        let mut xs = spread_values(16 * 40, 1.0, binades, &mut rng);
        xs[3] = 1.0;
        v.push((xs.clone(), 16));
        v.push((xs, 40));
    }
    // Blocks whose values are all far below the tensor's amax.
    let mut xs = spread_values(16 * 8, 1e-12, 4, &mut rng);
    xs[0] = 1e6;
    v.push((xs, 16));
    // NaN and infinity anywhere make the whole tensor NaN.
    let mut xs = spread_values(40, 3.0, 10, &mut rng);
    xs[33] = f32::NAN;
    v.push((xs, 20));
    let mut xs = spread_values(40, 3.0, 10, &mut rng);
    xs[2] = f32::NEG_INFINITY;
    v.push((xs, 40));
    // One value, and a short last block in one row.
    v.push((vec![-0.3], 1));
    v.push((spread_values(16 * 3 + 5, 100.0, 30, &mut rng), 16 * 3 + 5));
    v
}

/// A finite amax above f32's max over 448 overflows the dequantiser's `s_b * amax_t`: what
/// does not round to zero becomes infinite, the rest NaN (as docs/src/formats.md says).
#[test]
fn nvfp4_amax_beyond_f32_over_448_overflows_the_dequantiser() {
    let r = BlockRounder::new(BlockFormat::Nvfp4, RoundOptions::default());
    // Every value of the block leaves as an infinity or a NaN: each counts as overflow (the
    // element 1.0 rounded to zero, yet nothing underflowed to zero).
    let overflowed = |n| RoundCounts {
        overflow: n,
        ..RoundCounts::default()
    };
    let mut xs = vec![1e36f32, -1e36, 1.0, 0.0];
    assert_eq!(r.round_matrix_at(&mut xs, 4, 0), overflowed(4));
    assert_eq!(xs[..2], [f32::INFINITY, f32::NEG_INFINITY]);
    // The library's NaN (0x7fc00000), not the CPU's default NaN: the same bits everywhere.
    assert_eq!(xs[2].to_bits(), f32::NAN.to_bits(), "{xs:?}");
    assert_eq!(xs[3].to_bits(), f32::NAN.to_bits(), "{xs:?}");
    let mut wide = vec![1e36f64, -1e36, 1.0, 0.0];
    assert_eq!(r.round_matrix_f64_at(&mut wide, 4, 0), overflowed(4));
    assert_eq!(wide[..2], [f64::INFINITY, f64::NEG_INFINITY]);
    assert_eq!(wide[2].to_bits(), f64::NAN.to_bits(), "{wide:?}");
    assert_eq!(wide[3].to_bits(), f64::NAN.to_bits(), "{wide:?}");
    // Only the blocks whose scale overflows: a second block of smaller values (its own scale,
    // whose dequantiser stays finite) counts as rounding counts it, 1e30 underflowing.
    let mut xs = vec![1e36f32; 16];
    xs.extend([1e35f32, 1e30, 0.0, 5e34]);
    let counts = r.round_matrix_at(&mut xs, 20, 0);
    assert_eq!((counts.overflow, counts.underflow), (16, 1), "{xs:?}");
    assert!(xs[..16].iter().all(|x| x.is_infinite()), "{xs:?}");
    assert!(
        xs[16].is_finite() && xs[16] > 0.0 && xs[17] == 0.0 && xs[19] > 0.0,
        "{xs:?}"
    );
    // Below the edge the same block stays finite.
    let mut xs = vec![1e35f32, 1.0];
    r.round_matrix_at(&mut xs, 2, 0);
    assert!(xs.iter().all(|x| x.is_finite()), "{xs:?}");
}

#[test]
fn nvfp4_kernels_agree_with_transformer_engine() {
    for (xs, cols) in nvfp4_tensors() {
        for o in all_options() {
            check_block(BlockFormat::Nvfp4, o, &xs, cols, 5);
        }
    }
}

/// Matrices whose sides are not multiples of the tile, with zero tiles, NaN and infinity,
/// tiny and huge tiles.
fn tile_matrices(rng: &mut Rng) -> Vec<(Vec<f32>, usize)> {
    let mut v = Vec::new();
    for (rows, cols) in [(1, 1), (3, 7), (9, 10), (5, 33), (12, 4)] {
        for (top, binades) in [(1.0, 30), (1e-40, 8), (3e38, 20), (448.0, 60)] {
            let mut xs = spread_values(rows * cols, top, binades, rng);
            if rows * cols > 12 {
                xs[rows * cols / 2] = top;
            }
            v.push((xs, cols));
        }
    }
    // A zero tile, a NaN tile and an infinite tile among ordinary ones (3 x 2 tiles of 9 x 10).
    let mut xs = spread_values(90, 5.0, 20, rng);
    for r in 0..3 {
        for c in 0..2 {
            xs[r * 10 + c] = 0.0;
        }
    }
    xs[4 * 10 + 5] = f32::NAN;
    xs[8 * 10 + 9] = f32::INFINITY;
    v.push((xs, 10));
    v
}

#[test]
fn tile_kernels_agree_with_the_reference() {
    let mut rng = Rng::new(0x711e);
    let matrices = tile_matrices(&mut rng);
    let tiles: Vec<BlockFormat> = [
        "fp8-e4m3@1x3",
        "fp8-e4m3@3x2",
        "fp8-e5m2@4x4",
        "fp4-e2m1@2x16",
        "bf16@3x1",
        "fp6-e3m2@1x1",
    ]
    .iter()
    .map(|n| n.parse().unwrap())
    .collect();
    for format in tiles {
        for (xs, cols) in &matrices {
            for o in all_options() {
                check_block(format, o, xs, *cols, 17);
            }
        }
    }
}

/// DeepSeek-V3's tiles on a matrix larger than a unit of work, sides not multiples of 128.
#[test]
fn deepseek_tiles_on_a_large_matrix() {
    let mut rng = Rng::new(0xdee9);
    let (rows, cols) = (131, 300);
    let mut xs = spread_values(rows * cols, 10.0, 40, &mut rng);
    // One tile of tiny values and one of huge ones.
    for r in 0..5 {
        xs[r * cols + 250] = 1e-35;
        xs[(130 - r) * cols + 3] = 1e35;
    }
    for name in ["fp8-e4m3@1x128", "fp8-e4m3@128x128"] {
        for o in [RoundOptions::default(), stochastic(9)] {
            check_block(name.parse().unwrap(), o, &xs, cols, (1 << 32) - 5000);
        }
    }
}

/// MX through BlockRounder: blocks restart at each row when 32 does not divide the row, and a
/// matrix whose rows are whole blocks is the same as one long row.
#[test]
fn mx_matrices_block_along_rows() {
    let xs = awkward_blocks();
    for (_, format) in MX_PRESETS {
        for o in all_options() {
            for cols in [xs.len(), 1, 45] {
                let n = xs.len() / cols * cols;
                check_block(BlockFormat::Mx(format), o, &xs[..n], cols, 3);
            }
        }
    }
    let mut rng = Rng::new(7);
    let xs = spread_values(64 * 70, 1.0, 50, &mut rng);
    let r = BlockRounder::new("mxfp8-e5m2".parse().unwrap(), RoundOptions::default());
    let (mut a, mut b) = (xs.clone(), xs.clone());
    assert_eq!(
        r.round_matrix_at(&mut a, 64, 0),
        r.round_matrix_at(&mut b, xs.len(), 0)
    );
    assert_eq!(a, b);
}

/// In nearest-even rounding the f64 path on f32 values, rounded to f32, is the f32 path.
#[test]
fn f64_path_matches_f32_path_in_nearest_even() {
    let mut rng = Rng::new(0xf64);
    let xs = spread_values(48 * 33, 1.0, 60, &mut rng);
    for (_, format) in BLOCK_PRESETS {
        let r = BlockRounder::new(format, RoundOptions::default());
        let mut a = xs.clone();
        let ca = r.round_matrix_at(&mut a, 48, 0);
        let mut b: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        let cb = r.round_matrix_f64_at(&mut b, 48, 0);
        assert_eq!(ca, cb, "{format}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(
                x.to_bits(),
                (*y as f32).to_bits(),
                "{format} x[{i}] = {}",
                xs[i]
            );
        }
    }
}

#[test]
fn block_format_names() {
    for (name, f) in BLOCK_PRESETS {
        assert_eq!(f.name(), name);
        assert_eq!(name.parse::<BlockFormat>().unwrap(), f);
        assert_eq!(name.to_uppercase().parse::<BlockFormat>().unwrap(), f);
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, format!("\"{name}\""));
        assert_eq!(serde_json::from_str::<BlockFormat>(&json).unwrap(), f);
    }
    let shapes: Vec<_> = BLOCK_PRESETS.iter().map(|(_, f)| f.block_shape()).collect();
    assert_eq!(
        shapes,
        [
            (1, 32),
            (1, 32),
            (1, 32),
            (1, 32),
            (1, 32),
            (1, 16),
            (1, 128),
            (128, 128)
        ]
    );
    assert_eq!(BlockFormat::Nvfp4.element(), FP4_E2M1);
    let t: BlockFormat = " E4M3FN@2x64 ".parse().unwrap();
    assert_eq!(t.to_string(), "fp8-e4m3@2x64");
    assert_eq!(t.block_shape(), (2, 64));
    assert_eq!(
        "e3m4@1x1".parse::<BlockFormat>().unwrap().name(),
        "e3m4@1x1"
    );
    let unknown = "mxfp9".parse::<BlockFormat>().unwrap_err().to_string();
    for (name, _) in &BLOCK_PRESETS[..6] {
        assert!(unknown.contains(name), "{unknown}");
    }
    assert!(unknown.contains("ELEMENT@RxC"), "{unknown}");
    for (bad, needle) in [
        ("fp9@1x128", "unknown element format 'fp9'"),
        ("fp8-e4m3@0x128", "1..=65536"),
        ("fp8-e4m3@1x", "'1x'"),
        ("fp8-e4m3@1x128x2", "RxC"),
        ("fp8-e4m3@65537x1", "RxC"),
        ("fp8-e4m3@-1x2", "RxC"),
        ("@1x2", "unknown element format ''"),
    ] {
        let e = bad.parse::<BlockFormat>().unwrap_err().to_string();
        assert!(e.contains(needle), "{bad}: {e}");
        assert!(
            e.starts_with(&format!("unknown block format '{bad}'")),
            "{e}"
        );
    }
    assert!(serde_json::from_str::<BlockFormat>("\"nvfp5\"").is_err());
}

/// The shape rules: a matrix of 0 values is fine with any column count; otherwise there must
/// be at least one column.
#[test]
#[should_panic(expected = "cannot have 0 columns")]
fn block_rounder_refuses_zero_columns() {
    let r = BlockRounder::new(BlockFormat::Nvfp4, RoundOptions::default());
    let mut empty: [f32; 0] = [];
    assert_eq!(r.round_matrix_at(&mut empty, 0, 0), RoundCounts::default());
    r.round_matrix_at(&mut [1.0; 6], 0, 0);
}

/// A short last row (the end of a stream) is a row like the others, only shorter.
#[test]
fn a_short_last_row() {
    let mut rng = Rng::new(0x5407);
    let xs = spread_values(7 * 40 + 23, 2.0, 30, &mut rng);
    let formats = [
        "mxfp4",
        "nvfp4",
        "fp8-e4m3@3x16",
        "fp8-e5m2@1x7",
        "mxfp8-e4m3",
    ];
    for name in formats {
        for o in all_options().into_iter().step_by(3) {
            check_block(name.parse().unwrap(), o, &xs, 40, 1);
        }
    }
    // With 32 columns the last row's blocks are those of one long row.
    check_block(
        "mxfp6-e2m3".parse().unwrap(),
        RoundOptions::default(),
        &xs,
        32,
        0,
    );
}

/// Matrices larger than a parallel task (64K values) are shared out among the pool's threads:
/// a long row by its chunks, short rows whole, tiles by bands of rows. Each gives the bits and
/// counts of the serial path (checked against the references above) in pools of 1, 2 and 3
/// threads, nearest and stochastic.
#[test]
fn parallel_paths_give_the_serial_bits_whatever_the_threads() {
    let mut rng = Rng::new(0x7a5c);
    let xs = spread_values(3 * (1 << 16) + 77, 4.0, 40, &mut rng);
    let cases = [
        ("mxfp8-e4m3", xs.len()),
        ("mxfp4", 100),
        ("nvfp4", 1 << 12),
        ("nvfp4", 45),
        ("fp8-e4m3@1x128", 333),
        ("fp8-e4m3@128x128", 1000),
    ];
    for (name, cols) in cases {
        for o in [RoundOptions::default(), stochastic(3)] {
            let r = BlockRounder::new(name.parse().unwrap(), o);
            let mut want = xs.clone();
            let want_counts = r.round_matrix_at(&mut want, cols, 7);
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut got = xs.clone();
                let counts = pool.install(|| r.par_round_matrix_at(&mut got, cols, 7));
                let what = format!("{name} cols {cols} {o:?} on {threads} threads");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}: x[{i}] = {:e}", xs[i]);
                }
                assert_eq!(counts, want_counts, "{what}: counts");
            }
        }
    }
}
