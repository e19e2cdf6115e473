//! Block-scaled operand casts against hand-built references: what each product of a Linear
//! (and of a 1x1 convolution on 1x1 images, which is one) reads under the block recipes, bit for
//! bit; which casts an LSTM makes, along which axes; counts, inf/NaN and the f64 path.

use ndarray::{Array2, Axis};

use super::*;
use crate::format::{BlockFormat, BlockRounder, FloatFormat, MxRounder, RoundOptions, Rounder};
use crate::recipe::Recipe;
use crate::train::Rng;
use crate::train::layer::{Conv2d, ImageShape, Layer, Linear, Lstm};

/// `m` rounded by the format layer's rounders, blocks along each row: an MX format row by row
/// with the MX rounder, NVFP4 with the block rounder on the whole matrix (its tensor scale is
/// the matrix's), a number format value by value (the axis does not matter).
fn rows(m: &Array2<f32>, format: &str) -> Array2<f32> {
    let mut out = m.as_standard_layout().into_owned();
    let options = RoundOptions::default();
    if let Ok(f) = format.parse::<FloatFormat>() {
        let r = Rounder::new(f, options);
        out.mapv_inplace(|v| r.round(f64::from(v)) as f32);
        return out;
    }
    match format.parse::<BlockFormat>().unwrap() {
        BlockFormat::Mx(f) => {
            let r = MxRounder::new(f, options);
            for mut row in out.rows_mut() {
                r.round_f32_slice(row.as_slice_mut().unwrap());
            }
        }
        other => {
            let cols = out.ncols();
            BlockRounder::new(other, options).round_matrix_at(out.as_slice_mut().unwrap(), cols, 0);
        }
    }
    out
}

/// `m` rounded with blocks down each column.
fn cols(m: &Array2<f32>, format: &str) -> Array2<f32> {
    let t = m.t().as_standard_layout().into_owned();
    rows(&t, format).t().as_standard_layout().into_owned()
}

/// Values spread over 2^-14..2^2 in magnitude, so that a block's scale (set by its largest
/// value) decides what its small values keep, and blocks along rows and down columns differ.
fn spread(shape: (usize, usize), rng: &mut Rng) -> Array2<f32> {
    Array2::from_shape_simple_fn(shape, || {
        let e = (rng.uniform() * 16.0).floor() as i32 - 14;
        ((2.0 * rng.uniform() - 1.0) * 2f64.powi(e)) as f32
    })
}

/// What a Linear's three products read under a block recipe: x and W with blocks along the
/// inputs (forward), dy along the outputs and W down its columns (dgrad), dy and x along the
/// batch (wgrad); `(input, weight, grad_output)` formats.
struct Reference {
    y: Array2<f32>,
    dx: Array2<f32>,
    dw: Array2<f32>,
}

fn reference(
    x: &Array2<f32>,
    w: &Array2<f32>,
    b: &Array2<f32>,
    dy: &Array2<f32>,
    formats: (&str, &str, &str),
) -> Reference {
    let (fi, fw, fg) = formats;
    let mut y = gemm(rows(x, fi).view(), rows(w, fw).t());
    y += b;
    Reference {
        y,
        dx: gemm(rows(dy, fg).view(), cols(w, fw).view()),
        dw: gemm(cols(dy, fg).t(), cols(x, fi).view()),
    }
}

/// Sizes that are not multiples of the block (each row's last block is shorter) and larger
/// than one block on every axis.
const BATCH: usize = 37;
const INPUTS: usize = 45;
const OUTPUTS: usize = 35;

struct Data {
    x: Array2<f32>,
    w: Array2<f32>,
    b: Array2<f32>,
    dy: Array2<f32>,
}

fn data() -> Data {
    let mut rng = Rng::new(13);
    Data {
        x: spread((BATCH, INPUTS), &mut rng),
        w: spread((OUTPUTS, INPUTS), &mut rng),
        b: spread((1, OUTPUTS), &mut rng),
        dy: spread((BATCH, OUTPUTS), &mut rng),
    }
}

/// Runs `layer` (whose weight is `d.w` and bias `d.b`) forward on `d.x` and back from `d.dy`
/// under `recipe`; returns y, dx and the precision (for its counts).
fn run_layer(
    layer: &mut dyn Layer<f32>,
    d: &Data,
    recipe: &Recipe,
) -> (Array2<f32>, Array2<f32>, Precision) {
    let mut p = Precision::new(recipe, 0);
    let site = p.register(layer.kind());
    p.begin_step();
    p.enter(site);
    let y = layer.forward(d.x.clone(), &mut p);
    p.enter(site);
    let dx = layer.backward(d.dy.clone(), &mut p);
    (y, dx, p)
}

