//! The data and query files compiled into the extension, and the dtype alias table.

use crate::embedded;
use crate::error::Error;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The canonical name of a dtype as users write it (`bfloat16`, `half`, `F16`, ` bf16`), the
/// one alias table every entry point resolves dtypes through; a PlanError naming `field` else.
#[pyfunction]
pub(super) fn parse_dtype(field: &str, name: &str) -> PyResult<&'static str> {
    Ok(crate::dtype::DType::parse(field, name)?.name())
}

/// Paths of the data files compiled into the extension.
#[pyfunction]
pub(super) fn data_files() -> Vec<&'static str> {
    embedded::FILES.iter().map(|(p, _)| *p).collect()
}

/// Bytes of one embedded data file.
#[pyfunction]
pub(super) fn data_file<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyBytes>> {
    embedded::file(path)
        .map(|b| PyBytes::new(py, b))
        .ok_or_else(|| PyErr::from(Error::Input(format!("no embedded data file '{path}'"))))
}

/// Fingerprint of the embedded data (the catalog cache key).
#[pyfunction]
pub(super) fn data_hash() -> &'static str {
    embedded::DATA_HASH
}
