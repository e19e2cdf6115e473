use super::kernel::Terms;
use super::*;
use crate::format::{BF16, Event, FP8_E4M3, FP8_E5M2, FP16, FP32, RoundOptions, Rounder, TF32};
use crate::stats::Histogram;
use crate::stats::testdata::{Rng, awkward_f32};

/// The slow reference: rounds every value at every scale with the exact rounder.
fn reference(format: FloatFormat, xs: &[f64], ks: std::ops::RangeInclusive<i32>) -> Sweep {
    let r = Rounder::new(format, RoundOptions::default());
    let finite: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    let norm2: f64 = finite.iter().map(|x| x * x).sum();
    let rows = ks
        .map(|k| {
            let s = 2f64.powi(k);
            let (mut n, mut lost, mut err) = ([0u64; 4], 0.0, 0.0);
            for &x in finite.iter().filter(|x| **x != 0.0) {
                let (q, event) = r.round_at(x * s, 0);
                let class = match event {
                    Event::Underflow => 0,
                    Event::Subnormal => 1,
                    Event::Normal => 2,
                    Event::Overflow => 3,
                    Event::Nan | Event::Infinite => unreachable!("finite input"),
                };
                n[class] += 1;
                if class == 0 {
                    lost += x * x;
                }
                if class != 3 {
                    err += (q / s - x) * (q / s - x);
                }
            }
            let ratio = |v: f64| if norm2 > 0.0 { v / norm2 } else { 0.0 };
            SweepRow {
                relative_error: (n[3] == 0).then(|| ratio(err).sqrt()),
                relative_error_finite: Some(ratio(err).sqrt()),
                ..SweepRow::of_counts(k, n, ratio(lost))
            }
        })
        .collect();
    let amax = finite.iter().fold(0f64, |m, x| m.max(x.abs()));
    Sweep {
        format,
        count: xs.len() as u64,
        zeros: finite.iter().filter(|x| **x == 0.0).count() as u64,
        nonfinite: (xs.len() - finite.len()) as u64,
        amax,
        rows,
    }
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) || (a - b).abs() < 1e-300
}

fn check(fast: &Sweep, slow: &Sweep) {
    assert_eq!(
        (fast.count, fast.zeros, fast.nonfinite),
        (slow.count, slow.zeros, slow.nonfinite)
    );
    assert_eq!(fast.amax, slow.amax);
    for (f, s) in fast.rows.iter().zip(&slow.rows) {
        let counts = |r: &SweepRow| (r.log2_scale, r.underflow, r.subnormal, r.normal, r.overflow);
        assert_eq!(counts(f), counts(s), "{}", fast.format);
        assert_eq!(
            f.underflow + f.subnormal + f.normal + f.overflow,
            fast.finite_nonzero()
        );
        assert!(
            close(f.energy_lost, s.energy_lost),
            "k={} {} {}",
            f.log2_scale,
            f.energy_lost,
            s.energy_lost
        );
        assert_eq!(f.relative_error.is_some(), s.relative_error.is_some());
        let (fe, se) = (
            f.relative_error_finite.unwrap(),
            s.relative_error_finite.unwrap(),
        );
        assert!(
            close(fe, se),
            "{} k={} {fe} {se}",
            fast.format,
            f.log2_scale
        );
    }
    assert_eq!(fast.rows.len(), slow.rows.len());
}

/// Values at and around every threshold of `format` at scale 1 (each multiplied by 2^-k0 to
/// land on thresholds of other scales too).
fn adversarial(format: FloatFormat) -> Vec<f64> {
    let p = format.man_bits() as i32;
    let min_sub = format.min_subnormal();
    let min_norm = format.min_normal();
    let max = format.max();
    let ulp_max = 2f64.powi(format.emax() - p);
    let mut v = vec![
        min_sub / 2.0,
        min_sub,
        min_sub * 1.5,
        min_sub * 2.5, // tie, to even (2)
        min_sub * 3.5, // tie, to even (4)
        min_norm,
        min_norm - min_sub / 2.0, // tie between the top subnormal and min normal
        min_norm - min_sub,
        max,
        max + ulp_max / 2.0, // tie above max: overflows in IEEE formats, not in e4m3
        max + ulp_max / 4.0,
        max + ulp_max,
        2.0 * max,
        464.0,
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1.0,
        -1.0 - 2f64.powi(-p - 1), // tie in the normal range
    ];
    let mut more = Vec::new();
    for &x in &v {
        if x.is_finite() && x != 0.0 {
            for d in [-1e-7, 1e-7] {
                more.push(x * (1.0 + d));
            }
            more.push(-x);
            for k in [-3, 5, 17] {
                more.push(x * 2f64.powi(k));
            }
        }
    }
    v.extend(more);
    // Keep what f32 holds exactly, so the same data serve the f32 path.
    v.retain(|&x| x.is_nan() || f64::from(x as f32) == x);
    v
}

