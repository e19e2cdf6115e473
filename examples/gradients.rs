//! Writes a deterministic `.safetensors` file of synthetic "gradients": several f32 tensors whose
//! magnitudes are log-normal around different medians (as the gradients of different layers
//! are), some with exact zeros, one with rare large outliers.
//!
//! ```text
//! cargo run --release --example gradients -- OUT.safetensors [TOTAL_VALUES]
//! ```
//! `TOTAL_VALUES` (default 2^22) is split over the tensors; 2^28 gives a 1 GiB file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixprec::io::{TensorData, write_safetensors};

/// The library's SplitMix64 (seeded, so the file is the same on every machine), with this file's
/// own open-interval uniform and Box-Muller, which the files it has always written depend on.
struct Rng(mixprec::train::Rng);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// A tensor: name, share of the values, median |x|, log-normal sigma (natural log), share of
/// exact zeros, share of outliers (1000x the median).
const TENSORS: [(&str, f64, f64, f64, f64, f64); 6] = [
    ("embed.weight.grad", 0.30, 2e-7, 1.6, 0.20, 0.0),
    ("layers.0.attn.qkv.grad", 0.20, 3e-5, 1.2, 0.0, 0.0),
    ("layers.0.mlp.fc1.grad", 0.20, 1e-4, 1.3, 0.0, 0.0),
    ("layers.0.mlp.fc2.grad", 0.20, 2e-5, 1.5, 0.0, 0.0),
    ("norm.weight.grad", 0.05, 1e-3, 1.0, 0.0, 1e-4),
    ("head.bias.grad", 0.05, 5e-3, 0.8, 0.0, 0.0),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first().map(PathBuf::from) else {
        eprintln!("usage: gradients OUT.safetensors [TOTAL_VALUES]");
        return ExitCode::from(2);
    };
    let total: usize = match args.get(1).map(|s| s.parse()) {
        None => 1 << 22,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("gradients: TOTAL_VALUES must be a whole number");
            return ExitCode::from(2);
        }
    };
    match write(&out, total) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gradients: {e}");
            ExitCode::from(2)
        }
    }
}

/// Writes the file of `total` values to `out` (`tests/book.rs` writes the book's example with it).
pub fn write(out: &Path, total: usize) -> mixprec::Result<()> {
    let mut rng = Rng(mixprec::train::Rng::new(2017));
    let data: Vec<(String, Vec<usize>, Vec<f32>)> = TENSORS
        .iter()
        .map(|&(name, share, median, sigma, zeros, outliers)| {
            let n = ((total as f64 * share) as usize).max(1);
            let values = (0..n)
                .map(|_| {
                    let u = rng.uniform();
                    if u < zeros {
                        return 0.0;
                    }
                    let big = if u > 1.0 - outliers { 1000.0 } else { 1.0 };
                    let m = median * big * (sigma * rng.normal()).exp();
                    let sign = if rng.next_u64() & 1 == 1 { -1.0 } else { 1.0 };
                    (sign * m) as f32
                })
                .collect();
            // Two-dimensional where the name says weight, like a real layer's gradient.
            let shape = if name.contains("weight") && n.is_multiple_of(64) {
                vec![n / 64, 64]
            } else {
                vec![n]
            };
            (name.to_string(), shape, values)
        })
        .collect();
    let tensors: Vec<(&str, &[usize], TensorData<'_>)> = data
        .iter()
        .map(|(name, shape, values)| (name.as_str(), shape.as_slice(), TensorData::F32(values)))
        .collect();
    write_safetensors(out, &tensors)
}
