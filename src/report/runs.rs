//! What a report shows of one run directory, read in one streaming pass over its logs: memory
//! depends on the number of captures and layers, not on the number of steps.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::format::{FP16, FP32, FloatFormat};
use crate::recipe::Class;
use crate::run::{CaptureRecord, RunDir, ShadowRecord, StepRecord, Summary};
use crate::scaling::replay::{OverflowModel, RecordedStep, high_edge, verdict};
use crate::stats::recommend::{AmaxSpread, RerunTop};
use crate::stats::{Histogram, Recommendation};

/// Points kept per curve; longer runs keep every `2^j`-th step.
pub const MAX_POINTS: usize = 2000;
pub use crate::scaling::replay::{Events, MAX_EVENTS};
pub use crate::scaling::window::{
    MAX_UNDERFLOW, WINDOW_SCALES, step_rule, unscaled_predicted, unscaled_window,
};

/// How to read the runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportOptions {
    /// The format gradients are judged against (zones, windows); default: each run's gradient
    /// format, or fp16 for a run whose gradients are fp32.
    pub format: Option<FloatFormat>,
    /// The capture step of the histogram figures (default: the first capture whose activation
    /// gradients hold a finite nonzero value, else the first).
    pub step: Option<u64>,
}

/// A curve over steps, thinned to at most [`MAX_POINTS`] points by keeping every `stride`-th
/// step (doubling the stride when full), and the last point.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Curve {
    /// `(step, value)`.
    pub points: Vec<(u64, f64)>,
    #[serde(skip)]
    stride: u64,
    #[serde(skip)]
    last: Option<(u64, f64)>,
}

impl Curve {
    fn push(&mut self, step: u64, value: f64) {
        self.stride = self.stride.max(1);
        if step.is_multiple_of(self.stride) {
            self.points.push((step, value));
            if self.points.len() > MAX_POINTS {
                self.stride *= 2;
                let stride = self.stride;
                self.points.retain(|(s, _)| s % stride == 0);
            }
        }
        self.last = Some((step, value));
    }

    fn finish(&mut self) {
        if let Some(last) = self.last
            && self.points.last() != Some(&last)
        {
            self.points.push(last);
        }
    }
}

/// A rise of `grad_amax` between consecutive steps (both exact) by this many binades or more is
/// a finding ([`AmaxJump`]). Measured on ordinary runs: the largest rise in 70 runs of the
/// built-in trainer (every config of `analyses/`, and the four families in six recipes over two
/// seeds) was 8.1 binades (the LSTM in fp16-dynamic), in the committed PyTorch example 3.6; the
/// fault this catches (PyTorch's conv backward under CPU bf16 autocast writing 1e22-1e34 into a
/// weight's gradient) rose 45. Twice the largest ordinary rise.
pub const AMAX_JUMP_BINADES: f64 = 16.0;

/// A rise of `grad_amax` by [`AMAX_JUMP_BINADES`] or more from one step to the next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AmaxJump {
    /// The step it rose at.
    pub step: u64,
    /// The previous step's `grad_amax`.
    pub from: f64,
    /// This step's.
    pub to: f64,
    /// This step's loss (NaN: not finite).
    pub loss: f64,
    /// Where it is known (a capture step): the layer and gradient class with the largest value.
    pub tensor: Option<(String, Class)>,
}

/// Steps whose first inf or NaN was stored at one site.
#[derive(Clone, Debug, Serialize)]
pub struct NonfiniteSite {
    /// Layer.
    pub layer: String,
    /// Tensor class.
    pub tensor: Class,
    /// Steps.
    pub steps: u64,
    /// The first of them.
    pub first: u64,
    /// The last.
    pub last: u64,
    /// The operation that formed it at its first step, where the writer named one.
    pub op: Option<String>,
}

