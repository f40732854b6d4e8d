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
            linear: None,
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
                output_gate: false,
                qk_norm_all_heads: false,
                indexer: None,
                v_head_dim: None,
                chunk: None,
                input_dim: None,
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
        tdp_w: Some(700.0),
        idle_w: None,
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
        shared_gate: false,
        latent: None,
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

/// A Gated DeltaNet hybrid in Qwen3.5's layout (three linear-attention layers to one gated
/// full-attention layer), at a small size: width 2048, 16 key / 32 value heads of 128, a
/// float32 state; attention 16 heads, 2 KV heads of 256.
pub fn gdn_hybrid() -> Model {
    use crate::model::GatedDeltaNet;
    let mut m = llama31_8b();
    m.name = "gdn-hybrid".into();
    m.hidden_size = 2048;
    let ffn = Ffn::Dense {
        intermediate_size: 6144,
        gated: true,
        activation: Activation::Silu,
        bias: false,
    };
    let mut full = m.layer_groups[0].clone();
    full.count = 1;
    full.ffn = ffn.clone();
    if let Some(a) = full.attention.as_mut() {
        (a.heads, a.kv_heads, a.head_dim) = (16, 2, 256);
        a.output_gate = true;
        a.qk_norm = true;
    }
    let linear = LayerGroup {
        count: 3,
        attention: None,
        mamba: None,
        linear: Some(GatedDeltaNet {
            num_k_heads: 16,
            num_v_heads: 32,
            head_k_dim: 128,
            head_v_dim: 128,
            conv_kernel: 4,
            state_bytes: Some(4.0),
        }),
        ffn,
        norms: 2,
    };
    m.layer_groups = vec![linear, full];
    m
}

/// DeepSeek sparse attention on DeepSeek-V3's MLA (GLM-5's geometry, one dense layer group of
/// four layers): 64 heads, q_lora 2048, kv_lora 512, rope 64, nope 192, v 256; an indexer of
/// 32 heads of 128 choosing 2048 keys.
pub fn dsa() -> Model {
    use crate::model::{Indexer, Mla};
    let mut m = llama31_8b();
    m.name = "dsa".into();
    m.hidden_size = 6144;
    m.layer_groups[0].count = 4;
    if let Some(a) = m.layer_groups[0].attention.as_mut() {
        (a.heads, a.kv_heads, a.head_dim) = (64, 64, 256);
        a.mla = Some(Mla {
            q_lora_rank: Some(2048),
            kv_lora_rank: 512,
            qk_nope_head_dim: 192,
            qk_rope_head_dim: 64,
            v_head_dim: 256,
        });
        a.indexer = Some(Indexer {
            heads: 32,
            head_dim: 128,
            topk: 2048,
            shared: false,
        });
    }
    m
}

/// A Mamba2 hybrid in Nemotron-H's layout (three Mamba2 layers to one attention layer), small:
/// width 2048; 16 heads of 64, 2 groups, state 128, conv 4, SSD chunk 128, a bf16 state.
pub fn mamba_hybrid() -> Model {
    use crate::model::Mamba2;
    let mut m = gdn_hybrid();
    m.name = "mamba-hybrid".into();
    m.layer_groups[0].linear = None;
    m.layer_groups[0].mamba = Some(Mamba2 {
        num_heads: 16,
        head_dim: 64,
        n_groups: 2,
        state_size: 128,
        conv_kernel: 4,
        proj_bias: false,
        conv_bias: true,
        chunk: 128,
        state_bytes: None,
    });
    m
}
