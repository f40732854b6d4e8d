//! One collective's time over a device's links, for a whole array of sizes.

use super::*;
use crate::collectives::{Collective, Link, LinkFit, LinkFits, ProtocolTable, Topology};
use crate::error::Error;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Times of one collective over a range of message sizes (bytes), on a
/// scale-up link (bidirectional aggregate, as the catalog quotes it) and an
/// optional scale-out link (per direction) between nodes. `links_json` holds
/// the device's measured collectives (a list of link measurements).
#[pyfunction]
#[pyo3(signature = (op, ranks, sizes, scaleup_bw_gbs, scaleup_latency_us, protocol_json, devices_per_node=None, scaleout_bw_gbs=None, scaleout_latency_us=None, links_json=None))]
#[allow(clippy::too_many_arguments)]
pub(super) fn collective<'py>(
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