/// What rounding did to a set of values, as shares of the values stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Shares {
    /// Values.
    pub values: u64,
    /// Nonzero finite values that became zero.
    pub underflow: f64,
    /// Nonzero results below the smallest normal.
    pub subnormal: f64,
    /// Finite nonzero values kept as normal numbers.
    pub normal: f64,
    /// Finite values that overflowed.
    pub overflow: f64,
    /// Values that were zero before rounding.
    pub zero: f64,
    /// Values that were inf or NaN before rounding.
    pub nonfinite: f64,
    /// For gradients: finite nonzero values below the noise floor of the step's largest
    /// gradient ([`crate::analysis::noise_floor`]), FP32 rounding residue rather than gradient.
    pub noise: f64,
    /// The largest finite magnitude, as stored.
    pub amax: f64,
}

#[derive(Clone, Copy, Default)]
struct Tally {
    values: u64,
    underflow: u64,
    subnormal: u64,
    overflow: u64,
    zero: u64,
    nonfinite: u64,
    noise: u64,
    amax: f64,
}

impl Tally {
    /// Adds a site; `floor`: the noise floor its values are counted against, if any.
    fn add(&mut self, site: &crate::run::SiteCapture, floor: Option<f64>) {
        let h = &site.values;
        self.noise += floor.map_or(0, |f| crate::analysis::count_below(h, f));
        self.amax = self.amax.max(h.amax());
        self.values += h.count();
        self.underflow += site.rounding.underflow;
        self.subnormal += site.rounding.subnormal;
        self.overflow += site.rounding.overflow;
        self.zero += h.zeros();
        self.nonfinite += h.nonfinite();
    }

    fn shares(self) -> Shares {
        let n = self.values.max(1) as f64;
        let share = |c: u64| c as f64 / n;
        let normal = self
            .values
            .saturating_sub(self.underflow + self.subnormal + self.overflow + self.zero)
            .saturating_sub(self.nonfinite);
        Shares {
            values: self.values,
            underflow: share(self.underflow),
            subnormal: share(self.subnormal),
            normal: share(normal),
            overflow: share(self.overflow),
            zero: share(self.zero),
            nonfinite: share(self.nonfinite),
            noise: share(self.noise),
            amax: self.amax,
        }
    }
}

/// One capture step, summarised.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureSummary {
    /// The step.
    pub step: u64,
    /// Its loss scale.
    pub loss_scale: f64,
    /// Per tensor class, over all layers.
    pub classes: BTreeMap<Class, Shares>,
    /// Per layer and gradient class (`activation_grad`, `weight_grad`).
    pub gradients: Vec<(String, Class, Shares)>,
    /// The loss-scale window of the unscaled gradients, in log2 of the scale: its low edge from
    /// the captured histograms (activation and weight gradients pooled) as `analyze` computes it
    /// ([`crate::stats::sweep_from_histogram`], [`crate::stats::recommend()`] with margin 0 and
    /// [`MAX_UNDERFLOW`]), its high edge from the step's `grad_amax` as every step's
    /// ([`RunData::window_top`]); without that step's line, from the histograms' largest value.
    /// A step with no finite nonzero gradient value ([`CaptureSummary::finite_gradients`] 0)
    /// has no window: every edge is `None`.
    pub window: Recommendation,
    /// The finite nonzero gradient values stored at the step (activation and weight gradients
    /// pooled): with none (all zero, inf or NaN), nothing bounds a window.
    pub finite_gradients: u64,
    /// The smallest `k` from which training is predicted to match FP32, from the step's
    /// unscaled weight gradients ([`crate::stats::recommend::predicted_min_log2_scale`]) when
    /// they are stored in FP32 (`None` otherwise).
    pub predicted_min_log2_scale: Option<i32>,
}

/// The histograms of one capture step drawn in the figures.
#[derive(Clone, Debug, Serialize)]
pub struct StepHistograms {
    /// The step.
    pub step: u64,
    /// Its loss scale.
    pub loss_scale: f64,
    /// Activation gradients of every layer pooled, as stored (scaled by the loss scale).
    pub activation_grads: Histogram,
    /// Per layer, as stored.
    pub layers: Vec<(String, Histogram)>,
    /// The capture steps before this one passed over by the default choice: their activation
    /// gradients held no finite nonzero value (empty unless the step was chosen by default).
    pub passed_over: Vec<u64>,
}

impl StepHistograms {
    /// Whether the activation gradients hold a finite nonzero value (something to draw).
    #[must_use]
    pub fn has_finite(&self) -> bool {
        self.layers.iter().any(|(_, h)| h.finite_nonzero() > 0)
    }
}

