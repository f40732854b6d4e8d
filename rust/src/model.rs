//! The normalised model structure. The Python normaliser is the only reader
//! of raw config keys; it hands the engine this typed structure (as JSON),
//! and the engine and the parameter counter read nothing else.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NormKind {
    /// RMSNorm: a weight vector, no bias.
    Rms,
    /// LayerNorm: weight and bias vectors.
    Layer,
}

impl NormKind {
    /// Parameters of one norm over `n` features.
    pub fn params(self, n: u64) -> u64 {
        match self {
            NormKind::Rms => n,
            NormKind::Layer => 2 * n,
        }
    }
    /// FLOPs per normalised element, from the definition of the norm:
    /// RMS: square, accumulate, scale, weight (4); Layer: mean, subtract,
    /// square, accumulate, scale, weight, bias (7).
    pub fn flops_per_element(self) -> f64 {
        match self {
            NormKind::Rms => 4.0,
            NormKind::Layer => 7.0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Silu,
    Gelu,
    GeluTanh,
    Relu,
    Relu2,
}

impl Activation {
    /// FLOPs per output element of the activation, from its formula
    /// (silu = x / (1 + exp(-x)): 3; gelu(erf) ~ x/2 (1 + erf(x/sqrt2)): 4;
    /// gelu(tanh) = x/2 (1 + tanh(c (x + 0.044715 x^3))): 8; relu: 1;
    /// relu^2: 2), plus 1 for the gate multiply when gated.
    pub fn flops_per_element(self, gated: bool) -> f64 {
        let base = match self {
            Activation::Silu => 3.0,
            Activation::Gelu => 4.0,
            Activation::GeluTanh => 8.0,
            Activation::Relu => 1.0,
            Activation::Relu2 => 2.0,
        };
        base + if gated { 1.0 } else { 0.0 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// Sliding-window size in tokens (a query sees at most `window` keys).
    #[serde(default)]
    pub window: Option<u64>,
    #[serde(default)]
    pub qkv_bias: bool,
    #[serde(default)]
    pub o_bias: bool,
    /// Per-head RMSNorm on q and k (Qwen3, Gemma-3).
    #[serde(default)]
    pub qk_norm: bool,
    /// Rotary position embedding applied to q and k.
    #[serde(default = "yes")]
    pub rotary: bool,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ffn {
    Dense {
        intermediate_size: u64,
        gated: bool,
        activation: Activation,
        #[serde(default)]
        bias: bool,
    },
    Moe {
        num_experts: u64,
        top_k: u64,
        expert_intermediate_size: u64,
        #[serde(default)]
        shared_intermediate_size: u64,
        gated: bool,
        activation: Activation,
        #[serde(default)]
        bias: bool,
        #[serde(default)]
        router_bias: bool,
    },
}

/// `count` consecutive-or-not layers that share one structure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerGroup {
    pub count: u64,
    pub attention: Attention,
    pub ffn: Ffn,
    /// Norms per layer (1: parallel attention/MLP blocks; 2: pre-norm; 4: Gemma-2).
    pub norms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub hidden_size: u64,
    pub vocab_size: u64,
    pub layer_groups: Vec<LayerGroup>,
    pub norm: NormKind,
    pub tie_word_embeddings: bool,
    /// Rows of a learned absolute position embedding (0 = none).
    #[serde(default)]
    pub position_embeddings: u64,
    #[serde(default)]
    pub lm_head_bias: bool,
    pub max_model_len: u64,
}

impl Model {
    pub fn from_json(s: &str) -> Result<Model> {
        let m: Model = serde_json::from_str(s).map_err(|e| Error::Input(format!("model: {e}")))?;
        m.validate()?;
        Ok(m)
    }

    pub fn num_layers(&self) -> u64 {
        self.layer_groups.iter().map(|g| g.count).sum()
    }

    pub fn is_moe(&self) -> bool {
        self.layer_groups
            .iter()
            .any(|g| matches!(g.ffn, Ffn::Moe { .. }))
    }

    pub fn validate(&self) -> Result<()> {
        let pos = |key: &str, v: u64| -> Result<()> {
            if v == 0 {
                Err(Error::model(key, "must be a positive integer"))
            } else {
                Ok(())
            }
        };
        pos("hidden_size", self.hidden_size)?;
        pos("vocab_size", self.vocab_size)?;
        pos("max_model_len", self.max_model_len)?;
        if self.layer_groups.is_empty() {
            return Err(Error::model("num_hidden_layers", "the model has no layers"));
        }
        for g in &self.layer_groups {
            pos("num_hidden_layers", g.count)?;
            let a = &g.attention;
            pos("num_attention_heads", a.heads)?;
            pos("num_key_value_heads", a.kv_heads)?;
            pos("head_dim", a.head_dim)?;
            if a.heads % a.kv_heads != 0 {
                return Err(Error::model(
                    "num_key_value_heads",
                    format!(
                        "{} query heads are not a multiple of {} kv heads",
                        a.heads, a.kv_heads
                    ),
                ));
            }
            if let Some(w) = a.window {
                pos("sliding_window", w)?;
            }
            match &g.ffn {
                Ffn::Dense {
                    intermediate_size, ..
                } => pos("intermediate_size", *intermediate_size)?,
                Ffn::Moe {
                    num_experts,
                    top_k,
                    expert_intermediate_size,
                    ..
                } => {
                    pos("num_experts", *num_experts)?;
                    pos("num_experts_per_tok", *top_k)?;
                    pos("moe_intermediate_size", *expert_intermediate_size)?;
                    if top_k > num_experts {
                        return Err(Error::model(
                            "num_experts_per_tok",
                            format!("top-k {top_k} exceeds the {num_experts} experts"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Llama-3.1-8B as the normaliser produces it.
    pub fn llama31_8b() -> Model {
        Model {
            name: "meta-llama/Llama-3.1-8B".into(),
            hidden_size: 4096,
            vocab_size: 128256,
            layer_groups: vec![LayerGroup {
                count: 32,
                attention: Attention {
                    heads: 32,
                    kv_heads: 8,
                    head_dim: 128,
                    window: None,
                    qkv_bias: false,
                    o_bias: false,
                    qk_norm: false,
                    rotary: true,
                },
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

    #[test]
    fn json_roundtrip_and_validation() {
        let m = llama31_8b();
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(Model::from_json(&s).unwrap(), m);
        let mut bad = m.clone();
        bad.layer_groups[0].attention.kv_heads = 5;
        assert!(matches!(bad.validate(), Err(Error::ModelConfig { .. })));
        let mut moe = m;
        moe.layer_groups[0].ffn = Ffn::Moe {
            num_experts: 8,
            top_k: 9,
            expert_intermediate_size: 10,
            shared_intermediate_size: 0,
            gated: true,
            activation: Activation::Silu,
            bias: false,
            router_bias: false,
        };
        assert!(moe.validate().is_err());
    }
}
