//! [`Tokenizer`]: text to token ids and back, chat templates and special tokens of one model
//! directory.

use super::chat::{ChatMessage, ChatTemplate};
use super::model::TokenModel;
use super::special::{JsonFile, SpecialTokenSources, SpecialTokens};
use super::stream::StreamDecoder;
use super::TokenizerError;
use serde_json::Value;
use std::path::Path;
use tokenizers::{DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper};

/// File names inside a Hugging Face model directory.
const TOKENIZER_JSON: &str = "tokenizer.json";
const TOKENIZER_CONFIG_JSON: &str = "tokenizer_config.json";
const CHAT_TEMPLATE_JINJA: &str = "chat_template.jinja";
const CONFIG_JSON: &str = "config.json";
const GENERATION_CONFIG_JSON: &str = "generation_config.json";

/// The `tokenizers` pipeline this crate runs: the crate's normalizers, pre-tokenizers,
/// post-processors, decoders and added-token handling around a [`TokenModel`].
pub type TokenizerPipeline = tokenizers::TokenizerImpl<
    TokenModel,
    NormalizerWrapper,
    PreTokenizerWrapper,
    PostProcessorWrapper,
    DecoderWrapper,
>;

/// Parses the text of a `tokenizer.json`; returns the pipeline and its number of ids, added
/// tokens included. JSON syntax is checked first, so a syntax error is reported as such; and a
/// panic inside the `tokenizers` crate becomes an error, because some malformed decoder
/// sections make it unwrap a failed parse (tokenizers 0.22).
///
/// The parse runs on a short-lived thread of its own, and the caller keeps a copy made on its
/// own thread: parsing frees about as many small blocks (the document's strings, the crate's
/// own vocabulary maps, which the pipeline replaces by packed tables where it can) as it keeps,
/// and left in the caller's heap those scattered holes would stay resident under everything
/// allocated after them (the model's weights). A new thread allocates from a heap of its own
/// (glibc gives it its own arena), which the parse's blocks then leave whole, where
/// `malloc_trim` returns it to the system.
fn parse_tokenizer_json(text: &str) -> Result<(TokenizerPipeline, usize), String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| e.to_string())?;
    let (pipeline, vocab_size) =
        std::thread::scope(|scope| scope.spawn(|| pipeline_of(text)).join())
            .map_err(|_| "the tokenizers crate panicked while reading it".to_string())?
            .map_err(|e| e.to_string())?;
    Ok((pipeline.clone(), vocab_size))
}

/// Reads `text` with the `tokenizers` crate and moves its steps around the model that
/// [`TokenModel::for_document`] picks; returns the pipeline and its number of ids.
fn pipeline_of(text: &str) -> tokenizers::Result<(TokenizerPipeline, usize)> {
    let read: tokenizers::Tokenizer = text.parse()?;
    let mut pipeline = TokenizerPipeline::new(TokenModel::for_document(text, read.get_model()));
    pipeline
        .with_normalizer(read.get_normalizer().cloned())
        .with_pre_tokenizer(read.get_pre_tokenizer().cloned())
        .with_post_processor(read.get_post_processor().cloned())
        .with_decoder(read.get_decoder().cloned())
        .with_added_vocabulary(read.get_added_vocabulary().clone())
        .with_padding(read.get_padding().cloned())
        .with_truncation(read.get_truncation().cloned())?;
    Ok((pipeline, read.get_vocab_size(true)))
}

/// A model's tokenizer: `tokenizer.json` through the `tokenizers` crate's pipeline (its BPE
/// vocabularies packed, see [`TokenModel`]), plus the chat template
/// and special token ids from the directory's config files. It is `Send + Sync`, so one
/// instance can serve many threads.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: TokenizerPipeline,
    /// Number of ids, counted once (`tokenizers` rebuilds its vocabulary map to count it).
    vocab_size: usize,
    chat_template: Option<ChatTemplate>,
    special: SpecialTokens,
}

