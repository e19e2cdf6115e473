//! The storage points: where a value computed in f32 is rounded to the recipe's format, counted,
//! checked for inf/NaN and (on capture steps) observed before rounding.
//!
//! Every layer sends each tensor it stores through [`Precision::store`] with its [`Class`]; matrix
//! products go through [`Precision::matmul`] so that the recipe's accumulation rule applies. The
//! layers never look at the recipe themselves.

use std::collections::BTreeMap;

use ndarray::{Array2, ArrayView2, Axis};

use block::BlockCast;
use cursor::Cursor;
use formats::{Formats, Rounders};
use ledger::Ledger;
use probes::Probes;
use scales::Fp8Scales;
use stream::Stream;

use super::capture::{Observer, Seen};
use super::real::Real;
use crate::format::RoundCounts;
use crate::recipe::{Accumulation, Recipe};
use crate::recipe::{Class, Site, SiteKey, StoreCounts};
#[cfg(doc)]
use crate::scaling::delayed::{DelayedScale, Fp8Scaling};

mod accumulate;
pub mod block;
mod cursor;
mod formats;
mod ledger;
mod probes;
mod product;
mod scales;
mod stream;
pub use accumulate::{matmul_rounded, matmul_rounded_reference};
pub use product::{K_BLOCK, gemm, gemm_reference};

/// Rounds, counts and checks values at the storage points of one model under one recipe.
///
/// Layers are registered once ([`Precision::register`]) and the model says which one is running
/// ([`Precision::enter`]); counts and the first non-finite site are per step
/// ([`Precision::begin_step`]).
///
/// A hub of small parts, each with its own tests: the rounders of each layer (`formats`), the
/// site cursor (`cursor`), the step's counts (`ledger`), the stochastic-rounding stream
/// (`stream`), the fp8 delayed scales (`scales`) and the capture observer and gradient taps
/// (`probes`). The hub's store runs them in order.
#[derive(Debug)]
pub struct Precision {
    recipe: Recipe,
    rounders: Rounders,
    cursor: Cursor,
    ledger: Ledger,
    stream: Stream,
    /// Whether stores are counted ([`Precision::set_recording`]).
    recording: bool,
    scales: Fp8Scales,
    probes: Probes,
    /// Every block cast made: class, tensor, shape and the axis its blocks ran along (what the
    /// tests of the layers' casts read).
    #[cfg(test)]
    block_casts: Vec<(Class, &'static str, (usize, usize), usize)>,
}

impl Precision {
    /// Storage points of `recipe`, with `seed` for stochastic rounding. A layer registered
    /// under a name that one of the recipe's `keep` patterns matches rounds as that pattern's
    /// recipe says ([`Recipe::for_layer`]).
    #[must_use]
    pub fn new(recipe: &Recipe, seed: u64) -> Self {
        Precision::with_rounders(recipe, Rounders::new(recipe, seed))
    }

    fn with_rounders(recipe: &Recipe, rounders: Rounders) -> Self {
        Precision {
            recipe: recipe.clone(),
            rounders,
            cursor: Cursor::default(),
            ledger: Ledger::default(),
            stream: Stream::default(),
            recording: true,
            scales: Fp8Scales::default(),
            probes: Probes::default(),
            #[cfg(test)]
            block_casts: Vec::new(),
        }
    }

    /// No rounding anywhere: the reference the gradient checks use.
    #[must_use]
    pub fn exact() -> Self {
        Precision::with_rounders(&Recipe::fp32(), Rounders::exact())
    }

    /// The recipe.
    #[must_use]
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Adds a layer (storage-point owner) called `name` and returns its index; the layer rounds
    /// as the first of the recipe's `keep` patterns that matches `name` says, or as the recipe.
    pub fn register(&mut self, name: &str) -> usize {
        self.rounders.add_layer(name);
        self.cursor.register(name)
    }

    /// The name of the recipe whose formats layer `layer` runs (its `keep` pattern's, or the
    /// recipe's).
    #[must_use]
    pub fn layer_recipe(&self, layer: usize) -> &str {
        &self.rounders.of(layer).recipe.name
    }

