//! # aquila-spec-decode
//!
//! Speculative decoding for Aquila: EAGLE drafting (EAGLE-1, EAGLE-3 chains), n-gram drafting,
//! lossless rejection sampling and the events that verification emits.
//!
//! The modules [`events`] (and the other pure-math modules) compile without burn: build with
//! `default-features = false` to get only them. The EAGLE heads and proposers need the default
//! `burn` feature.

pub mod events;

pub use events::{EventSink, NullSink, SpecDecodeEvent};
