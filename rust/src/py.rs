//! All PyO3 code: the exceptions, the one `From<Error> for PyErr`, and thin
//! wrappers that pass whole plans and grids across the boundary.

use crate::calib;
use crate::collectives::{Collective, Link, LinkFit, LinkFits, ProtocolTable, Topology};
use crate::device::Device;
use crate::embedded;
use crate::engine::{self, Estimate, Phase};
use crate::error::Error;
use crate::graph::{self, MODEL_LEVEL};
use crate::model::params;
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use crate::roofline::Cost;
use crate::serving::workload::Workload;
use crate::serving::{self, Cluster, Options, SimResult};
use crate::sweep;
use numpy::{PyArray1, PyArray2, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

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

/// A validated model structure held in Rust.
#[pyclass(frozen, module = "ridgeline._core")]
pub struct CoreModel {
    inner: Model,
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
    inner: Device,
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

/// Sets each (key, value) of `pairs` on `d`, in order.
fn set_floats(d: &Bound<'_, PyDict>, pairs: &[(&str, f64)]) -> PyResult<()> {
    pairs.iter().try_for_each(|(k, v)| d.set_item(*k, *v))
}

fn cost_dict<'py>(py: Python<'py>, e: &Estimate) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ttft_s", e.ttft_s)?;
    d.set_item("tpot_s", e.tpot_s)?;
    d.set_item("e2e_s", e.e2e_s)?;
    d.set_item("throughput_tok_s", e.throughput_tok_s)?;
    d.set_item("prefill_tok_s", e.prefill_tok_s)?;
    for (name, p) in [("prefill", &e.prefill), ("decode", &e.decode)] {
        let ph = PyDict::new(py);
        ph.set_item("steps", p.steps)?;
        set_floats(
            &ph,
            &[
                ("flops", p.flops),
                ("bytes", p.bytes),
                ("compute_s", p.compute_s),
                ("memory_s", p.memory_s),
                ("comm_s", p.comm_s),
                ("overhead_s", p.overhead_s),
                ("time_s", p.time_s),
                ("mfu", p.mfu),
                ("mbu", p.mbu),
            ],
        )?;
        d.set_item(name, ph)?;
    }
    let m = &e.memory;
    let mem = PyDict::new(py);
    mem.set_item("weights_bytes", m.weights_bytes)?;
    mem.set_item("kv_bytes", m.kv_bytes)?;
    mem.set_item("state_bytes", m.state_bytes)?;
    mem.set_item("activation_bytes", m.activation_bytes)?;
    mem.set_item("total_bytes", m.total_bytes)?;
    mem.set_item("capacity_bytes", m.capacity_bytes)?;
    mem.set_item("budget_bytes", m.budget_bytes)?;
    mem.set_item("fits", m.fits)?;
    mem.set_item("shortfall_bytes", m.shortfall_bytes)?;
    d.set_item("memory", mem)?;
    d.set_item("gemm_dtype", e.gemm_dtype.name())?;
    d.set_item("attention_dtype", e.attention_dtype.name())?;
    d.set_item("kv_dtype", e.kv_dtype.name())?;
    d.set_item("peak_flops", e.peak_flops)?;
    d.set_item("memory_bw", e.memory_bw)?;
    let par = PyDict::new(py);
    par.set_item("devices", e.parallel.devices)?;
    par.set_item("nodes_per_replica", e.parallel.nodes_per_replica)?;
    par.set_item("stage_layers", e.parallel.stage_layers)?;
    par.set_item("microbatches", e.parallel.microbatches)?;
    par.set_item("stage_s", e.parallel.stage_s)?;
    par.set_item("round_s", e.parallel.round_s)?;
    d.set_item("parallel", par)?;
    d.set_item("warnings", PyList::new(py, &e.warnings)?)?;
    let pw = PyDict::new(py);
    match (&e.power, &e.power_missing) {
        (Some(p), _) => {
            for (name, ph) in [("prefill", &p.prefill), ("decode", &p.decode)] {
                let x = PyDict::new(py);
                set_floats(
                    &x,
                    &[
                        ("u_compute", ph.u_compute),
                        ("u_memory", ph.u_memory),
                        ("utilisation", ph.utilisation),
                        ("watts", ph.watts),
                    ],
                )?;
                pw.set_item(name, x)?;
            }
            set_floats(
                &pw,
                &[
                    ("energy_j", p.energy_j),
                    ("energy_per_output_token_j", p.energy_per_output_token_j),
                    ("idle_w", p.idle_w),
                    ("tdp_w", p.tdp_w),
                    ("rho", p.rho),
                ],
            )?;
        }
        (None, why) => pw.set_item("missing", why.as_deref().unwrap_or("not computed"))?,
    }
    d.set_item("power", pw)?;
    // Breakdown as columns (cheap to cross, cheap to turn into a DataFrame).
    let n = e.breakdown.len();
    let (mut phase, mut op, mut group) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut quantized, mut grouped) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut role = Vec::with_capacity(n);
    let mut kernel = Vec::with_capacity(n);
    let mut cols: [Vec<f64>; 8] = Default::default();
    for r in &e.breakdown {
        phase.push(match r.phase {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        });
        op.push(r.kind.name());
        group.push(if r.group == MODEL_LEVEL { -1i64 } else { r.group as i64 });
        quantized.push(r.quantized);
        role.push(r.role.map(|x| x.name()));
        grouped.push(r.grouped);
        kernel.push(r.attention.map(|a| a.name()));
        for (i, v) in r.cost.values().into_iter().enumerate() {
            cols[i].push(v);
        }
    }
    let b = PyDict::new(py);
    b.set_item("phase", PyList::new(py, phase)?)?;
    b.set_item("op", PyList::new(py, op)?)?;
    b.set_item("group", PyList::new(py, group)?)?;
    b.set_item("quantized", PyList::new(py, quantized)?)?;
    b.set_item("role", PyList::new(py, role)?)?;
    b.set_item("grouped", PyList::new(py, grouped)?)?;
    b.set_item("attention_kernel", PyList::new(py, kernel)?)?;
    for (i, name) in Cost::FIELDS.iter().enumerate() {
        b.set_item(*name, PyList::new(py, &cols[i])?)?;
    }
    d.set_item("breakdown", b)?;
    Ok(d)
}