#[test]
fn counts_match_the_slow_reference_on_adversarial_values() {
    for format in [
        FP16,
        BF16,
        FP8_E4M3,
        FP8_E5M2,
        TF32,
        FP32,
        "e3m2".parse().unwrap(),
        // Slot counts (20, 24) that no named format has: the loop with a run-time count.
        "e5m14".parse().unwrap(),
        "e6m18".parse().unwrap(),
    ] {
        let xs = adversarial(format);
        let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
        let ks = -20..=40;
        let slow = reference(format, &xs, ks.clone());
        let mut acc = SweepAccumulator::new(format);
        acc.add_f32(&xs32);
        check(&acc.sweep(ks.clone()), &slow);
        let mut acc = SweepAccumulator::new(format);
        acc.add_f64(&xs);
        check(&acc.sweep(ks), &slow);
    }
}

#[test]
fn e4m3_464_is_a_tie_that_rounds_to_448() {
    let mut acc = SweepAccumulator::new(FP8_E4M3);
    acc.add_f32(&[464.0, 464.0001, 448.0]);
    let r = *acc.sweep(0..=0).row(0).unwrap();
    assert_eq!((r.normal, r.overflow), (2, 1));
    let mut acc = SweepAccumulator::new(FP16);
    acc.add_f32(&[65520.0, 65519.996]);
    let r = *acc.sweep(0..=0).row(0).unwrap();
    assert_eq!((r.normal, r.overflow), (1, 1));
}

#[test]
fn counts_match_the_slow_reference_on_random_values() {
    for (seed, format) in [(1, FP16), (2, FP8_E4M3), (3, BF16), (4, FP8_E5M2)] {
        let xs32 = awkward_f32(seed, 3000);
        let xs: Vec<f64> = xs32.iter().map(|&x| f64::from(x)).collect();
        let ks = -30..=30;
        let slow = reference(format, &xs, ks.clone());
        let mut acc = SweepAccumulator::new(format);
        acc.add_f32(&xs32);
        check(&acc.sweep(ks), &slow);
    }
    // f64 values that f32 cannot hold, in a range where x * 2^k stays exact in f64.
    let mut rng = Rng(9);
    let xs: Vec<f64> = (0..3000)
        .map(|_| (rng.uniform() - 0.5) * 2f64.powf(rng.uniform() * 100.0 - 60.0))
        .collect();
    let slow = reference(FP16, &xs, -10..=50);
    let mut acc = SweepAccumulator::new(FP16);
    acc.add_f64(&xs);
    check(&acc.sweep(-10..=50), &slow);
}

#[test]
fn parallel_and_merged_are_consistent() {
    let xs = awkward_f32(5, 5 * SWEEP_CHUNK + 77);
    let mut seq = SweepAccumulator::new(FP16);
    seq.add_f32(&xs);
    for threads in [1, 2, 5] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut par = SweepAccumulator::new(FP16);
        pool.install(|| par.par_add_f32(&xs));
        assert_eq!(par, seq, "{threads} threads");
    }
    let (a, b) = xs.split_at(2 * SWEEP_CHUNK);
    let mut merged = SweepAccumulator::new(FP16);
    merged.add_f32(a);
    let mut other = SweepAccumulator::new(FP16);
    other.add_f32(b);
    merged.merge(&other);
    // The same counts; the sums are associated differently, so equal to rounding.
    let (m, q) = (merged.sweep(-5..=35), seq.sweep(-5..=35));
    for (a, b) in m.rows.iter().zip(&q.rows) {
        assert_eq!(
            (a.underflow, a.subnormal, a.normal, a.overflow),
            (b.underflow, b.subnormal, b.normal, b.overflow)
        );
        assert!(close(a.energy_lost, b.energy_lost));
        assert!(close(
            a.relative_error_finite.unwrap(),
            b.relative_error_finite.unwrap()
        ));
    }
}

#[test]
fn empty_and_special_only_tensors() {
    let mut acc = SweepAccumulator::new(FP16);
    acc.add_f32(&[0.0, f32::NAN, f32::INFINITY]);
    let s = acc.sweep(0..=2);
    assert_eq!((s.count, s.zeros, s.nonfinite, s.amax), (3, 1, 2, 0.0));
    for r in &s.rows {
        assert_eq!(
            (r.underflow, r.subnormal, r.normal, r.overflow),
            (0, 0, 0, 0)
        );
        assert_eq!((r.energy_lost, r.relative_error), (0.0, Some(0.0)));
    }
    #[allow(clippy::reversed_empty_ranges)]
    let empty = SweepAccumulator::new(FP16).sweep(3..=2);
    assert!(empty.rows.is_empty());
}

