//! aquila-spec-decode's integration tests, one binary: rejection sampling, trees, proposers, EAGLE heads and their training.
//!
//! All test files of the crate compile into this one binary, so the suite links once instead
//! of once per file.

#[cfg(feature = "burn")]
mod eagle_fixtures;
mod sampling_support;

mod eagle_loading;
mod head_export;
mod ngram_proposer;
mod proposer_draft_model;
mod proposer_eagle;
mod rejection_greedy;
mod rejection_stochastic;
mod sampling_pipeline;
mod train_tiny;
mod tree_proposer;
mod tree_structure;
mod tree_verify;
