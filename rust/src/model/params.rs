//! Parameter counts, by tensor class, from the normalised structure.

use crate::model::{Attention, Ffn, GatedDeltaNet, Mamba2, Model, NormKind};
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ParamCounts {
    pub embedding: u64,
    pub position_embedding: u64,
    pub attention: u64,
    /// Mamba2 mixers (in/out projections, conv, dt/A/D, gated norm).
    pub mamba: u64,
    /// Gated DeltaNet mixers (in/out projections, conv, dt_bias/A_log, gated norm).
    pub linear_attention: u64,
    pub norms: u64,
    pub ffn: u64,
    pub router: u64,
    /// All routed experts of all MoE layers.
    pub experts: u64,
    /// Routed-expert parameters a single token activates (top-k of E).
    pub experts_active: u64,
    pub shared_experts: u64,
    pub lm_head: u64,
    pub total: u64,
    /// Parameters one token touches (routed experts counted top-k of E).
    pub active: u64,
    /// `active` without the input embedding tables (a token reads one row of
    /// them); the convention some model cards use for "active parameters".
    pub active_non_embedding: u64,
}

/// The arithmetic a count is done in: exact `u64` for the counts, and `f64` for the check that
/// they fit in a `u64` at all (`fits_u64`), both from the one set of formulas below.
pub trait Num: Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> + std::ops::AddAssign {
    fn of(v: u64) -> Self;
}

impl Num for u64 {
    fn of(v: u64) -> Self {
        v
    }
}

impl Num for f64 {
    fn of(v: u64) -> Self {
        v as f64
    }
}

fn norm_params<T: Num>(norm: NormKind, n: u64) -> T {
    match norm {
        NormKind::Rms => T::of(n),
        NormKind::Layer => T::of(2) * T::of(n),
    }
}

/// Parameters of one attention block (projections, biases, q/k norms, sinks,
/// MLA low-rank projections and their norms).
pub fn attention_params<T: Num>(d: u64, a: &Attention, norm: NormKind) -> T {
    let d_raw = d;
    let (d, h) = (T::of(d), T::of(a.heads));
    let mut n = match &a.mla {
        None => {
            let q = h * T::of(a.head_dim);
            let k = T::of(a.kv_heads) * T::of(a.head_dim);
            let v = T::of(a.kv_heads) * T::of(a.v_dim());
            let o = h * T::of(a.v_dim());
            // an output gate on the attention output: q_proj emits it too
            let q_cols = if a.output_gate { q + o } else { q };
            let d_in = T::of(a.input(d_raw));
            let mut n = d_in * (q_cols + k + v) + o * d;
            if a.qkv_bias {
                n += q + k + v;
            }
            n
        }
        Some(m) => {
            let qk = T::of(m.qk_nope_head_dim) + T::of(m.qk_rope_head_dim);
            let q = match m.q_lora_rank {
                Some(r) => d * T::of(r) + norm_params(norm, r) + T::of(r) * h * qk,
                None => d * h * qk,
            };
            let kv_a = d * (T::of(m.kv_lora_rank) + T::of(m.qk_rope_head_dim)) + norm_params(norm, m.kv_lora_rank);
            let kv_b = T::of(m.kv_lora_rank) * h * (T::of(m.qk_nope_head_dim) + T::of(m.v_head_dim));
            q + kv_a + kv_b + h * T::of(m.v_head_dim) * d
        }
    };
    if a.o_bias {
        n += d;
    }
    if a.qk_norm {
        n += if a.qk_norm_all_heads {
            (h + T::of(a.kv_heads)) * T::of(a.head_dim)
        } else {
            T::of(2) * T::of(a.head_dim)
        };
    }
    if a.sinks {
        n += h;
    }
    if let (Some(i), Some(r)) = (
        a.indexer.as_ref().filter(|i| !i.shared),
        a.mla.as_ref().and_then(|m| m.q_lora_rank),
    ) {
        for (k, c) in i.matrices(d_raw, r) {
            n += T::of(k) * T::of(c);
        }
        n += T::of(2) * T::of(i.head_dim); // k_norm: LayerNorm
    }
    n
}

/// Parameters of one Gated DeltaNet mixer (HF Qwen3NextGatedDeltaNet).
pub fn linear_attention_params<T: Num>(d: u64, l: &GatedDeltaNet) -> T {
    T::of(d) * T::of(l.in_proj_width()) + T::of(l.value_dim()) * T::of(d) + T::of(l.vector_params())
}

/// Parameters of one Mamba2 mixer (HF Mamba2Mixer / NemotronH).
pub fn mamba_params<T: Num>(d: u64, m: &Mamba2) -> T {
    let (d, heads) = (T::of(d), T::of(m.num_heads));
    let inner = T::of(m.num_heads) * T::of(m.head_dim);
    let conv_dim = inner + T::of(2) * T::of(m.n_groups) * T::of(m.state_size);
    let in_proj = d * (inner + conv_dim + heads);
    let conv = conv_dim * T::of(m.conv_kernel) + if m.conv_bias { conv_dim } else { T::of(0) };
    let dt_a_d = T::of(3) * heads; // dt_bias, A_log, D
    let norm = inner; // gated RMSNorm weight
    let out_proj = inner * d;
    let bias = if m.proj_bias {
        inner + conv_dim + heads + d
    } else {
        T::of(0)
    };
    in_proj + conv + dt_a_d + norm + out_proj + bias
}