/// What every plan of one (model, device, precisions, runtime, calibration, links) shares,
/// parsed and checked once: the plan's other fields, the efficiencies and the protocol table.
/// `estimate_prepared` prices a plan from it with only its numbers crossing the boundary.
#[pyclass(frozen, module = "ridgeline._core")]
pub struct Prepared {
    model: Py<CoreModel>,
    device: Py<CoreDevice>,
    plan: Plan,
    eff: Efficiency,
    proto: ProtocolTable,
}

#[pymethods]
impl Prepared {
    #[new]
    fn new(
        model: Py<CoreModel>,
        device: Py<CoreDevice>,
        plan_json: &str,
        efficiency_json: &str,
        protocol_json: &str,
    ) -> PyResult<Self> {
        let (plan, eff, proto) = priced_inputs(plan_json, efficiency_json, protocol_json)?;
        Ok(Prepared {
            model,
            device,
            plan,
            eff,
            proto,
        })
    }
}

impl Prepared {
    /// The model, device, efficiencies and protocol table every plan of it is priced with.
    fn parts(&self) -> (&Model, &Device, &Efficiency, ProtocolTable) {
        (&self.model.get().inner, &self.device.get().inner, &self.eff, self.proto)
    }
}

/// One plan's result held in Rust: the scalars a caller reads cross one at a time, the rest
/// (phases, memory, the breakdown) as a dict when asked (`to_dict`).
#[pyclass(frozen, module = "ridgeline._core")]
pub struct CoreEstimate {
    inner: Estimate,
}

#[pymethods]
impl CoreEstimate {
    #[getter]
    fn ttft_s(&self) -> f64 {
        self.inner.ttft_s
    }

    #[getter]
    fn tpot_s(&self) -> Option<f64> {
        self.inner.tpot_s
    }

    #[getter]
    fn e2e_s(&self) -> f64 {
        self.inner.e2e_s
    }

    #[getter]
    fn throughput_tok_s(&self) -> f64 {
        self.inner.throughput_tok_s
    }

    #[getter]
    fn prefill_tok_s(&self) -> f64 {
        self.inner.prefill_tok_s
    }

    #[getter]
    fn fits(&self) -> bool {
        self.inner.memory.fits
    }

    /// Every number, label and (with a breakdown) per-operator column, as plain Python values.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        cost_dict(py, &self.inner)
    }
}

