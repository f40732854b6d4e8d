//! Alpha-beta collectives (spec 40): one closed form per collective, one
//! protocol-efficiency table, and where a device's collectives were measured,
//! the fitted per-call floor, per-hop latency and bandwidth efficiency of each
//! collective and rank count (`LinkFit`, from `data/hardware/link_measurements.csv`).

use serde::Deserialize;

/// NCCL protocol efficiencies by message size, from the `constants` table
/// (LL below `ll_max_bytes`, LL128 up to `ll128_max_bytes`, Simple above).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProtocolTable {
    pub beta_ll: f64,
    pub beta_ll128: f64,
    pub beta_simple: f64,
    pub ll_max_bytes: f64,
    pub ll128_max_bytes: f64,
}

impl ProtocolTable {
    pub fn beta(&self, m: f64) -> f64 {
        if m < self.ll_max_bytes {
            self.beta_ll
        } else if m < self.ll128_max_bytes {
            self.beta_ll128
        } else {
            self.beta_simple
        }
    }
}

/// One ring's link: per-direction bandwidth (bytes/s), per-hop latency (s),
/// the collective kernel's per-call floor (s) and the share of the protocol
/// rate it reaches (`eff`, 1 where nothing was measured).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub bw_per_direction: f64,
    pub alpha_s: f64,
    pub floor_s: f64,
    pub eff: f64,
}

impl Link {
    /// Vendors quote scale-up and host links as a bidirectional aggregate; a
    /// ring sends in one direction on each link, so it sees half of it.
    pub fn from_bidirectional_gbs(aggregate_gbs: f64, alpha_s: f64) -> Link {
        Link::per_direction(aggregate_gbs * 1e9 / 2.0, alpha_s)
    }

    /// A link quoted per direction (bytes/s), with no floor and the protocol rate.
    pub fn per_direction(bw_per_direction: f64, alpha_s: f64) -> Link {
        Link {
            bw_per_direction,
            alpha_s,
            floor_s: 0.0,
            eff: 1.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    PointToPoint,
}

impl Collective {
    const FITTED: [Collective; 4] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
    ];
}

/// One measured collective on a device's own fabric, fitted by `ridgeline
/// calibrate --comm`: time = floor + hops x latency + bus bytes / (link x beta(M) x eff).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkFit {
    pub op: Collective,
    pub ranks: u64,
    pub floor_us: f64,
    pub latency_us: f64,
    pub bw_efficiency: f64,
}

impl LinkFit {
    /// Why the measurement cannot price a collective, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let ok = self.ranks >= 2
            && [self.floor_us, self.latency_us]
                .iter()
                .all(|x| x.is_finite() && *x >= 0.0)
            && self.bw_efficiency.is_finite()
            && self.bw_efficiency > 0.0;
        (!ok).then(|| {
            format!(
                "a link measurement needs ranks >= 2, floor_us and latency_us >= 0 and bw_efficiency > 0, got {self:?}"
            )
        })
    }
}

/// Rank counts fitted per collective (the measurements cover 2, 4 and 8).
const FIT_SLOTS: usize = 4;

/// A device's fitted collectives, per collective and rank count, held without
/// allocating so that a topology stays `Copy`. A group of `n` ranks takes the
/// fit of the largest measured rank count not above `n` (the smallest above
/// when none is below); a collective with no fit keeps the catalog link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkFits {
    slots: [[Option<FitSlot>; FIT_SLOTS]; 4],
}

/// One fitted rank count, in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct FitSlot {
    ranks: u64,
    floor_s: f64,
    alpha_s: f64,
    eff: f64,
}

