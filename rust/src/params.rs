//! Parameter counts, by tensor class, from the normalised structure.

use crate::model::{Attention, Ffn, Mamba2, Model, NormKind};
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ParamCounts {
    pub embedding: u64,
    pub position_embedding: u64,
    pub attention: u64,
    /// Mamba2 mixers (in/out projections, conv, dt/A/D, gated norm).
    pub mamba: u64,
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

/// Parameters of one attention block (projections, biases, q/k norms, sinks,
/// MLA low-rank projections and their norms).
pub fn attention_params(d: u64, a: &Attention, norm: NormKind) -> u64 {
    let h = a.heads;
    let mut n = match &a.mla {
        None => {
            let q = h * a.head_dim;
            let kv = a.kv_heads * a.head_dim;
            let mut n = d * q + 2 * d * kv + q * d;
            if a.qkv_bias {
                n += q + 2 * kv;
            }
            n
        }
        Some(m) => {
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            let q = match m.q_lora_rank {
                Some(r) => d * r + norm.params(r) + r * h * qk,
                None => d * h * qk,
            };
            let kv_a = d * m.cache_width() + norm.params(m.kv_lora_rank);
            let kv_b = m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim);
            q + kv_a + kv_b + h * m.v_head_dim * d
        }
    };
    if a.o_bias {
        n += d;
    }
    if a.qk_norm {
        n += 2 * a.head_dim;
    }
    if a.sinks {
        n += h;
    }
    n
}

/// Parameters of one Mamba2 mixer (HF Mamba2Mixer / NemotronH).
pub fn mamba_params(d: u64, m: &Mamba2) -> u64 {
    let in_proj = d * (m.inner() + m.conv_dim() + m.num_heads);
    let conv = m.conv_dim() * m.conv_kernel + if m.conv_bias { m.conv_dim() } else { 0 };
    let heads = 3 * m.num_heads; // dt_bias, A_log, D
    let norm = m.inner(); // gated RMSNorm weight
    let out_proj = m.inner() * d;
    let bias = if m.proj_bias {
        m.inner() + m.conv_dim() + m.num_heads + d
    } else {
        0
    };
    in_proj + conv + heads + norm + out_proj + bias
}

/// Parameters of one feed-forward block of width `f` (gate+up+down or up+down).
pub fn mlp_params(d: u64, f: u64, gated: bool, bias: bool) -> u64 {
    let mats = if gated { 3 } else { 2 };
    let mut n = mats * d * f;
    if bias {
        n += if gated { 2 * f } else { f } + d;
    }
    n
}

pub fn count(m: &Model) -> ParamCounts {
    let d = m.hidden_size;
    let mut c = ParamCounts {
        embedding: m.vocab_size * d,
        position_embedding: m.position_embeddings * d,
        norms: m.norm.params(d), // final norm
        ..Default::default()
    };
    if !m.tie_word_embeddings {
        c.lm_head = m.vocab_size * d;
    }
    if m.lm_head_bias {
        c.lm_head += m.vocab_size;
    }
    for g in &m.layer_groups {
        let n = g.count;
        if let Some(a) = &g.attention {
            c.attention += n * attention_params(d, a, m.norm);
        }
        if let Some(mb) = &g.mamba {
            c.mamba += n * mamba_params(d, mb);
        }
        c.norms += n * g.norms * m.norm.params(d);
        match &g.ffn {
            Ffn::None => {}
            Ffn::Dense {
                intermediate_size,
                gated,
                bias,
                ..
            } => {
                c.ffn += n * mlp_params(d, *intermediate_size, *gated, *bias);
            }
            Ffn::Moe {
                num_experts,
                top_k,
                expert_intermediate_size,
                shared_intermediate_size,
                gated,
                bias,
                router_bias,
                ..
            } => {
                let one = mlp_params(d, *expert_intermediate_size, *gated, *bias);
                c.experts += n * num_experts * one;
                c.experts_active += n * top_k * one;
                if *shared_intermediate_size > 0 {
                    c.shared_experts += n * mlp_params(d, *shared_intermediate_size, *gated, *bias);
                }
                c.router += n * (d * num_experts + if *router_bias { *num_experts } else { 0 });
            }
        }
    }
    let common = c.embedding
        + c.position_embedding
        + c.attention
        + c.mamba
        + c.norms
        + c.ffn
        + c.router
        + c.shared_experts
        + c.lm_head;
    c.total = common + c.experts;
    c.active = common + c.experts_active;
    c.active_non_embedding = c.active - c.embedding - c.position_embedding;
    c
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
