//! The native half of `mixprec.torch.Recorder`: the histograms and rounding counts of captured
//! tensors ([`Capture`]), and the run directory's writer ([`RunWriter`], the library's own), so
//! that a recorded PyTorch run has the schema of `mixprec train`'s runs, written by the same code.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use mixprec::format::{FloatFormat, RoundCounts, RoundOptions, Rounder, amax_bits};
use mixprec::recipe::Class;
use mixprec::run::{
    self, CaptureBuilder, CaptureRecord, Coverage, EvalMetric, RecordedConfig, SiteCapture,
    StepRecord, Summary, class_counts,
};
use mixprec::stats::Histogram;
use mixprec::train::TrainConfig;
use numpy::ndarray::ArrayViewD;
use numpy::{Element, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde::de::DeserializeOwned;

use crate::py_err;

/// Values widened and rounded at a time (a multiple of the histogram's chunk, so that adding
/// block by block gives the same sums as adding the whole tensor at once).
const BLOCK: usize = 1 << 16;

fn parse<T: DeserializeOwned>(what: &str, json: &str) -> PyResult<T> {
    serde_json::from_str(json).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

fn class(name: &str) -> PyResult<Class> {
    Class::ALL
        .into_iter()
        .find(|c| c.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Class::ALL.iter().map(|c| c.name()).collect();
            PyValueError::new_err(format!(
                "unknown tensor class '{name}' (expected one of: {})",
                names.join(", ")
            ))
        })
}

/// Element types whose values a capture reads: each widens a block of its values to f32 or
/// f64, which the histogram and the rounder take.
trait Stored: Element + Copy + Send + Sync {
    /// Adds `xs` to `h` and returns the counts of rounding them with `r`, through `scratch`.
    fn add(xs: &[Self], h: &mut Histogram, r: &Rounder, scratch: &mut Vec<f32>) -> RoundCounts;
}

fn add_f32_blocks(
    n: usize,
    h: &mut Histogram,
    r: &Rounder,
    scratch: &mut Vec<f32>,
    widen: impl Fn(usize, &mut [f32]),
) -> RoundCounts {
    let mut counts = RoundCounts::default();
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        scratch.resize(len, 0.0);
        widen(start, scratch);
        h.par_add_f32(scratch);
        counts += r.par_round_f32_slice_at(scratch, start as u64);
    }
    counts
}

impl Stored for f32 {
    fn add(xs: &[f32], h: &mut Histogram, r: &Rounder, scratch: &mut Vec<f32>) -> RoundCounts {
        // The histogram reads the array where it lies; only the rounding needs a scratch copy.
        h.par_add_f32(xs);
        let mut counts = RoundCounts::default();
        for (b, block) in xs.chunks(BLOCK).enumerate() {
            scratch.clear();
            scratch.extend_from_slice(block);
            counts += r.par_round_f32_slice_at(scratch, (b * BLOCK) as u64);
        }
        counts
    }
}

impl Stored for f64 {
    fn add(xs: &[f64], h: &mut Histogram, r: &Rounder, _: &mut Vec<f32>) -> RoundCounts {
        h.par_add_f64(xs);
        let mut counts = RoundCounts::default();
        let mut scratch = Vec::with_capacity(BLOCK.min(xs.len()));
        for (b, block) in xs.chunks(BLOCK).enumerate() {
            scratch.clear();
            scratch.extend_from_slice(block);
            counts += r.par_round_f64_slice_at(&mut scratch, (b * BLOCK) as u64);
        }
        counts
    }
}

/// 16-bit patterns: fp16 or bf16 values as torch hands them over (viewed as int16, since numpy
/// has no bfloat16). Widened exactly to f32 a block at a time.
#[derive(Clone, Copy)]
enum Half {
    F16,
    Bf16,
}

fn add_half(
    bits: &[i16],
    kind: Half,
    h: &mut Histogram,
    r: &Rounder,
    scratch: &mut Vec<f32>,
) -> RoundCounts {
    add_f32_blocks(bits.len(), h, r, scratch, |start, out| {
        let src = &bits[start..start + out.len()];
        for (o, &b) in out.iter_mut().zip(src) {
            *o = match kind {
                Half::F16 => half::f16::from_bits(b as u16).to_f32(),
                Half::Bf16 => half::bf16::from_bits(b as u16).to_f32(),
            };
        }
    })
}

