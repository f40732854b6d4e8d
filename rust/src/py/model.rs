//! A model and a device as the core holds them: built once from their JSON, read by every plan.

use super::*;
use crate::device::Device;
use crate::error::Error;
use crate::model::params;
use crate::model::Model;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A validated model structure held in Rust.
#[pyclass(frozen, module = "ridgeline._core")]
pub struct CoreModel {
    pub(super) inner: Model,
}

#[pymethods]
impl CoreModel {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        guarded("the model structure", || {
            Ok(CoreModel {
                inner: Model::from_json(json)?,
            })
        })
    }

    /// Parameter counts by tensor class, with `total` and `active`.
    fn params<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = guarded("the parameter count", || Ok(params::count(&self.inner)))?;
        let d = PyDict::new(py);
        for (k, v) in [
            ("embedding", c.embedding),
            ("position_embedding", c.position_embedding),
            ("attention", c.attention),
            ("norms", c.norms),
            ("ffn", c.ffn),
            ("router", c.router),
            ("experts", c.experts),
            ("experts_active", c.experts_active),
            ("shared_experts", c.shared_experts),
            ("lm_head", c.lm_head),
            ("total", c.total),
            ("active", c.active),
            ("active_non_embedding", c.active_non_embedding),
            ("mamba", c.mamba),
            ("linear_attention", c.linear_attention),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn num_layers(&self) -> u64 {
        self.inner.num_layers()
    }

    /// Layer types the engine cannot price yet (None: every layer is priced).
    fn unpriced_layers(&self) -> Option<&'static str> {
        self.inner.unpriced_layers()
    }

    /// `(layers, KV values per token, window)` for each layer group with attention, at TP `tp`.
    #[pyo3(signature = (tp=1))]
    fn kv_layers(&self, tp: u64) -> PyResult<Vec<(u64, u64, Option<u64>)>> {
        if tp == 0 {
            return Err(Error::plan("tp", "must be a positive integer (>= 1)").into());
        }
        guarded("the KV layers", || Ok(self.inner.kv_layers(tp)))
    }
}

/// A validated device row held in Rust.
#[pyclass(frozen, module = "ridgeline._core")]
pub struct CoreDevice {
    pub(super) inner: Device,
}

#[pymethods]
impl CoreDevice {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        guarded("the device row", || {
            let d: Device = from_json("device", json)?;
            d.validate()?;
            Ok(CoreDevice { inner: d })
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
}
