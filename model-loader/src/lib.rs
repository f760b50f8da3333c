//! # aquila-model-loader
//!
//! Loads Llama-family models for Aquila: Hugging Face `config.json`, safetensors checkpoints
//! (single file or sharded), `tokenizer.json` with chat templates, GGUF import, and the Llama
//! model itself as burn modules with a KV cache and feature taps for EAGLE drafters, plus CPU
//! f32 kernels on plain slices for the forward pass ([`kernels`]), which the model reaches
//! through the backend extension [`backend::KernelBackend`].

#![warn(missing_docs)]

pub mod backend;
pub mod checkpoint;
pub mod config;
pub mod error;
pub mod fixtures;
pub mod gguf;
pub mod huge_pages;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod quant;
pub mod tokenizer;

pub use error::LoadError;

/// The README's examples, compiled (and, unless marked `no_run`, run) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