/// Estimates one plan of a prepared layout: its numbers are the only per-plan inputs; the GIL
/// is released while the core computes.
#[pyfunction]
#[pyo3(signature = (prepared, batch, prompt, output, prefix, tp, ep, pp, dp, microbatches, breakdown=true))]
#[allow(clippy::too_many_arguments)]
fn estimate_prepared(
    py: Python<'_>,
    prepared: &Prepared,
    batch: u64,
    prompt: u64,
    output: u64,
    prefix: u64,
    tp: u64,
    ep: u64,
    pp: u64,
    dp: u64,
    microbatches: Option<u64>,
    breakdown: bool,
) -> PyResult<CoreEstimate> {
    let plan = Plan {
        batch,
        prompt,
        output,
        prefix,
        tp,
        ep,
        pp,
        dp,
        microbatches,
        ..prepared.plan.clone()
    };
    let (m, d, eff, proto) = prepared.parts();
    let e = guarded("the estimate", || {
        Ok(py.detach(|| engine::estimate(m, d, &plan, eff, proto, breakdown))?)
    })?;
    Ok(CoreEstimate { inner: e })
}

/// Simulates serving instances of a prepared layout (`serving::simulate_cluster`): the cluster
/// (pools of instances with their TP, EP and scheduler; router; KV link), workload and options
/// as JSON. Returns a dict of the counts, metric summaries and scalars, and (when kept)
/// per-request and time-series columns.
/// `progress`, when given, is called as `progress(ended, total)` each hundredth of the requests
/// (the GIL taken for the call only); the first error it raises is raised after the run.
#[pyfunction]
#[pyo3(signature = (prepared, cluster_json, workload_json, options_json, progress=None))]
fn simulate_prepared<'py>(
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

fn sim_dict(py: Python<'_>, r: SimResult) -> PyResult<Bound<'_, PyDict>> {
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

fn to_u64(name: &str, a: &[i64]) -> PyResult<Vec<u64>> {
    a.iter()
        .map(|&x| u64::try_from(x).map_err(|_| PyErr::from(Error::plan(name, format!("must be >= 0, got {x}")))))
        .collect()
}

/// Evaluates a grid of plans in one call: arrays of batch, prompt, output and
/// tp (int64), the rest of the plan shared. Returns columns; a plan that
/// cannot be priced has NaN values and its reason in `error`.
#[pyfunction]
#[pyo3(signature = (prepared, batch, prompt, output, tp, threads=0))]
fn estimate_many<'py>(
    py: Python<'py>,
    prepared: &Prepared,
    batch: PyReadonlyArray1<'py, i64>,
    prompt: PyReadonlyArray1<'py, i64>,
    output: PyReadonlyArray1<'py, i64>,
    tp: PyReadonlyArray1<'py, i64>,
    threads: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let base = &prepared.plan;
    let (b, p, o, t) = (
        to_u64("batch", batch.as_slice()?)?,
        to_u64("prompt", prompt.as_slice()?)?,
        to_u64("output", output.as_slice()?)?,
        to_u64("tp", tp.as_slice()?)?,
    );
    let n = b.len();
    if p.len() != n || o.len() != n || t.len() != n {
        return Err(Error::plan("grid", "batch, prompt, output and tp arrays must have one length").into());
    }
    let plans: Vec<Plan> = (0..n)
        .map(|i| Plan {
            batch: b[i],
            prompt: p[i],
            output: o[i],
            tp: t[i],
            ..base.clone()
        })
        .collect();
    let (m, d, eff, proto) = prepared.parts();
    let results = guarded("the plans", || {
        Ok(py.detach(|| sweep::evaluate(m, d, &plans, eff, proto, threads)))
    })?;
    summaries(py, results)
}

/// Result columns of many plans: NaN values where a plan cannot be priced, and its reason as
/// an index into `errors` in `error_code` (-1 where it was priced; each distinct reason once).
fn summaries(py: Python<'_>, c: sweep::Columns) -> PyResult<Bound<'_, PyDict>> {
    let sweep::Columns {
        ttft_s,
        tpot_s,
        e2e_s,
        throughput_tok_s,
        prefill_tok_s,
        memory_bytes,
        mfu_prefill,
        mbu_decode,
        power_prefill_w,
        power_decode_w,
        energy_per_token_j,
        fits,
        devices,
        error,
        errors,
    } = c;
    let out = PyDict::new(py);
    for (name, v) in [
        ("ttft_s", ttft_s),
        ("tpot_s", tpot_s),
        ("e2e_s", e2e_s),
        ("throughput_tok_s", throughput_tok_s),
        ("prefill_tok_s", prefill_tok_s),
        ("memory_bytes", memory_bytes),
        ("mfu_prefill", mfu_prefill),
        ("mbu_decode", mbu_decode),
        ("power_prefill_w", power_prefill_w),
        ("power_decode_w", power_decode_w),
        ("energy_per_token_j", energy_per_token_j),
    ] {
        out.set_item(name, PyArray1::from_vec(py, v))?;
    }
    out.set_item("fits", PyArray1::from_vec(py, fits))?;
    out.set_item("devices", PyArray1::from_vec(py, devices))?;
    out.set_item("error_code", PyArray1::from_vec(py, error))?;
    out.set_item("errors", PyList::new(py, errors)?)?;
    Ok(out)
}

fn axis(name: &str, a: PyReadonlyArray1<'_, i64>) -> PyResult<Vec<u64>> {
    to_u64(name, a.as_slice()?)
}

/// Evaluates plans `start..stop` of a grid whose numeric axes are expanded
/// here (output fastest), the rest of each plan the prepared one's. Returns the
/// axis values of each plan and its result columns.
#[pyfunction]
#[pyo3(signature = (prepared, tp, pp, ep, dp, chunk, batch, prompt, output, threads=0, start=0, stop=None, chunk_extra=None))]
#[allow(clippy::too_many_arguments)]
fn sweep_grid<'py>(
    py: Python<'py>,
    prepared: &Prepared,
    tp: PyReadonlyArray1<'py, i64>,
    pp: PyReadonlyArray1<'py, i64>,
    ep: PyReadonlyArray1<'py, i64>,
    dp: PyReadonlyArray1<'py, i64>,
    chunk: PyReadonlyArray1<'py, i64>,
    batch: PyReadonlyArray1<'py, i64>,
    prompt: PyReadonlyArray1<'py, i64>,
    output: PyReadonlyArray1<'py, i64>,
    threads: usize,
    start: usize,
    stop: Option<usize>,
    chunk_extra: Option<PyReadonlyArray1<'py, i64>>,
) -> PyResult<Bound<'py, PyDict>> {
    let axes = sweep::Axes {
        tp: axis("tp", tp)?,
        pp: axis("pp", pp)?,
        ep: axis("ep", ep)?,
        dp: axis("dp", dp)?,
        chunk: axis("chunk", chunk)?,
        batch: axis("batch", batch)?,
        prompt: axis("prompt", prompt)?,
        output: axis("output", output)?,
        chunk_extra: chunk_extra.map(|x| axis("chunk_extra", x)).transpose()?,
    };
    axes.validate()?;
    let stop = stop.unwrap_or(axes.len()).min(axes.len());
    let start = start.min(stop);
    let (m, d, eff, proto) = prepared.parts();
    let base = &prepared.plan;
    let results = guarded("the sweep", || {
        Ok(py.detach(|| sweep::grid(m, d, &axes, base, eff, proto, threads, start, stop)))
    })?;
    let out = summaries(py, results)?;
    let mut vals: [Vec<i64>; 8] = Default::default();
    for i in start..stop {
        for (k, v) in axes.values(i).iter().enumerate() {
            vals[k].push(*v as i64);
        }
    }
    for (name, v) in ["tp", "pp", "ep", "dp", "chunk", "batch", "prompt", "output"]
        .iter()
        .zip(vals)
    {
        out.set_item(*name, PyArray1::from_vec(py, v))?;
    }
    Ok(out)
}

