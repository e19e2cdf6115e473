//! The instruction sets the vector kernels are compiled for, and the one run-time check of
//! which this CPU has: every kernel module dispatches on [`Isa::best`] (or a narrower `Isa` in
//! tests and benches) to its `#[target_feature]` builds of one generic loop.

/// The instruction sets the kernels are compiled for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// Whatever the crate is compiled for.
    Baseline,
    /// AVX2.
    Avx2,
    /// AVX-512 (F, BW, DQ, VL).
    Avx512,
}

impl Isa {
    /// The widest one this CPU has.
    pub fn best() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
                return Isa::Avx512;
            }
            if has!("avx2") {
                return Isa::Avx2;
            }
        }
        Isa::Baseline
    }

    /// Every one this CPU has.
    #[cfg(test)]
    pub fn available() -> Vec<Isa> {
        match Isa::best() {
            Isa::Avx512 => vec![Isa::Baseline, Isa::Avx2, Isa::Avx512],
            Isa::Avx2 => vec![Isa::Baseline, Isa::Avx2],
            Isa::Baseline => vec![Isa::Baseline],
        }
    }
}
