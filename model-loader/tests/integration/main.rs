//! aquila-model-loader's integration tests, one binary: configs, checkpoints, GGUF import, the tokenizer and the Llama model (fixtures and SmolLM2 parity).
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

mod common;
mod model_support;
mod prop_support;
mod python_script;

mod checkpoint_errors;
mod checkpoint_load;
mod config_errors;
mod config_parse;
mod gguf_dequant_reference;
mod gguf_import;
mod gguf_import_quantized;
mod gguf_import_qwen2;
mod gguf_malformed;
mod model_batching;
mod model_eagle_fixtures;
mod model_errors;
mod model_features;
mod model_kv_cache;
mod model_reference;
mod oracle_import;
mod oracle_parity;
mod oracle_quantized;
mod props_checkpoint;
mod props_config;
mod props_gguf;
mod props_tokenizer;
mod tokenizer_llama_vocab;
mod tokenizer_packed;
mod tokenizer_tiny;