/// Counts `(underflow, subnormal, overflow, nan, infinite)` as the library's type.
fn round_counts(
    (underflow, subnormal, overflow, nan, infinite): (u64, u64, u64, u64, u64),
) -> RoundCounts {
    RoundCounts {
        underflow,
        subnormal,
        overflow,
        nan,
        infinite,
    }
}

/// A contiguous view's slice, or a C-order copy of a strided one.
fn with_slice<T: Copy, R>(v: ArrayViewD<'_, T>, f: impl FnOnce(&[T]) -> R) -> R {
    match v.as_slice() {
        Some(xs) => f(xs),
        None => f(&v.iter().copied().collect::<Vec<_>>()),
    }
}

/// The largest `key` of the elements of `v`, an array in any layout: a float's bit pattern
/// with the sign bit masked off, which orders as its magnitude (infinity above every finite
/// value, NaN above infinity). Where the elements fill one block of memory (the transpose of
/// a contiguous tensor included: order does not matter), one pass over it, which LLVM
/// vectorises (a plain fold: 0.06 ns a 16-bit value on a Xeon, where 32 hand-kept lanes ran
/// scalar at 0.55 ns); else element by element.
fn max_key<E: Copy, K: Copy + Ord + Default>(v: ArrayViewD<'_, E>, key: impl Fn(E) -> K) -> K {
    match v.as_slice_memory_order() {
        Some(xs) => max_key_of(xs, key),
        None => v.iter().fold(K::default(), |m, &x| m.max(key(x))),
    }
}

/// [`max_key`] of a slice.
pub(crate) fn max_key_of<E: Copy, K: Copy + Ord + Default>(xs: &[E], key: impl Fn(E) -> K) -> K {
    xs.iter().fold(K::default(), |m, &x| m.max(key(x)))
}

/// The largest magnitude among `values`, exact in f64: infinity where one is infinite and
/// none NaN, NaN where one is NaN, 0 for none. `kind`: `"float"` for a float32 array, `"f16"`
/// or `"bf16"` for an int16 array of such bit patterns (as `Capture.add` takes them). One pass
/// over the bits, several times faster than torch's `aminmax` of a half-precision tensor on
/// the CPU: the recorder's largest gradient (`grad_amax`) and `Simulate`'s.
#[pyfunction]
pub fn amax(py: Python<'_>, values: &Bound<'_, PyAny>, kind: &str) -> PyResult<f64> {
    match kind {
        "float" => {
            let a = values.cast::<PyArrayDyn<f32>>()?.try_readonly()?;
            let view = a.as_array();
            let m = py.detach(|| match view.as_slice_memory_order() {
                Some(xs) => amax_bits(xs),
                None => max_key(view, |x: f32| x.to_bits() & 0x7fff_ffff),
            });
            Ok(f64::from(f32::from_bits(m)))
        }
        "f16" | "bf16" => {
            let a = values.cast::<PyArrayDyn<i16>>()?.try_readonly()?;
            let view = a.as_array();
            let m = py.detach(|| max_key(view, |x: i16| x & 0x7fff)) as u16;
            Ok(match kind {
                "f16" => half::f16::from_bits(m).to_f64(),
                _ => half::bf16::from_bits(m).to_f64(),
            })
        }
        _ => Err(PyTypeError::new_err(format!(
            "kind: expected 'float' (a float32 array), 'f16' or 'bf16' (an int16 array), got \
             '{kind}'"
        ))),
    }
}

