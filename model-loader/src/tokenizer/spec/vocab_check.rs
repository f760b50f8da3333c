//! Checks shared by every tokenizer description: distinct token texts and added tokens that
//! agree with the vocabulary.

use super::{AddedToken, Affixes};
use crate::tokenizer::TokenizerError;
use std::collections::HashMap;

/// Maps token text to id, rejecting duplicates and vocabularies too large for `u32` ids.
pub(crate) fn token_ids(vocab: &[String]) -> Result<HashMap<&str, u32>, TokenizerError> {
    let mut ids = HashMap::with_capacity(vocab.len());
    for (id, text) in vocab.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| {
            TokenizerError::InvalidSpec(format!("vocabulary of {} tokens", vocab.len()))
        })?;
        if let Some(first) = ids.insert(text.as_str(), id) {
            return Err(TokenizerError::InvalidSpec(format!(
                "token {text:?} appears twice in the vocabulary (ids {first} and {id})"
            )));
        }
    }
    Ok(ids)
}

/// Checks that every added token's id holds its text in `vocab`.
fn check_added_tokens(vocab: &[String], added_tokens: &[AddedToken]) -> Result<(), TokenizerError> {
    for token in added_tokens {
        match vocab.get(token.id as usize) {
            Some(text) if *text == token.content => {}
            Some(text) => {
                return Err(TokenizerError::InvalidSpec(format!(
                    "added token {:?} has id {}, which the vocabulary spells {text:?}",
                    token.content, token.id
                )))
            }
            None => {
                return Err(TokenizerError::InvalidSpec(format!(
                    "added token {:?} has id {}, outside the vocabulary of {}",
                    token.content,
                    token.id,
                    vocab.len()
                )))
            }
        }
    }
    Ok(())
}

/// Checks a description's special tokens against `vocab`: every added token, then BOS and
/// EOS, each at the id that spells it.
pub(crate) fn check_special_tokens(
    vocab: &[String],
    added_tokens: &[AddedToken],
    affixes: &Affixes,
) -> Result<(), TokenizerError> {
    check_added_tokens(vocab, added_tokens)?;
    check_affix(vocab, affixes.bos.as_ref())?;
    check_affix(vocab, affixes.eos.as_ref())
}

/// Checks that a BOS or EOS token given as `(id, text)` has that text at that id in `vocab`.
fn check_affix(vocab: &[String], affix: Option<&(u32, String)>) -> Result<(), TokenizerError> {
    match affix {
        Some((id, text)) if vocab.get(*id as usize) != Some(text) => {
            Err(TokenizerError::InvalidSpec(format!(
                "special token {text:?} does not have id {id} in the vocabulary"
            )))
        }
        _ => Ok(()),
    }
}