/// The update-to-weight ratios of one capture step, per layer.
#[derive(Clone, Debug, Serialize)]
pub struct StepRatios {
    /// The step.
    pub step: u64,
    /// Per layer: `|w| / |update|`.
    pub layers: Vec<(String, Histogram)>,
}

/// One shadow comparison.
#[derive(Clone, Debug, Serialize)]
pub struct ShadowPoint {
    /// Step.
    pub step: u64,
    /// Layer.
    pub layer: String,
    /// Gradient class.
    pub tensor: Class,
    /// Share of FP32's squared norm lost (zero in the run).
    pub norm_lost: f64,
    /// Share of FP32's nonzero values zero in the run.
    pub zeroed: f64,
    /// `||g - g32|| / ||g32||` (NaN: not finite).
    pub relative_error: f64,
}

/// Everything a report shows of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunData {
    /// The label in legends: the recipe, made unique among the runs compared.
    pub name: String,
    /// The directory.
    pub dir: String,
    /// The recipe's name.
    pub recipe: String,
    /// Whether the run finished.
    pub complete: bool,
    /// The summary, when it finished.
    pub summary: Option<Summary>,
    /// `config.json` (without `schema`).
    pub config: Value,
    /// The format of each tensor class.
    pub formats: BTreeMap<Class, String>,
    /// The format each tensor class's rounding counts are of: its own format, or the one its
    /// captured sites name ([`crate::run::SiteCapture::rounded_into`]: the PyTorch recorder
    /// rounds every value it captures into its judged format, an FP32 optimizer state too).
    pub counted_formats: BTreeMap<Class, String>,
    /// The format gradients are judged against.
    pub grad_format: FloatFormat,
    /// Mantissa bits of the master weights (swamping threshold `2^(p+1)`).
    pub master_mantissa_bits: u32,
    /// Steps read from `metrics.jsonl`.
    pub steps_read: u64,
    /// Loss per step.
    pub loss: Curve,
    /// Loss scale per step.
    pub loss_scale: Curve,
    /// `updates_lost` per step.
    pub updates_lost: Curve,
    /// `grad_amax` per step.
    pub grad_amax: Curve,
    /// Evaluations (`eval`), all of them.
    pub eval: Vec<(u64, f64)>,
    /// The metric's name.
    pub eval_name: Option<String>,
    /// Skipped steps.
    pub skipped: Events,
    /// `(step, loss scale)` of the first skipped steps, to mark on loss-scale charts.
    pub skip_marks: Vec<(u64, f64)>,
    /// Steps whose gradients held inf or NaN.
    pub overflow: Events,
    /// Where the first inf or NaN of each overflow step was stored.
    pub nonfinite: Vec<NonfiniteSite>,
    /// The capture steps.
    pub captures: Vec<CaptureSummary>,
    /// The window's high edge over the whole run: the lowest of every step's (the largest
    /// `2^k` that keeps its largest gradient finite in [`RunData::grad_format`],
    /// [`crate::scaling::replay::high_edge`]; for a bounded step, below the scale it overflowed
    /// at too), and the first step that has it. Steps whose inf or NaN no scale explains (a
    /// non-finite loss) say nothing of it.
    pub window_top: Option<(i32, u64)>,
    /// The window's top for a rerun, which trains along its own trajectory: [`Self::window_top`]
    /// less the margin the run's own step-to-step spread of `grad_amax` asks for
    /// ([`AmaxSpread`], from the steps whose `grad_amax` is exact). `None` with fewer than two
    /// pairs of consecutive such steps, or no window top.
    pub window_rerun_top: Option<RerunTop>,
    /// Steps whose `grad_amax` is only a lower bound (`grad_amax_bounded`): their high edge is
    /// an upper bound.
    pub bounded_steps: u64,
    /// The rises of `grad_amax` by [`AMAX_JUMP_BINADES`] or more, the first [`MAX_EVENTS`].
    pub amax_jumps: Vec<AmaxJump>,
    /// Per autograd node named in steps' `intermediate_overflow`: how many steps named it and
    /// the first; these steps overflow at every scale.
    pub intermediate_overflow: BTreeMap<String, (u64, u64)>,
    /// The gradient histograms of the chosen capture step (default: the first whose activation
    /// gradients hold a finite nonzero value, else the first).
    pub histograms: Option<StepHistograms>,
    /// The update ratios of the chosen capture step (default: the last with updates, where
    /// swamping has had the run's length to build up).
    pub update_ratios: Option<StepRatios>,
    /// The FP32 shadow's comparisons.
    pub shadow: Vec<ShadowPoint>,
    /// For a run whose weight gradients are stored in FP32: the smallest `k` from which
    /// training in [`RunData::grad_format`] is predicted to match FP32, from its weight
    /// gradients pooled over the capture steps at the first one's loss scale
    /// ([`crate::stats::recommend::predicted_min_log2_scale`], the run's optimizer's rule).
    pub predicted_min_log2_scale: Option<i32>,
    /// The recipe's `keep`: per pattern, the recipe its layers ran and the layers it matched
    /// among those the captures name (in the order the run stored them).
    pub kept: Vec<KeptLayers>,
}

