//! The OpenAI wire format the server reads and writes (vLLM's field names and semantics).

pub mod chat;
pub mod common;
pub mod completions;
pub mod models;
