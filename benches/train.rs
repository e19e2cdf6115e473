//! One training step per recipe, with and without capture every step, for the digits MLP
//! (64-256-256-10, batch 128), the digits CNN (batch 128) and the peer-anchor MLP
//! (784-1024-1024-10, batch 256, random data, ReLU, SGD, cross-entropy).
//!
//! Baseline measured in the same run: the f32 GEMMs of the MLP's forward and backward pass (the
//! training core's `gemm`), the floor any implementation of the step pays. Threads: rayon's
//! (`RAYON_NUM_THREADS`), for the GEMMs and the capture histograms alike.
//!
//! `cargo bench --bench train`; results and ratios in `reports/perf/train.md`.
//!
//! `cargo bench --bench train -- --pairs [N]` measures ratios instead, on the anchor: each of N
//! pairs (default 30, after 3 to warm up) runs one step of each side back to back, and a pair's
//! ratio is formed from its own two steps, so a slow drift in the machine's speed (a shared
//! host) moves both sides alike, where criterion's medians of the two sides are taken half a
//! minute apart. Prints one tab-separated line per comparison: its name, the median of the
//! pairs' ratios, and the median milliseconds of each side. `benches/compare.sh` reads them.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use mixprec::recipe::Recipe;
use mixprec::train::capture::Observer;
use mixprec::train::data::digits;
use mixprec::train::loss::{Loss, Targets};
use mixprec::train::model::{CnnConfig, MlpConfig};
use mixprec::train::optim::OptimizerConfig;
use mixprec::train::precision::gemm;
use mixprec::train::step::Trainer;
use mixprec::train::{Precision, Real, Rng};
use ndarray::{Array2, s};

const RECIPES: [&str; 4] = ["fp32", "fp16-dynamic", "bf16-master", "fp8-hybrid"];

enum Net {
    Mlp(MlpConfig),
    Cnn(CnnConfig),
}

fn trainer(
    net: &Net,
    recipe: &str,
    inputs: usize,
    classes: usize,
    optimizer: OptimizerConfig,
) -> Trainer {
    let recipe = Recipe::preset(recipe).expect("preset");
    let mut p = Precision::new(&recipe, 0);
    let input = p.register("input");
    let mut rng = Rng::new(1);
    let model = match net {
        Net::Mlp(c) => c.build(inputs, classes, &mut p, &mut rng),
        Net::Cnn(c) => c
            .build(inputs, classes, &mut p, &mut rng)
            .expect("square input"),
    };
    let loss_scaling = recipe.loss_scaling;
    Trainer::new(
        model,
        p,
        input,
        &optimizer,
        Loss::CrossEntropy,
        loss_scaling,
    )
}

fn bench_steps(
    c: &mut Criterion,
    group: &str,
    net: &Net,
    x: &Array2<f32>,
    y: &[usize],
    classes: usize,
    optimizer: OptimizerConfig,
) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for recipe in RECIPES {
        // Capture never, every step, or every 10th step.
        for every in [0u64, 1, 10] {
            let mut t = trainer(net, recipe, x.ncols(), classes, optimizer);
            let name = match every {
                0 => recipe.to_string(),
                1 => format!("{recipe}+capture"),
                n => format!("{recipe}+capture/{n}"),
            };
            let mut step = 0u64;
            g.bench_function(name, |b| {
                b.iter(|| {
                    step += 1;
                    if every > 0 && step.is_multiple_of(every) {
                        t.precision.set_observer(Some(Observer::default()));
                    }
                    let r = t.step(x, Targets::Labels(y)).expect("labels fit");
                    black_box(t.precision.take_observer());
                    black_box(r)
                });
            });
        }
    }
    g.finish();
}

/// The GEMMs of one forward and backward pass through linear layers of `widths` (the first layer
/// computes no input gradient), with the training core's GEMM.
fn gemm_floor(c: &mut Criterion, group: &str, batch: usize, widths: &[usize]) {
    let mut rng = Rng::new(5);
    let mut random =
        |r: usize, c: usize| Array2::from_shape_simple_fn((r, c), || rng.normal() as f32);
    let layers: Vec<(Array2<f32>, Array2<f32>, Array2<f32>)> = widths
        .windows(2)
        .map(|w| (random(batch, w[0]), random(w[1], w[0]), random(batch, w[1])))
        .collect();
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("baseline: f32 GEMMs only", |b| {
        b.iter(|| {
            for (i, (x, w, dy)) in layers.iter().enumerate() {
                black_box(gemm(x.view(), w.t()));
                black_box(gemm(dy.t(), x.view()));
                // The first layer's input needs no gradient.
                if i > 0 {
                    black_box(gemm(dy.view(), w.view()));
                }
            }
        });
    });
    g.finish();
}

