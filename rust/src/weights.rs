//! Weight storage formats per tensor role: bits per weight plus block scales,
//! and the compute path a GEMM on them takes.
//!
//! Bytes of a K x N matrix = K N bits / 8 + ceil(K / block_k) ceil(N / block_n) scale_bits / 8,
//! with block 0 meaning "the whole dimension" (one scale per output column
//! along K, or per tensor). The formats and their sources live in
//! data/quant_formats.csv; the Python side resolves a checkpoint's
//! quantization_config (or a user override) into one format per role.

use crate::dtype::DType;
use crate::error::{Error, Result};
use serde::Deserialize;

#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WeightFormat {
    pub bits: f64,
    #[serde(default)]
    pub block_k: u64,
    #[serde(default)]
    pub block_n: u64,
    #[serde(default)]
    pub scale_bits: f64,
    /// GEMM compute path when it is not the activation dtype (W8A8 fp8/int8).
    #[serde(default)]
    pub compute: Option<DType>,
    /// Bits per activation element (scales included) a separate kernel writes when it
    /// quantises a GEMM's input for the compute path (dynamic W8A8 / W4A4); None: no such kernel.
    #[serde(default)]
    pub act_bits: Option<f64>,
}

impl WeightFormat {
    pub fn plain(d: DType) -> WeightFormat {
        WeightFormat {
            bits: d.bytes() * 8.0,
            block_k: 0,
            block_n: 0,
            scale_bits: 0.0,
            compute: None,
            act_bits: None,
        }
    }

    /// Bytes of a K x N weight matrix in this format.
    pub fn bytes(&self, k: f64, n: f64) -> f64 {
        let blocks = |dim: f64, b: u64| if b == 0 { 1.0 } else { (dim / b as f64).ceil() };
        let scales = if self.scale_bits > 0.0 {
            blocks(k, self.block_k) * blocks(n, self.block_n) * self.scale_bits / 8.0
        } else {
            0.0
        };
        k * n * self.bits / 8.0 + scales
    }

    pub fn validate(&self, role: &str) -> Result<()> {
        if !(self.bits.is_finite() && self.bits > 0.0 && self.bits <= 32.0) {
            return Err(Error::plan(
                "weights",
                format!("{role}: bits must be in (0, 32], got {}", self.bits),
            ));
        }
        if !(self.scale_bits.is_finite() && self.scale_bits >= 0.0) {
            return Err(Error::plan("weights", format!("{role}: scale_bits must be >= 0")));
        }
        if let Some(a) = self.act_bits.filter(|a| !(a.is_finite() && *a > 0.0 && *a <= 32.0)) {
            return Err(Error::plan(
                "weights",
                format!("{role}: act_bits must be in (0, 32], got {a}"),
            ));
        }
        Ok(())
    }
}

/// How many weight roles there are (`Role::ALL`).
pub const N_ROLES: usize = 10;

/// The tensor roles whose storage can differ (llama.cpp's Q4_K_M keeps v and
/// down in more bits; quantised checkpoints keep the embedding and head in 16 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Q,
    K,
    V,
    O,
    Up,
    Down,
    ExpertUp,
    ExpertDown,
    Embedding,
    LmHead,
}

impl Role {
    pub const ALL: [Role; N_ROLES] = [
        Role::Q,
        Role::K,
        Role::V,
        Role::O,
        Role::Up,
        Role::Down,
        Role::ExpertUp,
        Role::ExpertDown,
        Role::Embedding,
        Role::LmHead,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Q => "attn_q",
            Role::K => "attn_k",
            Role::V => "attn_v",
            Role::O => "attn_o",
            Role::Up => "ffn_up",
            Role::Down => "ffn_down",
            Role::ExpertUp => "expert_up",
            Role::ExpertDown => "expert_down",
            Role::Embedding => "embedding",
            Role::LmHead => "lm_head",
        }
    }
}

/// One format per role; any role left out is stored in the activation dtype.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WeightFormats {
    #[serde(default)]
    pub attn_q: Option<WeightFormat>,
    #[serde(default)]
    pub attn_k: Option<WeightFormat>,
    #[serde(default)]
    pub attn_v: Option<WeightFormat>,
    #[serde(default)]
    pub attn_o: Option<WeightFormat>,
    #[serde(default)]
    pub ffn_up: Option<WeightFormat>,
    #[serde(default)]
    pub ffn_down: Option<WeightFormat>,
    #[serde(default)]
    pub expert_up: Option<WeightFormat>,
    #[serde(default)]
    pub expert_down: Option<WeightFormat>,
    #[serde(default)]
    pub embedding: Option<WeightFormat>,
    #[serde(default)]
    pub lm_head: Option<WeightFormat>,
}

impl WeightFormats {
    pub fn get(&self, r: Role) -> Option<WeightFormat> {
        match r {
            Role::Q => self.attn_q,
            Role::K => self.attn_k,
            Role::V => self.attn_v,
            Role::O => self.attn_o,
            Role::Up => self.ffn_up,
            Role::Down => self.ffn_down,
            Role::ExpertUp => self.expert_up,
            Role::ExpertDown => self.expert_down,
            Role::Embedding => self.embedding,
            Role::LmHead => self.lm_head,
        }
    }

    /// The format of every role, the activation dtype where none is given.
    pub fn resolve(&self, act: DType) -> Result<[WeightFormat; N_ROLES]> {
        let mut out = [WeightFormat::plain(act); N_ROLES];
        for (i, r) in Role::ALL.iter().enumerate() {
            if let Some(f) = self.get(*r) {
                f.validate(r.name())?;
                out[i] = f;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_scale_bytes_are_exact() {
        // GPTQ 4-bit, group 128: fp16 scale + 4-bit zero per group of 128 along K.
        let g = WeightFormat {
            bits: 4.0,
            block_k: 128,
            block_n: 1,
            scale_bits: 20.0,
            compute: None,
            act_bits: None,
        };
        assert_eq!(
            g.bytes(4096.0, 4096.0),
            4096.0 * 4096.0 / 2.0 + 32.0 * 4096.0 * 20.0 / 8.0
        );
        // fp8 with 128 x 128 fp32 block scales (DeepSeek-V3).
        let f = WeightFormat {
            bits: 8.0,
            block_k: 128,
            block_n: 128,
            scale_bits: 32.0,
            compute: Some(DType::Fp8),
            act_bits: None,
        };
        assert_eq!(f.bytes(7168.0, 2048.0), 7168.0 * 2048.0 + 56.0 * 16.0 * 4.0);
        // MXFP4: an 8-bit shared exponent per 32 values = 4.25 bits per weight.
        let m = WeightFormat {
            bits: 4.0,
            block_k: 32,
            block_n: 1,
            scale_bits: 8.0,
            compute: None,
            act_bits: None,
        };
        assert_eq!(m.bytes(2880.0, 5760.0) * 8.0 / (2880.0 * 5760.0), 4.25);
        assert_eq!(WeightFormat::plain(DType::Bf16).bytes(10.0, 10.0), 200.0);
    }
}
