//! The training core's FP32-accumulating matrix product, summed in an order that depends on the
//! shapes alone, so that it gives the same bits on every machine and for any thread count.
//!
//! Each output element is a chain of fused multiply-adds over the inner dimension, restarted
//! every [`K_BLOCK`] terms, the blocks' sums added in order:
//! ```text
//! s_b   = fma(a[i, l_n], b[l_n, j], ... fma(a[i, l_1], b[l_1, j], fma(a[i, l_0], b[l_0, j], +0)))
//!         over l_0 < l_1 < ... < l_n, the indices of block b = [K_BLOCK b, K_BLOCK (b + 1)) ∩ [0, k)
//! c[i,j] = (...((s_0 + s_1) + s_2) + ...)
//! ```
//! Fused multiply-add and addition are correctly rounded (IEEE 754), so this defines every bit of
//! the result. The `gemm` crate's register-tile kernels (AVX2 or AVX-512 on x86-64, NEON on
//! aarch64, any tile size) compute each element as such a chain over one k-block, but they choose
//! the k-block from the CPU's L1 cache (its size and associativity: `kernel_params` in
//! `gemm-common`), so the same product summed in one block of 1,024 on one machine and in two of
//! 512 on another. That choice is never below `min(k, 512)`, so [`gemm()`] calls the crate once per
//! block of [`K_BLOCK`] = 512, the first writing the output and each later one adding its sum to
//! it. The shapes where the crate would use other kernels (products with at most 256 outputs
//! and a contiguous inner dimension, whose horizontal kernels keep one partial sum per SIMD lane;
//! matrix-vector products; blocks of at most two terms; x86-64 CPUs without FMA, where its
//! scalar kernel rounds the product and the sum separately) go through [`gemm_reference`], the
//! same order in plain loops. `gemm_matches_the_fixed_order` (below) checks every path bit for
//! bit against an independent loop in that order.
//!
//! What was read in the source of `gemm` 0.19.0 with its `x86-v4` feature (`gemm-common` and
//! `gemm-f32` 0.19.0; the same code as 0.18.2 but for the feature's name, `nightly` there, and
//! `pulp` 0.22 for the feature detection):
//! - dispatch (`gemm_def!` in `gemm-common/src/gemm.rs`): the `avx512f` kernels on a CPU with
//!   AVX-512F, else the `fma` (AVX2) ones on a CPU with FMA, else the scalar ones;
//! - both x86 kernel sets are instances of one macro (`microkernel!` in
//!   `gemm-common/src/microkernel.rs`; 8 lanes, tiles up to 16x6, k unrolled 2 for AVX2; 16
//!   lanes, tiles up to 64x6, k unrolled 4 for AVX-512): one accumulator per output, from zero,
//!   updated by one `_mm256_fmadd_ps` / `_mm512_fmadd_ps` per term in increasing k (the
//!   unrolling repeats the step in sequence; it does not split the chain), then written as
//!   `fma(1, acc, dst)` (edge tiles: `f32::mul_add`, fused too) or `1 acc`;
//! - the k-block (`kernel_params` in `gemm-common/src/cache.rs`, unchanged since 0.18.2):
//!   `max(L1-derived, 512).min(k)`, then `k` split evenly, so one block of `k` for `k <= 512`;
//!   the shortcut for `m, n <= 64` takes `k.min(512)`;
//! - the other kernels, taken before the tile kernels and routed to [`gemm_reference`] here:
//!   horizontal kernels (AVX2 2x2, AVX-512 4x4) for `m n <= 256` with contiguous `lhs` rows and
//!   `rhs` columns, `gevv` for `k <= 2`, `gemv` for `m <= 1` or `n <= 1`;
//! - the crate's own threads split the output (rows and columns of tiles), never `k`; [`gemm()`]
//!   does not use them: it cuts the output into one piece per rayon thread itself
//!   (`gemm_parts`), each piece computed by the crate's single-threaded kernels.

use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis, Zip, s};

use crate::train::real::Real;

/// The k-block of the summation order (see the module docs). Every figure the training core
/// produces depends on it: changing it changes results in the last bits.
pub const K_BLOCK: usize = 512;

