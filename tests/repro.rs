//! Runs reproduce bit for bit on every machine: short runs of each model family (and the paths
//! that could differ between CPUs: k-blocked GEMMs with a one-term last block, matrix-vector
//! products, tanh, sigmoid, exp and log, the SIMD rounding and histogram kernels, stochastic
//! rounding) pinned by a hash of their `metrics.jsonl` and `captures.jsonl`. The hashes were
//! computed on an AMD EPYC (Zen 3, AVX2 and FMA, no AVX-512); every machine that runs the tests
//! checks them. A change that moves any bit of a training run fails here: if the change is
//! meant, the figures of `analyses/` move too (see the book's "Reproducibility",
//! docs/src/run-directory.md). Issue 29 re-pinned the three runs with momentum or Adam:
//! `updates_lost` no longer counts weights without a gradient; every other byte of their files was checked unchanged (the demo's runs,
//! metrics.jsonl but `updates_lost` and captures.jsonl, against the binary before the change).

use std::path::Path;

mod common;
use common::{stderr, with_config};

/// Name, config, extra flags, FNV-1a 64 of `metrics.jsonl` followed by `captures.jsonl`.
const PINNED: &[(&str, &str, &[&str], &str)] = &[
    (
        "mlp-gelu-fp32",
        // Hidden layers of 513: the products over k = 513 are a k-block of 512 and one term.
        r#"{"model": "mlp", "mlp": {"depth": 2, "width": 513, "activation": "gelu"}, "recipe": "fp32", "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9}}"#,
        &[],
        "3d4c77c57f9e04d5",
    ),
    (
        "mlp-tanh-fp16-stochastic",
        r#"{"model": "mlp", "mlp": {"depth": 1, "width": 600, "activation": "tanh"}, "recipe": "fp16-dynamic"}"#,
        &["--rounding", "stochastic"],
        "c7cc761457a44616",
    ),
    (
        "cnn-fp8-hybrid",
        r#"{"model": "cnn", "recipe": "fp8-hybrid"}"#,
        &[],
        "64beb3b10b71b287",
    ),
    (
        "lstm-bf16-master",
        r#"{"model": "lstm", "dataset": "recall", "recipe": "bf16-master"}"#,
        &[],
        "e67d2c7d74997842",
    ),
    (
        "gan-fp32",
        r#"{"model": "gan", "dataset": "ring", "recipe": "fp32", "optimizer": {"kind": "adam", "lr": 0.001, "beta1": 0.5}}"#,
        &[],
        "e657b422fd9075f4",
    ),
];

/// FNV-1a, 64 bits: a hash whose value is fixed by its definition (std's hasher is not stable
/// across Rust versions).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn run_hash(name: &str, config: &str, flags: &[&str], threads: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "mixprec-repro-{}-{name}-{threads}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join("run");
    let defaults = [
        "--steps",
        "30",
        "--batch",
        "32",
        "--capture-every",
        "10",
        "--seed",
        "7",
    ];
    let r = with_config(
        "train",
        &cfg,
        &[&defaults[..], flags].concat(),
        &out,
        threads,
    );
    assert!(r.status.success(), "{name}: {}", stderr(&r));
    let read = |file: &str| std::fs::read(Path::new(&out).join(file)).unwrap();
    let hash = fnv1a(
        read("metrics.jsonl")
            .into_iter()
            .chain(read("captures.jsonl")),
    );
    std::fs::remove_dir_all(&dir).unwrap();
    format!("{hash:016x}")
}

#[test]
fn short_runs_of_every_family_give_the_pinned_bits() {
    let mut wrong = Vec::new();
    for &(name, config, flags, want) in PINNED {
        let got = run_hash(name, config, flags, "2");
        if got != want {
            wrong.push(format!("{name}: {got} (pinned {want})"));
        }
    }
    assert!(
        wrong.is_empty(),
        "runs differ from the pinned bits (CPU: {}):\n{}",
        cpu(),
        wrong.join("\n")
    );
}

#[test]
fn one_thread_gives_the_pinned_bits_too() {
    let (name, config, flags, want) = PINNED[0];
    assert_eq!(run_hash(name, config, flags, "1"), want, "{name}, 1 thread");
}

/// The CPU's model name, for the failure message (Linux; empty elsewhere).
fn cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string()
}

#[test]
fn the_hash_is_fnv1a() {
    // The published test vectors of FNV-1a 64.
    assert_eq!(fnv1a(*b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(*b"foobar"), 0x8594_4171_f739_67e8);
}