#[test]
fn extreme_f64_magnitudes_do_not_overflow_the_sums() {
    let xs = [1e300, 1e-300, f64::MIN_POSITIVE / 1e10, 1e-310];
    let mut acc = SweepAccumulator::new(FP16);
    acc.add_f64(&xs);
    let r = acc.sweep(-1000..=-990);
    for row in &r.rows {
        assert!(row.energy_lost.is_finite() && row.relative_error_finite.unwrap().is_finite());
    }
    // At 2^-996, 1e300 (about 2^996.6) is about 1.5, normal; the rest underflow with no share.
    let row = r.row(-996).unwrap();
    assert_eq!((row.underflow, row.normal), (3, 1));
    assert_eq!(row.energy_lost, 0.0);
}

#[test]
fn histogram_sweep_is_exact_away_from_boundaries_and_within_its_bound() {
    for s in [0, 2, 4, 6] {
        for format in [FP16, FP8_E4M3, BF16] {
            let xs32 = awkward_f32(11 + u64::from(s), 4000);
            let mut h = Histogram::new(s);
            h.add_f32(&xs32);
            let mut acc = SweepAccumulator::new(format);
            acc.add_f32(&xs32);
            let ks = -20..=40;
            let exact = acc.sweep(ks.clone());
            let (approx, bounds) = sweep_from_histogram(&h, format, ks);
            assert_eq!(
                (approx.count, approx.zeros, approx.nonfinite),
                (exact.count, exact.zeros, exact.nonfinite)
            );
            for ((a, e), &bound) in approx.rows.iter().zip(&exact.rows).zip(&bounds) {
                for (x, y) in [
                    (a.underflow, e.underflow),
                    (a.subnormal, e.subnormal),
                    (a.normal, e.normal),
                    (a.overflow, e.overflow),
                ] {
                    assert!(
                        x.abs_diff(y) <= bound,
                        "s={s} {format} k={} {x} {y} {bound}",
                        a.log2_scale
                    );
                }
                assert_eq!(
                    a.underflow + a.subnormal + a.normal + a.overflow,
                    exact.finite_nonzero()
                );
            }
        }
    }
    // Values strictly inside their bins, away from every boundary: exact.
    let xs = [3e-6_f32, 5e-3, 0.3, 3.0, 100.0];
    let mut h = Histogram::new(0);
    h.add_f32(&xs);
    let mut acc = SweepAccumulator::new(FP16);
    acc.add_f32(&xs);
    let (approx, _) = sweep_from_histogram(&h, FP16, 0..=12);
    let exact = acc.sweep(0..=12);
    for (a, e) in approx.rows.iter().zip(&exact.rows) {
        assert_eq!(
            (a.underflow, a.subnormal, a.normal, a.overflow),
            (e.underflow, e.subnormal, e.normal, e.overflow)
        );
    }
}

/// Every build (baseline, AVX2, AVX-512) of every loop (f32 terms, f64 terms specialised by
/// width, generic) gives the same bits, on awkward values (all classes, subnormal f32, specials)
/// and on every fp16 pattern scaled by powers of two across the f32 range.
#[test]
fn simd_and_width_specialised_loops_match_the_generic_one() {
    let mut xs = awkward_f32(21, 20_000);
    for k in [-140, -126, -100, -60, -30, -14, 0, 10, 30, 60, 100, 112] {
        xs.extend((0u16..=u16::MAX).map(|h| {
            let v = crate::format::FP16.decode(u32::from(h));
            (v * 2f64.powi(k)) as f32
        }));
    }
    let xs64: Vec<f64> = xs.iter().map(|&x| f64::from(x) * 1e-200).collect();
    for format in [
        FP8_E5M2,
        FP8_E4M3,
        BF16,
        FP16,
        TF32,
        FP32,
        "e3m4".parse().unwrap(),
        // The widest format of the f32 terms, and the next (f64 terms).
        "e6m21".parse().unwrap(),
        "e7m22".parse().unwrap(),
    ] {
        let acc = SweepAccumulator::new(format);
        for part in xs.chunks(SWEEP_CHUNK) {
            let want = kernel::chunk(&acc, part, Isa::Baseline, Terms::Generic);
            for isa in Isa::available() {
                for terms in [Terms::Auto, Terms::F64, Terms::Generic] {
                    let got = kernel::chunk(&acc, part, isa, terms);
                    assert!(got == want, "{format} {isa:?} {terms:?}");
                }
            }
        }
        let part = &xs64[..20_000];
        let want = kernel::chunk(&acc, part, Isa::Baseline, Terms::Generic);
        for isa in Isa::available() {
            for terms in [Terms::Auto, Terms::F64, Terms::Generic] {
                assert!(
                    kernel::chunk(&acc, part, isa, terms) == want,
                    "{format} {isa:?}"
                );
            }
        }
    }
}