/// Products at least this large (m n k) run on all of rayon's threads.
const PARALLEL_GEMM: usize = 1 << 18;

/// Outputs at most this many (with a contiguous inner dimension) take the `gemm` crate's
/// horizontal kernels, whose summation order depends on the SIMD width.
const HORIZONTAL_OUTPUTS: usize = 16 * 16;

/// `a b` in the scalar's own arithmetic (FP32 accumulation for f32), summed in the fixed order of
/// the module docs: bit-identical on every machine and for any thread count. Large products run
/// on all of rayon's threads.
///
/// # Panics
/// If the inner dimensions differ.
#[must_use]
pub fn gemm<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert_eq!(k, b.nrows(), "gemm: inner dimensions differ");
    if m < 2 || n < 2 || m * n <= HORIZONTAL_OUTPUTS || k <= 2 || !fused_kernels() {
        return gemm_reference(a, b);
    }
    // A last block of one or two terms would take the crate's vector-vector kernel: the
    // reference adds it below (k > 2, so it is never the first).
    let tail = if k > K_BLOCK && k % K_BLOCK <= 2 {
        k % K_BLOCK
    } else {
        0
    };
    let threads = rayon::current_num_threads();
    let parts = if m * n * k >= PARALLEL_GEMM {
        threads
    } else {
        1
    };
    let mut c = Array2::<T>::uninit((m, n));
    let body = s![.., ..k - tail];
    gemm_parts(
        a.slice(body),
        b.slice(s![..k - tail, ..]),
        c.view_mut(),
        parts,
    );
    // SAFETY: the parts cover every element of `c`, and each part's first block (at least 3
    // terms, since k > 2) wrote every element of it.
    let mut c = unsafe { c.assume_init() };
    if tail > 0 {
        add_block_reference(
            a.slice(s![.., k - tail..]),
            b.slice(s![k - tail.., ..]),
            c.view_mut(),
        );
    }
    c
}

/// Output tiles of the crate's AVX-512 kernels (64 rows by 6 columns; its AVX2 ones are 16 or
/// 32 by 6): the parts of a split output are whole tiles but for the last.
const TILE: (usize, usize) = (64, 6);

/// `c = a b` on `parts` of rayon's threads: `c` is cut into `parts` pieces along its longer side,
/// each computed by one thread with the crate's single-threaded kernels over every k-block (its
/// own packing, no hand-offs between the blocks). Threads split the output, never `k`, so each
/// element is the same chain whatever the cut. A piece is cut only where both halves keep two
/// rows and columns and more outputs than the horizontal kernels take (the tile kernels' shapes).
fn gemm_parts<T: Real>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    c: ArrayViewMut2<'_, std::mem::MaybeUninit<T>>,
    parts: usize,
) {
    let (m, n) = c.dim();
    let (axis, long, short, tile) = if m >= n {
        (Axis(0), m, n, TILE.0)
    } else {
        (Axis(1), n, m, TILE.1)
    };
    let first = parts / 2;
    let cut = (long * first / parts.max(1)).div_ceil(tile) * tile;
    let smaller = cut.min(long - cut.min(long));
    if parts < 2 || smaller < 2 || smaller * short <= HORIZONTAL_OUTPUTS {
        return gemm_one(a, b, c);
    }
    let (c1, c2) = c.split_at(axis, cut);
    let (p1, p2) = (first, parts - first);
    if axis == Axis(0) {
        let (a1, a2) = a.split_at(Axis(0), cut);
        rayon::join(|| gemm_parts(a1, b, c1, p1), || gemm_parts(a2, b, c2, p2));
    } else {
        let (b1, b2) = b.split_at(Axis(1), cut);
        rayon::join(|| gemm_parts(a, b1, c1, p1), || gemm_parts(a, b2, c2, p2));
    }
}

