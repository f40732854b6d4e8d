//! One prepared plan priced at its numbers: the estimate and its cost, as Python reads them.

use super::*;
use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::engine::{self, Estimate, Phase};
use crate::graph::{DRAFTER, HOST, MODEL_LEVEL};
use crate::model::Model;
use crate::plan::{Efficiency, Plan};
use crate::roofline::Cost;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

pub(super) fn cost_dict<'py>(py: Python<'py>, e: &Estimate) -> PyResult<Bound<'py, PyDict>> {
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
    if let Some(h) = &m.host {
        let host = PyDict::new(py);
        host.set_item("weights_bytes", h.weights_bytes)?;
        host.set_item("kv_bytes", h.kv_bytes)?;
        host.set_item("capacity_bytes", h.capacity_bytes)?;
        mem.set_item("host", host)?;
    }
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
        group.push(match r.group {
            MODEL_LEVEL => -1i64,
            DRAFTER => -2,
            HOST => -3,
            g => g as i64,
        });
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
    pub(super) plan: Plan,
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
    pub(super) fn parts(&self) -> (&Model, &Device, &Efficiency, ProtocolTable) {
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
pub(super) fn estimate_prepared(
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