/// Every f32 with at most 11 significant bits (low 12 bits of the pattern zero): all exponents,
/// and every tie of rounding to fp16 and the narrower formats, at scales across their ranges.
#[test]
#[cfg_attr(debug_assertions, ignore)]
fn exhaustive_short_f32_patterns_match_the_reference() {
    let xs: Vec<f32> = (0u32..1 << 20).map(|i| f32::from_bits(i << 12)).collect();
    let wide: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
    for format in [FP16, BF16, FP8_E4M3, FP8_E5M2] {
        let mut acc = SweepAccumulator::new(format);
        acc.par_add_f32(&xs);
        for k in [-40, -12, -1, 0, 1, 7, 15, 24, 40] {
            check(&acc.sweep(k..=k), &reference(format, &wide, k..=k));
        }
    }
}

/// CPU time of `clock` in nanoseconds (for the measurements below).
fn cpu_ns(clock: libc::clockid_t) -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Keeps in `best` the least CPU time (of `clock`) per value of `n` that `work` has taken.
fn time_per_value(clock: libc::clockid_t, n: usize, best: &mut f64, work: impl FnOnce()) {
    let t = cpu_ns(clock);
    work();
    *best = best.min((cpu_ns(clock) - t) / n as f64);
}

/// 2^24 gradient-like values: log-uniform magnitudes over 2^-30..2^10, both signs.
fn log_uniform_16m() -> Vec<f32> {
    let mut rng = Rng(11);
    (0..1 << 24)
        .map(|_| {
            let v = 2f64.powf(rng.uniform() * 40.0 - 30.0) as f32;
            if rng.next_u64() & 1 == 1 { -v } else { v }
        })
        .collect()
}

/// Thread CPU time per value of the chunk loops, alternated in one process (wall time on a
/// shared machine says little): `cargo test --release --lib sweep::tests::loop_speed --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn loop_speed() {
    let log_uniform = log_uniform_16m();
    let time = |best: &mut f64, work: &mut dyn FnMut()| {
        time_per_value(libc::CLOCK_THREAD_CPUTIME_ID, log_uniform.len(), best, work);
    };
    for format in [FP16, BF16, FP8_E4M3] {
        let mut best = [f64::INFINITY; 3];
        for _ in 0..5 {
            for (i, path) in [SweepPath::F64Avx2, SweepPath::Auto]
                .into_iter()
                .enumerate()
            {
                let mut acc = SweepAccumulator::new(format);
                time(&mut best[i], &mut || acc.add_f32_via(path, &log_uniform));
            }
            let mut h = Histogram::new(2);
            time(&mut best[2], &mut || h.add_f32(&log_uniform));
            assert_eq!(h.count(), log_uniform.len() as u64);
        }
        println!(
            "{format}: f64 terms (AVX2) {:.2} ns/value, today's loop {:.2} ns/value ({:.2}x); histogram s=2 {:.2}",
            best[0],
            best[1],
            best[0] / best[1],
            best[2]
        );
    }
}

/// A histogram from the exact cells' pass against one from the histogram's own pass: every
/// count, bin and extreme the same, and the sums of the magnitudes and of the squares (formed
/// exactly from the cells by the one, in the histogram's f64 order by the other) within `1e-12`
/// relative.
fn same_counts_close_sums(got: &Histogram, want: &Histogram) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b;
    let counts = |h: &Histogram| {
        let extremes = (h.amax().to_bits(), h.min_nonzero().map(f64::to_bits));
        let specials = (h.zeros(), h.nan(), h.pos_inf(), h.neg_inf(), h.negatives());
        (
            h.sub_bins_log2(),
            extremes,
            specials,
            h.bins().collect::<Vec<_>>(),
        )
    };
    counts(got) == counts(want)
        && close(got.sum_abs(), want.sum_abs())
        && close(got.sum_sq(), want.sum_sq())
}