/// Runs `layer` (whose weight is `d.w` and bias `d.b`) under the `preset` recipe, checks that
/// its output, input gradient and weight gradient are the [`reference`]'s for `formats`, bit for
/// bit, and returns the precision (for its counts).
fn reads_what_te_reads(
    layer: &mut dyn Layer<f32>,
    d: &Data,
    preset: &str,
    formats: (&str, &str, &str),
) -> Precision {
    let want = reference(&d.x, &d.w, &d.b, &d.dy, formats);
    let (y, dx, p) = run_layer(layer, d, &Recipe::preset(preset).unwrap());
    assert_eq!(y, want.y, "forward");
    assert_eq!(dx, want.dx, "input gradient");
    assert_eq!(layer.params()[0].grad, want.dw, "weight gradient");
    p
}

/// The values the operand casts stored: (inputs, weights, output gradients).
fn stored(p: &Precision) -> (usize, usize, usize) {
    let counts = p.class_counts();
    let of = |c: Class| counts.get(&c).map_or(0, |s| s.stored as usize);
    (
        of(Class::GemmInput),
        of(Class::GemmWeight),
        of(Class::GemmGradOutput),
    )
}

/// The block formats of mxfp8's operands: (input, weight, output gradient).
const MXFP8: (&str, &str, &str) = ("mxfp8-e4m3", "mxfp8-e4m3", "mxfp8-e5m2");

fn linear(d: &Data) -> Linear<f32> {
    let mut layer = Linear::new(INPUTS, OUTPUTS, 1.0, 0, &mut Rng::new(1));
    layer.weight.weight = d.w.clone();
    layer.bias.weight = d.b.clone();
    layer
}

/// nvfp4: x and W in blocks of 16 along each product's sum (with their tensor scales), the
/// output gradient cast once to bf16 for both backward products.
#[test]
fn a_linear_layer_under_nvfp4_reads_what_te_reads() {
    let d = data();
    assert_ne!(rows(&d.w, "nvfp4"), cols(&d.w, "nvfp4"));
    assert_ne!(rows(&d.dy, "bf16"), d.dy);
    let mut layer = linear(&d);
    let p = reads_what_te_reads(&mut layer, &d, "nvfp4", ("nvfp4", "nvfp4", "bf16"));
    assert_eq!(
        stored(&p),
        (2 * BATCH * INPUTS, 2 * OUTPUTS * INPUTS, BATCH * OUTPUTS)
    );
    assert!(p.casts_per_product(Class::GemmWeight));
    assert!(!p.casts_per_product(Class::GemmGradOutput));
    assert!(p.rounds(Class::GemmGradOutput));
}

#[test]
fn a_linear_layer_under_mxfp8_reads_what_te_reads() {
    let d = data();
    // The data tells the axes apart: W cast along its rows is not W cast down its columns,
    // and neither is dy (else a cast along the wrong axis, or one cast reused, would pass).
    assert_ne!(rows(&d.w, "mxfp8-e4m3"), cols(&d.w, "mxfp8-e4m3"));
    assert_ne!(rows(&d.dy, "mxfp8-e5m2"), cols(&d.dy, "mxfp8-e5m2"));
    assert_ne!(rows(&d.x, "mxfp8-e4m3"), cols(&d.x, "mxfp8-e4m3"));
    let mut layer = linear(&d);
    let p = reads_what_te_reads(&mut layer, &d, "mxfp8", MXFP8);
    // The bias gradient sums the uncast dy.
    assert_eq!(layer.bias.grad, d.dy.sum_axis(Axis(0)).insert_axis(Axis(0)));
    // Each cast is a store of its class: every operand twice a step.
    assert_eq!(
        stored(&p),
        (
            2 * BATCH * INPUTS,
            2 * OUTPUTS * INPUTS,
            2 * BATCH * OUTPUTS
        )
    );
    let counts = p.class_counts();
    // Values spread over 2^16 underflow inside E4M3 blocks (whose range below the block's
    // largest value is about 2^17 with subnormals); the counts say so.
    assert!(counts[&Class::GemmInput].subnormal > 0, "{counts:?}");
    // Only the operands are rounded.
    for class in Class::ALL {
        let operand = [Class::GemmInput, Class::GemmWeight, Class::GemmGradOutput];
        assert_eq!(p.rounds(class), operand.contains(&class), "{class:?}");
        assert_eq!(
            p.casts_per_product(class),
            operand.contains(&class),
            "{class:?}"
        );
    }
    // backward_params (a first layer: no input gradient) gives the same weight gradient.
    let mut first = linear(&d);
    let mut p = Precision::new(&Recipe::preset("mxfp8").unwrap(), 0);
    p.register("first");
    let _ = first.forward(d.x.clone(), &mut p);
    first.backward_params(d.dy.clone(), &mut p);
    assert_eq!(first.weight.grad, layer.weight.grad);
}