/// The largest magnitudes of the gradients a backward pass's hooked nodes pass on and receive
/// (the recorder's `grad_amax`), one call per node: a Python call per gradient, inside the
/// backward pass, cost more than reading it. A dense contiguous torch tensor on the CPU in
/// float32, float16 or bfloat16 is read where it lies (as [`amax`] reads a numpy view of its
/// bits, without making the view: 0.3 us a tensor where `.view(torch.int16).numpy()` took
/// 1.5); any other (another device, dtype or layout, a subclass) goes to `fallback`,
/// `mixprec._torch_round.amax`. Its [`NodeHook`]s, the hooks themselves, keep here what
/// they read.
#[pyclass(module = "mixprec._mixprec", frozen)]
pub struct GradAmax {
    tensor: Py<PyAny>,
    strided: Py<PyAny>,
    float32: Py<PyAny>,
    float16: Py<PyAny>,
    bfloat16: Py<PyAny>,
    fallback: Py<PyAny>,
    /// `torch._C._current_graph_task_id`: which backward pass runs.
    task: Py<PyAny>,
    /// Per node hook called: the backward pass's id, the largest finite magnitude of the
    /// gradients it read, and whether one held an inf or NaN.
    seen: Mutex<Vec<(i64, f64, bool)>>,
}

impl GradAmax {
    /// The largest magnitude of tensor `t`, as [`amax`] gives it; None for an empty one.
    fn magnitude(&self, py: Python<'_>, t: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        let dtype = t.getattr(intern!(py, "dtype"))?;
        let size = if dtype.is(&self.float32) {
            4
        } else if dtype.is(&self.float16) || dtype.is(&self.bfloat16) {
            2
        } else {
            0
        };
        if size > 0
            && t.get_type().is(&self.tensor)
            && t.getattr(intern!(py, "is_cpu"))?.is_truthy()?
            && t.getattr(intern!(py, "layout"))?.is(&self.strided)
        {
            let shape: Vec<usize> = t.getattr(intern!(py, "shape"))?.extract()?;
            if shape.contains(&0) {
                return Ok(None);
            }
            let strides: Vec<usize> = t.call_method0(intern!(py, "stride"))?.extract()?;
            let n = dense_span(&shape, &strides);
            let ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
            if let Some(n) = n.filter(|_| ptr != 0 && ptr.is_multiple_of(size)) {
                // SAFETY: `t` is a CPU tensor whose distinct elements fill `n` elements of `size`
                // bytes from `ptr` (torch's `data_ptr`, its storage offset included; see
                // `dense_span`), aligned; `t`, held here with the GIL, keeps its storage alive
                // and unchanged by Python code for the call (as a numpy view of it would be).
                return Ok(Some(unsafe {
                    if size == 4 {
                        let xs = std::slice::from_raw_parts(ptr as *const f32, n);
                        f64::from(f32::from_bits(amax_bits(xs)))
                    } else {
                        let xs = std::slice::from_raw_parts(ptr as *const u16, n);
                        let m = max_key_of(xs, |x| x & 0x7fff);
                        if dtype.is(&self.float16) {
                            half::f16::from_bits(m).to_f64()
                        } else {
                            half::bf16::from_bits(m).to_f64()
                        }
                    }
                }));
            }
        }
        if t.call_method0(intern!(py, "numel"))?.extract::<usize>()? == 0 {
            return Ok(None);
        }
        Ok(Some(self.fallback.bind(py).call1((t,))?.extract()?))
    }
}

/// The number of elements from a tensor's first (its `data_ptr`) that its distinct elements
/// fill, where they fill a block of memory with nothing else in it, in any order: a contiguous
/// tensor, a transpose or permutation of one (a linear layer's weight gradient, attention's
/// per-head gradients), one broadcast along some dimensions (stride 0: its values repeat).
/// None where the tensor skips elements (a strided slice) or overlaps itself otherwise. The
/// largest magnitude does not depend on the order, so one pass over the block reads it.
fn dense_span(shape: &[usize], strides: &[usize]) -> Option<usize> {
    let mut dims: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|&(&size, &stride)| size > 1 && stride > 0)
        .map(|(&size, &stride)| (stride, size))
        .collect();
    dims.sort_unstable();
    let mut span = 1;
    for (stride, size) in dims {
        if stride != span {
            return None;
        }
        span *= size;
    }
    Some(span)
}