/// The one-pass sweep and histogram give what the two passes give, bit for bit (every field of
/// both, but the histogram's sums where the exact cells form them: [`same_counts_close_sums`]),
/// for every build of the loop, sub-bin count (3 is above what the loop counts: the histogram
/// then takes its own pass), format, input type, length and thread count.
#[test]
fn one_pass_with_histogram_equals_two_passes() {
    let mut xs = awkward_f32(31, 3 * SWEEP_CHUNK + 2 * crate::stats::CHUNK + 5);
    // Runs of one exponent (the counters' lanes fill up) and a chunk of subnormals only.
    xs.extend(std::iter::repeat_n(1.75f32, SWEEP_CHUNK + 3));
    xs.extend(std::iter::repeat_n(0f32, SWEEP_CHUNK));
    xs.extend((1..=SWEEP_CHUNK as u32).map(|i| f32::from_bits(i * 97 % 0x007f_ffff + 1)));
    let xs64: Vec<f64> = xs
        .iter()
        .enumerate()
        .map(|(i, &x)| f64::from(x) * if i % 2 == 0 { 1e-300 } else { 1e250 })
        .collect();
    let e2m1: FloatFormat = "e2m1".parse().unwrap();
    let pools = [1, 2, 3].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    });
    for format in [FP16, BF16, FP8_E4M3, FP8_E5M2, e2m1, FP32] {
        for s in 0..=HIST_MAX_S + 1 {
            for len in [0, 1, 9, 1023, crate::stats::CHUNK + 1, xs.len()] {
                let mut want = (SweepAccumulator::new(format), Histogram::new(s));
                want.0.par_add_f32(&xs[..len]);
                want.1.par_add_f32(&xs[..len]);
                let mut want64 = (SweepAccumulator::new(format), Histogram::new(s));
                want64.0.par_add_f64(&xs64[..len]);
                want64.1.par_add_f64(&xs64[..len]);
                let cells = format.man_bits() <= exact::MAX_P && s <= HIST_MAX_S;
                for isa in Isa::available() {
                    for pool in &pools {
                        let mut got = (SweepAccumulator::new(format), Histogram::new(s));
                        pool.install(|| got.0.par_add_with(&xs[..len], &mut got.1, isa));
                        let same = if cells {
                            same_counts_close_sums(&got.1, &want.1)
                        } else {
                            got.1 == want.1
                        };
                        assert!(
                            got.0 == want.0 && same,
                            "f32 {format} s={s} len={len} {isa:?}"
                        );
                        let mut got = (SweepAccumulator::new(format), Histogram::new(s));
                        pool.install(|| got.0.par_add_with(&xs64[..len], &mut got.1, isa));
                        assert!(got == want64, "f64 {format} s={s} len={len} {isa:?}");
                    }
                }
            }
        }
    }
    // The public entry points are the fused pass of the best build.
    let fp16 = || (SweepAccumulator::new(FP16), Histogram::new(2));
    let (mut got, mut want) = (fp16(), fp16());
    got.0.par_add_f32_with_histogram(&xs, &mut got.1);
    want.0.par_add_f32(&xs);
    want.1.par_add_f32(&xs);
    assert!(got.0 == want.0 && same_counts_close_sums(&got.1, &want.1));
    let (mut got, mut want) = (fp16(), fp16());
    got.0.par_add_f64_with_histogram(&xs64, &mut got.1);
    want.0.par_add_f64(&xs64);
    want.1.par_add_f64(&xs64);
    assert!(got == want);
}

/// Process CPU time per value of the sweep and histogram as two passes and as one, alternated
/// in one process, on a pool of one thread (the caller blocks while it works): `cargo test --release --lib sweep::tests::one_pass_speed --
/// --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn one_pass_speed() {
    let log_uniform = log_uniform_16m();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for format in [FP16, BF16, FP8_E4M3] {
        let mut best = [f64::INFINITY; 4];
        for _ in 0..7 {
            let mut time = |i: usize, work: &mut dyn FnMut()| {
                let n = log_uniform.len();
                time_per_value(libc::CLOCK_PROCESS_CPUTIME_ID, n, &mut best[i], work);
            };
            let (mut acc, mut h) = (SweepAccumulator::new(format), Histogram::new(2));
            time(0, &mut || pool.install(|| acc.par_add_f32(&log_uniform)));
            time(1, &mut || pool.install(|| h.par_add_f32(&log_uniform)));
            let (mut acc2, mut h2) = (SweepAccumulator::new(format), Histogram::new(2));
            time(2, &mut || {
                pool.install(|| acc2.par_add_f32_with_histogram(&log_uniform, &mut h2));
            });
            assert!(acc2 == acc && same_counts_close_sums(&h2, &h));
            let mut acc3 = SweepAccumulator::new(format);
            time(3, &mut || {
                pool.install(|| acc3.par_add_f32(&log_uniform));
            });
        }
        println!(
            "{format}: sweep {:.2} + histogram {:.2} = {:.2} ns/value; one pass {:.2} ({:.2}x); sweep again {:.2}",
            best[0],
            best[1],
            best[0] + best[1],
            best[2],
            (best[0] + best[1]) / best[2],
            best[3],
        );
    }
}

