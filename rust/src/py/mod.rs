//! All PyO3 code: the exceptions, the one `From<Error> for PyErr`, the helpers the bindings
//! share, and the module; the thin wrappers that pass whole plans and grids across the
//! boundary live in one file a concern (model, estimate, simulate, grid, collective, fit, data).

mod collective;
mod data;
mod estimate;
mod fit;
mod grid;
mod model;
mod simulate;

use self::{data::*, estimate::*, fit::*, grid::*, model::*, simulate::*};

use crate::collectives::ProtocolTable;
use crate::error::Error;
use crate::plan::{Efficiency, Plan};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    ridgeline.errors,
    RidgelineError,
    PyValueError,
    "Base of every ridgeline error (a ValueError)."
);

create_exception!(
    ridgeline.errors,
    PlanError,
    RidgelineError,
    "A plan parameter breaks a rule (exit code 2)."
);

create_exception!(
    ridgeline.errors,
    ModelConfigError,
    RidgelineError,
    "A model config is malformed or unsupported (exit code 2)."
);

create_exception!(
    ridgeline.errors,
    HardwareError,
    RidgelineError,
    "A device row lacks what the plan needs (exit code 2)."
);

create_exception!(
    ridgeline.errors,
    UnknownNameError,
    RidgelineError,
    "An unknown hardware or model name (exit code 3)."
);

create_exception!(
    ridgeline.errors,
    DoesNotFitError,
    RidgelineError,
    "The plan does not fit in device memory (exit code 4)."
);

create_exception!(
    ridgeline.errors,
    CatalogError,
    RidgelineError,
    "The catalog data violates a constraint (exit code 2)."
);

create_exception!(
    ridgeline.errors,
    InternalError,
    RidgelineError,
    "A bug in ridgeline (a panic in the core): please report it (exit code 70)."
);

/// Runs `f`, turning a panic in the core into a typed `InternalError` (still a
/// RidgelineError) instead of a PanicException that escapes `except ValueError`.
fn guarded<T>(what: &str, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(InternalError::new_err(format!(
            "internal error in {what} (please report it): {msg}"
        )))
    })
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        let msg = e.to_string();
        match e {
            Error::Plan { .. } | Error::Input(_) => PlanError::new_err(msg),
            Error::ModelConfig { .. } => ModelConfigError::new_err(msg),
            Error::Hardware { .. } => HardwareError::new_err(msg),
        }
    }
}

fn from_json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> PyResult<T> {
    serde_json::from_str(s).map_err(|e| PyErr::from(Error::Input(format!("{what}: {e}"))))
}

/// The three structures every pricing call takes.
fn priced_inputs(plan: &str, efficiency: &str, protocol: &str) -> PyResult<(Plan, Efficiency, ProtocolTable)> {
    Ok((
        from_json("plan", plan)?,
        from_json("efficiency", efficiency)?,
        from_json("protocol", protocol)?,
    ))
}

/// Sets each (key, value) of `pairs` on `d`, in order.
fn set_floats(d: &Bound<'_, PyDict>, pairs: &[(&str, f64)]) -> PyResult<()> {
    pairs.iter().try_for_each(|(k, v)| d.set_item(*k, *v))
}

/// A struct of numbers as a dict (integers stay integers).
fn flat_dict<'py, T: serde::Serialize>(py: Python<'py>, v: &T) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let value = serde_json::to_value(v).map_err(|e| PyErr::from(Error::Input(e.to_string())))?;
    if let serde_json::Value::Object(map) = value {
        for (k, x) in map {
            match (x.as_u64(), x.as_f64()) {
                (Some(u), _) => d.set_item(k, u)?,
                (None, Some(f)) => d.set_item(k, f)?,
                _ => d.set_item(k, py.None())?,
            }
        }
    }
    Ok(d)
}

fn to_u64(name: &str, a: &[i64]) -> PyResult<Vec<u64>> {
    a.iter()
        .map(|&x| u64::try_from(x).map_err(|_| PyErr::from(Error::plan(name, format!("must be >= 0, got {x}")))))
        .collect()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<CoreModel>()?;
    m.add_class::<CoreDevice>()?;
    m.add_class::<CalibRows>()?;
    m.add_class::<Prepared>()?;
    m.add_class::<CoreEstimate>()?;
    m.add_function(wrap_pyfunction!(estimate_prepared, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_many, m)?)?;
    m.add_function(wrap_pyfunction!(simulate_prepared, m)?)?;
    m.add_function(wrap_pyfunction!(collective::collective, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_grid, m)?)?;
    m.add_function(wrap_pyfunction!(distinct_experts, m)?)?;
    m.add_function(wrap_pyfunction!(phase_power, m)?)?;
    m.add_function(wrap_pyfunction!(chunked_scan_flops, m)?)?;
    m.add_function(wrap_pyfunction!(parse_dtype, m)?)?;
    m.add_function(wrap_pyfunction!(data_files, m)?)?;
    m.add_function(wrap_pyfunction!(data_file, m)?)?;
    m.add_function(wrap_pyfunction!(data_hash, m)?)?;
    m.add("RidgelineError", py.get_type::<RidgelineError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("ModelConfigError", py.get_type::<ModelConfigError>())?;
    m.add("HardwareError", py.get_type::<HardwareError>())?;
    m.add("UnknownNameError", py.get_type::<UnknownNameError>())?;
    m.add("DoesNotFitError", py.get_type::<DoesNotFitError>())?;
    m.add("CatalogError", py.get_type::<CatalogError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_LAYERS", crate::model::MAX_LAYERS)?;
    m.add("MAX_EXPERTS", crate::model::MAX_EXPERTS)?;
    Ok(())
}
