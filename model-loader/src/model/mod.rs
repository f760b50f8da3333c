//! The Llama model in burn: reusable building blocks (RMSNorm, RoPE, grouped-query attention
//! over an external KV cache, SwiGLU MLP, decoder layer), the KV cache, batched forward inputs
//! and outputs, feature taps for EAGLE drafters, and [`LlamaModel`] itself.

mod attention;
mod batch;
mod context;
mod decoder_layer;
mod error;
mod feature_tap;
mod kv_cache;
mod linear;
mod llama;
mod mlp;
mod rms_norm;
mod rope;
mod weights;

pub use attention::{Attention, AttentionSpec};
pub use batch::{ForwardBatch, ForwardOutput, SequenceInput};
pub use context::{AttentionContext, SequenceSpan};
pub use decoder_layer::{DecoderLayer, DecoderLayerSpec};
pub use error::ModelError;
pub use feature_tap::FeatureTap;
pub use kv_cache::KvCache;
pub use linear::{ColumnBlock, SplitLinear, PARALLEL_WORK};
pub use llama::{LlamaModel, LoadOptions, EMBED_TOKENS, FINAL_NORM, LM_HEAD};
pub use mlp::{Mlp, MlpSpec};
pub use rms_norm::{init_rms_norm, load_rms_norm, RmsNorm};
pub use rope::{Rope, RopeTables};
pub use weights::{Projection, WeightLoader};
