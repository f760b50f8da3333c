//! Byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`).

use super::pre_tokenizers::{family, KNOWN_EXAMPLES};
use super::{string_array, GgufVocab};
use crate::gguf::reader::GgufHeader;
use crate::gguf::value::MetadataExt;
use crate::gguf::GgufError;
use crate::tokenizer::spec::{ByteLevelBpeSpec, TokenizerSpec};

/// The byte-level BPE tokenizer of `header`: merges from `tokenizer.ggml.merges`, the
/// pre-tokenizer named by `tokenizer.ggml.pre` (llama.cpp's `default` when absent).
pub(super) fn rebuild(header: &GgufHeader, vocab: &GgufVocab) -> Result<TokenizerSpec, GgufError> {
    let pre = header
        .optional_str("tokenizer.ggml.pre")?
        .unwrap_or("default");
    let family = family(pre).ok_or_else(|| {
        GgufError::Unsupported(format!(
            "tokenizer.ggml.pre = {pre:?} (supported include {KNOWN_EXAMPLES})"
        ))
    })?;
    let merges = string_array(header, "tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, merge)| match merge.split_once(' ') {
            Some((left, right)) => Ok((left.to_string(), right.to_string())),
            None => Err(GgufError::InvalidMetadata {
                key: format!("tokenizer.ggml.merges[{i}]"),
                message: format!("{merge:?} is not two tokens separated by a space"),
            }),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let spec = ByteLevelBpeSpec {
        vocab: vocab.tokens.clone(),
        merges,
        added_tokens: vocab.added_tokens.clone(),
        pre_tokenizer: family.pre_tokenizer,
        ignore_merges: family.ignore_merges,
        affixes: vocab.affixes(header, family.add_bos_by_default)?,
    };
    spec.validate()?;
    Ok(TokenizerSpec::ByteLevelBpe(spec))
}
