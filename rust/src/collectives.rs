//! Alpha-beta collectives (spec 40): one closed form per collective, one
//! protocol-efficiency table, no other multiplier.

use serde::Deserialize;

/// NCCL protocol efficiencies by message size, from the `constants` table
/// (LL below `ll_max_bytes`, LL128 up to `ll128_max_bytes`, Simple above).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
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

/// One ring's link: per-direction bandwidth (bytes/s) and per-hop latency (s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub bw_per_direction: f64,
    pub alpha_s: f64,
}

impl Link {
    /// Vendors quote scale-up and host links as a bidirectional aggregate; a
    /// ring sends in one direction on each link, so it sees half of it.
    pub fn from_bidirectional_gbs(aggregate_gbs: f64, alpha_s: f64) -> Link {
        Link {
            bw_per_direction: aggregate_gbs * 1e9 / 2.0,
            alpha_s,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    PointToPoint,
}

/// Time of a collective over `n` ranks on a flat ring, message `m` bytes
/// (the full buffer each rank holds).
pub fn time(op: Collective, n: u64, m: f64, link: Link, proto: &ProtocolTable) -> f64 {
    if n <= 1 && op != Collective::PointToPoint {
        return 0.0;
    }
    let nf = n as f64;
    let bw = link.bw_per_direction * proto.beta(m);
    match op {
        Collective::AllReduce => 2.0 * (nf - 1.0) * link.alpha_s + 2.0 * (nf - 1.0) / nf * m / bw,
        Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
            (nf - 1.0) * link.alpha_s + (nf - 1.0) / nf * m / bw
        }
        Collective::PointToPoint => link.alpha_s + m / bw,
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

    pub(crate) fn proto() -> ProtocolTable {
        ProtocolTable {
            beta_ll: 0.40,
            beta_ll128: 0.65,
            beta_simple: 0.85,
            ll_max_bytes: 65536.0,
            ll128_max_bytes: 1048576.0,
        }
    }

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
