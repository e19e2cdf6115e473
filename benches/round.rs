//! Rounding 16M f32 values in place, beside a plain copy of the same buffer measured in the same
//! run (the memory-bandwidth baseline), one thread and all threads.
//!
//! Rounding is idempotent and the kernel branch-free, so rounding the same buffer again and again
//! does the same work each time. Directed modes (toward-zero, up, down) share one kernel: only
//! toward-zero is measured. `/into` rows round out of place, from the source into the other
//! buffer (what `mixprec.quantize` does in Python), the traffic of the copy exactly.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use mixprec::format::{
    BlockRounder, FloatFormat, KernelPath, MxRounder, RoundOptions, Rounder, Rounding,
};
use rayon::prelude::*;

const N: usize = 1 << 24;

/// Gradient-like values: log-uniform magnitudes over 2^-30..2^10, both signs.
fn data() -> Vec<f32> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..N)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let e = (s >> 40) as f32 / (1u64 << 24) as f32 * 40.0 - 30.0;
            let v = e.exp2();
            if s & 1 == 0 { v } else { -v }
        })
        .collect()
}

/// Standard normal values (Box-Muller), the other data set the peers are measured on.
fn normal() -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..N)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let src = data();
    let mut buf = src.clone();
    let pool1 = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let mut g = c.benchmark_group("round_16M_f32");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    g.bench_function("copy/1-thread", |b| b.iter(|| buf.copy_from_slice(&src)));
    g.bench_function("copy/all-threads", |b| {
        b.iter(|| {
            buf.par_chunks_mut(1 << 18)
                .zip(src.par_chunks(1 << 18))
                .for_each(|(d, s)| d.copy_from_slice(s))
        })
    });
    let formats = ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "e6m9"];
    let modes = [
        Rounding::NearestEven,
        Rounding::TowardZero,
        Rounding::Stochastic,
    ];
    for name in formats {
        let f: FloatFormat = name.parse().unwrap();
        for rounding in modes {
            let r = Rounder::new(
                f,
                RoundOptions {
                    rounding,
                    ..RoundOptions::default()
                },
            );
            buf.copy_from_slice(&src);
            let id = format!("{name}/{rounding}");
            g.bench_function(BenchmarkId::new("1-thread", &id), |b| {
                b.iter(|| pool1.install(|| r.round_f32_slice(&mut buf)))
            });
            // The AVX2 build where the CPU has AVX-512 too (what an AVX2-only CPU runs), for the
            // formats whose gradient-like data takes the general loop.
            if rounding != Rounding::TowardZero && ["fp16", "fp8-e4m3", "fp8-e5m2"].contains(&name)
            {
                buf.copy_from_slice(&src);
                g.bench_function(BenchmarkId::new("avx2-1-thread", &id), |b| {
                    b.iter(|| {
                        pool1.install(|| r.round_f32_slice_via(KernelPath::Avx2, &mut buf, 0))
                    })
                });
            }
            // Out of place, from the source into the other buffer: the same traffic as the copy.
            if rounding == Rounding::NearestEven {
                g.bench_function(BenchmarkId::new("1-thread", format!("{id}/into")), |b| {
                    b.iter(|| pool1.install(|| r.round_f32_into(&src, &mut buf, 0)))
                });
            }
            if rounding != Rounding::TowardZero {
                buf.copy_from_slice(&src);
                g.bench_function(BenchmarkId::new("all-threads", &id), |b| {
                    b.iter(|| r.par_round_f32_slice(&mut buf))
                });
            }
        }
    }
    // The kernel is branch-free: the data's distribution should not matter.
    let gauss = normal();
    for name in ["fp16", "bf16"] {
        let r = Rounder::new(name.parse().unwrap(), RoundOptions::default());
        buf.copy_from_slice(&gauss);
        let id = format!("{name}/nearest-even/normal-data");
        g.bench_function(BenchmarkId::new("1-thread", &id), |b| {
            b.iter(|| pool1.install(|| r.round_f32_slice(&mut buf)))
        });
    }
    g.finish();
    bench_mx(c, &src, &mut buf, &pool1);
}

