//! Adding the updates to FP32 master weights: the one weight-sized pass of an SGD step (and of
//! every optimizer's update when the master weights are not rounded), written for the
//! vectoriser.
//!
//! Each element is `m' = m + step(s)`, `w = m'`, with four counts: nonzero updates of weights
//! with a nonzero gradient `g`, those of them that left `m` unchanged (lost), and non-finite
//! updates and sums. (An update of a weight without a gradient, weight decay's or momentum's, is
//! not a gradient lost to swamping: counting it would make a run that trains exactly like FP32
//! look swamped.) The counts are kept
//! in lanes of `u32` (a pass over `u64` counters ran two lanes wide) and the loop body is
//! compiled for the baseline target, AVX2 and AVX-512, picked at run time: every build does the
//! same operations per element, so the values and counts are the same on every machine and for
//! any thread count (integer counts add in any order).

use crate::isa::Isa;
use crate::train::real::{Real, zip2_chunks};

/// What one pass counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AddCounts {
    /// Nonzero updates.
    pub nonzero: u64,
    /// Nonzero updates that left their master weight unchanged.
    pub lost: u64,
    /// Updates that are infinite or NaN.
    pub bad_updates: u64,
    /// Sums that are infinite or NaN.
    pub bad_masters: u64,
}

impl AddCounts {
    fn add(self, o: AddCounts) -> AddCounts {
        AddCounts {
            nonzero: self.nonzero + o.nonzero,
            lost: self.lost + o.lost,
            bad_updates: self.bad_updates + o.bad_updates,
            bad_masters: self.bad_masters + o.bad_masters,
        }
    }
}

/// Lanes of the vector loop: 16 f32 fill an AVX-512 register.
const LANES: usize = 16;

/// Elements per run of the `u32` lane counters (far below 2^32 per lane).
const SPAN: usize = 1 << 20;

/// `master[i] += step(src[i])` and `weight[i] = master[i]` for every `i`, counting the updates
/// of weights whose gradient `grad[i]` is nonzero (the four slices paired up to the shortest;
/// `src` may be `grad` itself), on rayon's threads for long slices, with the counts of the
/// module docs.
pub(crate) fn add_updates<T: Real>(
    master: &mut [T],
    weight: &mut [T],
    src: &[T],
    grad: &[T],
    step: impl Fn(T) -> T + Sync,
) -> AddCounts {
    zip2_chunks(
        master,
        weight,
        src,
        grad,
        |m, w, s, g| {
            let mut counts = AddCounts::default();
            for (((m, w), s), g) in m
                .chunks_mut(SPAN)
                .zip(w.chunks_mut(SPAN))
                .zip(s.chunks(SPAN))
                .zip(g.chunks(SPAN))
            {
                counts = counts.add(add_with(Isa::best(), Span { m, w, s, g }, &step));
            }
            counts
        },
        AddCounts::add,
    )
}

/// One span's slices (at most [`SPAN`] elements): master weights, weight copy, what the update
/// is formed from, gradient.
struct Span<'a, T> {
    m: &'a mut [T],
    w: &'a mut [T],
    s: &'a [T],
    g: &'a [T],
}

