//! Errors of loading an EAGLE head and checking it against its target.

use aquila_model_loader::checkpoint::CheckpointError;
use aquila_model_loader::config::ConfigError;

use crate::sampling::SamplingError;

/// An EAGLE head that cannot be loaded or does not fit its target model.
#[derive(Debug, thiserror::Error)]
pub enum EagleError {
    /// The head's `config.json` is unreadable or invalid (including an `fc` bias setting that
    /// contradicts the checkpoint).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The head's checkpoint is unreadable or its tensors differ from what the config implies
    /// (the report lists every missing, misshapen and unexpected tensor).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A size of the head differs from the target's.
    #[error("EAGLE head does not fit the target: {field} is {head} in the head but {target} in the target")]
    Incompatible {
        /// The config field compared (e.g. `hidden_size`, `vocab_size`).
        field: &'static str,
        /// The head's value.
        head: usize,
        /// The target's value.
        target: usize,
    },
    /// An EAGLE-3 auxiliary layer id does not name a layer of the target.
    #[error(
        "EAGLE-3 auxiliary layer id {layer} is out of range: the target has {num_layers} layers \
         (ids 0..{num_layers} name the residual stream entering each layer)"
    )]
    AuxLayerOutOfRange {
        /// The offending id.
        layer: usize,
        /// The target's number of layers.
        num_layers: usize,
    },
    /// The head's config describes something this crate cannot run; the message says what.
    #[error("unsupported EAGLE head: {0}")]
    Unsupported(String),
    /// The `d2t`/`t2d` vocabulary mapping is inconsistent; the message says how.
    #[error("EAGLE-3 vocabulary mapping: {0}")]
    VocabMap(String),
    /// The proposer settings are impossible (no draft token, a non-positive temperature, no
    /// slot).
    #[error("invalid EAGLE proposer settings: {0}")]
    Settings(#[from] SamplingError),
}
