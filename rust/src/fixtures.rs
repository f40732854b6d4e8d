//! Reference structures for tests and benches: Llama-3.1-8B as the
//! normaliser produces it, the H100 SXM catalog row, and the spec-40 NCCL
//! protocol table (values from data/constants.csv). Not used by the engine.

use crate::collectives::ProtocolTable;
use crate::device::Device;
use crate::model::{Activation, Attention, Ffn, LayerGroup, Model, NormKind};

/// Llama-3.1-8B as the normaliser produces it.
pub fn llama31_8b() -> Model {
    Model {
        name: "meta-llama/Llama-3.1-8B".into(),
        hidden_size: 4096,
        vocab_size: 128256,
        layer_groups: vec![LayerGroup {
            count: 32,
            mamba: None,
            attention: Some(Attention {
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                window: None,
                qkv_bias: false,
                o_bias: false,
                qk_norm: false,
                rotary: true,
                sinks: false,
                mla: None,
            }),
            ffn: Ffn::Dense {
                intermediate_size: 14336,
                gated: true,
                activation: Activation::Silu,
                bias: false,
            },
            norms: 2,
        }],
        norm: NormKind::Rms,
        tie_word_embeddings: false,
        position_embeddings: 0,
        lm_head_bias: false,
        max_model_len: 131072,
    }
}

pub fn h100() -> Device {
    Device {
        name: "H100_SXM".into(),
        tflops_bf16: Some(989.4),
        tflops_fp16: Some(989.4),
        tflops_fp16_acc16: None,
        tflops_fp8: Some(1978.9),
        tflops_fp4: None,
        tflops_int8: Some(1978.9),
        tflops_tf32: Some(494.7),
        tflops_fp32: Some(66.9),
        memory_gb: 80.0,
        memory_bw_gbs: 3350.0,
        scaleup_bw_gbs: Some(900.0),
        scaleup_latency_us: None,
        host_link_bw_gbs: Some(126.0),
        links: Vec::new(),
        links_note: None,
    }
}

/// Mixtral-8x7B's structure: Llama-like attention, 8 experts, top-2.
pub fn mixtral_8x7b() -> Model {
    let mut m = llama31_8b();
    m.name = "mistralai/Mixtral-8x7B-v0.1".into();
    m.vocab_size = 32000;
    m.layer_groups[0].ffn = Ffn::Moe {
        num_experts: 8,
        top_k: 2,
        expert_intermediate_size: 14336,
        shared_intermediate_size: 0,
        gated: true,
        activation: Activation::Silu,
        bias: false,
        router_bias: false,
    };
    m
}

/// NCCL protocol efficiencies and cuts of data/constants.csv.
pub fn nccl_protocol() -> ProtocolTable {
    ProtocolTable {
        beta_ll: 0.40,
        beta_ll128: 0.65,
        beta_simple: 0.85,
        ll_max_bytes: 65536.0,
        ll128_max_bytes: 1048576.0,
    }
}