impl Tokenizer {
    /// Loads a Hugging Face model directory: `tokenizer.json` (required), and when present
    /// `tokenizer_config.json`, `chat_template.jinja`, `config.json` and
    /// `generation_config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let path = dir.join(TOKENIZER_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| TokenizerError::io(&path, e))?;
        let tokenizer_config = JsonFile::read_optional(&dir.join(TOKENIZER_CONFIG_JSON))?;
        let model_config = JsonFile::read_optional(&dir.join(CONFIG_JSON))?;
        let generation_config = JsonFile::read_optional(&dir.join(GENERATION_CONFIG_JSON))?;
        let sources = SpecialTokenSources {
            tokenizer_config: tokenizer_config.as_ref(),
            model_config: model_config.as_ref(),
            generation_config: generation_config.as_ref(),
        };
        let chat_template = load_chat_template(dir, tokenizer_config.as_ref())?;
        Self::from_documents(&path, &text, &sources, chat_template)
    }

    /// Builds a tokenizer from the text of a `tokenizer.json` and the `tokenizer_config.json`
    /// document, both named `origin` in error messages (e.g. the GGUF file they were rebuilt
    /// from). The chat template is `tokenizer_config.json`'s `chat_template`.
    pub fn from_json(
        origin: &Path,
        tokenizer_json: &str,
        tokenizer_config: Value,
    ) -> Result<Self, TokenizerError> {
        let config = JsonFile {
            path: origin.to_path_buf(),
            value: tokenizer_config,
        };
        let sources = SpecialTokenSources {
            tokenizer_config: Some(&config),
            model_config: None,
            generation_config: None,
        };
        let chat_template = match template_from_config(&config)? {
            Some(source) => Some(chat_template(source, Some(&config))?),
            None => None,
        };
        Self::from_documents(origin, tokenizer_json, &sources, chat_template)
    }

    /// Parses `tokenizer.json` text (from `path`) and resolves the special tokens.
    fn from_documents(
        path: &Path,
        text: &str,
        sources: &SpecialTokenSources,
        chat_template: Option<ChatTemplate>,
    ) -> Result<Self, TokenizerError> {
        let (inner, vocab_size) =
            parse_tokenizer_json(text).map_err(|message| TokenizerError::InvalidTokenizer {
                path: path.to_path_buf(),
                message,
            })?;
        let special = sources.resolve(|text| inner.token_to_id(text))?;
        Ok(Self {
            vocab_size,
            inner,
            chat_template,
            special,
        })
    }

    /// Encodes `text`; `add_special_tokens` applies the tokenizer's post-processor (e.g. a BOS).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// Decodes `ids`; `skip_special_tokens` drops special tokens from the text.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TokenizerError::TokenOutOfRange { id, vocab_size });
        }
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// A decoder that turns generated ids into text deltas one token at a time (pass this
    /// tokenizer to its `push`).
    pub fn stream_decoder(&self, skip_special_tokens: bool) -> StreamDecoder {
        StreamDecoder::new(skip_special_tokens)
    }

    /// Renders `messages` with the chat template.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.chat_template
            .as_ref()
            .ok_or(TokenizerError::NoChatTemplate)?
            .render(messages, add_generation_prompt)
    }

    /// Renders `messages` with the chat template and encodes the result without adding special
    /// tokens (the template already spells them).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode(
            &self.apply_chat_template(messages, add_generation_prompt)?,
            false,
        )
    }

    /// Whether the directory provided a chat template.
    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// Special token ids (BOS, EOS, padding, unknown).
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Number of token ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The id of token text `token`, if it is in the vocabulary.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of token `id` as stored in the vocabulary (byte-level alphabet for BPE).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The underlying `tokenizers` pipeline.
    pub fn inner(&self) -> &TokenizerPipeline {
        &self.inner
    }
}

/// Loads the chat template: `chat_template.jinja` if present, else `chat_template` of
/// `tokenizer_config.json` (a string, or a list of named templates of which `default` is used).
fn load_chat_template(
    dir: &Path,
    tokenizer_config: Option<&JsonFile>,
) -> Result<Option<ChatTemplate>, TokenizerError> {
    let jinja_path = dir.join(CHAT_TEMPLATE_JINJA);
    let source = match std::fs::read_to_string(&jinja_path) {
        Ok(source) => Some(source),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match tokenizer_config {
            Some(config) => template_from_config(config)?,
            None => None,
        },
        Err(e) => return Err(TokenizerError::io(jinja_path, e)),
    };
    source
        .map(|source| chat_template(source, tokenizer_config))
        .transpose()
}

/// Compiles a chat template with the BOS and EOS texts of `tokenizer_config`.
fn chat_template(
    source: String,
    tokenizer_config: Option<&JsonFile>,
) -> Result<ChatTemplate, TokenizerError> {
    let token_text = |field: &str| -> Result<String, TokenizerError> {
        Ok(match tokenizer_config {
            Some(config) => config.token_text(field)?.unwrap_or_default(),
            None => String::new(),
        })
    };
    ChatTemplate::new(source, token_text("bos_token")?, token_text("eos_token")?)
}

/// Reads `chat_template` from `tokenizer_config.json`.
fn template_from_config(config: &JsonFile) -> Result<Option<String>, TokenizerError> {
    let invalid = |message: &str| TokenizerError::InvalidField {
        path: config.path.clone(),
        field: "chat_template".into(),
        message: message.into(),
    };
    match config.value.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(source)) => Ok(Some(source.clone())),
        Some(Value::Array(named)) => named
            .iter()
            .find(|entry| entry.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|entry| entry.get("template").and_then(Value::as_str))
            .map(|source| Some(source.to_string()))
            .ok_or_else(|| invalid("list of named templates without a `default` template")),
        Some(_) => Err(invalid("expected a string or a list of named templates")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Tokenizer>();
    }
}