/// The per-step accounting of `metrics.jsonl` (counts per class, `grad_amax`), against the step
/// that pays it: the step as it is, and the accounting's own work measured alone on the same
/// sizes: the gradients' largest-finite-magnitude pass (every activation and weight gradient of
/// the step) and writing the step's record as a JSON line. The rounding's counts also replace
/// work: without overflow or non-finite inputs they prove a rounded store finite, so the
/// finiteness pass over every rounded store (which the loss scaler needs, accounting or not) is
/// skipped; that pass is timed alone on the step's rounded stores. Net cost = (alone - replaced)
/// / step.
fn accounting(
    c: &mut Criterion,
    group: &str,
    net: &Net,
    x: &Array2<f32>,
    y: &[usize],
    optimizer: OptimizerConfig,
) {
    let mut t = trainer(net, "fp16-dynamic", x.ncols(), 10, optimizer);
    let record = t.step(x, Targets::Labels(y)).expect("labels fit");
    // The gradients a step stores: every weight gradient, and the activation gradient of every
    // layer but the first (its input needs none), as the step stores them.
    let weight_grads: usize = t.model.params().iter().map(|q| q.grad.len()).sum();
    let mut widths: Vec<usize> = t
        .model
        .params()
        .iter()
        .filter(|q| q.name == "weight")
        .map(|q| q.grad.nrows())
        .collect();
    widths.pop();
    let activation_grads = x.nrows() * (2 * widths.iter().sum::<usize>() + 10);
    let grads: Vec<f32> = (0..weight_grads + activation_grads)
        .map(|i| (i % 97) as f32 * 1e-3)
        .collect();
    // The values of the step's rounded stores, from its own counts.
    let rounded: u64 = record
        .counts
        .iter()
        .filter(|&(&class, _)| t.precision.rounds(class))
        .map(|(_, c)| c.stored)
        .sum();
    let stores: Vec<f32> = (0..rounded).map(|i| (i % 89) as f32 * 1e-3).collect();
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    g.bench_function("fp16-dynamic step (with accounting)", |b| {
        b.iter(|| black_box(t.step(x, Targets::Labels(y)).expect("labels fit")));
    });
    let mut line = Vec::with_capacity(4096);
    g.bench_function("accounting alone (gradient amax pass + JSON line)", |b| {
        b.iter(|| {
            line.clear();
            serde_json::to_writer(&mut line, &record).expect("serialisable");
            black_box((f32::finite_amax(&grads), line.len()))
        });
    });
    g.bench_function("replaced (finiteness pass over the rounded stores)", |b| {
        b.iter(|| black_box(f32::all_finite(&stores)));
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let data = digits().expect("embedded digits");
    let x = data.train_x.slice(s![..128, ..]).to_owned();
    let y = &data.train_y[..128];
    let adam = OptimizerConfig::Adam {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    };
    accounting(
        c,
        "accounting/digits-mlp",
        &Net::Mlp(MlpConfig::default()),
        &x,
        y,
        adam,
    );
    gemm_floor(c, "digits-mlp", 128, &[64, 256, 256, 10]);
    bench_steps(
        c,
        "digits-mlp",
        &Net::Mlp(MlpConfig::default()),
        &x,
        y,
        10,
        adam,
    );
    bench_steps(
        c,
        "digits-cnn",
        &Net::Cnn(CnnConfig::default()),
        &x,
        y,
        10,
        adam,
    );

    let (big, big_x, big_y, sgd) = anchor();
    gemm_floor(c, "mlp-784-1024-1024-10", 256, &[784, 1024, 1024, 10]);
    accounting(
        c,
        "accounting/mlp-784-1024-1024-10",
        &big,
        &big_x,
        &big_y,
        sgd,
    );
    bench_steps(c, "mlp-784-1024-1024-10", &big, &big_x, &big_y, 10, sgd);
}

criterion_group! {
    name = train_benches;
    // No system fonts here: criterion's plots would fail to draw text.
    config = Criterion::default().without_plots();
    targets = benches
}

/// The peer anchor: MLP 784-1024-1024-10, a batch of 256 random inputs and labels, plain SGD.
fn anchor() -> (Net, Array2<f32>, Vec<usize>, OptimizerConfig) {
    let mut rng = Rng::new(9);
    let x = Array2::from_shape_simple_fn((256, 784), || rng.uniform() as f32);
    let y: Vec<usize> = (0..256).map(|_| rng.below(10)).collect();
    let net = Net::Mlp(MlpConfig {
        depth: 2,
        width: 1024,
        ..MlpConfig::default()
    });
    let sgd = OptimizerConfig::Sgd {
        lr: 0.01,
        momentum: 0.0,
    };
    (net, x, y, sgd)
}

/// The `--pairs` mode (see the module docs): each comparison as `(name, (recipe, capture),
/// (recipe, capture))`, the second side over the first.
fn pairs(n: usize) {
    let (net, x, y, sgd) = anchor();
    let comparisons = [
        (
            "fp16-dynamic/fp32",
            ("fp32", false),
            ("fp16-dynamic", false),
        ),
        ("fp32+capture/fp32", ("fp32", false), ("fp32", true)),
        (
            "fp16-dynamic+capture/fp16-dynamic",
            ("fp16-dynamic", false),
            ("fp16-dynamic", true),
        ),
    ];
    for (name, a, b) in comparisons {
        let mut sides =
            [a, b].map(|(recipe, capture)| (trainer(&net, recipe, 784, 10, sgd), capture));
        let mut ms = [Vec::new(), Vec::new()];
        for pair in 0..n + 3 {
            for ((t, capture), times) in sides.iter_mut().zip(&mut ms) {
                let start = Instant::now();
                if *capture {
                    t.precision.set_observer(Some(Observer::default()));
                }
                black_box(t.step(&x, Targets::Labels(&y)).expect("labels fit"));
                black_box(t.precision.take_observer());
                if pair >= 3 {
                    times.push(start.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
        let ratio = median(ms[1].iter().zip(&ms[0]).map(|(b, a)| b / a).collect());
        let [a_ms, b_ms] = ms.map(median);
        println!("{name}\t{ratio:.4}\t{a_ms:.3}\t{b_ms:.3}");
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--pairs") {
        let n = args.get(at + 1).and_then(|v| v.parse().ok()).unwrap_or(30);
        pairs(n.max(1));
        return;
    }
    train_benches();
    Criterion::default().configure_from_args().final_summary();
}
