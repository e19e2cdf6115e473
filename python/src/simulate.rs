//! The native half of `mixprec.torch.Simulate`: recipes resolved as `train` resolves them
//! ([`recipe_json`]), the loss scaler ([`LossScaler`]) and the fp8 delayed scales
//! ([`DelayedScales`]) of the library, so that a simulated PyTorch loop follows the same rules as
//! the training core, computed by the same code.

use std::collections::HashMap;

use mixprec::recipe::Recipe;
use mixprec::scaling::delayed::DelayedScale;
use mixprec::scaling::scaler::{self, LossScaling};
use mixprec::train::TrainConfig;
use ndarray::Array2;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::py_err;

/// `spec` (a preset name, or a recipe object as JSON text), with its loss scaling replaced by
/// the policy `scaler` when given (`static:2^10`, `gradscaler`, ...: named as `train --scaler`
/// names them), checked, as JSON: what `train` resolves `--recipe` and `--scaler` to.
#[pyfunction]
#[pyo3(signature = (spec, scaler=None))]
pub fn recipe_json(spec: &str, scaler: Option<&str>) -> PyResult<String> {
    let value = match spec.trim_start().starts_with('{') {
        true => serde_json::from_str(spec)
            .map_err(|e| PyValueError::new_err(format!("invalid recipe: {e}")))?,
        false => serde_json::Value::String(spec.to_string()),
    };
    let mut recipe =
        Recipe::from_value(value).map_err(|e| PyValueError::new_err(format!("recipe: {e}")))?;
    if let Some(policy) = scaler {
        recipe = recipe.with_loss_scaling(policy.parse::<LossScaling>().map_err(py_err)?);
    }
    recipe.validate().map_err(py_err)?;
    serde_json::to_string(&recipe).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

fn recipe(json: &str) -> PyResult<Recipe> {
    serde_json::from_str(json).map_err(|e| PyValueError::new_err(format!("recipe: {e}")))
}

/// The recipe's loss scaler (`mixprec::scaling::scaler::LossScaler`).
#[pyclass(module = "mixprec._mixprec")]
pub struct LossScaler(scaler::LossScaler);

#[pymethods]
impl LossScaler {
    /// The scaler of the recipe `recipe_json` (as [`recipe_json`] returns it), at its initial
    /// scale.
    #[new]
    fn new(recipe_json: &str) -> PyResult<Self> {
        Ok(LossScaler(scaler::LossScaler::new(
            recipe(recipe_json)?.loss_scaling,
        )))
    }

    /// The scale the next backward pass uses.
    #[getter]
    fn scale(&self) -> f32 {
        self.0.scale()
    }

    /// Records whether this step's gradients held an inf or NaN, updates the scale, and returns
    /// whether the optimizer step must be skipped. RuntimeError when a scaler that stops at its
    /// minimum scale (DeepSpeed's) overflows there.
    fn update(&mut self, found_inf: bool) -> PyResult<bool> {
        self.0
            .update(found_inf)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

/// Every cast tensor's fp8 delayed scale (`mixprec::scaling::delayed::DelayedScale`), by name, under the
/// recipe's `fp8_scaling`.
#[pyclass(module = "mixprec._mixprec")]
pub struct DelayedScales {
    scaling: mixprec::scaling::delayed::Fp8Scaling,
    tensors: HashMap<String, DelayedScale>,
}

#[pymethods]
impl DelayedScales {
    /// The scales of a recipe with `fp8_scaling` (ValueError for one without).
    #[new]
    fn new(recipe_json: &str) -> PyResult<Self> {
        let scaling = recipe(recipe_json)?
            .fp8_scaling
            .ok_or_else(|| PyValueError::new_err("recipe: no fp8_scaling, so no delayed scales"))?;
        Ok(DelayedScales {
            scaling,
            tensors: HashMap::new(),
        })
    }

    /// Tensor `name`'s scale for this step's casts into a format whose largest value is
    /// `fp8_max` (1 before its first step ends), its largest magnitude `amax` joining the step's.
    fn cast(&mut self, name: &str, fp8_max: f32, amax: f32) -> f32 {
        let meta = self
            .tensors
            .entry(name.to_string())
            .or_insert_with(|| DelayedScale::new(fp8_max));
        meta.observe(amax);
        meta.scale()
    }

    /// Ends a step: every tensor's history takes the step's amax and its scale is recomputed.
    fn end_step(&mut self) {
        for meta in self.tensors.values_mut() {
            meta.end_step(&self.scaling);
        }
    }
}

/// Where `mixprec train` with config `config_json` (a config file's JSON: `mixprec train
/// --print-config` shows the keys) starts a classifier: `(train_x, train_y, test_x, test_y,
/// params, batches)` as numpy arrays (features float32, labels and batch indices int64, one row
/// of `batches` per step) and `params` a list of `(layer, "weight" | "bias", float32 array)` of
/// the initial master weights, so that PyTorch can train the same model from the same start.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn train_start<'py>(
    py: Python<'py>,
    config_json: &str,
) -> PyResult<(
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Vec<(String, String, Bound<'py, PyAny>)>,
    Bound<'py, PyAny>,
)> {
    let config: TrainConfig = serde_json::from_str(config_json)
        .map_err(|e| PyValueError::new_err(format!("config: {e}")))?;
    let start = mixprec::train::training::start(&config).map_err(py_err)?;
    let matrix = |m: &Array2<f32>| -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<f32> = m.iter().copied().collect();
        Ok(PyArray1::from_vec(py, values)
            .reshape([m.nrows(), m.ncols()])?
            .into_any())
    };
    let labels = |y: &[usize]| {
        let y: Vec<i64> = y.iter().map(|&v| v as i64).collect();
        PyArray1::from_vec(py, y).into_any()
    };
    let d = &start.data;
    let params = start
        .params
        .iter()
        .map(|(layer, name, w)| Ok((layer.clone(), (*name).to_string(), matrix(w)?)))
        .collect::<PyResult<Vec<_>>>()?;
    let batch = start.batches.first().map_or(0, Vec::len);
    let flat: Vec<i64> = start.batches.iter().flatten().map(|&i| i as i64).collect();
    let batches = PyArray1::from_vec(py, flat)
        .reshape([start.batches.len(), batch])?
        .into_any();
    Ok((
        matrix(&d.train_x)?,
        labels(&d.train_y),
        matrix(&d.test_x)?,
        labels(&d.test_y),
        params,
        batches,
    ))
}

/// Welch's unequal-variance t-test of `mean(a) - mean(b)` with a 95% interval, as grid reports
/// compare seeds (`mixprec::stats::seeds::welch`): a dict of `difference`, `low`, `high`, `t`,
/// `df`, `p_value` as JSON, or None unless both samples hold at least two values.
#[pyfunction]
pub fn welch_json(a: Vec<f64>, b: Vec<f64>) -> PyResult<Option<String>> {
    mixprec::stats::seeds::welch(&a, &b, 0.95)
        .map(|w| serde_json::to_string(&w).map_err(|e| PyRuntimeError::new_err(e.to_string())))
        .transpose()
}