    /// Checks that every `keep` pattern of the recipe matched a registered layer (call once the
    /// model is built).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] naming the first pattern that matched none, and a few of
    /// the layers' names.
    pub fn check_keep(&self) -> crate::Result<()> {
        let Some(pattern) = self.rounders.unmatched_keep() else {
            return Ok(());
        };
        let layers = self.cursor.layers();
        let mut some: Vec<&str> = layers.iter().map(String::as_str).take(6).collect();
        if layers.len() > some.len() {
            some.push("...");
        }
        Err(crate::Error::Unsupported {
            what: format!("keep pattern '{pattern}'"),
            problem: format!(
                "matches no layer of the model (its layers: {})",
                some.join(", ")
            ),
        })
    }

    /// The formats of the current layer.
    fn here(&self) -> &Formats {
        self.rounders.of(self.cursor.layer())
    }

    /// The registered layer names, by index.
    #[must_use]
    pub fn layers(&self) -> &[String] {
        self.cursor.layers()
    }

    /// Makes layer `index` the owner of the following stores (of the whole class: the part is
    /// reset).
    pub fn enter(&mut self, index: usize) {
        self.cursor.enter(index);
    }

    /// Names the tensor the following stores of the current layer hold (a parameter's
    /// `"weight"` or `"bias"`, an LSTM's `"gates"`...), so that each tensor has its own fp8
    /// scale and amax history, as each tensor has its own scaling factor in Transformer Engine.
    /// Counts and captures stay per (layer, class, part). Until the next [`Precision::enter`].
    pub fn set_tensor(&mut self, tensor: &'static str) {
        self.cursor.set_tensor(tensor);
    }

    /// Names the part of a class the following stores of the current layer hold, when a layer
    /// stores several tensors of one class (the optimizer's state: `"adam_m"`, `"adam_v"`...):
    /// each part is counted, captured and (fp8) scaled on its own. Until the next
    /// [`Precision::enter`].
    pub fn set_part(&mut self, part: &'static str) {
        self.cursor.set_part(part);
    }

    /// Clears the per-step counts and the first non-finite site, and updates the fp8 scales
    /// from the step that ended ([`Precision::update_fp8_scales`]).
    pub fn begin_step(&mut self) {
        self.update_fp8_scales();
        self.ledger.clear();
        self.probes.clear_taps();
    }

    /// This step's matrix-product FLOPs per layer that formed products (`2 m n k` per product of
    /// an `m x k` and a `k x n` matrix: forward and backward, as the step ran them).
    #[must_use]
    pub fn product_flops(&self) -> &BTreeMap<usize, u64> {
        self.ledger.flops()
    }

    /// This step's counts per tensor class, summed over layers (classes with no store absent).
    #[must_use]
    pub fn class_counts(&self) -> BTreeMap<Class, StoreCounts> {
        self.ledger.class_counts()
    }

    /// The largest finite magnitude stored this step as an activation or weight gradient, before
    /// rounding (in f32, as computed: a sum of already rounded values can itself be a value of
    /// the format, as a bias gradient summed from fp16 subnormals is), divided by the loss scale
    /// `scale`; `None` when there was none.
    #[must_use]
    pub fn grad_amax_unscaled(&self, scale: f32) -> Option<f64> {
        let amax = self.ledger.grad_amax();
        (amax > 0.0).then(|| amax / f64::from(scale))
    }

    /// Whether a gradient stored this step held an inf or NaN before rounding: formed upstream
    /// (an earlier store that overflowed, a non-finite loss), it hid the values of the gradients
    /// it reached, so [`Precision::grad_amax_unscaled`] is a lower bound of what they would be at
    /// a smaller scale.
    #[must_use]
    pub fn grad_nonfinite(&self) -> bool {
        self.ledger.grad_nonfinite()
    }

    /// Turns on (or off) keeping a copy of every gradient stored (after rounding), per layer and
    /// class, for comparison with an FP32 shadow step ([`Precision::take_taps`]); cleared by
    /// [`Precision::begin_step`].
    pub fn set_taps(&mut self, on: bool) {
        self.probes.set_taps(on);
    }

    /// The gradients kept since the step began (in store order within a layer and class).
    pub fn take_taps(&mut self) -> BTreeMap<(usize, Class), Vec<f32>> {
        self.probes.take_taps()
    }