/// A 1x1 convolution on 1x1 images is a Linear layer whose batch is the pixels: the same
/// reference, so the im2col matrix and the kernels are cast along the same axes.
#[test]
fn a_convolution_under_mxfp8_reads_what_te_reads() {
    let d = data();
    let shape = ImageShape {
        channels: INPUTS,
        height: 1,
        width: 1,
    };
    let mut conv = Conv2d::new(shape, OUTPUTS, 1, 0, 1.0, 0, &mut Rng::new(2));
    conv.weight.weight = d.w.clone();
    conv.bias.weight = d.b.clone();
    let p = reads_what_te_reads(&mut conv, &d, "mxfp8", MXFP8);
    assert_eq!(
        stored(&p),
        (
            2 * BATCH * INPUTS,
            2 * OUTPUTS * INPUTS,
            2 * BATCH * OUTPUTS
        )
    );
}

/// The block casts an LSTM makes, in order: each step's two forward products cast the weight
/// and the operand along the inputs (axis 1); backward casts the gate gradient along the batch
/// for the weight gradients and along the gates for the input gradients, x_t and h_t along the
/// batch, and the weights down their columns (the gates).
#[test]
fn an_lstm_under_mxfp8_casts_each_operand_along_each_products_sum() {
    let (batch, inputs, hidden, steps) = (3, 2, 5, 2);
    let mut rng = Rng::new(7);
    let mut lstm = Lstm::<f32>::new(inputs, hidden, 1.0, 0, &mut rng);
    let mut p = Precision::new(&Recipe::preset("mxfp8").unwrap(), 0);
    let site = p.register("lstm");
    p.enter(site);
    let x = spread((batch, inputs * steps), &mut rng);
    let h = lstm.forward(x, &mut p);
    p.enter(site);
    let _ = lstm.backward(Array2::ones(h.dim()), &mut p);
    let g = 4 * hidden;
    let forward = [
        (Class::GemmWeight, "weight_ih", (g, inputs), 1),
        (Class::GemmInput, "input", (batch, inputs), 1),
        (Class::GemmWeight, "weight_hh", (g, hidden), 1),
        (Class::GemmInput, "hidden", (batch, hidden), 1),
    ];
    let backward = [
        (Class::GemmGradOutput, "grad_output", (batch, g), 0),
        (Class::GemmGradOutput, "grad_output", (batch, g), 1),
        (Class::GemmInput, "input", (batch, inputs), 0),
        (Class::GemmInput, "hidden", (batch, hidden), 0),
        (Class::GemmWeight, "weight_ih", (g, inputs), 0),
        (Class::GemmWeight, "weight_hh", (g, hidden), 0),
    ];
    let mut want = Vec::new();
    for _ in 0..steps {
        want.extend(forward);
    }
    for _ in 0..steps {
        want.extend(backward);
    }
    assert_eq!(p.block_casts, want);
}

