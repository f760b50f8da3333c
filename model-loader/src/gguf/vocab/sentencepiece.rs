//! SentencePiece vocabularies (`tokenizer.ggml.model = llama`: Llama 2, Mistral, Phi-3).

use super::GgufVocab;
use crate::gguf::reader::GgufHeader;
use crate::gguf::value::MetadataExt;
use crate::gguf::GgufError;
use crate::tokenizer::spec::{SentencePieceBpeSpec, TokenizerSpec};

/// The SentencePiece BPE tokenizer of `header`: merges ranked by `tokenizer.ggml.scores`, a
/// `▁` before the text unless `tokenizer.ggml.add_space_prefix` is false, and a BOS token
/// unless `tokenizer.ggml.add_bos_token` is false (llama.cpp's defaults).
pub(super) fn rebuild(header: &GgufHeader, vocab: &GgufVocab) -> Result<TokenizerSpec, GgufError> {
    const SCORES: &str = "tokenizer.ggml.scores";
    let scores = header
        .required_array(SCORES)?
        .iter()
        .enumerate()
        .map(|(i, value)| {
            value.as_f64().map(|score| score as f32).ok_or_else(|| {
                crate::gguf::value::mismatch(&format!("{SCORES}[{i}]"), "a number", value)
            })
        })
        .collect::<Result<Vec<f32>, _>>()?;
    if scores.len() != vocab.tokens.len() {
        return Err(GgufError::InvalidMetadata {
            key: SCORES.into(),
            message: format!("{} scores for {} tokens", scores.len(), vocab.tokens.len()),
        });
    }
    let spec = SentencePieceBpeSpec {
        vocab: vocab.tokens.clone(),
        scores,
        added_tokens: vocab.added_tokens.clone(),
        unk_token: vocab
            .named(header, "tokenizer.ggml.unknown_token_id")?
            .map(|(_, text)| text),
        add_space_prefix: header
            .optional_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(true),
        affixes: vocab.affixes(header, true)?,
    };
    spec.validate()?;
    Ok(TokenizerSpec::SentencePieceBpe(spec))
}
