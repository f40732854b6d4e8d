//! The serving simulator: one run of a prepared plan under a workload, its result as a dict.

use super::*;
use crate::serving::workload::Workload;
use crate::serving::{self, Cluster, Options, SimResult};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Simulates serving instances of a prepared layout (`serving::simulate_cluster`): the cluster
/// (pools of instances with their TP, EP and scheduler; router; KV link), workload and options
/// as JSON. Returns a dict of the counts, metric summaries and scalars, and (when kept)
/// per-request and time-series columns.
/// `progress`, when given, is called as `progress(ended, total)` each hundredth of the requests
/// (the GIL taken for the call only); the first error it raises is raised after the run.
#[pyfunction]
#[pyo3(signature = (prepared, cluster_json, workload_json, options_json, progress=None))]
pub(super) fn simulate_prepared<'py>(
    py: Python<'py>,
    prepared: &Prepared,
    cluster_json: &str,
    workload_json: &str,
    options_json: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let cluster: Cluster = from_json("cluster", cluster_json)?;
    let work: Workload = from_json("workload", workload_json)?;
    let opts: Options = from_json("options", options_json)?;
    let (m, d, eff, proto) = prepared.parts();
    let plan = &prepared.plan;
    let mut failed: Option<PyErr> = None;
    let r = guarded("the simulation", || {
        Ok(py.detach(|| {
            let mut tell = |ended: u64, total: u64| {
                if let (Some(f), None) = (&progress, &failed) {
                    failed = Python::attach(|py| f.call1(py, (ended, total)).err());
                }
            };
            let cb: Option<&mut dyn FnMut(u64, u64)> = if progress.is_some() { Some(&mut tell) } else { None };
            serving::simulate_cluster(m, d, plan, eff, proto, &cluster, &work, &opts, cb)
        })?)
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    sim_dict(py, r)
}

pub(super) fn sim_dict(py: Python<'_>, r: SimResult) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("counts", flat_dict(py, &r.counts)?)?;
    for (name, st) in [("ttft", r.ttft), ("tpot", r.tpot), ("itl", r.itl), ("e2e", r.e2e)] {
        out.set_item(name, flat_dict(py, &st)?)?;
    }
    out.set_item("duration_s", r.duration_s)?;
    out.set_item("transfer_s", r.transfer_s)?;
    out.set_item("kv_blocks", PyList::new(py, &r.kv_blocks)?)?;
    for (name, v) in [
        ("output_tokens", r.output_tokens),
        ("prompt_tokens", r.prompt_tokens),
        ("steps", r.steps),
        ("preemptions", r.preemptions),
        ("good_requests", r.good_requests),
        ("max_model_len", r.max_model_len),
        ("transfers", r.transfers),
        ("cached_tokens", r.cached_tokens),
        ("max_running", r.max_running),
        ("shapes_built", r.shapes_built),
    ] {
        out.set_item(name, v)?;
    }
    out.set_item("warnings", PyList::new(py, r.warnings)?)?;
    match &r.energy {
        Ok(e) => {
            let d = flat_dict(py, e)?;
            let pools: Vec<_> = e.pools.iter().map(|p| flat_dict(py, p)).collect::<PyResult<_>>()?;
            d.set_item("pools", PyList::new(py, pools)?)?;
            out.set_item("energy", d)?;
        }
        Err(why) => out.set_item("energy", why)?,
    }
    let q = &r.requests;
    let req = PyDict::new(py);
    req.set_item("id", PyArray1::from_iter(py, q.iter().map(|x| x.id)))?;
    req.set_item("arrival_s", PyArray1::from_iter(py, q.iter().map(|x| x.arrival_s)))?;
    req.set_item(
        "first_token_s",
        PyArray1::from_iter(py, q.iter().map(|x| x.first_token_s)),
    )?;
    req.set_item("end_s", PyArray1::from_iter(py, q.iter().map(|x| x.end_s)))?;
    req.set_item("prompt_tokens", PyArray1::from_iter(py, q.iter().map(|x| x.prompt)))?;
    req.set_item("output_tokens", PyArray1::from_iter(py, q.iter().map(|x| x.output)))?;
    req.set_item("preemptions", PyArray1::from_iter(py, q.iter().map(|x| x.preemptions)))?;
    req.set_item("instance", PyArray1::from_iter(py, q.iter().map(|x| x.instance)))?;
    req.set_item("status", PyList::new(py, q.iter().map(|x| x.status.name()))?)?;
    out.set_item("requests", req)?;
    let s = &r.series;
    let ser = PyDict::new(py);
    ser.set_item("t_s", PyArray1::from_iter(py, s.iter().map(|x| x.t_s)))?;
    ser.set_item("waiting", PyArray1::from_iter(py, s.iter().map(|x| x.waiting)))?;
    ser.set_item("running", PyArray1::from_iter(py, s.iter().map(|x| x.running)))?;
    ser.set_item("kv_used", PyArray1::from_iter(py, s.iter().map(|x| x.kv_used)))?;
    out.set_item("series", ser)?;
    let itl = PyDict::new(py);
    itl.set_item("itl_s", PyArray1::from_iter(py, r.itl_bins.iter().map(|b| b.0)))?;
    itl.set_item("tokens", PyArray1::from_iter(py, r.itl_bins.iter().map(|b| b.1)))?;
    out.set_item("itl_hist", itl)?;
    Ok(out)
}
