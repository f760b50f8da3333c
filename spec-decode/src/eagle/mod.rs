//! EAGLE draft heads as burn modules, loaded from the checkpoint layouts of the reference
//! implementation and checked against their target model.
//!
//! * [`Eagle1Head`]: `fc` over `[embedding(x_{t+1}), h_t]` (optional bias), decoder layers
//!   whose first has no input norm, no final norm; embeddings and lm_head are the target's.
//! * [`Eagle3Head`]: `fc` over the target's auxiliary features (first forward of a round
//!   only), a midlayer over `[input_layernorm(embedding), hidden_norm(hidden)]`, its own norm
//!   and lm_head over a draft vocabulary that [`DraftVocabMap`] (`d2t`) maps to target ids.
//! * [`EagleHead`]: either, loaded from a head directory, with the batched draft forward.
//!
//! Heads can also be built randomly initialized (`init`, for training) and written back as
//! head directories ([`write_head_dir`], `export`, `config_json`, [`EagleHead::save`]) that
//! load into the same head, and a trained head can be deepened (`with_added_layers`) by layers
//! that pass their input through until trained.
//!
//! A head that does not fit its target (hidden size, vocabulary, auxiliary layers), a
//! checkpoint with missing, misshapen or unexpected tensors, and an `fc` bias that contradicts
//! the config are all rejected with an [`EagleError`] that names the problem.

mod compat;
mod eagle1;
mod eagle3;
mod error;
mod export;
mod growth;
mod head;
mod vocab_map;

pub use eagle1::Eagle1Head;
pub use eagle3::Eagle3Head;
pub use error::EagleError;
pub use export::{eagle1_config_json, eagle3_config_json, write_head_dir, CONFIG_FILE_NAME};
pub use head::EagleHead;
pub use vocab_map::DraftVocabMap;