/// One LSTM step (from zero state) under mxfp8: its input and hidden-state gradients and its
/// input weights' gradient against the reference, from the gate gradient it stored (taken from
/// the gradient taps): dz along the gates and the weights down their columns for the input
/// gradients, dz and x along the batch for the weight gradient.
#[test]
fn an_lstm_step_under_mxfp8_reads_what_te_reads() {
    let (batch, inputs, hidden) = (35, 40, 9);
    let g = 4 * hidden;
    let mut rng = Rng::new(17);
    let mut lstm = Lstm::<f32>::new(inputs, hidden, 1.0, 0, &mut rng);
    lstm.wx.weight = spread((g, inputs), &mut rng);
    lstm.wh.weight = spread((g, hidden), &mut rng);
    let x = spread((batch, inputs), &mut rng);
    let dy = spread((batch, hidden), &mut rng);
    let mut p = Precision::new(&Recipe::preset("mxfp8").unwrap(), 0);
    let site = p.register("lstm");
    p.set_taps(true);
    p.enter(site);
    let _ = lstm.forward(x.clone(), &mut p);
    p.enter(site);
    let dx = lstm.backward(dy, &mut p);
    let taps = p.take_taps();
    let grads = &taps[&(site, Class::ActivationGrad)];
    // Stored in order: the gate gradient, the input gradient, the hidden-state gradient.
    assert_eq!(grads.len(), batch * (g + inputs + hidden));
    let dz = Array2::from_shape_vec((batch, g), grads[..batch * g].to_vec()).unwrap();
    let dh =
        Array2::from_shape_vec((batch, hidden), grads[batch * (g + inputs)..].to_vec()).unwrap();
    let (fw, fg) = ("mxfp8-e4m3", "mxfp8-e5m2");
    assert_ne!(rows(&dz, fg), cols(&dz, fg));
    assert_eq!(
        dx,
        gemm(rows(&dz, fg).view(), cols(&lstm.wx.weight, fw).view())
    );
    assert_eq!(
        dh,
        gemm(rows(&dz, fg).view(), cols(&lstm.wh.weight, fw).view())
    );
    assert_eq!(lstm.wx.grad, gemm(cols(&dz, fg).t(), cols(&x, fw).view()));
}

/// The same Linear under fp8-hybrid makes no block cast and casts each operand once for both
/// of its products (the weight and input in forward, the output gradient in backward), as
/// before block formats.
#[test]
fn per_tensor_casts_are_made_once() {
    let d = data();
    let mut layer = linear(&d);
    let (_, _, p) = run_layer(&mut layer, &d, &Recipe::preset("fp8-hybrid").unwrap());
    assert!(p.block_casts.is_empty());
    assert_eq!(
        stored(&p),
        (BATCH * INPUTS, OUTPUTS * INPUTS, BATCH * OUTPUTS)
    );
    for class in Class::ALL {
        assert!(!p.casts_per_product(class), "{class:?}");
    }
}

/// A block holding an inf or a NaN becomes NaN throughout; the site is marked non-finite and
/// the values that were so before the cast are counted. Evaluation passes count nothing.
#[test]
fn a_nonfinite_operand_is_found_and_counted() {
    let mut p = Precision::new(&Recipe::preset("mxfp8").unwrap(), 0);
    let l = p.register("l");
    p.enter(l);
    let mut x = Array2::from_elem((2, 40), 1.0f32);
    x[[0, 3]] = f32::INFINITY;
    x[[1, 35]] = f32::NAN;
    let cast = p
        .operand(Class::GemmInput, "input", x.view(), Axis(1))
        .unwrap();
    assert!(cast.row(0).iter().take(32).all(|v| v.is_nan()));
    assert!(cast.row(0).iter().skip(32).all(|&v| v == 1.0));
    assert!(cast.row(1).iter().take(32).all(|&v| v == 1.0));
    assert!(cast.row(1).iter().skip(32).all(|v| v.is_nan()));
    assert_eq!(p.class_counts()[&Class::GemmInput].nonfinite, 2);
    assert!(p.stored_nonfinite(l, Class::GemmInput));
    assert_eq!(
        p.first_nonfinite(),
        Some(Site {
            layer: "l".into(),
            tensor: Class::GemmInput,
            op: None,
        })
    );
    p.begin_step();
    p.set_recording(false);
    let _ = p.operand(Class::GemmInput, "input", x.view(), Axis(0));
    assert!(p.class_counts().is_empty());
    assert_eq!(p.first_nonfinite(), None);
}

/// The f64 path (gradient checks, reference runs) casts as the f32 path does, values that f32
/// holds exactly giving the same values, along each axis.
#[test]
fn the_f64_path_casts_as_the_f32_path() {
    let d = data();
    let mut p = Precision::new(&Recipe::preset("mxfp8").unwrap(), 0);
    p.register("l");
    for axis in [Axis(0), Axis(1)] {
        for class in [Class::GemmInput, Class::GemmGradOutput] {
            let narrow = p.operand(class, "x", d.x.view(), axis).unwrap();
            let wide = p
                .operand(class, "x", d.x.mapv(f64::from).view(), axis)
                .unwrap();
            assert_eq!(wide, narrow.mapv(f64::from), "{class:?} {axis:?}");
        }
    }
}