/// One `keep` pattern of a run's recipe and what it matched.
#[derive(Clone, Debug, Serialize)]
pub struct KeptLayers {
    /// The glob pattern.
    pub pattern: String,
    /// The name of the recipe those layers ran.
    pub recipe: String,
    /// The captured layers it decided (the first matching pattern decides a layer).
    pub layers: Vec<String>,
}

impl RunData {
    /// Whether every tensor class of the run is stored in FP32 (the baseline).
    #[must_use]
    pub fn is_fp32(&self) -> bool {
        self.formats.values().all(|f| f == "fp32")
    }

    /// Reads the run directory `dir`.
    ///
    /// # Errors
    /// Not a run directory, an unreadable or malformed log line, or a `--step` that is not a
    /// capture step of the run.
    pub fn read(dir: &Path, options: &ReportOptions) -> crate::Result<RunData> {
        let run = RunDir::open(dir)?;
        // Formats from the run's recipe (a run recorded by an older recorder may not say).
        let recipe = run.recipe();
        let format_of = |c: Class| recipe.as_ref().map_or(FP32, |r| r.format(c));
        let formats: BTreeMap<Class, String> = match &recipe {
            Some(r) => Class::ALL.iter().map(|&c| (c, r.format_name(c))).collect(),
            None => BTreeMap::new(),
        };
        let grad_format = judged_format(own_format(&run), options.format);
        let mut data = RunData {
            name: run.recipe_name(),
            dir: dir.display().to_string(),
            recipe: run.recipe_name(),
            complete: run.is_complete(),
            summary: run.summary.clone(),
            config: run.config.clone(),
            counted_formats: formats.clone(),
            formats,
            grad_format,
            master_mantissa_bits: format_of(Class::Master).man_bits(),
            steps_read: 0,
            loss: Curve::default(),
            loss_scale: Curve::default(),
            updates_lost: Curve::default(),
            grad_amax: Curve::default(),
            eval: Vec::new(),
            eval_name: None,
            skipped: Events::default(),
            skip_marks: Vec::new(),
            overflow: Events::default(),
            nonfinite: Vec::new(),
            captures: Vec::new(),
            window_top: None,
            window_rerun_top: None,
            bounded_steps: 0,
            amax_jumps: Vec::new(),
            intermediate_overflow: BTreeMap::new(),
            histograms: None,
            update_ratios: None,
            shadow: Vec::new(),
            predicted_min_log2_scale: None,
            kept: recipe.as_ref().map_or_else(Vec::new, |r| {
                r.keep
                    .0
                    .iter()
                    .map(|(pattern, kept)| KeptLayers {
                        pattern: pattern.clone(),
                        recipe: kept.name.clone(),
                        layers: Vec::new(),
                    })
                    .collect()
            }),
        };
        let mut pooled_weights: Option<(f64, crate::stats::Histogram)> = None;
        for record in run.captures()? {
            let record = record?;
            match options.step {
                Some(s) if s == record.step => data.histograms = Some(step_histograms(&record)),
                Some(_) => {}
                // By default, the first step with something to draw; the first step until then.
                None => match &data.histograms {
                    None => data.histograms = Some(step_histograms(&record)),
                    Some(h) if !h.has_finite() => {
                        let mut passed_over = h.passed_over.clone();
                        passed_over.push(h.step);
                        let mut next = step_histograms(&record);
                        next.passed_over = passed_over;
                        data.histograms = Some(next);
                    }
                    Some(_) => {}
                },
            }
            let ratios_wanted = options
                .step
                .map_or(!record.update_ratios.is_empty(), |s| s == record.step);
            if ratios_wanted {
                data.update_ratios = Some(StepRatios {
                    step: record.step,
                    layers: record
                        .update_ratios
                        .iter()
                        .map(|u| (u.layer.clone(), u.ratios.clone()))
                        .collect(),
                });
            }
            data.captures.push(data.summarise(&record));
            if let Some(r) = &recipe {
                for site in &record.sites {
                    let Some(k) = r.keep.find(&site.layer) else {
                        continue;
                    };
                    if !data.kept[k].layers.contains(&site.layer) {
                        data.kept[k].layers.push(site.layer.clone());
                    }
                }
            }
            for site in &record.sites {
                if let Some(f) = site.rounded_into {
                    data.counted_formats.insert(site.tensor, f.name());
                }
            }
            let scale = record.loss_scale.unwrap_or(1.0);
            match &mut pooled_weights {
                None => pooled_weights = Some((scale, record.weight_gradients())),
                Some((s, h)) if *s == scale => h.merge(&record.weight_gradients()),
                Some(_) => {}
            }
        }
        data.predicted_min_log2_scale =
            pooled_weights.and_then(|(scale, h)| data.predicted(&h, scale));
        // The steps after the captures: each capture step's high edge is its step's.
        let own_format = own_format(&run);
        let mut nonfinite: BTreeMap<(String, Class), NonfiniteSite> = BTreeMap::new();
        let mut spread = AmaxSpread::default();
        let mut previous: Option<(u64, f64)> = None;
        for record in run.steps()? {
            let record = record?;
            let exact = record.grad_amax.filter(|_| !record.grad_amax_bounded);
            if let Some(a) = exact {
                spread.add(record.step, a);
            }
            data.add_jump(&record, previous, exact);
            previous = exact.map(|a| (record.step, a));
            data.add_step(&record, own_format, &mut nonfinite);
        }
        data.window_rerun_top = data
            .window_top
            .and_then(|(top, _)| spread.rerun_top(data.grad_format, top));
        data.nonfinite = nonfinite.into_values().collect();
        data.nonfinite.sort_by_key(|s| std::cmp::Reverse(s.steps));
        for curve in [
            &mut data.loss,
            &mut data.loss_scale,
            &mut data.updates_lost,
            &mut data.grad_amax,
        ] {
            curve.finish();
        }
        if let (Some(step), None) = (options.step, &data.histograms) {
            let steps: Vec<String> = data.captures.iter().map(|c| c.step.to_string()).collect();
            return Err(crate::Error::BadFile {
                path: dir.to_path_buf(),
                problem: format!(
                    "step {step} was not captured (capture steps: {})",
                    if steps.is_empty() {
                        "none".into()
                    } else {
                        steps.join(", ")
                    }
                ),
            });
        }
        if let Some(records) = run.shadow()? {
            for record in records {
                data.add_shadow(&record?);
            }
        }
        Ok(data)
    }

