//! The storage points: where a value computed in f32 is rounded to the recipe's format, counted,
//! checked for inf/NaN and (on capture steps) observed before rounding.
//!
//! Every layer sends each tensor it stores through [`Precision::store`] with its [`Class`]; matrix
//! products go through [`Precision::matmul`] so that the recipe's accumulation rule applies. The
//! layers never look at the recipe themselves.

use std::collections::{BTreeMap, BTreeSet};

use ndarray::{Array2, ArrayView2, Axis};

use block::BlockCast;

use super::capture::{Observer, Seen};
use super::real::Real;
use crate::format::{RoundCounts, RoundOptions, Rounder};
use crate::recipe::{Accumulation, Recipe};
use crate::recipe::{Class, Site, SiteKey, StoreCounts};
use crate::scaling::delayed::DelayedScale;
#[cfg(doc)]
use crate::scaling::delayed::Fp8Scaling;

mod accumulate;
pub mod block;
mod product;
pub use accumulate::{matmul_rounded, matmul_rounded_reference};
pub use product::{K_BLOCK, gemm, gemm_reference};

/// Rounds, counts and checks values at the storage points of one model under one recipe.
///
/// Layers are registered once ([`Precision::register`]) and the model says which one is running
/// ([`Precision::enter`]); counts and the first non-finite site are per step
/// ([`Precision::begin_step`]).
#[derive(Debug)]
pub struct Precision {
    recipe: Recipe,
    /// The base recipe's formats, then those of each of its `keep` entries, in order.
    formats: Vec<Formats>,
    /// Which `formats` each registered layer uses.
    layer_formats: Vec<usize>,
    layers: Vec<String>,
    current: usize,
    part: &'static str,
    counts: BTreeMap<SiteKey, RoundCounts>,
    first_nonfinite: Option<(usize, Class)>,
    nonfinite: BTreeSet<(usize, Class)>,
    stream: u64,
    /// The stream position when recording was turned off, restored when it is turned back on.
    paused_stream: u64,
    recording: bool,
    /// The tensor the following stores hold, when a layer stores several of one class (a
    /// parameter's name): each has its own fp8 scale and amax history.
    tensor: &'static str,
    amax: BTreeMap<(SiteKey, &'static str), DelayedScale>,
    observer: Option<Observer>,
    tally: [StoreCounts; Class::ALL.len()],
    grad_amax: f64,
    /// This step's matrix-product FLOPs per layer (`2 m n k` per product).
    flops: BTreeMap<usize, u64>,
    /// Whether a gradient held an inf or NaN before rounding this step (one formed upstream,
    /// hiding the values it reached: `grad_amax` is then a lower bound).
    grad_nonfinite: bool,
    taps: Option<BTreeMap<(usize, Class), Vec<f32>>>,
    /// Every block cast made: class, tensor, shape and the axis its blocks ran along (what the
    /// tests of the layers' casts read).
    #[cfg(test)]
    block_casts: Vec<(Class, &'static str, (usize, usize), usize)>,
}

/// How one recipe rounds each class: the formats of the layers that run it.
#[derive(Debug)]
struct Formats {
    /// The recipe as the layer runs it ([`Recipe::for_layer`] for a kept one).
    recipe: Recipe,
    rounders: [Option<Rounder>; Class::ALL.len()],
    /// The block casts of the operand classes the recipe casts to block formats (whose
    /// `rounders` entry is `None`).
    blocks: [Option<BlockCast>; Class::ALL.len()],
}

impl Formats {
    /// A class stored in fp32 has no rounder: values computed in f32 are already fp32, and in the
    /// f64 reference path such a class is left exact.
    fn new(recipe: Recipe, seed: u64) -> Formats {
        let options = RoundOptions {
            rounding: recipe.rounding,
            overflow: recipe.overflow,
            subnormals: true,
            seed,
        };
        let blocks = Class::ALL.map(|class| {
            recipe
                .block_format(class)
                .map(|format| BlockCast::new(format, options))
        });
        let rounders = Class::ALL.map(|class| {
            let format = recipe.format(class);
            (format != crate::format::FP32 && blocks[class.index()].is_none())
                .then(|| Rounder::new(format, options))
        });
        Formats {
            recipe,
            rounders,
            blocks,
        }
    }
}

impl Precision {
    /// Storage points of `recipe`, with `seed` for stochastic rounding. A layer registered
    /// under a name that one of the recipe's `keep` patterns matches rounds as that pattern's
    /// recipe says ([`Recipe::for_layer`]).
    #[must_use]
    pub fn new(recipe: &Recipe, seed: u64) -> Self {
        let base = Recipe {
            keep: crate::recipe::Keep::default(),
            ..recipe.clone()
        };
        let formats = std::iter::once(Formats::new(base, seed))
            .chain(
                recipe
                    .keep
                    .0
                    .iter()
                    .map(|(_, kept)| Formats::new(recipe.for_layer(kept), seed)),
            )
            .collect();
        Precision {
            recipe: recipe.clone(),
            formats,
            layer_formats: Vec::new(),
            layers: Vec::new(),
            current: 0,
            part: "",
            counts: BTreeMap::new(),
            first_nonfinite: None,
            nonfinite: BTreeSet::new(),
            stream: 0,
            paused_stream: 0,
            recording: true,
            tensor: "",
            amax: BTreeMap::new(),
            observer: None,
            tally: [StoreCounts::default(); Class::ALL.len()],
            grad_amax: 0.0,
            flops: BTreeMap::new(),
            grad_nonfinite: false,
            taps: None,
            #[cfg(test)]
            block_casts: Vec::new(),
        }
    }

    /// No rounding anywhere: the reference the gradient checks use.
    #[must_use]
    pub fn exact() -> Self {
        let mut p = Precision::new(&Recipe::fp32(), 0);
        p.formats[0].rounders = [None; Class::ALL.len()];
        p.formats[0].blocks = [None; Class::ALL.len()];
        p
    }

    /// The recipe.
    #[must_use]
    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Adds a layer (storage-point owner) called `name` and returns its index; the layer rounds
    /// as the first of the recipe's `keep` patterns that matches `name` says, or as the recipe.
    pub fn register(&mut self, name: &str) -> usize {
        self.layers.push(name.to_string());
        self.layer_formats
            .push(self.recipe.keep.find(name).map_or(0, |k| k + 1));
        self.layers.len() - 1
    }

    /// The name of the recipe whose formats layer `layer` runs (its `keep` pattern's, or the
    /// recipe's).
    #[must_use]
    pub fn layer_recipe(&self, layer: usize) -> &str {
        &self.formats[self.layer_formats.get(layer).copied().unwrap_or(0)]
            .recipe
            .name
    }

    /// Checks that every `keep` pattern of the recipe matched a registered layer (call once the
    /// model is built).
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] naming the first pattern that matched none, and a few of
    /// the layers' names.
    pub fn check_keep(&self) -> crate::Result<()> {
        for (k, (pattern, _)) in self.recipe.keep.0.iter().enumerate() {
            if !self.layer_formats.contains(&(k + 1)) {
                let mut some: Vec<&str> = self.layers.iter().map(String::as_str).take(6).collect();
                if self.layers.len() > some.len() {
                    some.push("...");
                }
                return Err(crate::Error::Unsupported {
                    what: format!("keep pattern '{pattern}'"),
                    problem: format!(
                        "matches no layer of the model (its layers: {})",
                        some.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// The formats of the current layer.
    fn here(&self) -> &Formats {
        &self.formats[self.layer_formats.get(self.current).copied().unwrap_or(0)]
    }

    /// The registered layer names, by index.
    #[must_use]
    pub fn layers(&self) -> &[String] {
        &self.layers
    }

    /// Makes layer `index` the owner of the following stores (of the whole class: the part is
    /// reset).
    pub fn enter(&mut self, index: usize) {
        self.current = index;
        self.part = "";
        self.tensor = "";
    }

    /// Names the tensor the following stores of the current layer hold (a parameter's
    /// `"weight"` or `"bias"`, an LSTM's `"gates"`...), so that each tensor has its own fp8
    /// scale and amax history, as each tensor has its own scaling factor in Transformer Engine.
    /// Counts and captures stay per (layer, class, part). Until the next [`Precision::enter`].
    pub fn set_tensor(&mut self, tensor: &'static str) {
        self.tensor = tensor;
    }

    /// Names the part of a class the following stores of the current layer hold, when a layer
    /// stores several tensors of one class (the optimizer's state: `"adam_m"`, `"adam_v"`...):
    /// each part is counted, captured and (fp8) scaled on its own. Until the next
    /// [`Precision::enter`].
    pub fn set_part(&mut self, part: &'static str) {
        self.part = part;
    }

    /// Clears the per-step counts and the first non-finite site, and updates the fp8 scales
    /// from the step that ended ([`Precision::update_fp8_scales`]).
    pub fn begin_step(&mut self) {
        self.update_fp8_scales();
        self.counts.clear();
        self.first_nonfinite = None;
        self.nonfinite.clear();
        self.tally = [StoreCounts::default(); Class::ALL.len()];
        self.grad_amax = 0.0;
        self.flops.clear();
        self.grad_nonfinite = false;
        if let Some(taps) = &mut self.taps {
            taps.clear();
        }
    }

    /// This step's matrix-product FLOPs per layer that formed products (`2 m n k` per product of
    /// an `m x k` and a `k x n` matrix: forward and backward, as the step ran them).
    #[must_use]
    pub fn product_flops(&self) -> &BTreeMap<usize, u64> {
        &self.flops
    }

    /// This step's counts per tensor class, summed over layers (classes with no store absent).
    #[must_use]
    pub fn class_counts(&self) -> BTreeMap<Class, StoreCounts> {
        Class::ALL
            .iter()
            .zip(&self.tally)
            .filter(|(_, t)| t.stored > 0)
            .map(|(&c, &t)| (c, t))
            .collect()
    }

    /// The largest finite magnitude stored this step as an activation or weight gradient, before
    /// rounding (in f32, as computed: a sum of already rounded values can itself be a value of
    /// the format, as a bias gradient summed from fp16 subnormals is), divided by the loss scale
    /// `scale`; `None` when there was none.
    #[must_use]
    pub fn grad_amax_unscaled(&self, scale: f32) -> Option<f64> {
        (self.grad_amax > 0.0).then(|| self.grad_amax / f64::from(scale))
    }

    /// Whether a gradient stored this step held an inf or NaN before rounding: formed upstream
    /// (an earlier store that overflowed, a non-finite loss), it hid the values of the gradients
    /// it reached, so [`Precision::grad_amax_unscaled`] is a lower bound of what they would be at
    /// a smaller scale.
    #[must_use]
    pub fn grad_nonfinite(&self) -> bool {
        self.grad_nonfinite
    }

    /// Turns on (or off) keeping a copy of every gradient stored (after rounding), per layer and
    /// class, for comparison with an FP32 shadow step ([`Precision::take_taps`]); cleared by
    /// [`Precision::begin_step`].
    pub fn set_taps(&mut self, on: bool) {
        self.taps = on.then(BTreeMap::new);
    }

    /// The gradients kept since the step began (in store order within a layer and class).
    pub fn take_taps(&mut self) -> BTreeMap<(usize, Class), Vec<f32>> {
        self.taps.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Whether stores are counted (off during evaluation, so that eval passes do not mix into
    /// the training step's counts; values are rounded either way). Turning recording back on
    /// also rewinds the stochastic-rounding stream to where it was turned off, so an evaluation
    /// pass leaves training exactly as it would have been without it.
    pub fn set_recording(&mut self, on: bool) {
        if self.recording && !on {
            self.paused_stream = self.stream;
        } else if !self.recording && on {
            self.stream = self.paused_stream;
        }
        self.recording = on;
    }

    /// Installs (or removes) the observer that sees values before rounding on capture steps.
    pub fn set_observer(&mut self, observer: Option<Observer>) {
        self.observer = observer;
    }

    /// Takes the observer back with what it saw.
    pub fn take_observer(&mut self) -> Option<Observer> {
        self.observer.take()
    }

    /// The storage point of `class` at the current layer and part.
    fn key(&self, class: Class) -> SiteKey {
        SiteKey::new(self.current, class, self.part)
    }

    /// This step's rounding counts of layer `layer` and class `class` (all parts).
    #[must_use]
    pub fn counts(&self, layer: usize, class: Class) -> RoundCounts {
        self.counts
            .range(SiteKey::new(layer, class, "")..)
            .take_while(|(k, _)| (k.layer, k.class) == (layer, class))
            .fold(RoundCounts::default(), |sum, (_, &c)| sum + c)
    }

    /// This step's rounding counts of one storage point.
    #[must_use]
    pub fn part_counts(&self, key: SiteKey) -> RoundCounts {
        self.counts.get(&key).copied().unwrap_or_default()
    }

    /// The first storage point this step where a stored value was inf or NaN.
    #[must_use]
    pub fn first_nonfinite(&self) -> Option<Site> {
        self.first_nonfinite.map(|(layer, tensor)| Site {
            layer: self.layers.get(layer).cloned().unwrap_or_default(),
            tensor,
            op: None,
        })
    }

    /// Whether a value stored this step as class `class` of layer `layer` was inf or NaN.
    #[must_use]
    pub fn stored_nonfinite(&self, layer: usize, class: Class) -> bool {
        self.nonfinite.contains(&(layer, class))
    }

    /// Whether class `class` is rounded (its format is not fp32, or is a block format).
    #[must_use]
    pub fn rounds(&self, class: Class) -> bool {
        let here = self.here();
        here.rounders[class.index()].is_some() || here.blocks[class.index()].is_some()
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
        // Unrounded master weights are exactly what the weight copy sees before rounding (the
        // copy is taken from them), so observing them too would capture the same tensor twice.
        let duplicate = class == Class::Master && !self.rounds(Class::Master);
        let mut seen = None;
        if self.recording
            && !duplicate
            && let Some(observer) = &mut self.observer
        {
            seen = Some(observer.observe(SiteKey::new(self.current, class, self.part), xs));
        }
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
            self.grad_amax = self.grad_amax.max(amax);
            self.grad_nonfinite |= !finite;
            finite_before = Some(finite);
        }
        let here = self.here();
        let (rounder, block) = (here.rounders[class.index()], here.blocks[class.index()]);
        let fp8_scaling = here.recipe.fp8_scaling.is_some();
        let mut finite_after = None;
        if self.recording {
            self.tally[class.index()].stored += xs.len() as u64;
        }
        if let Some(block) = block {
            self.round_blocks(&block, class, xs, cols);
            return;
        }
        if let Some(rounder) = rounder {
            let fp8 = fp8_scaling && rounder.format().total_bits() <= 8;
            let counts = if fp8 {
                self.round_scaled(&rounder, class, xs)
            } else {
                T::round_slice_at(&rounder, xs, self.stream)
            };
            self.stream = self.stream.wrapping_add(xs.len() as u64);
            // Plain rounding turns a finite input into a non-finite result only by overflowing,
            // so without non-finite inputs or overflow the rounding's counts prove the result
            // finite and the pass below is skipped. (Scaled fp8 rounding multiplies after
            // rounding, and saturating overflow stays finite: those are checked.)
            if !fp8 && counts.nan + counts.infinite + counts.overflow == 0 {
                finite_after = Some(true);
            }
            if self.recording {
                let tally = &mut self.tally[class.index()];
                tally.underflow += counts.underflow;
                tally.subnormal += counts.subnormal;
                tally.overflow += counts.overflow;
                tally.nonfinite += counts.nan + counts.infinite;
                *self.counts.entry(self.key(class)).or_default() += counts;
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
                self.tally[class.index()].nonfinite += bad as u64;
            }
            self.mark_nonfinite(class);
        }
        if gradient && let Some(taps) = &mut self.taps {
            taps.entry((self.current, class))
                .or_default()
                .extend(xs.iter().map(|&v| Real::to_f64(v) as f32));
        }
    }

    /// The rounding, counting and checks of [`Precision::store_shaped`] for a block cast: the
    /// inf/NaN check comes before rounding, since a block holding one becomes NaN throughout
    /// (and a block cast of finite values is finite: its elements saturate).
    fn round_blocks<T: Real>(
        &mut self,
        block: &BlockCast,
        class: Class,
        xs: &mut [T],
        cols: usize,
    ) {
        let finite = T::all_finite(xs);
        let bad = if finite {
            0
        } else {
            xs.iter().filter(|v| !v.is_finite()).count() as u64
        };
        let counts = block.round(xs, cols, self.stream);
        self.stream = self.stream.wrapping_add(xs.len() as u64);
        if !self.recording {
            return;
        }
        let tally = &mut self.tally[class.index()];
        tally.underflow += counts.underflow;
        tally.subnormal += counts.subnormal;
        tally.overflow += counts.overflow;
        tally.nonfinite += bad;
        *self.counts.entry(self.key(class)).or_default() += counts;
        if !finite {
            self.mark_nonfinite(class);
        }
    }

    /// Notes that a value stored as class `class` of the current layer was inf or NaN.
    fn mark_nonfinite(&mut self, class: Class) {
        let site = (self.current, class);
        self.nonfinite.insert(site);
        self.first_nonfinite.get_or_insert(site);
    }

    /// Whether storing a tensor of class `class` would only count it and check it for inf/NaN:
    /// the class is not rounded, not a gradient (whose store also takes its largest magnitude
    /// and keeps taps), and nothing observes the store. A layer that computes such a tensor can
    /// then check it in the pass that writes it and record it with [`Precision::note_store`],
    /// instead of a second pass over it in [`Precision::store`].
    #[must_use]
    pub fn check_only(&self, class: Class) -> bool {
        !self.rounds(class)
            && self.observer.is_none()
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
        let tally = &mut self.tally[class.index()];
        tally.stored += len as u64;
        tally.nonfinite += nonfinite;
        if nonfinite > 0 {
            self.mark_nonfinite(class);
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
        if self.recording
            && let Some(observer) = &mut self.observer
        {
            observer.observe_updates(self.current, weights, updates);
        }
    }

    /// Whether an observer is installed (a capture step).
    #[must_use]
    pub fn capturing(&self) -> bool {
        self.observer.is_some()
    }

    /// One scalar stored as class `class` (Adam's epsilon, say); returns the stored value.
    pub fn store_scalar<T: Real>(&mut self, class: Class, x: T) -> T {
        let mut v = [x];
        self.store(class, &mut v);
        v[0]
    }

    /// Rounds `xs` into an 8-bit format with the current tensor's delayed scale (see
    /// [`Fp8Scaling`]): `round(x * scale) / scale`, the scale computed from earlier steps; this
    /// store's amax (NaN ignored, as CUDA's `fmaxf` does) joins the step's amax.
    fn round_scaled<T: Real>(
        &mut self,
        rounder: &Rounder,
        class: Class,
        xs: &mut [T],
    ) -> RoundCounts {
        let max = rounder.format().max() as f32;
        let meta = self
            .amax
            .entry((self.key(class), self.tensor))
            .or_insert_with(|| DelayedScale::new(max));
        let amax_now = xs
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs().to_f64() as f32));
        // Evaluation passes (not recorded) use the scales but leave the history to training.
        if self.recording {
            meta.observe(amax_now);
        }
        let scale = meta.scale();
        let (s, inv) = (T::of(f64::from(scale)), T::of(f64::from(1.0 / scale)));
        xs.iter_mut().for_each(|v| *v *= s);
        let counts = T::round_slice_at(rounder, xs, self.stream);
        xs.iter_mut().for_each(|v| *v *= inv);
        counts
    }

    /// Ends a step for fp8 scaling: each tensor's [`DelayedScale::end_step`]. Called by
    /// [`Precision::begin_step`]; the first step's scale is 1, as Transformer Engine's.
    pub fn update_fp8_scales(&mut self) {
        for ((key, _), meta) in &mut self.amax {
            let formats = self.layer_formats.get(key.layer).copied().unwrap_or(0);
            if let Some(scaling) = self.formats[formats].recipe.fp8_scaling {
                meta.end_step(&scaling);
            }
        }
    }

    /// The fp8 scale the next store of tensor `tensor` of class `class` at `key`'s layer and
    /// part will use (1 before its first step ends), and its amax history, oldest first.
    #[must_use]
    pub fn fp8_scale(&self, key: SiteKey, tensor: &'static str) -> Option<(f32, Vec<f32>)> {
        self.amax
            .get(&(key, tensor))
            .map(|m| (m.scale(), m.history().collect()))
    }

    /// The tensors with fp8 scaling state: storage point and tensor name.
    pub fn fp8_tensors(&self) -> impl Iterator<Item = (SiteKey, &'static str)> + '_ {
        self.amax.keys().copied()
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
        let saved = std::mem::replace(&mut self.tensor, tensor);
        let copy = if self.casts_per_product(class) {
            self.store_blocks(class, x, reduce)
        } else {
            let mut copy = x.as_standard_layout().into_owned();
            self.store_array(class, &mut copy);
            copy
        };
        self.tensor = saved;
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
            *self.flops.entry(self.current).or_default() += flops;
        }
        match (
            self.recipe.accumulation,
            self.here().rounders[class.index()],
        ) {
            (Accumulation::Storage, Some(rounder)) => matmul_rounded(a, b, &rounder),
            _ => gemm(a, b),
        }
    }

    /// Column sums of `a` (the sum over the batch of a bias gradient) for an output of class
    /// `class`: in FP32, or accumulated in the class's format when the recipe's
    /// [`crate::recipe::Fp32Ops::reductions`] is off.
    #[must_use]
    pub fn sum_rows<T: Real>(&self, a: ArrayView2<T>, class: Class) -> Array2<T> {
        match (
            self.recipe.fp32_ops.reductions,
            self.here().rounders[class.index()],
        ) {
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
    use crate::format::{FP16, FloatFormat};

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