/// Times of one collective over a range of message sizes (bytes), on a
/// scale-up link (bidirectional aggregate, as the catalog quotes it) and an
/// optional scale-out link (per direction) between nodes. `links_json` holds
/// the device's measured collectives (a list of link measurements).
#[pyfunction]
#[pyo3(signature = (op, ranks, sizes, scaleup_bw_gbs, scaleup_latency_us, protocol_json, devices_per_node=None, scaleout_bw_gbs=None, scaleout_latency_us=None, links_json=None))]
#[allow(clippy::too_many_arguments)]
fn collective<'py>(
    py: Python<'py>,
    op: &str,
    ranks: u64,
    sizes: PyReadonlyArray1<'py, f64>,
    scaleup_bw_gbs: f64,
    scaleup_latency_us: f64,
    protocol_json: &str,
    devices_per_node: Option<u64>,
    scaleout_bw_gbs: Option<f64>,
    scaleout_latency_us: Option<f64>,
    links_json: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let links: Vec<LinkFit> = match links_json {
        Some(text) => from_json("links", text)?,
        None => Vec::new(),
    };
    if let Some(why) = links.iter().find_map(|f| f.problem()) {
        return Err(Error::plan("links", why).into());
    }
    let op = match op.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "allreduce" => Collective::AllReduce,
        "allgather" => Collective::AllGather,
        "reducescatter" => Collective::ReduceScatter,
        "alltoall" => Collective::AllToAll,
        "sendrecv" | "p2p" | "pointtopoint" => Collective::PointToPoint,
        _ => {
            return Err(Error::plan(
                "op",
                format!("unknown collective {op:?}; accepted: allreduce, allgather, reducescatter, alltoall, sendrecv"),
            )
            .into())
        }
    };
    if ranks == 0 || (ranks < 2 && op != Collective::PointToPoint) {
        return Err(Error::plan("ranks", "a collective needs at least 2 ranks").into());
    }
    for (name, v) in [
        ("scaleup_bw_gbs", Some(scaleup_bw_gbs)),
        ("scaleout_bw_gbs", scaleout_bw_gbs),
    ] {
        if let Some(x) = v {
            if !(x.is_finite() && x > 0.0) {
                return Err(Error::plan(name, format!("must be > 0, got {x}")).into());
            }
        }
    }
    for (name, v) in [
        ("scaleup_latency_us", Some(scaleup_latency_us)),
        ("scaleout_latency_us", scaleout_latency_us),
    ] {
        if let Some(x) = v {
            if !(x.is_finite() && x >= 0.0) {
                return Err(Error::plan(name, format!("must be >= 0, got {x}")).into());
            }
        }
    }
    if devices_per_node == Some(0) {
        return Err(Error::plan("devices_per_node", "must be >= 1").into());
    }
    let proto: ProtocolTable = from_json("protocol", protocol_json)?;
    let topo = Topology {
        scaleup: Link::from_bidirectional_gbs(scaleup_bw_gbs, scaleup_latency_us * 1e-6),
        fits: LinkFits::new(&links),
        devices_per_node,
        scaleout: scaleout_bw_gbs.map(|bw| Link::per_direction(bw * 1e9, scaleout_latency_us.unwrap_or(0.0) * 1e-6)),
    };
    let sizes = sizes.as_slice()?;
    if let Some(bad) = sizes.iter().find(|m| !(m.is_finite() && **m > 0.0)) {
        return Err(Error::plan("size", format!("message sizes must be > 0 bytes, got {bad}")).into());
    }
    let results: Vec<_> = guarded("the collective", || {
        Ok(sizes.iter().map(|&m| topo.time(op, ranks, m, &proto)).collect())
    })?;
    let d = PyDict::new(py);
    d.set_item(
        "time_s",
        PyArray1::from_vec(py, results.iter().map(|r| r.time_s).collect()),
    )?;
    let first = results.first().copied();
    d.set_item("nodes", first.map_or(topo.nodes(ranks), |r| r.nodes))?;
    d.set_item("hierarchical", first.is_some_and(|r| r.hierarchical))?;
    d.set_item("flat_ring_fallback", first.is_some_and(|r| r.flat_ring_fallback))?;
    Ok(d)
}

