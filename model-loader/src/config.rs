//! Model configs: [`LlamaConfig`] for Llama-family targets (`model_type` llama, mistral,
//! qwen2) and [`EagleConfig`] for EAGLE-1 and EAGLE-3 draft heads, parsed from Hugging Face
//! `config.json` files with errors that name the file and the field; and back to JSON
//! ([`LlamaConfig::to_json`], [`eagle1_config_json`], [`eagle3_config_json`]).

mod eagle;
mod error;
mod fields;
mod llama;
mod rope;
mod to_json;

pub use eagle::{Eagle1Config, Eagle3Config, EagleConfig};
pub use error::ConfigError;
pub use llama::{LlamaConfig, ModelType};
pub use rope::{RopeConfig, RopeScaling, DEFAULT_ROPE_THETA};
pub use to_json::{eagle1_config_json, eagle3_config_json};