impl LinkFits {
    pub fn new(fits: &[LinkFit]) -> LinkFits {
        let mut out = LinkFits::default();
        for (i, op) in Collective::FITTED.iter().enumerate() {
            let mut mine: Vec<&LinkFit> = fits.iter().filter(|f| f.op == *op).collect();
            mine.sort_by_key(|f| f.ranks);
            for (slot, f) in out.slots[i].iter_mut().zip(mine) {
                *slot = Some(FitSlot {
                    ranks: f.ranks,
                    floor_s: f.floor_us * 1e-6,
                    alpha_s: f.latency_us * 1e-6,
                    eff: f.bw_efficiency,
                });
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().flatten().all(Option::is_none)
    }

    /// The link `op` over `n` ranks sees: `base`'s bandwidth with the fit's floor,
    /// latency and efficiency. A send/receive has no measurement of its own (a 2-rank
    /// all-gather runs NCCL's ring kernel, not a copy: the shipped A100 send/receive rows
    /// run at 1.7x the rate the A100 2-rank all-gather fit gives), so it keeps `base`.
    pub fn link(&self, op: Collective, n: u64, base: Link) -> Link {
        let Some(i) = Collective::FITTED.iter().position(|c| *c == op) else {
            return base;
        };
        let fits = self.slots[i].iter().flatten();
        let below = fits.clone().filter(|f| f.ranks <= n).max_by_key(|f| f.ranks);
        match below.or_else(|| fits.min_by_key(|f| f.ranks)) {
            Some(f) => Link {
                bw_per_direction: base.bw_per_direction,
                alpha_s: f.alpha_s,
                floor_s: f.floor_s,
                eff: f.eff,
            },
            None => base,
        }
    }
}

/// Time of a collective over `n` ranks on a flat ring, message `m` bytes
/// (the full buffer each rank holds).
///
/// The protocol table makes the raw closed form dip just above each protocol
/// cut (a faster protocol takes over). A message can always be padded up to
/// the next cut, so the time at `m` is the smaller of the closed form at `m`
/// and at each cut above it: monotone in size, with no constant added.
pub fn time(op: Collective, n: u64, m: f64, link: Link, proto: &ProtocolTable) -> f64 {
    if n <= 1 && op != Collective::PointToPoint {
        return 0.0;
    }
    let mut t = raw_time(op, n, m, link, proto);
    for cut in [proto.ll_max_bytes, proto.ll128_max_bytes] {
        if cut > m {
            t = t.min(raw_time(op, n, cut, link, proto));
        }
    }
    t
}

/// The spec-40 closed form at one message size.
fn raw_time(op: Collective, n: u64, m: f64, link: Link, proto: &ProtocolTable) -> f64 {
    let nf = n as f64;
    let bw = link.bw_per_direction * proto.beta(m) * link.eff;
    link.floor_s
        + match op {
            Collective::AllReduce => 2.0 * (nf - 1.0) * link.alpha_s + 2.0 * (nf - 1.0) / nf * m / bw,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (nf - 1.0) * link.alpha_s + (nf - 1.0) / nf * m / bw
            }
            Collective::PointToPoint => link.alpha_s + m / bw,
        }
}

/// Where the collective's ranks sit: devices per node on the scale-up fabric,
/// and the per-device scale-out link between nodes when one is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Topology {
    pub scaleup: Link,
    /// The device's measured collectives on its scale-up (or host) link.
    pub fits: LinkFits,
    pub devices_per_node: Option<u64>,
    pub scaleout: Option<Link>,
}

/// A collective's time and how it was routed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CommTime {
    pub time_s: f64,
    pub nodes: u64,
    /// True when the group spans nodes and the hierarchical form was used.
    pub hierarchical: bool,
    /// True when the group exceeds one node but no scale-out link is known,
    /// so it was priced as a flat ring on the scale-up fabric.
    pub flat_ring_fallback: bool,
}

impl Topology {
    pub fn flat(scaleup: Link) -> Topology {
        Topology {
            scaleup,
            fits: LinkFits::default(),
            devices_per_node: None,
            scaleout: None,
        }
    }

    /// The node-local link `op` over `n` ranks sees (the measured fit where there is one).
    pub fn local(&self, op: Collective, n: u64) -> Link {
        self.fits.link(op, n, self.scaleup)
    }

    /// Nodes a group of `n` ranks occupies: ceil(n / devices_per_node).
    pub fn nodes(&self, n: u64) -> u64 {
        match self.devices_per_node {
            Some(d) if d > 0 => n.div_ceil(d),
            _ => 1,
        }
    }

