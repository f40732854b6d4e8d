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
pub mod fixtures;
pub mod graph;
pub mod model;
pub mod params;
pub mod plan;
pub mod power;
pub mod roofline;
pub mod serving;
pub mod sweep;
pub mod weights;

#[cfg(feature = "python")]
mod py;

pub use device::Device;
pub use dtype::DType;
pub use engine::{estimate, Estimate};
pub use error::{Error, Result};
pub use model::Model;
pub use plan::Plan;