    /// Whether stores are counted (off during evaluation, so that eval passes do not mix into
    /// the training step's counts; values are rounded either way). Turning recording back on
    /// also rewinds the stochastic-rounding stream to where it was turned off, so an evaluation
    /// pass leaves training exactly as it would have been without it.
    pub fn set_recording(&mut self, on: bool) {
        if self.recording && !on {
            self.stream.pause();
        } else if !self.recording && on {
            self.stream.resume();
        }
        self.recording = on;
    }

    /// Installs (or removes) the observer that sees values before rounding on capture steps.
    pub fn set_observer(&mut self, observer: Option<Observer>) {
        self.probes.set_observer(observer);
    }

    /// Takes the observer back with what it saw.
    pub fn take_observer(&mut self) -> Option<Observer> {
        self.probes.take_observer()
    }

    /// This step's rounding counts of layer `layer` and class `class` (all parts).
    #[must_use]
    pub fn counts(&self, layer: usize, class: Class) -> RoundCounts {
        self.ledger.counts(layer, class)
    }

    /// This step's rounding counts of one storage point.
    #[must_use]
    pub fn part_counts(&self, key: SiteKey) -> RoundCounts {
        self.ledger.part_counts(key)
    }

    /// The first storage point this step where a stored value was inf or NaN.
    #[must_use]
    pub fn first_nonfinite(&self) -> Option<Site> {
        self.ledger.first_nonfinite().map(|(layer, tensor)| Site {
            layer: self.layers().get(layer).cloned().unwrap_or_default(),
            tensor,
            op: None,
        })
    }

    /// Whether a value stored this step as class `class` of layer `layer` was inf or NaN.
    #[must_use]
    pub fn stored_nonfinite(&self, layer: usize, class: Class) -> bool {
        self.ledger.stored_nonfinite(layer, class)
    }

    /// Whether class `class` is rounded (its format is not fp32, or is a block format).
    #[must_use]
    pub fn rounds(&self, class: Class) -> bool {
        self.here().rounds(class)
    }

    /// Stores `xs` as class `class` of the current layer: observes it (capture steps), rounds it
    /// to the class's format (with per-tensor scaling for 8-bit formats when the recipe says so),
    /// counts what rounding did and notes the first inf/NaN. A block-scaled class rounds `xs` as
    /// one row ([`Precision::operand`] stores matrices of it).
    pub fn store<T: Real>(&mut self, class: Class, xs: &mut [T]) {
        self.store_shaped(class, xs, xs.len());
    }

    /// [`Precision::store`] of a row-major matrix of `cols` columns (which only a block cast
    /// reads: its blocks run along the rows).
    fn store_shaped<T: Real>(&mut self, class: Class, xs: &mut [T], cols: usize) {
        let key = self.cursor.key(class);
        // Unrounded master weights are exactly what the weight copy sees before rounding (the
        // copy is taken from them), so observing them too would capture the same tensor twice.
        let duplicate = class == Class::Master && !self.rounds(Class::Master);
        let seen = (self.recording && !duplicate)
            .then(|| self.probes.observe(key, xs))
            .flatten();
        let gradient = matches!(class, Class::ActivationGrad | Class::WeightGrad);
        // Gradients get one pass before rounding for their largest finite magnitude; unrounded,
        // that pass is also their finiteness check. On capture steps the histogram just formed
        // has both (when it shows the amax), and the values before rounding are checked by it.
        let mut finite_before = seen.map(|s| s.nonfinite == 0);
        if self.recording && gradient {
            let (amax, finite) = match seen {
                Some(Seen {
                    nonfinite,
                    amax: Some(amax),
                }) => (amax, nonfinite == 0),
                _ => T::finite_amax(xs),
            };
            self.ledger.gradient(amax, finite);
            finite_before = Some(finite);
        }
        let here = self.here();
        let (rounder, block) = (here.rounder(class), here.block(class));
        let fp8_scaling = here.recipe.fp8_scaling.is_some();
        let mut finite_after = None;
        if let Some(block) = block {
            self.round_blocks(&block, key, xs, cols);
            return;
        }
        if self.recording {
            self.ledger.stored(class, xs.len(), 0);
        }
        if let Some(rounder) = rounder {
            let fp8 = fp8_scaling && rounder.format().total_bits() <= 8;
            let start = self.stream.take(xs.len());
            let counts = if fp8 {
                let tensor = self.cursor.tensor();
                (self.scales).round(&rounder, key, tensor, xs, start, self.recording)
            } else {
                T::round_slice_at(&rounder, xs, start)
            };
            // Plain rounding turns a finite input into a non-finite result only by overflowing,
            // so without non-finite inputs or overflow the rounding's counts prove the result
            // finite and the pass below is skipped. (Scaled fp8 rounding multiplies after
            // rounding, and saturating overflow stays finite: those are checked.)
            if !fp8 && counts.nan + counts.infinite + counts.overflow == 0 {
                finite_after = Some(true);
            }
            if self.recording {
                self.ledger
                    .rounded(key, counts, counts.nan + counts.infinite);
            }
        }
        if !self.recording {
            return;
        }
        let finite = match (rounder, finite_before, finite_after) {
            (None, Some(finite), _) | (Some(_), _, Some(finite)) => finite,
            _ => T::all_finite(xs),
        };
        if !finite {
            if rounder.is_none() {
                let bad = xs.iter().filter(|v| !v.is_finite()).count();
                self.ledger.stored(class, 0, bad as u64);
            }
            self.ledger.mark_nonfinite(key.layer, class);
        }
        if gradient {
            self.probes.tap(key.layer, class, xs);
        }
    }

