//! The sampling pipeline shared by plain decoding and speculative verification.
//!
//! One request's distribution is computed the same way whether the engine samples a token
//! directly or the [`crate::rejection`] sampler verifies a draft against it, so speculative
//! decoding samples exactly from the distribution the request asked for:
//!
//! 1. [`apply_penalties`] (or [`PenaltyHistory::apply`]) on the raw logits;
//! 2. [`greedy`] for greedy requests, otherwise [`probabilities`]: temperature → min-p →
//!    top-k → top-p → softmax;
//! 3. [`sample`] with the request's own [`RequestRng`].
//!
//! ```
//! use aquila_spec_decode::sampling::{apply_penalties, probabilities, sample, RequestRng, SamplingConfig};
//!
//! let cfg = SamplingConfig { temperature: 0.7, top_k: 2, ..SamplingConfig::default() };
//! cfg.validate()?;
//! let mut logits = vec![1.0, 3.0, 2.5, -1.0];
//! apply_penalties(&mut logits, &cfg, &[0, 1], &[1]);
//! let probs = probabilities(&logits, &cfg);
//! assert_eq!(probs[0], 0.0); // outside the top 2
//! let token = sample(&probs, &mut RequestRng::new(42));
//! assert!(token == 1 || token == 2);
//! # Ok::<(), aquila_spec_decode::sampling::SamplingError>(())
//! ```

mod categorical;
mod config;
mod distribution;
mod exp;
mod filters;
mod logprobs;
mod penalties;
mod reduce;
mod rng;

pub use categorical::{greedy, sample};
pub(crate) use categorical::{total_weight, weight};
pub use config::{SamplingConfig, SamplingError};
pub use distribution::{probabilities, probabilities_into};
pub use filters::top_n_indices;
pub use logprobs::{log_sum_exp, logprob, top_logprobs};
pub use penalties::{apply_penalties, PenaltyHistory};
pub use rng::RequestRng;
