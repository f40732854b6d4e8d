//! ridgeline core: an operator-level roofline over a model's real graph.
//!
//! Pure Rust on plain structs; everything PyO3 lives in `py.rs` behind the
//! `python` feature so that `cargo test` never links libpython.

pub mod attention;
pub mod calib;
pub mod collectives;
pub mod device;
pub mod dtype;
pub mod embedded;
pub mod engine;
pub mod error;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod graph;
pub mod limits;
pub mod model;
pub mod plan;
pub mod power;
pub mod roofline;
pub mod schedule;
pub mod serving;
pub mod sweep;
pub mod weights;

#[cfg(feature = "python")]
mod py;

pub use device::Device;
pub use dtype::DType;
pub use engine::{estimate, Estimate};
pub use error::{Error, Result};
pub use model::params;
pub use model::Model;
pub use plan::Plan;

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;

    /// A key the type does not know is an error naming the key, never ignored.
    fn refuses<T: DeserializeOwned>(json: &str) {
        let e = serde_json::from_str::<T>(json)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("unknown field `zz_misspelt`"),
            "{}: {json} gave {e:?}",
            std::any::type_name::<T>()
        );
    }

    /// Every input type that crosses into the core (issue 42: an efficiency with a misspelt
    /// `eta_mme` was accepted and ignored, a plan with `kv_skip_masked_tial` too).
    #[test]
    fn every_input_type_refuses_an_unknown_key_naming_it() {
        let plain = r#"{"zz_misspelt": 1}"#;
        refuses::<crate::plan::Plan>(plain);
        refuses::<crate::plan::TopologySpec>(plain);
        refuses::<crate::plan::Efficiency>(r#"{"eta_compute": 0.5, "eta_mem": 0.5, "zz_misspelt": 0.5}"#);
        refuses::<crate::plan::AttnEff>(plain);
        refuses::<crate::device::Device>(plain);
        refuses::<crate::collectives::ProtocolTable>(plain);
        refuses::<crate::collectives::LinkFit>(plain);
        refuses::<crate::weights::WeightFormat>(plain);
        refuses::<crate::weights::WeightFormats>(plain);
        refuses::<crate::model::Model>(plain);
        refuses::<crate::model::LayerGroup>(plain);
        refuses::<crate::model::Attention>(plain);
        refuses::<crate::model::Indexer>(plain);
        refuses::<crate::model::GatedDeltaNet>(plain);
        refuses::<crate::model::Mla>(plain);
        refuses::<crate::model::Mamba2>(plain);
        refuses::<crate::model::Ffn>(r#"{"kind": "dense", "zz_misspelt": 1}"#);
        refuses::<crate::serving::Scheduler>(plain);
        refuses::<crate::serving::Options>(plain);
        refuses::<crate::serving::Pool>(plain);
        refuses::<crate::serving::KvLink>(plain);
        refuses::<crate::serving::Cluster>(plain);
        refuses::<crate::serving::workload::Workload>(plain);
        refuses::<crate::serving::workload::Prefixes>(plain);
        refuses::<crate::serving::workload::TraceRow>(plain);
        refuses::<crate::serving::workload::Lengths>(r#"{"kind": "fixed", "zz_misspelt": 1}"#);
        refuses::<crate::serving::workload::Arrivals>(r#"{"kind": "poisson", "zz_misspelt": 1}"#);
    }
}