impl GradAmax {
    /// Of the gradients `grad_inputs[i]` for `i` in `passed` and `grad_outputs[k]` for `k` in
    /// `sums` (None and empty tensors skipped): the largest finite magnitude (0 for none), how
    /// many were read, whether one of `passed`'s held an inf or NaN, and whether one of any.
    /// With `cast` (the node casts what it receives into its input's dtype), each gradient
    /// passed on is read with the gradient received (`grad_outputs[0]`, the values before
    /// rounding) where their shapes agree; only the one passed on counts as passed.
    fn read(
        &self,
        py: Python<'_>,
        grad_inputs: &Bound<'_, PyAny>,
        passed: &Bound<'_, PyList>,
        grad_outputs: &Bound<'_, PyAny>,
        sums: &Bound<'_, PyList>,
        cast: bool,
    ) -> PyResult<(f64, usize, bool, bool)> {
        let (mut largest, mut read, mut passed_bad, mut bad) = (0.0f64, 0, false, false);
        let mut take = |g: &Bound<'_, PyAny>, is_passed: bool| -> PyResult<()> {
            if let Some(m) = self.magnitude(py, g)? {
                read += 1;
                if m.is_finite() {
                    largest = largest.max(m);
                } else {
                    bad = true;
                    passed_bad |= is_passed;
                }
            }
            Ok(())
        };
        let shape = intern!(py, "shape");
        for i in passed.iter() {
            let g = grad_inputs.get_item(i)?;
            if g.is_none() {
                continue;
            }
            if cast {
                let src = grad_outputs.get_item(0)?;
                if !src.is_none() && src.getattr(shape)?.eq(g.getattr(shape)?)? {
                    take(&src, false)?;
                }
            }
            take(&g, true)?;
        }
        for k in sums.iter() {
            let g = grad_outputs.get_item(k)?;
            if !g.is_none() {
                take(&g, false)?;
            }
        }
        Ok((largest, read, passed_bad, bad))
    }

    fn seen(&self) -> PyResult<std::sync::MutexGuard<'_, Vec<(i64, f64, bool)>>> {
        self.seen
            .lock()
            .map_err(|_| PyRuntimeError::new_err("GradAmax: a hook panicked"))
    }
}

#[pymethods]
impl GradAmax {
    #[new]
    fn new(
        tensor: Py<PyAny>,
        strided: Py<PyAny>,
        float32: Py<PyAny>,
        float16: Py<PyAny>,
        bfloat16: Py<PyAny>,
        fallback: Py<PyAny>,
        task: Py<PyAny>,
    ) -> Self {
        GradAmax {
            tensor,
            strided,
            float32,
            float16,
            bfloat16,
            fallback,
            task,
            seen: Mutex::new(Vec::new()),
        }
    }

    /// What the hooks read since the last call, per hook called: (backward pass's id, largest
    /// finite magnitude, whether one held an inf or NaN); then forgets it.
    fn take(&self) -> PyResult<Vec<(i64, f64, bool)>> {
        Ok(std::mem::take(&mut *self.seen()?))
    }
}

/// A post hook on an autograd node (`node.register_hook(NodeHook(...))`): reads the gradients
/// it passes on along the edges `passed` and receives at the inputs `sums` (lists, which grow
/// while the graph is looked at) into its [`GradAmax`], and where one it passed on held an inf
/// or NaN calls `nonfinite(node, grad_outputs, passed)`. A `cast` node (the backward of
/// `.to(dtype)`) also reads, beside each gradient it passes on, the gradient it received: the
/// values before rounding. In Rust, so that the backward pass calls no Python per node hooked
/// (a `functools.partial` of a method cost GPT-2 ~0.3 ms a step).
#[pyclass(module = "mixprec._mixprec", frozen)]
pub struct NodeHook {
    reader: Py<GradAmax>,
    node: Py<PyAny>,
    passed: Py<PyList>,
    sums: Py<PyList>,
    nonfinite: Py<PyAny>,
    cast: bool,
}

#[pymethods]
impl NodeHook {
    #[new]
    #[pyo3(signature = (reader, node, passed, sums, nonfinite, cast = false))]
    pub(crate) fn new(
        reader: Py<GradAmax>,
        node: Py<PyAny>,
        passed: Py<PyList>,
        sums: Py<PyList>,
        nonfinite: Py<PyAny>,
        cast: bool,
    ) -> Self {
        NodeHook {
            reader,
            node,
            passed,
            sums,
            nonfinite,
            cast,
        }
    }

