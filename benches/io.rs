//! Reading tensors with `mixprec::io::scan` against the baseline of reading the same file with
//! plain `read` calls into a 4 MiB buffer and summing it as f32, in the same run. The file
//! (16M values) is written once to a temp dir and stays in the page cache, so this measures the
//! reader's overhead, not the disk.

use std::hint::black_box;
use std::io::Read;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mixprec::io::{CHUNK, TensorData, Values, scan, write_npy, write_safetensors};

const N: usize = 16 << 20;

/// A sum in 8 independent lanes, which the compiler vectorises: a consumer cheap enough that
/// the reading dominates. Both the baseline and `scan` feed it.
fn lanes_sum(xs: &[f32]) -> f64 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    f64::from(acc.iter().sum::<f32>() + tail)
}

/// The sum of everything `scan` visits, so that no value is skipped unread.
fn scan_sum(path: &Path) -> f64 {
    let mut sum = 0.0f64;
    scan(path, &|_| true, &mut |_, values| {
        sum += match values {
            Values::F32(xs) => lanes_sum(xs),
            Values::F64(xs) => xs.iter().sum::<f64>(),
        }
    })
    .unwrap();
    sum
}

/// The baseline: the whole file through `read` into one reused f32 buffer, summed.
fn read_sum(path: &Path) -> f64 {
    let mut file = std::fs::File::open(path).unwrap();
    let mut buf = vec![0.0f32; CHUNK];
    let mut sum = 0.0f64;
    loop {
        // Reading straight into the f32 buffer, as the fastest plain reader would. The header
        // (a multiple of 8 bytes) keeps the values aligned with the buffer.
        // SAFETY: the buffer holds CHUNK f32s = CHUNK * 4 initialised bytes, and any bytes
        // written into it form valid f32s.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), CHUNK * 4) };
        let n = file.read(bytes).unwrap();
        if n == 0 {
            return sum;
        }
        sum += lanes_sum(&buf[..n / 4]);
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let f32s: Vec<f32> = (0..N).map(|i| (i % 4096) as f32 * 1e-3).collect();
    let f16s: Vec<half::f16> = f32s.iter().map(|&x| half::f16::from_f32(x)).collect();
    let st32 = dir.path().join("g32.safetensors");
    let st16 = dir.path().join("g16.safetensors");
    let npy = dir.path().join("g32.npy");
    let npz = dir.path().join("g32.npz");
    write_safetensors(&st32, &[("g", &[N], TensorData::F32(&f32s))]).unwrap();
    write_safetensors(&st16, &[("g", &[N], TensorData::F16(&f16s))]).unwrap();
    write_npy(&npy, &[N], TensorData::F32(&f32s)).unwrap();
    {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&npz).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        zip.start_file("g.npy", options).unwrap();
        std::io::copy(&mut std::fs::File::open(&npy).unwrap(), &mut zip).unwrap();
        zip.finish().unwrap();
    }

    let mut group = c.benchmark_group("read_16M");
    group.throughput(Throughput::Elements(N as u64));
    group.sample_size(20);
    group.bench_function("baseline_read_f32", |b| {
        b.iter(|| read_sum(black_box(&st32)))
    });
    group.bench_function("scan_safetensors_f32", |b| {
        b.iter(|| scan_sum(black_box(&st32)))
    });
    group.bench_function("scan_npy_f32", |b| b.iter(|| scan_sum(black_box(&npy))));
    group.bench_function("scan_npz_stored_f32", |b| {
        b.iter(|| scan_sum(black_box(&npz)))
    });
    group.bench_function("scan_safetensors_f16", |b| {
        b.iter(|| scan_sum(black_box(&st16)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // Criterion's plots need system fonts, which the build machines lack (it panics without them).
    config = Criterion::default().without_plots();
    targets = bench
}
criterion_main!(benches);
