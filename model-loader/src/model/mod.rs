//! The Llama model in burn: reusable building blocks (RMSNorm, RoPE, grouped-query attention
//! over an external KV cache, SwiGLU MLP, decoder layer), the KV cache, batched forward inputs
//! and outputs, feature taps for EAGLE drafters, and [`LlamaModel`] itself.
//!
//! ```
//! use aquila_model_loader::fixtures::llama::{write_tiny_llama, TinyLlamaOptions};
//! use aquila_model_loader::model::{FeatureTap, ForwardBatch, LlamaModel, SequenceInput};
//! use burn::backend::Flex;
//!
//! let dir = tempfile::tempdir()?;
//! write_tiny_llama(dir.path(), &TinyLlamaOptions::default())?;
//! let model = LlamaModel::<Flex>::load(dir.path(), &Default::default())?;
//! let mut cache = model.new_kv_cache(2);
//!
//! // Prefill two prompts at once; logits of each prompt's last row.
//! let batch = ForwardBatch::new(vec![
//!     SequenceInput::new(0, vec![1, 40, 41, 42], 0),
//!     SequenceInput::new(1, vec![1, 50], 0),
//! ]);
//! let out = model.forward(&batch, &mut cache, &FeatureTap::LastHidden)?;
//! assert_eq!(out.logits.dims(), [2, model.config().vocab_size]);
//! assert_eq!(out.features.unwrap().dims(), [6, model.config().hidden_size]);
//!
//! // Decode one token for the first prompt, then roll it back.
//! let step = ForwardBatch::new(vec![SequenceInput::new(0, vec![7], cache.len(0))]);
//! model.forward(&step, &mut cache, &FeatureTap::None)?;
//! assert_eq!(cache.len(0), 5);
//! cache.truncate(0, 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attention;
mod batch;
mod context;
mod decoder_layer;
mod error;
mod export;
mod feature_tap;
mod kv_cache;
mod linear;
mod llama;
mod materialize;
mod mlp;
mod rms_norm;
mod rope;
mod weights;

pub use attention::{Attention, AttentionSpec};
pub use batch::{ForwardBatch, ForwardOutput, SequenceInput};
pub(crate) use context::SpanVisibility;
pub use context::{AttentionContext, SequenceSpan};
pub use decoder_layer::{DecoderLayer, DecoderLayerSpec};
pub use error::ModelError;
pub use export::export_tensor;
pub use feature_tap::FeatureTap;
pub use kv_cache::{KeysAndValues, KvCache, KV_ROW_GRANULE};
pub use linear::{BlockWeights, LinearBlock, SplitLinear, WeightStorage, MAX_GEMV_ROWS};
pub use llama::{LlamaModel, EMBED_TOKENS, FINAL_NORM, LM_HEAD};
pub use materialize::materialize;
pub use mlp::{Mlp, MlpSpec};
pub use rms_norm::{export_rms_norm, init_rms_norm, load_rms_norm, rms_norm, RmsNorm};
pub use rope::{Rope, RopeTables};
pub use weights::{Projection, WeightLoader};