crate::isa::isa_dispatch! {
    /// One span through the `isa` build.
    fn add_with<T: Real>(span: Span<'_, T>, step: &impl Fn(T) -> T) -> AddCounts =
        |_isa| add_any(span, step)
}

/// The loop, for whatever target it is compiled into: independent lanes, no branches.
#[inline(always)]
fn add_any<T: Real>(span: Span<'_, T>, step: &impl Fn(T) -> T) -> AddCounts {
    let Span { m, w, s, g } = span;
    let n = m.len().min(w.len()).min(s.len()).min(g.len());
    let (m, w, s, g) = (&mut m[..n], &mut w[..n], &s[..n], &g[..n]);
    let mut lanes = [[0u32; LANES]; 4];
    let mut one = |l: usize, m: &mut T, w: &mut T, s: T, g: T| {
        let u = step(s);
        let before = *m;
        let after = before + u;
        *m = after;
        *w = after;
        let moved = (u != T::zero()) & (g != T::zero());
        lanes[0][l] += u32::from(moved);
        lanes[1][l] += u32::from(moved & (after == before));
        lanes[2][l] += u32::from(!u.is_finite());
        lanes[3][l] += u32::from(!after.is_finite());
    };
    let mut mc = m.chunks_exact_mut(LANES);
    let mut wc = w.chunks_exact_mut(LANES);
    let mut sc = s.chunks_exact(LANES);
    let mut gc = g.chunks_exact(LANES);
    for (((m, w), s), g) in (&mut mc).zip(&mut wc).zip(&mut sc).zip(&mut gc) {
        for l in 0..LANES {
            one(l, &mut m[l], &mut w[l], s[l], g[l]);
        }
    }
    let (mt, wt) = (mc.into_remainder(), wc.into_remainder());
    let (st, gt) = (sc.remainder(), gc.remainder());
    for (l, (((m, w), &s), &g)) in mt.iter_mut().zip(wt.iter_mut()).zip(st).zip(gt).enumerate() {
        one(l, m, w, s, g);
    }
    let total = |k: usize| lanes[k].iter().map(|&c| u64::from(c)).sum::<u64>();
    AddCounts {
        nonzero: total(0),
        lost: total(1),
        bad_updates: total(2),
        bad_masters: total(3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same sums and counts as a plain loop, on every build this CPU runs, with zeros,
    /// swamped updates, infinities and NaN, weights without a gradient (a nonzero update, as
    /// weight decay gives, not counted), at lengths around the lanes and the parallel chunks.
    #[test]
    fn matches_a_plain_loop_on_every_build() {
        let mut rng = crate::train::rng::Rng::new(7);
        for n in [0usize, 1, 15, 16, 17, 1023, 70_000, 200_003] {
            let master: Vec<f32> = (0..n).map(|_| (rng.normal() * 4.0) as f32).collect();
            let src: Vec<f32> = (0..n)
                .map(|i| match i % 11 {
                    0 => 0.0,
                    1 => 1e-12,
                    2 if i % 7 == 0 => f32::INFINITY,
                    3 if i % 13 == 0 => f32::NAN,
                    4 if i % 17 == 0 => 3e38,
                    _ => rng.normal() as f32,
                })
                .collect();
            // Every fifth weight has no gradient.
            let grad: Vec<f32> = (0..n)
                .map(|i| if i % 5 == 0 { 0.0 } else { -1.5 })
                .collect();
            let step: fn(f32) -> f32 = |g| -0.5 * (g * 2.0);
            let mut want_m = master.clone();
            let mut want = AddCounts::default();
            for ((m, &x), &g) in want_m.iter_mut().zip(&src).zip(&grad) {
                let u = step(x);
                let before = *m;
                *m += u;
                let moved = u != 0.0 && g != 0.0;
                want.nonzero += u64::from(moved);
                want.lost += u64::from(moved && *m == before);
                want.bad_updates += u64::from(!u.is_finite());
                want.bad_masters += u64::from(!m.is_finite());
            }
            for name in Isa::available() {
                let (mut m, mut w) = (master.clone(), vec![0f32; n]);
                let (s, g) = (&src[..], &grad[..]);
                let got = add_with(
                    name,
                    Span {
                        m: &mut m,
                        w: &mut w,
                        s,
                        g,
                    },
                    &step,
                );
                assert_eq!(got, want, "{name:?}, n = {n}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&m), bits(&want_m), "{name:?}, n = {n}");
                assert_eq!(bits(&w), bits(&want_m), "{name:?}, n = {n}");
            }
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("a pool");
                let (mut m, mut w) = (master.clone(), vec![0f32; n]);
                let got = pool.install(|| add_updates(&mut m, &mut w, &src, &grad, step));
                assert_eq!(got, want, "{threads} threads, n = {n}");
                assert!(
                    m.iter()
                        .zip(&want_m)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                );
            }
        }
    }
}