/// The same bits from every build and pass (issue 28): each build's loop against the baseline
/// build and the generic f64 loop, chunk by chunk, and the fused pass (whose survey comes from
/// the exact cells' loop) on 1 and 2 threads against the sequential sweep and histogram, on
/// the values at and next to every boundary of each format (ties at half the min subnormal and
/// at the top of the subnormals, all-ones mantissas below min normal and max) moved to every
/// binade of f32, and on every fp16 and bf16 pattern as f32 (as their tensors are read) and as
/// f64.
#[test]
fn every_build_and_the_fused_survey_match_the_baseline_on_every_boundary() {
    let formats = [
        FP16,
        BF16,
        FP8_E4M3,
        FP8_E5M2,
        TF32,
        "e3m4".parse().unwrap(),
    ];
    let mut xs: Vec<f32> = Vec::new();
    for format in formats {
        for x in adversarial(format) {
            xs.extend((-160..=130).map(|k| (x * 2f64.powi(k)) as f32));
        }
    }
    xs.extend((0u32..1 << 16).map(|h| FP16.decode(h) as f32));
    xs.extend((0u32..1 << 16).map(|h| f32::from_bits(h << 16)));
    let xs64: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
    let pools = [1, 2].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    });
    for format in formats {
        let acc = SweepAccumulator::new(format);
        for part in xs.chunks(SWEEP_CHUNK) {
            let want = kernel::chunk(&acc, part, Isa::Baseline, Terms::Auto);
            assert!(want == kernel::chunk(&acc, part, Isa::Baseline, Terms::Generic));
            for isa in Isa::available() {
                let got = kernel::chunk(&acc, part, isa, Terms::Auto);
                assert!(got == want, "{format} {isa:?}");
            }
        }
        let mut want = (SweepAccumulator::new(format), Histogram::new(2));
        want.0.add_f32(&xs);
        want.1.add_f32(&xs);
        let mut want64 = (SweepAccumulator::new(format), Histogram::new(2));
        want64.0.add_f64(&xs64);
        want64.1.add_f64(&xs64);
        for pool in &pools {
            for isa in Isa::available() {
                let mut got = (SweepAccumulator::new(format), Histogram::new(2));
                pool.install(|| got.0.par_add_with(&xs, &mut got.1, isa));
                let same = same_counts_close_sums(&got.1, &want.1);
                assert!(got.0 == want.0 && same, "{format} {isa:?} f32");
                let mut got = (SweepAccumulator::new(format), Histogram::new(2));
                pool.install(|| got.0.par_add_with(&xs64, &mut got.1, isa));
                assert!(got == want64, "{format} {isa:?} f64");
            }
        }
    }
}

/// Exact per-row sums of f32 values (the reference of the order-free check below): every term
/// is `d^2` with `d` a multiple of `2^-23` (f has 24 bits, the grids are coarser), so
/// `d^2 * 2^46` is an integer below `2^48`, summed in u128 without rounding. Per row `E`: the
/// `p + 1` window sums, the normal-range sums by `b`, and `sum f^2` over `f != 1`.
fn exact_rows(acc: &SweepAccumulator, xs: &[f32]) -> std::collections::BTreeMap<i32, Vec<u128>> {
    let p = acc.format.man_bits() as usize;
    let mut rows = std::collections::BTreeMap::new();
    let units = |d: f64| {
        let k = (d * 2f64.powi(23)) as i64;
        assert_eq!(k as f64, d * 2f64.powi(23), "a term off the 2^-23 grid");
        (i128::from(k) * i128::from(k)) as u128
    };
    for &x in xs {
        let a = f64::from(x).to_bits() & !(1 << 63);
        if a == 0 || !x.is_finite() {
            continue;
        }
        let (e, frac) = split(a);
        let f = f64::from_bits(frac | ONE_BITS);
        let row: &mut Vec<u128> = rows.entry(e).or_insert_with(|| vec![0; p + 4]);
        let error = |g: f64| f - ((f + g) - g);
        for (sum, &g) in row.iter_mut().zip(&acc.grid[..=p]) {
            *sum += units(error(g));
        }
        row[p + 1 + usize::from(frac >= acc.t_b)] += units(error(acc.grid[p + 1]));
        if frac != 0 {
            row[p + 3] += units(f);
        }
    }
    rows
}

/// A pass with few values per exponent adds each value's errors directly, not through the
/// cells: the same integers, so the same bits as the exact sums rounded once, and the counts.
#[test]
fn few_values_per_exponent_give_the_exact_sums_too() {
    let mut rng = Rng(46);
    let mut xs = awkward_f32(47, 3000);
    xs.extend((0..500).map(|_| 2f64.powf(rng.uniform() * 60.0 - 40.0) as f32));
    for format in [FP16, BF16, FP8_E4M3, FP8_E5M2] {
        let mut acc = SweepAccumulator::new(format);
        acc.add(&xs, Isa::Baseline, Terms::Auto);
        let rows = acc.rows();
        let p = format.man_bits() as usize;
        let exact = exact_rows(&acc, &xs);
        assert!(
            exact.len() * exact::DIRECT_PER_ROW > xs.len(),
            "{format}: the direct path"
        );
        let bits = |x: u128| (x as f64 * 2f64.powi(-46)).to_bits();
        for (&e, sums) in &exact {
            let r = (e - rows.lo) as usize;
            let got: Vec<u64> = rows.window[r * (p + 1)..(r + 1) * (p + 1)]
                .iter()
                .chain(&rows.normal_err[r])
                .chain(&rows.sq[r][..1])
                .map(|x| x.to_bits())
                .collect();
            let want: Vec<u64> = sums.iter().map(|&x| bits(x)).collect();
            assert_eq!(got, want, "{format} E={e}");
        }
        let mut slow = SweepAccumulator::new(format);
        slow.add(&xs, Isa::Baseline, Terms::Generic);
        assert_eq!(acc.rows().counts, slow.rows().counts, "{format}");
    }
}