    fn __call__(
        &self,
        py: Python<'_>,
        grad_inputs: &Bound<'_, PyAny>,
        grad_outputs: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let reader = self.reader.get();
        let task: i64 = reader.task.bind(py).call0()?.extract()?;
        let passed = self.passed.bind(py);
        let (largest, read, passed_bad, bad) = reader.read(
            py,
            grad_inputs,
            passed,
            grad_outputs,
            self.sums.bind(py),
            self.cast,
        )?;
        if read > 0 {
            reader.seen()?.push((task, largest, bad));
        }
        if passed_bad {
            self.nonfinite
                .bind(py)
                .call1((self.node.bind(py), grad_outputs, passed))?;
        }
        Ok(())
    }
}

/// The sites of one capture step: log2 histograms (`CAPTURE_SUB_BINS_LOG2`, as `mixprec
/// train`'s captures) of the values before rounding, and the counts of rounding them into the
/// format, per (layer, tensor class, part), merged over the tensors added to each: the run
/// layer's `CaptureBuilder`, the one `mixprec train` builds its captures with.
#[pyclass(module = "mixprec._mixprec")]
pub struct Capture {
    format: FloatFormat,
    rounder: Rounder,
    builder: CaptureBuilder,
}

impl Capture {
    fn site(
        &mut self,
        layer: &str,
        tensor: &str,
        part: Option<&str>,
    ) -> PyResult<&mut SiteCapture> {
        Ok(self.builder.site(layer, class(tensor)?, part))
    }

    /// Takes the sites out, in record order.
    fn take_sites(&mut self) -> Vec<SiteCapture> {
        self.builder.take()
    }
}

/// `f` of the values of the numpy array `values` of `T` (read where they lie, or copied into C
/// order when strided), run without the GIL.
fn read_array<T: Element + Copy + Sync, R: Send>(
    py: Python<'_>,
    values: &Bound<'_, PyAny>,
    f: impl FnOnce(&[T]) -> R + Send,
) -> PyResult<R> {
    let a = values.cast::<PyArrayDyn<T>>()?.try_readonly()?;
    let view = a.as_array();
    Ok(py.detach(|| with_slice(view, f)))
}

#[pymethods]
impl Capture {
    /// A capture whose rounding counts are those of rounding into `format` (nearest-even, IEEE
    /// overflow, subnormals kept); `layers` orders the sites.
    #[new]
    fn new(format: &str, layers: Vec<String>) -> PyResult<Self> {
        let format: FloatFormat = format.parse().map_err(py_err)?;
        Ok(Capture {
            format,
            rounder: Rounder::new(format, RoundOptions::default()),
            builder: CaptureBuilder::new(layers),
        })
    }

    /// Adds the values of `values` (a numpy array, read where it lies) to the site (`layer`,
    /// `tensor`, `part`). `kind`: `"float"` for a float32/float64 array, `"f16"` or `"bf16"`
    /// for an int16 array of such bit patterns.
    #[pyo3(signature = (layer, tensor, part, values, kind))]
    fn add(
        &mut self,
        py: Python<'_>,
        layer: &str,
        tensor: &str,
        part: Option<&str>,
        values: &Bound<'_, PyAny>,
        kind: &str,
    ) -> PyResult<()> {
        let (r, format) = (self.rounder, self.format);
        let site = self.site(layer, tensor, part)?;
        // The counts are of rounding into the capture's format, whatever the recipe stores
        // this class in (the report labels them so).
        site.rounded_into = Some(format);
        let h = &mut site.values;
        let counts = match kind {
            "float" if values.cast::<PyArrayDyn<f32>>().is_ok() => {
                read_array(py, values, |xs| f32::add(xs, h, &r, &mut Vec::new()))
            }
            "float" if values.cast::<PyArrayDyn<f64>>().is_ok() => {
                read_array(py, values, |xs| f64::add(xs, h, &r, &mut Vec::new()))
            }
            "f16" | "bf16" => {
                let half = if kind == "f16" { Half::F16 } else { Half::Bf16 };
                read_array(py, values, |xs| add_half(xs, half, h, &r, &mut Vec::new()))
            }
            _ => Err(PyTypeError::new_err(format!(
                "values: expected a float32/float64 array (kind 'float') or an int16 array \
                 (kind 'f16' or 'bf16'), got kind '{kind}'"
            ))),
        }?;
        site.rounding += counts;
        Ok(())
    }