/// FLOPs of the chunked recurrent scan (`graph::chunked_scan_flops`) of each sequence length in
/// `new`, `heads` heads with a `dk` x `dv` state, in chunks of `chunk` tokens; `scan` "gated_delta"
/// or "ssd" (Mamba2, with `groups` B/C groups). Whole arrays per call.
#[pyfunction]
#[pyo3(signature = (scan, new, chunk, heads, dk, dv, groups=1.0))]
#[allow(clippy::too_many_arguments)]
fn chunked_scan_flops<'py>(
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
fn phase_power<'py>(
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
fn distinct_experts<'py>(
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

fn slice2<'a, T: numpy::Element>(what: &str, a: &'a PyReadonlyArray2<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| {
        PyErr::from(Error::Input(format!(
            "calibration rows: {what} must be a C-contiguous array"
        )))
    })
}

fn slice1<'a, T: numpy::Element>(what: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
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

/// The canonical name of a dtype as users write it (`bfloat16`, `half`, `F16`, ` bf16`), the
/// one alias table every entry point resolves dtypes through; a PlanError naming `field` else.
#[pyfunction]
fn parse_dtype(field: &str, name: &str) -> PyResult<&'static str> {
    Ok(crate::dtype::DType::parse(field, name)?.name())
}

/// Paths of the data files compiled into the extension.
#[pyfunction]
fn data_files() -> Vec<&'static str> {
    embedded::FILES.iter().map(|(p, _)| *p).collect()
}

/// Bytes of one embedded data file.
#[pyfunction]
fn data_file<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyBytes>> {
    embedded::file(path)
        .map(|b| PyBytes::new(py, b))
        .ok_or_else(|| PyErr::from(Error::Input(format!("no embedded data file '{path}'"))))
}

/// Fingerprint of the embedded data (the catalog cache key).
#[pyfunction]
fn data_hash() -> &'static str {
    embedded::DATA_HASH
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
    m.add_function(wrap_pyfunction!(collective, m)?)?;
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
