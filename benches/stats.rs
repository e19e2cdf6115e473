//! Histogram and sweep over 16M f32 values, against a plain sum of the same buffer measured in
//! the same run.
//!
//! ```text
//! cargo bench --bench stats
//! ```
//! (Figures and the machine: `reports/perf/analyze.md`.)

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mixprec::format::FP16;
use mixprec::stats::{Histogram, SweepAccumulator, SweepPath};
use mixprec::train::Rng;

const N: usize = 1 << 24;

/// Log-normal magnitudes around 1e-4 with random signs and a few zeros (splitmix64, Box-Muller).
fn gradients() -> Vec<f32> {
    let mut rng = Rng::new(42);
    let mut next = move || rng.next_u64();
    (0..N)
        .map(|i| {
            if i % 101 == 0 {
                return 0.0;
            }
            let u = ((next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let v = ((next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            let m = (1e-4 * (2.0 * z).exp()) as f32;
            if next() & 1 == 1 { -m } else { m }
        })
        .collect()
}

/// The baseline a reader expects: a plain sequential sum.
fn plain_sum(xs: &[f32]) -> f32 {
    xs.iter().sum()
}

/// A sum the compiler vectorises (eight independent f64 lanes): the speed of reading memory.
fn lane_sum(xs: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let mut blocks = xs.chunks_exact(8);
    for b in &mut blocks {
        for (a, &x) in acc.iter_mut().zip(b) {
            *a += f64::from(x);
        }
    }
    acc.iter().sum::<f64>()
        + blocks
            .remainder()
            .iter()
            .map(|&x| f64::from(x))
            .sum::<f64>()
}

fn bench(c: &mut Criterion) {
    // criterion's plots use plotters' "sans-serif", which only an embedded font provides here.
    mixprec::report::register_font();
    let xs = gradients();
    let mut g = c.benchmark_group("16M f32");
    g.throughput(Throughput::Bytes((N * 4) as u64));
    g.sample_size(10);
    g.bench_function("baseline: plain sum", |b| {
        b.iter(|| plain_sum(black_box(&xs)))
    });
    g.bench_function("baseline: 8-lane f64 sum", |b| {
        b.iter(|| lane_sum(black_box(&xs)))
    });
    for s in [0, 2] {
        g.bench_function(format!("histogram s={s}, 1 thread"), |b| {
            b.iter(|| {
                let mut h = Histogram::new(s);
                h.add_f32(black_box(&xs));
                h
            })
        });
    }
    // The capture's update-to-weight ratios: |w| / |u| formed in f64 and binned (16M pairs).
    let weights: Vec<f32> = xs.iter().rev().map(|&x| x * 1e4).collect();
    g.bench_function("ratio histogram s=0, 1 thread", |b| {
        b.iter(|| {
            let mut h = Histogram::new(0);
            h.add_ratios_f32(black_box(&weights), black_box(&xs));
            h
        })
    });
    g.bench_function("histogram s=0, rayon", |b| {
        b.iter(|| Histogram::from_f32(0, black_box(&xs)))
    });
    g.bench_function("sweep fp16 pass, 1 thread", |b| {
        b.iter(|| {
            let mut acc = SweepAccumulator::new(FP16);
            acc.add_f32(black_box(&xs));
            acc
        })
    });
    // The loop before issue 11 (f64 terms, AVX2) beside today's, in the same run.
    g.bench_function("sweep fp16 pass, f64 terms (AVX2), 1 thread", |b| {
        b.iter(|| {
            let mut acc = SweepAccumulator::new(FP16);
            acc.add_f32_via(SweepPath::F64Avx2, black_box(&xs));
            acc
        })
    });
    g.bench_function("sweep fp16 pass, rayon", |b| {
        b.iter(|| {
            let mut acc = SweepAccumulator::new(FP16);
            acc.par_add_f32(black_box(&xs));
            acc
        })
    });
    for (name, range) in [("1 scale", 0..=0), ("40 scales", -4..=35)] {
        g.bench_function(format!("sweep fp16 pass + {name}, 1 thread"), |b| {
            b.iter(|| {
                let mut acc = SweepAccumulator::new(FP16);
                acc.add_f32(black_box(&xs));
                acc.sweep(range.clone())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