    /// Adds the float32 values of `values` (as a storage point held them before rounding) to
    /// the site's histogram, with the counts `(underflow, subnormal, overflow, nan, infinite)`
    /// of the rounding that storage point did (into its own format): how
    /// `mixprec.torch.Simulate` captures, as `mixprec train`'s storage points observe.
    fn add_stored(
        &mut self,
        py: Python<'_>,
        layer: &str,
        tensor: &str,
        part: Option<&str>,
        values: &Bound<'_, PyAny>,
        rounding: (u64, u64, u64, u64, u64),
    ) -> PyResult<()> {
        // The array is checked before the site is made, so a bad one adds no empty site.
        let a = values.cast::<PyArrayDyn<f32>>()?.try_readonly()?;
        let view = a.as_array();
        let site = self.site(layer, tensor, part)?;
        let h = &mut site.values;
        py.detach(|| with_slice(view, |xs| h.par_add_f32(xs)));
        site.rounding += round_counts(rounding);
        Ok(())
    }

    /// The sites as `captures.jsonl` writes them (a JSON list), in record order; with
    /// `batch_only`, only those of the classes computed from the batch (activations, their
    /// gradients, the operands cast from them: what each data-parallel rank holds of its own).
    #[pyo3(signature = (batch_only=false))]
    fn sites_json(&self, batch_only: bool) -> PyResult<String> {
        let mut sites = self.builder.sites();
        if batch_only {
            sites.retain(|s| s.tensor.from_batch());
        }
        serde_json::to_string(&sites).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Merges `sites_json` (another capture's [`Capture::sites_json`]: another rank's, of the
    /// same step) into this capture, site by site (`mixprec::run::CaptureBuilder::merge`): the
    /// histograms' and rounding counts add, amax is the larger, the smallest nonzero magnitude
    /// the smaller, the sums of magnitudes and squares add.
    ///
    /// # Errors
    /// JSON that is not a list of sites, or a site whose histogram is not a capture's, or whose
    /// counts are of rounding into another format than this capture's sites'.
    fn merge_json(&mut self, sites_json: &str) -> PyResult<()> {
        let sites: Vec<SiteCapture> = parse("sites", sites_json)?;
        let mine = self.builder.sites();
        for s in &sites {
            let s_bins = s.values.sub_bins_log2();
            if s_bins != run::CAPTURE_SUB_BINS_LOG2 {
                return Err(PyValueError::new_err(format!(
                    "sites: site ({}, {}): a histogram of 2^{s_bins} sub-bins per octave, not a \
                     capture's 2^{}",
                    s.layer,
                    s.tensor.name(),
                    run::CAPTURE_SUB_BINS_LOG2
                )));
            }
            let clash = mine.iter().find(|m| {
                (&m.layer, m.tensor, &m.part) == (&s.layer, s.tensor, &s.part)
                    && m.rounded_into.is_some()
                    && s.rounded_into.is_some()
                    && m.rounded_into != s.rounded_into
            });
            if let Some(m) = clash {
                return Err(PyValueError::new_err(format!(
                    "sites: site ({}, {}): counts of rounding into {:?}, this capture's into {:?}",
                    s.layer,
                    s.tensor.name(),
                    s.rounded_into.map(|f| f.name()),
                    m.rounded_into.map(|f| f.name()),
                )));
            }
        }
        self.builder.merge(&sites);
        Ok(())
    }
}

/// A run directory to be written: `mixprec::run::RunWriter` (the `INCOMPLETE` marker,
/// `config.json`, append-only logs, `summary.json`), created by [`RunWriter::create`] or the
/// first step (or `finish`): a recorder that is made and never used writes nothing. Dropped
/// unfinished, it writes out the lines it holds and leaves the marker: a crashed loop leaves a
/// reportable run.
#[pyclass(module = "mixprec._mixprec")]
pub struct RunWriter {
    state: State,
    path: PathBuf,
    flush_every: Duration,
    /// The outermost directory that creating the run made (`path` or an ancestor), or None
    /// when `path` existed (empty) before: what [`RunWriter::discard`] removes.
    made: Option<PathBuf>,
    /// The steps written.
    steps: u64,
}

/// Where a [`RunWriter`] stands.
enum State {
    /// Checked (config and directory), nothing written yet.
    Pending(RecordedConfig),
    Open(run::RunWriter),
    Finished,
}

impl RunWriter {
    /// The library's writer, the directory created first if it is still pending.
    fn writer(&mut self) -> PyResult<&mut run::RunWriter> {
        if let State::Pending(config) = &self.state {
            self.made = self
                .path
                .ancestors()
                .take_while(|p| !p.as_os_str().is_empty() && !p.exists())
                .last()
                .map(PathBuf::from);
            let mut inner = run::RunWriter::create(&self.path, config, false).map_err(py_err)?;
            inner.set_flush_every(self.flush_every);
            self.state = State::Open(inner);
        }
        match &mut self.state {
            State::Open(w) => Ok(w),
            _ => Err(finished(&self.path)),
        }
    }
}

fn finished(path: &std::path::Path) -> PyErr {
    PyRuntimeError::new_err(format!("{}: the run is already finished", path.display()))
}

#[pymethods]
impl RunWriter {
    /// The run directory `path` (new, or empty: checked now, created by `create` or the first
    /// step) with `config_json` as `config.json`: a `RecordedConfig`
    /// (`mixprec::run::RecordedConfig`: `source`, the `recipe` the loop trained with, `format`,
    /// `capture_every`, and the recorder's other keys), written in its resolved form (the
    /// recipe in full, as `mixprec train` writes its own). A step's line reaches the file within
    /// `flush_every` seconds (and at every capture and flush).
    #[new]
    #[pyo3(signature = (path, config_json, flush_every=run::FLUSH_EVERY.as_secs_f64()))]
    fn new(path: PathBuf, config_json: &str, flush_every: f64) -> PyResult<Self> {
        let flush_every = Duration::try_from_secs_f64(flush_every).map_err(|_| {
            PyValueError::new_err(format!(
                "flush_every: expected a finite number of seconds >= 0, got {flush_every}"
            ))
        })?;
        let config: RecordedConfig = parse("config", config_json)?;
        config.recipe.validate().map_err(py_err)?;
        // A config that `mixprec train` would read is a train run's, not a recorder's.
        let value =
            serde_json::to_value(&config).map_err(|e| PyValueError::new_err(e.to_string()))?;
        if serde_json::from_value::<TrainConfig>(value).is_ok() {
            return Err(PyValueError::new_err(
                "config: a recorded run's config must not read as a `mixprec train` config",
            ));
        }
        run::RunWriter::check_dir(&path).map_err(py_err)?;
        Ok(RunWriter {
            state: State::Pending(config),
            path,
            flush_every,
            made: None,
            steps: 0,
        })
    }

    /// Creates the run directory (the marker, `config.json` and the empty logs), if not yet
    /// created.
    fn create(&mut self) -> PyResult<()> {
        self.writer().map(|_| ())
    }

    /// Whether the run directory has been created.
    #[getter]
    fn created(&self) -> bool {
        !matches!(self.state, State::Pending(_))
    }

    /// Appends one line to `metrics.jsonl`: `record_json`, a `StepRecord` (checked against the
    /// schema). With `capture`, also its line of `captures.jsonl` (the step's `loss_scale`), and
    /// the step's `counts` are the capture's, per tensor class (without, no class stored
    /// anything that the recorder saw, and `counts` is empty).
    #[pyo3(signature = (record_json, capture=None))]
    fn step(&mut self, record_json: &str, capture: Option<&Bound<'_, Capture>>) -> PyResult<()> {
        let mut record: StepRecord = parse("step record", record_json)?;
        let capture = capture.map(|c| {
            let sites = c.borrow_mut().take_sites();
            record.counts = class_counts(&sites);
            CaptureRecord {
                step: record.step,
                loss_scale: Some(record.loss_scale),
                sites,
                update_ratios: Vec::new(),
            }
        });
        let w = self.writer()?;
        if let Some(capture) = &capture {
            w.capture(capture).map_err(py_err)?;
        }
        w.step(&record).map_err(py_err)?;
        self.steps += 1;
        Ok(())
    }

    /// Writes the lines held in memory to the logs (none before the directory is created).
    fn flush(&mut self) -> PyResult<()> {
        if let State::Pending(_) = self.state {
            return Ok(());
        }
        self.writer()?.flush().map_err(py_err)
    }

    /// Finishes the run: writes `summary.json` and removes the marker. The steps, skipped and
    /// overflow steps, final loss and divergence come from the steps written
    /// (`mixprec::run::RunWriter::summary`, the code `mixprec train` uses); the caller
    /// gives the recipe's name, the trainable scalars, whether every weight is finite, the wall
    /// time and the evaluation `metric` (name, value), by default the mean of the finite losses
    /// of the last 20 steps, named `mean_loss_last_20_steps`, and, for a recipe that casts the
    /// operands of products, the `coverage` of those casts as JSON (`mixprec::run::Coverage`).
    /// Returns the summary as JSON.
    #[pyo3(signature = (recipe, parameters, weights_finite, wall_seconds, metric=None, coverage_json=None))]
    fn finish(
        &mut self,
        recipe: &str,
        parameters: usize,
        weights_finite: bool,
        wall_seconds: f64,
        metric: Option<(String, f64)>,
        coverage_json: Option<&str>,
    ) -> PyResult<String> {
        let coverage: Option<Coverage> = coverage_json
            .map(|json| parse("coverage", json))
            .transpose()?;
        self.writer()?;
        let State::Open(w) = std::mem::replace(&mut self.state, State::Finished) else {
            return Err(finished(&self.path));
        };
        let (name, value) = metric.unwrap_or_else(|| {
            (
                format!("mean_loss_last_{}_steps", run::RECENT_STEPS),
                w.recent_mean_loss(),
            )
        });
        let summary = Summary {
            coverage,
            ..w.summary(
                recipe,
                EvalMetric {
                    name,
                    value,
                    chance: None,
                },
                parameters,
                weights_finite,
                wall_seconds,
            )
        };
        w.finish(&summary).map_err(py_err)?;
        serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Removes what creating the run made, and finishes it: a run that recorded no step (a loop
    /// that failed while setting up) leaves nothing behind. The directory `path`, with any
    /// parents it needed, is removed when it was made; one that existed (empty) stays, empty
    /// of the run's files.
    ///
    /// # Errors
    /// A run that recorded a step, or a failed removal.
    fn discard(&mut self) -> PyResult<()> {
        let State::Open(w) = std::mem::replace(&mut self.state, State::Finished) else {
            return Ok(()); // nothing was created
        };
        if self.steps > 0 {
            self.state = State::Open(w);
            return Err(PyRuntimeError::new_err(format!(
                "{}: the run has recorded steps; only a run without any is discarded",
                self.path.display()
            )));
        }
        drop(w);
        let io =
            |e: std::io::Error| PyRuntimeError::new_err(format!("{}: {e}", self.path.display()));
        match &self.made {
            Some(made) => std::fs::remove_dir_all(made).map_err(io),
            None => {
                for name in [
                    run::INCOMPLETE,
                    run::CONFIG,
                    run::METRICS,
                    run::CAPTURES,
                    run::SHADOW,
                ] {
                    match std::fs::remove_file(self.path.join(name)) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                        _ => {}
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether the run is still open (not finished; perhaps not yet created).
    #[getter]
    fn open(&self) -> bool {
        !matches!(self.state, State::Finished)
    }
}

impl Drop for RunWriter {
    fn drop(&mut self) {
        if let State::Open(w) = &mut self.state {
            // Nothing to report the error to; the lines already written stay readable.
            let _ = w.flush();
        }
    }
}
