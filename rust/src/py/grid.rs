//! Grids of plans: whole numpy axes in, whole columns out, the GIL released while they run.

use super::*;
use crate::error::Error;
use crate::plan::Plan;
use crate::sweep;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Evaluates a grid of plans in one call: arrays of batch, prompt, output and
/// tp (int64), the rest of the plan shared. Returns columns; a plan that
/// cannot be priced has NaN values and its reason in `error`.
#[pyfunction]
#[pyo3(signature = (prepared, batch, prompt, output, tp, threads=0))]
pub(super) fn estimate_many<'py>(
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
pub(super) fn summaries(py: Python<'_>, c: sweep::Columns) -> PyResult<Bound<'_, PyDict>> {
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

pub(super) fn axis(name: &str, a: PyReadonlyArray1<'_, i64>) -> PyResult<Vec<u64>> {
    to_u64(name, a.as_slice()?)
}

/// Evaluates plans `start..stop` of a grid whose numeric axes are expanded
/// here (output fastest), the rest of each plan the prepared one's. Returns the
/// axis values of each plan and its result columns.
#[pyfunction]
#[pyo3(signature = (prepared, tp, pp, ep, dp, chunk, batch, prompt, output, threads=0, start=0, stop=None, chunk_extra=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn sweep_grid<'py>(
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
