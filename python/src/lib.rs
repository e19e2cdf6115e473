//! `mixprec._mixprec`: the native half of the `mixprec` Python package.
//!
//! Thin on purpose: arguments are checked and documented in `mixprec/__init__.py`; this module
//! parses names with the library's own parsers (so messages are the command line's), takes
//! zero-copy views of numpy arrays, and runs the library's parallel paths with the GIL released.

mod graph;
mod record;
mod simulate;

use std::path::PathBuf;

use mixprec::Error;
use mixprec::analysis::block::{BlockInput, BlockOptions, TensorAmax, analyze_blocks};
use mixprec::analysis::{AnalysisOptions, TensorInput, analyze, parse_log2_scales};
use mixprec::format::explain::explain_value;
use mixprec::format::{
    BlockFormat, BlockRounder, FloatFormat, Overflow, RoundCounts, RoundOptions, Rounder, Rounding,
    Target, amax_bits, split_targets,
};
use mixprec::io::{Dtype, TensorInfo, Values};
use numpy::ndarray::{ArrayViewD, ArrayViewMutD, ShapeError};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The path recorded for tensors given as arrays (the `file` field of `analyze`'s result).
const ARRAY_PATH: &str = "<array>";

/// A library error as the Python exception a caller expects, with the command line's message.
pub(crate) fn py_err(e: Error) -> PyErr {
    match e {
        Error::Io { .. } => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// The element types the library rounds, in place or from a source.
trait Float: Element + Copy + Send + Sync {
    fn round(r: &Rounder, xs: &mut [Self]) -> RoundCounts;
    /// Rounds `src` into `dst` (same length, disjoint).
    fn round_into(r: &Rounder, src: &[Self], dst: &mut [Self]) -> RoundCounts;
    /// Rounds the row-major matrix `xs` of `cols` columns into a block format.
    fn round_blocks(r: &BlockRounder, xs: &mut [Self], cols: usize) -> RoundCounts;
}

impl Float for f32 {
    fn round(r: &Rounder, xs: &mut [f32]) -> RoundCounts {
        r.par_round_f32_slice_at(xs, 0)
    }
    /// One pass: the destination (a fresh `np.empty` array, usually) is only written.
    fn round_into(r: &Rounder, src: &[f32], dst: &mut [f32]) -> RoundCounts {
        r.par_round_f32_into(src, dst, 0)
    }
    fn round_blocks(r: &BlockRounder, xs: &mut [f32], cols: usize) -> RoundCounts {
        r.par_round_matrix_at(xs, cols, 0)
    }
}

impl Float for f64 {
    fn round(r: &Rounder, xs: &mut [f64]) -> RoundCounts {
        r.par_round_f64_slice_at(xs, 0)
    }
    /// f64 values go one by one through the exact path: the copy is a small part of it.
    fn round_into(r: &Rounder, src: &[f64], dst: &mut [f64]) -> RoundCounts {
        dst.copy_from_slice(src);
        r.par_round_f64_slice_at(dst, 0)
    }
    fn round_blocks(r: &BlockRounder, xs: &mut [f64], cols: usize) -> RoundCounts {
        r.round_matrix_f64_at(xs, cols, 0)
    }
}

/// Rounds `src` (or `dst` itself when `src` is `None`) into `dst`, positions in C order, with
/// `round` (in place) or `round_into` (from a source).
///
/// A C-contiguous `dst` is rounded where it lies: from a C-contiguous `src` in one pass, else
/// after one copy of `src` into it; any other layout goes through one contiguous buffer, so
/// that the stream positions (which pick the random bits of stochastic rounding, and the
/// blocks of a block format) are always the logical C-order indices.
fn round_views<T: Float>(
    src: Option<ArrayViewD<'_, T>>,
    mut dst: ArrayViewMutD<'_, T>,
    round: impl Fn(&mut [T]) -> RoundCounts,
    round_into: impl FnOnce(&[T], &mut [T]) -> RoundCounts,
) -> RoundCounts {
    if dst.is_standard_layout() {
        if let Some(src) = &src {
            if let (Some(s), Some(d)) = (src.as_slice(), dst.as_slice_mut()) {
                return round_into(s, d);
            }
            dst.assign(src);
        }
        if let Some(xs) = dst.as_slice_mut() {
            return round(xs);
        }
    }
    let mut buf: Vec<T> = match &src {
        Some(src) => src.iter().copied().collect(),
        None => dst.iter().copied().collect(),
    };
    let counts = round(&mut buf);
    for (d, v) in dst.iter_mut().zip(buf) {
        *d = v;
    }
    counts
}

/// Borrows `x` (unless it is `out` itself) and `out` as `T` arrays and runs `f` on their views
/// with the GIL released: `f(None, out)` rounds `out` in place, `f(Some(x), out)` from `x`.
fn with_views<T: Float, R: Send>(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    f: impl FnOnce(Option<ArrayViewD<'_, T>>, ArrayViewMutD<'_, T>) -> R + Send,
) -> PyResult<R> {
    let out = out.cast::<PyArrayDyn<T>>()?;
    let mut w = out
        .try_readwrite()
        .map_err(|e| PyValueError::new_err(format!("out: {e}")))?;
    if x.is(out) {
        let view = w.as_array_mut();
        return Ok(py.detach(|| f(None, view)));
    }
    let x = x.cast::<PyArrayDyn<T>>()?;
    let rx = x
        .try_readonly()
        .map_err(|e| PyValueError::new_err(format!("x: {e}")))?;
    let (src, dst) = (rx.as_array(), w.as_array_mut());
    Ok(py.detach(|| f(Some(src), dst)))
}

/// Rounds `src` into `dst` (`dst` in place when `src` is `None`), element by element or by
/// blocks as `target` says.
fn round_target_views<T: Float>(
    target: Target,
    options: RoundOptions,
    src: Option<ArrayViewD<'_, T>>,
    dst: ArrayViewMutD<'_, T>,
) -> RoundCounts {
    match target {
        Target::Element(format) => {
            let r = Rounder::new(format, options);
            round_views(
                src,
                dst,
                |xs| T::round(&r, xs),
                |s, d| T::round_into(&r, s, d),
            )
        }
        Target::Block(format) => {
            // Blocks run along the last axis (tiles over the last two, leading axes folded
            // into rows); an empty array has no blocks to scale.
            let r = BlockRounder::new(format, options);
            let cols = dst.shape().last().copied().unwrap_or(1);
            let round = |xs: &mut [T]| match xs.is_empty() {
                true => RoundCounts::default(),
                false => T::round_blocks(&r, xs, cols),
            };
            round_views(src, dst, round, |s, d| {
                d.copy_from_slice(s);
                round(d)
            })
        }
    }
}

/// Rounds `x` into `out` (the same array, or one of the same dtype and shape that shares no
/// memory with it) and returns the counts as a dict.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn quantize_into<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    format: &str,
    rounding: &str,
    overflow: &str,
    subnormals: bool,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let target: Target = format.parse().map_err(py_err)?;
    let options = round_options(rounding, overflow, subnormals, seed)?;
    let counts = if out.cast::<PyArrayDyn<f32>>().is_ok() {
        with_views::<f32, _>(py, x, out, |s, d| round_target_views(target, options, s, d))?
    } else if out.cast::<PyArrayDyn<f64>>().is_ok() {
        with_views::<f64, _>(py, x, out, |s, d| round_target_views(target, options, s, d))?
    } else {
        return Err(PyTypeError::new_err(
            "out: expected a numpy float32 or float64 array",
        ));
    };
    counts_dict(py, counts)
}

/// One storage point's rounding (a format and a recipe's options, parsed once) of float32
/// torch tensors on the CPU, read and written where they lie: `Simulate`'s hot path, a hundred
/// calls a step on a small transformer, where `quantize_into`'s parsing, numpy views and
/// counts dict cost as much as rounding a 16K-value tensor.
#[pyclass(module = "mixprec._mixprec", frozen)]
pub struct TensorRounder {
    target: Target,
    options: RoundOptions,
    float32: Py<PyAny>,
}

impl TensorRounder {
    /// The shape and first element of `t`, a dense C-contiguous float32 CPU tensor whose
    /// memory holds its values as they read (no negative view).
    fn raw(&self, t: &Bound<'_, PyAny>, what: &str) -> PyResult<(Vec<usize>, usize)> {
        let py = t.py();
        if !(t.getattr(intern!(py, "dtype"))?.is(&self.float32)
            && t.getattr(intern!(py, "is_cpu"))?.is_truthy()?
            && t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()?
            && !t.call_method0(intern!(py, "is_neg"))?.is_truthy()?)
        {
            return Err(PyTypeError::new_err(format!(
                "{what}: expected a contiguous float32 CPU tensor (not a negative view)"
            )));
        }
        let shape: Vec<usize> = t.getattr(intern!(py, "shape"))?.extract()?;
        let ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
        let offset: usize = t.call_method0(intern!(py, "storage_offset"))?.extract()?;
        // A wrapper subclass (FSDP2's DTensor) has no storage: its data_ptr is 0 plus its
        // storage offset, an address that holds nothing of it.
        let size = std::mem::size_of::<f32>();
        let empty = shape.contains(&0);
        if !empty && (ptr == offset * size || !ptr.is_multiple_of(std::mem::align_of::<f32>())) {
            return Err(PyTypeError::new_err(format!(
                "{what}: a tensor without storage of its own (data_ptr {ptr:#x} at storage \
                 offset {offset}: a DTensor or another wrapper subclass)"
            )));
        }
        Ok((shape, ptr))
    }
}

#[pymethods]
impl TensorRounder {
    #[new]
    fn new(
        format: &str,
        rounding: &str,
        overflow: &str,
        subnormals: bool,
        float32: Py<PyAny>,
    ) -> PyResult<Self> {
        Ok(TensorRounder {
            target: format.parse().map_err(py_err)?,
            options: round_options(rounding, overflow, subnormals, 0)?,
            float32,
        })
    }

    /// Rounds `src` into `dst` (the same tensor, or one of its shape that shares no memory
    /// with it; contiguous float32 on the CPU, `float32` the constructor's torch.float32) with
    /// the stochastic stream `seed`, as `quantize_into` does; returns the counts (underflow,
    /// subnormal, overflow, nan, infinite) and, with `amax`, the largest finite magnitude of
    /// `src` before rounding (0 for none; the counts' nan and infinite say whether it held
    /// others): a gradient's `grad_amax` read in the same call.
    #[pyo3(signature = (src, dst, seed, amax = false))]
    fn round_into(
        &self,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        seed: u64,
        amax: bool,
    ) -> PyResult<(u64, u64, u64, u64, u64, Option<f64>)> {
        let (shape, from) = self.raw(src, "src")?;
        let (dst_shape, to) = self.raw(dst, "dst")?;
        if shape != dst_shape {
            return Err(PyValueError::new_err(format!(
                "dst: shape {dst_shape:?}, expected the source's {shape:?}"
            )));
        }
        let n: usize = shape.iter().product();
        let options = RoundOptions {
            seed,
            ..self.options
        };
        let top = amax.then_some(0.0);
        if n == 0 {
            return Ok((0, 0, 0, 0, 0, top));
        }
        let bytes = n * std::mem::size_of::<f32>();
        if from != to && from < to + bytes && to < from + bytes {
            return Err(PyValueError::new_err(
                "dst: overlaps src without being it (round in place, or into a tensor of its own)",
            ));
        }
        // SAFETY: `src` and `dst` are dense C-contiguous float32 CPU tensors of `n` elements
        // from `from` and `to` (torch's `data_ptr`, offsets included), held here with the GIL
        // for the call; `dst` is `src` itself or shares no memory with it (checked above).
        let (counts, top) = unsafe {
            // Read before rounding, which may overwrite `src`: the bits of magnitudes order as
            // the magnitudes do (one vectorised pass); where the largest is an infinity or a
            // NaN, a second pass counts those as 0.
            let top = top.map(|_| {
                let xs = std::slice::from_raw_parts(from as *const f32, n);
                let magnitude = |x: f32| x.to_bits() & 0x7fff_ffff;
                let mut bits = amax_bits(xs);
                if bits >= 0x7f80_0000 {
                    let finite = |x: f32| Some(magnitude(x)).filter(|&b| b < 0x7f80_0000);
                    bits = record::max_key_of(xs, |x| finite(x).unwrap_or(0));
                }
                f64::from(f32::from_bits(bits))
            });
            let d = std::slice::from_raw_parts_mut(to as *mut f32, n);
            let shape_err = |e: ShapeError| PyValueError::new_err(e.to_string());
            let d = ArrayViewMutD::from_shape(shape.as_slice(), d).map_err(shape_err)?;
            let s = (from != to).then(|| std::slice::from_raw_parts(from as *const f32, n));
            let s = s
                .map(|s| ArrayViewD::from_shape(shape.as_slice(), s))
                .transpose();
            (
                round_target_views(self.target, options, s.map_err(shape_err)?, d),
                top,
            )
        };
        let RoundCounts {
            underflow,
            subnormal,
            overflow,
            nan,
            infinite,
        } = counts;
        Ok((underflow, subnormal, overflow, nan, infinite, top))
    }
}

/// The rounding options named as the command line's flags name them.
fn round_options(
    rounding: &str,
    overflow: &str,
    subnormals: bool,
    seed: u64,
) -> PyResult<RoundOptions> {
    Ok(RoundOptions {
        rounding: rounding.parse::<Rounding>().map_err(py_err)?,
        overflow: overflow.parse::<Overflow>().map_err(py_err)?,
        subnormals,
        seed,
    })
}

/// How one value (or bit pattern) is stored in an element format, as the JSON of `mixprec
/// explain --json`.
#[pyfunction]
fn explain_json(
    value: &str,
    format: &str,
    rounding: &str,
    overflow: &str,
    subnormals: bool,
    seed: u64,
) -> PyResult<String> {
    let format: FloatFormat = format.parse().map_err(py_err)?;
    let options = round_options(rounding, overflow, subnormals, seed)?;
    let explanation = explain_value(value, &Rounder::new(format, options)).map_err(py_err)?;
    to_json(&explanation)
}

fn counts_dict(py: Python<'_>, c: RoundCounts) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("underflow", c.underflow)?;
    d.set_item("subnormal", c.subnormal)?;
    d.set_item("overflow", c.overflow)?;
    d.set_item("nan", c.nan)?;
    d.set_item("infinite", c.infinite)?;
    Ok(d)
}

/// The formats' properties as JSON, with the keys of `mixprec formats --json` (the presets when
/// `names` is empty).
#[pyfunction]
fn formats_json(names: Vec<String>) -> PyResult<String> {
    let (formats, blocks) = split_targets(&names).map_err(py_err)?;
    let rows: Vec<_> = formats
        .iter()
        .map(FloatFormat::properties)
        .chain(blocks.iter().map(BlockFormat::properties))
        .collect();
    to_json(&rows)
}

/// The library's tables of names (rounding modes and overflow rules with their aliases, tensor
/// classes with their recipe keys, optimizer-state parts, block schemes) as JSON:
/// `mixprec::recipe::catalog::names_json`.
#[pyfunction]
fn names_json() -> PyResult<String> {
    to_json(&mixprec::recipe::catalog::names_json())
}

/// A view of float32 (`Ok`) or float64 (`Err`) values.
type F32OrF64<'a> = Result<ArrayViewD<'a, f32>, ArrayViewD<'a, f64>>;

/// One tensor's values, borrowed from its array for the length of the call.
enum Borrowed<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
}

/// The analysis of named arrays as JSON (what `mixprec analyze --json` prints for files holding
/// them). `tensors` holds (name, float32 or float64 array, dtype name as the files spell it:
/// F64, F32, F16 or BF16, the latter two already widened exactly to float32). A block `format`
/// or a `compare` element gives the block-scaled analysis (`analyze --format mxfp8-e4m3`,
/// `--compare-blocks=ELEMENT`), which refuses `sweep_given` (a non-default scale range, margin or
/// underflow share: those set the loss-scale sweep).
#[pyfunction]
#[pyo3(signature = (tensors, format, scales, margin, max_underflow, compare=None, sweep_given=false))]
#[allow(clippy::too_many_arguments)]
fn analyze_json(
    py: Python<'_>,
    tensors: Vec<(String, Bound<'_, PyAny>, String)>,
    format: &str,
    scales: &str,
    margin: i32,
    max_underflow: f64,
    compare: Option<&str>,
    sweep_given: bool,
) -> PyResult<String> {
    let borrowed = borrow_tensors(&tensors)?;
    let views: Vec<(TensorInfo, F32OrF64<'_>)> = borrowed
        .iter()
        .map(|(info, v)| {
            let view = match v {
                Borrowed::F32(a) => Ok(a.as_array()),
                Borrowed::F64(a) => Err(a.as_array()),
            };
            (info.clone(), view)
        })
        .collect();
    if let Some(options) = BlockOptions::from_names(format, compare, Vec::new()).map_err(py_err)? {
        if sweep_given && compare.is_none() {
            return Err(PyValueError::new_err(format!(
                "scales, margin and max_underflow set the loss-scale sweep of a float format; \
                 block format {} has no loss scale (its blocks scale themselves)",
                format.trim()
            )));
        }
        let analysis = py.detach(move || {
            let mut narrow = Vec::new();
            let tensors = views
                .into_iter()
                .map(|(info, view)| {
                    let mut amax = TensorAmax::default();
                    for_values(&view, &mut |v| amax = amax.with_values(v, &mut narrow));
                    let mut input = BlockInput::new(info, &options, amax);
                    for_values(&view, &mut |v| input.add(v));
                    input.finish()
                })
                .collect();
            analyze_blocks(tensors, Vec::new(), &options)
        });
        return to_json(&analysis);
    }
    let format: FloatFormat = format.parse().map_err(py_err)?;
    let (lo, hi) = parse_log2_scales(scales).map_err(py_err)?;
    let options = AnalysisOptions::checked(format, (lo, hi), margin, max_underflow, Vec::new())
        .map_err(py_err)?;
    let analysis = py.detach(move || {
        let inputs: Vec<TensorInput> = views
            .into_iter()
            .map(|(info, view)| {
                let mut input = TensorInput::new(info, format);
                for_values(&view, &mut |v| input.add(v));
                input
            })
            .collect();
        analyze(inputs, Vec::new(), &options)
    });
    to_json(&analysis)
}

/// `v` as JSON, the way the command line prints it.
fn to_json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Each (name, array, dtype) as its tensor's description and a read-only borrow of its array.
fn borrow_tensors<'py>(
    tensors: &[(String, Bound<'py, PyAny>, String)],
) -> PyResult<Vec<(TensorInfo, Borrowed<'py>)>> {
    let mut borrowed = Vec::with_capacity(tensors.len());
    for (name, array, dtype) in tensors {
        let dtype = match dtype.as_str() {
            "F64" => Dtype::F64,
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            other => return Err(PyTypeError::new_err(format!("{name}: dtype {other}"))),
        };
        let values = if let Ok(a) = array.cast::<PyArrayDyn<f32>>() {
            Borrowed::F32(
                a.try_readonly()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )
        } else if let Ok(a) = array.cast::<PyArrayDyn<f64>>() {
            Borrowed::F64(
                a.try_readonly()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            )
        } else {
            return Err(PyTypeError::new_err(format!(
                "{name}: expected a numpy float32 or float64 array"
            )));
        };
        let shape = match &values {
            Borrowed::F32(a) => a.as_array().shape().to_vec(),
            Borrowed::F64(a) => a.as_array().shape().to_vec(),
        };
        let info = TensorInfo {
            name: name.clone(),
            dtype,
            shape,
            path: PathBuf::from(ARRAY_PATH),
        };
        borrowed.push((info, values));
    }
    Ok(borrowed)
}

/// Gives `add` a view's values in logical (C) order: a contiguous view as it is, any other as a
/// copy.
fn for_values(view: &F32OrF64<'_>, add: &mut dyn FnMut(Values<'_>)) {
    match view {
        Ok(v) => match v.as_slice() {
            Some(xs) => add(Values::F32(xs)),
            None => add(Values::F32(&v.iter().copied().collect::<Vec<_>>())),
        },
        Err(v) => match v.as_slice() {
            Some(xs) => add(Values::F64(xs)),
            None => add(Values::F64(&v.iter().copied().collect::<Vec<_>>())),
        },
    }
}

/// The native half of the `mixprec` package (use `mixprec`, not this module).
#[pymodule]
fn _mixprec(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize_into, m)?)?;
    m.add_function(wrap_pyfunction!(formats_json, m)?)?;
    m.add_function(wrap_pyfunction!(names_json, m)?)?;
    m.add_function(wrap_pyfunction!(explain_json, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_json, m)?)?;
    m.add("ARRAY_PATH", ARRAY_PATH)?;
    m.add_function(wrap_pyfunction!(record::amax, m)?)?;
    m.add_class::<record::GradAmax>()?;
    m.add_class::<record::NodeHook>()?;
    m.add_class::<graph::GraphLook>()?;
    m.add_class::<TensorRounder>()?;
    m.add_class::<record::Capture>()?;
    m.add_class::<record::RunWriter>()?;
    m.add_function(wrap_pyfunction!(simulate::recipe_json, m)?)?;
    m.add_class::<simulate::LossScaler>()?;
    m.add_class::<simulate::DelayedScales>()?;
    m.add_function(wrap_pyfunction!(simulate::train_start, m)?)?;
    m.add_function(wrap_pyfunction!(simulate::welch_json, m)?)?;
    m.add("SCHEMA", mixprec::run::schema::SCHEMA)?;
    Ok(())
}