    fn add_step(
        &mut self,
        r: &StepRecord,
        own_format: FloatFormat,
        nonfinite: &mut BTreeMap<(String, Class), NonfiniteSite>,
    ) {
        self.steps_read += 1;
        self.bounded_steps += u64::from(r.grad_amax_bounded);
        for node in &r.intermediate_overflow {
            let (steps, _) = self
                .intermediate_overflow
                .entry(node.clone())
                .or_insert((0, r.step));
            *steps += 1;
        }
        let high = self.high_edge(r, own_format);
        if let Some(k) = high
            && self.window_top.is_none_or(|(top, _)| k < top)
        {
            self.window_top = Some((k, r.step));
        }
        if let Ok(i) = self.captures.binary_search_by_key(&r.step, |c| c.step)
            && self.captures[i].finite_gradients > 0
        {
            let w = &mut self.captures[i].window;
            w.max_log2_scale = high;
            w.log2_scale = high;
        }
        self.loss.push(r.step, r.loss);
        self.loss_scale.push(r.step, r.loss_scale);
        if r.updates_lost.is_finite() {
            self.updates_lost.push(r.step, r.updates_lost);
        }
        if let Some(a) = r.grad_amax {
            self.grad_amax.push(r.step, a);
        }
        if let Some(e) = &r.eval {
            self.eval.push((r.step, e.value));
            self.eval_name.get_or_insert_with(|| e.name.clone());
        }
        if r.skipped {
            self.skipped.add(r.step);
            if self.skip_marks.len() < MAX_EVENTS {
                self.skip_marks.push((r.step, r.loss_scale));
            }
        }
        if r.overflow {
            self.overflow.add(r.step);
        }
        if let Some(site) = &r.first_nonfinite {
            let entry = nonfinite
                .entry((site.layer.clone(), site.tensor))
                .or_insert_with(|| NonfiniteSite {
                    layer: site.layer.clone(),
                    tensor: site.tensor,
                    steps: 0,
                    first: r.step,
                    last: r.step,
                    op: site.op.clone(),
                });
            entry.steps += 1;
            entry.last = r.step;
        }
    }

