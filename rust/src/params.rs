//! Parameter counts, by tensor class, from the normalised structure.

use crate::model::{Ffn, LayerGroup, Model};
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ParamCounts {
    pub embedding: u64,
    pub position_embedding: u64,
    pub attention: u64,
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
}

/// Parameters of one attention block (projections, biases, q/k norms).
pub fn attention_params(d: u64, g: &LayerGroup) -> u64 {
    let a = &g.attention;
    let q = a.heads * a.head_dim;
    let kv = a.kv_heads * a.head_dim;
    let mut n = d * q + 2 * d * kv + q * d;
    if a.qkv_bias {
        n += q + 2 * kv;
    }
    if a.o_bias {
        n += d;
    }
    if a.qk_norm {
        n += 2 * a.head_dim;
    }
    n
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
        c.attention += n * attention_params(d, g);
        c.norms += n * g.norms * m.norm.params(d);
        match &g.ffn {
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
        + c.norms
        + c.ffn
        + c.router
        + c.shared_experts
        + c.lm_head;
    c.total = common + c.experts;
    c.active = common + c.experts_active;
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
