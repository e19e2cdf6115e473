//! The per-chunk loops of histogram building, written for the vectoriser: independent lanes,
//! selects instead of branches, integer max/min on bit patterns.

/// Scalar statistics of one chunk, combined in chunk order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct ChunkStats {
    pub sum_abs: f64,
    pub sum_sq: f64,
    pub amax: f64,
    /// `+inf` when the chunk has no finite nonzero value.
    pub min_nonzero: f64,
    pub zeros: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
    pub negatives: u64,
    pub subnormals: u64,
}

/// Adds every lane into `raw` and clears the lanes.
pub(super) fn flush_lanes(lanes: &mut [u32], raw: &mut [u64], stride: usize) {
    for lane in lanes.chunks_exact_mut(stride) {
        for (r, l) in raw.iter_mut().zip(lane.iter_mut()) {
            *r += u64::from(*l);
            *l = 0;
        }
    }
}

/// The hot loop: one shift and one increment per value, spread over four lanes of `stride`
/// counters so that runs of equal bins do not serialise on one counter.
pub(super) fn count_f32_lanes(lanes: &mut [u32], stride: usize, shift: u32, chunk: &[f32]) {
    let (l0, rest) = lanes.split_at_mut(stride);
    let (l1, rest) = rest.split_at_mut(stride);
    let (l2, l3) = rest.split_at_mut(stride);
    let bin = |x: f32| ((x.to_bits() & 0x7fff_ffff) >> shift) as usize;
    let mut quads = chunk.chunks_exact(4);
    for q in &mut quads {
        l0[bin(q[0])] += 1;
        l1[bin(q[1])] += 1;
        l2[bin(q[2])] += 1;
        l3[bin(q[3])] += 1;
    }
    for &x in quads.remainder() {
        l0[bin(x)] += 1;
    }
}

/// Sums and scalar counts of one f32 chunk, through the AVX2 build of [`scalars_f32_any`] when
/// the CPU has it and `simd` is true (the baseline target has no vector u32 max/min). Both builds
/// run the same code and give identical results (tested).
pub(super) fn scalars_f32(chunk: &[f32], simd: bool) -> ChunkStats {
    #[cfg(target_arch = "x86_64")]
    if simd && std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { scalars_f32_avx2(chunk) };
    }
    let _ = simd;
    scalars_f32_any(chunk)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scalars_f32_avx2(chunk: &[f32]) -> ChunkStats {
    scalars_f32_any(chunk)
}

/// [`scalars_f32`] for whatever target it is compiled for.
#[inline(always)]
fn scalars_f32_any(chunk: &[f32]) -> ChunkStats {
    const L: usize = 8;
    let mut sum_abs = [0f64; L];
    let mut sum_sq = [0f64; L];
    let mut amax = [0u32; L];
    let mut amin = [u32::MAX; L];
    let mut counts = [[0u32; L]; 6]; // zeros, nan, +inf, -inf, negatives, subnormals
    let mut step = |l: usize, x: f32| {
        let bits = x.to_bits();
        let a = bits & 0x7fff_ffff;
        let finite = a < 0x7f80_0000;
        let v = f64::from(f32::from_bits(if finite { a } else { 0 }));
        sum_abs[l] += v;
        sum_sq[l] += v * v;
        amax[l] = amax[l].max(if finite { a } else { 0 });
        amin[l] = amin[l].min(if finite && a != 0 { a } else { u32::MAX });
        counts[0][l] += u32::from(a == 0);
        counts[1][l] += u32::from(a > 0x7f80_0000);
        counts[2][l] += u32::from(bits == 0x7f80_0000);
        counts[3][l] += u32::from(bits == 0xff80_0000);
        counts[4][l] += u32::from(finite && a != 0 && bits >> 31 == 1);
        counts[5][l] += u32::from(a != 0 && a < 0x0080_0000);
    };
    let mut blocks = chunk.chunks_exact(L);
    for b in &mut blocks {
        for (l, &x) in b.iter().enumerate() {
            step(l, x);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        step(l, x);
    }
    let total = |c: &[u32; L]| c.iter().map(|&v| u64::from(v)).sum::<u64>();
    let min_bits = amin.iter().copied().min().unwrap_or(u32::MAX);
    ChunkStats {
        sum_abs: sum_abs.iter().sum(),
        sum_sq: sum_sq.iter().sum(),
        amax: f64::from(f32::from_bits(amax.iter().copied().max().unwrap_or(0))),
        min_nonzero: if min_bits == u32::MAX {
            f64::INFINITY
        } else {
            f64::from(f32::from_bits(min_bits))
        },
        zeros: total(&counts[0]),
        nan: total(&counts[1]),
        pos_inf: total(&counts[2]),
        neg_inf: total(&counts[3]),
        negatives: total(&counts[4]),
        subnormals: total(&counts[5]),
    }
}

/// [`scalars_f32`] for f64.
pub(super) fn scalars_f64(chunk: &[f64]) -> ChunkStats {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { scalars_f64_avx2(chunk) };
    }
    scalars_f64_any(chunk)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scalars_f64_avx2(chunk: &[f64]) -> ChunkStats {
    scalars_f64_any(chunk)
}

#[inline(always)]
fn scalars_f64_any(chunk: &[f64]) -> ChunkStats {
    const L: usize = 4;
    const INF: u64 = 0x7ff0_0000_0000_0000;
    let mut sum_abs = [0f64; L];
    let mut sum_sq = [0f64; L];
    let mut amax = [0u64; L];
    let mut amin = [u64::MAX; L];
    let mut counts = [[0u64; L]; 6];
    let mut step = |l: usize, x: f64| {
        let bits = x.to_bits();
        let a = bits & !(1 << 63);
        let finite = a < INF;
        let v = f64::from_bits(if finite { a } else { 0 });
        sum_abs[l] += v;
        sum_sq[l] += v * v;
        amax[l] = amax[l].max(if finite { a } else { 0 });
        amin[l] = amin[l].min(if finite && a != 0 { a } else { u64::MAX });
        counts[0][l] += u64::from(a == 0);
        counts[1][l] += u64::from(a > INF);
        counts[2][l] += u64::from(bits == INF);
        counts[3][l] += u64::from(bits == INF | 1 << 63);
        counts[4][l] += u64::from(finite && a != 0 && bits >> 63 == 1);
        counts[5][l] += u64::from(a != 0 && a < 1 << 52);
    };
    let mut blocks = chunk.chunks_exact(L);
    for b in &mut blocks {
        for (l, &x) in b.iter().enumerate() {
            step(l, x);
        }
    }
    for (l, &x) in blocks.remainder().iter().enumerate() {
        step(l, x);
    }
    let total = |c: &[u64; L]| c.iter().sum::<u64>();
    let min_bits = amin.iter().copied().min().unwrap_or(u64::MAX);
    ChunkStats {
        sum_abs: sum_abs.iter().sum(),
        sum_sq: sum_sq.iter().sum(),
        amax: f64::from_bits(amax.iter().copied().max().unwrap_or(0)),
        min_nonzero: if min_bits == u64::MAX {
            f64::INFINITY
        } else {
            f64::from_bits(min_bits)
        },
        zeros: total(&counts[0]),
        nan: total(&counts[1]),
        pos_inf: total(&counts[2]),
        neg_inf: total(&counts[3]),
        negatives: total(&counts[4]),
        subnormals: total(&counts[5]),
    }
}