/// `c = a b` on this thread, one call of the crate per [`K_BLOCK`], the first writing `c` and
/// each later one adding its sum to it.
fn gemm_one<T: Real>(
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    mut c: ArrayViewMut2<'_, std::mem::MaybeUninit<T>>,
) {
    let ((m, k), n) = (a.dim(), b.ncols());
    let (c_rs, c_cs) = (c.strides()[0], c.strides()[1]);
    let c_ptr = c.as_mut_ptr().cast::<T>();
    for start in (0..k).step_by(K_BLOCK) {
        let depth = K_BLOCK.min(k - start);
        let (a_block, b_block) = (
            a.slice(s![.., start..start + depth]),
            b.slice(s![start..start + depth, ..]),
        );
        // SAFETY: `c` is an m x n view with strides (c_rs, c_cs) of memory no other thread
        // touches, not aliasing the operands; `a_block` (m x depth) and `b_block` (depth x n)
        // are live views whose pointers and element strides describe exactly their elements.
        // The first block has `read_dst` false: `c` is only written, every element of it
        // (dst = 0 dst + 1 a b); each later block reads what the earlier ones wrote and adds its
        // sum with one rounding (the crate's kernels form dst + 1 s with a fused multiply-add).
        unsafe {
            ::gemm::gemm(
                m,
                n,
                depth,
                c_ptr,
                c_cs,
                c_rs,
                start > 0,
                a_block.as_ptr(),
                a_block.strides()[1],
                a_block.strides()[0],
                b_block.as_ptr(),
                b_block.strides()[1],
                b_block.strides()[0],
                T::one(),
                T::one(),
                false,
                false,
                false,
                ::gemm::Parallelism::None,
            );
        }
    }
}

/// Whether the `gemm` crate's kernels on this CPU use fused multiply-adds: on x86-64 it picks
/// its AVX2+FMA (or AVX-512) kernels when the CPU has FMA and otherwise a scalar kernel that
/// rounds `a b` before adding it; on aarch64 its NEON kernels fuse.
fn fused_kernels() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// [`gemm()`] by plain loops in the same order, for the shapes the `gemm` crate's register-tile
/// kernels do not take (and the order's reference): each element's chain of fused multiply-adds
/// per [`K_BLOCK`], the blocks' sums added in order.
///
/// # Panics
/// If the inner dimensions differ.
#[must_use]
pub fn gemm_reference<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    let ((m, k), n) = (a.dim(), b.ncols());
    assert_eq!(k, b.nrows(), "gemm: inner dimensions differ");
    let mut c = Array2::zeros((m, n));
    for start in (0..k).step_by(K_BLOCK) {
        let end = k.min(start + K_BLOCK);
        add_block_reference(
            a.slice(s![.., start..end]),
            b.slice(s![start..end, ..]),
            c.view_mut(),
        );
    }
    c
}

/// `c += a b` for one k-block: each element's sum over the block is one chain of fused
/// multiply-adds from +0, then added to `c` with one rounding. Compiled with FMA instructions
/// where the CPU has them (a fused multiply-add is correctly rounded either way: same bits).
fn add_block_reference<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>, c: ArrayViewMut2<T>) {
    // The loops run the chains of a row of `c` side by side: make that the longer side (c^T =
    // b^T a^T has the same chains, as a fused multiply-add does not depend on its factors'
    // order).
    if b.ncols() < a.nrows() {
        return add_block_reference(b.reversed_axes(), a.reversed_axes(), c.reversed_axes());
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA, checked just above.
        return unsafe { add_block_fma(a, b, c) };
    }
    add_block_any(a, b, c);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn add_block_fma<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>, c: ArrayViewMut2<T>) {
    add_block_any(a, b, c);
}

