//! Deepening a trained head: decoder layers that pass their input through unchanged until
//! trained, shaped like the head's own.

use aquila_model_loader::config::LlamaConfig;
use aquila_model_loader::model::{materialize, DecoderLayer, DecoderLayerSpec};
use burn::tensor::backend::Backend;

/// `count` pass-through decoder layers ([`DecoderLayer::init_pass_through`]) of the head
/// decoder `config` describes (its width and attention heads; with an input norm), each
/// initialized now.
pub(super) fn pass_through_layers<B: Backend>(
    config: &LlamaConfig,
    count: usize,
    device: &B::Device,
) -> Vec<DecoderLayer<B>> {
    let spec = DecoderLayerSpec::from_config(config);
    (0..count)
        .map(|_| materialize(DecoderLayer::init_pass_through(&spec, device)))
        .collect()
}
