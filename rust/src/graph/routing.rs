//! Closed forms the graph prices with: a chunked recurrent scan's FLOPs and the expected distinct
//! experts a batch of routed tokens touches.

use crate::model::Scan;

/// FLOPs of a chunked recurrent scan over `new` tokens of one sequence, `heads` heads with a
/// `dk` x `dv` state each, in chunks of `chunk` tokens (the last one shorter; `chunk` 0: one
/// chunk). One chunk of `n` tokens per head:
///
/// - the gated delta rule (the chunkwise form of Yang et al. 2024, "Gated Delta Networks", as
///   the FLA kernels compute it: chunk_scaled_dot_kkt, solve_tril, wy_fast, chunk_delta_h,
///   chunk_o): within the chunk K K^T, the WY products T K and T V, Q K^T and the masked scores
///   times the new values (2 n^2 dk each for the three on keys, 2 n^2 dv each for the two on
///   values); the unit-lower-triangular solve for T, n^3 / 3 multiply-adds; against the state
///   W S, Q S and the update K^T U (2 n dk dv each) and the state's decay (dk dv):
///   `6 n^2 dk + 4 n^2 dv + 2 n^3 / 3 + 6 n dk dv + dk dv`. A decode token (n = 1) is
///   `7 dk dv + 6 dk + 4 dv + 2/3`: the recurrent form's decay, two state reads and the
///   rank-one update (7 dk dv) plus the one-token chunk's products;
/// - Mamba2's SSD scan (Dao and Gu 2024, "Transformers are SSMs", the chunked algorithm of
///   mamba_chunk_scan_combined), dk the state size N, dv the head dim P: C B^T within the chunk
///   (2 n^2 N, shared by the heads of a group: times groups / heads), its decay mask (n^2), the
///   masked scores times X (2 n^2 P), the chunk's state B^T X and the output from the carried
///   state C S (2 n N P each), and passing the state on (decay and add, 2 N P):
///   `2 n^2 N g / h + n^2 + 2 n^2 P + 4 n N P + 2 N P`.
pub fn chunked_scan_flops(scan: Scan, new: u64, chunk: f64, heads: f64, dk: f64, dv: f64) -> f64 {
    let one = |n: f64| match scan {
        Scan::GatedDelta => 6.0 * n * n * dk + 4.0 * n * n * dv + 2.0 * n * n * n / 3.0 + 6.0 * n * dk * dv + dk * dv,
        Scan::Ssd { groups } => {
            2.0 * n * n * dk * groups / heads + n * n + 2.0 * n * n * dv + 4.0 * n * dk * dv + 2.0 * dk * dv
        }
    };
    if new == 0 {
        return 0.0;
    }
    let c = if chunk >= 1.0 { chunk } else { new as f64 };
    let full = (new as f64 / c).floor();
    let rest = new as f64 - full * c;
    heads * (full * one(c) + if rest > 0.0 { one(rest) } else { 0.0 })
}

/// Expected distinct experts `T` tokens touch, each routed to `k` of `E` experts.
///
/// Expert `i` (1-based, by popularity) is chosen by a token with probability
/// `q_i = min(1, c i^-s)`, `c` such that the `q_i` sum to `k` (the experts a
/// token needs); the expected distinct count is `sum_i 1 - (1 - q_i)^T`. At
/// `s = 0` every `q_i = k / E`: uniform routing, `E (1 - (1 - k/E)^T)` (spec 30),
/// the most experts any router can touch on average. As `s` grows the
/// popular experts take the traffic and the count falls towards `k`.
pub fn distinct_experts(num_experts: u64, top_k: u64, tokens: f64, skew: f64) -> f64 {
    Routing::new(num_experts, top_k, skew).distinct(tokens)
}

/// What `distinct_experts` computes of one (E, k, skew) before the token count, so that many
/// token counts (a calibration's rows) share it.
#[derive(Clone, Debug, PartialEq)]
pub enum Routing {
    /// Every expert missed by a token with probability `miss` = 1 - k/E.
    Uniform { experts: f64, miss: f64 },
    /// `capped` experts chosen by every token; each other one missed by a token with its own
    /// probability, held as its logarithm (`miss^T = exp(T ln miss)`: one exponential a count).
    Skewed { capped: f64, ln_miss: Vec<f64> },
}

impl Routing {
    pub fn new(num_experts: u64, top_k: u64, skew: f64) -> Routing {
        let (e, k) = (num_experts as f64, top_k as f64);
        if skew == 0.0 || top_k >= num_experts {
            return Routing::Uniform {
                experts: e,
                miss: 1.0 - k / e,
            };
        }
        let w: Vec<f64> = (1..=num_experts).map(|i| (i as f64).powf(-skew)).collect();
        // Water-filling: the `capped` most popular experts are chosen by every token (their
        // share c w_i would exceed one); the rest share the remaining k - capped choices.
        let mut tail: f64 = w.iter().sum();
        let mut capped = 0usize;
        while (capped as f64) < k && (tail <= 0.0 || (k - capped as f64) * w[capped] > tail) {
            tail -= w[capped];
            capped += 1;
        }
        let c = if tail > 0.0 { (k - capped as f64) / tail } else { 0.0 };
        Routing::Skewed {
            capped: capped as f64,
            ln_miss: w[capped..].iter().map(|wi| (1.0 - (c * wi).min(1.0)).ln()).collect(),
        }
    }

    /// Expected distinct experts `tokens` tokens touch.
    pub fn distinct(&self, tokens: f64) -> f64 {
        match self {
            Routing::Uniform { experts, miss } => experts * (1.0 - miss.powf(tokens)),
            Routing::Skewed { capped, ln_miss } => {
                let rest: f64 = ln_miss.iter().map(|l| 1.0 - (tokens * l).exp()).sum();
                capped + rest
            }
        }
    }
}