/// [`add_block_reference`] for whatever target it is compiled into: the chains of a row
/// advance together, term by term, over contiguous rows of `b` (independent chains, which
/// vectorise).
#[inline(always)]
fn add_block_any<T: Real>(a: ArrayView2<T>, b: ArrayView2<T>, mut c: ArrayViewMut2<T>) {
    let n = b.ncols();
    if n == 0 {
        return;
    }
    let b = b.as_standard_layout();
    let b = b.as_slice().unwrap_or_default();
    let mut sums = vec![T::zero(); n];
    for (a_row, c_row) in a.axis_iter(Axis(0)).zip(c.axis_iter_mut(Axis(0))) {
        sums.fill(T::zero());
        for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
            for (s, &y) in sums.iter_mut().zip(b_row) {
                *s = x.mul_add(y, *s);
            }
        }
        Zip::from(c_row).and(&sums).for_each(|c, &s| *c += s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of the module docs, written out independently: one element at a time, blocks
    /// of 512 (a change of [`K_BLOCK`] changes every result, and must fail here).
    fn fixed_order(a: &Array2<f32>, b: ArrayView2<f32>) -> Array2<f32> {
        let ((m, k), n) = (a.dim(), b.ncols());
        Array2::from_shape_fn((m, n), |(i, j)| {
            let mut c = 0.0f32;
            for block in (0..k).collect::<Vec<_>>().chunks(512) {
                let mut s = 0.0f32;
                for &l in block {
                    s = a[[i, l]].mul_add(b[[l, j]], s);
                }
                c = if block[0] == 0 { s } else { c + s };
            }
            c
        })
    }

    fn same_bits(x: &Array2<f32>, y: &Array2<f32>) -> bool {
        x.dim() == y.dim() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
    }

    #[test]
    fn gemm_matches_the_fixed_order() {
        let mut rng = crate::train::Rng::new(3);
        // The crate's tile kernels with one, two and three k-blocks (last blocks of 1, 2, 3 and
        // 272 terms), edge tiles, the small-product and parallel paths (outputs cut in two and
        // three pieces); the reference for matrix-vector shapes, at most 256 outputs and k <= 2.
        for (m, k, n) in [
            (1, 1, 1),
            (3, 0, 2),
            (7, 5, 3),
            (16, 40, 16),
            (1, 700, 40),
            (40, 700, 1),
            (9, 2, 50),
            (17, 3, 17),
            (64, 300, 70),
            (33, 513, 65),
            (20, 514, 30),
            (20, 515, 30),
            (256, 784, 130),
            (70, 1100, 9),
            (100, 600, 700),
        ] {
            let a = Array2::from_shape_simple_fn((m, k), || rng.normal() as f32);
            let b = Array2::from_shape_simple_fn((n, k), || rng.normal() as f32);
            // A transposed operand, as the layers pass them, and a standard-layout one.
            let want = fixed_order(&a, b.t());
            let b_standard = b.t().as_standard_layout().into_owned();
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (c, c_standard, reference) = pool.install(|| {
                    (
                        gemm(a.view(), b.t()),
                        gemm(a.view(), b_standard.view()),
                        gemm_reference(a.view(), b.t()),
                    )
                });
                // The loop as compiled without FMA instructions (what a CPU without FMA runs),
                // over the whole of k when it fits in one block.
                let mut portable = Array2::zeros((m, n));
                if k <= K_BLOCK {
                    add_block_any(a.view(), b.t(), portable.view_mut());
                } else {
                    portable.clone_from(&want);
                }
                for (what, got) in [
                    ("gemm", c),
                    ("gemm, b standard", c_standard),
                    ("reference", reference),
                    ("portable loop", portable),
                ] {
                    assert!(
                        same_bits(&got, &want),
                        "{what} {m}x{k}x{n}, {threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn the_blocking_changes_the_bits() {
        // What made runs differ between machines: the anchor MLP's second layer (k = 1,024)
        // summed in one block (an L1 cache of 48 KiB, 12-way) or in two (32 KiB, 8-way). A test
        // of the order that cannot see this difference would check nothing.
        let mut rng = crate::train::Rng::new(5);
        let a = Array2::from_shape_simple_fn((8, 1024), || rng.normal() as f32);
        let b = Array2::from_shape_simple_fn((1024, 8), || rng.normal() as f32);
        let one_block = Array2::from_shape_fn((8, 8), |(i, j)| {
            (0..1024).fold(0.0f32, |s, l| a[[i, l]].mul_add(b[[l, j]], s))
        });
        assert!(!same_bits(&gemm(a.view(), b.view()), &one_block));
    }
}
