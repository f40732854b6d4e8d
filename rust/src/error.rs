//! The one error type of the core. `py.rs` maps each variant to a Python
//! exception under `ridgeline.errors` exactly once.

/// Everything that can go wrong in the core, each naming the bad input.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// A plan parameter breaks a rule (zero batch, TP not dividing heads, ...).
    #[error("{field}: {message}")]
    Plan { field: String, message: String },
    /// A normalised model structure is inconsistent.
    #[error("model config key '{key}': {message}")]
    ModelConfig { key: String, message: String },
    /// A device row lacks what the plan needs, or holds an impossible value.
    #[error("hardware '{device}': {message}")]
    Hardware { device: String, message: String },
    /// A structure passed across the boundary could not be parsed.
    #[error("invalid input: {0}")]
    Input(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn plan(field: &str, message: impl Into<String>) -> Self {
        Error::Plan {
            field: field.to_string(),
            message: message.into(),
        }
    }
    pub fn model(key: &str, message: impl Into<String>) -> Self {
        Error::ModelConfig {
            key: key.to_string(),
            message: message.into(),
        }
    }
    pub fn hardware(device: &str, message: impl Into<String>) -> Self {
        Error::Hardware {
            device: device.to_string(),
            message: message.into(),
        }
    }
}