    /// Records a rise of `grad_amax` from `previous` (the step before's, when exact) to `exact`
    /// (this step's) by [`AMAX_JUMP_BINADES`] or more.
    fn add_jump(&mut self, r: &StepRecord, previous: Option<(u64, f64)>, exact: Option<f64>) {
        let (Some((step, from)), Some(to)) = (previous, exact) else {
            return;
        };
        if step + 1 != r.step
            || from <= 0.0
            || (to / from).log2() < AMAX_JUMP_BINADES
            || self.amax_jumps.len() >= MAX_EVENTS
        {
            return;
        }
        let tensor = self
            .captures
            .binary_search_by_key(&r.step, |c| c.step)
            .ok()
            .and_then(|i| {
                self.captures[i]
                    .gradients
                    .iter()
                    .max_by(|a, b| a.2.amax.total_cmp(&b.2.amax))
                    .map(|(layer, class, _)| (layer.clone(), *class))
            });
        self.amax_jumps.push(AmaxJump {
            step: r.step,
            from,
            to,
            loss: r.loss,
            tensor,
        });
    }

    /// The high edge of step `r`'s window in [`RunData::grad_format`] (`None` for a step whose
    /// recorded inf or NaN its `grad_amax` does not explain in the run's own format
    /// `own_format`: no scale keeps it finite), as replay decides overflow.
    fn high_edge(&self, r: &StepRecord, own_format: FloatFormat) -> Option<i32> {
        let step = recorded_step(r);
        let model = |format| OverflowModel {
            format,
            by_magnitude: true,
        };
        let (judged, run) = (model(self.grad_format), model(own_format));
        if verdict(run, judged, &step, r.loss_scale).1 {
            return None;
        }
        let overflowed_at =
            (r.grad_amax_bounded && r.overflow && judged == run).then_some(r.loss_scale);
        // Searched over the same scales as the captures' windows.
        high_edge(self.grad_format, r.grad_amax, overflowed_at).map(|k| k.min(*WINDOW_SCALES.end()))
    }

    /// The predicted lower edge of weight gradients `h` captured at `loss_scale`, when the run
    /// stores its weight gradients in FP32: a narrower format has already zeroed (and so dropped
    /// from the histogram) the values the prediction counts.
    fn predicted(&self, h: &crate::stats::Histogram, loss_scale: f64) -> Option<i32> {
        let fp32 = self.formats.get(&Class::WeightGrad).map(String::as_str) == Some("fp32");
        fp32.then(|| unscaled_predicted(h, loss_scale, self.grad_format, step_rule(&self.config)))
            .flatten()
    }

