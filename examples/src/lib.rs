//! # aquila-examples
//!
//! Runnable programs that show Aquila end to end (`eagle`, `generate`, `import-model`, `bench`),
//! and the small pieces they share: reading prompt files, the built-in prompt set, locating the
//! workspace's model directory, and the speculative-decoding report computed from a metrics
//! snapshot.
#![warn(missing_docs)]

pub mod paths;
pub mod prompts;
pub mod report;
