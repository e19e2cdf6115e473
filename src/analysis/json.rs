//! How an [`super::Analysis`] is written in JSON where its types' own forms are not the
//! contract: sweep rows without their internal field, paths and dtypes as strings, skipped
//! tensors by name, file and dtype.

use std::path::Path;

use serde::{Serialize, Serializer};

use crate::io::TensorInfo;
use crate::stats::Sweep;

/// The sweep rows as the JSON contract has them (without `relative_error_finite`).
pub(super) fn sweep_json<S: Serializer>(s: &Sweep, ser: S) -> std::result::Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Row {
        log2_scale: i32,
        underflow: u64,
        subnormal: u64,
        normal: u64,
        overflow: u64,
        energy_lost: f64,
        relative_error: Option<f64>,
    }
    ser.collect_seq(s.rows.iter().map(|r| Row {
        log2_scale: r.log2_scale,
        underflow: r.underflow,
        subnormal: r.subnormal,
        normal: r.normal,
        overflow: r.overflow,
        energy_lost: r.energy_lost,
        relative_error: r.relative_error,
    }))
}

pub(super) fn path_json<S: Serializer>(p: &Path, ser: S) -> std::result::Result<S::Ok, S::Error> {
    ser.collect_str(&p.display())
}

pub(super) fn display_json<S: Serializer>(
    d: &impl std::fmt::Display,
    ser: S,
) -> std::result::Result<S::Ok, S::Error> {
    ser.collect_str(d)
}

pub(super) fn skipped_json<S: Serializer>(
    skipped: &[TensorInfo],
    ser: S,
) -> std::result::Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Skipped {
        name: String,
        file: String,
        dtype: String,
    }
    ser.collect_seq(skipped.iter().map(|t| Skipped {
        name: t.name.clone(),
        file: t.path.display().to_string(),
        dtype: t.dtype.to_string(),
    }))
}