    /// The rounding, counting and checks of [`Precision::store_shaped`] for a block cast at
    /// storage point `key`: the inf/NaN check comes before rounding, since a block holding one
    /// becomes NaN throughout (and a block cast of finite values is finite: its elements
    /// saturate).
    fn round_blocks<T: Real>(
        &mut self,
        block: &BlockCast,
        key: SiteKey,
        xs: &mut [T],
        cols: usize,
    ) {
        let finite = T::all_finite(xs);
        let bad = if finite {
            0
        } else {
            xs.iter().filter(|v| !v.is_finite()).count() as u64
        };
        let counts = block.round(xs, cols, self.stream.take(xs.len()));
        if !self.recording {
            return;
        }
        self.ledger.stored(key.class, xs.len(), 0);
        self.ledger.rounded(key, counts, bad);
        if !finite {
            self.ledger.mark_nonfinite(key.layer, key.class);
        }
    }

    /// Whether storing a tensor of class `class` would only count it and check it for inf/NaN:
    /// the class is not rounded, not a gradient (whose store also takes its largest magnitude
    /// and keeps taps), and nothing observes the store. A layer that computes such a tensor can
    /// then check it in the pass that writes it and record it with [`Precision::note_store`],
    /// instead of a second pass over it in [`Precision::store`].
    #[must_use]
    pub fn check_only(&self, class: Class) -> bool {
        !self.rounds(class)
            && !self.probes.capturing()
            && !matches!(class, Class::ActivationGrad | Class::WeightGrad)
    }

    /// Records a store of `len` values of class `class` at the current layer, `nonfinite` of them
    /// inf or NaN, that the caller checked itself where [`Precision::check_only`] holds: the
    /// counts and non-finite sites that [`Precision::store`] of those values records.
    pub fn note_store(&mut self, class: Class, len: usize, nonfinite: u64) {
        debug_assert!(self.check_only(class), "note_store where a store does more");
        if !self.recording {
            return;
        }
        self.ledger.stored(class, len, nonfinite);
        if nonfinite > 0 {
            self.ledger.mark_nonfinite(self.cursor.layer(), class);
        }
    }

    /// [`Precision::store`] for a whole array (which must be in standard layout; the arrays the
    /// layers make are).
    pub fn store_array<T: Real>(&mut self, class: Class, xs: &mut Array2<T>) {
        match xs.as_slice_mut() {
            Some(s) => self.store(class, s),
            None => {
                let mut owned = xs.as_standard_layout().into_owned();
                self.store(class, owned.as_slice_mut().unwrap_or(&mut []));
                *xs = owned;
            }
        }
    }

    /// On capture steps, records the ratios `|w| / |u|` of the current layer's master weights
    /// `weights` (before the update) to the nonzero updates `updates`.
    pub fn observe_updates<T: Real>(&mut self, weights: &[T], updates: &[T]) {
        if self.recording {
            (self.probes).observe_updates(self.cursor.layer(), weights, updates);
        }
    }