    /// Time of `op` over `n` ranks with message `m`; groups that fit in a node
    /// (or with no scale-out link known) are flat rings on the scale-up fabric.
    pub fn time(&self, op: Collective, n: u64, m: f64, proto: &ProtocolTable) -> CommTime {
        let nodes = self.nodes(n);
        let flat = |fallback| CommTime {
            time_s: time(op, n, m, self.local(op, n), proto),
            nodes,
            hierarchical: false,
            flat_ring_fallback: fallback,
        };
        let (Some(dpn), Some(out)) = (self.devices_per_node, self.scaleout) else {
            return flat(nodes > 1);
        };
        if nodes <= 1 {
            return flat(false);
        }
        let local = n.min(dpn);
        let rs = self.local(Collective::ReduceScatter, local);
        let ag = self.local(Collective::AllGather, local);
        let t = match op {
            // intra reduce-scatter + inter ring all-reduce of M/local + intra all-gather
            Collective::AllReduce => {
                time(Collective::ReduceScatter, local, m, rs, proto)
                    + time(Collective::AllReduce, nodes, m / local as f64, out, proto)
                    + time(Collective::AllGather, local, m, ag, proto)
            }
            Collective::ReduceScatter => {
                time(Collective::ReduceScatter, local, m, rs, proto)
                    + time(Collective::ReduceScatter, nodes, m / local as f64, out, proto)
            }
            Collective::AllGather => {
                time(Collective::AllGather, nodes, m / local as f64, out, proto)
                    + time(Collective::AllGather, local, m, ag, proto)
            }
            // each rank's off-node share leaves over its NIC, the on-node share over
            // the scale-up fabric, concurrently: the slower fabric's share bounds it
            Collective::AllToAll => {
                let up = self.local(Collective::AllToAll, local);
                let nf = n as f64;
                let on = (local - 1) as f64 / nf * m / (up.bw_per_direction * proto.beta(m) * up.eff);
                let off = (n - local) as f64 / nf * m / (out.bw_per_direction * proto.beta(m) * out.eff);
                up.floor_s.max(out.floor_s)
                    + on.max(off)
                    + (local - 1) as f64 * up.alpha_s
                    + (n - local) as f64 * out.alpha_s
            }
            Collective::PointToPoint => time(Collective::PointToPoint, 2, m, out, proto),
        };
        CommTime {
            time_s: t,
            nodes,
            hierarchical: true,
            flat_ring_fallback: false,
        }
    }
}

