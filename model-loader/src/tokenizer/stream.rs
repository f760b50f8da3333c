//! Token-by-token detokenization that never splits a multi-byte UTF-8 character.

use super::{Tokenizer, TokenizerError};

/// Character the decoder substitutes for incomplete or invalid UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// Turns a stream of token ids into text deltas.
///
/// Byte-level tokens can end in the middle of a UTF-8 character; decoding them alone yields
/// U+FFFD. The decoder keeps the ids since the last emitted boundary and emits text only once
/// the decoded window no longer ends in U+FFFD. Decoding starts one emitted chunk earlier (the
/// prefix offset), so decoders that treat the first token specially (leading spaces) see
/// context. Only that window is kept, so memory stays constant over long generations.
///
/// The decoder owns no tokenizer: pass the same [`Tokenizer`] to every call.
#[derive(Debug, Clone)]
pub struct StreamDecoder {
    skip_special_tokens: bool,
    window: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
}

impl StreamDecoder {
    /// A decoder with no context; `skip_special_tokens` drops special tokens from the text.
    pub fn new(skip_special_tokens: bool) -> Self {
        Self::with_context(&[], skip_special_tokens)
    }

    /// A decoder whose first tokens are decoded after `context` (e.g. the last prompt tokens),
    /// whose own text is never emitted.
    pub fn with_context(context: &[u32], skip_special_tokens: bool) -> Self {
        Self {
            skip_special_tokens,
            window: context.to_vec(),
            prefix_offset: 0,
            read_offset: context.len(),
        }
    }

    /// Adds one token; returns the text it completes, or `None` while a character is
    /// incomplete (or the token adds no text, like a skipped special token).
    pub fn push(
        &mut self,
        tokenizer: &Tokenizer,
        id: u32,
    ) -> Result<Option<String>, TokenizerError> {
        self.window.push(id);
        let window = self.decode(tokenizer, self.prefix_offset, self.window.len())?;
        if window.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        self.advance(tokenizer, &window)
    }

    /// Emits whatever text is still held back (incomplete characters as U+FFFD), e.g. at the
    /// end of generation.
    pub fn flush(&mut self, tokenizer: &Tokenizer) -> Result<Option<String>, TokenizerError> {
        if self.read_offset == self.window.len() {
            return Ok(None);
        }
        let window = self.decode(tokenizer, self.prefix_offset, self.window.len())?;
        self.advance(tokenizer, &window)
    }

    /// Emits the part of `window` after the already emitted text and moves the offsets
    /// forward, dropping ids no longer needed as context.
    fn advance(
        &mut self,
        tokenizer: &Tokenizer,
        window: &str,
    ) -> Result<Option<String>, TokenizerError> {
        let emitted = self.decode(tokenizer, self.prefix_offset, self.read_offset)?;
        let Some(delta) = window.strip_prefix(emitted.as_str()) else {
            return Ok(None);
        };
        if delta.is_empty() {
            return Ok(None);
        }
        let delta = delta.to_string();
        self.window.drain(..self.prefix_offset);
        self.prefix_offset = self.read_offset - self.prefix_offset;
        self.read_offset = self.window.len();
        Ok(Some(delta))
    }

    /// Decodes `window[start..end]`.
    fn decode(
        &self,
        tokenizer: &Tokenizer,
        start: usize,
        end: usize,
    ) -> Result<String, TokenizerError> {
        tokenizer.decode(&self.window[start..end], self.skip_special_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::tokenizer::write_tiny_tokenizer;

    #[test]
    fn window_stays_small_over_long_streams() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny_tokenizer(dir.path()).unwrap();
        let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
        let text = "the cat sat on the mat. ".repeat(200);
        let mut stream = StreamDecoder::new(false);
        let mut out = String::new();
        for id in tokenizer.encode(&text, false).unwrap() {
            out.extend(stream.push(&tokenizer, id).unwrap());
            assert!(
                stream.window.len() <= 4,
                "window of {}",
                stream.window.len()
            );
        }
        assert_eq!(out, text);
    }
}
