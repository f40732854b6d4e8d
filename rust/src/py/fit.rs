//! What the calibration harness asks of the core: the rows' objective, and the closed forms it fits.

use super::*;
use crate::calib;
use crate::error::Error;
use crate::graph::{self};
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// FLOPs of the chunked recurrent scan (`graph::chunked_scan_flops`) of each sequence length in
/// `new`, `heads` heads with a `dk` x `dv` state, in chunks of `chunk` tokens; `scan` "gated_delta"
/// or "ssd" (Mamba2, with `groups` B/C groups). Whole arrays per call.
#[pyfunction]
#[pyo3(signature = (scan, new, chunk, heads, dk, dv, groups=1.0))]
#[allow(clippy::too_many_arguments)]
pub(super) fn chunked_scan_flops<'py>(
    py: Python<'py>,
    scan: &str,
    new: PyReadonlyArray1<'py, u64>,
    chunk: f64,
    heads: f64,
    dk: f64,
    dv: f64,
    groups: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let scan = match scan {
        "gated_delta" => crate::model::Scan::GatedDelta,
        "ssd" => crate::model::Scan::Ssd { groups },
        other => {
            return Err(Error::Input(format!("scan must be 'gated_delta' or 'ssd', got {other:?}")).into());
        }
    };
    for (name, v) in [
        ("chunk", chunk),
        ("heads", heads),
        ("dk", dk),
        ("dv", dv),
        ("groups", groups),
    ] {
        if !(v.is_finite() && v >= 1.0) {
            return Err(Error::Input(format!("{name} must be finite and >= 1, got {v}")).into());
        }
    }
    let out: Vec<f64> = new
        .as_slice()?
        .iter()
        .map(|&n| crate::graph::chunked_scan_flops(scan, n, chunk, heads, dk, dv))
        .collect();
    Ok(PyArray1::from_vec(py, out))
}

/// Watts one device draws over each phase (`power::phase`, spec 60) from its compute-roof,
/// memory-roof and total times and its device's idle and TDP power, at the memory-bound share
/// `rho`; whole arrays per call (the power fit prices every measured run at each `rho` it tries).
#[pyfunction]
#[pyo3(signature = (compute_s, memory_s, time_s, idle_w, tdp_w, rho))]
pub(super) fn phase_power<'py>(
    py: Python<'py>,
    compute_s: PyReadonlyArray1<'py, f64>,
    memory_s: PyReadonlyArray1<'py, f64>,
    time_s: PyReadonlyArray1<'py, f64>,
    idle_w: PyReadonlyArray1<'py, f64>,
    tdp_w: PyReadonlyArray1<'py, f64>,
    rho: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (c, m, t, i, p) = (
        compute_s.as_slice()?,
        memory_s.as_slice()?,
        time_s.as_slice()?,
        idle_w.as_slice()?,
        tdp_w.as_slice()?,
    );
    if [m.len(), t.len(), i.len(), p.len()].iter().any(|&n| n != c.len()) {
        return Err(Error::Input("compute_s, memory_s, time_s, idle_w and tdp_w must have one length".into()).into());
    }
    if !(rho.is_finite() && (0.0..=1.0).contains(&rho)) {
        return Err(Error::Input(format!("rho must be in [0, 1], got {rho}")).into());
    }
    let out = (0..c.len())
        .map(|k| {
            let totals = crate::engine::PhaseTotals {
                compute_s: c[k],
                memory_s: m[k],
                time_s: t[k],
                ..Default::default()
            };
            crate::power::phase(&totals, i[k], p[k], rho).watts
        })
        .collect();
    Ok(PyArray1::from_vec(py, out))
}

/// Expected distinct experts for each token count (`graph::distinct_experts`), whole arrays per call.
#[pyfunction]
#[pyo3(signature = (num_experts, top_k, tokens, skew))]
pub(super) fn distinct_experts<'py>(
    py: Python<'py>,
    num_experts: u64,
    top_k: u64,
    tokens: PyReadonlyArray1<'py, f64>,
    skew: f64,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    if num_experts == 0 || top_k == 0 || top_k > num_experts {
        return Err(Error::Input(format!("top_k must be in 1..={num_experts} (num_experts), got {top_k}")).into());
    }
    crate::plan::check_routing_skew(skew)?;
    let t = tokens.as_slice()?;
    if let Some(bad) = t.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
        return Err(Error::Input(format!("tokens must be finite and >= 0, got {bad}")).into());
    }
    let out: Vec<f64> = guarded("the expert count", || {
        Ok(t.iter()
            .map(|&x| graph::distinct_experts(num_experts, top_k, x, skew))
            .collect())
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// A calibration's decomposed rows held in Rust (`calib::Rows`): one call predicts every row
/// under a whole population of candidate parameters, the candidates in parallel, the GIL released.
#[pyclass(frozen, module = "ridgeline._core")]
pub struct CalibRows {
    inner: calib::Rows,
}

pub(super) fn slice2<'a, T: numpy::Element>(what: &str, a: &'a PyReadonlyArray2<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        PyErr::from(Error::Input(format!(
            "calibration rows: {what} must be a C-contiguous array"
        )))
    })
}

