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

/// Declares `fn $name(isa: Isa, args..) -> R`, which runs the expression `$run` (a call of one
/// `#[inline(always)]` generic loop, with `$isa` bound to the build's [`Isa`]) compiled for
/// `isa`: the baseline, or a `#[target_feature]` build for AVX2 or AVX-512. The builds may run
/// only on a CPU with their instruction set, which an `Isa` from [`Isa::best`] guarantees.
macro_rules! isa_dispatch {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$($g:ident: $bound:path),*>($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty
        = |$isa:ident| $run:expr
    ) => {
        $(#[$meta])*
        $vis fn $name<$($g: $bound),*>(isa: $crate::isa::Isa, $($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            unsafe fn avx2<$($g: $bound),*>($($arg: $ty),*) -> $ret {
                let $isa = $crate::isa::Isa::Avx2;
                $run
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
            unsafe fn avx512<$($g: $bound),*>($($arg: $ty),*) -> $ret {
                let $isa = $crate::isa::Isa::Avx512;
                $run
            }
            match isa {
                // SAFETY: an `Isa` other than Baseline comes from run-time detection of its
                // features.
                #[cfg(target_arch = "x86_64")]
                $crate::isa::Isa::Avx512 => unsafe { avx512($($arg),*) },
                // SAFETY: as above.
                #[cfg(target_arch = "x86_64")]
                $crate::isa::Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => {
                    let $isa = $crate::isa::Isa::Baseline;
                    $run
                }
            }
        }
    };
}

pub(crate) use isa_dispatch;