/// The sums' order (issue 44): the same bits on 1, 2 and 3 threads and from every build, and
/// every per-row sum the exact sums rounded once (the f32 cells of formats of up to 10
/// mantissa bits) or within `1e-12` relative of them (the f64 terms in their fixed order: lanes,
/// chunks, a tree), on runs of one exponent (a chunk's values all in one row: the longest
/// lanes), log-uniform values over 40 binades, awkward values (subnormal f32, specials) and a
/// length that leaves partial lanes. The relative errors of the sweep are then within `1e-12`
/// of those of the exact sums, added with compensation.
#[test]
fn sums_are_the_same_bits_on_any_thread_count_and_within_1e_12_of_exact_sums() {
    let mut rng = Rng(44);
    let mut xs: Vec<f32> = (0..3 * SWEEP_CHUNK + 777)
        .map(|_| {
            let v = 2f64.powf(rng.uniform() * 40.0 - 30.0) as f32;
            if rng.next_u64() & 1 == 1 { -v } else { v }
        })
        .collect();
    xs.extend((0..SWEEP_CHUNK + 5).map(|_| 1.0 + rng.uniform() as f32));
    xs.extend(awkward_f32(45, 5000));
    let pools = [1, 2, 3].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    });
    for (format, terms) in [FP16, BF16, FP8_E4M3, FP8_E5M2]
        .into_iter()
        .flat_map(|f| [(f, Terms::Auto), (f, Terms::Generic)])
    {
        let mut want = SweepAccumulator::new(format);
        want.add(&xs, Isa::Baseline, terms);
        assert_eq!(want.exact.is_empty(), terms == Terms::Generic);
        if terms == Terms::Auto {
            for isa in Isa::available() {
                for pool in &pools {
                    let mut got = (SweepAccumulator::new(format), Histogram::new(2));
                    pool.install(|| got.0.par_add_with(&xs, &mut got.1, isa));
                    assert!(got.0 == want, "{format} {isa:?} {pool:?}");
                }
            }
        }
        let rows = want.rows();
        let exact = exact_rows(&want, &xs);
        let p = format.man_bits() as usize;
        let close = |got: f64, exact: u128, what: &str| {
            let exact = exact as f64 * 2f64.powi(-46);
            if terms == Terms::Auto {
                assert_eq!(
                    got.to_bits(),
                    exact.to_bits(),
                    "{format} {what}: {got:e} vs {exact:e}"
                );
            }
            assert!(
                (got - exact).abs() <= 1e-12 * exact,
                "{format} {what}: {got:e} vs {exact:e}"
            );
        };
        for (&e, sums) in &exact {
            let r = (e - rows.lo) as usize;
            let window = &rows.window[r * (p + 1)..(r + 1) * (p + 1)];
            for (j, (&got, &sum)) in window.iter().zip(sums).enumerate() {
                close(got, sum, &format!("E={e} window {j}"));
            }
            close(rows.normal_err[r][0], sums[p + 1], &format!("E={e} normal"));
            close(
                rows.normal_err[r][1],
                sums[p + 2],
                &format!("E={e} normal, b"),
            );
            close(rows.sq[r][0], sums[p + 3], &format!("E={e} f^2"));
        }
        assert_eq!(
            exact.len(),
            rows.counts
                .iter()
                .filter(|c| c.iter().sum::<u64>() > 0)
                .count()
        );
        // The sweep's relative errors against the same formula on the exact sums, added with
        // compensation (Neumaier) in units of the top row's 4^E.
        let top = *exact.keys().last().unwrap();
        let compensated = |terms: &mut dyn Iterator<Item = f64>| {
            let (mut s, mut c) = (0f64, 0f64);
            for t in terms {
                let u = s + t;
                c += if s.abs() >= t.abs() {
                    (s - u) + t
                } else {
                    (t - u) + s
                };
                s = u;
            }
            s + c
        };
        let unit = |e: i32| 2f64.powi(2 * (e - top) - 46);
        let ones = |e: i32| rows.sq[(e - rows.lo) as usize][1] * 2f64.powi(46);
        let total = compensated(
            &mut exact
                .iter()
                .map(|(&e, s)| (s[p + 3] as f64 + ones(e)) * unit(e)),
        );
        let (emin, emax) = (format.emin(), format.emax());
        let sweep = want.sweep(-40..=40);
        for row in &sweep.rows {
            let k = row.log2_scale;
            let err = compensated(&mut exact.iter().map(|(&e, s)| {
                let k_a = emin - p as i32 - e - 1;
                let x = if k < k_a {
                    s[p + 3] as f64 + ones(e)
                } else if k <= k_a + p as i32 {
                    s[(k - k_a) as usize] as f64
                } else {
                    // Values that overflow add nothing to the finite error: those with flag b
                    // one scale before the others.
                    let below = |k_over: i32| f64::from(u8::from(k < k_over));
                    s[p + 1] as f64 * below(emax - e + 1) + s[p + 2] as f64 * below(emax - e)
                };
                x * unit(e)
            }));
            let want_rel = (err / total).sqrt();
            let got = row.relative_error_finite.unwrap();
            assert!(
                (got - want_rel).abs() <= 1e-12 * want_rel,
                "{format} k={k}: {got:e} vs {want_rel:e}"
            );
        }
    }
}