    fn summarise(&self, r: &CaptureRecord) -> CaptureSummary {
        let pooled = r.gradients();
        let floor = crate::analysis::noise_floor(pooled.amax());
        let mut classes: BTreeMap<Class, Tally> = BTreeMap::new();
        let mut gradients: Vec<(String, Class, Tally)> = Vec::new();
        for site in &r.sites {
            classes.entry(site.tensor).or_default().add(site, None);
            if matches!(site.tensor, Class::ActivationGrad | Class::WeightGrad) {
                let i = match gradients
                    .iter()
                    .position(|(l, c, _)| *l == site.layer && *c == site.tensor)
                {
                    Some(i) => i,
                    None => {
                        gradients.push((site.layer.clone(), site.tensor, Tally::default()));
                        gradients.len() - 1
                    }
                };
                gradients[i].2.add(site, floor);
            }
        }
        let loss_scale = r.loss_scale.unwrap_or(1.0);
        let finite_gradients = pooled.finite_nonzero();
        let window = if finite_gradients > 0 {
            unscaled_window(&pooled, loss_scale, self.grad_format)
        } else {
            // Nothing bounds it: not the whole search range, which no gradient showed.
            Recommendation {
                log2_scale: None,
                min_log2_scale: None,
                max_log2_scale: None,
            }
        };
        CaptureSummary {
            step: r.step,
            loss_scale,
            classes: classes.into_iter().map(|(c, t)| (c, t.shares())).collect(),
            gradients: gradients
                .into_iter()
                .map(|(l, c, t)| (l, c, t.shares()))
                .collect(),
            window,
            finite_gradients,
            predicted_min_log2_scale: self.predicted(&r.weight_gradients(), loss_scale),
        }
    }

    fn add_shadow(&mut self, r: &ShadowRecord) {
        for s in &r.sites {
            self.shadow.push(ShadowPoint {
                step: r.step,
                layer: s.layer.clone(),
                tensor: s.tensor,
                norm_lost: s.norm_lost,
                zeroed: s.zeroed,
                relative_error: s.relative_error,
            });
        }
    }

    /// The final metric: the summary's, or the last evaluation of an unfinished run.
    #[must_use]
    pub fn metric(&self) -> Option<(String, f64)> {
        match &self.summary {
            Some(s) => Some((s.eval_metric.name.clone(), s.eval_metric.value)),
            None => self
                .eval
                .last()
                .map(|&(_, v)| (self.eval_name.clone().unwrap_or_default(), v)),
        }
    }
}

/// What replay reads of a step's line.
#[must_use]
pub fn recorded_step(r: &StepRecord) -> RecordedStep {
    RecordedStep {
        step: r.step,
        loss_scale: r.loss_scale,
        overflow: r.overflow,
        skipped: r.skipped,
        grad_amax: r.grad_amax,
        grad_amax_bounded: r.grad_amax_bounded,
    }
}

/// The format a run's gradients were stored in: the recorded format of a run recorded outside
/// mixprec, else its recipe's activation-gradient format (fp32 when it names none).
fn own_format(run: &RunDir) -> FloatFormat {
    run.recorded_format().unwrap_or_else(|| {
        run.recipe()
            .map_or(FP32, |r| r.format(Class::ActivationGrad))
    })
}

/// The format a run's gradients are judged against: `chosen` (`--format`), else the run's
/// gradient format `run`, or fp16 for a run whose gradients are fp32.
#[must_use]
pub fn judged_format(run: FloatFormat, chosen: Option<FloatFormat>) -> FloatFormat {
    chosen.unwrap_or(if run == FP32 { FP16 } else { run })
}

fn step_histograms(r: &CaptureRecord) -> StepHistograms {
    let mut pooled = Histogram::new(0);
    let mut layers = Vec::new();
    for site in r.sites.iter().filter(|s| s.tensor == Class::ActivationGrad) {
        if site.values.sub_bins_log2() == pooled.sub_bins_log2() {
            pooled.merge(&site.values);
        }
        layers.push((site.layer.clone(), site.values.clone()));
    }
    StepHistograms {
        step: r.step,
        loss_scale: r.loss_scale.unwrap_or(1.0),
        activation_grads: pooled,
        layers,
        passed_over: Vec::new(),
    }
}