pub(super) fn slice1<'a, T: numpy::Element>(what: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        PyErr::from(Error::Input(format!(
            "calibration rows: {what} must be a contiguous array"
        )))
    })
}

#[pymethods]
impl CalibRows {
    #[new]
    #[pyo3(signature = (len, compute, memory, expert, quant, fmt, moe_w, moe_t, moe_d0, moe_group, moe_ek, fixed, launches, steps, work, time_ms, observed, formats))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        len: PyReadonlyArray1<'_, i64>,
        compute: PyReadonlyArray2<'_, f64>,
        memory: PyReadonlyArray2<'_, f64>,
        expert: PyReadonlyArray2<'_, bool>,
        quant: PyReadonlyArray2<'_, bool>,
        fmt: PyReadonlyArray2<'_, i64>,
        moe_w: PyReadonlyArray2<'_, f64>,
        moe_t: PyReadonlyArray2<'_, f64>,
        moe_d0: PyReadonlyArray2<'_, f64>,
        moe_group: PyReadonlyArray2<'_, i64>,
        moe_ek: Vec<(u64, u64)>,
        fixed: PyReadonlyArray1<'_, f64>,
        launches: PyReadonlyArray1<'_, f64>,
        steps: PyReadonlyArray1<'_, f64>,
        work: PyReadonlyArray1<'_, f64>,
        time_ms: PyReadonlyArray1<'_, bool>,
        observed: PyReadonlyArray1<'_, f64>,
        formats: usize,
    ) -> PyResult<Self> {
        let width = compute.shape()[1];
        let inner = calib::Rows::new(calib::RowArrays {
            width,
            len: slice1("len", &len)?,
            compute: slice2("compute", &compute)?,
            memory: slice2("memory", &memory)?,
            expert: slice2("expert", &expert)?,
            quant: slice2("quant", &quant)?,
            fmt: slice2("fmt", &fmt)?,
            moe_w: slice2("moe_w", &moe_w)?,
            moe_t: slice2("moe_t", &moe_t)?,
            moe_d0: slice2("moe_d0", &moe_d0)?,
            moe_group: slice2("moe_group", &moe_group)?,
            moe_ek: &moe_ek,
            fixed: slice1("fixed", &fixed)?,
            launches: slice1("launches", &launches)?,
            steps: slice1("steps", &steps)?,
            work: slice1("work", &work)?,
            time_ms: slice1("time_ms", &time_ms)?,
            observed: slice1("observed", &observed)?,
            formats,
        })?;
        Ok(CalibRows { inner })
    }

    /// Predicted rates (time rows: ms) under each candidate: params (candidates x 9, in
    /// `calib::PARAMS` order) and formats (candidates x formats) give candidates x rows; with
    /// `ratio`, observed over predicted speed instead (time rows: predicted over observed).
    #[pyo3(signature = (params, formats, ratio=false))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        params: PyReadonlyArray2<'py, f64>,
        formats: PyReadonlyArray2<'py, f64>,
        ratio: bool,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (p, fe) = (slice2("params", &params)?, slice2("formats", &formats)?);
        let rows = &self.inner;
        let out = guarded("the calibration rows", || {
            Ok(py.detach(|| if ratio { rows.ratios(p, fe) } else { rows.predict(p, fe) })?)
        })?;
        let a = numpy::ndarray::Array2::from_shape_vec((params.shape()[0], rows.len()), out)
            .map_err(|e| PyErr::from(Error::Input(format!("calibration rows: {e}"))))?;
        Ok(PyArray2::from_owned_array(py, a))
    }

    /// The fit's objective per candidate: the rms of log(observed / predicted speed).
    fn rms<'py>(
        &self,
        py: Python<'py>,
        params: PyReadonlyArray2<'py, f64>,
        formats: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let (p, f) = (slice2("params", &params)?, slice2("formats", &formats)?);
        let rows = &self.inner;
        let out = guarded("the calibration objective", || Ok(py.detach(|| rows.rms(p, f))?))?;
        Ok(PyArray1::from_vec(py, out))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}
