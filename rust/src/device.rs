//! One accelerator as software sees one device, as the catalog describes it.

use crate::dtype::DType;
use crate::error::{Error, Result};
use serde::Deserialize;

/// Unit conversions.
pub const TERA: f64 = 1e12;
pub const GIGA: f64 = 1e9;
/// A gibibyte: memory capacity is quoted in binary units (JEDEC JESD100B.01: "GB" of memory
/// capacity is 2^30 bytes); an "80GB" H100 holds 80 GiB (nvidia-smi reports 81,559 MiB).
pub const GIB: f64 = 1073741824.0;
pub const MICRO: f64 = 1e-6;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Device {
    pub name: String,
    #[serde(default)]
    pub tflops_bf16: Option<f64>,
    #[serde(default)]
    pub tflops_fp16: Option<f64>,
    #[serde(default)]
    pub tflops_fp16_acc16: Option<f64>,
    #[serde(default)]
    pub tflops_fp8: Option<f64>,
    #[serde(default)]
    pub tflops_fp4: Option<f64>,
    #[serde(default)]
    pub tflops_int8: Option<f64>,
    #[serde(default)]
    pub tflops_tf32: Option<f64>,
    #[serde(default)]
    pub tflops_fp32: Option<f64>,
    pub memory_gb: f64,
    pub memory_bw_gbs: f64,
    #[serde(default)]
    pub scaleup_bw_gbs: Option<f64>,
    #[serde(default)]
    pub scaleup_latency_us: Option<f64>,
    #[serde(default)]
    pub host_link_bw_gbs: Option<f64>,
    /// Measured collectives on the device's own scale-up (or host) link, for the
    /// collective library the plan's runtime uses (`link_measurements`).
    #[serde(default)]
    pub links: Vec<crate::collectives::LinkFit>,
    /// Said on every multi-device plan when `links` were not measured on this device.
    #[serde(default)]
    pub links_note: Option<String>,
    /// Board power limit (W), sourced in the catalog; None where no figure is published.
    #[serde(default)]
    pub tdp_w: Option<f64>,
    /// Idle power (W), sourced in the catalog; None where none is published.
    #[serde(default)]
    pub idle_w: Option<f64>,
}

/// The dense peak an operator is priced at, and how it was chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    pub flops_per_s: f64,
    pub requested: DType,
    pub used: DType,
}

impl Peak {
    pub fn fell_back(&self) -> bool {
        self.requested != self.used
    }
}

impl Device {
    pub fn tflops(&self, d: DType) -> Option<f64> {
        match d {
            DType::Bf16 => self.tflops_bf16,
            DType::Fp16 => self.tflops_fp16,
            DType::Fp16Acc16 => self.tflops_fp16_acc16,
            DType::Fp8 => self.tflops_fp8,
            DType::Fp4 => self.tflops_fp4,
            DType::Int8 => self.tflops_int8,
            DType::Tf32 => self.tflops_tf32,
            DType::Fp32 => self.tflops_fp32,
        }
    }

    /// The one documented fallback chain (spec 10): when the catalog has no
    /// figure for the requested dtype, use the next format whose tensor path
    /// a kernel in that dtype would run on. Never invent a figure.
    pub fn fallback_chain(d: DType) -> &'static [DType] {
        match d {
            DType::Bf16 => &[DType::Bf16, DType::Fp16, DType::Fp32],
            DType::Fp16 => &[DType::Fp16, DType::Bf16, DType::Fp32],
            DType::Fp16Acc16 => &[DType::Fp16Acc16, DType::Fp16, DType::Bf16, DType::Fp32],
            DType::Fp8 => &[DType::Fp8, DType::Bf16, DType::Fp16, DType::Fp32],
            DType::Fp4 => &[DType::Fp4, DType::Bf16, DType::Fp16, DType::Fp32],
            DType::Int8 => &[DType::Int8, DType::Bf16, DType::Fp16, DType::Fp32],
            DType::Tf32 => &[DType::Tf32, DType::Fp32],
            DType::Fp32 => &[DType::Fp32],
        }
    }

    pub fn peak(&self, d: DType) -> Result<Peak> {
        for &c in Self::fallback_chain(d) {
            if let Some(t) = self.tflops(c) {
                return Ok(Peak {
                    flops_per_s: t * TERA,
                    requested: d,
                    used: c,
                });
            }
        }
        Err(Error::hardware(
            &self.name,
            format!(
                "no dense throughput figure for {} or its fallbacks ({}); add a sourced tflops value to the catalog",
                d.name(),
                Self::fallback_chain(d)
                    .iter()
                    .map(|x| x.name())
                    .collect::<Vec<_>>()
                    .join(" -> ")
            ),
        ))
    }

    pub fn memory_bw(&self) -> f64 {
        self.memory_bw_gbs * GIGA
    }

    /// Device memory in bytes: the catalog's capacity in (binary) GB.
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gb * GIB
    }

    /// Rejects rows the catalog constraints should already have stopped.
    pub fn validate(&self) -> Result<()> {
        let positive = |col: &str, v: Option<f64>| -> Result<()> {
            match v {
                Some(x) if !(x.is_finite() && x > 0.0) => {
                    Err(Error::hardware(&self.name, format!("{col} must be > 0, got {x}")))
                }
                _ => Ok(()),
            }
        };
        positive("memory_gb", Some(self.memory_gb))?;
        positive("memory_bw_gbs", Some(self.memory_bw_gbs))?;
        // the column's name is written only for an error (an estimate validates its device)
        for d in DType::ALL.into_iter().chain([DType::Fp16Acc16]) {
            if let Some(x) = self.tflops(d).filter(|x| !(x.is_finite() && *x > 0.0)) {
                return Err(Error::hardware(
                    &self.name,
                    format!("tflops_{} must be > 0, got {x}", d.name()),
                ));
            }
        }
        positive("scaleup_bw_gbs", self.scaleup_bw_gbs)?;
        positive("host_link_bw_gbs", self.host_link_bw_gbs)?;
        if let Some(x) = self.scaleup_latency_us.filter(|x| !(x.is_finite() && *x >= 0.0)) {
            return Err(Error::hardware(
                &self.name,
                format!("scaleup_latency_us must be >= 0, got {x}"),
            ));
        }
        match self.links.iter().find_map(|f| f.problem()) {
            Some(why) => Err(Error::hardware(&self.name, why)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub use crate::fixtures::h100;

    #[test]
    fn fallback_follows_the_documented_chain() {
        let mut apple = h100();
        apple.tflops_bf16 = None;
        apple.tflops_fp16 = None;
        apple.tflops_fp8 = None;
        let p = apple.peak(DType::Bf16).unwrap();
        assert_eq!(p.used, DType::Fp32);
        assert!(p.fell_back());
        assert!((p.flops_per_s - 66.9e12).abs() < 1.0);
        let p8 = apple.peak(DType::Fp8).unwrap();
        assert_eq!(p8.used, DType::Fp32);
        apple.tflops_fp32 = None;
        assert!(apple.peak(DType::Bf16).is_err());
    }

    #[test]
    fn validate_rejects_nonpositive() {
        let mut d = h100();
        d.memory_bw_gbs = 0.0;
        assert!(d.validate().is_err());
        let mut d = h100();
        d.tflops_fp8 = Some(f64::NAN);
        assert!(d.validate().is_err());
        assert!(h100().validate().is_ok());
    }
}