/// The histogram's sums from the exact cells' pass (issue 44): per exponent the exact sums of
/// the significands and of their squares (u128), each rounded once to f64 and scaled, added from
/// the lowest exponent up; the same bits on 1, 2 and 3 threads and from every build, through the
/// cells and value by value (few values per exponent), with subnormals, ones, zeros,
/// infinities, NaN and negatives among the values; and the counts of the histogram's own pass.
#[test]
fn histogram_sums_from_the_exact_cells_are_the_exact_sums_rounded_per_exponent() {
    let mut rng = Rng(48);
    let mut xs: Vec<f32> = (0..2 * SWEEP_CHUNK + 333)
        .map(|_| {
            let v = 2f64.powf(rng.uniform() * 40.0 - 30.0) as f32;
            if rng.next_u64() & 1 == 1 { -v } else { v }
        })
        .collect();
    // f == 1, and R == 0 in cells of every T (fp8's flag b's threshold among them).
    let r_zero = (0..2048).map(|t| -(1.0 + t as f32 / 2048.0) * 2f32.powi(t % 9));
    // No finite magnitude above 2^10, so that every value shows in the last bits of the sums.
    let awkward = |seed, n| {
        let xs = awkward_f32(seed, n).into_iter();
        xs.filter(|x| !x.is_finite() || x.abs() <= 1024.0)
    };
    let mut few: Vec<f32> = xs[..2000].to_vec();
    few.extend(awkward(50, 500));
    few.extend(r_zero.clone().step_by(5));
    xs.extend(awkward(49, 5000));
    xs.extend(r_zero);
    let reference = |xs: &[f32]| {
        let mut rows = std::collections::BTreeMap::<i32, (u128, u128)>::new();
        for &x in xs.iter().filter(|x| x.is_finite() && **x != 0.0) {
            let (e, frac) = split(f64::from(x).to_bits() & !(1 << 63));
            let g = u128::from(frac >> 29 | 1 << 23);
            let row = rows.entry(e).or_default();
            *row = (row.0 + g, row.1 + g * g);
        }
        rows.iter().fold((0f64, 0f64), |(abs, sq), (&e, &(g, gg))| {
            let (abs_e, sq_e) = (
                g as f64 * 2f64.powi(e - 23),
                gg as f64 * 2f64.powi(2 * e - 46),
            );
            (abs + abs_e, sq + sq_e)
        })
    };
    let pools = [1, 2, 3].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    });
    let exponents = |xs: &[f32]| {
        let finite = xs.iter().filter(|x| x.is_finite() && **x != 0.0);
        let mut es: Vec<i32> = finite
            .map(|x| split(f64::from(x.abs()).to_bits()).0)
            .collect();
        es.sort_unstable();
        es.dedup();
        es.len()
    };
    assert!(
        exponents(&few) * exact::DIRECT_PER_ROW > few.len(),
        "the direct path"
    );
    for format in [FP16, FP8_E4M3, BF16] {
        for xs in [&xs[..], &few[..]] {
            let (sum_abs, sum_sq) = reference(xs);
            let mut want = Histogram::new(2);
            want.add_f32(xs);
            for isa in Isa::available() {
                for pool in &pools {
                    let mut got = (SweepAccumulator::new(format), Histogram::new(2));
                    pool.install(|| got.0.par_add_with(xs, &mut got.1, isa));
                    let what = format!("{format} {} values {isa:?} {pool:?}", xs.len());
                    assert_eq!(got.1.sum_abs().to_bits(), sum_abs.to_bits(), "{what}");
                    assert_eq!(got.1.sum_sq().to_bits(), sum_sq.to_bits(), "{what}");
                    assert!(same_counts_close_sums(&got.1, &want), "{what}");
                }
            }
        }
    }
}
