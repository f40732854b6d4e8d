//! Numeric formats. Bytes per element are unit conversions (bits / 8).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Fp32,
    Tf32,
    Bf16,
    Fp16,
    Fp8,
    /// FP4 E2M1 tensor math (NVFP4 / MXFP4 elements; a GEMM compute path, never an activation dtype).
    Fp4,
    Int8,
    /// fp16 tensor math with fp16 accumulate (a compute path, stored as fp16):
    /// the consumer-card rate that llama.cpp's cuBLAS F16 GEMMs use.
    Fp16Acc16,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::Fp32,
        DType::Tf32,
        DType::Bf16,
        DType::Fp16,
        DType::Fp8,
        DType::Fp4,
        DType::Int8,
    ];

    /// Storage bytes per element (tf32 is stored as fp32).
    pub fn bytes(self) -> f64 {
        match self {
            DType::Fp32 | DType::Tf32 => 4.0,
            DType::Bf16 | DType::Fp16 | DType::Fp16Acc16 => 2.0,
            DType::Fp8 | DType::Int8 => 1.0,
            DType::Fp4 => 0.5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Fp32 => "fp32",
            DType::Tf32 => "tf32",
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
            DType::Fp8 => "fp8",
            DType::Fp4 => "fp4",
            DType::Int8 => "int8",
            DType::Fp16Acc16 => "fp16acc16",
        }
    }

    /// Parse a dtype name as users write it (`bf16`, `bfloat16`, `float16`, ...).
    pub fn parse(field: &str, s: &str) -> Result<DType> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "fp32" | "float32" | "float" | "f32" => DType::Fp32,
            "tf32" => DType::Tf32,
            "bf16" | "bfloat16" => DType::Bf16,
            "fp16" | "float16" | "half" | "f16" => DType::Fp16,
            "fp8" | "float8" | "fp8_e4m3" | "e4m3" | "fp8_e5m2" | "e5m2" => DType::Fp8,
            "fp4" | "fp4_e2m1" | "e2m1" => DType::Fp4,
            "int8" | "i8" => DType::Int8,
            "fp16acc16" | "fp16_acc16" => DType::Fp16Acc16,
            _ => {
                return Err(Error::plan(
                    field,
                    format!("unknown dtype {s:?}; accepted: fp32, tf32, bf16, fp16, fp8, fp4, int8, fp16acc16"),
                ))
            }
        })
    }

    /// A format values are stored in (tf32 and fp16acc16 are compute paths on fp32 and fp16;
    /// fp4 values are stored in a block-scaled quant format, nvfp4 or mxfp4, with its scales).
    pub fn is_storage_format(self) -> bool {
        !matches!(self, DType::Tf32 | DType::Fp16Acc16 | DType::Fp4)
    }

    /// Activations are kept in a 16- or 32-bit float format.
    pub fn is_activation_format(self) -> bool {
        matches!(self, DType::Fp32 | DType::Tf32 | DType::Bf16 | DType::Fp16)
    }
}

impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DType::parse("dtype", &s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_roundtrip_and_bytes() {
        for d in DType::ALL {
            assert_eq!(DType::parse("dtype", d.name()).unwrap(), d);
        }
        assert_eq!(DType::parse("dtype", "bfloat16").unwrap().bytes(), 2.0);
        assert_eq!(DType::parse("dtype", "float32").unwrap().bytes(), 4.0);
        assert!(DType::parse("dtype", "int3").is_err());
    }
}