    /// Whether an observer is installed (a capture step).
    #[must_use]
    pub fn capturing(&self) -> bool {
        self.probes.capturing()
    }

    /// One scalar stored as class `class` (Adam's epsilon, say); returns the stored value.
    pub fn store_scalar<T: Real>(&mut self, class: Class, x: T) -> T {
        let mut v = [x];
        self.store(class, &mut v);
        v[0]
    }

    /// Ends a step for fp8 scaling: each tensor's [`DelayedScale::end_step`] (the scales, each
    /// `round(x * scale) / scale` with a scale from earlier steps: [`Fp8Scaling`]). Called by
    /// [`Precision::begin_step`]; the first step's scale is 1, as Transformer Engine's.
    pub fn update_fp8_scales(&mut self) {
        let rounders = &self.rounders;
        (self.scales).end_step(|layer| rounders.of(layer).recipe.fp8_scaling);
    }

    /// The fp8 scale the next store of tensor `tensor` of class `class` at `key`'s layer and
    /// part will use (1 before its first step ends), and its amax history, oldest first.
    #[must_use]
    pub fn fp8_scale(&self, key: SiteKey, tensor: &'static str) -> Option<(f32, Vec<f32>)> {
        self.scales.get(key, tensor)
    }

    /// The tensors with fp8 scaling state: storage point and tensor name.
    pub fn fp8_tensors(&self) -> impl Iterator<Item = (SiteKey, &'static str)> + '_ {
        self.scales.tensors()
    }

    /// A matrix product's operand `x` of class `class` ([`Class::GemmInput`],
    /// [`Class::GemmWeight`] or [`Class::GemmGradOutput`]), tensor `tensor` of the current layer,
    /// cast to the recipe's operand format just before a product that sums over its axis
    /// `reduce`, as Transformer Engine's Linear casts its input, weight and output gradient to
    /// FP8 (`_get_quantizers` in `transformer_engine/pytorch/module/linear.py`): `None` when
    /// that format is FP32 (the product reads `x` as stored), otherwise the rounded copy, stored,
    /// counted and captured like any store. A number format casts the whole tensor (with the
    /// tensor's fp8 scale) whatever `reduce` is; a block format casts blocks along `reduce`
    /// ([`block`]).
    pub fn operand<T: Real>(
        &mut self,
        class: Class,
        tensor: &'static str,
        x: ArrayView2<'_, T>,
        reduce: Axis,
    ) -> Option<Array2<T>> {
        if !self.rounds(class) {
            return None;
        }
        let saved = self.cursor.set_tensor(tensor);
        let copy = if self.casts_per_product(class) {
            self.store_blocks(class, x, reduce)
        } else {
            let mut copy = x.as_standard_layout().into_owned();
            self.store_array(class, &mut copy);
            copy
        };
        self.cursor.set_tensor(saved);
        Some(copy)
    }

    /// `a b` (counted in this step's [`Precision::product_flops`]) with the recipe's accumulation rule for an output of class `class`: an f32 GEMM
    /// (FP32 accumulation), or with [`Accumulation::Storage`] and a rounded class, the running sum
    /// of each output rounded to the class's format after every multiply-add. The result is not
    /// yet stored (call [`Precision::store_array`]).
    #[must_use]
    pub fn matmul<T: Real>(
        &mut self,
        a: ArrayView2<T>,
        b: ArrayView2<T>,
        class: Class,
    ) -> Array2<T> {
        if self.recording {
            let flops = 2 * (a.nrows() * a.ncols() * b.ncols()) as u64;
            self.ledger.product(self.cursor.layer(), flops);
        }
        match (self.recipe.accumulation, self.here().rounder(class)) {
            (Accumulation::Storage, Some(rounder)) => matmul_rounded(a, b, &rounder),
            _ => gemm(a, b),
        }
    }

    /// Column sums of `a` (the sum over the batch of a bias gradient) for an output of class
    /// `class`: in FP32, or accumulated in the class's format when the recipe's
    /// [`crate::recipe::Fp32Ops::reductions`] is off.
    #[must_use]
    pub fn sum_rows<T: Real>(&self, a: ArrayView2<T>, class: Class) -> Array2<T> {
        match (self.recipe.fp32_ops.reductions, self.here().rounder(class)) {
            (false, Some(rounder)) => {
                let ones = Array2::from_elem((1, a.nrows()), T::one());
                matmul_rounded(ones.view(), a, &rounder)
            }
            _ => a.sum_axis(Axis(0)).insert_axis(Axis(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FP16, FloatFormat, RoundOptions, Rounder};

    fn representable(format: FloatFormat, xs: &[f32]) -> bool {
        let r = Rounder::new(format, RoundOptions::default());
        xs.iter().all(|&x| r.round(f64::from(x)) == f64::from(x))
    }

    #[test]
    fn store_rounds_counts_and_finds_the_first_nonfinite() {
        let recipe = Recipe::preset("fp16-master").unwrap();
        let mut p = Precision::new(&recipe, 0);
        let a = p.register("a");
        let b = p.register("b");
        p.enter(a);
        let mut xs = vec![1.0f32 + 1e-4, 1e-9, 1e-6, 70000.0];
        p.store(Class::Activation, &mut xs);
        assert!(representable(FP16, &xs));
        let c = p.counts(a, Class::Activation);
        assert_eq!((c.underflow, c.subnormal, c.overflow), (1, 1, 1));
        assert_eq!(
            p.first_nonfinite(),
            Some(Site {
                layer: "a".into(),
                tensor: Class::Activation,
                op: None,
            })
        );
        // Master weights are fp32 in this recipe: stored untouched.
        p.enter(b);
        let mut m = vec![1.0f32 + 1e-4];
        p.store(Class::Master, &mut m);
        assert_eq!(m[0], 1.0f32 + 1e-4);
        p.begin_step();
        assert_eq!(p.counts(a, Class::Activation), RoundCounts::default());
        assert_eq!(p.first_nonfinite(), None);
    }

    /// On capture steps a gradient's amax and finiteness come from its histogram; where the
    /// histogram cannot show the amax (an observer kept over two steps, a smaller tensor the
    /// second time), the store takes it from the values: a step's `grad_amax` is its own.
    #[test]
    fn captured_gradients_give_their_own_amax_and_finiteness() {
        let recipe = Recipe::preset("fp32").unwrap();
        let mut p = Precision::new(&recipe, 0);
        let a = p.register("a");
        p.set_observer(Some(Observer::default()));
        for (xs, amax, finite) in [
            (vec![4.0f32, -1.0], 4.0, true),
            (vec![2.0f32, f32::NAN], 2.0, false),
            (vec![-8.0f32, 0.5], 8.0, true),
            (vec![f32::INFINITY, 0.0], 0.0, false),
        ] {
            p.begin_step();
            p.enter(a);
            let mut g = xs.clone();
            p.store(Class::WeightGrad, &mut g);
            assert_eq!(
                p.grad_amax_unscaled(1.0),
                (amax > 0.0).then_some(amax),
                "{xs:?}"
            );
            assert_eq!(p.stored_nonfinite(a, Class::WeightGrad), !finite, "{xs:?}");
            assert_eq!(p.first_nonfinite().is_some(), !finite, "{xs:?}");
        }
    }

    #[test]
    fn storage_accumulation_loses_small_addends() {
        // 1 + 4096 * 2^-12 in fp16: each addend is below half an ulp of the running sum (2^-11 at
        // 1), so the fp16 sum stays at 1 while the f32 sum is 2.
        let k = 4096;
        let a = Array2::from_shape_fn(
            (1, k + 1),
            |(_, j)| if j == 0 { 1.0f32 } else { 2f32.powi(-12) },
        );
        let b = Array2::from_elem((k + 1, 1), 1.0f32);
        let mut recipe = Recipe::preset("fp16-master").unwrap();
        let fast = Precision::new(&recipe, 0).matmul(a.view(), b.view(), Class::Activation);
        assert_eq!(fast[[0, 0]], 2.0);
        recipe.accumulation = Accumulation::Storage;
        let slow = Precision::new(&recipe, 0).matmul(a.view(), b.view(), Class::Activation);
        assert_eq!(slow[[0, 0]], 1.0);
        recipe.fp32_ops.reductions = false;
        let col = Precision::new(&recipe, 0).sum_rows(a.t(), Class::WeightGrad);
        assert_eq!(col[[0, 0]], 1.0);
    }
}

#[cfg(test)]
mod block_tests;
#[cfg(test)]
mod fp8_tests;