/// Parameters of one feed-forward block of width `f` (gate+up+down or up+down).
pub fn mlp_params<T: Num>(d: u64, f: u64, gated: bool, bias: bool) -> T {
    let (d, f) = (T::of(d), T::of(f));
    let mats = T::of(if gated { 3 } else { 2 });
    let mut n = mats * d * f;
    if bias {
        n += if gated { T::of(2) * f } else { f } + d;
    }
    n
}

/// The counts by class in the arithmetic `T` (`ParamCounts` without its sums).
struct Classes<T> {
    embedding: T,
    position_embedding: T,
    attention: T,
    mamba: T,
    linear_attention: T,
    norms: T,
    ffn: T,
    router: T,
    experts: T,
    experts_active: T,
    shared_experts: T,
    lm_head: T,
}

impl<T: Num> Classes<T> {
    /// Everything but the routed experts (which `total` counts whole and `active` top-k of E).
    fn common(&self) -> T {
        self.embedding
            + self.position_embedding
            + self.attention
            + self.mamba
            + self.linear_attention
            + self.norms
            + self.ffn
            + self.router
            + self.shared_experts
            + self.lm_head
    }
}

fn classes<T: Num>(m: &Model) -> Classes<T> {
    let d = m.hidden_size;
    let zero = T::of(0);
    let mut c = Classes {
        embedding: T::of(m.vocab_size) * T::of(d),
        position_embedding: T::of(m.position_embeddings) * T::of(d),
        attention: zero,
        mamba: zero,
        linear_attention: zero,
        norms: norm_params(m.norm, d), // final norm
        ffn: zero,
        router: zero,
        experts: zero,
        experts_active: zero,
        shared_experts: zero,
        lm_head: zero,
    };
    if !m.tie_word_embeddings {
        c.lm_head += T::of(m.vocab_size) * T::of(d);
    }
    if m.lm_head_bias {
        c.lm_head += T::of(m.vocab_size);
    }
    for g in &m.layer_groups {
        let n = T::of(g.count);
        if let Some(a) = &g.attention {
            c.attention += n * attention_params::<T>(d, a, m.norm);
        }
        if let Some(mb) = &g.mamba {
            c.mamba += n * mamba_params::<T>(d, mb);
        }
        if let Some(l) = &g.linear {
            c.linear_attention += n * linear_attention_params::<T>(d, l);
        }
        c.norms += n * T::of(g.norms) * norm_params(m.norm, d);
        match &g.ffn {
            Ffn::None => {}
            Ffn::Dense {
                intermediate_size,
                gated,
                bias,
                ..
            } => {
                c.ffn += n * mlp_params::<T>(d, *intermediate_size, *gated, *bias);
            }
            Ffn::Moe {
                num_experts,
                top_k,
                expert_intermediate_size,
                shared_intermediate_size,
                gated,
                bias,
                router_bias,
                shared_gate,
                latent,
                ..
            } => {
                // the routed experts in the latent width, its two projections always active
                let width = latent.unwrap_or(d);
                if let Some(l) = latent {
                    c.ffn += n * T::of(2) * T::of(d) * T::of(*l);
                }
                let one = mlp_params::<T>(width, *expert_intermediate_size, *gated, *bias);
                c.experts += n * T::of(*num_experts) * one;
                c.experts_active += n * T::of(*top_k) * one;
                if *shared_intermediate_size > 0 {
                    c.shared_experts += n * mlp_params::<T>(d, *shared_intermediate_size, *gated, *bias);
                }
                let bias = if *router_bias { T::of(*num_experts) } else { zero };
                let gate = if *shared_gate { T::of(d) } else { zero };
                c.router += n * (T::of(d) * T::of(*num_experts) + bias + gate);
            }
        }
    }
    c
}

/// Whether every count of `m` (the total above all) fits in a `u64`: the same formulas in f64,
/// whose rounding is far below the margin to 2^64 kept here (the total under 2^63).
pub fn fits_u64(m: &Model) -> bool {
    let c = classes::<f64>(m);
    let total = c.common() + c.experts;
    total.is_finite() && total < 2f64.powi(63)
}

/// The counts of a model `Model::validate` accepted (`fits_u64`).
pub fn count(m: &Model) -> ParamCounts {
    let c = classes::<u64>(m);
    let active = c.common() + c.experts_active;
    ParamCounts {
        embedding: c.embedding,
        position_embedding: c.position_embedding,
        attention: c.attention,
        mamba: c.mamba,
        linear_attention: c.linear_attention,
        norms: c.norms,
        ffn: c.ffn,
        router: c.router,
        experts: c.experts,
        experts_active: c.experts_active,
        shared_experts: c.shared_experts,
        lm_head: c.lm_head,
        total: c.common() + c.experts,
        active,
        active_non_embedding: active - c.embedding - c.position_embedding,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::llama31_8b;

    #[test]
    fn llama31_8b_exact() {
        // Llama 3.1 model card; exact count 8,030,261,248 (shared/data/model_configs/INDEX.csv).
        let c = count(&llama31_8b());
        assert_eq!(c.total, 8_030_261_248);
        assert_eq!(c.active, c.total);
    }
}
