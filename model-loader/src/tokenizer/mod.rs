//! The tokenizer: Hugging Face `tokenizer.json` through the `tokenizers` crate, chat templates
//! rendered with minijinja, special token ids, and streaming detokenization.
//!
//! ```
//! use aquila_model_loader::fixtures::tokenizer::{write_tiny_tokenizer, TINY_EOS_ID};
//! use aquila_model_loader::tokenizer::{ChatMessage, Tokenizer};
//!
//! let dir = tempfile::tempdir().unwrap();
//! write_tiny_tokenizer(dir.path()).unwrap();
//! let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
//! let ids = tokenizer.encode("the cat", false).unwrap();
//! assert_eq!(tokenizer.decode(&ids, false).unwrap(), "the cat");
//! let prompt = tokenizer.encode_chat(&[ChatMessage::user("hi")], true).unwrap();
//! assert_eq!(prompt[0], tokenizer.special_tokens().bos.unwrap());
//! assert_eq!(tokenizer.special_tokens().eos_id(), Some(TINY_EOS_ID));
//! ```

pub mod byte_level;
mod chat;
mod codec;
mod error;
mod model;
mod packed_bpe;
pub mod spec;
mod special;
mod stream;

pub use chat::{ChatMessage, ChatTemplate};
pub use codec::{Tokenizer, TokenizerPipeline};
pub use error::TokenizerError;
pub use model::TokenModel;
pub use packed_bpe::PackedBpe;
pub use special::SpecialTokens;
pub use stream::{Decode, StreamDecoder};