/// nccl-tests bus bandwidth of an all-reduce: (M / t) * 2 (N-1)/N.
pub fn allreduce_busbw(n: u64, m: f64, t: f64) -> f64 {
    let nf = n as f64;
    m / t * 2.0 * (nf - 1.0) / nf
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use crate::fixtures::nccl_protocol as proto;

    #[test]
    fn ring_allreduce_closed_form() {
        let link = Link::from_bidirectional_gbs(900.0, 2e-6);
        let m = 64.0 * 1024.0 * 1024.0;
        let t = time(Collective::AllReduce, 8, m, link, &proto());
        let want = 2.0 * 7.0 * 2e-6 + 2.0 * 7.0 / 8.0 * m / (450e9 * 0.85);
        assert!((t - want).abs() / want < 1e-12);
        // busBW approaches beta * per-direction bandwidth for large messages
        let big = 1024.0 * 1024.0 * 1024.0;
        let link0 = Link::from_bidirectional_gbs(900.0, 0.0);
        let tb = time(Collective::AllReduce, 8, big, link0, &proto());
        assert!((allreduce_busbw(8, big, tb) - 0.85 * 450e9).abs() < 1.0);
    }

    #[test]
    fn each_collective_closed_form() {
        let p = proto();
        let link = Link::from_bidirectional_gbs(600.0, 3e-6);
        let m = 8.0 * 1024.0 * 1024.0;
        let bw = 300e9 * 0.85;
        let close = |a: f64, b: f64| assert!((a - b).abs() / b < 1e-12, "{a} vs {b}");
        close(time(Collective::AllReduce, 4, m, link, &p), 6.0 * 3e-6 + 1.5 * m / bw);
        close(time(Collective::AllGather, 4, m, link, &p), 3.0 * 3e-6 + 0.75 * m / bw);
        close(
            time(Collective::ReduceScatter, 4, m, link, &p),
            3.0 * 3e-6 + 0.75 * m / bw,
        );
        close(time(Collective::AllToAll, 4, m, link, &p), 3.0 * 3e-6 + 0.75 * m / bw);
        close(time(Collective::PointToPoint, 2, m, link, &p), 3e-6 + m / bw);
    }

    #[test]
    fn hierarchical_allreduce_hand_derivation() {
        // 12 ranks on 8-device nodes (2 nodes), 4 MiB, 900 GB/s NVLink, 50 GB/s scale-out per direction.
        let p = proto();
        let up = Link::from_bidirectional_gbs(900.0, 0.0);
        let out = Link::per_direction(50e9, 0.0);
        let topo = Topology {
            scaleup: up,
            fits: LinkFits::default(),
            devices_per_node: Some(8),
            scaleout: Some(out),
        };
        let m = 4.0 * 1024.0 * 1024.0;
        let c = topo.time(Collective::AllReduce, 12, m, &p);
        assert_eq!(c.nodes, 2);
        assert!(c.hierarchical);
        // by hand: RS over 8 on NVLink: 7/8 x 4 MiB / (450 GB/s x 0.85)  = 9.594 us
        //          AR over 2 nodes of 512 KiB (LL128): 2 x 1/2 x 512 KiB / (50 GB/s x 0.65) = 16.131 us
        //          AG over 8 on NVLink: = 9.594 us
        let hand = 9.594e-6 + 16.131e-6 + 9.594e-6;
        assert!((c.time_s - hand).abs() / hand < 0.01, "{} vs {hand}", c.time_s);
        // without a scale-out link the group stays a flat ring, and says so
        let flat = Topology { scaleout: None, ..topo }.time(Collective::AllReduce, 12, m, &p);
        assert!(flat.flat_ring_fallback && !flat.hierarchical);
    }

    #[test]
    fn padding_to_the_next_cut_keeps_time_monotone() {
        let p = proto();
        let link = Link::from_bidirectional_gbs(900.0, 0.0);
        let below = time(Collective::AllReduce, 8, 65535.0, link, &p);
        let at = time(Collective::AllReduce, 8, 65536.0, link, &p);
        assert!(below <= at);
        assert_eq!(below, raw_time(Collective::AllReduce, 8, 65536.0, link, &p));
        let mut last = 0.0;
        let mut m = 1.0;
        while m < 1e10 {
            let t = time(Collective::AllReduce, 8, m, link, &p);
            assert!(t >= last, "{m}");
            last = t;
            m *= 1.07;
        }
    }

    #[test]
    fn fitted_link_closed_form_and_rank_choice() {
        let p = proto();
        let fit = |op, ranks, floor_us, latency_us, bw_efficiency| LinkFit {
            op,
            ranks,
            floor_us,
            latency_us,
            bw_efficiency,
        };
        let fits = LinkFits::new(&[
            fit(Collective::AllReduce, 8, 5.0, 0.9, 0.9),
            fit(Collective::AllReduce, 2, 4.0, 1.0, 0.6),
            fit(Collective::AllGather, 2, 3.0, 2.0, 0.5),
        ]);
        let topo = Topology {
            fits,
            ..Topology::flat(Link::from_bidirectional_gbs(900.0, 7e-6))
        };
        let m = 8.0 * 1024.0 * 1024.0;
        let close = |a: f64, b: f64| assert!((a - b).abs() / b < 1e-12, "{a} vs {b}");
        // 8 ranks: floor + 14 hops x alpha + 2 x 7/8 x M / (450 GB/s x 0.85 x 0.9)
        let t8 = topo.time(Collective::AllReduce, 8, m, &p).time_s;
        close(t8, 5e-6 + 14.0 * 0.9e-6 + 1.75 * m / (450e9 * 0.85 * 0.9));
        // 4 ranks take the 2-rank fit (the largest measured count below), 16 ranks the 8-rank one
        let t4 = topo.time(Collective::AllReduce, 4, m, &p).time_s;
        close(t4, 4e-6 + 6.0 * 1e-6 + 1.5 * m / (450e9 * 0.85 * 0.6));
        close(fits.link(Collective::AllReduce, 16, topo.scaleup).floor_s, 5e-6);
        // a send/receive has no fit: the catalog link and its latency
        close(
            topo.time(Collective::PointToPoint, 2, m, &p).time_s,
            7e-6 + m / (450e9 * 0.85),
        );
        // an unfitted collective keeps the catalog link and its latency
        let a2a = topo.time(Collective::AllToAll, 4, m, &p).time_s;
        close(a2a, 3.0 * 7e-6 + 0.75 * m / (450e9 * 0.85));
    }

    #[test]
    fn protocol_cuts() {
        let p = proto();
        assert_eq!(p.beta(1024.0), 0.40);
        assert_eq!(p.beta(65536.0), 0.65);
        assert_eq!(p.beta(1048576.0), 0.85);
        assert_eq!(
            time(
                Collective::AllReduce,
                1,
                1e6,
                Link::from_bidirectional_gbs(1.0, 1.0),
                &p
            ),
            0.0
        );
    }
}
