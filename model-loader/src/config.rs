//! Model configs: [`LlamaConfig`] for Llama-family targets (`model_type` llama, mistral,
//! qwen2) and [`EagleConfig`] for EAGLE-1 and EAGLE-3 draft heads, parsed from Hugging Face
//! `config.json` files with errors that name the file and the field.

mod eagle;
mod error;
mod fields;
mod llama;
mod rope;

pub use eagle::{Eagle1Config, Eagle3Config, EagleConfig};
pub use error::ConfigError;
pub use llama::{LlamaConfig, ModelType};
pub use rope::{RopeConfig, RopeScaling, DEFAULT_ROPE_THETA};