/// MX block scaling (issue 13 goal: MXFP8 within 2x of a plain copy, one thread), beside its
/// own copy baseline and the per-tensor element rounding, in one group so that `cargo bench
/// --bench round -- mx_` measures them side by side.
fn bench_mx(c: &mut Criterion, src: &[f32], buf: &mut [f32], pool1: &rayon::ThreadPool) {
    let mut g = c.benchmark_group("mx_16M_f32");
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);
    g.bench_function("copy/1-thread", |b| b.iter(|| buf.copy_from_slice(src)));
    let element = Rounder::new("fp8-e4m3".parse().unwrap(), RoundOptions::default());
    buf.copy_from_slice(src);
    g.bench_function("fp8-e4m3/nearest-even/1-thread", |b| {
        b.iter(|| pool1.install(|| element.round_f32_slice(buf)))
    });
    for name in ["mxfp8-e4m3", "mxfp8-e5m2", "mxfp4"] {
        for rounding in [Rounding::NearestEven, Rounding::Stochastic] {
            let r = MxRounder::new(
                name.parse().unwrap(),
                RoundOptions {
                    rounding,
                    ..RoundOptions::default()
                },
            );
            // Block rounding is idempotent too: rounded values give back the same scales.
            buf.copy_from_slice(src);
            g.bench_function(format!("{name}/{rounding}/1-thread"), |b| {
                b.iter(|| pool1.install(|| r.round_f32_slice(buf)))
            });
        }
    }
    // NVFP4 (its tensor scale over the whole buffer) and DeepSeek-V3's activation tiles, as one
    // row of 16M values.
    for name in ["nvfp4", "fp8-e4m3@1x128"] {
        let r = BlockRounder::new(name.parse().unwrap(), RoundOptions::default());
        let cols = buf.len();
        buf.copy_from_slice(src);
        g.bench_function(format!("{name}/nearest-even/1-thread"), |b| {
            b.iter(|| pool1.install(|| r.round_matrix_at(buf, cols, 0)))
        });
    }
    g.finish();
    bench_block_sizes(c, src, buf, pool1);
}

/// Block formats at the sizes a Python `Simulate` of a small transformer rounds per call (64K
/// and 1M values: 512 x 128 and 8192 x 128 matrices), as the binding calls them
/// (`par_round_matrix_at`, rows of 128), on one thread, beside a plain copy of the same buffer
/// in the same run. Each size is its own group, so that `-- blocks_64K` measures one.
fn bench_block_sizes(c: &mut Criterion, src: &[f32], buf: &mut [f32], pool1: &rayon::ThreadPool) {
    const COLS: usize = 128;
    for (label, n) in [("64K", 1 << 16), ("1M", 1 << 20)] {
        let (src, buf) = (&src[..n], &mut buf[..n]);
        let mut g = c.benchmark_group(format!("blocks_{label}_f32"));
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function("copy/1-thread", |b| b.iter(|| buf.copy_from_slice(src)));
        // The element kernels alone, per tensor: what the block formats' own work adds to.
        for name in ["fp8-e4m3", "fp4-e2m1"] {
            let r = Rounder::new(name.parse().unwrap(), RoundOptions::default());
            buf.copy_from_slice(src);
            g.bench_function(format!("{name}/nearest-even/1-thread"), |b| {
                b.iter(|| pool1.install(|| r.round_f32_slice(buf)))
            });
        }
        for name in ["mxfp8-e4m3", "nvfp4"] {
            for rounding in [Rounding::NearestEven, Rounding::Stochastic] {
                let options = RoundOptions {
                    rounding,
                    ..RoundOptions::default()
                };
                let r = BlockRounder::new(name.parse().unwrap(), options);
                buf.copy_from_slice(src);
                g.bench_function(format!("{name}/{rounding}/1-thread"), |b| {
                    b.iter(|| pool1.install(|| r.par_round_matrix_at(buf, COLS, 0)))
                });
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
